"""What a per-key rate limit costs a request, both ways docs/security.md weighs.

- In the ingress replica (what serve_app.limits does): one token-bucket `take`, and the keys
  file's change check (`KeyRing.current`: a clock read, and one stat a second).
- A shared counter: one Ray actor that every replica would ask, timed as a round trip from this
  process to an async actor on the same node (across nodes it only grows).
- What the replica pays instead, every few seconds: `serve.status()`, here with one small app of
  two replicas running.
- What an org's quota costs the Writer at each recount: `count_rows` of one org's active rows in
  a table of `--rows` rows, with and without the bitmap indexes the store keeps on `org_id` and
  `status` (a synthetic table: only those columns matter to the count).

    python benchmarks/rate_limit_cost.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import summarize, write_result  # noqa: E402
from serve_app.auth import KeyRing  # noqa: E402
from serve_app.limits import RateLimiter  # noqa: E402


def per_call_us(fn: object, number: int) -> float:
    """Median over five runs of `number` calls, in microseconds a call."""
    return round(statistics.median(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6, 3)  # type: ignore[arg-type]


def in_replica(calls: int) -> dict[str, float]:
    limiter = RateLimiter()
    limiter.replicas = 4
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "keys.json"
        path.write_text(json.dumps({"keys": [
            {"key": f"key-{i}", "org_id": "acme", "role": "reader", "name": f"key-{i}"} for i in range(10)]}))
        ring, statting = KeyRing(path), KeyRing(path, check_every=0)
        return {
            "bucket_take_us": per_call_us(lambda: limiter.take("key-1", 10**9), calls),
            "keys_check_us": per_call_us(ring.current, calls),
            "keys_check_with_stat_us": per_call_us(statting.current, calls // 10),
        }


def across_ray(round_trips: int) -> dict[str, object]:
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)

    @ray.remote(num_cpus=0)
    class SharedCounter:
        def __init__(self) -> None:
            self.taken: dict[str, int] = {}

        async def take(self, key: str) -> bool:
            self.taken[key] = self.taken.get(key, 0) + 1
            return True

    counter = SharedCounter.remote()  # type: ignore[attr-defined]
    ray.get(counter.take.remote("warm-up"))
    trips = []
    for _ in range(round_trips):
        started = time.perf_counter()
        ray.get(counter.take.remote("key-1"))
        trips.append(time.perf_counter() - started)

    @serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0})
    class Echo:
        async def __call__(self, request: object) -> str:
            return "ok"

    serve.run(Echo.bind(), name="echo", route_prefix="/echo")
    statuses = []
    for _ in range(50):
        started = time.perf_counter()
        serve.status()
        statuses.append(time.perf_counter() - started)
    serve.shutdown()
    ray.shutdown()
    return {"shared_counter_round_trip": summarize(trips), "serve_status": summarize(statuses)}


def quota_count(rows: int) -> dict[str, float]:
    import lancedb
    import numpy as np
    import pyarrow as pa
    from lancedb.index import Bitmap

    rng = np.random.default_rng(0)
    orgs = np.array([f"org-{i}" for i in range(50)])[rng.integers(0, 50, rows)]
    orgs[: rows * 3 // 10] = "big"  # the org counted holds 30% of the rows
    status = np.array(["active", "superseded", "expired"])[rng.choice(3, rows, p=[0.9, 0.08, 0.02])]
    where = "(org_id = 'big') AND (status = 'active')"
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        table = lancedb.connect(tmp).create_table("memories", pa.table({
            "id": [f"m{i}" for i in range(rows)], "org_id": orgs, "status": status}), data_storage_version="2.1")

        def median_ms() -> float:
            samples = []
            for _ in range(7):
                started = time.perf_counter()
                table.count_rows(where)
                samples.append(time.perf_counter() - started)
            return round(statistics.median(samples) * 1000, 2)

        figures["count_without_indexes_ms"] = median_ms()
        table.create_index("org_id", config=Bitmap())
        table.create_index("status", config=Bitmap())
        figures["count_with_bitmap_indexes_ms"] = median_ms()
    figures["rows"] = rows
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--round-trips", type=int, default=500)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the quota count's table")
    parser.add_argument("--name", default="rate_limit_cost")
    args = parser.parse_args()
    figures = {"in_replica": in_replica(args.calls), **across_ray(args.round_trips), "quota_count": quota_count(args.rows)}
    print(json.dumps(figures, indent=2))
    print(f"wrote {write_result(args.name, {'figures': figures})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
