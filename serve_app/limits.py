"""Limits that hold on a cluster: per-key request rates across every ingress replica, and per-org
quotas on stored memories.

Rate limits are token buckets kept in each ingress replica, each holding the replica's share of
the key's limit: the limit divided by the deployment's running replicas, a count refreshed from
Serve's own view every few seconds (`follow_replicas`). A request costs a dictionary lookup and
some arithmetic, no round trip; docs/security.md says why this and not a shared counter.

Quotas are kept by the Writer, which every API write passes through (`OrgQuota`): an org's active
memories are counted once and then recounted every `quota_refresh_seconds`; in between, the
Writer adds what it commits itself and holds back the rows of writes still in its queue. With
several Writer shards, one shard per org keeps its quota for all (`QuotaRoute`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_memory.errors import PermissionDeniedError, UnavailableError
from serve_app.errors import unwrap_remote
from serve_app.shards import shard_name, shard_of

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

# Serve's own logger: with `logging_config: {encoding: JSON}` every line is JSON with the request id.
log = logging.getLogger("ray.serve")

# How often an ingress replica asks Serve how many replicas its deployment runs. Autoscaling acts
# on windows of tens of seconds; for a few seconds after a change the shares are off by its step.
REPLICA_REFRESH_S = 5.0


class RateLimiter:
    """Per-key token buckets of one ingress replica, each this replica's share of the key's limit.

    A key limited to `n` requests a minute across the cluster gets, in each of `replicas` replicas,
    a bucket of `n / replicas` tokens refilled at that many a minute: a full minute's share may be
    spent at once, then requests pass as tokens come back. A share is at least one request, so a
    limit below the replica count lets up to one request a minute through per replica.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, when counted)
        self.replicas = 1

    def take(self, key: str, per_minute: int) -> float:
        """Spend one of `key`'s requests: 0.0 when it may pass, else the seconds until one may."""
        share = max(1.0, per_minute / self.replicas)
        now = self._clock()
        tokens, then = self._buckets.get(key, (share, now))
        # A share that shrank (more replicas now) caps what was saved up under the old one.
        tokens = min(share, tokens + (now - then) * share / 60.0)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) * 60.0 / share


def retry_after(wait_s: float) -> int:
    """A Retry-After value: whole seconds, at least one."""
    return max(1, math.ceil(wait_s))


def running_replicas(status: Any, app_name: str, deployment: str) -> int:
    """The RUNNING replicas of a deployment in a `serve.status()` answer (at least 1: this one)."""
    app = status.applications.get(app_name)
    overview = app.deployments.get(deployment) if app is not None else None
    if overview is None:
        return 1
    running = sum(n for state, n in overview.replica_states.items() if str(getattr(state, "value", state)) == "RUNNING")
    return max(1, running)


async def follow_replicas(limiter: RateLimiter, every_s: float = REPLICA_REFRESH_S) -> None:
    """Keep `limiter.replicas` at the running replicas of this replica's deployment, for ever.

    `serve.status()` is one call to the Serve controller (a few milliseconds, in a worker thread),
    every `every_s` seconds per replica, whatever the request rate. When it fails the last count
    stays.
    """
    from ray import serve

    loop = asyncio.get_running_loop()
    while True:
        try:
            context = serve.get_replica_context()
            status = await loop.run_in_executor(None, serve.status)
            replicas = running_replicas(status, context.app_name, context.deployment)
            if replicas != limiter.replicas:
                log.info("%d ingress replicas running: each holds 1/%d of every key's rate limit", replicas, replicas)
            limiter.replicas = replicas
        except Exception as exc:  # noqa: BLE001 - the controller restarting: keep the last count
            log.warning("could not count the ingress replicas, rate limits keep 1/%d shares: %s", limiter.replicas, exc)
        await asyncio.sleep(every_s)


@dataclass
class _OrgCount:
    stored: int  # active memories at the last count, plus what this Writer committed since
    counted_at: float
    pending: int = 0  # rows of admitted writes not yet committed
    added: int = 0  # memories this Writer's commits created, in all (what a recount adds to its read)
    recount: asyncio.Task[None] | None = None


