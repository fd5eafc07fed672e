"""Recall scoring: normalise each signal to 0..1 and fuse them with configurable weights.

Scores are fused, not ranks: a strong keyword match keeps its margin over a weak one. Where the
embedding model cannot read the query or the memory (the bundled English model reads Chinese as
`[UNK]`), the semantic weight shrinks towards zero for that pair and the keyword signal carries it.
Recency is one bounded term, so an old but relevant fact is never buried by age alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent_memory.models import RecallMode, ScoreParts
from agent_memory.settings import Settings
from agent_memory.text import CJK

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class ScoreArrays:
    """The components of the fused score for a whole candidate pool, each in 0..1."""

    semantic: np.ndarray
    keyword: np.ndarray
    recency: np.ndarray
    importance: np.ndarray

    def parts(self, i: int) -> ScoreParts:
        """One candidate's components, as a recall hit shows them."""
        return ScoreParts(semantic=float(self.semantic[i]), keyword=float(self.keyword[i]),
                          recency=float(self.recency[i]), importance=float(self.importance[i]))


@dataclass(frozen=True)
class Weights:
    """Weights of the fused score; only their ratios matter (the defaults are the settings')."""

    semantic: float
    keyword: float
    recency: float
    importance: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Weights:
        """The weights the settings configure."""
        return cls(
            settings.recall.weight_semantic, settings.recall.weight_keyword, settings.recall.weight_recency, settings.recall.weight_importance
        )

    def for_mode(self, mode: RecallMode) -> Weights:
        """Drop the signal a single-retriever mode does not use (for evaluation and degraded recall)."""
        if mode == "dense":
            return Weights(self.semantic, 0.0, self.recency, self.importance)
        if mode == "keyword":
            return Weights(0.0, self.keyword, self.recency, self.importance)
        return self


def recency(created_at: np.ndarray, now: float, half_life_days: float) -> np.ndarray:
    """exp(-lambda * age) with lambda = ln 2 / half-life; a future timestamp counts as new.

    Times are seconds since the epoch (`datetime.timestamp()`).
    """
    age_days = np.maximum(0.0, (now - np.asarray(created_at, dtype=np.float64)) / SECONDS_PER_DAY)
    return np.exp(-math.log(2) * age_days / half_life_days)


def semantic(cosine: np.ndarray, scale: float = 0.0, readable: np.ndarray | float = 1.0) -> np.ndarray:
    """Cosine similarity relative to the best of the pool, 0..1; a best match under `scale` counts
    as that weak (the best of unrelated texts is not made a perfect match). NaN, not found by the
    vector retriever, is 0.

    Where the model reads little of a pair (`readable` under 1: mostly `[UNK]` tokens), what two
    texts share of `[UNK]` makes every cosine high (0.6 for any two Chinese texts with the bundled
    model): the part of a cosine that the pool's median holds is taken off in that share, so the
    little the model does see (Latin words, numbers, the characters it knows) still ranks.
    """
    values = np.clip(np.nan_to_num(np.asarray(cosine, dtype=np.float64), nan=0.0), 0.0, 1.0)
    found = values[~np.isnan(np.asarray(cosine, dtype=np.float64))] if values.size else values
    unread = 1.0 - np.asarray(readable, dtype=np.float64)
    if found.size and np.any(unread > 0):
        values = np.maximum(0.0, values - unread * float(np.median(found)))
    top = max(float(values.max()) if values.size else 0.0, scale)
    return values / top if top > 0 else values


def keyword_scores(bm25: np.ndarray, idf_mass: float | None = None, share: float = 0.0) -> np.ndarray:
    """BM25 relative to the best match of this query, 0..1 (NaN, not found, is 0).

    With the query's `idf_mass` (about the BM25 of a document of average length holding each query
    term found once), the scale is at least `share` of it: a best match that holds only the
    query's common words ("use", "user") while rarer ones occur elsewhere stays weak instead of
    becoming 1.
    """
    scores = np.nan_to_num(np.asarray(bm25, dtype=np.float64), nan=0.0)
    top = scores.max() if scores.size else 0.0
    if idf_mass is not None:
        top = max(top, share * idf_mass)
    return np.minimum(scores / top, 1.0) if top > 0 else np.zeros_like(scores)


# Recency and importance count in full for a memory at least this relevant (the weighted mean of
# its semantic and keyword scores), in proportion below it.
FULL_PRIOR_RELEVANCE = 0.25
BM25_K1 = 1.2
BM25_B = 0.75


def bm25(query: Sequence[str], documents: Sequence[Sequence[str]]) -> np.ndarray:
    """Okapi BM25 of each document for the query terms, with the statistics of `documents` alone."""
    return bm25_with_mass(query, documents)[0]


def idf(n: int, df: np.ndarray | int) -> np.ndarray:
    """The full-text index's idf: ln(1 + (N - n + 0.5) / (n + 0.5))."""
    return np.log(1 + (n - np.asarray(df, dtype=np.float64) + 0.5) / (np.asarray(df, dtype=np.float64) + 0.5))


def bm25_with_mass(query: Sequence[str], documents: Sequence[Sequence[str]]) -> tuple[np.ndarray, float]:
    """BM25 of each document, and the query's idf mass: the sum of the idf of its terms (see
    `keyword_scores`)."""
    counts = term_counts(query, documents)
    return counts.bm25(), counts.idf_mass


