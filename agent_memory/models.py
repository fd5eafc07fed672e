"""Domain models: what callers send, what is stored, what recall returns."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from agent_memory.errors import InvalidInputError
from agent_memory.index_text import index_parts

MemoryType = Literal["episodic", "semantic", "procedural"]
MEMORY_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural")
MemoryStatus = Literal["active", "superseded", "expired"]
# Who reads a memory: every agent of its user, or only its own agent (and org-level callers).
Visibility = Literal["shared", "private"]
VISIBILITIES: tuple[str, ...] = ("shared", "private")
FeedbackSignal = Literal["useful", "wrong", "outdated"]
Role = Literal["user", "assistant", "system", "tool"]
RecallMode = Literal["hybrid", "dense", "keyword"]
MAX_ID_CHARS = 256
MetadataValue = str | int | float | bool | None


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """A timezone-aware UTC datetime; naive values are taken to be UTC.

    Raises ValueError (which validation reports as bad input) for a time whose UTC date falls
    outside the years 1 to 9999, such as 0001-01-01T00:00:00+01:00.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("the time in UTC falls outside the years 1 to 9999") from None


_DIGITS = re.compile(r"(\d+)")


def turn_order(created_at: datetime, message_id: str) -> tuple[datetime, tuple[tuple[int, int, str], ...]]:
    """Where a turn sits in its conversation: by time, then by its id with its numbers read as
    numbers, so that turns sent with one timestamp keep their order ("D1:2" before "D1:10")."""
    parts = _DIGITS.split(message_id)
    return created_at, tuple((1, int(p), "") if i % 2 else (0, 0, p) for i, p in enumerate(parts) if p)


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
    # The agent the caller acts as: it reads shared memories and its own private ones (None: all).
    viewer_agent: str | None = None

    def __post_init__(self) -> None:
        check_identifier("org_id", self.org_id)
        check_identifier("user_id", self.user_id, required=False)
        check_identifier("team_id", self.team_id, required=False)
        check_identifier("agent_id", self.agent_id, required=False)
        check_identifier("session_id", self.session_id, required=False)
        check_identifier("viewer_agent", self.viewer_agent, required=False)
        if self.user_id is None and self.team_id is None:
            raise InvalidInputError("a scope needs a user_id or a team_id")

    @classmethod
    def user(cls, org_id: str, user_id: str, viewer_agent: str | None = None) -> Scope:
        """The scope of one user in one org (as seen by `viewer_agent`, where the caller is an agent)."""
        return cls(org_id=org_id, user_id=user_id, viewer_agent=viewer_agent)

    @property
    def org(self) -> OrgScope:
        """The whole org this scope lies in."""
        return OrgScope(self.org_id)

    def holds(self, org_id: str, user_id: str | None, team_id: str | None = None) -> bool:
        """Whether a row of that org, user and team lies inside the scope's org, user or team."""
        return (org_id == self.org_id and (self.user_id is None or user_id == self.user_id)
                and (self.team_id is None or team_id == self.team_id))


@dataclass(frozen=True)
class OrgScope:
    """One whole org: the scope of writes that span its users (an import chunk, an access flush)
    and of its jobs. Reads of memories always take a `Scope`, one user or team."""

    org_id: str

    def __post_init__(self) -> None:
        check_identifier("org_id", self.org_id)

    @property
    def org(self) -> OrgScope:
        """Itself: an org scope is already the whole org."""
        return self

    def holds(self, org_id: str, user_id: str | None, team_id: str | None = None) -> bool:
        """Whether a row of that org lies inside the scope."""
        return org_id == self.org_id


# What a write names: one user or team, or the whole org for batches that span users.
WriteScope = Scope | OrgScope


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def _identifier_value(value: str) -> str:
    try:
        check_identifier("value", value)
    except InvalidInputError as exc:
        raise ValueError(exc.message.removeprefix("value ")) from None
    return value


# Words a memory's own id cannot be: `/v1/memories/search` is a route, never a memory's address.
RESERVED_MEMORY_IDS = frozenset({"search"})


def _memory_id_value(value: str) -> str:
    if value in RESERVED_MEMORY_IDS:
        raise ValueError(f"{value!r} is reserved (/v1/memories/{value} is a route, not a memory): choose another id")
    return value


