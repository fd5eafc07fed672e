"""Recall's cost by store size: does a user's recall cost the same whatever the store holds?

One store per size (100k, 1M and 3M memories by default), each in the layout consolidation's
maintenance leaves (rows in user order, compacted, every index covering every row). The same probe
users are in every store, row for row: `--small-probes` users of `--small-size` memories (100: the
in-process scan) and `--large-probes` users of `--large-size` memories (10,000: above
`recall_scan_limit`, so LanceDB's flat vector search and full-text index answer them); users of 100
memories fill each store up to its size. Rows are synthetic and written as Arrow columns: template
texts with their real keyword terms, random unit vectors (the query is embedded for real).

In process, one query at a time, the stores are measured in turn (100k, 1M, 3M, 100k, ...) for
`--rounds` rounds, so the machine's drift shows as spread between rounds rather than as a slope.
Each query is timed three ways, as in recall_latency.py: query embedding alone, the store search
alone (both retrievers, prefiltered to the user), and the whole recall on another text (its
wall time, and the CPU time of the process, which load moves less). Reported:
p50/p99 per round and the median of rounds, build seconds and GB per million memories, and the
slope: p50 at the largest size over p50 at the smallest, per decade of size. With `--http`, the same
searches through the Serve app (one client) at the smallest and the largest size, in turn. With
`--fresh`, each store is opened anew before each round, its caches cold as in a newly started replica.

    .venv/bin/python benchmarks/cost_curve.py [--sizes 100000,1000000,3000000 --rounds 3 --queries 300]
    .venv/bin/python benchmarks/cost_curve.py --keep /tmp/costcurve   # build once, measure again later
    .venv/bin/python benchmarks/cost_curve.py --sizes 100000,1000000,3000000,10000000 --keep /tmp/costcurve --http
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.embedding import SentenceTransformerEmbedder  # noqa: E402
from agent_memory.ids import stable_id  # noqa: E402
from agent_memory.models import Scope  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store import RecallFilter  # noqa: E402
from agent_memory.text import keyword_text  # noqa: E402
from benchmarks.common import summarize, write_result  # noqa: E402
from benchmarks.recall_latency import QUERIES, SUBJECTS, TEMPLATES  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import maintenance_of  # noqa: E402

ORG = "default"
CHUNK = 100_000  # rows per append (whole users each)
NOW_US = int(datetime(2026, 6, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)
YEAR_US = 365 * 24 * 3600 * 1_000_000
POOL = [t.format(s=s) for t in TEMPLATES for s in SUBJECTS]
HTTP_PORT = 18779
BUILT = "cost_curve_build.json"  # what a kept store was built with, and how long it took


def probe_users(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(user, memories, seed) of the probe users: the same in every store."""
    small = [(f"probe-small-{k:03d}", args.small_size, 1_000 + k) for k in range(args.small_probes)]
    large = [(f"probe-large-{k:03d}", args.large_size, 2_000 + k) for k in range(args.large_probes)]
    return small + large


