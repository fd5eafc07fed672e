"""Consolidation of one user's memories: cluster restatements, merge each cluster into one memory,
expire what is past its date, decay what goes unused, purge what left recall long ago.

Pure planning (`plan_user`) is separate from applying (`apply_plan`), so a dry run shows exactly
what a real run would do, and tests check plans without a store. Jobs (`jobs/consolidate.py`) run
this per user; nothing here imports Ray or LanceDB.

Clustering is complete linkage over a "may merge" graph. Two memories are linked when they are
exact duplicates, or when they agree on what embedding models blur (negation: "I like X" and "I
don't like X" score as near-identical; other people: "the user's wife likes tea", "我同事喜欢喝
咖啡"; time and intent: "used to have", "打算去"; names and numbers: "Lufthansa", "AB-") and
either the model reads both and their cosine similarity reaches the bar for how their content
words differ (`consolidation_similarity` for the same words, `consolidation_reworded_similarity`
for one word swapped, where a synonym and another thing look alike to the model: "named" for
"called", "cat" for "dog"; `consolidation_rephrased_similarity` for other wording that shares a
content word), or, where the model cannot read a text (Chinese with the bundled English model
embeds every sentence alike, so cosine says nothing), they use the same content words and their
lexical similarity reaches `consolidation_lexical_similarity`. Complete linkage merges two groups
only when every pair across them is linked, so a chain of small steps ("likes tea" ~ "likes green
tea" ~ "likes green tea and coffee" ~ ...) never fuses facts that are not restatements of each
other, as single linkage (connected components) would. Linkage is repeated over the survivors
until nothing more merges, so that a second run finds nothing to do.
"""

from __future__ import annotations

import json
import logging
import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import combinations, zip_longest
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from agent_memory.ids import stable_id
from agent_memory.models import MemoryEvent, MemoryRecord, Scope
from agent_memory.settings import Settings
from agent_memory.text import CJK_RANGES, ENGLISH_STOPWORDS, normalize, stem_words, terms

log = logging.getLogger(__name__)

ACTOR = "consolidation"
Summarize = Callable[[Sequence[str]], str]
# Given pairs of statements, the indices of the pairs that state the same fact (an LLM's
# verdict), or None when it gave none (the model failed): then no pair is confirmed.
Judge = Callable[[Sequence[tuple[str, str]]], "set[int] | None"]

_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
# A CJK character, or a word of any other script (a word stops where a CJK run starts).
_CONTENT_TOKEN = re.compile(f"[{CJK_RANGES}]|[^\\W_{CJK_RANGES}]+(?:'[^\\W_{CJK_RANGES}]+)?", re.UNICODE)
_NEGATION_WORDS = frozenset(
    """not no never nobody nothing none neither nor cannot without hate hates hated dislike dislikes
    disliked avoid avoids stopped seldom rarely hardly barely""".split()
)
# Chinese negators and verbs of aversion: a one-character difference that reverses the meaning.
_NEGATION_CJK = ("不", "没", "别", "未", "无", "非", "讨厌", "不再", "戒")
# Words that contain a negator's character without negating ("特别" especially, "非常" very,
# "未来" future) or that name someone else ("别人" others): taken out before negators are sought.
_NOT_NEGATION_CJK = ("特别", "分别", "区别", "告别", "级别", "类别", "性别", "识别", "个别", "别人", "别墅", "非常",
                     "非洲", "无论", "无线", "无人机", "未来", "不错", "差不多", "不仅", "不过", "不断", "戒指")

# Whose fact it is: kinship, household and work relations. "The user's wife likes tea" is not
# the user's fact, whatever its cosine to "the user likes tea".
_PERSON_WORDS_EN = frozenset(
    """wife husband partner spouse fiance fiancee boyfriend girlfriend son daughter child children kid kids baby
    mother mom mum father dad parent parents brother sister sibling siblings grandma grandmother grandpa
    grandfather grandparents uncle aunt cousin nephew niece family friend friends colleague colleagues coworker
    coworkers roommate roommates flatmate housemate neighbour neighbor neighbours neighbors boss teammate
    teammates intern interns mentor classmate classmates sons daughters brothers sisters""".split()
)
_PERSON_PHRASES_EN = ("team lead", "tech lead", "in-law", "co-worker")
# Words that contain a person's character without naming one: "吉他" (guitar), "其他" (other),
# "面向对象" (object-oriented), "朋友圈" (WeChat Moments).
_NOT_PERSON_CJK = ("吉他", "其他", "面向对象", "朋友圈")
# Roles that are also jobs ("works as a product manager"): someone else only after a possessive.
_ROLE_AFTER_POSSESSIVE = re.compile(
    r"\b(?:my|our|his|her|their|user's)\s+(?:\w+\s+)?(manager|supervisor|director|teacher|tutor|coach|doctor|"
    r"dentist|therapist|assistant|landlord|landlady|client|customer|lead)\b"
)
_PERSON_WORDS_CJK = ("老婆", "老公", "妻子", "丈夫", "爱人", "对象", "男朋友", "女朋友", "男友", "女友", "儿子", "女儿",
                     "孩子", "爸", "妈", "父亲", "母亲", "父母", "哥", "姐", "弟", "妹", "爷爷", "奶奶", "外公", "外婆",
                     "叔", "阿姨", "舅", "朋友", "同事", "室友", "邻居", "老板", "领导", "组长", "同学", "家人", "亲戚",
                     "闺蜜", "队友", "别人", "他", "她")
