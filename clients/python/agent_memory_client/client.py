"""`MemoryClient` and `AsyncMemoryClient`: one method per endpoint of the agent-memory HTTP API.

Both send the same requests (built once, below) and differ only in how they wait. Every write
carries an `Idempotency-Key`, the caller's or one made for the call, and keeps it across the
call's retries.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, TypeVar

import httpx
import pydantic

from ._http import Call, RetryPolicy, segment
from .errors import ConflictError, InvalidInputError
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

__all__ = ["AsyncMemoryClient", "MemoryClient", "UNSET"]

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8000"
USER_AGENT = "agent-memory-client/0.1.0"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""The default of `update`'s fields: leave the field as it is (None clears `expires_at`)."""


# -- the requests, shared by both clients --------------------------------------------------------


def _present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _key(idempotency_key: str | None) -> str:
    return idempotency_key if idempotency_key is not None else uuid.uuid4().hex


M = TypeVar("M", bound=pydantic.BaseModel)


def _validated(model: type[M], item: M | Mapping[str, Any], where: str) -> M:
    """`item` as `model`; a wrong type is an `InvalidInputError` before anything is sent."""
    if isinstance(item, model):
        return item
    try:
        return model.model_validate(dict(item))
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{where}{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidInputError(problems, code="invalid_input") from None


def _memory(item: NewMemory | Mapping[str, Any], where: str = "") -> dict[str, Any]:
    return _validated(NewMemory, item, where).body()


def _write(memories: list[dict[str, Any]], idempotency_key: str | None) -> Call[WriteResult]:
    body: Any = memories[0] if len(memories) == 1 else {"memories": memories}
    return Call("POST", "/v1/memories", WriteResult.model_validate, json=body, idempotency_key=_key(idempotency_key))


def _many(memories: Iterable[NewMemory | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [_memory(m, f"memories.{i}.") for i, m in enumerate(memories)]


def _search(body: dict[str, Any]) -> Call[SearchResult]:
    if isinstance(body.get("since"), datetime):
        body["since"] = body["since"].isoformat()
    if isinstance(body.get("until"), datetime):
        body["until"] = body["until"].isoformat()
    return Call("POST", "/v1/memories/search", SearchResult.model_validate, json=body)


def _context(body: dict[str, Any]) -> Call[Context]:
    # A read: safe to send again.
    return Call("POST", "/v1/context", Context.model_validate, json=body)


def _list(user_id: str, limit: int, cursor: str | None, status: str) -> Call[MemoryPage]:
    params = _present(user_id=user_id, limit=limit, cursor=cursor, status=status)
    return Call("GET", "/v1/memories", MemoryPage.model_validate, params=params)


def _get(user_id: str, memory_id: str) -> Call[Memory]:
    return Call("GET", f"/v1/memories/{segment(memory_id)}", Memory.model_validate, params={"user_id": user_id})


def _update(user_id: str, memory_id: str, changes: dict[str, Any], idempotency_key: str | None) -> Call[Memory]:
    body = {k: v for k, v in changes.items() if v is not UNSET}
    if isinstance(body.get("expires_at"), datetime):
        body["expires_at"] = body["expires_at"].isoformat()
    return Call("PATCH", f"/v1/memories/{segment(memory_id)}", Memory.model_validate, params={"user_id": user_id},
                json=body, idempotency_key=_key(idempotency_key))


def _delete(user_id: str, memory_id: str) -> Call[Deleted]:
    return Call("DELETE", f"/v1/memories/{segment(memory_id)}", Deleted.model_validate, params={"user_id": user_id})


def _restore(user_id: str, memory_id: str, idempotency_key: str | None) -> Call[Memory]:
    return Call("POST", f"/v1/memories/{segment(memory_id)}/restore", Memory.model_validate,
                params={"user_id": user_id}, idempotency_key=_key(idempotency_key))


def _restored_already(exc: ConflictError) -> bool:
    """A `not_superseded` after an earlier attempt that may have restored the memory itself."""
    return exc.code == "not_superseded" and exc.attempts > 1


def _history(user_id: str, memory_id: str) -> Call[list[MemoryEvent]]:
    return Call("GET", f"/v1/memories/{segment(memory_id)}/history",
                lambda body: [MemoryEvent.model_validate(e) for e in body["events"]], params={"user_id": user_id})


def _erase(user_id: str) -> Call[Erasure]:
    return Call("DELETE", f"/v1/users/{segment(user_id)}", Erasure.model_validate)


def _export(user_id: str) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/users/{segment(user_id)}/export", list)


def _conversation(
    user_id: str, session_id: str, messages: Iterable[Turn | Mapping[str, Any]], agent_id: str | None,
    mode: str | None, idempotency_key: str | None,
) -> Call[JobAccepted]:
    key = _key(idempotency_key)
    # The server keys a turn by its message_id, or else by role, time and content; a turn with
    # neither id nor time would be stamped anew by each attempt, so it gets an id from the key.
    stem = hashlib.sha256(key.encode()).hexdigest()[:16]
    turns = []
    for position, message in enumerate(messages):
        turn = _validated(Turn, message, f"messages.{position}.").body()
        if turn.get("message_id") is None and turn.get("created_at") is None:
            turn["message_id"] = f"{stem}:{position}"
        turns.append(turn)
    body = _present(user_id=user_id, session_id=session_id, agent_id=agent_id, mode=mode)
    body["messages"] = turns
    return Call("POST", "/v1/conversations", JobAccepted.model_validate, json=body, idempotency_key=key)


def _session(user_id: str, session_id: str, last: int) -> Call[list[SessionMessage]]:
    return Call("GET", f"/v1/sessions/{segment(session_id)}/messages",
                lambda body: [SessionMessage.model_validate(m) for m in body["messages"]],
                params={"user_id": user_id, "last": last})


def _import(path: str, fmt: str, mode: str, user_id: str | None, idempotency_key: str | None) -> Call[JobAccepted]:
    # A second import of the same file would start a second job: sent again only if never sent.
    body = _present(path=path, format=fmt, mode=mode, user_id=user_id)
    return Call("POST", "/v1/jobs/import", JobAccepted.model_validate, json=body,
                idempotency_key=_key(idempotency_key), replayable=False)


def _consolidate(user_id: str | None, idempotency_key: str | None) -> Call[JobAccepted]:
    return Call("POST", "/v1/jobs/consolidate", JobAccepted.model_validate, json=_present(user_id=user_id),
                idempotency_key=_key(idempotency_key), replayable=False)


def _job(job_id: str) -> Call[Job]:
    return Call("GET", f"/v1/jobs/{segment(job_id)}", Job.model_validate)


def _schedule() -> Call[Schedule]:
    return Call("GET", "/v1/schedule", Schedule.model_validate)


def _health() -> Call[Health]:
    return Call("GET", "/healthz", Health.model_validate)


def _ready() -> Call[Readiness]:
    # Not ready is an answer (503 with the checks), not an error to retry.
    return Call("GET", "/readyz", Readiness.model_validate, retry=False, accept=frozenset({503}))


class _Settings:
    """Where the service is, how to authenticate, how long to wait and how often to retry."""

    def __init__(
        self, base_url: str | None, api_key: str | None, timeout: float | httpx.Timeout, max_retries: int,
        backoff_base: float, backoff_max: float, headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = (base_url or os.environ.get("AGENT_MEMORY_URL") or DEFAULT_URL).rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("AGENT_MEMORY_API_KEY")
        self.headers = {"User-Agent": USER_AGENT, **(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout
        self.retry = RetryPolicy(max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max)



class MemoryClient:
    """A blocking client of the agent-memory HTTP API; use it as a context manager or `close()` it.

    `base_url` defaults to `AGENT_MEMORY_URL` (else http://127.0.0.1:8000) and `api_key` to
    `AGENT_MEMORY_API_KEY`, sent as `Authorization: Bearer <key>`. `timeout` is seconds per
    attempt (or an `httpx.Timeout`). A call answered 429 or 503, or that got no answer, is sent
    again up to `max_retries` times, waiting `backoff_base * 2**n` seconds (at most `backoff_max`,
    half of it random) and at least the server's `Retry-After`; other errors raise at once, as
    subclasses of `AgentMemoryError`.
    """

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout: float | httpx.Timeout = 30.0,
        max_retries: int = 3, backoff_base: float = 0.5, backoff_max: float = 8.0,
        headers: Mapping[str, str] | None = None, transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._settings = _Settings(base_url, api_key, timeout, max_retries, backoff_base, backoff_max, headers)
        self._http = httpx.Client(base_url=self._settings.base_url, headers=self._settings.headers,
                                  timeout=timeout, transport=transport)

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        policy, attempt = self._settings.retry, 0
        while True:
            try:
                response = self._http.request(call.method, call.path, params=call.params, json=call.json,
                                              headers=call.headers())
            except httpx.TransportError as exc:
                delay = policy.after_failure(attempt, exc, call.replayable)
                if delay is None:
                    raise call.unreachable(self.base_url, exc, attempt + 1) from exc
            else:
                delay = policy.after_answer(attempt, response) if call.retry else None
                if delay is None:
                    return call.answer(response, attempt + 1)
            time.sleep(delay)
            attempt += 1

    # -- health -------------------------------------------------------------------------------

    def health(self) -> Health:
        """Liveness: `GET /healthz`."""
        return self._send(_health())

    def ready(self) -> Readiness:
        """Readiness: `GET /readyz`; `ready` False (not an error) when the writer or store is down."""
        return self._send(_ready())

    # -- memories -----------------------------------------------------------------------------

    def add(
        self, user_id: str, content: str, *, memory_type: MemoryType | None = None, id: str | None = None,
        agent_id: str | None = None, session_id: str | None = None, team_id: str | None = None,
        importance: float | None = None, confidence: float | None = None, metadata: dict[str, Any] | None = None,
        created_at: datetime | None = None, expires_at: datetime | None = None, idempotency_key: str | None = None,
    ) -> WriteResult:
        """Store one memory (`POST /v1/memories`); its stored id is `.ids[0]`."""
        memory = _memory(_present(
            user_id=user_id, content=content, memory_type=memory_type, id=id, agent_id=agent_id,
            session_id=session_id, team_id=team_id, importance=importance, confidence=confidence,
            metadata=metadata, created_at=created_at, expires_at=expires_at,
        ))
        return self._send(_write([memory], idempotency_key))

    def add_many(
        self, memories: Iterable[NewMemory | Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WriteResult:
        """Store up to 1,000 memories in one commit; `ids` in the order sent."""
        return self._send(_write(_many(memories), idempotency_key))

    def search(
        self, user_id: str, query: str, *, top_k: int | None = None, memory_types: list[MemoryType] | None = None,
        scope: Literal["user", "team"] | None = None, team_id: str | None = None, agent_id: str | None = None,
        session_id: str | None = None, filters: dict[str, MetadataValue] | None = None,
        since: datetime | None = None, until: datetime | None = None, min_score: float | None = None,
        mode: Literal["hybrid", "dense", "keyword"] | None = None,
    ) -> SearchResult:
        """Recall (`POST /v1/memories/search`): the user's memories that answer `query`, best first."""
        return self._send(_search(_present(
            user_id=user_id, query=query, top_k=top_k, memory_types=memory_types, scope=scope, team_id=team_id,
            agent_id=agent_id, session_id=session_id, filters=filters, since=since, until=until,
            min_score=min_score, mode=mode,
        )))

    def context(
        self, user_id: str, query: str, *, session_id: str | None = None, max_tokens: int | None = None,
        memory_types: list[MemoryType] | None = None, top_k: int | None = None,
    ) -> Context:
        """The block to put in the prompt (`POST /v1/context`): the session's recent turns, a summary
        of its older ones and the memories that answer `query`, within `max_tokens`."""
        return self._send(_context(_present(
            user_id=user_id, query=query, session_id=session_id, max_tokens=max_tokens,
            memory_types=memory_types, top_k=top_k,
        )))

    def get(self, user_id: str, memory_id: str) -> Memory:
        """One memory, by its stored id or the client `id` it was written with."""
        return self._send(_get(user_id, memory_id))

    def update(
        self, user_id: str, memory_id: str, *, content: str = UNSET, memory_type: MemoryType = UNSET,
        importance: float = UNSET, metadata: dict[str, Any] = UNSET, expires_at: datetime | None = UNSET,
        idempotency_key: str | None = None,
    ) -> Memory:
        """Change a memory in place (`PATCH`); fields left UNSET stay; answers the memory as changed."""
        changes = {"content": content, "memory_type": memory_type, "importance": importance,
                   "metadata": metadata, "expires_at": expires_at}
        return self._send(_update(user_id, memory_id, changes, idempotency_key))

    def delete(self, user_id: str, memory_id: str) -> Deleted:
        """Delete one memory; its audit trail stays."""
        return self._send(_delete(user_id, memory_id))

    def restore(self, user_id: str, memory_id: str, *, idempotency_key: str | None = None) -> Memory:
        """Make a superseded memory active again; `ConflictError` (`not_superseded`) when it is not."""
        try:
            return self._send(_restore(user_id, memory_id, idempotency_key))
        except ConflictError as exc:
            if not _restored_already(exc):
                raise
        return self.get(user_id, memory_id)

    def history(self, user_id: str, memory_id: str) -> list[MemoryEvent]:
        """A memory's audit events, oldest first (also after it was deleted)."""
        return self._send(_history(user_id, memory_id))

    def iter_memories(self, user_id: str, *, page_size: int = 100, status: str = "active") -> Iterator[Memory]:
        """Every memory of the user, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = self._send(_list(user_id, page_size, cursor, status))
            yield from page.memories
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


    # -- users, conversations, sessions -----------------------------------------------------------

    def erase_user(self, user_id: str) -> Erasure:
        """Erase everything of a user, unrecoverably (admin); `job_id` is the purge's receipt."""
        return self._send(_erase(user_id))

    def export_user(self, user_id: str) -> list[dict[str, Any]]:
        """Everything of a user as the lines of an export (`GET /v1/users/{id}/export`, admin):
        a header, their memories, turns and events, and an end line; `agent-memory import
        --format memories` restores it."""
        return self._send(_export(user_id))

    def log_conversation(
        self, user_id: str, session_id: str, messages: Iterable[Turn | Mapping[str, Any]], *,
        agent_id: str | None = None, mode: Literal["raw", "rules", "llm"] | None = None,
        idempotency_key: str | None = None,
    ) -> JobAccepted:
        """Log turns now and extract memories in the background; follow `job_id` with `wait_for_job`."""
        return self._send(_conversation(user_id, session_id, messages, agent_id, mode, idempotency_key))

    def session_messages(self, user_id: str, session_id: str, *, last: int = 20) -> list[SessionMessage]:
        """The last `last` turns of a session, oldest first."""
        return self._send(_session(user_id, session_id, last))

    # -- jobs -------------------------------------------------------------------------------------

    def submit_import(
        self, path: str, *, format: Literal["auto", "jsonl", "csv", "parquet", "chatgpt", "claude"] = "auto",
        mode: Literal["raw", "rules", "llm"] = "raw", user_id: str | None = None, idempotency_key: str | None = None,
    ) -> JobAccepted:
        """Start a bulk import of a history file, or of a ChatGPT or Claude export (whose turns are all
        `user_id`'s), under the server's import root or at an object-store URI (admin)."""
        return self._send(_import(path, format, mode, user_id, idempotency_key))

    def consolidate(self, user_id: str | None = None, *, idempotency_key: str | None = None) -> JobAccepted:
        """Start consolidation of the caller's org, or of one user, now (admin)."""
        return self._send(_consolidate(user_id, idempotency_key))

    def get_job(self, job_id: str) -> Job:
        """A background job's state, progress and report."""
        return self._send(_job(job_id))

    def wait_for_job(self, job_id: str, *, timeout: float = 60.0, poll_interval: float = 0.25) -> Job:
        """Poll a job until it ends (`succeeded` or `failed`); TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job.done:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            time.sleep(poll_interval)

    def schedule(self) -> Schedule:
        """The consolidation schedule."""
        return self._send(_schedule())

    # `list` comes last: defined earlier, it would shadow the builtin in the annotations after it.
    def list(self, user_id: str, *, limit: int = 50, cursor: str | None = None, status: str = "active") -> MemoryPage:
        """One page of the user's memories, newest first (`status`: active, superseded, expired, all)."""
        return self._send(_list(user_id, limit, cursor, status))


class AsyncMemoryClient:
    """An asyncio client of the agent-memory HTTP API: the methods of `MemoryClient`, as coroutines,
    with the same arguments, defaults and retries; use it with `async with` or `await aclose()`."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, *, timeout: float | httpx.Timeout = 30.0,
        max_retries: int = 3, backoff_base: float = 0.5, backoff_max: float = 8.0,
        headers: Mapping[str, str] | None = None, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = _Settings(base_url, api_key, timeout, max_retries, backoff_base, backoff_max, headers)
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
        return await self._send(_health())

    async def ready(self) -> Readiness:
        """Readiness: `GET /readyz`; `ready` False (not an error) when the writer or store is down."""
        return await self._send(_ready())

    # -- memories -----------------------------------------------------------------------------

    async def add(
        self, user_id: str, content: str, *, memory_type: MemoryType | None = None, id: str | None = None,
        agent_id: str | None = None, session_id: str | None = None, team_id: str | None = None,
        importance: float | None = None, confidence: float | None = None, metadata: dict[str, Any] | None = None,
        created_at: datetime | None = None, expires_at: datetime | None = None, idempotency_key: str | None = None,
    ) -> WriteResult:
        """Store one memory (`POST /v1/memories`); its stored id is `.ids[0]`."""
        memory = _memory(_present(
            user_id=user_id, content=content, memory_type=memory_type, id=id, agent_id=agent_id,
            session_id=session_id, team_id=team_id, importance=importance, confidence=confidence,
            metadata=metadata, created_at=created_at, expires_at=expires_at,
        ))
        return await self._send(_write([memory], idempotency_key))

    async def add_many(
        self, memories: Iterable[NewMemory | Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> WriteResult:
        """Store up to 1,000 memories in one commit; `ids` in the order sent."""
        return await self._send(_write(_many(memories), idempotency_key))

    async def search(
        self, user_id: str, query: str, *, top_k: int | None = None, memory_types: list[MemoryType] | None = None,
        scope: Literal["user", "team"] | None = None, team_id: str | None = None, agent_id: str | None = None,
        session_id: str | None = None, filters: dict[str, MetadataValue] | None = None,
        since: datetime | None = None, until: datetime | None = None, min_score: float | None = None,
        mode: Literal["hybrid", "dense", "keyword"] | None = None,
    ) -> SearchResult:
        """Recall (`POST /v1/memories/search`): the user's memories that answer `query`, best first."""
        return await self._send(_search(_present(
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
        return await self._send(_context(_present(
            user_id=user_id, query=query, session_id=session_id, max_tokens=max_tokens,
            memory_types=memory_types, top_k=top_k,
        )))

    async def get(self, user_id: str, memory_id: str) -> Memory:
        """One memory, by its stored id or the client `id` it was written with."""
        return await self._send(_get(user_id, memory_id))

    async def update(
        self, user_id: str, memory_id: str, *, content: str = UNSET, memory_type: MemoryType = UNSET,
        importance: float = UNSET, metadata: dict[str, Any] = UNSET, expires_at: datetime | None = UNSET,
        idempotency_key: str | None = None,
    ) -> Memory:
        """Change a memory in place (`PATCH`); fields left UNSET stay; answers the memory as changed."""
        changes = {"content": content, "memory_type": memory_type, "importance": importance,
                   "metadata": metadata, "expires_at": expires_at}
        return await self._send(_update(user_id, memory_id, changes, idempotency_key))

    async def delete(self, user_id: str, memory_id: str) -> Deleted:
        """Delete one memory; its audit trail stays."""
        return await self._send(_delete(user_id, memory_id))

    async def restore(self, user_id: str, memory_id: str, *, idempotency_key: str | None = None) -> Memory:
        """Make a superseded memory active again; `ConflictError` (`not_superseded`) when it is not."""
        try:
            return await self._send(_restore(user_id, memory_id, idempotency_key))
        except ConflictError as exc:
            if not _restored_already(exc):
                raise
        return await self.get(user_id, memory_id)

    async def history(self, user_id: str, memory_id: str) -> list[MemoryEvent]:
        """A memory's audit events, oldest first (also after it was deleted)."""
        return await self._send(_history(user_id, memory_id))

    async def iter_memories(
        self, user_id: str, *, page_size: int = 100, status: str = "active"
    ) -> AsyncIterator[Memory]:
        """Every memory of the user, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = await self._send(_list(user_id, page_size, cursor, status))
            for memory in page.memories:
                yield memory
            if page.next_cursor is None:
                return
            cursor = page.next_cursor


    # -- users, conversations, sessions -----------------------------------------------------------

    async def erase_user(self, user_id: str) -> Erasure:
        """Erase everything of a user, unrecoverably (admin); `job_id` is the purge's receipt."""
        return await self._send(_erase(user_id))

    async def export_user(self, user_id: str) -> list[dict[str, Any]]:
        """Everything of a user as the lines of an export (`GET /v1/users/{id}/export`, admin):
        a header, their memories, turns and events, and an end line; `agent-memory import
        --format memories` restores it."""
        return await self._send(_export(user_id))

    async def log_conversation(
        self, user_id: str, session_id: str, messages: Iterable[Turn | Mapping[str, Any]], *,
        agent_id: str | None = None, mode: Literal["raw", "rules", "llm"] | None = None,
        idempotency_key: str | None = None,
    ) -> JobAccepted:
        """Log turns now and extract memories in the background; follow `job_id` with `wait_for_job`."""
        return await self._send(_conversation(user_id, session_id, messages, agent_id, mode, idempotency_key))

    async def session_messages(self, user_id: str, session_id: str, *, last: int = 20) -> list[SessionMessage]:
        """The last `last` turns of a session, oldest first."""
        return await self._send(_session(user_id, session_id, last))

    # -- jobs -------------------------------------------------------------------------------------

    async def submit_import(
        self, path: str, *, format: Literal["auto", "jsonl", "csv", "parquet", "chatgpt", "claude"] = "auto",
        mode: Literal["raw", "rules", "llm"] = "raw", user_id: str | None = None, idempotency_key: str | None = None,
    ) -> JobAccepted:
        """Start a bulk import of a history file, or of a ChatGPT or Claude export (whose turns are all
        `user_id`'s), under the server's import root or at an object-store URI (admin)."""
        return await self._send(_import(path, format, mode, user_id, idempotency_key))

    async def consolidate(self, user_id: str | None = None, *, idempotency_key: str | None = None) -> JobAccepted:
        """Start consolidation of the caller's org, or of one user, now (admin)."""
        return await self._send(_consolidate(user_id, idempotency_key))

    async def get_job(self, job_id: str) -> Job:
        """A background job's state, progress and report."""
        return await self._send(_job(job_id))

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
        return await self._send(_schedule())

    # `list` comes last: defined earlier, it would shadow the builtin in the annotations after it.
    async def list(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None, status: str = "active"
    ) -> MemoryPage:
        """One page of the user's memories, newest first (`status`: active, superseded, expired, all)."""
        return await self._send(_list(user_id, limit, cursor, status))
