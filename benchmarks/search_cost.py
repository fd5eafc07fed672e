"""Where a search's CPU goes at 8 clients, through the whole HTTP path of the Serve app.

The store and app of `serve_latency.py` (synthetic unit vectors, real texts, rows in user order;
queries embedded for real). While 8 clients search, it reads every process's CPU from /proc
(per request: the proxy, the ingress, the other Serve and Ray processes, the benchmark's client)
and samples the ingress replica's Python threads with py-spy, then splits the ingress's CPU by the
share of samples in each part of a search:

- ingress: HTTP, validation, auth and JSON parsing (uvicorn, Starlette, FastAPI, pydantic, serve_app);
- query embedding (agent_memory.embedding: tokenizer and model, the query batcher);
- scan (the store's search of the user's rows: storage/, LanceDB, Arrow);
- fusion and scoring (agent_memory.recall and scoring: the pool ranked, hits built);
- access bookkeeping (agent_memory.access);
- serialisation (the answer's `model_dump` and JSON rendering);
- Serve's replica, asyncio and thread hand-offs (ray.serve, asyncio, concurrent.futures);
- other.

A sample is put in the part of the innermost frame that names one. py-spy sees Python threads
only: the query model's CPU is all seen where it runs on the calling thread (one intra-op thread,
as the int8 query model does), part of it otherwise. The ratios matter, not the milliseconds.

    .venv/bin/python benchmarks/search_cost.py [--memories 200000 --users 2000 --requests 800 --name search_cost]
    .venv/bin/python benchmarks/search_cost.py --in-process ...   # without Serve: the search's own parts
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from benchmarks.recall_latency import QUERIES  # noqa: E402
from benchmarks.serve_latency import WARM_UP, http_load, populate  # noqa: E402
from storage import LanceStore  # noqa: E402

# (part, pattern on one frame "function (file:line)"), first match wins for a frame.
# py-spy names a frame "function (path:line)", the path relative to its sys.path entry.
PARTS = [
    ("query embedding", re.compile(r"[(/]agent_memory/embedding/|onnxruntime|tokenizers|[(/]transformers/")),
    ("access bookkeeping", re.compile(r"[(/]agent_memory/access\.py")),
    ("scan", re.compile(r"[(/]storage/|[(/]lancedb/|[(/]lance/|pyarrow")),
    ("fusion and scoring", re.compile(r"[(/]agent_memory/(recall|scoring)\.py")),
    ("serialisation", re.compile(r"model_dump|starlette/responses\.py|fastapi/encoders|JSONResponse")),
    ("ingress: HTTP, validation, auth, JSON", re.compile(r"[(/]serve_app/|fastapi/|starlette/|pydantic|uvicorn|h11|"
                                                         r"[(/]agent_memory/|[(/]json/")),
    ("Serve replica, asyncio, threads", re.compile(r"[(/]ray/|asyncio|concurrent/futures|threading\.py|selectors")),
]


def part_of(stack: str) -> str:
    """The part of a search a sampled stack (frames root first, `;`-separated) belongs to."""
    for frame in reversed(stack.split(";")):
        for name, pattern in PARTS:
            if pattern.search(frame):
                return name
    return "other"


# A stack whose innermost frame waits (a lock, a condition, a future, a selector) is a thread that
# py-spy caught blocked, not one spending CPU: left out.
WAITING = re.compile(r"^(wait|_wait_for_tstate_lock|acquire|select|result|get|sleep) \(")


def shares(raw: Path) -> dict[str, float]:
    """Samples per part over the samples of running threads, from py-spy's raw output ("stack count" lines)."""
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.split(";")[-1].split(" (")[0].split(".")[-1] + " ("  # the innermost function's own name
        if stack and count.isdigit() and not WAITING.match(leaf):
            part = part_of(stack)
            counts[part] = counts.get(part, 0) + int(count)
            STACKS.setdefault(part, {}).setdefault(stack.split(";")[-1], 0)
            STACKS[part][stack.split(";")[-1]] += int(count)
    total = sum(counts.values()) or 1
    return {part: counts[part] / total for part in sorted(counts, key=lambda p: -counts[p])} | {"_samples": total}


STACKS: dict[str, dict[str, int]] = {}  # part -> innermost frame -> samples, for the results file


def ingress_pid() -> int:
    import psutil

    for proc in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if proc.cmdline() and proc.cmdline()[0].startswith("ray::ServeReplica:agent-memory:Ingress"):
                return proc.pid
        except psutil.Error:
            continue
    raise SystemExit("no ingress replica found")


