"""Recall's reads: one user's rows scanned and scored in process, Lance's searches for wider scopes
and for users with more rows than a scan takes, and the display fields of the memories kept.

Every read goes through a snapshot of `memories` that follows the table's version.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent_memory import scoring
from agent_memory.errors import ConflictError
from agent_memory.models import MemoryRecord, Scope
from agent_memory.store import Candidate, Pool, RecallFilter, Retrieved, Turns
from agent_memory.text import index_terms
from storage import schema as sc
from storage.filters import Where, metadata_term, scoped
from storage.tables import Tables

# What fusion needs from each retriever; reading few columns of scattered rows is what keeps
# a search cheap (each extra column is another random read per row).
CANDIDATE_COLUMNS = ["id", "created_at", "importance", "oov", "feedback_offset", "feedback_at"]
# What a hit shows, and whose it is (recall counts each user's hits for their access counts).
DISPLAY_COLUMNS = ["id", "org_id", "user_id", "content", "memory_type", "created_at", "source_ids", "metadata"]
# A per-user scan reads what fusion needs and what a hit shows: once the user's rows are found,
# more columns of them cost little next to a second query. Not the org and user: the filter fixes
# both, and each column read costs about 0.3 ms however few its rows.
SCOPE_COLUMNS = ("org_id", "user_id")
SCAN_COLUMNS = sorted({*CANDIDATE_COLUMNS, *DISPLAY_COLUMNS, "keywords"} - set(SCOPE_COLUMNS))
# Users found to hold more rows than the in-process scan takes; they go to Lance's searches.
LARGE_SCOPES_KEPT = 10_000


class RecallScan:
    """Both retrievers over `memories`, through a snapshot reopened only when the table's version moves."""

    def __init__(self, tables: Tables, *, scan_limit: int = 2_000) -> None:
        self.tables = tables
        self.scan_limit = scan_limit
        self.large_scopes: OrderedDict[tuple[str, str | None], None] = OrderedDict()
        self._lock = threading.Lock()
        self._dataset: Any = None
        self._version = -1

    def recall_where(self, scope: Scope, recall_filter: RecallFilter, *, expiry: bool = True) -> Where:
        """The recall prefilter: the scope, the status (or what was active at `as_of`), and the
        filter's types, times, metadata and teams."""
        where = scoped(scope)
        if recall_filter.as_of is None:
            where.eq("status", recall_filter.status)
        else:
            where.le("created_at", recall_filter.as_of).any_of(
                Where().eq("status", "active"), Where().ne("status", "active").gt("valid_to", recall_filter.as_of))
        if recall_filter.memory_types:
            where.isin("memory_type", recall_filter.memory_types)
        if recall_filter.since is not None:
            where.ge("created_at", recall_filter.since)
        if recall_filter.until is not None:
            where.le("created_at", recall_filter.until)
        if expiry and recall_filter.now is not None:
            where.null_or_gt("expires_at", recall_filter.now)
        if recall_filter.metadata:
            where.has_all("metadata_kv", [metadata_term(k, v) for k, v in sorted(recall_filter.metadata.items())])
        if recall_filter.visible_teams is not None:
            where.null_or_in("team_id", sorted(recall_filter.visible_teams))
        return where

    def snapshot(self) -> Any:
        """A Lance dataset at the table's latest version, reopened only when the version moves.

        Recall reads through it directly: it answers the same queries as the LanceDB table with
        a few milliseconds less overhead per call, which is most of a per-user search.
        """
        table = self.tables.table(sc.MEMORIES)
        with self._lock:
            previous = self._dataset
        if previous is not None and self.tables.read_consistency == timedelta(0):
            # What the table would answer, read from the snapshot: 0.01 ms against 0.3 ms through
            # LanceDB's background event loop, on every recall.
            version = previous.latest_version
        else:
            version = table.version  # honours the read-consistency interval: sees other writers
        with self._lock:
            if self._dataset is None or self._version != version:
                # Checked out from the previous snapshot, the new version shares its caches (index
                # pages, metadata): a freshly opened dataset's first query costs about 1 ms more.
                previous = self._dataset
                dataset = table.to_lance() if previous is None else previous.checkout_version(version)
                # A re-embedding may have switched the table to another model under a running server.
                recorded = sc.TableMetadata.of(dataset.schema.metadata).model
                if recorded and recorded != self.tables.embedding_model:
                    raise ConflictError(
                        f"the store at {self.tables.uri} now holds vectors of {recorded!r}, not {self.tables.embedding_model!r}: "
                        f"restart with AGENT_MEMORY_EMBEDDING_MODEL={recorded}",
                        code="embedding_model_mismatch",
                    )
                self._dataset = dataset
                self._version = version
            return self._dataset

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
        """Both retrievers inside the prefiltered rows: vector top-`dense_limit` (every row of a scanned
        user), BM25 top-`keyword_limit`; with `turns`, a scanned user's pool knows its sessions and
        neighbouring turns (`Pool.turns`).

        A user's memories are few: one scan reads them with their vectors and keyword terms, and
        cosine and BM25 (over that user's rows) are computed here. That is one read instead of two
        searches, each of which would find the same rows again (see benchmarks/recall_latency.py).
        Wider scopes, and users with more than `scan_limit` matching rows, use Lance's flat vector
        search and full-text index.
        """
        query_terms = index_terms(keywords) if keywords.strip() else ()
        key = (scope.org_id, scope.user_id)
        if scope.user_id is not None and key not in self.large_scopes:
            # Expiry is checked here rather than in the filter: Lance evaluates it by re-reading the
            # rows the indexes found, which costs more than reading one more column (measured).
            columns = [*SCAN_COLUMNS, "expires_at"] + (["vector"] if vector is not None else []) \
                + (["session_id"] if turns else [])
            result = self.snapshot().to_table(
                columns=columns, filter=self.recall_where(scope, recall_filter, expiry=False).render(),
                limit=self.scan_limit + 1,
            )
            if result.num_rows <= self.scan_limit:
                if recall_filter.now is not None:
                    expires = result.column("expires_at")
                    live = pc.or_kleene(pc.is_null(expires), pc.greater(expires, pa.scalar(recall_filter.now, expires.type)))
                    result = result.filter(live)
                # Every row keeps its cosine (computed for all of them anyway): a keyword hit far down
                # the vector ranking is fused with its true similarity, not with 0.
                pool = scanned_pool(result, vector, query_terms, result.num_rows, keyword_limit)
                owner = {"org_id": scope.org_id, "user_id": scope.user_id}
                return Retrieved(pool, lambda ids: display_records(result, ids, owner))
            with self._lock:
                self.large_scopes[key] = None
                if len(self.large_scopes) > LARGE_SCOPES_KEPT:
                    self.large_scopes.popitem(last=False)
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
        result = self.snapshot().to_table(
            columns=[*CANDIDATE_COLUMNS, "_distance"], filter=self.recall_where(scope, recall_filter).render(),
            prefilter=True, nearest=nearest,
        )
        return candidates(result, lambda distance: 1.0 - distance, "_distance")

    def keyword_search(self, scope: Scope, keywords: str, recall_filter: RecallFilter, limit: int) -> list[Candidate]:
        """BM25 over `keywords` inside the prefiltered rows; a query term counts once, as in the scan."""
        if not keywords.strip():
            return []
        query = " ".join(dict.fromkeys(keywords.split()))  # 绿茶 is both a bigram and a word of 绿茶
        result = self.snapshot().to_table(
            columns=[*CANDIDATE_COLUMNS, "_score"], filter=self.recall_where(scope, recall_filter).render(),
            prefilter=True, full_text_query={"query": query, "columns": ["keywords"]}, limit=limit,
        )
        return candidates(result, float, "_score")

    def recall_records(self, scope: Scope, ids: Sequence[str]) -> list[MemoryRecord]:
        """The display columns of recalled memories (read through the recall snapshot)."""
        if not ids:
            return []
        # The snapshot the search just used: the same version, without asking storage again.
        with self._lock:
            dataset = self._dataset
        dataset = dataset if dataset is not None else self.snapshot()
        result = dataset.to_table(columns=DISPLAY_COLUMNS, filter=scoped(scope).isin("id", ids).render())
        return [sc.memory_record(r) for r in result.to_pylist()]


