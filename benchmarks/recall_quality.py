"""Recall quality on labelled sets: agent-memory's three modes beside plain reference retrievers.

Each set is imported (`raw` mode) into a temporary store and every question asked as its user, as
`agent-memory eval` does. Beside it, on the same turns and the same model:

- `ref_dense`: cosine of each bare turn as `speaker: text`;
- `ref_bm25_turn`: plain BM25 (words lower-cased, English stop words dropped, CJK as character
  bigrams, no stemming) over the bare turn with its speaker;
- `ref_bm25_ctx2`: the same BM25 over the turn with the two before it and the speakers' names;
- `ref_fusion`: 0.5 x (ref_bm25_ctx2 / its best score for the question) + 0.5 x ref_dense.

Recall is ranked with no noise floor; the report says, for the configured `recall_min_score` and a
few others, what share of the evidence hits in the top 10 score under it and how many questions
it would leave with no answer.

`--grid` scores hybrid recall for each fusion setting of a small grid on the stored sets, and
picks one leave-one-conversation-out: the setting best on the other conversations of the set,
scored on the one left out.

    .venv/bin/python benchmarks/recall_quality.py --set locomo-dev=../shared/data/locomo-dev \\
        --set zh-dev=benchmarks/data/zh_dialogues/dev \\
        --set sample-en=examples/sample_history.jsonl,examples/sample_questions.jsonl#en \\
        --set sample-zh=examples/sample_history.jsonl,examples/sample_questions.jsonl#zh --name recall_quality_dev
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory import scoring  # noqa: E402
from agent_memory.evaluation import MODES, evaluate_recall, load_questions  # noqa: E402
from agent_memory.history import parse_file  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.text import CJK, CJK_RANGES, ENGLISH_STOPWORDS  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from jobs.importer import import_into  # noqa: E402
from storage.connect import maintenance_of, open_service  # noqa: E402  (the wiring `agent-memory eval` uses)

FLOORS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
GRID = {
    "weight_semantic": (0.4, 0.5, 0.6),
    "weight_keyword": (0.3, 0.4, 0.5),
    "weight_recency": (0.04, 0.08),
    "recall_semantic_scale": (0.0, 0.5),
    "recall_keyword_scale": (0.5, 1.0),
}
_PLAIN = re.compile(rf"[{CJK_RANGES}]+|[^\W_{CJK_RANGES}]+", re.UNICODE)


def plain_terms(text: str) -> list[str]:
    """The reference tokenizer: lower-cased words less English stop words, CJK runs as bigrams."""
    out: list[str] = []
    for token in _PLAIN.findall(text.lower()):
        if CJK.match(token):
            out.extend([token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)])
        elif token not in ENGLISH_STOPWORDS:
            out.append(token)
    return out


def _set_paths(spec: str) -> tuple[str, Path, Path, str | None]:
    """NAME=DIR or NAME=HISTORY,QUESTIONS, either with #CATEGORY to ask only that category's questions."""
    name, _, where = spec.partition("=")
    where, _, category = where.partition("#")
    if "," in where:
        history, questions = where.split(",", 1)
        return name, Path(history), Path(questions), category or None
    return name, Path(where) / "history.jsonl", Path(where) / "questions.jsonl", category or None


def _metrics(ranked: list[str], evidence: set[str]) -> dict[str, float]:
    mrr = next((1.0 / r for r, mid in enumerate(ranked[:10], start=1) if mid in evidence), 0.0)
    return {"recall@5": len(set(ranked[:5]) & evidence) / len(evidence),
            "recall@10": len(set(ranked[:10]) & evidence) / len(evidence), "mrr": mrr}


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(float(np.mean([r[k] for r in rows])), 4) for k in ("recall@5", "recall@10", "mrr")}


def references(history: Path, questions: list[dict[str, Any]], embedder: Any) -> dict[str, Any]:
    """The plain retrievers of the module docstring, overall and by category."""
    turns, _, _ = parse_file(str(history), "auto", "default")
    sessions: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for turn in turns:
        sessions[(turn.user_id, turn.session_id)].append(turn.message)
    docs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (user, _), messages in sessions.items():
        messages.sort(key=lambda m: (m.created_at, m.message_id))
        for i, m in enumerate(messages):
            line = f"{m.name or m.role}: {m.content}"
            before = " ".join(f"{p.name or p.role} {p.content}" for p in messages[max(0, i - 2) : i])
            docs[user].append({"id": m.message_id, "text": line, "turn": plain_terms(line),
                               "ctx2": plain_terms(f"{before} {line}")})
    vectors = {u: embedder.embed_batch([d["text"] for d in ds]) for u, ds in docs.items()}
    asked = embedder.embed_batch([q["question"] for q in questions])
    rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for q, qv in zip(questions, asked, strict=True):
        user_docs = docs[q["user_id"]]
        ids = [d["id"] for d in user_docs]
        qterms = plain_terms(q["question"])
        cosine = vectors[q["user_id"]] @ qv
        turn = scoring.bm25(qterms, [d["turn"] for d in user_docs])
        ctx2 = scoring.bm25(qterms, [d["ctx2"] for d in user_docs])
        fusion = 0.5 * (ctx2 / ctx2.max() if ctx2.max() > 0 else ctx2) + 0.5 * cosine
        evidence = set(q["evidence"])
        for name, scores in (("ref_dense", cosine), ("ref_bm25_turn", turn), ("ref_bm25_ctx2", ctx2),
                             ("ref_fusion", fusion)):
            ranked = [ids[i] for i in np.argsort(-scores, kind="stable")[:10]]
            for key in ("all", str(q.get("category") or "all")):
                rows[key][name].append(_metrics(ranked, evidence))
    out = {name: _mean(r) for name, r in rows["all"].items()}
    out["by_category"] = {c: {n: _mean(r) for n, r in v.items()} for c, v in sorted(rows.items()) if c != "all"}
    return out


