"""Limits without a server: the per-replica token buckets that add up to a key's cluster-wide rate,
what a 429 says, and the per-org quota on a real store."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from agent_memory.errors import AgentMemoryError, PermissionDeniedError, UnavailableError
from agent_memory.models import NewMemory, OrgScope, Scope, parse_input
from agent_memory.service import MemoryService
from serve_app.errors import QUEUE_FULL_RETRY_S, RateLimitedError, error_response
from serve_app.limits import OrgQuota, RateLimiter, retry_after


class Clock:
    """Monotonic seconds that tests move."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_passes_a_minutes_worth_then_one_request_per_token() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    assert all(limiter.take("k", 60) == 0.0 for _ in range(60))
    wait = limiter.take("k", 60)
    assert wait == pytest.approx(1.0) and retry_after(wait) == 1
    assert limiter.take("other-key", 60) == 0.0  # buckets are per key
    clock.now += 1.0
    assert limiter.take("k", 60) == 0.0 and limiter.take("k", 60) > 0
    assert retry_after(0.01) == 1 and retry_after(29.2) == 30


def test_each_replica_holds_its_share_of_the_limit() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    limiter.replicas = 4
    assert sum(limiter.take("k", 60) == 0.0 for _ in range(20)) == 15
    assert limiter.take("k", 60) == pytest.approx(4.0)  # 15 a minute: one every 4 s
    # Fewer replicas later: the share grows as the tokens come back.
    limiter.replicas = 2
    clock.now += 4.0
    assert limiter.take("k", 60) == 0.0
    # A limit under the replica count is still one request per replica.
    limiter.replicas = 8
    assert limiter.take("tiny", 2) == 0.0 and retry_after(limiter.take("tiny", 2)) == 60


def test_replicas_sized_by_their_count_hold_the_limit_across_the_cluster() -> None:
    # Four replicas taking turns (as HAProxy spreads requests), ten requests a second for ten
    # minutes against a limit of 60 a minute: about 60 a minute pass in all, not 4 x 60.
    def passed(replicas_known: int) -> int:
        clock = Clock()
        replicas = [RateLimiter(clock) for _ in range(4)]
        for limiter in replicas:
            limiter.replicas = replicas_known
        passed = 0
        for i in range(6000):
            clock.now += 0.1
            passed += replicas[i % 4].take("k", 60) == 0.0
        return passed

    assert 600 <= passed(4) <= 660  # ten minutes' worth, and one minute's burst at most
    assert passed(1) > 2400  # what per-replica limits unaware of each other let through


def test_every_429_says_when_to_retry() -> None:
    limited = error_response(RateLimitedError("more than 2 requests a minute for this key; retry in 30 s", retry_after=30))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "30"
    assert json.loads(limited.body)["error"] == {
        "code": "rate_limited", "message": "more than 2 requests a minute for this key; retry in 30 s", "retry_after_s": 30,
    }
    full = error_response(UnavailableError("the extraction queue is full", code="queue_full"))
    assert full.status_code == 429 and full.headers["retry-after"] == str(QUEUE_FULL_RETRY_S)
    assert json.loads(full.body)["error"]["retry_after_s"] == QUEUE_FULL_RETRY_S
    # Other errors carry no Retry-After.
    assert "retry-after" not in error_response(UnavailableError("model down")).headers
    over = error_response(PermissionDeniedError("over the quota", code="quota_exceeded"))
    assert over.status_code == 403 and json.loads(over.body)["error"]["code"] == "quota_exceeded"


# -- the per-org quota, on a real store ---------------------------------------------------------


def _quota(service: MemoryService, clock: Clock, **by_org: int) -> OrgQuota:
    store = service.store
    return OrgQuota(0, by_org, refresh_s=30.0, clock=clock,
                    count=lambda org_id: store.count_active(OrgScope(org_id)),
                    existing=lambda org_id, ids: len(store.origin_hashes(OrgScope(org_id), ids)))


