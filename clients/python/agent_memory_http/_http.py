"""What the sync and async clients share: one request as data, when to retry it, and its answer."""

from __future__ import annotations

import email.utils
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from .errors import UnavailableError, error_for

T = TypeVar("T")

# JSON lines (a user's export): the answer is the list of its lines.
NDJSON = "application/x-ndjson"
# Statuses that say "try again": over the rate limit or the extraction queue full, unavailable.
RETRY_STATUSES = frozenset({429, 503})
# Failures where the request cannot have reached the server, so any request may be sent again.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter; a `Retry-After` of the server is waited at least."""

    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0

    def backoff(self, attempt: int) -> float:
        """Seconds before retry number `attempt + 1`: half of the step fixed, half random."""
        step = min(self.backoff_max, self.backoff_base * 2**attempt)
        return step / 2 + random.uniform(0, step / 2)

    def after_answer(self, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before sending again, or None to take this answer."""
        if attempt >= self.max_retries or response.status_code not in RETRY_STATUSES:
            return None
        return max(retry_after(response) or 0.0, self.backoff(attempt))

    def after_failure(self, attempt: int, exc: httpx.TransportError, replayable: bool) -> float | None:
        """Seconds to wait before sending again after no answer came, or None to give up."""
        if attempt >= self.max_retries or not (replayable or isinstance(exc, NOT_SENT)):
            return None
        return self.backoff(attempt)


def retry_after(response: httpx.Response) -> float | None:
    """The `Retry-After` header in seconds (a number or an HTTP date), if there is one."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class Call(Generic[T]):
    """One logical API call: the request, how to read its answer, and whether it may be repeated.

    `replayable`: sending it again after it may have reached the server changes nothing twice
    (reads, and writes the server keys by `Idempotency-Key`, id or content). Other requests are
    sent again only when they cannot have left the client.
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] | None = None
    json: Any = None
    idempotency_key: str | None = None
    replayable: bool = True
    retry: bool = True
    accept: frozenset[int] = frozenset()  # error statuses whose body is still the answer
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def headers(self) -> dict[str, str]:
        """The same on every attempt: one request id and one idempotency key per logical call."""
        headers = {"x-request-id": self.request_id}
        if self.idempotency_key is not None:
            headers["Idempotency-Key"] = self.idempotency_key
        return headers

    def answer(self, response: httpx.Response, attempts: int) -> T:
        """The parsed answer, or the typed error it stands for."""
        try:
            if response.is_success and response.headers.get("content-type", "").startswith(NDJSON):
                payload = [json.loads(line) for line in response.text.splitlines() if line.strip()]
            else:
                payload = response.json()
        except ValueError:
            payload = None
        if response.is_success or (
            response.status_code in self.accept and isinstance(payload, dict) and "error" not in payload
        ):
            return self.parse(payload)
        raise error_for(
            response.status_code, payload, request_id=response.headers.get("x-request-id", self.request_id),
            retry_after=retry_after(response), attempts=attempts,
        )

    def unreachable(self, base_url: str, exc: httpx.TransportError, attempts: int) -> UnavailableError:
        """The error for a call that got no answer, after its retries."""
        return UnavailableError(
            f"no answer from {base_url} after {attempts} attempt(s): {type(exc).__name__}: {exc}",
            code="unreachable", request_id=self.request_id, attempts=attempts,
        )


def segment(value: str) -> str:
    """One path segment, escaped (ids may hold any character but NUL)."""
    return quote(value, safe="")
