"""Chat exports as history rows: a ChatGPT or Claude `conversations.json`, streamed one conversation
at a time (`ijson`), each conversation becoming its turns, in order, as rows of the history format.

A conversation is imported whole or not at all: one that cannot be read (its `mapping` is not an
object, its `current_node` is not in it, a message has no role...) is one reject naming its index
in the array and its id (`jobs.import_rows.validate_rows`), and none of its turns is imported. A
file that stops being JSON fails before anything is written, naming the byte where it does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime, timedelta, timezone
from typing import IO, Any, Literal

import ijson

from agent_memory.errors import InvalidInputError

ExportFormat = Literal["chatgpt", "claude"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("chatgpt", "claude")
READ_CHUNK_BYTES = 1 << 16
BOM = b"\xef\xbb\xbf"
# ChatGPT content types whose `parts` hold what was said (text as strings, or a voice turn's
# transcription; images, files and audio as objects, left out).
CHATGPT_TEXT_TYPES = frozenset({"text", "multimodal_text"})
CHATGPT_ROLES = frozenset({"user", "assistant"})
CLAUDE_ROLES = {"human": "user", "assistant": "assistant"}
MAX_TITLE_CHARS = 500
TICK = timedelta(microseconds=1)
# Opens the file again from its start (it is read twice where it turns out not to be JSON).
Opener = Callable[[], AbstractContextManager[IO[bytes]]]


class MalformedConversation(InvalidInputError):
    """A conversation that cannot be imported whole; its message starts with a reject code."""


class _NotJSON(Exception):
    """Where the parser gave up: the offset of the chunk it was reading and the array item."""

    def __init__(self, chunk_start: int, item: int, detail: str) -> None:
        super().__init__(detail)
        self.chunk_start, self.item, self.detail = chunk_start, item, detail


def sniff_export(handle: IO[bytes]) -> ExportFormat | None:
    """`chatgpt` or `claude` for a JSON array whose first item is such a conversation, else None.
    Reads the file up to the end of its first item."""
    try:
        first = next(_items(handle), None)
    except (_NotJSON, InvalidInputError):
        return None
    conversation = first[1] if first else None
    if not isinstance(conversation, dict):
        return None
    if "mapping" in conversation or "current_node" in conversation:
        return "chatgpt"
    if "chat_messages" in conversation:
        return "claude"
    return None


def export_rows(open_input: Opener, kind: ExportFormat, user_id: str, path: str,
                max_chars: int | None = None) -> Iterator[dict[str, Any]]:
    """Each conversation of an export as a read row {line: its index in the array, row, error}.

    `row` (JSON) holds the conversation's `turns`, history rows of `user_id` in conversation
    order, and its `position` (index, conversation id, user), which a reject of the conversation
    carries; `error` is why the conversation cannot be imported, else None. A turn longer than
    `max_chars` (long answers are common in these exports) is stored as consecutive parts (see
    `split_turn`), not refused. Invalid JSON raises InvalidInputError naming the byte where the
    file stops being JSON.
    """
    read = chatgpt_turns if kind == "chatgpt" else claude_turns
    try:
        with open_input() as handle:
            for index, conversation in _items(handle):
                position = {"conversation": index, "conversation_id": _conversation_id(conversation, kind),
                            "user_id": user_id}
                try:
                    turns, error = read(conversation, user_id), None
                    if max_chars:
                        turns = [part for turn in turns for part in split_turn(turn, max_chars)]
                except MalformedConversation as exc:
                    turns, error = [], exc.message
                yield {"line": index, "row": json.dumps({"position": position, "turns": turns}, ensure_ascii=False),
                       "error": error}
    except _NotJSON as exc:
        byte = _failing_byte(open_input, exc.chunk_start)
        raise InvalidInputError(
            f"invalid JSON in {path} at byte {byte}, after {exc.item} conversation{'' if exc.item == 1 else 's'}: "
            f"{exc.detail}; nothing was imported", code="invalid_json",
        ) from None


def split_turn(turn: dict[str, Any], max_chars: int) -> list[dict[str, Any]]:
    """A turn as parts of at most `max_chars` characters, cut after a paragraph, a line or a
    sentence where one ends in the second half of a part: the first keeps the turn's id, the next
    ones `<id>#02`, `<id>#03`, ..., all at the turn's time, so they read back in order."""
    text: str = turn["content"]
    if len(text) <= max_chars:
        return [turn]
    parts = []
    while len(text) > max_chars:
        window = text[:max_chars]
        cut = max((window.rfind(mark) + len(mark) for mark in ("\n\n", "\n", ". ", "。", "！", "？", "! ", "? ")),
                  default=-1)
        if cut < max_chars // 2:
            cut = max_chars
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    return [{**turn, "content": part, "message_id": turn["message_id"] if n == 1 else f"{turn['message_id']}#{n:02d}"}
            for n, part in enumerate((p for p in parts if p.strip()), start=1)]


