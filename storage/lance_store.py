"""The LanceDB implementation of the core's `MemoryStore`: the tenant store.

Every method takes the scope of what it reads or writes, and none hands out a table. Writes are
batched (one commit per call) and never duplicate: inserts are `merge_insert` on `id`,
insert-if-absent. Recall prefilters on scalar indexes and searches exactly (flat) inside one
user's rows; keyword search is BM25 over the `keywords` column (see agent_memory.text).
What crosses tenants or rewrites tables is the maintenance interface (storage/maintenance.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from agent_memory.models import MemoryEvent, MemoryRecord, MessageRecord, OrgScope, Scope, WriteScope
from agent_memory.settings import Settings
from agent_memory.store import Candidate, EventSelection, Page, RecallFilter, Retrieved
from storage import schema as sc
from storage.access_log import AccessLog
from storage.directory import user_page
from storage.filters import scoped
from storage.journal import Journal
from storage.maintenance import store_stats
from storage.memory_rows import MemoryRows
from storage.recall_scan import RecallScan
from storage.tables import Tables, retrying


class LanceStore:
    """Agent memory on LanceDB: embedded (`./data/lancedb`) or on object storage (`s3://...`)."""

    def __init__(
        self,
        uri: str,
        *,
        embedding_model: str | None,
        embedding_dim: int | None,
        chinese_gloss: bool | None = None,
        storage_options: dict[str, str] | None = None,
        read_consistency: timedelta | None = timedelta(0),
        scan_limit: int = 2_000,
    ) -> None:
        # The open tables, shared with the maintenance interface of this store (storage.connect).
        self.connection = Tables(uri, embedding_model=embedding_model, embedding_dim=embedding_dim,
                                 chinese_gloss=chinese_gloss, storage_options=storage_options,
                                 read_consistency=read_consistency)
        self.recall = RecallScan(self.connection, scan_limit=scan_limit)
        self.memories = MemoryRows(self.connection, self.recall)
        self.journal = Journal(self.connection)
        self.access = AccessLog(self.connection, self.journal)

    @property
    def uri(self) -> str:
        """Where the store lives."""
        return self.connection.uri

    @property
    def embedding_model(self) -> str:
        """The model whose vectors `memories` holds."""
        return self.connection.embedding_model

    @property
    def embedding_dim(self) -> int:
        """Their dimension."""
        return self.connection.embedding_dim

    def ping(self) -> None:
        """Raise unless the store answers (reads the version of `memories`; no tenant's rows)."""
        self.connection.table(sc.MEMORIES).version  # noqa: B018 - the read is the check

    def check_model(self, model: str | None, dim: int | None) -> None:
        """Raise ConflictError unless the store holds vectors of this model (None checks nothing)."""
        self.connection.check_model(model, dim)

    # -- memories ------------------------------------------------------------------------------

    def insert_memories(self, scope: WriteScope, records: Sequence[MemoryRecord], *, known_absent: bool = False) -> set[str]:
        """Insert absent records in one commit; return the ids that were new (see MemoryRows.insert)."""
        return self.memories.insert(scope, records, known_absent=known_absent)

    def origin_hashes(self, scope: WriteScope, ids: Sequence[str]) -> dict[str, str]:
        """The origin hash of each id that exists in the scope (idempotency checks)."""
        return self.memories.origin_hashes(scope, ids)

    def get_memories(self, scope: Scope, ids: Sequence[str], *, with_vectors: bool = False) -> list[MemoryRecord]:
        """The records among `ids` inside the scope."""
        return self.memories.get(scope, ids, with_vectors=with_vectors)

    def list_memories(self, scope: Scope, *, limit: int, cursor: str | None, status: str | None,
                      as_of: datetime | None = None) -> Page:
        """Newest first; the cursor is the (created_at, id) of the last row returned (see MemoryRows.page)."""
        return self.memories.page(scope, limit=limit, cursor=cursor, status=status, as_of=as_of)

    def replace_memories(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Overwrite rows that still exist in the scope; a row deleted meanwhile stays deleted."""
        return self.memories.replace(scope, records)

    def reindex_memories(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Write records' index text, keywords and vectors where nothing changed them meanwhile."""
        return self.memories.reindex(scope, records)

    def delete_memories(self, scope: Scope, ids: Sequence[str]) -> int:
        """Delete rows of the scope by id."""
        return self.memories.delete(scope, ids)

    def user_memories(self, scope: Scope) -> tuple[list[MemoryRecord], np.ndarray]:
        """Every memory of the scope, any status, and their vectors as one (n, dim) matrix, same order."""
        return self.memories.of_user(scope)

    def count_active(self, scope: OrgScope) -> int:
        """The org's active memories: one count over the org and status indexes (quotas read it)."""
        return int(self.connection.table(sc.MEMORIES).count_rows(scoped(scope).eq("status", "active").render()))

    def has_memories(self, scope: Scope) -> bool:
        """Whether the user has any memory row (of any status)."""
        return self.memories.any(scope)

    # -- recall --------------------------------------------------------------------------------

    def search(
        self, scope: Scope, vector: np.ndarray | None, keywords: str, recall_filter: RecallFilter, *,
        dense_limit: int, keyword_limit: int, turns: bool = False,
    ) -> Retrieved:
        """Both retrievers inside the prefiltered rows (see RecallScan.search)."""
        return self.recall.search(scope, vector, keywords, recall_filter, dense_limit=dense_limit,
                                  keyword_limit=keyword_limit, turns=turns)

    def vector_search(self, scope: Scope, vector: np.ndarray, recall_filter: RecallFilter, limit: int) -> list[Candidate]:
        """Exact cosine search inside the prefiltered rows."""
        return self.recall.vector_search(scope, vector, recall_filter, limit)

    def keyword_search(self, scope: Scope, keywords: str, recall_filter: RecallFilter, limit: int) -> list[Candidate]:
        """BM25 over `keywords` inside the prefiltered rows."""
        return self.recall.keyword_search(scope, keywords, recall_filter, limit)

    def recall_records(self, scope: Scope, ids: Sequence[str]) -> list[MemoryRecord]:
        """The display columns of recalled memories."""
        return self.recall.recall_records(scope, ids)

    # -- recall hits ---------------------------------------------------------------------------

    def record_access(self, scope: OrgScope, counts: Mapping[str, Mapping[str, int]], at: datetime) -> int:
        """Log one flush of recall hits ({user: {memory id: hits}}) of the org; rows are not touched."""
        return self.access.record(scope, counts, at)

    def pending_access(self, scope: Scope, ids: Sequence[str] | None = None) -> dict[str, tuple[int, datetime]]:
        """Hits logged since the last fold, per memory of the scope: (count, last hit)."""
        return self.access.pending(scope, ids)

    # -- events, messages, jobs, verdicts ------------------------------------------------------

    def append_events(self, scope: WriteScope, events: Sequence[MemoryEvent]) -> None:
        """Append audit events (insert-if-absent on event id, so retries add nothing)."""
        self.journal.append_events(scope, events)

    def memory_events(self, scope: Scope, memory_id: str) -> list[MemoryEvent]:
        """The audit events of one memory inside the scope, oldest first."""
        return self.journal.memory_events(scope, memory_id)

    def user_events(self, scope: Scope, select: EventSelection | None = None) -> list[MemoryEvent]:
        return self.journal.user_events(scope, select)

    def user_messages(self, scope: Scope) -> list[MessageRecord]:
        return self.journal.user_messages(scope)

    def append_messages(self, scope: WriteScope, messages: Sequence[MessageRecord]) -> set[str]:
        """Log messages (insert-if-absent on row id); return the ids inserted."""
        return self.journal.append_messages(scope, messages)

    def drop_memory_events(self, scope: Scope, memory_ids: Sequence[str]) -> int:
        """Delete the audit events of these memories (retention purges their content with them)."""
        return self.journal.drop_memory_events(scope, memory_ids)

    def drop_messages_before(self, scope: Scope, before: datetime) -> int:
        """Delete the user's logged messages older than `before` (retention)."""
        return self.journal.drop_messages_before(scope, before)

    def session_messages(self, scope: Scope, session_id: str, last: int) -> list[MessageRecord]:
        """The last `last` messages of a session, oldest first."""
        return self.journal.session_messages(scope, session_id, last)

    def put_job(self, scope: OrgScope, job: dict[str, Any]) -> None:
        """Create or overwrite a job row of the org."""
        self.journal.put_job(scope, job)

    def get_job(self, scope: OrgScope, job_id: str) -> dict[str, Any] | None:
        """One job of the org, or None."""
        return self.journal.get_job(scope, job_id)

    def list_jobs(self, scope: OrgScope, *, kind: str | None, state: str | None, limit: int,
                  cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """The org's jobs, newest first, one page (see Journal.list_jobs)."""
        return self.journal.list_jobs(scope, kind=kind, state=state, limit=limit, cursor=cursor)

    def user_page(self, scope: OrgScope, *, limit: int, after: str | None,
                  prefix: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """The org's users after `after`, by id, with their counts (see storage.directory.user_page)."""
        return user_page(self.connection, scope, limit=limit, after=after, prefix=prefix)

    def verdicts(self, scope: Scope, ids: Sequence[str]) -> dict[str, bool]:
        """Consolidation's remembered judge verdicts among these pair ids of one user."""
        return self.journal.verdicts(scope, ids)

    def record_verdicts(self, scope: Scope, verdicts: dict[str, bool], judge: str, at: datetime) -> None:
        """Remember judge verdicts of one user's pairs (insert-if-absent)."""
        self.journal.record_verdicts(scope, verdicts, judge, at)

    # -- erasure and counts --------------------------------------------------------------------

    def erase_user(self, scope: Scope) -> dict[str, int]:
        """Delete every row of the scope's user in every table; return the rows deleted per table.

        The rows are gone from the latest version; older versions still hold them until the
        maintenance interface purges them (`StoreMaintenance.purge_versions`), which erasure
        through the service always does next.
        """
        where = scoped(Scope.user(scope.org_id, scope.user_id), owner_only=True).render()
        counts: dict[str, int] = {}
        for name in sc.TABLES:
            table = self.connection.table(name)
            counts[name] = table.count_rows(where)
            if counts[name]:
                retrying(lambda t=table: t.delete(where), f"erase {name}")
        return counts

    def stats(self, scope: OrgScope) -> dict[str, Any]:
        """Counts per table, and per memory type and status, of the org's memories."""
        return store_stats(self.connection, scope)


def open_store(settings: Settings, *, embedding_model: str | None, embedding_dim: int | None,
               chinese_gloss: bool | None = None) -> LanceStore:
    """The store the settings point at; pass the embedder's name and dim to create or check it, and
    whether it embeds Chinese through its gloss (`Embedder.glosses_chinese`) for the store to record
    when new, or to warn of when it records the other way."""
    return LanceStore(
        settings.storage.uri,
        embedding_model=embedding_model,
        embedding_dim=embedding_dim,
        chinese_gloss=chinese_gloss,
        storage_options=settings.storage.options,
        scan_limit=settings.recall.scan_limit,
    )
