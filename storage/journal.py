"""What a tenant's memories leave besides themselves: the audit events, the message log, job rows
and consolidation's remembered verdicts. Every write names its scope; every read filters by it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from agent_memory.errors import InvalidInputError
from agent_memory.models import MemoryEvent, MessageRecord, OrgScope, Scope, WriteScope, turn_order
from agent_memory.store import EventSelection
from storage import schema as sc
from storage.filters import Where, scoped
from storage.memory_rows import check_within, encode_cursor, newest_page
from storage.tables import Tables, retrying


def events_where(scope: Scope) -> Where:
    """The events of the scope's user that its viewer may read (an agent: those of the memories it
    may read, and the erasure's, which are shared)."""
    where = scoped(scope, owner_only=True)
    return where.visible_to(scope.viewer_agent) if scope.viewer_agent is not None else where


class Journal:
    """Events, messages, jobs and verdicts, inside a scope."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def append_events(self, scope: WriteScope, events: Sequence[MemoryEvent]) -> None:
        """Insert events whose id is absent, in one commit."""
        check_within(scope, events, "event")
        rows = [sc.event_row(e) for e in events]
        # Creation events have ids derived from the memory's, so that a retry does not repeat them:
        # they are looked up, then the rest appended (7 against 10-12 ms for a merge_insert at 200k
        # memories). Only the Writer that created a memory, or a retry it applies in its turn,
        # writes its creation event, so no other writer races for these ids.
        existing = self.tables.existing_ids(sc.EVENTS, scope, [r["id"] for r in rows])
        fresh = [r for r in rows if r["id"] not in existing]
        if fresh:
            data = pa.Table.from_pylist(fresh, schema=sc.EVENTS_SCHEMA)
            retrying(lambda: self.tables.table(sc.EVENTS).add(data), "append events")

    def memory_events(self, scope: Scope, memory_id: str) -> list[MemoryEvent]:
        """Audit events of one memory of the scope's user (that its viewer may read), oldest first."""
        where = events_where(scope).eq("memory_id", memory_id)
        events = [sc.event_record(r) for r in self.tables.rows(sc.EVENTS, where)]
        # Event ids other than creation are time-ordered, so equal timestamps keep their order.
        events.sort(key=lambda e: (e.created_at, e.action != "created", e.id))
        return events

    def user_events(self, scope: Scope, select: EventSelection | None = None) -> list[MemoryEvent]:
        """Every audit event of the scope's user, oldest first (as `memory_events` orders them).

        `select` picks which to read whole: given every event's `{"id", "at", "memory_id"}` in that
        order, the ids of the events to return (their JSON is parsed only then)."""
        rows = self.tables.rows(sc.EVENTS, events_where(scope))
        rows.sort(key=lambda r: (r["created_at"], r["action"] != "created", r["id"]))
        if select is not None:
            keep = select([{"id": r["id"], "at": r["created_at"], "memory_id": r["memory_id"]} for r in rows])
            rows = [r for r in rows if r["id"] in keep]
        return [sc.event_record(r) for r in rows]

    def user_messages(self, scope: Scope) -> list[MessageRecord]:
        """Every logged turn of the scope's user, by session, oldest first."""
        rows = self.tables.rows(sc.MESSAGES, scoped(scope, owner_only=True))
        rows.sort(key=lambda r: (r["session_id"], r["created_at"], r["message_id"]))
        return [sc.message_record(r) for r in rows]

    def drop_memory_events(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete the audit events of these memories of the scope's user (retention); the count."""
        if not memory_ids:
            return 0
        return self._delete(sc.EVENTS, scoped(scope, owner_only=True).isin("memory_id", memory_ids).render())

    def drop_messages_before(self, scope: Scope, before: datetime) -> int:
        """Delete the scope's user's logged messages older than `before` (retention); the count."""
        return self._delete(sc.MESSAGES, scoped(scope, owner_only=True).lt("created_at", before).render())

    def _delete(self, name: str, where: str) -> int:
        table = self.tables.table(name)
        count = table.count_rows(where)
        if count:
            retrying(lambda: table.delete(where), f"delete from {name}")
        return int(count)

    def append_messages(self, scope: WriteScope, messages: Sequence[MessageRecord]) -> set[str]:
        """Log messages not logged before; return the row ids that were new."""
        check_within(scope, messages, "message")
        existing = self.tables.existing_ids(sc.MESSAGES, scope, [m.id for m in messages])
        fresh = [m for m in messages if m.id not in existing]
        self.tables.insert_absent(sc.MESSAGES, [sc.message_row(m) for m in fresh], sc.MESSAGES_SCHEMA)
        return {m.id for m in fresh}

    def session_messages(self, scope: Scope, session_id: str, last: int) -> list[MessageRecord]:
        """The last messages of one session of the scope's user, oldest first."""
        where = scoped(scope, owner_only=True).eq("session_id", session_id)
        rows = self.tables.rows(sc.MESSAGES, where)
        rows.sort(key=lambda r: turn_order(r["created_at"], r["message_id"]))
        return [sc.message_record(r) for r in rows[-last:]] if last > 0 else []

    def put_job(self, scope: OrgScope, job: dict[str, Any]) -> None:
        """Create or overwrite one job row."""
        if job.get("org_id") != scope.org_id:
            raise InvalidInputError("the job must belong to the org being written")
        data = pa.Table.from_pylist([sc.job_row(job)], schema=sc.JOBS_SCHEMA)
        table = self.tables.table(sc.JOBS)
        retrying(
            lambda: table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data),
            "put job",
        )

    def get_job(self, scope: OrgScope, job_id: str) -> dict[str, Any] | None:
        """One job of the org."""
        rows = self.tables.rows(sc.JOBS, scoped(scope).eq("id", job_id))
        return sc.job_dict(rows[0]) if rows else None

    def list_jobs(self, scope: OrgScope, *, kind: str | None, state: str | None, limit: int,
                  cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """The org's jobs, newest first (of one kind, in one state, where given), and the cursor of
        the next page: the keys of every matching row are read and ordered, then the page's rows."""
        where = scoped(scope)
        if kind is not None:
            where.eq("kind", kind)
        if state is not None:
            where.eq("state", state)
        page, more = newest_page(self.tables.rows(sc.JOBS, where, ["id", "created_at"]), limit, cursor)
        if not page:
            return [], None
        found = {r["id"]: sc.job_dict(r) for r in self.tables.rows(sc.JOBS, scoped(scope).isin("id", [k["id"] for k in page]))}
        jobs = [found[k["id"]] for k in page if k["id"] in found]
        last = page[-1]
        return jobs, (encode_cursor(last["created_at"].isoformat(), last["id"]) if more else None)

    def verdicts(self, scope: Scope, ids: Sequence[str]) -> dict[str, bool]:
        """The remembered verdicts among these pair ids of one user: id -> same fact or not."""
        if not ids:
            return {}
        where = scoped(scope, owner_only=True).isin("id", list(ids))
        return {r["id"]: bool(r["same"]) for r in self.tables.rows(sc.VERDICTS, where, ["id", "same"])}

    def record_verdicts(self, scope: Scope, verdicts: dict[str, bool], judge: str, at: datetime) -> None:
        """Remember verdicts of one user's pairs (insert-if-absent: a verdict once given stands)."""
        rows = [{"id": pair_id, "org_id": scope.org_id, "user_id": scope.user_id, "judge": judge, "same": same,
                 "judged_at": at} for pair_id, same in verdicts.items()]
        self.tables.insert_absent(sc.VERDICTS, rows, sc.VERDICTS_SCHEMA)
