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
where the model cannot read a text, they use the same content words and their lexical similarity
reaches `consolidation_lexical_similarity`; two Chinese texts may also pass that rule with one put
in the other's words where the dictionary (CC-CEDICT, `agent_memory.gloss`) gives both words one
sense ("老公" and "丈夫", "电脑" and "计算机").

The bundled English model reads Chinese at best in part: as written, every sentence embeds alike;
through its English gloss (`embedding_gloss_chinese`), a word swapped for another in the same
frame glosses close ("我经常加班", "我很少加班": 0.905). So its Chinese is compared by its words,
whichever way it was embedded; two glossed texts whose glosses say the same content words
("用户的老公是医生。", "用户的丈夫是大夫。") link where their gloss cosine reaches
`consolidation_similarity` as well.

Pairs the rules refuse but that come close are near misses, which a judge may still confirm; the
links that rest on closeness rather than on the same words are doubtful, which a judge may
review, and so are the links the dictionary made. `agent_memory.link_signals` says what linking
read of a pair and what it decided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations, zip_longest
from typing import Any

import numpy as np

from agent_memory.gloss import default_glosser
from agent_memory.merge import apart_ids
from agent_memory.models import MemoryRecord
from agent_memory.settings import Settings
from agent_memory.stance import Stance, aspect, aspects_clash, stance
from agent_memory.text import CHINESE_STOPWORDS, CJK_RUN, is_chinese
from agent_memory.wording import (
    changes_relation,
    content_characters,
    content_sequence,
    exact_key,
    lexical_features,
    names,
    owned_terms,
    possessions,
    rewording,
    role_tokens,
    swaps_owners,
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

    said: list[str]
    keys: list[str]
    stances: list[Stance]
    aspects: list[str]
    sequences: list[list[str]]
    unreadable: list[bool]
    # Unreadable and Chinese: what the dictionary can put in other words.
    chinese: list[bool]
    named: list[tuple[frozenset[str], frozenset[str]]]
    owned: list[frozenset[str]]
    # Memories restored apart from one another (an undone merge): never linked again.
    ids: list[str]
    apart: list[frozenset[str]]
    roles: list[tuple[str, ...]]
    owners: list[frozenset[tuple[str, str]]]
    features: list[frozenset[str]]
    chars: list[frozenset[str]]
    # Each feature's idf over the user's memories of every status (stable from run to run), when given.
    corpus_idf: dict[str, float] | None = None
    # Chinese whose vector is of its English gloss (`embedding_gloss_chinese`): the model reads it in part.
    glossed: list[bool] = field(default_factory=list)
    cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Sequence[MemoryRecord], settings: Settings, idf: dict[str, float] | None = None) -> PartitionTexts:
        """The texts of `records` (what they say: `vector_text`), and which the model cannot read:
        those with many `[UNK]`s, and Chinese where the model reads it through its gloss at best."""
        guard, in_part = settings.consolidation.oov_guard, not settings.embedding.reads_chinese()
        said = [r.vector_text for r in records]
        unreadable = [r.oov > guard or (in_part and is_chinese(t)) for r, t in zip(records, said, strict=True)]
        glossed = [settings.embedding.glosses_chinese() and r.oov <= guard and is_chinese(t)
                   for r, t in zip(records, said, strict=True)]
        return cls.read(said, unreadable, [r.id for r in records], [frozenset(apart_ids(r)) for r in records], idf,
                        glossed)

    @classmethod
    def read(cls, said: list[str], unreadable: list[bool], ids: list[str], apart: list[frozenset[str]],
             idf: dict[str, float] | None = None, glossed: list[bool] | None = None) -> PartitionTexts:
        """What linking compares of these texts, with which the model cannot read (and which of
        those it read through their gloss) and their ids."""
        return cls(
            said=said,
            keys=[exact_key(t) for t in said],
            stances=[stance(t) for t in said],
            aspects=[aspect(t) for t in said],
            sequences=[content_sequence(t) for t in said],
            unreadable=unreadable,
            chinese=[u and is_chinese(t) for t, u in zip(said, unreadable, strict=True)],
            named=[(names(t), word_set(t)) for t in said],
            owned=[owned_terms(t) for t in said],
            ids=ids,
            apart=apart,
            roles=[role_tokens(t) for t in said],
            owners=[possessions(t) for t in said],
            features=[lexical_features(t) for t in said],
            chars=[content_characters(t) for t in said],
            corpus_idf=idf,
            glossed=glossed or [False] * len(said),
        )

    def in_words_of(self, i: int, j: int, idf: dict[str, float] | None = None) -> PartitionTexts:
        """Text `i` and text `j` put in its words where CC-CEDICT gives both one sense
        (`Glosser.in_words_of`), read as a pair the model cannot read."""
        rewritten = default_glosser().in_words_of(self.said[i], self.said[j])
        return PartitionTexts.read([self.said[i], rewritten], [True, True], [self.ids[i], self.ids[j]],
                                   [self.apart[i], self.apart[j]], idf)

    @property
    def bridged(self) -> set[tuple[int, int]]:
        """The pairs (i < j) linked through the dictionary: one text put in the other's words, or
        two glosses that say the same words."""
        return self.cache.setdefault("bridged", set())

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
                and not self.roles_swapped(i, j) and not changes_relation(self.roles[i], self.roles[j]))

    def roles_swapped(self, i: int, j: int) -> bool:
        """Whether the two say the same words with roles swapped: who does what to whom, or whose a
        thing is."""
        return (swaps_roles(self.roles[i], self.roles[j])
                or swaps_owners(self.owners[i], self.owners[j], self.roles[i], self.roles[j]))


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
    for similarity, i, j in lexical_pairs(texts):
        unreadable = texts.unreadable[i] or texts.unreadable[j]
        if unreadable:
            close = similarity >= bar and not texts.swapped(i, j)
        else:  # the same words, and a cosine that does not say they mean something else
            close = similarity >= 1.0 - 1e-9 and float(vectors[i] @ vectors[j]) >= _SAME_WORDS_MIN_COSINE
        if close and j not in links[i] and texts.agree(i, j):
            links[i][j] = links[j][i] = similarity
    if any(texts.chinese):
        _link_in_dictionary_words(texts, bar, links)
    if any(texts.glossed):
        _link_same_glosses(texts, vectors, settings.consolidation.similarity, links)


