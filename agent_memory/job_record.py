"""One row of the `jobs` table: a background job (import, conversation extraction, consolidation)
with its state, progress, error and report.

The store still takes and returns plain dicts (`put_job`, `get_job`); `as_row` and `from_row`
are the two crossings, so every job writes the same columns in the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from agent_memory.models import utcnow

# The kind of an erasure's job: its report is the erasure's receipt.
ERASURE = "erasure"


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """A job as the `jobs` table holds it; `dataclasses.replace` gives the next state."""

    id: str
    org_id: str
    user_id: str | None = None
    kind: str
    state: str
    progress: float = 0.0
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    report: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(
        cls, job_id: str, org_id: str, kind: str, *, user_id: str | None = None, state: str = "queued",
        report: dict[str, Any] | None = None, now: datetime | None = None,
    ) -> JobRecord:
        """A job that starts now: no progress, no error."""
        now = now or utcnow()
        return cls(id=job_id, org_id=org_id, user_id=user_id, kind=kind, state=state, created_at=now,
                   updated_at=now, report=dict(report or {}))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRecord:
        """A job from the dict `store.get_job` returns (columns it lacks take their defaults)."""
        known = {f.name for f in fields(cls)}
        data = {name: value for name, value in row.items() if name in known}
        data["progress"] = float(data.get("progress") or 0.0)
        data["report"] = dict(data.get("report") or {})
        return cls(**data)

    def as_row(self) -> dict[str, Any]:
        """The dict `store.put_job` takes: every column, the report as a dict."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["report"] = dict(self.report)
        return row
