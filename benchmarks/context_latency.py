"""In-process cost of a context block (`MemoryService.context`) beside recall alone, same run.

A store of `--memories` memories over `--users` users, each user with a session of `--turns`
turns in the log (English and Chinese), compacted and indexed as the Writer keeps a serving store. For each query, timed one after another on the same
user: recall alone (`recall`, top_k 8), and the whole block (`context`: the same recall, the
session's turns read, the window, the extractive summary, the counts), at 1,024 and 4,096
tokens. Reports medians and p99 and the block's cost over recall's (the ratio), which is what
holds across machines.

    .venv/bin/python benchmarks/context_latency.py [--memories 20000 --users 200 --turns 200 --queries 200]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory.models import MessageRecord  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import summarize, write_result  # noqa: E402
from benchmarks.recall_latency import QUERIES, SUBJECTS, TEMPLATES  # noqa: E402

ORG = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--name", default="context_latency")
    args = parser.parse_args()

    from agent_memory import open_service

    rng = random.Random(7)
    root = tempfile.mkdtemp(prefix="context-bench-")
    service = open_service(Settings(storage_uri=f"{root}/lancedb", _env_file=None))  # type: ignore[call-arg]
    users = [f"u{i:04d}" for i in range(args.users)]
    started = time.perf_counter()
    batch = []
    for i in range(args.memories):
        text = rng.choice(TEMPLATES).format(s=rng.choice(SUBJECTS))
        batch.append({"user_id": users[i % len(users)], "content": f"{text} ({i})"})
        if len(batch) == 1_000:
            service.add_many(ORG, batch)
            batch = []
    if batch:
        service.add_many(ORG, batch)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    for user in users:
        service.log_messages(ORG, [
            MessageRecord(id=f"{user}-{t}", org_id=ORG, user_id=user, session_id="s", message_id=f"m{t:05d}",
                          role="user" if t % 2 == 0 else "assistant",
                          content=rng.choice(TEMPLATES).format(s=rng.choice(SUBJECTS)) + f" ({t})",
                          created_at=start + timedelta(minutes=t))
            for t in range(args.turns)
        ])
    # As a serving store is kept: the Writer folds new rows into few fragments and indexes them.
    service.maintenance.optimize()
    setup_s = time.perf_counter() - started

    timings: dict[str, list[float]] = {"recall": [], "context_1024": [], "context_4096": []}
    for q in range(args.queries + 5):  # the first five warm the caches and the tokenizer
        asked = {"user_id": rng.choice(users), "query": rng.choice(QUERIES)}
        runs = [
            ("recall", service.recall, {**asked, "top_k": 8}),
            ("context_1024", service.context, {**asked, "session_id": "s", "max_tokens": 1024}),
            ("context_4096", service.context, {**asked, "session_id": "s", "max_tokens": 4096}),
        ]
        for name, run, body in runs:
            began = time.perf_counter()
            run(ORG, body)
            if q >= 5:
                timings[name].append(time.perf_counter() - began)
    results = {name: summarize(samples) for name, samples in timings.items()}
    for name in ("context_1024", "context_4096"):
        results[name]["p50_over_recall"] = round(results[name]["p50_ms"] / results["recall"]["p50_ms"], 2)
    service.close()
    path = write_result(args.name, {
        "memories": args.memories, "users": args.users, "turns_per_session": args.turns, "queries": args.queries,
        "summary": "extractive", "setup_s": round(setup_s, 1), "results": results,
    })
    for name, row in results.items():
        print(f"{name:14s} {row}")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
