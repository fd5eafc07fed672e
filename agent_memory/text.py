"""Language-aware text helpers: the CJK pattern, whether a text is Chinese, sentences, the keyword
terms BM25 indexes, and lexical similarity. Every module that asks these questions asks them here.

English (and other space-separated scripts) is split into lower-cased words. Chinese, Japanese
and Korean runs, which have no spaces, become overlapping character bigrams, as Lucene's CJK
analyser does; the Chinese (Han) parts of a run also give their words, as jieba's dictionary
segments them, and the single characters of those words (Lucene's CJK unigrams). A short list
of function words (的, 什么, 怎样) is dropped from all three, characters included, and so is a
bigram of function words' characters only (是怎 of 是|怎样). Words carry the terms that bigrams split or blur
(手术费, 一只); bigrams carry what the dictionary lacks (names, new words); characters let a
paraphrase meet its fact halfway (家庭 and 家里 share 家). The store indexes the joined terms with a plain whitespace tokenizer, so the
same function serves indexing and querying and the two can never drift apart.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

# The character ranges treated as CJK (kana, CJK ideographs, hangul), for regex classes here and elsewhere.
CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# One CJK character; a text made of CJK characters only.
CJK = re.compile(f"[{CJK_RANGES}]")
CJK_RUN = re.compile(rf"^[{CJK_RANGES}]+$")
# Word tokens stop where a CJK run starts, so "从Emacs换成Zed了" splits into its words and bigrams.
_TOKEN = re.compile(rf"[{CJK_RANGES}]+|[^\W_{CJK_RANGES}]+(?:['’][^\W_{CJK_RANGES}]+)?", re.UNICODE)
# Han characters: the parts of a CJK run that the Chinese dictionary segments into words.
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# A clitic on an English word ("what's", "they're", "we'll"): a stop word with one is a stop word.
_CLITIC = re.compile(r"['’](?:s|re|ve|ll|d|m)$")

# Words too common to carry meaning in a memory or a question about one.
ENGLISH_STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does doing for from had has have having he her
    hers him his how i if in into is it its itself just me my myself of on or our ours she should so
    some such than that the their theirs them then there these they this those to too up us very was
    we were what when where which who whom why will with would you your yours yourself am about
    also any again all s t don't i'm it's""".split()
)


# Chinese function words: particles, pronouns, auxiliaries and question words, dropped as words,
# as bigrams (with a bigram made of their characters only) and as characters (a bigram that holds
# one content character, such as 的猫, stays). Content
# words that questions often use (用户, 喜欢) are kept.
CHINESE_STOPWORDS = frozenset(
    """的 地 得 了 着 过 是 在 有 和 与 及 或 就 也 都 还 又 再 才 很 太 最 更 这 那 这个 那个 这些 那些
    我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们 自己 吗 呢 吧 啊 呀 哦 嗯 哈 嘛 啦 么 什么 怎么 怎样
    怎么样 哪 哪里 哪儿 哪个 哪些 谁 多少 几 为什么 一个 一下 一些 有点 没 没有 不 别 把 被 让 给 对 向
    从 到 跟 比 会 能 要 想 可以 可能 应该 说 吗 个 些 之 其 而 但 但是 因为 所以 如果 然后""".split()
)


def nfkc_lower(text: str) -> str:
    """NFKC-normalise (full-width letters and digits become ASCII) and lower-case."""
    return unicodedata.normalize("NFKC", text).lower()


def comparable(text: str) -> str:
    """`nfkc_lower` with its whitespace collapsed: two texts that differ only in case, width and
    spacing compare equal (and one is found inside the other)."""
    return " ".join(nfkc_lower(text).split())


def terms(text: str, *, keep_stopwords: bool = False) -> list[str]:
    """The keyword terms of a text: words, and bigrams of CJK runs (a lone CJK character stays)."""
    out: list[str] = []
    for token in _TOKEN.findall(nfkc_lower(text)):
        if CJK_RUN.match(token):
            words, function = _segment(token)
            if len(token) == 1:
                out.append(token)
            else:
                out.extend(token[i : i + 2] for i in range(len(token) - 1)
                           if not (function[i] and function[i + 1]))
            out.extend(words)
            out.extend(c for w in words for c in w if c not in CHINESE_STOPWORDS)
        elif keep_stopwords or _CLITIC.sub("", token) not in ENGLISH_STOPWORDS:
            out.append(token.replace("’", "'"))
    return out


def _segment(run: str) -> tuple[list[str], list[bool]]:
    """The content words of a CJK run's Han parts, and for each character of the run whether it
    belongs to a function word."""
    words: list[str] = []
    function = [False] * len(run)
    for part in _HAN.finditer(run):
        at = part.start()
        for word in chinese_words(part.group()):
            if word in CHINESE_STOPWORDS:
                function[at : at + len(word)] = [True] * len(word)
            else:
                words.append(word)
            at += len(word)
    return words, function


_segmenter_lock = threading.Lock()
_segmenter = None


