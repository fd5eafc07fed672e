"""Which two of one user's memories may merge: the "may merge" graph that clustering
(`agent_memory.clustering`) groups.

Two memories are linked when they are exact duplicates, or when they agree on what embedding
models blur (negation: "I like X" and "I don't like X" score as near-identical; other people: "the
user's wife likes tea", "我同事喜欢喝咖啡"; time and intent: "used to have", "打算去"; names and
numbers: "Lufthansa", "AB-", "五千四"; roles and relations: "from Berlin to Munich", "works in
Lagos" and "is from Lagos"; see `agent_memory.stance` and `agent_memory.wording`) and either the
model reads both and their cosine similarity reaches the bar for how their content words differ
(`consolidation_similarity` for the same words, `consolidation_reworded_similarity` for one word
swapped, where a synonym and another thing look alike to the model: "named" for "called", "cat"
for "dog"; `consolidation_rephrased_similarity` for other wording that shares a content word), or,
where the model cannot read a text (Chinese with the bundled English model embeds every sentence
alike, so cosine says nothing), they use the same content words and their lexical similarity
reaches `consolidation_lexical_similarity`.

Pairs the rules refuse but that come close are near misses, which a judge may still confirm; the
links that rest on closeness rather than on the same words are doubtful, which a judge may
review. `pair_signals` and `candidate_pairs` say what linking read of a pair and what it decided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations, zip_longest
from typing import Any

import numpy as np

from agent_memory.merge import apart_ids
from agent_memory.models import MemoryRecord
from agent_memory.settings import Settings
from agent_memory.stance import Stance, aspect, aspects_clash, stance
from agent_memory.text import CHINESE_STOPWORDS, CJK_RUN
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
# i -> {j: similarity}: the may-merge graph of one partition.
Links = dict[int, dict[int, float]]
# (similarity, i, j): pairs the rules refused that a judge may still find to be restatements.
NearMiss = tuple[float, int, int]


@dataclass(frozen=True)
class PartitionTexts:
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
    def of(cls, records: Sequence[MemoryRecord], settings: Settings, idf: dict[str, float] | None = None) -> PartitionTexts:
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


def link_graph(
    records: Sequence[MemoryRecord], vectors: np.ndarray, settings: Settings, *, near_misses: bool = False,
    idf: dict[str, float] | None = None, texts: PartitionTexts | None = None,
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
    texts = texts or PartitionTexts.of(records, settings, idf)
    judge_bar = settings.consolidation.judge_similarity if near_misses else 1.0
    cosine_misses = _link_readable(texts, vectors, settings, links, judge_bar)
    _link_lexical(texts, vectors, settings, links)
    _link_duplicates(texts, links)
    if not near_misses:
        return links, []
    lexical_misses = _lexical_misses(texts, settings, links)
    ranked = [sorted(kind, key=lambda m: (-m[0], m[1], m[2])) for kind in (cosine_misses, lexical_misses)]
    return links, [m for pair in zip_longest(*ranked) for m in pair if m is not None]


def _link_readable(texts: PartitionTexts, vectors: np.ndarray, settings: Settings, links: Links,
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


def _link_lexical(texts: PartitionTexts, vectors: np.ndarray, settings: Settings, links: Links) -> None:
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


def _lexical_pairs(texts: PartitionTexts) -> list[NearMiss]:
    """(similarity, i, j) of the pairs with an unreadable text that share a feature few of the
    user's memories hold, and of every other pair with the same features; computed once per
    `PartitionTexts`."""
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


def _link_duplicates(texts: PartitionTexts, links: Links) -> None:
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


def _lexical_misses(texts: PartitionTexts, settings: Settings, links: Links) -> list[NearMiss]:
    """Near misses where the model cannot read a text: unlinked pairs that agree, with some
    lexical similarity (the judge reads the language the model cannot)."""
    lexical_bar = settings.consolidation.judge_lexical_similarity
    return [(similarity, i, j) for similarity, i, j in _lexical_pairs(texts)
            if (texts.unreadable[i] or texts.unreadable[j]) and similarity >= lexical_bar and j not in links[i]
            and texts.agree(i, j)]


def doubtful_links(texts: PartitionTexts, links: Links) -> list[NearMiss]:
    """The rules' links that rest on closeness rather than on the same words in the same order:
    where the model reads both, one content word swapped or other wording ("likes cats", "likes
    dogs" score alike) and the same words in another order (roles may be swapped); where it
    cannot (Chinese with the bundled model), a lexical similarity short of identical. Exact
    duplicates, and the same content words in the same order, are not in doubt."""
    found = [(similarity, i, j) for i in links for j, similarity in links[i].items()
             if j > i and _in_doubt(texts, i, j, similarity)]
    return sorted(found)  # the least similar first: the most in doubt


def _in_doubt(texts: PartitionTexts, i: int, j: int, similarity: float) -> bool:
    if texts.keys[i] == texts.keys[j]:
        return False
    if texts.unreadable[i] or texts.unreadable[j]:
        return similarity < 1.0 - 1e-9
    # The same content words in another order may swap who does what ("prefers tea over coffee").
    return texts.sequences[i] != texts.sequences[j]


def _signals(texts: PartitionTexts, i: int, j: int, cosine: float, linked: bool, idf: dict[str, float]) -> dict[str, Any]:
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
        partitions.setdefault((r.memory_type, r.team_id, r.agent_id), []).append(i)
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
        near |= {(i, j) for similarity, i, j in _lexical_pairs(texts)
                 if similarity >= settings.consolidation.judge_lexical_similarity}
        for i, j in sorted(near):
            out.append({"a": {"id": part[i].id, "content": part[i].content},
                        "b": {"id": part[j].id, "content": part[j].content},
                        **_signals(texts, i, j, float(sims[i, j]), j in links[i], weights)})
    return out
