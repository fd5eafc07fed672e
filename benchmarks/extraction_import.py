"""Rules-mode import of the sample history: messages/s, memories kept, supersessions, and flip recall.

    python -m benchmarks.extraction_import                 # all 36 users (the full run)
    python -m benchmarks.extraction_import --users 4       # a quick check
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from agent_memory.models import Scope
from agent_memory.settings import Settings
from benchmarks.common import timed, write_result
from jobs.importer import import_into
from storage.connect import open_service

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def main() -> None:
    """Import with `--mode rules` into a scratch store and report throughput and flip recall."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--users", type=int, default=0, help="only the first N users (0: all)")
    parser.add_argument("--mode", default="rules", choices=["rules", "llm"])
    args = parser.parse_args()
    rows = [json.loads(line) for line in (EXAMPLES / "sample_history.jsonl").open(encoding="utf-8")]
    users = sorted({r["user_id"] for r in rows})
    if args.users:
        users = users[: args.users]
    chosen = set(users)
    questions = [json.loads(line) for line in (EXAMPLES / "sample_questions.jsonl").open(encoding="utf-8")]
    flips = [q for q in questions if q["kind"] == "flip" and q["user_id"] in chosen]
    with tempfile.TemporaryDirectory(prefix="agent-memory-bench-") as tmp:
        history = Path(tmp) / "history.jsonl"
        history.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows if r["user_id"] in chosen),
                           encoding="utf-8")
        settings = Settings(storage_uri=str(Path(tmp) / "lancedb"))
        with open_service(settings) as service:
            report, seconds = timed(import_into, service, history, mode=args.mode)
            stats = service.stats()["memories"]
            hit = 0
            for q in flips:
                result = service.recall(q["org_id"], {"user_id": q["user_id"], "query": q["question"], "top_k": 5})
                hit += any(set(q["evidence"]) & set(h.source_ids) for h in result.memories)
            superseded = sum(len(service.list(Scope.user(o, u), status="superseded").records)
                             for o, u in {(r["org_id"], r["user_id"]) for r in rows if r["user_id"] in chosen})
    payload = {
        "mode": args.mode, "users": len(users), "messages": report.messages_logged,
        "memories_written": report.memories_written, "by_status": stats["by_status"], "superseded": superseded,
        "seconds": round(seconds, 2), "messages_per_s": round(report.messages_logged / seconds, 1),
        "flip_questions": len(flips), "flip_recall@5": round(hit / len(flips), 3) if flips else None,
    }
    print(json.dumps(payload, indent=2, ensure_ascii=False))
    if not args.users:
        write_result(f"extraction_import_{args.mode}", payload)


if __name__ == "__main__":
    main()
