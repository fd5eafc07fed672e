"""The block an agent puts in its prompt (`POST /v1/context`), within a budget of tokens.

Three parts, each with a share of the budget: the memories recall finds for the query (each with
its type and date), a summary of the session's turns older than the window, and the window itself:
the session's most recent turns, whole, newest kept first. What a part leaves unused goes to the
next (memories, then turns, then the summary). Every count is made with one tokenizer
(`TokenCounter`), the one the answer names, and the finished text is counted again: it never holds
more than `max_tokens` tokens.

Summaries come from the configured LLM or, offline, from the turns' own sentences
(`extractive_summary`); they are cached per session and refreshed as the window moves on.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from agent_memory.errors import InvalidInputError, UnavailableError
from agent_memory.models import ContextQuery, MessageRecord, RecallHit
from agent_memory.setting_groups import BUNDLED_MODEL, ContextSettings
from agent_memory.text import is_chinese, only_asks, terms

log = logging.getLogger(__name__)

Language = Literal["en", "zh"]


# -- counting ------------------------------------------------------------------------------------


class TokenCounter:
    """Counts and cuts text in the tokens of one Hugging Face `tokenizer.json` (no special tokens)."""

    def __init__(self, path: str, name: str | None = None) -> None:
        from tokenizers import Tokenizer

        self.name = name or path
        self._tokenizer = Tokenizer.from_file(path)
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        # A session's turns are counted again by every block made for it: counts are remembered.
        self._length = lru_cache(maxsize=65_536)(self._encoded_length)

    def _encoded_length(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        """The number of tokens of `text`."""
        return self._length(text) if text else 0

    def cut(self, text: str, limit: int) -> str:
        """The longest start of `text` of at most `limit` tokens, ending at a token's end."""
        if limit <= 0:
            return ""
        if self.count(text) <= limit:
            return text
        return text[: self._tokenizer.encode(text, add_special_tokens=False).offsets[limit - 1][1]]


@lru_cache(maxsize=4)
def token_counter(path: str | None) -> TokenCounter:
    """The counter of a `tokenizer.json`, or of the bundled model's tokenizer; one per process."""
    if path is None:
        from agent_memory.embedding import bundled_model_path

        return TokenCounter(str(Path(bundled_model_path()) / "tokenizer.json"), BUNDLED_MODEL)
    if not Path(path).is_file():
        raise UnavailableError(f"no tokenizer file at {path} (AGENT_MEMORY_CONTEXT_TOKENIZER)")
    return TokenCounter(path)


# -- wording, by the session's language ----------------------------------------------------------

WORDS: dict[Language, dict[str, str]] = {
    "en": {
        "memories": "What you remember about the user (most relevant first):",
        "summary": "Earlier in this conversation:",
        "recent": "Recent turns of this conversation:",
        "user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool",
        "episodic": "event", "semantic": "fact", "procedural": "instruction",
        "colon": ": ", "sep": ", ",
    },
    "zh": {
        "memories": "关于用户的记忆（按相关度排序）：",
        "summary": "本次对话较早的内容：",
        "recent": "本次对话最近的几轮：",
        "user": "用户", "assistant": "助手", "system": "系统", "tool": "工具",
        "episodic": "经历", "semantic": "事实", "procedural": "做法",
        "colon": "：", "sep": "，",
    },
}


def language_of(texts: Sequence[str]) -> Language:
    """`zh` when the session (or the query) is mostly Chinese (`agent_memory.text.is_chinese`)."""
    return "zh" if is_chinese(" ".join(texts)) else "en"


def speaker(turn: MessageRecord, words: dict[str, str]) -> str:
    return turn.name or words.get(turn.role, turn.role)


def turn_line(turn: MessageRecord, words: dict[str, str]) -> str:
    return f"{speaker(turn, words)}{words['colon']}{one_line(turn.content)}"


