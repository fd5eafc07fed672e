"""The Writer deployment: every change to the store, in arrival order, concurrent writes batched.

Writes that arrive together are embedded in one model call and committed in one LanceDB commit;
other changes (update, delete, erasure, conversation turns) take their turn in the same queue.
Beside the commits the Writer keeps the store compact: it folds the small fragments new commits
leave and, on FullOptimizeSchedule, runs a full optimize.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_memory.errors import NotFoundError
from agent_memory.models import MemoryRecord, NewMemory, parse_input
from agent_memory.service import WriteResult
from agent_memory.settings import Settings
from jobs.conversations import resume_pending_jobs, submit_conversation
from serve_app import metrics
from serve_app.embedder import RemoteEmbedder
from storage import open_store
from storage.connect import open_service
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
    call: Callable[[], Any] | None = None


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

    async def __init__(self, settings: Settings, embedder: DeploymentHandle) -> None:
        self._settings = settings
        info = await embedder.info.remote()
        store = open_store(settings, embedding_model=info["name"], embedding_dim=info["dim"])
        remote = RemoteEmbedder(
            embedder, info["name"], info["dim"], settings.embedding.timeout_s, asyncio.get_running_loop()
        )
        # With the maintenance interface: erasure purges old versions through it.
        self._service = open_service(settings, embedder=remote, store=store, with_maintenance=True)
        # One thread: commits happen one after another, in queue order.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit")
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
        return await op.future

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
                        op.future.set_result(await loop.run_in_executor(self._executor, op.call))  # type: ignore[arg-type]
                    except Exception as exc:
                        op.future.set_exception(exc)
                    continue
                try:
                    results = await loop.run_in_executor(self._executor, self._commit, batch)
                except Exception as exc:
                    for op in batch:
                        if not op.future.done():
                            op.future.set_exception(exc)
                    continue
                finally:
                    # Company: several requests in this commit, or more arrived while it ran.
                    self._concurrent = len(batch) > 1 or bool(self._queue)
                for op, result in zip(batch, results, strict=True):
                    if isinstance(result, Exception):
                        op.future.set_exception(result)
                    else:
                        op.future.set_result(result)

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
            outcome = self._service.write_batch(org_id, [batch[i].records for i in indexes], actor="api")
            for i, result in zip(indexes, outcome, strict=True):
                results[i] = result
        self._commit_rows.observe(sum(len(op.records) for op in batch))
        self._retries.set(CommitRetries.count)
        self._writes.inc(sum(len(op.records) for op in batch))
        self._commits_since_fold += 1
        if self._commits_since_fold >= self._settings.writer.fold_commits:
            self._fold_due.set()  # the upkeep folds the new fragments now rather than at its next tick
        if self._full_passes.commit(busy=self._optimizing.locked()):
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
            if self._stopping.is_set() or not self._optimizing.acquire(blocking=False):
                continue  # stopping, or a compaction or an erasure is running
            try:
                versions = [maintenance.table(name).version for name in tables]
                if versions != seen:
                    maintenance.fold_new_rows(reindex_rows=self._settings.writer.reindex_rows, tables=tables)
                    seen = [maintenance.table(name).version for name in tables]
            except Exception as exc:  # noqa: BLE001 - a commit conflict or a storage hiccup: next round
                log.warning("fragment upkeep failed, tried again in %.0f s: %s", self._settings.writer.upkeep_seconds, exc)
            finally:
                self._optimizing.release()

    def _paused_maintenance(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def paused(*args: Any, **kwargs: Any) -> Any:
            with self._optimizing:
                return fn(*args, **kwargs)

        return paused

    def __del__(self) -> None:
        self._stopping.set()
        self._fold_due.set()

    async def add(self, org_id: str, memories: list[dict[str, Any]], idempotency_key: str | None) -> dict[str, Any]:
        """Validate and redact now; commit with whatever else arrives in the same window."""
        items = [parse_input(NewMemory, m) for m in memories]
        records = [
            self._service.prepare(org_id, item, idempotency_key=idempotency_key, position=i)
            for i, item in enumerate(items)
        ]
        loop = asyncio.get_running_loop()
        result: WriteResult = await self._submit(_Operation("write", org_id, loop.create_future(), records=records))
        return {"ids": result.ids, "created": sorted(result.created)}

    async def run(self, org_id: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a service change (update, delete, restore, erase_user) in its turn."""
        if method not in ("update", "delete", "restore", "erase_user"):
            raise NotFoundError(f"no such operation {method}")
        fn = getattr(self._service, method)
        if method == "erase_user":
            fn = self._paused_maintenance(fn)  # its index rebuild and cleanup run alone
        loop = asyncio.get_running_loop()
        result = await self._submit(_Operation("call", org_id, loop.create_future(), call=lambda: fn(*args, **kwargs)))
        if isinstance(result, MemoryRecord):
            return result.public()
        return result

    async def log_conversation(
        self, org_id: str, user_id: str, session_id: str, agent_id: str | None,
        messages: list[dict[str, Any]], mode: str | None,
    ) -> str:
        """Log the turns (in their turn in the queue), then queue their extraction on the cluster.

        Answers with the job id at once; a full extraction queue raises `queue_full` (429) after
        the turns are logged, so nothing the agent sent is lost.
        """
        records = self._service.message_records(org_id, user_id, session_id, messages, agent_id=agent_id)
        loop = asyncio.get_running_loop()
        await self._submit(_Operation(
            "call", org_id, loop.create_future(), call=lambda: self._service.log_messages(org_id, records)
        ))
        return await loop.run_in_executor(
            None, lambda: submit_conversation(self._settings, org_id, user_id, session_id, records, mode)
        )

    async def _resume_jobs(self) -> None:
        """Finish conversation jobs accepted before a restart (state lives in the jobs table)."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, resume_pending_jobs, self._settings)
        except Exception:
            log.exception("could not resume unfinished conversation jobs")

    async def ping(self) -> bool:
        """Readiness: the writer is up and its loop is running."""
        self._ensure_loop()
        return True
