"""What two statements must share before they can be one fact, whatever their cosine: negation,
other people, and time and intent.

Embedding models blur exactly these: "I like X" and "I don't like X" score as near-identical, as
do "the user likes tea" and "the user's wife likes tea", or "has a Pixel" and "used to have a
Pixel". Each guard reads English words and Chinese characters alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agent_memory.text import nfkc_lower

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
_LATIN_WORD = re.compile(r"[a-z][a-z'\-]*")

_NEGATION_WORDS = frozenset(
    """not no never nobody nothing none neither nor cannot without hate hates hated dislike dislikes
    disliked avoid avoids avoided stopped seldom rarely hardly barely refuse refuses refused""".split()
)
# Chinese negators and verbs of aversion: a one-character difference that reverses the meaning.
_NEGATION_CJK = ("不", "没", "别", "未", "无", "非", "讨厌", "不再", "戒", "拒绝", "从不", "免")
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
_IN_LAWS = frozenset({"in-law", "in-laws", "inlaws"})
# Words that contain a person's character without naming one: "吉他" (guitar), "其他" (other),
# "面向对象" (object-oriented), "朋友圈" (WeChat Moments).
_NOT_PERSON_CJK = ("吉他", "其他", "面向对象", "朋友圈")
# Roles that are also jobs ("works as a product manager"): someone else only after a possessive.
WORK_ROLES = ("manager", "supervisor", "director", "teacher", "tutor", "coach", "doctor", "dentist", "therapist",
              "assistant", "landlord", "landlady", "client", "customer", "lead")
_ROLE_AFTER_POSSESSIVE = re.compile(r"\b(?:my|our|his|her|their|user's)\s+(?:\w+\s+)?(" + "|".join(WORK_ROLES) + r")\b")
_PERSON_WORDS_CJK = ("老婆", "老公", "妻子", "丈夫", "爱人", "对象", "男朋友", "女朋友", "男友", "女友", "儿子", "女儿",
                     "孩子", "爸", "妈", "父亲", "母亲", "父母", "哥", "姐", "弟", "妹", "爷爷", "奶奶", "外公", "外婆",
                     "叔", "阿姨", "舅", "朋友", "同事", "室友", "邻居", "老板", "领导", "组长", "同学", "家人", "亲戚",
                     "闺蜜", "队友", "别人", "他", "她", "婆婆", "公公", "岳父", "岳母", "丈母娘", "儿媳", "女婿", "孙子",
                     "孙女", "公婆", "嫂子", "姑姑", "侄子", "侄女", "外甥", "姥姥", "姥爷", "导师")

# When a fact holds, or whether it is one: a past habit, a wish or a plan states something else
# than the present fact ("used to have a Pixel", "我想买一辆特斯拉"). Each class is one mark, so
# "plans to" and "wants to" agree.
_MODALITY_MARKS = {
    "past": (r"\bused to\b", r"\bformerly\b", r"\bpreviously\b", r"\bago\b",
             r"\blast (?:year|month|week|semester|term|season|summer|winter|spring|fall|autumn|weekend|night)\b",
             r"\bno longer\b", r"\bany ?more\b", r"\bin the past\b", r"\bback then\b", r"\bonce\b",
             r"\bas a (?:kid|child|teen(?:ager)?|student)\b", r"\bwhen (?:i|he|she|they|the user) was\b",
             r"\b(?:was|were)\b(?! born\b)", r"(?<!\bhave )(?<!\bhas )(?<!'ve )\bhad\b(?! to\b)", r"\bgrew up\b",
             r"\bquit\b", r"\bgave up\b", r"\b(?:until|till)\b",
             # "去过", "学过三年": what was once done (not "过敏", "不过", "难过", "过年").
             "(?<=[去来学做用吃喝住玩看养开干当上待呆练见到])过(?![敏年节期日分来去])",
             "以前", "曾经", "曾", "过去", "去年", "从前", "小时候", "之前", "原来", "本来", "当年", "那时", "上学时",
             "读书时", "年轻时"),
    "intent": (r"\bwant(?:s|ed)?\b", r"\bwould (?:like|love) to\b", r"\bplans? to\b", r"\bplanning to\b",
               r"\bthinking (?:about|of)\b", r"\bconsidering\b", r"\bhopes? to\b", r"\bhoping to\b", r"\bwish(?:es)?\b",
               r"\bintends? to\b", r"\bgoing to (?!the\b|a\b|an\b|work\b|school\b|bed\b)", r"\bmight\b", r"\bmaybe\b",
               r"\bwill\b", r"\b(?:i|he|she|they)'ll\b", r"\bsomeday\b", r"\bone day\b", r"\bdreams? of\b",
               r"\bnext (?:year|month|week|summer|spring|autumn|fall|winter)\b", r"\bsoon\b",
               "(?<![理思感梦回构幻猜])想(?!念|法)", "打算", "计划", "准备(?=去|要|买|考|换|学|搬|开|做)", "希望", "考虑",
               "将来", "明年", "下个月", "下周", "梦想", "有朝一日"),
}
_MODALITY_RES = {kind: re.compile("|".join(marks)) for kind, marks in _MODALITY_MARKS.items()}

Stance = tuple[bool, frozenset[str], frozenset[str]]


def _without(text: str, compounds: Sequence[str]) -> str:
    for word in compounds:
        text = text.replace(word, " ")
    return text


def polarity(text: str) -> bool:
    """Whether a text is negated or states an aversion (English words or Chinese negators)."""
    lowered = nfkc_lower(text)
    words = set(_NON_WORD.sub(" ", lowered.replace("’", "'")).split()) | set(lowered.split())
    if words & _NEGATION_WORDS or any(w.endswith("n't") for w in words):
        return True
    lowered = _without(lowered, _NOT_NEGATION_CJK)
    return any(mark in lowered for mark in _NEGATION_CJK)


def persons(text: str) -> frozenset[str]:
    """The other people a statement is about or belongs to ("wife", "我同事"), in either language."""
    lowered = nfkc_lower(text).replace("’", "'")
    words = {w.removesuffix("'s") for w in _LATIN_WORD.findall(lowered)}
    words |= {part for w in words for part in w.split("-")}  # "ex-wife", "step-son"
    found = {w for w in words if w in _PERSON_WORDS_EN}
    found.update(p for p in _PERSON_PHRASES_EN if p in lowered)
    found.update(_ROLE_AFTER_POSSESSIVE.findall(lowered))
    lowered = _without(lowered, _NOT_PERSON_CJK)
    found.update(p for p in _PERSON_WORDS_CJK if p in lowered)
    return frozenset(found)


# A short Chinese word that ends in one of these names a relative or a friend: "表哥", "二姨", "网友".
_KIN_ENDINGS = ("哥", "姐", "弟", "妹", "爸", "妈", "叔", "姨", "舅", "友")


def is_person_word(word: str) -> bool:
    """Whether one word (English, lower-case, or Chinese) names a relation: "husband", "表哥", "同事"."""
    return (word in _PERSON_WORDS_EN or word in _PERSON_WORDS_CJK or word in _IN_LAWS
            or (len(word) <= 3 and word.endswith(_KIN_ENDINGS)))


def names_person_first(text: str) -> bool:
    """Whether a Chinese text opens with a person ("闺蜜下周…", "同事说…"), however it segments."""
    return text.startswith(_PERSON_WORDS_CJK) and not text.startswith(_NOT_PERSON_CJK)


# What began in the past and holds now is present: "since last year", "since May", "从去年开始", "去年起".
_ONGOING = re.compile(r"\bsince (?:last \w+|\w+ (?:\w+ )?ago|\w+)\b|(?:自从|从|自)(?:去年|以前|之前)(?:开始|起)?"
                      r"|去年(?:开始|起)")


def modality(text: str) -> frozenset[str]:
    """The marks of time and intent in a statement: "past" (used to, 以前), "intent" (plans to, 打算)."""
    lowered = _ONGOING.sub(" ", nfkc_lower(text).replace("’", "'"))
    return frozenset(kind for kind, pattern in _MODALITY_RES.items() if pattern.search(lowered))


# Whether a fact is done or still going on: "has already paid off her loans" and "is still paying
# off her loans" are two facts, though either mark alone only qualifies ("I still live in Oslo").
_ASPECT_MARKS = {"done": re.compile(r"\balready\b|已经|早就"), "ongoing": re.compile(r"\bstill\b|还在|仍然|依然|仍在")}


def aspect(text: str) -> str:
    """"done" (already, 已经), "ongoing" (still, 还在), or "" (neither, or both)."""
    lowered = nfkc_lower(text)
    found = [kind for kind, pattern in _ASPECT_MARKS.items() if pattern.search(lowered)]
    return found[0] if len(found) == 1 else ""


def aspects_clash(a: str, b: str) -> bool:
    """Whether two aspects (`aspect`) make two facts: one done, the other still going on."""
    return {a, b} == {"done", "ongoing"}


def stance(text: str) -> Stance:
    """What must be equal before two statements can be one fact: negation, other people, time and intent."""
    return polarity(text), persons(text), modality(text)
