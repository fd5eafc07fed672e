"""Recall evaluation on a labelled set: recall@5, recall@10 and MRR for dense, keyword and hybrid."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent_memory.errors import InvalidInputError

MODES = ("hybrid", "dense", "keyword")


def load_questions(path: str | Path) -> list[dict[str, Any]]:
    """Read a questions file; every line needs user_id, question and a non-empty evidence list."""
    questions = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(item, dict) or not item.get("user_id") or not item.get("question"):
                raise InvalidInputError(f"{path}:{number}: needs user_id and question")
            evidence = item.get("evidence")
            if not isinstance(evidence, list) or not evidence:
                raise InvalidInputError(f"{path}:{number}: evidence must be a non-empty list of message ids")
            questions.append(item)
    if not questions:
        raise InvalidInputError(f"{path}: no questions")
    return questions


def _metrics(ranked_sources: list[list[str]], evidence: set[str], top_k: int) -> dict[str, float]:
    def recall_at(k: int) -> float:
        found = {s for sources in ranked_sources[:k] for s in sources} & evidence
        return len(found) / len(evidence)

    mrr = 0.0
    for rank, sources in enumerate(ranked_sources[:top_k], start=1):
        if evidence & set(sources):
            mrr = 1.0 / rank
            break
    return {"recall@5": recall_at(5), "recall@10": recall_at(10), "mrr": mrr}


def _mean(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    keys = ("recall@5", "recall@10", "mrr")
    return {k: round(sum(r[k] for r in rows) / len(rows), 4) if rows else 0.0 for k in keys}


def evaluate_recall(service: Any, questions: list[dict[str, Any]], *, top_k: int = 10, default_org: str = "default") -> dict[str, Any]:
    """Ask every question as its user in every mode and average the metrics, overall and by category."""
    depth = max(top_k, 10)
    per_mode: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    by_category: dict[str, dict[str, list[dict[str, float]]]] = {}
    for item in questions:
        org_id = item.get("org_id") or default_org
        evidence = set(item["evidence"])
        category = str(item.get("category") or "all")
        bucket = by_category.setdefault(category, {m: [] for m in MODES})
        for mode in MODES:
            result = service.recall(org_id, {"user_id": item["user_id"], "query": item["question"], "top_k": depth, "mode": mode})
            ranked = [hit.source_ids for hit in result.memories]
            metrics = _metrics(ranked, evidence, top_k)
            per_mode[mode].append(metrics)
            bucket[mode].append(metrics)
    report: dict[str, Any] = {m: _mean(per_mode[m]) for m in MODES}
    report["questions"] = len(questions)
    report["by_category"] = {
        category: {**{m: _mean(rows[m]) for m in MODES}, "questions": len(rows["hybrid"])}
        for category, rows in sorted(by_category.items())
    }
    return report


def format_table(report: dict[str, Any]) -> str:
    """A plain-text table of an evaluation report."""
    lines = [f"{'set':<10} {'mode':<8} {'recall@5':>9} {'recall@10':>10} {'mrr':>7}  questions"]
    sections = [("all", report, report["questions"])]
    sections += [(c, r, r["questions"]) for c, r in report.get("by_category", {}).items()]
    for name, section, count in sections:
        for mode in MODES:
            m = section[mode]
            lines.append(f"{name:<10} {mode:<8} {m['recall@5']:>9.3f} {m['recall@10']:>10.3f} {m['mrr']:>7.3f}  {count}")
    return "\n".join(lines)