def user_rows(users: list[tuple[str, int, int]], schema: pa.Schema, keywords: pa.Array) -> pa.Table:
    """The rows of these users, user by user, oldest first within a user (each user's from its seed)."""
    counts = [n for _, n, _ in users]
    total = sum(counts)
    dim = schema.field("vector").type.list_size
    vectors = np.empty((total, dim), dtype=np.float32)
    texts = np.empty(total, dtype=np.int32)
    created = np.empty(total, dtype=np.int64)
    ids: list[str] = []
    at = 0
    for user, n, seed in users:
        rng = np.random.default_rng(seed)
        vectors[at:at + n] = rng.standard_normal((n, dim), dtype=np.float32)
        texts[at:at + n] = rng.integers(0, len(POOL), n)
        created[at:at + n] = np.sort(NOW_US - rng.integers(0, YEAR_US, n))
        ids.extend(stable_id("bench", user, str(i)) for i in range(n))
        at += n
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    times = pa.array(created, type=pa.int64()).cast(schema.field("created_at").type)
    pool = pa.array(POOL)

    def text(values: pa.Array) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(texts), values).cast(pa.string())

    def const(name: str, value: Any) -> pa.Array:
        return pa.array([value] * total, type=schema.field(name).type) if value is not None else \
            pa.nulls(total, type=schema.field(name).type)

    columns = {
        "id": pa.array(ids), "org_id": const("org_id", ORG), "team_id": const("team_id", None),
        "user_id": pa.array(np.repeat(np.array([u for u, _, _ in users], dtype=object), counts), type=pa.string()),
        "agent_id": const("agent_id", None), "session_id": const("session_id", None),
        "content": text(pool), "index_text": text(pool), "keywords": text(keywords),
        "memory_type": const("memory_type", "semantic"), "importance": const("importance", 0.5),
        "confidence": const("confidence", 1.0), "status": const("status", "active"),
        "superseded_by": const("superseded_by", None), "valid_from": times, "valid_to": const("valid_to", None),
        "created_at": times, "updated_at": times, "last_accessed_at": const("last_accessed_at", None),
        "access_count": const("access_count", 0), "expires_at": const("expires_at", None),
        "source_ids": const("source_ids", []), "metadata": const("metadata", "{}"),
        "metadata_kv": const("metadata_kv", []), "oov": const("oov", 0.0), "origin_hash": const("origin_hash", ""),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        "visibility": const("visibility", "shared"), "feedback_offset": const("feedback_offset", 0.0),
        "feedback_at": const("feedback_at", None),
    }
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


