"""A real cluster of two Ray nodes on this machine (cli.local_cluster), its store on a loopback S3
server: an import spreads over both nodes, stores every message once, and a GPU node takes the
embedding actors that ask for a GPU; the Serve app on the same cluster answers recall from ingress
replicas on both nodes, puts its Embedder on the GPU node, and stores every write through either
Writer shard exactly once. Everything runs in subprocesses of the cluster's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from cli.local_cluster import LABEL, LocalCluster, free_port
from loopback.s3_server import S3Server
from storage import LanceStore
from storage.connect import maintenance_of
from tests.conftest import stop_shared_stack, users_on_each_shard

pytestmark = [pytest.mark.stack, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
ROWS = 300

# Run with the cluster's client env: where each node is (by label) and what ran where.
STATE = """
import json, sys
from ray.util.state import list_actors, list_nodes, list_tasks
address = sys.argv[1]
nodes = {n.node_id: n.labels.get("agent-memory/node") for n in list_nodes(address=address)}
tasks = [nodes.get(t.node_id) for t in list_tasks(address=address, limit=10000) if t.node_id]
actors = [{"node": nodes.get(a.node_id), "class": a.class_name, "gpu": (a.required_resources or {}).get("GPU", 0)}
          for a in list_actors(address=address, limit=10000, detail=True)]
print(json.dumps({"tasks": tasks, "actors": actors}))
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LocalCluster, S3Server]]:
    """A head and one worker (2 CPUs each; the worker declares a GPU), and an S3 server."""
    stop_shared_stack()  # the shared Ray of the earlier tests: this module's Ray is a cluster of its own
    # HTTP comes in through HAProxy, as `agent-memory serve` has it; the proxy runs on the head only
    # (both nodes share this host, and so the port: LocalCluster.client_env).
    nodes_env = {"RAY_SERVE_ENABLE_HA_PROXY": "1"}
    with S3Server() as s3:
        local = LocalCluster(1, cpus_per_node=2, gpu_workers=1, env={**s3.env("store"), **nodes_env})
        with local:
            yield local, s3
        assert not local.alive()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("history") / "history.jsonl"
    path.write_text("".join((ROOT / "examples" / "sample_history.jsonl").read_text().splitlines(True)[:ROWS]))
    return path


def _import(cluster: LocalCluster, s3: S3Server, path: Path, prefix: str, **env: str) -> dict:
    environment = {**os.environ, **cluster.client_env(), **s3.env(prefix), "HF_HUB_OFFLINE": "1",
                   "AGENT_MEMORY_IMPORT_EMBED_BATCH_ROWS": "64", **env}
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "import", str(path), "--engine", "ray", "--address", cluster.address,
         "--report", str(path.with_suffix(f".{prefix}.report.json"))],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _placement(cluster: LocalCluster) -> dict:
    done = subprocess.run([sys.executable, "-c", STATE, cluster.address], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **cluster.client_env()}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _stored(s3: S3Server, prefix: str, table: str, key: str) -> Counter[str]:
    store = LanceStore(s3.uri(prefix), embedding_model=None, embedding_dim=None, storage_options=s3.storage_options)
    rows = maintenance_of(store).table(table).to_lance().to_table(columns=[key]).to_pylist()
    return Counter(r[key] for r in rows)


def test_an_import_spreads_over_both_nodes_and_stores_every_message_once(
    cluster: tuple[LocalCluster, S3Server], history: Path
) -> None:
    local, s3 = cluster
    first = _import(local, s3, history, "store")
    assert first["memories_written"] == ROWS, first
    placed = _placement(local)
    assert set(placed["tasks"]) | {a["node"] for a in placed["actors"]} >= {"head", "worker-1"}, placed
    embedders = [a["node"] for a in placed["actors"] if "EmbedMemories" in a["class"] or "MapWorker" in a["class"]]
    # One embedding actor a node (the pool's least size), spread: never two on one node. On a
    # machine this busy, the head's actor may finish 300 rows before the worker's has loaded its
    # model, so that one may never be placed.
    on_nodes = [node for node in embedders if node]
    assert len(embedders) >= 2 and on_nodes and len(set(on_nodes)) == len(on_nodes), placed
    messages = _stored(s3, "store", "messages", "id")
    assert len(messages) == ROWS and max(messages.values()) == 1
    again = _import(local, s3, history, "store")
    assert again["memories_written"] == 0, again
    assert _stored(s3, "store", "messages", "id") == messages


def test_embedding_actors_that_ask_for_a_gpu_run_on_the_gpu_node(
    cluster: tuple[LocalCluster, S3Server], history: Path
) -> None:
    local, s3 = cluster
    report = _import(local, s3, history, "gpu", AGENT_MEMORY_IMPORT_EMBED_NUM_GPUS="1")
    assert report["memories_written"] == ROWS, report
    on_gpu = [a["node"] for a in _placement(local)["actors"] if a["gpu"]]
    assert on_gpu and set(on_gpu) == {"worker-1"}, on_gpu


def test_the_nodes_are_labelled_and_share_the_cluster_s_own_token(cluster: tuple[LocalCluster, S3Server]) -> None:
    local, _ = cluster
    env = local.client_env()
    assert env["RAY_AUTH_TOKEN_PATH"].startswith(str(local.root)) and LABEL == "agent-memory/node"
    anonymous = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    refused = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={local.address!r})"],
                             env=anonymous, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0