def display_records(result: pa.Table, ids: Sequence[str], owner: dict[str, str]) -> list[MemoryRecord]:
    """The display records of `ids` among one user's scanned rows (`owner`: their org and user)."""
    if not ids:
        return []
    wanted = set(ids)
    rows = [i for i, memory_id in enumerate(result.column("id").to_pylist()) if memory_id in wanted]
    shown = [c for c in DISPLAY_COLUMNS if c not in owner]
    return [sc.memory_record({**row, **owner}) for row in result.select(shown).take(rows).to_pylist()]


def scanned_pool(
    result: pa.Table, vector: np.ndarray | None, query_terms: Sequence[str], dense_limit: int, keyword_limit: int
) -> Pool:
    """Score a scope's scanned rows by cosine and by BM25; the pool holds each retriever's best,
    with where each sits in its conversation and how its session scores as a whole."""
    n = result.num_rows
    cosine = np.full(n, np.nan)
    all_cosine = np.zeros(n)
    matrix = None
    if vector is not None and n:
        matrix = result.column("vector").combine_chunks().flatten().to_numpy().reshape(n, -1)
        all_cosine = (matrix @ np.asarray(vector, dtype=np.float32)).astype(np.float64)
        best = best_rows(all_cosine, dense_limit, np.arange(n))
        cosine[best] = all_cosine[best]
    bm25 = np.full(n, np.nan)
    idf_mass = None
    counts = None
    if query_terms and n:
        documents = [index_terms(k or "") for k in result.column("keywords").to_pylist()]
        counts = scoring.term_counts(query_terms, documents)
        scores, idf_mass = counts.bm25(), counts.idf_mass
        best = best_rows(scores, keyword_limit, np.flatnonzero(scores > 0))
        bm25[best] = scores[best]
    rows = np.flatnonzero(~np.isnan(cosine) | ~np.isnan(bm25))
    created = pc.cast(pc.cast(result.column("created_at"), sc.TIMESTAMP), pa.int64()).to_numpy()
    return Pool(
        ids=result.column("id").take(rows).to_pylist(), cosine=cosine[rows], bm25=bm25[rows],
        created_at=created[rows] / 1e6,  # microseconds (sc.TIMESTAMP) to seconds
        importance=result.column("importance").take(rows).to_numpy().astype(np.float64),
        oov=result.column("oov").take(rows).to_numpy().astype(np.float64),
        idf_mass=idf_mass,
        feedback_offset=result.column("feedback_offset").take(rows).to_numpy().astype(np.float64),
        feedback_at=seconds(result.column("feedback_at").take(rows)),
        turns=scanned_turns(result, created, rows, matrix, all_cosine, counts) if "session_id" in result.column_names
        else None,
        asks=pc.match_substring_regex(result.column("content").take(rows), ONLY_ASKS).to_numpy(zero_copy_only=False)
        if len(rows) else None,
    )