def _jieba():  # type: ignore[no-untyped-def]
    """The process's jieba tokenizer, loaded once (its dictionary ships in the package)."""
    global _segmenter
    if _segmenter is None:
        with _segmenter_lock:
            if _segmenter is None:
                import logging

                import jieba

                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                _segmenter = tokenizer
    return _segmenter


@lru_cache(maxsize=65_536)
def chinese_words(han: str) -> tuple[str, ...]:
    """The dictionary words of a run of Han characters (jieba, without its HMM guesses for unknown
    words: bigrams already cover those, and the dictionary alone is faster and deterministic)."""
    return tuple(_jieba().cut(han, HMM=False))


def keyword_text(text: str) -> str:
    """The whitespace-joined terms the full-text index stores and the query is matched with."""
    return " ".join(terms(text))


def field_text(text: str) -> str:
    """The keyword terms of one field of a memory (its own words, or its context), each word once.

    A chat turn that says "code" twice ("live-coded in VS Code") is no more about code than one
    that says it once; words count once per field, by their stem. CJK terms are kept as they come:
    a Chinese word that is also a bigram of its run counts twice on purpose (see `terms`).
    """
    seen: set[str] = set()
    out = []
    for term in terms(text):
        if not CJK_RUN.match(term):
            stem = stem_words([term])[0]
            if stem in seen:
                continue
            seen.add(stem)
        out.append(term)
    return " ".join(out)


# The full-text index's analyser (`storage.tables.index_configs`): whitespace tokens, lower-cased,
# English-stemmed, ASCII-folded, tokens over 40 bytes dropped. `index_terms` applies the same steps
# where BM25 is computed in process, so that both places score the same terms.
_MAX_TOKEN_BYTES = 40


_local = threading.local()


def _stemmer():  # type: ignore[no-untyped-def]
    """This thread's Snowball English stemmer (PyStemmer objects must not be shared across threads)."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        import Stemmer  # PyStemmer: the Snowball English stemmer the index's tokenizer also uses

        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def stem_words(words: list[str]) -> list[str]:
    """English words reduced to their Snowball stems (likes/liked/liking -> like, codes -> code)."""
    return list(_stemmer().stemWords(words))


def _fold(text: str) -> str:
    """Drop accents (café -> cafe); CJK and plain ASCII pass unchanged."""
    if text.isascii():
        return text
    folded = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", folded)


@lru_cache(maxsize=65_536)
def index_terms(keywords: str) -> tuple[str, ...]:
    """The terms the full-text index keeps of a `keyword_text` (cached: a user's rows recur)."""
    tokens = [t for t in keywords.lower().split() if len(t.encode()) <= _MAX_TOKEN_BYTES]
    stemmed = _stemmer().stemWords(tokens)
    if keywords.isascii():
        return tuple(stemmed)
    return tuple(_fold(t) for t in stemmed)


# A text is Chinese when its CJK characters are at least this share of its CJK characters and
# Latin letters together: a Chinese word takes one or two characters where an English one takes
# five letters or so, so "我喜欢用 Python 写后端" (7 of 13) is Chinese and a name or two in
# Chinese letters inside an English sentence is not.
CHINESE_SHARE = 0.25


def is_chinese(text: str) -> bool:
    """Whether a text is mostly Chinese (CJK characters at least `CHINESE_SHARE` of its CJK
    characters and Latin letters)."""
    cjk = len(CJK.findall(text))
    latin = sum(c.isascii() and c.isalpha() for c in text)
    return cjk > 0 and cjk >= CHINESE_SHARE * (cjk + latin)


# A sentence ends at . ! ? 。！？ ; ；, a line break, or a face or a gesture, which ends one as a
# full stop does ("the Pixel died last month 💀 I'm on an iPhone 15 now"); a point between digits
# is a decimal point ("0.01%"), not an end.
_EMOJI = "\U0001F600-\U0001F64F\U0001F910-\U0001F97F\U0001F480\U0001F389\U0001F44C-\U0001F44F"
_SENTENCE = re.compile(rf"(?:[^.!?。！？；;\n{_EMOJI}]|(?<=\d)\.(?=\d))+[.!?。！？；;{_EMOJI}\ufe0f\s]*")


def sentences(text: str) -> list[str]:
    """The sentences of a text, each with the marks that end it (abbreviations are rare enough in
    chat to ignore)."""
    return [piece for match in _SENTENCE.finditer(text) if (piece := match.group(0).strip())]


def only_asks(text: str) -> bool:
    """Whether every sentence of a text is a question ("家里有没有需要考虑的人？", "How was it?").

    A turn that only asks tells nothing; the answer after it holds the question's words too (as
    its context), and is what a search for them wants first.
    """
    asked = [s for s in sentences(text) if any(c.isalnum() for c in s)]
    return bool(asked) and all(s.endswith(("?", "？")) for s in asked)


def lexical_similarity(a: str, b: str) -> float:
    """Overlap of two texts' term sets (Dice coefficient), 0..1, readable for any language."""
    ta, tb = set(terms(a)), set(terms(b))
    if not ta or not tb:
        return 0.0
    return 2 * len(ta & tb) / (len(ta) + len(tb))
