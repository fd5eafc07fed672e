"""A user's timeline: every change of their memories as one list of events, oldest first, each with
the memory's text and status after it.

The audit events say what each change did; the text after each is replayed from them: a creation
or a merge states it, an edit states it before and after, a supersession states it before. Where
the events that are left do not say it (older stores' merges, events dropped by retention), the
memory's stored text fills the gap back to its last edit. A deleted memory has no text after its
deletion, and an erased user has no events but the erasure's own (`erased`, `purged`), which hold
no text.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from agent_memory.errors import InvalidInputError
from agent_memory.models import MemoryEvent, MemoryRecord, Scope, as_utc
from agent_memory.store import MemoryStore

# What the memory's status is after each action (None: as it was; `feedback` says it itself).
STATUS_AFTER = {
    "created": "active", "merged": "active", "reinforced": "active", "restored": "active",
    "superseded": "superseded", "expired": "expired", "deleted": "deleted",
}
# What an event may say besides its action: the text and status, which the timeline shows itself.
SHOWN_APART = ("content", "status")


def _text(change: Mapping[str, Any] | None) -> str | None:
    value = (change or {}).get("content")
    return value if isinstance(value, str) else None


def _replayed_texts(events: Sequence[MemoryEvent], stored: MemoryRecord | None) -> list[str | None]:
    """The memory's text after each of its events (oldest first): what the events state, going
    forward; where they state nothing, what the next edit says it was before, or the stored text."""
    after: list[str | None] = [None] * len(events)
    carry = stored.content if stored is not None else None
    for i in range(len(events) - 1, -1, -1):
        event = events[i]
        after[i] = None if event.action == "deleted" else carry
        before = _text(event.before)
        if event.action == "created":
            carry = None
        elif before is not None:
            carry = before
    text: str | None = None
    for i, event in enumerate(events):
        stated = _text(event.after) if event.action in ("created", "merged", "updated") else None
        if stated is not None:
            text = stated
        elif event.action == "superseded" and _text(event.before) is not None:
            text = _text(event.before)
        if event.action == "deleted":
            text = None
        if text is not None:
            after[i] = text
    return after


def _related(event: MemoryEvent) -> list[str]:
    """The other memories an event names: what replaced it, what it absorbed, what it is kept apart from."""
    after, before = event.after or {}, event.before or {}
    if event.action == "superseded":
        return [str(after["superseded_by"])] if after.get("superseded_by") else []
    if event.action in ("merged", "reinforced"):
        return [str(i) for i in after.get("absorbed") or []]
    if event.action == "restored":
        return [str(i) for i in after.get("kept_apart_from") or []] or (
            [str(before["superseded_by"])] if before.get("superseded_by") else [])
    return []


def timeline_events(events: Sequence[MemoryEvent], stored: Mapping[str, MemoryRecord]) -> list[dict[str, Any]]:
    """Every event of a user as the timeline shows it, oldest first (`events` in that order);
    `stored`: the memories that still exist, by id."""
    by_memory: dict[str, list[int]] = {}
    for i, event in enumerate(events):
        if event.memory_id is not None:
            by_memory.setdefault(event.memory_id, []).append(i)
    texts: list[str | None] = [None] * len(events)
    types: list[str | None] = [None] * len(events)
    statuses: list[str | None] = [None] * len(events)
    for memory_id, indexes in by_memory.items():
        own = [events[i] for i in indexes]
        record = stored.get(memory_id)
        memory_type = record.memory_type if record is not None else None
        status = None
        for i, text in zip(indexes, _replayed_texts(own, record), strict=True):
            event = events[i]
            texts[i] = text
            change = {**(event.before or {}), **(event.after or {})}
            memory_type = change.get("memory_type", memory_type)
            types[i] = memory_type
            said = (event.after or {}).get("status") if event.action == "feedback" else STATUS_AFTER.get(event.action)
            # An edit or a vote leaves the status as it was (as it is now, where no earlier event says).
            status = said or status or (record.status if record is not None else None)
            statuses[i] = status
    shown = []
    for i, event in enumerate(events):
        after = event.after or {}
        shown.append({
            "id": event.id, "at": event.created_at, "action": event.action, "memory_id": event.memory_id,
            "actor": event.actor, "content": texts[i], "memory_type": types[i], "status_after": statuses[i],
            "related_ids": _related(event), "job_id": after.get("job_id"),
            "agent_id": event.agent_id, "visibility": event.visibility,
            "detail": {k: v for k, v in after.items() if k not in SHOWN_APART} or None,
        })
    return shown


def page_of(shown: list[dict[str, Any]], *, since: datetime | None, until: datetime | None, limit: int,
            cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of timeline events between `since` and `until` (both included), after the cursor."""
    if not 1 <= limit <= 5000:
        raise InvalidInputError("limit must be between 1 and 5000")
    if since is not None and until is not None and since > until:
        raise InvalidInputError("since must not be after until")
    start = 0
    if cursor is not None:
        at, event_id = decode_cursor(cursor)
        position = next((k for k, e in enumerate(shown) if (e["at"].isoformat(), e["id"]) == (at, event_id)), None)
        if position is None:
            raise InvalidInputError("cursor is not one this server returned (or its event is gone)")
        start = position + 1
    window = [e for e in shown[start:] if (since is None or e["at"] >= since) and (until is None or e["at"] <= until)]
    page = window[:limit]
    more = len(window) > limit
    return page, (encode_cursor(page[-1]["at"].isoformat(), page[-1]["id"]) if more else None)


def encode_cursor(at: str, event_id: str) -> str:
    """The opaque cursor after the event (at, id)."""
    return base64.urlsafe_b64encode(json.dumps([at, event_id]).encode()).decode()


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (at, id) a cursor names; InvalidInputError for one this server did not return."""
    try:
        at, event_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return str(at), str(event_id)
    except Exception:
        raise InvalidInputError("cursor is not one this server returned") from None


def query_time(name: str, value: datetime | None) -> datetime | None:
    """A time a query names, in UTC (one without a zone is UTC); InvalidInputError outside the years 1 to 9999."""
    if value is None:
        return None
    try:
        return as_utc(value)
    except ValueError as exc:
        raise InvalidInputError(f"{name}: {exc}") from None


def timeline_page(store: MemoryStore, scope: Scope, *, since: datetime | None, until: datetime | None, limit: int,
                  cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the user's timeline, oldest first: every change of their memories (that the
    scope's viewer may read) with the text and status after it, and the cursor of the next page."""
    since, until = query_time("since", since), query_time("until", until)
    chosen: dict[str, Any] = {}

    def select(keys: list[dict[str, Any]]) -> set[str]:
        # The page is cut on the events' keys; only its events, and every event of the memories
        # it shows (their text is replayed from them), are read whole.
        page, chosen["cursor"] = page_of(keys, since=since, until=until, limit=limit, cursor=cursor)
        chosen["page"] = [k["id"] for k in page]
        memories = {k["memory_id"] for k in page if k["memory_id"] is not None}
        return {k["id"] for k in keys if k["memory_id"] in memories} | set(chosen["page"])

    events = store.user_events(scope, select)
    stated = {e.memory_id for e in events if e.action == "created" or (e.action == "merged" and e.after
                                                                     and "content" in e.after)}
    unstated = sorted({e.memory_id for e in events if e.memory_id is not None} - stated)
    stored = {r.id: r for chunk in range(0, len(unstated), 1000)
              for r in store.get_memories(scope, unstated[chunk:chunk + 1000])}
    shown = {e["id"]: e for e in timeline_events(events, stored)}
    return [shown[i] for i in chosen["page"]], chosen["cursor"]
