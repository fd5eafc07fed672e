"""Memory rows of one tenant: inserts (insert-if-absent), reads by id and by page, in-place
replacement, reindexing, deletion, and one user's whole set for consolidation."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from agent_memory.errors import InvalidInputError
from agent_memory.models import MemoryRecord, Scope, WriteScope
from agent_memory.store import Page
from storage import schema as sc
from storage.filters import Where, scoped
from storage.recall_scan import RecallScan
from storage.tables import Tables, retrying


def check_within(scope: WriteScope, rows: Iterable[object], what: str) -> None:
    """Refuse a write of any row (record, event, message) outside the scope it names."""
    for row in rows:
        owner = (row.org_id, getattr(row, "user_id", None), getattr(row, "team_id", None))  # type: ignore[attr-defined]
        if not scope.holds(*owner):
            raise InvalidInputError(f"every {what} must belong to the scope being written")


class MemoryRows:
    """The `memories` table's rows, read and written inside a scope."""

    def __init__(self, tables: Tables, scan: RecallScan) -> None:
        self.tables = tables
        self.scan = scan

    def insert(self, scope: WriteScope, records: Sequence[MemoryRecord], *, known_absent: bool = False) -> set[str]:
        """Insert absent records in one commit; return the ids that were new.

        `known_absent`: the caller has just looked the ids up and found none (the write path
        does, for its idempotency check), so they are not looked up again. The insert stays
        insert-if-absent (a `merge_insert`): a writer that stored one of them between that
        lookup and this commit wins, this merge inserts fewer rows, and those are found in the
        version before this commit. Two commits at the very same moment conflict on the id, the
        table's primary key, and Lance plans the later merge again (see `Tables.insert_absent`).
        """
        check_within(scope, records, "record")
        ids = [r.id for r in records]
        if known_absent:
            fresh = list(records)
        else:
            existing = self.tables.existing_ids(sc.MEMORIES, scope, ids)
            fresh = [r for r in records if r.id not in existing]
        table_schema = self.tables.table(sc.MEMORIES).schema
        result = self.tables.insert_absent(sc.MEMORIES, [sc.memory_row(r) for r in fresh], table_schema)
        inserted = int(getattr(result, "num_inserted_rows", len(fresh)) if result is not None else 0)
        if inserted == len({r.id for r in fresh}):
            return {r.id for r in fresh}
        before = self.tables.table(sc.MEMORIES).to_lance().checkout_version(int(result.version) - 1)
        where = scoped(scope, owner_only=True).isin("id", [r.id for r in fresh]).render()
        earlier = set(before.to_table(columns=["id"], filter=where).column("id").to_pylist())
        return {r.id for r in fresh if r.id not in earlier}

    def origin_hashes(self, scope: WriteScope, ids: Sequence[str]) -> dict[str, str]:
        """The origin hash of each id that exists in the org (ids are derived per org and user).

        Read through the recall snapshot, which follows the table's version: the same rows as a
        query of the table, with less overhead per call (this lookup is on every write's path).
        """
        if not ids:
            return {}
        where = scoped(scope, owner_only=True).isin("id", ids).render()
        rows = self.scan.snapshot().to_table(columns=["id", "origin_hash"], filter=where)
        return dict(zip(rows.column("id").to_pylist(), rows.column("origin_hash").to_pylist(), strict=True))

    def get(self, scope: Scope, ids: Sequence[str], *, with_vectors: bool = False) -> list[MemoryRecord]:
        """The records among `ids` inside the scope."""
        if not ids:
            return []
        columns = None if with_vectors else [c for c in self.tables.table(sc.MEMORIES).schema.names if c != "vector"]
        rows = self.tables.rows(sc.MEMORIES, scoped(scope).isin("id", ids), columns)
        return [sc.memory_record(r) for r in rows]

    def page(self, scope: Scope, *, limit: int, cursor: str | None, status: str | None,
             as_of: datetime | None = None) -> Page:
        """Newest first; the cursor is the (created_at, id) of the last row returned. With `as_of`:
        the memories created by then that were active then (`status` is not used)."""
        where = scoped(scope)
        if as_of is not None:
            where.le("created_at", as_of).any_of(
                Where().eq("status", "active"), Where().ne("status", "active").gt("valid_to", as_of))
            where.null_or_gt("expires_at", as_of)
        elif status is not None:
            where.eq("status", status)
        page, more = newest_page(self.tables.rows(sc.MEMORIES, where, ["id", "created_at"]), limit, cursor)
        records = {r.id: r for r in self.get(scope, [k["id"] for k in page])}
        ordered = [records[k["id"]] for k in page if k["id"] in records]
        next_cursor = None
        if more and page:
            last = page[-1]
            next_cursor = encode_cursor(last["created_at"].isoformat(), last["id"])
        return Page(ordered, next_cursor)

    def replace(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Overwrite rows that still exist in the scope; a row deleted meanwhile stays deleted."""
        if not records:
            return 0
        stored = {r.id: r for r in self.get(scope, [r.id for r in records], with_vectors=True)}
        rows = []
        for record in records:
            if record.id in stored:
                if record.vector is None:
                    # A record read without its vector keeps the stored one: never write a null.
                    record = record.model_copy(update={"vector": stored[record.id].vector})
                rows.append(sc.memory_row(record))
        if not rows:
            return 0
        table = self.tables.table(sc.MEMORIES)
        data = pa.Table.from_pylist(rows, schema=table.schema)
        result = retrying(lambda: table.merge_insert("id").when_matched_update_all().execute(data), "update")
        return int(getattr(result, "num_updated_rows", len(rows)))

    def reindex(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Write records' index text, keywords, vector and vocabulary share; return rows written.

        A row is written only if it still has the `updated_at`, status, access count and content it
        was read with: whatever changed it meanwhile (a patch, a merge, an access fold) wins. A
        table switched to another embedding model meanwhile is refused (`embedding_model_mismatch`).
        """
        records = [r for r in records if r.vector is not None]
        if not records:
            return 0
        self.scan.snapshot()  # raises if the table now holds another model's vectors
        stored = {r.id: r for r in self.get(scope, [r.id for r in records], with_vectors=True)}
        rows = [sc.memory_row(r) for r in records if r.id in stored]
        if not rows:
            return 0
        table = self.tables.table(sc.MEMORIES)
        data = pa.Table.from_pylist(rows, schema=table.schema)
        unchanged = ("target.updated_at = source.updated_at AND target.status = source.status "
                     "AND target.access_count = source.access_count AND target.content = source.content")
        result = retrying(lambda: table.merge_insert("id").when_matched_update_all(where=unchanged).execute(data),
                           "reindex")
        return int(getattr(result, "num_updated_rows", len(rows)))

    def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        """Delete rows of the scope by id."""
        if not ids:
            return 0
        where = scoped(scope).isin("id", ids).render()
        table = self.tables.table(sc.MEMORIES)
        count = table.count_rows(where)
        if count:
            retrying(lambda: table.delete(where), "delete")
        return count

    def of_user(self, scope: Scope) -> tuple[list[MemoryRecord], np.ndarray]:
        """Every memory of the scope, any status, and their vectors as one (n, dim) matrix, same order."""
        rows = self.tables.table(sc.MEMORIES).search().where(scoped(scope).render()).limit(None).to_arrow()
        vectors = rows.column("vector").combine_chunks()
        if len(rows):
            flat = vectors.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
            matrix = flat.reshape(len(rows), self.tables.embedding_dim)
        else:
            matrix = np.zeros((0, self.tables.embedding_dim), dtype=np.float32)
        records = [sc.memory_record(r) for r in rows.drop_columns(["vector"]).to_pylist()]
        return records, matrix

    def any(self, scope: Scope) -> bool:
        """Whether the user has any memory row (of any status)."""
        return self.tables.table(sc.MEMORIES).count_rows(scoped(scope, owner_only=True).render()) > 0


def encode_cursor(created_at: str, memory_id: str) -> str:
    """The opaque cursor after the row (created_at, id)."""
    return base64.urlsafe_b64encode(json.dumps([created_at, memory_id]).encode()).decode()


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (created_at, id) a cursor names; InvalidInputError for one this server did not return."""
    try:
        created_at, memory_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return str(created_at), str(memory_id)
    except Exception:
        raise InvalidInputError("cursor is not one this server returned") from None


def newest_page(keys: list[dict[str, Any]], limit: int, cursor: str | None) -> tuple[list[dict[str, Any]], bool]:
    """Rows' keys (`id`, `created_at`), newest first, after `cursor` (from `encode_cursor`): the first
    `limit`, and whether more follow."""
    keys = sorted(keys, key=lambda r: (r["created_at"], r["id"]), reverse=True)
    if cursor is not None:
        after = decode_cursor(cursor)
        keys = [k for k in keys if (k["created_at"].isoformat(), k["id"]) < after]
    return keys[:limit], len(keys) > limit
