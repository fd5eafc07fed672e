"""The LanceDB implementation of the core's `MemoryStore`.

Writes are batched (one commit per call) and never duplicate: inserts are `merge_insert` on `id`,
insert-if-absent. Recall prefilters on scalar indexes and searches exactly (flat) inside one
user's rows; keyword search is BM25 over the `keywords` column (see agent_memory.text).
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import threading
import time
import uuid
import warnings
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import lancedb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lancedb.index import FTS, Bitmap, BTree, LabelList

from agent_memory import scoring
from agent_memory.errors import ConflictError, InvalidInputError, UnavailableError
from agent_memory.models import MemoryEvent, MemoryRecord, MessageRecord, Scope, utcnow
from agent_memory.settings import Settings
from agent_memory.store import Candidate, Page, Pool, RecallFilter, Retrieved
from agent_memory.text import index_terms
from storage import schema as sc
from storage.filters import Where, literal, metadata_term, scoped

log = logging.getLogger(__name__)
T = TypeVar("T")

# What fusion needs from each retriever; reading few columns of scattered rows is what keeps
# a search cheap (each extra column is another random read per row).
CANDIDATE_COLUMNS = ["id", "created_at", "importance", "oov"]
# The physical order `cluster` gives memories: one user's rows together, oldest first.
CLUSTER_ORDER = ["org_id", "user_id", "created_at"]
DISPLAY_COLUMNS = [
    "id", "org_id", "team_id", "user_id", "agent_id", "session_id", "content", "memory_type",
    "created_at", "source_ids", "metadata",
]
# A per-user scan reads what fusion needs and what a hit shows: once the user's rows are found,
# more columns of them cost little next to a second query. Not the org and user: the filter fixes
# both, and each column read costs about 0.3 ms however few its rows.
SCOPE_COLUMNS = ("org_id", "user_id")
SCAN_COLUMNS = sorted({*CANDIDATE_COLUMNS, *DISPLAY_COLUMNS, "keywords"} - set(SCOPE_COLUMNS))
_FTS = FTS(base_tokenizer="whitespace", lower_case=True, stem=True, remove_stop_words=False, ascii_folding=True)
INDEXES: dict[str, list[tuple[str, Any]]] = {
    sc.MEMORIES: [
        ("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree()), ("team_id", BTree()),
        ("status", Bitmap()), ("memory_type", Bitmap()), ("metadata_kv", LabelList()), ("keywords", _FTS),
    ],
    sc.MESSAGES: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree()), ("session_id", BTree())],
    sc.EVENTS: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree()), ("memory_id", BTree())],
    sc.JOBS: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree())],
    sc.VERDICTS: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree())],
    sc.ACCESS: [("org_id", Bitmap()), ("user_id", BTree()), ("memory_id", BTree())],
}
# The Lance file format of every table this store creates. The 2.2 format (pylance 14's default)
# stores a page whose values are all equal as a constant, and reading a few rows of such a page
# costs about as much as the whole page: with importance, oov, memory_type and metadata the same
# in every row (defaults, English-only text), a user's scan at 1M memories took 7.3 ms, against
# 2.2 ms for the same rows in 2.1 files (which are also 5% smaller).
FILE_FORMAT = "2.1"
# Users found to hold more rows than the in-process scan takes; they go to Lance's searches.
LARGE_SCOPES_KEPT = 10_000
# fold_new_rows: an older uncovered fragment joins a fold while it holds at most this many times
# the rows of the newer ones taken so far.
FOLD_RATIO = 4
# The job kind that writes down an access fold before it changes anything (fold_access).
FOLD_KIND = "access_fold"
_RETRIES = 6
OPTIMIZE_ATTEMPTS = 10  # waits of 10 ms doubling: about 5 s in all
# Commit conflicts retried in this process, for the serving layer's metrics.
commit_retries = 0


def _retrying(action: Callable[[], T], what: str, attempts: int = _RETRIES) -> T:
    """Run a commit, retrying on Lance's commit conflicts with a short backoff (10 ms, doubling)."""
    for attempt in range(attempts):
        try:
            return action()
        except Exception as exc:  # Lance surfaces conflicts as OSError/RuntimeError with text
            text = str(exc).lower()
            if attempt + 1 < attempts and ("conflict" in text or "retry" in text or "concurrent" in text):
                global commit_retries
                commit_retries += 1
                time.sleep(0.01 * 2**attempt)
                continue
            raise
    raise AssertionError("unreachable")