# When a fact holds, or whether it is one: a past habit, a wish or a plan states something else
# than the present fact ("used to have a Pixel", "我想买一辆特斯拉"). Each class is one mark, so
# "plans to" and "wants to" agree.
_MODALITY_MARKS = {
    "past": (r"\bused to\b", r"\bformerly\b", r"\bpreviously\b", r"\bago\b", r"\blast (?:year|month|week)\b",
             r"\bno longer\b", r"\bany ?more\b", r"\bin the past\b", "以前", "曾经", "过去", "去年", "从前"),
    "intent": (r"\bwants? to\b", r"\bwould like to\b", r"\bplans? to\b", r"\bplanning to\b", r"\bthinking (?:about|of)\b",
               r"\bconsidering\b", r"\bhopes? to\b", r"\bwish(?:es)?\b", r"\bintends? to\b",
               r"\bgoing to (?!the\b|a\b|an\b|work\b|school\b|bed\b)", r"\bmight\b", r"\bmaybe\b",
               "(?<![理思感梦回构幻猜])想(?!念|法)", "打算", "计划", "准备(?=去|要|买|考|换|学|搬|开|做)", "希望", "考虑"),
}
_MODALITY_RES = {kind: re.compile("|".join(marks)) for kind, marks in _MODALITY_MARKS.items()}
_LATIN_WORD = re.compile(r"[a-z][a-z'\-]*")


def _without(text: str, compounds: Sequence[str]) -> str:
    for word in compounds:
        text = text.replace(word, " ")
    return text


def polarity(text: str) -> bool:
    """Whether a text is negated or states an aversion (English words or Chinese negators)."""
    lowered = normalize(text)
    words = set(_NON_WORD.sub(" ", lowered.replace("’", "'")).split()) | set(lowered.split())
    if words & _NEGATION_WORDS or any(w.endswith("n't") for w in words):
        return True
    lowered = _without(lowered, _NOT_NEGATION_CJK)
    return any(mark in lowered for mark in _NEGATION_CJK)


def persons(text: str) -> frozenset[str]:
    """The other people a statement is about or belongs to ("wife", "我同事"), in either language."""
    lowered = normalize(text).replace("’", "'")
    words = {w.removesuffix("'s") for w in _LATIN_WORD.findall(lowered)}
    words |= {part for w in words for part in w.split("-")}  # "ex-wife", "step-son"
    found = {w for w in words if w in _PERSON_WORDS_EN}
    found.update(p for p in _PERSON_PHRASES_EN if p in lowered)
    found.update(_ROLE_AFTER_POSSESSIVE.findall(lowered))
    lowered = _without(lowered, _NOT_PERSON_CJK)
    found.update(p for p in _PERSON_WORDS_CJK if p in lowered)
    return frozenset(found)


def modality(text: str) -> frozenset[str]:
    """The marks of time and intent in a statement: "past" (used to, 以前), "intent" (plans to, 打算)."""
    lowered = normalize(text).replace("’", "'")
    return frozenset(kind for kind, pattern in _MODALITY_RES.items() if pattern.search(lowered))


def stance(text: str) -> tuple[bool, frozenset[str], frozenset[str]]:
    """What must be equal before two statements can be one fact: negation, other people, time and intent."""
    return polarity(text), persons(text), modality(text)


# A word with the signs that make it another name: "C++", "C#", blood group "AB-" (a hyphen only
# where no word follows: "gluten-free" is two words).
_SIGNED = r"(?:[+#]+|-(?![^\W_]))?"
_NAME_TOKEN = re.compile(rf"[^\W_]+{_SIGNED}", re.UNICODE)
# The same without CJK: "我喜欢用Python" holds the word "Python".
_LATIN_NAME_TOKEN = re.compile(rf"[^\W_{CJK_RANGES}]+{_SIGNED}", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?。！？;；:：]\s*|\n")


