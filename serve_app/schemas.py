"""Request bodies of the HTTP API, with examples in English and Chinese for /docs.

Field rules come from the core's annotated types, so the API and the Python service validate
alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_memory.models import (
    Identifier,
    MemoryFields,
    MemoryPatch,
    Message,
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


class MemoryBatchIn(_Body):
    """Many memories in one request (one commit)."""

    memories: list[MemoryIn] = Field(min_length=1)


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

    user_id: Identifier
    session_id: Identifier
    agent_id: Identifier | None = None
    messages: list[MessageIn] = Field(min_length=1)
    mode: Literal["raw", "rules", "llm"] | None = None


class ImportIn(_Body):
    """A bulk import to run on the cluster."""

    path: Text
    format: Literal["auto", "jsonl", "csv", "parquet"] = "auto"
    mode: Literal["raw", "rules", "llm"] = "raw"


class ConsolidateIn(_Body):
    """A consolidation run for the caller's org, or one user of it."""

    user_id: Identifier | None = None


def dump(model: BaseModel) -> dict[str, Any]:
    """A request body as the plain dict the core validates (unset fields left out)."""
    return model.model_dump(exclude_unset=True)


def iso(value: datetime | None) -> str | None:
    """An ISO timestamp or None."""
    return value.isoformat() if value else None
