"""The Arrow schema of each table, declared once, and the conversions between rows and records."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from agent_memory.models import MemoryEvent, MemoryRecord, MessageRecord
from storage.filters import metadata_term

MEMORIES = "memories"
MESSAGES = "messages"
EVENTS = "events"
JOBS = "jobs"
# Consolidation's remembered LLM verdicts on pairs of memories (no text: hashes of it).
VERDICTS = "verdicts"
# Recall's hit counts, appended by the serving replicas and folded into `memories` by consolidation.
ACCESS = "access"
TABLES = (MEMORIES, MESSAGES, EVENTS, JOBS, VERDICTS, ACCESS)
# The org of rows that belong to no tenant (run leases); no API key ever maps to it.
SYSTEM_ORG = "__system__"

MODEL_KEY = b"embedding_model"
DIM_KEY = b"embedding_dim"
# What search reads of a memory, by layout version: 1, the vector embedded the whole index text
# (context included); 2, it embeds the memory alone (`MemoryRecord.vector_text`). Stores without
# the key are 1 until `agent-memory reindex` has brought every row to 2.
INDEX_FORMAT_KEY = b"index_format"
INDEX_FORMAT = 2
# What the vectors of Chinese memories embed: "on", their English dictionary gloss
# (`embedding_gloss_chinese`); "off", the text as written. A store without the key (written before
# it, or by a process that embeds nothing) does not say: `agent-memory reindex` embeds every Chinese
# memory the configured way and records it, as `reembed` does.
GLOSS_KEY = b"chinese_gloss"


def gloss_name(glossed: bool | None) -> str | None:
    """How `GLOSS_KEY` records whether Chinese vectors embed their gloss ("on", "off"; None: unknown)."""
    return None if glossed is None else "on" if glossed else "off"


@dataclass(frozen=True)
class TableMetadata:
    """What the schema metadata of `memories` (or of re-embedding's staging table) records, decoded
    in this one place: the embedding model ("" where absent) and its dimension (0), the index layout
    (1: stores written before `INDEX_FORMAT_KEY`) and how Chinese was embedded (None: not said)."""

    model: str = ""
    dim: int = 0
    index_format: int = 1
    chinese_gloss: bool | None = None

    @classmethod
    def of(cls, metadata: Mapping[bytes, bytes] | None) -> TableMetadata:
        """The metadata of an Arrow schema (`schema.metadata`, None where it has none), decoded."""
        meta = metadata or {}
        gloss = meta.get(GLOSS_KEY)
        return cls(
            model=meta.get(MODEL_KEY, b"").decode(),
            dim=int(meta.get(DIM_KEY, b"0") or 0),
            index_format=int(meta.get(INDEX_FORMAT_KEY, b"1")),
            chinese_gloss=None if gloss is None else gloss == b"on",
        )


TIMESTAMP = pa.timestamp("us", tz="UTC")
# The `id` of every table is declared its primary key (Lance enforces nothing with it): two
# processes that insert the same new id at once then conflict, and Lance plans the later merge
# again, which finds the row (see `storage.tables.Tables.insert_absent`).
PRIMARY_KEY = {b"lance-schema:unenforced-primary-key": b"true"}


# Columns added after the first layout, last in the schema: a store made before gets each on open,
# every row with the value here (an SQL expression), which is what a row written then meant
# (`storage.tables.add_missing_columns`).
ADDED_MEMORY_FIELDS = (
    pa.field("visibility", pa.string(), nullable=False),
    pa.field("feedback_offset", pa.float32(), nullable=False),
    pa.field("feedback_at", TIMESTAMP),
)
ADDED_EVENT_FIELDS = (
    pa.field("agent_id", pa.string()),
    pa.field("visibility", pa.string(), nullable=False),
)
COLUMN_DEFAULTS = {
    "visibility": "'shared'",
    "feedback_offset": "CAST(0.0 AS FLOAT)",
    "feedback_at": """arrow_cast(NULL, 'Timestamp(Microsecond, Some("UTC"))')""",
    "agent_id": "CAST(NULL AS string)",
}


def memories_schema(dim: int, model: str, *, gloss: bool | None = None) -> pa.Schema:
    """The `memories` table; the embedding model, its dimension and (where known) whether Chinese
    vectors embed their gloss are recorded in its metadata."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY),
            pa.field("org_id", pa.string(), nullable=False),
            pa.field("team_id", pa.string()),
            pa.field("user_id", pa.string(), nullable=False),
            pa.field("agent_id", pa.string()),
            pa.field("session_id", pa.string()),
            pa.field("content", pa.string(), nullable=False),
            pa.field("index_text", pa.string(), nullable=False),
            pa.field("keywords", pa.string(), nullable=False),
            pa.field("memory_type", pa.string(), nullable=False),
            pa.field("importance", pa.float32(), nullable=False),
            pa.field("confidence", pa.float32(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
            pa.field("superseded_by", pa.string()),
            pa.field("valid_from", TIMESTAMP, nullable=False),
            pa.field("valid_to", TIMESTAMP),
            pa.field("created_at", TIMESTAMP, nullable=False),
            pa.field("updated_at", TIMESTAMP, nullable=False),
            pa.field("last_accessed_at", TIMESTAMP),
            pa.field("access_count", pa.int64(), nullable=False),
            pa.field("expires_at", TIMESTAMP),
            pa.field("source_ids", pa.list_(pa.string())),
            pa.field("metadata", pa.string(), nullable=False),
            pa.field("metadata_kv", pa.list_(pa.string())),
            pa.field("oov", pa.float32(), nullable=False),
            pa.field("origin_hash", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim)),
            *ADDED_MEMORY_FIELDS,
        ],
        metadata={MODEL_KEY: model.encode(), DIM_KEY: str(dim).encode(), INDEX_FORMAT_KEY: str(INDEX_FORMAT).encode(),
                  **({GLOSS_KEY: gloss_name(gloss).encode()} if gloss is not None else {})},
    )


