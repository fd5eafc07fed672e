"""Offline extraction scored turn by turn against human-written facts, end to end through a service.

Sets shaped like Multi-Session Chat (every turn with the fact it states) and LoCoMo's observations
(each speaker in turn as the user), and the project's extraction sets, on a scratch store, for each
decision asked (the learned model's probability as each candidate's confidence, or the rules' own)
side by side in one run, with extraction's speed (user turns a second):

    python -m benchmarks.extraction_facts --msc ../shared/data/msc-dev/dialogues.jsonl --part heldout
    python -m benchmarks.extraction_facts --locomo ../shared/data/locomo-dev
    python -m benchmarks.extraction_facts --cases benchmarks/data/extraction4/heldout.jsonl
    ... --decision learned --decision rules  # which decisions (default: both)
    ... --model model.json                    # another learned model than the bundled one
    ... --rule-weight 0.3                     # the rule's share of a candidate's confidence
    ... --threshold 0.7                       # extraction_min_confidence
    ... --save NAME                           # write benchmarks/results/NAME.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from agent_memory.decision import BUNDLED, DecidedExtractor, DecisionModel
from agent_memory.decision.extractor import RULE_WEIGHT
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


def _user_turns(name: str, items: list[dict[str, Any]]) -> int:
    if name.startswith("cases:"):
        return sum(m["role"] == "user" for case in items for m in case["messages"])
    return sum(t["role"] == "user" for d in items for t in d["turns"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--msc", help="a dialogues.jsonl shaped like msc-dev")
    parser.add_argument("--part", default="heldout", choices=["heldout", "train", "all"],
                        help="which dialogues of msc-dev (benchmarks/data/msc/split.json); another set: all")
    parser.add_argument("--locomo", help="a folder with LoCoMo's history.jsonl and observations.jsonl")
    parser.add_argument("--cases", action="append", default=[], help="a project extraction set (repeatable)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N dialogues of --msc/--locomo")
    parser.add_argument("--decision", action="append", choices=["learned", "rules"], default=[],
                        help="extraction_decision to run (repeatable; default: learned and rules)")
    parser.add_argument("--model", default=None, help="with learned: this model's JSON instead of the bundled one")
    parser.add_argument("--sentence-bar", type=float, default=None,
                        help="with learned, also propose the sentences the rules leave out, kept at this probability")
    parser.add_argument("--drop-below", type=float, default=0.0,
                        help="with learned, leave a statement's clauses under this probability out of it")
    parser.add_argument("--rule-weight", type=float, default=None,
                        help="with learned, the share of a candidate's confidence that is its rule's own (default: the bundled)")
    parser.add_argument("--threshold", type=float, default=None, help="extraction_min_confidence (default: the setting's)")
    parser.add_argument("--save", help="write the figures to benchmarks/results/NAME.json")
    args = parser.parse_args()
    settings = Settings()
    if args.threshold is not None:
        settings = settings.replace(extraction_min_confidence=args.threshold)
    model = DecisionModel.load(args.model or BUNDLED)
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
    weight = {} if args.rule_weight is None else {"rule_weight": args.rule_weight}
    runs: dict[str, dict[str, Any]] = {}
    for name, items in sets:
        for decision in args.decision or ["learned", "rules"]:
            with tempfile.TemporaryDirectory(prefix="agent-memory-bench-") as tmp:
                scratch = settings.replace(storage_uri=str(Path(tmp) / "lancedb"), extraction_decision=decision)
                with open_service(scratch) as service:
                    service.embedder.embed_batch(["warm up"])  # the model's load is not extraction's time
                    extractor = (DecidedExtractor(model, service.embedder, sentence_bar=args.sentence_bar,
                                                  drop_below=args.drop_below, **weight) if decision == "learned" else None)
                    if name.startswith("cases:"):
                        report, seconds = timed(evaluate_extraction, service, items, "rules", extractor=extractor)
                        report.pop("failures", None)
                    else:
                        report, seconds = timed(evaluate_facts, service, items, "rules", extractor=extractor)
            report["seconds"] = round(seconds, 1)
            report["user_turns_per_s"] = round(_user_turns(name, items) / seconds, 1)
            runs.setdefault(name, {})[decision] = report
            print(name, decision, json.dumps(report, ensure_ascii=False))
    payload = {"model": args.model or "bundled", "sentence_bar": args.sentence_bar, "drop_below": args.drop_below,
               "rule_weight": weight.get("rule_weight", RULE_WEIGHT),
               "min_confidence": settings.extraction.min_confidence, "runs": runs}
    if args.save:
        write_result(args.save, payload)


if __name__ == "__main__":
    main()
