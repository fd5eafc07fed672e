"""Clustering one user's memories into restatements of one fact.

Clustering is complete linkage over a "may merge" graph. Two memories are linked when they are
exact duplicates, or when they agree on what embedding models blur (negation: "I like X" and "I
don't like X" score as near-identical; other people: "the user's wife likes tea", "我同事喜欢喝
咖啡"; time and intent: "used to have", "打算去"; names and numbers: "Lufthansa", "AB-", "五千四";
roles and relations: "from Berlin to Munich", "works in Lagos" and "is from Lagos"; see
`agent_memory.stance` and `agent_memory.wording`) and either the model reads both and their
cosine similarity reaches the bar for how their content words differ (`consolidation_similarity`
for the same words, `consolidation_reworded_similarity` for one word swapped, where a synonym and
another thing look alike to the model: "named" for "called", "cat" for "dog";
`consolidation_rephrased_similarity` for other wording that shares a content word), or, where the
model cannot read a text (Chinese with the bundled English model embeds every sentence alike, so
cosine says nothing), they use the same content words and their lexical similarity reaches
`consolidation_lexical_similarity`. Complete linkage merges two groups only when every pair
across them is linked, so a chain of small steps ("likes tea" ~ "likes green tea" ~ "likes green
tea and coffee" ~ ...) never fuses facts that are not restatements of each other, as single
linkage (connected components) would. Linkage is repeated over the survivors until nothing more
merges, so that a second run finds nothing to do.

Pairs the rules refuse but that come close (near misses) may be put to a judge (an LLM, see
`agent_memory.judges`); the pairs it confirms are linked too. So may the rules' doubtful links
(a word swapped, other wording, Chinese not word for word the same): a pair it calls two facts
is unlinked before anything merges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations, zip_longest
from typing import Any

import numpy as np

from agent_memory.merge import apart_ids
from agent_memory.models import MemoryRecord
from agent_memory.settings import Settings
from agent_memory.stance import Stance, aspect, aspects_clash, stance
from agent_memory.text import CHINESE_STOPWORDS, CJK_RUN, terms
from agent_memory.wording import (
    changes_relation,
    content_characters,
    content_sequence,
    exact_key,
    lexical_features,
    names,
    owned_terms,
    rewording,
    role_tokens,
    swaps_roles,
    weighted_overlap,
    word_set,
)

# Prepositions, particles and pronouns: one of them more changes no word ("我对乳糖不耐受").
_FUNCTION_CHARACTERS = frozenset(w for w in CHINESE_STOPWORDS if len(w) == 1) | frozenset("于以为由从在对向")

# Given pairs of statements, the indices of the pairs that state the same fact (an LLM's
# verdict), or None when it gave none (the model failed): then no pair is confirmed.
Judge = Callable[[Sequence[tuple[str, str]]], "set[int] | None"]
Links = dict[int, dict[int, float]]
# (similarity, i, j): pairs the rules refused that a judge may still find to be restatements.
NearMiss = tuple[float, int, int]


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


@dataclass(frozen=True)
class _Texts:
    """What linking compares of one partition's memories, each computed once per memory."""

    keys: list[str]
    stances: list[Stance]
    aspects: list[str]
    sequences: list[list[str]]
    unreadable: list[bool]
    named: list[tuple[frozenset[str], frozenset[str]]]
    owned: list[frozenset[str]]
    # Memories restored apart from one another (an undone merge): never linked again.
    ids: list[str]
    apart: list[frozenset[str]]
    roles: list[tuple[str, ...]]
    features: list[frozenset[str]]
    chars: list[frozenset[str]]
    # Each feature's idf over the user's memories of every status (stable from run to run), when given.
    corpus_idf: dict[str, float] | None = None
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Sequence[MemoryRecord], settings: Settings, idf: dict[str, float] | None = None) -> _Texts:
        """The texts of `records` (what they say: `vector_text`), and which the model cannot read."""
        said = [r.vector_text for r in records]
        sequences = [content_sequence(t) for t in said]
        return cls(
            keys=[exact_key(t) for t in said],
            stances=[stance(t) for t in said],
            aspects=[aspect(t) for t in said],
            sequences=sequences,
            unreadable=[r.oov > settings.consolidation.oov_guard for r in records],
            named=[(names(t), word_set(t)) for t in said],
            owned=[owned_terms(t) for t in said],
            ids=[r.id for r in records],
            apart=[frozenset(apart_ids(r)) for r in records],
            roles=[role_tokens(t) for t in said],
            features=[lexical_features(t) for t in said],
            chars=[content_characters(t) for t in said],
            corpus_idf=idf,
        )

    def idf(self) -> dict[str, float]:
        """Each feature's inverse document frequency over the user's memories (else these)."""
        return self.corpus_idf if self.corpus_idf is not None else feature_idf(self.features)

    def swapped(self, i: int, j: int) -> bool:
        """Whether the two say another thing in the same frame: each has content characters the
        other lacks ("最常去京东", "最常去天猫"; a synonym too), or one changes a word of the other
        ("养了猫", "养了龙猫"), by a word or a single character. An added qualifier ("大多数时候")
        is a word of its own."""
        a, b = self.chars[i], self.chars[j]
        if a - b and b - a:
            return True
        extra = (a - b) | (b - a)
        if len(extra) == 1 and CJK_RUN.match(next(iter(extra))) and not extra & _FUNCTION_CHARACTERS:
            return True  # one character more modifies a word ("猫", "龙猫"; "茶", "红茶"); a qualifier is a word
        for mine, other in ((i, b), (j, a)):
            for word in self.features[mine]:
                word = word.replace("我", "")  # the subject, folded out of the characters compared
                if len(word) > 1 and CJK_RUN.match(word) and any(c in other for c in word) and any(c not in other for c in word):
                    return True
        return False

    def kept_apart(self, i: int, j: int) -> bool:
        """Whether one of the two was restored apart from the other."""
        return self.ids[j] in self.apart[i] or self.ids[i] in self.apart[j]

    def agree(self, i: int, j: int) -> bool:
        """The same negation, people, time and intent, aspect (done or still going on), names and
        numbers, roles and relations to what both name; never two kept apart."""
        if self.kept_apart(i, j):
            return False
        (names_i, words_i), (names_j, words_j) = self.named[i], self.named[j]
        return (self.stances[i] == self.stances[j] and names_i <= words_j and names_j <= words_i
                and not aspects_clash(self.aspects[i], self.aspects[j])
                and not swaps_roles(self.roles[i], self.roles[j]) and not changes_relation(self.roles[i], self.roles[j]))


