"""What the console reads, on a real LanceDB and the bundled model: a user's timeline (every change
with the memory's text after it, erased text never), memory as of a past moment (list and recall),
the org's users with their counts, and the org's jobs, page by page."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.job_record import JobRecord
from agent_memory.models import OrgScope, Scope
from agent_memory.service import MemoryService
from storage.directory import prefix_end
from tests.conftest import Clock

U = Scope.user("acme", "u1")


def _history_of_a_user(service: MemoryService, clock: Clock) -> dict[str, object]:
    """A user whose memories were created, edited, merged, superseded, voted on, expired and deleted."""
    t0 = clock()
    tea, coffee, dupe = service.add_many("acme", [
        {"user_id": "u1", "content": "The user drinks green tea"},
        {"user_id": "u1", "content": "The user drinks coffee at night", "memory_type": "episodic"},
        {"user_id": "u1", "content": "The user drinks green tea!"},
    ]).ids
    clock.advance(days=1)
    t1 = clock()
    service.update(U, tea, {"content": "The user drinks jasmine tea"}, actor="ops")
    clock.advance(days=1)
    [merged] = service.merge_many(U, [(service.get(U, tea), [service.get(U, dupe)])], actor="consolidation")
    clock.advance(days=1)
    t3 = clock()
    service.feedback(U, coffee, {"signal": "outdated", "note": "quit coffee"}, actor="bot")
    clock.advance(days=1)
    service.delete(U, tea, actor="ops")
    return {"tea": tea, "coffee": coffee, "dupe": dupe, "merged": merged.id, "t0": t0, "t1": t1, "t3": t3}


def test_the_timeline_replays_every_change_with_the_text_after_it(service: MemoryService, clock: Clock) -> None:
    made = _history_of_a_user(service, clock)
    events, cursor = service.timeline(U)
    assert cursor is None
    shown = [(e["action"], e["memory_id"], e["content"], e["status_after"]) for e in events]
    assert shown == [
        ("created", made["tea"], "The user drinks green tea", "active"),
        ("created", made["coffee"], "The user drinks coffee at night", "active"),
        ("created", made["dupe"], "The user drinks green tea!", "active"),
        ("updated", made["tea"], "The user drinks jasmine tea", "active"),
        ("merged", made["tea"], "The user drinks jasmine tea", "active"),
        ("superseded", made["dupe"], "The user drinks green tea!", "superseded"),
        ("feedback", made["coffee"], "The user drinks coffee at night", "expired"),
        ("deleted", made["tea"], None, "deleted"),
    ]
    assert events[1]["memory_type"] == "episodic" and events[6]["detail"]["note"] == "quit coffee"
    assert events[5]["related_ids"] == [made["tea"]] and events[4]["related_ids"] == [made["dupe"]]
    assert all(e["at"] >= made["t0"] for e in events)
    # Pages: oldest first, the cursor going on where the page ended; a window of time.
    first, cursor = service.timeline(U, limit=3)
    second, last = service.timeline(U, limit=10, cursor=cursor)
    assert [e["id"] for e in first + second] == [e["id"] for e in events] and last is None
    # A page reads whole only its events and those of its memories: every page of every size says
    # what the whole timeline says of its events.
    for size in range(1, len(events) + 1):
        pages, cursor = [], None
        while True:
            page, cursor = service.timeline(U, limit=size, cursor=cursor)
            pages += page
            if cursor is None:
                break
        assert pages == events, size
    window, _ = service.timeline(U, since=made["t1"], until=made["t3"])
    assert [e["action"] for e in window] == ["updated", "merged", "superseded", "feedback"]
    for bad in ({"limit": 0}, {"cursor": "nope"}, {"since": made["t3"], "until": made["t1"]}):
        with pytest.raises(InvalidInputError):
            service.timeline(U, **bad)  # type: ignore[arg-type]


def test_an_erased_users_timeline_holds_no_text(service: MemoryService, clock: Clock) -> None:
    _history_of_a_user(service, clock)
    service.erase_user("acme", "u1", actor="ops")
    events, _ = service.timeline(U)
    assert [e["action"] for e in events] == ["erased", "purged"]
    assert all(e["content"] is None and e["memory_id"] is None for e in events)
    assert events[0]["job_id"] and "drinks" not in repr(events)


def test_memory_as_of_a_moment_lists_and_recalls_what_was_held_then(service: MemoryService, clock: Clock) -> None:
    made = _history_of_a_user(service, clock)
    clock.advance(days=1)
    later = service.add("acme", {"user_id": "u1", "content": "The user drinks oolong tea"})
    before_vote = made["t3"] - timedelta(seconds=1)  # type: ignore[operator]
    held = {r.id for r in service.list(U, as_of=before_vote).records}
    # The dupe was merged away before then; coffee was expired after; tea was deleted (gone from every read).
    assert held == {made["coffee"]}
    assert {r.id for r in service.list(U).records} == {later}
    assert {r.id for r in service.list(U, as_of=made["t0"]).records} == {made["coffee"], made["dupe"]}
    hits = service.recall("acme", {"user_id": "u1", "query": "what does the user drink", "min_score": 0,
                                   "as_of": before_vote.isoformat()}).memories
    assert [h.id for h in hits] == [made["coffee"]]
    assert [h.id for h in service.recall("acme", {"user_id": "u1", "query": "what does the user drink"}).memories] == [
        later]
    with pytest.raises(InvalidInputError):
        service.recall("acme", {"user_id": "u1", "query": "tea", "as_of": "yesterday"})


def test_the_users_of_an_org_are_counted_and_paged_by_id(service: MemoryService, clock: Clock) -> None:
    service.add_many("acme", [
        {"user_id": "ann", "content": "Ann likes tea"}, {"user_id": "ann", "content": "Ann ran a marathon",
                                                         "memory_type": "episodic"},
        {"user_id": "bob", "content": "Bob likes coffee"}, {"user_id": "bo", "content": "Bo likes water"},
    ])
    service.add("globex", {"user_id": "zed", "content": "Zed is in another org"})
    bob = service.list(Scope.user("acme", "bob")).records[0]
    service.feedback(Scope.user("acme", "bob"), bob.id, {"signal": "outdated"}, actor="bot")
    clock.advance(hours=2)
    service.log_messages("acme", service.message_records("acme", "cat", "s1", [{"role": "user", "content": "hi"}]))
    users, cursor = service.users("acme", limit=2)
    assert [u["user_id"] for u in users] == ["ann", "bo"] and cursor is not None
    ann = users[0]
    assert ann["memories"] == {"active": 2, "superseded": 0, "expired": 0}
    assert ann["by_type"] == {"episodic": 1, "semantic": 1, "procedural": 0}
    rest, end = service.users("acme", limit=2, cursor=cursor)
    assert [u["user_id"] for u in rest] == ["bob", "cat"] and end is None
    assert rest[0]["memories"] == {"active": 0, "superseded": 0, "expired": 1}
    assert rest[1]["memories"]["active"] == 0 and rest[1]["last_activity"] == clock()  # turns only
    assert [u["user_id"] for u in service.users("acme", prefix="bo")[0]] == ["bo", "bob"]
    assert service.users("acme", prefix="x' OR '1'='1")[0] == []
    assert prefix_end("bo") == "bp" and prefix_end("a\U0010ffff") == "b" and prefix_end("\U0010ffff") is None


def test_the_jobs_of_an_org_newest_first_by_kind_and_state(service: MemoryService, clock: Clock) -> None:
    for i in range(5):
        clock.advance(minutes=1)
        job = JobRecord.new(f"job-{i}-{uuid.uuid4().hex[:6]}", "acme", "import" if i % 2 else "conversation",
                            state="failed" if i == 3 else "queued", now=clock())
        service.store.put_job(OrgScope("acme"), job.as_row())
    service.store.put_job(OrgScope("globex"), JobRecord.new("job-globex", "globex", "import", now=clock()).as_row())
    page, cursor = service.jobs("acme", limit=2)
    rest, end = service.jobs("acme", limit=10, cursor=cursor)
    ids = [j["id"] for j in page + rest]
    assert [i.split("-")[1] for i in ids] == ["4", "3", "2", "1", "0"] and end is None
    assert [j["id"].split("-")[1] for j in service.jobs("acme", kind="import")[0]] == ["3", "1"]
    assert [j["id"].split("-")[1] for j in service.jobs("acme", kind="import", state="failed")[0]] == ["3"]
