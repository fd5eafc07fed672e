"""The import's row stages, shared by both engines: read a file into numbered rows (a history file's
bytes, or a chat export streamed a conversation at a time), validate and redact them into
message-log rows or rejects, and turn turns into `raw` memories.

Every function here is pure over its rows (the service passed in only validates, redacts and keys
them), so the local engine and Ray Data's tasks produce the same rows and ids.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

import pyarrow as pa
from pyarrow import fs

from agent_memory.errors import InvalidInputError
from agent_memory.history import detect_format, expand_paired, open_local, parse_turn, read_stream
from agent_memory.models import MessageRecord, check_identifier
from agent_memory.redaction import Redactor
from agent_memory.service import MemoryService, group_sessions
from agent_memory.settings import Settings
from jobs.import_exports import EXPORT_FORMATS, ExportFormat, conversation_label, export_rows, sniff_export
from jobs.import_report import ImportFormat, ImportResult, add_counts

READ_SCHEMA_FIELDS = (("line", "int64"), ("row", "string"), ("error", "string"))
VALIDATED_COLUMNS = ("line", "org_id", "user_id", "session_id", "message", "reject", "redactions")
EXTRACTED_COLUMNS = ("org_id", "message", "memory", "vector_text")
# Conversations of a chat export per block its Ray read task yields.
EXPORT_BLOCK_CONVERSATIONS = 256
FileKind = Literal["jsonl", "csv", "parquet", "chatgpt", "claude"]


# -- reading ------------------------------------------------------------------------------------


def is_local(path: str) -> bool:
    """Whether a path names a local file (a plain path or `file://`), not an object-store URI."""
    return "://" not in path or path.startswith("file://")


def object_store_filesystem(path: str, storage_options: dict[str, str]) -> Any:
    """A pyarrow filesystem for an `s3://` URI from LanceDB-style storage options (None for local)."""
    if is_local(path):
        return None
    if not path.startswith("s3://"):
        raise InvalidInputError(f"unsupported URI {path!r}: give a local path or an s3:// URI")
    opts = {k.lower(): v for k, v in storage_options.items()}
    endpoint = opts.get("aws_endpoint") or opts.get("endpoint")
    scheme = None
    if endpoint and "://" in endpoint:
        scheme, endpoint = endpoint.split("://", 1)
    return fs.S3FileSystem(
        access_key=opts.get("aws_access_key_id"), secret_key=opts.get("aws_secret_access_key"),
        session_token=opts.get("aws_session_token"), region=opts.get("aws_region") or opts.get("region"),
        endpoint_override=endpoint, scheme=scheme or ("http" if opts.get("allow_http") == "true" else "https"),
    )


@contextmanager
def open_input(path: str, settings: Settings) -> Iterator[IO[bytes]]:
    """The file as a binary stream, local or on the object store."""
    filesystem = object_store_filesystem(path, settings.storage.options)
    if filesystem is None:
        local = path.removeprefix("file://")
        if not Path(local).is_file():
            raise InvalidInputError(f"no such file: {path}")
        with open_local(local) as handle:
            yield handle
    else:
        with filesystem.open_input_stream(path.removeprefix("s3://")) as stream:
            yield stream


def read_bytes(path: str, settings: Settings) -> bytes:
    """The whole file, local or on the object store."""
    with open_input(path, settings) as handle:
        return handle.read()


def resolve_format(path: str, fmt: ImportFormat, settings: Settings) -> FileKind:
    """The format named, or (`auto`) the one the name implies; a `.json` file holding an array of
    ChatGPT conversations (`mapping`, `current_node`) or Claude ones (`chat_messages`) is that export."""
    if fmt in EXPORT_FORMATS:
        return fmt  # type: ignore[return-value]
    if fmt not in ("auto", "jsonl", "csv", "parquet"):
        raise InvalidInputError(f"format must be auto, jsonl, csv, parquet, chatgpt or claude, not {fmt!r}")
    try:
        kind = detect_format(path, fmt)
    except InvalidInputError:
        raise InvalidInputError(f"cannot tell the format of {path!r}: pass --format jsonl, csv, parquet, "
                                "chatgpt or claude") from None
    if fmt == "auto" and path.lower().endswith(".json"):
        with open_input(path, settings) as handle:
            return sniff_export(handle) or kind
    return kind


def check_user(kind: FileKind, user_id: str | None) -> None:
    """A chat export names no user: it needs `user_id`; the history formats name theirs on each row."""
    if kind in EXPORT_FORMATS:
        if user_id is None:
            raise InvalidInputError(f"a {kind} export carries no user id: give the user its conversations "
                                    "belong to (--user-id, or user_id over HTTP)")
        check_identifier("user_id", user_id)
    elif user_id is not None:
        raise InvalidInputError(f"user_id is for ChatGPT and Claude exports; a {kind} file names the user "
                                "on each row (its user_id column)")


def read_rows(path: str, kind: FileKind, settings: Settings, user_id: str | None = None) -> Iterator[dict[str, Any]]:
    """A file's numbered rows: a history file's rows, or a chat export's conversations, streamed."""
    if kind in EXPORT_FORMATS:
        assert user_id is not None  # check_user before reading
        yield from export_rows(lambda: open_input(path, settings), kind, user_id, path,  # type: ignore[arg-type]
                               settings.limits.max_content_chars)
    else:
        yield from numbered_rows(read_bytes(path, settings), kind)  # type: ignore[arg-type]