def feature_idf(features: Sequence[frozenset[str]]) -> dict[str, float]:
    """Each lexical feature's inverse document frequency over a user's memories."""
    counts: dict[str, int] = {}
    for own in features:
        for feature in own:
            counts[feature] = counts.get(feature, 0) + 1
    n = len(features)
    return {f: math.log(1 + n / c) for f, c in counts.items()}


def corpus_idf(records: Sequence[MemoryRecord]) -> dict[str, float]:
    """The idf of `lexical_features` over memories of every status: superseded ones stay in it,
    so a merge does not change the weights the next run compares with."""
    return feature_idf([lexical_features(r.vector_text) for r in records])


def _links(
    records: Sequence[MemoryRecord], vectors: np.ndarray, settings: Settings, *, near_misses: bool = False,
    idf: dict[str, float] | None = None, texts: _Texts | None = None,
) -> tuple[Links, list[NearMiss]]:
    """The may-merge graph of one partition (i -> {j: similarity}), and with `near_misses` the
    pairs the rules refused but that have the same stance and names, a shared content word, and a
    cosine or (where the model cannot read a text) lexical similarity above the judge's bars,
    ranked for asking: the most similar first, cosine and lexical ones taking turns, as their
    scores are not on one scale."""
    n = len(records)
    links: Links = {i: {} for i in range(n)}
    if n < 2:
        return links, []
    texts = texts or _Texts.of(records, settings, idf)
    judge_bar = settings.consolidation.judge_similarity if near_misses else 1.0
    cosine_misses = _link_readable(texts, vectors, settings, links, judge_bar)
    _link_lexical(texts, vectors, settings, links)
    _link_duplicates(texts, links)
    if not near_misses:
        return links, []
    lexical_misses = _lexical_misses(texts, settings, links)
    ranked = [sorted(kind, key=lambda m: (-m[0], m[1], m[2])) for kind in (cosine_misses, lexical_misses)]
    return links, [m for pair in zip_longest(*ranked) for m in pair if m is not None]


