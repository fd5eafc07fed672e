"""Recall: the prefilter, both retrievers in one store call, fusion of the pool's signals, the noise
floor, and the hits' display fields; recall hits go to the access recorder."""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import numpy as np

from agent_memory import scoring
from agent_memory.access import AccessRecorder
from agent_memory.embedding import Embedder
from agent_memory.errors import InvalidInputError, UnavailableError
from agent_memory.models import (
    MemoryRecord,
    RecallHit,
    RecallResult,
    Scope,
    ScoreParts,
    SearchQuery,
    as_utc,
    check_identifier,
    parse_input,
)
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore, Pool, RecallFilter
from agent_memory.text import keyword_text


class Recaller:
    """Recall over one store: `embedder` gives the query model (UnavailableError when there is none)."""

    def __init__(self, store: MemoryStore, embedder: Callable[[], Embedder], settings: Settings,
                 access: AccessRecorder, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.access = access
        self.clock = clock
        self.weights = scoring.Weights.from_settings(settings)

    def recall(self, org_id: str, query: SearchQuery | dict[str, Any], *,
               visible_teams: Collection[str] | None = None) -> RecallResult:
        """Prefilter, search by vector and by keywords, fuse, cut at min_score, return top_k.

        `query` is validated here unless it is a SearchQuery already. `visible_teams`: a caller
        kept to these teams finds only their memories and those of no team (the store filters).
        """
        check_identifier("org_id", org_id)
        q: SearchQuery = parse_input(SearchQuery, query)
        if q.scope == "team":
            if q.team_id is None:
                raise InvalidInputError("scope 'team' needs a team_id")
            scope = Scope(org_id=org_id, team_id=q.team_id, agent_id=q.agent_id, session_id=q.session_id)
        else:
            scope = Scope(org_id=org_id, user_id=q.user_id, team_id=q.team_id, agent_id=q.agent_id, session_id=q.session_id)
        if q.since and q.until and q.since > q.until:
            raise InvalidInputError("since must not be after until")
        now = self.clock()
        recall_filter = RecallFilter(
            memory_types=tuple(q.memory_types) if q.memory_types else None, metadata=dict(q.filters or {}),
            since=q.since, until=q.until, now=now,
            visible_teams=None if visible_teams is None else frozenset(visible_teams),
        )
        pool = max(self.settings.recall.candidates, q.top_k)
        keywords = keyword_text(q.query)
        degraded = False
        query_vector: np.ndarray | None = None
        query_oov = 0.0
        if q.mode != "keyword":
            try:
                embedder = self.embedder()
                query_vector = embedder.embed_query(q.query)
                query_oov = embedder.oov_shares([q.query])[0]
            except UnavailableError:
                if q.mode == "dense":
                    raise
                degraded = True
        # Vector top-N deep enough to cover every memory of a typical user, so that a keyword hit
        # almost always has its true similarity; flat search costs the same at any depth.
        found = self.store.search(
            scope, query_vector, keywords if q.mode != "dense" else "", recall_filter,
            dense_limit=max(pool, self.settings.recall.dense_depth), keyword_limit=pool,
        )
        floor = q.min_score if q.min_score is not None else self.settings.recall.min_score
        ranked = self.rank(found.pool, query_oov, now, q.mode if not degraded else "keyword", q.top_k, floor)
        records = {r.id: r for r in found.records([memory_id_ for memory_id_, _, _ in ranked])}
        kept = [(records[memory_id_], score, parts) for memory_id_, score, parts in ranked if memory_id_ in records]
        # Each hit counts for its memory's access, by the memory's user (a team's hits span users).
        by_user: dict[str, list[str]] = {}
        for record, _, _ in kept:
            by_user.setdefault(record.user_id, []).append(record.id)
        for user_id, ids in by_user.items():
            self.access.record(org_id, user_id, ids)
        return RecallResult(memories=[recall_hit(*hit) for hit in kept], degraded=degraded)

    def rank(
        self, pool: Pool, query_oov: float, now: datetime, mode: str, top_k: int, min_score: float
    ) -> list[tuple[str, float, ScoreParts]]:
        """Fuse the pool's signals into (id, score, parts) of the best `top_k` at or over `min_score`.

        The whole pool is scored with array arithmetic; ties go to the smaller id.
        """
        weights = self.weights.for_mode(mode)  # type: ignore[arg-type]
        parts = scoring.ScoreArrays(
            semantic=scoring.semantic(pool.cosine, self.settings.recall.semantic_scale) if mode != "keyword"
            else np.zeros(len(pool.ids)),
            keyword=scoring.keyword_scores(pool.bm25, pool.idf_mass, self.settings.recall.keyword_scale),
            recency=scoring.recency(pool.created_at, as_utc(now).timestamp(), self.settings.recall.recency_half_life_days),
            importance=pool.importance,
        )
        readable = scoring.readable_share(query_oov, pool.oov, self.settings.recall.oov_full_share)
        scores = np.round(scoring.fuse(parts, weights, readable), 6).tolist()
        kept = range(len(scores)) if min_score <= 0 else [i for i, s in enumerate(scores) if s >= min_score]
        best = sorted(kept, key=lambda i: (-scores[i], pool.ids[i]))[:top_k]
        return [(pool.ids[i], scores[i], parts.parts(i)) for i in best]


def recall_hit(record: MemoryRecord, score: float, parts: ScoreParts) -> RecallHit:
    """What recall returns of one memory: its display fields and its score, part by part."""
    return RecallHit(
        id=record.id, content=record.content, memory_type=record.memory_type, score=score, scores=parts,
        created_at=record.created_at, source_ids=list(record.source_ids or []), metadata=record.metadata,
    )
