"""ONNX Runtime for local models (on CPU; on CUDA with its GPU build): the graph exported once per
model (and, for queries, quantized to int8 and checked against the exact model), cached on disk,
shared per process."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.embedding.base import unit_length

log = logging.getLogger(__name__)

# Query vectors of the int8 graph stay this close (cosine) to the exact model's on the probe texts,
# else the graph is refused. Measured on 200 queries: mean 0.992, lowest 0.981 (benchmarks/query_precision.py).
INT8_MIN_COSINE = 0.95


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
        cls, model: Any, path: str, lock: threading.Lock, threads: int | None = None, precision: str = "fp32",
        device: str = "cpu",
    ) -> OnnxEncoder:
        """Load (or export, then load) the model's graph, and check it against torch on probe texts:
        a cached graph that no longer matches (weights changed in place) is made again; a fresh one
        that does not match is refused, and the caller stays on torch. `threads`: ONNX Runtime's
        threads per call (by default as many as torch was given). `precision` int8: the graph with
        its MatMul weights quantised to int8 (per output channel, activations quantised as they
        come), made from the exact one and named after it: the model's CPU per query about 40% of
        the exact graph's, vectors at cosine 0.992 to the exact ones on average (lowest 0.981; see
        README, "Query precision"). Where no int8 graph passes, queries run on the exact one.
        `device` cuda: the exact graph on ONNX Runtime's CUDA provider (its GPU build)."""
        modules = [type(m).__name__ for m in model]
        pooling = getattr(model[1], "pooling_mode", None) if len(model) > 1 else None
        if modules[:2] != ["Transformer", "Pooling"] or modules[2:] not in ([], ["Normalize"]) or pooling != "mean":
            raise ValueError(f"modules {modules} with {pooling} pooling are not the supported shape")
        if getattr(model, "default_prompt_name", None):
            raise ValueError("models with a default prompt are not supported")
        graph = _onnx_cache_dir() / f"{_model_key(path)}.onnx"
        providers = execution_providers(device)
        exact = cls._cached(model, graph, lambda: _export(model, graph), lock, threads, None, providers)
        if precision == "fp32" or device != "cpu":
            return exact
        # Named after the exact graph's file: one exported again (by any process) gets a new copy.
        made = graph.stat()
        quantized = graph.with_name(f"{graph.stem}-int8-{made.st_size:x}-{made.st_mtime_ns:x}.onnx")
        try:
            encoder = cls._cached(
                model, quantized, lambda: _quantize(graph, quantized), lock, threads, INT8_MIN_COSINE, providers
            )
        except Exception as exc:
            log.warning("no int8 graph for %s (%s): queries run on the exact graph", path, exc)
            return exact
        encoder.precision = "int8"
        return encoder

    @classmethod
    def _cached(
        cls, model: Any, graph: Path, make: Callable[[], None], lock: threading.Lock, threads: int | None,
        min_cosine: float | None, providers: list[str],
    ) -> OnnxEncoder:
        """The encoder of `graph` from the cache, made by `make` when missing or when the cached
        one fails `matches`; a fresh one that fails is an error."""
        for attempt in ("cached", "fresh") if graph.exists() else ("fresh",):
            try:
                if attempt == "fresh":
                    make()
                encoder = cls._load(model, graph, lock, threads, providers)
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
    def _load(
        cls, model: Any, graph: Path, lock: threading.Lock, threads: int | None, providers: list[str]
    ) -> OnnxEncoder:
        import onnxruntime
        import torch

        options = onnxruntime.SessionOptions()
        # As many threads as asked, else as torch was given (Ray gives fractional-CPU actors one),
        # and no spinning: on a small machine an idle spinning thread takes CPU from the others.
        options.intra_op_num_threads = threads or max(1, torch.get_num_threads())
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(str(graph), options, providers=providers)
        inputs = [i.name for i in session.get_inputs()]
        return cls(session, model.tokenizer, int(model.max_seq_length or 512), inputs, lock)

    def matches(self, model: Any, min_cosine: float | None = None) -> bool:
        """Whether this graph gives the torch model's vectors on a few texts of different lengths:
        the same within 1e-4, or with `min_cosine`, at least that close to each of them."""
        import torch

        probe = ["probe", "a longer probe sentence about the user's preferences", "用户喜欢喝绿茶"]
        with self._tokenizing:
            features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v
                        for k, v in model.preprocess(probe).items()}
        with torch.inference_mode():
            expected = torch.nn.functional.normalize(model(features)["sentence_embedding"].float(), dim=1)
        expected = expected.cpu().numpy()
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
        return unit_length(pooled)


def execution_providers(device: str, available: list[str] | None = None) -> list[str]:
    """ONNX Runtime's providers for `device` (cpu or cuda). CUDA needs ONNX Runtime's GPU build
    (`onnxruntime-gpu`, the `gpu` extra), which replaces the CPU one: without it, an error that
    says so."""
    if device == "cpu":
        return ["CPUExecutionProvider"]
    if available is None:
        import onnxruntime

        available = onnxruntime.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise ValueError("this ONNX Runtime has no CUDA provider: install its GPU build in place of the CPU one "
                         "(docs/performance.md#on-a-gpu)")
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _export(model: Any, graph: Path) -> None:
    """Export the transformer of a sentence-transformers model to an ONNX graph at `graph`.

    Written to a temporary file beside it and renamed, so processes (or containers sharing the
    cache) exporting at once never read a partial file.
    """
    import torch

    tokenizer = model.tokenizer
    probe = {k: v.to(model.device) for k, v in tokenizer(["probe"], return_tensors="pt").items()}
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