def names(text: str) -> frozenset[str]:
    """Names and numbers: capitalised words past a sentence's first word, and words with digits.

    A restatement names the same things ("Lufthansa", "Pixel 8", "March"); "flies with Lufthansa"
    and "flies with Emirates" are two facts however close their cosine. A sentence's first word is
    left out because capitals there say nothing ("Italian cuisine is ...", "Every day, ...").
    """
    found: set[str] = set()
    for sentence in _SENTENCE_END.split(unicodedata.normalize("NFKC", text)):
        tokens = _LATIN_NAME_TOKEN.findall(sentence)
        # In Chinese no Latin word starts the sentence; in capitals, capitals say nothing.
        first = 0 if _CJK_CHAR.search(sentence) else 1
        shouting = sum(c.isupper() for c in sentence) > 1 and not any(c.islower() for c in sentence)
        for k, token in enumerate(tokens):
            if any(c.isdigit() for c in token) or (
                k >= first and token[:1].isupper() and token != "I" and not shouting
            ):
                found.add(token.lower())
    return frozenset(found)


def _words(text: str) -> frozenset[str]:
    """Every word of a text, lower-cased, Latin words apart from CJK ones (what a name is sought in)."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return frozenset(_NAME_TOKEN.findall(folded)) | frozenset(_LATIN_NAME_TOKEN.findall(folded))


def names_agree(a: str, b: str) -> bool:
    """Whether every name or number of each text is also a word of the other."""
    return names(a) <= _words(b) and names(b) <= _words(a)


def lexical_agreement(a: str, b: str) -> float:
    """Dice overlap of word terms, CJK bigrams and CJK single characters, 0..1.

    Single characters next to the bigrams of `agent_memory.text` make an inserted adverb
    ("我很喜欢喝咖啡" for "我喜欢喝咖啡") cost less than a changed object ("我喜欢喝茶"), which
    bigrams alone score the other way round on short sentences.
    """
    ta = set(terms(a)) | set(_CJK_CHAR.findall(normalize(a)))
    tb = set(terms(b)) | set(_CJK_CHAR.findall(normalize(b)))
    if not ta or not tb:
        return 0.0
    return 2 * len(ta & tb) / (len(ta) + len(tb))


# Words that shade a statement without changing what it is about: adverbs of degree, time and
# frequency, and particles. A restatement may add or drop these; adding any other word changes
# whose fact it is ("the user's wife likes tea", "我同事喜欢喝咖啡") or which thing it names.
_FUNCTION_WORDS_EN = frozenset(
    """now currently still also always often usually generally typically mostly mainly really quite very
    truly actually definitely certainly especially particularly lately nowadays these days much""".split()
)
_FUNCTION_WORDS_CJK = ("平常", "平时", "一般", "主要", "目前", "现在", "比较", "有点", "真的", "非常", "特别",
                       "总是", "经常", "通常", "一直", "很", "也", "都", "还", "就", "的", "了", "着", "吧", "呢", "啊")


# Chinese wordings that say the same with other characters, folded before comparing: "名叫" and
# "叫做" are "叫" (is called); "我家的" (my household's) is "我的" for a pet, a car or a child.
_CJK_EQUIVALENTS = (("我家的", "我的"), ("名叫", "叫"), ("叫做", "叫"))


def without_function_words(text: str) -> str:
    """The text, normalised, with possessive 's and the function words of both languages taken out."""
    lowered = normalize(text).replace("’", "'").replace("'s ", " ")
    for variant, plain in _CJK_EQUIVALENTS:
        lowered = lowered.replace(variant, plain)
    for word in _FUNCTION_WORDS_CJK:
        lowered = lowered.replace(word, " ")
    return " ".join(w for w in lowered.split() if w not in _FUNCTION_WORDS_EN)


# "-ly" words are taken for adverbs ("mostly", "honestly") unless listed here (nouns, and the
# frequency words of a schedule) or capitalised in the text (names: "Italy", "July", "Emily").
_LY_KEPT = frozenset("family supply reply ally belly jelly lily rally bully fly daily weekly monthly yearly".split())


def content_sequence(text: str) -> list[str]:
    """The words (Snowball stems) and CJK characters that say what a statement is about, in order."""
    capitalised = {w.lower() for w in _CONTENT_TOKEN.findall(unicodedata.normalize("NFKC", text)) if w[:1].isupper()}
    words: list[str] = []
    for token in _CONTENT_TOKEN.findall(without_function_words(text)):
        if _CJK_CHAR.match(token):
            words.append(token)
        elif token not in ENGLISH_STOPWORDS and token not in _FUNCTION_WORDS_EN and not (
            token.endswith("ly") and token not in _LY_KEPT and token not in capitalised
        ):
            words.append(token)
    latin = [i for i, w in enumerate(words) if not _CJK_CHAR.match(w)]
    for i, stem in zip(latin, stem_words([words[i] for i in latin]), strict=True):
        words[i] = stem
    return words