def _link_in_dictionary_words(texts: PartitionTexts, bar: float, links: Links) -> None:
    """Link Chinese restatements in other words ("我老公在银行上班", "我丈夫在银行上班"; 电脑 and 计算机):
    a pair of Chinese texts left apart that share a word is linked when the second, put in the
    first's words where CC-CEDICT gives both one sense (`Glosser.in_words_of`), passes the lexical
    rule with the first: the same bar, the same guards. Such a link rests on the dictionary, not
    on the user's own words: it is doubtful, and a judge, where configured, reviews it."""
    idf = texts.idf()
    for _, i, j in lexical_pairs(texts):
        if not (texts.chinese[i] and texts.chinese[j]) or j in links[i]:
            continue
        pair = texts.in_words_of(i, j, idf)
        if pair.said[1] == texts.said[j]:
            continue
        similarity = weighted_overlap(pair.features[0], pair.features[1], idf)
        if similarity >= bar and not pair.swapped(0, 1) and pair.agree(0, 1):
            links[i][j] = links[j][i] = similarity
            texts.bridged.add((i, j))


def _link_same_glosses(texts: PartitionTexts, vectors: np.ndarray, bar: float, links: Links) -> None:
    """Link two Chinese texts embedded through their gloss whose glosses say the same content
    words ("用户的老公是医生。", "用户的丈夫是大夫。": "user husband is doctor") at a cosine of at
    least `consolidation_similarity`, when they agree as written or with one put in the other's
    words. The gloss cosine alone is no evidence: a word swapped for another in the same frame
    glosses close ("我经常加班", "我很少加班": "frequently", "very few"; 0.905); the words are, with
    the guards the Chinese rules use. Such a link rests on the dictionary: it is doubtful."""
    by_words: dict[frozenset[str], list[int]] = {}
    for i, text in enumerate(texts.said):
        if texts.glossed[i]:
            by_words.setdefault(frozenset(content_sequence(default_glosser().gloss(text))), []).append(i)
    for words, members in by_words.items():
        for i, j in combinations(members, 2):
            if not words or j in links[i] or float(vectors[i] @ vectors[j]) < bar - 1e-6:
                continue
            if texts.agree(i, j) or texts.in_words_of(i, j).agree(0, 1):
                links[i][j] = links[j][i] = float(vectors[i] @ vectors[j])
                texts.bridged.add((i, j))


# Where the model reads both, the same content words link from this cosine: "I'm allergic to
# cats" and "the user is allergic to cats" score 0.77, "Anna is my boss" and "I am Anna's boss" 0.25.
_SAME_WORDS_MIN_COSINE = 0.6


def lexical_pairs(texts: PartitionTexts) -> list[NearMiss]:
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
    return [(similarity, i, j) for similarity, i, j in lexical_pairs(texts)
            if (texts.unreadable[i] or texts.unreadable[j]) and similarity >= lexical_bar and j not in links[i]
            and texts.agree(i, j)]


def doubtful_links(texts: PartitionTexts, links: Links) -> list[NearMiss]:
    """The rules' links that rest on closeness rather than on the same words in the same order:
    where the model reads both, one content word swapped or other wording ("likes cats", "likes
    dogs" score alike) and the same words in another order (roles may be swapped); where it
    cannot (Chinese with the bundled model), a lexical similarity short of identical. Exact
    duplicates, and the same content words in the same order, are not in doubt."""
    found = [(similarity, i, j) for i in links for j, similarity in links[i].items()
             if j > i and in_doubt(texts, i, j, similarity)]
    return sorted(found)  # the least similar first: the most in doubt


def in_doubt(texts: PartitionTexts, i: int, j: int, similarity: float) -> bool:
    if texts.keys[i] == texts.keys[j]:
        return False
    if (min(i, j), max(i, j)) in texts.bridged:
        return True
    if texts.unreadable[i] or texts.unreadable[j]:
        return similarity < 1.0 - 1e-9
    # The same content words in another order may swap who does what ("prefers tea over coffee").
    return texts.sequences[i] != texts.sequences[j]
