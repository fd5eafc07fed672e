"""The Writer deployment: every change to the store, in arrival order, concurrent writes batched.

Writes that arrive together are embedded in one model call and committed in one LanceDB commit;
other changes (update, delete, erasure, conversation turns) take their turn in the same queue.
Beside the commits the Writer keeps the store compact: it folds the small fragments new commits
leave and, on FullOptimizeSchedule, runs a full optimize.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_memory.errors import NotFoundError, UnavailableError
from agent_memory.models import MemoryRecord, NewMemory, OrgScope, parse_input, utcnow
from agent_memory.service import WriteResult
from agent_memory.settings import Settings
from jobs.conversations import resume_pending_jobs, submit_conversation
from serve_app import metrics
from serve_app.embedder import RemoteEmbedder
from serve_app.errors import unwrap_remote
from serve_app.limits import OrgQuota
from serve_app.shards import shard_name, shard_of
from storage import open_store
from storage.connect import open_service
from storage.leases import Leases
from storage.maintenance import PURGE_SETTLE_S
from storage.tables import CommitRetries

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

# Serve's own logger: its JSON encoding (set in cluster/serve_config.yaml) adds request ids.
log = logging.getLogger("ray.serve")
# A failed erasure purge is tried again after 30 s, 2 min, 8 min and 32 min, then at the next start.
PURGE_RETRY_S = 30.0
PURGE_RETRIES = 4


@dataclass
class _Operation:
    kind: str  # "write" or "call"
    org_id: str
    future: asyncio.Future[Any]
    records: list[MemoryRecord] = field(default_factory=list)
    actor: str = ""  # a write's audit actor: the caller's key name
    call: Callable[[], Any] | None = None


def _settle(future: asyncio.Future[Any], outcome: Any) -> None:
    """Give a request its outcome, unless it was cancelled meanwhile (its client went away)."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _succeeded(done: asyncio.Future[Any]) -> bool:
    """Whether a finished change went through (not failed, not cancelled)."""
    return not done.cancelled() and done.exception() is None


def _created(done: asyncio.Future[WriteResult]) -> int:
    """How many memories a finished write created (0 when it failed or was cancelled)."""
    if done.cancelled() or done.exception() is not None:
        return 0
    return len(done.result().created)