def in_process(args: argparse.Namespace, spy: Path) -> dict:
    """Without Serve: 8 threads each taking a JSON body through validation, recall (the query
    batcher, as the ingress embeds) and the answer's JSON, this process sampled by py-spy. No
    proxy, HTTP or replica wrapper: where Serve cannot start, the parts of the search itself."""
    import json
    import threading
    import time

    from starlette.responses import JSONResponse

    from agent_memory.embedding import BatchingEmbedder, build_embedder
    from agent_memory.models import SearchQuery
    from agent_memory.service import MemoryService

    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        settings = Settings(storage_uri=f"{tmp}/lancedb", _env_file=None)  # type: ignore[call-arg]
        model = build_embedder(settings, threads=settings.embedding.query_model_threads,
                               precision=settings.embedding.query_precision)
        store = LanceStore(settings.storage.uri, embedding_model=model.name, embedding_dim=model.dim)
        populate(store, args.memories, args.users, model.dim, args.seed)
        batcher = BatchingEmbedder(model)
        service = MemoryService(store, batcher, settings, defer_access=True)

        def one(rng: random.Random, tag: str) -> None:
            body = json.dumps({"user_id": f"user-{rng.randrange(args.users):05d}", "query": f"{rng.choice(QUERIES)} {tag}"})
            query = SearchQuery.model_validate_json(body)
            result = service.recall("default", query)
            JSONResponse(result.model_dump(mode="json")).render(result.model_dump(mode="json"))

        warm = random.Random(1)
        for i in range(40):
            one(warm, f"warm {i}")
        raw = Path(tmp) / "process.txt"
        profiler = subprocess.Popen([str(spy), "record", "--pid", str(os.getpid()), "--rate", str(args.rate),
                                     "--format", "raw", "--output", str(raw), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)  # py-spy attaches
        cpu, wall = time.process_time(), time.perf_counter()
        threads = [threading.Thread(target=lambda k=k: [one(random.Random(100 + k), f"{k}-{i}")
                                                        for i in range(args.requests // 8)]) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=120)
        service.close()
        batcher.close()
        split = shares(raw)
    samples = split.pop("_samples")
    per = 1000 * cpu / args.requests
    return {"query_precision": settings.embedding.query_precision, "searches_per_s": round(args.requests / wall, 1),
            "cpu_ms_per_search": round(per, 2), "samples": samples,
            "by_part_ms": {part: round(per * share, 2) for part, share in split.items()},
            "shares": {part: round(share, 3) for part, share in split.items()},
            "innermost_frames": {part: dict(sorted(frames.items(), key=lambda kv: -kv[1])[:8])
                                 for part, frames in STACKS.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--requests", type=int, default=800, help="searches at 8 clients, profiled")
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples a second")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--name", default="search_cost")
    parser.add_argument("--in-process", action="store_true", help="no Serve: the search's own parts only")
    args = parser.parse_args()
    spy = Path(sys.executable).with_name("py-spy")
    if args.in_process:
        found = in_process(args, spy)
        print(f"{'part':<42} {'CPU ms':>8} {'share':>7}")
        for part, ms in found["by_part_ms"].items():
            print(f"{part:<42} {ms:>8.2f} {found['shares'][part]:>7.1%}")
        print(f"{found['searches_per_s']} searches/s, {found['cpu_ms_per_search']} ms CPU each, {found['samples']} samples")
        print(f"wrote {write_result(args.name, {'params': vars(args), 'results': found})}")
        return 0

    import ray
    from ray import serve

    from serve_app.app import build
    from serve_app.config import serve_env

    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        settings = Settings(storage_uri=f"{tmp}/lancedb", _env_file=None)  # type: ignore[call-arg]
        results["query_precision"] = settings.embedding.query_precision
        results["query_threads"] = settings.embedding.query_model_threads
        store = LanceStore(settings.storage.uri, embedding_model="all-MiniLM-L6-v2", embedding_dim=384)
        print(f"populating {args.memories:,} memories over {args.users:,} users ...", flush=True)
        results["setup_s"] = round(populate(store, args.memories, args.users, 384, args.seed), 1)
        serve_env()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": 18778})
        serve.run(build(settings), name="agent-memory", route_prefix="/")
        url = "http://127.0.0.1:18778"

        def search(r: random.Random, k: int, i: int):
            return "POST", "/v1/memories/search", {
                "user_id": f"user-{r.randrange(args.users):05d}", "query": f"{r.choice(QUERIES)} {k}-{i}"}

        http_load(url, 4, WARM_UP, args.users, search)
        raw = Path(tmp) / "ingress.txt"
        profiler = subprocess.Popen([str(spy), "record", "--pid", str(ingress_pid()), "--rate", str(args.rate),
                                     "--format", "raw", "--output", str(raw), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        load = http_load(url, 8, args.requests // 8, args.users, search)
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=120)
        serve.shutdown()
        ray.shutdown()
        split = shares(raw)
    cpu = load["cpu_ms_per_request"]
    ingress = sum(ms for name, ms in cpu.items() if "Ingress" in name)
    proxy = sum(ms for name, ms in cpu.items() if "haproxy" in name.lower() or "ProxyActor" in name)
    client = cpu.get("driver", 0.0)
    rest = cpu["total"] - ingress - proxy - client
    samples = split.pop("_samples")
    table = {"proxy": round(proxy, 2),
             **{f"ingress / {part}": round(ingress * share, 2) for part, share in split.items()},
             "other Serve and Ray processes": round(rest, 2), "benchmark client": round(client, 2),
             "total": cpu["total"]}
    results.update({"search_8": {k: load[k] for k in ("p50_ms", "p99_ms", "rps", "errors")},
                    "cpu_ms_per_request_by_process": cpu, "ingress_samples": samples,
                    "ingress_shares": {k: round(v, 3) for k, v in split.items()}, "cpu_ms_per_search": table})
    print(f"\n8 clients: {results['search_8']}, ingress samples {samples}")
    print(f"{'where':<52} {'CPU ms per search':>18} {'share':>7}")
    for where, ms in table.items():
        print(f"{where:<52} {ms:>18.2f} {ms / cpu['total']:>7.1%}")
    print(f"wrote {write_result(args.name, {'params': vars(args), 'results': results})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