class LanceStore:
    """Agent memory on LanceDB: embedded (`./data/lancedb`) or on object storage (`s3://...`)."""

    def __init__(
        self,
        uri: str,
        *,
        embedding_model: str | None,
        embedding_dim: int | None,
        storage_options: dict[str, str] | None = None,
        read_consistency: timedelta | None = timedelta(0),
        scan_limit: int = 2_000,
    ) -> None:
        self.uri = uri
        self.scan_limit = scan_limit
        self._read_consistency = read_consistency
        self._storage_options = storage_options or None
        self._large_scopes: OrderedDict[tuple[str, str | None], None] = OrderedDict()
        try:
            self._db = lancedb.connect(
                uri, storage_options=storage_options or None, read_consistency_interval=read_consistency
            )
        except Exception as exc:
            raise UnavailableError(f"cannot open the store at {uri}: {exc}") from exc
        self._tables: dict[str, Any] = {}
        self._snapshot_lock = threading.Lock()
        self._snapshot_ds: Any = None
        self._snapshot_version = -1
        self.embedding_model, self.embedding_dim = self._open_memories(embedding_model, embedding_dim)
        for name, table_schema in (
            (sc.MESSAGES, sc.MESSAGES_SCHEMA), (sc.EVENTS, sc.EVENTS_SCHEMA), (sc.JOBS, sc.JOBS_SCHEMA),
            (sc.VERDICTS, sc.VERDICTS_SCHEMA), (sc.ACCESS, sc.ACCESS_SCHEMA),
        ):
            self._tables[name] = self._open_or_create(name, table_schema)

    # -- opening -------------------------------------------------------------------------------

    def _open_or_create(self, name: str, table_schema: pa.Schema) -> Any:
        try:
            return self._db.open_table(name)
        except (FileNotFoundError, ValueError):
            table = self._db.create_table(name, schema=table_schema, exist_ok=True, data_storage_version=FILE_FORMAT)
            self._create_indexes(table, name)
            return table

    def _open_memories(self, model: str | None, dim: int | None) -> tuple[str, int]:
        try:
            table = self._db.open_table(sc.MEMORIES)
        except (FileNotFoundError, ValueError):
            if model is None or dim is None:
                raise UnavailableError(
                    f"no memories table at {self.uri}: start the service or import data first"
                ) from None
            table = self._db.create_table(
                sc.MEMORIES, schema=sc.memories_schema(dim, model), exist_ok=True, data_storage_version=FILE_FORMAT
            )
            self._create_indexes(table, sc.MEMORIES)
        meta = table.schema.metadata or {}
        stored_model = meta.get(sc.MODEL_KEY, b"").decode()
        stored_dim = int(meta.get(sc.DIM_KEY, b"0") or 0)
        _check_model(self.uri, (stored_model, stored_dim), model, dim)
        self._tables[sc.MEMORIES] = table
        return stored_model, stored_dim

    def check_model(self, model: str | None, dim: int | None) -> None:
        """Raise ConflictError unless the store holds vectors of this model (None checks nothing)."""
        _check_model(self.uri, (self.embedding_model, self.embedding_dim), model, dim)

    def _create_indexes(self, table: Any, name: str, *, replace: bool = False) -> None:
        for column, config in INDEXES[name]:
            # Several processes may open a new store at once: an index another one just built
            # is fine, and a commit conflict is retried.
            existing = {tuple(ix.columns) for ix in table.list_indices()}
            if replace or (column,) not in existing:
                _retrying(lambda c=column, cfg=config: table.create_index(c, config=cfg, replace=True), "index")

    def table(self, name: str) -> Any:
        """The LanceDB table of that name (for notebooks and maintenance jobs)."""
        return self._tables[name]

    # -- reading helpers -----------------------------------------------------------------------

    def _read(self, name: str, where: Where | None, columns: list[str] | None = None) -> pa.Table:
        """A table's rows matching `where` (all of them for None), at its latest version.

        Straight from the Lance dataset: a LanceDB query costs about 1.5 ms more per call.
        """
        filter_ = where.render() if where is not None else None
        return self._tables[name].to_lance().to_table(columns=columns, filter=filter_)

    def _rows(self, name: str, where: Where, columns: list[str] | None = None) -> list[dict[str, Any]]:
        return self._read(name, where, columns).to_pylist()

    def _existing_ids(self, name: str, org_id: str, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        return {r["id"] for r in self._rows(name, Where().eq("org_id", org_id).isin("id", ids), ["id"])}

    def _insert_absent(self, name: str, rows: list[dict[str, Any]], table_schema: pa.Schema) -> Any:
        """Insert the rows whose id is absent, in one commit; the merge's result (counts, version)."""
        if not rows:
            return None
        data = pa.Table.from_pylist(rows, schema=table_schema)
        table = self._tables[name]
        return _retrying(
            lambda: table.merge_insert("id").when_not_matched_insert_all().execute(data), f"insert {name}"
        )

    # -- memories ------------------------------------------------------------------------------

    def insert_memories(self, org_id: str, records: Sequence[MemoryRecord], *, known_absent: bool = False) -> set[str]:
        """Insert absent records in one commit; return the ids that were new.

        `known_absent`: the caller has just looked the ids up and found none (the write path
        does, for its idempotency check), so they are not looked up again. The insert stays
        insert-if-absent (a `merge_insert`): a writer that stored one of them between that
        lookup and this commit wins, this merge inserts fewer rows, and those are found in the
        version before this commit. (Two commits at the very same moment are not caught: Lance
        detects no conflict between two inserts of one key unless the schema declares it a
        primary key. API writes are applied by one Writer, in order, retries included.)
        """
        for record in records:
            if record.org_id != org_id:
                raise InvalidInputError("every record must belong to the org being written")
        ids = [r.id for r in records]
        if known_absent:
            fresh = list(records)
        else:
            existing = self._existing_ids(sc.MEMORIES, org_id, ids)
            fresh = [r for r in records if r.id not in existing]
        table_schema = self._tables[sc.MEMORIES].schema
        result = self._insert_absent(sc.MEMORIES, [sc.memory_row(r) for r in fresh], table_schema)
        inserted = int(getattr(result, "num_inserted_rows", len(fresh)) if result is not None else 0)
        if inserted == len({r.id for r in fresh}):
            return {r.id for r in fresh}
        before = self._tables[sc.MEMORIES].to_lance().checkout_version(int(result.version) - 1)
        where = Where().eq("org_id", org_id).isin("id", [r.id for r in fresh]).render()
        earlier = set(before.to_table(columns=["id"], filter=where).column("id").to_pylist())
        return {r.id for r in fresh if r.id not in earlier}

    def origin_hashes(self, org_id: str, ids: Sequence[str]) -> dict[str, str]:
        """The origin hash of each id that exists in the org (ids are derived per org and user).

        Read through the recall snapshot, which follows the table's version: the same rows as a
        query of the table, with less overhead per call (this lookup is on every write's path).
        """
        if not ids:
            return {}
        where = Where().eq("org_id", org_id).isin("id", ids).render()
        rows = self._snapshot().to_table(columns=["id", "origin_hash"], filter=where)
        return dict(zip(rows.column("id").to_pylist(), rows.column("origin_hash").to_pylist(), strict=True))

    def get_memories(self, scope: Scope, ids: Sequence[str], *, with_vectors: bool = False) -> list[MemoryRecord]:
        """The records among `ids` inside the scope."""
        if not ids:
            return []
        columns = None if with_vectors else [c for c in self._tables[sc.MEMORIES].schema.names if c != "vector"]
        rows = self._rows(sc.MEMORIES, scoped(scope).isin("id", ids), columns)
        return [sc.memory_record(r) for r in rows]

    def list_memories(self, scope: Scope, *, limit: int, cursor: str | None, status: str | None) -> Page:
        """Newest first; the cursor is the (created_at, id) of the last row returned."""
        where = scoped(scope)
        if status is not None:
            where.eq("status", status)
        keys = self._rows(sc.MEMORIES, where, ["id", "created_at"])
        keys.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
        if cursor is not None:
            after = _decode_cursor(cursor)
            keys = [k for k in keys if (k["created_at"].isoformat(), k["id"]) < after]
        page = keys[:limit]
        records = {r.id: r for r in self.get_memories(scope, [k["id"] for k in page])}
        ordered = [records[k["id"]] for k in page if k["id"] in records]
        next_cursor = None
        if len(keys) > limit and page:
            last = page[-1]
            next_cursor = _encode_cursor(last["created_at"].isoformat(), last["id"])
        return Page(ordered, next_cursor)

    def replace_memories(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Overwrite rows that still exist in the scope; a row deleted meanwhile stays deleted."""
        if not records:
            return 0
        stored = {r.id: r for r in self.get_memories(scope, [r.id for r in records], with_vectors=True)}
        rows = []
        for record in records:
            if record.id in stored:
                if record.vector is None:
                    # A record read without its vector keeps the stored one: never write a null.
                    record = record.model_copy(update={"vector": stored[record.id].vector})
                rows.append(sc.memory_row(record))
        if not rows:
            return 0
        table = self._tables[sc.MEMORIES]
        data = pa.Table.from_pylist(rows, schema=table.schema)
        result = _retrying(lambda: table.merge_insert("id").when_matched_update_all().execute(data), "update")
        return int(getattr(result, "num_updated_rows", len(rows)))

    def index_format(self) -> int:
        """The layout of what search reads in `memories` (see `schema.INDEX_FORMAT_KEY`)."""
        metadata = self._tables[sc.MEMORIES].to_lance().schema.metadata or {}
        return int(metadata.get(sc.INDEX_FORMAT_KEY, b"1"))

    def set_index_format(self, value: int) -> None:
        """Record the layout every row of `memories` now has (one commit of the schema metadata)."""
        dataset = self._tables[sc.MEMORIES].to_lance()
        metadata = {k.decode(): v.decode() for k, v in (dataset.schema.metadata or {}).items()}
        dataset.replace_schema_metadata({**metadata, sc.INDEX_FORMAT_KEY.decode(): str(value)})

    def reindex_memories(self, scope: Scope, records: Sequence[MemoryRecord]) -> int:
        """Write records' index text, keywords, vector and vocabulary share; return rows written.

        A row is written only if it still has the `updated_at`, status, access count and content it
        was read with: whatever changed it meanwhile (a patch, a merge, an access fold) wins. A
        table switched to another embedding model meanwhile is refused (`embedding_model_mismatch`).
        """
        records = [r for r in records if r.vector is not None]
        if not records:
            return 0
        self._snapshot()  # raises if the table now holds another model's vectors
        stored = {r.id: r for r in self.get_memories(scope, [r.id for r in records], with_vectors=True)}
        rows = [sc.memory_row(r) for r in records if r.id in stored]
        if not rows:
            return 0
        table = self._tables[sc.MEMORIES]
        data = pa.Table.from_pylist(rows, schema=table.schema)
        unchanged = ("target.updated_at = source.updated_at AND target.status = source.status "
                     "AND target.access_count = source.access_count AND target.content = source.content")
        result = _retrying(lambda: table.merge_insert("id").when_matched_update_all(where=unchanged).execute(data),
                           "reindex")
        return int(getattr(result, "num_updated_rows", len(rows)))

    def delete_memories(self, scope: Scope, ids: Sequence[str]) -> int:
        """Delete rows of the scope by id."""
        if not ids:
            return 0
        where = scoped(scope).isin("id", ids).render()
        table = self._tables[sc.MEMORIES]
        count = table.count_rows(where)
        if count:
            _retrying(lambda: table.delete(where), "delete")
        return count

    def _recall_where(self, scope: Scope, recall_filter: RecallFilter, *, expiry: bool = True) -> Where:
        where = scoped(scope).eq("status", recall_filter.status)
        if recall_filter.memory_types:
            where.isin("memory_type", recall_filter.memory_types)
        if recall_filter.since is not None:
            where.ge("created_at", recall_filter.since)
        if recall_filter.until is not None:
            where.lt("created_at", recall_filter.until + timedelta(microseconds=1))
        if expiry and recall_filter.now is not None:
            where.null_or_gt("expires_at", recall_filter.now)
        if recall_filter.metadata:
            where.has_all("metadata_kv", [metadata_term(k, v) for k, v in sorted(recall_filter.metadata.items())])
        return where

    def _snapshot(self) -> Any:
        """A Lance dataset at the table's latest version, reopened only when the version moves.

        Recall reads through it directly: it answers the same queries as the LanceDB table with
        a few milliseconds less overhead per call, which is most of a per-user search.
        """
        table = self._tables[sc.MEMORIES]
        with self._snapshot_lock:
            previous = self._snapshot_ds
        if previous is not None and self._read_consistency == timedelta(0):
            # What the table would answer, read from the snapshot: 0.01 ms against 0.3 ms through
            # LanceDB's background event loop, on every recall.
            version = previous.latest_version
        else:
            version = table.version  # honours the read-consistency interval: sees other writers
        with self._snapshot_lock:
            if self._snapshot_ds is None or self._snapshot_version != version:
                # Checked out from the previous snapshot, the new version shares its caches (index
                # pages, metadata): a freshly opened dataset's first query costs about 1 ms more.
                previous = self._snapshot_ds
                dataset = table.to_lance() if previous is None else previous.checkout_version(version)
                # A re-embedding may have switched the table to another model under a running server.
                recorded = (dataset.schema.metadata or {}).get(sc.MODEL_KEY, b"").decode()
                if recorded and recorded != self.embedding_model:
                    raise ConflictError(
                        f"the store at {self.uri} now holds vectors of {recorded!r}, not {self.embedding_model!r}: "
                        f"restart with AGENT_MEMORY_EMBEDDING_MODEL={recorded}",
                        code="embedding_model_mismatch",
                    )
                self._snapshot_ds = dataset
                self._snapshot_version = version
            return self._snapshot_ds

    def search(
        self,
        scope: Scope,
        vector: np.ndarray | None,
        keywords: str,
        recall_filter: RecallFilter,
        *,
        dense_limit: int,
        keyword_limit: int,
    ) -> Retrieved:
        """Both retrievers inside the prefiltered rows: vector top-`dense_limit` (every row of a scanned
        user), BM25 top-`keyword_limit`.

        A user's memories are few: one scan reads them with their vectors and keyword terms, and
        cosine and BM25 (over that user's rows) are computed here. That is one read instead of two
        searches, each of which would find the same rows again (see benchmarks/recall_latency.py).
        Wider scopes, and users with more than `scan_limit` matching rows, use Lance's flat vector
        search and full-text index.
        """
        query_terms = index_terms(keywords) if keywords.strip() else ()
        key = (scope.org_id, scope.user_id)
        if scope.user_id is not None and key not in self._large_scopes:
            # Expiry is checked here rather than in the filter: Lance evaluates it by re-reading the
            # rows the indexes found, which costs more than reading one more column (measured).
            columns = [*SCAN_COLUMNS, "expires_at"] + (["vector"] if vector is not None else [])
            result = self._snapshot().to_table(
                columns=columns, filter=self._recall_where(scope, recall_filter, expiry=False).render(),
                limit=self.scan_limit + 1,
            )
            if result.num_rows <= self.scan_limit:
                if recall_filter.now is not None:
                    expires = result.column("expires_at")
                    live = pc.or_kleene(pc.is_null(expires), pc.greater(expires, pa.scalar(recall_filter.now, expires.type)))
                    result = result.filter(live)
                # Every row keeps its cosine (computed for all of them anyway): a keyword hit far down
                # the vector ranking is fused with its true similarity, not with 0.
                pool = _scanned_pool(result, vector, query_terms, result.num_rows, keyword_limit)
                owner = {"org_id": scope.org_id, "user_id": scope.user_id}
                return Retrieved(pool, lambda ids: _display_records(result, ids, owner))
            with self._snapshot_lock:
                self._large_scopes[key] = None
                if len(self._large_scopes) > LARGE_SCOPES_KEPT:
                    self._large_scopes.popitem(last=False)
        dense = self.vector_search(scope, vector, recall_filter, dense_limit) if vector is not None else []
        lexical = self.keyword_search(scope, keywords, recall_filter, keyword_limit) if query_terms else []
        return Retrieved(Pool.of(dense, lexical), lambda ids: self.recall_records(scope, ids))

    def vector_search(self, scope: Scope, vector: np.ndarray, recall_filter: RecallFilter, limit: int) -> list[Candidate]:
        """Exact cosine search inside the prefiltered rows (flat within one user, never short of k)."""
        nearest = {
            "column": "vector", "q": np.asarray(vector, dtype=np.float32), "k": limit, "metric": "cosine",
            # Per-user scopes are small: exact search. Wider scopes may use an ANN index if one exists.
            "use_index": scope.user_id is None,
        }
        result = self._snapshot().to_table(
            columns=CANDIDATE_COLUMNS, filter=self._recall_where(scope, recall_filter).render(),
            prefilter=True, nearest=nearest,
        )
        return _candidates(result, lambda distance: 1.0 - distance, "_distance")

    def keyword_search(self, scope: Scope, keywords: str, recall_filter: RecallFilter, limit: int) -> list[Candidate]:
        """BM25 over `keywords` inside the prefiltered rows; a query term counts once, as in the scan."""
        if not keywords.strip():
            return []
        query = " ".join(dict.fromkeys(keywords.split()))  # 绿茶 is both a bigram and a word of 绿茶
        result = self._snapshot().to_table(
            columns=CANDIDATE_COLUMNS, filter=self._recall_where(scope, recall_filter).render(),
            prefilter=True, full_text_query={"query": query, "columns": ["keywords"]}, limit=limit,
        )
        return _candidates(result, float, "_score")

    def recall_records(self, scope: Scope, ids: Sequence[str]) -> list[MemoryRecord]:
        """The display columns of recalled memories (read through the recall snapshot)."""
        if not ids:
            return []
        # The snapshot the search just used: the same version, without asking storage again.
        with self._snapshot_lock:
            dataset = self._snapshot_ds
        dataset = dataset if dataset is not None else self._snapshot()
        result = dataset.to_table(columns=DISPLAY_COLUMNS, filter=scoped(scope).isin("id", ids).render())
        return [sc.memory_record(r) for r in result.to_pylist()]

    def record_access(self, org_id: str, counts: Mapping[str, Mapping[str, int]], at: datetime) -> int:
        """Append one flush of hit counts ({user: {memory id: hits}}) to the access log, in one commit.

        An earlier design added them to the memory rows with SQL updates. Lance rewrites an
        updated row whole (its vector too) into a new fragment, so every flush left each hot
        user's rows in two places until consolidation put them back in order: at 200k memories,
        a user's scan went from 1.5 ms to 5 ms after one 5,000-row flush, and stayed there. The
        log is folded into the rows by `fold_access`, which consolidation runs before it
        re-sorts the table anyway.
        """
        flush_id = uuid.uuid4().hex
        rows = [
            {"org_id": org_id, "user_id": user_id, "memory_id": memory_id, "count": int(hits), "at": at,
             "flush_id": flush_id}
            for user_id, by_memory in counts.items() for memory_id, hits in by_memory.items() if hits > 0
        ]
        if rows:
            table = self._tables[sc.ACCESS]
            data = pa.Table.from_pylist(rows, schema=sc.ACCESS_SCHEMA)
            _retrying(lambda: table.add(data), "record access")
        return len(rows)

    def pending_access(self, scope: Scope, ids: Sequence[str] | None = None) -> dict[str, tuple[int, datetime]]:
        """Hits logged since the last fold, per memory of the scope (of `ids` only, when given)."""
        where = scoped(scope)
        if ids is not None:
            if not ids:
                return {}
            where.isin("memory_id", ids)
        totals = _hit_totals(self._read(sc.ACCESS, where, ["org_id", "memory_id", "count", "at"]))
        return {r["memory_id"]: (r["count_sum"], r["at_max"]) for r in totals.to_pylist()}

    def fold_access(self, org_id: str | None = None, user_id: str | None = None) -> int:
        """Add the logged hits to the memory rows and drop them from the log; return the rows updated.

        Maintenance (consolidation runs it first): within one org and user, one org, or every org.
        Per org, the hits are summed per memory, added to the counts read from the org's active
        rows, and written in one partial-column merge (ids found in the org's rows only). Hits of
        rows deleted, merged or expired before the fold are dropped with the log. Only the
        flushes read here are dropped: hits logged meanwhile wait for the next fold.

        The merge and the drop are commits to two tables. Between them, a crash would leave hits
        both in the rows and in the log, and the next fold would count them twice; so each org's
        fold is first written down as a job (kind `access_fold`) holding the counts it sets, not
        the hits it adds, and removed when done. A fold finds the ones left behind and finishes them
        first: setting the same counts again changes nothing, and the drop happens once.
        """
        updated = sum(self._finish_fold(job) for job in self._unfinished_folds(org_id))
        scope = None
        if org_id is not None:
            scope = Where().eq("org_id", org_id)
            if user_id is not None:
                scope.eq("user_id", user_id)
        logged = self._read(sc.ACCESS, scope, ["org_id", "memory_id", "count", "at", "flush_id"])
        if logged.num_rows == 0:
            return updated
        for job in self._plan_folds(logged, user_id):
            updated += self._finish_fold(job)
        return updated

    def _unfinished_folds(self, org_id: str | None) -> list[dict[str, Any]]:
        where = (Where().eq("org_id", org_id) if org_id is not None else Where()).eq("kind", FOLD_KIND).eq("state", "running")
        return sorted((sc.job_dict(r) for r in self._rows(sc.JOBS, where)), key=lambda job: job["created_at"])

    def _plan_folds(self, logged: pa.Table, user_id: str | None) -> list[dict[str, Any]]:
        """Per org, the counts the fold of `logged` sets, written down as a running job before any change."""
        totals = _hit_totals(logged)
        jobs = []
        for org in sorted(pc.unique(totals.column("org_id")).to_pylist()):
            rows = Where().eq("org_id", org).eq("status", "active")
            if user_id is not None:
                rows.eq("user_id", user_id)
            stored = self._read(sc.MEMORIES, rows, ["id", "access_count", "last_accessed_at"])
            hits = totals.filter(pc.equal(totals.column("org_id"), org))
            joined = hits.join(stored, keys="memory_id", right_keys="id", join_type="inner")
            # (no element-wise max for zoned timestamps: compared as microseconds)
            last = joined.column("at_max").cast(sc.TIMESTAMP).cast(pa.int64())
            before = pc.coalesce(joined.column("last_accessed_at").cast(pa.int64()), last)
            now = utcnow()
            jobs.append({
                "id": f"fold-{uuid.uuid4().hex}", "org_id": org, "user_id": user_id, "kind": FOLD_KIND,
                "state": "running", "progress": 0.0, "created_at": now, "updated_at": now, "error": None,
                "report": {
                    "flush_ids": sorted(pc.unique(logged.filter(pc.equal(logged.column("org_id"), org))
                                                  .column("flush_id")).to_pylist()),
                    "ids": joined.column("memory_id").to_pylist(),
                    "access_count": pc.add(joined.column("access_count"), joined.column("count_sum")).to_pylist(),
                    "last_accessed_at_us": pc.max_element_wise(before, last).to_pylist(),
                },
            })
            self.put_job(org, jobs[-1])
        return jobs

    def _merge_fold(self, job: dict[str, Any]) -> int:
        """Set the counts a fold job holds (again, after a crash: the same values); the rows updated."""
        report = job["report"]
        if not report["ids"]:
            return 0
        changes = pa.table({
            "id": pa.array(report["ids"], pa.string()),
            "access_count": pa.array(report["access_count"], pa.int64()),
            "last_accessed_at": pa.array(report["last_accessed_at_us"], pa.int64()).cast(sc.TIMESTAMP),
        })
        # Matched rows only, and only these two columns: a row deleted since is not brought
        # back, and one merged or expired since keeps its status.
        memories = self._tables[sc.MEMORIES]
        result = _retrying(lambda: memories.merge_insert("id").when_matched_update_all().execute(changes), "fold access")
        return int(getattr(result, "num_updated_rows", 0) or 0)

    def _finish_fold(self, job: dict[str, Any]) -> int:
        """Merge a fold job's counts, drop the flushes it folded from the log, then the job."""
        updated = self._merge_fold(job)
        folded = Where().eq("org_id", job["org_id"])
        if job.get("user_id") is not None:
            folded.eq("user_id", job["user_id"])
        folded.isin("flush_id", job["report"]["flush_ids"])
        _retrying(lambda: self._tables[sc.ACCESS].delete(folded.render()), "drop folded access")
        # Done: the plan goes (the consolidation run's report counts the rows folded).
        done = Where().eq("org_id", job["org_id"]).eq("id", job["id"])
        _retrying(lambda: self._tables[sc.JOBS].delete(done.render()), "close access fold")
        return updated

    # -- events, messages, jobs ----------------------------------------------------------------

    def append_events(self, org_id: str, events: Sequence[MemoryEvent]) -> None:
        """Insert events whose id is absent, in one commit."""
        rows = [sc.event_row(e) for e in events if e.org_id == org_id]
        if len(rows) != len(events):
            raise InvalidInputError("every event must belong to the org being written")
        # Creation events have ids derived from the memory's, so that a retry does not repeat them:
        # they are looked up, then the rest appended (7 against 10-12 ms for a merge_insert at 200k
        # memories). Only the Writer that created a memory, or a retry it applies in its turn,
        # writes its creation event, so no other writer races for these ids.
        existing = self._existing_ids(sc.EVENTS, org_id, [r["id"] for r in rows])
        fresh = [r for r in rows if r["id"] not in existing]
        if fresh:
            data = pa.Table.from_pylist(fresh, schema=sc.EVENTS_SCHEMA)
            _retrying(lambda: self._tables[sc.EVENTS].add(data), "append events")

    def memory_events(self, scope: Scope, memory_id: str) -> list[MemoryEvent]:
        """Audit events of one memory of the scope's user, oldest first."""
        where = Where().eq("org_id", scope.org_id).eq("user_id", scope.user_id).eq("memory_id", memory_id)
        events = [sc.event_record(r) for r in self._rows(sc.EVENTS, where)]
        # Event ids other than creation are time-ordered, so equal timestamps keep their order.
        events.sort(key=lambda e: (e.created_at, e.action != "created", e.id))
        return events

    def append_messages(self, org_id: str, messages: Sequence[MessageRecord]) -> set[str]:
        """Log messages not logged before; return the row ids that were new."""
        if any(m.org_id != org_id for m in messages):
            raise InvalidInputError("every message must belong to the org being written")
        existing = self._existing_ids(sc.MESSAGES, org_id, [m.id for m in messages])
        fresh = [m for m in messages if m.id not in existing]
        self._insert_absent(sc.MESSAGES, [sc.message_row(m) for m in fresh], sc.MESSAGES_SCHEMA)
        return {m.id for m in fresh}

    def session_messages(self, scope: Scope, session_id: str, last: int) -> list[MessageRecord]:
        """The last messages of one session of the scope's user, oldest first."""
        where = Where().eq("org_id", scope.org_id).eq("user_id", scope.user_id).eq("session_id", session_id)
        rows = self._rows(sc.MESSAGES, where)
        rows.sort(key=lambda r: (r["created_at"], r["message_id"]))
        return [sc.message_record(r) for r in rows[-last:]] if last > 0 else []

    def put_job(self, org_id: str, job: dict[str, Any]) -> None:
        """Create or overwrite one job row."""
        if job.get("org_id") != org_id:
            raise InvalidInputError("the job must belong to the org being written")
        data = pa.Table.from_pylist([sc.job_row(job)], schema=sc.JOBS_SCHEMA)
        table = self._tables[sc.JOBS]
        _retrying(
            lambda: table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(data),
            "put job",
        )

    def get_job(self, org_id: str, job_id: str) -> dict[str, Any] | None:
        """One job of the org."""
        rows = self._rows(sc.JOBS, Where().eq("org_id", org_id).eq("id", job_id))
        return sc.job_dict(rows[0]) if rows else None

    # -- consolidation: walking users, and the run lease ---------------------------------------

    def memory_owners(self, org_id: str | None = None) -> list[tuple[str, str]]:
        """Every (org, user) that holds memories, sorted; within one org, or across all for maintenance."""
        scan = self._tables[sc.MEMORIES].search()
        if org_id is not None:
            scan = scan.where(Where().eq("org_id", org_id).render())
        rows = scan.select(["org_id", "user_id"]).limit(None).to_arrow()
        distinct = rows.group_by(["org_id", "user_id"]).aggregate([])
        return sorted(zip(distinct.column("org_id").to_pylist(), distinct.column("user_id").to_pylist(), strict=True))

    def user_memories(self, scope: Scope) -> tuple[list[MemoryRecord], np.ndarray]:
        """Every memory of the scope, any status, and their vectors as one (n, dim) matrix, same order."""
        rows = self._tables[sc.MEMORIES].search().where(scoped(scope).render()).limit(None).to_arrow()
        vectors = rows.column("vector").combine_chunks()
        if len(rows):
            flat = vectors.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
            matrix = flat.reshape(len(rows), self.embedding_dim)
        else:
            matrix = np.zeros((0, self.embedding_dim), dtype=np.float32)
        records = [sc.memory_record(r) for r in rows.drop_columns(["vector"]).to_pylist()]
        return records, matrix

    def _lease_rows(self, lease_id: str) -> list[dict[str, Any]]:
        where = Where().eq("org_id", sc.SYSTEM_ORG).eq("id", lease_id).render()
        query = self._tables[sc.JOBS].search().where(where).with_row_id(True)
        return query.limit(None).to_arrow().to_pylist()

    def acquire_lease(self, name: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        """Take the named lease if it is free, expired or already ours; True if we hold it now.

        One conditional merge_insert on the lease row: Lance retries it on a concurrent update of
        the row, re-checking the condition, so two runs cannot both take a held lease. Two runs
        that both create the absent row add two rows; then the earlier commit (lower row id) wins
        and the other removes its row.
        """
        lease_id = sc.lease_id(name)
        token = sc.lease_token(owner, ttl)
        row = {"id": lease_id, "org_id": sc.SYSTEM_ORG, "user_id": None, "kind": name, "state": "held",
               "progress": 0.0, "created_at": now, "updated_at": now, "error": None, "report": token}
        data = pa.Table.from_pylist([row], schema=sc.JOBS_SCHEMA)
        takeover = Where().any_of(
            Where("target").ne("state", "held"),
            Where("target").lt("updated_at", now - ttl),
            Where("target").eq("report", token),
        ).render()
        table = self._tables[sc.JOBS]
        _retrying(
            lambda: table.merge_insert("id").when_matched_update_all(where=takeover)
            .when_not_matched_insert_all().execute(data),
            "acquire lease",
        )
        rows = sorted(self._lease_rows(lease_id), key=lambda r: r["_rowid"])
        if not rows:
            return False
        winner = rows[0]
        if len(rows) > 1 and winner["report"] != token:
            where = Where().eq("org_id", sc.SYSTEM_ORG).eq("id", lease_id).eq("report", token).render()
            _retrying(lambda: table.delete(where), "drop lost lease row")
        return winner["report"] == token and winner["state"] == "held"

    def renew_lease(self, name: str, owner: str, ttl: timedelta, now: datetime) -> bool:
        """Push our lease's expiry forward; False if we no longer hold it."""
        where = (Where().eq("org_id", sc.SYSTEM_ORG).eq("id", sc.lease_id(name))
                 .eq("report", sc.lease_token(owner, ttl)).eq("state", "held").render())
        table = self._tables[sc.JOBS]
        result = _retrying(lambda: table.update(where=where, values_sql={"updated_at": literal(now)}), "renew lease")
        return int(getattr(result, "rows_updated", 0) or 0) > 0

    def release_lease(self, name: str, owner: str, ttl: timedelta, now: datetime) -> None:
        """Give our lease back (a lease held by another owner is left alone)."""
        where = (Where().eq("org_id", sc.SYSTEM_ORG).eq("id", sc.lease_id(name))
                 .eq("report", sc.lease_token(owner, ttl)).render())
        values = {"state": literal("released"), "updated_at": literal(now)}
        table = self._tables[sc.JOBS]
        _retrying(lambda: table.update(where=where, values_sql=values), "release lease")

    def lease_holder(self, name: str, now: datetime) -> dict[str, Any] | None:
        """Who holds the named lease and until when, or None when it is free or expired."""
        for row in sorted(self._lease_rows(sc.lease_id(name)), key=lambda r: r["_rowid"])[:1]:
            token = json.loads(row["report"] or "{}")
            expires = row["updated_at"] + timedelta(seconds=float(token.get("ttl_s", 0)))
            if row["state"] == "held" and expires > now:
                return {"owner": token.get("owner"), "since": row["created_at"], "expires_at": expires}
        return None

    # -- consolidation's verdicts --------------------------------------------------------------

    def has_memories(self, scope: Scope) -> bool:
        """Whether the user has any memory row (of any status)."""
        where = Where().eq("org_id", scope.org_id).eq("user_id", scope.user_id).render()
        return self._tables[sc.MEMORIES].count_rows(where) > 0

    def verdicts(self, scope: Scope, ids: Sequence[str]) -> dict[str, bool]:
        """The remembered verdicts among these pair ids of one user: id -> same fact or not."""
        if not ids:
            return {}
        where = Where().eq("org_id", scope.org_id).eq("user_id", scope.user_id).isin("id", list(ids))
        return {r["id"]: bool(r["same"]) for r in self._rows(sc.VERDICTS, where, ["id", "same"])}

    def record_verdicts(self, scope: Scope, verdicts: dict[str, bool], judge: str, at: datetime) -> None:
        """Remember verdicts of one user's pairs (insert-if-absent: a verdict once given stands)."""
        rows = [{"id": pair_id, "org_id": scope.org_id, "user_id": scope.user_id, "judge": judge, "same": same,
                 "judged_at": at} for pair_id, same in verdicts.items()]
        self._insert_absent(sc.VERDICTS, rows, sc.VERDICTS_SCHEMA)

    # -- erasure and maintenance ---------------------------------------------------------------

    def erase_user(self, org_id: str, user_id: str) -> dict[str, int]:
        """Delete the user from every table, rebuild indexes without them, and purge old versions."""
        where = Where().eq("org_id", org_id).eq("user_id", user_id).render()
        counts: dict[str, int] = {}
        for name in sc.TABLES:
            table = self._tables[name]
            counts[name] = table.count_rows(where)
            if counts[name]:
                _retrying(lambda t=table: t.delete(where), f"erase {name}")
        for name in sc.TABLES:
            self._purge(name)
        return counts

    def _purge(self, name: str) -> None:
        """Compact, rebuild every index from live rows, and delete all older versions and files."""
        table = self._tables[name]
        with warnings.catch_warnings():
            # Dropping every older version is the point here; Lance warns about exactly that.
            warnings.simplefilter("ignore", UserWarning)
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
            self._create_indexes(table, name, replace=True)
            table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)

    def optimize(self, *, retain: timedelta = timedelta(days=7), cluster: bool = False) -> dict[str, Any]:
        """Compact fragments, fold new rows into indexes, and clean versions older than `retain`.

        With `cluster`, memories are also put in (org, user) order after compaction (see `cluster`).
        """
        report: dict[str, Any] = {}
        for name in sc.TABLES:
            table = self._tables[name]
            before = self._table_shape(name)
            # Another process's compaction (the Writer's folds, an import's or a consolidation's
            # pass) may commit a rewrite of the same fragments meanwhile: Lance then refuses this
            # one as a retryable conflict, and it is planned again, for up to about 5 s.
            compact = functools.partial(table.optimize, cleanup_older_than=retain)
            _retrying(compact, f"optimize {name}", OPTIMIZE_ATTEMPTS)
            report[name] = {"before": before}
            if cluster and name == sc.MEMORIES:
                report[name]["clustered"] = clustered = self.cluster()
                if clustered["fragments"]:  # index the rewritten fragments
                    _retrying(compact, f"optimize {name}", OPTIMIZE_ATTEMPTS)
            report[name]["after"] = self._table_shape(name)
        return report

    def fold_new_rows(self, *, reindex_rows: int, tables: Sequence[str] = (sc.MEMORIES,)) -> dict[str, int]:
        """Keep id lookups and per-user reads fast between full optimizations, cheaply.

        Every commit (a write, an access-log flush) leaves a small fragment that no index
        covers, and every per-user search, id lookup and insert-if-absent opens and scans each
        such fragment: about 0.3 ms apiece. At 200k memories a user's scan took 3 ms on a
        compacted table and 16 ms with 50 one-row fragments written since (26 ms of CPU); an
        insert-if-absent took 4 ms with one of them and 12 ms with 31. So, for each table:
        1. The newest uncovered fragments are compacted into one, oldest last, as long as the
           next older one holds at most `FOLD_RATIO` times the rows taken so far. Each fold
           rewrites little more than what is new, and the uncovered fragments stay few (a
           handful of growing sizes), however often it runs.
        2. Once `reindex_rows` rows are uncovered, the scalar indexes are updated to cover them.
           Lance rewrites each index to do that (0.2 s and 7 MB at 200k rows, five times that at
           1M), so it is not done for every few rows. The full-text index, which only wide
           scopes use, waits for `optimize`.
        Returns the fragments compacted and the rows indexed, summed over the tables (both 0
        when nothing was committed).
        """
        done = {"fragments_compacted": 0, "rows_indexed": 0}
        for name in tables:
            table = self._tables[name]
            dataset = table.to_lance()
            covered: dict[str, set[int]] = defaultdict(set)
            for index in dataset.list_indices():  # one entry per index segment
                if index["type"] != "Inverted" and not index["name"].startswith("__"):
                    covered[index["name"]].update(index["fragment_ids"])
            rows = {f.fragment_id: f.metadata.physical_rows for f in dataset.get_fragments()}
            everywhere = set.intersection(*covered.values()) if covered else set(rows)
            uncovered = sorted(set(rows) - everywhere)
            run: list[int] = []
            for fragment in reversed(uncovered):
                if run and rows[fragment] > FOLD_RATIO * sum(rows[f] for f in run):
                    break
                run.append(fragment)
            if len(run) >= 2:
                metrics = dataset.optimize.compact_files(
                    excluded_fragment_ids=sorted(set(rows) - set(run)), materialize_deletions=False
                )
                done["fragments_compacted"] += metrics.fragments_removed
                dataset = table.to_lance()
                rows = {f.fragment_id: f.metadata.physical_rows for f in dataset.get_fragments()}
            uncovered = sorted(set(rows) - everywhere)
            pending = sum(rows[f] for f in uncovered)
            if uncovered and pending >= reindex_rows:
                dataset.optimize.optimize_indices(index_names=sorted(n for n, ids in covered.items() if set(rows) - ids))
                done["rows_indexed"] += pending
        return done

    def cluster(self, *, attempts: int = 3) -> dict[str, int]:
        """Rewrite each memories fragment whose rows are not in (org, user, created_at) order, sorted.

        Recall reads one user's rows. Writes arrive interleaved across users, so after compaction
        those rows lie one per page; sorted, they lie together and the read touches a few pages
        (at 100k memories it halved the search; benchmarks/recall_latency.py). Each fragment is
        replaced in a Lance `Rewrite` commit: the same rows, reordered. Lance refuses that commit
        when an update or delete touched the fragment meanwhile, so nothing is lost or brought
        back (the fragment is tried again, then left to the next run); appends commit alongside.
        A fragment is sorted in memory: compaction keeps them at most about a million rows.
        """
        import lance
        from lance import LanceOperation

        done = {"fragments": 0, "rows": 0, "conflicts": 0}
        table = self._tables[sc.MEMORIES]
        for _ in range(attempts):
            dataset = table.to_lance()
            pending = [f for f in dataset.get_fragments() if not _in_owner_order(f.to_table(columns=CLUSTER_ORDER))]
            if not pending:
                break
            for fragment in pending:
                rows = fragment.to_table().sort_by([(column, "ascending") for column in CLUSTER_ORDER])
                new = lance.fragment.write_fragments(
                    rows, dataset, schema=dataset.schema, storage_options=self._storage_options
                )
                group = LanceOperation.RewriteGroup(old_fragments=[fragment.metadata], new_fragments=new)
                try:
                    lance.LanceDataset.commit(
                        dataset, LanceOperation.Rewrite([group], []), read_version=dataset.version,
                        storage_options=self._storage_options, max_retries=0,
                    )
                except Exception as exc:  # noqa: BLE001 - lance raises its own conflict types
                    if "conflict" not in str(exc).lower():
                        raise
                    done["conflicts"] += 1
                    break  # the dataset moved on: reopen it and look again
                done["fragments"] += 1
                done["rows"] += rows.num_rows
                dataset = table.to_lance()
            else:
                break
        return done

    def _table_shape(self, name: str) -> dict[str, int]:
        table = self._tables[name]
        stats = table.stats()
        return {
            "rows": int(stats.get("num_rows", 0)),
            "fragments": int(stats.get("fragment_stats", {}).get("num_fragments", 0)),
            "versions": len(table.list_versions()),
        }

    def stats(self, org_id: str | None) -> dict[str, Any]:
        """Counts per table, and per memory type and status, for one org or all."""
        out: dict[str, Any] = {"uri": self.uri, "embedding_model": self.embedding_model,
                               "embedding_dim": self.embedding_dim, "tables": {}}
        for name in sc.TABLES:
            out["tables"][name] = self._table_shape(name)
        table = self._tables[sc.MEMORIES]
        scan = table.search()
        if org_id is not None:
            scan = scan.where(Where().eq("org_id", org_id).render())
        rows = scan.select(["user_id", "memory_type", "status"]).limit(None).to_arrow().to_pylist()
        by_type: dict[str, int] = defaultdict(int)
        by_status: dict[str, int] = defaultdict(int)
        for r in rows:
            by_type[r["memory_type"]] += 1
            by_status[r["status"]] += 1
        out["memories"] = {
            "total": len(rows), "users": len({r["user_id"] for r in rows}),
            "by_type": dict(by_type), "by_status": dict(by_status),
        }
        return out

    def versions(self, name: str) -> list[int]:
        """The retained versions of a table (erasure tests read every one)."""
        return [int(v["version"]) for v in self._tables[name].list_versions()]


def _check_model(uri: str, stored: tuple[str, int], model: str | None, dim: int | None) -> None:
    stored_model, stored_dim = stored
    if model is not None and (stored_model != model or (dim is not None and stored_dim != dim)):
        raise ConflictError(
            f"the store at {uri} holds vectors of {stored_model!r} ({stored_dim}-d), but the configured "
            f"embedding model is {model!r} ({dim}-d). Set AGENT_MEMORY_EMBEDDING_MODEL={stored_model} "
            f"or re-embed the store with `agent-memory reembed --model {model}`.",
            code="embedding_model_mismatch",
        )


def _hit_totals(logged: pa.Table) -> pa.Table:
    """Access-log rows summed per (org, memory): `count_sum` hits, the last at `at_max`."""
    return logged.group_by(["org_id", "memory_id"]).aggregate([("count", "sum"), ("at", "max")])


def _display_records(result: pa.Table, ids: Sequence[str], owner: dict[str, str]) -> list[MemoryRecord]:
    """The display records of `ids` among one user's scanned rows (`owner`: their org and user)."""
    if not ids:
        return []
    wanted = set(ids)
    rows = [i for i, memory_id in enumerate(result.column("id").to_pylist()) if memory_id in wanted]
    shown = [c for c in DISPLAY_COLUMNS if c not in owner]
    return [sc.memory_record({**row, **owner}) for row in result.select(shown).take(rows).to_pylist()]


def _in_owner_order(keys: pa.Table) -> bool:
    """Whether a fragment's (org, user, created_at) keys are already sorted."""
    if keys.num_rows < 2:
        return True
    return keys.sort_by([(column, "ascending") for column in CLUSTER_ORDER]).equals(keys)


def _scanned_pool(
    result: pa.Table, vector: np.ndarray | None, query_terms: Sequence[str], dense_limit: int, keyword_limit: int
) -> Pool:
    """Score a scope's scanned rows by cosine and by BM25; the pool holds each retriever's best."""
    n = result.num_rows
    cosine = np.full(n, np.nan)
    if vector is not None and n:
        matrix = result.column("vector").combine_chunks().flatten().to_numpy().reshape(n, -1)
        scores = (matrix @ np.asarray(vector, dtype=np.float32)).astype(np.float64)
        best = _best(scores, dense_limit, np.arange(n))
        cosine[best] = scores[best]
    bm25 = np.full(n, np.nan)
    idf_mass = None
    if query_terms and n:
        documents = [index_terms(k or "") for k in result.column("keywords").to_pylist()]
        scores, idf_mass = scoring.bm25_with_mass(query_terms, documents)
        best = _best(scores, keyword_limit, np.flatnonzero(scores > 0))
        bm25[best] = scores[best]
    rows = np.flatnonzero(~np.isnan(cosine) | ~np.isnan(bm25))
    created = pc.cast(pc.cast(result.column("created_at").take(rows), sc.TIMESTAMP), pa.int64()).to_numpy()
    return Pool(
        ids=result.column("id").take(rows).to_pylist(), cosine=cosine[rows], bm25=bm25[rows],
        created_at=created / 1e6,  # microseconds (sc.TIMESTAMP) to seconds
        importance=result.column("importance").take(rows).to_numpy().astype(np.float64),
        oov=result.column("oov").take(rows).to_numpy().astype(np.float64),
        idf_mass=idf_mass,
    )


def _best(scores: np.ndarray, limit: int, among: np.ndarray) -> np.ndarray:
    """The rows of `among` with the `limit` highest scores (unordered)."""
    if len(among) <= limit:
        return among
    return among[np.argpartition(-scores[among], limit - 1)[:limit]]


def _candidates(result: pa.Table, score: Callable[[float], float], column: str) -> list[Candidate]:
    cols = {name: result.column(name).to_pylist() for name in (*CANDIDATE_COLUMNS, column)}
    return [
        Candidate(memory_id, score(float(raw)), created, float(importance), float(oov))
        for memory_id, created, importance, oov, raw in zip(
            cols["id"], cols["created_at"], cols["importance"], cols["oov"], cols[column], strict=True
        )
    ]


def _encode_cursor(created_at: str, memory_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_at, memory_id]).encode()).decode()


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        created_at, memory_id = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return str(created_at), str(memory_id)
    except Exception:
        raise InvalidInputError("cursor is not one this server returned") from None


def open_store(settings: Settings, *, embedding_model: str | None, embedding_dim: int | None) -> LanceStore:
    """The store the settings point at; pass the embedder's name and dim to create or check it."""
    return LanceStore(
        settings.storage_uri,
        embedding_model=embedding_model,
        embedding_dim=embedding_dim,
        storage_options=settings.storage_options,
        scan_limit=settings.recall_scan_limit,
    )
