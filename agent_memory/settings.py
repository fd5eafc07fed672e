"""One settings object, read from `AGENT_MEMORY_*` environment variables or `.env` once, then passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
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
    # Local models on CPU run on ONNX Runtime (`auto`), the same vectors with less overhead a call;
    # `torch` keeps PyTorch; GPUs always use torch.
    embedding_backend: Literal["auto", "torch", "onnx"] = "auto"
    embedding_batch_size: int = Field(default=64, ge=1, le=4096)
    embedding_base_url: str | None = None
    embedding_api_key: str | None = None
    embedding_cache_size: int = Field(default=1024, ge=0)

    # LLM (OpenAI-compatible)
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_model: str | None = None
    llm_timeout_s: float = Field(default=30.0, gt=0)
    # Retries of one request on 429, 5xx, timeouts and dropped connections, with exponential backoff.
    llm_max_retries: int = Field(default=3, ge=0, le=10)
    llm_backoff_s: float = Field(default=1.0, ge=0)
    llm_backoff_max_s: float = Field(default=30.0, ge=0)
    # Requests per minute this process sends to the LLM (0: no limit).
    llm_requests_per_minute: float = Field(default=60.0, ge=0)
    # `json_schema` where the server supports structured output; `json_object` for those that only do JSON mode.
    llm_response_format: Literal["json_schema", "json_object"] = "json_schema"
    llm_temperature: float = Field(default=0.0, ge=0, le=2)

    # Extraction (conversations and `--mode rules|llm` imports)
    # Candidates below this confidence are not stored (the messages stay in the log).
    extraction_min_confidence: float = Field(default=0.6, ge=0, le=1)
    # A candidate this close to an active memory reinforces it instead of adding a copy: term overlap
    # (Dice, any language) or cosine (only where the embedding model reads both texts).
    extraction_reinforce_lexical: float = Field(default=0.7, gt=0, le=1)
    extraction_reinforce_cosine: float = Field(default=0.92, gt=0, le=1)
    # Existing memories of the user shown to the LLM, and compared with each candidate.
    extraction_neighbours: int = Field(default=8, ge=1, le=50)
    # Conversation mode when a request names none: `llm` if an LLM is configured, else `rules`.
    conversation_mode: Literal["raw", "rules", "llm"] | None = None
    # Background extraction: jobs waiting or running before submissions are refused (HTTP 429).
    conversation_queue_size: int = Field(default=256, ge=1)
    extraction_concurrency: int = Field(default=1, ge=1, le=64)
    extraction_worker_cpus: float = Field(default=0.25, ge=0)
    extraction_job_attempts: int = Field(default=3, ge=1, le=20)
    extraction_retry_backoff_s: float = Field(default=5.0, ge=0)

    # HTTP API
    api_keys_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000

    # Serving
    serve_config: Path | None = None  # a Serve config YAML; default cluster/serve_config.yaml when present
    embedding_num_gpus: float = Field(default=0.0, ge=0)
    embedder_timeout_s: float = Field(default=5.0, gt=0)
    # Where search embeds its queries: in the ingress replica (`local`), through the Embedder
    # deployment (`embedder`), or `auto`: in the replica unless the Embedder holds a GPU.
    query_embedding: Literal["auto", "local", "embedder"] = "auto"
    recall_threads: int = Field(default=8, ge=1, le=64)  # concurrent recalls per ingress replica
    # `int8`: the ingress's query model with int8 MatMul weights (ONNX Runtime on CPU only): the
    # model's CPU per query about 40% of the exact graph's, vectors at cosine ~0.99 to the exact
    # model's. What is stored (writes, imports, re-embedding) is always embedded exactly. See
    # README, "Query precision".
    query_embedding_precision: Literal["fp32", "int8"] = "fp32"
    # Threads of each model call of an ingress replica's query model (ONNX Runtime on CPU); unset:
    # see `query_threads`.
    query_embedding_threads: int | None = Field(default=None, ge=1, le=64)
    write_window_ms: float = Field(default=5.0, ge=0)
    write_max_rows: int = Field(default=512, ge=1)
    writer_optimize_every: int = Field(default=100, ge=1)  # commits between compactions by the writer
    # ... and at least this long between them: each rewrites every index, which every replica reloads.
    writer_optimize_min_seconds: float = Field(default=600.0, ge=0)
    # seconds between the writer's upkeep of recent fragments (LanceStore.fold_new_rows; 0: never)
    writer_upkeep_seconds: float = Field(default=2.0, ge=0)
    writer_fold_commits: int = Field(default=4, ge=1)  # the writer's commits that bring the upkeep forward
    writer_reindex_rows: int = Field(default=5_000, ge=1)  # uncovered rows that make the upkeep update the indexes
    max_body_bytes: int = Field(default=2_000_000, ge=1_024)
    rate_limit_per_minute: int = Field(default=0, ge=0)  # per API key and ingress replica; 0 = off

    # Input limits
    max_content_chars: int = Field(default=8_000, ge=1)
    max_batch_memories: int = Field(default=1_000, ge=1)
    max_metadata_bytes: int = Field(default=16_384, ge=2)

    # Redaction
    redaction_enabled: bool = True

    # Recall: weights of the fused score (normalised to sum 1 at query time; chosen in docs/recall.md).
    weight_semantic: float = Field(default=0.50, ge=0)
    weight_keyword: float = Field(default=0.40, ge=0)
    weight_recency: float = Field(default=0.08, ge=0)
    weight_importance: float = Field(default=0.07, ge=0)
    recency_half_life_days: float = Field(default=180.0, gt=0)
    # Each signal is scaled to its best match in the pool, but a weak best match stays weak: the
    # scale is at least this cosine, and at least this share of the query's idf mass (BM25).
    recall_semantic_scale: float = Field(default=0.5, ge=0, le=1)
    recall_keyword_scale: float = Field(default=0.75, ge=0, le=5)
    # The noise floor: hits whose fused score (0..1) is under it are left out unless a search sets
    # its own `min_score` (0 keeps every hit). Calibrated in docs/recall.md.
    recall_min_score: float = Field(default=0.1, ge=0, le=1)
    recall_candidates: int = Field(default=50, ge=1, le=1_000)
    # The vector retriever's depth for scopes searched through the indexes; a scanned user's pool
    # keeps the cosine of every memory, so that each keyword hit has its true similarity.
    recall_dense_depth: int = Field(default=200, ge=1, le=10_000)
    # A user with at most this many matching memories is scored in process from one scan;
    # larger scopes use the store's vector and full-text indexes (benchmarks/recall_latency.py).
    recall_scan_limit: int = Field(default=2_000, ge=0, le=100_000)
    # Share of [UNK] tokens above which the embedding model is taken not to read a text at all.
    oov_full_share: float = Field(default=0.5, gt=0, le=1)
    # Preceding turns folded into a message-derived memory's index_text.
    context_turns: int = Field(default=2, ge=0, le=10)
    # Turns with more keyword terms than this (long messages that stand on their own) are indexed
    # without context.
    context_max_terms: int = Field(default=200, ge=0)
    # How many times a memory's own terms count against its context's in the keyword index.
    content_boost: int = Field(default=2, ge=1, le=5)

    # Deferred access bookkeeping
    access_flush_seconds: float = Field(default=30.0, gt=0)
    access_flush_rows: int = Field(default=5_000, ge=1)

    # Consolidation (see agent_memory/consolidation.py and jobs/consolidate.py)
    # Cosine similarity at or above which two memories the model can read are restatements.
    consolidation_similarity: float = Field(default=0.85, gt=0, le=1)
    # One content word swapped for another needs this cosine, and never less than
    # consolidation_similarity: the model scores a synonym ("named" for "called") about as close
    # as another thing ("cat" for "dog"); the held-out templates of benchmarks/consolidation.py
    # have other things one word apart above 0.9 ("never commutes by bike" / "... by motorcycle").
    consolidation_reworded_similarity: float = Field(default=0.92, gt=0, le=1)
    # Other wording that shares a content word besides the subject: words added ("writes code
    # in" for "codes in") or changed on both sides, between memories with the same negation,
    # people, time, intent and names. Measured on the held-out templates, this keeps precision at
    # 0.95 or more, where the one-word swap above does not.
    consolidation_rephrased_similarity: float = Field(default=0.85, gt=0, le=1)
    # Where the model cannot read a text (its [UNK] share is above `consolidation_oov_guard`), two
    # memories merge only with the same content words and a lexical similarity (Dice over words,
    # CJK characters and bigrams, function words aside) of at least this.
    consolidation_lexical_similarity: float = Field(default=0.8, gt=0, le=1)
    # With an LLM configured, the near misses the rules refuse (the same stance and names, a shared
    # content word, and a cosine, or where the model cannot read a text a lexical similarity, at or
    # above these) are put to it, up to consolidation_judge_max_pairs per user and run.
    consolidation_llm_judge: bool = True
    consolidation_judge_similarity: float = Field(default=0.7, gt=0, le=1)
    consolidation_judge_lexical_similarity: float = Field(default=0.3, gt=0, le=1)
    consolidation_judge_max_pairs: int = Field(default=100, ge=0, le=500)
    consolidation_oov_guard: float = Field(default=0.1, ge=0, le=1)
    # A memory neither recalled nor changed for this long loses importance, once per period.
    consolidation_decay_after_days: float = Field(default=90.0, gt=0)
    consolidation_decay_period_days: float = Field(default=30.0, gt=0)
    consolidation_decay_factor: float = Field(default=0.9, gt=0, lt=1)
    consolidation_decay_floor: float = Field(default=0.05, ge=0, le=1)
    # Superseded and expired memories are deleted this long after they left recall.
    consolidation_retention_days: float = Field(default=30.0, ge=0)
    # Old table versions kept after compaction (readers of an older snapshot keep working).
    consolidation_keep_versions_hours: float = Field(default=1.0, ge=0)
    # The run lease expires this long after its last renewal, so a killed run never blocks the next.
    consolidation_lease_seconds: float = Field(default=900.0, gt=0)
    # Users changed between compactions during a run: each merge is a small commit and a small
    # fragment, and reads slow down as unindexed fragments pile up (0 turns this off).
    consolidation_compact_every_users: int = Field(default=100, ge=0)
    consolidation_workers: int = Field(default=2, ge=1, le=256)
    # CPUs each consolidation actor reserves: a fraction, so a run fits beside the Serve app on 2 CPUs.
    consolidation_worker_cpus: float = Field(default=0.25, gt=0)
    # Scheduling inside the Serve app: off with one setting; an interval wins over the daily time.
    consolidation_schedule_enabled: bool = True
    consolidation_interval_minutes: float | None = Field(default=None, gt=0)
    consolidation_daily_at: str = "03:00"

    # Bulk import and re-embedding (Ray Data jobs, see jobs/importer.py)
    # Local files that `POST /v1/jobs/import` may read live under this directory.
    import_root: str = "./imports"
    # Rows committed together: the checkpoint of a resumable import (each chunk is a few commits).
    import_commit_rows: int = Field(default=5_000, ge=1)
    # Local files up to this size import in-process: Ray Data's fixed cost is seconds.
    import_local_max_bytes: int = Field(default=1_000_000, ge=0)
    # Texts per call of the embedding actors (the model batches inside with import_embed_model_batch).
    import_embed_batch_rows: int = Field(default=512, ge=1)
    # Texts per forward pass inside an embedding actor. Unset: 16 for a local model on CPU actors,
    # which run one thread each and there pad least (measured: 98 texts/s per thread at 16, 83 at
    # 64); embedding_batch_size on GPU actors and for `openai:` endpoints.
    import_embed_model_batch: int | None = Field(default=None, ge=1, le=4096)
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

    @model_validator(mode="after")
    def _int8_needs_onnx(self) -> Settings:
        if self.query_embedding_precision == "int8" and self.embedding_backend == "torch":
            raise ValueError("query_embedding_precision int8 runs on ONNX Runtime: embedding_backend must be auto or onnx")
        return self

    @field_validator("consolidation_daily_at")
    @classmethod
    def _daily_time(cls, value: str) -> str:
        hour, _, minute = value.partition(":")
        if not (hour.isdigit() and minute.isdigit() and 0 <= int(hour) < 24 and 0 <= int(minute) < 60):
            raise ValueError("consolidation_daily_at must be a UTC time HH:MM, e.g. 03:00")
        return f"{int(hour):02d}:{int(minute):02d}"

    @property
    def query_threads(self) -> int:
        """QUERY_EMBEDDING_THREADS, else 2 for the exact query model and 1 for int8. Exact, two
        threads took a lone query from 4.6 to 3.8 ms and a batch of 8 from 25 to 16 ms, for a tenth
        more CPU (Ray gives a fractional-CPU replica one thread otherwise); the int8 model's calls
        are short enough that the second thread cost more CPU than it saved time (8 clients at 200k:
        89 searches/s with two, 98 with one)."""
        return self.query_threads_at(self.query_embedding_precision)

    def query_threads_at(self, precision: str) -> int:
        """The query model's threads were it run at `precision` (see `query_threads`)."""
        if self.query_embedding_threads is not None:
            return self.query_embedding_threads
        return 1 if precision == "int8" else 2

    @property
    def llm_configured(self) -> bool:
        """Whether an OpenAI-compatible LLM is configured for extraction."""
        return bool(self.llm_base_url and self.llm_model)

    @property
    def default_conversation_mode(self) -> Literal["raw", "rules", "llm"]:
        """The extraction mode of a conversation that names none."""
        if self.conversation_mode is not None:
            return self.conversation_mode
        return "llm" if self.llm_configured else "rules"
