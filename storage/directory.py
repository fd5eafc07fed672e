"""The org's users, a page at a time: who holds memories or logged turns, with their memories
counted by status and type and when they last changed.

A page costs two reads: the user ids of the org (one column, through the org index; a prefix
narrows it to a range of the `user_id` index), of which the page takes the next `limit` in order,
then the few columns of those users' rows that the counts need (through the `user_id` index),
grouped in Arrow. Nothing is kept beside the rows, so every count is what the rows say now,
whatever wrote them (see benchmarks/console_api.py for the cost at 1M memories).
"""

from __future__ import annotations

import sys
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from agent_memory.models import MEMORY_TYPES, OrgScope
from storage import schema as sc
from storage.filters import Where, scoped
from storage.tables import Tables

STATUSES = ("active", "superseded", "expired")


def prefix_end(prefix: str) -> str | None:
    """The smallest string after every string that starts with `prefix` (None: there is none),
    in code point order, which is the store's order of strings (UTF-8 bytes)."""
    stem = prefix.rstrip(chr(sys.maxunicode))
    if not stem:
        return None
    last = ord(stem[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # surrogates are no characters: the next one is past them
        last = 0xE000
    return stem[:-1] + chr(last)


def _ids_where(scope: OrgScope, prefix: str | None, after: str | None) -> Where:
    where = scoped(scope)
    if prefix:
        where.ge("user_id", prefix)
        end = prefix_end(prefix)
        if end is not None:
            where.lt("user_id", end)
    if after is not None:
        where.gt("user_id", after)
    return where


def _unique(table: pa.Table) -> set[str]:
    return set(pc.unique(table.column("user_id")).to_pylist()) if table.num_rows else set()


def user_page(tables: Tables, scope: OrgScope, *, limit: int, after: str | None,
              prefix: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """The org's users after `after` (by id), whose ids start with `prefix`: up to `limit` of them,
    each `{"user_id", "memories": {status: n}, "by_type": {type: n active}, "last_activity"}`, and
    the id to go on after (None on the last page)."""
    where = _ids_where(scope, prefix, after)
    ids = _unique(tables.read(sc.MEMORIES, where, ["user_id"])) | _unique(tables.read(sc.MESSAGES, where, ["user_id"]))
    ordered = sorted(ids)
    page = ordered[:limit]
    if not page:
        return [], None
    rows = tables.read(sc.MEMORIES, scoped(scope).isin("user_id", page),
                       ["user_id", "status", "memory_type", "updated_at"])
    users = {user: {"user_id": user, "memories": dict.fromkeys(STATUSES, 0), "by_type": dict.fromkeys(MEMORY_TYPES, 0),
                    "last_activity": None} for user in page}
    if rows.num_rows:
        for row in rows.group_by(["user_id", "status"]).aggregate([([], "count_all")]).to_pylist():
            users[row["user_id"]]["memories"][row["status"]] = row["count_all"]
        active = rows.filter(pc.equal(rows.column("status"), "active"))
        for row in active.group_by(["user_id", "memory_type"]).aggregate([([], "count_all")]).to_pylist():
            users[row["user_id"]]["by_type"][row["memory_type"]] = row["count_all"]
        for row in rows.group_by("user_id").aggregate([("updated_at", "max")]).to_pylist():
            users[row["user_id"]]["last_activity"] = row["updated_at_max"]
    turns = tables.read(sc.MESSAGES, scoped(scope).isin("user_id", page), ["user_id", "created_at"])
    if turns.num_rows:
        for row in turns.group_by("user_id").aggregate([("created_at", "max")]).to_pylist():
            user = users[row["user_id"]]
            latest = row["created_at_max"]
            if user["last_activity"] is None or latest > user["last_activity"]:
                user["last_activity"] = latest
    return [users[u] for u in page], (page[-1] if len(ordered) > limit else None)