def conversation_label(position: dict[str, Any]) -> str:
    """Where a conversation is, for its reject: `conversation 3 (id 'abc')`."""
    cid = position.get("conversation_id")
    return f"conversation {position.get('conversation')}" + (f" (id {cid!r})" if cid else " (no id)")


# -- ChatGPT --------------------------------------------------------------------------------------


def chatgpt_turns(conversation: Any, user_id: str) -> list[dict[str, Any]]:
    """The turns of the branch that ends at `current_node`, root first: the user's and the
    assistant's messages with text; system, tool and hidden messages and non-text parts left out."""
    if not isinstance(conversation, dict):
        raise MalformedConversation("invalid_conversation: it is not a JSON object")
    cid = _conversation_id(conversation, "chatgpt")
    if cid is None:
        raise MalformedConversation("invalid_conversation: it has no conversation_id or id")
    mapping = conversation.get("mapping")
    if not isinstance(mapping, dict):
        raise MalformedConversation("invalid_conversation: mapping is not an object")
    current = conversation.get("current_node")
    if not isinstance(current, str) or current not in mapping:
        raise MalformedConversation(f"invalid_conversation: current_node {current!r} is not in mapping")
    branch: list[str] = []  # from current_node up to the root
    node_id: Any = current
    while node_id is not None:
        if not isinstance(node_id, str) or node_id not in mapping:
            raise MalformedConversation(
                f"invalid_conversation: node {branch[-1]!r} has parent {node_id!r}, which is not in mapping")
        if len(branch) > len(mapping):
            raise MalformedConversation(f"invalid_conversation: the parents of node {current!r} form a loop")
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise MalformedConversation(f"invalid_conversation: node {node_id!r} is not an object")
        branch.append(node_id)
        node_id = node.get("parent")
    started = _epoch(conversation.get("create_time"), "create_time")
    title = _title(conversation.get("title"))
    turns: list[tuple[str, str, str, datetime | None]] = []
    for node_id in reversed(branch):
        message = mapping[node_id].get("message")
        if message is None:
            continue
        if not isinstance(message, dict):
            raise MalformedConversation(f"invalid_conversation: message {node_id!r} is not an object")
        author = message.get("author")
        role = author.get("role") if isinstance(author, dict) else None
        if not isinstance(role, str) or not role:
            raise MalformedConversation(f"invalid_conversation: message {node_id!r} has no author.role")
        metadata = message.get("metadata")
        hidden = isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation") is True
        # A message to a tool (`recipient` other than `all`) is a call, not something said.
        if role not in CHATGPT_ROLES or hidden or message.get("recipient") not in (None, "all"):
            continue
        text = _chatgpt_text(message.get("content"), node_id)
        if text.strip():
            turns.append((node_id, role, text, _epoch(message.get("create_time"), f"message {node_id!r}: create_time")
                          or started))
    return _rows(turns, user_id, cid, "chatgpt", title)


def _chatgpt_text(content: Any, node_id: str) -> str:
    if not isinstance(content, dict):
        raise MalformedConversation(f"invalid_conversation: message {node_id!r} has no content object")
    if content.get("content_type") not in CHATGPT_TEXT_TYPES:
        return ""  # code, execution output, browsing, reasoning: not a turn of the conversation
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise MalformedConversation(f"invalid_conversation: message {node_id!r}: content.parts is not a list")
    return "\n".join(text for part in parts if (text := _part_text(part)).strip())


