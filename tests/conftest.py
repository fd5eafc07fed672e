"""Shared fixtures: the real bundled model (loaded once per session), a real LanceDB per test, the
shared Ray and Serve app. Each test's tier (unit, store, ray, serve, stack) comes from the fixtures
it uses: tests/tiers.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from agent_memory.embedding import Embedder, SentenceTransformerEmbedder  # noqa: E402
from agent_memory.rows import RowBuilder  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from serve_app.shards import shard_of  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import maintenance_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ("tests.tiers", "pytester", "tests.browser")  # pytester: tests/test_tiers.py runs a pytest of its own;
# tests.browser: the system Chromium for the console's tests


class Clock:
    """A settable clock, so tests move time instead of sleeping."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 1, 15, 12, 0, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return SentenceTransformerEmbedder(cache_size=256)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(storage_uri=str(tmp_path / "lancedb"), _env_file=None)  # type: ignore[call-arg]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rows(settings: Settings, clock: Clock) -> RowBuilder:
    """Rows as the service builds them (message records, prepared memories), with no store and no model."""
    return RowBuilder(settings, clock)


@pytest.fixture
def make_service(embedder: Embedder, tmp_path: Path) -> Iterator[Callable[..., MemoryService]]:
    services: list[MemoryService] = []

    def make(clock: Callable[[], datetime] | None = None, **overrides: object) -> MemoryService:
        settings = Settings(storage_uri=str(tmp_path / "lancedb"), _env_file=None, **overrides)  # type: ignore[call-arg]
        store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim,
                           chinese_gloss=embedder.glosses_chinese)
        service = MemoryService(store, embedder, settings, clock=clock or Clock(), defer_access=False,
                                maintenance=maintenance_of(store))
        services.append(service)
        return service

    yield make
    for service in services:
        service.close()


@pytest.fixture
def service(make_service: Callable[..., MemoryService], clock: Clock) -> MemoryService:
    return make_service(clock=clock)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray for the whole test session (2 CPUs, as on every machine here)."""
    import ray

    from serve_app.config import serve_env

    if not ray.is_initialized():
        before = set(os.environ)
        serve_env()  # the same Serve switches as `agent-memory serve`, inherited by Ray's processes
        SHARED_STACK_ENV.extend(set(os.environ) - before)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


SHARED_STACK_ENV: list[str] = []  # what serve_env put in this process's environment for the shared Ray


def stop_shared_stack() -> None:
    """Stop the shared Serve app and Ray, for a stack of its own, and take back the variables
    serve_env set for them: a stack started from here inherits the environment, and would take the
    shared stack's HAProxy ports (chosen free then) instead of choosing its own."""
    import ray
    from ray import serve

    if ray.is_initialized():
        serve.shutdown()
        ray.shutdown()
    while SHARED_STACK_ENV:
        os.environ.pop(SHARED_STACK_ENV.pop(), None)


API_KEYS = {
    "acme-admin": ("acme", "admin"),
    "acme-writer": ("acme", "writer"),
    "acme-reader": ("acme", "reader"),
    "globex-admin": ("globex", "admin"),
}


# Keys of agents (org, role, agent): they write as their agent and read the shared memories and their own.
AGENT_KEYS = {
    "acme-planner": ("acme", "writer", "planner"),
    "acme-support": ("acme", "writer", "support"),
    "acme-support-admin": ("acme", "admin", "support"),
}
# Feedback votes a minute per key on the shared app (tests/test_console_api.py runs into it).
FEEDBACK_PER_MINUTE = 20


# A memory quota for an org that only tests/test_serve_keys.py writes to.
QUOTAS = {"quota-org": 3, "quota-shards": 3}


def users_on_each_shard(org_id: str, shards: int, tag: str = "") -> list[str]:
    """One fresh user id per shard, in shard order."""
    found: dict[int, str] = {}
    while len(found) < shards:
        user = f"user-{tag}{uuid.uuid4().hex[:8]}"
        found.setdefault(shard_of(org_id, user, shards), user)
    return [found[i] for i in range(shards)]


@pytest.fixture(scope="session")
def serve_app(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The real Serve application on loopback, once per session, with API keys for two orgs."""
    import json

    from ray import serve

    from cli.net import free_port
    from serve_app.app import build, wait_until_serving
    from serve_app.config import load_config

    root = tmp_path_factory.mktemp("serve")
    keys_file = root / "keys.json"
    keys_file.write_text(json.dumps({"keys": [
        {"key": key, "org_id": org, "role": role, "name": key} for key, (org, role) in API_KEYS.items()
    ] + [{"key": key, "org_id": org, "role": role, "name": key, "agent_id": agent}
         for key, (org, role, agent) in AGENT_KEYS.items()]}))
    settings = Settings(  # type: ignore[call-arg]
        storage_uri=str(root / "lancedb"), api_keys_file=keys_file, max_body_bytes=200_000,
        import_root=str(root / "imports"), quota_memories_by_org=QUOTAS,
        # An erasure's purge waits for one flush of the recall hits: keep it short here.
        access_flush_seconds=2.0, feedback_rate_limit_per_minute=FEEDBACK_PER_MINUTE,
        # Two Writer shards: every HTTP test writes through them (tests/test_writer_shards.py).
        writer_shards=2, _env_file=None,
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    # The shipped Serve config, with the two shards reserving the one Writer's 0.1 CPU between
    # them: extraction workers and consolidation then fit beside them on the two CPUs, as before.
    config = load_config(None)
    for deployment in config["applications"][0]["deployments"]:
        if deployment["name"] == "Writer":
            deployment["ray_actor_options"] = {**deployment.get("ray_actor_options", {}), "num_cpus": 0.05}
    serve.run(build(settings, config), name="agent-memory", route_prefix="/")
    wait_until_serving(f"http://127.0.0.1:{port}")  # the ingress replica finishes starting after serve.run
    yield {"url": f"http://127.0.0.1:{port}", "settings": settings}
    import ray

    if ray.is_initialized():  # a test with a stack of its own may have stopped it already
        serve.shutdown()


@pytest.fixture
def api(serve_app: dict[str, object]) -> Callable[..., object]:
    """An httpx client for the running app, authenticated with one of API_KEYS."""
    import httpx

    clients: list[httpx.Client] = []

    def client(key: str | None = "acme-admin") -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        c = httpx.Client(base_url=str(serve_app["url"]), headers=headers, timeout=60)
        clients.append(c)
        return c

    yield client
    for c in clients:
        c.close()


@pytest.fixture(scope="session")
def bundled_tokenizer():  # type: ignore[no-untyped-def]
    """The bundled model's tokenizer, loaded from its file without truncation or padding: counts of
    context blocks are checked with it, apart from the server's own counter."""
    from tokenizers import Tokenizer

    from agent_memory.embedding import bundled_model_path

    tokenizer = Tokenizer.from_file(str(Path(bundled_model_path()) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


@pytest.fixture(scope="session")
def s3_server() -> Iterator[object]:
    """A real S3-compatible server (moto) on loopback, with the bucket `agent-memory`, for the session."""
    from loopback.s3_server import S3Server

    with S3Server() as server:
        yield server
