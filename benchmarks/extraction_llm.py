"""The `llm` extractor's path on a labelled dialogue set, with an LLM on loopback that answers
from the labels: a check of the plumbing (prompt, client, validation, the decision step,
supersessions), not of any model's quality.

The server (`loopback.llm_server`) speaks the OpenAI chat-completions protocol. For each request
it finds the dialogue by its user turns and answers with one memory per expected fact (the
shortest clause of a user turn that states it), and marks the memory that states a change of
mind as contradicting the existing memory that holds the old fact (by its id in the prompt).
What falls short of 1.0 is lost between the answer and the store, or is the labels' own
wording (a clause that also holds a forbidden word).

To measure a real model, point the settings at it and score the same set:

    AGENT_MEMORY_LLM_BASE_URL=http://host:port/v1 AGENT_MEMORY_LLM_MODEL=name AGENT_MEMORY_LLM_API_KEY=... \\
        .venv/bin/agent-memory eval --extraction benchmarks/data/extraction/heldout.jsonl --json

    PYTHONPATH=. .venv/bin/python benchmarks/extraction_llm.py --set heldout --name eval_extraction_llm_plumbing_heldout
    PYTHONPATH=. .venv/bin/python benchmarks/extraction_llm.py --set benchmarks/data/extraction3/heldout.jsonl \
        --name eval_extraction3_llm_plumbing_heldout
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory.embedding import SentenceTransformerEmbedder  # noqa: E402
from agent_memory.evaluation import evaluate_extraction, fact_matches, load_extraction_cases  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from loopback.llm_server import scripted_llm  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import maintenance_of  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "extraction"


_PIECES = re.compile(r"[^,，。.;；!?！？—–]+")


def _stating(fact: str, text: str) -> str | None:
    """The shortest clause of a turn that states a fact (else the turn, if it does)."""
    pieces = [p.strip() for p in _PIECES.findall(text) if fact_matches(fact, p)]
    return min(pieces, key=len) if pieces else (text if fact_matches(fact, text) else None)


def oracle(cases: list[dict[str, Any]]) -> Any:
    """Answers from the labels: each expected fact as the user turn that states it."""
    by_turns = {tuple(m["content"] for m in c["messages"] if m["role"] == "user"): c for c in cases}

    def respond(body: dict[str, Any]) -> str:
        payload = json.loads(body["messages"][-1]["content"])
        turns = [m for m in payload["messages"] if m["role"] == "user"]
        case = next((c for key, c in by_turns.items() if key[: len(turns)] == tuple(t["content"] for t in turns)
                     or set(t["content"] for t in turns) <= set(key)), None)
        if case is None:
            return json.dumps({"memories": []})
        flips = {f["new"]: f["old"] for f in case.get("flips", [])}
        memories = []
        for fact in case["expected"]:
            turn = next((t for t in turns if fact_matches(fact, t["content"])), None)
            if turn is None:
                continue
            item = {"content": _stating(fact, turn["content"]), "memory_type": "semantic", "importance": 0.7, "confidence": 0.9,
                    "source_message_ids": [turn["id"]], "relation": "new", "existing_id": None}
            old = flips.get(fact)
            held = next((e for e in payload["existing_memories"] if old and fact_matches(old, e["content"])), None)
            if held is not None:
                item.update(relation="contradicts", existing_id=held["id"])
            memories.append(item)
        return json.dumps({"memories": memories}, ensure_ascii=False)

    return respond


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="heldout",
                        help="a file of benchmarks/data/extraction/ (without .jsonl), or the path of a cases file")
    parser.add_argument("--name", default=None, help="write benchmarks/results/<name>.json")
    args = parser.parse_args()
    cases = load_extraction_cases(Path(args.set) if args.set.endswith(".jsonl") else DATA / f"{args.set}.jsonl")
    embedder = SentenceTransformerEmbedder()
    with scripted_llm() as llm, tempfile.TemporaryDirectory() as tmp:
        llm.respond = oracle(cases)
        settings = Settings(storage_uri=str(Path(tmp) / "store"), llm_base_url=llm.base_url, llm_model="oracle",  # type: ignore[call-arg]
                            llm_requests_per_minute=0, llm_max_retries=0, _env_file=None)
        store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
        with MemoryService(store, embedder, settings, defer_access=False, maintenance=maintenance_of(store)) as service:
            report = evaluate_extraction(service, cases, "llm")
        requests = len(llm.requests)
    for name, r in [("all", report), *report["by_lang"].items()]:
        print(f"llm {name}: precision {r['precision']:.3f} recall {r['recall']:.3f} flips done {r['flips_done_share']:.2f} "
              f"forbidden {r['forbidden_hits']} extracted {r['extracted']}")
    print(f"requests to the LLM: {requests}")
    if args.name:
        write_result(args.name, {"set": args.set, "llm": "loopback, answers from the labels", "requests": requests,
                                 "report": report})


if __name__ == "__main__":
    main()
