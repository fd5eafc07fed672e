"""Evidence spread over turns: steps after fusion that use where a memory sits in its conversation.

A question's answer is often in more than one turn, or in a turn that says little by itself
("Yes, last week!" after the question that names the thing). Each step below works on the fused
scores of a pool whose turns a per-user scan knows (`Pool.turns`) and can be turned off by its
setting (0):

- **feedback** (`recall_feedback_depth`, `recall_feedback_weight`): the query vector moves
  towards the mean of the best few memories (pseudo-relevance feedback, Rocchio's), and the
  semantic signal is scored again;
- **session** (`recall_session_weight`): a memory's score mixes in how well its whole session
  matches (its turns' mean vector, their terms as one document), LongMemEval's finding that
  the session that holds an answer matches as a whole;
- **neighbours** (`recall_neighbour_share`): a turn scores at least this share of the better
  of the turns next to it;
- **diversity** (`recall_diversity`): the top k is picked by maximal marginal relevance, so
  that ten paraphrases of one fact do not fill it.
"""

from __future__ import annotations

import numpy as np

from agent_memory import scoring
from agent_memory.setting_groups import RecallSettings
from agent_memory.store import Turns


def wanted(config: RecallSettings) -> bool:
    """Whether any step is on: only then does a search read where the memories sit."""
    return (config.feedback_depth > 0 and config.feedback_weight > 0) or config.session_weight > 0 \
        or config.neighbour_share > 0 or config.diversity > 0


def feedback_cosine(cosine: np.ndarray, scores: np.ndarray, turns: Turns, depth: int, weight: float) -> np.ndarray:
    """Each memory's cosine with the query moved `weight` towards the mean vector of the `depth`
    best-scored memories (the query is a unit vector; its cosines are all this needs of it)."""
    vectors = turns.vectors
    if vectors is None or depth <= 0 or weight <= 0 or not len(scores):
        return cosine
    best = np.argsort(-scores, kind="stable")[:depth]
    centroid = vectors[best].mean(axis=0)
    base = np.nan_to_num(cosine, nan=0.0)
    toward = base[best].mean()  # the query's cosine with the centroid
    norm = np.sqrt(max(1e-12, 1.0 + 2.0 * weight * toward + weight**2 * float(centroid @ centroid)))
    return (base + weight * (vectors @ centroid)) / norm


def session_relevance(turns: Turns, weights: scoring.Weights, trust: np.ndarray | float,
                      semantic_scale: float) -> np.ndarray:
    """How well each memory's session matches as one document, 0..1: its semantic and keyword
    signals scaled to the best session, fused with the weights of the memories' own."""
    has = turns.session >= 0
    semantic = np.zeros(len(turns.session))
    keyword = np.zeros(len(turns.session))
    if has.any():
        semantic[has] = scoring.semantic(turns.session_cosine[has], semantic_scale)
        keyword[has] = scoring.keyword_scores(turns.session_bm25[has])
    w_sem = weights.semantic * np.asarray(trust, dtype=np.float64)
    share = w_sem + weights.keyword
    matched = w_sem * semantic + weights.keyword * keyword
    return np.where(share > 0, matched / np.where(share > 0, share, 1.0), 0.0)


def lift_sessions(scores: np.ndarray, relevance: np.ndarray, weight: float) -> np.ndarray:
    """Scores mixed with their session's relevance (`weight` of it); memories of no session keep theirs."""
    if weight <= 0:
        return scores
    return np.where(relevance > 0, (1.0 - weight) * scores + weight * relevance, scores)


def lift_neighbours(scores: np.ndarray, turns: Turns, share: float) -> np.ndarray:
    """Each turn's score, or `share` of the better of its neighbours' if that is more."""
    if share <= 0 or not len(scores):
        return scores
    padded = np.append(scores, 0.0)  # index -1: no neighbour
    beside = np.maximum(padded[turns.previous], padded[turns.following])
    return np.maximum(scores, share * beside)


def diverse_top(order: list[int], scores: np.ndarray, vectors: np.ndarray | None, top_k: int,
                diversity: float) -> list[int]:
    """The first `top_k` of `order` re-picked by maximal marginal relevance among its best
    max(3 top_k, top_k + 10): the best-scored first, then each next memory the one with the highest
    (1 - `diversity`) times its score less `diversity` times its highest cosine (at least 0) with a
    memory already picked."""
    if vectors is None or diversity <= 0 or len(order) <= 1:
        return order[:top_k]
    candidates = order[: max(3 * top_k, top_k + 10)]
    similar = vectors[candidates] @ vectors[candidates].T
    relevance = scores[candidates]
    picked: list[int] = []
    closest = np.full(len(candidates), -np.inf)
    left = np.ones(len(candidates), dtype=bool)
    while len(picked) < min(top_k, len(candidates)):
        value = np.where(left, (1.0 - diversity) * relevance - diversity * np.maximum(closest, 0.0), -np.inf)
        if not picked:
            value = np.where(left, relevance, -np.inf)
        best = int(np.argmax(value))
        picked.append(best)
        left[best] = False
        closest = np.maximum(closest, similar[best])
    return [candidates[i] for i in picked]
