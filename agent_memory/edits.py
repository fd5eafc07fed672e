"""One memory read and changed in place: fetched by its id or its client id, shown with the recall
hits not yet folded into its row, listed, updated (its content redacted, indexed and embedded
again), deleted, and its audit history. Each change leaves its audit event."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from agent_memory.access import AccessRecorder
from agent_memory.audit import memory_event
from agent_memory.errors import ConflictError, InvalidInputError, NotFoundError
from agent_memory.feedback import Feedback, vote_change, voted
from agent_memory.ids import memory_id
from agent_memory.index_text import index_parts, index_speaker
from agent_memory.merge import KEPT_APART, apart_ids
from agent_memory.models import MemoryEvent, MemoryPatch, MemoryRecord, Scope, check_identifier, parse_input
from agent_memory.rows import RowBuilder
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore, Page
from agent_memory.timeline import query_time


class Edits:
    """Reads and in-place changes of single memories on one store; `embed_records` embeds a changed content."""

    def __init__(self, store: MemoryStore, rows: RowBuilder, embed_records: Callable[[Sequence[MemoryRecord]], None],
                 access: AccessRecorder, settings: Settings, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.rows = rows
        self.embed_records = embed_records
        self.access = access
        self.settings = settings
        self.clock = clock

    def get(self, scope: Scope, memory_id_: str, *, with_vector: bool = False) -> MemoryRecord:
        """One memory of the scope, as shown (see `with_pending_access`); the id may be the stored id
        or the client id it was written with."""
        return self.with_pending_access(scope, [self.stored(scope, memory_id_, with_vector=with_vector)])[0]

    def with_pending_access(self, scope: Scope, records: list[MemoryRecord]) -> list[MemoryRecord]:
        """Records as shown: stored access counts plus the hits still in the access log (the rows
        themselves are not changed, so writing a record back never counts its hits twice)."""
        pending = self.store.pending_access(scope, [r.id for r in records])
        for record in records:
            if record.id in pending:
                hits, last = pending[record.id]
                record.access_count += hits
                record.last_accessed_at = max(last, record.last_accessed_at or last)
        return records

    def stored(self, scope: Scope, memory_id_: str, *, with_vector: bool = False) -> MemoryRecord:
        """One memory of the scope as stored (what changes to it start from)."""
        check_identifier("memory id", memory_id_)
        candidates = [memory_id_]
        if scope.user_id is not None:
            candidates.append(memory_id(scope.org_id, scope.user_id, client_id=memory_id_))
        found = self.store.get_memories(scope, candidates, with_vectors=with_vector)
        if not found:
            raise NotFoundError(f"memory {memory_id_} not found")
        return found[0]

    def list(self, scope: Scope, *, limit: int = 50, cursor: str | None = None, status: str | None = "active",
             as_of: datetime | None = None) -> Page:
        """The scope's memories, newest first; with `as_of`, those it held then (any status now)."""
        if not 1 <= limit <= 1000:
            raise InvalidInputError("limit must be between 1 and 1000")
        if status not in (None, "active", "superseded", "expired"):
            raise InvalidInputError("status must be active, superseded, expired or all")
        page = self.store.list_memories(scope, limit=limit, cursor=cursor, status=status,
                                        as_of=query_time("as_of", as_of))
        self.with_pending_access(scope, page.records)
        return page

    def update(self, scope: Scope, memory_id_: str, patch: MemoryPatch | dict[str, Any], *, actor: str) -> MemoryRecord:
        """Change a memory in place (content re-embedded) and record the change."""
        change = parse_input(MemoryPatch, patch)
        fields = change.model_dump(exclude_unset=True)
        if not fields:
            raise InvalidInputError("nothing to change: give content, memory_type, importance, metadata or expires_at")
        limits = self.settings.limits
        current = self.stored(scope, memory_id_, with_vector=True)
        updated = current.model_copy(deep=True)
        if "content" in fields and fields["content"] is not None:
            if len(fields["content"]) > limits.max_content_chars:
                raise InvalidInputError(f"content is longer than {limits.max_content_chars} characters")
            updated.content = self.rows.redactor.redact_text(fields["content"])
            context, _ = index_parts(current.index_text, current.content)
            speaker = index_speaker(current.index_text, current.content)
            updated.index_text, updated.keywords = self.rows.index(updated.content, context, speaker)
            self.embed_records([updated])
        for name in ("memory_type", "importance", "expires_at"):
            if name in fields and (fields[name] is not None or name == "expires_at"):
                setattr(updated, name, fields[name])
        if "metadata" in fields and fields["metadata"] is not None:
            updated.metadata = self.rows.redact_metadata(fields["metadata"])
            if apart_ids(current) and KEPT_APART not in updated.metadata:
                # Restoring kept this memory apart from what had replaced it; a new metadata keeps that.
                updated.metadata[KEPT_APART] = apart_ids(current)
            if len(json.dumps(updated.metadata, default=str).encode()) > limits.max_metadata_bytes:
                raise InvalidInputError(f"metadata is larger than {limits.max_metadata_bytes} bytes")
        updated.updated_at = self.clock()
        if not self.store.replace_memories(scope, [updated]):
            raise NotFoundError(f"memory {memory_id_} not found")
        changed = [k for k in fields if getattr(current, k) != getattr(updated, k)]
        before = {k: _jsonable(getattr(current, k)) for k in changed}
        after = {k: _jsonable(getattr(updated, k)) for k in changed}
        self.store.append_events(scope, [self._event(updated, "updated", actor, before=before, after=after)])
        updated.vector = None
        return self.with_pending_access(scope, [updated])[0]

    def feedback(self, scope: Scope, memory_id_: str, vote: Feedback | dict[str, Any], *, actor: str) -> MemoryRecord:
        """A vote on one memory (agent_memory.feedback), with a `feedback` event; `outdated` on a
        memory that is not active is 409 `not_active` (nothing to expire)."""
        ballot: Feedback = parse_input(Feedback, vote)
        current = self.stored(scope, memory_id_)
        if ballot.signal == "outdated" and current.status != "active":
            raise ConflictError(f"memory {memory_id_} is {current.status}: only an active memory can be outdated",
                                code="not_active")
        now = self.clock()
        changed = voted(current, ballot.signal, now, self.settings.feedback)
        if not self.store.replace_memories(scope, [changed]):
            raise NotFoundError(f"memory {memory_id_} not found")
        if changed.status != "active":
            self.access.discard(scope.org_id, [changed.id])
        note = self.rows.redactor.redact_text(ballot.note) if ballot.note else None
        before, after = vote_change(current, changed, ballot, note, now, self.settings.feedback)
        self.store.append_events(scope, [self._event(changed, "feedback", actor, before=before, after=after)])
        return self.with_pending_access(scope, [changed])[0]

    def delete(self, scope: Scope, memory_id_: str, *, actor: str) -> None:
        """Delete one memory and record that it was deleted (the event keeps no content)."""
        current = self.stored(scope, memory_id_)
        if not self.store.delete_memories(scope, [current.id]):
            raise NotFoundError(f"memory {memory_id_} not found")
        self.access.discard(scope.org_id, [current.id])
        self.store.append_events(
            scope, [self._event(current, "deleted", actor, before={"memory_type": current.memory_type})]
        )

    def history(self, scope: Scope, memory_id_: str) -> list[MemoryEvent]:
        """The audit events of a memory, oldest first; works after deletion too."""
        check_identifier("memory id", memory_id_)
        events = self.store.memory_events(scope, memory_id_)
        if not events and scope.user_id is not None:
            events = self.store.memory_events(scope, memory_id(scope.org_id, scope.user_id, client_id=memory_id_))
        if not events:
            raise NotFoundError(f"memory {memory_id_} not found")
        return events

    def _event(self, record: MemoryRecord, action: str, actor: str, **change: Any) -> MemoryEvent:
        return memory_event(record, action, actor, self.clock(), **change)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value
