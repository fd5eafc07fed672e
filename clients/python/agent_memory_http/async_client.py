"""`AsyncMemoryClient`: the methods of `MemoryClient`, as coroutines, on the same requests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

import httpx

from . import _calls as calls
from ._http import Call
from .errors import ConflictError
from .models import (
    Context,
    Deleted,
    Erasure,
    Health,
    Job,
    JobAccepted,
    Memory,
    MemoryEvent,
    MemoryPage,
    MemoryType,
    MetadataValue,
    NewMemory,
    Readiness,
    Schedule,
    SearchResult,
    SessionMessage,
    Turn,
    WriteResult,
)

T = TypeVar("T")

__all__ = ["AsyncMemoryClient"]


class AsyncMemoryClient:
    """An asyncio client of the agent-memory HTTP API: the methods of `MemoryClient`, as coroutines,
    with the same arguments, defaults and retries; use it with `async with` or `await aclose()`."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout: float | httpx.Timeout = 30.0,
        max_retries: int = 3, backoff_base: float = 0.5, backoff_max: float = 8.0,
        headers: Mapping[str, str] | None = None, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = calls.ClientSettings(base_url, api_key, timeout, max_retries, backoff_base, backoff_max, headers)
        self._http = httpx.AsyncClient(base_url=self._settings.base_url, headers=self._settings.headers,
                                       timeout=timeout, transport=transport)

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        policy, attempt = self._settings.retry, 0
        while True:
            try:
                response = await self._http.request(call.method, call.path, params=call.params, json=call.json,
                                                    headers=call.headers())
            except httpx.TransportError as exc:
                delay = policy.after_failure(attempt, exc, call.replayable)
                if delay is None:
                    raise call.unreachable(self.base_url, exc, attempt + 1) from exc
            else:
                delay = policy.after_answer(attempt, response) if call.retry else None
                if delay is None:
                    return call.answer(response, attempt + 1)
            await asyncio.sleep(delay)
            attempt += 1

    # -- health -------------------------------------------------------------------------------

    async def health(self) -> Health:
        """Liveness: `GET /healthz`."""
        return await self._send(calls.health())

    async def ready(self) -> Readiness:
        """Readiness: `GET /readyz`; `ready` False (not an error) when the writer or store is down."""
        return await self._send(calls.ready())

    # -- memories -----------------------------------------------------------------------------

    async def add(
        self, user_id: str, content: str, *, memory_type: MemoryType | None = None, id: str | None = None,
        agent_id: str | None = None, session_id: str | None = None, team_id: str | None = None,
        importance: float | None = None, confidence: float | None = None, metadata: dict[str, Any] | None = None,
        created_at: datetime | None = None, expires_at: datetime | None = None, idempotency_key: str | None = None,
    ) -> WriteResult:
        """Store one memory (`POST /v1/memories`); its stored id is `.ids[0]`."""
        memory = calls.memory(calls.present(
            user_id=user_id, content=content, memory_type=memory_type, id=id, agent_id=agent_id,
            session_id=session_id, team_id=team_id, importance=importance, confidence=confidence,
            metadata=metadata, created_at=created_at, expires_at=expires_at,
        ))
        return await self._send(calls.write([memory], idempotency_key))

    async def add_many(
        self, memories: Iterable[NewMemory | Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WriteResult:
        """Store up to 1,000 memories in one commit; `ids` in the order sent."""
        return await self._send(calls.write(calls.many(memories), idempotency_key))

    async def search(
        self, user_id: str, query: str, *, top_k: int | None = None, memory_types: list[MemoryType] | None = None,
        scope: Literal["user", "team"] | None = None, team_id: str | None = None, agent_id: str | None = None,
        session_id: str | None = None, filters: dict[str, MetadataValue] | None = None,
        since: datetime | None = None, until: datetime | None = None, min_score: float | None = None,
        mode: Literal["hybrid", "dense", "keyword"] | None = None,
    ) -> SearchResult:
        """Recall (`POST /v1/memories/search`): the user's memories that answer `query`, best first."""
        return await self._send(calls.search(calls.present(
            user_id=user_id, query=query, top_k=top_k, memory_types=memory_types, scope=scope, team_id=team_id,
            agent_id=agent_id, session_id=session_id, filters=filters, since=since, until=until,
            min_score=min_score, mode=mode,
        )))

    async def context(
        self, user_id: str, query: str, *, session_id: str | None = None, max_tokens: int | None = None,
        memory_types: list[MemoryType] | None = None, top_k: int | None = None,
    ) -> Context:
        """The block to put in the prompt (`POST /v1/context`): the session's recent turns, a summary
        of its older ones and the memories that answer `query`, within `max_tokens`."""
        return await self._send(calls.context(calls.present(
            user_id=user_id, query=query, session_id=session_id, max_tokens=max_tokens,
            memory_types=memory_types, top_k=top_k,
        )))

    async def get(self, user_id: str, memory_id: str) -> Memory:
        """One memory, by its stored id or the client `id` it was written with."""
        return await self._send(calls.get(user_id, memory_id))

    async def update(
        self, user_id: str, memory_id: str, *, content: str = calls.UNSET, memory_type: MemoryType = calls.UNSET,
        importance: float = calls.UNSET, metadata: dict[str, Any] = calls.UNSET, expires_at: datetime | None = calls.UNSET,
        idempotency_key: str | None = None,
    ) -> Memory:
        """Change a memory in place (`PATCH`); fields left calls.UNSET stay; answers the memory as changed."""
        changes = {"content": content, "memory_type": memory_type, "importance": importance,
                   "metadata": metadata, "expires_at": expires_at}
        return await self._send(calls.update(user_id, memory_id, changes, idempotency_key))

    async def delete(self, user_id: str, memory_id: str) -> Deleted:
        """Delete one memory; its audit trail stays."""
        return await self._send(calls.delete(user_id, memory_id))

    async def restore(self, user_id: str, memory_id: str, *, idempotency_key: str | None = None) -> Memory:
        """Make a superseded memory active again; `ConflictError` (`not_superseded`) when it is not."""
        try:
            return await self._send(calls.restore(user_id, memory_id, idempotency_key))
        except ConflictError as exc:
            if not calls.restored_already(exc):
                raise
        return await self.get(user_id, memory_id)

    async def history(self, user_id: str, memory_id: str) -> list[MemoryEvent]:
        """A memory's audit events, oldest first (also after it was deleted)."""
        return await self._send(calls.history(user_id, memory_id))

    async def iter_memories(
        self, user_id: str, *, page_size: int = 100, status: str = "active"
    ) -> AsyncIterator[Memory]:
        """Every memory of the user, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = await self._send(calls.memories_page(user_id, page_size, cursor, status))
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


    # -- users, conversations, sessions -----------------------------------------------------------

    async def erase_user(self, user_id: str) -> Erasure:
        """Erase everything of a user, unrecoverably (admin); `job_id` is the purge's receipt."""
        return await self._send(calls.erase(user_id))

    async def export_user(self, user_id: str) -> list[dict[str, Any]]:
        """Everything of a user as the lines of an export (`GET /v1/users/{id}/export`, admin):
        a header, their memories, turns and events, and an end line; `agent-memory import
        --format memories` restores it."""
        return await self._send(calls.export(user_id))

    async def log_conversation(
        self, user_id: str, session_id: str, messages: Iterable[Turn | Mapping[str, Any]], *,
        agent_id: str | None = None, mode: Literal["raw", "rules", "llm"] | None = None,
        idempotency_key: str | None = None,
    ) -> JobAccepted:
        """Log turns now and extract memories in the background; follow `job_id` with `wait_for_job`."""
        return await self._send(calls.conversation(user_id, session_id, messages, agent_id, mode, idempotency_key))

    async def session_messages(self, user_id: str, session_id: str, *, last: int = 20) -> list[SessionMessage]:
        """The last `last` turns of a session, oldest first."""
        return await self._send(calls.session(user_id, session_id, last))

    # -- jobs -------------------------------------------------------------------------------------

    async def submit_import(
        self, path: str, *, format: Literal["auto", "jsonl", "csv", "parquet", "chatgpt", "claude"] = "auto",
        mode: Literal["raw", "rules", "llm"] = "raw", user_id: str | None = None, idempotency_key: str | None = None,
    ) -> JobAccepted:
        """Start a bulk import of a history file, or of a ChatGPT or Claude export (whose turns are all
        `user_id`'s), under the server's import root or at an object-store URI (admin)."""
        return await self._send(calls.import_file(path, format, mode, user_id, idempotency_key))

    async def consolidate(self, user_id: str | None = None, *, idempotency_key: str | None = None) -> JobAccepted:
        """Start consolidation of the caller's org, or of one user, now (admin)."""
        return await self._send(calls.consolidate(user_id, idempotency_key))

    async def get_job(self, job_id: str) -> Job:
        """A background job's state, progress and report."""
        return await self._send(calls.job(job_id))

    async def wait_for_job(self, job_id: str, *, timeout: float = 60.0, poll_interval: float = 0.25) -> Job:
        """Poll a job until it ends (`succeeded` or `failed`); TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = await self.get_job(job_id)
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            await asyncio.sleep(poll_interval)

    async def schedule(self) -> Schedule:
        """The consolidation schedule."""
        return await self._send(calls.schedule())

    # `list` comes last: defined earlier, it would shadow the builtin in the annotations after it.
    async def list(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None, status: str = "active"
    ) -> MemoryPage:
        """One page of the user's memories, newest first (`status`: active, superseded, expired, all)."""
        return await self._send(calls.memories_page(user_id, limit, cursor, status))