def _grid_points(spec: dict[str, list[float]] | None = None) -> list[dict[str, float]]:
    spec = spec or GRID
    keys = list(spec)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(spec[k] for k in keys))]


def _hybrid_by_user(service: Any, questions: list[dict[str, Any]]) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = defaultdict(list)
    for q in questions:
        hits = service.recall(q.get("org_id") or "default", {"user_id": q["user_id"], "query": q["question"],
                                                             "top_k": 10, "min_score": 0}).memories
        ranked = [s for h in hits for s in h.source_ids]
        out[q["user_id"]].append(_metrics(ranked, set(q["evidence"])))
    return out


def grid(stored: list[tuple[str, Any, list[dict[str, Any]]]], base: Settings,
         spec: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """Hybrid recall of every grid point on every set; leave-one-conversation-out choices."""
    points = _grid_points(spec)
    results: list[dict[str, Any]] = []
    for point in points:
        row: dict[str, Any] = {"settings": point, "sets": {}}
        for name, service, questions in stored:
            with open_service(base.replace(**point), embedder=service.embedder, store=service.store, defer_access=False) as s:
                by_user = _hybrid_by_user(s, questions)
            row["sets"][name] = {"all": _mean([m for ms in by_user.values() for m in ms]),
                                 "by_user": {u: _mean(ms) for u, ms in by_user.items()},
                                 "per_question": {u: ms for u, ms in by_user.items()}}
        results.append(row)

    def goal(rows: list[dict[str, float]]) -> float:
        return float(np.mean([r["recall@5"] + r["recall@10"] for r in rows])) if rows else 0.0

    loco: dict[str, Any] = {}
    for name, _, questions in stored:
        users = sorted({q["user_id"] for q in questions})
        if len(users) < 3:
            continue
        held: list[dict[str, float]] = []
        for user in users:
            best = max(results, key=lambda r: goal([m for u, ms in r["sets"][name]["per_question"].items()
                                                    if u != user for m in ms]))
            held.extend(best["sets"][name]["per_question"][user])
            loco.setdefault(name, {"chosen": {}})["chosen"][user] = best["settings"]
        loco[name]["held_out"] = _mean(held)
    for row in results:
        for value in row["sets"].values():
            value.pop("per_question")
    return {"points": results, "leave_one_conversation_out": loco}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", required=True, metavar="NAME=DIR|NAME=HISTORY,QUESTIONS[#CATEGORY]")
    parser.add_argument("--name", default="recall_quality", help="results file name (benchmarks/results/NAME.json)")
    parser.add_argument("--grid", action="store_true", help="also score the fusion grid and leave-one-out choices")
    parser.add_argument("--grid-spec", default=None, metavar="JSON",
                        help='another grid: {"setting": [values, ...], ...} (implies --grid)')
    parser.add_argument("--mode", default="raw", choices=["raw", "rules"], help="import mode (memories recalled over)")
    parser.add_argument("--no-references", action="store_true")
    parser.add_argument("--store-dir", default=None,
                        help="keep the imported stores here and reuse them (only while the index settings stay)")
    args = parser.parse_args()

    base = Settings(_env_file=None, embedding_cache_size=4096)  # type: ignore[call-arg]
    payload: dict[str, Any] = {"settings": {k: base.value(k) for k in (
        "weight_semantic", "weight_keyword", "weight_recency", "weight_importance", "recall_semantic_scale",
        "recall_keyword_scale", "recall_min_score", "context_turns", "context_max_terms", "content_boost")},
        "mode": args.mode, "sets": {}}
    with tempfile.TemporaryDirectory(prefix="recall-quality-") as scratch:
        tmp = args.store_dir or scratch
        stored = []
        services = []
        for spec in args.set:
            name, history, questions_path, category = _set_paths(spec)
            questions = [q for q in load_questions(questions_path) if category in (None, q.get("category"))]
            settings = base.replace(storage_uri=os.path.join(tmp, name))
            reuse = Path(settings.storage.uri).exists()
            service = open_service(settings)
            services.append(service)
            if not reuse:
                import_into(service, history, mode=args.mode)
                maintenance_of(service.store).optimize()
            report = evaluate_recall(service, questions, floors=FLOORS)
            entry: dict[str, Any] = {"questions": len(questions), **{m: report[m] for m in MODES},
                                     "by_category": report["by_category"], "floor": report["floor"]}
            if not args.no_references:
                entry["references"] = references(history, questions, service.embedder)
            payload["sets"][name] = entry
            stored.append((name, service, questions))
            refs = entry.get("references", {})
            print(f"{name}: " + "  ".join(f"{m} {entry[m]['recall@5']:.3f}/{entry[m]['recall@10']:.3f}" for m in MODES)
                  + "  |  " + "  ".join(f"{k} {v['recall@5']:.3f}/{v['recall@10']:.3f}" for k, v in refs.items()
                                        if k != "by_category"), flush=True)
        if args.grid or args.grid_spec:
            payload["grid"] = grid(stored, base, json.loads(args.grid_spec) if args.grid_spec else None)
            for name, chosen in payload["grid"]["leave_one_conversation_out"].items():
                print(f"{name} leave-one-conversation-out: {chosen['held_out']}")
        for service in services:
            service.close()
    path = write_result(args.name, payload)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
