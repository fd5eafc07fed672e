"""The two ways the store retrieves candidates agree, and putting rows in user order changes nothing.

A user's rows are scored in process from one scan (cosine in numpy, BM25 over that user's rows);
wider scopes and very large users go to Lance's vector search and full-text index. With one user
in the table the corpus statistics are the same, so both must give the same candidates and scores.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from agent_memory.embedding import Embedder
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from agent_memory.store import Candidate, RecallFilter
from agent_memory.text import keyword_text
from storage import LanceStore
from storage.connect import maintenance_of
from tests.conftest import Clock

FACTS = [
    "The user prefers Python for backend services", "They are preferring dark mode in every editor",
    "用户喜欢喝绿茶", "用户偏好使用 Python 和 FastAPI 开发后端服务", "Runs every morning before work",
    "The user ran a marathon in Berlin", "Deploys happen on Fridays", "她不喜欢周五发布",
    "Coffee: espresso, no sugar", "Prefers short answers with bullet points", "Café au lait on Sundays",
]
QUERIES = ["what does the user prefer", "running", "绿茶", "后端服务 Python", "Friday deploys", "cafe"]


def _by_id(candidates: list[Candidate]) -> dict[str, float]:
    return {c.id: round(c.score, 4) for c in candidates}


def _open(service: MemoryService, scan_limit: int) -> LanceStore:
    store = service.store
    return LanceStore(store.uri, embedding_model=store.embedding_model, embedding_dim=store.embedding_dim,
                      scan_limit=scan_limit)


def test_scan_and_index_paths_find_the_same_candidates(service: MemoryService, embedder: Embedder) -> None:
    service.add_many("acme", [{"user_id": "u1", "content": f} for f in FACTS])
    service.add_many("acme", [{"user_id": "u1", "content": f + " again"} for f in FACTS[:4]])
    scanning, indexed = _open(service, 2_000), _open(service, 0)
    scope, flt = Scope.user("acme", "u1"), RecallFilter(now=datetime.now(timezone.utc))
    for query in QUERIES:
        vector = embedder.embed_query(query)
        a = scanning.search(scope, vector, keyword_text(query), flt, dense_limit=50, keyword_limit=50)
        b = indexed.search(scope, vector, keyword_text(query), flt, dense_limit=50, keyword_limit=50)
        assert len(a.dense) == len(FACTS) + 4
        assert _by_id(a.dense) == pytest.approx(_by_id(b.dense), abs=1e-4), query
        assert a.lexical, query
        assert _by_id(a.lexical) == pytest.approx(_by_id(b.lexical), rel=1e-3), query
        top = [c.id for c in a.dense[:3]]
        assert [r.id for r in sorted(a.records(top), key=lambda r: top.index(r.id))] == top
        assert {r.content for r in a.records(top)} == {r.content for r in b.records(top)}


def test_a_user_over_the_scan_limit_is_recalled_through_the_indexes(
    service: MemoryService, embedder: Embedder, clock: Clock
) -> None:
    service.add_many("acme", [{"user_id": "u1", "content": f} for f in FACTS])
    small = MemoryService(_open(service, 3), embedder, service.settings, clock=clock)
    try:
        for query in QUERIES:
            want = service.recall("acme", {"user_id": "u1", "query": query}).memories
            got = small.recall("acme", {"user_id": "u1", "query": query}).memories
            # The same hits in the same order; scores equal but for float32 rounding of the two paths' cosines.
            assert [h.id for h in got] == [h.id for h in want], query
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-5), query
        assert ("acme", "u1") in small.store.recall.large_scopes
    finally:
        small.close()


def test_clustering_puts_rows_in_user_order_and_changes_no_answer(service: MemoryService) -> None:
    users = ["u1", "u2", "u'3"]
    for i, fact in enumerate(FACTS):  # one commit per memory, users interleaved
        service.add("acme", {"user_id": users[i % 3], "content": fact})
        service.add("other", {"user_id": users[(i + 1) % 3], "content": fact})
    doomed = service.add("acme", {"user_id": "u1", "content": "Temporary note to delete"})
    service.delete(Scope.user("acme", "u1"), doomed)
    store = service.store
    asked = [(org, u, q) for org in ("acme", "other") for u in users for q in QUERIES]

    def answers() -> list[list[tuple[str, float]]]:
        return [[(h.id, h.score) for h in service.recall(org, {"user_id": u, "query": q}).memories]
                for org, u, q in asked]

    before, rows_before = answers(), maintenance_of(store).table("memories").count_rows()
    report = maintenance_of(store).optimize(cluster=True)["memories"]
    assert report["clustered"]["fragments"] >= 1 and report["clustered"]["rows"] == rows_before
    table = maintenance_of(store).table("memories").to_lance().to_table(columns=["org_id", "user_id", "created_at"])
    keys = list(zip(*(table.column(c).to_pylist() for c in ("org_id", "user_id", "created_at")), strict=True))
    assert keys == sorted(keys)
    assert maintenance_of(store).table("memories").count_rows() == rows_before
    assert answers() == before
    assert maintenance_of(store).cluster()["fragments"] == 0  # already in order: nothing rewritten


def test_new_rows_are_compacted_then_indexed_and_no_answer_changes(service: MemoryService) -> None:
    store = service.store
    service.add_many("acme", [{"user_id": "u1", "content": f} for f in FACTS])
    maintenance_of(store).optimize()
    for fact in FACTS[:3]:  # one commit, one fragment each, outside every index
        service.add("acme", {"user_id": "u1", "content": f"{fact} (later)"})
    service.add("acme", {"user_id": "u2", "content": "Someone else's note"})

    def unindexed() -> dict[str, int]:
        dataset = maintenance_of(store).table("memories").to_lance()
        return {i["name"]: dataset.stats.index_stats(i["name"])["num_unindexed_rows"] for i in dataset.list_indices()}

    def fragments() -> int:
        return len(maintenance_of(store).table("memories").to_lance().get_fragments())

    assert set(unindexed().values()) == {4} and fragments() == 5
    asked = [("u1", q) for q in QUERIES] + [("u2", "note")]

    def answers() -> list[list[tuple[str, float]]]:
        return [[(h.id, h.score) for h in service.recall("acme", {"user_id": u, "query": q}).memories] for u, q in asked]

    before, rows = answers(), maintenance_of(store).table("memories").count_rows()
    # Four uncovered fragments become one; too few rows yet to rewrite the indexes for.
    assert maintenance_of(store).fold_new_rows(reindex_rows=100) == {"fragments_compacted": 4, "rows_indexed": 0}
    assert fragments() == 2 and set(unindexed().values()) == {4}
    assert answers() == before
    assert maintenance_of(store).fold_new_rows(reindex_rows=100) == {"fragments_compacted": 0, "rows_indexed": 0}
    # Enough rows: the scalar indexes take them in; the full-text index waits for optimize().
    assert maintenance_of(store).fold_new_rows(reindex_rows=4) == {"fragments_compacted": 0, "rows_indexed": 4}
    stale = unindexed()
    assert stale.pop("keywords_idx") == 4 and set(stale.values()) == {0}
    assert answers() == before and maintenance_of(store).table("memories").count_rows() == rows
    assert maintenance_of(store).fold_new_rows(reindex_rows=1) == {"fragments_compacted": 0, "rows_indexed": 0}


def test_folds_rewrite_little_more_than_what_is_new(service: MemoryService) -> None:
    store = service.store
    service.add_many("acme", [{"user_id": "u1", "content": f} for f in FACTS])
    maintenance_of(store).optimize()

    def uncovered(name: str) -> list[int]:
        dataset = maintenance_of(store).table(name).to_lance()
        covered = set.intersection(*(set(i["fragment_ids"]) for i in dataset.list_indices() if i["type"] != "Inverted"))
        return [f.metadata.physical_rows for f in dataset.get_fragments() if f.fragment_id not in covered]

    service.add_many("acme", [{"user_id": "u1", "content": f"batch note {i}"} for i in range(10)])
    service.add("acme", {"user_id": "u1", "content": "first single"})
    assert uncovered("memories") == [10, 1]
    # Ten rows are more than four times the one new row: nothing worth a rewrite yet.
    assert maintenance_of(store).fold_new_rows(reindex_rows=100)["fragments_compacted"] == 0
    service.add("acme", {"user_id": "u1", "content": "second single"})
    # The two singles fold together; the ten-row fragment (over 4x their two rows) is left alone.
    assert maintenance_of(store).fold_new_rows(reindex_rows=100) == {"fragments_compacted": 2, "rows_indexed": 0}
    assert uncovered("memories") == [10, 2]
    service.add("acme", {"user_id": "u1", "content": "third single"})
    # 1 new row, then 2 (at most 4x), then 10 (at most 4x the 3 taken): all of it in one fold.
    assert maintenance_of(store).fold_new_rows(reindex_rows=100)["fragments_compacted"] == 3
    assert uncovered("memories") == [13]
    # The audit trail's fragments fold the same way when asked for.
    events = len(uncovered("events"))
    assert events >= 2
    assert maintenance_of(store).fold_new_rows(reindex_rows=100, tables=("events",))["fragments_compacted"] >= 2
    assert len(uncovered("events")) < events
    hits = service.recall("acme", {"user_id": "u1", "query": "second single"}).memories
    assert hits[0].content == "second single"


def test_recall_sees_what_another_process_committed_after_its_snapshot(
    service: MemoryService, embedder: Embedder
) -> None:
    service.add("acme", {"user_id": "u1", "content": "The user prefers green tea"})
    assert len(service.recall("acme", {"user_id": "u1", "query": "tea"}).memories) == 1  # snapshot taken
    other = MemoryService(_open(service, 2_000), embedder, service.settings)  # another writer's store
    try:
        other.add("acme", {"user_id": "u1", "content": "The user drinks oolong tea on Sundays"})
    finally:
        other.close()
    hits = service.recall("acme", {"user_id": "u1", "query": "tea"}).memories
    assert sorted(h.content for h in hits) == ["The user drinks oolong tea on Sundays", "The user prefers green tea"]


def test_two_processes_compacting_at_once_both_finish(service: MemoryService) -> None:
    """The Writer's passes, an import's closing compaction and consolidation may overlap: Lance
    refuses the later of two rewrites of the same fragments, and the store plans it again."""
    import threading

    stores = [_open(service, 2_000), _open(service, 2_000)]
    errors: list[BaseException] = []

    def compact(store: LanceStore) -> None:
        try:
            maintenance_of(store).optimize()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    for round_ in range(3):
        service.add_many("acme", [{"user_id": "u1", "content": f"note {round_}-{i}"} for i in range(3)])
        for i in range(12):  # small fragments for both to compact
            service.add("acme", {"user_id": "u1", "content": f"fact {round_}-{i}"})
        threads = [threading.Thread(target=compact, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    assert maintenance_of(service.store).table("memories").count_rows() == 3 * 15
