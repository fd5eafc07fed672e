"""What a stored memory says the user holds, and how a proposed memory stands to it: the text it
asserts, whether a change of mind may take it back, whether it contradicts or restates it, how
close two memories are. The decisions of extraction (`agent_memory.decisions`) read these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from agent_memory.clauses import (
    clauses,
    is_event,
    names_relation,
    own_statements,
    subject,
)
from agent_memory.models import MemoryRecord
from agent_memory.rules import ProposedMemory, clean_value, said_sentences
from agent_memory.settings import Settings
from agent_memory.text import CJK, comparable, is_chinese, lexical_similarity
from agent_memory.wording import content_terms


def meta(record: MemoryRecord, key: str) -> Any:
    return (record.metadata or {}).get(key)


def retractable(record: MemoryRecord) -> bool:
    """Whether a change of mind can take a memory back: a fact, habit, plan or instruction of the
    user's own, not something that happened ("gave a talk about VS Code") or someone else's fact
    ("my boss takes oat milk") or the age or name of someone of the user's ("My daughter Mia is
    5"); one that only mentions someone ("I study after the kids are asleep") is the user's."""
    zh = is_chinese(record.content)
    own = subject(record.content, zh) != "other" and not names_relation(record.content, zh)
    said_by_user = meta(record, "role") != "assistant"
    return (record.memory_type != "episodic" or not is_event(record.content)) and own and said_by_user


def asserted_text(record: MemoryRecord, content: str | None = None) -> str:
    """What a memory asserts now: its content (or the part of it given) without the old values it
    says it replaced."""
    text = comparable(record.content if content is None else content)
    for old in meta(record, "replaces") or []:
        text = text.replace(comparable(str(old)), " ")
    return text


def held_text(record: MemoryRecord) -> str:
    """What a memory says holds of the user now: of a turn of theirs stored raw, its statements of
    their own (not "Watched a talk where someone live-coded in VS Code", a passing mention); any
    other memory (what the rules or an LLM kept, one written directly) as it asserts itself."""
    return asserted_text(record, own_statements(said_sentences(record.content)) if meta(record, "role") == "user" else None)


def _states(old: str, asserted: str) -> bool:
    """Whether a memory's asserted text states an old value a change of mind names: as written,
    or (English) every content word of it in any inflection ("at the bakery" in "weekend shifts at
    a bakery", "teaching" in "I teach chemistry")."""
    old_n = comparable(clean_value(old))
    if not old_n:
        return False
    if old_n in asserted:
        return True
    words = content_terms(old_n)
    return bool(words) and not CJK.search(old_n) and words <= content_terms(asserted)


# What is left stands alone when it opens with the user; not with "so" or "because", whose clause
# follows from the one taken back ("vegetarian, so I basically live on carbs").
_OWN_START = re.compile(r"^\W*(?:(?:oh|also|honestly|actually|btw|对了|另外|其实)\W+)*(?:i\b|i'|my\b|we\b|our\b|我)", re.IGNORECASE)


def still_holds(old: MemoryRecord, replaced: Sequence[str]) -> str:
    """What a memory that a change of mind revises in part still says: its clauses that state none
    of the old values ("我是素食者，蛋奶都吃" after "今年起我不再吃蛋了": "我是素食者"). Empty when
    every clause, or none, states one, or when what is left does not open with the user."""
    pieces = []
    left_out = False
    for sentence in said_sentences(old.content):
        parts = clauses(sentence)
        kept = [c for c in parts if not any(_states(value, comparable(c)) for value in replaced)]
        left_out = left_out or len(kept) < len(parts)
        if kept:
            pieces.append("".join(kept).strip().rstrip(",，;；:：—– "))
    if not left_out or not pieces or not _OWN_START.match(pieces[0]):
        return ""
    return ("" if is_chinese(pieces[0]) else " ").join(pieces)


def contradicts(candidate: ProposedMemory, other: MemoryRecord) -> bool:
    """Whether a proposed memory contradicts a memory: the LLM says so, the same slot holds another
    value, or it names an old value the memory states."""
    if candidate.contradicts and candidate.contradicts == other.id:
        return True
    if candidate.slot and meta(other, "slot") == candidate.slot:
        return meta(other, "value") is not None and candidate.value is not None and (
            comparable(str(meta(other, "value"))) != comparable(candidate.value)
        )
    if candidate.replaces and retractable(other):
        asserted = asserted_text(other)
        new_value = comparable(candidate.value) if candidate.value else None
        if new_value and new_value in asserted:
            return False
        held = held_text(other)
        return any(_states(old, held) for old in candidate.replaces)
    return False


def same_readers(a: MemoryRecord, b: MemoryRecord) -> bool:
    """Whether two memories are read by the same agents: both shared, or both private to one agent.
    Extraction decides only among such: a shared statement never reinforces or retires an agent's
    private memory, and a private one never retires a memory other agents read."""
    return a.visibility == b.visibility and (a.visibility == "shared" or a.agent_id == b.agent_id)


def closeness(record: MemoryRecord, other: MemoryRecord, settings: Settings) -> float:
    """How nearly two memories say the same: term overlap anywhere, cosine only where readable."""
    if comparable(record.content) == comparable(other.content):
        return 1.0
    score = lexical_similarity(record.content, other.content) / settings.extraction.reinforce_lexical
    full = settings.recall.oov_full_share
    if record.vector is not None and other.vector is not None and record.oov < full and other.oov < full:
        cosine = float(np.dot(np.asarray(record.vector), np.asarray(other.vector)))
        score = max(score, cosine / settings.extraction.reinforce_cosine)
    return score


def restated(candidate: ProposedMemory, record: MemoryRecord, pool: list[MemoryRecord], settings: Settings) -> MemoryRecord | None:
    """The memory of `pool` a proposed memory restates (the closest at or past the bars), if any."""
    if candidate.restates:
        for other in pool:
            if other.id == candidate.restates:
                return other
    best, best_score = None, 1.0  # scores are relative to the thresholds: 1.0 means "at threshold"
    for other in pool:
        if other.memory_type != record.memory_type and not candidate.restates:
            continue
        score = closeness(record, other, settings)
        if candidate.slot and meta(other, "slot") == candidate.slot and candidate.value and meta(other, "value"):
            if comparable(str(meta(other, "value"))) == comparable(candidate.value):
                score = max(score, 1.0)
        if score >= best_score:
            best, best_score = other, score
    return best
