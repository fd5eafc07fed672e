"""API keys: a bearer key maps to one org and its roles. Without a keys file every request
belongs to the org `default` (and the server binds to loopback only)."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from agent_memory.errors import InvalidInputError, PermissionDeniedError

ROLES = ("reader", "writer", "admin")
# What each role may do; a role includes the ones before it.
_RANK = {role: i for i, role in enumerate(ROLES)}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the org every read and write is confined to, and the caller's role."""

    org_id: str
    role: str
    key_id: str

    def require(self, role: str) -> None:
        """Raise PermissionDeniedError unless the caller's role covers `role`."""
        if _RANK[self.role] < _RANK[role]:
            raise PermissionDeniedError(f"this key's role {self.role!r} may not do this (needs {role!r})")


ANONYMOUS = Principal(org_id="default", role="admin", key_id="anonymous")


class UnauthorizedError(PermissionDeniedError):
    """No key, or a key nobody issued."""

    code = "unauthorized"


class ApiKeys:
    """Keys loaded from a JSON file: `{"keys": [{"key" or "key_sha256": ..., "org_id": ..., "role": ...}]}`."""

    def __init__(self, entries: list[dict[str, str]]) -> None:
        self._by_hash: dict[str, Principal] = {}
        for i, entry in enumerate(entries):
            digest = entry.get("key_sha256") or (
                hashlib.sha256(entry["key"].encode()).hexdigest() if entry.get("key") else None
            )
            org_id, role = entry.get("org_id"), entry.get("role", "writer")
            if not digest or not org_id or role not in ROLES:
                raise InvalidInputError(f"api keys entry {i}: needs key or key_sha256, org_id and a role in {ROLES}")
            self._by_hash[digest] = Principal(org_id=org_id, role=role, key_id=entry.get("name", digest[:8]))

    @classmethod
    def load(cls, path: Path | None) -> ApiKeys | None:
        """The keys in `path`, or None when no file is configured (anonymous, loopback only)."""
        if path is None:
            return None
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInputError(f"cannot read api keys file {path}: {exc}") from None
        return cls(list(data.get("keys", [])))

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization: Bearer <key>` header."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise UnauthorizedError("missing `Authorization: Bearer <key>` header")
        digest = hashlib.sha256(authorization[7:].strip().encode()).hexdigest()
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise UnauthorizedError("unknown API key")
