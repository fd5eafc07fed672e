"""Recall evaluation on a labelled set: recall@5, recall@10 and MRR for dense, keyword and hybrid."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from agent_memory.errors import InvalidInputError
from agent_memory.extraction import build_extractor, extract_and_store
from agent_memory.history import parse_file
from agent_memory.models import Scope
from agent_memory.rules import said_sentences
from agent_memory.text import comparable, terms

MODES = ("hybrid", "dense", "keyword")
SESSION_CUTS = (5, 10)


def _json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of a JSONL file, parsed, with its line number; bad JSON is a clear error."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{number}: not JSON ({exc})") from None
            yield number, item


def load_questions(path: str | Path) -> list[dict[str, Any]]:
    """Read a questions file; every line needs user_id, question and a non-empty evidence list."""
    questions = []
    for number, item in _json_lines(path):
        if not isinstance(item, dict) or not item.get("user_id") or not item.get("question"):
            raise InvalidInputError(f"{path}:{number}: needs user_id and question")
        evidence = item.get("evidence")
        if not isinstance(evidence, list) or not evidence:
            raise InvalidInputError(f"{path}:{number}: evidence must be a non-empty list of message ids")
        questions.append(item)
    if not questions:
        raise InvalidInputError(f"{path}: no questions")
    return questions


def turn_metrics(ranked_sources: list[list[str]], evidence: set[str], top_k: int) -> dict[str, float]:
    """recall@5, recall@10 (the share of evidence turns in the top k) and MRR of one ranking."""
    def recall_at(k: int) -> float:
        found = {s for sources in ranked_sources[:k] for s in sources} & evidence
        return len(found) / len(evidence)

    mrr = 0.0
    for rank, sources in enumerate(ranked_sources[:top_k], start=1):
        if evidence & set(sources):
            mrr = 1.0 / rank
            break
    return {"recall@5": recall_at(5), "recall@10": recall_at(10), "mrr": mrr}


def answer_sessions(evidence: Iterable[str], session_of: dict[str, str]) -> set[str]:
    """The sessions that hold a question's evidence turns (none where the history names no session)."""
    return {session_of[e] for e in evidence if e in session_of}


def named_sessions(history: str | Path, default_org: str = "default") -> dict[str, str] | None:
    """Each turn's session by its message id, where the history names sessions (None where no row does)."""
    turns, _, _ = parse_file(str(history), "auto", default_org)
    out = {t.message.message_id: t.session_id for t in turns if t.message.message_id}
    return out if any(t.session_id != "default" for t in turns) else None


def session_metrics(ranked_sessions: list[list[str]], wanted: set[str]) -> dict[str, float]:
    """LongMemEval's session-level scores: the ranked turns mapped to their sessions, each session at
    the rank of its first turn; any@k = some answer session in the top k sessions, all@k = all of them."""
    order = list(dict.fromkeys(s for sessions in ranked_sessions for s in sessions))
    out = {}
    for k in SESSION_CUTS:
        top = set(order[:k])
        out[f"any@{k}"] = float(bool(top & wanted))
        out[f"all@{k}"] = float(wanted <= top)
    return out


SESSION_KEYS = tuple(f"{kind}@{k}" for k in SESSION_CUTS for kind in ("recall_any", "recall_all"))


