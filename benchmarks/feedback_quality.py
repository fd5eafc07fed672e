"""Feedback on a labelled set (benchmarks/data/feedback): does a vote after one wording of a
question help the next wording of it, and does it harm anything else?

Every user's memories are written into a fresh org per condition, in process (the real model and
LanceDB, hybrid recall with no noise floor); each question's `first` wording is asked and the agent
votes on what it read, then the `second` wording is scored:

- `none`: no vote (the baseline, the same store written the same way);
- `useful`: `useful` on the memory that answers;
- `wrong`: `wrong` on the distractor ranked highest for the first wording;
- `both`: `useful` on the answer, and `wrong` on every distractor ranked above it.

Votes go only to a user's `voted: true` questions; their three others are scored to show the
same user's other questions are not harmed. In the `both` condition only half the users get votes:
the other half's ranks and scores are compared with the baseline to show other users are untouched.
The second wordings are also scored 30 and 180 days later (the offset fading), beside the
baseline at the same moments.

`--grid` scores every `feedback_step` of a small grid on a split (tuning on dev); without it the
configured constants are scored.

    .venv/bin/python benchmarks/feedback_quality.py --split dev --grid --name feedback_quality_dev
    .venv/bin/python benchmarks/feedback_quality.py --split heldout --name feedback_quality_heldout
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.embedding import build_embedder  # noqa: E402
from agent_memory.models import Scope  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from storage.connect import open_service  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "feedback"
CONDITIONS = ("none", "useful", "wrong", "both")
LATER_DAYS = (30, 180)
STEPS = (0.1, 0.2, 0.3, 0.5)
START = datetime(2026, 6, 1, 9, tzinfo=timezone.utc)


class Clock:
    """The service's clock: the benchmark moves it (writes, then votes, then days later)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def ranking(service: Any, org: str, user: str, query: str) -> list[tuple[str, float]]:
    """(memory id, score) of every memory of the user for `query`, best first."""
    found = service.recall(org, {"user_id": user, "query": query, "top_k": 200, "min_score": 0})
    return [(hit.id, hit.score) for hit in found.memories]


def rank_of(ranked: list[tuple[str, float]], memory_id: str) -> int:
    ids = [m for m, _ in ranked]
    return ids.index(memory_id) + 1 if memory_id in ids else len(ids) + 1


def mrr(ranks: list[int]) -> float:
    return round(sum(1 / r for r in ranks) / len(ranks), 4) if ranks else 0.0