def _serve_config(path: Path, port: int) -> Path:
    """The shipped Serve config with two ingress replicas, at most one a node."""
    config = yaml.safe_load((ROOT / "cluster" / "serve_config.yaml").read_text())
    config["http_options"] = {"host": "127.0.0.1", "port": port}
    for deployment in config["applications"][0]["deployments"]:
        if deployment["name"] == "Ingress":
            deployment.pop("autoscaling_config", None)
            deployment.update(num_replicas=2, max_replicas_per_node=1)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def cluster_app(cluster: tuple[LocalCluster, S3Server], tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[dict[str, object]]:
    """The Serve app on the cluster, its store under `serve/` on the S3 server: two Writer shards,
    two ingress replicas (at most one a node), and the Embedder asking for a GPU, which only the
    worker declares (Ray schedules on declared resources; the CPU model stands in)."""
    local, s3 = cluster
    root = tmp_path_factory.mktemp("cluster-serve")
    port = free_port()
    env = {**os.environ, **local.client_env(), **s3.env("serve"), "HF_HUB_OFFLINE": "1",
           "AGENT_MEMORY_WRITER_SHARDS": "2", "AGENT_MEMORY_EMBEDDING_NUM_GPUS": "1",
           "AGENT_MEMORY_SERVE_CONFIG": str(_serve_config(root / "serve.yaml", port))}
    log = root / "serve.log"
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--address", local.address], cwd=ROOT,
                              env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.25)
        yield {"url": url, "cluster": local, "s3": s3, "env": env}
    finally:
        # The cluster is stopped next, replicas and all: the server's own graceful stop (tested
        # in tests/test_stop_and_crash.py) would only add its drain.
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=60)


def _replica_logs(cluster: LocalCluster, deployment: str) -> dict[str, list[Path]]:
    """Each node's Serve replica logs of one deployment (every node keeps its own under its temp dir)."""
    return {name: sorted((cluster.root / name).glob(f"session_latest/logs/serve/replica_agent-memory_{deployment}_*.log"))
            for name in cluster.node_names()}


def _requests_in(paths: list[Path], route: str) -> int:
    count = 0
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            if route in line and "request_id" in line:
                count += 1
    return count


def test_ingress_replicas_on_both_nodes_answer_and_every_write_is_stored_once(cluster_app) -> None:
    cluster: LocalCluster = cluster_app["cluster"]  # type: ignore[assignment]
    s3: S3Server = cluster_app["s3"]  # type: ignore[assignment]
    users = users_on_each_shard("default", 2, "cluster-")
    written: list[str] = []
    with httpx.Client(base_url=str(cluster_app["url"]), timeout=60) as client:
        for i in range(12):
            user = users[i % 2]
            content = f"Note {i}: {user} plans a trip to Lisbon in May"
            answer = client.post("/v1/memories", json={"user_id": user, "content": content},
                                 headers={"Idempotency-Key": f"note-{i}"})
            assert answer.status_code == 201, answer.text
            written.extend(answer.json()["ids"])
        # A retry of each write stores nothing twice.
        for i in range(12):
            user = users[i % 2]
            again = client.post("/v1/memories", json={"user_id": user, "content": f"Note {i}: {user} plans a trip to Lisbon in May"},
                                headers={"Idempotency-Key": f"note-{i}"})
            assert again.status_code == 201 and again.json()["ids"] == [written[i]]
        for i in range(40):
            found = client.post("/v1/memories/search", json={"user_id": users[i % 2], "query": "trip to Lisbon"})
            assert found.status_code == 200, found.text
            assert found.json()["memories"] and not found.json()["degraded"], found.text
    store = LanceStore(s3.uri("serve"), embedding_model=None, embedding_dim=None, storage_options=s3.storage_options)
    table = maintenance_of(store).table("memories").to_arrow()
    ids = Counter(i for i, u in zip(table.column("id").to_pylist(), table.column("user_id").to_pylist(), strict=True)
                  if u in users)
    assert ids == Counter({memory_id: 1 for memory_id in written})
    ingress = _replica_logs(cluster, "Ingress")
    assert all(ingress.values()), f"an ingress replica on each node: {ingress}"
    served = {node: _requests_in(paths, "/v1/memories/search") for node, paths in ingress.items()}
    assert all(n > 0 for n in served.values()), f"searches answered by each node's ingress: {served}"
    assert sum(served.values()) == 40
    shards = [p.name for paths in _replica_logs(cluster, "Writer*").values() for p in paths]
    assert len(shards) == 2, shards
    embedders = _replica_logs(cluster, "Embedder")
    assert embedders["worker-1"] and not embedders["head"], f"the Embedder on the GPU node only: {embedders}"


def test_the_stores_tables_are_on_the_s3_server(cluster_app) -> None:
    s3: S3Server = cluster_app["s3"]  # type: ignore[assignment]
    keys = s3.objects("serve/")
    tables = {key.split("/")[1] for key in keys if key.count("/") > 1}
    assert {"memories.lance", "events.lance", "jobs.lance"} <= tables, sorted(tables)
    assert json.dumps(keys)  # listing is real S3 ListObjects over HTTP