def _link_readable(texts: _Texts, vectors: np.ndarray, settings: Settings, links: Links,
                   judge_bar: float) -> list[NearMiss]:
    """Link the texts the model reads by cosine similarity, blocked 1,024 rows at a time; return
    the pairs that agree but fall short of their bar while reaching `judge_bar`.

    The same content terms in another order or inflection link at `consolidation_similarity`; one
    term swapped needs `consolidation_reworded_similarity`, other wording
    `consolidation_rephrased_similarity`.
    """
    keys, sequences, owned = texts.keys, texts.sequences, texts.owned
    readable = [i for i, unreadable in enumerate(texts.unreadable) if not unreadable]
    same_bar = settings.consolidation.similarity
    needed = {
        "same": same_bar - 1e-6,
        "reworded": max(same_bar, settings.consolidation.reworded_similarity) - 1e-6,
        "rephrased": max(same_bar, settings.consolidation.rephrased_similarity) - 1e-6,
    }
    misses: list[NearMiss] = []
    matrix = vectors[readable]
    for start in range(0, len(readable), 1024):
        sims = matrix[start : start + 1024] @ matrix.T
        rows, cols = np.nonzero(sims >= min(*needed.values(), judge_bar))
        for a_local, b in zip(rows.tolist(), cols.tolist(), strict=True):
            i, j = readable[start + a_local], readable[b]
            if j <= i:
                continue
            if keys[i] == keys[j]:
                if not texts.kept_apart(i, j):
                    links[i][j] = links[j][i] = 1.0
                continue
            kind = rewording(sequences[i], sequences[j], owned[i] | owned[j]) if texts.agree(i, j) else None
            similarity = float(sims[a_local, b])
            if kind is not None and similarity >= needed[kind]:
                links[i][j] = links[j][i] = similarity
            elif kind is not None and similarity >= judge_bar:
                misses.append((similarity, i, j))
    return misses


def _link_lexical(texts: _Texts, vectors: np.ndarray, settings: Settings, links: Links) -> None:
    """Link by wording, with the same stance and roles: a pair with a text the model cannot read
    at an order-free lexical similarity (`weighted_overlap` of words and characters, idf over
    these memories) of at least `consolidation_lexical_similarity`; any other pair when it says
    the same content words at a cosine of at least 0.6 ("I'm allergic to cats", "the user is
    allergic to cats": 0.77, where the model scores the first person and the third apart).

    Texts the model cannot read embed alike, so their cosine says nothing. Only pairs that share
    a feature are compared (an inverted index), so a user with many memories costs no full
    pairwise pass.
    """
    bar = settings.consolidation.lexical_similarity
    for similarity, i, j in _lexical_pairs(texts):
        unreadable = texts.unreadable[i] or texts.unreadable[j]
        if unreadable:
            close = similarity >= bar and not texts.swapped(i, j)
        else:  # the same words, and a cosine that does not say they mean something else
            close = similarity >= 1.0 - 1e-9 and float(vectors[i] @ vectors[j]) >= _SAME_WORDS_MIN_COSINE
        if close and j not in links[i] and texts.agree(i, j):
            links[i][j] = links[j][i] = similarity


# Where the model reads both, the same content words link from this cosine: "I'm allergic to
# cats" and "the user is allergic to cats" score 0.77, "Anna is my boss" and "I am Anna's boss" 0.25.
_SAME_WORDS_MIN_COSINE = 0.6

