"""Embedding in the Serve app: the shared Embedder deployment, and the Embedder interface over it.

The Embedder deployment holds the application's model (on a GPU where it has one) and batches
concurrent callers. RemoteEmbedder lets the core's MemoryService call it from worker threads;
`query_embedder` picks how an ingress replica embeds its queries.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_memory.embedding import BatchingEmbedder, Embedder, build_embedder
from agent_memory.errors import AgentMemoryError, UnavailableError
from agent_memory.settings import Settings
from serve_app import metrics

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle


class RemoteEmbedder(Embedder):
    """The Embedder deployment seen through the core's Embedder interface, from worker threads.

    Calls are made on the replica's event loop (`loop`) and awaited there, so they work whether
    Serve's router runs in a loop of its own or in the replica's (`RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0`,
    see serve_app.config.SERVE_ENV), where a blocking `.result()` is refused.
    """

    def __init__(
        self, handle: DeploymentHandle, info: dict[str, Any], timeout_s: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        super().__init__(cache_size=0)
        self._handle = handle
        self.name, self.dim, self.glosses_chinese = info["name"], info["dim"], info["glosses_chinese"]
        self._timeout = timeout_s
        self._loop = loop
        self._oov: OrderedDict[str, float] = OrderedDict()
        self._oov_lock = threading.Lock()

    def _call(self, method: str, arg: Any) -> Any:
        async def call() -> Any:
            return await getattr(self._handle, method).remote(arg)

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        try:
            return future.result(timeout=self._timeout)
        except AgentMemoryError:
            raise
        except Exception as exc:  # timeouts, a dead replica, back-pressure rejections
            future.cancel()
            raise UnavailableError(f"the embedding model did not answer: {type(exc).__name__}") from exc

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts in one call (writes)."""
        vectors, shares = self._call("embed_many", list(texts))
        self._remember(texts, shares)
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        """One query, batched with other replicas' queries on the embedder side."""
        vector, share = self._call("embed_one", text)
        self._remember([text], [share])
        return vector

    def _remember(self, texts: Sequence[str], shares: Sequence[float]) -> None:
        with self._oov_lock:  # recall threads share this embedder
            for text, share in zip(texts, shares, strict=True):
                self._oov[text] = share
                self._oov.move_to_end(text)
            while len(self._oov) > 4096:
                self._oov.popitem(last=False)

    def oov_shares(self, texts: Sequence[str]) -> list[float]:
        """Vocabulary coverage computed by the embedder alongside each vector."""
        with self._oov_lock:
            known = {t: self._oov[t] for t in texts if t in self._oov}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            _, shares = self._call("embed_many", missing)
            self._remember(missing, shares)
            known.update(zip(missing, shares, strict=True))
        return [known[t] for t in texts]


class EmbedderDeployment:
    """The application's shared embedding model: the Writer's texts, and queries where it holds a GPU,
    batched across replicas. `app.build` makes it the `Embedder` deployment."""

    def __init__(self, settings: Settings) -> None:
        from ray import serve

        # The instance's `embed_one` takes one text per caller and hands the texts of concurrent
        # callers to the method of that name (Serve's batch metrics keep its name).
        self.embed_one = serve.batch(max_batch_size=16, batch_wait_timeout_s=0.003)(self.embed_one)
        self._embedder = build_embedder(settings)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._batch_sizes = metrics.embed_batch_size()

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Tune batching at runtime (`user_config` in the Serve config)."""
        if "max_batch_size" in config:
            self.embed_one.set_max_batch_size(int(config["max_batch_size"]))
        if "batch_wait_timeout_s" in config:
            self.embed_one.set_batch_wait_timeout_s(float(config["batch_wait_timeout_s"]))

    def info(self) -> dict[str, Any]:
        """The model's name and dimension, and whether it reads Chinese through its gloss (the store records them)."""
        return {"name": self._embedder.name, "dim": self._embedder.dim, "glosses_chinese": self._embedder.glosses_chinese}

    async def _run(self, texts: list[str]) -> tuple[np.ndarray, list[float]]:
        loop = asyncio.get_running_loop()

        def work() -> tuple[np.ndarray, list[float]]:
            return self._embedder.embed_batch(texts), self._embedder.oov_shares(texts)

        # The model runs off the event loop, so requests keep queueing (and batching) meanwhile.
        return await loop.run_in_executor(self._executor, work)

    async def embed_one(self, texts: list[str]) -> list[tuple[np.ndarray, float]]:
        """The texts of concurrent `embed_one` callers, in one model call."""
        self._batch_sizes.observe(len(texts), tags={"path": "embedder"})
        vectors, shares = await self._run(texts)
        return [(vectors[i], shares[i]) for i in range(len(texts))]

    async def embed_many(self, texts: list[str]) -> tuple[np.ndarray, list[float]]:
        """Embed a caller's whole list in one model call."""
        self._batch_sizes.observe(len(texts), tags={"path": "embedder"})
        return await self._run(texts)


async def query_embedder(
    settings: Settings, embedder: DeploymentHandle, info: dict[str, Any], *, local: bool
) -> Embedder:
    """How an ingress replica embeds queries: with a model of its own, concurrent queries sharing a
    forward pass (`local`), or through the Embedder deployment (`info`: its model's name and dim)."""
    loop = asyncio.get_running_loop()
    if not local:
        return RemoteEmbedder(embedder, info, settings.embedding.timeout_s, loop)
    model = await loop.run_in_executor(
        None, lambda: build_embedder(settings, threads=settings.embedding.query_model_threads, precision=settings.embedding.query_precision),
    )
    batch_sizes = metrics.embed_batch_size()
    return BatchingEmbedder(
        model, cache_size=settings.embedding.cache_size, timeout_s=settings.embedding.timeout_s,
        on_batch=lambda n: batch_sizes.observe(n, tags={"path": "query"}),
    )
