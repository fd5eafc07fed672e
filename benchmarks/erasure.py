"""Erasing a user at scale, over HTTP: how long until the user is gone from every read (the
answer of `DELETE /v1/users/{id}`) and from every file (the erasure job's end), and what writes
and searches of other users see meanwhile.

The store is `serve_latency.py`'s: synthetic memories over many users (unit vectors, real
keywords), compacted in user order as consolidation leaves it. The erased user holds about
`memories / users` rows, all inside one large fragment: the purge rewrites that whole fragment.
Writes (`--writers` clients) and searches (one client) of other users run before the erasure
(the baseline) and throughout it; latencies are split by whether a request started before the
DELETE or during the purge (from its start, one access-log flush interval plus 2 s after the
answer, to the job's end).

    .venv/bin/python benchmarks/erasure.py [--memories 1000000 --users 10000 --writers 4]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import summarize, write_result  # noqa: E402
from benchmarks.recall_latency import QUERIES, SUBJECTS  # noqa: E402
from benchmarks.serve_latency import populate  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.maintenance import PURGE_SETTLE_S  # noqa: E402

PORT = 18778


class Load:
    """Clients sending requests until stopped; each request's start time and latency."""

    def __init__(self, url: str, clients: int, request) -> None:
        self.samples: list[tuple[float, float, int]] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(url, k, request)) for k in range(clients)]
        for t in self._threads:
            t.start()

    def _run(self, url: str, k: int, request) -> None:
        rng = random.Random(k)
        with httpx.Client(base_url=url, timeout=120) as client:
            i = 0
            while not self.stop.is_set():
                method, path, body = request(rng, k, i)
                t0 = time.perf_counter()
                status = client.request(method, path, json=body).status_code
                with self._lock:
                    self.samples.append((t0, time.perf_counter() - t0, status))
                i += 1

    def join(self) -> None:
        self.stop.set()
        for t in self._threads:
            t.join()

    def between(self, start: float, end: float) -> dict:
        chosen = [(dt, status) for t0, dt, status in self.samples if start <= t0 < end]
        return {**summarize([dt for dt, _ in chosen]), "errors": sum(1 for _, s in chosen if s >= 400)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--writers", type=int, default=4, help="concurrent writing clients")
    parser.add_argument("--baseline-s", type=float, default=30.0, help="seconds of load before the erasure")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--name", default="erasure")
    args = parser.parse_args()

    import ray
    from ray import serve

    from serve_app.app import build
    from serve_app.config import serve_env

    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-erasure-") as tmp:
        settings = Settings(storage_uri=f"{tmp}/lancedb", _env_file=None)  # type: ignore[call-arg]
        store = LanceStore(settings.storage.uri, embedding_model="all-MiniLM-L6-v2", embedding_dim=384)
        print(f"populating {args.memories:,} memories over {args.users:,} users ...", flush=True)
        results["setup_s"] = round(populate(store, args.memories, args.users, 384, args.seed), 1)
        results["fragments"] = len(store.connection.table("memories").to_lance().get_fragments())
        del store

        serve_env()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": PORT})
        serve.run(build(settings), name="agent-memory", route_prefix="/")
        url = f"http://127.0.0.1:{PORT}"
        victim = "user-00042"
        with httpx.Client(base_url=url, timeout=600) as client:
            held = client.get("/v1/memories", params={"user_id": victim, "limit": 500}).json()["memories"]
            results["victim_memories"] = len(held)

            def write(r: random.Random, k: int, i: int):
                return "POST", "/v1/memories", {"user_id": f"user-{r.randrange(100, args.users):05d}",
                                                "content": f"erasure benchmark write {k}-{i}: {r.choice(SUBJECTS)}"}

            def search(r: random.Random, k: int, i: int):
                return "POST", "/v1/memories/search", {"user_id": f"user-{r.randrange(100, args.users):05d}",
                                                       "query": r.choice(QUERIES)}

            writes, searches = Load(url, args.writers, write), Load(url, 1, search)
            begun = time.perf_counter()
            time.sleep(args.baseline_s)
            asked = time.perf_counter()
            answer = client.delete(f"/v1/users/{victim}")
            answered = time.perf_counter()
            assert answer.status_code == 202, answer.text
            job_id = answer.json()["job_id"]
            gone = client.get("/v1/memories", params={"user_id": victim}).json()["memories"] == []
            while (job := client.get(f"/v1/jobs/{job_id}").json())["state"] == "running":
                time.sleep(0.2)
            finished = time.perf_counter()
            time.sleep(5)
            writes.join()
            searches.join()
        serve.shutdown()
        ray.shutdown()

    # The purge starts after one flush of the ingress replicas' recall hits (docs/security.md).
    wait = settings.recall.access_flush_seconds + PURGE_SETTLE_S
    purging = answered + wait
    results.update({
        "answer_s": round(answered - asked, 3), "gone_from_reads_at_answer": gone, "job_state": job["state"],
        "purge_wait_s": wait, "purge_s": round(finished - purging, 1), "receipt": job["report"],
        "writes_before": writes.between(begun, asked), "writes_during": writes.between(purging, finished),
        "searches_before": searches.between(begun, asked), "searches_during": searches.between(purging, finished),
    })
    for name in ("writes_before", "writes_during", "searches_before", "searches_during"):
        row = results[name]
        print(f"{name:<16} n {row['n']:>5}  p50 {row['p50_ms']:>8} ms  p99 {row['p99_ms']:>8} ms  errors {row['errors']}")
    print(f"DELETE answered in {results['answer_s']} s (gone from reads: {gone}); the purge started {wait} s "
          f"later and took {results['purge_s']} s, {job['report'].get('files_rewritten')} files rewritten")
    path = write_result(args.name, {"params": vars(args), "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