def content_terms(text: str) -> set[str]:
    """The words and CJK characters that say what a statement is about (function words removed)."""
    return set(content_sequence(text))


def adds_content(a: set[str], b: set[str]) -> bool:
    """Whether one statement has more content terms the other lacks than the other way round.

    A restatement may swap a word for a synonym ("named" for "called"): one for one. A statement
    with a term more ("sister", "同事") is about something else, even where it also swaps a word.
    """
    return len(a - b) != len(b - a)


# Who every statement is about: sharing it says nothing about sharing a fact.
_SUBJECT_TERMS = frozenset({"user"})


def rewording(a: Sequence[str], b: Sequence[str], owned: frozenset[str] = frozenset()) -> str | None:
    """How two content sequences differ: "same" terms, "reworded", "rephrased", or None.

    Reworded is exactly one term swapped for another: "named" for "called", but also "cat" for
    "dog" or "motorcycle" for "bike", which the model scores alike, so it takes the highest
    cosine. Rephrased is any other wording that still shares a content term besides the subject:
    terms added ("codes in Emacs" -> "writes code in Emacs", "works as a nurse at their company"),
    or changed on both sides ("is employed as a teacher" -> "works as a teacher at their
    company"). None where an added term is one `owned` holds, a noun right after a possessive
    ("the user's cat likes tuna", "my company is based in Oslo": someone else's fact), or where
    nothing besides the subject is shared.
    """
    sa, sb = set(a), set(b)
    if sa == sb:
        return "same"
    if len(sa - sb) == len(sb - sa) == 1:
        return "reworded"
    shared = (sa & sb) - _SUBJECT_TERMS
    if not shared or (sa < sb and (sb - sa) & owned) or (sb < sa and (sa - sb) & owned):
        return None
    return "rephrased"


_POSSESSIVE = re.compile(r"(?:'s|\bmy|\bour)\s+([^\W_]+)")


def owned_terms(text: str) -> frozenset[str]:
    """The content terms (stems) right after a possessive: "the user's cat", "my company"."""
    lowered = normalize(text).replace("’", "'")
    return frozenset(stem_words(_POSSESSIVE.findall(lowered)))


def exact_key(text: str) -> str:
    """Text with case, width, punctuation and spacing folded: equal keys are exact duplicates.

    The signs that make a name ("C++", "AB-") are kept: "AB-" and "AB+" are two blood groups.
    """
    return " ".join(_NAME_TOKEN.findall(normalize(text)))


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


