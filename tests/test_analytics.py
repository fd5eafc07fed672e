"""The notebooks' arithmetic: monthly counts, the 2-D projection, near-duplicate clusters, recall@k."""

from __future__ import annotations

import numpy as np
import pandas as pd

from agent_memory.analytics import language_of, monthly_counts, near_duplicate_clusters, project_2d, recall_at


def test_monthly_counts_stack_by_type_and_keep_empty_months() -> None:
    created = pd.Series(pd.to_datetime(["2025-01-31T23:00:00Z", "2025-03-01T00:00:00Z", "2025-03-20T00:00:00Z"]))
    counts = monthly_counts(created, pd.Series(["semantic", "episodic", "semantic"], name="memory_type"))
    assert [str(m) for m in counts.index] == ["2025-01", "2025-02", "2025-03"]
    assert counts.to_dict() == {"episodic": {counts.index[0]: 0, counts.index[1]: 0, counts.index[2]: 1},
                                "semantic": {counts.index[0]: 1, counts.index[1]: 0, counts.index[2]: 1}}
    assert monthly_counts(pd.Series([], dtype="datetime64[ns, UTC]"), pd.Series([], dtype=str)).empty


def test_projection_keeps_the_main_spread() -> None:
    rng = np.random.default_rng(0)
    vectors = np.outer(np.linspace(-1, 1, 50), rng.normal(size=16)) + rng.normal(scale=0.01, size=(50, 16))
    xy = project_2d(vectors)
    assert xy.shape == (50, 2)
    assert np.std(xy[:, 0]) > 20 * np.std(xy[:, 1])
    assert project_2d(np.ones((1, 4))).shape == (1, 2)


def test_clusters_join_pairs_within_a_group_only() -> None:
    # Rows 0, 1 and 2 at 0, 16 and 32 degrees: neighbours at cosine 0.96, the ends at 0.85.
    angles = np.radians([0, 16, 32])
    vectors = np.array([*([np.cos(a), np.sin(a), 0] for a in angles), [0, 1, 0], [1, 0, 0.01], [0, 0, 1]])
    labels, pairs = near_duplicate_clusters(vectors, ["u", "u", "u", "u", "v", "u"], 0.95)
    # 0-1 and 1-2 pass the bar (0-2 does not): one cluster of three, through 1. Row 4 is another user's.
    assert labels.tolist() == [0, 0, 0, -1, -1, -1]
    assert sorted(map(tuple, pairs[["a", "b"]].to_numpy().tolist())) == [(0, 1), (1, 2)]
    labels, pairs = near_duplicate_clusters(vectors[:4], ["u"] * 4, 0.999)
    assert pairs.empty and (labels == -1).all()


def test_recall_at_k_counts_each_piece_of_evidence_once() -> None:
    ranked = [["m1"], ["x"], ["m2", "m1"], ["m3"]]
    assert recall_at(ranked, {"m1", "m2"}, [1, 2, 3, 10]) == [0.5, 0.5, 1.0, 1.0]
    assert recall_at([], {"m1"}, [1, 5]) == [0.0, 0.0]


def test_language_of() -> None:
    assert language_of("What pet does Caroline have?") == "en"
    assert language_of("我写代码全都在Neovim里。") == "zh"
