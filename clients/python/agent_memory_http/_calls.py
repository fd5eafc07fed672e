"""The requests of the API, built once for both clients: path, body, answer model, idempotency key
and whether a call may be sent again. `MemoryClient` and `AsyncMemoryClient` differ only in how
they wait."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

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
    NewMemory,
    Readiness,
    Schedule,
    SearchResult,
    SessionMessage,
    Turn,
    WriteResult,
)

DEFAULT_URL = "http://127.0.0.1:8000"
USER_AGENT = "agent-memory-http/0.1.0"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""The default of `update`'s fields: leave the field as it is (None clears `expires_at`)."""


# -- the requests, shared by both clients --------------------------------------------------------


def present(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def key_or_new(idempotency_key: str | None) -> str:
    return idempotency_key if idempotency_key is not None else uuid.uuid4().hex


M = TypeVar("M", bound=pydantic.BaseModel)


def validated(model: type[M], item: M | Mapping[str, Any], where: str) -> M:
    """`item` as `model`; a wrong type is an `InvalidInputError` before anything is sent."""
    if isinstance(item, model):
        return item
    try:
        return model.model_validate(dict(item))
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{where}{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidInputError(problems, code="invalid_input") from None


def memory(item: NewMemory | Mapping[str, Any], where: str = "") -> dict[str, Any]:
    return validated(NewMemory, item, where).body()


def write(memories: list[dict[str, Any]], idempotency_key: str | None) -> Call[WriteResult]:
    body: Any = memories[0] if len(memories) == 1 else {"memories": memories}
    return Call("POST", "/v1/memories", WriteResult.model_validate, json=body, idempotency_key=key_or_new(idempotency_key))


def many(memories: Iterable[NewMemory | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [memory(m, f"memories.{i}.") for i, m in enumerate(memories)]


def search(body: dict[str, Any]) -> Call[SearchResult]:
    if isinstance(body.get("since"), datetime):
        body["since"] = body["since"].isoformat()
    if isinstance(body.get("until"), datetime):
        body["until"] = body["until"].isoformat()
    return Call("POST", "/v1/memories/search", SearchResult.model_validate, json=body)


def context(body: dict[str, Any]) -> Call[Context]:
    # A read: safe to send again.
    return Call("POST", "/v1/context", Context.model_validate, json=body)


def memories_page(user_id: str, limit: int, cursor: str | None, status: str) -> Call[MemoryPage]:
    params = present(user_id=user_id, limit=limit, cursor=cursor, status=status)
    return Call("GET", "/v1/memories", MemoryPage.model_validate, params=params)


def get(user_id: str, memory_id: str) -> Call[Memory]:
    return Call("GET", f"/v1/memories/{segment(memory_id)}", Memory.model_validate, params={"user_id": user_id})


def update(user_id: str, memory_id: str, changes: dict[str, Any], idempotency_key: str | None) -> Call[Memory]:
    body = {k: v for k, v in changes.items() if v is not UNSET}
    if isinstance(body.get("expires_at"), datetime):
        body["expires_at"] = body["expires_at"].isoformat()
    return Call("PATCH", f"/v1/memories/{segment(memory_id)}", Memory.model_validate, params={"user_id": user_id},
                json=body, idempotency_key=key_or_new(idempotency_key))


def delete(user_id: str, memory_id: str) -> Call[Deleted]:
    return Call("DELETE", f"/v1/memories/{segment(memory_id)}", Deleted.model_validate, params={"user_id": user_id})


def restore(user_id: str, memory_id: str, idempotency_key: str | None) -> Call[Memory]:
    return Call("POST", f"/v1/memories/{segment(memory_id)}/restore", Memory.model_validate,
                params={"user_id": user_id}, idempotency_key=key_or_new(idempotency_key))


def restored_already(exc: ConflictError) -> bool:
    """A `not_superseded` after an earlier attempt that may have restored the memory itself."""
    return exc.code == "not_superseded" and exc.attempts > 1


def history(user_id: str, memory_id: str) -> Call[list[MemoryEvent]]:
    return Call("GET", f"/v1/memories/{segment(memory_id)}/history",
                lambda body: [MemoryEvent.model_validate(e) for e in body["events"]], params={"user_id": user_id})


def erase(user_id: str) -> Call[Erasure]:
    return Call("DELETE", f"/v1/users/{segment(user_id)}", Erasure.model_validate)


def export(user_id: str) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/users/{segment(user_id)}/export", list)


def conversation(
    user_id: str, session_id: str, messages: Iterable[Turn | Mapping[str, Any]], agent_id: str | None,
    mode: str | None, idempotency_key: str | None,
) -> Call[JobAccepted]:
    key = key_or_new(idempotency_key)
    # The server keys a turn by its message_id, or else by role, time and content; a turn with
    # neither id nor time would be stamped anew by each attempt, so it gets an id from the key.
    stem = hashlib.sha256(key.encode()).hexdigest()[:16]
    turns = []
    for position, message in enumerate(messages):
        turn = validated(Turn, message, f"messages.{position}.").body()
        if turn.get("message_id") is None and turn.get("created_at") is None:
            turn["message_id"] = f"{stem}:{position}"
        turns.append(turn)
    body = present(user_id=user_id, session_id=session_id, agent_id=agent_id, mode=mode)
    body["messages"] = turns
    return Call("POST", "/v1/conversations", JobAccepted.model_validate, json=body, idempotency_key=key)


def session(user_id: str, session_id: str, last: int) -> Call[list[SessionMessage]]:
    return Call("GET", f"/v1/sessions/{segment(session_id)}/messages",
                lambda body: [SessionMessage.model_validate(m) for m in body["messages"]],
                params={"user_id": user_id, "last": last})


def import_file(path: str, fmt: str, mode: str, user_id: str | None, idempotency_key: str | None) -> Call[JobAccepted]:
    # A second import of the same file would start a second job: sent again only if never sent.
    body = present(path=path, format=fmt, mode=mode, user_id=user_id)
    return Call("POST", "/v1/jobs/import", JobAccepted.model_validate, json=body,
                idempotency_key=key_or_new(idempotency_key), replayable=False)


def consolidate(user_id: str | None, idempotency_key: str | None) -> Call[JobAccepted]:
    return Call("POST", "/v1/jobs/consolidate", JobAccepted.model_validate, json=present(user_id=user_id),
                idempotency_key=key_or_new(idempotency_key), replayable=False)


def job(job_id: str) -> Call[Job]:
    return Call("GET", f"/v1/jobs/{segment(job_id)}", Job.model_validate)


def schedule() -> Call[Schedule]:
    return Call("GET", "/v1/schedule", Schedule.model_validate)


def health() -> Call[Health]:
    return Call("GET", "/healthz", Health.model_validate)


def ready() -> Call[Readiness]:
    # Not ready is an answer (503 with the checks), not an error to retry.
    return Call("GET", "/readyz", Readiness.model_validate, retry=False, accept=frozenset({503}))


class ClientSettings:
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
