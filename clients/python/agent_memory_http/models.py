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
# The server declares these as its response models (serve_app/ingress.py): /openapi.json, the
# docs and the client all read the same definitions.

_WHEN = "UTC time, ISO 8601."


class Memory(_Answer):
    """One stored memory, as `GET /v1/memories/{id}` and the list answer it."""

    id: str = Field(description="The memory's id: the client's `id` where one was given, else made by the server.")
    user_id: str = Field(description="The user the memory is about.")
    content: str = Field(description="The memory's text, redacted as stored.")
    memory_type: str = Field(description="`episodic` (an event), `semantic` (a fact) or `procedural` (how to do something).")
    org_id: str | None = Field(None, description="The tenant (the API key's org).")
    team_id: str | None = Field(None, description="The team the memory belongs to, if any.")
    agent_id: str | None = Field(None, description="The agent that stored it, if given.")
    session_id: str | None = Field(None, description="The session it came from, if any.")
    importance: float = Field(0.5, description="How much it matters, 0..1; raises its recall score.")
    confidence: float = Field(1.0, description="How sure extraction was of it, 0..1.")
    status: str = Field("active", description="`active`, `superseded` (replaced by `superseded_by`) or `expired`.")
    superseded_by: str | None = Field(None, description="The memory that replaced this one, when superseded.")
    valid_from: datetime | None = Field(None, description=f"Since when it holds. {_WHEN}")
    valid_to: datetime | None = Field(None, description=f"Until when it held (set when superseded). {_WHEN}")
    created_at: datetime | None = Field(None, description=f"When it was stored. {_WHEN}")
    updated_at: datetime | None = Field(None, description=f"When it last changed. {_WHEN}")
    last_accessed_at: datetime | None = Field(None, description=f"When recall last returned it. {_WHEN}")
    access_count: int = Field(0, description="How many times recall returned it.")
    expires_at: datetime | None = Field(None, description=f"When it stops being recalled, if ever. {_WHEN}")
    source_ids: list[str] = Field(default_factory=list, description="Message ids (or merged memory ids) it came from.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The caller's key/value pairs (filterable in recall).")


class MemoryPage(_Answer):
    """One page of a user's memories, newest first; `next_cursor` is None on the last page."""

    memories: list[Memory] = Field(description="The memories of this page.")
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; None on the last.")


class ScoreParts(_Answer):
    """The four parts of a recall score, each in 0..1."""

    semantic: float = Field(0.0, description="Vector similarity of query and memory.")
    keyword: float = Field(0.0, description="BM25 keyword match, normalised.")
    recency: float = Field(0.0, description="Time decay (1 = just now; halves every half-life).")
    importance: float = Field(0.0, description="The memory's importance.")


class SearchHit(_Answer):
    """One recalled memory with its fused `score` (0..1) and the parts it was made of."""

    id: str = Field(description="The memory's id.")
    content: str = Field(description="The memory's text.")
    memory_type: str = Field(description="`episodic`, `semantic` or `procedural`.")
    score: float = Field(description="The fused score, 0..1: best first.")
    scores: ScoreParts = Field(default_factory=ScoreParts, description="The parts the score was made of.")
    created_at: datetime | None = Field(None, description=f"When it was stored. {_WHEN}")
    source_ids: list[str] = Field(default_factory=list, description="Message ids it came from.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The caller's key/value pairs.")


class SearchResult(_Answer):
    """A recall: hits best first; `degraded` when the server answered from keywords alone."""

    memories: list[SearchHit] = Field(description="The hits, best first.")
    degraded: bool = Field(False, description="True when the embedder did not answer and keywords alone ranked.")


class WriteResult(_Answer):
    """The stored ids of a write, in the order the memories were sent."""

    ids: list[str] = Field(description="One id per memory sent, in order (an existing id where it was already stored).")

    @property
    def id(self) -> str:
        """The stored id of the first (for `add`, the only) memory."""
        return self.ids[0]