class FullOptimizeSchedule:
    """When the Writer's full compaction is due: after `every` commits, and not within
    `min_seconds` of the previous one (the first may come as soon as the commits are there).

    A full pass rewrites every index, and every replica then reads them afresh. At 1M memories,
    one every 100 commits cut 8 clients searching beside one writing from 107 to 29 searches/s
    (the ingress's CPU per search 9.8 -> 27 ms).
    """

    def __init__(self, every: int, min_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.min_seconds, self._clock = every, min_seconds, clock
        self._commits = 0
        self._last = -math.inf

    def commit(self, *, busy: bool = False) -> bool:
        """Count a commit; True when a pass should start now (`busy`: one is still running)."""
        self._commits += 1
        now = self._clock()
        if busy or self._commits < self.every or now - self._last < self.min_seconds:
            return False
        self._commits, self._last = 0, now
        return True


class UpkeepLease:
    """Whether this Writer keeps the store now (folds, indexes, full compactions): with several
    shards, the one holding the `writer-upkeep` lease; with one, always.

    The lease (storage.leases, on the jobs table) is taken or renewed at most every `ttl_s / 3`
    and expires after `ttl_s`, so a shard that died hands the upkeep to another within a minute.
    """

    NAME = "writer-upkeep"

    def __init__(self, leases: Leases, owner: str, *, shared: bool, ttl_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._leases, self._owner, self._shared = leases, owner, shared
        self._ttl = timedelta(seconds=ttl_s)
        self._clock = clock
        self._checked = -math.inf
        self._held = not shared

    def held(self) -> bool:
        if not self._shared:
            return True
        now = self._clock()
        if now - self._checked >= self._ttl.total_seconds() / 3:
            self._checked = now
            try:
                self._held = self._leases.acquire(self.NAME, self._owner, self._ttl, utcnow())
            except Exception as exc:  # noqa: BLE001 - storage hiccup: not the holder until the next try
                log.warning("could not take or renew the upkeep lease: %s", exc)
                self._held = False
        return self._held

    def release(self) -> None:
        if self._shared and self._held:
            try:
                self._leases.release(self.NAME, self._owner, self._ttl, utcnow())
            except Exception:  # noqa: BLE001 - it expires on its own
                log.warning("could not release the upkeep lease; it expires in %s", self._ttl)
            self._held = False


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


class WriterDeployment:
    """All changes go through here, in arrival order; concurrent writes share one commit
    (`app.build` makes it the `Writer` deployment).

    Writes waiting in the same short window (or up to a row cap) are embedded in one model call
    and committed in one LanceDB commit; a request is acknowledged only after its commit. Writes
    that arrive while a commit runs form the next one; the window is waited only while writes
    come concurrently, so a lone client's write is committed at once.
    Changes other than writes (update, delete, erase, conversations) take their turn in the
    same queue, so the writes of one user are applied in the order they arrive.
    """

    async def __init__(self, settings: Settings, embedder: DeploymentHandle, shard: int = 0) -> None:
        self._settings = settings
        self._shard, self._shards = shard, settings.writer.shards
        info = await embedder.info.remote()
        store = open_store(settings, embedding_model=info["name"], embedding_dim=info["dim"])
        remote = RemoteEmbedder(
            embedder, info["name"], info["dim"], settings.embedding.timeout_s, asyncio.get_running_loop()
        )
        # With the maintenance interface: erasure purges old versions through it.
        self._service = open_service(settings, embedder=remote, store=store, with_maintenance=True)
        # Every API write passes through here, so the per-org quota is kept here (serve_app.limits).
        limits = settings.limits
        self._quota = QuotaRoute(OrgQuota(
            limits.quota_memories_per_org, limits.quota_memories_by_org, refresh_s=limits.quota_refresh_seconds,
            count=lambda org_id: store.count_active(OrgScope(org_id)),
            existing=lambda org_id, ids: len(store.origin_hashes(OrgScope(org_id), ids)),
        ), shard, self._shards)
        # One thread: commits happen one after another, in queue order.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit")
        self._loop = asyncio.get_running_loop()
        self._started = utcnow()  # erasures from before this are resumed, later ones have their purge on the way
        self._queue: list[_Operation] = []
        self._wake = asyncio.Event()
        self._writes = metrics.writes()
        self._commit_rows = metrics.commit_rows()
        self._retries = metrics.commit_retries()
        self._loop_task: asyncio.Task[None] | None = None
        self._full_passes = FullOptimizeSchedule(
            settings.writer.optimize_every,
            # Without the upkeep's folds this pass is the only compaction: no minimum gap then.
            settings.writer.optimize_min_seconds if settings.writer.upkeep_seconds > 0 else 0.0,
        )
        self._concurrent = True
        self._upkeep_lease = UpkeepLease(
            self._service.maintenance.leases, f"{shard_name(shard)}:{uuid.uuid4().hex[:8]}", shared=self._shards > 1
        )
        self._maintenance = ThreadPoolExecutor(max_workers=1, thread_name_prefix="optimize")
        self._optimizing = threading.Lock()
        self._stopping = threading.Event()
        self._fold_due = threading.Event()
        self._commits_since_fold = 0
        if settings.writer.upkeep_seconds > 0:
            threading.Thread(target=self._upkeep, name="upkeep", daemon=True).start()
        # Conversation jobs a previous replica left unfinished are queued again now, not on the
        # first write: starting the scheduler actor takes seconds of CPU.
        self._resuming = asyncio.get_running_loop().create_task(self._resume_jobs())

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._drain())

    async def _submit(self, op: _Operation) -> Any:
        self._ensure_loop()
        self._queue.append(op)
        self._wake.set()
        # Shielded: a request cancelled while it waits (its client went away) leaves its change
        # queued, and the change's own bookkeeping (quota, purge) still sees how it ended.
        return await asyncio.shield(op.future)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._concurrent:
                # A short window lets concurrent writers join the same commit. A lone writer (the
                # last commit carried one request) is not kept waiting for company.
                await asyncio.sleep(self._settings.writer.window_ms / 1000)
            while self._queue:
                batch = self._take_batch()
                if batch[0].kind == "call":
                    op = batch[0]
                    try:
                        result = await loop.run_in_executor(self._executor, op.call)  # type: ignore[arg-type]
                    except Exception as exc:
                        _settle(op.future, exc)
                    else:
                        _settle(op.future, result)
                    continue
                try:
                    results = await loop.run_in_executor(self._executor, self._commit, batch)
                except Exception as exc:
                    for op in batch:
                        _settle(op.future, exc)
                    continue
                finally:
                    # Company: several requests in this commit, or more arrived while it ran.
                    self._concurrent = len(batch) > 1 or bool(self._queue)
                for op, outcome in zip(batch, results, strict=True):
                    _settle(op.future, outcome)

    def _take_batch(self) -> list[_Operation]:
        """Consecutive writes up to the row cap, or one other operation."""
        if self._queue[0].kind == "call":
            return [self._queue.pop(0)]
        batch: list[_Operation] = []
        rows = 0
        while self._queue and self._queue[0].kind == "write" and rows < self._settings.writer.max_rows:
            op = self._queue.pop(0)
            batch.append(op)
            rows += len(op.records)
        return batch

    def _commit(self, batch: list[_Operation]) -> list[WriteResult | Exception]:
        results: dict[int, WriteResult | Exception] = {}
        by_org: dict[str, list[int]] = {}
        for i, op in enumerate(batch):
            by_org.setdefault(op.org_id, []).append(i)
        for org_id, indexes in by_org.items():
            outcome = self._service.write_batch(org_id, [batch[i].records for i in indexes],
                                                actor=[batch[i].actor for i in indexes])
            for i, result in zip(indexes, outcome, strict=True):
                results[i] = result
        self._commit_rows.observe(sum(len(op.records) for op in batch))
        self._retries.set(CommitRetries.count)
        self._writes.inc(sum(len(op.records) for op in batch))
        self._commits_since_fold += 1
        if self._commits_since_fold >= self._settings.writer.fold_commits:
            self._fold_due.set()  # the upkeep folds the new fragments now rather than at its next tick
        if self._full_passes.commit(busy=self._optimizing.locked()) and self._upkeep_lease.held():
            # The upkeep keeps new fragments folded, and the scalar indexes updated once enough
            # rows pile up; this full pass compacts what the folds left, brings every index (the
            # full-text one too) up to date and drops old versions. It takes a second or more, so
            # it runs beside the commits instead of holding the queue (a commit that races it is
            # retried like any commit conflict).
            self._maintenance.submit(self._optimize)
        return [results[i] for i in range(len(batch))]

    def _optimize(self) -> None:
        with self._optimizing:
            try:
                self._service.maintenance.optimize(retain=timedelta(hours=1))
            except Exception:
                log.exception("periodic optimize failed; writes continue")

    def _upkeep(self) -> None:
        """Every `writer_upkeep_seconds`, or sooner after `writer_fold_commits` commits, fold the
        small fragments that recent commits left outside the indexes (this replica's writes and
        their audit events, the ingress replicas' access-log flushes) and index them once
        `writer_reindex_rows` pile up (StoreMaintenance.fold_new_rows). Searches, id lookups and the
        next write's insert-if-absent would otherwise open and scan each of them."""
        tables = ("memories", "events", "access")
        maintenance, seen = self._service.maintenance, None
        while not self._stopping.is_set():
            self._fold_due.wait(self._settings.writer.upkeep_seconds)
            self._fold_due.clear()
            self._commits_since_fold = 0
            if self._stopping.is_set() or not self._upkeep_lease.held():
                continue  # stopping, or another shard keeps the store
            if not self._optimizing.acquire(blocking=False):
                continue  # a compaction or an erasure is running
            try:
                versions = [maintenance.table(name).version for name in tables]
                if versions != seen:
                    maintenance.fold_new_rows(reindex_rows=self._settings.writer.reindex_rows, tables=tables)
                    seen = [maintenance.table(name).version for name in tables]
            except Exception as exc:  # noqa: BLE001 - a commit conflict or a storage hiccup: next round
                log.warning("fragment upkeep failed, tried again in %.0f s: %s", self._settings.writer.upkeep_seconds, exc)
            finally:
                self._optimizing.release()

    def _in_turn(self, call: Callable[[], Any]) -> Any:
        """Run `call` in the queue's turn, between commits, from another thread; its result."""
        async def submit() -> Any:
            return await self._submit(_Operation("call", "", self._loop.create_future(), call=call))
        pending = asyncio.run_coroutine_threadsafe(submit(), self._loop)
        while True:  # a replica that stops meanwhile never answers: give up then (the next start resumes)
            try:
                return pending.result(timeout=1.0)
            except concurrent.futures.TimeoutError:
                if self._stopping.is_set() or self._loop.is_closed():
                    pending.cancel()
                    raise UnavailableError("the writer is stopping") from None

    def _purge(self, org_id: str, job_id: str, attempt: int = 1) -> None:
        """An erasure's purge, on the maintenance thread (after or before a compaction, never
        beside one; the upkeep's folds wait for it), while commits go on; its drop of old
        versions takes its turn in the queue. A failed purge is tried again after
        `PURGE_RETRY_S` x 4^(attempt - 1), `PURGE_RETRIES` times, then at the next start."""
        with self._optimizing:
            try:
                self._service.erasures.finish(org_id, job_id, in_turn=self._in_turn)
                return
            except Exception:
                log.exception("erasure %s: purge attempt %d failed", job_id, attempt)
        if attempt <= PURGE_RETRIES:
            self._later(PURGE_RETRY_S * 4 ** (attempt - 1), org_id, job_id, attempt + 1)

    def _later(self, delay_s: float, org_id: str, job_id: str, attempt: int) -> None:
        """Queue an erasure's purge on the maintenance thread after `delay_s` (unless stopping:
        the next start finishes it)."""
        def submit() -> None:
            if not self._stopping.is_set():
                self._maintenance.submit(self._purge, org_id, job_id, attempt)

        timer = threading.Timer(delay_s, submit)
        timer.daemon = True
        timer.start()

    def __del__(self) -> None:
        self._stopping.set()
        self._fold_due.set()
        if hasattr(self, "_upkeep_lease"):
            self._upkeep_lease.release()

    def _mine(self, org_id: str, user_id: str | None) -> bool:
        """Whether a user's changes come to this shard (what it resumes after a restart)."""
        return shard_of(org_id, user_id or "", self._shards) == self._shard

    async def add(self, org_id: str, memories: list[dict[str, Any]], idempotency_key: str | None,
                  actor: str, positions: list[int] | None = None) -> dict[str, Any]:
        """Validate and redact now, within the org's quota; commit with whatever else arrives in the
        same window (each write's events name its own `actor`). Over the quota nothing is queued and
        `quota_exceeded` is raised. `positions`: where each memory stood in the request, when this
        shard takes part of it (the ids an idempotency key derives depend on them)."""
        items = [parse_input(NewMemory, m) for m in memories]
        positions = list(range(len(items))) if positions is None else positions
        records = [
            self._service.prepare(org_id, item, idempotency_key=idempotency_key, position=position)
            for item, position in zip(items, positions, strict=True)
        ]
        held = await self._quota.admit(org_id, [r.id for r in records])
        future: asyncio.Future[WriteResult] = asyncio.get_running_loop().create_future()
        # Settled when the commit ends, even if this request is cancelled while it waits.
        future.add_done_callback(lambda done: self._quota.settle(org_id, held, _created(done)))
        result = await self._submit(_Operation("write", org_id, future, records=records, actor=actor))
        return {"ids": result.ids, "created": sorted(result.created)}

    async def check_room(self, org_id: str) -> None:
        """Raise `quota_exceeded` if the org is at its memory quota (before an import starts)."""
        await self._quota.check_room(org_id)

    # The org quotas this shard keeps for every shard (QuotaRoute).

    async def quota_admit(self, org_id: str, ids: list[str]) -> int:
        return await self._quota.local.admit(org_id, ids)

    async def quota_reserve(self, org_id: str, rows: int) -> int:
        return await self._quota.local.reserve(org_id, rows)

    async def quota_settle(self, org_id: str, held: int, created: int) -> None:
        self._quota.local.settle(org_id, held, created)

    async def run(self, org_id: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a service change (update, delete, restore, erase_user) in its turn."""
        if method not in ("update", "delete", "restore"):
            raise NotFoundError(f"no such operation {method}")
        fn = getattr(self._service, method)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if method == "restore":  # a memory active again counts against the org's quota like a write
            held = await self._quota.reserve(org_id, 1)
            future.add_done_callback(lambda done: self._quota.settle(org_id, held, held if _succeeded(done) else 0))
        result = await self._submit(_Operation("call", org_id, future, call=lambda: fn(*args, **kwargs)))
        if isinstance(result, MemoryRecord):
            return result.public()
        return result

    async def erase_user(self, org_id: str, user_id: str, actor: str) -> dict[str, Any]:
        """Delete the user's rows in their turn (gone from every read when this returns), then
        purge their bytes beside the next commits; {"job_id", "rows_deleted"}."""
        def erase() -> dict[str, Any]:
            started = self._service.erase_user(org_id, user_id, actor=actor, purge=False)
            # Scheduled here, not after the answer: a request cancelled meanwhile still gets its
            # purge. It waits for one flush of the ingress replicas' recall hits, so that hits
            # made just before the erasure are in the log and purged with the rest.
            self._later(self._settings.recall.access_flush_seconds + PURGE_SETTLE_S, org_id, started["job_id"], 1)
            return started

        return await self._submit(_Operation("call", org_id, asyncio.get_running_loop().create_future(), call=erase))

    async def log_conversation(
        self, org_id: str, user_id: str, session_id: str, agent_id: str | None,
        messages: list[dict[str, Any]], mode: str | None, actor: str,
    ) -> str:
        """Log the turns (in their turn in the queue), then queue their extraction on the cluster;
        what it changes is audited as `actor`'s.

        Answers with the job id at once; a full extraction queue raises `queue_full` (429) after
        the turns are logged, so nothing the agent sent is lost. An org at its memory quota gets
        `quota_exceeded` (403) before anything is logged.
        """
        records = self._service.message_records(org_id, user_id, session_id, messages, agent_id=agent_id)
        # Extraction adds memories later, out of the Writer's sight: an org at its quota gets none.
        await self._quota.check_room(org_id)
        loop = asyncio.get_running_loop()
        await self._submit(_Operation(
            "call", org_id, loop.create_future(), call=lambda: self._service.log_messages(org_id, records)
        ))
        return await loop.run_in_executor(
            None, lambda: submit_conversation(self._settings, org_id, user_id, session_id, records, mode, actor=actor)
        )

    async def _resume_jobs(self) -> None:
        """Finish conversation jobs and erasures accepted before a restart (state lives in the jobs table)."""
        self._maintenance.submit(self._resume_erasures)
        try:
            await asyncio.get_running_loop().run_in_executor(None, resume_pending_jobs, self._settings, self._mine)
        except Exception:
            log.exception("could not resume unfinished conversation jobs")

    def _resume_erasures(self) -> None:
        with self._optimizing:
            try:
                outcome = self._service.erasures.resume(in_turn=self._in_turn, before=self._started, mine=self._mine)
            except Exception:
                log.exception("could not look for unfinished erasures")
                return
        for org_id, job_id in outcome["failed"]:  # tried again later, like a purge failed after its answer
            self._later(PURGE_RETRY_S, org_id, job_id, 2)

    async def ping(self) -> bool:
        """Readiness: the writer is up and its loop is running."""
        self._ensure_loop()
        return True
