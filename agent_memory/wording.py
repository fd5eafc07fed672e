"""How two statements are worded: the names and numbers they hold, the content words that say
what they are about, and how those words differ (the same, one swapped, or rephrased).

Clustering (`agent_memory.clustering`) links two memories only when their wording agrees: a
restatement names the same things ("Lufthansa", "AB-"), and the bar its cosine must reach
depends on how its content words differ from the other's. Where the model cannot read a text,
`weighted_overlap` of `lexical_features` stands in for cosine; `swaps_roles` tells who does what
to whom. Extraction reads `content_terms` and `topic_words` to tell what a statement is about.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from agent_memory.stance import is_person_word
from agent_memory.text import (
    CJK,
    CJK_RANGES,
    ENGLISH_STOPWORDS,
    chinese_words,
    nfkc_lower,
    sentences,
    stem_words,
)

# A CJK character, or a word of any other script (a word stops where a CJK run starts).
_CONTENT_TOKEN = re.compile(f"[{CJK_RANGES}]|[^\\W_{CJK_RANGES}]+(?:'[^\\W_{CJK_RANGES}]+)?", re.UNICODE)


# A word with the signs that make it another name: "C++", "C#", blood group "AB-" (a hyphen only
# where no word follows: "gluten-free" is two words).
_SIGNED = r"(?:[+#]+|-(?![^\W_]))?"
_NAME_TOKEN = re.compile(rf"[^\W_]+{_SIGNED}", re.UNICODE)
# The same without CJK: "我喜欢用Python" holds the word "Python".
_LATIN_NAME_TOKEN = re.compile(rf"[^\W_{CJK_RANGES}]+{_SIGNED}", re.UNICODE)
# After a colon a text starts afresh, as a sentence does ("user: Italian cuisine ...").
_COLON = re.compile(r"[:：]")

# English contractions spelt out ("I've got" is "I have got"); "n't" stays, for negation is compared apart.
_HAD = re.compile(r"(?<=[a-z])'d(?=\s+(?:been|had|got|gone|done)\b)")  # "I'd been" is "I had been"
_CONTRACTION = re.compile(r"(?<=[a-z])'(ve|m|re|ll|d)\b")
_CONTRACTED = {"ve": " have", "m": " am", "re": " are", "ll": " will", "d": " would"}
# A digit group's comma ("$1,800") is no separator of two numbers.
_DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def folded(text: str) -> str:
    """NFKC, lower case, one apostrophe, contractions spelt out and digit groups joined: what
    every comparison of wording starts from."""
    lowered = _HAD.sub(" had", _DIGIT_GROUP.sub("", nfkc_lower(text).replace("’", "'")))
    return _CONTRACTION.sub(lambda m: _CONTRACTED[m.group(1)], lowered)


# A number in Chinese numerals: two numeral characters or more ("五千四", "十二"), or one before
# what it counts ("三年级", "两个"). One alone is mostly part of a word ("一直", "一般").
_CJK_NUMBER = re.compile(r"[零〇一二三四五六七八九十百千万亿两半]{2,}|[零〇一二三四五六七八九十百千万亿两半](?=[个岁年级月号点次天本只块元斤层楼周])")


def _cjk_numbers(text: str) -> list[str]:
    return _CJK_NUMBER.findall(_cjk_folded(unicodedata.normalize("NFKC", text)))


def names(text: str) -> frozenset[str]:
    """Names and numbers: capitalised words past a sentence's first word, words with digits, and
    numbers in Chinese numerals ("每月房租五千四" and "四千五" are two rents).

    A restatement names the same things ("Lufthansa", "Pixel 8", "March"); "flies with Lufthansa"
    and "flies with Emirates" are two facts however close their cosine. A sentence's first word is
    left out because capitals there say nothing ("Italian cuisine is ...", "Every day, ...").
    """
    found = set(_cjk_numbers(text))
    folded_digits = _DIGIT_GROUP.sub("", unicodedata.normalize("NFKC", text))
    for sentence in (part for whole in sentences(folded_digits) for part in _COLON.split(whole)):
        tokens = _LATIN_NAME_TOKEN.findall(sentence)
        # In Chinese no Latin word starts the sentence; in capitals, capitals say nothing.
        first = 0 if CJK.search(sentence) else 1
        shouting = sum(c.isupper() for c in sentence) > 1 and not any(c.islower() for c in sentence)
        for k, token in enumerate(tokens):
            if any(c.isdigit() for c in token) or (
                k >= first and token[:1].isupper() and token != "I" and not shouting
            ):
                found.add(token.lower())
    return frozenset(found)


_LETTERS_OR_DIGITS = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)


def word_set(text: str) -> frozenset[str]:
    """Every word of a text, lower-cased, Latin words apart from CJK ones (what a name is sought in).

    A name is spelt with or without its spaces ("Mate 60", "Mate60"): the letters and the digits of
    a word count apart, and two neighbouring words together."""
    lowered = folded(text)
    latin = _LATIN_NAME_TOKEN.findall(lowered)
    pieces = {p for w in latin for p in _LETTERS_OR_DIGITS.findall(w)}
    joined = {a + b for a, b in zip(latin, latin[1:], strict=False)}
    return frozenset(_NAME_TOKEN.findall(lowered)) | frozenset(latin) | pieces | joined | frozenset(_cjk_numbers(text))


# Words that shade a statement without changing what it is about: adverbs of degree, time and
# frequency, and particles. A restatement may add or drop these; adding any other word changes
# whose fact it is ("the user's wife likes tea", "我同事喜欢喝咖啡") or which thing it names.
_FUNCTION_WORDS_EN = frozenset(
    """now currently still also always often usually generally typically mostly mainly really quite very
    truly actually definitely certainly especially particularly lately nowadays these days much""".split()
)
_FUNCTION_WORDS_CJK = ("大多数时候", "大部分时候", "大部分时间", "说实话", "基本上", "一般来说", "平常", "平时", "一般", "一向", "向来",
                       "始终",
                       "主要", "目前", "现在", "比较", "有点", "真的", "非常", "特别", "总是", "经常", "常常", "通常",
                       "往往", "一直", "其实", "确实", "基本", "大多", "挺", "蛮", "很", "也", "都", "还", "就", "的",
                       "了", "着", "吧", "呢", "啊", "呀", "啦", "哦", "嘛", "呗", "哈", "哟", "咯", "是",
                       # Light verbs: "进行开发" says "开发".
                       "进行", "加以", "予以")


# Chinese wordings that say the same with other characters, folded before comparing: "名叫" and
# "叫做" are "叫" (is called); "我家的" (my household's) is "我的" for a pet, a car or a child;
# "俩" and "仨" are "两个" and "三个" run together; "正在减肥" is "在减肥".
_CJK_EQUIVALENTS = (("我家的", "我的"), ("我家狗", "我的狗"), ("我家猫", "我的猫"), ("我家孩子", "我的孩子"), ("名叫", "叫"), ("叫做", "叫"), ("俩", "两个"), ("仨", "三个"),
                    ("正在", "在"))
# "是一名老师", "是个老师", "是辆电动车": one of a kind said with its measure word is "是".
_CJK_ONE_OF = re.compile(r"(是|有)一?(?:个|名|位|辆|只|台|部|条|本|家|套|件|座|所)")
# The user in the third person is the user in the first: "用户是左撇子" and "我是左撇子".
_CJK_SUBJECT = (("用户的", "我的"), ("用户", "我"))


def _cjk_folded(text: str) -> str:
    for variant, plain in _CJK_EQUIVALENTS:
        text = text.replace(variant, plain)
    return text


def without_function_words(text: str) -> str:
    """The text, normalised, with possessive 's and the function words of both languages taken out."""
    lowered = _CJK_ONE_OF.sub(r"\1", _cjk_folded(folded(text).replace("'s ", " ")))
    for variant, plain in _CJK_SUBJECT:
        lowered = lowered.replace(variant, plain)
    for word in _FUNCTION_WORDS_CJK:
        lowered = lowered.replace(word, " ")
    return " ".join(w for w in lowered.split() if w not in _FUNCTION_WORDS_EN)


