"""`make run`: the sample history in ./data (loaded once), the Serve app on loopback, a recall shown."""

from __future__ import annotations

import sys
from pathlib import Path

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


def load_sample(settings: Settings) -> None:
    """Import the sample history into the configured store unless it holds memories already."""
    from agent_memory.cli import build_service
    from agent_memory.history import import_history

    with build_service(settings) as service:
        if service.stats()["memories"]["total"]:
            print(f"{settings.storage_uri} already holds memories; not loading the sample again")
            return
        print(f"loading {SAMPLE.name} into {settings.storage_uri} ...", flush=True)
        # Into org `default`: without API keys, that is the org every HTTP request belongs to.
        report = import_history(service, SAMPLE, org_id="default", force_org=True)
        service.store.optimize()
        print(f"  {report.messages_logged} messages, {report.memories_written} memories in {report.duration_s:.1f} s")


def show_recall(url: str) -> None:
    """Ask the running server a few of the sample's questions over HTTP."""
    import httpx

    with httpx.Client(base_url=url, timeout=30) as client:
        for _org, user, question in sample_questions():
            body = {"user_id": user, "query": question, "top_k": 3}
            response = client.post("/v1/memories/search", json=body)
            print(f"[{user}] {question}")
            for hit in response.json().get("memories", []):
                print(f"  {hit['score']:.3f}  {hit['content']}")


def main() -> int:
    """Load the sample (once) and serve it."""
    from agent_memory.cli import main as cli_main

    return cli_main(["serve", "--load-sample"])


if __name__ == "__main__":
    sys.exit(main())
