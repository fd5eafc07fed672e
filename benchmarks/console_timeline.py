"""A user's timeline at 1M memories: a page read as the service reads it now (only the page's events
and those of its memories parsed and replayed) beside the whole replay (every event of the user
read whole, replayed, then the page cut), alternating, on a store `benchmarks/console_api.py`
built and kept (`--store`).

    .venv/bin/python benchmarks/console_api.py --store data/console-bench-1m --name console_api_1m
    .venv/bin/python benchmarks/console_timeline.py --store data/console-bench-1m
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory.models import Scope  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.timeline import page_of, timeline_events  # noqa: E402
from benchmarks.common import summarize, write_result  # noqa: E402
from storage.connect import open_service  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--name", default="console_api_1m_timeline")
    args = parser.parse_args()
    settings = Settings(storage_uri=str(Path(args.store) / "lancedb"), _env_file=None)  # type: ignore[call-arg]
    svc = open_service(settings, with_embedder=False, model=("all-MiniLM-L6-v2", 384))

    def whole(scope: Scope) -> tuple[list, str | None]:
        events = svc.store.user_events(scope)
        unstated = sorted({e.memory_id for e in events if e.memory_id} - {e.memory_id for e in events
                                                                           if e.action == "created"})
        stored = {r.id: r for r in svc.store.get_memories(scope, unstated)} if unstated else {}
        return page_of(timeline_events(events, stored), since=None, until=None, limit=500, cursor=None)

    out = {}
    for user in ("target-small", "target-large"):
        scope = Scope.user("default", user)
        assert whole(scope)[0] == svc.timeline(scope, limit=500)[0]  # the same page
        samples: dict[str, list[float]] = {"page_read": [], "whole_replay": []}
        for _ in range(args.rounds):
            for label, fn in (("page_read", lambda s=scope: svc.timeline(s, limit=500)),
                              ("whole_replay", lambda s=scope: whole(s))):
                started = time.perf_counter()
                fn()
                samples[label].append(time.perf_counter() - started)
        out[user] = {k: summarize(v) for k, v in samples.items()}
        print(user, json.dumps(out[user]), flush=True)
    svc.close()
    print(write_result(args.name, {"params": {**vars(args), "load_average": os.getloadavg()}, "results": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
