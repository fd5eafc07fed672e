"""What the API answers, as pydantic models, and what the client sends.

Answers keep fields this version does not know (`extra="allow"`), so a newer server never
breaks an older client; enumerations (`memory_type`, `status`, `state`, ...) are plain strings
for the same reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MemoryType = Literal["episodic", "semantic", "procedural"]
Role = Literal["user", "assistant", "system", "tool"]
MetadataValue = str | int | float | bool | None


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Input(BaseModel):
    # Fields a newer server accepts pass through; the server refuses what it does not know.
    model_config = ConfigDict(extra="allow")

    def body(self) -> dict[str, Any]:
        """The JSON body: only the fields that were set."""
        return self.model_dump(mode="json", exclude_unset=True)


# -- what the client sends --------------------------------------------------------------------


class NewMemory(_Input):
    """One memory to store (`POST /v1/memories`)."""

    user_id: str
    content: str
    memory_type: MemoryType | None = None
    id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    team_id: str | None = None
    importance: float | None = None
    confidence: float | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None


class Turn(_Input):
    """One conversation turn (`POST /v1/conversations`)."""

    role: Role
    content: str
    name: str | None = None
    message_id: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] | None = None


# -- what the API answers ---------------------------------------------------------------------


class Memory(_Answer):
    """One stored memory, as `GET /v1/memories/{id}` and the list answer it."""

    id: str
    user_id: str
    content: str
    memory_type: str
    org_id: str | None = None
    team_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    importance: float = 0.5
    confidence: float = 1.0
    status: str = "active"
    superseded_by: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0
    expires_at: datetime | None = None
    source_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class MemoryPage(_Answer):
    """One page of a user's memories, newest first; `next_cursor` is None on the last page."""

    memories: list[Memory]
    next_cursor: str | None = None


class ScoreParts(_Answer):
    """The four parts of a recall score, each in 0..1."""

    semantic: float = 0.0
    keyword: float = 0.0
    recency: float = 0.0
    importance: float = 0.0


class SearchHit(_Answer):
    """One recalled memory with its fused `score` (0..1) and the parts it was made of."""

    id: str
    content: str
    memory_type: str
    score: float
    scores: ScoreParts = Field(default_factory=ScoreParts)
    created_at: datetime | None = None
    source_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class SearchResult(_Answer):
    """A recall: hits best first; `degraded` when the server answered from keywords alone."""

    memories: list[SearchHit]
    degraded: bool = False


class WriteResult(_Answer):
    """The stored ids of a write, in the order the memories were sent."""

    ids: list[str]

    @property
    def id(self) -> str:
        """The stored id of the first (for `add`, the only) memory."""
        return self.ids[0]


class Deleted(_Answer):
    """The id of a deleted memory."""

    deleted: str


class MemoryEvent(_Answer):
    """One audit event of a memory (`created`, `updated`, `superseded`, `restored`, `deleted`, ...)."""

    id: str
    memory_id: str | None = None
    action: str
    actor: str
    created_at: datetime
    org_id: str | None = None
    user_id: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None


class SessionMessage(_Answer):
    """One logged turn of a session, redacted as stored."""

    session_id: str
    message_id: str
    role: str
    content: str
    created_at: datetime
    user_id: str | None = None
    agent_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class JobAccepted(_Answer):
    """A background job the server accepted (202); follow it with `get_job` or `wait_for_job`."""

    job_id: str


class Job(_Answer):
    """A background job: conversation extraction, import, consolidation, erasure, ..."""

    id: str
    kind: str
    state: str
    progress: float = 0.0
    error: str | None = None
    report: dict[str, Any] | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def done(self) -> bool:
        """Whether the job has ended, well or not."""
        return self.state in ("succeeded", "failed")


class Erasure(_Answer):
    """Rows deleted per table by erasing a user, and the job that purges their files (the receipt)."""

    erased: dict[str, int]
    job_id: str


class Schedule(_Answer):
    """The consolidation schedule: on or off, the next run, the last submission (`{}` before the first)."""

    enabled: bool
    next_run: datetime | None = None
    last: dict[str, Any] = Field(default_factory=dict)


class Health(_Answer):
    """Liveness (`{"status": "ok"}`)."""

    status: str


class Readiness(_Answer):
    """Readiness: `ready` needs the writer and the store; `degraded` when a model does not answer."""

    ready: bool
    degraded: bool = False
    checks: dict[str, str] = Field(default_factory=dict)
