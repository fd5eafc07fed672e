"""Clustering one user's memories into restatements of one fact.

Clustering is complete linkage over the "may merge" graph of `agent_memory.linking`, which links
two memories only when they agree on what embedding models blur and come close enough for how
their wording differs. Complete linkage merges two groups only when every pair across them is
linked, so a chain of small steps ("likes tea" ~ "likes green tea" ~ "likes green tea and coffee"
~ ...) never fuses facts that are not restatements of each other, as single linkage (connected
components) would. Linkage is repeated over the survivors until nothing more merges, so that a
second run finds nothing to do.

Pairs the rules refuse but that come close (near misses) may be put to a judge (an LLM, see
`agent_memory.judges`); the pairs it confirms are linked too. So may the rules' doubtful links
(a word swapped, other wording, Chinese not word for word the same): a pair it calls two facts
is unlinked before anything merges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent_memory.linking import Links, NearMiss, PartitionTexts, doubtful_links, link_graph
from agent_memory.merge import apart_ids
from agent_memory.models import MemoryRecord
from agent_memory.settings import Settings
from agent_memory.text import terms

# Given pairs of statements, the indices of the pairs that state the same fact (an LLM's
# verdict), or None when it gave none (the model failed): then no pair is confirmed.
Judge = Callable[[Sequence[tuple[str, str]]], "set[int] | None"]


@dataclass
class Cluster:
    """Memories that say the same thing, and the one that will stand for them."""

    canonical: MemoryRecord
    others: list[MemoryRecord]
    min_similarity: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON a dry run prints."""
        return {
            "user_id": self.canonical.user_id,
            "canonical": {"id": self.canonical.id, "content": self.canonical.content},
            "merged": [{"id": o.id, "content": o.content} for o in self.others],
            "min_similarity": round(self.min_similarity, 3),
        }