def _mean(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    keys = ("recall@5", "recall@10", "mrr")
    out = {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in keys}
    scored = [r for r in rows if "any@5" in r]  # questions whose evidence names its sessions
    for key in SESSION_KEYS if scored else ():
        short = key.removeprefix("recall_")
        out[key] = round(sum(r[short] for r in scored) / len(scored), 4)
    return out


def evaluate_recall(
    service: Any, questions: list[dict[str, Any]], *, top_k: int = 10, default_org: str = "default",
    floors: Iterable[float] = (), session_of: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Ask every question as its user in every mode and average the metrics, overall and by category.

    With `session_of` (each turn's session, where the history names sessions), the session-level
    recall_any@k and recall_all@k of LongMemEval's retrieval script are averaged too.

    Ranking is measured with the noise floor off (`min_score` 0). `floor` reports, for the floor
    the settings configure (and each of `floors`), the share of hybrid evidence hits in the top
    `top_k` that score under it (the floor would have cut them), the same share of the other hits,
    and the share of questions it would leave with no answer.
    """
    depth = max(top_k, 10)
    per_mode: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    by_category: dict[str, dict[str, list[dict[str, float]]]] = {}
    evidence_scores: list[float] = []
    other_scores: list[float] = []
    best_scores: list[float] = []
    for item in questions:
        org_id = item.get("org_id") or default_org
        evidence = set(item["evidence"])
        category = str(item.get("category") or "all")
        bucket = by_category.setdefault(category, {m: [] for m in MODES})
        for mode in MODES:
            result = service.recall(org_id, {"user_id": item["user_id"], "query": item["question"], "top_k": depth,
                                             "mode": mode, "min_score": 0})
            ranked = [hit.source_ids for hit in result.memories]
            metrics = turn_metrics(ranked, evidence, top_k)
            wanted = answer_sessions(evidence, session_of or {})
            if wanted:
                metrics.update(session_metrics([[session_of.get(s, "") for s in r] for r in ranked],  # type: ignore[union-attr]
                                               wanted))
            per_mode[mode].append(metrics)
            bucket[mode].append(metrics)
            if mode == "hybrid":
                hits = result.memories[:top_k]
                best_scores.append(hits[0].score if hits else 0.0)
                for hit in hits:
                    (evidence_scores if evidence & set(hit.source_ids) else other_scores).append(hit.score)
    report: dict[str, Any] = {m: _mean(per_mode[m]) for m in MODES}
    report["questions"] = len(questions)
    report["by_category"] = {
        category: {**{m: _mean(rows[m]) for m in MODES}, "questions": len(rows["hybrid"])}
        for category, rows in sorted(by_category.items())
    }
    configured = float(service.settings.recall.min_score)

    def cut(floor: float) -> dict[str, float]:
        return {"min_score": floor,
                "evidence_hits_cut": _ratio(sum(s < floor for s in evidence_scores), len(evidence_scores)) if evidence_scores else 0.0,
                "other_hits_cut": _ratio(sum(s < floor for s in other_scores), len(other_scores)) if other_scores else 0.0,
                "empty_answers": _ratio(sum(s < floor for s in best_scores), len(best_scores))}

    report["floor"] = {**cut(configured), "evidence_hits": len(evidence_scores),
                       "others": [cut(f) for f in sorted(set(floors) - {configured})]}
    return report


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table of an evaluation report."""
    lines = [f"{'set':<10} {'mode':<8} {'recall@5':>9} {'recall@10':>10} {'mrr':>7}  questions"]
    sections = [("all", report, report["questions"])]
    sections += [(c, r, r["questions"]) for c, r in report.get("by_category", {}).items()]
    for name, section, count in sections:
        for mode in MODES:
            m = section[mode]
            line = f"{name:<10} {mode:<8} {m['recall@5']:>9.3f} {m['recall@10']:>10.3f} {m['mrr']:>7.3f}  {count:<9}"
            if "recall_any@5" in m:
                line += "  sessions " + "  ".join(f"{k} {m[k]:.3f}" for k in SESSION_KEYS)
            lines.append(line.rstrip())
    floor = report.get("floor")
    if floor:
        lines.append(f"(ranked with no noise floor; min_score {floor['min_score']:.2f} would cut "
                     f"{floor['evidence_hits_cut']:.1%} of the {floor['evidence_hits']} hybrid evidence hits in the top 10 "
                     f"and leave {floor['empty_answers']:.1%} of the questions with no answer)")
    return "\n".join(lines)


# -- extraction --------------------------------------------------------------------------------


def load_extraction_cases(path: str | Path) -> list[dict[str, Any]]:
    """Read an extraction set: each line `{"messages": [...], "expected": [...], "forbidden": [...]}`."""
    cases = []
    for number, item in _json_lines(path):
        messages = item.get("messages") if isinstance(item, dict) else None
        if not isinstance(messages, list) or not messages:
            raise InvalidInputError(f"{path}:{number}: needs a non-empty messages list")
        for key in ("expected", "forbidden", "superseded"):
            value = item.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise InvalidInputError(f"{path}:{number}: {key} must be a list of non-empty strings")
        flips = item.get("flips", [])
        if not isinstance(flips, list) or not all(
            isinstance(f, dict) and all(isinstance(f.get(k), str) and f[k].strip() for k in ("old", "new")) for f in flips
        ):
            raise InvalidInputError(f"{path}:{number}: flips must be a list of {{\"old\", \"new\"}} facts")
        item.setdefault("id", f"line-{number}")
        cases.append(item)
    if not cases:
        raise InvalidInputError(f"{path}: no cases")
    return cases


def fact_matches(fact: str, content: str) -> bool:
    """Whether a memory states a labelled fact: every term of the fact (words, CJK bigrams) is in it.

    Labelled facts are written as their key words ("green tea", "周五 会议"), so a memory matches
    whatever its wording around them; plural and singular English words count as the same.
    """
    def stems(text: str) -> set[str]:
        return {t[:-1] if len(t) > 3 and t.endswith("s") else t for t in terms(text)}

    wanted = stems(fact)
    return bool(wanted) and wanted <= stems(content)


def _ratio(a: int, b: int) -> float:
    return round(a / b, 4) if b else 1.0


def evaluate_extraction(
    service: Any, cases: list[dict[str, Any]], mode: str, *, org_id: str = "eval", extractor: Any = None,
) -> dict[str, Any]:
    """Run extraction on every case (one fresh user each) and score the active memories it leaves.

    precision: share of extracted active memories that state an expected fact and no forbidden one;
    recall: share of expected facts stated by some active memory; flips: share of `superseded`
    facts that no active memory states any more (except one that also states the newer fact);
    flips_done: share of `flips` ({"old", "new"}) whose old fact is retired and whose new fact is
    stored; whole_turns: active memories that are a whole user turn of two or more sentences (a
    memory should state the fact, not the turn with the request in it). `extractor` replaces the
    mode's own: the same decisions and scores, another source of candidates.
    """
    extractor = extractor or build_extractor(service.settings, mode, service.embedder)  # type: ignore[arg-type]
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    totals: dict[str, dict[str, int]] = {}
    failures: list[dict[str, str]] = []
    for index, case in enumerate(cases):
        user_id = f"case-{index}"
        messages = [
            {"role": m["role"], "content": m["content"], "message_id": f"{user_id}:m{i}",
             "created_at": (base + timedelta(minutes=i)).isoformat()}
            for i, m in enumerate(case["messages"])
        ]
        records = service.message_records(org_id, user_id, "s1", messages)
        service.log_messages(org_id, records)
        extract_and_store(service, org_id, records, mode, actor="eval", extractor=extractor)  # type: ignore[arg-type]
        active = [r.content for r in service.list(Scope.user(org_id, user_id), limit=1000).records]
        expected, forbidden, flipped = case.get("expected", []), case.get("forbidden", []), case.get("superseded", [])
        good = [c for c in active if any(fact_matches(f, c) for f in expected) and not any(fact_matches(f, c) for f in forbidden)]
        found = [f for f in expected if any(fact_matches(f, c) for c in active)]
        retired = [f for f in flipped if all(any(fact_matches(e, c) for e in expected) for c in active if fact_matches(f, c))]
        flips = case.get("flips", [])
        done = [f for f in flips if f["old"] in retired and any(fact_matches(f["new"], c) for c in active)]
        turns = {comparable(m["content"]) for m in case["messages"] if m["role"] == "user" and len(said_sentences(m["content"])) > 1}
        whole = [c for c in active if comparable(c) in turns]
        for key in ("all", str(case.get("lang") or "all")):
            t = totals.setdefault(key, {"extracted": 0, "correct": 0, "expected": 0, "found": 0, "flips": 0, "retired": 0,
                                        "flip_pairs": 0, "flips_done": 0, "forbidden_hits": 0, "whole_turns": 0,
                                        "cases": 0})
            t["cases"] += 1
            t["extracted"] += len(active)
            t["correct"] += len(good)
            t["expected"] += len(expected)
            t["found"] += len(found)
            t["flips"] += len(flipped)
            t["retired"] += len(retired)
            t["flip_pairs"] += len(flips)
            t["flips_done"] += len(done)
            t["whole_turns"] += len(whole)
            t["forbidden_hits"] += sum(1 for c in active if any(fact_matches(f, c) for f in forbidden))
            if key != "all":
                break
        wrong = [c for c in active if c not in good]
        missed = [f for f in expected if f not in found]
        if wrong or missed or len(retired) < len(flipped) or len(done) < len(flips):
            failures.append({"id": str(case["id"]), "wrong": wrong, "missed": missed,  # type: ignore[dict-item]
                             "not_retired": [f for f in flipped if f not in retired],
                             "flips_not_done": [f for f in flips if f not in done]})

    def summary(t: dict[str, int]) -> dict[str, Any]:
        return {"precision": _ratio(t["correct"], t["extracted"]), "recall": _ratio(t["found"], t["expected"]),
                "flips_retired": _ratio(t["retired"], t["flips"]), "flips_done_share": _ratio(t["flips_done"], t["flip_pairs"]),
                **t}

    report: dict[str, Any] = {"mode": mode, **summary(totals["all"])}
    report["by_lang"] = {k: summary(v) for k, v in sorted(totals.items()) if k != "all"}
    report["failures"] = failures
    return report


def format_extraction_table(reports: list[dict[str, Any]]) -> str:
    """A plain-text table of extraction reports (one per extractor)."""
    lines = [f"{'extractor':<10} {'set':<5} {'precision':>9} {'recall':>7} {'flips':>6} {'flipped':>7} {'forbidden':>9} "
             f"{'whole':>5} {'extracted':>9} {'expected':>8}  cases"]
    for report in reports:
        rows = [("all", report), *report.get("by_lang", {}).items()]
        for name, r in rows:
            lines.append(f"{report['mode']:<10} {name:<5} {r['precision']:>9.3f} {r['recall']:>7.3f} {r['flips_retired']:>6.2f} "
                         f"{r['flips_done_share']:>7.2f} {r['forbidden_hits']:>9} {r['whole_turns']:>5} "
                         f"{r['extracted']:>9} {r['expected']:>8}  {r['cases']}")
    return "\n".join(lines)


# -- per-turn gold facts (Multi-Session Chat, LoCoMo's observations) ---------------------------


def load_fact_dialogues(path: str | Path, *, only: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Read a set of dialogues whose turns carry the fact each states: one JSON object a line,
    `{"id", "turns": [{"role": "user"|"assistant", "content", "fact"}]}` (`fact` empty when the
    turn states none). `only` keeps the dialogues of those ids."""
    wanted = set(only) if only is not None else None
    dialogues = []
    for number, item in _json_lines(path):
        turns = item.get("turns") if isinstance(item, dict) else None
        if not isinstance(turns, list) or not turns or not all(
            isinstance(t, dict) and t.get("role") in ("user", "assistant") and isinstance(t.get("content"), str)
            and isinstance(t.get("fact", ""), str) for t in turns
        ):
            raise InvalidInputError(f"{path}:{number}: needs turns, each with a role (user or assistant), content and fact")
        item.setdefault("id", f"line-{number}")
        if wanted is None or item["id"] in wanted:
            dialogues.append(item)
    if not dialogues:
        raise InvalidInputError(f"{path}: no dialogues")
    return dialogues


def observation_dialogues(history_path: str | Path, observations_path: str | Path) -> list[dict[str, Any]]:
    """LoCoMo's conversations as fact dialogues: each conversation once per speaker, that speaker
    as the user and the other as the assistant, every turn of theirs carrying the facts that the
    observations of that speaker cite it as evidence for (joined). Both speakers are people, so
    both are scored; a fact cited on the other speaker's turn is left out (it is not said there)."""
    messages: dict[str, list[dict[str, Any]]] = {}
    for _, row in _json_lines(history_path):
        messages.setdefault(str(row["user_id"]), []).append(row)
    facts: dict[tuple[str, str, str], list[str]] = {}
    for _, obs in _json_lines(observations_path):
        for evidence in obs.get("evidence") or []:
            facts.setdefault((str(obs["user_id"]), str(obs["speaker"]), str(evidence)), []).append(str(obs["fact"]))
    dialogues = []
    for conversation, rows in sorted(messages.items()):
        for speaker in sorted({str(r.get("name")) for r in rows}):
            turns = [{"role": "user" if r.get("name") == speaker else "assistant", "content": r["content"],
                      "fact": " ".join(facts.get((conversation, speaker, str(r["message_id"])), [])) if r.get("name") == speaker else "",
                      "session_id": r.get("session_id"), "created_at": r.get("created_at")} for r in rows]
            dialogues.append({"id": f"{conversation}:{speaker}", "turns": turns})
    if not dialogues:
        raise InvalidInputError(f"{history_path}: no conversations")
    return dialogues


_WORD = re.compile(r"[^\W_]+")


def token_f1(a: str, b: str) -> float:
    """Token F1 between two texts, over lower-cased word tokens (counted with repeats)."""
    x, y = Counter(_WORD.findall(a.lower())), Counter(_WORD.findall(b.lower()))
    common = sum((x & y).values())
    if not common:
        return 0.0
    precision, recall = common / sum(x.values()), common / sum(y.values())
    return 2 * precision * recall / (precision + recall)


def _fact_messages(user_id: str, dialogue: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """A dialogue's turns as messages grouped by session, in order, each turn a minute (or, where
    its session gives a time, a second) after the one before."""
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    sessions: dict[str, list[dict[str, Any]]] = {}
    for i, turn in enumerate(dialogue["turns"]):
        given = turn.get("created_at")
        at = datetime.fromisoformat(given) + timedelta(seconds=i) if given else base + timedelta(minutes=i)
        sessions.setdefault(str(turn.get("session_id") or "s1"), []).append(
            {"role": turn["role"], "content": turn["content"], "message_id": f"{user_id}:t{i}", "created_at": at.isoformat()})
    return list(sessions.items())


def evaluate_facts(
    service: Any, dialogues: list[dict[str, Any]], mode: str, *, org_id: str = "eval", extractor: Any = None,
) -> dict[str, Any]:
    """Run extraction on every dialogue (one fresh user each) and score it turn by turn against the
    facts the turns carry. A user turn *yielded* a memory when a memory (active or not) holds it in
    its source ids.

    precision: of the user turns that yielded a memory, the share that carry a fact; recall: of the
    user turns that carry a fact, the share that yielded a memory; content_f1: the mean, over turns
    that yielded a memory and carry a fact, of the best token F1 between a memory of the turn and
    its fact; base_rate: the share of user turns that carry a fact (the precision of storing every
    turn).
    """
    extractor = extractor or build_extractor(service.settings, mode, service.embedder)  # type: ignore[arg-type]
    counts = {"user_turns": 0, "with_fact": 0, "yielded": 0, "correct": 0, "memories": 0}
    f1s: list[float] = []
    for index, dialogue in enumerate(dialogues):
        user_id = f"dialogue-{index}"
        records = []
        for session_id, messages in _fact_messages(user_id, dialogue):
            records += service.message_records(org_id, user_id, session_id, messages)
        service.log_messages(org_id, records)
        extract_and_store(service, org_id, records, mode, actor="eval", extractor=extractor)  # type: ignore[arg-type]
        memories, cursor = [], None
        while True:
            page = service.list(Scope.user(org_id, user_id), limit=1000, cursor=cursor, status=None)
            memories += page.records
            cursor = page.next_cursor
            if not cursor:
                break
        counts["memories"] += len(memories)
        by_turn: dict[str, list[str]] = {}
        for memory in memories:
            for source in memory.source_ids:
                by_turn.setdefault(source, []).append(memory.content)
        for i, turn in enumerate(dialogue["turns"]):
            if turn["role"] != "user":
                continue
            fact = turn.get("fact", "").strip()
            made = by_turn.get(f"{user_id}:t{i}", [])
            counts["user_turns"] += 1
            counts["with_fact"] += bool(fact)
            counts["yielded"] += bool(made)
            counts["correct"] += bool(made and fact)
            if made and fact:
                f1s.append(max(token_f1(content, fact) for content in made))
    return {
        "mode": mode, "dialogues": len(dialogues),
        "precision": _ratio(counts["correct"], counts["yielded"]),
        "recall": _ratio(counts["correct"], counts["with_fact"]),
        "content_f1": round(sum(f1s) / len(f1s), 4) if f1s else 0.0,
        "base_rate": _ratio(counts["with_fact"], counts["user_turns"]),
        **counts,
    }


def format_facts_table(reports: list[dict[str, Any]]) -> str:
    """The turn-level figures of `evaluate_facts`, one row a mode."""
    lines = [f"{'mode':<6} {'precision':>9} {'base rate':>9} {'recall':>6} {'content F1':>10} "
             f"{'user turns':>10} {'with fact':>9} {'yielded':>7}  dialogues"]
    for r in reports:
        lines.append(f"{r['mode']:<6} {r['precision']:>9.3f} {r['base_rate']:>9.3f} {r['recall']:>6.3f} "
                     f"{r['content_f1']:>10.3f} {r['user_turns']:>10} {r['with_fact']:>9} {r['yielded']:>7}  "
                     f"{r['dialogues']}")
    return "\n".join(lines)
