"""ONNX Runtime for local models (on CPU; on CUDA with its GPU build): the graph exported once per
model (and, for queries, quantized to int8 and checked against the exact model), cached on disk,
shared per process."""

from __future__ import annotations

import hashlib
import json
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
from agent_memory.embedding.tokens import FileTokenizer, ModelFiles, ModelTokenizer, default_threads

log = logging.getLogger(__name__)

# Query vectors of the int8 graph stay this close (cosine) to the exact model's on the probe texts,
# else the graph is refused. Measured on 200 queries: mean 0.992, lowest 0.981 (benchmarks/query_precision.py).
INT8_MIN_COSINE = 0.95
# The exact graph's vectors are the model's within this (largest difference of a component).
EXACT_MAX_DIFFERENCE = 1e-4
# What a graph's record (`<graph>.json`) is checked with: its layout, and the libraries whose
# upgrade could change the model's vectors or its tokens (the graph is then checked again).
RECORD_FORMAT = 2
CHECKED_WITH = ("onnxruntime", "tokenizers", "transformers", "sentence-transformers", "torch")
# Texts the tokenizer read from `tokenizer.json` must split as the model's own does before a
# cached graph is run without the model (`OnnxEncoder.from_cache`); with them, in a batch, one
# longer than the model reads, every word of it different, so that the side it is cut on shows.
TOKENIZER_PROBE = [
    "probe", "a longer probe sentence about the user's preferences", "用户喜欢喝绿茶", "",
    "Café MÜNCHEN naïve résumé, ＦＵＬＬ　ｗｉｄｔｈ", "emoji 🙂 and tabs\tand\nnewlines", "don't stop-believing #42 x@y.com",
]


