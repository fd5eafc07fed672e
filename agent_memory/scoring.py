"""Recall scoring: normalise each signal to 0..1 and fuse them with configurable weights.

Scores are fused, not ranks: a strong keyword match keeps its margin over a weak one. Where the
embedding model cannot read the query or the memory (the bundled English model reads Chinese as
`[UNK]`), the semantic weight shrinks towards zero for that pair and the keyword signal carries it.
Recency is one bounded term, so an old but relevant fact is never buried by age alone.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from agent_memory.models import RecallMode, ScoreParts
from agent_memory.settings import Settings

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Weights:
    """Weights of the fused score; only their ratios matter."""

    semantic: float = 0.55
    keyword: float = 0.30
    recency: float = 0.08
    importance: float = 0.07

    @classmethod
    def from_settings(cls, settings: Settings) -> Weights:
        """The weights the settings configure."""
        return cls(
            settings.weight_semantic, settings.weight_keyword, settings.weight_recency, settings.weight_importance
        )

    def for_mode(self, mode: RecallMode) -> Weights:
        """Drop the signal a single-retriever mode does not use (for evaluation and degraded recall)."""
        if mode == "dense":
            return Weights(self.semantic, 0.0, self.recency, self.importance)
        if mode == "keyword":
            return Weights(0.0, self.keyword, self.recency, self.importance)
        return self


def recency(created_at: datetime, now: datetime, half_life_days: float) -> float:
    """exp(-lambda * age) with lambda = ln 2 / half-life; a future timestamp counts as new."""
    age_days = max(0.0, (now - created_at).total_seconds() / SECONDS_PER_DAY)
    return math.exp(-math.log(2) * age_days / half_life_days)


def semantic(cosine: float | None) -> float:
    """Cosine similarity of unit vectors mapped to 0..1 (unrelated texts sit near 0)."""
    if cosine is None:
        return 0.0
    return min(1.0, max(0.0, cosine))


def keyword_scores(bm25: dict[str, float]) -> dict[str, float]:
    """BM25 scores relative to the best match of this query, 0..1."""
    if not bm25:
        return {}
    top = max(bm25.values())
    if top <= 0:
        return {k: 0.0 for k in bm25}
    return {k: v / top for k, v in bm25.items()}


BM25_K1 = 1.2
BM25_B = 0.75


def bm25(query: Sequence[str], documents: Sequence[Sequence[str]]) -> list[float]:
    """Okapi BM25 of each document for the query terms, with the statistics of `documents` alone.

    The formula of the store's full-text index (idf = ln(1 + (N - n + 0.5) / (n + 0.5)), k1 1.2,
    b 0.75); a query term counts once however often it is asked.
    """
    if not documents:
        return []
    wanted = set(query)
    lengths = [len(d) for d in documents]
    average = (sum(lengths) / len(lengths)) or 1.0
    frequencies = [Counter(t for t in d if t in wanted) for d in documents]
    df = Counter(t for tf in frequencies for t in tf)
    n = len(documents)
    idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}
    scores = []
    for tf, length in zip(frequencies, lengths, strict=True):
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / average)
        scores.append(sum(idf[t] * f * (BM25_K1 + 1) / (f + norm) for t, f in tf.items()))
    return scores


def readable_share(query_oov: float, memory_oov: float, full_share: float) -> float:
    """How much the embedding model reads of a query-memory pair: 1 fully, 0 not at all."""
    worst = max(query_oov, memory_oov)
    return max(0.0, 1.0 - min(1.0, worst / full_share))


def fuse(parts: ScoreParts, weights: Weights, readable: float = 1.0) -> float:
    """The weighted mean of the score components, in 0..1."""
    w_sem = weights.semantic * readable
    total = w_sem + weights.keyword + weights.recency + weights.importance
    if total <= 0:
        return 0.0
    value = (
        w_sem * parts.semantic
        + weights.keyword * parts.keyword
        + weights.recency * parts.recency
        + weights.importance * parts.importance
    )
    return value / total
