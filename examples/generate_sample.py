#!/usr/bin/env python3
"""Generate a synthetic, bilingual (English / Chinese) agent-memory evaluation set.

Writes two JSONL files:

* ``sample_history.jsonl`` -- chat history, one message per line::

    {"user_id": "u01", "session_id": "u01-s03", "role": "user", "content": "...",
     "created_at": "2025-03-08T13:56:00+00:00", "name": "Caroline",
     "message_id": "u01:s03:m4", "org_id": "acme", "agent_id": "support-bot",
     "metadata": {"lang": "en"}}

* ``sample_questions.jsonl`` -- questions an agent might ask its memory::

    {"user_id": "u01", "question": "...", "evidence": ["u01:s03:m4"],
     "org_id": "acme", "category": "en", "kind": "preference"}

  ``category`` is the language ("en" or "zh"); ``kind`` is the fact type
  (preference, constraint, identity, project, event, flip).

What is in it: 36 users (18 English-speaking, 18 Chinese-speaking) in two orgs,
each with 8-14 sessions spread over 6-12 months of 2025. Every user has 5-8
planted durable facts (preferences, rules for the agent, identity, projects,
dated events). Each fact is stated once in a user turn; some are restated
later in other words; about a quarter are given as a short answer to an
assistant question (so the preceding turn matters); for a third of the users
one preference flips in a later session. Most messages are chit-chat noise,
plus distractor sentences that share words with facts without stating them.

The output is deterministic (fixed seed, standard library only, no network)::

    python examples/generate_sample.py [--out-dir examples] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sample_plan import (  # the plan and its phrase tables, beside this script
    ACKS,
    ALL_SLOTS,
    ASSISTANT_NAME,
    CLOSERS,
    DISTRACTOR_REPLIES,
    FRIDAY_GREETINGS,
    GENERIC_REQUESTS,
    GREETING_REPLIES,
    GREETINGS,
    MAX_SESSION_LEN,
    PROJECT_NAMES,
    SEED,
    SESSION_LENGTHS,
    SLOTS,
    SMALL_TALK,
    STACKS,
    VALUES,
    YEAR,
    Turn,
    User,
    as_fields,
    iso,
    make_users,
    pick_session,
    plan_facts,
    plan_sessions,
    prefixed,
    same_value,
    with_caps,
)

# --------------------------------------------------------------------------
# Rendering turns
# --------------------------------------------------------------------------


def fact_block(rng: random.Random, user: User, idx: int, stage: str) -> list[Turn]:
    """Turns for one planted statement: intro (direct or contextual), restatement or flip."""
    fact = user.facts[idx]
    tmpl = SLOTS[fact.slot][user.lang]
    acks = ACKS[user.lang]
    fields = with_caps(fact.fields)
    if stage == "flip":
        assert fact.new_fields is not None
        text = rng.choice(tmpl["flip"]).format(old=fact.fields["v"], new=fact.new_fields["v"])
        return [Turn("user", text, ("flip", idx)), Turn("assistant", rng.choice(acks["flip"]))]
    if stage == "restate":
        text = rng.choice(tmpl["restate"]).format(**fields)
        return [Turn("user", text, ("restate", idx)), Turn("assistant", rng.choice(acks[fact.kind]))]
    if fact.contextual:
        lead, ask, answer = rng.choice(tmpl["context"])
        return [Turn("user", lead), Turn("assistant", ask),
                Turn("user", answer.format(**fields), ("intro", idx)),
                Turn("assistant", rng.choice(acks[fact.kind]))]
    text = rng.choice(tmpl["state"]).format(**fields)
    return [Turn("user", text, ("intro", idx)), Turn("assistant", rng.choice(acks[fact.kind]))]


def other_value(rng: random.Random, user: User, slot: str) -> dict[str, str]:
    """A value for `slot` that is none of the user's own values for it."""
    own = next((f for f in user.facts if f.slot == slot), None)
    taken = [own.fields, own.new_fields] if own else []
    if slot == "project":
        stacks = [s[1] if user.lang == "en" else s[2] for s in STACKS]
        names = PROJECT_NAMES[user.lang]
        if own:
            stacks = [s for s in stacks if s != own.fields["stack"]]
            names = [n for n in names if n != own.fields["proj"]]
        return {"stack": rng.choice(stacks), "proj": rng.choice(names)}
    options = [as_fields(v) for v in VALUES[slot][user.lang]]
    return rng.choice([o for o in options if not any(t and same_value(t, o) for t in taken)])


def distractor_block(rng: random.Random, user: User) -> list[Turn]:
    """A sentence that shares words with a fact slot but states nothing about the user."""
    own_slots = [f.slot for f in user.facts]
    slot = rng.choice(own_slots) if rng.random() < 0.7 else rng.choice(ALL_SLOTS)
    other = other_value(rng, user, slot)
    text = rng.choice(SLOTS[slot][user.lang]["distract"]).format(**prefixed(other, "o_"))
    return [Turn("user", text), Turn("assistant", rng.choice(DISTRACTOR_REPLIES[user.lang]))]


