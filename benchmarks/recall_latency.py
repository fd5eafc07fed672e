"""In-process recall latency on 100k memories over 1,000 users, one query at a time.

Prints, side by side, the median and p99 of: store search alone (vector + keyword candidates,
prefiltered to the user, as recall asks for them), query embedding alone, and the whole recall (embedding included). Target: whole-recall
median under 20 ms on a 2-core machine.

Memories are built from real sentences embedded with the real model; to keep setup in minutes,
a pool of distinct sentences is embedded once and each memory takes one of them with a user-
specific suffix (vector search cost does not depend on which vectors are stored).

Two layouts are measured in the same run: as written (each commit interleaves users, the worst
case for a per-user read) and after the maintenance that consolidation runs (compaction with rows
put in user order, `LanceStore.optimize(cluster=True)`).

    .venv/bin/python benchmarks/recall_latency.py [--memories 100000 --users 1000 --queries 300]
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

from agent_memory.embedding import SentenceTransformerEmbedder  # noqa: E402
from agent_memory.ids import stable_id  # noqa: E402
from agent_memory.models import (  # noqa: E402
    MemoryRecord,
    OrgScope,  # noqa: E402
    Scope,
)
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store import RecallFilter  # noqa: E402
from agent_memory.text import keyword_text  # noqa: E402
from benchmarks.common import summarize, write_result  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import maintenance_of  # noqa: E402

SUBJECTS = ["Python", "Rust", "Go", "TypeScript", "Neovim", "VS Code", "green tea", "espresso", "sushi", "hiking",
            "the Berlin office", "Kubernetes", "PostgreSQL", "a golden retriever", "jazz", "chess", "cycling",
            "the billing service", "on-call rotations", "Friday deploys", "dark mode", "bullet points", "Lisbon",
            "a trip to Kyoto", "the login outage", "two-factor auth", "the Q3 roadmap", "morning meetings"]
TEMPLATES = ["I really like {s}", "Lately I have been spending time on {s}", "Please remember that I prefer {s}",
             "We had a long discussion about {s} yesterday", "My manager asked me about {s}",
             "I am not a fan of {s}", "Can you remind me about {s} next week?", "I switched to {s} last month",
             "我最近在研究{s}", "我不太喜欢{s}", "上周我们讨论了{s}", "请记住我更喜欢{s}"]
QUERIES = ["what does the user prefer?", "which editor do they use?", "anything about the outage?",
           "what did we discuss last week?", "用户喜欢什么？", "what drinks do they like?", "travel plans",
           "how should answers be formatted?", "which programming language?", "他们讨论了什么"]


def query_batches(size: int, count: int) -> list[list[str]]:
    """`count` batches of `size` distinct queries (the same for every model timed on them)."""
    return [[f"{random.Random(i).choice(QUERIES)} {i}-{j}" for j in range(size)] for i in range(count)]


def build(store: LanceStore, embedder: SentenceTransformerEmbedder, memories: int, users: int, seed: int) -> float:
    rng = random.Random(seed)
    pool = [t.format(s=s) for t in TEMPLATES for s in SUBJECTS]
    started = time.perf_counter()
    vectors = embedder.embed_batch(pool)
    oov = embedder.oov_shares(pool)
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    batch: list[MemoryRecord] = []
    for i in range(memories):
        user = f"user-{i % users:05d}"
        j = rng.randrange(len(pool))
        content = f"{pool[j]} (note {i})"
        created = now - timedelta(minutes=rng.randrange(0, 60 * 24 * 365))
        batch.append(MemoryRecord.model_construct(
            id=stable_id("bench", str(i)), org_id="bench", team_id=None, user_id=user, agent_id=None,
            # Ten turns a session, so that the steps that read sessions and neighbours have them.
            session_id=f"s{i // users // 10}", content=content, index_text=content, keywords=keyword_text(content),
            memory_type=rng.choice(["episodic", "semantic", "procedural"]), importance=rng.random(),
            confidence=1.0, status="active", superseded_by=None, valid_from=created, valid_to=None,
            created_at=created, updated_at=created, last_accessed_at=None, access_count=0, expires_at=None,
            source_ids=[f"{user}:m{i // users}"], metadata={}, oov=oov[j], origin_hash="", vector=vectors[j].tolist()))
        if len(batch) == 20_000:
            store.insert_memories(OrgScope("bench"), batch)
            batch = []
    if batch:
        store.insert_memories(OrgScope("bench"), batch)
    maintenance_of(store).optimize(retain=timedelta(0))
    return time.perf_counter() - started


def measure(
    service: MemoryService, store: LanceStore, embedder: SentenceTransformerEmbedder, settings: Settings,
    args: argparse.Namespace, salt: str,
) -> dict[str, dict[str, float]]:
    """Store search, query embedding and whole recall, one query at a time, on distinct texts."""
    rng = random.Random(args.seed + 1)
    asks = [(f"user-{rng.randrange(args.users):05d}", f"{rng.choice(QUERIES)} #{k}{salt}") for k in range(args.queries)]
    # Warm caches and code paths; each measured query text is distinct, so nothing is cached.
    for user, query in asks[:20]:
        service.recall("bench", {"user_id": user, "query": query + " warm"})
    embed_t, search_t, recall_t = [], [], []
    flt = RecallFilter(now=datetime.now(timezone.utc))
    for user, query in asks:
        scope = Scope.user("bench", user)
        t0 = time.perf_counter()
        vector = embedder.embed_batch([query])[0]
        t1 = time.perf_counter()
        store.search(scope, vector, keyword_text(query), flt, dense_limit=settings.recall.dense_depth,
                     keyword_limit=settings.recall.candidates)
        t2 = time.perf_counter()
        service.recall("bench", {"user_id": user, "query": query + " ?"})
        t3 = time.perf_counter()
        embed_t.append(t1 - t0)
        search_t.append(t2 - t1)
        recall_t.append(t3 - t2)
    return {"store_search": summarize(search_t), "query_embedding": summarize(embed_t),
            "whole_recall": summarize(recall_t)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    embedder = SentenceTransformerEmbedder(cache_size=0)
    layouts: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        settings = Settings(storage_uri=f"{tmp}/lancedb", _env_file=None)  # type: ignore[call-arg]
        store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
        setup_s = build(store, embedder, args.memories, args.users, args.seed)
        service = MemoryService(store, embedder, settings, defer_access=True)
        # As written: every commit interleaves users, so one user's rows lie one per page.
        layouts["as_written"] = measure(service, store, embedder, settings, args, salt="w")
        # After the maintenance consolidation runs (compaction with rows put in user order).
        started = time.perf_counter()
        clustered = maintenance_of(store).optimize(retain=timedelta(0), cluster=True)["memories"]["clustered"]
        cluster_s = time.perf_counter() - started
        layouts["after_maintenance"] = measure(service, store, embedder, settings, args, salt="m")
        service.close()
    print(f"{args.memories} memories over {args.users} users, {args.queries} queries, one at a time "
          f"(setup {setup_s:.0f} s, maintenance {cluster_s:.1f} s)")
    print(f"{'layout':<18} {'part':<16} {'p50 ms':>8} {'p99 ms':>8}")
    for layout, rows in layouts.items():
        for name, row in rows.items():
            print(f"{layout:<18} {name:<16} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f}")
    met = {layout: rows["whole_recall"]["p50_ms"] < 20 for layout, rows in layouts.items()}
    print("target whole-recall p50 < 20 ms: " + ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in met.items()))
    path = write_result("recall_latency", {
        "params": vars(args), "setup_s": round(setup_s, 1), "maintenance_s": round(cluster_s, 1),
        "clustered": clustered, "results": layouts, "target_p50_ms": 20, "target_met": met,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
