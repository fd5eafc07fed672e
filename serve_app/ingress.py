"""The HTTP ingress: the FastAPI app and the deployment that serves it (IngressDeployment).

The routes are in `serve_app.routes`, a module per resource; this module puts them in one app and
one class, starts a replica's parts and tells Serve about its health. Changes go to the Writer, in
order; reads that need no model go to the store; search runs in this replica, one hop from the
client. Errors become statuses in serve_app.errors, and every request passes through
serve_app.middleware.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from fastapi import FastAPI

from agent_memory.embedding import BatchingEmbedder
from agent_memory.settings import Settings
from serve_app import metrics
from serve_app.docs import add_docs
from serve_app.embedder import query_embedder
from serve_app.errors import add_error_handlers
from serve_app.middleware import RequestContext, prepare_state, track_start
from serve_app.routes import console, conversations, health, jobs, memories, users
from serve_app.shards import WriterShards
from storage import open_store
from storage.connect import open_service

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

app = FastAPI(
    title="agent-memory",
    version="0.1.0",
    description=(
        "Long-term memory for LLM agents: recall before answering (`POST /v1/context` gives the prompt "
        "block in one call), store after answering (`POST /v1/conversations`). Every call is confined to "
        "the org of its API key and to the `user_id` given. Every error answers "
        "`{\"error\": {\"code\", \"message\"}}`."
    ),
    docs_url=None,
    redoc_url=None,
)
add_error_handlers(app)
add_docs(app)
app.add_middleware(RequestContext)
ROUTES = (health, memories, users, conversations, jobs, console)
for module in ROUTES:
    app.include_router(module.router)


class IngressDeployment(
    health.HealthRoutes, memories.MemoryRoutes, users.UserRoutes, conversations.ConversationRoutes, jobs.JobRoutes
):
    """HTTP, and recall itself; changes go to the Writer; reads that need no model go to the store.
    `app.build` makes it the `Ingress` deployment, serving `app`.

    The constructor returns at once, so the replica answers from its first seconds: what takes
    long (the Embedder's model, the store, this replica's query model) is opened by `starting`,
    meanwhile health checks answer 503 with what it waits for and the API's requests wait.
    """

    async def __init__(
        self, settings: Settings, writers: list[DeploymentHandle], embedder: DeploymentHandle,
        scheduler: DeploymentHandle, *, local_queries: bool = False,
    ) -> None:
        self.settings = settings
        # Each user's changes go to one Writer shard (serve_app.shards).
        self.writers, self.embedder, self.scheduler = WriterShards(writers), embedder, scheduler
        # Keys (re-read as their file changes) and rate limits; the task keeps the limiter's
        # replica count current, for limits that hold across every ingress replica.
        self._replica_count = prepare_state(settings)
        self.phase = "waiting for the Embedder deployment"
        self.starting = asyncio.get_running_loop().create_task(self._open(local_queries))
        track_start(self.starting)

    async def _open(self, local_queries: bool) -> None:
        settings, loop = self.settings, asyncio.get_running_loop()
        info = await self.embedder.info.remote()
        self.phase = "opening the store"
        self.store = await loop.run_in_executor(
            None, functools.partial(open_store, settings, embedding_model=info["name"], embedding_dim=info["dim"],
                                    chinese_gloss=info["glosses_chinese"]),
        )
        # Reads only (get, list, history, sessions); changes go through the Writer, in order.
        self.reader = open_service(settings, with_embedder=False, store=self.store)
        # Recall runs here, one hop from the client (see benchmarks/serve_latency.py), with access
        # bookkeeping deferred. Queries are embedded in this replica, concurrent ones sharing a
        # forward pass, or, where the Embedder holds a GPU, there (build() decides).
        self.phase = "loading the query model"
        queries = await query_embedder(settings, self.embedder, info, local=local_queries)
        self.recaller = open_service(settings, embedder=queries, store=self.store, defer_access=True)
        self.recall_pool = ThreadPoolExecutor(max_workers=settings.serving.recall_threads, thread_name_prefix="recall")
        self.recall_latency = metrics.recall_latency()

    def check_health(self) -> None:
        """Serve's health check: a replica that could not start is replaced."""
        status, reason = self.start_state()
        if status == "failed":
            raise RuntimeError(f"the ingress replica could not start: {reason}")

    def __del__(self) -> None:
        if hasattr(self, "recaller"):
            self.recaller.close()  # flushes the deferred access counts
            if isinstance(self.recaller.embedder, BatchingEmbedder):
                self.recaller.embedder.close()


@functools.cache
def ingress_class() -> type:
    """IngressDeployment serving `app`, made once per process.

    Serve rewrites the app's routes when it wraps the class (their `self` becomes a dependency, in
    the functions' signatures), so a replica must receive this module's and the route modules'
    classes and functions as they are here, by value, not import them afresh. Not
    `serve_app.routes.common`: a replica imports it, which registers the path convertor of memory
    ids that FastAPI looks up again when it first matches a request there.
    """
    from ray import cloudpickle, serve

    for module in (sys.modules[__name__], *ROUTES):
        cloudpickle.register_pickle_by_value(module)
    return serve.ingress(app)(IngressDeployment)