async def _write(service: MemoryService, quota: OrgQuota, org_id: str, contents: list[str],
                 idempotency_key: str | None = None) -> set[str]:
    """A write as the Writer makes it: admitted by the quota, committed, settled."""
    records = [service.prepare(org_id, parse_input(NewMemory, {"user_id": "u1", "content": c}),
                               idempotency_key=idempotency_key, position=i) for i, c in enumerate(contents)]
    held = await quota.admit(org_id, [r.id for r in records])
    created: set[str] = set()
    try:
        (result,) = service.write_batch(org_id, [records], actor="test")
        assert not isinstance(result, Exception)
        created = result.created
    finally:
        quota.settle(org_id, held, len(created))
    return created


def test_count_active_memories_counts_one_orgs_active_rows(service: MemoryService) -> None:
    service.add_many("acme", [{"user_id": "u1", "content": f"fact {i}"} for i in range(3)], actor="test")
    service.add("globex", {"user_id": "u1", "content": "another org"}, actor="test")
    assert service.store.count_active(OrgScope("acme")) == 3
    first = service.list(Scope.user("acme", "u1"), limit=1).records[0]
    service.delete(Scope.user("acme", "u1"), first.id, actor="test")
    assert service.store.count_active(OrgScope("acme")) == 2
    assert service.store.count_active(OrgScope("nobody")) == 0


def test_a_write_over_the_quota_is_refused_whole_and_stores_nothing(service: MemoryService) -> None:
    quota = _quota(service, Clock(), small=3)

    async def scenario() -> None:
        assert len(await _write(service, quota, "small", ["tea", "coffee"], idempotency_key="first")) == 2
        with pytest.raises(PermissionDeniedError, match="holds 2 of its quota of 3") as refused:
            await _write(service, quota, "small", ["juice", "water"])
        assert refused.value.code == "quota_exceeded"
        assert service.store.count_active(OrgScope("small")) == 2
        # A retry of a stored write takes no room: it is answered, and adds nothing.
        assert await _write(service, quota, "small", ["tea", "coffee"], idempotency_key="first") == set()
        assert len(await _write(service, quota, "small", ["juice"])) == 1
        with pytest.raises(PermissionDeniedError):
            await quota.check_room("small")  # conversations and imports: nothing more once at the cap
        await quota.check_room("unlimited")
        assert await _write(service, quota, "unlimited", [f"note {i}" for i in range(5)])

    asyncio.run(scenario())
    assert service.store.count_active(OrgScope("small")) == 3


def test_concurrent_writes_hold_room_until_their_commit(service: MemoryService) -> None:
    quota = _quota(service, Clock(), small=2)

    async def scenario() -> list[object]:
        admits = [quota.admit("small", [f"id-{i}"]) for i in range(3)]
        return await asyncio.gather(*admits, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert outcomes[:2] == [1, 1]
    assert isinstance(outcomes[2], AgentMemoryError) and outcomes[2].code == "quota_exceeded"


def test_the_count_is_refreshed_to_see_deletes(service: MemoryService) -> None:
    clock = Clock()
    quota = _quota(service, clock, small=2)

    async def scenario() -> None:
        await _write(service, quota, "small", ["tea", "coffee"])
        with pytest.raises(PermissionDeniedError):
            await quota.check_room("small")
        doomed = service.list(Scope.user("small", "u1"), limit=1).records[0]
        service.delete(Scope.user("small", "u1"), doomed.id, actor="test")
        with pytest.raises(PermissionDeniedError):
            await quota.check_room("small")  # until the next count, the cached count holds
        clock.now += 31
        # A stale count answers at once and is read again in the background.
        with pytest.raises(PermissionDeniedError):
            await quota.check_room("small")
        deadline = time.monotonic() + 120
        while True:
            await asyncio.sleep(0.02)
            try:
                await quota.check_room("small")
                break
            except PermissionDeniedError:
                assert time.monotonic() < deadline, "the recount did not see the delete"
        assert len(await _write(service, quota, "small", ["juice"])) == 1

    asyncio.run(scenario())
