"""Audit events: the one place they are made, so every writer records the same fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent_memory.ids import ordered_id
from agent_memory.models import MemoryEvent, MemoryRecord


def memory_event(
    record: MemoryRecord,
    action: str,
    actor: str,
    at: datetime,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    event_id: str | None = None,
) -> MemoryEvent:
    """The event of one change to one memory (`event_id` for deterministic ones, so retries add nothing)."""
    return MemoryEvent(
        id=event_id or ordered_id(), org_id=record.org_id, user_id=record.user_id, memory_id=record.id,
        action=action, actor=actor, created_at=at, before=before, after=after, agent_id=record.agent_id,
        visibility=record.visibility,
    )


def erasure_event(org_id: str, user_id: str, actor: str, at: datetime, counts: dict[str, int], job_id: str) -> MemoryEvent:
    """The content-free event an erasure leaves: who erased the user, how many rows went, and the
    job whose report is the receipt."""
    return MemoryEvent(
        id=ordered_id(), org_id=org_id, user_id=user_id, memory_id=None, action="erased",
        actor=actor, created_at=at, after={"rows_deleted": counts, "job_id": job_id},
    )


def purge_event(org_id: str, user_id: str, at: datetime, receipt: dict[str, Any]) -> MemoryEvent:
    """The event an erasure's purge leaves: the files rewritten and versions removed (no content)."""
    return MemoryEvent(
        id=ordered_id(), org_id=org_id, user_id=user_id, memory_id=None, action="purged",
        actor="system", created_at=at, after=receipt,
    )


def audit_view(record: MemoryRecord) -> dict[str, Any]:
    """What an event keeps of a memory's state: its content and the fields a reviewer reads."""
    return {
        "content": record.content, "memory_type": record.memory_type, "importance": record.importance,
        "confidence": record.confidence, "source_ids": list(record.source_ids), "metadata": record.metadata,
        "created_at": record.created_at.isoformat(),
    }