@dataclass(frozen=True)
class TermCounts:
    """How often each query term occurs in each document, and the documents' lengths.

    The BM25 of the documents, or of groups of them (a session's turns read as one document),
    comes from these counts without reading the terms again.
    """

    tf: np.ndarray  # documents x the query terms some document holds
    lengths: np.ndarray
    idf_mass: float

    def bm25(self) -> np.ndarray:
        """Okapi BM25 of each document with the formula of the store's full-text index (k1 1.2, b 0.75)."""
        n = len(self.lengths)
        if not self.tf.shape[1]:
            return np.zeros(n)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths / (self.lengths.mean() or 1.0))
        weights = idf(n, np.count_nonzero(self.tf, axis=0))
        return (weights * self.tf * (BM25_K1 + 1) / (self.tf + norm[:, None])).sum(axis=1)

    def grouped(self, groups: np.ndarray, count: int) -> TermCounts:
        """The counts of `count` groups of the documents (`groups`: each document's group)."""
        return TermCounts(group_sums(self.tf, groups, count), np.bincount(groups, weights=self.lengths, minlength=count),
                          self.idf_mass)


def group_sums(rows: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """The sum of the rows of each of `count` groups (`groups`: each row's group, 0..count-1), in
    float64, in one pass over runs of rows of one group (`np.add.at`, the obvious way, is an order
    of magnitude slower). A user's scanned rows come in time order, so each session's turns are
    usually one run already; otherwise the rows are sorted by group first (stably: the sums are
    the same either way)."""
    sums = np.zeros((count, rows.shape[1]))
    if not len(groups):
        return sums
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    if len(starts) != len(np.unique(groups[starts])):  # a group in several runs
        order = np.argsort(groups, kind="stable")
        groups, rows = groups[order], rows[order]
        starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    sums[groups[starts]] = np.add.reduceat(rows, starts, axis=0, dtype=np.float64)
    return sums


def term_counts(query: Sequence[str], documents: Sequence[Sequence[str]]) -> TermCounts:
    """The query terms' counts in each document, and the query's idf mass.

    A query term counts once however often it is asked. One pass over the documents' terms,
    whatever the query's length; the arrays hold only the query terms that occur. A word no
    document holds counts in the mass with the idf of a term of document frequency 0 (above that
    of any term a document holds): a question about a "dish" that no memory names is not answered
    by the memory that says "lovely" for its "love". A CJK term no document holds adds nothing:
    most are bigrams across word boundaries (什么语 gives 么语), which say nothing of what was asked.
    """
    n = len(documents)
    wanted = set(query)
    unheld = wanted.copy()
    column: dict[str, int] = {}
    rows: list[int] = []
    columns: list[int] = []
    for i, document in enumerate(documents):
        for term in document:
            if term in wanted:
                rows.append(i)
                columns.append(column.setdefault(term, len(column)))
    unheld.difference_update(column)
    missing = float(idf(n, 0)) * sum(1 for term in unheld if not CJK.search(term)) if n else 0.0
    lengths = np.fromiter((len(d) for d in documents), dtype=np.float64, count=n)
    cells = np.asarray(rows, dtype=np.int64) * len(column) + np.asarray(columns, dtype=np.int64)
    tf = np.bincount(cells, minlength=n * len(column)).astype(np.float64).reshape(n, len(column))
    held = float(idf(n, np.count_nonzero(tf, axis=0)).sum()) if rows else 0.0
    return TermCounts(tf, lengths, held + missing)


def readable_share(query_oov: float, memory_oov: np.ndarray, full_share: float) -> np.ndarray:
    """How much the embedding model reads of a query-memory pair: 1 fully, 0 not at all."""
    worst = np.maximum(query_oov, np.asarray(memory_oov, dtype=np.float64))
    return np.maximum(0.0, 1.0 - np.minimum(1.0, worst / full_share))


def semantic_trust(readable: np.ndarray, unread_weight: float) -> np.ndarray:
    """The share of the semantic weight a pair keeps: all of it where the model reads both texts,
    `unread_weight` of it where it reads neither (keywords carry the rest)."""
    return unread_weight + (1.0 - unread_weight) * np.asarray(readable, dtype=np.float64)


def fuse(parts: ScoreArrays, weights: Weights, readable: np.ndarray | float = 1.0) -> np.ndarray:
    """The weighted mean of the score components, in 0..1; recency and importance count in full
    only for a memory whose relevance (the weighted mean of semantic and keyword) reaches
    `FULL_PRIOR_RELEVANCE`, and in proportion below it.

    Recency and importance order the memories that match; they do not make one that does not
    match score: a fresh memory that shares nothing with the query scores near 0, so one absolute
    floor (`recall_min_score`) tells noise from a match whatever the memory's age and importance.
    With no relevance weight at all (only recency or importance configured) they count in full.
    """
    w_sem = weights.semantic * np.asarray(readable, dtype=np.float64)
    total = w_sem + weights.keyword + weights.recency + weights.importance
    matched = w_sem * parts.semantic + weights.keyword * parts.keyword
    share = w_sem + weights.keyword
    relevance = np.where(share > 0, matched / np.where(share > 0, share, 1.0), 1.0)
    prior = np.minimum(1.0, relevance / FULL_PRIOR_RELEVANCE)
    value = matched + prior * (weights.recency * parts.recency + weights.importance * parts.importance)
    return np.where(total > 0, value / np.where(total > 0, total, 1.0), 0.0)
