"""`agent-memory eval`: recall@k and MRR on a labelled set, or extraction's precision and recall (on a
cases file, or turn by turn against per-turn facts), each in a temporary store."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import click

from cli.options import command, settings, store_options
from cli.output import print_json

EXIT_USAGE = 2


@command("eval", short_help="Recall@k and MRR on a labelled set. [temporary store]",
         epilog="Runs in this process, on a temporary store of its own (the model loads here).")
@click.option("--history", default=None, metavar="PATH", help="The history to import (JSONL, CSV or Parquet).")
@click.option("--questions", default=None, metavar="PATH", help="The labelled questions (JSONL).")
@click.option("--extraction", default=None, metavar="CASES", help="Score extraction on a cases file instead.")
@click.option("--facts", default=None, metavar="DIALOGUES",
              help="Score extraction turn by turn against the fact each turn states (JSONL dialogues).")
@click.option("--observations", default=None, metavar="FOLDER",
              help="The same on LoCoMo's observations (FOLDER/history.jsonl and FOLDER/observations.jsonl).")
@click.option("--top-k", type=int, default=10, show_default=True)
@click.option("--mode", default="raw", show_default=True, type=click.Choice(["raw", "rules", "llm"]))
@click.option("--query-precision", default=None, type=click.Choice(["fp32", "int8"]),
              help="The questions' model: exact, or int8 as QUERY_EMBEDDING_PRECISION=int8 serves it "
                   "(default: that setting).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@store_options()
def evaluate(history: str | None, questions: str | None, extraction: str | None, facts: str | None,
             observations: str | None, top_k: int, mode: str, query_precision: str | None, as_json: bool,
             org_id: str, storage_uri: str | None, **_: Any) -> int:
    """Recall@k and MRR of a labelled set of questions over a history, in a temporary store; or, with
    --extraction, the precision and recall of memory extraction on a cases file; or, with --facts or
    --observations, extraction scored turn by turn against the facts the turns state."""
    config = settings(storage_uri)
    if extraction:
        return _extraction(config, extraction, org_id, as_json)
    if facts or observations:
        return _facts(config, facts, observations, org_id, as_json)
    if not history or not questions:
        print("eval needs --history and --questions (or --extraction CASES.jsonl, --facts DIALOGUES.jsonl, "
              "--observations FOLDER)", file=sys.stderr)
        return EXIT_USAGE
    from agent_memory.embedding import build_embedder
    from agent_memory.errors import InvalidInputError
    from agent_memory.evaluation import evaluate_recall, format_table, load_questions, named_sessions
    from jobs.importer import import_into
    from storage.connect import open_service

    labelled = load_questions(questions)
    session_of = named_sessions(history, org_id)
    precision = query_precision or config.embedding.query_precision
    if precision == "int8" and config.embedding.backend == "torch":  # before the import, not after it
        raise InvalidInputError("--query-precision int8 runs on ONNX Runtime: embedding_backend must be auto or onnx")
    with tempfile.TemporaryDirectory(prefix="agent-memory-eval-") as tmp:
        scratch = config.replace(storage_uri=os.path.join(tmp, "lancedb"))
        with open_service(scratch, with_maintenance=True) as service:
            imported = import_into(service, history, mode=mode, org_id=org_id)
            service.maintenance.optimize()
            if precision == "fp32":
                report = evaluate_recall(service, labelled, top_k=top_k, default_org=org_id, session_of=session_of)
                report["query_precision"] = getattr(service.embedder, "precision", "fp32")
            else:
                # Stored exactly, as every write is; only the questions go through the int8 model,
                # as the ingress runs it: that precision, and its threads.
                queries = build_embedder(config, threads=config.embedding.query_threads_at(precision), precision=precision)
                with open_service(scratch, embedder=queries, store=service.store) as asking:
                    report = evaluate_recall(asking, labelled, top_k=top_k, default_org=org_id,
                                             session_of=session_of)
                report["query_precision"] = getattr(queries, "precision", "fp32")  # what the model ran at
    report["history"] = {"messages": imported.messages_logged, "memories": imported.memories_written,
                         "rejected": imported.rows_rejected}
    if as_json:
        print_json(report)
    else:
        print(format_table(report))
        if report["query_precision"] != "fp32":
            print(f"(questions embedded in {report['query_precision']}, memories exactly)")
    return 0


def _extraction(config: Any, cases_path: str, org_id: str, as_json: bool) -> int:
    """Precision and recall of the rules extractor, and of the LLM when configured."""
    from agent_memory.evaluation import evaluate_extraction, format_extraction_table, load_extraction_cases

    cases = load_extraction_cases(cases_path)
    reports = _per_mode(config, lambda service, mode: evaluate_extraction(service, cases, mode, org_id=org_id))
    if as_json:
        print_json({r["mode"]: r for r in reports})
    else:
        print(format_extraction_table(reports))
        if not config.llm.configured:
            print("(llm: not configured; set AGENT_MEMORY_LLM_BASE_URL and AGENT_MEMORY_LLM_MODEL to score it)")
    return 0


def _per_mode(config: Any, evaluate: Callable[[Any, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """`evaluate(service, mode)` for the rules, and the LLM when configured, each on a scratch store."""
    from storage.connect import open_service

    reports = []
    for mode in ["rules", "llm"] if config.llm.configured else ["rules"]:
        with tempfile.TemporaryDirectory(prefix="agent-memory-eval-") as tmp:
            with open_service(config.replace(storage_uri=os.path.join(tmp, "lancedb"))) as service:
                reports.append(evaluate(service, mode))
    return reports


def _facts(config: Any, facts: str | None, observations: str | None, org_id: str, as_json: bool) -> int:
    """Per-turn precision, recall, content F1 and base rate of offline extraction (and of the LLM
    when configured): of the user turns that yielded a memory, the share that state a fact; of
    those that state one, the share that yielded one."""
    from pathlib import Path

    from agent_memory.evaluation import (
        evaluate_facts,
        format_facts_table,
        load_fact_dialogues,
        observation_dialogues,
    )

    if facts:
        dialogues = load_fact_dialogues(facts)
    else:
        folder = Path(str(observations))
        dialogues = observation_dialogues(folder / "history.jsonl", folder / "observations.jsonl")
    reports = _per_mode(config, lambda service, mode: evaluate_facts(service, dialogues, mode, org_id=org_id))
    if as_json:
        print_json({r["mode"]: r for r in reports})
    else:
        print(format_facts_table(reports))
    return 0
