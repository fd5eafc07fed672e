"""Writer shards: each user's changes go to one shard by a stable hash of (org, user); a batch that
spans shards is split, acknowledged once all parts committed, and retried without duplicates; one
shard keeps the store's upkeep. The shared Serve app runs two shards, so every HTTP test of the
suite writes through them."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from agent_memory.models import Scope, utcnow
from agent_memory.settings import Settings
from serve_app.config import deployment_options
from serve_app.shards import shard_name, shard_of
from storage import LanceStore
from storage.connect import maintenance_of
from tests.conftest import users_on_each_shard


def test_a_users_shard_is_a_stable_hash_that_spreads_users() -> None:
    # The same in every process and release (not Python's salted hash): a change would move users
    # to other shards, out of the order their writes had.
    assert shard_of("acme", "alice", 1) == 0
    golden = [shard_of("acme", name, 2) for name in ("alice", "bob", "carol", "dave")]
    assert golden == [1, 0, 1, 0]
    counts = Counter(shard_of("acme", f"user-{i}", 2) for i in range(2000))
    assert 900 < counts[0] < 1100
    # The org is part of the key: the same user id of two orgs need not share a shard.
    assert {shard_of(org, "alice", 8) for org in ("acme", "globex", "initech", "umbrella")} != {0}


def test_every_shard_is_a_deployment_of_one_replica_with_the_writers_options() -> None:
    settings = Settings(writer_shards=3, _env_file=None)  # type: ignore[call-arg]
    config = {"applications": [{"deployments": [
        {"name": "Writer", "num_replicas": 1, "max_ongoing_requests": 999, "ray_actor_options": {"num_cpus": 0.2}},
        {"name": "Writer-2", "num_replicas": 1, "ray_actor_options": {"num_cpus": 0.3}},
    ]}]}
    options = deployment_options(settings, config)
    assert [shard_name(i) for i in range(3)] == ["Writer", "Writer-1", "Writer-2"]
    assert options["Writer-1"]["max_ongoing_requests"] == 999  # the `Writer` entry, for a shard it does not name
    assert options["Writer-1"]["ray_actor_options"]["num_cpus"] == 0.2
    assert options["Writer-2"]["ray_actor_options"]["num_cpus"] == 0.3
    assert "Writer-3" not in options
    scaled = {"applications": [{"deployments": [{"name": "Writer", "num_replicas": 2}]}]}
    with pytest.raises(Exception, match="AGENT_MEMORY_WRITER_SHARDS"):
        deployment_options(settings, scaled)


def _stored(serve_app: dict[str, object], org_id: str, users: list[str]) -> Counter[str]:
    store = LanceStore(serve_app["settings"].storage.uri, embedding_model=None, embedding_dim=None)  # type: ignore[attr-defined]
    counts: Counter[str] = Counter()
    for user in users:
        page = store.list_memories(Scope.user(org_id, user), limit=1000, cursor=None, status=None)
        counts.update(m.content for m in page.records)
    return counts


def test_a_batch_across_shards_is_split_acknowledged_whole_and_retried_without_duplicates(api, serve_app) -> None:
    shards = serve_app["settings"].writer.shards
    assert shards == 2  # the shared app runs two shards
    client = api("acme-writer")
    users = users_on_each_shard("acme", shards, "batch-")
    batch = [{"user_id": users[i % shards], "content": f"fact {i} of {users[i % shards]}"} for i in range(6)]
    first = client.post("/v1/memories", json={"memories": batch}, headers={"Idempotency-Key": "across-shards"})
    assert first.status_code == 201, first.text
    ids = first.json()["ids"]
    assert len(ids) == 6 and len(set(ids)) == 6
    # Each id is where its memory stood in the request, whichever shard wrote it.
    for memory_id, item in zip(ids, batch, strict=True):
        got = client.get(f"/v1/memories/{memory_id}", params={"user_id": item["user_id"]})
        assert got.status_code == 200 and got.json()["content"] == item["content"]
    again = client.post("/v1/memories", json={"memories": batch}, headers={"Idempotency-Key": "across-shards"})
    assert again.status_code == 201 and again.json()["ids"] == ids
    # The same write with one more memory: the retry adds only what was not there.
    more = client.post("/v1/memories", json={"memories": [*batch, {"user_id": users[0], "content": "one more"}]},
                       headers={"Idempotency-Key": "across-shards"})
    assert more.status_code == 201 and more.json()["ids"][:6] == ids
    stored = _stored(serve_app, "acme", users)
    assert stored == Counter({item["content"]: 1 for item in batch} | {"one more": 1})


def test_changes_reach_the_users_shard_and_one_shard_keeps_the_store(api, serve_app) -> None:
    shards = serve_app["settings"].writer.shards
    client = api("acme-admin")
    users = users_on_each_shard("acme", shards, "change-")
    for user in users:
        (memory_id,) = client.post("/v1/memories", json={"user_id": user, "content": "Prefers tea"}).json()["ids"]
        assert client.patch(f"/v1/memories/{memory_id}", params={"user_id": user},
                            json={"content": "Prefers green tea"}).status_code == 200
        got = client.get(f"/v1/memories/{memory_id}", params={"user_id": user}).json()
        assert (got["content"], got["status"]) == ("Prefers green tea", "active")
        assert client.delete(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 200
        assert client.get(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 404
        client.post("/v1/memories", json={"user_id": user, "content": "Lives in Lyon"})
        assert client.delete(f"/v1/users/{user}").status_code == 202
        assert client.get("/v1/memories", params={"user_id": user}).json()["memories"] == []
    store = LanceStore(serve_app["settings"].storage.uri, embedding_model=None, embedding_dim=None)  # type: ignore[attr-defined]
    leases = maintenance_of(store).leases
    deadline = time.monotonic() + 300  # taken at a shard's first upkeep tick (2 s), on a loaded machine later
    while (holder := leases.holder("writer-upkeep", utcnow())) is None and time.monotonic() < deadline:
        time.sleep(1)
    assert holder is not None and holder["owner"].split(":")[0] in {shard_name(i) for i in range(shards)}
