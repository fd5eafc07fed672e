"""What every request passes through around its route: its request id and one JSON log line, the
wait for its replica's start (API routes only), the body-size limit (read before any parsing) and
its content type, and the caller's API key and rate limit (`Caller`).

They keep their state in `STATE`, set once per ingress replica (one per process) by
`prepare_state`. Not on the FastAPI app's `state`: Serve serves a copy of the app that it made
when `app.build` wrapped the ingress, and the replica's constructor cannot reach that copy.
"""

import asyncio
import json
import logging
import time
import uuid
from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import State

from agent_memory.errors import UnavailableError
from agent_memory.settings import Settings
from serve_app import metrics
from serve_app.auth import ANONYMOUS, KeyRing, Principal
from serve_app.errors import NotJSONError, RateLimitedError, TooLargeError, error_response
from serve_app.limits import RateLimiter, follow_replicas, retry_after

# Serve's own logger: with `logging_config: {encoding: JSON}` every line is JSON with the request id.
log = logging.getLogger("ray.serve")

STATE = State()
STATE.starting = None  # the ingress replica's start (IngressDeployment), once it has begun
# The methods whose body a route reads.
BODY_METHODS = ("POST", "PATCH", "PUT")
# A request to the API that comes while its replica starts waits this long for it, then answers 503.
START_WAIT_S = 120.0


def prepare_state(settings: Settings) -> asyncio.Task[None] | None:
    """What the middleware and `principal` read in `STATE`: settings, keys, rate limiter, metrics.

    Where a request may be rate limited (a server-wide limit, keys that may carry their own, or
    the limit on feedback votes), returns the task that keeps the limiter's replica count current; the replica holds it.
    """
    path = settings.auth.api_keys_file
    STATE.settings = settings
    STATE.keys = KeyRing(path) if path is not None else None
    STATE.limiter = RateLimiter()
    STATE.requests = metrics.requests()
    if path is None and not settings.auth.rate_limit_per_minute and not settings.feedback.rate_limit_per_minute:
        return None
    return asyncio.get_running_loop().create_task(follow_replicas(STATE.limiter))


def track_start(starting: asyncio.Task[None]) -> None:
    """Make the API's requests wait for this replica's start (`wait_for_start`).

    A function of this module, so that `STATE` is this module's own: the ingress and route modules
    travel to a replica by value, and a global they name there is a copy, not this object.
    """
    STATE.starting = starting


def serve_request_id() -> str | None:
    """The id Serve gave the request being handled (None outside a replica)."""
    try:
        from ray import serve

        return serve.context._get_serve_request_context().request_id or None
    except Exception:  # a Serve version without the context, or outside a request
        return None


def api_path(scope: dict[str, Any]) -> str:
    """The request's path within the app: ASGI's `path` holds the app's route prefix
    (`root_path`, as `serve.run(..., route_prefix=...)` mounts it) before it."""
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


def is_json(content_type: bytes | None) -> bool:
    """Whether a `content-type` header names JSON (`application/json`, `application/*+json`, any
    parameters), or is absent: FastAPI reads a body without one as JSON."""
    if content_type is None:
        return True
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def not_json(content_type: bytes) -> NotJSONError:
    """The error of a body sent as something else than JSON."""
    sent = content_type.split(b";", 1)[0].strip().decode("latin-1") or "an empty content type"
    return NotJSONError(f"the body was sent as {sent}: send JSON, with the header `content-type: application/json`")


async def wait_for_start(starting: asyncio.Task[None] | None) -> None:
    """Wait for the replica's start (up to START_WAIT_S); UnavailableError if it is not done by
    then or failed. Health checks do not wait: they answer 503 with the reason at once."""
    if starting is None:
        return
    if not starting.done():
        await asyncio.wait({starting}, timeout=START_WAIT_S)
    if not starting.done():
        raise UnavailableError(f"this server is still starting after {START_WAIT_S:.0f} s: retry")
    if starting.cancelled() or starting.exception() is not None:
        raise UnavailableError("this server's replica could not start: retry (another replica takes over)")


