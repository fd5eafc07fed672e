"""The one merge function: extraction (a restatement reinforces what is known) and consolidation
(a cluster of near-duplicates becomes one memory) both go through it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent_memory.models import MemoryRecord


def merge_records(canonical: MemoryRecord, others: Sequence[MemoryRecord], now: datetime) -> MemoryRecord:
    """The canonical memory with the others folded in.

    Union of source ids (first seen first), the highest importance and confidence, summed access
    counts, the latest access time, and the earliest `valid_from`: the fact was known since its
    first statement. Content, type and id stay the canonical's.
    """
    merged = canonical.model_copy(deep=True)
    sources = list(dict.fromkeys([*canonical.source_ids, *(s for o in others for s in o.source_ids)]))
    merged.source_ids = sources
    merged.importance = max([canonical.importance, *(o.importance for o in others)])
    merged.confidence = max([canonical.confidence, *(o.confidence for o in others)])
    merged.access_count = canonical.access_count + sum(o.access_count for o in others)
    accessed = [t for t in [canonical.last_accessed_at, *(o.last_accessed_at for o in others)] if t is not None]
    merged.last_accessed_at = max(accessed) if accessed else None
    merged.valid_from = min([canonical.valid_from, *(o.valid_from for o in others)])
    merged.updated_at = now
    return merged


def superseded(record: MemoryRecord, by_id: str, now: datetime) -> MemoryRecord:
    """The record retired in favour of `by_id`: it leaves recall but stays in history."""
    retired = record.model_copy(deep=True)
    retired.status = "superseded"
    retired.superseded_by = by_id
    retired.valid_to = now
    retired.updated_at = now
    return retired


# A memory's metadata key listing the memories it was restored apart from: consolidation never
# merges it with them again, so an undone merge stays undone.
KEPT_APART = "kept_apart_from"


def apart_ids(record: MemoryRecord) -> list[str]:
    """The ids a memory is kept apart from (any other value under the key counts as none)."""
    value = (record.metadata or {}).get(KEPT_APART)
    return [str(v) for v in value if isinstance(v, str)] if isinstance(value, list) else []


def restored(record: MemoryRecord, now: datetime) -> MemoryRecord:
    """A superseded or expired record made active again, kept apart from the memory that had
    replaced it; an expiry already past is cleared (it would leave recall again at once)."""
    back = record.model_copy(deep=True)
    apart = apart_ids(record)
    if record.superseded_by and record.superseded_by not in apart:
        apart.append(record.superseded_by)
    back.metadata = {**(back.metadata or {}), KEPT_APART: apart}
    back.status = "active"
    back.superseded_by = None
    back.valid_to = None
    back.updated_at = now
    if back.expires_at is not None and back.expires_at <= now:
        back.expires_at = None
    return back


def kept_apart(a: MemoryRecord, b: MemoryRecord) -> bool:
    """Whether either memory was restored apart from the other (an undone merge or supersede)."""
    return b.id in apart_ids(a) or a.id in apart_ids(b)
