"""The embedding interface, used alike by the service, the Serve app and Ray Data jobs.

Backends implement `embed_batch`; everything else (single texts, caching, vocabulary coverage)
is built on it here, as is the batching of concurrent queries into one forward pass.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np

from agent_memory.errors import AgentMemoryError, UnavailableError
from agent_memory.text import gloss, is_chinese

log = logging.getLogger(__name__)

OPENAI_PREFIX = "openai:"
# Up to this many texts are embedded in one direct forward pass (queries, small write windows);
# `encode`'s own batching costs more than it saves there (about 1.5 ms of a 10 ms query on CPU).
SMALL_BATCH = 8
PRECISIONS = ("fp32", "int8")


def unit_length(vectors: np.ndarray) -> np.ndarray:
    """The vectors (rows) scaled to unit L2 length, as float32; a zero vector stays zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dim: int
    # Whether Chinese texts are given to the model as their English gloss (GlossingEmbedder).
    glosses_chinese = False

    def __init__(self, cache_size: int = 0) -> None:
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @abstractmethod
    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts at once: an (n, dim) float32 array of unit vectors."""

    def oov_shares(self, texts: Sequence[str]) -> list[float]:
        """For each text, the share of its tokens the model cannot read (0 where it reads all)."""
        return [0.0] * len(texts)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query, through a small LRU cache (agents repeat questions)."""
        if self._cache_size:
            with self._lock:
                hit = self._cache.get(text)
                if hit is not None:
                    self._cache.move_to_end(text)
                    return hit
        vector = self.embed_batch([text])[0]
        if self._cache_size:
            with self._lock:
                self._cache[text] = vector
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return vector


class GlossingEmbedder(Embedder):
    """An English model that reads Chinese through its dictionary gloss (`agent_memory.text.gloss`).

    The bundled model knows few Chinese characters: most become `[UNK]`, and any two Chinese texts
    come out alike. Embedded as their gloss ("我老公在银行上班" -> "I husband at bank go to work"),
    Chinese memories and questions are compared by what they say. Other texts go to the model as
    they are, and so does the vocabulary coverage of each text as the model is given it.
    """

    glosses_chinese = True

    def __init__(self, inner: Embedder, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim

    @staticmethod
    def read(texts: Sequence[str]) -> list[str]:
        """What the model is given of each text: its gloss where it is Chinese."""
        return [gloss(t) if is_chinese(t) else t for t in texts]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_batch(self.read(texts))

    def oov_shares(self, texts: Sequence[str]) -> list[float]:
        return self.inner.oov_shares(self.read(texts))

    def __getattr__(self, name: str) -> object:
        # The wrapped model's own attributes (device, backend, precision) read through.
        return getattr(self.__dict__["inner"], name)


class BatchingEmbedder(Embedder):
    """Single queries embedded from many threads share forward passes (continuous batching).

    A lone query runs at once, with no waiting window; queries that arrive while the model is
    busy go together into the next pass, up to `max_batch`. Lists of several texts go straight
    to the wrapped embedder. A query not answered within `timeout_s` is unavailable, like a
    remote embedder's; so is one whose pass failed for a reason other than its input.
    """

    def __init__(
        self, inner: Embedder, max_batch: int = 16, cache_size: int = 0, timeout_s: float | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(cache_size)
        self.inner = inner
        self.name, self.dim, self.glosses_chinese = inner.name, inner.dim, inner.glosses_chinese
        self.max_batch = max_batch
        self._timeout = timeout_s
        self._on_batch = on_batch
        self._pending: list[tuple[str, Future[np.ndarray]]] = []
        self._ready = threading.Condition()
        self._closed = False
        self.batch_sizes: list[int] = []  # the last passes' sizes
        self._thread = threading.Thread(target=self._work, name="query-batcher", daemon=True)
        self._thread.start()

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) != 1:
            return self.inner.embed_batch(texts)
        future: Future[np.ndarray] = Future()
        with self._ready:
            if self._closed:
                raise UnavailableError("the query embedder is closed")
            self._pending.append((texts[0], future))
            self._ready.notify()
        try:
            return future.result(timeout=self._timeout)[None, :]
        except FutureTimeout:
            future.cancel()
            raise UnavailableError(f"the embedding model did not answer within {self._timeout} s") from None

    def oov_shares(self, texts: Sequence[str]) -> list[float]:
        return self.inner.oov_shares(texts)

    def close(self) -> None:
        """Stop the batching thread; queries still waiting become unavailable."""
        with self._ready:
            self._closed = True
            pending, self._pending = self._pending, []
            self._ready.notify()
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_exception(UnavailableError("the query embedder is closed"))
        self._thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._pending and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            batch = [(text, future) for text, future in batch if future.set_running_or_notify_cancel()]
            if batch:
                self._run(batch)

    def _run(self, batch: list[tuple[str, Future[np.ndarray]]]) -> None:
        """One pass; whatever happens, every caller in it gets a vector or an error."""
        try:
            self.batch_sizes = [*self.batch_sizes[-255:], len(batch)]
            if self._on_batch is not None:
                self._on_batch(len(batch))
            vectors = self.inner.embed_batch([text for text, _ in batch])
            if len(vectors) != len(batch):
                raise UnavailableError(f"the embedding model returned {len(vectors)} vectors for {len(batch)} texts")
            results: list[np.ndarray | BaseException] = list(vectors)
        except AgentMemoryError as exc:  # unavailability, or a text the model refuses: as it is
            results = [exc] * len(batch)
        except Exception as exc:  # anything else the model raises is unavailability
            log.exception("query embedding failed")
            results = [UnavailableError(f"the embedding model failed: {type(exc).__name__}: {exc}")] * len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