def numbered_rows(data: bytes, kind: Literal["jsonl", "csv", "parquet"]) -> list[dict[str, Any]]:
    """A history file's bytes as rows {line, row (JSON text) or None, error or None}."""
    out = []
    for number, row, error in read_stream(io.BytesIO(data), kind):
        text = None if row is None else json.dumps(row, ensure_ascii=False, default=str)
        out.append({"line": number, "row": text, "error": error})
    return out


def read_file_rows(batch: Any, kind: str) -> Any:
    """Ray Data stage: a batch of whole files (`bytes`) as an Arrow table of numbered rows."""
    rows: list[dict[str, Any]] = []
    for data in batch.column("bytes").to_pylist():
        rows.extend(numbered_rows(bytes(data), kind))  # type: ignore[arg-type]
    return _read_table(rows)


def read_export_rows(batch: Any, kind: ExportFormat, settings: Settings, user_id: str) -> Iterator[Any]:
    """Ray Data stage: chat exports (a `path` per row) streamed into Arrow tables of numbered rows,
    a block every `EXPORT_BLOCK_CONVERSATIONS` conversations, so no file is held whole."""
    rows: list[dict[str, Any]] = []
    for path in batch.column("path").to_pylist():
        for row in read_rows(path, kind, settings, user_id):
            rows.append(row)
            if len(rows) >= EXPORT_BLOCK_CONVERSATIONS:
                yield _read_table(rows)
                rows = []
    yield _read_table(rows)  # the last rows; for an empty export, an empty block with the schema


def _read_table(rows: list[dict[str, Any]]) -> pa.Table:
    # An explicit schema: a column of nothing but nulls must stay a string column.
    schema = pa.schema([(name, getattr(pa, kind_)()) for name, kind_ in READ_SCHEMA_FIELDS])
    return pa.Table.from_pylist(rows, schema=schema)


# -- validating and redacting -------------------------------------------------------------------


def validate_rows(
    rows: Sequence[dict[str, Any]], service: MemoryService, org_id: str, *, only_org: bool = False,
    force_org: bool = False, conversations: bool = False,
) -> list[dict[str, Any]]:
    """Each read row as turns: a message-log row (JSON) or a redacted reject, with redaction counts.

    `org_id` is the org of rows that name none; `only_org` rejects rows naming another, and
    `force_org` makes it every row's org. With `conversations` each read row is a chat export's
    conversation, imported whole or rejected whole: one reject naming its position.
    """
    out: list[dict[str, Any]] = []
    redactor = service.redactor
    for item in rows:
        number = int(item["line"])
        if conversations:
            out.extend(_validate_conversation(item, service, org_id, only_org, force_org))
            continue
        if item.get("error") or item.get("row") is None:
            out.append(_reject_row(number, item.get("error") or "invalid_row", None, redactor))
            continue
        for turn_row in expand_paired(number, json.loads(item["row"])):
            try:
                out.append(_validate_turn(number, turn_row, service, org_id, only_org, force_org))
            except InvalidInputError as exc:
                out.append(_reject_row(number, exc.message, turn_row, redactor))
    return out


def _validate_turn(
    number: int, turn_row: dict[str, Any], service: MemoryService, org_id: str, only_org: bool, force_org: bool
) -> dict[str, Any]:
    """One history row as a message-log row; InvalidInputError with a reject's reason otherwise."""
    redactor = service.redactor
    try:
        turn = parse_turn(number, turn_row, org_id)
        if force_org:
            turn.org_id = org_id
        if only_org and turn.org_id != org_id:
            raise InvalidInputError(f"wrong_org: this import may only write to org {org_id!r}")
        counts = dict(redactor.redact(turn.message.content).counts)
        for value in turn.message.metadata.values():
            if isinstance(value, str):
                add_counts(counts, redactor.redact(value).counts)
        record = service.message_records(
            turn.org_id, turn.user_id, turn.session_id, [turn.message], agent_id=turn.agent_id
        )[0]
    except InvalidInputError as exc:
        if "longer than" in exc.message:  # from message_records, which numbers the one turn it got
            raise InvalidInputError(f"content_too_long: {exc.message.removeprefix('messages[0]: ')}") from None
        raise
    return {
        "line": number, "org_id": record.org_id, "user_id": record.user_id,
        "session_id": record.session_id, "message": record.model_dump_json(), "reject": "",
        "redactions": json.dumps(counts),
    }


