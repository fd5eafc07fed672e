"""Pure unit tests of the steps that spread evidence over turns (no store, no model)."""

from __future__ import annotations

import numpy as np

from agent_memory import scoring, spread
from agent_memory.store import Turns


def turns_of(session: list[int], previous: list[int], following: list[int], vectors: np.ndarray | None = None,
             session_cosine: list[float] | None = None, session_bm25: list[float] | None = None) -> Turns:
    n = len(session)
    return Turns(
        session=np.array(session), previous=np.array(previous), following=np.array(following), vectors=vectors,
        session_cosine=np.array(session_cosine or [np.nan] * n), session_bm25=np.array(session_bm25 or [np.nan] * n),
    )


def test_a_turn_scores_at_least_a_share_of_its_better_neighbour() -> None:
    # 0 -> 1 -> 2 in one session; 3 alone.
    turns = turns_of([0, 0, 0, 1], [-1, 0, 1, -1], [1, 2, -1, -1])
    scores = np.array([0.1, 0.9, 0.2, 0.05])
    lifted = spread.lift_neighbours(scores, turns, 0.5)
    assert lifted.tolist() == [0.45, 0.9, 0.45, 0.05]
    assert spread.lift_neighbours(scores, turns, 0.0) is scores


def test_session_relevance_mixes_in_and_memories_of_no_session_keep_their_score() -> None:
    turns = turns_of([0, 0, -1], [-1, 0, -1], [1, -1, -1], session_cosine=[0.6, 0.6, np.nan],
                     session_bm25=[4.0, 4.0, np.nan])
    weights = scoring.Weights(semantic=0.5, keyword=0.5, recency=0.0, importance=0.0)
    relevance = spread.session_relevance(turns, weights, 1.0, 1.0)
    assert relevance[0] == relevance[1] > 0 and relevance[2] == 0
    lifted = spread.lift_sessions(np.array([0.2, 0.4, 0.3]), relevance, 0.5)
    assert lifted[2] == 0.3 and lifted[0] == 0.5 * 0.2 + 0.5 * relevance[0]


def test_feedback_moves_the_query_towards_the_best_memories() -> None:
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    query = np.array([1.0, 0.0])
    cosine = vectors @ query
    turns = turns_of([0, 0, 0], [-1, 0, 1], [1, 2, -1], vectors=vectors)
    moved = spread.feedback_cosine(cosine, np.array([0.5, 0.9, 0.1]), turns, depth=1, weight=1.0)
    # The query moved halfway to memory 1: it now scores memory 2 higher than before, and its
    # cosines are those of a unit vector.
    expected = vectors @ ((query + vectors[1]) / np.linalg.norm(query + vectors[1]))
    assert np.allclose(moved, expected)
    assert spread.feedback_cosine(cosine, cosine, turns, depth=0, weight=1.0) is cosine


def test_diversity_passes_over_a_paraphrase_of_a_memory_already_picked() -> None:
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    scores = np.array([0.9, 0.85, 0.8])
    assert spread.diverse_top([0, 1, 2], scores, vectors, 2, 0.0) == [0, 1]
    assert spread.diverse_top([0, 1, 2], scores, vectors, 2, 0.5) == [0, 2]


def test_a_memory_that_only_asks_keeps_half_its_semantic_signal() -> None:
    from datetime import datetime, timezone

    from agent_memory.recall import Asked, rank
    from agent_memory.settings import Settings
    from agent_memory.store import Pool

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    # The assistant's question is nearer the question asked than the answer after it is.
    pool = Pool(ids=["question", "answer"], cosine=np.array([0.6, 0.5]), bm25=np.array([2.0, 2.0]),
                created_at=np.full(2, now.timestamp()), importance=np.full(2, 0.5), oov=np.zeros(2),
                asks=np.array([True, False]))
    asked = Asked.of("家庭情况是怎样的？", as_of=now)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert [i for i, _, _ in rank(pool, asked, 0.0, settings, "hybrid", 2, 0.0)] == ["answer", "question"]
    kept = settings.replace(asking_semantic_share=1.0)
    assert [i for i, _, _ in rank(pool, asked, 0.0, kept, "hybrid", 2, 0.0)] == ["question", "answer"]