def _lexical_pairs(texts: _Texts) -> list[NearMiss]:
    """(similarity, i, j) of the pairs with an unreadable text that share a feature few of the
    user's memories hold, and of every other pair with the same features; computed once per
    `_Texts`."""
    if "lexical_pairs" in texts.cache:
        return texts.cache["lexical_pairs"]
    unreadable, features = texts.unreadable, texts.features
    pairs: set[tuple[int, int]] = set()
    same: dict[frozenset[str], list[int]] = {}
    for i, own in enumerate(features):
        if own:
            same.setdefault(own, []).append(i)
    for members in same.values():
        pairs.update(combinations(members, 2))
    if any(unreadable):
        holders: dict[str, list[int]] = {}
        for i, own in enumerate(features):
            for feature in own:
                holders.setdefault(feature, []).append(i)
        # A feature most of the user's memories hold says little: it is no key (texts made only of
        # such features meet in the bucket of equal features above).
        common = max(50, len(features) // 20)
        for i, own in enumerate(features):
            for key in (f for f in own if len(holders[f]) <= common):
                pairs.update((min(i, j), max(i, j)) for j in holders[key] if j != i and (unreadable[i] or unreadable[j]))
    idf = texts.idf() if pairs else {}
    found = [(weighted_overlap(features[i], features[j], idf), i, j) for i, j in sorted(pairs)]
    texts.cache["lexical_pairs"] = found
    return found


def _link_duplicates(texts: _Texts, links: Links) -> None:
    """Link exact duplicates, whatever their vectors."""
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(texts.keys):
        if key:
            by_key.setdefault(key, []).append(i)
    for same in by_key.values():
        for a in same:
            for b in same:
                if a != b and not texts.kept_apart(a, b):
                    links[a][b] = 1.0


def _lexical_misses(texts: _Texts, settings: Settings, links: Links) -> list[NearMiss]:
    """Near misses where the model cannot read a text: unlinked pairs that agree, with some
    lexical similarity (the judge reads the language the model cannot)."""
    lexical_bar = settings.consolidation.judge_lexical_similarity
    return [(similarity, i, j) for similarity, i, j in _lexical_pairs(texts)
            if (texts.unreadable[i] or texts.unreadable[j]) and similarity >= lexical_bar and j not in links[i]
            and texts.agree(i, j)]


def _doubtful(texts: _Texts, links: Links) -> list[NearMiss]:
    """The rules' links that rest on closeness rather than on the same words in the same order:
    where the model reads both, one content word swapped or other wording ("likes cats", "likes
    dogs" score alike) and the same words in another order (roles may be swapped); where it
    cannot (Chinese with the bundled model), a lexical similarity short of identical. Exact
    duplicates, and the same content words in the same order, are not in doubt."""
    found = [(similarity, i, j) for i in links for j, similarity in links[i].items()
             if j > i and _in_doubt(texts, i, j, similarity)]
    return sorted(found)  # the least similar first: the most in doubt


def _in_doubt(texts: _Texts, i: int, j: int, similarity: float) -> bool:
    if texts.keys[i] == texts.keys[j]:
        return False
    if texts.unreadable[i] or texts.unreadable[j]:
        return similarity < 1.0 - 1e-9
    # The same content words in another order may swap who does what ("prefers tea over coffee").
    return texts.sequences[i] != texts.sequences[j]


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
        texts = _Texts.of(part, settings, idf)
        links, misses = _links(part, vectors[indices], settings, near_misses=asking is not None, texts=texts)
        if asking is not None and settings.consolidation.judge_reviews:
            asking.review(part, links, _doubtful(texts, links))
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


def _signals(texts: _Texts, i: int, j: int, cosine: float, linked: bool, idf: dict[str, float]) -> dict[str, Any]:
    (neg_i, people_i, time_i), (neg_j, people_j, time_j) = texts.stances[i], texts.stances[j]
    lexical = weighted_overlap(texts.features[i], texts.features[j], idf)
    return {
        "linked": linked,
        # Linked on closeness, not the same words: an LLM judge, where configured, reviews it.
        "doubtful": linked and _in_doubt(texts, i, j, lexical),
        "exact": texts.keys[i] == texts.keys[j],
        "kept_apart": texts.kept_apart(i, j),
        "negation": [neg_i, neg_j],
        "people": [sorted(people_i), sorted(people_j)],
        "time": [sorted(time_i), sorted(time_j)],
        "names": [sorted(texts.named[i][0]), sorted(texts.named[j][0])],
        "roles_swapped": swaps_roles(texts.roles[i], texts.roles[j]),
        "words_swapped": texts.swapped(i, j),
        "stance_agrees": texts.agree(i, j),
        "wording": rewording(texts.sequences[i], texts.sequences[j], texts.owned[i] | texts.owned[j]),
        "model_reads": not (texts.unreadable[i] or texts.unreadable[j]),
        "cosine": round(cosine, 3),
        "lexical": round(lexical, 3),
    }


def pair_signals(a: MemoryRecord, b: MemoryRecord, vector_a: np.ndarray, vector_b: np.ndarray,
                 settings: Settings) -> dict[str, Any]:
    """What linking reads of one pair, and whether it links them (idf over the two alone)."""
    texts = _Texts.of([a, b], settings)
    links, _ = _links([a, b], np.stack([vector_a, vector_b]), settings, texts=texts)
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
        partitions.setdefault((r.memory_type, r.team_id, r.agent_id), []).append(i)
    for indices in partitions.values():
        part = [records[i] for i in indices]
        part_vectors = vectors[indices]
        texts = _Texts.of(part, settings, idf)
        links, _ = _links(part, part_vectors, settings, texts=texts)
        weights = texts.idf()
        sims = part_vectors @ part_vectors.T
        readable = ~np.asarray(texts.unreadable, dtype=bool)
        close = np.triu(sims >= settings.consolidation.judge_similarity, 1) & readable[:, None] & readable[None, :]
        near = {(int(i), int(j)) for i, j in zip(*np.nonzero(close), strict=True)}
        near |= {(i, j) for i in links for j in links[i] if i < j}
        near |= {(i, j) for similarity, i, j in _lexical_pairs(texts)
                 if similarity >= settings.consolidation.judge_lexical_similarity}
        for i, j in sorted(near):
            out.append({"a": {"id": part[i].id, "content": part[i].content},
                        "b": {"id": part[j].id, "content": part[j].content},
                        **_signals(texts, i, j, float(sims[i, j]), j in links[i], weights)})
    return out