# A text that only asks: no sentence ends in it but at a question mark, and it ends at one (the
# test of `agent_memory.text.only_asks`, run on the pool's column at once).
ONLY_ASKS = r"^[^.!。！；;\n]*[?？][\s\x{fe0f}]*$"


# The number a turn's id ends with ("D1:12", "session#3", "c01-s1-t07"): its place among turns
# sent with one timestamp (as `agent_memory.models.turn_order` reads it).
_LAST_NUMBER = r"(?P<n>\d+)\D*$"


def scanned_turns(result: pa.Table, created: np.ndarray, rows: np.ndarray, matrix: np.ndarray | None,
                  cosine: np.ndarray, counts: scoring.TermCounts | None) -> Turns | None:
    """Sessions and neighbouring turns of the pool's rows (`rows` of the scanned `result`)."""
    if "session_id" not in result.column_names or not len(rows):
        return None
    sessions = result.column("session_id").combine_chunks()
    if sessions.null_count == len(sessions):
        return None
    names, session = np.unique(sessions.fill_null("").to_numpy(zero_copy_only=False), return_inverse=True)
    session = np.where(pc.is_null(sessions).to_numpy(zero_copy_only=False), -1, session)
    first_source = pc.binary_join(result.column("source_ids").combine_chunks(), "\x1f")
    number = pc.extract_regex(pc.replace_substring_regex(first_source, "\x1f.*$", ""), _LAST_NUMBER)
    position = pc.cast(pc.struct_field(number, "n"), pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
    order = np.lexsort((position, created, session))
    previous = np.full(len(session), -1)
    following = np.full(len(session), -1)
    same = session[order[1:]] == session[order[:-1]]
    same &= session[order[1:]] >= 0
    previous[order[1:][same]] = order[:-1][same]
    following[order[:-1][same]] = order[1:][same]
    # Scanned rows to pool indices (a row outside the pool is no neighbour).
    local = np.full(len(session), -1)
    local[rows] = np.arange(len(rows))
    count = len(names)
    grouped = np.where(session >= 0, session, count)
    session_cosine = np.full(len(session), np.nan)
    if matrix is not None:
        sums = scoring.group_sums(matrix, grouped, count + 1)
        norms = np.linalg.norm(sums, axis=1)
        totals = np.bincount(grouped, weights=cosine, minlength=count + 1)
        session_cosine = (totals / np.where(norms > 0, norms, 1.0))[grouped]
    session_bm25 = np.full(len(session), np.nan)
    if counts is not None:
        session_bm25 = counts.grouped(grouped, count + 1).bm25()[grouped]
    none = session < 0
    session_cosine[none] = np.nan
    session_bm25[none] = np.nan
    return Turns(
        session=session[rows], previous=np.where(previous[rows] >= 0, local[previous[rows]], -1),
        following=np.where(following[rows] >= 0, local[following[rows]], -1),
        vectors=matrix[rows] if matrix is not None else None,
        session_cosine=session_cosine[rows], session_bm25=session_bm25[rows],
    )


def seconds(times: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Timestamps as seconds since the epoch (NaN for none)."""
    micros = pc.cast(pc.cast(times, sc.TIMESTAMP), pa.int64()).to_numpy(zero_copy_only=False)
    return np.asarray(micros, dtype=np.float64) / 1e6  # microseconds (sc.TIMESTAMP) to seconds


def best_rows(scores: np.ndarray, limit: int, among: np.ndarray) -> np.ndarray:
    """The rows of `among` with the `limit` highest scores (unordered)."""
    if len(among) <= limit:
        return among
    return among[np.argpartition(-scores[among], limit - 1)[:limit]]


def candidates(result: pa.Table, score: Callable[[float], float], column: str) -> list[Candidate]:
    cols = {name: result.column(name).to_pylist() for name in (*CANDIDATE_COLUMNS, column)}
    return [
        Candidate(memory_id, score(float(raw)), created, float(importance), float(oov), float(offset), at)
        for memory_id, created, importance, oov, offset, at, raw in zip(
            cols["id"], cols["created_at"], cols["importance"], cols["oov"], cols["feedback_offset"],
            cols["feedback_at"], cols[column], strict=True,
        )
    ]
