"""Bounded load over loopback: concurrent writers and a reader; then a Writer shard's replica is
killed mid-load. Every acknowledged write must be stored exactly once."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pyarrow.compute as pc
import ray

from serve_app.shards import shard_of
from storage import LanceStore
from storage.connect import maintenance_of

# 16 writers, 8 a shard: each shard's commits coalesce several writers' rows, and the upkeep folds
# its fragments (every 4 commits) many times over while they go on.
WRITERS, WRITES_EACH = 16, 48


def _write_with_retries(client: httpx.Client, user: str, n: int, tag: str, deadline: float,
                        progress: Counter | None = None) -> list[str]:
    """One writer's loop: each write retried with its own idempotency key until acknowledged;
    `progress` counts each user's acknowledged writes as they come."""
    acked: list[str] = []
    for i in range(n):
        key = f"{tag}-{user}-{i}"
        body = {"user_id": user, "content": f"{tag} note {i} from {user}"}
        while time.monotonic() < deadline:
            try:
                r = client.post("/v1/memories", json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if r.status_code == 201:
                acked.extend(r.json()["ids"])
                if progress is not None:
                    progress[user] += 1
                break
            assert r.status_code == 503, r.text  # only "try again" is acceptable under load
            time.sleep(0.2)
    return acked


def _run_load(serve_app: dict, tag: str, during: callable | None = None) -> tuple[list[str], list[str], int]:
    """Every writer's writes and a reader's searches at once; `during(users, progress)` runs
    beside them (progress: each user's writes acknowledged so far)."""
    url = str(serve_app["url"])
    headers = {"Authorization": "Bearer acme-admin"}
    users = [f"load-{tag}-{k}" for k in range(WRITERS)]
    deadline = time.monotonic() + 600
    stop = threading.Event()
    searches = {"ok": 0, "bad": 0}
    progress: Counter = Counter()

    def reader() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            while not stop.is_set():
                try:
                    r = c.post("/v1/memories/search", json={"user_id": users[0], "query": f"{tag} note"})
                    searches["ok" if r.status_code == 200 else "bad"] += 1
                except httpx.HTTPError:
                    searches["bad"] += 1

    def writer(user: str) -> list[str]:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            return _write_with_retries(c, user, WRITES_EACH, tag, deadline, progress)

    read_thread = threading.Thread(target=reader)
    read_thread.start()
    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        futures = [pool.submit(writer, u) for u in users]
        if during is not None:
            during(users, progress)
        acked = [memory_id for f in futures for memory_id in f.result()]
    stop.set()
    read_thread.join()
    assert searches["ok"] > 0
    return acked, users, searches["bad"]


def _stored_ids(serve_app: dict, users: list[str]) -> Counter:
    settings = serve_app["settings"]
    store = LanceStore(settings.storage.uri, embedding_model=None, embedding_dim=None)
    table = maintenance_of(store).table("memories").to_arrow()
    mask = pc.is_in(table.column("user_id"), value_set=__import__("pyarrow").array(users))
    return Counter(table.filter(mask).column("id").to_pylist())


def test_concurrent_writes_are_stored_exactly_once(serve_app) -> None:
    acked, users, _ = _run_load(serve_app, f"w{uuid.uuid4().hex[:6]}")
    stored = _stored_ids(serve_app, users)
    assert len(acked) == WRITERS * WRITES_EACH
    assert all(stored[memory_id] == 1 for memory_id in acked)
    assert sum(stored.values()) == len(set(acked))


def test_a_writer_shard_killed_mid_load_loses_and_duplicates_nothing(serve_app) -> None:
    """One of the two shards is killed; its users' writes wait for its replacement, the other
    shard's go on, and every write is acknowledged once, stored once."""
    killed_at: dict[str, int] = {}

    def kill_writer(users: list[str], progress: Counter) -> None:
        # Once every writer has had writes acknowledged (both shards are committing), not after a
        # fixed time: what a shard's users have left to write then goes to its replacement.
        deadline = time.monotonic() + 120
        while min(progress[u] for u in users) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        actors = ray._private.state.actors()
        names = [a["Name"] for a in actors.values() if "#Writer-1#" in a.get("Name", "") and a["State"] == "ALIVE"]
        assert names, "no live replica of the shard Writer-1 found"
        killed_at.update({u: progress[u] for u in users})  # each user's writes acknowledged just before the kill
        for name in names:
            ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    acked, users, _ = _run_load(serve_app, f"k{uuid.uuid4().hex[:6]}", during=kill_writer)
    # Mid-load: at least half of the killed shard's writes were still to come, for its replacement.
    on_killed = [u for u in users if shard_of("acme", u, 2) == 1]
    left = sum(WRITES_EACH - killed_at[u] for u in on_killed)
    assert on_killed and left >= len(on_killed) * WRITES_EACH // 2, f"the shard was not killed mid-load: {killed_at}"
    stored = _stored_ids(serve_app, users)
    assert len(acked) == WRITERS * WRITES_EACH  # every write was eventually acknowledged
    assert all(stored[memory_id] == 1 for memory_id in acked)  # present, exactly once
    assert sum(stored.values()) == len(set(acked))  # nothing unacknowledged or duplicated