# "-ly" words are taken for adverbs ("mostly", "honestly") unless listed here (nouns, and the
# frequency words of a schedule) or capitalised in the text (names: "Italy", "July", "Emily").
_LY_KEPT = frozenset("family supply reply ally belly jelly lily rally bully fly daily weekly monthly yearly".split())


def content_sequence(text: str) -> list[str]:
    """The words (Snowball stems) and CJK characters that say what a statement is about, in order.
    A negated auxiliary ("doesn't", "don't") says nothing of the topic: negation is compared apart
    (`agent_memory.stance`)."""
    capitalised = {w.lower() for w in _CONTENT_TOKEN.findall(unicodedata.normalize("NFKC", text)) if w[:1].isupper()}
    words: list[str] = []
    for token in _CONTENT_TOKEN.findall(without_function_words(text)):
        if CJK.match(token):
            words.append(token)
        elif token not in ENGLISH_STOPWORDS and token not in _FUNCTION_WORDS_EN and not token.endswith("n't") and not (
            token.endswith("ly") and token not in _LY_KEPT and token not in capitalised
        ):
            words.append(token)
    latin = [i for i, w in enumerate(words) if not CJK.match(w)]
    for i, stem in zip(latin, stem_words([words[i] for i in latin]), strict=True):
        words[i] = stem
    return words