def _part_text(part: Any) -> str:
    """A part's text: a string, or what was said aloud in voice mode; nothing of an image, file or audio."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("content_type") == "audio_transcription" and isinstance(part.get("text"), str):
        return part["text"]
    return ""


# -- Claude ---------------------------------------------------------------------------------------


def claude_turns(conversation: Any, user_id: str) -> list[dict[str, Any]]:
    """The turns of `chat_messages` in order, `human` as `user`; the text of `content`'s text
    blocks (newer exports), else `text`; messages without text left out."""
    if not isinstance(conversation, dict):
        raise MalformedConversation("invalid_conversation: it is not a JSON object")
    cid = _conversation_id(conversation, "claude")
    if cid is None:
        raise MalformedConversation("invalid_conversation: it has no uuid")
    messages = conversation.get("chat_messages")
    if not isinstance(messages, list):
        raise MalformedConversation("invalid_conversation: chat_messages is not a list")
    started = _iso(conversation.get("created_at"), "created_at")
    turns: list[tuple[str, str, str, datetime | None]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise MalformedConversation(f"invalid_conversation: chat_messages[{i}] is not an object")
        # Message ids key a user's memories across conversations: one without its own is named by both.
        uuid = message.get("uuid")
        message_id = uuid if isinstance(uuid, str) and uuid else f"{cid}:{i}"
        sender = message.get("sender")
        if sender not in CLAUDE_ROLES:
            raise MalformedConversation(
                f"invalid_conversation: message {message_id!r} has sender {sender!r}, not human or assistant")
        text = _claude_text(message, message_id)
        if text.strip():
            turns.append((message_id, CLAUDE_ROLES[sender], text,
                          _iso(message.get("created_at"), f"message {message_id!r}: created_at") or started))
    return _rows(turns, user_id, cid, "claude", _title(conversation.get("name")))


def _claude_text(message: dict[str, Any], message_id: str) -> str:
    content = message.get("content")
    if content is not None and not isinstance(content, list):
        raise MalformedConversation(f"invalid_conversation: message {message_id!r}: content is not a list")
    blocks = [b.get("text") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
    text = "\n\n".join(t for t in blocks if isinstance(t, str) and t.strip())
    if not text and isinstance(message.get("text"), str):
        text = message["text"]
    return text


# -- shared ---------------------------------------------------------------------------------------


def _conversation_id(conversation: Any, kind: ExportFormat) -> str | None:
    if not isinstance(conversation, dict):
        return None
    keys = ("conversation_id", "id") if kind == "chatgpt" else ("uuid",)
    return next((v for k in keys if isinstance(v := conversation.get(k), str) and v), None)


def _rows(turns: list[tuple[str, str, str, datetime | None]], user_id: str, session_id: str,
          source: ExportFormat, title: str | None) -> list[dict[str, Any]]:
    """History rows of the turns. Times only move forward: a turn dated at or before the one it
    follows (or not dated) is put a microsecond after it, so the log and recall keep the order."""
    metadata = {"source": source, **({"title": title} if title else {})}
    rows = []
    previous: datetime | None = None
    for message_id, role, text, at in turns:
        if previous is not None and (at is None or at <= previous):
            at = previous + TICK
        previous = at or previous
        rows.append({"user_id": user_id, "session_id": session_id, "role": role, "content": text,
                     "message_id": message_id, "created_at": at.isoformat() if at else None, "metadata": metadata})
    return rows


def _epoch(value: Any, what: str) -> datetime | None:
    """A ChatGPT time (seconds since the epoch) as UTC."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MalformedConversation(f"bad_timestamp: {what} {value!r} is not seconds since the epoch")
    try:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise MalformedConversation(f"bad_timestamp: {what} {value!r} is out of range") from None


def _iso(value: Any, what: str) -> datetime | None:
    """A Claude time (ISO 8601; without a zone, UTC) as UTC."""
    if value is None or value == "":
        return None
    try:
        if not isinstance(value, str):
            raise ValueError
        at = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        raise MalformedConversation(f"bad_timestamp: {what} {value!r} is not an ISO 8601 time") from None


def _title(value: Any) -> str | None:
    return (value.strip()[:MAX_TITLE_CHARS] or None) if isinstance(value, str) else None


# -- streaming the array --------------------------------------------------------------------------


def _items(handle: IO[bytes]) -> Iterator[tuple[int, Any]]:
    """(index, item) of the top-level JSON array a stream holds, parsed a chunk at a time.

    Raises InvalidInputError when the stream does not hold an array, and _NotJSON where it stops
    being JSON."""
    items: list[Any] = ijson.sendable_list()
    parser = ijson.items_coro(items, "item", use_float=True)
    index = offset = 0
    opened = False
    while True:
        chunk = handle.read(READ_CHUNK_BYTES)
        if not opened:
            if offset == 0 and chunk.startswith(BOM):
                chunk, offset = chunk[len(BOM):], len(BOM)
            head = chunk.lstrip()
            if head:
                if head[:1] != b"[":
                    raise InvalidInputError(
                        f"not a JSON array of conversations (it starts with {head[:1].decode('latin-1')!r}): "
                        "give the export's conversations.json")
                opened = True
            elif not chunk:
                raise InvalidInputError("the file is empty: give the export's conversations.json")
        try:
            if chunk:
                parser.send(chunk)
            else:
                parser.close()
        except ijson.JSONError as exc:
            raise _NotJSON(offset, index + len(items), _reason(exc)) from None
        for item in items:
            yield index, item
            index += 1
        del items[:]
        if not chunk:
            return
        offset += len(chunk)


def _reason(exc: Exception) -> str:
    """The parser's reason in one line (yajl adds a drawing of where it stopped)."""
    text = str(exc)
    if text.startswith(("b'", 'b"')):
        text = text[2:]
    return text.replace("\\n", "\n").strip().splitlines()[0] if text.strip() else type(exc).__name__


def _failing_byte(open_input: Opener, chunk_start: int) -> int:
    """The byte where the file stops being JSON: parsed again, the chunk that failed one byte at a
    time (only on this path, so a good file is read at full speed)."""
    events: list[Any] = ijson.sendable_list()
    parser = ijson.basic_parse_coro(events)
    offset = 0
    with open_input() as handle:
        while True:
            chunk = handle.read(min(READ_CHUNK_BYTES, chunk_start - offset) if offset < chunk_start else 1)
            fed = chunk[len(BOM):] if offset == 0 and chunk.startswith(BOM) else chunk
            try:
                if not chunk:
                    parser.close()
                    return offset
                if fed:
                    parser.send(fed)
            except ijson.JSONError:
                return offset
            del events[:]
            offset += len(chunk)