def score_condition(service: Any, clock: Clock, org: str, users: list[dict[str, Any]], ids: dict[tuple[str, str], str],
                    condition: str, voting: set[str]) -> dict[str, Any]:
    """Ranks before and after the condition's votes (and later), in one org."""
    out: dict[str, Any] = {"questions": []}
    clock.now = START + timedelta(hours=1)
    before = {(u["user_id"], q["second"]): ranking(service, org, u["user_id"], q["second"])
              for u in users for q in u["questions"]}
    for user in users:
        uid = user["user_id"]
        scope = Scope.user(org, uid)
        for q in user["questions"]:
            if condition == "none" or not q["voted"] or uid not in voting:
                continue
            first = ranking(service, org, uid, q["first"])
            answer = ids[uid, q["answer"]]
            distractors = sorted((ids[uid, d] for d in q["distractors"]), key=lambda m: rank_of(first, m))
            votes = []
            if condition in ("useful", "both"):
                votes.append((answer, "useful"))
            if condition == "wrong":
                votes.append((distractors[0], "wrong"))
            if condition == "both":
                votes += [(d, "wrong") for d in distractors if rank_of(first, d) < rank_of(first, answer)]
            for memory_id, signal in votes:
                service.feedback(scope, memory_id, {"signal": signal}, actor="bench")
            q_votes = {"first_rank": rank_of(first, answer), "votes": [(s, m) for m, s in votes]}
            out.setdefault("votes", {})[uid, q["first"]] = q_votes
    moments = {"now": START + timedelta(hours=1, minutes=5)}
    moments |= {f"{d}d": START + timedelta(hours=1, days=d) for d in LATER_DAYS}
    for label, moment in moments.items():
        clock.now = moment
        for user in users:
            uid = user["user_id"]
            for q in user["questions"]:
                after = ranking(service, org, uid, q["second"])
                answer = ids[uid, q["answer"]]
                row = {"user": uid, "second": q["second"], "moment": label, "voted_question": q["voted"],
                       "voted_user": uid in voting and condition != "none",
                       "rank_before": rank_of(before[uid, q["second"]], answer), "rank_after": rank_of(after, answer)}
                voted = out.get("votes", {}).get((uid, q["first"]))
                if voted:
                    row["votes"] = voted["votes"]
                    wrong = [m for s, m in voted["votes"] if s == "wrong"]
                    row["wrong_ranks"] = [(rank_of(before[uid, q["second"]], m), rank_of(after, m)) for m in wrong]
                if label == "now" and not row["voted_user"]:
                    scores_before = dict(before[uid, q["second"]])
                    row["max_score_change"] = max(abs(s - scores_before.get(m, 0.0)) for m, s in after)
                out["questions"].append(row)
    out.pop("votes", None)
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """MRR of the second wordings before and after, by group, at each moment."""
    out: dict[str, Any] = {}
    groups = {
        "voted_questions": lambda r: r["voted_user"] and r["voted_question"],
        "same_user_other_questions": lambda r: r["voted_user"] and not r["voted_question"],
        "other_users": lambda r: not r["voted_user"],
    }
    for moment in ("now", *(f"{d}d" for d in LATER_DAYS)):
        at = [r for r in rows if r["moment"] == moment]
        part: dict[str, Any] = {}
        for name, keep in groups.items():
            chosen = [r for r in at if keep(r)]
            if not chosen:
                continue
            before, after = [r["rank_before"] for r in chosen], [r["rank_after"] for r in chosen]
            part[name] = {"n": len(chosen), "mrr_before": mrr(before), "mrr_after": mrr(after),
                          "top1_before": sum(r == 1 for r in before), "top1_after": sum(r == 1 for r in after),
                          "rank_up": sum(a < b for a, b in zip(after, before, strict=True)),
                          "rank_down": sum(a > b for a, b in zip(after, before, strict=True))}
            changes = [r["max_score_change"] for r in chosen if "max_score_change" in r]
            if changes:
                part[name]["max_score_change"] = round(max(changes), 9)
        wrong = [pair for r in at for pair in r.get("wrong_ranks", [])]
        if wrong:
            part["wrong_voted_distractors"] = {
                "n": len(wrong), "mean_rank_before": round(sum(b for b, _ in wrong) / len(wrong), 2),
                "mean_rank_after": round(sum(a for _, a in wrong) / len(wrong), 2),
                "moved_down": sum(a > b for b, a in wrong), "unmoved": sum(a == b for b, a in wrong),
                "moved_up": sum(a < b for b, a in wrong)}
        out[moment] = part
    return out


def run(split: str, step: float | None, embedder: Any) -> dict[str, Any]:
    users = json.loads((DATA / f"{split}.json").read_text())["users"]
    root = Path(tempfile.mkdtemp(prefix="feedback-bench-"))
    overrides = {"feedback_step": step} if step is not None else {}
    settings = Settings(storage_uri=str(root / "lancedb"), recall_min_score=0.0, _env_file=None,  # type: ignore[call-arg]
                        **overrides)
    clock = Clock()
    service = open_service(settings, embedder=embedder, clock=clock)
    results: dict[str, Any] = {"feedback": settings.feedback.model_dump()}
    try:
        for condition in CONDITIONS:
            org = f"bench-{condition}"
            clock.now = START
            ids: dict[tuple[str, str], str] = {}
            for user in users:
                memories = [{"user_id": user["user_id"], "content": m["content"]} for m in user["memories"]]
                written = service.add_many(org, memories, actor="bench").ids
                ids |= {(user["user_id"], m["key"]): i for m, i in zip(user["memories"], written, strict=True)}
            # `both`: half the users get votes, the other half are the other users scored beside them.
            voting = {u["user_id"] for u in (users[::2] if condition == "both" else users)}
            scored = score_condition(service, clock, org, users, ids, condition, voting)
            results[condition] = {"summary": summary(scored["questions"]), "questions": scored["questions"]}
            print(condition, json.dumps(results[condition]["summary"]["now"]), flush=True)
    finally:
        service.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", choices=("dev", "heldout"), default="dev")
    parser.add_argument("--grid", action="store_true", help=f"Score each feedback_step of {STEPS}.")
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    embedder = build_embedder(Settings(_env_file=None))  # type: ignore[call-arg]
    if args.grid:
        out = {"split": args.split, "grid": {str(step): run(args.split, step, embedder) for step in STEPS}}
        out["table"] = {step: {c: r[c]["summary"]["now"] for c in CONDITIONS} for step, r in out["grid"].items()}
    else:
        out = {"split": args.split, **run(args.split, None, embedder)}
    path = write_result(args.name or f"feedback_quality_{args.split}", out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
