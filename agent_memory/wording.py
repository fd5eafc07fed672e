"""How two statements are worded: the names and numbers they hold, the content words that say
what they are about, and how those words differ (the same, one swapped, or rephrased).

Clustering (`agent_memory.clustering`) links two memories only when their wording agrees: a
restatement names the same things ("Lufthansa", "AB-"), and the bar its cosine must reach
depends on how its content words differ from the other's. Where the model cannot read a text,
`lexical_agreement` stands in for cosine.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from agent_memory.text import CJK_RANGES, ENGLISH_STOPWORDS, normalize, stem_words, terms

_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
# A CJK character, or a word of any other script (a word stops where a CJK run starts).
_CONTENT_TOKEN = re.compile(f"[{CJK_RANGES}]|[^\\W_{CJK_RANGES}]+(?:'[^\\W_{CJK_RANGES}]+)?", re.UNICODE)


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


def word_set(text: str) -> frozenset[str]:
    """Every word of a text, lower-cased, Latin words apart from CJK ones (what a name is sought in)."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return frozenset(_NAME_TOKEN.findall(folded)) | frozenset(_LATIN_NAME_TOKEN.findall(folded))


def names_agree(a: str, b: str) -> bool:
    """Whether every name or number of each text is also a word of the other."""
    return names(a) <= word_set(b) and names(b) <= word_set(a)


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

