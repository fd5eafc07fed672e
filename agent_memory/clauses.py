"""The grammar of what a user says about themselves, in English and Chinese, clause by clause.

A chat turn mixes a fact with a request ("我是高中数学老师，帮我想个导数课的开场白"), a question,
small talk, or someone else's fact ("my boss takes oat milk"). The rules extractor keeps the
clauses that state something about the user and drops the rest, by grammar rather than by
sentence templates:

- a clause is a *request* when it asks the assistant for something (can you, help me, 帮我, 推荐),
  a *question* when it asks, *hypothetical* when it imagines (if I were, 如果), *passing* when it
  is about the moment (thanks, lol, 好累, just wanted to share);
- a clause is *about someone else* when its subject is another person (my boss, 我室友);
- a clause is *about the user* when its subject is the user (I, my job, 我, 我的), or when it
  has no subject and continues a clause about the user, or (in Chinese, which drops subjects)
  when it says when or how often something holds for the speaker (现在, 已经, 每天, 上个月);
- a change of mind is read from negators and aspect, not from one sentence shape: "no longer",
  "not ... anymore", "no more X", "done with X", "switched from X to Y", "scratch that",
  "changed my mind", "不再", "已经不…了", "不…了", "戒了", "换成", "改成", "算了", "以后都".

Splitting keeps a correction whole: "I no longer like dark mode; I prefer light mode now" is one
change of mind, so a clause that retracts is kept with the clause that says what holds now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent_memory.stance import WORK_ROLES, is_person_word, names_person_first, persons
from agent_memory.text import chinese_words, is_chinese, terms

# Clause boundaries inside a sentence: commas, dashes, semicolons, colons (either script).
# A colon between digits is a ratio or a time ("16:8", "7:40"), not a boundary.
_CLAUSE = re.compile(r"(?:[^,，;；:：—–]|(?<=\d)[:：](?=\d))+(?:[,，;；:：—–]+|$)")
# Words that join the user's clause to another: "even though I do school drop-off".
_SUBORDINATORS = "even though|although|because|while|whereas"
_EN_OPENERS = re.compile(
    r"^(?:(?:oh|well|also|and|but|so|actually|honestly|btw|fyi|ngl|tbh|lol|haha|ok(?:ay)?|yeah|plus|anyway|"
    r"just so you know|for context|heads up|for the record|small change|one correction|plot twist(?: though)?|"
    r"(?:the )?(?:problem|thing|fact|catch) is|" + _SUBORDINATORS + "|"
    r"(?:big |good |bad |some )?news|"
    r"i should update you|update|i (?:always |usually )?(?:think|guess|suppose|feel like)|"
    r"just wanted to (?:say|let you know)(?: that)?)"
    r"\b[\s,!.:-]*)+",
    re.IGNORECASE,
)
_ZH_OPENERS = re.compile(r"^(?:(?:哦对了|对了|另外|还有|不过|但是|可是|其实|说来也怪|好消息|嗯+|哈哈+|所以|而且|我觉得|我感觉|可(?!惜|以|能)|但)"
                         r"[\s，,！!。…]*)+")

_EN_QUESTION = re.compile(
    r"\?\s*$|^(?:what|what's|whats|how|why|when|where|which|who|is|are|do|does|did|can|could|would|should|will|any)\b",
    re.IGNORECASE,
)
# Chinese question words ask only where the clause ends as a question or opens with them:
# "我什么都吃", "我不怎么喝酒", "我多少有点近视" are statements.
_ZH_QUESTION = re.compile(r"[?？]\s*$|[吗呢]\s*[。！!]?$|^(?:什么|怎么|为什么|哪|有没有|能不能|可不可以|是不是|要不要|多少|几点)"
                          r"|(?:为什么|有没有|能不能|可不可以|是不是|要不要)")
_EN_REQUEST = re.compile(
    r"\b(?:can you|could you|would you|will you|help me|give me|make me|build me|write me|show me|tell me|send me|"
    r"remind me|let me know|recommend|suggest|any (?:ideas|tips|suggestions)|please (?!don'?t|never|always)|"
    r"i need (?:a|an|some|help|you)|i'?m looking for|looking for|what should|whats a|what's a|how do i|"
    r"i was wondering|wondering if|pls|plz)\b",
    re.IGNORECASE,
)
_ZH_REQUEST = re.compile(r"帮我|给我(?:推荐|写|找|想|做|列|查|讲|看)|推荐(?:一下|个|几|点|些)|你(?:觉得|推荐|帮|能|可以)|请你|告诉我|"
                         r"想请教|求推荐|怎么办|咋办|有啥|该怎么")
_EN_HYPOTHETICAL = re.compile(r"\b(?:if i|if i were|i'?d (?:be|love|like)|i would|i wish|imagine|suppose|random thought)\b",
                              re.IGNORECASE)
_ZH_HYPOTHETICAL = re.compile(r"如果|要是|假如|假设|随便想想|万一")
_EN_PASSING = re.compile(
    r"^(?:thanks?|thank you|ty|thx)\b|^(?:lol|haha|ok|okay|sure|cool|great|nice|perfect|sick|right|yes|no|nah|yep|yeah)"
    r"(?:[\s!.~,]+(?:thanks?|ty|thx|lol|haha)\b)*[\s!.~,]*$"
    r"|^just wanted to (?:share|say hi|check)|\bi (?:know|see|agree|hope so|forgot)\b|\bi (?:always |usually |often )?forget\b|"
    r"^i'?m (?:tired|bored|hungry|sorry|fine|good|done|back|here|not sure|curious)[\s.!]*$|\bdid (?:u|you) see\b|"
    r"\bi'?m (?:\w+ )?(?:panicking|obsessed|stressed|freaking out|nervous|excited|so happy|gutted|wrecked|exhausted|"
    r"devastated|heartbroken|shattered|knackered|drained|annoyed|frustrated|upset|worried|scared|relieved|overwhelmed)\b"
    r"(?!\s+(?:of|by|about|around|when|that)\b)|"
    r"\bnever (?:\w+ )?understood\b|^not (?:my|me)\b|\b(?:is|are) (?:a |an |an absolute |such a )?(?:nightmare|pain|joke)\b|"
    r"\bi get it\b|\bi just want (?:the info|the answer|to know)\b|\bseems? (?:\w+ )?(?:better|worse|fine|ok|okay|good)\b|"
    r"^i'?m [^,.;]{0,30}\b(?:today|tonight|this week|right now|at the moment)\b|"
    r"\bi (?:really )?(?:like|love|hate) (?:that|this|it)\b(?! \w+ing)|\bsounds (?:good|great)\b",
    re.IGNORECASE,
)
_ZH_PASSING = re.compile(r"^(?:谢谢|好的|好吧|嗯|哈哈|对|是的|行|可以|没事)[\s，,。！!~～]*$|^谢谢|好累|好冷|好热|好困|饿了|累死|哈哈哈|"
                         r"先不用了|问题解决了|可惜|[疼累困饿烦热冷忙]死了|^马上[^，。]{1,8}了|"
                         r"我在想|我猜|心情|^(?:今天|今晚|这周|这几天)")

# The user as subject. English: I, I'm, my <thing> (not a person), we/our for the user's team.
_EN_SELF = re.compile(r"^(?:i|i'm|im|i've|ive|i'll|i am|i have|my|we|we're|we've|our)\b", re.IGNORECASE)
_EN_MY = re.compile(r"^(?:my|our)\s+(\w[\w-]*)(?:\s+(\w[\w-]*))?", re.IGNORECASE)
_BEGAN = "got diagnosed|diagnosed|started|began|joined|graduated|adopted"
_EN_SUBJECTLESS = re.compile(
    r"^(?:prefer|love|like|hate|can'?t stand|addicted|allergic|vegetarian|vegan|been|have been|playing|working|living|"
    r"going|doing|using|drinking|eating|not doing|no more|done with|moving|switching|booking|planning|heading|flying|"
    r"changed my mind|scratch that|been meaning|quit|gave up|stopped|uninstalled|deleted|cancell?ed|ditched|dropped|switched|"
    + _BEGAN + r")\b",
    re.IGNORECASE,
)
# What began for someone, said without a subject ("Got diagnosed with ADHD last year", "started
# last week"): the user's at the start, but whoever spoke before's after someone else's clause.
_EN_BEGAN = re.compile(rf"^(?:{_BEGAN})\b", re.IGNORECASE)
# Who the speaker is, said the chat way: "single dad of a 4-year-old here", "backend dev here".
_EN_HERE = re.compile(r"^(?!.*\b(?:is|are|was|were|it|you|they|he|she)\b)(?:[\w'-]+\s+){1,6}here[\s.!]*$", re.IGNORECASE)
# When or how often, said before the speaker: "these days I drink …", "Thursdays I sing in a choir".
_EN_LEAD = re.compile(r"^(?:(?:these days|nowadays|lately|recently|currently|now|still|also|usually|always|mostly|"
                      r"on \w+s|\w+days|every \w+|in the (?:mornings?|evenings?)|at night)[,\s]+)+", re.IGNORECASE)
# When, said before the speaker in Chinese: "下周五（11月8号）我要飞新加坡", "明年我打算…".
_ZH_TIME_LEAD = re.compile(r"^(?:(?:下|上|这|本)(?:个)?(?:周|星期|礼拜|月)[一二三四五六日天末]?|明天|后天|今年|明年|周末|月底|年底|"
                           r"[0-9一二三四五六七八九十]+月[0-9一二三四五六七八九十]+[号日]|[（(][^）)]{0,12}[）)]|\s)+")
# What the speaker would like to do, said to ask about it: "周末想带爸妈去周边转转，有什么推荐？".
# How things are at the moment, said to explain a request: "跑完膝盖有点酸", "最近突然有点挑食".
_ZH_STATE = re.compile(r"有点|有些|突然|老是|最近总|好[疼痛累烦酸难]")
_EN_STATE = re.compile(r"\b(?:a bit|kinda|kind of|lately|keeps?|suddenly)\b", re.IGNORECASE)
# A plan or a habit has a when: "下周去上海出差", "周六上午去游泳", "flying out tomorrow".
_ZH_PLAN = re.compile(r"下(?:周|星期|礼拜|个月)|明天|后天|明年|周[一二三四五六日天末]|星期|礼拜|每|[上下中]午|晚上|早上|傍晚|凌晨|夜里|"
                      r"月底|年底|[0-9一二三四五六七八九十]+月|[0-9一二三四五六七八九十]+[号日点]")
_EN_PLAN = re.compile(r"\b(?:tomorrow|tonight|next \w+|on (?:mon|tues|wednes|thurs|fri|satur|sun)day|this (?:week|weekend|month)|"
                      r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)\w* \d+)\b", re.IGNORECASE)
_EN_WISH = re.compile(r"\b(?:i want to|i wanna|i'?m hoping to|i'?m thinking (?:of|about))\b", re.IGNORECASE)
_ZH_WISH = re.compile(r"^[^，。]{0,4}?(?:想|打算|希望)(?![念法])")
_EN_OTHER_SUBJECT = re.compile(r"^(?:he|she|they|this|that|there|you|your|the|a|an)\b", re.IGNORECASE)
_ZH_OTHER_SUBJECT = re.compile(r"^(?:你|他|她|它|这|那|今天|天气|外面|楼下|楼上|隔壁|对面)")
# Others as a group, after any word of when: "现在大家轮流选", "最近他们都…".
_ZH_GROUP_SUBJECT = re.compile(r"^(?:现在|最近|后来|以后|平时)?(?:大家|他们|她们|别人|人家|其他人)(?!都?(?:叫|喊|称呼)我)")
# Chinese drops the subject: a clause that says when or how often, or how things changed, is
# the speaker's when nobody else is named.
_ZH_SELF_MARKS = re.compile(r"^.{0,3}?(?:现在|已经|一直|每天|每周|每个月|平时|一般|经常|上个月|上周|去年|最近|以后|从来|后来|"
                            r"不再|戒了|换成|改成|换了|搬到|离职|开了|只喝|只吃|只用|偶尔|改(?:坐|学|喝|吃|去|住|玩|看|骑|开|穿|练|打|用))")
# Someone of the user's named or aged: "my daughter Mia", "my son just turned 5", "我女儿叫朵朵".
# "My wife and I live in Denver": the user speaks, with someone.
_EN_WITH_ME = re.compile(r"^(?i:my|our) \w+(?: \w+)? and (?:i|me)\b", re.IGNORECASE)
_EN_NAMES_RELATION = re.compile(r"^(?i:my|our) \w+(?:'s name is| (?:is|just turned|turned) \d+| [A-Z][a-z]+\b)")
_ZH_NAMES_RELATION = re.compile(r"^我(?:的|家)?\w{1,3}?(?:叫|名叫|今年|刚满|[0-9一二三四五六七八九十两]+岁)")
# A standing instruction for the assistant: addressed to it, for every time to come.
# "Can you stop adding disclaimers?": asked, and meant for every answer to come.
_STOP_ASKED = r"\b(?:can|could|would) you (?:please )?stop\b"
_EN_INSTRUCTION = re.compile(
    r"\b(?:whenever you|every time you|when you (?:give|write|send|answer|reply|make|suggest|draft)|"
    r"in (?:your|all your|future) (?:answers|replies|responses)|from now on|going forward|for future (?:stuff|reference)|"
    r"(?:always|never|don'?t ever|do not ever) (?:use|add|include|write|send|give|call|schedule|book|suggest|mention|reply|answer))\b"
    r"|\bno \w+(?: \w+)? please\b|" + _STOP_ASKED + r" \w+ing\b"
    r"|\b(?:when|whenever) i (?:paste|send|share|ask|give you|forward)\b[^.?!]*\b(?:just |only |always )?(?:give|show|send|use|reply|answer|keep)\b"
    r"|^(?:please )?(?:use|write|answer|reply|respond|keep|give|talk|speak|call|format)\b.*\b(?:always|every time|from now on)\b",
    re.IGNORECASE,
)
_ZH_INSTRUCTION = re.compile(r"以后(?:帮我|给我|都|回答|回复|写|跟我)|每次(?:帮我|给我|写|回答|回复)|的时候(?:都|也)?(?:用|别|不要|记得)|"
                             r"(?:回答|回复|注释|邮件|代码)[^，。]{0,6}(?:都用|也用|用中文|用英文|别|不要)|别太|语气")


def asks_to_stop(sentence: str) -> bool:
    """Whether a question asks the assistant to stop doing something from now on."""
    return bool(re.search(_STOP_ASKED, sentence, re.IGNORECASE))


def instruction(sentence: str) -> bool:
    """Whether a sentence tells the assistant how to behave from now on ("whenever you give me
    code, use TypeScript", "写代码的时候注释也用中文")."""
    return bool((_ZH_INSTRUCTION if is_chinese(sentence) else _EN_INSTRUCTION).search(sentence))

# A change of mind, as grammar: what retracts, and what says what holds now.
# Strong: it takes back what was said ("scratch that" retracts the user's last statement). Weak:
# it says what holds from now on, which retracts only what it is about.
_EN_RETRACT = re.compile(
    r"\b(?:no longer|not \w+(?: \w+)? any ?more|any ?more|no more|done with|scratch that|changed my mind|"
    r"(?:switched|switching|moved|moving|changed|changing|migrated|migrating|went) (?:over )?(?:from|to)|"
    r"gave up|given up|quit|ditched|not anymore|(?:went|go|going|gone|switched|moved) back to|stopped (?!by\b)|"
    r"uninstalled|deleted|cancell?ed|got rid of|sold (?:my|the)|"
    r"(?:should |let me |need to )?correct (?:that|myself))\b",
    re.IGNORECASE,
)
_EN_WEAK_RETRACT = re.compile(r"\b(?:from now on|going forward|these days|now|moving to|going all in|instead|"
                              r"starting (?:today|tomorrow|next \w+|\w+day))\b", re.IGNORECASE)
_EN_OLD = re.compile(
    r"\b(?:no longer (?:\w+ )?|not (?:doing|using|drinking|eating|into|on) |no more |done with |quit |gave up |ditched |"
    r"dropped |cut (?:out )?|stopped (?:using |drinking |eating |doing )?|uninstalled |deleted |cancell?ed |got rid of |"
    r"not \w+ing (?:her |him |them |my )?|(?:switched|moved|changed|migrated|went) (?:over )?from )"
    r"(?P<old>(?![\w .+#'-]*\b(?:that|it|this|them|those)\b)(?!the moon\b)(?!(?:lol|haha|lmao|tbh|ngl)\b)[\w .+#'-]{2,30}?)(?=\s*(?:any ?more|now|for good|after this|to\b|[,.;!?—–]|$))",
    re.IGNORECASE,
)
_ZH_RETRACT = re.compile(r"不再|已经不|不[^，。]{1,8}了|戒了|退了|挪到|换成|改成|改用|换到|转到|算了|离职|搬到|搬过去|换工作|"
                         r"改(?:坐|学|喝|吃|去|住|玩|看|骑|开|穿|练|打)|卖了|卖掉了|"
                         r"不用[^，。]{1,8}了|还是算了")
_ZH_WEAK_RETRACT = re.compile(r"以后都|现在只|现在改|现在都|现在|最近|能接受|开始")
# "日语先不学了", "Vue 基本不碰了": a habit dropped, its object said first, the speaker left out.
_ZH_NO_MORE = r"(?:基本|已经|早就|都|也|就|先|暂时|再也)?不(?:碰|用|喝|吃|玩|看|去|学|练|跑|坐|开)了"
_ZH_DROPPED_HABIT = re.compile(r"^[^，。]{1,8}?" + _ZH_NO_MORE)
# "坚持不下去了" says it could not go on, not what it no longer does.
_ZH_OLD = re.compile(r"(?:不再|已经不|不(?!下去|起|动|到|住|过|完))(?:喜欢)?(?:用|喝|吃|玩|做|学|去|住|坐|选)?(?P<old>[^，。；！？了]{2,14})了|戒了(?P<old2>[^，。；！？]{1,8})"
                     r"|从(?P<old3>[^，。；！？]{1,12}?)(?:换成|改成|换到|转到|改用|切换到|搬到)"
                     # The object said first: "Vue 基本不碰了", "奶茶已经不喝了".
                     r"|(?:^|[，,\s])(?P<old4>[A-Za-z][\w+#.]*|[^，。；！？\s]{2,6}?)\s*" + _ZH_NO_MORE)


@dataclass(frozen=True)
class Reading:
    """What one stretch of a turn says about the user: the clauses kept, and a change of mind."""

    content: str
    flip: str  # "strong" (takes back what was said), "weak" (says what holds now), or ""
    old: tuple[str, ...]


# "16:8 made me cranky so i switched to 14:10": "so", "but" or "then" before "I" starts a clause of its own.
# So does "and I" after a clause of three words or more ("Priya is vegan and I'm allergic to soy",
# "... and honestly I've taken it since I was a kid"): "My wife and I" is one subject.
# "even though I", "because I" start the user's clause after someone else's ("My manager keeps
# booking 8am meetings even though I do school drop-off"); so does "so" after three words or more
# ("i have IBS so low fodmap everything pls").
_EN_JOINED = re.compile(rf"(?<=\s)(?=(?:so|but|then|{_SUBORDINATORS})\s+i\b"
                        r"|and\s+(?:\w+ly\s+|also\s+)?i\b"
                        r"|so\s+(?!i\b|you\b|far\b|much\b|many\b|good\b|long\b|that\b|bad\b|well\b|(?:does|do|did|is|am|was|can)\b))",
                        re.IGNORECASE)


# A split at "and" or a bare "so" that leaves too little before it is undone: "My wife and I",
# "My older sister and I", "I'm so ...".
_SHORT_JOIN = re.compile(r"\s*(?:and\b|so\s+(?!i\b))", re.IGNORECASE)
_NOUN_PHRASE = re.compile(r"^\s*(?:my|our)\s+(?:[\w-]+\s+){0,3}$", re.IGNORECASE)
# The conjunction that joined a clause to someone else's, left out of what is kept.
_JOINING = re.compile(rf"^\s*(?:and|so|but|{_SUBORDINATORS})\s+(?=(?:\w+ly\s+|also\s+)?i\b)",
                      re.IGNORECASE)


def clauses(sentence: str) -> list[str]:
    """The clauses of a sentence, each with its trailing separator."""
    found = [m.group(0) for m in _CLAUSE.finditer(sentence) if m.group(0).strip(" ,，;；:：—–")]
    if is_chinese(sentence):
        return found
    return [part for clause in found for part in _split_joined(clause)]


# "... because my brother-in-law can only help that weekend": the reason is someone else's clause.
_EN_OTHERS_REASON = re.compile(rf"(?<=\s)(?=(?:{_SUBORDINATORS}|since)\s+(?:my|our)\s+)", re.IGNORECASE)
# "... because my wife and I are moving": the user is in it.
_WITH_ME = re.compile(rf"^(?:{_SUBORDINATORS}|since)\s+(?:my|our)\s+(?:[\w-]+\s+){{1,3}}and\s+i\b", re.IGNORECASE)


def _split_joined(clause: str) -> list[str]:
    """An English clause split where "so I", "and I", "even though I" ... start another, and where
    a reason that starts with someone else ("because my sister ...") does."""
    reasons: list[str] = []
    for piece in _EN_OTHERS_REASON.split(clause):
        if reasons and not (persons(" ".join(piece.split()[:5])) and not _WITH_ME.match(piece)):
            reasons[-1] += piece  # "because my knee hurts", "because my wife and I are moving"
        else:
            reasons.append(piece)
    out: list[str] = []
    for reason in reasons:
        for part in _EN_JOINED.split(reason):
            if out and (not out[-1].strip() or (_SHORT_JOIN.match(part) and (
                len(out[-1].split()) < 3 or _NOUN_PHRASE.match(out[-1])))):
                out[-1] += part  # the space before "so"; "My older sister and I share a flat"
            else:
                out.append(part)
    return out


def _bare(clause: str, zh: bool) -> str:
    text = clause.strip().strip(",，;；:：—–").strip()
    return _ZH_OPENERS.sub("", text) if zh else _EN_OPENERS.sub("", text)


def dropped(clause: str, zh: bool) -> bool:
    """Whether a clause is a request, a question, a hypothetical or passing talk."""
    text = _bare(clause, zh)
    if not text or asks(clause, zh):
        return True
    if zh:
        return bool(_ZH_HYPOTHETICAL.search(text) or _ZH_PASSING.search(text))
    return bool(_EN_HYPOTHETICAL.search(text) or _EN_PASSING.search(text))


def names_relation(clause: str, zh: bool) -> bool:
    """Whether a clause names or ages someone of the user's ("我女儿叫朵朵", "my son just turned 5")."""
    text = _bare(clause, zh)
    return bool((_ZH_NAMES_RELATION if zh else _EN_NAMES_RELATION).match(text))


def asks(clause: str, zh: bool) -> bool:
    """Whether a clause asks the assistant something: a request or a question."""
    text = _bare(clause, zh)
    if zh:
        return bool(_ZH_QUESTION.search(text) or _ZH_REQUEST.search(text))
    return bool(_EN_QUESTION.search(text) or _EN_REQUEST.search(text))


_EN_SO_FRAGMENT = re.compile(r"^\s*so\s+(?:for|in|on|at|with|to|about|what|how|which|when)\b(?!.*\bi\b)", re.IGNORECASE)
# What the user speaks about, said before them: "工作那部分我已经挪到飞书文档了".
_ZH_TOPIC_FIRST = re.compile(r"^(?![你他她它这那])[^，。你他她它]{1,6}?(?<![跟给对和帮让叫被把向替陪请])我"
                             r"(?:已经|一般|每天|都|也|还|就|平时|现在|会|要|不|没)")
# What someone says of the user is the user's: "医生说我血糖偏高", "my doctor says I'm anaemic".
# So is what someone did to the user's situation: "They moved me to the platform team", "公司给换了 ThinkPad".
_ZH_REPORTED_SELF = re.compile(r"^(?:医生|大夫|体检|检查|报告|营养师)[^，。我]{0,3}(?:说|讲|显示|发现)我"
                               r"|^(?:公司|单位|学校|部门|领导)[^，。我]{0,3}(?:刚|已经)?给我?(?:换|调|安排|配)了")
_EN_REPORTED_SELF = re.compile(r"^(?:my )?(?:doctor|doc|dentist|gp|therapist|physio)\s+(?:says|said|thinks|told me)\s+(?:that\s+)?(?:i|my)\b"
                               r"|^(?:they|\w+)\s+(?:just\s+)?(?:moved|put|switched|transferred|promoted|assigned|changed)\s+me\b",
                               re.IGNORECASE)
# Someone named as the subject: "Priya on my team is vegan", "Jess keeps ..." (with an apposition,
# "Jess, my flatmate, keeps", only where the whole sentence is read: clauses split at commas).
_EN_NAMED_SUBJECT = re.compile(
    r"^(?!(?:I|We|It|This|That|There)\b)[A-Z][a-z]+(?: [A-Z][a-z]+)?"
    r"(?:(?:,[^,]{2,30},| (?:on|from|at|in) (?:my|our) \w+)\s+(?:is|was|has|had)\b"
    r"|\s+(?:keeps|says|said|thinks|wants|loves|likes|hates|swears)\b)")
# Whose role a word after "my" names: a relative ("mother-in-law") or someone at work ("my manager").
_EN_ROLES = frozenset((*WORK_ROLES, "neighbour", "neighbor"))


def _names_person(word: str) -> bool:
    word = word.removesuffix("'s")
    parts = [word, word.removesuffix("s"), *word.split("-")]
    return any(is_person_word(w) or w in _EN_ROLES for w in parts if w)


def subject(clause: str, zh: bool) -> str:
    """Whose clause it is: "self", "other" (another person or thing named as subject) or "none"."""
    text = _bare(clause, zh)
    if zh:
        text = _ZH_TIME_LEAD.sub("", text) if _ZH_TIME_LEAD.sub("", text).startswith("我") else text
        if _ZH_NAMES_RELATION.match(text) or text.startswith(("我和", "我跟")) or _ZH_REPORTED_SELF.match(text):
            return "self"
        if _zh_relative(text) or _ZH_GROUP_SUBJECT.match(text):
            return "other"
        if text.startswith(("我", "咱")) or _ZH_TOPIC_FIRST.match(text):
            return "self"
        return "other" if _ZH_OTHER_SUBJECT.match(text) else "none"
    text = _EN_LEAD.sub("", text) if _EN_SELF.match(_EN_LEAD.sub("", text)) else text
    if _EN_SO_FRAGMENT.match(clause):
        return "other"  # "I don't own a car, so for a weekend away, ...": the question's, not the user's
    if _EN_NAMES_RELATION.match(text) or _EN_WITH_ME.match(text):
        return "self"
    if _EN_REPORTED_SELF.match(text):
        return "self"
    mine = _EN_MY.match(text)
    if mine and any(w and _names_person(w.lower()) for w in mine.groups()):
        return "other"
    if _EN_HERE.match(text):
        return "self"  # "Teacher here, 10 years in"
    first = text.split(maxsplit=1)[0].lower() if text.split() else ""
    if _names_person(first) or _EN_NAMED_SUBJECT.match(text):
        return "other"
    if _EN_SELF.match(text):
        return "self"
    if _EN_SUBJECTLESS.match(text) or _EN_HERE.match(text):
        return "self"
    return "other" if _EN_OTHER_SUBJECT.match(text) else "none"


def _zh_relative(text: str) -> bool:
    """Whether a Chinese clause starts with someone other than the user: a relation, the user's
    or someone's ("我表弟", "我们领导", "我的大学室友", "同事", "他的老板"), or another person."""
    rest = re.sub(r"^(?:我们|我家|我)的?", "", text)
    if names_person_first(rest):
        return True
    words = [w for w in chinese_words(text[:10]) if w != "的"]
    # After the user as possessor, the next words say whose; otherwise the first word does.
    named = words[1:3] if words[:1] and words[0] in ("我", "我们", "我家") else words[:1]
    return any(is_person_word(w) for w in named)


_EN_IRREGULAR_PAST = (
    "gave went got made took saw met bought had did ran wrote ate drank flew left came found lost won sold told spent "
    "sent built taught brought began chose drove fell forgot heard kept knew led paid rode said sat slept spoke "
    "stood swam threw woke wore caught fought held broke"
).split()
_EN_EVENT = re.compile(r"^(?:i|we)(?: \w+ly| just| finally| once)? (?:\w+ed|" + "|".join(_EN_IRREGULAR_PAST) + r")\b"
                       r"|\b(?:yesterday|last (?:night|week|weekend|month|year)|\w+ ago)\b", re.IGNORECASE)
_ZH_EVENT = re.compile(r"(?:昨天|前天|上周|上个月|去年|那天|刚才|上次)[^，。]{0,12}了")


# A change that happened once and holds since: "I switched my layout to Dvorak a few weeks ago".
_EN_NEW_STATE = re.compile(r"^(?:i|we)(?: \w+ly| just| finally)? (?:switched|moved|changed|started|began|joined|adopted|became)\b",
                           re.IGNORECASE)


def is_event(text: str) -> bool:
    """Whether a statement tells of something that happened once ("I gave a talk at PyCon",
    "昨天入手了一台相机"), rather than what holds (also "I switched to Dvorak last week": what
    holds since)."""
    zh = is_chinese(text)
    bare = _bare(text, zh)
    return bool((_ZH_EVENT if zh else _EN_EVENT).search(bare)) and (zh or not _EN_NEW_STATE.search(bare))


def retracts(text: str, zh: bool) -> str:
    """How a stretch of text takes back something held before: "strong" ("no longer", "scratch
    that", "不再", "算了"), "weak" ("from now on", "now", "以后都", "现在"), or "" (it does not)."""
    if (_ZH_RETRACT if zh else _EN_RETRACT).search(text):
        return "strong"
    return "weak" if (_ZH_WEAK_RETRACT if zh else _EN_WEAK_RETRACT).search(text) else ""


def old_values(text: str, zh: bool) -> tuple[str, ...]:
    """The values a change of mind names as no longer true ("no longer like dark mode", "戒了奶茶")."""
    pattern = _ZH_OLD if zh else _EN_OLD
    found = []
    for m in pattern.finditer(text):
        value = next((v for v in m.groups() if v), "")
        value = value.strip(" ,.;，。")
        if value:
            found.append(value)
    return tuple(found)


# A slip corrected on the spot: "Lyon — sorry, Lille", "the 14th — no wait, the 15th", "周三，不对，周四".
_EN_CORRECTION = re.compile(r"^(?:sorry|no wait|wait no|wait|i mean|oops|actually no|correction)[\s,!.—–-]*$", re.IGNORECASE)
_ZH_CORRECTION = re.compile(r"^[哦啊呃噢额]?(?:不对|哦不|不是|说错了|打错了|错了|口误)[\s，,！!。—–-]*$")
# The cue and the correction in one clause: "I mean Oakland", "sorry, Lille" split at no comma.
_EN_INLINE_CORRECTION = re.compile(r"^(?:sorry|no wait|wait no|i mean|oops|actually no)\s+(?P<fix>[^\W_].*)$", re.IGNORECASE)


def _corrected(kept: list[str], fix: str, zh: bool) -> None:
    """Replace the slip at the end of the last kept clause with the correction that follows it:
    a name for the trailing name ("New York" -> "Boston"), else as many words (or, in Chinese,
    characters) as the correction has ("the 14th" -> "the 15th", "周三" -> "周四")."""
    last = kept[-1].rstrip()
    tail = last[len(last.rstrip(",，;；:：—– ")):]
    body = last[: len(last) - len(tail)].rstrip(",，;；:：—– ")
    fix = fix.strip().rstrip(",，;；:：—–").strip()
    if _restates_clause(body, fix, zh):
        kept[-1] = fix + tail  # "I'm 29 — wait no, I turned 30"; "在苏州，哦不对，在昆山做外贸"
        return
    if zh:
        fix = fix.removeprefix("是")
        # The correction's first word ("周四出差去深圳" -> "周四"), or all of it with digits ("3月6号").
        size = len(fix) if any(c.isdigit() for c in fix) else len(next(iter(chinese_words(fix)), fix))
        # The slip is the body's tail of the correction's size, stopping at a verb-like 在/是/到.
        slip = body[-size:] if len(body) > size else ""
        kept[-1] = (body[: len(body) - len(slip)] + fix) if slip else f"{body}{tail}{fix}"
        return
    head = body.split()
    words = fix.rstrip(".!?").split()
    if words and words[0][:1].isupper():
        n = 0
        while n < len(head) - 1 and head[len(head) - 1 - n][:1].isupper():
            n += 1
    else:
        n = min(len(words), max(len(head) - 1, 0)) if len(words) <= 3 else 0
    kept[-1] = " ".join(head[: len(head) - n] + [fix]) if n else f"{body}{tail} {fix}"


def _restates_clause(slip: str, fix: str, zh: bool) -> bool:
    """Whether a correction says its clause over again rather than swapping the slip's last words:
    it has a subject of its own ("I turned 30"), or (Chinese) opens with the slip's first word
    ("在苏州" -> "在昆山做外贸")."""
    if zh:
        first = next(iter(chinese_words(fix)), "")
        return bool(first) and len(fix) > len(first) and _bare(slip, zh).startswith(first)
    return subject(fix, zh) == "self"


# A clause that only takes back what was said: kept, it carries the change of mind.
_TAKING_BACK = r"(?:还是)?算了|不对|scratch that|changed my mind|never ?mind|forget (?:that|it)|on second thought"
_PURE_RETRACTION = re.compile(rf"^(?:{_TAKING_BACK})[\s,，!！.。…]*$", re.IGNORECASE)


# After "scratch that", what holds now; unless it only says what was wrong with the old ("it's too slow").
_TAKEN_BACK = re.compile(rf"^(?:{_TAKING_BACK})[\s,，!！.。…—–-]*(?P<rest>.*)$", re.IGNORECASE | re.DOTALL)
_ABOUT_THE_OLD = re.compile(r"^(?:(?:on|about|regarding|it|that|this|those|these|they|because|since|too|so|but)\b|太|因为|这|那|不过|但)",
                            re.IGNORECASE)


def names_what_holds(text: str) -> bool:
    """Whether a sentence that takes back what was said also says, after its "changed my mind",
    what holds now ("Changed my mind, going with terracotta!", "算了，还是选红色吧"): then it is
    the whole change of mind, and the next sentence is a fact of its own."""
    m = _TAKEN_BACK.match(text.strip())
    if m is None:
        return False
    rest = m.group("rest").strip()
    return bool(terms(rest)) and not _ABOUT_THE_OLD.match(rest)


# How often: a habit ("I usually study late", "我下班一般打车"), and one said to replace another
# ("I'm up at 5 to study instead").
_EN_HABIT = re.compile(r"\b(?:usually|always|normally|typically|mostly|every (?:day|night|morning|evening|week|weekend)|"
                       r"most (?:days|nights|mornings|evenings)|tend to)\b", re.IGNORECASE)
_ZH_HABIT = re.compile(r"一般|平时|通常|总是|经常|每天|每周|每晚|每次|习惯")
# Said to be in place of something: "instead" (not "these days", which says only what holds now;
# Chinese says it with "改" and "换", which take back what was said before on their own).
_IN_ITS_PLACE = re.compile(r"\binstead\b", re.IGNORECASE)


def is_habit(text: str) -> bool:
    """Whether a statement says what the user does as a rule: "usually", "every morning", "一般"."""
    return bool((_ZH_HABIT if is_chinese(text) else _EN_HABIT).search(text))


def replaces_habit(text: str) -> bool:
    """Whether a statement says what the user does in place of what they did: "instead"."""
    return bool(_IN_ITS_PLACE.search(text))


# Where the user is, or what of theirs is still where it was: "坐标长沙", "人在深圳", "生活的还在印象笔记里"
# (a part of theirs named with 的; not "快递还在路上").
_ZH_STILL_MINE = re.compile(r"^(?:坐标|人在)|^(?:[^，。]{1,4}的)?(?:还在|仍在)")


def _zh_speaker_implied(text: str) -> bool:
    """Whether a Chinese clause without a subject is the speaker's by its shape: it says when or
    how often ("现在只喝美式"), where the user is ("坐标长沙"), or drops a habit with its object
    first ("日语先不学了")."""
    return bool(_ZH_SELF_MARKS.search(text) or _ZH_STILL_MINE.match(text) or _ZH_DROPPED_HABIT.match(text))


def _gives_reason(text: str, zh: bool, who: str) -> bool:
    """Whether a kept clause may only be the reason for a request that follows it: a wish, or,
    without a subject, how things are at the moment (but not a plan or habit with its when)."""
    if (_ZH_WISH if zh else _EN_WISH).search(text):
        return True
    return who == "none" and bool((_ZH_STATE if zh else _EN_STATE).search(text)) and not (_ZH_PLAN if zh else _EN_PLAN).search(text)


# A condition: what follows it in the sentence would follow, and is not so.
_EN_CONDITION = re.compile(r"^(?:if|suppose|supposing)\b", re.IGNORECASE)
_ZH_CONDITION = re.compile(r"^[^，。]{0,3}?(?:如果|要是|假如|假设|万一|若是)")
_EN_WOULD = re.compile(r"\b(?:would|could|might|i'?d)\b", re.IGNORECASE)
_ZH_WOULD = re.compile(r"就|肯定|一定")
_ZH_PRONOUNS = frozenset("我 你 他 她 它 我们 你们 他们 她们 咱们".split())


def _zh_would(clause: str) -> bool:
    """Whether a Chinese clause says what would follow: "就", "肯定", or "会" as a word of its own
    ("我会长期坚持", "我们会合伙开店"), not inside another ("会计", "开会")."""
    return bool(_ZH_WOULD.search(clause)) or any(
        w == "会" or (w.endswith("会") and w[:-1] in _ZH_PRONOUNS) for w in chinese_words(clause))
# Who the user is, said to frame a question: "As a nurse on night shifts, ...", "作为一个理发师，…".
_EN_AS = re.compile(r"^(\s*)as (an? (?!kid\b|child\b|teen|baby\b|student\b|result\b|side\b|matter\b|rule\b|aside\b|"
                    r"reminder\b|heads\b|bonus\b|whole\b|team\b|family\b|general\b)[^,]+)(?=,\s*$)", re.IGNORECASE)
_ZH_AS = re.compile(r"^(\s*)作为((?!交换|回报|补偿|礼物|奖励|代价)(?:一个|一名|一位)?[^，。]+)(?=，\s*$)")


def _as_self(clause: str, zh: bool) -> str:
    """A clause that frames what follows with who the user is, said as the user's statement."""
    if zh:
        return _ZH_AS.sub(r"\1我是\2", clause)
    return _EN_AS.sub(r"\1I'm \2", clause)


def read_sentence(sentence: str, *, previous_self: bool = False) -> Reading | None:
    """The part of a sentence that is about the user, or None: clauses that are requests,
    questions, hypotheticals, passing talk or someone else's are left out, a phrase that leads
    into a clause about the user ("With twin boys who just started school, my mornings ...") is
    kept with it, and a slip corrected on the spot ("Lyon — sorry, Lille") keeps only the
    correction."""
    zh = is_chinese(sentence)
    kept: list[str] = []
    leading: list[str] = []  # clauses without a subject, waiting for the clause they lead into
    other_seen = False
    about_self = previous_self
    correcting = False
    # Where the clauses start that only give the reason for a request that may follow: what the
    # user would like to do ("周末想带爸妈去周边转转"), or, without a subject, how things are at the
    # moment ("跑完膝盖有点酸").
    reason_at: int | None = None
    # Whether a clause kept so far has the user for its subject (not only the sentence before):
    # subject-less fragments that only continue the sentence before belong to a question after them.
    own = False
    conditional = False
    for clause in clauses(sentence):
        if (_ZH_CONDITION if zh else _EN_CONDITION).match(_bare(clause, zh)):
            conditional = True  # "要是能中五百万，…"; not "如果你需要知道的话，我对花生过敏"
            continue
        if conditional and (_zh_would(clause) if zh else bool(_EN_WOULD.search(clause))):
            continue  # "…，我第一件事就是带爸妈去环球旅行": what would follow
        clause = _as_self(clause, zh)
        text = _bare(clause, zh)
        inline = None if zh else _EN_INLINE_CORRECTION.match(clause.strip())
        if inline and kept:
            _corrected(kept, inline.group("fix"), zh)
            continue
        if (_ZH_CORRECTION if zh else _EN_CORRECTION).match(clause.strip()):
            correcting = bool(kept)
            continue
        if correcting:
            correcting = False
            _corrected(kept, clause, zh)
            continue
        if dropped(clause, zh):
            about_self = False if subject(clause, zh) == "other" else about_self
            leading = []
            if reason_at is not None and asks(clause, zh):
                del kept[reason_at:]
                reason_at = None
            if not own and asks(clause, zh):
                kept.clear()  # "anything tight, under 30 min, on history?": all of it the question's
            continue
        who = subject(clause, zh)
        if who == "self" and other_seen and not zh and _EN_BEGAN.match(text):
            who = "none"  # "My wife got a new job, started last week": hers
        if _PURE_RETRACTION.match(text) or who == "self" or (
            who == "none" and (about_self or (zh and not other_seen and _zh_speaker_implied(text)))
        ):
            # "With twin boys in school, my mornings ...": a phrase that leads into the clause (not
            # one joined to it by "and": "Bringing a dish to a potluck and I have diabetes").
            kept.extend(leading if who == "self" and not _JOINING.match(clause) else [])
            if _gives_reason(text, zh, who):
                reason_at = len(kept) if reason_at is None else reason_at
            elif who == "self":
                reason_at = None
            kept.append(clause)
            leading = []
            # A Chinese clause whose shape says it is the speaker's ("生活的还在印象笔记里", "坐标长沙") is
            # the user's own, whatever the sentence before.
            own = own or who == "self" or not about_self or (zh and who == "none" and _zh_speaker_implied(text))
            # What follows "我爸今年六十五" is the father's ("有高血压").
            relation = names_relation(clause, zh)
            about_self = not relation
            other_seen = other_seen or relation
        else:
            # What follows someone else's clause is theirs ("我室友是四川人，无辣不欢").
            other_seen = other_seen or who == "other"
            leading = [*leading, clause] if who == "none" and not other_seen else []
            about_self = False
    if not kept:
        return None
    content = _JOINING.sub("", "".join(kept)).strip().rstrip(",，;；:：—– ")
    if not content:
        return None
    flip = retracts(content, zh)
    return Reading(content=content, flip=flip, old=old_values(content, zh) if flip else ())


def statement(sentence: str) -> str:
    """A sentence without its requests, questions, hypotheticals and passing talk, slips
    corrected (what a rule that matched it keeps): "我是高中数学老师，帮我想个导数课的开场白" ->
    "我是高中数学老师"."""
    zh = is_chinese(sentence)
    kept: list[str] = []
    correcting = False
    for clause in clauses(sentence):
        inline = None if zh else _EN_INLINE_CORRECTION.match(clause.strip())
        if inline and kept:
            _corrected(kept, inline.group("fix"), zh)
        elif (_ZH_CORRECTION if zh else _EN_CORRECTION).match(clause.strip()):
            correcting = bool(kept)
        elif correcting:
            correcting = False
            _corrected(kept, clause, zh)
        elif not dropped(clause, zh):
            kept.append(clause)
    return "".join(kept).strip().rstrip(",，;；:：—– ")
