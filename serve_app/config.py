"""Per-deployment Serve options from `cluster/serve_config.yaml`; settings fill what it leaves out."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml

from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "cluster" / "serve_config.yaml"
DEPLOYMENTS = ("Ingress", "Embedder", "Writer", "Scheduler")
# Serve's own switches, set for every process of a local cluster before Ray starts: user code and
# the handle router run on the replica's event loop rather than on a thread and a loop of their
# own. Measured on the search path (benchmarks/serve_latency.py): about a third more searches a
# second on 2 cores, and lower latency at one client. An operator's own values win.
SERVE_ENV = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0", "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0"}
_OPTION_KEYS = {
    "num_replicas", "autoscaling_config", "max_ongoing_requests", "ray_actor_options", "user_config",
    "graceful_shutdown_timeout_s", "health_check_period_s", "health_check_timeout_s", "max_queued_requests",
    "logging_config",
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
    config = load_config(settings.serve_config) if config is None else config
    apps = config.get("applications") or [{}]
    declared = {d["name"]: d for d in apps[0].get("deployments", []) if "name" in d}
    for name in sorted(set(declared) - set(DEPLOYMENTS)):
        # e.g. `Recall` from an older config: search now runs in the ingress replicas.
        log.warning("the Serve config names a deployment %r that this application does not have", name)
    env = (apps[0].get("runtime_env") or {}).get("env_vars") or {"HF_HUB_OFFLINE": "1"}
    options: dict[str, dict[str, Any]] = {}
    for name in DEPLOYMENTS:
        opts = {k: v for k, v in declared.get(name, {}).items() if k in _OPTION_KEYS}
        if "logging_config" in apps[0]:
            opts.setdefault("logging_config", apps[0]["logging_config"])
        actor = dict(opts.get("ray_actor_options") or {"num_cpus": 0 if name == "Scheduler" else 0.25})
        actor.setdefault("runtime_env", {"env_vars": env})
        if name == "Embedder" and settings.embedding_num_gpus and "num_gpus" not in actor:
            actor["num_gpus"] = settings.embedding_num_gpus
        opts["ray_actor_options"] = actor
        if "num_replicas" not in opts and "autoscaling_config" not in opts:
            opts["num_replicas"] = 1
        options[name] = opts
    return options


def http_options(config: dict[str, Any], host: str | None, port: int | None) -> dict[str, Any]:
    """Where the proxy listens: command-line flags, then the config file, then loopback:8000."""
    http = dict(config.get("http_options") or {})
    return {"host": host or http.get("host", "127.0.0.1"), "port": int(port or http.get("port", 8000))}


def serve_env() -> dict[str, str]:
    """Put SERVE_ENV into this process's environment where unset (call before `ray.init`, whose
    local processes inherit it) and return the values in effect, for a job's `runtime_env`."""
    for key, value in SERVE_ENV.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in SERVE_ENV}