@dataclass
class UserPlan:
    """Everything one run would change for one user."""

    scope: Scope
    clusters: list[Cluster] = field(default_factory=list)
    expire: list[MemoryRecord] = field(default_factory=list)
    decay: list[tuple[MemoryRecord, float]] = field(default_factory=list)
    purge: list[MemoryRecord] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the run has nothing to do for this user."""
        return not (self.clusters or self.expire or self.decay or self.purge)

    def counts(self) -> dict[str, int]:
        """How many clusters and memories each step touches."""
        return {
            "clusters": len(self.clusters), "merged": sum(len(c.others) for c in self.clusters),
            "expired": len(self.expire), "decayed": len(self.decay), "purged": len(self.purge),
        }


# -- clustering ----------------------------------------------------------------------------------


Links = dict[int, dict[int, float]]
# (similarity, i, j): pairs the rules refused that a judge may still find to be restatements.
NearMiss = tuple[float, int, int]


def _links(
    records: Sequence[MemoryRecord], vectors: np.ndarray, settings: Settings, *, near_misses: bool = False
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
    keys = [exact_key(r.vector_text) for r in records]
    stances = [stance(r.vector_text) for r in records]
    sequences = [content_sequence(r.vector_text) for r in records]
    contents = [set(seq) for seq in sequences]
    # Word order and wording, compared on what is left without function words: an inserted adverb
    # is not a disagreement, a reordered or rewritten clause is.
    stripped = [without_function_words(r.vector_text) for r in records]
    unreadable = [r.oov > settings.consolidation_oov_guard for r in records]
    lexical_min = settings.consolidation_lexical_similarity

    named = [(names(r.vector_text), _words(r.vector_text)) for r in records]
    owned = [owned_terms(r.vector_text) for r in records]

    def agree(i: int, j: int) -> bool:
        """The same negation, people, time and intent, and the same names."""
        (names_i, words_i), (names_j, words_j) = named[i], named[j]
        return stances[i] == stances[j] and names_i <= words_j and names_j <= words_i

    # Texts the model reads: cosine similarity, blocked 1,024 rows at a time. The same content
    # terms in another order or inflection link at `consolidation_similarity`; one term swapped
    # needs `consolidation_reworded_similarity`, other wording `consolidation_rephrased_similarity`.
    readable = [i for i in range(n) if not unreadable[i]]
    same_bar = settings.consolidation_similarity
    needed = {
        "same": same_bar - 1e-6,
        "reworded": max(same_bar, settings.consolidation_reworded_similarity) - 1e-6,
        "rephrased": max(same_bar, settings.consolidation_rephrased_similarity) - 1e-6,
    }
    judge_bar = settings.consolidation_judge_similarity if near_misses else 1.0
    cosine_misses: list[NearMiss] = []
    matrix = vectors[readable]
    for start in range(0, len(readable), 1024):
        sims = matrix[start : start + 1024] @ matrix.T
        rows, cols = np.nonzero(sims >= min(*needed.values(), judge_bar))
        for a_local, b in zip(rows.tolist(), cols.tolist(), strict=True):
            i, j = readable[start + a_local], readable[b]
            if j <= i:
                continue
            if keys[i] == keys[j]:
                links[i][j] = links[j][i] = 1.0
                continue
            kind = rewording(sequences[i], sequences[j], owned[i] | owned[j]) if agree(i, j) else None
            similarity = float(sims[a_local, b])
            if kind is not None and similarity >= needed[kind]:
                links[i][j] = links[j][i] = similarity
            elif kind is not None and similarity >= judge_bar:
                cosine_misses.append((similarity, i, j))
    # Texts it cannot read embed alike, so their cosine says nothing: there a restatement must use
    # the same content words (only function words and order may differ) and agree lexically.
    # Equal content sets are found by hashing, so this costs no pairwise pass.
    buckets: dict[frozenset[str], list[int]] = {}
    for i in range(n):
        if contents[i]:
            buckets.setdefault(frozenset(contents[i]), []).append(i)
    for same in buckets.values():
        if len(same) < 2 or not any(unreadable[i] for i in same):
            continue
        for x, i in enumerate(same):
            for j in same[x + 1 :]:
                if not (unreadable[i] or unreadable[j]) or not agree(i, j) or adds_content(contents[i], contents[j]):
                    continue
                similarity = lexical_agreement(stripped[i], stripped[j])
                if similarity >= lexical_min:
                    links[i][j] = links[j][i] = similarity
    # Exact duplicates link whatever their vectors.
    by_key: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if key:
            by_key.setdefault(key, []).append(i)
    for same in by_key.values():
        for a in same:
            for b in same:
                if a != b:
                    links[a][b] = 1.0
    if not near_misses:
        return links, []
    # Where the model cannot read a text, near misses are pairs with a shared content word and
    # some lexical agreement; the judge reads the language the model cannot.
    lexical_bar = settings.consolidation_judge_lexical_similarity
    lexical_misses: list[NearMiss] = []
    for i, j in combinations(range(n) if any(unreadable) else (), 2):
        if (unreadable[i] or unreadable[j]) and j not in links[i] and contents[i] & contents[j] and agree(i, j):
            similarity = lexical_agreement(stripped[i], stripped[j])
            if similarity >= lexical_bar:
                lexical_misses.append((similarity, i, j))
    ranked = [sorted(kind, key=lambda m: (-m[0], m[1], m[2])) for kind in (cosine_misses, lexical_misses)]
    return links, [m for pair in zip_longest(*ranked) for m in pair if m is not None]


class _JudgedPairs:
    """The near misses one user's planning has put to a judge: each pair is asked about once."""

    def __init__(self, judge: Judge) -> None:
        self.judge = judge
        self.asked: set[tuple[int, int, int]] = set()

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


def _complete_linkage(nodes: list[int], links: dict[int, dict[int, float]]) -> list[list[int]]:
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
) -> list[Cluster]:
    """Clusters of restatements among one user's active memories (each of two or more)."""
    partitions: dict[tuple[Any, ...], list[int]] = {}
    for i, r in enumerate(records):
        # Merging across these would change what a typed, team or agent recall sees.
        partitions.setdefault((r.memory_type, r.team_id, r.agent_id), []).append(i)
    clusters: list[Cluster] = []
    asking = _JudgedPairs(judge) if judge is not None else None
    for part_key, indices in enumerate(partitions.values()):
        part = [records[i] for i in indices]
        links, misses = _links(part, vectors[indices], settings, near_misses=asking is not None)
        # Survivor -> the partition indices it stands for; repeat until nothing more merges. The
        # judge is asked only when the rules' links are used up, and only about survivors: a
        # merge's survivor may lack a link its absorbed memories had, so it is asked again.
        groups: dict[int, list[int]] = {i: [i] for i in range(len(part))}
        while True:
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


