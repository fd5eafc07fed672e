"""The data commands: add, search, forget, restore, export, stats and import.

Each runs through a server's HTTP API when --url (or AGENT_MEMORY_URL) names one, in a second or
so: the server holds the model and the store. Without one it opens the store in this process, as
the server would: `add`, `search` and `import` load the model there, the others do not. None of
them starts Ray, but `import` with `--engine ray` (or `--address`).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from cli.options import (
    ON_EITHER,
    ON_STORE,
    STORE,
    STORE_OR_SERVER,
    client,
    command,
    server_options,
    server_url,
    settings,
    store_options,
)
from cli.output import print_json

MEMORY_TYPES = ("episodic", "semantic", "procedural")
# An erasure is answered at once; its purge (the receipt) is waited for, as on the store.
ERASURE_WAIT_S = 600.0


def _for_user(f: Any) -> Any:
    return click.option("--user-id", required=True, metavar="USER", help="The user.")(f)


@command("add", short_help=f"Store one memory. {ON_EITHER}", epilog=STORE_OR_SERVER)
@_for_user
@click.option("--type", "memory_type", default="semantic", show_default=True, type=click.Choice(MEMORY_TYPES))
@click.option("--importance", type=float, default=None, help="0..1 (default: the store's, 0.5).")
@click.argument("content")
@server_options
@store_options()
@click.pass_context
def add(ctx: click.Context, user_id: str, memory_type: str, importance: float | None, content: str,
        org_id: str, storage_uri: str | None, **_: Any) -> int:
    """Store one memory of a user; print its id."""
    if url := server_url(ctx):
        print(client(ctx, url).add(user_id, content, memory_type=memory_type, importance=importance).id)
        return 0
    from storage.connect import open_service

    memory: dict[str, Any] = {"user_id": user_id, "content": content, "memory_type": memory_type}
    if importance is not None:
        memory["importance"] = importance
    with open_service(settings(storage_uri)) as service:
        memory_id = service.add(org_id, memory, actor="cli")
    print(memory_id)
    return 0


@command("search", short_help=f"Recall memories of a user. {ON_EITHER}", epilog=STORE_OR_SERVER)
@_for_user
@click.option("--top-k", type=int, default=10, show_default=True)
@click.option("--mode", default="hybrid", show_default=True, type=click.Choice(["hybrid", "dense", "keyword"]))
@click.option("--json", "as_json", is_flag=True, help="Print the answer of the HTTP search (POST /v1/memories/search).")
@click.argument("query")
@server_options
@store_options()
@click.pass_context
def search(ctx: click.Context, user_id: str, top_k: int, mode: str, as_json: bool, query: str, org_id: str,
           storage_uri: str | None, **_: Any) -> int:
    """Recall the memories of a user that answer QUERY, best first."""
    if url := server_url(ctx):
        answer = client(ctx, url).search(user_id, query, top_k=top_k, mode=mode)  # type: ignore[arg-type]
        hits, degraded, body = answer.memories, answer.degraded, answer.model_dump(mode="json")
    else:
        from storage.connect import open_service

        with open_service(settings(storage_uri)) as service:
            result = service.recall(org_id, {"user_id": user_id, "query": query, "top_k": top_k, "mode": mode})
        owner = {"user_id", "team_id", "agent_id", "session_id"}  # not in the HTTP answer
        hits, degraded = result.memories, result.degraded
        body = result.model_dump(mode="json", exclude={"memories": {"__all__": owner}})
    if as_json:
        print_json(body)
        return 0
    if not hits:
        print("no memories found")
    for rank, hit in enumerate(hits, start=1):
        s = hit.scores
        print(f"{rank:>2}. {hit.score:.3f} [{hit.memory_type}] {hit.content}")
        print(f"    semantic {s.semantic:.2f} keyword {s.keyword:.2f} recency {s.recency:.2f} "
              f"importance {s.importance:.2f}  {hit.created_at:%Y-%m-%d}  {hit.id}")
    if degraded:
        print("(degraded: the embedding model was unavailable; keyword recall only)")
    return 0


@command("forget", short_help=f"Delete one memory, or erase a user. {ON_EITHER}", epilog=STORE_OR_SERVER)
@_for_user
@click.option("--memory-id", default=None, metavar="ID", help="The memory to delete; without it, the whole user.")
@click.option("--yes", is_flag=True, help="Erase the whole user without asking.")
@server_options
@store_options()
@click.pass_context
def forget(ctx: click.Context, user_id: str, memory_id: str | None, yes: bool, org_id: str,
           storage_uri: str | None, **_: Any) -> int:
    """Delete one memory (--memory-id), or erase every memory, message and event of a user."""
    url = server_url(ctx)
    if memory_id is None and not yes:
        if not sys.stdin.isatty():
            print("erasing a whole user needs --yes when not run at a terminal", file=sys.stderr)
            return 2
        answer = input(f"Erase every memory, message and event of user {user_id!r}"
                       f"{'' if url else f' in org {org_id!r}'}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing erased")
            return 1
    if url:
        memories = client(ctx, url)
        if memory_id:
            memories.delete(user_id, memory_id)
            print(f"deleted memory {memory_id}")
            return 0
        erasure = memories.erase_user(user_id)
        receipt = memories.wait_for_job(erasure.job_id, timeout=ERASURE_WAIT_S).report
        print_json({"erased": erasure.erased, "receipt": receipt})
        return 0
    from agent_memory.models import Scope
    from storage.connect import open_service

    with open_service(settings(storage_uri), with_embedder=False, with_maintenance=True) as service:
        if memory_id:
            service.delete(Scope.user(org_id, user_id), memory_id, actor="cli")
            print(f"deleted memory {memory_id}")
            return 0
        receipt = service.erase_user(org_id, user_id, actor="cli")
    print_json({"erased": receipt["rows_deleted"], "receipt": receipt})
    return 0


@command("restore", short_help=f"Make a superseded memory active again. {ON_EITHER}", epilog=STORE_OR_SERVER)
@_for_user
@click.option("--memory-id", required=True, metavar="ID")
@server_options
@store_options()
@click.pass_context
def restore(ctx: click.Context, user_id: str, memory_id: str, org_id: str, storage_uri: str | None, **_: Any) -> int:
    """Make a superseded memory active again (undo a wrong merge or supersede); print it."""
    if url := server_url(ctx):
        print_json(client(ctx, url).restore(user_id, memory_id).model_dump(mode="json"))
        return 0
    from agent_memory.models import Scope
    from storage.connect import open_service

    with open_service(settings(storage_uri), with_embedder=False, with_maintenance=True) as service:
        record = service.restore(Scope.user(org_id, user_id), memory_id, actor="cli")
    print_json(record.public())
    return 0


@command("export", short_help=f"Everything of a user as JSON lines. {ON_EITHER}", epilog=STORE_OR_SERVER)
@_for_user
@click.option("--out", default=None, metavar="FILE", help="The file to write (default: standard output).")
@server_options
@store_options()
@click.pass_context
def export(ctx: click.Context, user_id: str, out: str | None, org_id: str, storage_uri: str | None, **_: Any) -> int:
    """Everything of a user as JSON lines: memories, messages, events (restore with `import --format memories`)."""
    from agent_memory.portability import dumps

    url = server_url(ctx)
    with contextlib.ExitStack() as stack:
        if url:
            lines = client(ctx, url).export_user(user_id)
        else:
            from agent_memory.models import Scope
            from storage.connect import open_service

            service = stack.enter_context(open_service(settings(storage_uri), with_embedder=False))
            lines = service.export_user(Scope.user(org_id, user_id))
        count = 0
        with open(out, "w", encoding="utf-8") if out else contextlib.nullcontext(sys.stdout) as file:
            for line in lines:
                file.write(dumps(line) + "\n")
                count += line["kind"] in ("memory", "message", "event")
    if out:
        print(f"exported {count} rows of user {user_id!r} to {out}", file=sys.stderr)
    return 0


@command("stats", short_help=f"What the store holds. {ON_STORE}", epilog=f"{STORE} The HTTP API has no such call.")
@store_options(org=False)
@click.option("--org-id", default=None, metavar="ORG", help="Only this org (default: every org).")
def stats(org_id: str | None, storage_uri: str | None, **_: Any) -> int:
    """What the store holds: memories, messages and events, by org and state."""
    from storage.connect import open_service
    from storage.schema import gloss_name

    config = settings(storage_uri)
    with open_service(config, with_embedder=False, with_maintenance=True) as service:
        # Beside how the store's Chinese memories were embedded, how these settings embed Chinese.
        print_json({**service.stats(org_id), "chinese_gloss_configured": gloss_name(config.embedding.glosses_chinese())})
    return 0


FORMATS = ("auto", "jsonl", "csv", "parquet", "chatgpt", "claude", "memories")
# What only an import on the store does: a server runs its own import job, and reports on it.
STORE_ONLY_IMPORT = ("dry_run", "report", "rejects", "engine", "force_org")
IMPORT_HELP = """Import a history file (JSONL, CSV or Parquet) or a ChatGPT or Claude export.

