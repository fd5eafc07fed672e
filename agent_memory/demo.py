"""`make run`: load the sample history into ./data (once) and answer a few recalls from it."""

from __future__ import annotations

import sys
from pathlib import Path

from agent_memory.cli import build_service
from agent_memory.history import import_history
from agent_memory.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SAMPLE = EXAMPLES / "sample_history.jsonl"


def sample_questions(per_language: int = 2) -> list[tuple[str, str, str]]:
    """A few labelled questions of each language from the shipped evaluation set."""
    from agent_memory.evaluation import load_questions

    picked: dict[str, list[tuple[str, str, str]]] = {}
    for item in load_questions(EXAMPLES / "sample_questions.jsonl"):
        bucket = picked.setdefault(item.get("category", "all"), [])
        if len(bucket) < per_language and item.get("kind") in ("preference", "flip", "identity"):
            bucket.append((item.get("org_id", "default"), item["user_id"], item["question"]))
    return [q for bucket in picked.values() for q in bucket]


def main() -> int:
    """Load the sample if the store lacks it, then show recall on it."""
    settings = Settings()
    with build_service(settings) as service:
        if service.stats()["memories"]["total"] == 0:
            print(f"loading {SAMPLE} into {settings.storage_uri} ...")
            report = import_history(service, SAMPLE)
            service.store.optimize()
            print(f"  {report.messages_logged} messages, {report.memories_written} memories in {report.duration_s:.1f} s")
        for org, user, question in sample_questions():
            result = service.recall(org, {"user_id": user, "query": question, "top_k": 3})
            print(f"\n[{org}/{user}] {question}")
            for hit in result.memories:
                print(f"  {hit.score:.3f}  {hit.content}")
    print(
        "\nTry it yourself:\n"
        "  .venv/bin/agent-memory search --org-id acme --user-id u01 'what does the user work on?'\n"
        "  .venv/bin/agent-memory add --user-id me 'I prefer answers in bullet points'\n"
        "  .venv/bin/agent-memory stats"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