class Deleted(_Answer):
    """The id of a deleted memory."""

    deleted: str = Field(description="The id of the memory that was deleted.")


class MemoryEvent(_Answer):
    """One audit event of a memory (`created`, `updated`, `superseded`, `restored`, `deleted`, ...)."""

    id: str = Field(description="The event's id (time-ordered).")
    memory_id: str | None = Field(None, description="The memory it is about.")
    action: str = Field(description="`created`, `updated`, `reinforced`, `superseded`, `merged`, `restored`, `deleted`, ...")
    actor: str = Field(description="Who did it: the API key's name, `anonymous`, or the job (`extraction`, `consolidation`).")
    created_at: datetime = Field(description=f"When. {_WHEN}")
    org_id: str | None = Field(None, description="The tenant.")
    user_id: str | None = Field(None, description="The user.")
    before: dict[str, Any] | None = Field(None, description="The fields it changed, as they were.")
    after: dict[str, Any] | None = Field(None, description="The fields it changed, as they became.")


class MemoryHistory(_Answer):
    """A memory's audit events, oldest first."""

    events: list[MemoryEvent] = Field(description="The events, oldest first.")


class SessionMessage(_Answer):
    """One logged turn of a session, redacted as stored."""

    session_id: str = Field(description="The session.")
    message_id: str = Field(description="The turn's id (the caller's, or made from role, time and content).")
    role: str = Field(description="`user`, `assistant`, `system` or `tool`.")
    content: str = Field(description="The turn's text, redacted as stored.")
    created_at: datetime = Field(description=f"When it was said. {_WHEN}")
    user_id: str | None = Field(None, description="The user.")
    agent_id: str | None = Field(None, description="The agent, if given.")
    name: str | None = Field(None, description="The speaker's name, if given.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="The caller's key/value pairs.")


class SessionMessages(_Answer):
    """The recent window of a session, oldest first."""

    messages: list[SessionMessage] = Field(description="The turns, oldest first.")


class JobAccepted(_Answer):
    """A background job the server accepted (202); follow it with `get_job` or `wait_for_job`."""

    job_id: str = Field(description="Follow it at `GET /v1/jobs/{job_id}`.")


class Job(_Answer):
    """A background job: conversation extraction, import, consolidation, erasure, ..."""

    id: str = Field(description="The job's id.")
    kind: str = Field(description="`conversation`, `import`, `consolidation`, `erasure`, ...")
    state: str = Field(description="`queued`, `running`, `succeeded` or `failed`.")
    progress: float = Field(0.0, description="0..1.")
    error: str | None = Field(None, description="Why it failed, when it did.")
    report: dict[str, Any] | None = Field(None, description="What it did (counts; for an erasure, the receipt).")
    created_at: datetime | None = Field(None, description=f"When it was submitted. {_WHEN}")
    updated_at: datetime | None = Field(None, description=f"When it last changed. {_WHEN}")

    @property
    def done(self) -> bool:
        """Whether the job has ended, well or not."""
        return self.state in ("succeeded", "failed")


class Erasure(_Answer):
    """Rows deleted per table by erasing a user, and the job that purges their files (the receipt)."""

    erased: dict[str, int] = Field(description="Rows deleted per table (`memories`, `messages`, `events`, ...).")
    job_id: str = Field(description="The purge job; its report is the erasure's receipt.")


class Schedule(_Answer):
    """The consolidation schedule: on or off, the next run, the last submission (`{}` before the first)."""

    enabled: bool = Field(description="Whether scheduled runs are on.")
    next_run: datetime | None = Field(None, description=f"When the next run starts. {_WHEN}")
    last: dict[str, Any] = Field(default_factory=dict, description="The last submission (`{}` before the first).")


class Health(_Answer):
    """Liveness (`{"status": "ok"}`; 503 `{"status": "starting", "reason": ...}` while the server starts)."""

    status: str = Field(description="`ok` once the server has started; `starting` before, `failed` if it could not.")
    reason: str | None = Field(None, description="What a server that is not `ok` is doing, or what failed.")


class Readiness(_Answer):
    """Readiness: `ready` needs the writer and the store; `degraded` when a model does not answer."""

    ready: bool = Field(description="The writer and the store answer: requests can be served.")
    degraded: bool = Field(False, description="A model does not answer: recall falls back to keywords.")
    checks: dict[str, str] = Field(default_factory=dict, description="`ok` or why not, per part.")


class ContextMemory(_Answer):
    """One recalled memory in a context block, with its type and the date it was stored."""

    id: str = Field(description="The memory's id.")
    content: str = Field(description="The memory's text.")
    memory_type: str = Field(description="`episodic`, `semantic` or `procedural`.")
    score: float = Field(description="Its recall score, 0..1.")
    created_at: datetime | None = Field(None, description=f"When it was stored. {_WHEN}")


class ContextTurn(_Answer):
    """One recent turn of the session, kept whole in the window."""

    message_id: str = Field(description="The turn's id.")
    role: str = Field(description="`user`, `assistant`, `system` or `tool`.")
    content: str = Field(description="The turn's text, redacted as stored.")
    name: str | None = Field(None, description="The speaker's name, if given.")
    created_at: datetime | None = Field(None, description=f"When it was said. {_WHEN}")


class ContextSummary(_Answer):
    """The summary of the session's turns older than the window."""

    text: str = Field(description="The summary.")
    turns: int = Field(description="How many older turns it covers.")
    first_message_id: str = Field(description="The first turn it covers.")
    last_message_id: str = Field(description="The last turn it covers (the one before the window).")
    source: str = Field(description="`llm` (the configured model) or `extractive` (the turns' own sentences).")


class ContextParts(_Answer):
    """The parts of a context block: recalled memories, the summary of older turns, the recent window."""

    memories: list[ContextMemory] = Field(default_factory=list, description="Recalled memories, best first.")
    summary: ContextSummary | None = Field(None, description="The older turns' summary; None when the window holds them all.")
    recent: list[ContextTurn] = Field(default_factory=list, description="The session's most recent turns, oldest first.")


class Context(_Answer):
    """What to put in the prompt (`POST /v1/context`): `text`, at most `max_tokens` tokens, and its parts."""

    text: str = Field(description="The block, in the session's language, ready for a system prompt.")
    tokens: int = Field(description="Its length in tokens (never above `max_tokens`).")
    max_tokens: int = Field(description="The budget it was made for.")
    language: str = Field(description="`en` or `zh`: the session's language (or the query's).")
    tokenizer: str = Field(description="What the tokens were counted with.")
    parts: ContextParts = Field(default_factory=ContextParts, description="The same content as data.")
    degraded: bool = Field(False, description="True when recall ran on keywords alone.")


class ExportLine(_Answer):
    """One line of a user's export (JSON lines): a header, then every memory, turn and event, then
    the end line. The other fields are the row's: a memory's as `Memory` shows them (with
    `index_text`), a turn's as `SessionMessage`, an event's as `MemoryEvent`."""

    kind: str = Field(description="`export` (the header: `version`, `user_id`), `memory`, `message`, `event`, or "
                                  "`end` (the counts: `memories`, `messages`, `events`; a file without it was cut short).")


class ErrorDetail(_Answer):
    """What went wrong."""

    code: str = Field(description="A stable code: `invalid_input`, `not_found`, `unauthorized`, `forbidden`, "
                                  "`quota_exceeded`, `rate_limited`, `conflict`, `unavailable`, ...")
    message: str = Field(description="A sentence for people: what was wrong and what to do.")
    retry_after_s: int | None = Field(None, description="On a 429: seconds before trying again (also `Retry-After`).")


class ErrorBody(_Answer):
    """Every error the API answers: `{"error": {"code", "message"}}`."""

    error: ErrorDetail = Field(description="The error.")