# -- expiry, decay, purge ------------------------------------------------------------------------


def decayed_importance(record: MemoryRecord, now: datetime, settings: Settings) -> float | None:
    """The importance an unused memory decays to now, or None when it is not due.

    Due once per period after `decay_after_days` without a recall or a change. A decay stamps
    `updated_at`, which starts the next period: running twice in a period decays once.
    """
    floor = settings.consolidation_decay_floor
    if record.importance <= floor + 1e-6:
        return None
    idle_since = max(record.created_at, record.last_accessed_at or record.created_at)
    start = idle_since + timedelta(days=settings.consolidation_decay_after_days)
    if now < start:
        return None
    period = timedelta(days=settings.consolidation_decay_period_days)
    if record.updated_at < start:
        steps = 1 + math.floor((now - start) / period)
    else:
        steps = math.floor((now - max(record.updated_at, idle_since)) / period)
    if steps < 1:
        return None
    value = max(floor, record.importance * settings.consolidation_decay_factor**steps)
    return round(value, 6) if value < record.importance - 1e-6 else None


def plan_user(
    scope: Scope,
    records: Sequence[MemoryRecord],
    vectors: np.ndarray,
    now: datetime,
    settings: Settings,
    judge: Judge | None = None,
) -> UserPlan:
    """What a run does for one user's memories (any status), given their vectors in the same order."""
    plan = UserPlan(scope)
    retention = timedelta(days=settings.consolidation_retention_days)
    live: list[int] = []
    for i, r in enumerate(records):
        if r.status == "active":
            if r.expires_at is not None and r.expires_at <= now:
                plan.expire.append(r)
            else:
                live.append(i)
        elif (r.valid_to or r.updated_at) <= now - retention:
            plan.purge.append(r)
    live_records = [records[i] for i in live]
    plan.clusters = cluster_memories(live_records, vectors[live], settings, judge)
    in_cluster = {r.id for c in plan.clusters for r in (c.canonical, *c.others)}
    for r in live_records:
        if r.id not in in_cluster:
            value = decayed_importance(r, now, settings)
            if value is not None:
                plan.decay.append((r, value))
    return plan


# -- applying ------------------------------------------------------------------------------------


def _event(record: MemoryRecord, action: str, event_id: str, at: datetime, **change: Any) -> MemoryEvent:
    return MemoryEvent(id=event_id, org_id=record.org_id, user_id=record.user_id, memory_id=record.id,
                       action=action, actor=ACTOR, created_at=at, **change)  # type: ignore[arg-type]


def apply_plan(service: Any, plan: UserPlan, now: datetime, summarize: Summarize | None = None) -> dict[str, int]:
    """Carry out one user's plan through the memory service; return what actually changed.

    Rows are re-read first: a memory deleted, changed or merged since planning is left alone,
    and access counts recorded meanwhile are kept. Merged memories are written before their
    sources are superseded (`MemoryService.merge_many`), so a run killed anywhere loses nothing
    and the next run resumes.
    """
    store, scope = service.store, plan.scope
    planned = [r for c in plan.clusters for r in (c.canonical, *c.others)]
    planned += plan.expire + [r for r, _ in plan.decay]
    fresh = {r.id: r for r in store.get_memories(scope, [r.id for r in planned])}

    def unchanged(r: MemoryRecord) -> bool:
        now_r = fresh.get(r.id)
        return now_r is not None and now_r.status == "active" and now_r.updated_at == r.updated_at

    done = {"clusters": 0, "merged": 0, "expired": 0, "decayed": 0, "purged": 0}
    events: list[MemoryEvent] = []
    expired = []
    for r in plan.expire:
        if unchanged(r):
            row = fresh[r.id].model_copy(update={"status": "expired", "valid_to": r.expires_at, "updated_at": now})
            expired.append(row)
            events.append(_event(r, "expired", stable_id("event:expired", r.id), now,
                                 before={"status": "active"}, after={"status": "expired"}))
    if expired:
        done["expired"] = store.replace_memories(scope, expired)

    groups = []
    for cluster in plan.clusters:
        if not unchanged(cluster.canonical):
            continue
        others = [fresh[o.id] for o in cluster.others if unchanged(o)]
        if not others:
            continue
        canonical = fresh[cluster.canonical.id]
        permanent = [m.expires_at is None for m in (canonical, *others)]
        # A fact stated once without an end date does not expire because a restatement had one.
        expiry = None if any(permanent) else max(m.expires_at for m in (canonical, *others))  # type: ignore[type-var]
        canonical = canonical.model_copy(update={"expires_at": expiry})
        if summarize is not None:
            canonical = _summarized(service, canonical, others, summarize)
        groups.append((canonical, others))
    if groups:
        service.merge_many(scope, groups, action="merged", actor=ACTOR)
        done["clusters"] = len(groups)
        done["merged"] = sum(len(o) for _, o in groups)

    decayed = []
    for r, value in plan.decay:
        if unchanged(r):
            decayed.append(fresh[r.id].model_copy(update={"importance": value, "updated_at": now}))
            events.append(_event(r, "updated", stable_id("event:decayed", r.id, now.isoformat()), now,
                                 before={"importance": r.importance}, after={"importance": value}))
    if decayed:
        done["decayed"] = store.replace_memories(scope, decayed)

    if plan.purge:
        done["purged"] = store.delete_memories(scope, [r.id for r in plan.purge])
        events += [
            _event(r, "deleted", stable_id("event:purged", r.id), now,
                   before={"status": r.status, "superseded_by": r.superseded_by}, after={"reason": "retention"})
            for r in plan.purge
        ]
    if events:
        store.append_events(scope.org_id, events)
    return done