def _text_value(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _unit_value(value: float) -> float:
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError("must be a finite number between 0 and 1")
    return float(value)


def _metadata_value(value: Any) -> Any:
    return _check_metadata(value) if isinstance(value, dict) or value is None else value


# Field types shared by every input model: each rule is written once.
Identifier = Annotated[str, AfterValidator(_identifier_value)]
MemoryIdentifier = Annotated[str, AfterValidator(_identifier_value), AfterValidator(_memory_id_value)]
Text = Annotated[str, AfterValidator(_text_value)]
Unit = Annotated[float, AfterValidator(_unit_value)]
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
Metadata = Annotated[dict[str, Any], BeforeValidator(_metadata_value)]


def _check_metadata(value: dict[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    for key in value:
        if not isinstance(key, str) or not key or len(key) > 128:
            raise ValueError("metadata keys must be non-empty strings of at most 128 characters")
        if "\x00" in key:
            # Keys are matched by filters, which refuse NUL: such a key could never be found.
            raise ValueError("metadata keys must not contain NUL characters")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be JSON-serialisable without NaN: {exc}") from exc
    return value




class MemoryFields(_Input):
    """The fields of a memory a writer chooses: shared by the core's input and the HTTP body."""

    user_id: Identifier = Field(description="The user the memory is about; recall never crosses users.")
    content: Text = Field(description="The text, English or Chinese (PII is redacted before it is stored).")
    memory_type: MemoryType = Field("semantic", description="`episodic` (an event), `semantic` (a fact) or `procedural` (how to do something).")
    id: MemoryIdentifier | None = Field(
        None, description="Your id for it: writing the same id again stores nothing twice (not the word `search`).")
    agent_id: Identifier | None = Field(None, description="The agent that stores it.")
    session_id: Identifier | None = Field(None, description="The conversation it came from.")
    team_id: Identifier | None = Field(None, description="A team of the org: team-scoped recall (`scope: team`) finds it for every member.")
    importance: Unit = Field(0.5, description="How much it matters, 0..1 (raises its recall score).")
    confidence: Unit = Field(1.0, description="How sure you are of it, 0..1.")
    metadata: Metadata = Field(default_factory=dict, description="Your key/value pairs (strings, numbers, booleans): recall filters on them.")
    created_at: UtcDatetime | None = Field(None, description="When it happened, if not now (ISO 8601; a time without zone is UTC).")
    expires_at: UtcDatetime | None = Field(None, description="When it stops being recalled (ISO 8601).")
    visibility: Visibility | None = Field(
        None, description="`shared` with every agent of the user, or `private` to its agent (`agent_id`, or the API "
                          "key's agent). Default: the org's (`default_visibility`, `shared`) for a memory of an "
                          "agent; `shared` for one without.")


class NewMemory(MemoryFields):
    """A memory to write, as an agent or a job sends it."""

    # Set by extraction and import, not by HTTP clients: provenance, search context (the turns
    # before a conversation turn, for keywords only) and the turn's speaker (searched with it).
    source_ids: list[str] = Field(default_factory=list)
    context: str | None = None
    speaker: str | None = None


class MemoryPatch(_Input):
    """An in-place change to one memory; fields left out stay as they are."""

    content: Text | None = Field(None, description="New text (re-embedded).")
    memory_type: MemoryType | None = Field(None, description="New type.")
    importance: Unit | None = Field(None, description="New importance, 0..1.")
    metadata: Metadata | None = Field(None, description="New metadata (replaces the old).")
    expires_at: UtcDatetime | None = Field(None, description="New expiry; null clears it.")


class MemoryRecord(BaseModel):
    """One row of the `memories` table."""

    id: str
    org_id: str
    team_id: str | None = None
    user_id: str
    agent_id: str | None = None
    session_id: str | None = None
    content: str
    # What search reads: the context lines, then the memory as "speaker: content" (see
    # `index_parts`). The vector embeds the memory alone; the keywords also hold the context.
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
    visibility: Visibility = "shared"
    # Feedback's offset of `importance` at the last vote, decaying toward 0 since (agent_memory.feedback).
    feedback_offset: float = 0.0
    feedback_at: datetime | None = None
    # Derived columns: keyword terms for BM25, share of the text the embedding model cannot read,
    # and the hash of the write that created the row (idempotency).
    keywords: str = ""
    oov: float = 0.0
    origin_hash: str = ""
    vector: list[float] | None = None

    @property
    def vector_text(self) -> str:
        """The text the vector embeds: the memory with its speaker, without context."""
        return index_parts(self.index_text, self.content)[1]

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
        "created", "updated", "reinforced", "superseded", "merged", "restored", "expired", "deleted", "feedback",
        "erased", "purged",
    ]
    actor: str
    created_at: datetime
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    # The memory's agent and visibility: an agent reads the events of the memories it may read.
    agent_id: str | None = None
    visibility: Visibility = "shared"


class Message(_Input):
    """One conversation turn as sent by an agent or found in a history file."""

    role: Role = Field(description="`user`, `assistant`, `system` or `tool`.")
    content: Text = Field(description="What was said, English or Chinese.")
    name: Identifier | None = Field(None, description="The speaker's name, where a conversation has several people.")
    message_id: Identifier | None = Field(None, description="Your id for the turn: sending it again logs nothing twice.")
    created_at: UtcDatetime | None = Field(None, description="When it was said (ISO 8601; default: now).")
    metadata: Metadata = Field(default_factory=dict, description="Your key/value pairs.")


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

    user_id: Identifier = Field(description="Whose memories to search.")
    query: Text = Field(description="What the agent wants to know, in any language.")
    top_k: int = Field(default=10, ge=1, le=200, description="How many memories to return.")
    memory_types: list[MemoryType] | None = Field(None, description="Only these types.")
    scope: Literal["user", "team"] = Field("user", description="`user` (this user's memories) or `team` (the team's, with `team_id`).")
    team_id: Identifier | None = Field(None, description="The team, with `scope: team`; or only this team's memories of the user.")
    agent_id: Identifier | None = Field(None, description="Only memories this agent stored.")
    session_id: Identifier | None = Field(None, description="Only memories of this session.")
    filters: dict[str, MetadataValue] | None = Field(None, description="Metadata that must match exactly, key by key.")
    since: UtcDatetime | None = Field(None, description="Only memories created at or after this time.")
    until: UtcDatetime | None = Field(None, description="Only memories created before this time.")
    min_score: Unit | None = Field(
        default=None,
        description="Leave out hits scoring under this (0..1, the scale of `score`). Unset: the server's "
                    "noise floor (AGENT_MEMORY_RECALL_MIN_SCORE, 0.1 by default); 0 keeps every hit.",
    )
    mode: RecallMode = Field("hybrid", description="`hybrid` (vectors and keywords fused, the default), `dense` or `keyword`.")
    as_of: UtcDatetime | None = Field(
        None, description="Recall as memory stood at this moment: the memories created by then that were active "
                          "then (superseded or expired later counts as active), ranked as of then.")


class ContextQuery(_Input):
    """A context request (`POST /v1/context`): whose memories, which session's turns, what the agent
    is about to answer, and the budget of tokens."""

    user_id: Identifier = Field(description="Whose memories to recall.")
    query: Text = Field(description="What the agent is about to answer (usually the user's last message).")
    session_id: Identifier | None = Field(None, description="The conversation: its recent turns and a summary of the older ones join the block.")
    max_tokens: int | None = Field(default=None, ge=32, description="The block's budget in tokens (default: the server's `context_max_tokens`, 1,024).")
    memory_types: list[MemoryType] | None = Field(None, description="Recall only these types.")
    top_k: int | None = Field(default=None, ge=0, le=200, description="Most memories recalled into the block (default: `context_top_k`, 8; 0: none).")


class ScoreParts(BaseModel):
    """The components of a fused recall score, each in 0..1."""

    semantic: float
    keyword: float
    recency: float
    importance: float


class RecallHit(BaseModel):
    """One recalled memory as callers see it: what it says and how it scored. Whose it is (user,
    team, agent, session) is not part of it: the query named the scope."""

    id: str
    content: str
    memory_type: MemoryType
    score: float
    scores: ScoreParts
    created_at: datetime
    source_ids: list[str]
    metadata: dict[str, Any]


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
