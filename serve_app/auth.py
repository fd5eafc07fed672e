"""API keys: a bearer key maps to one org, its role and, optionally, the teams it may reach.
With no keys file configured every request belongs to the org `default` (and the server binds to
loopback only); a keys file configured but not there yet accepts no key.

The keys file is JSON, `{"keys": [{"key_sha256" (or "key"), "org_id", "role", "name", "teams"?,
"agent_id"?, "rate_limit_per_minute"?, "created_at"?}]}`. `KeyRing` is what a replica serves from: it re-reads
the file when it changes, so keys are issued and revoked without a restart. `KeysFile` is what
`agent-memory keys` edits it through: keys are issued as random secrets of which only the hash is
stored, and every change replaces the file whole (temp file + rename), so a reader never sees half
of one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agent_memory.errors import ConflictError, InvalidInputError, NotFoundError, PermissionDeniedError
from agent_memory.models import check_identifier

ROLES = ("reader", "writer", "admin")
# What each role may do; a role includes the ones before it.
_RANK = {role: i for i, role in enumerate(ROLES)}
# Issued keys start with this, so that a leaked one is recognisable (and greppable) as ours.
KEY_PREFIX = "am_"
# How often a replica looks at the keys file: one stat a second at most, whatever the request rate.
RELOAD_CHECK_S = 1.0
# While the keys file cannot be read, a replica tries it again, and logs that it failed, this often.
BROKEN_REPEAT_S = 60.0
# Characters of a key's hash shown as its id by `keys list` and accepted by `keys revoke`.
ID_CHARS = 12
MIN_ID_CHARS = 6

# Serve's own logger: with `logging_config: {encoding: JSON}` every line is JSON with the request id.
log = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class Principal:
    """Who is calling: the org every read and write is confined to, the caller's role, the teams
    it may reach (None: any team of its org) and its own rate limit (None: the server's).

    A key kept to teams writes, changes and deletes only memories that carry one of its teams; it
    reads those and the user's memories of no team, never another team's. Work that reaches every
    team of a user or org (conversation extraction, erasure, imports, consolidation) needs a key
    that names no teams.

    A key of an agent (`agent_id`) writes as that agent and reads the user's shared memories and
    its own private ones; work that reaches every agent's memories needs an org-level key.
    """

    org_id: str
    role: str
    key_id: str
    teams: frozenset[str] | None = None
    rate_limit: int | None = None
    agent_id: str | None = None

    def require(self, role: str) -> None:
        """Raise PermissionDeniedError unless the caller's role covers `role`."""
        if _RANK[self.role] < _RANK[role]:
            raise PermissionDeniedError(f"this key's role {self.role!r} may not do this (needs {role!r})")

    def require_team(self, team_id: str | None) -> None:
        """Raise PermissionDeniedError (`team_forbidden`) unless the key may write, change or search
        memories of team `team_id` (None: a memory of no team, which a key kept to teams may not)."""
        if self.teams is None or (team_id is not None and team_id in self.teams):
            return
        raise self._team_forbidden(f"team {team_id!r}" if team_id is not None else "a memory without a team_id")

    def may_read(self, team_id: str | None) -> bool:
        """Whether the key may read a memory of team `team_id`: one of its teams', or one of no team."""
        return self.teams is None or team_id is None or team_id in self.teams

    def require_read(self, team_id: str | None) -> None:
        """Raise PermissionDeniedError (`team_forbidden`) unless `may_read(team_id)`."""
        if not self.may_read(team_id):
            raise self._team_forbidden(f"team {team_id!r}")

    def require_every_team(self, what: str) -> None:
        """Raise PermissionDeniedError (`team_forbidden`) for a key kept to teams: `what` reaches the
        memories of every team."""
        if self.teams is not None:
            raise PermissionDeniedError(
                f"this key is kept to teams ({self._allowed()}); {what} reaches the memories of every team: "
                "use a key without teams", code="team_forbidden",
            )

    def require_every_agent(self, what: str) -> None:
        """`agent_forbidden` for an agent's key: `what` reaches every agent's private memories."""
        if self.agent_id is not None:
            raise PermissionDeniedError(f"this key is agent {self.agent_id!r}'s; {what} reaches every agent's private "
                                        "memories: use an org-level key (one without --agent)", code="agent_forbidden")

    def writes_as(self, agent_id: str | None) -> str | None:
        """The agent what this key writes is written as: its own (`agent_forbidden` for another), else the one named."""
        if self.agent_id is None or agent_id in (None, self.agent_id):
            return self.agent_id or agent_id
        raise PermissionDeniedError(f"this key writes as agent {self.agent_id!r}, not {agent_id!r}",
                                    code="agent_forbidden")

    def _allowed(self) -> str:
        return ", ".join(repr(t) for t in sorted(self.teams or ())) or "none"

    def _team_forbidden(self, what: str) -> PermissionDeniedError:
        return PermissionDeniedError(f"this key may reach only its own teams ({self._allowed()}), not {what}",
                                     code="team_forbidden")


ANONYMOUS = Principal(org_id="default", role="admin", key_id="anonymous")


class UnauthorizedError(PermissionDeniedError):
    """No key, or a key nobody issued."""

    code = "unauthorized"


def key_digest(key: str) -> str:
    """The hex SHA-256 of a key: what the keys file stores and requests are matched by."""
    return hashlib.sha256(key.encode()).hexdigest()


def _entry_digest(i: int, entry: Any) -> str:
    if not isinstance(entry, dict):
        raise InvalidInputError(f"api keys entry {i}: must be a JSON object")
    digest = entry.get("key_sha256") or (key_digest(entry["key"]) if isinstance(entry.get("key"), str) else None)
    if not isinstance(digest, str) or not digest:
        raise InvalidInputError(f"api keys entry {i}: needs key or key_sha256")
    return digest.lower()


def _principal_of(i: int, entry: dict[str, Any], digest: str) -> Principal:
    org_id, role = entry.get("org_id"), entry.get("role", "writer")
    if not isinstance(org_id, str) or not org_id or role not in ROLES:
        raise InvalidInputError(f"api keys entry {i}: needs org_id and a role in {ROLES}")
    teams = entry.get("teams")
    if teams is not None and not (isinstance(teams, list) and all(isinstance(t, str) and t for t in teams)):
        raise InvalidInputError(f"api keys entry {i}: teams must be a list of team ids")
    rate = entry.get("rate_limit_per_minute")
    if rate is not None and not (isinstance(rate, int) and not isinstance(rate, bool) and rate >= 0):
        raise InvalidInputError(f"api keys entry {i}: rate_limit_per_minute must be a whole number >= 0")
    agent = entry.get("agent_id")
    if agent is not None and not (isinstance(agent, str) and agent.strip() and len(agent) <= 256 and "\x00" not in agent):
        raise InvalidInputError(f"api keys entry {i}: agent_id must be an agent id")
    name = entry.get("name") or digest[:8]
    return Principal(org_id=org_id, role=role, key_id=str(name), teams=None if teams is None else frozenset(teams),
                     rate_limit=rate, agent_id=agent)


def parse_keys(text: str, source: str) -> list[dict[str, Any]]:
    """The entries of a keys file's text; InvalidInputError, naming `source`, when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"api keys file {source} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys", []), list):
        raise InvalidInputError(f'api keys file {source} must be a JSON object {{"keys": [...]}}')
    return list(data.get("keys", []))


class ApiKeys:
    """The keys of one reading of a keys file, by hash."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self._by_hash: dict[str, Principal] = {}
        for i, entry in enumerate(entries):
            digest = _entry_digest(i, entry)
            self._by_hash[digest] = _principal_of(i, entry, digest)

    def __len__(self) -> int:
        return len(self._by_hash)

    @classmethod
    def read(cls, path: Path) -> ApiKeys:
        """The keys in the file at `path`; InvalidInputError when it cannot be read or is not a keys file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"cannot read api keys file {path}: {exc}") from None
        return cls(parse_keys(text, str(path)))

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization: Bearer <key>` header."""
        if not authorization or not authorization.lower().startswith("bearer "):
            raise UnauthorizedError("missing `Authorization: Bearer <key>` header")
        digest = key_digest(authorization[7:].strip())
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise UnauthorizedError("unknown API key")


def _file_signature(path: Path) -> tuple[int, int, int, int, int] | None:
    """What tells a changed keys file: device, inode, size, mtime and ctime of the file the path
    resolves to (os.stat follows links: a Kubernetes Secret mount changes by swapping its `..data`
    link, which leaves the path's own link as it was; ctime changes with a chmod or chown, which can
    make an unreadable file readable). None when there is no file, or it cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _missing(path: Path) -> bool:
    """Whether there is no file at `path` (a dangling link included), rather than one not readable."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


class KeyRing:
    """The keys a replica serves from, re-read when the keys file changes.

    At most every `check_every` seconds, on a request, one stat of the file; only a changed file
    is read again. It never fails open:

    - No file yet (a server started before its first `agent-memory keys create`): no key is
      accepted, every request is 401, until the file appears; then it is read like any change.
    - A file that cannot be read or parsed after a good reading (an editor's half-written save,
      bad JSON, a deleted or unreadable file): the keys read before stay in force, so a broken
      edit never locks everyone out; an error is logged, and logged again with another attempt to
      read every `repeat_every` seconds while it lasts, since keys revoked in the broken file are
      still accepted.
    - A file that exists but cannot be read or parsed when the ring is made: InvalidInputError; a
      replica does not start on it.
    """

    def __init__(self, path: Path, *, check_every: float = RELOAD_CHECK_S, repeat_every: float = BROKEN_REPEAT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self._check_every, self._repeat_every, self._clock = check_every, repeat_every, clock
        # Stat first, then read: a change between the two is seen at the next check.
        self._seen = _file_signature(self.path)
        self._loaded = False
        # When the file last failed to be read (and that was logged); None while it reads well.
        self._failed_at: float | None = None
        if self._seen is None and _missing(self.path):
            self._keys = ApiKeys([])
            self._failed_at = clock()
            log.warning("api keys file %s does not exist: every request is refused (401) until it is created "
                        "(agent-memory keys create)", self.path)
        else:
            self._keys = ApiKeys.read(self.path)
            self._loaded = True
        self._checked = clock()

    def current(self) -> ApiKeys:
        """The keys now in force (the file is looked at if the last look is old enough)."""
        now = self._clock()
        if now - self._checked >= self._check_every:
            self._checked = now
            seen = _file_signature(self.path)
            if seen != self._seen:
                self._seen = seen
                self._reload(now)
            elif self._failed_at is not None and now - self._failed_at >= self._repeat_every:
                self._reload(now)
        return self._keys

    def _reload(self, now: float) -> None:
        try:
            keys = ApiKeys.read(self.path)
        except InvalidInputError as exc:
            self._failed_at = now
            if self._loaded:
                log.error("api keys not reloaded, the %d keys read before stay in force (keys revoked since are "
                          "still accepted) until the file can be read: %s", len(self._keys), exc)
            elif _missing(self.path):
                log.warning("api keys file %s does not exist: every request is refused (401) until it is created "
                            "(agent-memory keys create)", self.path)
            else:
                log.error("api keys not read, every request is refused (401) until the file can be read: %s", exc)
            return
        self._keys, self._loaded, self._failed_at = keys, True, None
        log.info("api keys reloaded from %s: %d keys", self.path, len(keys))


def _listed(i: int, entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as `keys list` shows it: an id from its hash, never the key nor the whole hash."""
    return {
        "id": _entry_digest(i, entry)[:ID_CHARS], "name": entry.get("name"), "org_id": entry.get("org_id"),
        "role": entry.get("role", "writer"), "teams": entry.get("teams"), "agent_id": entry.get("agent_id"),
        "rate_limit_per_minute": entry.get("rate_limit_per_minute"), "created_at": entry.get("created_at"),
    }


@dataclass(frozen=True)
class IssuedKey:
    """A key just issued: the secret (shown once, stored nowhere) and its entry in the keys file."""

    secret: str
    entry: dict[str, Any]


class KeysFile:
    """A keys file as `agent-memory keys` edits it: issue, list and revoke keys.

    Each change reads the file, changes the entries and writes them to a temporary file beside it
    that then replaces it in one rename, under an exclusive lock on the directory so that two
    commands at once do not lose each other's change. The new file keeps the old one's mode, owner
    and group (a first file is 0600, its maker's), so a server that could read the old one reads
    the new one, and nobody else can. Entries the command did not make (a hand-written `key`,
    fields of a later version) are written back as they were read.
    """

    def __init__(self, path: Path) -> None:
        # Through links to the file itself, so that an operator's link stays a link.
        self.path = Path(path).expanduser().resolve()

    def entries(self) -> list[dict[str, Any]]:
        """The file's entries ([] when there is no file yet), each checked as a server would."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"cannot read api keys file {self.path}: {exc}") from None
        entries = parse_keys(text, str(self.path))
        ApiKeys(entries)
        return entries

    def listing(self) -> list[dict[str, Any]]:
        """What `keys list` shows of each key: never the key, nor its whole hash."""
        return [_listed(i, entry) for i, entry in enumerate(self.entries())]

    def issue(self, *, org_id: str, role: str, name: str | None = None, teams: Sequence[str] = (),
              rate_limit: int | None = None, agent_id: str | None = None) -> IssuedKey:
        """Make a new random key for `org_id` and store its hash; the key itself is returned only."""
        check_identifier("org_id", org_id)
        if role not in ROLES:
            raise InvalidInputError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        for team in teams:
            check_identifier("team", team)
        if rate_limit is not None and rate_limit < 0:
            raise InvalidInputError("rate limit must be >= 0 requests a minute (0: none for this key)")
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        digest = key_digest(secret)
        name = name or f"{org_id}-{role}-{digest[:6]}"
        check_identifier("name", name)
        entry: dict[str, Any] = {"key_sha256": digest, "org_id": org_id, "role": role, "name": name}
        if teams:
            entry["teams"] = sorted(set(teams))
        if agent_id is not None:
            entry["agent_id"] = check_identifier("agent", agent_id)
        if rate_limit is not None:
            entry["rate_limit_per_minute"] = rate_limit
        entry["created_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._locked():
            entries = self.entries()
            if any(e.get("name") == name for e in entries):
                raise ConflictError(f"a key named {name!r} exists in {self.path}; names are unique per file")
            self._write([*entries, entry])
        return IssuedKey(secret=secret, entry=entry)

    def revoke(self, name_or_id: str) -> dict[str, Any]:
        """Remove the one key whose name is `name_or_id`, or whose hash starts with it; its listing."""
        with self._locked():
            entries = self.entries()
            wanted = name_or_id.lower()
            by_id = len(wanted) >= MIN_ID_CHARS and all(c in "0123456789abcdef" for c in wanted)
            matches = [
                i for i, entry in enumerate(entries)
                if entry.get("name") == name_or_id or (by_id and _entry_digest(i, entry).startswith(wanted))
            ]
            if not matches:
                raise NotFoundError(f"no key named {name_or_id!r} or with that id in {self.path} "
                                    "(`agent-memory keys list` shows them)")
            if len(matches) > 1:
                which = ", ".join(f"{entries[i].get('name')} ({_listed(i, entries[i])['id']})" for i in matches)
                raise ConflictError(f"{name_or_id!r} names {len(matches)} keys: {which}; give a longer id")
            self._write([e for i, e in enumerate(entries) if i != matches[0]])
        return _listed(matches[0], entries[matches[0]])

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, entries: list[dict[str, Any]]) -> None:
        """Replace the file whole: a server reading it sees the old file or the new, never half."""
        try:
            old: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            old = None
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                self._take_over(out.fileno(), old)
                json.dump({"keys": entries}, out, indent=2, ensure_ascii=False)
                out.write("\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        # The rename itself made durable.
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _take_over(self, fd: int, old: os.stat_result | None) -> None:
        """Give the new file (open as `fd`) the old file's owner, group and mode; 0600 without one.

        PermissionDeniedError when the owner or group cannot be kept (only root, or the owner for a
        group of its own, may give them): a file the server could then not read would leave the
        keys before in force, revoked ones included.
        """
        if old is None:
            os.fchmod(fd, 0o600)
            return
        new = os.fstat(fd)
        uid = old.st_uid if old.st_uid != new.st_uid else -1
        gid = old.st_gid if old.st_gid != new.st_gid else -1
        if uid != -1 or gid != -1:
            try:
                os.fchown(fd, uid, gid)
            except PermissionError:
                raise PermissionDeniedError(
                    f"cannot keep the owner and group of {self.path} (uid {old.st_uid}, gid {old.st_gid}) on its new "
                    "version, which a server reading it as them might then not read; nothing was changed: run this "
                    "as root or as the file's owner"
                ) from None
        # After the chown, which clears set-id bits.
        os.fchmod(fd, stat.S_IMODE(old.st_mode))
