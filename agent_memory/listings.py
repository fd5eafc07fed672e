"""The org's lists an operator reads (the console's first pages): its users with their counts, and
its jobs, a page at a time."""

from __future__ import annotations

from typing import Any

from agent_memory.errors import InvalidInputError
from agent_memory.models import OrgScope, check_identifier
from agent_memory.store import MemoryStore
from agent_memory.timeline import decode_cursor, encode_cursor


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= 1000:
        raise InvalidInputError("limit must be between 1 and 1000")


def users(store: MemoryStore, scope: OrgScope, *, limit: int = 50, cursor: str | None = None,
          prefix: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the org's users by id (those whose id starts with `prefix`), each with its
    memories counted by status and (active ones) by type, and its last activity; the next cursor."""
    _check_limit(limit)
    if prefix:
        check_identifier("prefix", prefix)
    after = None if cursor is None else decode_cursor(cursor)[1]
    page, last = store.user_page(scope, limit=limit, after=after, prefix=prefix or None)
    return page, None if last is None else encode_cursor("user", last)


def jobs(store: MemoryStore, scope: OrgScope, *, kind: str | None = None, state: str | None = None, limit: int = 50,
         cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the org's jobs, newest first, of one kind and in one state where given."""
    _check_limit(limit)
    check_identifier("kind", kind, required=False)
    check_identifier("state", state, required=False)
    return store.list_jobs(scope, kind=kind, state=state, limit=limit, cursor=cursor)