class OnnxEncoder:
    """A sentence-transformers model of the Transformer + mean Pooling (+ Normalize) shape, run by
    ONNX Runtime: the same vectors as torch (within 1e-6), with less per-call overhead on CPU.

    Measured on these 2-core machines, one thread, the bundled model: one query 4.9 ms against
    12.1 ms with torch, batches of 8 3.3 ms against 4.5 ms a text (see README, Performance). The
    graph is exported from the loaded torch model once and kept in the cache directory
    (`$XDG_CACHE_HOME/agent-memory/onnx`, else `~/.cache/...`), keyed by the model's files.
    """

    def __init__(self, session: Any, tokenizer: ModelTokenizer | FileTokenizer, inputs: list[str], lock: threading.Lock) -> None:
        self._session, self.tokenizer, self._inputs = session, tokenizer, inputs
        self._tokenizing = lock
        self.precision = "fp32"
        self.dim = 0

    @classmethod
    def for_model(
        cls, model: Any, path: str, lock: threading.Lock, threads: int | None = None, precision: str = "fp32",
        device: str = "cpu",
    ) -> OnnxEncoder:
        """Load (or export, then load) the model's graph, and check it against torch on probe texts:
        a cached graph that no longer matches (weights changed in place) is made again; a fresh one
        that does not match is refused, and the caller stays on torch. `threads`: ONNX Runtime's
        threads per call (by default one a core, `tokens.default_threads`). `precision` int8: the
        graph with its MatMul weights quantised to int8 (per output channel, activations quantised
        as they come), made from the exact one and named after it: the model's CPU per query about
        40% of the exact graph's, vectors at cosine 0.992 to the exact ones on average (lowest
        0.981; see README, "Query precision"). Where no int8 graph passes, queries run on the exact
        one. `device` cuda: the exact graph on ONNX Runtime's CUDA provider (its GPU build).

        Each graph that passes gets a record beside it (`<graph>.onnx.json`: the file's size and
        time, how close it came, whether the tokenizer of `tokenizer.json` splits the probe texts as
        the model's does, the libraries that checked it), which lets the next process run it
        without loading the model (`from_cache`)."""
        modules = [type(m).__name__ for m in model]
        pooling = getattr(model[1], "pooling_mode", None) if len(model) > 1 else None
        if modules[:2] != ["Transformer", "Pooling"] or modules[2:] not in ([], ["Normalize"]) or pooling != "mean":
            raise ValueError(f"modules {modules} with {pooling} pooling are not the supported shape")
        if getattr(model, "default_prompt_name", None):
            raise ValueError("models with a default prompt are not supported")
        graph = _onnx_cache_dir() / f"{_model_key(path)}.onnx"
        providers = execution_providers(device)
        tokenizer = ModelTokenizer(model.tokenizer, int(model.max_seq_length or 512))
        same_tokens = _tokenizes_alike(tokenizer, path)
        exact = cls._cached(model, graph, lambda: _export(model, graph), tokenizer, lock, threads, None, providers, same_tokens)
        if precision == "fp32" or device != "cpu":
            return exact
        quantized = _int8_name(graph)
        try:
            encoder = cls._cached(model, quantized, lambda: _quantize(graph, quantized), tokenizer, lock, threads,
                                  INT8_MIN_COSINE, providers, same_tokens)
        except Exception as exc:
            log.warning("no int8 graph for %s (%s): queries run on the exact graph", path, exc)
            return exact
        encoder.precision = "int8"
        return encoder

    @classmethod
    def from_cache(cls, path: str, lock: threading.Lock, threads: int | None = None, precision: str = "fp32") -> OnnxEncoder | None:
        """The encoder of a local model directory whose graph (int8: its int8 graph) an earlier
        process made and checked, on CPU, without torch, transformers or sentence-transformers (a
        few seconds of every start): the graph's record must name the file as it is now, its
        agreement with the model must pass today's bar, and `tokenizer.json` must have split the
        probe texts as the model's tokenizer does. None where any of that is not so, or the graph
        does not load: the caller loads the model (`for_model`)."""
        files = ModelFiles.read(path)
        if files is None:
            return None
        graph = _onnx_cache_dir() / f"{_model_key(path)}.onnx"
        if not graph.exists():
            return None
        if precision == "int8":
            graph = _int8_name(graph)
        record = _read_record(graph)
        bar = (record.get("min_cosine", -1.0) >= INT8_MIN_COSINE if precision == "int8"
               else record.get("max_difference", 1.0) < EXACT_MAX_DIFFERENCE)
        if not (bar and record.get("same_tokens")):
            return None
        try:
            tokenizer = FileTokenizer(files.tokenizer, files.max_length, files.unk_token)
            encoder = cls._load(graph, tokenizer, lock, threads, execution_providers("cpu"))
        except Exception as exc:  # a damaged file: the model's path makes it again
            log.info("the cached graph %s does not load without its model (%s)", graph, exc)
            return None
        encoder.precision, encoder.dim = precision, files.dim
        return encoder

    @classmethod
    def _cached(
        cls, model: Any, graph: Path, make: Callable[[], None], tokenizer: ModelTokenizer, lock: threading.Lock,
        threads: int | None, min_cosine: float | None, providers: list[str], same_tokens: bool,
    ) -> OnnxEncoder:
        """The encoder of `graph` from the cache, made by `make` when missing or when the cached
        one fails its check against the model; a fresh one that fails is an error."""
        for attempt in ("cached", "fresh") if graph.exists() else ("fresh",):
            try:
                if attempt == "fresh":
                    make()
                loaded = graph.stat()
                encoder = cls._load(graph, tokenizer, lock, threads, providers)
                difference, cosine = encoder.agreement(model)
                if cosine >= min_cosine if min_cosine is not None else difference < EXACT_MAX_DIFFERENCE:
                    _write_record(graph, loaded, difference, cosine, same_tokens)
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
        cls, graph: Path, tokenizer: ModelTokenizer | FileTokenizer, lock: threading.Lock, threads: int | None,
        providers: list[str],
    ) -> OnnxEncoder:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        # As many threads as asked, else one a core (Ray gives fractional-CPU actors one), and no
        # spinning: on a small machine an idle spinning thread takes CPU from the others.
        options.intra_op_num_threads = threads or default_threads()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(str(graph), options, providers=providers)
        inputs = [i.name for i in session.get_inputs()]
        return cls(session, tokenizer, inputs, lock)

    def agreement(self, model: Any) -> tuple[float, float]:
        """How close this graph's vectors come to the torch model's on a few texts of different
        lengths: the largest difference of a component, and the lowest cosine."""
        import torch

        probe = ["probe", "a longer probe sentence about the user's preferences", "用户喜欢喝绿茶"]
        with self._tokenizing:
            features = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v
                        for k, v in model.preprocess(probe).items()}
        with torch.inference_mode():
            expected = torch.nn.functional.normalize(model(features)["sentence_embedding"].float(), dim=1)
        expected = expected.cpu().numpy()
        vectors = self._run(probe)
        return float(np.abs(vectors - expected).max()), float((vectors * expected).sum(axis=1).min())

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
            batch = self.tokenizer.batch(texts)
        feed = {name: batch[name].astype(np.int64) for name in self._inputs}
        hidden = self._session.run(None, feed)[0]
        mask = batch["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return unit_length(pooled)


def _tokenizes_alike(tokenizer: ModelTokenizer, path: str) -> bool:
    """Whether the tokenizer of the model directory's `tokenizer.json` splits the probe texts, cut
    and padded, as the model's own tokenizer does (ids, mask and token types alike)."""
    files = ModelFiles.read(path)
    if files is None or files.max_length != tokenizer.max_length:
        return False
    try:
        plain = FileTokenizer(files.tokenizer, files.max_length, files.unk_token)
        cut = [*TOKENIZER_PROBE, " ".join(str(i) for i in range(files.max_length + 8))]  # a token a word at least
        ours, theirs = plain.batch(cut), tokenizer.batch(cut)
        return (plain.unk_id == tokenizer.unk_id and plain.ids(TOKENIZER_PROBE) == tokenizer.ids(TOKENIZER_PROBE)
                and all(np.array_equal(ours[k], theirs[k]) for k in theirs if k in ours))
    except Exception:  # a tokenizer.json that `tokenizers` cannot read: the model loads every time
        return False


def _int8_name(graph: Path) -> Path:
    """The int8 copy of an exact graph, named after the exact file's size and time: one exported
    again (by any process) gets a new copy."""
    made = graph.stat()
    return graph.with_name(f"{graph.stem}-int8-{made.st_size:x}-{made.st_mtime_ns:x}.onnx")


def _record_path(graph: Path) -> Path:
    return graph.with_name(f"{graph.name}.json")


def _write_record(graph: Path, loaded: os.stat_result, difference: float, cosine: float, same_tokens: bool) -> None:
    """Record that `graph`, as it was loaded (`loaded`: its stat then), passed its check: how
    close, whether `tokenizer.json` alone splits text as the model does, and the libraries that
    checked it. Nothing is recorded where another process replaced the file since."""
    record = {"format": RECORD_FORMAT, "size": loaded.st_size, "mtime_ns": loaded.st_mtime_ns,
              "max_difference": difference, "min_cosine": cosine, "same_tokens": same_tokens,
              "libraries": library_versions()}
    try:
        now = graph.stat()
    except OSError:
        return
    if (now.st_size, now.st_mtime_ns) != (loaded.st_size, loaded.st_mtime_ns) or _read_record(graph) == record:
        return
    try:
        with _replaced(_record_path(graph)) as partial:
            Path(partial).write_text(json.dumps(record), encoding="utf-8")
    except OSError as exc:  # a read-only cache: the next process loads the model again
        log.info("cannot record the check of %s: %s", graph, exc)


def _read_record(graph: Path) -> dict[str, Any]:
    """The record of `graph`'s check, where it names the file as it is now and was made by this
    record format and these libraries' versions (an upgrade checks the graph again); else empty."""
    try:
        record = json.loads(_record_path(graph).read_text(encoding="utf-8"))
        made = graph.stat()
    except (OSError, ValueError):
        return {}
    if (not isinstance(record, dict) or record.get("format") != RECORD_FORMAT
            or (record.get("size"), record.get("mtime_ns")) != (made.st_size, made.st_mtime_ns)
            or record.get("libraries") != library_versions()):
        return {}
    return record


def library_versions() -> dict[str, str]:
    """The installed versions of the libraries a graph's check depends on (read from their
    metadata, none imported): one of them upgraded, the graph is checked against the model again."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in CHECKED_WITH:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = ""
    return found


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
    for stale in graph.parent.glob(f"{source.stem}-int8-*.onnx*"):
        if stale not in (graph, _record_path(graph)):
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
