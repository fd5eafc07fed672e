"""An OpenAI-compatible `/embeddings` endpoint as an embedder."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agent_memory.embedding.base import OPENAI_PREFIX, Embedder, unit_length
from agent_memory.errors import UnavailableError


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
        return unit_length(np.asarray(out, dtype=np.float32))