def content_terms(text: str) -> set[str]:
    """The words and CJK characters that say what a statement is about (function words removed)."""
    return set(content_sequence(text))


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
    lowered = nfkc_lower(text).replace("’", "'")
    return frozenset(stem_words(_POSSESSIVE.findall(lowered)))


def exact_key(text: str) -> str:
    """Text with case, width, punctuation and spacing folded: equal keys are exact duplicates.

    The signs that make a name ("C++", "AB-") are kept: "AB-" and "AB+" are two blood groups.
    """
    return " ".join(_NAME_TOKEN.findall(nfkc_lower(text)))



# -- who does what to whom --------------------------------------------------------------------

# Words that join equals ("peanuts and mangoes", "花生和芒果"): which side of them a word is on
# says nothing about its role. Articles and particles say nothing either.
_SYMMETRIC = frozenset("and or & , 、 和 与 跟 及 或 以及 还有 同 is are be was were 是 为".split())
# "my husband", "我哥": a possessive before a person names that person, not the user.
_POSSESSIVES = frozenset("my our her his their 我 我们 她 他".split())
_THE_USER = frozenset("user me my she her he him they them".split())
_ROLE_NOISE = frozenset("a an the 的 了 着 过 啦 呀 吧 呢 啊 哦 嘛 个".split())
_ROLE_TOKEN = re.compile(f"[{CJK_RANGES}]+|[^\\W_{CJK_RANGES}]+", re.UNICODE)
_KIN_DOUBLED = re.compile(r"^([爸妈哥姐弟妹叔舅])\1$")


