"""The Ray Serve application: a FastAPI ingress composed with an embedder, a writer and a scheduler.

    HTTP --HAProxy (or Serve's proxy)--> ingress replica                  (serve_app.ingress)
    ingress --search--> recall in the replica; queries embedded there with continuous batching
                        on CPU, by the Embedder where it holds a GPU       (serve_app.embedder)
    ingress --writes--> Writer shard of (org, user) --embed_many--> Embedder
                        (coalesced commits, each user's in order; serve_app.writer, serve_app.shards)
    ingress --reads---> store (list, get, history, sessions, jobs)
    Scheduler --> consolidation on the cluster, on its schedule             (serve_app.scheduler)

`build(settings)` returns the whole application; replicas, autoscaling and resources come from
`cluster/serve_config.yaml` (see serve_app.config), settings fill what it leaves out.
`app_builder` is the entry point that config names (`import_path: serve_app.app:app_builder`).
`start` is how `agent-memory serve` starts Serve and deploys it: it returns once the application
answers, and until then the port answers 503 with a JSON reason, or is not bound.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from agent_memory.errors import InvalidInputError, UnavailableError
from agent_memory.settings import Settings
from serve_app.config import deployment_options
from serve_app.embedder import EmbedderDeployment
from serve_app.ingress import ingress_class
from serve_app.scheduler import SchedulerDeployment
from serve_app.shards import shard_name
from serve_app.writer import WriterDeployment

if TYPE_CHECKING:
    from ray import serve

# Serve's own logger: its JSON encoding (set in cluster/serve_config.yaml) adds request ids.
log = logging.getLogger("ray.serve")
APP_NAME = "agent-memory"
# How long a start may take before it is given up: loading the model on a loaded 2-core machine
# took about a minute.
START_TIMEOUT_S = 600.0


def build(settings: Settings, config: dict[str, Any] | None = None) -> serve.Application:
    """The whole application, one bind expression; `config` holds per-deployment Serve options.

    The deployments are plain classes made deployments here, so that importing this package (the
    CLI does) does not import Ray Serve.
    """
    from ray import serve

    options = deployment_options(settings, config)

    def deployment(name: str, cls: type) -> serve.Deployment:
        return serve.deployment(name=name)(cls).options(**options[name])

    embedder = deployment("Embedder", EmbedderDeployment).bind(settings)
    writers = [deployment(shard_name(i), WriterDeployment).bind(settings, embedder, i)
               for i in range(settings.writer.shards)]
    scheduler = deployment("Scheduler", SchedulerDeployment).bind(settings)
    mode = settings.embedding.query_path
    local = mode == "local" or (mode == "auto" and not options["Embedder"]["ray_actor_options"].get("num_gpus"))
    if not local and settings.embedding.query_precision == "int8" and "query_precision" in settings.embedding.model_fields_set:
        log.warning("query_embedding_precision int8 applies to queries embedded in the ingress; "
                    "they go to the Embedder deployment here and stay exact")
    ingress = deployment("Ingress", ingress_class())
    return ingress.bind(settings, writers, embedder, scheduler, local_queries=local)


def app_builder(args: dict[str, Any]) -> serve.Application:
    """Entry point for `serve run cluster/serve_config.yaml`: settings from the environment, and
    from the config's `args`, each of which must name a setting (an unknown one is refused)."""
    args = dict(args or {})
    unknown = sorted(set(args) - set(Settings.names()))
    if unknown:
        raise InvalidInputError(
            f"unknown Serve application args: {', '.join(unknown)}. The `args` of serve_app.app:app_builder "
            f"are settings (each also AGENT_MEMORY_<NAME> in the environment); accepted: "
            f"{', '.join(Settings.names())} (docs/settings.md)"
        )
    return build(Settings(**args))


def start(settings: Settings, config: dict[str, Any], http: dict[str, Any], *, proxy_location: str) -> str:
    """Start Serve with its HTTP proxy on `http` (host, port), deploy the application and return its
    URL once its health check answers 200.

    The proxy binds the port first. Until the application is deployed, HAProxy answers 503 with a
    JSON reason there (serve_app.haproxy); then the ingress replica answers, its health checks 503
    with what it still waits for, until it has started (serve_app.ingress). Serve's own proxy, where
    HAProxy is not available, answers 404 until the application is deployed.
    """
    from ray import serve

    serve.start(proxy_location=proxy_location, http_options=http)
    serve.run(build(settings, config), name=APP_NAME, route_prefix="/")
    host = "127.0.0.1" if http["host"] in ("0.0.0.0", "::", "") else http["host"]
    url = f"http://{f'[{host}]' if ':' in host else host}:{http['port']}"
    wait_until_serving(url)
    return url


def wait_until_serving(url: str, timeout_s: float = START_TIMEOUT_S) -> None:
    """Return once `url`'s `/healthz` answers 200; UnavailableError with its last answer after `timeout_s`."""
    import httpx

    deadline, last = time.monotonic() + timeout_s, "no answer"
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < deadline:
            try:
                answer = client.get(f"{url}/healthz")
                if answer.status_code == 200:
                    return
                last = f"{answer.status_code} {answer.text[:200]}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.2)
    raise UnavailableError(f"{url} did not become ready within {timeout_s:.0f} s; its last answer: {last}")
