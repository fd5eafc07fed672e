"""Scaling out, side by side in one run: write throughput with one and with two Writer shards, and
import throughput on a one-node and a two-node Ray cluster.

Writes: the Serve app on local Ray (2 CPUs), a fresh store for each app; `--clients` HTTP clients
each send single-memory writes for random users of `--users`; the apps alternate (1, 2, 1, 2, ...)
for `--rounds`, so drift shows as spread rather than as a difference. CPU seconds per write are
reported by process role (each shard is its own `ServeReplica:agent-memory:Writer-N`).

Imports: `agent-memory import --engine ray --address` of one generated history file into a fresh
store, on a cluster of one node and on one of two nodes (cli.local_cluster), alternating likewise;
both clusters declare the same CPUs in all, so the figure compares the placement, not more cores.

    .venv/bin/python benchmarks/scaling.py [--rounds 3 --clients 16 --writes 60 --turns 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from benchmarks.serve_latency import http_load  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PORT = 18778


def write_round(shards: int, args: argparse.Namespace, phase: str) -> dict[str, Any]:
    """One app with `shards` Writer shards on a fresh store: writes/s, latency, CPU by role."""
    from ray import serve

    from serve_app.app import build

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(storage_uri=str(Path(tmp) / "lancedb"), writer_shards=shards,  # type: ignore[call-arg]
                            _env_file=None)
        serve.run(build(settings), name="agent-memory", route_prefix="/")
        url = f"http://127.0.0.1:{PORT}"

        def write(r: random.Random, k: int, i: int) -> tuple[str, str, dict[str, str]]:
            user = f"user-{r.randrange(args.users):04d}"
            return "POST", "/v1/memories", {"user_id": user, "content": f"{phase} note {k}-{i} of {user}"}

        http_load(url, 4, 5, args.users, write)  # the write path's first use starts its helpers
        result = http_load(url, args.clients, args.writes, args.users, write)
        serve.delete("agent-memory")
    return result


def measure_writes(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ray import serve

    from serve_app.config import serve_env

    serve_env()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": PORT})
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    try:
        for r in range(args.rounds):
            for shards in (1, 2):
                result = write_round(shards, args, f"round {r}")
                runs[shards].append(result)
                print(f"writes, {shards} shard(s), round {r}: {result}", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    summary = {f"{shards}_shards": {
        "writes_per_s_median": statistics.median(x["rps"] for x in rows),
        "p50_ms_median": statistics.median(x["p50_ms"] for x in rows),
        "errors": sum(x["errors"] for x in rows),
        "runs": rows,
    } for shards, rows in runs.items()}
    summary["ratio_2_over_1"] = round(
        summary["2_shards"]["writes_per_s_median"] / summary["1_shards"]["writes_per_s_median"], 2)
    return summary


def history_file(path: Path, turns: int, users: int) -> Path:
    """A generated chat history in the import format: `turns` lines over `users` users."""
    rng = random.Random(7)
    topics = ["hiking in the Alps", "a Rust side project", "sourdough baking", "learning Japanese",
              "a trip to Lisbon", "marathon training", "jazz piano", "a new espresso machine"]
    with path.open("w") as out:
        for i in range(turns):
            user = f"user-{i % users:03d}"
            topic = rng.choice(topics)
            role = "user" if i % 2 == 0 else "assistant"
            text = (f"I have been spending my weekends on {topic} lately, turn {i}." if role == "user"
                    else f"That sounds rewarding. How is {topic} going so far? ({i})")
            out.write(json.dumps({"org_id": "bench", "user_id": user, "session_id": f"s-{user}-{i // 40}",
                                  "role": role, "content": text,
                                  "timestamp": f"2026-05-{1 + i % 28:02d}T10:{i % 60:02d}:00Z"}) + "\n")
    return path


def import_round(nodes: int, history: Path, cpus: int) -> dict[str, Any]:
    """One `import --engine ray` onto a fresh store on a cluster of `nodes` nodes."""
    from cli.local_cluster import LocalCluster

    per_node = max(1, cpus // nodes)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "lancedb"
        cluster = LocalCluster(workers=nodes - 1, cpus_per_node=per_node, env={"AGENT_MEMORY_STORAGE_URI": str(store)})
        cluster.start()
        try:
            env = {**os.environ, **cluster.client_env(), "AGENT_MEMORY_STORAGE_URI": str(store)}
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "cli.main", "import", str(history), "--engine", "ray", "--mode", "raw",
                 "--address", cluster.address], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
            )
            seconds = time.perf_counter() - started
        finally:
            cluster.stop()
    if done.returncode != 0:
        raise RuntimeError(f"import failed on {nodes} node(s): {done.stderr[-2000:]}")
    report = json.loads(done.stdout[done.stdout.index("{"):])
    return {"seconds": round(seconds, 1), "rows_per_s": round(report.get("messages", 0) / seconds, 1),
            "report": {k: report.get(k) for k in ("messages", "memories", "memories_written", "rejected")}}


def measure_imports(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        history = history_file(Path(tmp) / "history.jsonl", args.turns, args.users // 4 or 1)
        runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for r in range(args.rounds):
            for nodes in (1, 2):
                result = import_round(nodes, history, args.cpus)
                runs[nodes].append(result)
                print(f"import, {nodes} node(s), round {r}: {result}", flush=True)
    summary = {f"{nodes}_nodes": {
        "rows_per_s_median": statistics.median(x["rows_per_s"] for x in rows),
        "seconds_median": statistics.median(x["seconds"] for x in rows),
        "runs": rows,
    } for nodes, rows in runs.items()}
    summary["ratio_2_over_1"] = round(
        summary["2_nodes"]["rows_per_s_median"] / summary["1_nodes"]["rows_per_s_median"], 2)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--writes", type=int, default=60, help="writes per client per round")
    parser.add_argument("--users", type=int, default=400)
    parser.add_argument("--turns", type=int, default=2000, help="lines of the imported history")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs the import clusters declare in all")
    parser.add_argument("--skip-imports", action="store_true")
    parser.add_argument("--skip-writes", action="store_true")
    parser.add_argument("--name", default="scaling")
    args = parser.parse_args()
    results: dict[str, Any] = {"params": vars(args)}
    if not args.skip_writes:
        results["writes"] = measure_writes(args)
    if not args.skip_imports:
        results["imports"] = measure_imports(args)
    path = write_result(args.name, results)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
