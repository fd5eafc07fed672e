"""History files: reading JSONL, CSV (message-per-row and paired layouts) and Parquet, and
validating each row into a conversation turn. Pure parsing: the import itself (logging, memories,
embedding, writing) is `jobs.importer`."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from agent_memory.errors import InvalidInputError
from agent_memory.models import Message, check_identifier, parse_input

Format = Literal["auto", "jsonl", "csv", "parquet"]
ImportMode = Literal["raw", "rules", "llm"]
MAX_LINE_BYTES = 1_000_000
_ROW_FIELDS = {"user_id", "session_id", "role", "content", "created_at", "name", "message_id", "org_id", "agent_id", "metadata"}


@dataclass
class Reject:
    """A row that could not be imported, with where it was and why."""

    line: int
    reason: str
    row: dict[str, Any] | None = None


@dataclass
class ParsedTurn:
    """One validated history row."""

    line: int
    org_id: str
    user_id: str
    session_id: str
    agent_id: str | None
    message: Message


def detect_format(path: str, fmt: Format = "auto") -> Literal["jsonl", "csv", "parquet"]:
    """The format named, or the one the file name implies."""
    if fmt != "auto":
        return fmt
    name = path.lower()
    if name.endswith((".jsonl", ".ndjson", ".json", ".jsonl.gz")):
        return "jsonl"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    raise InvalidInputError(f"cannot tell the format of {path!r}: pass --format jsonl, csv or parquet")


def read_rows(path: str | Path, fmt: Format = "auto") -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield (line number, row or None, error or None) for every row of a history file."""
    path = str(path)
    kind = detect_format(path, fmt)
    if not Path(path).exists():
        raise InvalidInputError(f"no such file: {path}")
    with open_local(path) as handle:
        yield from read_stream(handle, kind)


@contextmanager
def open_local(path: str) -> Iterator[BinaryIO]:
    """A local file as a binary stream, decompressed where its name ends in `.gz` (as an `s3://`
    file of that name is read); a file that is not gzip then fails its first read, as bad input."""
    if not path.lower().endswith(".gz"):
        with open(path, "rb") as handle:
            yield handle
        return
    with gzip.open(path, "rb") as handle:
        try:
            yield handle  # type: ignore[misc]
        except (gzip.BadGzipFile, EOFError) as exc:
            raise InvalidInputError(f"{path} is not a complete gzip file: {exc}") from exc


