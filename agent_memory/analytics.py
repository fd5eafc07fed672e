"""The arithmetic behind the analytics notebooks: counts per month, a 2-D projection of the vectors,
near-duplicate clusters and recall@k curves. numpy and pandas only; the notebooks draw."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from agent_memory.text import is_chinese


def language_of(text: str) -> str:
    """`zh` for a text that is mostly Chinese (`agent_memory.text.is_chinese`), else `en`."""
    return "zh" if is_chinese(text) else "en"


def monthly_counts(created_at: pd.Series, by: pd.Series) -> pd.DataFrame:
    """Rows per calendar month (UTC) and value of `by`, every month from the first to the last included."""
    if created_at.empty:
        return pd.DataFrame(dtype=int)
    months = pd.to_datetime(created_at, utc=True).dt.tz_localize(None).dt.to_period("M")
    frame = pd.DataFrame({"month": months.to_numpy(), "by": by.to_numpy()})
    counts = frame.groupby(["month", "by"]).size().unstack(fill_value=0)
    counts = counts.reindex(pd.period_range(months.min(), months.max(), freq="M"), fill_value=0)
    counts.index.name, counts.columns.name = "month", by.name
    return counts


def project_2d(vectors: np.ndarray) -> np.ndarray:
    """The vectors on their first two principal components (PCA through an SVD), as an (n, 2) array."""
    vectors = np.asarray(vectors, dtype=np.float64)
    out = np.zeros((len(vectors), 2))
    if len(vectors) < 2:
        return out
    centred = vectors - vectors.mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    width = min(2, len(s))
    out[:, :width] = u[:, :width] * s[:width]
    return out


def near_duplicate_clusters(
    vectors: np.ndarray, groups: Sequence[Hashable], threshold: float,
) -> tuple[np.ndarray, pd.DataFrame]:
    """Connected components of the pairs of one group whose cosine is at least `threshold`.

    Returns a label per row (-1 for a row in no pair; clusters numbered from 0, largest first) and
    the pairs (`a`, `b` row positions, `cosine`). Pairs never span two groups: a group is what may
    be merged together (consolidation's is one user's memories of one type).
    """
    unit = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    unit = unit / np.where(norms == 0, 1, norms)
    keys = pd.Series(list(groups))
    parent = np.arange(len(unit))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pairs: list[tuple[int, int, float]] = []
    for members in keys.groupby(keys, sort=False).indices.values():
        if len(members) < 2:
            continue
        cosine = unit[members] @ unit[members].T
        for a, b in zip(*np.nonzero(np.triu(cosine >= threshold, k=1)), strict=True):
            i, j = int(members[a]), int(members[b])
            pairs.append((i, j, float(cosine[a, b])))
            parent[root(i)] = root(j)
    labels = np.full(len(unit), -1)
    if pairs:
        in_pairs = sorted({i for p in pairs for i in p[:2]})
        roots = pd.Series([root(i) for i in in_pairs], index=in_pairs)
        order = {r: n for n, r in enumerate(roots.value_counts(sort=True).index)}
        labels[in_pairs] = [order[r] for r in roots]
    return labels, pd.DataFrame(pairs, columns=["a", "b", "cosine"])


def recall_at(ranked_sources: Sequence[Iterable[str]], evidence: set[str], ks: Sequence[int]) -> list[float]:
    """Share of the evidence found in the first k hits (each hit a list of source ids), for each k."""
    found: set[str] = set()
    first_seen: list[int] = []
    for sources in ranked_sources:
        new = (set(sources) & evidence) - found
        found |= new
        first_seen.append(len(found))
    return [(first_seen[min(k, len(first_seen)) - 1] if first_seen else 0) / len(evidence) for k in ks]


def recall_curves(
    service: Any, questions: Sequence[dict[str, Any]], *, modes: Sequence[str], ks: Sequence[int],
    default_org: str = "default",
) -> pd.DataFrame:
    """Recall@k of every question in every mode, ranked with the noise floor off.

    One row per question, mode and k: `question`, `user_id`, `language` (of the question), `mode`,
    `k`, `recall`.
    """
    depth = max(ks)
    rows: list[dict[str, Any]] = []
    for index, item in enumerate(questions):
        org_id = item.get("org_id") or default_org
        evidence = set(item["evidence"])
        language = language_of(item["question"])
        for mode in modes:
            result = service.recall(org_id, {"user_id": item["user_id"], "query": item["question"], "top_k": depth,
                                             "mode": mode, "min_score": 0})
            ranked = [hit.source_ids for hit in result.memories]
            for k, recall in zip(ks, recall_at(ranked, evidence, ks), strict=True):
                rows.append({"question": index, "user_id": item["user_id"], "language": language, "mode": mode,
                             "k": k, "recall": recall})
    return pd.DataFrame(rows, columns=["question", "user_id", "language", "mode", "k", "recall"])
