"""The console's endpoints at 1M memories, in process (what each costs the store and the service;
the HTTP path adds its few milliseconds, see serve_latency.py): the org's users (a page, the next
page, a prefix), a user's timeline, a list and a recall `as_of` a moment beside the plain ones, the
jobs list, a consolidation dry run of one user, one feedback vote, and what the vote's two columns
add to a user's recall scan.

The store: `--memories` over `--users` (synthetic unit vectors and template texts, as in
serve_latency.py; 85% active, 10% superseded, 5% expired, 5% private to an agent), each with its
`created` event, `--messages` logged turns and `--jobs` job rows, plus two users measured on their
own: one of 100 memories and one of 10,000, whose memories also have edits and supersessions in
their events. Then the maintenance consolidation runs (compaction, rows in user order, indexes).

    .venv/bin/python benchmarks/console_api.py [--memories 1000000 --users 10000 --messages 1000000 \\
        --jobs 10000 --repeats 20 --name console_api_1m]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.embedding import SentenceTransformerEmbedder  # noqa: E402
from agent_memory.ids import stable_id  # noqa: E402
from agent_memory.models import MEMORY_TYPES, Scope  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.store import RecallFilter  # noqa: E402
from agent_memory.text import keyword_text  # noqa: E402
from agent_memory.timeline import encode_cursor  # noqa: E402
from benchmarks.common import summarize, write_result  # noqa: E402
from benchmarks.recall_latency import QUERIES, SUBJECTS, TEMPLATES  # noqa: E402
from jobs.consolidate import run_consolidation  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage import schema as sc  # noqa: E402
from storage.connect import maintenance_of  # noqa: E402
from storage.recall_scan import SCAN_COLUMNS  # noqa: E402

ORG = "default"
TARGETS = {"target-small": 100, "target-large": 10_000}
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
CHUNK = 50_000


def _owners(memories: int, users: int) -> list[str]:
    background = memories - sum(TARGETS.values())
    owners = [f"user-{i % users:05d}" for i in range(background)]
    for user, count in TARGETS.items():
        owners += [user] * count
    return owners


def _memory_rows(owners: list[str], start: int, dim: int, rng: np.random.Generator, pick: random.Random,
                 texts: list[str], keywords: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One chunk of memory rows and their audit events (created; for the targets also edits and
    supersessions)."""
    vectors = rng.standard_normal((len(owners), dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows, events = [], []
    for j, user in enumerate(owners):
        i = start + j
        k = pick.randrange(len(texts))
        created = NOW - timedelta(minutes=pick.randrange(0, 60 * 24 * 365))
        roll = pick.random()
        status = "active" if roll < 0.85 else "superseded" if roll < 0.95 else "expired"
        private = pick.random() < 0.05
        memory_id = stable_id("bench", str(i))
        valid_to = created + timedelta(days=pick.randrange(1, 30)) if status != "active" else None
        rows.append({
            "id": memory_id, "org_id": ORG, "team_id": None, "user_id": user, "agent_id": "planner" if private else None,
            "session_id": None, "content": texts[k], "index_text": texts[k], "keywords": keywords[k],
            "memory_type": MEMORY_TYPES[pick.randrange(3)], "importance": 0.5, "confidence": 1.0, "status": status,
            "superseded_by": None, "valid_from": created, "valid_to": valid_to, "created_at": created,
            "updated_at": valid_to or created, "last_accessed_at": None, "access_count": 0, "expires_at": None,
            "source_ids": [], "metadata": "{}", "metadata_kv": [], "oov": 0.0, "origin_hash": "",
            "vector": vectors[j].tolist(), "visibility": "private" if private else "shared", "feedback_offset": 0.0,
            "feedback_at": None,
        })
        visibility = {"agent_id": rows[-1]["agent_id"], "visibility": rows[-1]["visibility"]}
        after = json.dumps({"content": texts[k], "memory_type": rows[-1]["memory_type"], "importance": 0.5})
        events.append({"id": stable_id("event:created", memory_id), "org_id": ORG, "user_id": user,
                       "memory_id": memory_id, "action": "created", "actor": "bench", "created_at": created,
                       "before": None, "after": after, **visibility})
        if user in TARGETS and pick.random() < 0.1:
            events.append({"id": stable_id("event:updated", memory_id), "org_id": ORG, "user_id": user,
                           "memory_id": memory_id, "action": "updated", "actor": "bench",
                           "created_at": created + timedelta(minutes=5), "before": json.dumps({"content": texts[k]}),
                           "after": json.dumps({"content": texts[k] + " (edited)"}), **visibility})
            rows[-1]["content"] = texts[k] + " (edited)"
        if status != "active":
            events.append({"id": stable_id("event:retired", memory_id), "org_id": ORG, "user_id": user,
                           "memory_id": memory_id, "action": status, "actor": "bench", "created_at": valid_to,
                           "before": json.dumps({"status": "active"}), "after": json.dumps({"status": status}),
                           **visibility})
    return rows, events


def populate(store: LanceStore, args: argparse.Namespace) -> float:
    """The synthetic store (see the module's docstring); seconds it took, maintenance included."""
    rng, pick = np.random.default_rng(args.seed), random.Random(args.seed)
    texts = [t.format(s=s) for t in TEMPLATES for s in SUBJECTS]
    keywords = [keyword_text(t) for t in texts]
    tables = maintenance_of(store)
    started = time.perf_counter()
    owners = _owners(args.memories, args.users)
    for start in range(0, len(owners), CHUNK):
        rows, events = _memory_rows(owners[start:start + CHUNK], start, store.embedding_dim, rng, pick, texts, keywords)
        for name, data in ((sc.MEMORIES, rows), (sc.EVENTS, events)):
            table = tables.table(name)
            table.add(pa.Table.from_pylist(data, schema=table.schema))  # fresh rows: a plain append
        print(f"  memories {start + len(rows):,}", flush=True)
    users = sorted(set(owners))
    for start in range(0, args.messages, CHUNK):
        n = min(CHUNK, args.messages - start)
        data = [{"id": f"msg-{start + j}", "org_id": ORG, "user_id": users[(start + j) % len(users)], "agent_id": None,
                 "session_id": f"s{(start + j) % 7}", "message_id": f"m{start + j}", "role": "user", "name": None,
                 "content": texts[(start + j) % len(texts)], "created_at": NOW - timedelta(minutes=start + j),
                 "metadata": "{}"} for j in range(n)]
        tables.table(sc.MESSAGES).add(pa.Table.from_pylist(data, schema=sc.MESSAGES_SCHEMA))
    jobs = [{"id": f"job-{i}", "org_id": ORG, "user_id": users[i % len(users)],
             "kind": ("conversation", "import", "consolidation")[i % 3], "state": ("succeeded", "failed")[i % 5 == 0],
             "progress": 1.0, "created_at": NOW - timedelta(minutes=i), "updated_at": NOW - timedelta(minutes=i),
             "error": None, "report": "{}"} for i in range(args.jobs)]
    if jobs:
        tables.table(sc.JOBS).add(pa.Table.from_pylist(jobs, schema=sc.JOBS_SCHEMA))
    tables.optimize(retain=timedelta(0), cluster=True)
    return time.perf_counter() - started


def measured(fn: Any, repeats: int) -> dict[str, float]:
    """p50 and the rest of `repeats` calls of `fn`, after one call to warm it."""
    fn()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return summarize(samples)


def scan_columns(store: LanceStore, user: str, repeats: int) -> dict[str, dict[str, float]]:
    """A user's recall scan with the columns it reads now, and without the feedback's two."""
    where = store.recall.recall_where(Scope.user(ORG, user), RecallFilter(now=NOW), expiry=False).render()
    without = [c for c in SCAN_COLUMNS if not c.startswith("feedback")]
    out = {}
    for label, columns in (("with_feedback_columns", SCAN_COLUMNS), ("without_feedback_columns", without)):
        out[label] = measured(lambda c=columns: store.recall.snapshot().to_table(
            columns=[*c, "expires_at", "vector"], filter=where), repeats)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", default=None, help="Where to build the store (default: a temporary directory).")
    parser.add_argument("--name", default="console_api_1m")
    args = parser.parse_args()

    embedder = SentenceTransformerEmbedder()
    root = Path(args.store or tempfile.mkdtemp(prefix="console-bench-"))
    settings = Settings(storage_uri=str(root / "lancedb"), _env_file=None)  # type: ignore[call-arg]
    store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
    setup_s = populate(store, args)
    print(f"built in {setup_s:.0f} s", flush=True)
    service = MemoryService(store, embedder, settings, defer_access=True, maintenance=maintenance_of(store))
    r, results = args.repeats, {"setup_s": round(setup_s, 1)}
    results["users"] = {
        "first_page_50": measured(lambda: service.users(ORG, limit=50), r),
        "page_50_after_user_05000": measured(lambda: service.users(ORG, limit=50, cursor=encode_cursor("user", "user-05000")), r),
        "prefix_user-050": measured(lambda: service.users(ORG, limit=50, prefix="user-050"), r),
    }
    results["jobs"] = {
        "first_page_50": measured(lambda: service.jobs(ORG, limit=50), r),
        "kind_consolidation_failed": measured(lambda: service.jobs(ORG, kind="consolidation", state="failed"), r),
    }
    queries = iter([q for _ in range(10 * r) for q in QUERIES])
    as_of = NOW - timedelta(days=120)
    for user, count in TARGETS.items():
        scope = Scope.user(ORG, user)
        results[f"user_{count}"] = {
            "timeline_page_500": measured(lambda s=scope: service.timeline(s, limit=500), r),
            "list_50": measured(lambda s=scope: service.list(s, limit=50), r),
            "list_50_as_of": measured(lambda s=scope: service.list(s, limit=50, as_of=as_of), r),
            "recall": measured(lambda u=user: service.recall(ORG, {"user_id": u, "query": next(queries)}), r),
            "recall_as_of": measured(lambda u=user: service.recall(
                ORG, {"user_id": u, "query": next(queries), "as_of": as_of.isoformat()}), r),
            "feedback_vote": measured(lambda s=scope, u=user: service.feedback(
                s, stable_id("bench", str(_first_index(args, u) + random.randrange(TARGETS[u]))),
                {"signal": random.choice(["useful", "wrong"])}, actor="bench"), r),
            "consolidation_dry_run": measured(lambda u=user: run_consolidation(
                settings, org_id=ORG, user_id=u, dry_run=True, use_ray=False, now=NOW, recorded=True), max(3, r // 5)),
        }
        if count == 100:
            results[f"user_{count}"]["recall_scan"] = scan_columns(store, user, r)
        print(json.dumps({user: results[f"user_{count}"]}, indent=1), flush=True)
    service.close()
    path = write_result(args.name, {"params": vars(args), "results": results})
    print(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return 0


def _first_index(args: argparse.Namespace, user: str) -> int:
    """The index of a target user's first memory (ids are `stable_id("bench", index)`)."""
    start = args.memories - sum(TARGETS.values())
    for name, count in TARGETS.items():
        if name == user:
            return start
        start += count
    raise KeyError(user)


if __name__ == "__main__":
    raise SystemExit(main())
