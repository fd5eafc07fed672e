"""A user's memory, out and back in: the export (JSON lines) and the restore of such a file.

An export holds everything of one user an operator may need to move them: every memory in any
state (ids, status, `superseded_by`, validity, importance, access counts, sources, metadata, the
text search reads), every logged turn, and the audit events of their memories. It holds no
vectors (they belong to one model: a restore embeds again) and nothing of the org (a restore
writes into the org that runs it). Lines, in this order:

    {"kind": "export", "version": 1, "user_id": ...}
    {"kind": "memory", ...}    every memory, by creation time
    {"kind": "message", ...}   every turn, by session and time
    {"kind": "event", ...}     every event of their memories, oldest first
    {"kind": "end", "memories": n, "messages": n, "events": n}

The last line tells a whole file from a cut one. The same store exports the same bytes: nothing
in the file depends on when it was made, so an export, erase, restore, export round trip gives
the same file. The events an erasure leaves (`erased`, `purged`: the org's record of the
erasure, not the user's data) are not exported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agent_memory.errors import ConflictError, InvalidInputError
from agent_memory.models import MemoryEvent, MemoryRecord, MessageRecord, OrgScope, Scope, check_identifier
from agent_memory.rows import RowBuilder
from agent_memory.store import MemoryStore

VERSION = 1
# Derived from other columns (or from the model) and made again on restore.
DERIVED = {"org_id", "vector", "keywords", "oov"}
ERASURE_ACTIONS = frozenset({"erased", "purged"})


def export_lines(user_id: str, memories: list[MemoryRecord], messages: list[MessageRecord],
                 events: list[MemoryEvent]) -> Iterator[dict[str, Any]]:
    """The export of one user, line by line (see the module's docstring), from every row of theirs:
    memories as shown (access counts included), turns and events as stored."""
    memories = sorted(memories, key=lambda m: (m.created_at, m.id))
    events = [e for e in events if e.action not in ERASURE_ACTIONS]
    yield {"kind": "export", "version": VERSION, "user_id": user_id}
    for memory in memories:
        yield {"kind": "memory", **memory.model_dump(mode="json", exclude=DERIVED)}
    for message in messages:
        yield {"kind": "message", **message.model_dump(mode="json", exclude={"org_id"})}
    for event in events:
        yield {"kind": "event", **event.model_dump(mode="json", exclude={"org_id"})}
    yield {"kind": "end", "memories": len(memories), "messages": len(messages), "events": len(events)}


def dumps(line: dict[str, Any]) -> str:
    """One line of the file: compact JSON, Chinese kept as it is."""
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@dataclass
class Export:
    """A parsed export file: whose it is and its rows, in the org it is restored into."""

    user_id: str
    memories: list[MemoryRecord] = field(default_factory=list)
    messages: list[MessageRecord] = field(default_factory=list)
    events: list[MemoryEvent] = field(default_factory=list)


def parse_export(lines: Iterable[str | bytes], org_id: str) -> Export:
    """Read and check a whole export before anything is written: InvalidInputError naming the
    line of the first problem (a wrong kind or field, another user's row, a missing end)."""
    export: Export | None = None
    ended = False
    number = 0
    for number, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        where = f"line {number}"
        try:
            line = json.loads(text)
        except ValueError as exc:
            raise InvalidInputError(f"{where}: not JSON ({exc})") from None
        if not isinstance(line, dict):
            raise InvalidInputError(f"{where}: a JSON object was expected")
        kind = line.pop("kind", None)
        if ended:
            raise InvalidInputError(f"{where}: nothing may follow the end line")
        if export is None:
            export = _header(line, kind, where)
            continue
        if kind == "end":
            _check_counts(export, line, where)
            ended = True
            continue
        if line.get("user_id") != export.user_id:
            raise InvalidInputError(f"{where}: a row of user {line.get('user_id')!r} in the export of {export.user_id!r}")
        _add_row(export, kind, {**line, "org_id": org_id}, where)
    if export is None:
        raise InvalidInputError("the file is empty: an agent-memory export starts with its header line")
    if not ended:
        raise InvalidInputError(f"the file ends at line {number} without its end line: it was cut short")
    return export


def _header(line: dict[str, Any], kind: Any, where: str) -> Export:
    if kind != "export" or line.get("version") != VERSION:
        raise InvalidInputError(f"{where}: not an agent-memory export of version {VERSION} (its first line says "
                                f"kind {kind!r}, version {line.get('version')!r})")
    user_id = line.get("user_id")
    if not isinstance(user_id, str):
        raise InvalidInputError(f"{where}: the header names no user_id")
    check_identifier("user_id", user_id)
    return Export(user_id=user_id)


def _add_row(export: Export, kind: Any, row: dict[str, Any], where: str) -> None:
    try:
        if kind == "memory":
            export.memories.append(MemoryRecord.model_validate(row))
        elif kind == "message":
            export.messages.append(MessageRecord.model_validate(row))
        elif kind == "event":
            export.events.append(MemoryEvent.model_validate(row))
        else:
            raise InvalidInputError(f"{where}: unknown kind {kind!r} (memory, message, event or end)")
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first.get("loc", ())) or "row"
        raise InvalidInputError(f"{where}: {kind} {at}: {first.get('msg', 'invalid')}") from None


def _check_counts(export: Export, line: dict[str, Any], where: str) -> None:
    found = {"memories": len(export.memories), "messages": len(export.messages), "events": len(export.events)}
    said = {name: line.get(name) for name in found}
    if said != found:
        raise InvalidInputError(f"{where}: the end line counts {said}, the file holds {found}")


def restore(store: MemoryStore, rows: RowBuilder, embed_records: Callable[[Sequence[MemoryRecord]], None],
            org_id: str, export: Export) -> dict[str, int]:
    """Write a parsed export into `org_id`, into a user with nothing stored: the same ids, states,
    counts and events; keyword terms made again by `rows`, vectors by `embed_records`. ConflictError
    if the user holds any memory, turn or event (the erasure's own records aside), or an id is
    taken in the org."""
    scope = Scope.user(org_id, export.user_id)
    if (store.has_memories(scope) or store.user_messages(scope)
            or any(e.action not in ERASURE_ACTIONS for e in store.user_events(scope))):
        raise ConflictError(
            f"user {export.user_id!r} of org {org_id!r} is not empty: a restore writes only into a user "
            "with nothing stored (erase them first)", code="user_not_empty",
        )
    taken = store.origin_hashes(OrgScope(org_id), [m.id for m in export.memories])
    if taken:
        raise ConflictError(f"memory ids already taken in org {org_id!r}: {', '.join(sorted(taken)[:3])}",
                            code="conflict")
    for record in export.memories:
        record.keywords = rows.keywords_of(record.index_text, record.content)
    if export.memories:
        embed_records(export.memories)
        store.insert_memories(scope, export.memories, known_absent=True)
    if export.messages:
        store.append_messages(scope, export.messages)
    if export.events:
        store.append_events(scope, export.events)
    return {"memories": len(export.memories), "messages": len(export.messages), "events": len(export.events)}
