"""Background extraction of conversations on the Ray cluster.

The Serve ingress redacts and logs a conversation's messages, then calls `submit_conversation`,
which answers at once with a job id; the agent never waits for an LLM. Behind it:

- one named scheduler actor per store (`ConversationScheduler`) holds a bounded queue; when
  `conversation_queue_size` jobs are waiting or running, a submission raises `UnavailableError`
  with code `queue_full` (the ingress answers 429) and nothing is dropped silently;
- `extraction_concurrency` worker actors (`ExtractionWorker`) each load the embedding model once
  and run `extract_and_store`;
- jobs of one (org, user) run one after another, in submission order, so two concurrent
  conversations can never both supersede the same memory; different users run in parallel;
- a failed attempt is retried with exponential backoff up to `extraction_job_attempts`, then the
  job is `failed` with its error, and `agent-memory jobs retry ID` (or `retry_job`) runs it again;
- all state lives in the `jobs` table, and the job's report names the logged messages it covers,
  so `resume_pending_jobs` (called by the Serve app at start-up) picks up jobs left queued or
  running by a replica that died. Re-running a job is safe: extraction is idempotent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from agent_memory.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError
from agent_memory.extraction import MODES, extract_and_store
from agent_memory.ids import stable_id
from agent_memory.job_record import JobRecord
from agent_memory.models import MessageRecord, OrgScope, Scope, check_identifier, utcnow
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from storage import open_store
from storage.connect import maintenance_of, open_service
from storage.filters import Where

log = logging.getLogger(__name__)
KIND = "conversation"
NAMESPACE = "agent-memory"


def scheduler_name(settings: Settings) -> str:
    """The cluster-wide name of the scheduler of one store."""
    return f"conversations-{stable_id('store', settings.storage.uri)[:12]}"


def conversation_job_id(org_id: str, user_id: str, session_id: str, message_ids: Sequence[str], mode: str) -> str:
    """A deterministic job id: submitting the same messages twice names the same job."""
    return stable_id("job:conversation", org_id, user_id, session_id, mode, *message_ids)


def run_conversation_job(service: MemoryService, org_id: str, job_id: str, *, final: bool = True, attempt: int = 0) -> str:
    """Run one conversation job from the logged messages; record the outcome; return the new state.

    A failure that will be retried leaves the job `queued` with its error; a final one leaves it
    `failed`. Returns "succeeded", "queued" or "failed".
    """
    stored = service.store.get_job(OrgScope(org_id), job_id)
    if stored is None or stored.get("kind") != KIND:
        raise NotFoundError(f"conversation job {job_id} not found")
    job = JobRecord.from_row(stored)
    report = dict(job.report)
    now = utcnow()
    report["attempts"] = int(report.get("attempts", 0)) + 1
    report["started_at"] = now.isoformat()
    service.store.put_job(OrgScope(org_id), replace(job, state="running", updated_at=now, report=report, error=None).as_row())
    try:
        scope = Scope.user(org_id, report["user_id"])
        messages = _logged(service, scope, report["session_id"], report["message_ids"])
        missing = len(set(report["message_ids"])) - len(messages)
        if missing:
            raise NotFoundError(f"{missing} of the job's messages are not in the log (erased?)")
        # The caller who sent the turns, where the job names one (a job from before it did: the job).
        actor = report.get("actor") or f"job:{job_id}"
        result = extract_and_store(service, org_id, messages, report["mode"], actor=actor)
    except Exception as exc:  # every failure is recorded on the job; none is lost
        state = "failed" if final else "queued"
        error = f"{getattr(exc, 'code', type(exc).__name__)}: {exc}"
        report["finished_at"] = utcnow().isoformat()
        service.store.put_job(OrgScope(org_id), replace(job, state=state, updated_at=utcnow(), report=report, error=error).as_row())
        log.warning("conversation job %s attempt %s failed: %s", job_id, report["attempts"], error)
        return state
    if len(_logged(service, scope, report["session_id"], report["message_ids"])) < len(messages):
        # The user was erased while the memories were extracted: what this job wrote goes too,
        # and its row keeps nothing of theirs.
        service.store.drop_memory_events(scope, result.created)
        service.store.delete_memories(scope, result.created)
        gone = JobRecord.new(job.id, org_id, KIND, state="failed", now=job.created_at)
        service.store.put_job(OrgScope(org_id), replace(gone, updated_at=utcnow(), error="user_erased: the user was erased while the job ran").as_row())
        return "failed"
    report.update(result.as_dict())
    report["finished_at"] = utcnow().isoformat()
    done = replace(job, state="succeeded", progress=1.0, updated_at=utcnow(), report=report, error=None)
    service.store.put_job(OrgScope(org_id), done.as_row())
    return "succeeded"


def _logged(service: MemoryService, scope: Scope, session_id: str, message_ids: Sequence[str]) -> list[MessageRecord]:
    """Those of these messages the log still holds (an erasure takes them), in the log's order."""
    wanted = set(message_ids)
    return [m for m in service.store.session_messages(scope, session_id, 1_000_000) if m.message_id in wanted]