def _validate_conversation(
    item: dict[str, Any], service: MemoryService, org_id: str, only_org: bool, force_org: bool
) -> list[dict[str, Any]]:
    """A chat export's conversation as its message-log rows, or as one reject when any part of it
    cannot be imported: the reason names the conversation (index and id) and, where one is at
    fault, the message; the reject's row is the conversation's position and user."""
    number = int(item["line"])
    conversation = json.loads(item["row"])
    position = conversation["position"]
    label = conversation_label(position)
    problem = item.get("error")
    out: list[dict[str, Any]] = []
    if not problem:
        for turn_row in conversation["turns"]:
            try:
                out.append(_validate_turn(number, turn_row, service, org_id, only_org, force_org))
            except InvalidInputError as exc:
                code, _, detail = exc.message.partition(": ")
                problem = f"{code}: message {turn_row.get('message_id')!r}: {detail}"
                break
    if not problem:
        return out
    code, _, detail = problem.partition(": ")
    return [_reject_row(number, f"{code}: {label}: {detail}", position, service.redactor)]


def _reject_row(number: int, reason: str, row: dict[str, Any] | None, redactor: Redactor) -> dict[str, Any]:
    """A reject as written to the rejects file: every string in it redacted, the reason included."""
    counts: dict[str, int] = {}

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            redaction = redactor.redact(value)
            add_counts(counts, redaction.counts)
            return redaction.text
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    reject = {"line": number, "reason": clean(reason[:500]), "row": clean(row) if row is not None else None}
    return {"line": number, "org_id": "", "user_id": "", "session_id": "", "message": "",
            "reject": json.dumps(reject, ensure_ascii=False, default=str), "redactions": json.dumps(counts)}


def validate_batch(
    batch: Any, settings: Settings, org_id: str, only_org: bool, force_org: bool, conversations: bool = False
) -> Any:
    """Ray Data stage: `validate_rows` over an Arrow batch of numbered rows."""
    service = MemoryService.row_builder(settings)
    rows = validate_rows(batch.to_pylist(), service, org_id, only_org=only_org, force_org=force_org,
                         conversations=conversations)
    return _arrow(rows, VALIDATED_COLUMNS)


def split_validated(
    validated: Sequence[dict[str, Any]], result: ImportResult
) -> tuple[list[str], list[dict[str, Any]]]:
    """Validated rows as (message-log rows as JSON, rejects); counts rows read and redactions."""
    messages: list[str] = []
    rejects: list[dict[str, Any]] = []
    result.rows_read += len(validated)
    for row in validated:
        add_counts(result.redactions, json.loads(row["redactions"] or "{}"))
        if row["reject"]:
            rejects.append(json.loads(row["reject"]))
        else:
            messages.append(row["message"])
    return messages, rejects


# -- extracting (`raw`) -------------------------------------------------------------------------


def raw_memory_rows(message_json: Sequence[str], service: MemoryService) -> list[dict[str, Any]]:
    """`raw` mode for the turns of one or more sessions: each turn with its memory (JSON) and the text
    its vector embeds."""
    messages = [MessageRecord.model_validate_json(m) for m in message_json]
    out = []
    for session in group_sessions(messages):
        for message, memory in zip(session, service.raw_memories(session), strict=True):
            record = service.prepare(message.org_id, memory)
            out.append({"org_id": message.org_id, "message": message.model_dump_json(),
                        "memory": record.model_dump_json(exclude={"vector"}), "vector_text": record.vector_text})
    return out


def extract_group(batch: Any, settings: Settings) -> Any:
    """Ray Data stage: `raw_memory_rows` over one (org, user, session) group."""
    rows = raw_memory_rows(batch.column("message").to_pylist(), MemoryService.row_builder(settings))
    return _arrow(rows, EXTRACTED_COLUMNS)


# -- columns ------------------------------------------------------------------------------------


def as_columns(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, list[Any]]:
    """Rows as a batch of columns, as Ray Data hands them to a stage."""
    return {name: [r.get(name) for r in rows] for name in names}


def _arrow(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> pa.Table:
    """Rows as an Arrow table of string columns (`line` as int64)."""
    schema = pa.schema([(n, pa.int64() if n == "line" else pa.string()) for n in names])
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], schema=schema)