MESSAGES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY),
        pa.field("org_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("agent_id", pa.string()),
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("content", pa.string(), nullable=False),
        pa.field("created_at", TIMESTAMP, nullable=False),
        pa.field("metadata", pa.string(), nullable=False),
    ]
)

EVENTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY),
        pa.field("org_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("memory_id", pa.string()),
        pa.field("action", pa.string(), nullable=False),
        pa.field("actor", pa.string(), nullable=False),
        pa.field("created_at", TIMESTAMP, nullable=False),
        pa.field("before", pa.string()),
        pa.field("after", pa.string()),
        *ADDED_EVENT_FIELDS,
    ]
)

JOBS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY),
        pa.field("org_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string()),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("progress", pa.float64(), nullable=False),
        pa.field("created_at", TIMESTAMP, nullable=False),
        pa.field("updated_at", TIMESTAMP, nullable=False),
        pa.field("error", pa.string()),
        pa.field("report", pa.string(), nullable=False),
    ]
)


VERDICTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY),
        pa.field("org_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("judge", pa.string(), nullable=False),
        pa.field("same", pa.bool_(), nullable=False),
        pa.field("judged_at", TIMESTAMP, nullable=False),
    ]
)

# One row per memory hit in one flush of one replica: appended, never updated, so counting a
# recall never rewrites a memory row (and never scatters a user's rows across fragments).
ACCESS_SCHEMA = pa.schema(
    [
        pa.field("org_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("memory_id", pa.string(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("at", TIMESTAMP, nullable=False),
        pa.field("flush_id", pa.string(), nullable=False),
    ]
)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def memory_row(record: MemoryRecord) -> dict[str, Any]:
    """A record as a row of the `memories` table."""
    row = record.model_dump(exclude={"metadata"})
    row["metadata"] = _dumps(record.metadata)
    row["metadata_kv"] = [metadata_term(k, v) for k, v in record.metadata.items()]
    return row


def memory_record(row: dict[str, Any]) -> MemoryRecord:
    """A row of the `memories` table as a record (trusted data: validation is skipped for speed)."""
    data = {k: v for k, v in row.items() if not k.startswith("_") and k != "metadata_kv"}
    data["metadata"] = json.loads(data.get("metadata") or "{}")
    data["source_ids"] = list(data.get("source_ids") or [])
    if data.get("vector") is not None:
        data["vector"] = list(data["vector"])
    return MemoryRecord.model_construct(**data)


def message_row(record: MessageRecord) -> dict[str, Any]:
    """A message record as a row."""
    row = record.model_dump(exclude={"metadata"})
    row["metadata"] = _dumps(record.metadata)
    return row


def message_record(row: dict[str, Any]) -> MessageRecord:
    """A row of `messages` as a record."""
    data = dict(row)
    data["metadata"] = json.loads(data.get("metadata") or "{}")
    return MessageRecord.model_construct(**data)


def event_row(event: MemoryEvent) -> dict[str, Any]:
    """An audit event as a row."""
    row = event.model_dump(exclude={"before", "after"})
    row["before"] = None if event.before is None else _dumps(event.before)
    row["after"] = None if event.after is None else _dumps(event.after)
    return row


def event_record(row: dict[str, Any]) -> MemoryEvent:
    """A row of `events` as a record."""
    data = dict(row)
    for key in ("before", "after"):
        data[key] = None if data.get(key) is None else json.loads(data[key])
    return MemoryEvent.model_construct(**data)


def job_row(job: dict[str, Any]) -> dict[str, Any]:
    """A job dict as a row (the report is stored as JSON)."""
    row = {name: job.get(name) for name in JOBS_SCHEMA.names}
    row["report"] = _dumps(job.get("report") or {})
    row["progress"] = float(job.get("progress") or 0.0)
    return row


def job_dict(row: dict[str, Any]) -> dict[str, Any]:
    """A row of `jobs` as the dict the API returns."""
    data = dict(row)
    data["report"] = json.loads(data.get("report") or "{}")
    return data


def lease_id(name: str) -> str:
    """The row id of a named lease in `jobs`."""
    return f"lease:{name}"


def lease_token(owner: str, ttl: Any) -> str:
    """What a lease row stores as its report: owner and time to live, compared as one exact string."""
    seconds = ttl.total_seconds() if hasattr(ttl, "total_seconds") else float(ttl)
    return _dumps({"owner": owner, "ttl_s": seconds})