def memory_line(hit: RecallHit, words: dict[str, str]) -> str:
    return f"- [{words[hit.memory_type]}{words['sep']}{hit.created_at.date().isoformat()}] {one_line(hit.content)}"


def one_line(text: str) -> str:
    return " ".join(text.split())


# -- summaries of older turns --------------------------------------------------------------------


def extractive_summary(turns: Sequence[MessageRecord], budget: int, counter: TokenCounter, words: dict[str, str]) -> str:
    """The turns that say the most not said already, a line each, within `budget` tokens.

    Turns with fewer than two content words ("Thanks!", "好的") and turns that only ask are left out. Lines are chosen
    greedily by the content words they add to those chosen, per token (the user's turns counting
    half again), so that ten restatements of one thing do not crowd out the one fact said once;
    they are given in the order they were said. A turn longer than a sixth of the budget is cut.
    """
    if budget <= 0:
        return ""
    longest = max(budget // 6, 24)
    lines: dict[int, tuple[str, int, frozenset[str], float]] = {}
    for at, turn in enumerate(turns):
        content_words = summary_words(turn.content)
        if content_words is None:
            continue
        line = counter.cut(turn_line(turn, words), longest)
        lines[at] = (line, counter.count(line) + 1, content_words, 1.5 if turn.role == "user" else 1.0)  # + newline

    def gain(at: int, said: set[str]) -> float:
        _, cost, content_words, weight = lines[at]
        return len(content_words - said) * weight / cost

    # Lazy greedy: a line's gain only falls as others are chosen, so a stale gain is an upper bound.
    said: set[str] = set()
    heap = [(-gain(at, said), at) for at in lines]
    heapq.heapify(heap)
    kept: list[int] = []
    used = 0
    while heap:
        _, at = heapq.heappop(heap)
        fresh = gain(at, said)
        if fresh <= 0:
            continue
        if heap and -fresh > heap[0][0]:
            heapq.heappush(heap, (-fresh, at))
            continue
        if used + lines[at][1] <= budget:
            kept.append(at)
            used += lines[at][1]
            said |= lines[at][2]
    return "\n".join(lines[at][0] for at in sorted(kept))


@lru_cache(maxsize=65_536)
def summary_words(content: str) -> frozenset[str] | None:
    """A turn's content words, or None for a turn that says nothing (fewer than two, or only asks)."""
    content_words = frozenset(terms(content))
    return None if len(content_words) < 2 or only_asks(content) else content_words


LLM_SUMMARY = (
    "You keep the memory of a long conversation between a user and an assistant. Write a summary of "
    "the turns below in at most {words} words, in {language}: what the user said about themselves, "
    "their requests, decisions and open tasks, and what the assistant committed to. Plain sentences, "
    "no preamble."
)


@dataclass
class _Summary:
    turn_ids: tuple[str, ...]
    text: str
    source: str
    used_at: float


class Summarizer:
    """Summaries of a session's older turns: by the LLM, cached per session, or extractive.

    An LLM summary is used as it is (cut to the budget) while the turns it covers are the turns to
    cover. As the window moves on, the LLM is given the cached summary and only the turns dropped
    since. Entries unused for `summary_cache_seconds` go, and `forget_user` drops a user's at once
    (erasure). The extractive summary is cheap and made afresh for each block.
    """

    def __init__(self, settings: ContextSettings, llm: Callable[[list[dict[str, str]]], str] | None,
                 counter: TokenCounter, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.llm = llm
        self.counter = counter
        self.clock = clock
        self._cache: OrderedDict[tuple[str, str, str], _Summary] = OrderedDict()
        self._lock = threading.Lock()

    def summary(self, key: tuple[str, str, str], turns: Sequence[MessageRecord], budget: int,
                language: Language) -> tuple[str, str]:
        """The summary of `turns` (oldest first) within `budget` tokens, and how it was made."""
        words = WORDS[language]
        if self.llm is None or budget <= 0:
            return extractive_summary(turns, budget, self.counter, words), "extractive"
        ids = tuple(t.message_id for t in turns)
        cached = self._cached(key)
        if cached is not None and cached.turn_ids == ids:
            return self.counter.cut(cached.text, budget), cached.source
        earlier = cached if cached is not None and ids[: len(cached.turn_ids)] == cached.turn_ids else None
        try:
            text = self._llm_summary(earlier.text if earlier else "", turns[len(earlier.turn_ids) if earlier else 0:],
                                     budget, language, words)
        except UnavailableError as exc:
            log.warning("summary by the LLM failed, extractive instead: %s", exc)
            return extractive_summary(turns, budget, self.counter, words), "extractive"
        self._keep(key, _Summary(ids, text, "llm", self.clock()))
        return self.counter.cut(text, budget), "llm"

    def _llm_summary(self, earlier: str, turns: Sequence[MessageRecord], budget: int, language: Language,
                     words: dict[str, str]) -> str:
        assert self.llm is not None
        lines = "\n".join(turn_line(t, words) for t in turns)
        if earlier:
            lines = f"{words['summary']}\n{earlier}\n\n{lines}"
        prompt = LLM_SUMMARY.format(words=max(budget * 2 // 3, 10), language="Chinese" if language == "zh" else "English")
        return self.llm([{"role": "system", "content": prompt}, {"role": "user", "content": lines}]).strip()

    def _cached(self, key: tuple[str, str, str]) -> _Summary | None:
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return None
            if self.clock() - entry.used_at > self.settings.summary_cache_seconds:
                del self._cache[key]
                return None
            entry.used_at = self.clock()
            self._cache.move_to_end(key)
            return entry

    def _keep(self, key: tuple[str, str, str], entry: _Summary) -> None:
        if self.settings.summary_cache_size == 0:
            return
        with self._lock:
            self._cache[key] = entry
            self._cache.move_to_end(key)
            while len(self._cache) > self.settings.summary_cache_size:
                self._cache.popitem(last=False)

    def forget_user(self, org_id: str, user_id: str) -> None:
        """Drop every cached summary of a user (their turns are being erased)."""
        with self._lock:
            for key in [k for k in self._cache if k[:2] == (org_id, user_id)]:
                del self._cache[key]


# -- the block -----------------------------------------------------------------------------------


@dataclass
class Parts:
    memories: list[RecallHit]
    summary: tuple[str, str] | None  # (text, source)
    dropped: list[MessageRecord]
    recent: list[MessageRecord]


def compose(parts: Parts, words: dict[str, str]) -> str:
    """The block's text: memories, the summary, then the recent turns, each under its heading."""
    sections = []
    if parts.memories:
        sections.append("\n".join([words["memories"], *(memory_line(h, words) for h in parts.memories)]))
    if parts.summary and parts.summary[0]:
        sections.append(f"{words['summary']}\n{parts.summary[0]}")
    if parts.recent:
        sections.append("\n".join([words["recent"], *(turn_line(t, words) for t in parts.recent)]))
    return "\n\n".join(sections)


class ContextBuilder:
    """Makes context blocks: the budget's split, the window, the summary, the final count."""

    def __init__(self, settings: ContextSettings, llm: Callable[[list[dict[str, str]]], str] | None = None) -> None:
        self.settings = settings
        self.counter = token_counter(settings.tokenizer)
        self.summarizer = Summarizer(settings, llm, self.counter)

    def budget(self, query: ContextQuery) -> int:
        budget = query.max_tokens or self.settings.max_tokens
        if budget > self.settings.max_tokens_limit:
            raise InvalidInputError(f"max_tokens is {budget}; this server's limit is {self.settings.max_tokens_limit}")
        return budget

    def window(self, turns: Sequence[MessageRecord], budget: int, words: dict[str, str]) -> tuple[list[MessageRecord], int]:
        """The newest turns that fit in `budget` whole, oldest first, and the tokens they take."""
        recent: list[MessageRecord] = []
        used = 0
        for turn in reversed(turns):
            cost = self.counter.count(turn_line(turn, words)) + 1
            if used + cost > budget:
                break
            recent.append(turn)
            used += cost
        return recent[::-1], used

    def build(self, org_id: str, query: ContextQuery, turns: Sequence[MessageRecord], hits: Sequence[RecallHit],
              *, degraded: bool = False) -> dict[str, Any]:
        """The block for `turns` (the session, oldest first) and `hits` (recall's, best first)."""
        budget = self.budget(query)
        language = language_of([t.content for t in turns[-20:]] or [query.query])
        words = WORDS[language]
        count = self.counter.count

        def heading(name: str) -> int:
            return count(words[name]) + 2  # the heading, its newline, the gap before the next section

        # Memories first, up to their share (the whole budget where there are no turns).
        memory_budget = int(budget * (self.settings.memory_share if turns else 1.0)) - heading("memories")
        memories: list[RecallHit] = []
        used = 0
        for hit in hits:
            cost = count(memory_line(hit, words)) + 1
            if used + cost > memory_budget:
                continue
            memories.append(hit)
            used += cost
        left = budget - (used + heading("memories") if memories else 0)

        # The window: whole turns, newest back, leaving the summary its share while older turns
        # remain; the newest turn goes before any summary, though.
        summary_budget = int(budget * self.settings.summary_share) + heading("summary")
        recent, used = self.window(turns, left - heading("recent") - summary_budget, words)
        if not recent:
            recent, used = self.window(turns, left - heading("recent"), words)
        dropped = list(turns[: len(turns) - len(recent)])
        if recent:
            left -= used + heading("recent")
        # Whatever remains is the summary's (its share, and what the window did not use).
        summary = None
        if dropped:
            key = (org_id, query.user_id, query.session_id or "")
            summary = self.summarizer.summary(key, dropped, left - heading("summary"), language)
        # A memory made of turns the window shows would say them twice.
        shown = {t.message_id for t in recent}
        memories = [h for h in memories if not (h.source_ids and set(h.source_ids) <= shown)]
        parts = Parts(memories, summary, dropped, recent)
        text = compose(parts, words)
        # The count of the whole is the one that holds: trim until it fits (separators can join tokens).
        while count(text) > budget:
            if parts.summary and parts.summary[0]:
                trimmed = self.counter.cut(parts.summary[0], max(count(parts.summary[0]) - (count(text) - budget) - 1, 0))
                parts.summary = (trimmed, parts.summary[1])
            elif parts.memories:
                parts.memories.pop()
            elif parts.recent:
                parts.dropped.append(parts.recent.pop(0))
            else:
                text = self.counter.cut(text, budget)
                break
            text = compose(parts, words)
        return answer(parts, text, count(text), budget, language, self.counter.name, degraded)


def answer(parts: Parts, text: str, tokens: int, budget: int, language: Language, tokenizer: str,
           degraded: bool) -> dict[str, Any]:
    """The JSON of a block: its text, its count, and each part as data."""
    summary = None
    if parts.summary and parts.summary[0] and parts.dropped:
        summary = {
            "text": parts.summary[0], "turns": len(parts.dropped), "source": parts.summary[1],
            "first_message_id": parts.dropped[0].message_id, "last_message_id": parts.dropped[-1].message_id,
        }
    return {
        "text": text, "tokens": tokens, "max_tokens": budget, "language": language,
        "tokenizer": tokenizer,
        "degraded": degraded,
        "parts": {
            "memories": [
                {"id": h.id, "content": h.content, "memory_type": h.memory_type, "score": h.score,
                 "created_at": _iso(h.created_at)} for h in parts.memories
            ],
            "summary": summary,
            "recent": [
                {"message_id": t.message_id, "role": t.role, "name": t.name, "content": t.content,
                 "created_at": _iso(t.created_at)} for t in parts.recent
            ],
        },
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
