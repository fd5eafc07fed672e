"""The Writer deployment: every change to the store, in arrival order, concurrent writes batched.

Writes that arrive together are embedded in one model call and committed in one LanceDB commit;
other changes (update, delete, erasure, conversation turns) take their turn in the same queue.
Beside the commits the Writer keeps the store compact and purges erasures (serve_app.upkeep), and
it keeps the orgs' memory quotas (serve_app.limits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_memory.errors import NotFoundError, UnavailableError
from agent_memory.feedback import shown
from agent_memory.models import MemoryRecord, Message, NewMemory, OrgScope, utcnow
from agent_memory.service import WriteResult
from agent_memory.settings import Settings
from jobs.conversations import resume_pending_jobs, submit_conversation
from serve_app import metrics
from serve_app.embedder import RemoteEmbedder
from serve_app.limits import OrgQuota, QuotaRoute
from serve_app.shards import shard_name, shard_of
from serve_app.upkeep import StoreUpkeep
from storage import open_store
from storage.connect import open_service
from storage.maintenance import PURGE_SETTLE_S
from storage.tables import CommitRetries

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

# Serve's own logger: its JSON encoding (set in cluster/serve_config.yaml) adds request ids.
log = logging.getLogger("ray.serve")


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
        store = open_store(settings, embedding_model=info["name"], embedding_dim=info["dim"],
                           chinese_gloss=info["glosses_chinese"])
        remote = RemoteEmbedder(embedder, info, settings.embedding.timeout_s, asyncio.get_running_loop())
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
        self._concurrent = True
        # Folds, compactions and erasures' purges, beside the commits (serve_app.upkeep).
        self._upkeep = StoreUpkeep(self._service, settings, f"{shard_name(shard)}:{uuid.uuid4().hex[:8]}",
                                   shared=self._shards > 1, in_turn=self._in_turn)
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
        self._upkeep.committed()
        return [results[i] for i in range(len(batch))]

    def _in_turn(self, call: Callable[[], Any]) -> Any:
        """Run `call` in the queue's turn, between commits, from another thread; its result."""
        async def submit() -> Any:
            return await self._submit(_Operation("call", "", self._loop.create_future(), call=call))
        pending = asyncio.run_coroutine_threadsafe(submit(), self._loop)
        while True:  # a replica that stops meanwhile never answers: give up then (the next start resumes)
            try:
                return pending.result(timeout=1.0)
            except concurrent.futures.TimeoutError:
                if self._upkeep.stopping or self._loop.is_closed():
                    pending.cancel()
                    raise UnavailableError("the writer is stopping") from None

    def __del__(self) -> None:
        if hasattr(self, "_upkeep"):
            self._upkeep.stop()

    def _mine(self, org_id: str, user_id: str | None) -> bool:
        """Whether a user's changes come to this shard (what it resumes after a restart)."""
        return shard_of(org_id, user_id or "", self._shards) == self._shard

    async def add(self, org_id: str, memories: list[NewMemory], idempotency_key: str | None,
                  actor: str, positions: list[int] | None = None) -> dict[str, Any]:
        """Redact and key now (the ingress validated), within the org's quota; commit with whatever
        else arrives in the same window (each write's events name its own `actor`). Over the quota
        nothing is queued and `quota_exceeded` is raised. `positions`: where each memory stood in
        the request, when this shard takes part of it (the ids an idempotency key derives depend on them)."""
        positions = list(range(len(memories))) if positions is None else positions
        records = [
            self._service.prepare(org_id, item, idempotency_key=idempotency_key, position=position)
            for item, position in zip(memories, positions, strict=True)
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
        """Run a service change (update, delete, restore, feedback) in its turn."""
        if method not in ("update", "delete", "restore", "feedback"):
            raise NotFoundError(f"no such operation {method}")
        fn = getattr(self._service, method)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if method == "restore":  # a memory active again counts against the org's quota like a write
            held = await self._quota.reserve(org_id, 1)
            future.add_done_callback(lambda done: self._quota.settle(org_id, held, held if _succeeded(done) else 0))
        result = await self._submit(_Operation("call", org_id, future, call=lambda: fn(*args, **kwargs)))
        if isinstance(result, MemoryRecord):
            return shown(result, utcnow(), self._settings.feedback)
        return result

    async def erase_user(self, org_id: str, user_id: str, actor: str) -> dict[str, Any]:
        """Delete the user's rows in their turn (gone from every read when this returns), then
        purge their bytes beside the next commits; {"job_id", "rows_deleted"}."""
        def erase() -> dict[str, Any]:
            started = self._service.erase_user(org_id, user_id, actor=actor, purge=False)
            # Scheduled here, not after the answer: a request cancelled meanwhile still gets its
            # purge. It waits for one flush of the ingress replicas' recall hits, so that hits
            # made just before the erasure are in the log and purged with the rest.
            self._upkeep.purge_later(self._settings.recall.access_flush_seconds + PURGE_SETTLE_S, org_id, started["job_id"])
            return started

        return await self._submit(_Operation("call", org_id, asyncio.get_running_loop().create_future(), call=erase))

    async def log_conversation(
        self, org_id: str, user_id: str, session_id: str, agent_id: str | None,
        messages: list[Message], mode: str | None, actor: str,
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
        self._upkeep.resume_erasures(self._started, self._mine)
        try:
            await asyncio.get_running_loop().run_in_executor(None, resume_pending_jobs, self._settings, self._mine)
        except Exception:
            log.exception("could not resume unfinished conversation jobs")

    async def ping(self) -> bool:
        """Readiness: the writer is up and its loop is running."""
        self._ensure_loop()
        return True
