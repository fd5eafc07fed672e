"""The errors the API answers, as one small exception tree.

Every error of the API is `{"error": {"code", "message", ...}}` with a status; the client raises
the class of that status, carrying `status`, `code`, `message` and the request id. Catch
`AgentMemoryError` for all of them, or one class for one case.
"""

from __future__ import annotations

from typing import Any


class AgentMemoryError(Exception):
    """An error answered by the service, or no answer at all (`status` None)."""

    def __init__(
        self, message: str, *, status: int | None = None, code: str = "error",
        request_id: str | None = None, body: dict[str, Any] | None = None, attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.request_id = request_id
        self.body = body or {}
        self.attempts = attempts  # how many times the request was sent before this error

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"


class InvalidInputError(AgentMemoryError, ValueError):
    """422 `invalid_input` (the message names each field), 413 `body_too_large` or 415 `unsupported_media_type`."""


class UnauthorizedError(AgentMemoryError):
    """401: no API key, or a key nobody issued."""


class PermissionDeniedError(AgentMemoryError):
    """403 `forbidden` (the key's role may not) or `team_forbidden` (the key is kept to other teams)."""


class QuotaExceededError(PermissionDeniedError):
    """403 `quota_exceeded`: the org is at its memory quota; nothing was stored or restored."""


class NotFoundError(AgentMemoryError, KeyError):
    """404: no such memory, job or file for this user and org."""

    __str__ = AgentMemoryError.__str__  # not KeyError's quoting


class ConflictError(AgentMemoryError):
    """409: an idempotency key or `id` reused with another body, a memory not superseded, ..."""


class RateLimitedError(AgentMemoryError):
    """429 `rate_limited` or `queue_full`, after the client's retries; `retry_after` in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class UnavailableError(AgentMemoryError):
    """503 `unavailable`, or the service could not be reached (`status` None), after the retries."""


_BY_STATUS: dict[int, type[AgentMemoryError]] = {
    401: UnauthorizedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: InvalidInputError,
    415: InvalidInputError,
    422: InvalidInputError,
    429: RateLimitedError,
    503: UnavailableError,
}


def error_for(
    status: int, payload: Any, *, request_id: str | None = None, retry_after: float | None = None, attempts: int = 1
) -> AgentMemoryError:
    """The typed error for an error answer (`payload` its decoded JSON, or anything else)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        error = {"code": "http_error", "message": f"HTTP {status} without an error body"}
    code = str(error.get("code") or "http_error")
    message = str(error.get("message") or code)
    common: dict[str, Any] = {"status": status, "code": code, "request_id": request_id, "body": error,
                              "attempts": attempts}
    if code == "quota_exceeded":
        return QuotaExceededError(message, **common)
    cls = _BY_STATUS.get(status, AgentMemoryError)
    if cls is RateLimitedError:
        seconds = retry_after if retry_after is not None else error.get("retry_after_s")
        return RateLimitedError(message, retry_after=float(seconds) if seconds is not None else None, **common)
    return cls(message, **common)
