"""Feedback on a memory: `useful` and `wrong` move its importance, `outdated` expires it.

A vote does not change the memory's own `importance` (what its writer gave it). It moves an
offset beside it, `feedback_offset`, by `feedback_step` up or down, within `feedback_max_offset`
and so that importance plus offset stays within 0..1. From the vote on the offset halves every
`feedback_half_life_days`: recall weighs the effective importance, `importance` plus what is left
of the offset, so one vote does not rule for ever and votes in a row add up. `outdated` expires the
memory now (out of recall; `POST /v1/memories/{id}/restore` makes it active again).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.models import FeedbackSignal, MemoryRecord, as_utc
from agent_memory.setting_groups import FeedbackSettings

SECONDS_PER_DAY = 86_400.0
MAX_NOTE_CHARS = 1_000


class Feedback(BaseModel):
    """A vote on one memory, as an agent or an operator sends it."""

    model_config = ConfigDict(extra="forbid")

    signal: FeedbackSignal = Field(
        description="`useful` (it answered well: weigh it more), `wrong` (it should not have been recalled: weigh it "
                    "less) or `outdated` (it no longer holds: expire it).")
    note: str | None = Field(None, max_length=MAX_NOTE_CHARS,
                             description="Why, in a few words (kept in the audit event, redacted as content is).")


def remaining(offset: np.ndarray | float, at: np.ndarray | float, now: float, half_life_days: float) -> np.ndarray:
    """What is left now of offsets voted at `at` (seconds since the epoch; NaN: never voted)."""
    offset = np.asarray(offset, dtype=np.float64)
    at = np.asarray(at, dtype=np.float64)
    age_days = np.maximum(0.0, (now - np.nan_to_num(at, nan=now)) / SECONDS_PER_DAY)
    # A vote after `now` (recall as of a past moment) had not been cast then.
    cast = ~np.isnan(at) & (at <= now)
    return np.where(cast, offset * np.exp(-math.log(2) * age_days / half_life_days), 0.0)


def effective_importance(importance: np.ndarray | float, offset: np.ndarray | float, at: np.ndarray | float,
                         now: float, half_life_days: float) -> np.ndarray:
    """Importance as recall weighs it: its own plus what is left of feedback's offset, within 0..1."""
    return np.clip(np.asarray(importance, dtype=np.float64) + remaining(offset, at, now, half_life_days), 0.0, 1.0)


def _seconds(at: datetime | None) -> float:
    return as_utc(at).timestamp() if at is not None else math.nan


def effective_of(record: MemoryRecord, now: datetime, settings: FeedbackSettings) -> float:
    """One memory's effective importance now."""
    value = effective_importance(record.importance, record.feedback_offset, _seconds(record.feedback_at),
                                 as_utc(now).timestamp(), settings.half_life_days)
    return round(float(value), 6)


def voted(record: MemoryRecord, signal: FeedbackSignal, now: datetime, settings: FeedbackSettings) -> MemoryRecord:
    """The memory after a vote: the offset moved (useful, wrong) from what is left of it now, or the
    memory expired (outdated)."""
    changed = record.model_copy(deep=True)
    changed.updated_at = now
    if signal == "outdated":
        changed.status = "expired"
        changed.valid_to = now
        return changed
    left = float(remaining(record.feedback_offset, _seconds(record.feedback_at), as_utc(now).timestamp(),
                           settings.half_life_days))
    step = settings.step if signal == "useful" else -settings.step
    bound = settings.max_offset
    offset = min(bound, max(-bound, left + step))
    # Never past 0..1: an offset beyond the bounds would only delay its own decay.
    offset = min(1.0 - record.importance, max(-record.importance, offset))
    changed.feedback_offset = round(offset, 6)
    changed.feedback_at = now
    return changed


def vote_change(before: MemoryRecord, after: MemoryRecord, feedback: Feedback, note: str | None, now: datetime,
                settings: FeedbackSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `before` and `after` of a vote's audit event: the signal, the note, and what it moved."""
    was = {"status": before.status, "effective_importance": effective_of(before, now, settings)}
    became = {"signal": feedback.signal, "note": note, "status": after.status,
              "feedback_offset": after.feedback_offset, "effective_importance": effective_of(after, now, settings)}
    return was, became


def shown(record: MemoryRecord, now: datetime, settings: FeedbackSettings) -> dict[str, Any]:
    """A memory as the API shows it: its fields, and the importance recall weighs now."""
    return {**record.public(), "effective_importance": effective_of(record, now, settings)}
