"""Degrade, don't fail: a second Serve app whose embedding endpoint goes down, then slows past its timeout.

The app embeds through an OpenAI-compatible endpoint (a real server on loopback); it runs beside
the session's app, on the same Ray and Serve, under a route prefix of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import yaml

from agent_memory.settings import Settings
from loopback.embeddings_server import EmbeddingsServer
from serve_app.config import DEPLOYMENTS

PREFIX = "/degrading"


@pytest.fixture(scope="module")
def degrading(serve_app: dict[str, object], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    from ray import serve

    from serve_app.app import build

    server = EmbeddingsServer()
    root = tmp_path_factory.mktemp("degrading")
    # One replica each, reserving no CPU: the session's app (autoscaled by the load tests) and
    # the jobs may hold all of Ray's 2 CPUs; the replicas still run, these are scheduling tokens.
    config = root / "serve_config.yaml"
    config.write_text(yaml.safe_dump({"applications": [{"deployments": [
        {"name": name, "num_replicas": 1, "ray_actor_options": {"num_cpus": 0}} for name in DEPLOYMENTS
    ]}]}))
    settings = Settings(  # type: ignore[call-arg]
        storage_uri=str(root / "lancedb"), embedding_model="openai:test-embed", embedding_base_url=server.url,
        embedder_timeout_s=1.0, serve_config=config, _env_file=None,
    )
    serve.run(build(settings), name="degrading", route_prefix=PREFIX)
    client = httpx.Client(base_url=f"{serve_app['url']}{PREFIX}", timeout=60)
    try:
        yield client, server
    finally:
        client.close()
        serve.delete("degrading")
        server.close()


def _search(client: httpx.Client, query: str) -> dict:
    found = client.post("/v1/memories/search", json={"user_id": "u1", "query": query})
    assert found.status_code == 200, found.text
    return found.json()


def _count(client: httpx.Client) -> int:
    return len(client.get("/v1/memories", params={"user_id": "u1"}).json()["memories"])


@pytest.mark.parametrize("outage", ["down", "slow"])
def test_recall_answers_from_keywords_and_writes_refuse_while_the_embedder_is_out(degrading, outage: str) -> None:
    client, server = degrading
    if _count(client) == 0:
        for content in ("Refunds need two approvals", "Lunch is at noon"):
            assert client.post("/v1/memories", json={"user_id": "u1", "content": content}).status_code == 201
    healthy = _search(client, f"how are refunds approved ({outage})")  # each query new: none cached
    assert healthy["degraded"] is False and healthy["memories"][0]["content"] == "Refunds need two approvals"
    ready = client.get("/readyz").json()
    assert ready["ready"] is True and ready["degraded"] is False

    if outage == "down":
        server.fail_with = 503
    else:
        server.delay_s = 3.0  # past embedder_timeout_s
    try:
        started = time.perf_counter()
        degraded = _search(client, f"refunds approvals ({outage})")
        assert degraded["degraded"] is True
        assert degraded["memories"][0]["content"] == "Refunds need two approvals"
        assert degraded["memories"][0]["scores"]["semantic"] == 0.0
        assert time.perf_counter() - started < 10  # answered within the timeout, not after the outage
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["degraded"] is True
        refused = client.post("/v1/memories", json={"user_id": "u1", "content": "never half-stored"})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "unavailable"
    finally:
        server.fail_with, server.delay_s = None, 0.0
    assert _count(client) == 2  # the refused write left nothing behind
    # Back to normal once the endpoint answers again (a slow call still running first finishes).
    deadline = time.monotonic() + 300  # generous: a loaded two-core machine
    while _search(client, f"who approves refunds ({outage}, {time.monotonic()})")["degraded"]:
        assert time.monotonic() < deadline, "recall stayed degraded after the endpoint recovered"
        time.sleep(0.5)
    assert client.get("/readyz").json()["degraded"] is False
