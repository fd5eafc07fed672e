"""Request bodies of the HTTP API, with examples in English and Chinese for /docs.

Field rules come from the core's annotated types, so the API and the Python service validate
alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from agent_memory_http.models import ErrorBody
from pydantic import BaseModel, ConfigDict, Field

from agent_memory.models import (
    ContextQuery,
    Identifier,
    MemoryFields,
    MemoryPatch,
    Message,
    NewMemory,
    SearchQuery,
    Text,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryIn(MemoryFields):
    """One memory to store."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"user_id": "u1", "content": "The user prefers Python for backend work", "memory_type": "semantic"},
                {"user_id": "u2", "content": "退款需要两级审批", "memory_type": "procedural", "importance": 0.9},
            ]
        },
    )

    def as_new_memory(self) -> NewMemory:
        """The memory as the core writes it, without checking it again: it was validated as it came in."""
        return NewMemory.model_construct(_fields_set=self.model_fields_set, **dict(self))


class MemoryBatchIn(_Body):
    """Many memories in one request (one commit)."""

    memories: list[MemoryIn] = Field(min_length=1, description="The memories, stored in this order (ids answer in it).")


class SearchIn(SearchQuery):
    """A recall request (the core's SearchQuery, with examples for /docs)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"user_id": "u1", "query": "Which language does the user prefer?", "top_k": 5},
                {"user_id": "u2", "query": "退款流程是什么？", "memory_types": ["procedural"]},
            ]
        },
    )


class PatchIn(MemoryPatch):
    """Fields to change in place (the core's MemoryPatch)."""


class MessageIn(Message):
    """One conversation turn (the core's Message)."""


class ConversationIn(_Body):
    """Turns of one session, to log and learn from in the background."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"user_id": "u1", "session_id": "s1", "messages": [
                    {"role": "user", "content": "I switched from VS Code to Neovim last month."},
                    {"role": "assistant", "content": "Noted, Neovim it is."}]},
                {"user_id": "u2", "session_id": "s9", "messages": [
                    {"role": "user", "content": "以后都用中文回答我。"}]},
            ]
        },
    )

    user_id: Identifier = Field(description="Whose conversation it is.")
    session_id: Identifier = Field(description="The conversation: later turns of it go to the same session.")
    agent_id: Identifier | None = Field(None, description="The agent in the conversation.")
    messages: list[MessageIn] = Field(min_length=1, description="The new turns, oldest first.")
    mode: Literal["raw", "rules", "llm"] | None = Field(
        None, description="How memories are extracted: `rules` (offline, English and Chinese), `llm` (the configured "
                          "model) or `raw` (every turn); default `llm` where an LLM is configured, else `rules`.")


class ImportIn(_Body):
    """A bulk import to run on the cluster."""

    path: Text = Field(description="`s3://...` or a file under the server's import root (`AGENT_MEMORY_IMPORT_ROOT`).")
    format: Literal["auto", "jsonl", "csv", "parquet", "chatgpt", "claude"] = Field(
        "auto", description="The file's format: a history file (JSONL, CSV, Parquet) or a ChatGPT or Claude "
                            "`conversations.json`; `auto` by its name, a `.json` array of such conversations "
                            "being that export.")
    mode: Literal["raw", "rules", "llm"] = Field("raw", description="`raw` (every turn a memory), `rules` or `llm` extraction.")
    user_id: Identifier | None = Field(
        None, description="The user of every turn of a ChatGPT or Claude export, which names none: required for "
                          "those, refused for the history formats (their rows name their user).")


class ConsolidateIn(_Body):
    """A consolidation run for the caller's org, or one user of it."""

    user_id: Identifier | None = Field(None, description="Only this user; default: every user of the org.")


class ContextIn(ContextQuery):
    """A context request (the core's ContextQuery, with examples for /docs)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"user_id": "u1", "session_id": "s1", "query": "Which editor should I set up?", "max_tokens": 800},
                {"user_id": "u2", "session_id": "s9", "query": "后端用什么语言写比较好？", "memory_types": ["semantic"]},
            ]
        },
    )


# What each error status means, for the docs of every operation that may answer it.
ERROR_STATUSES: dict[int, str] = {
    401: "No API key, or one nobody issued (`unauthorized`).",
    403: "The key's role or teams do not allow this (`forbidden`, `team_forbidden`), or the org is at its "
         "memory quota (`quota_exceeded`).",
    404: "No such memory, job or session for this user in this org (`not_found`).",
    409: "The change conflicts with the memory's state (`not_superseded`, `conflict`).",
    413: "The body is larger than the server's `max_body_bytes` (`body_too_large`).",
    415: "The body was not sent as JSON: send it with `content-type: application/json` (`unsupported_media_type`).",
    422: "The request is invalid; the message names each field (`invalid_input`).",
    429: "Over the key's rate limit, or the extraction queue is full (`rate_limited`, `queue_full`): retry after "
         "`Retry-After` seconds.",
    503: "A part of the service is unavailable (`unavailable`, `erasure_incomplete`): retry; a write with the same "
         "`Idempotency-Key`.",
}
# Every call with a key may answer these.
COMMON_ERRORS = (401, 403, 422, 429, 503)


def errors(*statuses: int, body: bool = False, stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """The documented error answers of an operation: the common ones, `statuses`, 413 and 415 with a body.

    Errors are JSON, also where the success answer is not (`stream`: JSON lines); such an
    operation names the error body by reference, as the JSON operations declare it."""
    wanted = sorted({*COMMON_ERRORS, *statuses, *((413, 415) if body else ())})
    if stream:
        json_body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        return {status: {"description": ERROR_STATUSES[status], "content": json_body} for status in wanted}
    return {status: {"model": ErrorBody, "description": ERROR_STATUSES[status]} for status in wanted}


def iso(value: datetime | None) -> str | None:
    """An ISO timestamp or None."""
    return value.isoformat() if value else None
