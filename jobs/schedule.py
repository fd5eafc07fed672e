"""When consolidation runs: the schedule a long-lived process (the Serve app's scheduler) follows.

The host calls `run_due(now)` on a timer (every minute is plenty); the schedule answers whether a
run is due and, if so, submits one to the cluster as a Ray task and returns its reference. Runs
never overlap: the job itself holds the store's lease, so two schedulers (two replicas, or a
scheduler and a cron job) submitting at once end with one run and one `consolidation_running`.

Every submitted run has its job row from the start (`consolidation-<run_id>`): `queued`, then
`running` and `succeeded` or `failed`. A run refused because another holds the lease ends
`failed`, its error starting `consolidation_running:`, so that no row waits forever.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta
from typing import Any

from agent_memory.errors import ConflictError
from agent_memory.job_record import JobRecord
from agent_memory.models import OrgScope, as_utc, utcnow
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore
from jobs.consolidate import job_id, report_org, run_consolidation
from storage import open_store

log = logging.getLogger(__name__)


class ConsolidationSchedule:
    """Interval or daily-time schedule from settings; `consolidation_schedule_enabled=false` turns it off."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime] = utcnow,
                 submit: Callable[[Settings], Any] | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self._submit = submit or submit_consolidation
        self.last_run: datetime | None = None
        self.next_run: datetime | None = self.next_run_after(clock())

    @property
    def enabled(self) -> bool:
        """Whether the schedule runs at all."""
        return self.settings.consolidation.schedule_enabled

    def next_run_after(self, now: datetime) -> datetime | None:
        """The first scheduled time strictly after `now`, or None when scheduling is off."""
        if not self.enabled:
            return None
        now = as_utc(now)
        interval = self.settings.consolidation.interval_minutes
        if interval is not None:
            # The first run waits one interval: restarting a replica must not trigger a run.
            return max((self.last_run or now) + timedelta(minutes=interval), now)
        hour, minute = (int(p) for p in self.settings.consolidation.daily_at.split(":"))
        today = datetime.combine(now.date(), time(hour, minute), tzinfo=now.tzinfo)
        return today if today > now else today + timedelta(days=1)

    def due(self, now: datetime) -> bool:
        """Whether a run should start at `now`."""
        return self.next_run is not None and as_utc(now) >= self.next_run

    def run_due(self, now: datetime | None = None) -> Any | None:
        """Submit a run if one is due (returning what `submit` returned), and plan the next."""
        now = as_utc(now or self.clock())
        if not self.due(now):
            return None
        self.last_run = now
        handle = self._submit(self.settings)
        self.next_run = self.next_run_after(now)
        return handle


@dataclass(frozen=True)
class SubmittedRun:
    """A consolidation run started on the cluster: its id (its job row is `consolidation-<run_id>`) and result."""

    run_id: str
    result: Any  # ray.ObjectRef of the report dict, or of {"skipped": ..., "code": ...}


def submit_consolidation(
    settings: Settings, *, org_id: str | None = None, user_id: str | None = None, dry_run: bool = False,
    store: MemoryStore | None = None, recorded: bool = False,
) -> SubmittedRun:
    """Start a consolidation run as a task on the Ray cluster this process is connected to.

    The task drives the Ray Data job; the run's report is the value of `result`, or
    `{"skipped": ..., "code": "consolidation_running"}` when another run holds the lease. Unless
    a dry run that is not `recorded`, the run's job row is written `queued` before the task starts
    (in `store`, or the store the settings point at), so the run's own states always come after it;
    a recorded dry run's row ends holding its plan.
    """
    import ray

    run_id = f"run-{uuid.uuid4().hex[:12]}"
    if user_id is not None and org_id is None:
        org_id = "default"  # as the run itself reads it
    if not dry_run or recorded:
        store = store or open_store(settings, embedding_model=None, embedding_dim=None)
        queued = JobRecord.new(job_id(run_id), report_org(org_id), "consolidation", user_id=user_id,
                               report={"run_id": run_id, "dry_run": dry_run})
        store.put_job(OrgScope(queued.org_id), queued.as_row())
    remote = ray.remote(num_cpus=0.25, max_retries=0)(_run_and_report)
    options = {"org_id": org_id, "user_id": user_id, "dry_run": dry_run, "owner": run_id,
               "recorded": not dry_run or recorded}
    ref = remote.remote(settings, options)
    return SubmittedRun(run_id, ref)


def _run_and_report(settings: Settings, options: dict[str, Any]) -> dict[str, Any]:
    try:
        return run_consolidation(settings, use_ray=True, **options)
    except ConflictError as exc:
        _fail_unstarted(settings, options, f"{exc.code}: {exc.message}")
        return {"skipped": exc.message, "code": exc.code}
    except Exception as exc:
        _fail_unstarted(settings, options, f"{type(exc).__name__}: {exc}")
        raise


def _fail_unstarted(settings: Settings, options: dict[str, Any], error: str) -> None:
    """End the job row of a run that stopped before it started (another run holds the lease, the
    store could not be read) as `failed`; a row the run already moved on is left as it is."""
    if not options.get("recorded", not options.get("dry_run")):
        return
    try:
        _end_queued_row(settings, options, error)
    except Exception:
        log.exception("could not record the end of consolidation run %s", options["owner"])


def _end_queued_row(settings: Settings, options: dict[str, Any], error: str) -> None:
    owner = options["owner"]
    scope = OrgScope(report_org(options.get("org_id")))
    store = open_store(settings, embedding_model=None, embedding_dim=None)
    row = store.get_job(scope, job_id(owner))
    if row is not None and row["state"] != "queued":
        return
    now = utcnow()
    job = (JobRecord.from_row(row) if row is not None
           else JobRecord.new(job_id(owner), scope.org_id, "consolidation", user_id=options.get("user_id"),
                              report={"run_id": owner}, now=now))
    store.put_job(scope, replace(job, state="failed", updated_at=now, error=error).as_row())