@functools.cache
def actor_class(cls: type) -> Any:
    """`cls` as a Ray actor class; Ray (a second to import) is imported when an actor starts."""
    import ray

    return ray.remote(cls)


class ExtractionWorker:
    """Holds a memory service (the model loaded once) and runs conversation jobs one at a time."""

    def __init__(self, settings: Settings) -> None:
        self.service = open_service(settings, with_embedder=True)

    def run(self, org_id: str, job_id: str, attempt: int, final: bool) -> str:
        return run_conversation_job(self.service, org_id, job_id, final=final, attempt=attempt)


class ConversationScheduler:
    """Bounded queue, per-user ordering, retries with backoff, and a fixed pool of workers."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = open_store(settings, embedding_model=None, embedding_dim=None)
        self.queues: dict[tuple[str, str], deque[str]] = {}
        self.known: set[str] = set()
        self.active: set[tuple[str, str]] = set()
        self.workers: asyncio.Queue[Any] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def _pool(self) -> asyncio.Queue[Any]:
        # Created on first use, inside the actor's event loop; each worker loads the model once.
        if self.workers is None:
            self.workers = asyncio.Queue()
            options = {"num_cpus": self.settings.extraction.worker_cpus}
            for _ in range(self.settings.extraction.concurrency):
                self.workers.put_nowait(actor_class(ExtractionWorker).options(**options).remote(self.settings))
        return self.workers

    def size(self) -> int:
        """Jobs waiting or running."""
        return len(self.known)

    async def submit(self, job: JobRecord, force: bool = False) -> str:
        """Queue a job: 'queued', 'duplicate' (already queued here or done) or 'full'."""
        org_id, job_id = job.org_id, job.id
        if job_id in self.known:
            return "duplicate"
        row = self.store.get_job(OrgScope(org_id), job_id)
        stored = JobRecord.from_row(row) if row is not None else None
        if stored is not None and stored.state == "succeeded" and not force:
            return "duplicate"
        if not force and len(self.known) >= self.settings.extraction.queue_size:
            return "full"
        if stored is None or force:
            self.store.put_job(OrgScope(org_id), replace(stored or job, state="queued", updated_at=utcnow()).as_row())
        key = (org_id, str(job.user_id))
        self.known.add(job_id)
        self.queues.setdefault(key, deque()).append(job_id)
        if key not in self.active:
            self.active.add(key)
            task = asyncio.get_running_loop().create_task(self._drain(key))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return "queued"

    async def _drain(self, key: tuple[str, str]) -> None:
        """Run one user's jobs strictly in order."""
        queue = self.queues[key]
        try:
            while queue:
                job_id = queue[0]
                try:
                    await self._run(key[0], job_id)
                finally:
                    queue.popleft()
                    self.known.discard(job_id)
        finally:
            self.active.discard(key)
            if queue:  # a submission raced the end of the loop
                self.active.add(key)
                task = asyncio.get_running_loop().create_task(self._drain(key))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _run(self, org_id: str, job_id: str) -> None:
        attempts = self.settings.extraction.job_attempts
        pool = self._pool()
        for attempt in range(attempts):
            worker = await pool.get()
            try:
                state = await worker.run.remote(org_id, job_id, attempt, attempt + 1 == attempts)
            except Exception as exc:  # the worker died: record it, and retry on another attempt
                log.warning("worker failed on job %s: %s", job_id, exc)
                state = "queued"
                worker = actor_class(ExtractionWorker).options(num_cpus=self.settings.extraction.worker_cpus).remote(self.settings)
            finally:
                pool.put_nowait(worker)
            if state in ("succeeded", "failed"):
                return
            await asyncio.sleep(self.settings.extraction.retry_backoff_s * 2**attempt)
        row = self.store.get_job(OrgScope(org_id), job_id)
        if row is not None and row["state"] != "succeeded":
            self.store.put_job(OrgScope(org_id), replace(JobRecord.from_row(row), state="failed", updated_at=utcnow()).as_row())


def scheduler(settings: Settings) -> Any:
    """The store's scheduler actor, started on first use (one per cluster and store)."""
    import ray

    if not ray.is_initialized():
        raise UnavailableError("Ray is not running: start the service or pass --address", code="ray_unavailable")
    return actor_class(ConversationScheduler).options(
        name=scheduler_name(settings), namespace=NAMESPACE, get_if_exists=True, lifetime="detached", num_cpus=0,
        max_restarts=-1,
    ).remote(settings)