def read_stream(handle: BinaryIO, kind: Literal["jsonl", "csv", "parquet"]) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Rows of an open binary history stream (a local file, or bytes read from object storage)."""
    if kind == "jsonl":
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            if len(raw) > MAX_LINE_BYTES:
                yield number, None, f"line_too_long: {len(raw)} bytes (limit {MAX_LINE_BYTES})"
                continue
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                yield number, None, f"invalid_json: {exc}"
                continue
            if not isinstance(row, dict):
                yield number, None, "invalid_json: a line must be a JSON object"
                continue
            yield number, row, None
    elif kind == "csv":
        text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
        # A field over the limit must become a reject, not a csv.Error that ends the whole file.
        csv.field_size_limit(max(csv.field_size_limit(), 4 * MAX_LINE_BYTES))
        reader = csv.DictReader(text)
        number = 1
        try:
            while True:
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except (csv.Error, UnicodeDecodeError) as exc:
                    number += 1
                    yield number, None, f"invalid_csv: {exc}"
                    continue
                number += 1
                size = sum(len(v) for v in row.values() if isinstance(v, str))
                if size > MAX_LINE_BYTES:
                    yield number, None, f"line_too_long: {size} characters (limit {MAX_LINE_BYTES})"
                    continue
                yield number, {k: v for k, v in row.items() if k is not None and v not in (None, "")}, None
        finally:
            text.detach()
    else:
        number = 0
        for batch in pq.ParquetFile(handle).iter_batches(batch_size=4096):
            try:
                rows: list[dict[str, Any] | str] = list(batch.to_pylist())
            except (OverflowError, ValueError):
                # A value Python cannot hold (a timestamp past the year 9999): read row by row, so
                # that only the rows holding one are rejects.
                rows = [_parquet_row(batch, i) for i in range(batch.num_rows)]
            for row in rows:
                number += 1
                if isinstance(row, str):
                    yield number, None, row
                else:
                    yield number, {k: v for k, v in row.items() if v is not None}, None


def _parquet_row(batch: pa.RecordBatch, i: int) -> dict[str, Any] | str:
    """Row `i` of a Parquet batch, or why one of its values cannot be read."""
    row = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        try:
            row[name] = column[i].as_py()
        except (OverflowError, ValueError) as exc:
            code = "bad_timestamp" if pa.types.is_temporal(column.type) else "invalid_row"
            return f"{code}: {name}: {exc}"
    return row


def expand_paired(number: int, row: dict[str, Any]) -> list[dict[str, Any]]:
    """The paired layout (`user_content`, `bot_content`) becomes a user turn and an assistant turn."""
    if "user_content" not in row and "bot_content" not in row:
        return [row]
    base = {k: v for k, v in row.items() if k not in ("user_content", "bot_content")}
    stem = str(row.get("message_id") or number)
    out = []
    for role, key in (("user", "user_content"), ("assistant", "bot_content")):
        if row.get(key):
            turn = dict(base, role=role, content=row[key], message_id=f"{stem}:{role}")
            out.append(turn)
    if not out:
        out.append(dict(base, role="user", content=""))
    return out


def parse_turn(number: int, row: dict[str, Any], default_org: str) -> ParsedTurn:
    """Validate one history row; raise InvalidInputError with a short reason code first."""
    unknown = set(row) - _ROW_FIELDS
    if unknown:
        row = {k: v for k, v in row.items() if k in _ROW_FIELDS}
    try:
        user_id = check_identifier("user_id", _text(row.get("user_id")))
    except InvalidInputError as exc:
        raise InvalidInputError(f"missing_user: {exc.message}") from None
    org_id = _text(row.get("org_id")) or default_org
    session_id = _text(row.get("session_id")) or "default"
    agent_id = _text(row.get("agent_id"))
    metadata = row.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            raise InvalidInputError("invalid_metadata: metadata is not JSON") from None
    try:
        check_identifier("org_id", org_id)
        check_identifier("session_id", session_id)
        check_identifier("agent_id", agent_id, required=False)
        created = row.get("created_at")
        if isinstance(created, (int, float)) and not isinstance(created, bool):
            raise InvalidInputError("created_at: give an ISO 8601 timestamp")
        message = parse_input(
            Message,
            {
                "role": row.get("role"), "content": row.get("content"), "name": _text(row.get("name")),
                "message_id": _text(row.get("message_id")) or (None if created else f"line-{number}"),
                "created_at": created, "metadata": metadata,
            },
        )
    except InvalidInputError as exc:
        reason = exc.message
        code = "empty_content" if reason.startswith("content") else "bad_timestamp" if "created_at" in reason else "invalid_row"
        raise InvalidInputError(f"{code}: {reason}") from None
    return ParsedTurn(number, org_id, user_id, session_id, agent_id, message)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def parse_file(path: str | Path, fmt: Format, default_org: str) -> tuple[list[ParsedTurn], list[Reject], int]:
    """Every valid turn of a file, the rejects, and the number of rows read."""
    turns: list[ParsedTurn] = []
    rejects: list[Reject] = []
    read = 0
    for number, row, error in read_rows(path, fmt):
        if error is not None or row is None:
            read += 1
            rejects.append(Reject(number, error or "invalid_row"))
            continue
        for expanded in expand_paired(number, row):
            read += 1
            try:
                turns.append(parse_turn(number, expanded, default_org))
            except InvalidInputError as exc:
                rejects.append(Reject(number, exc.message, expanded))
    return turns, rejects, read
