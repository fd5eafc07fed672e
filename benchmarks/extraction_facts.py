"""Offline extraction scored turn by turn against human-written facts, end to end through a service.

Sets shaped like Multi-Session Chat (every turn with the fact it states) and LoCoMo's observations
(each speaker in turn as the user), and the project's extraction sets, on a scratch store:

    python -m benchmarks.extraction_facts --msc ../shared/data/msc-dev/dialogues.jsonl --part heldout
    python -m benchmarks.extraction_facts --locomo ../shared/data/locomo-dev
    python -m benchmarks.extraction_facts --cases benchmarks/data/extraction4/heldout.jsonl
    ... --decision            # the learned decision's probability as each candidate's confidence
    ... --decision model.json # another model's
    ... --threshold 0.7       # the extraction_min_confidence the decision's probability is held to
    ... --save NAME           # write benchmarks/results/NAME.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from agent_memory.decision import BUNDLED, DecidedExtractor, DecisionModel
from agent_memory.evaluation import (
    evaluate_extraction,
    evaluate_facts,
    load_extraction_cases,
    load_fact_dialogues,
    observation_dialogues,
)
from agent_memory.settings import Settings
from benchmarks.common import timed, write_result
from storage.connect import open_service

SPLIT = Path(__file__).resolve().parent / "data" / "msc" / "split.json"


def msc_part(path: str, part: str) -> list[dict[str, Any]]:
    """The dialogues of one part of the fixed split (heldout, train) or all of them."""
    heldout = set(json.loads(SPLIT.read_text())["heldout"])
    dialogues = load_fact_dialogues(path)
    if part == "all":
        return dialogues
    return [d for d in dialogues if (d["id"] in heldout) == (part == "heldout")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--msc", help="a dialogues.jsonl shaped like msc-dev")
    parser.add_argument("--part", default="heldout", choices=["heldout", "train", "all"],
                        help="which dialogues of msc-dev (benchmarks/data/msc/split.json); another set: all")
    parser.add_argument("--locomo", help="a folder with LoCoMo's history.jsonl and observations.jsonl")
    parser.add_argument("--cases", action="append", default=[], help="a project extraction set (repeatable)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N dialogues of --msc/--locomo")
    parser.add_argument("--decision", nargs="?", const="bundled", default=None, metavar="MODEL",
                        help="give candidates the learned decision's probability (the bundled model, or MODEL.json)")
    parser.add_argument("--sentence-bar", type=float, default=None,
                        help="with --decision, also propose the sentences the rules leave out, kept at this probability")
    parser.add_argument("--drop-below", type=float, default=0.15,
                        help="with --decision, leave a statement's clauses under this probability out of it")
    parser.add_argument("--threshold", type=float, default=None, help="extraction_min_confidence (default: the setting's)")
    parser.add_argument("--save", help="write the figures to benchmarks/results/NAME.json")
    args = parser.parse_args()
    settings = Settings()
    if args.threshold is not None:
        settings = settings.replace(extraction_min_confidence=args.threshold)
    model = None
    if args.decision:
        model = DecisionModel.load(BUNDLED if args.decision == "bundled" else args.decision)
    runs: dict[str, Any] = {}
    sets: list[tuple[str, Any]] = []
    if args.msc:
        dialogues = msc_part(args.msc, args.part)
        sets.append((f"msc:{args.part}", dialogues[: args.limit] if args.limit else dialogues))
    if args.locomo:
        folder = Path(args.locomo)
        dialogues = observation_dialogues(folder / "history.jsonl", folder / "observations.jsonl")
        sets.append(("locomo", dialogues[: args.limit] if args.limit else dialogues))
    for path in args.cases:
        sets.append((f"cases:{path}", load_extraction_cases(path)))
    for name, items in sets:
        with tempfile.TemporaryDirectory(prefix="agent-memory-bench-") as tmp:
            scratch = settings.replace(storage_uri=str(Path(tmp) / "lancedb"))
            with open_service(scratch) as service:
                extractor = (DecidedExtractor(model, service.embedder,
                                              sentence_bar=args.sentence_bar,
                                              drop_below=args.drop_below)
                             if model is not None else None)
                if name.startswith("cases:"):
                    report, seconds = timed(evaluate_extraction, service, items, "rules", extractor=extractor)
                    report.pop("failures", None)
                else:
                    report, seconds = timed(evaluate_facts, service, items, "rules", extractor=extractor)
        report["seconds"] = round(seconds, 1)
        runs[name] = report
        print(name, json.dumps(report, ensure_ascii=False))
    payload = {"decision": args.decision, "sentence_bar": args.sentence_bar if model is not None else None,
               "drop_below": args.drop_below if model is not None else None, "min_confidence": settings.extraction.min_confidence, "runs": runs}
    if args.save:
        write_result(args.save, payload)


if __name__ == "__main__":
    main()