class OrgQuota:
    """Caps on each org's active memories, checked by the Writer before it accepts a write.

    An org's count is read from the store the first time it writes, then kept current by the
    Writer: rows it admits are held back until their commit, and what the commit created is added.
    Every `refresh_s` seconds the count is read again (in the background; writes meanwhile use the
    count they have), which brings in what the Writer does not see: deletes, consolidation,
    expiry, imports and extracted memories. So for API writes the cap holds exactly; writes that
    commit while a recount runs may be counted twice until the next one, which errs towards
    refusing; memories other paths add are seen within `refresh_s`.
    """

    def __init__(self, default: int, by_org: Mapping[str, int], *, refresh_s: float,
                 count: Callable[[str], int], existing: Callable[[str, Sequence[str]], int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._default, self._by_org, self._refresh_s = default, dict(by_org), refresh_s
        # Blocking store reads, run in worker threads: the org's active memories, and how many of
        # some ids the org already holds (an idempotent retry of a stored write adds nothing).
        self._count, self._existing = count, existing
        self._clock = clock
        self._orgs: dict[str, _OrgCount] = {}
        self._first_count: dict[str, asyncio.Lock] = {}

    def limit_of(self, org_id: str) -> int:
        """The org's cap on active memories (0: none)."""
        return self._by_org.get(org_id, self._default)

    async def admit(self, org_id: str, ids: Sequence[str]) -> int:
        """Hold back room for a write of these memory ids, or raise PermissionDeniedError
        (`quota_exceeded`) and write nothing; the rows held, to pass to `settle` after the commit."""
        limit = self.limit_of(org_id)
        if not limit:
            return 0
        rows = len(set(ids))
        org = await self._counted(org_id)
        if org.stored + org.pending + rows > limit:
            # Near the cap only: memories the org already holds (a retried write) take no room.
            held = await asyncio.get_running_loop().run_in_executor(None, self._existing, org_id, list(set(ids)))
            rows -= held
            if org.stored + org.pending + rows > limit:
                raise self._exceeded(org_id, org, limit, rows)
        org.pending += rows
        return rows

    async def reserve(self, org_id: str, rows: int) -> int:
        """Hold back room for `rows` memories made active again without a write (a restore), or
        raise PermissionDeniedError (`quota_exceeded`); the rows held, to pass to `settle`."""
        limit = self.limit_of(org_id)
        if not limit or rows <= 0:
            return 0
        org = await self._counted(org_id)
        if org.stored + org.pending + rows > limit:
            raise self._exceeded(org_id, org, limit, rows)
        org.pending += rows
        return rows

    def settle(self, org_id: str, held: int, created: int) -> None:
        """After a write's commit (or its failure, with `created` 0): its rows are stored, or freed."""
        org = self._orgs.get(org_id)
        if org is not None and (held or created):
            org.pending = max(0, org.pending - held)
            org.stored += created
            org.added += created

    async def check_room(self, org_id: str) -> None:
        """Raise PermissionDeniedError (`quota_exceeded`) if the org is at its cap: for work that adds
        memories later (conversation extraction, imports) and cannot be held back row by row."""
        limit = self.limit_of(org_id)
        if not limit:
            return
        org = await self._counted(org_id)
        if org.stored + org.pending >= limit:
            raise self._exceeded(org_id, org, limit, 0)

    def _exceeded(self, org_id: str, org: _OrgCount, limit: int, rows: int) -> PermissionDeniedError:
        held = org.stored + org.pending
        asked = f"{rows} more would make {held + rows}" if rows else "it takes no more"
        return PermissionDeniedError(
            f"org {org_id!r} holds {held} of its quota of {limit} active memories; {asked}. Nothing was "
            "stored: delete memories, or ask the operator for a higher quota", code="quota_exceeded",
        )

    async def _counted(self, org_id: str) -> _OrgCount:
        """The org's count: read now the first time (concurrent first writes wait for one read),
        and recounted in the background once it is `refresh_s` old."""
        org = self._orgs.get(org_id)
        if org is None:
            async with self._first_count.setdefault(org_id, asyncio.Lock()):
                org = self._orgs.get(org_id)
                if org is None:
                    org = self._orgs[org_id] = _OrgCount(stored=await self._read_count(org_id),
                                                         counted_at=self._clock())
        elif self._clock() - org.counted_at >= self._refresh_s and org.recount is None:
            org.counted_at = self._clock()
            org.recount = asyncio.get_running_loop().create_task(self._recount(org_id, org))
        return org

    async def _read_count(self, org_id: str) -> int:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, self._count, org_id)
        except Exception as exc:
            raise UnavailableError(f"cannot count the memories of org {org_id!r} for its quota: {exc}") from exc

    async def _recount(self, org_id: str, org: _OrgCount) -> None:
        # Commits settled while the count runs are added to it: never lost, and counted twice
        # only if they landed before the read.
        added = org.added
        try:
            stored = await self._read_count(org_id)
            org.stored, org.counted_at = stored + org.added - added, self._clock()
        except UnavailableError as exc:  # the store unreachable a moment: the count stays
            log.warning("%s; the count before stays", exc)
        finally:
            org.recount = None


class QuotaRoute:
    """Where an org's memory quota is kept. With one Writer, here; with several shards, by one
    shard per org (its `keeper`), which every shard asks before it admits a write and tells what
    its commit created: the cap then holds across shards as it does for one Writer (OrgQuota).
    Orgs without a quota cost no extra call."""

    def __init__(self, local: OrgQuota, shard: int, shards: int) -> None:
        self.local, self._shard, self._shards = local, shard, shards
        self._handles: dict[int, DeploymentHandle] = {}
        self._settling: set[asyncio.Task[Any]] = set()

    def _remote(self, org_id: str) -> DeploymentHandle | None:
        """The keeper's handle, or None where this shard keeps the org's quota (or it has none)."""
        keeper = shard_of(org_id, QUOTA_KEY, self._shards)
        if keeper == self._shard or not self.local.limit_of(org_id):
            return None
        if keeper not in self._handles:
            from ray import serve

            app = serve.get_replica_context().app_name
            self._handles[keeper] = serve.get_deployment_handle(shard_name(keeper), app_name=app)
        return self._handles[keeper]

    async def admit(self, org_id: str, ids: list[str]) -> int:
        remote = self._remote(org_id)
        if remote is None:
            return await self.local.admit(org_id, ids)
        return await _unwrapped(remote.quota_admit.remote(org_id, ids))

    async def reserve(self, org_id: str, rows: int) -> int:
        remote = self._remote(org_id)
        if remote is None:
            return await self.local.reserve(org_id, rows)
        return await _unwrapped(remote.quota_reserve.remote(org_id, rows))

    async def check_room(self, org_id: str) -> None:
        remote = self._remote(org_id)
        if remote is None:
            await self.local.check_room(org_id)
        else:
            await _unwrapped(remote.check_room.remote(org_id))

    def settle(self, org_id: str, held: int, created: int) -> None:
        """After a commit (called from its future's callback, on the replica's loop)."""
        remote = self._remote(org_id)
        if remote is None:
            self.local.settle(org_id, held, created)
        elif held or created:
            task = asyncio.get_running_loop().create_task(self._settle_remote(remote, org_id, held, created))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)

    @staticmethod
    async def _settle_remote(remote: DeploymentHandle, org_id: str, held: int, created: int) -> None:
        try:
            await remote.quota_settle.remote(org_id, held, created)
        except Exception as exc:  # noqa: BLE001 - the keeper restarted: it counts the org afresh
            log.warning("could not settle org %s's quota on its keeper shard: %s", org_id, exc)


# What an org's quota keeper is chosen by: shard_of(org, QUOTA_KEY), a name no user id can take.
QUOTA_KEY = "\x00quota"


async def _unwrapped(response: Any) -> Any:
    """A shard's answer, its error as the shard raised it (Ray wraps errors of remote calls)."""
    try:
        return await response
    except Exception as exc:
        raise unwrap_remote(exc) from None
