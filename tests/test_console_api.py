"""The console's endpoints on the real shared Serve app, through the typed client: the org's users,
a user's timeline, memory as of a moment, the jobs list, a consolidation dry run read before the
real run, feedback (roles, the rate limit, restore after `outdated`), and keys of agents with
private memories."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from agent_memory_http import (
    AsyncMemoryClient,
    ConflictError,
    MemoryClient,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
)

from tests.conftest import FEEDBACK_PER_MINUTE


@pytest.fixture
def client(serve_app: dict[str, object]):  # type: ignore[no-untyped-def]
    clients: list[MemoryClient] = []

    def make(key: str = "acme-admin", **options: object) -> MemoryClient:
        made = MemoryClient(str(serve_app["url"]), api_key=key, **options)  # type: ignore[arg-type]
        clients.append(made)
        return made

    yield make
    for made in clients:
        made.close()


def fresh(tag: str) -> str:
    return f"console-{tag}-{uuid.uuid4().hex[:8]}"


def test_users_timeline_and_memory_as_of_a_moment(client) -> None:  # type: ignore[no-untyped-def]
    admin, reader = client(), client("acme-reader")
    user = fresh("replay")
    tea = admin.add(user, "The user drinks green tea").id
    coffee = admin.add(user, "The user drinks coffee at night", memory_type="episodic").id
    time.sleep(0.05)  # the moments before and after the vote must differ
    before_vote = datetime.now(timezone.utc)
    time.sleep(0.05)
    voted = admin.feedback(user, coffee, "outdated", note="quit coffee")
    assert voted.status == "expired" and voted.effective_importance == 0.5
    admin.update(user, tea, content="The user drinks jasmine tea")

    events = reader.timeline(user).events
    assert [(e.action, e.memory_id, e.content, e.status_after) for e in events] == [
        ("created", tea, "The user drinks green tea", "active"),
        ("created", coffee, "The user drinks coffee at night", "active"),
        ("feedback", coffee, "The user drinks coffee at night", "expired"),
        ("updated", tea, "The user drinks jasmine tea", "active"),
    ]
    assert events[2].detail == {"signal": "outdated", "note": "quit coffee", "feedback_offset": 0.0,
                                "effective_importance": 0.5}
    page = reader.timeline(user, limit=2)
    assert len(page.events) == 2 and [e.id for e in reader.timeline(user, cursor=page.next_cursor).events] == [
        e.id for e in events[2:]]

    held = {m.id for m in reader.list(user, as_of=before_vote).memories}
    assert held == {tea, coffee} and {m.id for m in reader.list(user).memories} == {tea}
    then = reader.search(user, "what does the user drink at night", as_of=before_vote, min_score=0).memories
    assert coffee in [h.id for h in then]
    assert coffee not in [h.id for h in reader.search(user, "what does the user drink at night", min_score=0).memories]

    found = reader.list_users(prefix=user).users
    assert [u.user_id for u in found] == [user]
    assert (found[0].memories.active, found[0].memories.expired, found[0].by_type.semantic) == (1, 1, 1)
    assert found[0].last_activity is not None
    admin.add(user + "-b", "Another user of the same prefix")
    first = reader.list_users(limit=1, prefix=user)
    assert [u.user_id for u in first.users] == [user] and first.next_cursor is not None
    second = reader.list_users(limit=1, prefix=user, cursor=first.next_cursor)
    assert [u.user_id for u in second.users] == [user + "-b"] and second.next_cursor is None

    with pytest.raises(PermissionDeniedError) as agent:
        client("acme-planner").list_users()
    assert agent.value.code == "agent_forbidden"


def test_a_consolidation_dry_run_is_read_before_the_real_run(client) -> None:  # type: ignore[no-untyped-def]
    admin = client()
    user = fresh("dry")
    ids = admin.add_many([{"user_id": user, "content": "The user is allergic to peanuts"},
                          {"user_id": user, "content": "The user is allergic to peanuts!"},
                          {"user_id": user, "content": "The user plays the cello"}]).ids
    job = admin.wait_for_job(admin.consolidate(user, dry_run=True).job_id, timeout=300)
    assert job.state == "succeeded" and job.kind == "consolidation", job
    report = job.report or {}
    assert report["dry_run"] is True and report["memories_merged"] == 1
    (cluster,) = report["clusters"]
    assert {m["id"] for m in cluster["members"]} == set(ids[:2]) and cluster["members"][0] == cluster["canonical"]
    assert cluster["links"] and cluster["links"][0]["reason"] and cluster["why"]
    plan = job.plan  # the same report, typed
    assert plan is not None and plan.memories_merged == 1 and plan.clusters[0].canonical.id == cluster["canonical"]["id"]
    assert [m.id for m in plan.clusters[0].members] == [m["id"] for m in cluster["members"]]
    assert {m.status for m in admin.iter_memories(user, status="all")} == {"active"}  # nothing changed
    # A reader lists the jobs; an agent's key reads the dry run without the memories it quotes.
    listed = client("acme-reader").list_jobs(kind="consolidation", limit=200)
    assert job.id in [j.id for j in listed.jobs]
    assert "clusters" not in (client("acme-planner").get_job(job.id).report or {})
    real = admin.wait_for_job(admin.consolidate(user).job_id, timeout=300)
    assert real.state == "succeeded" and real.report["memories_merged"] == 1
    assert len(admin.list(user).memories) == 2
    with pytest.raises(PermissionDeniedError):
        client("acme-writer").consolidate(user, dry_run=True)


def test_feedback_needs_a_writer_is_rate_limited_and_outdated_is_restorable(client) -> None:  # type: ignore[no-untyped-def]
    admin = client()
    user = fresh("vote")
    memory = admin.add(user, "The user prefers window seats", importance=0.5).id
    liked = client("acme-writer").feedback(user, memory, "useful", note="they said so again")
    assert liked.importance == 0.5 and liked.feedback_offset == pytest.approx(0.3)
    assert liked.effective_importance == pytest.approx(0.8, abs=1e-3)
    hit = admin.search(user, "window seats").memories[0]
    assert hit.scores.importance == pytest.approx(0.8, abs=1e-3)
    with pytest.raises(PermissionDeniedError):
        client("acme-reader").feedback(user, memory, "wrong")
    gone = admin.feedback(user, memory, "outdated")
    assert gone.status == "expired" and admin.search(user, "window seats").memories == []
    with pytest.raises(ConflictError):
        admin.feedback(user, memory, "outdated")
    assert admin.restore(user, memory).status == "active"
    assert [e.action for e in admin.history(user, memory)] == ["created", "feedback", "feedback", "restored"]
    # The votes of one key a minute are limited, each answered 429 with when to retry.
    voter = client("acme-support-admin", max_retries=0)
    mine = voter.add(user, "The support bot's own note").id
    answers, started = [], time.monotonic()
    while 429 not in answers and len(answers) < 4 * FEEDBACK_PER_MINUTE:
        try:
            voter.feedback(user, mine, "useful")
            answers.append(200)
        except RateLimitedError as exc:
            assert exc.retry_after is not None and exc.retry_after >= 1
            answers.append(429)
    # The bucket refills as the minute goes: a slow machine gets the votes that came back meanwhile.
    refilled = (time.monotonic() - started) * FEEDBACK_PER_MINUTE / 60
    assert 429 in answers and answers.count(200) <= FEEDBACK_PER_MINUTE + refilled + 1, answers


def test_an_agents_private_memories_are_read_by_it_alone(client, serve_app) -> None:  # type: ignore[no-untyped-def]
    planner, support, admin = client("acme-planner"), client("acme-support"), client()
    user = fresh("agents")
    shared = planner.add(user, "The user flies to Oslo on Friday").id
    private = planner.add(user, "The planner thinks the user dislikes early flights", visibility="private").id
    assert admin.get(user, private).agent_id == "planner" and admin.get(user, private).visibility == "private"
    assert admin.get(user, shared).visibility == "shared"
    query = "what does the user think about flights"
    assert {h.id for h in planner.search(user, query, min_score=0).memories} == {shared, private}
    assert {h.id for h in support.search(user, query, min_score=0).memories} == {shared}
    assert {h.id for h in admin.search(user, query, min_score=0).memories} == {shared, private}
    assert {m.id for m in support.list(user).memories} == {shared}
    assert {e.memory_id for e in support.timeline(user).events} == {shared}
    for read in (lambda: support.get(user, private), lambda: support.history(user, private),
                 lambda: support.update(user, private, importance=0.9), lambda: support.delete(user, private),
                 lambda: support.feedback(user, private, "wrong")):
        with pytest.raises(NotFoundError):
            read()
    with pytest.raises(PermissionDeniedError) as other:
        support.add(user, "pretending to be the planner", agent_id="planner")
    assert other.value.code == "agent_forbidden"
    with pytest.raises(PermissionDeniedError) as erase:
        client("acme-support-admin").erase_user(user)
    assert erase.value.code == "agent_forbidden"
    context = support.context(user, query)
    assert "dislikes early flights" not in context.text

    async def through_the_async_client() -> set[str]:
        async with AsyncMemoryClient(str(serve_app["url"]), api_key="acme-support") as remote:
            page = await remote.list(user, as_of=datetime.now(timezone.utc))
            return {m.id for m in page.memories}

    assert asyncio.run(through_the_async_client()) == {shared}


def test_the_async_client_reads_and_steers_as_the_sync_one(serve_app) -> None:  # type: ignore[no-untyped-def]
    """Every console call of the async client, typed as the sync client's, against the real app."""
    user = fresh("async")

    async def calls() -> None:
        url = str(serve_app["url"])
        async with AsyncMemoryClient(url, api_key="acme-admin") as admin, \
                AsyncMemoryClient(url, api_key="acme-reader") as reader:
            first = (await admin.add(user, "The user collects vinyl records")).ids[0]
            ids = {first, (await admin.add(user, "The user collects vinyl records!")).ids[0]}
            moment = datetime.now(timezone.utc)
            voted = await admin.feedback(user, first, "wrong", note="not what was asked")
            assert voted.feedback_offset == pytest.approx(-0.3) and voted.effective_importance == pytest.approx(0.2)
            page = await reader.list_users(prefix=user)
            assert [(u.user_id, u.memories.active, u.by_type.semantic) for u in page.users] == [(user, 2, 2)]
            events = (await reader.timeline(user, since=moment - timedelta(minutes=5))).events
            assert [e.action for e in events] == ["created", "created", "feedback"]
            assert events[-1].detail is not None and events[-1].detail["signal"] == "wrong"
            assert len((await reader.list(user, as_of=moment)).memories) == 2
            hits = (await reader.search(user, "vinyl records", as_of=moment, min_score=0)).memories
            assert {h.id for h in hits} >= {first}
            accepted = await admin.consolidate(user, dry_run=True)
            job = await admin.wait_for_job(accepted.job_id, timeout=300)
            assert job.state == "succeeded" and job.plan is not None and job.plan.clusters_found == 1
            assert {m.id for m in job.plan.clusters[0].members} == set(ids)
            jobs = await reader.list_jobs(kind="consolidation", state="succeeded", limit=200)
            assert job.id in [j.id for j in jobs.jobs] and all(j.kind == "consolidation" for j in jobs.jobs)

    asyncio.run(calls())