def build(path: Path, size: int, embedder: SentenceTransformerEmbedder, args: argparse.Namespace) -> dict[str, Any]:
    """A store of `size` memories at `path`: the probe users, then fillers of `--small-size`, in
    user order, appended in chunks of whole users; then the maintenance consolidation runs."""
    probes = probe_users(args)
    filler = size - sum(n for _, n, _ in probes)
    if filler < 0:
        raise SystemExit(f"size {size:,} is smaller than the probe users' {size - filler:,} memories")
    users = probes + [(f"user-{k:08d}", args.small_size, 10_000_000 + k) for k in range(filler // args.small_size)]
    if filler % args.small_size:
        users.append((f"user-{filler // args.small_size:08d}", filler % args.small_size, 9_999_999))
    users.sort()  # the order maintenance leaves (storage.maintenance.CLUSTER_ORDER), so nothing is rewritten
    store = LanceStore(str(path / "lancedb"), embedding_model=embedder.name, embedding_dim=embedder.dim)
    table = maintenance_of(store).table("memories")
    keywords = pa.array([keyword_text(t) for t in POOL])
    started = time.perf_counter()
    chunk: list[tuple[str, int, int]] = []
    written = 0
    for user in [*users, None]:
        if user is not None and (not chunk or sum(n for _, n, _ in chunk) + user[1] <= CHUNK):
            chunk.append(user)
            continue
        rows = user_rows(chunk, table.schema, keywords)
        table.add(rows)  # fresh rows: a plain append (insert-if-absent is not what is measured)
        written += rows.num_rows
        print(f"  {size:,}: wrote {written:,} rows ({time.perf_counter() - started:.0f} s)", flush=True)
        chunk = [user] if user is not None else []
    write_s = time.perf_counter() - started
    with warnings.catch_warnings():  # dropping every older version is what a fresh store wants
        warnings.simplefilter("ignore", UserWarning)
        report = maintenance_of(store).optimize(retain=timedelta(0), cluster=True)["memories"]
    maintenance_s = time.perf_counter() - started - write_s
    built = {"size": size, "rows": table.count_rows(), "write_s": round(write_s, 1),
             "maintenance_s": round(maintenance_s, 1), "build_s": round(write_s + maintenance_s, 1),
             "clustered": report.get("clustered"), "fragments": report["after"]["fragments"],
             "disk_bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
             "probes": [[u, n, s] for u, n, s in probes], "small_size": args.small_size}
    (path / BUILT).write_text(json.dumps(built, indent=2) + "\n")
    print(f"  {size:,}: built in {built['build_s']} s ({write_s:.0f} s writing, {maintenance_s:.0f} s maintenance), "
          f"{built['disk_bytes'] / 1e9:.2f} GB", flush=True)
    return built


def open_or_build(root: Path, size: int, embedder: SentenceTransformerEmbedder, args: argparse.Namespace) -> tuple[LanceStore, dict]:
    """The store of `size` under `root`, built unless a store built with the same probe users is there."""
    path = root / f"size-{size}"
    marker = path / BUILT
    if marker.exists():
        built = json.loads(marker.read_text())
        if built["probes"] == [list(p) for p in probe_users(args)] and built["small_size"] == args.small_size:
            print(f"  {size:,}: reusing the store at {path}", flush=True)
            return LanceStore(str(path / "lancedb"), embedding_model=embedder.name, embedding_dim=embedder.dim), built
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    built = build(path, size, embedder, args)
    return LanceStore(str(path / "lancedb"), embedding_model=embedder.name, embedding_dim=embedder.dim), built


def measure(service: MemoryService, store: LanceStore, embedder: SentenceTransformerEmbedder, settings: Settings,
            users: list[str], args: argparse.Namespace, salt: str) -> dict[str, dict[str, float]]:
    """Query embedding, store search and whole recall for `--queries` queries on these users, one at
    a time, each text distinct (nothing is cached)."""
    rng = random.Random(f"{args.seed}-{salt}")
    asks = [(rng.choice(users), f"{rng.choice(QUERIES)} #{k}{salt}") for k in range(args.queries)]
    embed_t, search_t, recall_t, cpu_t = [], [], [], []
    flt = RecallFilter(now=datetime.now(timezone.utc))
    for user, query in asks:
        t0 = time.perf_counter()
        vector = embedder.embed_batch([query])[0]
        t1 = time.perf_counter()
        store.search(Scope.user(ORG, user), vector, keyword_text(query), flt, dense_limit=settings.recall.dense_depth,
                     keyword_limit=settings.recall.candidates)
        t2, c2 = time.perf_counter(), time.process_time()
        service.recall(ORG, {"user_id": user, "query": query + " ?"})
        t3, c3 = time.perf_counter(), time.process_time()
        cpu_t.append(c3 - c2)
        embed_t.append(t1 - t0)
        search_t.append(t2 - t1)
        recall_t.append(t3 - t2)
    return {"whole_recall": summarize(recall_t), "store_search": summarize(search_t),
            "query_embedding": summarize(embed_t), "whole_recall_cpu": summarize(cpu_t)}


def warm_up(service: MemoryService, classes: dict[str, list[str]], rounds: int) -> None:
    """Every probe user recalled `rounds` times on texts not measured (a large user is found large
    by its first scan, which every later recall skips)."""
    for users in classes.values():
        for user in users:
            for k in range(rounds):
                service.recall(ORG, {"user_id": user, "query": f"{QUERIES[k % len(QUERIES)]} warm {k}"})


def searches(users: list[str], phase: str) -> Any:
    """`http_load`'s request maker: a search for one of `users`, its text distinct within `phase`."""
    def search(rng: random.Random, k: int, i: int) -> tuple[str, str, dict[str, str]]:
        return "POST", "/v1/memories/search", {"user_id": rng.choice(users), "query": f"{rng.choice(QUERIES)} {phase} {i}"}
    return search


def over_http(root: Path, sizes: list[int], classes: dict[str, list[str]], args: argparse.Namespace) -> dict:
    """Search through the Serve app at the smallest and the largest size, in turn for `--rounds`
    rounds, one client, `--http-requests` per user class; the app is started anew on each store
    (scheduled consolidation off: it would rewrite the stores measured)."""
    import ray
    from ray import serve

    from benchmarks.serve_latency import http_load
    from serve_app.app import build as build_app
    from serve_app.config import serve_env

    serve_env()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": HTTP_PORT})
    url = f"http://127.0.0.1:{HTTP_PORT}"
    runs: dict[int, list[dict[str, Any]]] = {size: [] for size in (sizes[0], sizes[-1])}
    try:
        for r in range(args.rounds):
            for size in runs:
                settings = Settings(storage_uri=str(root / f"size-{size}" / "lancedb"),  # type: ignore[call-arg]
                                    consolidation_schedule_enabled=False, _env_file=None)
                serve.run(build_app(settings), name="agent-memory", route_prefix="/")
                result = {}
                for label, users in classes.items():
                    # Warm-up (every user found small or large), then the measured searches, each text distinct.
                    http_load(url, 1, 3 * len(users), 1, searches(users, f"warm {r} {label}"))
                    result[label] = http_load(url, 1, args.http_requests, 1, searches(users, f"{r} {label}"))
                runs[size].append(result)
                print(f"http round {r}, {size:,}: " + "; ".join(
                    f"{label} p50 {x['p50_ms']} p99 {x['p99_ms']} errors {x['errors']}" for label, x in result.items()),
                    flush=True)
                serve.delete("agent-memory")
    finally:
        serve.shutdown()
        ray.shutdown()
    summary = {size: {label: {stat: statistics.median(x[label][stat] for x in rows) for stat in ("p50_ms", "p99_ms")}
                      for label in classes} for size, rows in runs.items()}
    return {"medians": summary, "rounds": runs}


def medians(rounds: list[dict[str, Any]], label: str, part: str) -> dict[str, float]:
    return {stat: round(statistics.median(r[label][part][stat] for r in rounds), 2) for stat in ("p50_ms", "p99_ms")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000,3000000", help="store sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=300, help="queries per user class per store per round")
    parser.add_argument("--small-probes", type=int, default=20)
    parser.add_argument("--small-size", type=int, default=100, help="memories of a small probe user and of a filler")
    parser.add_argument("--large-probes", type=int, default=5)
    parser.add_argument("--large-size", type=int, default=10_000)
    parser.add_argument("--warm-up", type=int, default=3, help="recalls per probe user per store before each round")
    parser.add_argument("--keep", help="build the stores under this directory and reuse them on later runs")
    parser.add_argument("--fresh", action="store_true",
                        help="open each store anew before each round (caches cold, as in a newly started replica)")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the stores and measure nothing")
    parser.add_argument("--http", action="store_true",
                        help="also search over HTTP (the Serve app) at the smallest and the largest size")
    parser.add_argument("--http-requests", type=int, default=200, help="HTTP searches per user class per round")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--name", default="cost_curve", help="results file name under benchmarks/results")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    served = Settings(_env_file=None).embedding  # type: ignore[call-arg]
    embedder = SentenceTransformerEmbedder(cache_size=0, precision=served.query_precision,
                                           threads=served.query_model_threads)
    scratch = None if args.keep else tempfile.TemporaryDirectory(prefix="bench-cost-")
    root = Path(args.keep or scratch.name)  # type: ignore[union-attr]
    try:
        stores, builds = {}, {}
        for size in sizes:
            stores[size], builds[size] = open_or_build(root, size, embedder, args)
        if args.build_only:
            return 0
        classes = {f"user_{args.small_size}": [u for u, n, _ in probe_users(args) if u.startswith("probe-small")],
                   f"user_{args.large_size}": [u for u, n, _ in probe_users(args) if u.startswith("probe-large")]}
        services = {}
        for size in sizes:
            settings = Settings(storage_uri=str(root / f"size-{size}" / "lancedb"), _env_file=None)  # type: ignore[call-arg]
            services[size] = (MemoryService(stores[size], embedder, settings, defer_access=True), settings)
        runs: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
        for r in range(args.rounds):
            for size in sizes:
                service, settings = services[size]
                if args.fresh:
                    service.close()
                    stores[size] = LanceStore(settings.storage.uri, embedding_model=embedder.name,
                                              embedding_dim=embedder.dim)
                    service = MemoryService(stores[size], embedder, settings, defer_access=True)
                    services[size] = (service, settings)
                warm_up(service, classes, args.warm_up)
                result = {label: measure(service, stores[size], embedder, settings, users, args, f"r{r}{label}")
                          for label, users in classes.items()}
                runs[size].append(result)
                print(f"round {r}, {size:,}: " + "; ".join(
                    f"{label} recall p50 {x['whole_recall']['p50_ms']} p99 {x['whole_recall']['p99_ms']}, "
                    f"search p50 {x['store_search']['p50_ms']} p99 {x['store_search']['p99_ms']}"
                    for label, x in result.items()), flush=True)
        for service, _ in services.values():
            service.close()
        http = over_http(root, sizes, classes, args) if args.http else None
    finally:
        if scratch is not None:
            scratch.cleanup()

    parts = ("whole_recall", "store_search", "whole_recall_cpu")
    table = {size: {label: {part: medians(runs[size], label, part) for part in parts}
                    for label in classes} for size in sizes}
    decades = math.log10(sizes[-1] / sizes[0]) if len(sizes) > 1 else 1.0
    slope = {label: {part: {
        "ratio": round(table[sizes[-1]][label][part]["p50_ms"] / table[sizes[0]][label][part]["p50_ms"], 2),
        "per_decade": round((table[sizes[-1]][label][part]["p50_ms"] / table[sizes[0]][label][part]["p50_ms"])
                            ** (1 / decades), 2)} for part in parts} for label in classes}
    per_million = {size: {"build_s": round(b["build_s"] * 1e6 / size, 1), "gb": round(b["disk_bytes"] / 1e9 * 1e6 / size, 2)}
                   for size, b in builds.items()}

    print(f"\nmedian of {args.rounds} rounds, {args.queries} queries per user class per round, ms")
    print(f"{'size':>10} {'user':>11} {'recall p50':>11} {'p99':>8} {'search p50':>11} {'p99':>8}")
    for size in sizes:
        for label in classes:
            w, s = table[size][label]["whole_recall"], table[size][label]["store_search"]
            print(f"{size:>10,} {label:>11} {w['p50_ms']:>11} {w['p99_ms']:>8} {s['p50_ms']:>11} {s['p99_ms']:>8}")
    for size, b in builds.items():
        print(f"{size:>10,}: built in {b['build_s']} s, {b['disk_bytes'] / 1e9:.2f} GB; per million: "
              f"{per_million[size]['build_s']} s, {per_million[size]['gb']} GB")
    for label, parts in slope.items():
        print(f"slope {label}: " + ", ".join(f"{part} {v['ratio']}x largest/smallest, {v['per_decade']}x per decade"
                                            for part, v in parts.items()))
    if http:
        for size, row in http["medians"].items():
            print(f"over HTTP, {size:,}: " + ", ".join(
                f"{label} p50 {x['p50_ms']} p99 {x['p99_ms']}" for label, x in row.items()))
    met = {label: slope[label]["whole_recall"]["ratio"] <= 1.3 for label in classes}
    print("target p50 at the largest size within 1.3x of the smallest: "
          + ", ".join(f"{label} {'met' if ok else 'NOT met'}" for label, ok in met.items()))
    path = write_result(args.name, {"params": {**vars(args), "sizes": sizes}, "builds": builds,
                                    "per_million": per_million, "medians": table, "slope": slope,
                                    "target_within_1.3x": met, "rounds": runs, **({"http": http} if http else {})})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
