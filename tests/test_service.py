"""The memory service on a real LanceDB and the real bundled model."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from agent_memory.access import AccessRecorder
from agent_memory.errors import ConflictError, InvalidInputError, NotFoundError
from agent_memory.models import NewMemory, OrgScope, Scope
from agent_memory.service import MemoryService
from storage import LanceStore
from storage.connect import maintenance_of
from storage.schema import TABLES
from tests.conftest import Clock

U = Scope.user("acme", "u1")


def _count(service: MemoryService) -> int:
    return maintenance_of(service.store).table("memories").count_rows()


def test_add_is_idempotent_and_conflicting_key_is_refused(service: MemoryService) -> None:
    body = [{"user_id": "u1", "content": "prefers tea"}, {"user_id": "u1", "content": "lives in Lyon"}]
    first = service.add_many("acme", body, idempotency_key="req-1")
    again = service.add_many("acme", body, idempotency_key="req-1")
    assert first.ids == again.ids and again.created == set()
    assert _count(service) == 2
    with pytest.raises(ConflictError):
        service.add_many("acme", [{"user_id": "u1", "content": "prefers coffee"}], idempotency_key="req-1")
    # Same text without any key is keyed by its content: a retry stores nothing twice.
    plain = service.add("acme", {"user_id": "u1", "content": "has a cat"})
    assert service.add("acme", {"user_id": "u1", "content": "has a cat"}) == plain
    assert _count(service) == 3
    events = service.history(U, plain)
    assert [e.action for e in events] == ["created"]


def test_a_writer_that_lost_the_race_for_an_id_stores_nothing_twice(service: MemoryService) -> None:
    # Two writers looked the same id up, found it absent, and both commit: the first one wins.
    ours = service.prepare("acme", NewMemory(user_id="u1", content="prefers green tea"))
    theirs = service.prepare("acme", NewMemory(user_id="u1", content="prefers green tea"))
    other = service.prepare("acme", NewMemory(user_id="u1", content="lives in Lyon"))
    service.embed_records([ours, theirs, other])
    assert service.store.insert_memories(OrgScope("acme"), [theirs], known_absent=True) == {theirs.id}
    # The loser's merge inserts only what is still absent and reports only that as created.
    assert service.store.insert_memories(OrgScope("acme"), [ours, other], known_absent=True) == {other.id}
    assert _count(service) == 2
    assert service.store.insert_memories(OrgScope("acme"), [ours, other]) == set()  # the looked-up path agrees


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"user_id": "u1", "content": "   "}, "content"),
        ({"user_id": "u1", "content": "x" * 9000}, "limit"),
        ({"user_id": "u1", "content": "ok", "memory_type": "dream"}, "memory_type"),
        ({"user_id": "u1", "content": "ok", "created_at": "last tuesday"}, "created_at"),
        ({"user_id": "u1", "content": "ok", "importance": float("nan")}, "importance"),
        ({"user_id": "u1", "content": "ok", "importance": 1.5}, "importance"),
        ({"user_id": "", "content": "ok"}, "user_id"),
        ({"content": "ok"}, "user_id"),
        ({"user_id": "u1", "content": "ok", "surprise": 1}, "surprise"),
        ({"user_id": "u1", "content": "ok", "metadata": {"k": float("inf")}}, "metadata"),
        ({"user_id": "u1", "content": "ok", "metadata": {"a\x00b": 1}}, "metadata: metadata keys must not contain NUL"),
        ({"user_id": "u1", "content": "ok", "created_at": "0001-01-01T00:00:00+01:00"}, "created_at: the time in UTC"),
        ({"user_id": "u1", "content": "ok", "expires_at": "9999-12-31T23:59:59-01:00"}, "expires_at: the time in UTC"),
    ],
)
def test_bad_input_raises_typed_error_and_writes_nothing(service: MemoryService, bad: dict, message: str) -> None:
    good = {"user_id": "u1", "content": "a good memory in the same batch"}
    with pytest.raises(InvalidInputError) as info:
        service.add_many("acme", [good, bad])
    assert message in str(info.value)
    assert _count(service) == 0
    assert maintenance_of(service.store).table("events").count_rows() == 0


def test_recall_filters(service: MemoryService, clock: Clock) -> None:
    old = clock.now - timedelta(days=400)
    service.add_many(
        "acme",
        [
            {"user_id": "u1", "content": "Refunds need two approvals", "memory_type": "procedural", "metadata": {"team": "billing"}},
            {"user_id": "u1", "content": "Reported a refund bug last year", "memory_type": "episodic", "created_at": old},
            {"user_id": "u1", "content": "Refund policy is 30 days", "metadata": {"team": "support"},
             "expires_at": clock.now + timedelta(days=1)},
        ],
    )
    q = {"user_id": "u1", "query": "refund"}
    assert len(service.recall("acme", q).memories) == 3
    only_proc = service.recall("acme", {**q, "memory_types": ["procedural"]}).memories
    assert [h.content for h in only_proc] == ["Refunds need two approvals"]
    billing = service.recall("acme", {**q, "filters": {"team": "billing"}}).memories
    assert [h.content for h in billing] == ["Refunds need two approvals"]
    recent = service.recall("acme", {**q, "since": (clock.now - timedelta(days=30)).isoformat()}).memories
    assert len(recent) == 2
    older = service.recall("acme", {**q, "until": (clock.now - timedelta(days=30)).isoformat()}).memories
    assert [h.content for h in older] == ["Reported a refund bug last year"]
    clock.advance(days=2)
    assert len(service.recall("acme", q).memories) == 2  # the expired one left recall
    strict = service.recall("acme", {**q, "min_score": 0.99}).memories
    assert strict == []
    with pytest.raises(InvalidInputError):
        service.recall("acme", {"user_id": "u1", "query": " "})
    with pytest.raises(InvalidInputError):
        service.recall("acme", {**q, "scope": "team"})


def test_timestamps_at_the_ends_of_the_calendar(service: MemoryService, clock: Clock) -> None:
    """Years 1 to 9999 (UTC) are stored and filtered on; a time whose UTC date falls outside is bad input."""
    dates = {"first": "0001-01-01T00:00:00Z", "early": "0399-06-26T18:39:25-01:00", "last": "9999-12-31T23:59:59.999999Z"}
    service.add_many("acme", [{"user_id": "u1", "content": f"refund note {name}", "created_at": at}
                              for name, at in dates.items()])
    q = {"user_id": "u1", "query": "refund note", "min_score": 0}

    def found(**bounds: str) -> list[str]:
        return sorted(h.content.split()[-1] for h in service.recall("acme", {**q, **bounds}).memories)

    assert found(until="0001-01-01T00:00:00Z") == ["first"]
    assert found(since="0399-06-26T19:39:25Z", until="0999-12-31T00:00:00Z") == ["early"]
    assert found(since="0399-06-26T19:39:25.000001Z") == ["last"]
    assert found(until="9999-12-31T23:59:59.999999Z") == ["early", "first", "last"]
    assert found(since="9999-12-31T23:59:59.999999Z", mode="keyword") == ["last"]
    for bound in ({"until": "9999-12-31T23:59:59-01:00"}, {"since": "0001-01-01T00:00:00+00:01"}):
        with pytest.raises(InvalidInputError, match="outside the years 1 to 9999"):
            service.recall("acme", {**q, **bound})
    with pytest.raises(InvalidInputError, match="created_at"):
        service.message_records("acme", "u1", "s1", [{"role": "user", "content": "x", "created_at": "9999-12-31T23:59:59-01:00"}])


def test_scores_are_reported_and_old_relevant_fact_beats_new_noise(service: MemoryService, clock: Clock) -> None:
    service.add_many(
        "acme",
        [
            {"user_id": "u1", "content": "My daughter Emma was born in Lisbon", "created_at": clock.now - timedelta(days=700)},
            {"user_id": "u1", "content": "Nice weather today, thanks!", "created_at": clock.now},
        ],
    )
    hits = service.recall("acme", {"user_id": "u1", "query": "where was Emma born?"}).memories
    assert hits[0].content.startswith("My daughter Emma")
    parts = hits[0].scores
    assert 0 <= parts.semantic <= 1 and parts.keyword == 1.0 and parts.recency < 0.1
    assert 0 <= hits[0].score <= 1


def test_chinese_recall_leans_on_keywords(service: MemoryService) -> None:
    service.add_many(
        "acme",
        [
            {"user_id": "u1", "content": "我最喜欢的编程语言是 Rust"},
            {"user_id": "u1", "content": "周末去杭州看了西湖"},
            {"user_id": "u1", "content": "服务器操作系统用的是 Debian"},
        ],
    )
    hits = service.recall("acme", {"user_id": "u1", "query": "他周末去了哪里？杭州"}).memories
    assert hits[0].content == "周末去杭州看了西湖"
    hits = service.recall("acme", {"user_id": "u1", "query": "服务器用什么操作系统"}).memories
    assert hits[0].content.startswith("服务器操作系统")


def test_update_reembeds_and_audits(service: MemoryService) -> None:
    memory_id = service.add("acme", {"user_id": "u1", "content": "Uses VS Code", "id": "editor"})
    updated = service.update(U, "editor", {"content": "Uses Neovim", "importance": 0.9})
    assert updated.content == "Uses Neovim" and updated.importance == pytest.approx(0.9)
    assert service.recall("acme", {"user_id": "u1", "query": "neovim"}).memories[0].id == memory_id
    history = service.history(U, memory_id)
    assert [e.action for e in history] == ["created", "updated"]
    assert history[1].before == {"content": "Uses VS Code", "importance": 0.5}
    with pytest.raises(InvalidInputError):
        service.update(U, memory_id, {})
    with pytest.raises(InvalidInputError):
        service.update(U, memory_id, {"importance": -1})


def test_delete_records_event_and_history_survives(service: MemoryService) -> None:
    memory_id = service.add("acme", {"user_id": "u1", "content": "temporary note"})
    service.delete(U, memory_id)
    with pytest.raises(NotFoundError):
        service.get(U, memory_id)
    assert [e.action for e in service.history(U, memory_id)] == ["created", "deleted"]
    with pytest.raises(NotFoundError):
        service.delete(U, memory_id)


def test_list_paginates_newest_first(service: MemoryService, clock: Clock) -> None:
    for i in range(7):
        service.add("acme", {"user_id": "u1", "content": f"note {i}", "created_at": clock.now + timedelta(minutes=i)})
    seen, cursor = [], None
    while True:
        page = service.list(U, limit=3, cursor=cursor)
        seen += [m.content for m in page.records]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"note {i}" for i in reversed(range(7))]
    with pytest.raises(InvalidInputError):
        service.list(U, cursor="garbage")


def test_access_is_logged_then_folded_and_never_resurrects(service: MemoryService) -> None:
    keep = service.add("acme", {"user_id": "u1", "content": "likes hiking in the Alps"})
    gone = service.add("acme", {"user_id": "u1", "content": "likes hiking in Norway"})
    hits = service.recall("acme", {"user_id": "u1", "query": "hiking"}).memories
    assert {h.id for h in hits} == {keep, gone}
    assert service.get(U, keep).access_count == 0  # nothing written on the recall path
    memories = maintenance_of(service.store).table("memories")
    version = memories.version
    assert service.access.flush() == 2  # two rows appended to the access log ...
    assert memories.version == version  # ... and no memory row rewritten
    seen = service.get(U, keep)
    assert seen.access_count == 1 and seen.last_accessed_at is not None
    assert [r.access_count for r in service.list(U).records] == [1, 1]
    service.recall("acme", {"user_id": "u1", "query": "Alps"})
    service.access.flush()
    assert service.get(U, keep).access_count == 2
    # A row deleted (or merged) before the fold must not come back.
    service.store.delete_memories(U, [gone])
    logged = service.store.pending_access(U)
    assert logged[keep][0] == 2 and logged[gone][0] >= 1
    assert maintenance_of(service.store).fold_access(OrgScope("acme")) == 1
    assert service.store.pending_access(U) == {}
    stored = service.store.get_memories(U, [keep])[0]
    assert stored.access_count == 2 and stored.last_accessed_at == logged[keep][1]
    assert service.get(U, keep).access_count == 2  # folded, not counted twice
    with pytest.raises(NotFoundError):
        service.get(U, gone)
    assert memories.count_rows() == 1
    assert maintenance_of(service.store).fold_access(OrgScope("acme")) == 0


def test_a_fold_cut_short_is_finished_once_by_the_next(service: MemoryService) -> None:
    first = service.add("acme", {"user_id": "u1", "content": "likes hiking in the Alps"})
    other = service.add("globex", {"user_id": "u1", "content": "likes hiking in Norway"})
    for org in ("acme", "globex"):
        service.recall(org, {"user_id": "u1", "query": "hiking"})
    service.access.flush()
    store = service.store
    logged = maintenance_of(store).tables.read("access", None, ["org_id", "memory_id", "count", "at", "flush_id"])
    # A fold that wrote down its plan, merged acme's counts, then stopped (a crash) before it
    # dropped the folded hits from the log, and before it touched globex at all.
    acme, globex = store.access.plan_folds(logged, None)
    assert (acme["org_id"], globex["org_id"]) == ("acme", "globex")
    assert store.access.merge_fold(acme) == 1
    assert store.get_memories(U, [first])[0].access_count == 1
    assert store.pending_access(U) != {}  # the hits are in both places until the fold is finished
    assert store.get_job(OrgScope("acme"), acme["id"])["state"] == "running"
    service.recall("acme", {"user_id": "u1", "query": "Alps"})  # a hit logged after the crash
    service.access.flush()
    assert maintenance_of(store).fold_access() == 3  # acme's and globex's counts set (again), then the later hit
    assert store.get_memories(U, [first])[0].access_count == 2  # 1 folded once, and the later one
    assert store.get_memories(Scope.user("globex", "u1"), [other])[0].access_count == 1
    assert store.pending_access(U) == {} and maintenance_of(store).fold_access() == 0
    assert store.get_job(OrgScope("acme"), acme["id"]) is None and store.get_job(OrgScope("globex"), globex["id"]) is None


def test_access_recorder_counts_distinct_pending_ids_and_flushes_at_its_cap() -> None:
    flushed: list[dict[str, int]] = []
    recorder = AccessRecorder(lambda org, counts, at: flushed.append(dict(counts)) or len(counts),
                              lambda: datetime(2026, 1, 1, tzinfo=timezone.utc), interval=3600, max_rows=4)
    recorder.record("acme", "u1", ["a", "b"])
    recorder.record("acme", "u1", ["a"])  # a second hit of a pending id is not another row
    recorder.record("acme", "u2", ["c"])
    assert recorder.pending() == 3
    recorder.discard("acme", ["b", "missing"])
    assert recorder.pending() == 2
    recorder.discard_user("acme", "u2")
    assert recorder.pending() == 1
    recorder.start()
    recorder.record("acme", "u3", ["d", "e", "f"])  # four pending: the cap wakes the flush
    deadline = time.monotonic() + 120
    while not flushed and time.monotonic() < deadline:
        time.sleep(0.01)
    recorder.close()
    assert flushed[0] == {"u1": {"a": 2}, "u3": {"d": 1, "e": 1, "f": 1}} and recorder.pending() == 0


def test_new_stores_write_lance_2_1_files(service: MemoryService) -> None:
    # 2.2 files store all-equal pages as constants that are slow to read a few rows from (FILE_FORMAT).
    service.add("acme", {"user_id": "u1", "content": "likes green tea"})
    for name in TABLES:
        assert maintenance_of(service.store).table(name).to_lance().data_storage_version == "2.1", name


def test_other_embedding_model_is_a_clear_error(service: MemoryService, settings) -> None:
    service.add("acme", {"user_id": "u1", "content": "anything"})
    with pytest.raises(ConflictError) as info:
        LanceStore(service.settings.storage.uri, embedding_model="other-model", embedding_dim=768)
    assert info.value.code == "embedding_model_mismatch" and "all-MiniLM-L6-v2" in str(info.value)


def test_team_scope_recall(service: MemoryService) -> None:
    service.add("acme", {"user_id": "u1", "team_id": "t1", "content": "Team deploys on Tuesdays"})
    service.add("acme", {"user_id": "u2", "team_id": "t1", "content": "Team uses Grafana for deploys"})
    service.add("acme", {"user_id": "u3", "team_id": "t2", "content": "Other team deploys daily"})
    hits = service.recall("acme", {"user_id": "u1", "query": "deploys", "scope": "team", "team_id": "t1"}).memories
    assert {h.content for h in hits} == {"Team deploys on Tuesdays", "Team uses Grafana for deploys"}


def test_redaction_applies_before_storage(service: MemoryService) -> None:
    memory_id = service.add(
        "acme", {"user_id": "u1", "content": "Mail me at jane.doe@example.com or call 13800138000", "metadata": {"note": "sk-abcdefghijklmnopqrstuvwxyz123456"}}
    )
    record = service.get(U, memory_id)
    assert "jane.doe" not in record.content and "13800138000" not in record.content
    assert "[EMAIL]" in record.content and "[PHONE]" in record.content
    assert "sk-abc" not in str(record.metadata)
    events = service.history(U, memory_id)
    assert "jane.doe" not in str(events[0].after)


def test_session_messages_window(service: MemoryService) -> None:
    records = service.message_records(
        "acme", "u1", "s1", [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    )
    service.log_messages("acme", records)
    service.log_messages("acme", records)  # a retry logs nothing twice
    window = service.session_messages(U, "s1", last=3)
    assert [m.content for m in window] == ["turn 2", "turn 3", "turn 4"]
    assert service.session_messages(Scope.user("acme", "u2"), "s1", last=3) == []


def test_merge_folds_sources_and_supersedes(service: MemoryService, clock: Clock) -> None:
    ids = service.add_many(
        "acme",
        [
            {"user_id": "u1", "content": "Uses Python", "importance": 0.4, "source_ids": ["m1"]},
            {"user_id": "u1", "content": "Mainly uses Python", "importance": 0.8, "source_ids": ["m2"]},
            {"user_id": "u1", "content": "Develops in Python", "importance": 0.3, "source_ids": ["m3"]},
        ],
    ).ids
    records = service.store.get_memories(U, ids, with_vectors=True)
    by_id = {r.id: r for r in records}
    clock.advance(hours=1)
    merged = service.merge(U, by_id[ids[1]], [by_id[ids[0]], by_id[ids[2]]], actor="test")
    assert merged.source_ids == ["m2", "m1", "m3"] and merged.importance == pytest.approx(0.8)
    hits = service.recall("acme", {"user_id": "u1", "query": "python"}).memories
    assert [h.id for h in hits] == [ids[1]]
    old = service.get(U, ids[0])
    assert old.status == "superseded" and old.superseded_by == ids[1] and old.valid_to == clock.now
    assert [e.action for e in service.history(U, ids[0])] == ["created", "superseded"]
    assert [e.action for e in service.history(U, ids[1])] == ["created", "merged"]
    assert service.list(U).records[0].id == ids[1] and len(service.list(U, status="superseded").records) == 2


def test_supersede_keeps_history(service: MemoryService) -> None:
    old = service.add("acme", {"user_id": "u1", "content": "Prefers VS Code"})
    new = service.add("acme", {"user_id": "u1", "content": "Switched to Neovim"})
    service.supersede(U, service.get(U, old), new)
    hits = service.recall("acme", {"user_id": "u1", "query": "which editor? VS Code or Neovim"}).memories
    assert [h.id for h in hits] == [new]
    assert service.get(U, old).superseded_by == new
