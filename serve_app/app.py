"""The Ray Serve application: a FastAPI ingress composed with an embedder, recall and a writer.

    HTTP --HAProxy (or Serve's proxy)--> ingress replica
    ingress --search--> recall in the replica; queries embedded there with continuous batching
                        on CPU, by the Embedder where it holds a GPU
    ingress --writes--> Writer --embed_many--> Embedder   (coalesced commits, in order)
    ingress --reads---> store (list, get, history, sessions, jobs)

`build(settings)` returns the whole application; replicas, autoscaling and resources come from
`cluster/serve_config.yaml` (see serve_app.config), settings fill what it leaves out.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from agent_memory.embedding import Embedder, build_embedder
from agent_memory.errors import AgentMemoryError, NotFoundError, UnavailableError
from agent_memory.models import MemoryRecord, NewMemory, parse_input, utcnow
from agent_memory.service import MemoryService, WriteResult
from agent_memory.settings import Settings
from serve_app import metrics
from storage import lance_store, open_store

# Serve's own logger: its JSON encoding (set in cluster/serve_config.yaml) adds request ids.
log = logging.getLogger("ray.serve")


def _unwrap(exc: BaseException) -> BaseException:
    """The original error of a replica's failure (Ray wraps it, keeping the type as a base)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class RemoteEmbedder(Embedder):
    """The Embedder deployment seen through the core's Embedder interface, from worker threads.

    Calls are made on the replica's event loop (`loop`) and awaited there, so they work whether
    Serve's router runs in a loop of its own or in the replica's (`RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0`,
    see serve_app.config.SERVE_ENV), where a blocking `.result()` is refused.
    """

    def __init__(
        self, handle: DeploymentHandle, name: str, dim: int, timeout_s: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(cache_size=0)
        self._handle = handle
        self.name, self.dim = name, dim
        self._timeout = timeout_s
        self._loop = loop
        self._oov: OrderedDict[str, float] = OrderedDict()
        self._oov_lock = threading.Lock()

    def _call(self, method: str, arg: Any) -> Any:
        async def call() -> Any:
            return await getattr(self._handle, method).remote(arg)

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        try:
            return future.result(timeout=self._timeout)
        except AgentMemoryError:
            raise
        except Exception as exc:  # timeouts, a dead replica, back-pressure rejections
            future.cancel()
            raise UnavailableError(f"the embedding model did not answer: {type(exc).__name__}") from exc

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts in one call (writes)."""
        vectors, shares = self._call("embed_many", list(texts))
        self._remember(texts, shares)
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        """One query, batched with other replicas' queries on the embedder side."""
        vector, share = self._call("embed_one", text)
        self._remember([text], [share])
        return vector

    def _remember(self, texts: Sequence[str], shares: Sequence[float]) -> None:
        with self._oov_lock:  # recall threads share this embedder
            for text, share in zip(texts, shares, strict=True):
                self._oov[text] = share
                self._oov.move_to_end(text)
            while len(self._oov) > 4096:
                self._oov.popitem(last=False)

    def oov_shares(self, texts: Sequence[str]) -> list[float]:
        """Vocabulary coverage computed by the embedder alongside each vector."""
        with self._oov_lock:
            known = {t: self._oov[t] for t in texts if t in self._oov}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            _, shares = self._call("embed_many", missing)
            self._remember(missing, shares)
            known.update(zip(missing, shares, strict=True))
        return [known[t] for t in texts]


@serve.deployment(name="Embedder", ray_actor_options={"num_cpus": 0.5})
class EmbedderDeployment:
    """The application's shared embedding model: the Writer's texts, and queries where it holds a GPU,
    batched across replicas."""

    def __init__(self, settings: Settings) -> None:
        self._embedder = build_embedder(settings)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._batch_sizes = metrics.embed_batch_size()

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Tune batching at runtime (`user_config` in the Serve config)."""
        if "max_batch_size" in config:
            self.embed_one.set_max_batch_size(int(config["max_batch_size"]))
        if "batch_wait_timeout_s" in config:
            self.embed_one.set_batch_wait_timeout_s(float(config["batch_wait_timeout_s"]))

    def info(self) -> dict[str, Any]:
        """The model's name and dimension (the store records them)."""
        return {"name": self._embedder.name, "dim": self._embedder.dim}

    async def _run(self, texts: list[str]) -> tuple[np.ndarray, list[float]]:
        loop = asyncio.get_running_loop()

        def work() -> tuple[np.ndarray, list[float]]:
            return self._embedder.embed_batch(texts), self._embedder.oov_shares(texts)

        # The model runs off the event loop, so requests keep queueing (and batching) meanwhile.
        return await loop.run_in_executor(self._executor, work)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.003)
    async def embed_one(self, texts: list[str]) -> list[tuple[np.ndarray, float]]:
        """Embed one text per caller; concurrent callers share a model call."""
        self._batch_sizes.observe(len(texts), tags={"path": "embedder"})
        vectors, shares = await self._run(texts)
        return [(vectors[i], shares[i]) for i in range(len(texts))]

    async def embed_many(self, texts: list[str]) -> tuple[np.ndarray, list[float]]:
        """Embed a caller's whole list in one model call."""
        self._batch_sizes.observe(len(texts), tags={"path": "embedder"})
        return await self._run(texts)


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