\b
On the store in this process: raw mode (the default) stores every turn, the assistant's too, as a
memory; rules and llm extract memories from the turns. It prints the import's report.
Through a server (--url, AGENT_MEMORY_URL): PATH is as the server sees it, an object-store URI or
a file under its import root (AGENT_MEMORY_IMPORT_ROOT); it prints the job's id (`jobs show ID`).
"""


@command("import", short_help=f"Import a history file or a chat export. {ON_EITHER}", help=IMPORT_HELP)
@click.argument("path")
@click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(FORMATS),
              help="auto: by the file name; a .json array of ChatGPT or Claude conversations is that export; "
                   "memories: a user's export (`agent-memory export`) restored into an empty user.")
@click.option("--user-id", default=None, metavar="USER",
              help="The user of every turn of a ChatGPT or Claude export (required for those, which name none).")
@click.option("--force-org", is_flag=True, help="Put every row in --org-id, whatever org_id the file gives it.")
@click.option("--mode", default="raw", show_default=True, type=click.Choice(["raw", "rules", "llm"]))
@click.option("--dry-run", is_flag=True, help="Run the first 100 rows through every stage; write nothing.")
@click.option("--report", default=None, metavar="PATH",
              help="The report file (default: ./import-reports/<file>-<time>.report.json).")
@click.option("--rejects", default=None, metavar="PATH", help="The rejects file (default: beside the report).")
@click.option("--engine", default="auto", show_default=True, type=click.Choice(["auto", "ray", "local"]),
              help="ray: a Ray Data pipeline; local: in this process; auto: local for small local files.")
@server_options
@store_options(ray=True, org=False)
@click.option("--org-id", default="default", metavar="ORG",
              help="The org of rows that name none (default: default); rows with an org_id keep theirs unless "
                   "--force-org.")
@click.pass_context
def import_file(ctx: click.Context, path: str, fmt: str, user_id: str | None, force_org: bool, mode: str,
                dry_run: bool, report: str | None, rejects: str | None, engine: str, org_id: str,
                storage_uri: str | None, address: str | None, **_: Any) -> int:
    if url := server_url(ctx, store_only=STORE_ONLY_IMPORT):
        if fmt == "memories":
            raise click.UsageError("--format memories restores an export on the store in this process; the "
                                   "HTTP API imports history files and chat exports")
        job = client(ctx, url).submit_import(path, format=fmt, mode=mode, user_id=user_id)  # type: ignore[arg-type]
        print_json({"job_id": job.job_id})
        print(f"follow it with: agent-memory jobs show {job.job_id} --url {url}", file=sys.stderr)
        return 0
    from agent_memory.errors import InvalidInputError

    config = settings(storage_uri)
    if fmt == "memories":
        if dry_run or user_id or force_org:
            raise InvalidInputError("--format memories restores the user the export names, into --org-id: "
                                    "--dry-run, --user-id and --force-org do not apply")
        from storage.connect import open_service

        with open(path, encoding="utf-8") as lines, open_service(config) as service:
            print_json(service.restore_user(org_id, lines))
        return 0
    from jobs.importer import ImportOptions, run_import
    from jobs.importer import dry_run as try_rows

    options = ImportOptions(
        path=path, fmt=fmt, mode=mode, org_id=org_id, engine=engine, report_path=report, rejects_path=rejects,
        show_progress=sys.stderr.isatty(), force_org=force_org, user_id=user_id,
    )
    if dry_run:
        print_json(try_rows(config, options))
        return 0
    if address:
        from jobs.runtime import ensure_ray

        ensure_ray(address)
        options.engine = "ray"
    else:  # before any row is read: a device this machine lacks is said at once
        from agent_memory.embedding import check_device

        check_device(config)
    print_json(run_import(config, options).as_dict())
    return 0
