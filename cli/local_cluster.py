"""A Ray cluster of several nodes on this one machine: a head and N workers, each a `ray start`
of its own, for trying multi-node behaviour (placement, spreading, GPU nodes) and for tests.

Every node gets its declared CPUs, a label `agent-memory/node` (`head`, `worker-1`, ...), a capped
object store, free ports and a temp dir under the cluster's root, so it never touches another
cluster's `/tmp/ray`. Nodes and clients share one token of the cluster's own (token
authentication, `RAY_AUTH_TOKEN_PATH`), never `~/.ray/auth_token`. Each node runs in a session of
its own; `stop()` ends those sessions, and no other Ray instance on the machine (`ray stop` would
stop them all).

    python -m cli.local_cluster start --workers 2   # prints the address and the client env
    python -m cli.local_cluster status
    python -m cli.local_cluster stop
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from cli.net import free_port, free_ports
from cli.processes import kill_session, session_pids

LABEL = "agent-memory/node"
HEAD = "head"
STATE_FILE = "cluster.json"
DEFAULT_ROOT = Path(tempfile.gettempdir()) / "agent-memory-cluster"
OBJECT_STORE_BYTES = 200 * 1024 * 1024
START_TIMEOUT_S = 120


class LocalCluster:
    """A head and `workers` worker nodes on this machine, sharing a token of their own."""

    def __init__(self, workers: int = 1, *, cpus_per_node: float = 2, gpu_workers: int = 0,
                 object_store_bytes: int = OBJECT_STORE_BYTES, env: Mapping[str, str] | None = None,
                 root: str | Path | None = None) -> None:
        self.workers = workers
        self.cpus_per_node = cpus_per_node
        self.gpu_workers = gpu_workers
        self.object_store_bytes = object_store_bytes
        self.env = dict(env or {})
        # Short: Ray's socket paths under it must stay within the 107 bytes a Unix socket allows.
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="amc-", dir="/tmp"))
        self.port = 0
        self.sessions: list[int] = []

    @property
    def address(self) -> str:
        """The head's GCS address, for `--address` and `ray.init`."""
        return f"127.0.0.1:{self.port}"

    @property
    def token_path(self) -> Path:
        return self.root / "auth_token"

    def client_env(self) -> dict[str, str]:
        """What a client of this cluster needs in its environment: its address and its token, and
        for `agent-memory serve`, the HTTP proxy on the head only (every node shares this host's ports)."""
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path),
                "AGENT_MEMORY_PROXY_LOCATION": "HeadOnly"}

    def node_names(self) -> list[str]:
        return [HEAD, *(f"worker-{i}" for i in range(1, self.workers + 1))]

    def start(self) -> LocalCluster:
        """Start the head, then each worker; return self once every node has joined."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_path.write_text(secrets.token_hex(32))
        self.token_path.chmod(0o600)
        self.port = free_port()
        try:
            for index, name in enumerate(self.node_names()):
                self._start_node(name, gpus=1 if 0 < index <= self.gpu_workers else 0)
            self._save()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, name: str, *, gpus: int) -> None:
        # Distinct from each other and from the head's port, which the head binds only as it starts.
        ports = iter(free_ports(8, exclude={self.port}))
        args = [
            shutil.which("ray") or str(Path(sys.executable).with_name("ray")), "start",
            f"--num-cpus={self.cpus_per_node:g}", f"--num-gpus={gpus}",
            f"--object-store-memory={self.object_store_bytes}", f"--temp-dir={self.root / name}",
            f"--labels={LABEL}={name}", "--node-ip-address=127.0.0.1", "--disable-usage-stats",
            f"--node-manager-port={next(ports)}", f"--object-manager-port={next(ports)}",
            f"--dashboard-agent-listen-port={next(ports)}", f"--dashboard-agent-grpc-port={next(ports)}",
            f"--runtime-env-agent-port={next(ports)}", f"--metrics-export-port={next(ports)}",
        ]
        if name == HEAD:
            # The dashboard serves Ray's state API (`ray list tasks`, `ray.util.state`), on loopback.
            args += ["--head", f"--port={self.port}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                     f"--dashboard-port={next(ports)}", f"--ray-client-server-port={next(ports)}"]
        else:
            args.append(f"--address={self.address}")
        log = self.root / f"{name}.start.log"
        with log.open("wb") as out:
            # A session of its own: `ray start` leaves the node's processes in it, and stop() ends it.
            started = subprocess.Popen(args, env=self._node_env(), stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
            self.sessions.append(started.pid)
            try:
                code = started.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = -1
        if code != 0:
            raise RuntimeError(f"`ray start` of node {name} failed ({code}); see {log}:\n{log.read_text()[-2000:]}")

    def _node_env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        # The one proxy, on the head, spreads requests over the ingress replicas of every node:
        # Serve's preference for replicas on the proxy's own node would keep them all on the head.
        env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0"}, **self.env)
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)})
        return env

    def stop(self) -> None:
        """End every process of this cluster's nodes (idempotent); other Ray instances are left be."""
        for sid in self.sessions:
            kill_session(sid)
        self.sessions = []
        state = self.root / STATE_FILE
        if state.exists():
            state.unlink()

    def alive(self) -> bool:
        """Whether any process of this cluster's nodes is running."""
        return any(session_pids(sid) for sid in self.sessions)

    def _save(self) -> None:
        (self.root / STATE_FILE).write_text(json.dumps({
            "address": self.address, "port": self.port, "sessions": self.sessions, "workers": self.workers,
            "client_env": self.client_env()}, indent=2))

    @classmethod
    def load(cls, root: str | Path) -> LocalCluster:
        """The cluster whose state `start` wrote under `root`."""
        state = json.loads((Path(root) / STATE_FILE).read_text())
        cluster = cls(state["workers"], root=root)
        cluster.port, cluster.sessions = state["port"], state["sessions"]
        return cluster

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m cli.local_cluster start|stop|status`."""
    parser = argparse.ArgumentParser(prog="python -m cli.local_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--workers", type=int, default=1, help="worker nodes beside the head (default: 1)")
    parser.add_argument("--cpus-per-node", type=float, default=2, help="CPUs each node declares (default: 2)")
    parser.add_argument("--gpu-workers", type=int, default=0, help="workers that declare one GPU (default: 0)")
    parser.add_argument("--object-store-mb", type=int, default=OBJECT_STORE_BYTES // 2**20)
    parser.add_argument("--root", default=str(DEFAULT_ROOT), help=f"the cluster's directory (default: {DEFAULT_ROOT})")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if args.command == "start":
        if (root / STATE_FILE).exists() and LocalCluster.load(root).alive():
            print(f"a cluster is running from {root}: stop it first", file=sys.stderr)
            return 1
        cluster = LocalCluster(args.workers, cpus_per_node=args.cpus_per_node, gpu_workers=args.gpu_workers,
                               object_store_bytes=args.object_store_mb * 2**20, root=root).start()
        print(f"started {', '.join(cluster.node_names())} at {cluster.address}; clients need:")
        for key, value in cluster.client_env().items():
            print(f"export {key}={value}")
        return 0
    if not (root / STATE_FILE).exists():
        print(f"no cluster started from {root}", file=sys.stderr)
        return 1 if args.command == "status" else 0
    cluster = LocalCluster.load(root)
    if args.command == "stop":
        cluster.stop()
        print(f"stopped the cluster at {cluster.address}")
        return 0
    print(json.dumps({"address": cluster.address, "alive": cluster.alive(), "client_env": cluster.client_env()}, indent=2))
    return 0 if cluster.alive() else 1


if __name__ == "__main__":
    sys.exit(main())