def role_tokens(text: str) -> tuple[str, ...]:
    """A statement's words in order (English stems, Chinese dictionary words), for `swaps_roles`:
    the first person and "the user" are one word, as they are one person."""
    text = folded(text).replace("'s ", " 's ")
    for variant, plain in _CJK_SUBJECT:
        text = text.replace(variant, plain)
    out: list[str] = []
    for token in _ROLE_TOKEN.findall(text):
        if CJK.match(token):
            # "爸爸" is "爸": a relation said twice over is one word for `is_person_word`.
            out.extend(_KIN_DOUBLED.sub(r"\1", w) for w in chinese_words(token) if w not in _ROLE_NOISE)
        elif token not in _ROLE_NOISE:
            out.append(token)
    # "the user's cousin", "my husband", "我哥": the person, not the user, whose relation it is.
    out = [w for k, w in enumerate(out) if not (
        (w in _POSSESSIVES or (w == "user" and out[k + 1 : k + 2] == ["s"]))
        and is_person_word(([x for x in out[k + 1 : k + 3] if x != "s"] or [""])[0]))]
    out = [w for w in out if w != "s"]
    latin = [i for i, w in enumerate(out) if not CJK.match(w)]
    for i, stem in zip(latin, stem_words([out[i] for i in latin]), strict=True):
        # A statement in memory is about the user: "she", "her" and "them" are the user.
        out[i] = "i" if stem in _THE_USER else stem
    # So are "他" and "她" where no relation follows ("用户的爸爸比他高": taller than the user).
    return tuple("我" if w in ("他", "她") else w for w in out)


# Prepositions, and the words that mark a role in Chinese: each moves with its object, and which
# object it takes is the role ("from Berlin to Munich", "比我哥", "从 Go 到 Java").
_PREPOSITIONS = frozenset("from to into over than for with at in on as by of about after before 从 到 在 向 给 对 比 把 被".split())


def _role_units(tokens: Sequence[str]) -> list[str]:
    """Tokens with each preposition joined to its object ("from:berlin"); an object of equals is
    one ("对:花生|芒果" for "对花生和芒果")."""
    out: list[str] = []
    k = 0
    while k < len(tokens):
        if tokens[k] in _PREPOSITIONS and k + 1 < len(tokens) and tokens[k + 1] not in _PREPOSITIONS:
            preposition, items, k = tokens[k], [tokens[k + 1]], k + 2
            while k + 1 < len(tokens) and tokens[k] in _SYMMETRIC and tokens[k + 1] not in _PREPOSITIONS:
                items.append(tokens[k + 1])
                k += 2
            out.append(f"{preposition}:{'|'.join(sorted(items))}")
        else:
            out.append(tokens[k])
            k += 1
    return out


# What a preposition says of its object: where from, where to, or where.
_RELATION_KIND = {"from": "origin", "从": "origin", "to": "goal", "into": "goal", "到": "goal", "向": "goal",
                  "in": "place", "at": "place", "on": "place", "在": "place"}