class NoiseDeck:
    """Cycles through a shuffled list of chit-chat exchanges so a user rarely repeats one."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.pool = SMALL_TALK[lang] + GENERIC_REQUESTS[lang]
        self.deck: list[tuple[str, str]] = []

    def draw(self) -> list[Turn]:
        if not self.deck:
            self.deck = list(self.pool)
            self.rng.shuffle(self.deck)
        user_text, reply = self.deck.pop()
        return [Turn("user", user_text, noise=True), Turn("assistant", reply, noise=True)]


def greeting(rng: random.Random, lang: str, start: datetime) -> list[Turn]:
    """An opening exchange that fits the weekday and time of day."""
    if start.weekday() == 4 and rng.random() < 0.5:
        text = rng.choice(FRIDAY_GREETINGS[lang])
    else:
        period = "morning" if start.hour < 12 else ("afternoon" if start.hour < 18 else "evening")
        text = rng.choice(GREETINGS[lang]["any"] + GREETINGS[lang][period])
    return [Turn("user", text, noise=True), Turn("assistant", rng.choice(GREETING_REPLIES[lang]), noise=True)]


def assemble_session(rng: random.Random, lang: str, start: datetime, blocks: list[list[Turn]],
                     deck: NoiseDeck) -> list[Turn]:
    """Planted blocks + noise, opened by an optional greeting and closed by optional thanks."""
    load = sum(len(b) for b in blocks)
    target = min(MAX_SESSION_LEN, max(load, rng.choice(SESSION_LENGTHS)))
    spare = target - load
    opener: list[Turn] = []
    closer: list[Turn] = []
    if spare >= 2 and rng.random() < 0.55:
        opener = greeting(rng, lang, start)
        spare -= 2
    if spare >= 2 and rng.random() < 0.45:
        closer = [Turn(role, text, noise=True) for role, text in zip(("user", "assistant"), rng.choice(CLOSERS[lang]), strict=True)]
        spare -= 2
    middle = blocks + [deck.draw() for _ in range(spare // 2)]
    rng.shuffle(middle)
    return opener + [t for block in middle for t in block] + closer


def build_user_history(rng: random.Random, user: User) -> list[dict[str, Any]]:
    plan_sessions(rng, user)
    n = len(user.session_starts)
    load = [0] * n
    plan_facts(rng, user, load)

    blocks: list[list[list[Turn]]] = [[] for _ in range(n)]
    for idx, fact in enumerate(user.facts):
        blocks[fact.intro_session].append(fact_block(rng, user, idx, "intro"))
        if fact.restate_session is not None:
            blocks[fact.restate_session].append(fact_block(rng, user, idx, "restate"))
        if fact.flip_session is not None:
            blocks[fact.flip_session].append(fact_block(rng, user, idx, "flip"))
    for _ in range(rng.randint(3, 5)):
        sid = pick_session(rng, load, 0, n - 1, 2)
        blocks[sid].append(distractor_block(rng, user))

    deck = NoiseDeck(rng, user.lang)
    rows: list[dict[str, Any]] = []
    for s_idx, start in enumerate(user.session_starts):
        turns = assemble_session(rng, user.lang, start, blocks[s_idx], deck)
        user.noise_messages += sum(t.noise for t in turns)
        ts = start
        for m_idx, turn in enumerate(turns, start=1):
            message_id = f"{user.user_id}:s{s_idx + 1:02d}:m{m_idx}"
            if turn.tag is not None:
                stage, f_idx = turn.tag
                user.facts[f_idx].message_ids[stage] = message_id
            rows.append({
                "user_id": user.user_id,
                "session_id": f"{user.user_id}-s{s_idx + 1:02d}",
                "role": turn.role,
                "content": turn.content,
                "created_at": iso(ts),
                "name": user.name if turn.role == "user" else ASSISTANT_NAME,
                "message_id": message_id,
                "org_id": user.org_id,
                "agent_id": user.agent_id,
                "metadata": {"lang": user.lang},
            })
            ts += timedelta(minutes=rng.randint(1, 4))
    return rows


# --------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------


def who_fields(rng: random.Random, user: User) -> dict[str, str]:
    if user.lang == "zh":
        who = user.name if rng.random() < 0.65 else "用户"
        return {"who": who, "whos": who}
    if rng.random() < 0.65:
        return {"who": user.name, "whos": f"{user.name}'s"}
    return {"who": "the user", "whos": "the user's"}


def pick_templates(rng: random.Random, keyword: list[str], paraphrase: list[str]) -> list[str]:
    """1-3 questions per fact, mixing keyword-sharing and paraphrased forms."""
    n = rng.choices([1, 2, 3], weights=[3, 5, 2])[0]
    if n == 1:
        return [rng.choice(rng.choice([keyword, paraphrase]))]
    picked = [rng.choice(keyword), rng.choice(paraphrase)]
    rest = [t for t in keyword + paraphrase if t not in picked]
    if n == 3 and rest:
        picked.append(rng.choice(rest))
    return picked


def questions_for_user(rng: random.Random, user: User) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for fact in user.facts:
        tmpl = SLOTS[fact.slot][user.lang]
        if fact.new_fields is not None:
            templates = pick_templates(rng, tmpl["q_flip"][:1], tmpl["q_flip"][1:])
            evidence, kind, fields = [fact.message_ids["flip"]], "flip", fact.new_fields
        else:
            templates = pick_templates(rng, tmpl["q_kw"], tmpl["q_para"])
            evidence = [fact.message_ids["intro"]]
            if "restate" in fact.message_ids:
                evidence.append(fact.message_ids["restate"])
            kind, fields = fact.kind, fact.fields
        for template in templates:
            question = template.format(**with_caps(fields), **who_fields(rng, user))
            out.append({"user_id": user.user_id, "question": question, "evidence": evidence,
                        "org_id": user.org_id, "category": user.lang, "kind": kind})
    return out


# --------------------------------------------------------------------------
# Checks, summary, output
# --------------------------------------------------------------------------


def validate(history: list[dict[str, Any]], questions: list[dict[str, Any]]) -> None:
    by_id = {row["message_id"]: row for row in history}
    assert len(by_id) == len(history), "duplicate message ids"
    sessions: dict[str, list[dict[str, Any]]] = {}
    last_ts: dict[str, str] = {}
    for row in history:
        sessions.setdefault(row["session_id"], []).append(row)
        assert row["created_at"] > last_ts.get(row["user_id"], ""), "timestamps must ascend per user"
        assert row["created_at"].startswith(str(YEAR)), row["created_at"]
        last_ts[row["user_id"]] = row["created_at"]
    for sid, rows in sessions.items():
        assert 4 <= len(rows) <= 10, (sid, len(rows))
        for i, row in enumerate(rows):
            assert row["role"] == ("user" if i % 2 == 0 else "assistant"), sid
    for q in questions:
        assert q["category"] in ("en", "zh") and q["evidence"], q
        for mid in q["evidence"]:
            ev = by_id[mid]
            assert ev["role"] == "user" and ev["user_id"] == q["user_id"], (q, ev)
        assert "{" not in q["question"], q


def summary(users: list[User], history: list[dict[str, Any]], questions: list[dict[str, Any]]) -> str:
    evidence = {mid for q in questions for mid in q["evidence"]}
    sessions = {row["session_id"] for row in history}
    facts = [f for u in users for f in u.facts]
    lines = [
        f"users: {len(users)} ({sum(u.lang == 'en' for u in users)} en, {sum(u.lang == 'zh' for u in users)} zh)",
        f"sessions: {len(sessions)}",
        f"messages: {len(history)} (evidence {len(evidence)}, "
        f"{100 * (1 - len(evidence) / len(history)):.0f}% non-evidence; "
        f"chit-chat noise {100 * sum(u.noise_messages for u in users) / len(history):.0f}%)",
        f"facts: {len(facts)}; contextual {sum(f.contextual for f in facts)}, "
        f"restated {sum(f.restate_session is not None for f in facts)}, "
        f"flipped {sum(f.flip_session is not None for f in facts)}",
        f"questions: {len(questions)}",
    ]
    by_lang_kind = Counter((q["category"], q["kind"]) for q in questions)
    for lang in ("en", "zh"):
        parts = ", ".join(f"{k} {by_lang_kind[(lang, k)]}" for k in
                          ("preference", "constraint", "identity", "project", "event", "flip"))
        lines.append(f"  {lang}: {sum(v for (lg, _), v in by_lang_kind.items() if lg == lang)} ({parts})")
    return "\n".join(lines)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def generate(seed: int = SEED) -> tuple[list[User], list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    users = make_users(rng)
    history: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for user in users:
        history.extend(build_user_history(rng, user))
        questions.extend(questions_for_user(rng, user))
    validate(history, questions)
    return users, history, questions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent,
                        help="directory for sample_history.jsonl and sample_questions.jsonl (default: examples/)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default: {SEED})")
    args = parser.parse_args(argv)
    users, history, questions = generate(args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out_dir / "sample_history.jsonl", history)
    write_jsonl(args.out_dir / "sample_questions.jsonl", questions)
    print(summary(users, history, questions))


if __name__ == "__main__":
    main()
