"""Per-deployment Serve options from `cluster/serve_config.yaml`; settings fill what it leaves out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "cluster" / "serve_config.yaml"
DEPLOYMENTS = ("Ingress", "Recall", "Embedder", "Writer", "Scheduler")
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
