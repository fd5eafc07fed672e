"""The Scheduler deployment: consolidation submitted to the cluster on the configured schedule."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agent_memory.models import utcnow
from agent_memory.settings import Settings
from jobs.schedule import ConsolidationSchedule

# Serve's own logger: its JSON encoding (set in cluster/serve_config.yaml) adds request ids.
log = logging.getLogger("ray.serve")


class SchedulerDeployment:
    """Submits consolidation to the cluster when the schedule says so (interval or daily time);
    `app.build` makes it the `Scheduler` deployment, one replica.

    Runs never overlap: each takes the store's consolidation lease, so a run still going (or one
    started by hand or by a CronJob) makes the next submission a recorded no-op.
    """

    async def __init__(self, settings: Settings) -> None:
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