def _summarized(service: Any, canonical: MemoryRecord, others: Sequence[MemoryRecord], summarize: Summarize) -> MemoryRecord:
    """The canonical memory with its content replaced by an LLM summary of the cluster (re-embedded)."""
    texts = [canonical.content, *(o.content for o in others)]
    summary = service.redactor.redact_text(summarize(texts).strip())
    if not summary or summary == canonical.content:
        return canonical
    record = canonical.model_copy(deep=True)
    record.content = summary
    record.index_text, record.keywords = service._index(summary, None)
    service.embed_records([record])
    return record


def consolidate_user(
    service: Any,
    scope: Scope,
    now: datetime,
    *,
    dry_run: bool = False,
    summarize: Summarize | None = None,
    judge: Judge | None = None,
) -> dict[str, Any]:
    """Plan and (unless a dry run) apply consolidation for one user; return the user's report."""
    records, vectors = service.store.user_memories(scope)
    remembered = None
    if judge is not None:
        remembered = RememberedJudge(judge, service.store, scope, now, budget=service.settings.consolidation_judge_max_pairs)
    plan = plan_user(scope, records, vectors, now, service.settings, remembered)
    report: dict[str, Any] = {"org_id": scope.org_id, "user_id": scope.user_id, "memories": len(records)}
    if remembered is not None:
        report["judged"] = remembered.tally()
    if dry_run:
        report.update(plan.counts())
        report["cluster_detail"] = [c.as_dict() for c in plan.clusters]
        return report
    report["found"] = plan.counts()
    report.update(apply_plan(service, plan, now, summarize) if not plan.empty else
                  {"clusters": 0, "merged": 0, "expired": 0, "decayed": 0, "purged": 0})
    if remembered is not None:
        remembered.keep()
    return report


SUMMARY_PROMPT = (
    "These notes about one user all state the same fact. Write that fact once, as one short "
    "sentence in the language of the notes, keeping every specific detail they agree on. "
    "Answer with the sentence only."
)