class RequestContext:
    """Request ids, the body-size limit (before any parsing), and one JSON log line per request.

    A body sent as anything but JSON (curl's `-d` sends a form unless told otherwise) is answered
    415 `unsupported_media_type` before any route reads it: FastAPI would otherwise take it as a
    string and answer 422 about a field the client did send.

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs each
    request in a task group of its own, which cost more CPU than the rest of this middleware
    (measured with py-spy on the search path).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        # Serve's proxy gives every request an id (the client's `x-request-id` when it sends one),
        # returns it in the `x-request-id` header and logs it; our log line carries the same id.
        request_id = serve_request_id() or headers.get(b"x-request-id", b"").decode("latin-1") or uuid.uuid4().hex
        status = {"code": 500, "started": False}

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        state = STATE
        try:
            try:
                if api_path(scope).startswith("/v1/"):
                    await wait_for_start(state.starting)
                await self._limited(scope, receive, send_status, state.settings.limits.max_body_bytes, headers)
            except Exception as exc:
                # Errors without a handler of their own (a replica that died, a timeout) would
                # otherwise be answered outside this middleware, unseen by its log and metrics.
                if status["started"]:
                    raise
                await error_response(exc)(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            state.requests.inc(tags={"route": route, "status": str(status["code"])})
            log.info(json.dumps({
                "event": "request", "request_id": request_id, "method": scope["method"], "route": route,
                "status": status["code"], "ms": round((time.perf_counter() - started) * 1000, 2),
            }))

    async def _limited(self, scope: dict[str, Any], receive: Any, send: Any, limit: int, headers: dict) -> None:
        """Answer 413 for a body over `limit`, told by its length or found while reading it."""
        too_large = TooLargeError(f"request body over {limit} bytes")
        length = headers.get(b"content-length")
        content_type = headers.get(b"content-type")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await error_response(too_large)(scope, receive, send)
            elif int(length) and scope["method"] in BODY_METHODS and not is_json(content_type):
                await error_response(not_json(content_type))(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        # A chunked body is read up to the limit, never further, then handed on whole.
        body, more = bytearray(), True
        while more and len(body) <= limit:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if len(body) > limit:
            await error_response(too_large)(scope, receive, send)
            return
        if body and not is_json(content_type):
            await error_response(not_json(content_type))(scope, receive, send)
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


# The bearer scheme, for /openapi.json and the docs' "Authorize" button; the header is read as sent,
# so that a malformed one gets the key ring's own 401 rather than FastAPI's.
BEARER = HTTPBearer(
    auto_error=False, scheme_name="apiKey", bearerFormat="agent-memory API key",
    description="`Authorization: Bearer <key>` with a key from `agent-memory keys create`. Without a keys file "
                "(a local server) no key is needed and every call is in the default org.",
)


async def principal(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None
) -> Principal:
    """The caller: the key's org, role and teams, or the anonymous default org when no keys are
    configured; RateLimitedError (429, with when to retry) over the key's rate limit.

    Asynchronous although it never waits: FastAPI runs a plain function dependency in a worker
    thread, a hand-off per request that cost the event loop more than the check itself.
    """
    state = STATE
    keys: KeyRing | None = state.keys
    caller = ANONYMOUS if keys is None else keys.current().authenticate(request.headers.get("authorization"))
    limit = state.settings.auth.rate_limit_per_minute if caller.rate_limit is None else caller.rate_limit
    limit_rate(caller, "requests", limit)
    return caller


def limit_rate(caller: Principal, what: str, per_minute: int) -> None:
    """Take one of the key's `what` a minute (its own bucket in every ingress replica's limiter);
    RateLimitedError (429, with when to retry) over the limit. 0: no limit."""
    if not per_minute:
        return
    wait = STATE.limiter.take(caller.key_id if what == "requests" else f"{caller.key_id}\x00{what}", per_minute)
    if wait:
        seconds = retry_after(wait)
        raise RateLimitedError(f"more than {per_minute} {what} a minute for this key; retry in {seconds} s",
                               retry_after=seconds)


Caller = Annotated[Principal, Depends(principal)]
