"""Embedders: the interface (`base`), local models (`local`, on ONNX Runtime via `onnx` where it
can), OpenAI-compatible endpoints (`remote`), and `build_embedder`, which picks one from settings.
"""

from __future__ import annotations

from agent_memory.embedding.base import (
    OPENAI_PREFIX,
    PRECISIONS,
    BatchingEmbedder,
    Embedder,
    GlossingEmbedder,
)
from agent_memory.embedding.local import SentenceTransformerEmbedder, bundled_model_path, resolve_device
from agent_memory.embedding.remote import OpenAIEmbedder
from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings

__all__ = [
    "OPENAI_PREFIX", "PRECISIONS", "BatchingEmbedder", "Embedder", "GlossingEmbedder", "OpenAIEmbedder", "SentenceTransformerEmbedder",
    "build_embedder", "bundled_model_path", "check_device", "resolve_device",
]


def check_device(settings: Settings) -> None:
    """Refuse, where a process starts, a device the settings name that this machine lacks (a local
    model on `cuda` where torch sees no GPU): UnavailableError saying so, not a failure at the
    first request."""
    if settings.embedding.device == "cuda" and not settings.embedding.model.strip().startswith(OPENAI_PREFIX):
        resolve_device("cuda")


def build_embedder(settings: Settings, *, threads: int | None = None, precision: str = "fp32") -> Embedder:
    """The embedder the settings name; `threads` per model call on CPU (default: the process's);
    `precision` int8 for a local model on ONNX Runtime (queries; see OnnxEncoder.for_model)."""
    name = settings.embedding.model.strip()
    if not name:
        raise InvalidInputError("embedding_model must not be empty")
    if name.startswith(OPENAI_PREFIX):
        return OpenAIEmbedder(
            name[len(OPENAI_PREFIX) :],
            base_url=settings.embedding.base_url or settings.llm.base_url,
            api_key=settings.embedding.api_key or settings.llm.api_key,
            batch_size=settings.embedding.batch_size,
            cache_size=settings.embedding.cache_size,
        )
    glossed = settings.embedding.glosses_chinese()
    local = SentenceTransformerEmbedder(
        name,
        device=settings.embedding.device,
        batch_size=settings.embedding.batch_size,
        cache_size=0 if glossed else settings.embedding.cache_size,
        backend=settings.embedding.backend,
        threads=threads,
        precision=precision,
    )
    return GlossingEmbedder(local, settings.embedding.cache_size) if glossed else local