class OpenAISummarizer:
    """Writes one canonical sentence for a cluster with an OpenAI-compatible chat model."""

    def __init__(self, settings: Settings) -> None:
        import openai

        self._client = openai.OpenAI(base_url=settings.llm_base_url, api_key=settings.llm_api_key or "none",
                                     max_retries=2, timeout=60)
        self._model = settings.llm_model or ""

    def __call__(self, texts: Sequence[str]) -> str:
        """The summary, or the first text when the model answers nothing usable."""
        import openai

        from agent_memory.errors import UnavailableError

        notes = "\n".join(f"- {t}" for t in texts)
        try:
            response = self._client.chat.completions.create(
                model=self._model, temperature=0,
                messages=[{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": notes}],
            )
        except openai.OpenAIError as exc:
            raise UnavailableError(f"the LLM endpoint failed: {exc}") from exc
        answer = (response.choices[0].message.content or "").strip() if response.choices else ""
        return answer.splitlines()[0].strip() if answer else texts[0]


def build_summarizer(settings: Settings) -> Summarize | None:
    """An LLM summarizer when an LLM is configured, else None (the best representative is kept)."""
    return OpenAISummarizer(settings) if settings.llm_configured else None


JUDGE_PROMPT = (
    "You compare notes an assistant keeps about one user. For each numbered pair, decide whether "
    "both notes state the same fact about the user, in other words or in another language. They "
    "do not when they differ in whom the fact is about, in a thing, place, name or number, in "
    "whether it is negated, or in when it holds (a past habit, a plan, a wish). Answer with JSON "
    'only: {"same": [the numbers of the pairs that state the same fact]}.'
)


class SameFacts(BaseModel):
    """The judge's answer: the numbers of the pairs that state the same fact."""

    same: list[int]


class LLMJudge:
    """Asks an OpenAI-compatible chat model which near-miss pairs are restatements.

    One request per user partition, through the extractor's client (rate limit, retries, backoff).
    When the model fails or answers nothing usable, it gives no verdict (None): the rules'
    clusters stand, and the next run asks again.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.name = f"llm:{client.model}"
        self.unavailable = False

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> set[int] | None:
        from agent_memory.errors import UnavailableError
        from agent_memory.llm import parse_json

        notes = {"pairs": [{"pair": k, "a": a, "b": b} for k, (a, b) in enumerate(pairs, start=1)]}
        messages = [
            {"role": "system", "content": JUDGE_PROMPT},
            {"role": "user", "content": json.dumps(notes, ensure_ascii=False)},
        ]
        if self.unavailable:
            return None
        try:
            answer = SameFacts.model_validate(parse_json(self.client.chat(messages, schema=SameFacts, name="same_facts")))
        except UnavailableError:
            # Counted and logged by the client, after its retries: the rest of this run does without.
            self.unavailable = True
            return None
        except (ValueError, ValidationError) as exc:
            log.warning("the consolidation judge's answer was not usable: %s", exc)
            return None
        if any(not 1 <= k <= len(pairs) for k in answer.same):
            log.warning("the consolidation judge named pairs that were not asked about: %s", answer.same)
            return None
        return {k - 1 for k in answer.same}


class RememberedJudge:
    """A judge whose verdicts on one user's pairs are kept in the store (table `verdicts`).

    A pair is asked about once per judge: later runs, and the second run right after the first,
    find its verdict instead of paying for the same question again. A pair is keyed by hashes of
    its two texts (in either order), so an edited or summarised memory is asked about afresh.
    At most `budget` pairs a run go to the judge (remembered ones are free); the rest wait for the
    next run, so where the budget binds, results converge over several runs. Verdicts are written
    by `keep`, after the plan is applied and only while the user still has memories, so that an
    erasure during a run leaves none behind; a dry run does not call it.
    """

    def __init__(self, judge: Judge, store: Any, scope: Scope, now: datetime, *, budget: int) -> None:
        self.judge, self.store, self.scope, self.now, self.budget = judge, store, scope, now, budget
        self.name = str(getattr(judge, "name", type(judge).__name__))
        self.fresh: dict[str, bool] = {}
        self.asked = self.remembered = self.unasked = self.confirmed = 0

    def pair_id(self, a: str, b: str) -> str:
        ha, hb = sorted(stable_id("text", text) for text in (a, b))
        return stable_id("verdict", self.scope.org_id, self.scope.user_id, self.name, ha, hb)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> set[int] | None:
        ids = [self.pair_id(a, b) for a, b in pairs]
        known = {**self.store.verdicts(self.scope, ids), **self.fresh}
        unknown = [k for k, pair_id in enumerate(ids) if pair_id not in known]
        same = {k for k, pair_id in enumerate(ids) if known.get(pair_id)}
        self.remembered += len(pairs) - len(unknown)
        ask, self.unasked = unknown[: max(self.budget, 0)], self.unasked + max(len(unknown) - self.budget, 0)
        if ask:
            self.budget -= len(ask)
            self.asked += len(ask)
            fresh = self.judge([pairs[k] for k in ask])
            if fresh is not None:
                same |= {ask[x] for x in fresh if 0 <= x < len(ask)}
                self.fresh.update({ids[k]: k in same for k in ask})
        self.confirmed += len(same)
        return same

    def keep(self) -> None:
        """Write this run's new verdicts, if the user still has memories (not erased meanwhile)."""
        if not self.fresh or not self.store.has_memories(self.scope):
            return
        try:
            self.store.record_verdicts(self.scope, self.fresh, self.name, self.now)
        except Exception:  # the merges stand; the next run asks again
            log.warning("could not keep the judge's verdicts for %s/%s", self.scope.org_id, self.scope.user_id,
                        exc_info=True)

    def tally(self) -> dict[str, int]:
        """Pairs put to the judge, whose verdict was remembered, left for a later run, and found the same."""
        return {"asked": self.asked, "remembered": self.remembered, "unasked": self.unasked,
                "confirmed": self.confirmed}


def build_judge(settings: Settings) -> Judge | None:
    """An LLM judge of near misses when an LLM is configured and the judge is on, else None."""
    if not (settings.llm_configured and settings.consolidation_llm_judge):
        return None
    from agent_memory.llm import LLMClient

    return LLMJudge(LLMClient.from_settings(settings))
