"""The typed error tree. Each error carries a stable `code`; the HTTP ingress and the CLI map them once."""

from __future__ import annotations


class AgentMemoryError(Exception):
    """Base of every error agent-memory raises on purpose."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class InvalidInputError(AgentMemoryError, ValueError):
    """The request or data is malformed; nothing was written."""

    code = "invalid_input"


class NotFoundError(AgentMemoryError, KeyError):
    """The thing does not exist, or belongs to another user or org (never said which)."""

    code = "not_found"


class ConflictError(AgentMemoryError):
    """The write clashes with what is stored: an idempotency key reused with another body, a model mismatch."""

    code = "conflict"


class PermissionDeniedError(AgentMemoryError, PermissionError):
    """The caller is known but may not do this."""

    code = "forbidden"


class UnavailableError(AgentMemoryError, RuntimeError):
    """A dependency (model, store, LLM) is not available right now; retrying later may succeed."""

    code = "unavailable"
