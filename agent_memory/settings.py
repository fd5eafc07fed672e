"""One settings object, read from `AGENT_MEMORY_*` environment variables or `.env` once, then passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BUNDLED_MODEL = "all-MiniLM-L6-v2"


class Settings(BaseSettings):
    """Everything configurable about agent-memory; build it once at the edge and hand it down."""

    model_config = SettingsConfigDict(env_prefix="AGENT_MEMORY_", env_file=".env", extra="ignore")

    # Storage
    storage_uri: str = "./data/lancedb"
    storage_options: dict[str, str] = Field(default_factory=dict)
    # Above this many rows in a scope wider than one user, an ANN index pays (see benchmarks/).
    ann_min_rows: int = 200_000

    # Embedding
    embedding_model: str = BUNDLED_MODEL
    embedding_device: Literal["auto", "cpu", "cuda"] = "auto"
    embedding_batch_size: int = Field(default=64, ge=1, le=4096)
    embedding_base_url: str | None = None
    embedding_api_key: str | None = None
    embedding_cache_size: int = Field(default=1024, ge=0)

    # LLM (OpenAI-compatible)
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str | None = None

    # HTTP API
    api_keys_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000

    # Input limits
    max_content_chars: int = Field(default=8_000, ge=1)
    max_batch_memories: int = Field(default=1_000, ge=1)
    max_metadata_bytes: int = Field(default=16_384, ge=2)

    # Redaction
    redaction_enabled: bool = True

    # Recall: weights of the fused score (normalised to sum 1 at query time).
    weight_semantic: float = Field(default=0.55, ge=0)
    weight_keyword: float = Field(default=0.30, ge=0)
    weight_recency: float = Field(default=0.08, ge=0)
    weight_importance: float = Field(default=0.07, ge=0)
    recency_half_life_days: float = Field(default=180.0, gt=0)
    recall_candidates: int = Field(default=50, ge=1, le=1_000)
    recall_dense_depth: int = Field(default=200, ge=1, le=10_000)
    # Share of [UNK] tokens above which the embedding model is taken not to read a text at all.
    oov_full_share: float = Field(default=0.5, gt=0, le=1)
    # Preceding turns folded into a message-derived memory's index_text.
    context_turns: int = Field(default=2, ge=0, le=10)
    # Turns with more keyword terms than this stand on their own and are indexed without context.
    context_max_terms: int = Field(default=12, ge=0)
    # How many times a memory's own terms count against its context's in the keyword index.
    content_boost: int = Field(default=2, ge=1, le=5)

    # Deferred access bookkeeping
    access_flush_seconds: float = Field(default=30.0, gt=0)
    access_flush_rows: int = Field(default=5_000, ge=1)

    # Bulk import and re-embedding (Ray Data jobs, see jobs/importer.py)
    # Rows committed together: the checkpoint of a resumable import (each chunk is a few commits).
    import_commit_rows: int = Field(default=5_000, ge=1)
    # Local files up to this size import in-process: Ray Data's fixed cost is seconds.
    import_local_max_bytes: int = Field(default=1_000_000, ge=0)
    # Texts per call of the embedding actors (the model batches inside with embedding_batch_size).
    import_embed_batch_rows: int = Field(default=512, ge=1)
    # Embedding actors: CPUs and GPUs each; the pool grows to what the cluster can hold, up to the max.
    import_embed_num_cpus: float = Field(default=1.0, gt=0)
    import_embed_num_gpus: float = Field(default=0.0, ge=0)
    import_embed_max_actors: int = Field(default=8, ge=1)

    @field_validator("storage_uri")
    @classmethod
    def _storage_uri_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("storage_uri must not be empty")
        return value

    @property
    def llm_configured(self) -> bool:
        """Whether an OpenAI-compatible LLM is configured for extraction."""
        return bool(self.llm_base_url and self.llm_model)
