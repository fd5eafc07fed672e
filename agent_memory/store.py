"""What the core needs from a store. `storage/` implements it on LanceDB; the core never imports it.

Every method takes the tenant scope as a required argument: there is no way to read or write
without saying whose data it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

import numpy as np

from agent_memory.models import MemoryEvent, MemoryRecord, MessageRecord, OrgScope, Scope, WriteScope

# Which of a user's events to read whole, given each event's id, time and memory, oldest first.
EventSelection = Callable[[list[dict[str, Any]]], set[str]]


@dataclass(frozen=True)
class RecallFilter:
    """The prefilter of a recall, applied inside the scope before any ranking."""

    memory_types: tuple[str, ...] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    since: datetime | None = None
    until: datetime | None = None
    # Memories past their expiry are invisible to recall even before consolidation marks them.
    now: datetime | None = None
    status: str = "active"
    # A caller kept to some teams finds the memories of those teams and of no team, never another
    # team's (None: every team of the scope).
    visible_teams: frozenset[str] | None = None
    # Memory as it stood at this moment: created by then and active then (retired since counts as
    # active); `status` is not used then.
    as_of: datetime | None = None


@dataclass(frozen=True)
class Candidate:
    """A memory found by one retriever: its id, the retriever's raw score, and what fusion needs.

    Retrievers return only these few columns; the display columns of the final top-k are read
    once afterwards, which keeps both searches cheap.
    """

    id: str
    score: float
    created_at: datetime
    importance: float
    oov: float
    feedback_offset: float = 0.0
    feedback_at: datetime | None = None


@dataclass(frozen=True)
class Pool:
    """Every memory either retriever found, column by column: what fusion needs of each.

    `cosine` is NaN where the vector retriever did not return the memory, `bm25` NaN where the
    keyword retriever did not; `created_at` is in seconds since the epoch. `idf_mass` is the sum
    of the query terms' idf over the searched rows (the BM25 of a document that holds each query
    term once at average length), None where the retriever cannot say. `feedback_offset` and
    `feedback_at` (seconds; NaN: no vote) are what feedback left of each importance. Fusion scores the
    whole pool with array arithmetic and builds hits (records, score parts) for the kept top-k
    only. `ranked` gives one retriever's list back (tests compare the two search paths with it);
    within equal scores it keeps the pool's order.
    """

    ids: list[str]
    cosine: np.ndarray
    bm25: np.ndarray
    created_at: np.ndarray
    importance: np.ndarray
    oov: np.ndarray
    idf_mass: float | None = None
    feedback_offset: np.ndarray | None = None
    feedback_at: np.ndarray | None = None
    turns: Turns | None = None
    asks: np.ndarray | None = None  # whether each memory only asks (see `storage.recall_scan.ONLY_ASKS`)

    @classmethod
    def of(cls, dense: Sequence[Candidate], lexical: Sequence[Candidate], idf_mass: float | None = None) -> Pool:
        """The pool of two candidate lists (the indexed retrievers' answers)."""
        found = {c.id: c for c in lexical} | {c.id: c for c in dense}
        cosine = {c.id: c.score for c in dense}
        bm25 = {c.id: c.score for c in lexical}
        ids = list(found)
        return cls(
            ids,
            np.array([cosine.get(i, np.nan) for i in ids], dtype=np.float64),
            np.array([bm25.get(i, np.nan) for i in ids], dtype=np.float64),
            np.array([found[i].created_at.timestamp() for i in ids], dtype=np.float64),
            np.array([found[i].importance for i in ids], dtype=np.float64),
            np.array([found[i].oov for i in ids], dtype=np.float64),
            idf_mass,
            np.array([found[i].feedback_offset for i in ids], dtype=np.float64),
            np.array([_seconds(found[i].feedback_at) for i in ids], dtype=np.float64),
        )

    def ranked(self, retriever: str) -> list[Candidate]:
        """One retriever's candidates, best first (`cosine` or `bm25`)."""
        scores = getattr(self, retriever)
        found = np.flatnonzero(~np.isnan(scores))
        order = found[np.argsort(-scores[found], kind="stable")]
        return [
            Candidate(self.ids[i], float(scores[i]), datetime.fromtimestamp(float(self.created_at[i]), timezone.utc),
                      float(self.importance[i]), float(self.oov[i]))
            for i in order
        ]


def _seconds(at: datetime | None) -> float:
    return at.timestamp() if at is not None else float("nan")


@dataclass(frozen=True)
class Turns:
    """Where a pool's memories sit in their conversations, and what they say, for the steps that
    spread evidence over turns (a per-user scan knows them; an index search does not).

    `session` is each memory's session (-1: none), `previous` and `following` the pool index of
    the turn before and after it in that session (-1: none), `vectors` the memories' unit vectors
    (None without a query vector). `session_cosine` and `session_bm25` score each memory's session
    as one document (its turns' mean vector, their terms together), NaN where it has none.
    """

    session: np.ndarray
    previous: np.ndarray
    following: np.ndarray
    vectors: np.ndarray | None
    session_cosine: np.ndarray
    session_bm25: np.ndarray


@dataclass(frozen=True)
class Retrieved:
    """What both retrievers found, and how to read the display fields of the memories kept.

    `records` reads from what the search already holds where it can (a scanned user's rows), so
    that a recall reads the store once.
    """

    pool: Pool
    records: Callable[[Sequence[str]], list[MemoryRecord]]

    @property
    def dense(self) -> list[Candidate]:
        """The vector retriever's candidates, most similar first."""
        return self.pool.ranked("cosine")

    @property
    def lexical(self) -> list[Candidate]:
        """The keyword retriever's candidates, best BM25 first."""
        return self.pool.ranked("bm25")


@dataclass(frozen=True)
class Page:
    """One page of a listing, newest first."""

    records: list[MemoryRecord]
    next_cursor: str | None


class MemoryStore(Protocol):
    """Durable storage of memories, the message log, audit events and jobs: the tenant store.

    Every method names the scope it reads or writes: one user or team (`Scope`), or, for batches
    that span the users of one org (an import chunk, a flush of recall hits, job rows), the org
    (`OrgScope`). A row outside the scope a write names is refused. No method crosses tenants or
    hands out a table: that is `StoreMaintenance`, which only jobs and the Writer receive.
    """

    embedding_model: str
    embedding_dim: int

    def insert_memories(self, scope: WriteScope, records: Sequence[MemoryRecord], *, known_absent: bool = False) -> set[str]:
        """Insert the records whose id is absent; return the ids actually inserted (one commit)."""
        ...

    def origin_hashes(self, scope: WriteScope, ids: Sequence[str]) -> dict[str, str]:
        """For ids that exist in the scope, the hash of the write that created each (idempotency checks)."""
        ...

    def get_memories(self, scope: Scope, ids: Sequence[str], *, with_vectors: bool = False) -> list[MemoryRecord]:
        """The records among `ids` that exist inside the scope."""
        ...

    def recall_records(self, scope: Scope, ids: Sequence[str]) -> list[MemoryRecord]:
        """Recalled memories as partial records: what a hit shows (content, type, date, sources,
        metadata) and whose it is (org, user)."""
        ...

    def list_memories(self, scope: Scope, *, limit: int, cursor: str | None, status: str | None,
                      as_of: datetime | None = None) -> Page:
        """The scope's memories, newest first, paginated by an opaque cursor; with `as_of`, those
        created by then that were active then (`status` is not used then)."""
        ...

    def replace_memories(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Overwrite existing rows of the scope in place (never inserts); return how many matched."""
        ...

    def reindex_memories(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Write records' index text, keywords and vectors where nothing changed them meanwhile."""
        ...

    def delete_memories(self, scope: Scope, ids: Sequence[str]) -> int:
        """Delete rows of the scope by id; return how many were deleted."""
        ...

    def search(
        self,
        scope: Scope,
        vector: np.ndarray | None,
        keywords: str,
        recall_filter: RecallFilter,
        *,
        dense_limit: int,
        keyword_limit: int,
        turns: bool = False,
    ) -> Retrieved:
        """Both retrievers at once: vector top-`dense_limit` and BM25 top-`keyword_limit`; None skips vectors;
        `turns`: the pool says where its memories sit in their conversations, where the search knows."""
        ...

    def vector_search(
        self, scope: Scope, vector: np.ndarray, recall_filter: RecallFilter, limit: int
    ) -> list[Candidate]:
        """Exact nearest neighbours inside the prefiltered scope; score is cosine similarity."""
        ...

    def keyword_search(
        self, scope: Scope, keywords: str, recall_filter: RecallFilter, limit: int
    ) -> list[Candidate]:
        """BM25 over the keyword terms inside the prefiltered scope; score is BM25."""
        ...

    def record_access(self, scope: OrgScope, counts: Mapping[str, Mapping[str, int]], at: datetime) -> int:
        """Log one flush of recall hits ({user: {memory id: hits}}); memory rows are not touched."""
        ...

    def pending_access(self, scope: Scope, ids: Sequence[str] | None = None) -> dict[str, tuple[int, datetime]]:
        """Hits logged since the last fold, per memory of the scope: (count, last hit)."""
        ...

    def append_events(self, scope: WriteScope, events: Sequence[MemoryEvent]) -> None:
        """Append audit events (insert-if-absent on event id, so retries add nothing)."""
        ...

    def memory_events(self, scope: Scope, memory_id: str) -> list[MemoryEvent]:
        """The audit events of one memory inside the scope, oldest first."""
        ...

    def append_messages(self, scope: WriteScope, messages: Sequence[MessageRecord]) -> set[str]:
        """Log messages (insert-if-absent on row id); return the ids inserted."""
        ...

    def user_events(self, scope: Scope, select: EventSelection | None = None) -> list[MemoryEvent]:
        """Every audit event of the scope's user, oldest first; `select` picks which of them to
        read whole from each event's `{"id", "at", "memory_id"}` (default: all)."""
        ...

    def user_messages(self, scope: Scope) -> list[MessageRecord]:
        """Every logged turn of the scope's user, by session and time."""
        ...

    def session_messages(self, scope: Scope, session_id: str, last: int) -> list[MessageRecord]:
        """The last `last` messages of a session, oldest first."""
        ...

    def drop_memory_events(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete the audit events of these memories of the scope's user (retention); the count."""
        ...

    def drop_messages_before(self, scope: Scope, before: datetime) -> int:
        """Delete the scope's user's logged messages older than `before` (retention); the count."""
        ...

    def count_active(self, scope: OrgScope) -> int:
        """The org's active memories (quotas read it)."""
        ...

    def put_job(self, scope: OrgScope, job: dict[str, Any]) -> None:
        """Create or overwrite a job row of the org."""
        ...

    def get_job(self, scope: OrgScope, job_id: str) -> dict[str, Any] | None:
        """One job of the org, or None."""
        ...

    def list_jobs(self, scope: OrgScope, *, kind: str | None, state: str | None, limit: int,
                  cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """The org's jobs, newest first (of one kind, in one state, where given), and the next cursor."""
        ...

    def user_page(self, scope: OrgScope, *, limit: int, after: str | None,
                  prefix: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """The org's users after `after` by id (ids starting with `prefix`), each with its memories
        counted by status and by type, and its last activity; and the id the next page starts after."""
        ...

    def erase_user(self, scope: Scope) -> dict[str, int]:
        """Delete every row of the scope's user in every table; return counts per table.

        Older versions keep the rows until `StoreMaintenance.purge_versions`, which the service's
        erasure runs next.
        """
        ...

    def stats(self, scope: OrgScope) -> dict[str, Any]:
        """Row counts, per-type and per-status counts of the org's memories, fragments and versions."""
        ...

    def user_memories(self, scope: Scope) -> tuple[list[MemoryRecord], np.ndarray]:
        """Every memory of the scope, any status, without vectors, and their vectors as one matrix."""
        ...

    def has_memories(self, scope: Scope) -> bool:
        """Whether the user has any memory row (of any status)."""
        ...

    def verdicts(self, scope: Scope, ids: Sequence[str]) -> dict[str, bool]:
        """Consolidation's remembered judge verdicts among these pair ids of one user."""
        ...

    def record_verdicts(self, scope: Scope, verdicts: dict[str, bool], judge: str, at: datetime) -> None:
        """Remember judge verdicts of one user's pairs (insert-if-absent)."""
        ...


class Leases(Protocol):
    """Named leases: one holder at a time across processes, with an expiry."""

    def acquire(self, name: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        """Take the named lease if free, expired or ours (a conditional write); True if held now."""
        ...

    def renew(self, name: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        """Extend our lease; False if it was lost (expired and taken)."""
        ...

    def release(self, name: str, owner: str, ttl: timedelta, now: datetime) -> None:
        """Give our lease back."""
        ...

    def holding(self, name: str, owner: str, ttl: timedelta, now: datetime, *,
                clock: Callable[[], datetime]) -> AbstractContextManager[None]:
        """Hold the named lease for a `with` block, given back however it ends; ConflictError
        (`{name}_running`) while another owner holds it."""
        ...

    def holder(self, name: str, now: datetime) -> dict[str, Any] | None:
        """The owner and expiry of the named lease, or None when free."""
        ...


class StoreMaintenance(Protocol):
    """What only jobs and the Writer receive: upkeep, leases, and the reads that cross tenants."""

    leases: Leases

    def optimize(self) -> dict[str, Any]:
        """Compact fragments, refresh indexes, and clean versions older than the retention window."""
        ...

    def fold_new_rows(self, *, reindex_rows: int, tables: Sequence[str] = ("memories",)) -> dict[str, int]:
        """Compact the small fragments recent commits left, and index them once `reindex_rows` pile up."""
        ...

    def fold_access(self, scope: Scope | OrgScope | None = None) -> int:
        """Add logged hits to active memory rows (one user, one org, or all) and drop them from the log."""
        ...

    def jobs_in(self, kind: str, states: Sequence[str]) -> list[dict[str, Any]]:
        """The jobs of a kind in these states, of every org, oldest first (as `get_job` gives them)."""
        ...

    def drop_orphan_access(self, scope: Scope) -> int:
        """Delete the user's logged recall hits of memories that no longer exist; how many."""
        ...

    def memory_owners(self, scope: OrgScope | None = None) -> list[tuple[str, str]]:
        """Every (org, user) holding memories, within one org or across all."""
        ...

    def purge_versions(self, names: Sequence[str] = ..., *, reindex: Sequence[str] = (),
                       in_turn: Callable[[Callable[[], Any]], Any] | None = None,
                       keep: timedelta = ...) -> dict[str, dict[str, int]]:
        """Erasure's last step: rewrite the fragments holding deleted rows of these tables (all by
        default), rebuild their indexes, delete every older version (through `in_turn`, where
        given); files rewritten and versions removed per table."""
        ...

    def stats(self, scope: OrgScope | None = None) -> dict[str, Any]:
        """Counts of one org, or of the whole store (None)."""
        ...

    def index_format(self) -> int:
        """The layout of what search reads (see storage.schema.INDEX_FORMAT)."""
        ...

    def set_index_format(self, value: int) -> None:
        """Record the layout every row now has."""
        ...

    def chinese_gloss(self) -> bool | None:
        """Whether the vectors of Chinese memories embed their English gloss (None: not recorded)."""
        ...

    def set_chinese_gloss(self, glossed: bool) -> None:
        """Record how every Chinese memory is now embedded."""
        ...
