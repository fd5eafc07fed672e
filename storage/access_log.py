"""The access log: recall hits appended per flush, counted in when read, and folded into the
memory rows by maintenance (never by a recall)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from agent_memory.job_record import JobRecord
from agent_memory.models import OrgScope, Scope, utcnow
from storage import schema as sc
from storage.filters import Where, scoped
from storage.journal import Journal
from storage.tables import Tables, retrying

# The job kind that writes down an access fold before it changes anything (`AccessLog.fold`).
FOLD_KIND = "access_fold"


class AccessLog:
    """Hit counts of recalled memories, kept apart from the rows until a fold adds them in."""

    def __init__(self, tables: Tables, journal: Journal) -> None:
        self.tables = tables
        self.journal = journal

    def record(self, scope: OrgScope, counts: Mapping[str, Mapping[str, int]], at: datetime) -> int:
        """Append one flush of hit counts ({user: {memory id: hits}}) to the access log, in one commit.

        An earlier design added them to the memory rows with SQL updates. Lance rewrites an
        updated row whole (its vector too) into a new fragment, so every flush left each hot
        user's rows in two places until consolidation put them back in order: at 200k memories,
        a user's scan went from 1.5 ms to 5 ms after one 5,000-row flush, and stayed there. The
        log is folded into the rows by `fold_access`, which consolidation runs before it
        re-sorts the table anyway.
        """
        flush_id = uuid.uuid4().hex
        rows = [
            {"org_id": scope.org_id, "user_id": user_id, "memory_id": memory_id, "count": int(hits), "at": at,
             "flush_id": flush_id}
            for user_id, by_memory in counts.items() for memory_id, hits in by_memory.items() if hits > 0
        ]
        if rows:
            table = self.tables.table(sc.ACCESS)
            data = pa.Table.from_pylist(rows, schema=sc.ACCESS_SCHEMA)
            retrying(lambda: table.add(data), "record access")
        return len(rows)

    def pending(self, scope: Scope, ids: Sequence[str] | None = None) -> dict[str, tuple[int, datetime]]:
        """Hits logged since the last fold, per memory of the scope's user or team (of `ids` only,
        when given: the memories the caller read, which its viewer may read)."""
        where = scoped(scope, owner_only=True)
        if ids is not None:
            if not ids:
                return {}
            where.isin("memory_id", ids)
        totals = hit_totals(self.tables.read(sc.ACCESS, where, ["org_id", "memory_id", "count", "at"]))
        return {r["memory_id"]: (r["count_sum"], r["at_max"]) for r in totals.to_pylist()}

    def fold(self, scope: Scope | OrgScope | None = None) -> int:
        """Add the logged hits to the memory rows and drop them from the log; return the rows updated.

        Maintenance (consolidation runs it first): within one user, one org, or every org (None).
        Per org, the hits are summed per memory, added to the counts read from the org's active
        rows, and written in one partial-column merge (ids found in the org's rows only). Hits of
        rows deleted, merged or expired before the fold are dropped with the log. Only the
        flushes read here are dropped: hits logged meanwhile wait for the next fold.

        The merge and the drop are commits to two tables. Between them, a crash would leave hits
        both in the rows and in the log, and the next fold would count them twice; so each org's
        fold is first written down as a job (kind `access_fold`) holding the counts it sets, not
        the hits it adds, and removed when done. A fold finds the ones left behind and finishes them
        first: setting the same counts again changes nothing, and the drop happens once.
        """
        updated = sum(self._finish_fold(job) for job in self._unfinished_folds(scope))
        where = scoped(scope, owner_only=True) if scope is not None else None
        logged = self.tables.read(sc.ACCESS, where, ["org_id", "memory_id", "count", "at", "flush_id"])
        if logged.num_rows == 0:
            return updated
        user_id = scope.user_id if isinstance(scope, Scope) else None
        for job in self.plan_folds(logged, user_id):
            updated += self._finish_fold(job)
        return updated

    def _unfinished_folds(self, scope: Scope | OrgScope | None) -> list[dict[str, Any]]:
        where = (scoped(scope.org) if scope is not None else Where()).eq("kind", FOLD_KIND).eq("state", "running")
        return sorted((sc.job_dict(r) for r in self.tables.rows(sc.JOBS, where)), key=lambda job: job["created_at"])

    def plan_folds(self, logged: pa.Table, user_id: str | None) -> list[dict[str, Any]]:
        """Per org, the counts the fold of `logged` sets, written down as a running job before any change."""
        totals = hit_totals(logged)
        jobs = []
        for org in sorted(pc.unique(totals.column("org_id")).to_pylist()):
            rows = scoped(Scope.user(org, user_id) if user_id is not None else OrgScope(org)).eq("status", "active")
            stored = self.tables.read(sc.MEMORIES, rows, ["id", "access_count", "last_accessed_at"])
            hits = totals.filter(pc.equal(totals.column("org_id"), org))
            joined = hits.join(stored, keys="memory_id", right_keys="id", join_type="inner")
            # (no element-wise max for zoned timestamps: compared as microseconds)
            last = joined.column("at_max").cast(sc.TIMESTAMP).cast(pa.int64())
            before = pc.coalesce(joined.column("last_accessed_at").cast(pa.int64()), last)
            report = {
                "flush_ids": sorted(pc.unique(logged.filter(pc.equal(logged.column("org_id"), org))
                                              .column("flush_id")).to_pylist()),
                "ids": joined.column("memory_id").to_pylist(),
                "access_count": pc.add(joined.column("access_count"), joined.column("count_sum")).to_pylist(),
                "last_accessed_at_us": pc.max_element_wise(before, last).to_pylist(),
            }
            job = JobRecord.new(f"fold-{uuid.uuid4().hex}", org, FOLD_KIND, user_id=user_id, state="running",
                                report=report, now=utcnow())
            jobs.append(job.as_row())
            self.journal.put_job(OrgScope(org), jobs[-1])
        return jobs

    def merge_fold(self, job: dict[str, Any]) -> int:
        """Set the counts a fold job holds (again, after a crash: the same values); the rows updated."""
        report = job["report"]
        if not report["ids"]:
            return 0
        # `id` is the table's primary key: Lance refuses a merge whose key column may be null.
        changes = pa.table({
            "id": pa.array(report["ids"], pa.string()),
            "access_count": pa.array(report["access_count"], pa.int64()),
            "last_accessed_at": pa.array(report["last_accessed_at_us"], pa.int64()).cast(sc.TIMESTAMP),
        }, schema=pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("access_count", pa.int64()),
                             pa.field("last_accessed_at", sc.TIMESTAMP)]))
        # Matched rows only, and only these two columns: a row deleted since is not brought
        # back, and one merged or expired since keeps its status.
        memories = self.tables.table(sc.MEMORIES)
        result = retrying(lambda: memories.merge_insert("id").when_matched_update_all().execute(changes), "fold access")
        return int(getattr(result, "num_updated_rows", 0) or 0)

    def _finish_fold(self, job: dict[str, Any]) -> int:
        """Merge a fold job's counts, drop the flushes it folded from the log, then the job."""
        updated = self.merge_fold(job)
        owner = Scope.user(job["org_id"], job["user_id"]) if job.get("user_id") is not None else OrgScope(job["org_id"])
        folded = scoped(owner, owner_only=True).isin("flush_id", job["report"]["flush_ids"])
        retrying(lambda: self.tables.table(sc.ACCESS).delete(folded.render()), "drop folded access")
        # Done: the plan goes (the consolidation run's report counts the rows folded).
        done = scoped(OrgScope(job["org_id"])).eq("id", job["id"])
        retrying(lambda: self.tables.table(sc.JOBS).delete(done.render()), "close access fold")
        return updated


def hit_totals(logged: pa.Table) -> pa.Table:
    """Access-log rows summed per (org, memory): `count_sum` hits, the last at `at_max`."""
    return logged.group_by(["org_id", "memory_id"]).aggregate([("count", "sum"), ("at", "max")])
