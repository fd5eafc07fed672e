"""What linking (`agent_memory.linking`) read of a pair of memories and what it decided: the
signals `consolidate --dry-run` prints for the pairs it looked at closely, and that the
consolidation benchmarks show for their wrong merges and missed pairs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_memory.linking import PartitionTexts, in_doubt, lexical_pairs, link_graph
from agent_memory.models import MemoryRecord
from agent_memory.settings import Settings
from agent_memory.wording import rewording, weighted_overlap


def _signals(texts: PartitionTexts, i: int, j: int, cosine: float, linked: bool, idf: dict[str, float]) -> dict[str, Any]:
    (neg_i, people_i, time_i), (neg_j, people_j, time_j) = texts.stances[i], texts.stances[j]
    lexical = weighted_overlap(texts.features[i], texts.features[j], idf)
    return {
        "linked": linked,
        # Linked on closeness, not the same words: an LLM judge, where configured, reviews it.
        "doubtful": linked and in_doubt(texts, i, j, lexical),
        "exact": texts.keys[i] == texts.keys[j],
        "kept_apart": texts.kept_apart(i, j),
        "negation": [neg_i, neg_j],
        "people": [sorted(people_i), sorted(people_j)],
        "time": [sorted(time_i), sorted(time_j)],
        "names": [sorted(texts.named[i][0]), sorted(texts.named[j][0])],
        "roles_swapped": texts.roles_swapped(i, j),
        "words_swapped": texts.swapped(i, j),
        "stance_agrees": texts.agree(i, j),
        "wording": rewording(texts.sequences[i], texts.sequences[j], texts.owned[i] | texts.owned[j]),
        "model_reads": not (texts.unreadable[i] or texts.unreadable[j]),
        # Linked on one text put in the other's words where the dictionary gives both one sense,
        # or on two glosses that say the same words.
        "dictionary": (min(i, j), max(i, j)) in texts.bridged,
        "cosine": round(cosine, 3),
        "lexical": round(lexical, 3),
    }


def pair_signals(a: MemoryRecord, b: MemoryRecord, vector_a: np.ndarray, vector_b: np.ndarray,
                 settings: Settings) -> dict[str, Any]:
    """What linking reads of one pair, and whether it links them (idf over the two alone)."""
    texts = PartitionTexts.of([a, b], settings)
    links, _ = link_graph([a, b], np.stack([vector_a, vector_b]), settings, texts=texts)
    return _signals(texts, 0, 1, float(np.dot(vector_a, vector_b)), 1 in links[0], texts.idf())


def candidate_pairs(records: Sequence[MemoryRecord], vectors: np.ndarray, settings: Settings,
                    idf: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Every pair of one user's memories that linking looked at closely, with the signals that
    decided it (what `consolidate --dry-run` prints): pairs it linked, and pairs that came within
    the judge's bars (a cosine of `consolidation_judge_similarity` where the model reads both, a
    lexical similarity of `consolidation_judge_lexical_similarity` where it cannot)."""
    out: list[dict[str, Any]] = []
    partitions: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(records):
        partitions.setdefault((r.memory_type, r.team_id, r.agent_id, r.visibility), []).append(i)
    for indices in partitions.values():
        part = [records[i] for i in indices]
        part_vectors = vectors[indices]
        texts = PartitionTexts.of(part, settings, idf)
        links, _ = link_graph(part, part_vectors, settings, texts=texts)
        weights = texts.idf()
        sims = part_vectors @ part_vectors.T
        readable = ~np.asarray(texts.unreadable, dtype=bool)
        close = np.triu(sims >= settings.consolidation.judge_similarity, 1) & readable[:, None] & readable[None, :]
        near = {(int(i), int(j)) for i, j in zip(*np.nonzero(close), strict=True)}
        near |= {(i, j) for i in links for j in links[i] if i < j}
        near |= {(i, j) for similarity, i, j in lexical_pairs(texts)
                 if similarity >= settings.consolidation.judge_lexical_similarity}
        for i, j in sorted(near):
            out.append({"a": {"id": part[i].id, "content": part[i].content},
                        "b": {"id": part[j].id, "content": part[j].content},
                        **_signals(texts, i, j, float(sims[i, j]), j in links[i], weights)})
    return out