def ask(ref: Any) -> Any:
    """The result of an actor call."""
    import ray

    return ray.get(ref)


def submit_conversation(
    settings: Settings,
    org_id: str,
    user_id: str,
    session_id: str,
    message_records: Sequence[MessageRecord],
    mode: str | None = None,
    *,
    actor: str | None = None,
) -> str:
    """Queue extraction of already redacted and logged messages; return the job id at once.

    `actor` (the caller's key name) is kept in the job: the audit actor of what extraction changes.

    Raises `UnavailableError` (code `queue_full`) when the queue is full: the caller answers 429
    and the client retries; the messages stay in the log either way.
    """
    check_identifier("org_id", org_id)
    check_identifier("user_id", user_id)
    check_identifier("session_id", session_id)
    mode = mode or settings.default_conversation_mode
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "llm" and not settings.llm.configured:
        raise InvalidInputError("mode 'llm' needs an LLM: set AGENT_MEMORY_LLM_BASE_URL and AGENT_MEMORY_LLM_MODEL")
    if not message_records:
        raise InvalidInputError("no messages given")
    for m in message_records:
        if (m.org_id, m.user_id, m.session_id) != (org_id, user_id, session_id):
            raise InvalidInputError("every message must belong to the conversation's org, user and session")
    message_ids = [m.message_id for m in message_records]
    job_id = conversation_job_id(org_id, user_id, session_id, message_ids, mode)
    job = JobRecord.new(job_id, org_id, KIND, user_id=user_id, report={
        "user_id": user_id, "session_id": session_id, "mode": mode, "message_ids": message_ids, "attempts": 0,
        **({"actor": actor} if actor else {}),
    })
    outcome = ask(scheduler(settings).submit.remote(job))
    if outcome == "full":
        raise UnavailableError(
            f"the extraction queue is full ({settings.extraction.queue_size} jobs); retry shortly", code="queue_full"
        )
    return job_id


def pending_jobs(settings: Settings) -> list[JobRecord]:
    """Conversation jobs left queued or running (of every org), oldest first."""
    store = open_store(settings, embedding_model=None, embedding_dim=None)
    where = Where().eq("kind", KIND).isin("state", ["queued", "running"]).render()
    rows = maintenance_of(store).table("jobs").search().where(where).select(["id", "org_id"]).limit(None).to_arrow().to_pylist()
    jobs = [JobRecord.from_row(job) for r in rows if (job := store.get_job(OrgScope(r["org_id"]), r["id"])) is not None]
    return sorted(jobs, key=lambda j: (j.created_at, j.id))


def resume_pending_jobs(settings: Settings, mine: Callable[[str, str | None], bool] | None = None) -> list[str]:
    """Queue again every conversation job a previous replica left unfinished (of the users `mine(org,
    user)` accepts, where given: a Writer shard's); return their ids.

    Each Writer shard calls this once at start-up. Jobs are resubmitted oldest first, so each
    user's jobs keep their order; the queue limit does not apply to them (they were accepted before).
    """
    ids = []
    sched = scheduler(settings)
    for job in pending_jobs(settings):
        if mine is not None and not mine(job.org_id, job.user_id):
            continue
        if ask(sched.submit.remote(job, True)) == "queued":
            ids.append(job.id)
    return ids


def retry_job(settings: Settings, org_id: str, job_id: str) -> str:
    """Queue a failed conversation job again on the cluster (its messages are read from the log)."""
    store = open_store(settings, embedding_model=None, embedding_dim=None)
    row = store.get_job(OrgScope(org_id), job_id)
    if row is None or row.get("kind") != KIND:
        raise NotFoundError(f"conversation job {job_id} not found")
    job = JobRecord.from_row(row)
    if job.state != "failed":
        raise ConflictError(f"job {job_id} is {job.state}; only failed jobs can be retried", code="job_not_failed")
    ask(scheduler(settings).submit.remote(replace(job, report={**job.report, "attempts": 0}), True))
    return job_id


def wait_for_job(settings: Settings, org_id: str, job_id: str, *, timeout_s: float = 120.0) -> dict[str, Any]:
    """Poll a job until it succeeds or fails (CLI and tests); raise UnavailableError on timeout."""
    store = open_store(settings, embedding_model=None, embedding_dim=None)
    deadline = time.monotonic() + timeout_s
    while True:
        job = store.get_job(OrgScope(org_id), job_id)
        if job is not None and job["state"] in ("succeeded", "failed"):
            return job
        if time.monotonic() > deadline:
            raise UnavailableError(f"job {job_id} still {job['state'] if job else 'unknown'} after {timeout_s}s")
        time.sleep(0.2)
