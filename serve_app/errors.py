"""Errors as HTTP answers: the one mapping from typed errors to `{"error": {"code", "message"}}`.

Nothing below the ingress knows about HTTP; typed core errors become statuses here, once. The
FastAPI app's exception handlers (`add_error_handlers`) and the request middleware both answer
through `error_response`.
"""

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from agent_memory.errors import (
    AgentMemoryError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from serve_app.auth import UnauthorizedError

# Serve's own logger: with `logging_config: {encoding: JSON}` every line is JSON with the request id.
log = logging.getLogger("ray.serve")

STATUS = {
    InvalidInputError: 422,
    NotFoundError: 404,
    ConflictError: 409,
    UnauthorizedError: 401,
    PermissionDeniedError: 403,
    UnavailableError: 503,
}


class TooLargeError(InvalidInputError):
    """The request body is over the configured limit."""

    code = "body_too_large"


class NotJSONError(InvalidInputError):
    """A body sent with a content type other than JSON (a form, plain text)."""

    code = "unsupported_media_type"


class RateLimitedError(UnavailableError):
    """Too many requests for this key; `retry_after` says in how many seconds one will pass."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# When to try again after a 429 that names no time of its own (the extraction queue is full): a
# conversation job takes about this long with the rules extractor, longer with an LLM.
QUEUE_FULL_RETRY_S = 5


def unwrap_remote(exc: BaseException) -> BaseException:
    """The original error of a replica's failure (Ray wraps it, keeping the type as a base)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def ray_error() -> type[Exception]:
    """Ray's base error (a replica died or is restarting); Ray is loaded wherever a replica runs."""
    from ray.exceptions import RayError

    return RayError


def error_response(exc: BaseException) -> JSONResponse:
    """The one mapping from errors to `{"error": {"code", "message"}}` responses."""
    exc = unwrap_remote(exc)
    if isinstance(exc, TooLargeError):
        status = 413
    elif isinstance(exc, NotJSONError):
        status = 415
    elif isinstance(exc, RateLimitedError):
        status = 429
    elif isinstance(exc, AgentMemoryError):
        status = next((s for cls, s in STATUS.items() if isinstance(exc, cls)), 400)
        if exc.code == "queue_full":
            status = 429
    elif isinstance(exc, (ray_error(), TimeoutError)):
        # A replica died or is restarting: the caller may retry (with the same Idempotency-Key).
        return JSONResponse(
            {"error": {"code": "unavailable", "message": f"service temporarily unavailable ({type(exc).__name__})"}},
            status_code=503,
        )
    else:
        log.exception("unexpected error", exc_info=exc)
        return JSONResponse({"error": {"code": "internal", "message": "internal error"}}, status_code=500)
    if status == 429:
        # Every 429 says when to come back: in the Retry-After header and in the body.
        seconds = getattr(exc, "retry_after", QUEUE_FULL_RETRY_S)
        return JSONResponse({"error": {"code": exc.code, "message": exc.message, "retry_after_s": seconds}},
                            status_code=429, headers={"Retry-After": str(seconds)})
    return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=status)


async def _any_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    broken = next((err for err in errors if err.get("type") == "json_invalid"), None)
    if broken is not None:
        message = json_error_message(exc.body, broken)
        return JSONResponse({"error": {"code": "invalid_input", "message": message}}, status_code=422)
    # A body that is one memory or a batch fails both ways: report the shape it was meant to have.
    meant = "MemoryBatchIn" if isinstance(exc.body, dict) and "memories" in exc.body else "MemoryIn"
    if any(meant in err.get("loc", ()) for err in errors):
        errors = [e for e in errors if meant in e.get("loc", ())]
    parts = []
    for err in errors:
        loc = [p for p in err.get("loc", ()) if p not in ("body", "MemoryIn", "MemoryBatchIn")]
        where = ".".join(str(p) for p in loc) or "body"
        parts.append(f"{where}: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}")
    return JSONResponse({"error": {"code": "invalid_input", "message": "; ".join(parts)}}, status_code=422)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 400:
        # FastAPI's answer to a body it could not read (bytes that are not UTF-8 among them): bad
        # JSON, which the API answers 422 `invalid_input` like any other malformed body.
        return JSONResponse({"error": {"code": "invalid_input", "message": _unreadable_body(exc)}}, status_code=422)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message, headers = str(exc.detail), exc.headers
    if exc.status_code == 405:
        allowed = _allowed_methods(request)
        message = f"{request.method} is not allowed on {request.url.path}; it answers {allowed}"
        headers = {**(headers or {}), "Allow": allowed}
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=exc.status_code, headers=headers)


def _allowed_methods(request: Request) -> str:
    """Every method some route of this path answers (Starlette's 405 names the first route's only)."""
    routes = request.app.router.routes
    allowed = [method for method in METHODS
               if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)]
    return ", ".join(allowed)


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def json_error_message(document: object, error: dict) -> str:
    """Where a body stops being JSON and why: `body: not valid JSON at line 1, column 18 (character
    17): Expecting value`."""
    reason = str((error.get("ctx") or {}).get("error") or "not JSON")
    loc = error.get("loc") or ()
    position = loc[-1] if loc and isinstance(loc[-1], int) else None
    if position is None or not isinstance(document, str):
        return f"body: not valid JSON: {reason}"
    line = document.count("\n", 0, position) + 1
    column = position - (document.rfind("\n", 0, position) + 1) + 1
    return f"body: not valid JSON at line {line}, column {column} (character {position}): {reason}"


def _unreadable_body(exc: BaseException) -> str:
    """What was wrong with a request body that could not be read as JSON."""
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return f"body: not UTF-8 ({cause.reason}, byte {cause.start}); send JSON encoded as UTF-8"
    return "body: could not be read as JSON"


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error `app` raises in the one shape: typed errors, bad bodies, unknown routes."""
    app.add_exception_handler(Exception, _any_error)
    app.add_exception_handler(AgentMemoryError, _any_error)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