def _relations(tokens: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for unit in _role_units(tokens):
        preposition, _, obj = unit.partition(":")
        if obj and preposition in _RELATION_KIND:
            out.setdefault(obj, _RELATION_KIND[preposition])
    return out


def changes_relation(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether a word both statements give a preposition is, in each, the object of another kind
    of preposition: "works in Lagos" and "is from Lagos", "moved to Oslo" and "lives in Oslo" say
    two things of one place. ("goes to the gym on Mondays" and "on Mondays goes to the gym" keep
    each object's preposition.)"""
    kinds_b = _relations(b)
    return any(kinds_b.get(obj, kind) != kind for obj, kind in _relations(a).items())


def swaps_roles(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two statements put the same words in swapped roles.

    A preposition that takes another shared word as its object ("from Berlin to Munich" and "from
    Munich to Berlin"; "prefers trains over planes" and "... planes over trains"; "我比我哥高" and
    "我哥比我高"). Or, around a shared word, one word crossing from its left to its right and
    another from its right to its left ("I drink tea, not coffee" and "I drink coffee, not tea";
    "Anna manages the user" and "the user manages Anna"; "不喝咖啡只喝茶" and "不喝茶只喝咖啡"). A
    phrase moved whole, its preposition with it ("on weekends the user plays tennis", "the user
    plays tennis on weekends"; "in 2020 I moved to Berlin from Paris"), or two equals swapped
    ("花生和芒果", "芒果和花生") cross in one direction only, or across a word that joins equals,
    and are restatements.
    """
    units_a, units_b = _role_units(a), _role_units(b)
    words_a, words_b = set(a), set(b)
    objects_a = {u.split(":", 1)[0]: u.split(":", 1)[1] for u in units_a if ":" in u}
    objects_b = {u.split(":", 1)[0]: u.split(":", 1)[1] for u in units_b if ":" in u}
    for preposition, obj in objects_a.items():
        other = objects_b.get(preposition)
        if other and other != obj and obj in words_b and other in words_a:
            return True
    # A preposition's phrase moves freely ("in Boston, I work ..."): only the bare words cross,
    # each where it first stands ("I gave my brother my old laptop"). A phrase both keep may be
    # what they cross ("我爸在教我" and "我在教我爸").
    pos_a, pos_b = _first_positions(units_a), _first_positions(units_b)
    shared = [w for w in pos_a if w in pos_b]
    if len([w for w in shared if ":" not in w]) < 3:
        return False
    for pivot in shared:
        # A word said twice is no fixed point ("我儿子5岁，我女儿3岁" said the other way round).
        if pivot in _SYMMETRIC or units_a.count(pivot) > 1 or units_b.count(pivot) > 1:
            continue
        left_to_right = right_to_left = False
        for word in shared:
            if word == pivot or word in _SYMMETRIC or ":" in word:
                continue
            left_a, left_b = pos_a[word] < pos_a[pivot], pos_b[word] < pos_b[pivot]
            left_to_right |= left_a and not left_b
            right_to_left |= left_b and not left_a
        if left_to_right and right_to_left:
            return True
    return False


def _first_positions(units: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, unit in enumerate(units):
        out.setdefault(unit, k)
    return out


# -- order-free lexical similarity, for texts the model cannot read -------------------------------


def lexical_features(text: str) -> frozenset[str]:
    """What a statement says, in any order: its content words (English stems, Chinese dictionary
    words) and the single characters of its Chinese, function words, particles and the subject
    ("用户", "我") taken out. Characters let a changed word meet its fact halfway."""
    out: set[str] = set()
    for token in _ROLE_TOKEN.findall(without_function_words(text)):
        if CJK.match(token):
            words = [w for w in chinese_words(token) if w != "我"]
            out.update(w for w in words if len(w) > 1)
            out.update(c for w in words for c in w if c != "我")
    for word in content_sequence(text):
        if not CJK.match(word) and word != "user":
            out.update(_LETTERS_OR_DIGITS.findall(word))  # "Mate60" is "Mate 60"
    return frozenset(out)


def weighted_overlap(a: frozenset[str], b: frozenset[str], idf: dict[str, float]) -> float:
    """Dice overlap of two feature sets, each feature weighted by its idf over the user's memories:
    what every memory of the user says ("喜欢", "工作") counts little, a rare word much."""
    total = sum(idf.get(f, 1.0) for f in a) + sum(idf.get(f, 1.0) for f in b)
    return 2 * sum(idf.get(f, 1.0) for f in a & b) / total if total else 0.0


# Verbs every statement of a taste or a habit uses: sharing one says nothing of sharing a topic.
_GENERIC_VERBS = frozenset("like love use have get go do make want enjoy prefer need 喜欢 使用 用 有 想 要 去 做 爱 觉得".split())


def topic_words(text: str) -> frozenset[str]:
    """What a statement is about: its content words (English stems, Chinese words of two or more
    characters), without single characters, function words, generic verbs or the subject."""
    return frozenset(f for f in lexical_features(text)
                     if not (CJK.match(f) and len(f) < 2) and f not in _GENERIC_VERBS)


def content_characters(text: str) -> frozenset[str]:
    """The Chinese characters and Latin words (stems, letters apart from digits) a statement says,
    function words and the subject taken out: what an entity swapped in the same frame changes."""
    out = {f for f in lexical_features(text) if not CJK.match(f)}
    for token in _ROLE_TOKEN.findall(without_function_words(text)):
        if CJK.match(token):
            out.update(c for c in token if c != "我")
    return frozenset(out)
