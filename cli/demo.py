"""`make run`: the sample history in ./data (loaded once), the Serve app on loopback, a recall shown."""

from __future__ import annotations

from pathlib import Path

import httpx

from agent_memory.errors import UnavailableError
from agent_memory.settings import Settings
from jobs.importer import import_into
from storage.connect import open_service

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SAMPLE = EXAMPLES / "sample_history.jsonl"


# How `make run` loads the sample: through offline extraction, as a posted conversation is.
SAMPLE_MODE = "rules"

# Questions of the sample that `make run` asks once the server is up (tests check that each finds
# its evidence first): preferences, a pet and a family, in English and Chinese.
DEMO_QUESTIONS = (
    ("u01", "Which code editor does the user use?"),
    ("u01", "Which editor does the user use?"),
    ("u01", "What pet does Caroline have?"),
    ("u19", "王芳后端一般用什么语言写？"),
    ("u19", "王芳的家庭情况是怎样的？"),
)


def load_sample(settings: Settings) -> None:
    """Extract the sample history into the configured store (offline rules) unless it holds memories already."""
    uri = settings.storage.uri
    if held := held_memories(settings):
        print(f"{uri} already holds {held:,} memories; not loading the sample again", flush=True)
        return
    with SAMPLE.open(encoding="utf-8") as lines:
        count = sum(1 for line in lines if line.strip())
    print(f"loading the sample ({count:,} messages of examples/{SAMPLE.name}) into {uri}: "
          "the model, then offline extraction, about a minute ...", flush=True)
    with open_service(settings, with_maintenance=True) as service:
        # Into org `default`: without API keys, that is the org every HTTP request belongs to.
        # The memories are what the users said of themselves, not every turn ("Hello! How can I
        # help?" is none).
        report = import_into(service, SAMPLE, org_id="default", force_org=True, mode=SAMPLE_MODE)
        service.maintenance.optimize()
    print(f"  {report.messages_logged} messages, {report.memories_written} memories in {report.duration_s:.1f} s",
          flush=True)


def held_memories(settings: Settings) -> int:
    """How many memories the store holds, without loading the model; 0 where it has no tables yet."""
    try:
        with open_service(settings, with_embedder=False, with_maintenance=True) as service:
            return int(service.stats()["memories"]["total"])
    except UnavailableError:  # no memories table: a new store (a store out of reach fails the import next)
        return 0


def show_recall(url: str) -> None:
    """Ask the running server the demo's questions over HTTP."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for user, question in DEMO_QUESTIONS:
            body = {"user_id": user, "query": question, "top_k": 3}
            response = client.post("/v1/memories/search", json=body)
            print(f"[{user}] {question}")
            hits = response.json().get("memories", [])
            for hit in hits:
                print(f"  {hit['score']:.3f}  {hit['content']}")
            if not hits:
                print("  (nothing above the noise floor)")
