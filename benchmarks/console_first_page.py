"""The console's first page of a user's memories: milliseconds from navigation to the rendered page.

A user with 10,000 memories (written over HTTP in batches, as a client writes them); the system's
headless Chromium opens the console at 1280x800 on that user's page once to warm the stack and
its own cache, then reloads it `--runs` times. Each run reads, in the browser, the moment the page
marks itself ready (`performance.mark("console:page-ready")`, after the first 50 memories are in
the page) on the navigation's clock, and the navigation's own timings beside it.

    .venv/bin/python benchmarks/console_first_page.py                # starts a Serve app of its own
    .venv/bin/python benchmarks/console_first_page.py --url http://127.0.0.1:8000 --key KEY

Writes benchmarks/results/console_first_page.json; the target is a median under 1,000 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory_http import MemoryClient  # noqa: E402

from benchmarks.common import write_result  # noqa: E402

# Debian's Chromium, as the console's browser tests launch it (Playwright's own download cannot be
# used here); no calls out of the machine, no GPU, no sandbox as root.
CHROMIUM = os.environ.get("AGENT_MEMORY_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
# Template texts: distinct memories, none a retry of another.
SUBJECTS = ["Python", "Lisbon", "the March invoice", "hiking", "green tea", "Neovim", "the billing team", "refunds"]
VERBS = ["mentioned", "asked about", "prefers", "complained about", "praised", "planned around"]
BATCH = 200  # one embedding call a batch, well within the embedder's timeout on a loaded machine
PAGE_ROWS = 50  # the console's page of memories
TIMINGS = """(() => {
  const [nav] = performance.getEntriesByType("navigation");
  return {ready_ms: performance.getEntriesByName("console:page-ready").at(-1).startTime,
          response_end_ms: nav.responseEnd, dom_content_loaded_ms: nav.domContentLoadedEventEnd};
})()"""


def seed_memories(client: MemoryClient, user: str, count: int) -> float:
    """Write `count` memories of `user` in batches (each retried on 503 under the same idempotency
    key, so never twice); the seconds it took."""
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        contents = [f"Note {i}: the user {VERBS[i % len(VERBS)]} {SUBJECTS[i % len(SUBJECTS)]}"
                    for i in range(start, min(count, start + BATCH))]
        client.add_many([{"user_id": user, "content": c} for c in contents], idempotency_key=f"{user}-{start}")
    return time.perf_counter() - started


def seeding_client(url: str, key: str) -> MemoryClient:
    """A client that waits out a loaded machine: an embedding call answered 503 is sent again."""
    return MemoryClient(url, key or None, timeout=120, max_retries=8, backoff_max=15)


def first_page_timings(page: Any, user: str, runs: int) -> list[dict[str, float]]:
    """Reload the console's page of `user` (already open and signed in) `runs` times; per run, the
    browser's timings (ms after the navigation started) of the page ready with its first page of memories."""
    timings = []
    for _ in range(runs):
        page.reload()
        page.locator("section.page[data-ready]").wait_for(timeout=30_000)
        rows = page.get_by_role("region", name="Memories").get_by_role("row").count()
        if rows != PAGE_ROWS + 1:  # the page and its header
            raise AssertionError(f"the page shows {rows - 1} memories, not {PAGE_ROWS}")
        timings.append({k: round(v, 1) for k, v in page.evaluate(TIMINGS).items()})
    return timings


def measure(url: str, key: str, user: str, runs: int) -> list[dict[str, float]]:
    """Sign in on the console at `url`, open `user`'s page once (warm-up), then time `runs` reloads."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        page.goto(f"{url}/console/")
        page.get_by_label("API key").fill(key)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", name="Users", exact=True).wait_for(timeout=30_000)
        page.goto(f"{url}/console/#/user/{user}")
        page.locator("section.page[data-ready]").wait_for(timeout=30_000)
        timings = first_page_timings(page, user, runs)
        browser.close()
    return timings


def own_server(tmp: str) -> str:
    """A Serve app of its own on loopback, on a store in `tmp`, without API keys; its URL."""
    import ray
    from ray import serve

    from agent_memory.settings import Settings
    from cli.net import free_port
    from serve_app.app import build, wait_until_serving
    from serve_app.config import serve_env

    settings = Settings(storage_uri=f"{tmp}/lancedb", _env_file=None)  # type: ignore[call-arg]
    serve_env()  # as `agent-memory serve` starts it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build(settings), name="agent-memory", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    wait_until_serving(url)
    return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one on a temporary store)")
    parser.add_argument("--key", default="", help="an API key of reader role or above (empty: a server without keys)")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--name", default="console_first_page", help="results file name under benchmarks/results")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp:
        url = args.url or own_server(tmp)
        user = f"console-bench-{uuid.uuid4().hex[:8]}"
        with seeding_client(url, args.key) as client:
            print(f"writing {args.memories:,} memories of {user} ...", flush=True)
            seed_s = seed_memories(client, user, args.memories)
        timings = measure(url, args.key, user, args.runs)
        if not args.url:
            import ray
            from ray import serve

            serve.shutdown()
            ray.shutdown()

    ready = [t["ready_ms"] for t in timings]
    median = statistics.median(ready)
    results = {"first_page_ready_ms": {"median": round(median, 1), "min": min(ready), "max": max(ready)},
               "runs": timings, "seed_s": round(seed_s, 1), "browser": CHROMIUM, "viewport": "1280x800",
               "target": {"median_under_ms": 1000, "met": median < 1000}}
    print(f"first page of {args.memories:,} memories ready {median:.0f} ms after navigation "
          f"(median of {args.runs}: {', '.join(f'{t:.0f}' for t in ready)})")
    path = write_result(args.name, {"params": vars(args) | {"key": "***" if args.key else ""}, "results": results})
    print(f"wrote {path}")
    return 0 if median < 1000 else 1


if __name__ == "__main__":
    raise SystemExit(main())
