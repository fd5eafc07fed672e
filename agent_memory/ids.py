"""Deterministic ids, so that a retried write or a re-run import never stores anything twice."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

_NAMESPACE = uuid.UUID("6f0e8d1a-3b7c-5d2e-9a4f-1c8b7e6d5a40")
_SEP = "\x1f"


def stable_id(kind: str, *parts: str | None) -> str:
    """A UUID5 hex id derived from `kind` and the parts (None is distinct from the empty string)."""
    joined = _SEP.join("\x00" if p is None else p for p in (kind, *parts))
    return uuid.uuid5(_NAMESPACE, joined).hex


def memory_id(
    org_id: str,
    user_id: str,
    *,
    client_id: str | None = None,
    idempotency_key: str | None = None,
    position: int = 0,
    message_ids: list[str] | None = None,
    natural_key: list[str | None] | None = None,
) -> str:
    """The id of a memory, from the most specific key the writer gave.

    Ids are always derived within (org, user), so two tenants using the same client id never collide.
    """
    if client_id is not None:
        return stable_id("memory:client", org_id, user_id, client_id)
    if idempotency_key is not None:
        return stable_id("memory:key", org_id, user_id, idempotency_key, str(position))
    if message_ids:
        return stable_id("memory:messages", org_id, user_id, *sorted(message_ids))
    return stable_id("memory:natural", org_id, user_id, *(natural_key or []))


def fingerprint(payload: Any) -> str:
    """A SHA-256 of a JSON-serialisable payload in canonical form."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def ordered_id() -> str:
    """A unique id that sorts in creation order (nanosecond wall time, then randomness): audit events."""
    return f"{time.time_ns():020d}{uuid.uuid4().hex[:12]}"