@serve.deployment(name="Writer", ray_actor_options={"num_cpus": 0.25})
class WriterDeployment:
    """All changes go through here, in arrival order; concurrent writes share one commit.

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
            embedder, info["name"], info["dim"], settings.embedder_timeout_s, asyncio.get_running_loop()
        )
        self._service = MemoryService(store, remote, settings, defer_access=False)
        # One thread: commits happen one after another, in queue order.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commit")
        self._queue: list[_Operation] = []
        self._wake = asyncio.Event()
        self._writes = metrics.writes()
        self._commit_rows = metrics.commit_rows()
        self._retries = metrics.commit_retries()
        self._loop_task: asyncio.Task[None] | None = None
        self._full_passes = FullOptimizeSchedule(
            settings.writer_optimize_every,
            # Without the upkeep's folds this pass is the only compaction: no minimum gap then.
            settings.writer_optimize_min_seconds if settings.writer_upkeep_seconds > 0 else 0.0,
        )
        self._concurrent = True
        self._maintenance = ThreadPoolExecutor(max_workers=1, thread_name_prefix="optimize")
        self._optimizing = threading.Lock()
        self._stopping = threading.Event()
        self._fold_due = threading.Event()
        self._commits_since_fold = 0
        if settings.writer_upkeep_seconds > 0:
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
                await asyncio.sleep(self._settings.write_window_ms / 1000)
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
        while self._queue and self._queue[0].kind == "write" and rows < self._settings.write_max_rows:
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
        self._retries.set(lance_store.commit_retries)
        self._writes.inc(sum(len(op.records) for op in batch))
        self._commits_since_fold += 1
        if self._commits_since_fold >= self._settings.writer_fold_commits:
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
                self._service.store.optimize(retain=timedelta(hours=1))
            except Exception:
                log.exception("periodic optimize failed; writes continue")

    def _upkeep(self) -> None:
        """Every `writer_upkeep_seconds`, or sooner after `writer_fold_commits` commits, fold the
        small fragments that recent commits left outside the indexes (this replica's writes and
        their audit events, the ingress replicas' access-log flushes) and index them once
        `writer_reindex_rows` pile up (LanceStore.fold_new_rows). Searches, id lookups and the
        next write's insert-if-absent would otherwise open and scan each of them."""
        tables = ("memories", "events", "access")
        store, seen = self._service.store, None
        while not self._stopping.is_set():
            self._fold_due.wait(self._settings.writer_upkeep_seconds)
            self._fold_due.clear()
            self._commits_since_fold = 0
            if self._stopping.is_set() or not self._optimizing.acquire(blocking=False):
                continue  # stopping, or a compaction or an erasure is running
            try:
                versions = [store.table(name).version for name in tables]
                if versions != seen:
                    store.fold_new_rows(reindex_rows=self._settings.writer_reindex_rows, tables=tables)
                    seen = [store.table(name).version for name in tables]
            except Exception as exc:  # noqa: BLE001 - a commit conflict or a storage hiccup: next round
                log.warning("fragment upkeep failed, tried again in %.0f s: %s", self._settings.writer_upkeep_seconds, exc)
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
        """Run a service change (update, delete, erase_user) in its turn."""
        if method not in ("update", "delete", "erase_user"):
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
        from jobs.conversations import submit_conversation

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
        from jobs.conversations import resume_pending_jobs

        try:
            await asyncio.get_running_loop().run_in_executor(None, resume_pending_jobs, self._settings)
        except Exception:
            log.exception("could not resume unfinished conversation jobs")

    async def ping(self) -> bool:
        """Readiness: the writer is up and its loop is running."""
        self._ensure_loop()
        return True


@serve.deployment(name="Scheduler", num_replicas=1, ray_actor_options={"num_cpus": 0})
class SchedulerDeployment:
    """Submits consolidation to the cluster when the schedule says so (interval or daily time).

    Runs never overlap: each takes the store's consolidation lease, so a run still going (or one
    started by hand or by a CronJob) makes the next submission a recorded no-op.
    """

    async def __init__(self, settings: Settings) -> None:
        from jobs.schedule import ConsolidationSchedule

        self._schedule = ConsolidationSchedule(settings)
        self._last: dict[str, Any] = {}
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(30)
            try:
                run = await loop.run_in_executor(None, self._schedule.run_due)
            except Exception:
                log.exception("could not submit the scheduled consolidation")
                continue
            if run is not None:
                self._last = {"run_id": run.run_id, "submitted_at": utcnow().isoformat()}
                log.info("scheduled consolidation submitted: %s", run.run_id)

    def status(self) -> dict[str, Any]:
        """Whether the schedule is on, when it runs next, and what it last submitted."""
        next_run = self._schedule.next_run if self._schedule.enabled else None
        return {"enabled": self._schedule.enabled, "next_run": next_run.isoformat() if next_run else None,
                "last": self._last}


def build(settings: Settings, config: dict[str, Any] | None = None) -> serve.Application:
    """The whole application, one bind expression; `config` holds per-deployment Serve options."""
    from serve_app.api import IngressDeployment
    from serve_app.config import deployment_options

    options = deployment_options(settings, config)
    embedder = EmbedderDeployment.options(**options["Embedder"]).bind(settings)
    writer = WriterDeployment.options(**options["Writer"]).bind(settings, embedder)
    scheduler = SchedulerDeployment.options(**options["Scheduler"]).bind(settings)
    mode = settings.query_embedding
    local = mode == "local" or (mode == "auto" and not options["Embedder"]["ray_actor_options"].get("num_gpus"))
    if not local and settings.query_embedding_precision == "int8":
        log.warning("query_embedding_precision int8 applies to queries embedded in the ingress; "
                    "they go to the Embedder deployment here and stay exact")
    return IngressDeployment.options(**options["Ingress"]).bind(settings, writer, embedder, scheduler, local_queries=local)


def app_builder(args: dict[str, Any]) -> serve.Application:
    """Entry point for `serve run cluster/serve_config.yaml`: settings from the environment."""
    return build(Settings(**{k: v for k, v in (args or {}).items() if k in Settings.model_fields}))
