"""The int8 query model against the exact one on labelled dev sets, question by question.

Each set (a directory with `history.jsonl` and `questions.jsonl`, or NAME=HISTORY,QUESTIONS) is
imported once, stored exactly (`raw` mode, as `agent-memory eval` does), and every question is
asked twice in hybrid mode: with the exact query model and with the int8 one at the threads the
ingress runs it on. Reported per set and pooled: recall@10 summed over questions for each model,
the difference per 1,000 questions (the questions int8 loses, net) and how many questions each
model answered better. `--include` pools the sets of an earlier results file with this run's.
`MAX_USERS` keeps the first N users of a set that has questions (and
their history), for sets too large to import in the time at hand.

    .venv/bin/python benchmarks/query_precision_dev.py --set locomo=../shared/data/locomo-dev \\
        --set memsim=../shared/data/memsim-dev --set longmemeval=../shared/data/longmemeval-dev:20 \\
        --set sample=examples/sample_history.jsonl,examples/sample_questions.jsonl --name query_precision_dev
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.embedding import build_embedder  # noqa: E402
from agent_memory.evaluation import load_questions  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from jobs.importer import import_into  # noqa: E402
from storage.connect import open_service  # noqa: E402

TOP_K = 10


def parse_set(spec: str) -> tuple[str, Path, Path, int | None]:
    """NAME=DIR[:MAX_USERS] or NAME=HISTORY,QUESTIONS[:MAX_USERS]."""
    name, _, where = spec.partition("=")
    where, _, limit = where.partition(":")
    if "," in where:
        history, questions = (Path(p) for p in where.split(",", 1))
    else:
        history, questions = Path(where) / "history.jsonl", Path(where) / "questions.jsonl"
    return name, history, questions, int(limit) if limit else None


def recall_at(service, question: dict) -> float:
    """The share of the question's evidence among the sources of the top TOP_K hybrid hits."""
    result = service.recall(question.get("org_id") or "default", {
        "user_id": question["user_id"], "query": question["question"], "top_k": TOP_K, "mode": "hybrid",
        "min_score": 0})
    found = {s for hit in result.memories[:TOP_K] for s in hit.source_ids} & set(question["evidence"])
    return len(found) / len(question["evidence"])


def measure_set(history: Path, questions: list[dict], settings: Settings, models: dict, tmp: Path) -> dict:
    users = {q["user_id"] for q in questions}
    kept = tmp / f"{history.parent.name}-history.jsonl"
    with open(history, encoding="utf-8") as source, open(kept, "w", encoding="utf-8") as out:
        for line in source:
            if line.strip() and json.loads(line).get("user_id") in users:
                out.write(line)
    scratch = settings.replace(storage_uri=str(tmp / f"{history.parent.name}-lancedb"))
    started = time.perf_counter()
    with open_service(scratch, embedder=models["fp32"], with_maintenance=True) as service:
        imported = import_into(service, kept, mode="raw", org_id="default")
        service.maintenance.optimize()
        import_s = time.perf_counter() - started
        scores = {}
        for precision, model in models.items():
            with open_service(scratch, embedder=model, store=service.store) as asking:
                scores[precision] = [recall_at(asking, q) for q in questions]
    exact, quick = scores["fp32"], scores["int8"]
    return {"questions": len(questions), "users": len(users), "messages": imported.messages_logged,
            "import_s": round(import_s, 1), "recall@10_sum": {"fp32": round(sum(exact), 3), "int8": round(sum(quick), 3)},
            "int8_better": sum(q > e for e, q in zip(exact, quick, strict=True)),
            "fp32_better": sum(e > q for e, q in zip(exact, quick, strict=True))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, help="NAME=DIR[:MAX_USERS] or NAME=HISTORY,QUESTIONS")
    parser.add_argument("--name", default="query_precision_dev")
    parser.add_argument("--include", action="append", default=[], type=Path,
                        help="a results file of an earlier run whose sets are pooled with this run's")
    args = parser.parse_args()
    settings = Settings(_env_file=None, embedding_cache_size=0)  # type: ignore[call-arg]
    models = {precision: build_embedder(settings, threads=settings.embedding.query_threads_at(precision),
                                        precision=precision) for precision in ("fp32", "int8")}
    assert getattr(models["int8"], "precision", "fp32") == "int8", "no int8 graph for the model"
    sets: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-precision-dev-") as tmp:
        for spec in args.set:
            name, history, questions_path, max_users = parse_set(spec)
            questions = load_questions(questions_path)
            if max_users:
                users = list(dict.fromkeys(q["user_id"] for q in questions))[:max_users]
                questions = [q for q in questions if q["user_id"] in set(users)]
            sets[name] = measure_set(history, questions, settings, models, Path(tmp))
            print(f"{name}: {sets[name]}", flush=True)
            write_result(args.name, {"params": vars(args) | {"include": [str(p) for p in args.include]},
                                     "sets": sets, "partial": True})
    for earlier in args.include:
        for name, figures in json.loads(earlier.read_text())["sets"].items():
            sets.setdefault(name, {**figures, "from": earlier.name})
    total = sum(s["questions"] for s in sets.values())
    exact = sum(s["recall@10_sum"]["fp32"] for s in sets.values())
    quick = sum(s["recall@10_sum"]["int8"] for s in sets.values())
    pooled = {"questions": total, "recall@10": {"fp32": round(exact / total, 4), "int8": round(quick / total, 4)},
              "int8_loses_per_1000": round(1000 * (exact - quick) / total, 2),
              "int8_better": sum(s["int8_better"] for s in sets.values()),
              "fp32_better": sum(s["fp32_better"] for s in sets.values()),
              "within_2_per_1000": 1000 * (exact - quick) / total <= 2}
    print(f"pooled: {pooled}")
    params = vars(args) | {"include": [str(p) for p in args.include]}
    print(f"wrote {write_result(args.name, {'params': params, 'sets': sets, 'pooled': pooled})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
