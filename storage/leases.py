"""Named leases on the jobs table: one holder at a time across processes and nodes, by conditional
writes, with an expiry so that a holder that died frees it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa

from agent_memory.errors import ConflictError
from agent_memory.models import OrgScope
from storage import schema as sc
from storage.filters import Where, literal, scoped
from storage.tables import Tables, retrying

SYSTEM = OrgScope(sc.SYSTEM_ORG)


class Leases:
    """The run leases (consolidation's, the conversation scheduler's) of one store."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables

    def _rows(self, lease_id: str) -> list[dict[str, Any]]:
        where = scoped(SYSTEM).eq("id", lease_id).render()
        query = self.tables.table(sc.JOBS).search().where(where).with_row_id(True)
        return query.limit(None).to_arrow().to_pylist()

    def acquire(self, name: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        """Take the named lease if it is free, expired or already ours; True if we hold it now.

        One conditional merge_insert on the lease row: Lance retries it on a concurrent update of
        the row, re-checking the condition, so two runs cannot both take a held lease. Two runs
        that both create the absent row add two rows; then the earlier commit (lower row id) wins
        and the other removes its row.
        """
        lease_id = sc.lease_id(name)
        token = sc.lease_token(owner, ttl)
        row = {"id": lease_id, "org_id": sc.SYSTEM_ORG, "user_id": None, "kind": name, "state": "held",
               "progress": 0.0, "created_at": now, "updated_at": now, "error": None, "report": token}
        data = pa.Table.from_pylist([row], schema=sc.JOBS_SCHEMA)
        takeover = Where().any_of(
            Where("target").ne("state", "held"),
            Where("target").lt("updated_at", now - ttl),
            Where("target").eq("report", token),
        ).render()
        table = self.tables.table(sc.JOBS)
        retrying(
            lambda: table.merge_insert("id").when_matched_update_all(where=takeover)
            .when_not_matched_insert_all().execute(data),
            "acquire lease",
        )
        rows = sorted(self._rows(lease_id), key=lambda r: r["_rowid"])
        if not rows:
            return False
        winner = rows[0]
        if len(rows) > 1 and winner["report"] != token:
            where = scoped(SYSTEM).eq("id", lease_id).eq("report", token).render()
            retrying(lambda: table.delete(where), "drop lost lease row")
        return winner["report"] == token and winner["state"] == "held"

    def renew(self, name: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        """Push our lease's expiry forward; False if we no longer hold it."""
        where = (scoped(SYSTEM).eq("id", sc.lease_id(name))
                 .eq("report", sc.lease_token(owner, ttl)).eq("state", "held").render())
        table = self.tables.table(sc.JOBS)
        result = retrying(lambda: table.update(where=where, values_sql={"updated_at": literal(now)}), "renew lease")
        return int(getattr(result, "rows_updated", 0) or 0) > 0

    def release(self, name: str, owner: str, ttl: timedelta, now: datetime) -> None:
        """Give our lease back (a lease held by another owner is left alone)."""
        where = (scoped(SYSTEM).eq("id", sc.lease_id(name))
                 .eq("report", sc.lease_token(owner, ttl)).render())
        values = {"state": literal("released"), "updated_at": literal(now)}
        table = self.tables.table(sc.JOBS)
        retrying(lambda: table.update(where=where, values_sql=values), "release lease")

    @contextmanager
    def holding(self, name: str, owner: str, ttl: timedelta, now: datetime, *,
                clock: Callable[[], datetime]) -> Iterator[None]:
        """Hold the named lease for the block: taken at `now`, given back at `clock()` however the
        block ends, an error included.

        Raises ConflictError (code `{name}_running`) while another owner holds the lease.
        """
        if not self.acquire(name, owner, ttl, now):
            holder = self.holder(name, now) or {}
            raise ConflictError(
                f"another {name} run ({holder.get('owner', 'unknown')}) holds the lease until "
                f"{holder.get('expires_at', 'it expires')}; try again later", code=f"{name}_running",
            )
        try:
            yield
        finally:
            self.release(name, owner, ttl, clock())

    def holder(self, name: str, now: datetime) -> dict[str, Any] | None:
        """Who holds the named lease and until when, or None when it is free or expired."""
        for row in sorted(self._rows(sc.lease_id(name)), key=lambda r: r["_rowid"])[:1]:
            token = json.loads(row["report"] or "{}")
            expires = row["updated_at"] + timedelta(seconds=float(token.get("ttl_s", 0)))
            if row["state"] == "held" and expires > now:
                return {"owner": token.get("owner"), "since": row["created_at"], "expires_at": expires}
        return None
