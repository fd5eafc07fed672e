"""The offline rules extractor: English and Chinese patterns for what a user says about themselves.

It reads user turns only, one sentence at a time, and keeps a sentence when a rule recognises a
preference, an identity or situation fact, an instruction for the agent, a plan or an event, or a
change of mind. Importance and confidence are set by the rule. Questions, greetings, thanks and
small talk match no rule, so chit-chat yields nothing. The memory's content is the sentence as the
user said it, so Chinese stays Chinese.

Rules also say what a fact is *about* (its slot: "home", "job", "favourite:food", "opinion:tea")
and its value, and a change of mind names the value it replaces; the decision step uses these to
tell a restatement from a contradiction without relying on the embedding model, which cannot read
Chinese.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agent_memory.clauses import (
    asks_to_stop,
    instruction,
    is_event,
    names_what_holds,
    read_sentence,
    statement,
    subject,
)
from agent_memory.models import MemoryType, MessageRecord
from agent_memory.text import is_chinese, sentences, terms

SlotFn = Callable[["re.Match[str]"], tuple[str | None, str | None]]


@dataclass
class ProposedMemory:
    """A memory an extractor proposes, before the decision step sees what is already known."""

    content: str
    memory_type: MemoryType
    importance: float
    confidence: float
    source_ids: list[str]
    message: MessageRecord
    extractor: str
    rule: str = ""
    slot: str | None = None
    value: str | None = None
    # Values this statement says are no longer true ("I switched from VS Code to Neovim").
    replaces: list[str] = field(default_factory=list)
    # How it takes back something said before, named or not: "strong" ("no longer", "scratch
    # that", "算了": what the user said last), "weak" ("from now on", "以后都": what it is about).
    retracts: str = ""
    # Existing memory ids the LLM says this restates or contradicts.
    restates: str | None = None
    contradicts: str | None = None
    context: str | None = None
    # The embedding of `content`, where what proposed it already computed one (stored as is).
    vector: Sequence[float] | None = None


@dataclass(frozen=True)
class Rule:
    """One pattern: what it recognises and how much the memory it makes is worth."""

    name: str
    pattern: re.Pattern[str]
    memory_type: MemoryType
    importance: float
    confidence: float
    slot: SlotFn | None = None
    flip: bool = False


_TRAILING = re.compile(
    r"\s*(?:\b(?:lately|recently|these days|now|anymore|any more|for good|full[- ]time|last (?:week|month|year)|"
    r"this (?:week|month|year)|again|as usual|mostly|honestly|too|in \d{4}|lol|haha|lmao|tbh|ngl|"
    r"in (?:january|february|march|april|may|june|july|august|september|october|november|december))\b|[,.;:!?…—–-]|\s)+$",
    re.IGNORECASE,
)
_ARTICLES = re.compile(r"^(?:the|a|an|my|some)\s+", re.IGNORECASE)
_ZH_TRAILING = re.compile(r"[了的吧啊呢呀哦，。！？、\s]+$")


def clean_value(value: str) -> str:
    """A slot value without trailing time words, punctuation and leading articles."""
    value = value.strip()
    for _ in range(3):
        value = _TRAILING.sub("", value)
        value = _ZH_TRAILING.sub("", value)
        value = _ARTICLES.sub("", value)
    return value.strip()


def slot_key(text: str) -> str:
    """A comparable form of a slot name or value."""
    return " ".join(terms(clean_value(text), keep_stopwords=True))


def _fixed(slot: str) -> SlotFn:
    return lambda m: (slot, clean_value(m.group("value")))


def _named(prefix: str) -> SlotFn:
    return lambda m: (f"{prefix}:{slot_key(m.group('slot'))}", clean_value(m.group("value")))


def _opinion(sign: str) -> SlotFn:
    return lambda m: (f"opinion:{slot_key(m.group('value'))}", sign)


def _flip_value(m: re.Match[str]) -> tuple[str | None, str | None]:
    new = m.groupdict().get("new")
    return None, clean_value(new) if new else None


def _en(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _zh(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


_V = r"(?P<value>[^,.;:!?—–()]{2,60})"
_ZV = r"(?P<value>[^，。；;！!？?、（(]{1,30}?)"
_JOBS = (
    r"engineer|developer|programmer|designer|teacher|nurse|doctor|researcher|accountant|manager|student|"
    r"scientist|analyst|consultant|lawyer|architect|writer|editor|founder|freelancer|administrator|admin|"
    r"technician|pharmacist|chef|journalist|product owner|recruiter|salesperson|marketer|lecturer|professor|"
    r"dentist|therapist|electrician|mechanic|pilot|translator|photographer"
)
_PETS = r"dog|cat|puppy|kitten|rabbit|parrot|hamster|beagle|retriever|collie|terrier|poodle|spaniel|tabby cat|bird|turtle|fish"
_ZH_JOBS = r"工程师|程序员|设计师|老师|教师|护士|医生|研究员|会计|经理|学生|开发|分析师|律师|架构师|产品经理|运维|销售|编辑|记者|顾问|厨师"

# In order of precedence: the first rule that matches a sentence decides what it becomes.
RULES: tuple[Rule, ...] = (
    # -- changes of mind (they supersede what they replace) ------------------------------------
    Rule("en.flip.switch", _en(r"\b(?:switched|moved|changed|migrated|went) (?:over )?from (?P<old>[^,.;!?—]{2,40}?) (?:to|for) (?P<new>[^,.;!?—]{2,40})"),
         "semantic", 0.7, 0.85, _flip_value, flip=True),
    Rule("en.flip.drop", _en(r"\b(?:dropped|ditched|gave up|given up|quit|stopped using|stopped drinking|stopped eating|"
                             r"gone off|went off|cut back on|cut out|moved away from|(?:i'?m|i am) (?:so )?over|"
                             r"no longer (?:use|drink|eat|like|want)|(?:don'?t|do not) (?:use|drink|eat|like) (?=[^,.;]*\b(?:any ?more|now)\b))"
                             r" (?P<old>(?!the moon\b|it\b|that\b|this\b)[^,.;!?—]{2,40}?)"
                             r"(?:\s+(?:lately|recently|these days|any ?more|now|for good))?(?=[,.;!?—]|$)"),
         "semantic", 0.7, 0.85, _flip_value, flip=True),
    Rule("zh.flip.switch", _zh(r"从(?P<old>[^，。；！？]{1,20}?)(?:换成|改成|换到|转到|改用|切换到|搬到)了?(?P<new>[^，。；！？了]{1,20})"),
         "semantic", 0.7, 0.85, _flip_value, flip=True),
    Rule("zh.flip.stop", _zh(r"(?:不再|不)(?:用|喝|吃|玩)(?P<old>[^，。；！？]{1,15}?)了"),
         "semantic", 0.7, 0.85, _flip_value, flip=True),
    Rule("zh.flip.tired", _zh(r"(?:吃|喝|用)(?P<old>[^，。；！？]{1,15}?)(?:吃|喝|用)腻了"),
         "semantic", 0.7, 0.85, _flip_value, flip=True),
    Rule("zh.flip.quit", _zh(r"(?:^|[，：:])(?P<old>[^，。；！？：:]{1,15}?)(?:戒了|不怎么(?:吃|喝|用)了)"),
         "semantic", 0.7, 0.85, _flip_value, flip=True),
    # -- instructions and constraints for the agent (procedural) -------------------------------
    Rule("en.rule.imperative", _en(r"^(?:(?:one |a )?rule(?: for you)?:\s*|important:\s*|please\s+|and\s+|also,?\s+|remember,?\s+)*"
                                   r"(?:always|never|don'?t ever|do not ever|please don'?t|only ever|make sure (?:to|you)|"
                                   r"from now on|going forward|in future|in the future|keep your (?:answers|replies)|stick to)\b(?!\s+mind\b)"
                                   # "Never actually understood it", "Always loved that place": said of the past.
                                   r"(?!\s+(?:actually |really |once |even )?(?:(?!\w*eed\b|embed\b)\w+ed|been|had|understood|got|"
                                   r"knew|saw|thought|went|did|was|were)\b)"),
         "procedural", 0.8, 0.85),
    Rule("en.rule.marker", _en(r"\b(?:rule for you|no exceptions|from now on|going forward|only place i want|only ever|"
                               r"(?:go|goes|send|sent) (?:to|via) [^,.;]{2,30} only|(?:you|answers?|replies) (?:must|should) (?:always|never))\b"),
         "procedural", 0.8, 0.8),
    Rule("zh.rule", _zh(r"^(?!(?:不要紧|别客气|不用谢|不用客气|别担心|不要担心))(?:.{0,12}?)(?:以后都|以后(?:回答|回复|所有|给我)|(?:回复|回答)请|请务必|务必|千万别|千万不要|"
                        r"一律|永远不要|不要在|别在|禁止|只(?:发|用|走)[^，。]{1,8}|记住哦?[，,]|请(?:用|只用|一直用|保持)|不要(?:给我|再|用|发))"),
         "procedural", 0.8, 0.85),
    # -- identity and situation (semantic) ------------------------------------------------------
    Rule("en.identity.home", _en(r"\bi (?:now |currently )?(?:live|am based|'m based) in " + _V), "semantic", 0.7, 0.85, _fixed("home")),
    Rule("en.identity.moved", _en(r"\bi (?:just |recently )?moved to " + _V), "semantic", 0.7, 0.8, _fixed("home")),
    Rule("en.identity.home_is", _en(r"^(?P<value>[A-Z][\w .'-]{1,30}) is (?:home|where i live)\b"), "semantic", 0.7, 0.8, _fixed("home")),
    Rule("en.identity.job", _en(r"\b(?:i work as|i'?m working as|my job is|my day job is|day job:|i am|i'm) (?P<value>(?:an? )?[\w -]{0,30}?\b(?:"
                                + _JOBS + r")s?)\b"), "semantic", 0.7, 0.85, _fixed("job")),
    Rule("en.identity.works_at", _en(r"\bi work (?:at|for) " + _V), "semantic", 0.6, 0.8, _fixed("employer")),
    Rule("en.identity.pet", _en(r"\b(?:i have|i've got|we have|i own|my) (?:an? |two |three )?(?:[\w-]+ )?(?:" + _PETS + r")\b"),
         "semantic", 0.6, 0.8),
    Rule("en.identity.family", _en(r"\b(?:i have|i've got|we have|i'?m expecting) (?:an? |one |two |three |four |twin )?(?:[\w -]{0,20})?"
                                   r"\b(?:kids?|children|child|sons?|daughters?|boys|girls|baby|newborn|twins)\b"),
         "semantic", 0.6, 0.8),
    Rule("en.identity.diet", _en(r"\b(?:i'?m|i am) (?P<value>vegetarian|vegan|pescatarian|allergic to [\w -]{2,30}|lactose intolerant|"
                                 r"gluten[- ]free|diabetic|halal|kosher)"), "semantic", 0.8, 0.9),
    Rule("en.identity.name", _en(r"\bmy name is " + _V), "semantic", 0.6, 0.85, _fixed("name")),
    Rule("en.identity.speak", _en(r"\bi (?:speak|am fluent in|'m fluent in) " + _V), "semantic", 0.5, 0.8),
    Rule("en.project", _en(r"\b(?:i'?m|i am|we'?re|we are) (?:building|developing|working on|writing) (?!on\b)(?P<value>[^,.;!?]{3,60})"
                           r"|\bmy (?:current |main |side )?project (?:is|is called)\b"),
         "semantic", 0.6, 0.8),
    # -- preferences (semantic) -----------------------------------------------------------------
    Rule("en.pref.favourite", _en(r"\bmy (?:all[- ]time |new )?favou?rite (?P<slot>[a-z][a-z ]{1,25}?) (?:is|are|has to be) " + _V),
         "semantic", 0.6, 0.85, _named("favourite")),
    Rule("en.pref.of_choice", _en(r"\bmy (?P<slot>[a-z][a-z ]{1,20}?) of choice is " + _V), "semantic", 0.6, 0.85, _named("favourite")),
    Rule("en.pref.go_to", _en(r"^(?P<value>[^,.;!?]{2,40}?) is (?:my|still my|really my) (?:go-to|favou?rite|usual|number one|preferred)\b"
                              r"(?: (?P<slot>[a-z]+))?"),
         "semantic", 0.6, 0.8, lambda m: (f"favourite:{slot_key(m.group('slot') or '')}" if m.group("slot") else None,
                                          clean_value(m.group("value")))),
    Rule("en.pref.negative", _en(r"\bi (?:really |truly )?(?:hate|dislike|can'?t stand|don'?t (?:like|enjoy)|do not (?:like|enjoy)) "
                                 r"(?!it\b|that\b|this\b|when\b|how\b|to\b|being\b)" + _V),
         "semantic", 0.6, 0.8, _opinion("-")),
    Rule("en.pref.positive", _en(r"\bi (?:really |truly |absolutely |much |do |also |still )?(?:prefer|love|like|enjoy|adore) "
                                 r"(?!it\b|that\b|this\b|your\b|you\b|the idea\b|how\b|when\b|what\b|to think\b)" + _V),
         "semantic", 0.6, 0.8, _opinion("+")),
    Rule("en.pref.habit", _en(r"\b(?:i do all my|i write (?:almost )?(?:everything|all my)|i (?:basically |mostly )?run on|"
                              r"my usual (?:\w+ )?(?:order|drink|setup) is|i'?m a (?:big |huge )?fan of|i'?m happiest (?:writing|using|with)|"
                              r"nothing beats|default to|assume (?=[\w ]{2,20}$)|(?:i'?m|i am) at my (?:sharpest|best)|"
                              r"(?:book|schedule) my meetings|works best for me|nine times out of ten|the only \w+ i (?:use|want|drink)|"
                              r"i (?:always|usually|mostly) (?:use|drink|eat|order|write))\b"),
         "semantic", 0.6, 0.8),
    # -- plans and events (episodic) ------------------------------------------------------------
    Rule("en.event.travel", _en(r"\b(?:i'?m|i am|we'?re|we are) (?:flying|going|travel?ling|heading|driving) (?:to|back to) (?P<value>[A-Z][^,.;!?]{1,40})"
                                r"|\bbooked it\b|\bholiday\b.*\bleaving\b|\bi'?ll be (?:away|off|out of office|on holiday|on vacation)\b"),
         "episodic", 0.5, 0.8),
    Rule("en.event.purchase", _en(r"\b(?:i (?:finally |just )?(?:bought|purchased|ordered|picked up|got myself)|treated myself: picked up) (?P<value>an? [^,.;!?]{2,50})"),
         "episodic", 0.5, 0.8),
    Rule("en.event.incident", _en(r"\b(?:we had|there was) an? (?:production |major |big )?(?:outage|incident)\b|\b(?:went|was) down\b.*\b(?:because|root cause|cause)\b|^root cause:"),
         "episodic", 0.6, 0.8),
    Rule("en.event.plan", _en(r"\bi(?:'m| am) (?:planning|going|about) to (?P<value>(?!ask\b|need\b|try\b|say\b|be honest\b)[^,.;!?]{3,60})"
                              r"|\bi have (?:an? |my )(?:interview|exam|appointment|surgery|flight|wedding|conference)\b"
                              r"|\bi (?:just )?(?:got (?:promoted|married|engaged|a new job)|started (?:a new job|at))\b"),
         "episodic", 0.5, 0.75),
    # -- Chinese: identity and situation --------------------------------------------------------
    Rule("zh.identity.home", _zh(r"我(?:现在|目前)?(?:住在|人在|定居在|在)(?P<value>[^，。；！？]{1,8}?)(?:[，。；！？]|$|住|工作|生活|上班|，差不多)"),
         "semantic", 0.7, 0.85, _fixed("home")),
    Rule("zh.identity.moved", _zh(r"我[^，。]{0,6}?搬到了?(?P<value>[^，。；！？]{1,8}?)(?:[，。；！？]|$)"), "semantic", 0.7, 0.8, _fixed("home")),
    Rule("zh.identity.job", _zh(r"我(?:是做|的工作是|是一名|是一个|是|从事|在做)(?P<value>[^，。；！？]{0,10}?(?:" + _ZH_JOBS + r"))(?:的|工作|，|。|$)"),
         "semantic", 0.7, 0.85, _fixed("job")),
    Rule("zh.identity.pet", _zh(r"我家的(?:猫|狗|柯基|金毛|兔子|鹦鹉|橘猫|布偶猫)|我(?:家)?(?:养了|有)(?:一只|一条|两只|只)?(?P<value>[^，。；！？]{0,6}?(?:猫|狗|柯基|金毛|兔子|鹦鹉|仓鼠|乌龟|鱼))"),
         "semantic", 0.6, 0.8),
    Rule("zh.identity.family", _zh(r"我(?:家)?有(?:[^，。]{0,12}?)(?:孩子|女儿|儿子|双胞胎|宝宝)"), "semantic", 0.6, 0.8),
    Rule("zh.identity.diet", _zh(r"我(?:对(?P<value>[^，。]{1,8})过敏|吃素|不吃(?:辣|肉|海鲜|猪肉|牛肉)|是素食)"), "semantic", 0.8, 0.9),
    Rule("zh.identity.name", _zh(r"我(?:叫|的名字是)(?P<value>[^，。；！？]{1,10})|叫我(?P<called>[^，。；！？'‘’\"]{1,6}?)就(?:行|好|可以)"),
         "semantic", 0.6, 0.85, lambda m: ("name", clean_value(m.group("value") or m.group("called")))),
    Rule("zh.project", _zh(r"(?:我|我们)(?:最近|现在|目前)?(?:在做|正在做|在开发|在写)[^，。]{1,20}?(?:项目|系统|应用|平台|小程序|服务)|(?:手上|手头|当前)的项目"),
         "semantic", 0.6, 0.8),
    # -- Chinese: preferences -------------------------------------------------------------------
    Rule("zh.pref.favourite", _zh(r"我最喜欢(?:的)?(?P<slot>[^，。是]{1,6}?)是(?P<value>[^，。；！？]{1,20})"), "semantic", 0.6, 0.85, _named("favourite")),
    Rule("zh.pref.favourite_verb", _zh(r"我?(?:最喜欢|最爱)(?P<slot>吃|喝|用|看|听|玩)(?P<value>[^，。；！？]{1,20}?)(?:[，。；！？]|$)"),
         "semantic", 0.6, 0.85, _named("favourite")),
    Rule("zh.pref.negative", _zh(r"我(?:很|最|特别|真的)?(?:讨厌|不喜欢|受不了)(?!你|这|那)" + _ZV + r"(?:[，。；！？]|$)"),
         "semantic", 0.6, 0.8, _opinion("-")),
    Rule("zh.pref.positive", _zh(r"我(?:很|最|特别|比较|还是|一直)?(?:喜欢|偏好|偏爱|爱喝|爱吃|习惯用)(?!你|这|那|的)" + _ZV + r"(?:[，。；！？]|$)"),
         "semantic", 0.6, 0.8, _opinion("+")),
    Rule("zh.pref.habit", _zh(r"(?:基本都用|一般都用|全都在|平时只(?:喝|吃|用)|平时用的[^，。]{0,6}是|十次有九次|百吃不厌|最顺手|"
                              r"写起来最顺手|都在[^，。]{1,15}里写|比不上|对我最合适|我(?:最|比较)习惯|默认用|状态最好|都用它|雷打不动|一直是)"),
         "semantic", 0.6, 0.8),
    # -- Chinese: plans and events --------------------------------------------------------------
    Rule("zh.event.travel", _zh(r"(?:要去|出发去|飞去|准备去|打算去)(?P<value>[^，。；！？]{1,10}?)(?:旅行|旅游|度假|出差|玩)"),
         "episodic", 0.5, 0.8),
    Rule("zh.event.purchase", _zh(r"(?:下单买了|入手了|买的|买了|购买了|订了)(?P<value>[^，。；！？]{2,20})"), "episodic", 0.5, 0.8),
    Rule("zh.event.incident", _zh(r"(?:出了|发生了)(?:线上)?(?:事故|故障)|(?:挂了|宕机).*(?:原因|根因|导致)"), "episodic", 0.6, 0.8),
    Rule("zh.event.plan", _zh(r"我(?:下周|明天|后天|下个月|月底|周末|[0-9一二三四五六七八九十]+(?:号|日|月))(?:要|会|得|准备|打算)"
                              r"|我(?:打算|计划|准备)(?!一下)[^，。]{2,}|(?:预约了|订好了)"),
         "episodic", 0.5, 0.75),
)

# A short reply to the assistant's question about the user ("Which editor do you use?" -> "Neovim.").
_ABOUT_YOU_EN = _en(r"\b(?:you|your)\b")
_ABOUT_YOU_ZH = _zh(r"你")
_ASKS_PREFERENCE = _en(
    r"\b(?:which|what|where|any|how would you like|do you (?:have|prefer|use|like))\b.*\b(?:use|using|prefer|like|favou?rite|"
    r"language|editor|drink|food|eat|do for work|based|live|city|pet|restrictions?|format|send|keep free|work in|writing it in|"
    r"project|built with|kids|home)\b"
)
_ASKS_PREFERENCE_ZH = _zh(r"^(?!.*(?:帮你|帮忙的|需要我做)).*(?:什么|哪个|哪里|哪段|哪种|有没有|喜欢|忌口|在哪)")
_NOT_AN_ANSWER = re.compile(
    r"^(?:ok(?:ay)?|yes|yeah|yep|no|nope|sure|thanks?|thank you|cool|great|nice|fine|maybe|not sure|i don'?t know|"
    r"好的?|好吧|嗯+|是的|对|不是|没有|谢谢|不知道|行|可以|随便)[.!。！~～]*$",
    re.IGNORECASE,
)
# What goes on as before: not what a change of mind replaces its old value with.
_CONTINUES = re.compile(r"\b(?:still|though|as before|as usual)\b|照旧|照样|还是|还(?:在|吃|喝|用|住|玩|练|有)|仍然|依然|继续")
# At most this many words without a subject, after a statement, say more of it ("Like 0.01%.").
_ELABORATION_WORDS = 6
_ELABORATES = re.compile(r"^(?:like|about|around|roughly|approx\w*|same|mostly|currently|only|just|maybe|probably|"
                         r"usually|at|on|in|every|since|for|with|without|plus|especially|except)\b", re.IGNORECASE)
# Words that make a clause of their own: a subject pronoun, or a verb that agrees with one.
_CLAUSE_WORDS = re.compile(r"\b(?:i|we|you|he|she|they|it|is|are|am|was|were|be|been|do|does|did|have|has|had|will|would|"
                           r"can|could|should|must|need|want|get|got|go|went|don'?t|doesn'?t|can'?t)\b|'(?:s|re|m|ve|ll|d)\b",
                           re.IGNORECASE)
# A list item's mark ("- freelance illustrator", "2) 住在杭州").
_BULLET = re.compile(r"^(?:[-*•·]|\d+[.)、])\s+")
# A text quoted to be worked on ("改正式一点：'王总，明天我请一天假…'") is not the user speaking:
# a quotation holding a comma or a sentence's end, each kind of quote closed by its own mark.
_PUNCT = "[,，.。!！?？]"
_QUOTED = re.compile(rf"\"[^\"\n]*?{_PUNCT}[^\"\n]*?\"|“[^”\n]*?{_PUNCT}[^”\n]*?”|「[^」\n]*?{_PUNCT}[^」\n]*?」"
                     rf"|『[^』\n]*?{_PUNCT}[^』\n]*?』|(?<!\w)'(?!\d)[^'\n]*?{_PUNCT}[^'\n]*?'(?!\w)")
# A sentence that opens with "some context:" or "背景：" says that what follows is about the user.
_ABOUT_ME = re.compile(r"(?:some |for |a bit of )?(?:context|background|about me)\b|背景[:：]|关于我|我的情况|个人情况|简单介绍",
                       re.IGNORECASE)
_QUESTION = re.compile(r"[?？]\s*$")
# What the answer should be like, said after the question: "下次选什么好？最好是小说。", "Any ideas? Ideally cheap."
_FIRST_CLAUSE = re.compile(r"^[^,，;；]*[,，;；]\s*")
_ANSWER_WISH = re.compile(r"^(?:最好|尽量|preferably|ideally|bonus (?:points )?if)", re.IGNORECASE)


def _end_of(sentence: str, content: str) -> str:
    """The punctuation that ended a sentence, unless its content already ends with it."""
    end = sentence.rstrip()[len(sentence.rstrip().rstrip(".!?。！？；;")):]
    return "" if content.endswith(end) else end


def said_sentences(text: str) -> list[str]:
    """The sentences of a turn that the user says: a text quoted to be worked on left out."""
    return sentences(_QUOTED.sub(" ", text))


class RulesExtractor:
    """Pattern-based extraction in English and Chinese; needs no model and no network."""

    name = "rules"

    def __init__(self, rules: Sequence[Rule] = RULES, *, max_answer_terms: int = 8) -> None:
        self.rules = tuple(rules)
        self.max_answer_terms = max_answer_terms

    def extract(self, messages: Sequence[MessageRecord], existing: Sequence[object] = ()) -> list[ProposedMemory]:
        """Candidates from the user turns of one conversation, in message order."""
        out: list[ProposedMemory] = []
        for i, message in enumerate(messages):
            if message.role != "user":
                continue
            found = self.read_turn(message)
            out.extend(found)
            if not found and i > 0:
                answer = self._answer(messages[i - 1], message)
                if answer is not None:
                    out.append(answer)
        return out

    def read_turn(self, message: MessageRecord) -> list[ProposedMemory]:
        """The candidates of one user turn: a rule's where one matches, else what the clause
        grammar finds the user saying about themselves; a retraction is kept with what follows it."""
        out: list[ProposedMemory] = []
        pending: ProposedMemory | None = None  # a retraction waiting for the statement of what holds now
        pending_end = ""  # the punctuation that ended the retraction's sentence
        held: list[ProposedMemory] = []  # what still holds or happened, said while a retraction waits
        about_self = introduced = asked = False
        made_before = False  # whether the sentence before gave a candidate
        for sentence in said_sentences(message.content):
            listed = bool(_BULLET.match(sentence))
            sentence = _BULLET.sub("", sentence)
            zh = is_chinese(sentence)
            after_question, asked = asked, bool(_QUESTION.search(sentence))
            if after_question and _ANSWER_WISH.match(sentence):
                # "…选什么好？最好是小说。": what the answer should be, not a fact; what follows it
                # may be ("Ideally something with tofu, I'm vegan.").
                wish = _FIRST_CLAUSE.match(sentence)
                sentence = sentence[wish.end():] if wish else ""
                if not sentence.strip():
                    continue
            # After "some context:", until someone else is the subject.
            preface = _ABOUT_ME.match(sentence)
            introduced = (introduced or bool(preface)) and subject(sentence, zh) != "other"
            rest = sentence[preface.end():] if preface else ""
            if preface and (not terms(rest) or subject(rest, zh) == "other"):
                continue  # "Some context so you stop asking 😅": it says facts follow, and states none
            reading = read_sentence(sentence, previous_self=about_self or introduced)
            about_self = reading is not None
            stated = statement(sentence)
            candidate = self.match_sentence(sentence, message)
            if candidate is not None and candidate.memory_type != "procedural":
                if not stated or subject(sentence, is_chinese(sentence)) == "other":
                    candidate = None  # a rule's words inside a request, a question or someone else's fact
                else:
                    # The statement, without the request beside it; its slot and value as corrected
                    # ("Lyon — sorry, Lille" is a home in Lille).
                    corrected = self.match_sentence(stated, message) if stated != sentence else None
                    if corrected is not None and corrected.rule == candidate.rule:
                        candidate.slot, candidate.value = corrected.slot, corrected.value
                    candidate.content = stated
            if candidate is None and instruction(sentence) and (not _QUESTION.search(sentence) or asks_to_stop(sentence)):
                candidate = ProposedMemory(
                    content=sentence, memory_type="procedural", importance=0.8, confidence=0.7,
                    source_ids=[message.message_id], message=message, extractor=self.name, rule="clause.instruction",
                    retracts=reading.flip if reading is not None else "",
                )
            # "so I did it" says nothing: two words, one of them more than a function word.
            if candidate is None and reading is not None and len(terms(reading.content, keep_stopwords=True)) >= 2 and terms(
                reading.content
            ):
                event = not reading.flip and is_event(reading.content)
                candidate = ProposedMemory(
                    content=reading.content, memory_type="episodic" if event else "semantic", importance=0.5,
                    confidence=0.65,
                    source_ids=[message.message_id], message=message, extractor=self.name,
                    rule="clause.flip" if reading.flip else "clause", replaces=list(reading.old),
                    retracts=reading.flip,
                )
            elif candidate is not None and reading is not None and reading.flip:
                candidate.retracts = candidate.retracts or reading.flip
                candidate.replaces = list(dict.fromkeys([*candidate.replaces, *reading.old]))
            if candidate is None:
                made_before = False
                continue
            if (made_before and pending is None and candidate.rule == "clause" and not (zh or listed or introduced)
                    and len(sentence.split()) <= _ELABORATION_WORDS and _ELABORATES.match(sentence)
                    and not _CLAUSE_WORDS.search(sentence) and not _CONTINUES.search(sentence)):
                # "... the interest is a joke. Like 0.01%.": a few words that open with a modifier,
                # without a subject or verb, say more of the sentence before, not a fact of their own
                # ("Love parsley.", "Married, two kids." are facts).
                joint = " " if out[-1].content.rstrip().endswith((".", "!", "?")) else ". "
                out[-1].content = f"{out[-1].content.rstrip()}{joint}{candidate.content}"
                continue
            made_before = True
            if pending is not None and not _CONTINUES.search(candidate.content) and not (
                candidate.memory_type == "episodic" and not candidate.retracts
            ):
                # "I no longer like dark mode; I prefer light mode now": one change of mind. So is "I
                # quit the orchestra. Still play violin though. Thursdays I sing in a choir now": what
                # still holds, and what happened, are other facts.
                joint = "" if is_chinese(pending.content) else " "
                pending.content = f"{pending.content}{pending_end}{joint}{candidate.content}".strip()
                pending.replaces = list(dict.fromkeys([*pending.replaces, *candidate.replaces]))
                pending.slot, pending.value = pending.slot or candidate.slot, pending.value or candidate.value
                out.extend([pending, *held])
                pending, held = None, []
                continue
            if pending is not None and candidate.retracts:
                out.extend([pending, *held])  # another change of mind starts: the first says nothing more
                pending, held = None, []
            if candidate.retracts == "strong" and not (candidate.value and candidate.replaces) and not names_what_holds(
                candidate.content
            ):
                # It says what no longer holds; what holds now may follow in the next sentence.
                pending, pending_end = candidate, _end_of(sentence, candidate.content)
                continue
            if pending is not None:
                held.append(candidate)  # said after the change of mind: decided after it, not taken back by it
                continue
            out.append(candidate)
        if pending is not None:
            out.extend([pending, *held])
        return out

    def match_sentence(self, sentence: str, message: MessageRecord) -> ProposedMemory | None:
        """The candidate the first matching rule makes of one sentence, or None."""
        if _QUESTION.search(sentence) or len(terms(sentence, keep_stopwords=True)) < 2:
            return None
        for rule in self.rules:
            match = rule.pattern.search(sentence)
            if match is None:
                continue
            slot, value = rule.slot(match) if rule.slot else (None, None)
            replaces: list[str] = []
            if rule.flip:
                old = clean_value(match.group("old"))
                if not old:
                    continue
                replaces = [old]
            return ProposedMemory(
                content=sentence, memory_type=rule.memory_type, importance=rule.importance,
                confidence=rule.confidence, source_ids=[message.message_id], message=message,
                extractor=self.name, rule=rule.name, slot=slot or None, value=value or None, replaces=replaces,
                retracts="strong" if rule.flip else "",
            )
        return None

    def _answer(self, previous: MessageRecord, message: MessageRecord) -> ProposedMemory | None:
        """A short answer to the assistant's question about the user, kept with the question."""
        if previous.role != "assistant" or not _QUESTION.search(previous.content):
            return None
        text = message.content.strip()
        if _NOT_AN_ANSWER.match(text) or _QUESTION.search(text):
            return None
        if len(terms(text, keep_stopwords=True)) > self.max_answer_terms:
            return None
        question = said_sentences(previous.content)[-1]
        zh = bool(_ABOUT_YOU_ZH.search(question))
        if zh:
            if not _ASKS_PREFERENCE_ZH.search(question):
                return None
        elif not (_ABOUT_YOU_EN.search(question) and _ASKS_PREFERENCE.search(question)):
            return None
        return ProposedMemory(
            content=f"{question} {text}", memory_type="semantic", importance=0.5, confidence=0.7,
            source_ids=[previous.message_id, message.message_id], message=message, extractor=self.name,
            rule="answer", context=None,
        )
