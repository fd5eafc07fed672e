"""The synthetic sample's people and plan: users, their sessions and the facts planted in them, and
the phrase tables (sample_phrases.json) they are worded from. generate_sample.py renders them."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SEED = 20250308
YEAR = 2025

# --------------------------------------------------------------------------
# Users, orgs, agents
# --------------------------------------------------------------------------

EN_NAMES = [
    "Caroline", "Melanie", "Jon", "Priya", "Marcus", "Hannah", "Diego", "Olivia", "Sam",
    "Fatima", "Ethan", "Grace", "Noah", "Zoe", "Liam", "Aisha", "Daniel", "Ruby",
]
ZH_NAMES = [
    "王芳", "李娜", "张伟", "刘洋", "陈静", "杨磊", "赵敏", "黄俊杰", "周婷",
    "吴强", "徐丽华", "孙浩", "马晓东", "朱琳", "胡斌", "郭雪", "林嘉怡", "何志远",
]
ORGS = ["acme", "globex"]
AGENTS = {"acme": ["support-bot", "dev-copilot"], "globex": ["helpdesk", "planner"]}
ASSISTANT_NAME = "Assistant"

# Every third user changes one preference later on.
FLIP_EVERY = 3
# Session sizes (in messages); sessions always alternate user/assistant.
SESSION_LENGTHS = [4, 6, 6, 8, 8, 10]
MAX_SESSION_LEN = 10
MAX_PLANTED_LOAD = 8  # messages of facts/distractors in one session
P_CONTEXTUAL = 0.22  # fact stated as a short answer to an assistant question
P_RESTATE = 0.35  # fact restated later in different words

# --------------------------------------------------------------------------
# Chit-chat noise: greetings, small talk, generic requests and answers
# --------------------------------------------------------------------------

# Greetings by time of day ("any" fits all); the assistant's replies are neutral.
# The phrase tables (greetings, small talk, requests, acks, and each fact slot's wordings in both
# languages) are data, in sample_phrases.json beside this script (tuples and sets marked as such).


def _decoded(value: Any) -> Any:
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(_decoded(v) for v in value["__tuple__"])
        if "__set__" in value:
            return {_decoded(v) for v in value["__set__"]}
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


PHRASES = _decoded(json.loads((Path(__file__).resolve().parent / "sample_phrases.json").read_text(encoding="utf-8")))
GREETINGS = PHRASES['GREETINGS']
FRIDAY_GREETINGS = PHRASES['FRIDAY_GREETINGS']
GREETING_REPLIES = PHRASES['GREETING_REPLIES']
CLOSERS = PHRASES['CLOSERS']
SMALL_TALK = PHRASES['SMALL_TALK']
GENERIC_REQUESTS = PHRASES['GENERIC_REQUESTS']
DISTRACTOR_REPLIES = PHRASES['DISTRACTOR_REPLIES']
ACKS = PHRASES['ACKS']
PROG_LANGS = PHRASES['PROG_LANGS']
STACKS = PHRASES['STACKS']
PROJECT_NAMES = PHRASES['PROJECT_NAMES']
PROJECT_PURPOSES = PHRASES['PROJECT_PURPOSES']
VALUES = PHRASES['VALUES']
DIET_CONFLICTS = PHRASES['DIET_CONFLICTS']
SLOTS = PHRASES['SLOTS']

PREFERENCE_SLOTS = ["prog_lang", "editor", "food", "drink", "meeting_time"]
FLIPPABLE_SLOTS = [s for s in PREFERENCE_SLOTS if SLOTS[s]["flippable"]]
CONSTRAINT_SLOTS = ["no_meeting_day", "answer_format", "reminder_channel", "diet"]
IDENTITY_SLOTS = ["job", "city", "pet", "family"]
WORK_AND_EVENT_SLOTS = ["project", "trip", "incident", "purchase"]
ALL_SLOTS = PREFERENCE_SLOTS + CONSTRAINT_SLOTS + IDENTITY_SLOTS + WORK_AND_EVENT_SLOTS
# Event dates relative to the session that mentions them (days).
EVENT_OFFSETS = {"trip": (14, 60), "incident": (-6, -1), "purchase": (-5, -1)}

# --------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------


@dataclass
class Turn:
    role: str
    content: str
    tag: tuple[str, int] | None = None  # ("intro" | "restate" | "flip", fact index)
    noise: bool = False  # chit-chat (greeting, small talk, generic request)


@dataclass
class Fact:
    slot: str
    kind: str
    fields: dict[str, str]
    intro_session: int
    contextual: bool
    restate_session: int | None = None
    flip_session: int | None = None
    new_fields: dict[str, str] | None = None
    message_ids: dict[str, str] = field(default_factory=dict)


@dataclass
class User:
    user_id: str
    name: str
    lang: str
    org_id: str
    agent_id: str
    flips: bool
    session_starts: list[datetime] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    noise_messages: int = 0


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def as_fields(value: Any) -> dict[str, str]:
    return dict(value) if isinstance(value, dict) else {"v": value}


def with_caps(fields: dict[str, str]) -> dict[str, str]:
    """Add capitalised variants: {"v": "tacos"} -> also {"V": "Tacos"}."""
    out = dict(fields)
    for key, val in fields.items():
        out[key[:1].upper() + key[1:]] = cap(val)
    return out


def prefixed(fields: dict[str, str], prefix: str) -> dict[str, str]:
    """Fields of another value for distractors: {"kind": "cat"} -> {"o_kind": "cat"}; "v" -> "o"."""
    return {("o" if k == "v" else f"{prefix}{k}"): val for k, val in fields.items()}


def format_date(day: date, lang: str) -> str:
    if lang == "en":
        text = f"{day:%B} {day.day}"
        return text if day.year == YEAR else f"{text}, {day.year}"
    text = f"{day.month}月{day.day}日"
    return text if day.year == YEAR else f"{day.year}年{text}"


def same_value(fields: dict[str, str], option: dict[str, str]) -> bool:
    """True if `fields` (which may carry extras such as a date) is the slot value `option`."""
    return all(fields.get(k) == v for k, v in option.items())


def iso(ts: datetime) -> str:
    return ts.isoformat()


# --------------------------------------------------------------------------
# Planning a user: sessions, facts, distractors
# --------------------------------------------------------------------------


def make_users(rng: random.Random) -> list[User]:
    users: list[User] = []
    names = [("en", n) for n in EN_NAMES] + [("zh", n) for n in ZH_NAMES]
    for idx, (lang, name) in enumerate(names, start=1):
        org = ORGS[(idx - 1) % 2]
        users.append(User(
            user_id=f"u{idx:02d}", name=name, lang=lang, org_id=org,
            agent_id=rng.choice(AGENTS[org]), flips=(idx % FLIP_EVERY == 0),
        ))
    return users


def plan_sessions(rng: random.Random, user: User) -> None:
    """8-14 sessions spread over 6-12 months of the year, ascending."""
    n_sessions = rng.randint(8, 14)
    span_days = min(rng.randint(6, 12) * 30 + rng.randint(0, 5), 363)
    first_day = date(YEAR, 1, 1) + timedelta(days=rng.randint(0, 364 - span_days))
    middle = sorted(rng.sample(range(1, span_days), n_sessions - 2))
    for offset in [0, *middle, span_days]:
        day = first_day + timedelta(days=offset)
        user.session_starts.append(datetime(
            day.year, day.month, day.day, rng.randint(8, 20), rng.randint(0, 59), tzinfo=timezone.utc))


def choose_slots(rng: random.Random, user: User) -> list[str]:
    """5-8 distinct slots covering preference, constraint, identity and project/event."""
    n_facts = rng.randint(5, 8)
    first_pref = rng.choice(FLIPPABLE_SLOTS if user.flips else PREFERENCE_SLOTS)
    chosen = [first_pref, rng.choice(CONSTRAINT_SLOTS), rng.choice(IDENTITY_SLOTS),
              rng.choice(WORK_AND_EVENT_SLOTS)]
    rest = [s for s in ALL_SLOTS if s not in chosen]
    chosen += rng.sample(rest, n_facts - len(chosen))
    return chosen


def choose_values(rng: random.Random, user: User, slots: list[str]) -> dict[str, dict[str, str]]:
    """Pick a consistent value for every slot (diet vs food, language vs project stack)."""
    lang = user.lang
    picked: dict[str, dict[str, str]] = {}
    code_lang = rng.choice(PROG_LANGS)  # also drives the project stack
    diet = rng.choice(VALUES["diet"][lang])
    for slot in ALL_SLOTS:
        if slot == "prog_lang":
            picked[slot] = {"v": code_lang}
        elif slot == "diet":
            picked[slot] = {"v": diet}
        elif slot == "food":
            options = [f for f in VALUES["food"][lang] if f not in DIET_CONFLICTS[diet]]
            picked[slot] = {"v": rng.choice(options)}
        elif slot == "project":
            stack = rng.choice([s for s in STACKS if s[0] == code_lang])
            picked[slot] = {"proj": rng.choice(PROJECT_NAMES[lang]),
                            "purpose": rng.choice(PROJECT_PURPOSES[lang]),
                            "stack": stack[1] if lang == "en" else stack[2]}
        else:
            picked[slot] = as_fields(rng.choice(VALUES[slot][lang]))
    return {s: picked[s] for s in slots}


def pick_session(rng: random.Random, load: list[int], lo: int, hi: int, size: int) -> int:
    """A random session in [lo, hi] with room for `size` more planted messages."""
    lo, hi = max(0, lo), min(len(load) - 1, hi)
    fits = [i for i in range(lo, hi + 1) if load[i] + size <= MAX_PLANTED_LOAD]
    if not fits:
        fits = [i for i in range(len(load)) if load[i] + size <= MAX_PLANTED_LOAD and i >= lo]
    choice = rng.choice(fits) if fits else min(range(lo, hi + 1), key=lambda i: load[i])
    load[choice] += size
    return choice


def plan_facts(rng: random.Random, user: User, load: list[int]) -> None:
    slots = choose_slots(rng, user)
    values = choose_values(rng, user, slots)
    flip_slot = slots[0] if user.flips else None
    n = len(user.session_starts)
    for slot in slots:
        spec = SLOTS[slot]
        contextual = rng.random() < P_CONTEXTUAL
        flips = slot == flip_slot
        restates = (not flips and spec["kind"] != "event" and rng.random() < P_RESTATE)
        latest_intro = n - 3 if flips else (n - 2 if restates else n - 1)
        intro = pick_session(rng, load, 0, latest_intro, 4 if contextual else 2)
        fact = Fact(slot=slot, kind=spec["kind"], fields=values[slot], intro_session=intro, contextual=contextual)
        if restates:
            fact.restate_session = pick_session(rng, load, intro + 1, n - 1, 2)
        if flips:
            fact.flip_session = pick_session(rng, load, intro + 2, n - 1, 2)
            old = values[slot]["v"]
            diet = values.get("diet", {}).get("v")
            options = [v for v in VALUES[slot][user.lang] if v != old
                       and not (slot == "food" and diet and v in DIET_CONFLICTS[diet])]
            fact.new_fields = {"v": rng.choice(options)}
        if spec["kind"] == "event":
            lo_off, hi_off = EVENT_OFFSETS[slot]
            day = user.session_starts[intro].date() + timedelta(days=rng.randint(lo_off, hi_off))
            fact.fields["date"] = format_date(day, user.lang)
        user.facts.append(fact)
