"""Domain models: what callers send, what is stored, what recall returns."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_memory.errors import InvalidInputError

MemoryType = Literal["episodic", "semantic", "procedural"]
MEMORY_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural")
MemoryStatus = Literal["active", "superseded", "expired"]
Role = Literal["user", "assistant", "system", "tool"]
RecallMode = Literal["hybrid", "dense", "keyword"]
MAX_ID_CHARS = 256
MetadataValue = str | int | float | bool | None


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """A timezone-aware UTC datetime; naive values are taken to be UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def check_identifier(name: str, value: Any, *, required: bool = True) -> str | None:
    """Validate an id-like field (user, org, session...): a non-empty string of bounded length."""
    if value is None:
        if required:
            raise InvalidInputError(f"{name} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"{name} is longer than {MAX_ID_CHARS} characters")
    if "\x00" in value:
        raise InvalidInputError(f"{name} must not contain NUL characters")
    return value


@dataclass(frozen=True)
class Scope:
    """The tenant scope every storage call requires: one org, and one user or one team inside it."""

    org_id: str
    user_id: str | None = None
    team_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        check_identifier("org_id", self.org_id)
        check_identifier("user_id", self.user_id, required=False)
        check_identifier("team_id", self.team_id, required=False)
        check_identifier("agent_id", self.agent_id, required=False)
        check_identifier("session_id", self.session_id, required=False)
        if self.user_id is None and self.team_id is None:
            raise InvalidInputError("a scope needs a user_id or a team_id")

    @classmethod
    def user(cls, org_id: str, user_id: str) -> Scope:
        """The scope of one user in one org."""
        return cls(org_id=org_id, user_id=user_id)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def _check_metadata(value: dict[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    for key in value:
        if not isinstance(key, str) or not key or len(key) > 128:
            raise ValueError("metadata keys must be non-empty strings of at most 128 characters")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be JSON-serialisable without NaN: {exc}") from exc
    return value


def _check_unit(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a finite number between 0 and 1")
    return float(value)


class NewMemory(_Input):
    """A memory to write, as an agent or a job sends it."""

    user_id: str
    content: str
    memory_type: MemoryType = "semantic"
    id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    team_id: str | None = None
    importance: float = 0.5
    confidence: float = 1.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    expires_at: datetime | None = None
    # Set by extraction and import, not by HTTP clients: provenance and search context.
    source_ids: list[str] = Field(default_factory=list)
    context: str | None = None

    @field_validator("user_id", "id", "agent_id", "session_id", "team_id")
    @classmethod
    def _identifier(cls, value: str | None, info: Any) -> str | None:
        try:
            return check_identifier(info.field_name, value, required=info.field_name == "user_id")
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be empty")
        return value

    @field_validator("importance", "confidence")
    @classmethod
    def _unit(cls, value: float, info: Any) -> float:
        return _check_unit(info.field_name, value)  # type: ignore[return-value]

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        return _check_metadata(value) if isinstance(value, dict) or value is None else value

    @field_validator("created_at", "expires_at")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        return as_utc(value) if value is not None else None


class MemoryPatch(_Input):
    """An in-place change to one memory; fields left out stay as they are."""

    content: str | None = None
    memory_type: MemoryType | None = None
    importance: float | None = None
    metadata: dict[str, Any] | None = None
    expires_at: datetime | None = None

    @field_validator("content")
    @classmethod
    def _content(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("content must not be empty")
        return value

    @field_validator("importance")
    @classmethod
    def _unit(cls, value: float | None) -> float | None:
        return _check_unit("importance", value)

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        return _check_metadata(value) if isinstance(value, dict) else value

    @field_validator("expires_at")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        return as_utc(value) if value is not None else None


class MemoryRecord(BaseModel):
    """One row of the `memories` table."""

    id: str
    org_id: str
    team_id: str | None = None
    user_id: str
    agent_id: str | None = None
    session_id: str | None = None
    content: str
    index_text: str
    memory_type: MemoryType
    importance: float
    confidence: float
    status: MemoryStatus = "active"
    superseded_by: str | None = None
    valid_from: datetime
    valid_to: datetime | None = None
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime | None = None
    access_count: int = 0
    expires_at: datetime | None = None
    source_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Derived columns: keyword terms for BM25, share of the text the embedding model cannot read,
    # and the hash of the write that created the row (idempotency).
    keywords: str = ""
    oov: float = 0.0
    origin_hash: str = ""
    vector: list[float] | None = None

    def public(self) -> dict[str, Any]:
        """The JSON shape the API returns for one memory."""
        return self.model_dump(
            mode="json", exclude={"vector", "keywords", "oov", "origin_hash", "index_text"}
        )


class MemoryEvent(BaseModel):
    """One row of the `events` audit table."""

    id: str
    org_id: str
    user_id: str
    memory_id: str | None
    action: Literal[
        "created", "updated", "reinforced", "superseded", "merged", "expired", "deleted", "erased"
    ]
    actor: str
    created_at: datetime
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class Message(_Input):
    """One conversation turn as sent by an agent or found in a history file."""

    role: Role
    content: str
    name: str | None = None
    message_id: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("content")
    @classmethod
    def _content(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be empty")
        return value

    @field_validator("message_id", "name")
    @classmethod
    def _short(cls, value: str | None, info: Any) -> str | None:
        try:
            return check_identifier(info.field_name, value, required=False)
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("created_at")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        return as_utc(value) if value is not None else None

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        return _check_metadata(value) if isinstance(value, dict) or value is None else value


class MessageRecord(BaseModel):
    """One row of the `messages` log."""

    id: str
    org_id: str
    user_id: str
    agent_id: str | None = None
    session_id: str
    message_id: str
    role: Role
    name: str | None = None
    content: str
    created_at: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)


class SearchQuery(_Input):
    """A recall request."""

    user_id: str
    query: str
    top_k: int = Field(default=10, ge=1, le=200)
    memory_types: list[MemoryType] | None = None
    scope: Literal["user", "team"] = "user"
    team_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    filters: dict[str, MetadataValue] | None = None
    since: datetime | None = None
    until: datetime | None = None
    min_score: float | None = None
    mode: RecallMode = "hybrid"

    @field_validator("user_id", "team_id", "agent_id", "session_id")
    @classmethod
    def _identifier(cls, value: str | None, info: Any) -> str | None:
        try:
            return check_identifier(info.field_name, value, required=info.field_name == "user_id")
        except InvalidInputError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("query")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must not be empty")
        return value

    @field_validator("min_score")
    @classmethod
    def _unit(cls, value: float | None) -> float | None:
        return _check_unit("min_score", value)

    @field_validator("since", "until")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        return as_utc(value) if value is not None else None


class ScoreParts(BaseModel):
    """The components of a fused recall score, each in 0..1."""

    semantic: float
    keyword: float
    recency: float
    importance: float


class RecallHit(BaseModel):
    """One recalled memory."""

    id: str
    content: str
    memory_type: MemoryType
    score: float
    scores: ScoreParts
    created_at: datetime
    source_ids: list[str]
    metadata: dict[str, Any]
    user_id: str
    team_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None


class RecallResult(BaseModel):
    """What recall returns: the hits, and whether it ran without the embedder."""

    memories: list[RecallHit]
    degraded: bool = False


def parse_input(model: type[BaseModel], data: Any) -> Any:
    """Validate `data` into `model`, turning pydantic's error into a clear InvalidInputError."""
    if isinstance(data, model):
        return data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError) -> str:
    """One readable sentence per problem: `field.path: message`."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        msg = err.get("msg", "invalid")
        parts.append(f"{where}: {msg.removeprefix('Value error, ')}")
    return "; ".join(parts)
