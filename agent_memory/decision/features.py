"""What the learned decision reads of a candidate: the grammar's signals and a few surface ones.

Every signal is a number in a fixed order (`SIGNALS`), the same at training and at run time. The
text itself is read by the embedding model (`embedded_text`); Chinese, which the bundled model
cannot read, is embedded through its English gloss.

The word lists below are features, not rules: each only adds a learned weight to the decision.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent_memory.clauses import (
    asks,
    dropped,
    instruction,
    is_event,
    is_habit,
    names_relation,
    retracts,
    subject,
)
from agent_memory.models import MessageRecord
from agent_memory.rules import ProposedMemory
from agent_memory.text import gloss, is_chinese, terms

# What proposed the candidate: the family of the rule that matched, or the clause grammar.
SOURCES = ("flip", "instruction", "identity", "preference", "event", "project", "clause", "clause.flip",
           "clause.instruction", "answer", "sentence")


def _source(rule: str) -> str:
    if rule in SOURCES:
        return rule
    family = rule.split(".")[1] if rule.count(".") >= 1 else rule
    return {"flip": "flip", "rule": "instruction", "identity": "identity", "pref": "preference", "event": "event",
            "project": "project"}.get(family, "clause")


def _words(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# Surface cues, one weight each (English | Chinese).
CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hedge", _words(r"\b(?:maybe|probably|perhaps|i think|i guess|i suppose|kinda|sort of|kind of|might)\b|可能|大概|好像|也许|我觉得|感觉")),
    ("feeling", _words(r"\b(?:tired|bored|happy|sad|excited|glad|sorry|stressed|hungry|sleepy|angry|jealous|lucky)\b|累|困|开心|难过|烦|饿")),
    ("now", _words(r"\b(?:today|tonight|right now|at the moment|this morning|this evening|just now)\b|今天|今晚|刚才|此刻")),
    ("greeting", _words(r"^\W*(?:hi|hello|hey|thanks|thank you|lol|haha|wow|cool|nice|great|good|ok|okay|yes|yeah|no|oh)\b|你好|谢谢|哈哈|好的")),
    ("future", _words(r"\b(?:will|going to|gonna|plan|planning|hope to|want to|would like to)\b|打算|准备|计划|下周|明天|明年")),
    ("past", _words(r"\b(?:used to|was|were|did|had|ago|last year|when i was)\b|以前|去年|小时候|曾经")),
    ("habit", _words(r"\b(?:usually|always|often|every|normally|never|most days)\b|一般|平时|经常|每天|每周|总是")),
    ("generic", _words(r"^\W*(?:it|that|this|there|they|those|these|everyone|people|nothing|something)\b|真是|这个|那个")),
    ("you", _words(r"\b(?:you|your|you're|yours)\b|你")),
    ("negation", _words(r"\b(?:not|no|never|don't|can't|won't|isn't|aren't|didn't|doesn't)\b|不|没")),
    ("family", _words(r"\b(?:mom|mother|dad|father|wife|husband|son|daughter|kids?|children|brother|sister|parents?|"
                      r"grandma|grandpa|boyfriend|girlfriend|friend)\b|妈|爸|老婆|老公|儿子|女儿|孩子|哥|姐|弟|妹|朋友|男友|女友")),
    ("possession", _words(r"\b(?:i have|i've got|i own|my)\b|我有|我的|我家")),
    ("identity", _words(r"\b(?:i am|i'm|im)\b|我是")),
    ("likes", _words(r"\b(?:love|like|enjoy|prefer|hate|favou?rite|fan of)\b|喜欢|爱|讨厌|最爱")),
    ("work", _words(r"\b(?:work|job|career|study|studying|school|college|retired)\b|工作|上班|公司|读书|学校")),
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|im|i've|i'll|i'd|my|me|mine|myself)\b|我", re.IGNORECASE)
_DIGIT = re.compile(r"\d|[一二三四五六七八九十两]")


def _names() -> tuple[str, ...]:
    names = [f"source:{s}" for s in SOURCES]
    names += ["type:semantic", "type:episodic", "type:procedural"]
    names += ["subject:self", "subject:other", "subject:none", "asks", "dropped", "relation", "event", "habit_grammar",
              "instruction", "retracts:strong", "retracts:weak", "replaces", "slot"]
    names += [f"cue:{name}" for name, _ in CUES]
    names += ["first_person", "words", "turn_words", "share_of_turn", "whole_turn", "turn_asks", "after_question",
              "first_user_turn", "digits", "exclaims", "chinese", "bias"]
    return tuple(names)


SIGNALS: tuple[str, ...] = _names()


@dataclass(frozen=True)
class Context:
    """Where a candidate was said: its turn, and what the assistant said just before."""

    turn: str
    previous: str
    first_user_turn: bool


def contexts(messages: Sequence[MessageRecord]) -> dict[str, Context]:
    """Each user turn's context, by message id."""
    out: dict[str, Context] = {}
    previous, seen_user = "", False
    for message in messages:
        if message.role == "user":
            out[message.message_id] = Context(message.content, previous, not seen_user)
            seen_user = True
        else:
            previous = message.content
    return out


def signals(candidate: ProposedMemory, context: Context) -> list[float]:
    """The candidate's signals, in the order of `SIGNALS`."""
    text = candidate.content
    zh = is_chinese(text)
    source = _source(candidate.rule)
    who = subject(text, zh)
    flip = retracts(text, zh)
    words = max(len(terms(text, keep_stopwords=True)), 1)
    turn_words = max(len(terms(context.turn, keep_stopwords=True)), 1)
    values = [float(source == s) for s in SOURCES]
    values += [float(candidate.memory_type == t) for t in ("semantic", "episodic", "procedural")]
    values += [float(who == "self"), float(who == "other"), float(who == "none"), float(asks(text, zh)),
               float(dropped(text, zh)), float(names_relation(text, zh)), float(is_event(text)), float(is_habit(text)),
               float(instruction(text)), float(flip == "strong"), float(flip == "weak"), float(bool(candidate.replaces)),
               float(bool(candidate.slot))]
    values += [float(bool(pattern.search(text))) for _, pattern in CUES]
    values += [min(len(_FIRST_PERSON.findall(text)) / words * 3, 1.0), math.log1p(words) / 4, math.log1p(turn_words) / 4,
               min(words / turn_words, 1.0), float(words >= turn_words), float("?" in context.turn or "？" in context.turn),
               float(context.previous.rstrip().endswith(("?", "？"))), float(context.first_user_turn),
               float(bool(_DIGIT.search(text))), float("!" in text or "！" in text), float(zh), 1.0]
    return values


def embedded_text(text: str) -> str:
    """The text the embedding model reads for a candidate: Chinese through its English gloss
    (`agent_memory.text.gloss`), so that the text head trained mostly on English decides it as well."""
    return gloss(text) if is_chinese(text) else text