class _JudgedPairs:
    """The pairs one user's planning has put to a judge: each near miss is asked about once, and
    the rules' doubtful links once, before anything merges."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.asked: set[tuple[int, int, int]] = set()

    def review(self, records: Sequence[MemoryRecord], links: Links, doubtful: list[NearMiss]) -> None:
        """Unlink the doubtful links the judge finds to be two facts ("不喝咖啡，只喝茶" against
        "不喝茶，只喝咖啡" in words the guards missed); a pair without a verdict stays linked."""
        if not doubtful:
            return
        pairs = [(records[i].content, records[j].content) for _, i, j in doubtful]
        refuse = getattr(self.judge, "refused", None)  # a judge that remembers knows what it did not ask
        if refuse is not None:
            different = refuse(pairs)
        else:
            same = self.judge(pairs)
            different = set() if same is None else set(range(len(pairs))) - same
        for k in different:
            _, i, j = doubtful[k]
            links[i].pop(j, None)
            links[j].pop(i, None)

    def confirm(self, part_key: int, records: Sequence[MemoryRecord], links: Links, misses: list[NearMiss],
                alive: set[int]) -> bool:
        """Ask about the near misses among `alive` not yet linked or asked; link the confirmed ones."""
        pending = [m for m in misses if m[1] in alive and m[2] in alive and m[2] not in links[m[1]]
                   and (part_key, m[1], m[2]) not in self.asked]
        if not pending:
            return False
        self.asked.update((part_key, i, j) for _, i, j in pending)
        verdict = self.judge([(records[i].content, records[j].content) for _, i, j in pending]) or set()
        confirmed = sorted(k for k in verdict if 0 <= k < len(pending))
        for k in confirmed:
            similarity, i, j = pending[k]
            links[i][j] = links[j][i] = similarity
        return bool(confirmed)



def _complete_linkage(nodes: list[int], links: Links) -> list[list[int]]:
    """Groups of `nodes` in which every pair is linked, joined strongest link first."""
    group_of = {n: n for n in nodes}
    members = {n: [n] for n in nodes}
    present = set(nodes)
    edges = sorted(
        ((s, a, b) for a in nodes for b, s in links[a].items() if b in present and a < b),
        key=lambda e: (-e[0], e[1], e[2]),
    )
    for _, a, b in edges:
        ga, gb = group_of[a], group_of[b]
        if ga == gb:
            continue
        if all(y in links[x] for x in members[ga] for y in members[gb]):
            if len(members[gb]) > len(members[ga]):
                ga, gb = gb, ga
            for x in members[gb]:
                group_of[x] = ga
            members[ga].extend(members.pop(gb))
    return [sorted(m) for m in members.values()]


def _unlink_kept_apart(part: Sequence[MemoryRecord], groups: dict[int, list[int]], links: Links,
                       apart: dict[str, set[str]]) -> None:
    """Drop the links between survivors whose groups hold two memories kept apart: a restored
    memory never rejoins, through a third, the memory it was restored apart from."""
    for a in groups:
        for b in [b for b in links[a] if b in groups]:
            ids_a = {part[x].id for x in groups[a]}
            ids_b = {part[y].id for y in groups[b]}
            if any(apart.get(x, set()) & ids_b for x in ids_a) or any(apart.get(y, set()) & ids_a for y in ids_b):
                links[a].pop(b, None)
                links[b].pop(a, None)


def canonical_order(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """Best representative first: importance, then recency, then specificity (distinct terms)."""
    times = [r.created_at.timestamp() for r in records]
    spans = max(times) - min(times)
    specific = [len(set(terms(r.content))) for r in records]
    most = max(specific) or 1

    def score(i: int) -> tuple[float, str]:
        recency = (times[i] - min(times)) / spans if spans else 0.0
        return (0.5 * records[i].importance + 0.25 * recency + 0.25 * specific[i] / most, records[i].id)

    order = sorted(range(len(records)), key=score, reverse=True)
    return [records[i] for i in order]


def cluster_memories(
    records: Sequence[MemoryRecord],
    vectors: np.ndarray,
    settings: Settings,
    judge: Judge | None = None,
    idf: dict[str, float] | None = None,
) -> list[Cluster]:
    """Clusters of restatements among one user's active memories (each of two or more); `idf`
    weighs lexical features (`corpus_idf` of all the user's memories; else these)."""
    partitions: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(records):
        # Merging across these would change what a typed, team or agent recall sees.
        partitions.setdefault((r.memory_type, r.team_id, r.agent_id), []).append(i)
    clusters: list[Cluster] = []
    asking = _JudgedPairs(judge) if judge is not None else None
    for part_key, indices in enumerate(partitions.values()):
        part = [records[i] for i in indices]
        texts = PartitionTexts.of(part, settings, idf)
        links, misses = link_graph(part, vectors[indices], settings, near_misses=asking is not None, texts=texts)
        if asking is not None and settings.consolidation.judge_reviews:
            asking.review(part, links, doubtful_links(texts, links))
        # Survivor -> the partition indices it stands for; repeat until nothing more merges. The
        # judge is asked only when the rules' links are used up, and only about survivors: a
        # merge's survivor may lack a link its absorbed memories had, so it is asked again.
        groups: dict[int, list[int]] = {i: [i] for i in range(len(part))}
        apart = {r.id: set(apart_ids(r)) for r in part if apart_ids(r)}
        while True:
            if apart:
                _unlink_kept_apart(part, groups, links, apart)
            joined = [g for g in _complete_linkage(sorted(groups), links) if len(g) > 1]
            if not joined:
                if asking is not None and asking.confirm(part_key, part, links, misses, set(groups)):
                    continue
                break
            for group in joined:
                best = canonical_order([part[i] for i in group])[0]
                keep = next(i for i in group if part[i].id == best.id)
                absorbed = [m for i in group for m in groups.pop(i)]
                groups[keep] = absorbed
        for keep, absorbed in groups.items():
            if len(absorbed) > 1:
                others = [part[i] for i in absorbed if i != keep]
                pair_sims = [links[a].get(b, 0.0) for a in absorbed for b in absorbed if a < b]
                clusters.append(Cluster(part[keep], others, min(pair_sims) if pair_sims else 1.0))
    clusters.sort(key=lambda c: c.canonical.id)
    return clusters
