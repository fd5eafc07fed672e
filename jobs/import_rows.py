"""The import's row stages, shared by both engines: read a file's bytes into numbered rows, validate
and redact them into message-log rows or rejects, and turn turns into `raw` memories.

Every function here is pure over its rows (the service passed in only validates, redacts and keys
them), so the local engine and Ray Data's tasks produce the same rows and ids.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pyarrow import fs

from agent_memory.errors import InvalidInputError
from agent_memory.history import expand_paired, parse_turn, read_stream
from agent_memory.models import MessageRecord
from agent_memory.redaction import Redactor
from agent_memory.service import MemoryService, group_sessions
from agent_memory.settings import Settings
from jobs.import_report import ImportResult, add_counts

READ_SCHEMA_FIELDS = (("line", "int64"), ("row", "string"), ("error", "string"))
VALIDATED_COLUMNS = ("line", "org_id", "user_id", "session_id", "message", "reject", "redactions")
EXTRACTED_COLUMNS = ("org_id", "message", "memory", "vector_text")


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


def read_bytes(path: str, settings: Settings) -> bytes:
    """The whole file, local or on the object store."""
    filesystem = object_store_filesystem(path, settings.storage.options)
    if filesystem is None:
        local = path.removeprefix("file://")
        if not Path(local).exists():
            raise InvalidInputError(f"no such file: {path}")
        return Path(local).read_bytes()
    with filesystem.open_input_stream(path.removeprefix("s3://")) as handle:
        return handle.read()


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
    # An explicit schema: a column of nothing but nulls must stay a string column.
    schema = pa.schema([(name, getattr(pa, kind_)()) for name, kind_ in READ_SCHEMA_FIELDS])
    return pa.Table.from_pylist(rows, schema=schema)


# -- validating and redacting -------------------------------------------------------------------


def validate_rows(
    rows: Sequence[dict[str, Any]], service: MemoryService, org_id: str, *, only_org: bool = False,
    force_org: bool = False,
) -> list[dict[str, Any]]:
    """Each read row as turns: a message-log row (JSON) or a redacted reject, with redaction counts.

    `org_id` is the org of rows that name none; `only_org` rejects rows naming another, and
    `force_org` makes it every row's org.
    """
    out: list[dict[str, Any]] = []
    redactor = service.redactor
    for item in rows:
        number = int(item["line"])
        if item.get("error") or item.get("row") is None:
            out.append(_reject_row(number, item.get("error") or "invalid_row", None, redactor))
            continue
        for turn_row in expand_paired(number, json.loads(item["row"])):
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
                reason = exc.message
                if "longer than" in reason:
                    reason = f"content_too_long: {reason}"
                out.append(_reject_row(number, reason, turn_row, redactor))
                continue
            out.append({
                "line": number, "org_id": record.org_id, "user_id": record.user_id,
                "session_id": record.session_id, "message": record.model_dump_json(), "reject": "",
                "redactions": json.dumps(counts),
            })
    return out


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


def validate_batch(batch: Any, settings: Settings, org_id: str, only_org: bool, force_org: bool) -> Any:
    """Ray Data stage: `validate_rows` over an Arrow batch of numbered rows."""
    service = MemoryService.row_builder(settings)
    rows = validate_rows(batch.to_pylist(), service, org_id, only_org=only_org, force_org=force_org)
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
