"""The groups of settings, one per concern: each reads its own `AGENT_MEMORY_*` variables (or
`.env`), under the flat names they have always had. `agent_memory.settings.Settings` holds one of
each; `docs/settings.md` is generated from these classes (`python -m cli.settings_doc`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

BUNDLED_MODEL = "all-MiniLM-L6-v2"
PREFIX = "AGENT_MEMORY_"


def env(name: str, default: Any = ..., **constraints: Any) -> Any:
    """A field read from `AGENT_MEMORY_<NAME>` (its flat name), whatever the field is called in its group."""
    return Field(default, validation_alias=PREFIX + name.upper(), **constraints)


class Group(BaseSettings):
    """A group of settings: each field read from its `AGENT_MEMORY_*` variable, else its default."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, env_file=".env", extra="ignore", populate_by_name=True,
                                      frozen=True)
    # The group's fields under their flat names (the variable without its prefix, lower case).
    flat_names: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.flat_names = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.flat_names = {
            (str(info.validation_alias).removeprefix(PREFIX).lower() if info.validation_alias else name): name
            for name, info in cls.model_fields.items()
        }


class StorageSettings(Group):
    """Where the store lives."""

    uri: str = env("storage_uri", "./data/lancedb", description="LanceDB URI: a local directory or `s3://bucket/path`.")
    options: dict[str, str] = env("storage_options", default_factory=dict,
                                  description="Object-store options (endpoint, region, keys) as JSON.")
    ann_min_rows: int = Field(200_000, description="Rows of a scope wider than one user above which an ANN index pays.")

    @field_validator("uri")
    @classmethod
    def _uri_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("storage_uri must not be empty")
        return value


class EmbeddingSettings(Group):
    """The embedding model, and how the Serve app embeds queries."""

    model: str = env("embedding_model", BUNDLED_MODEL,
                     description="sentence-transformers name or path, or `openai:<model>` for an OpenAI-compatible endpoint.")
    device: Literal["auto", "cpu", "cuda"] = env("embedding_device", "auto", description=(
        "`auto`: CUDA where torch sees a device, else CPU. `cuda` where torch sees none: `serve` and `import` "
        "refuse to start."))
    backend: Literal["auto", "torch", "onnx"] = env(
        "embedding_backend", "auto",
        description="Local models on CPU run on ONNX Runtime (`auto`), the same vectors with less overhead a call; "
                    "`torch` keeps PyTorch. On CUDA, `auto` runs torch in half precision and `onnx` ONNX Runtime's "
                    "GPU build (the `gpu` extra).")
    batch_size: int = env("embedding_batch_size", 64, ge=1, le=4096, description="Texts per model call.")
    base_url: str | None = env("embedding_base_url", None, description="Endpoint of an `openai:` model (default: the LLM's).")
    api_key: str | None = env("embedding_api_key", None, description="Key of that endpoint (default: the LLM's).")
    cache_size: int = env("embedding_cache_size", 1024, ge=0, description="Query vectors cached per process.")
    num_gpus: float = env("embedding_num_gpus", 0.0, ge=0, description="GPUs of the Serve app's Embedder deployment.")
    timeout_s: float = env("embedder_timeout_s", 5.0, gt=0, description="How long a request waits for the Embedder.")
    query_path: Literal["auto", "local", "embedder"] = env(
        "query_embedding", "auto",
        description="Where search embeds its queries: in the ingress replica (`local`), through the Embedder "
                    "deployment (`embedder`), or `auto`: in the replica unless the Embedder holds a GPU.")
    query_precision: Literal["fp32", "int8"] = env(
        "query_embedding_precision", "int8",
        description="`int8`: the ingress's query model with int8 MatMul weights (ONNX Runtime on CPU only), about "
                    "40% of the exact graph's CPU per query, vectors at cosine ~0.99 to the exact model's, recall@10 "
                    "on the dev sets within 2 questions in 1,000 of `fp32`'s (docs/performance.md#query-precision). "
                    "What is stored is always embedded exactly (docs/serving.md). With `embedding_backend` torch, "
                    "unless set: `fp32`.")
    query_threads: int | None = env(
        "query_embedding_threads", None, ge=1, le=64,
        description="Threads of each model call of an ingress replica's query model; unset: 2 for the exact model, "
                    "1 for int8.")

    gloss_chinese: Literal["auto", "on", "off"] = env(
        "embedding_gloss_chinese", "auto",
        description="Embed Chinese texts as their English dictionary gloss, for a local model that reads English "
                    "only; `auto`: for the bundled model. Consolidation compares glossed Chinese by its words "
                    "(docs/consolidation.md). The store records whether its Chinese was glossed; "
                    "`agent-memory reindex` re-embeds it where that differs (docs/recall.md).")

    @model_validator(mode="after")
    def _int8_needs_onnx(self) -> EmbeddingSettings:
        if self.query_precision == "int8" and self.backend == "torch":
            if "query_precision" in self.model_fields_set:
                raise ValueError("query_embedding_precision int8 runs on ONNX Runtime: embedding_backend must be auto or onnx")
            object.__setattr__(self, "query_precision", "fp32")  # the default, where int8 cannot run
        return self

    def glosses_chinese(self) -> bool:
        """Whether Chinese texts are embedded as their gloss (never through an `openai:` endpoint)."""
        if self.gloss_chinese == "auto":
            return self._bundled()
        return self.gloss_chinese == "on" and not self.model.strip().startswith("openai:")

    def reads_chinese(self) -> bool:
        """Whether the model reads Chinese as written: neither the bundled English model (whose
        Chinese vectors are of the gloss or of `[UNK]`s, whatever the store was written with) nor
        a model given the gloss."""
        return not (self._bundled() or self.glosses_chinese())

    def _bundled(self) -> bool:
        return self.model.strip() in (BUNDLED_MODEL, f"sentence-transformers/{BUNDLED_MODEL}")

    def query_threads_at(self, precision: str) -> int:
        """The query model's threads were it run at `precision`. Exact, two threads took a lone query
        from 4.6 to 3.8 ms and a batch of 8 from 25 to 16 ms, for a tenth more CPU; the int8 model's
        calls are short enough that a second thread cost more CPU than it saved time."""
        if self.query_threads is not None:
            return self.query_threads
        return 1 if precision == "int8" else 2

    @property
    def query_model_threads(self) -> int:
        """The threads of the query model at the configured precision."""
        return self.query_threads_at(self.query_precision)


class LLMSettings(Group):
    """An OpenAI-compatible LLM, for extraction, consolidation's summaries and its judge."""

    base_url: str | None = env("llm_base_url", None, description="Base URL of the OpenAI-compatible API.")
    api_key: str | None = env("llm_api_key", None, description="Its API key.")
    model: str | None = env("llm_model", None, description="The model name; with base_url set, the LLM is configured.")
    timeout_s: float = env("llm_timeout_s", 30.0, gt=0, description="Timeout of one request.")
    max_retries: int = env("llm_max_retries", 3, ge=0, le=10,
                           description="Retries of one request on 429, 5xx, timeouts and dropped connections.")
    backoff_s: float = env("llm_backoff_s", 1.0, ge=0, description="First backoff between retries (doubling).")
    backoff_max_s: float = env("llm_backoff_max_s", 30.0, ge=0, description="Longest backoff.")
    requests_per_minute: float = env("llm_requests_per_minute", 60.0, ge=0,
                                     description="Requests per minute this process sends (0: no limit).")
    response_format: Literal["json_schema", "json_object"] = env(
        "llm_response_format", "json_schema",
        description="`json_schema` where the server supports structured output; `json_object` for JSON mode only.")
    temperature: float = env("llm_temperature", 0.0, ge=0, le=2, description="Sampling temperature.")

    @property
    def configured(self) -> bool:
        """Whether an LLM is configured (a base URL and a model)."""
        return bool(self.base_url and self.model)


class ExtractionSettings(Group):
    """Extraction of memories from conversations and `--mode rules|llm` imports."""

    min_confidence: float = env("extraction_min_confidence", 0.6, ge=0, le=1,
                                description="Candidates below this confidence are not stored (the messages stay in the log).")
    decision: Literal["learned", "rules"] = env(
        "extraction_decision", "learned",
        description="What sets an offline candidate's confidence: `learned`, the bundled model's probability that it "
                    "states a durable fact about the user, blended with its rule's (agent_memory/decision/CARD.md); `rules`, "
                    "the rule that proposed it.")
    reinforce_lexical: float = env(
        "extraction_reinforce_lexical", 0.7, gt=0, le=1,
        description="Term overlap (Dice) at which a candidate reinforces an active memory instead of adding a copy.")
    reinforce_cosine: float = env(
        "extraction_reinforce_cosine", 0.92, gt=0, le=1,
        description="The same, by cosine (only where the embedding model reads both texts).")
    retract_similarity: float = env(
        "extraction_retract_similarity", 0.3, gt=0, le=1,
        description="How close by term overlap an earlier memory must be for a change of mind that names no old "
                    "value (\"from now on\", \"以后都\") to take it back.")
    retract_cosine: float = env(
        "extraction_retract_cosine", 0.6, gt=0, le=1,
        description="The same by cosine, where the embedding model reads both texts.")
    neighbours: int = env("extraction_neighbours", 8, ge=1, le=50,
                          description="Existing memories of the user shown to the LLM and compared with each candidate.")
    conversation_mode: Literal["raw", "rules", "llm"] | None = Field(
        None, description="Mode of a conversation that names none: `llm` if an LLM is configured, else `rules`.")
    queue_size: int = env("conversation_queue_size", 256, ge=1,
                          description="Background jobs waiting or running before submissions are refused (HTTP 429).")
    concurrency: int = env("extraction_concurrency", 1, ge=1, le=64, description="Extraction workers.")
    worker_cpus: float = env("extraction_worker_cpus", 0.25, ge=0, description="CPUs each worker reserves.")
    job_attempts: int = env("extraction_job_attempts", 3, ge=1, le=20, description="Attempts of a conversation job.")
    retry_backoff_s: float = env("extraction_retry_backoff_s", 5.0, ge=0, description="Wait before a job's next attempt.")


class AuthSettings(Group):
    """Who may call the API, and what is kept of what they send."""

    api_keys_file: Path | None = Field(
        None, description="API keys (JSON, made with `agent-memory keys create`; re-read when it changes); unset: no "
                          "keys, loopback only, org `default`.")
    rate_limit_per_minute: int = Field(
        0, ge=0, description="Requests a minute per API key across all ingress replicas (0: off); a key's own "
                             "`rate_limit_per_minute` in the keys file wins.")
    redaction_enabled: bool = Field(True, description="Redact PII (emails, phones, cards, ids, keys) before storing.")
    default_visibility: Literal["shared", "private"] = Field(
        "shared", description="Who reads a memory of an agent written without `visibility`: every agent of the user "
                              "(`shared`) or only that agent (`private`); org-level keys read both.")
    default_visibility_by_org: dict[str, Literal["shared", "private"]] = Field(
        default_factory=dict, description="The same for single orgs as JSON, `{\"acme\": \"private\"}`, in place of "
                                          "the one above.")

    def visibility_of(self, org_id: str) -> Literal["shared", "private"]:
        """The org's default visibility of an agent's memories."""
        return self.default_visibility_by_org.get(org_id, self.default_visibility)


class LimitSettings(Group):
    """Input limits and per-org quotas: larger input, or a write over the quota, is refused with a clear error."""

    max_body_bytes: int = Field(2_000_000, ge=1_024, description="Largest HTTP request body.")
    max_content_chars: int = Field(8_000, ge=1, description="Longest memory or message content.")
    max_batch_memories: int = Field(1_000, ge=1, description="Memories in one write.")
    max_metadata_bytes: int = Field(16_384, ge=2, description="Largest metadata (as JSON).")
    quota_memories_per_org: int = Field(
        0, ge=0, description="Active memories an org may hold; writes over it are refused (403 `quota_exceeded`), "
                             "0: no quota.")
    quota_memories_by_org: dict[str, int] = Field(
        default_factory=dict,
        description="Quotas of single orgs as JSON, `{\"acme\": 1000000}`, in place of the one above (0: none).")
    quota_refresh_seconds: float = Field(
        30.0, gt=0, description="How often the Writer recounts an org's active memories for its quota (deletes, "
                                "consolidation, imports and extraction are seen then).")

    @field_validator("quota_memories_by_org")
    @classmethod
    def _quotas_not_negative(cls, value: dict[str, int]) -> dict[str, int]:
        negative = sorted(org for org, quota in value.items() if quota < 0)
        if negative:
            raise ValueError(f"quota_memories_by_org: quotas must be >= 0 (0: none), not for {', '.join(negative)}")
        return value


class ServingSettings(Group):
    """The Serve app: where it listens and how many recalls a replica runs at once."""

    host: str | None = Field(None, description="Listen address of `agent-memory serve` (`--host` wins; "
                                                "default: the Serve config's, else 127.0.0.1).")
    port: int | None = Field(None, ge=1, le=65535, description="Its port (`--port` wins; default: the Serve "
                                                              "config's, else 8000).")
    config: Path | None = env("serve_config", None,
                              description="A Serve config YAML; default `cluster/serve_config.yaml` when present.")
    recall_threads: int = Field(8, ge=1, le=64, description="Concurrent recalls per ingress replica.")
    proxy_location: Literal["HeadOnly", "EveryNode"] | None = Field(
        None, description="Where Serve's HTTP proxy runs (default: the Serve config's, else EveryNode); "
                          "HeadOnly where several nodes share one host and so one port.")
    stats_port: int | None = env("haproxy_stats_port", None, ge=0, le=65535,
                                 description="Port of HAProxy's stats page on a local stack. Unset: 8404, or a free "
                                             "port where another process holds it; a number: that port, or no "
                                             "start; 0: any free port. `agent-memory serve` prints the one in use.")
    metrics_port: int | None = env("haproxy_metrics_port", None, ge=0, le=65535,
                                   description="Port of HAProxy's Prometheus exporter on a local stack, as for the "
                                               "stats page (unset: 9101, or a free port where it is held).")
    monitor_host: str = env("haproxy_monitor_host", "127.0.0.1",
                            description="Where HAProxy's stats page and exporter listen: loopback unless set "
                                        "(`0.0.0.0`: every interface; see docs/serving.md before you do).")


class WriterSettings(Group):
    """The Writer deployment: write batching, and its upkeep of the store."""

    shards: int = env("writer_shards", 1, ge=1, le=64,
                      description="Writer shards: each user's changes go to one, by a hash of (org, user). "
                                  "Changing it moves users between shards (docs/scaling.md).")
    window_ms: float = env("write_window_ms", 5.0, ge=0, description="How long a write waits for others to share its commit.")
    max_rows: int = env("write_max_rows", 512, ge=1, description="Rows of one commit.")
    optimize_every: int = env("writer_optimize_every", 100, ge=1, description="Commits between full compactions.")
    optimize_min_seconds: float = env(
        "writer_optimize_min_seconds", 600.0, ge=0,
        description="And at least this long between them: each rewrites every index, which every replica reloads.")
    upkeep_seconds: float = env("writer_upkeep_seconds", 2.0, ge=0,
                                description="Seconds between the upkeep of recent fragments (0: never).")
    fold_commits: int = env("writer_fold_commits", 4, ge=1, description="Commits that bring the upkeep forward.")
    reindex_rows: int = env("writer_reindex_rows", 5_000, ge=1,
                            description="Rows outside the indexes that make the upkeep update them.")


class RecallSettings(Group):
    """Recall: what each signal sees and weighs, the noise floor, and the search paths."""

    weight_semantic: float = Field(0.50, ge=0, description="Weight of vector similarity (weights are normalised to sum 1).")
    weight_keyword: float = Field(0.45, ge=0, description="Weight of BM25.")
    weight_recency: float = Field(0.08, ge=0, description="Weight of recency.")
    weight_importance: float = Field(0.07, ge=0, description="Weight of importance.")
    recency_half_life_days: float = Field(180.0, gt=0, description="Half-life of the recency signal.")
    semantic_scale: float = env("recall_semantic_scale", 0.4, ge=0, le=1,
                                description="Cosine is scaled to the pool's best, but to at least this cosine.")
    keyword_scale: float = env("recall_keyword_scale", 0.5, ge=0, le=5,
                               description="BM25 is scaled to the pool's best, but to at least this share of the query's idf mass.")
    min_score: float = env("recall_min_score", 0.1, ge=0, le=1,
                           description="The noise floor: hits whose fused score is under it are left out unless a search "
                                       "sets its own `min_score` (0 keeps every hit). Calibrated in docs/recall.md.")
    candidates: int = env("recall_candidates", 50, ge=1, le=1_000, description="Candidates each retriever returns.")
    dense_depth: int = env("recall_dense_depth", 200, ge=1, le=10_000,
                           description="The vector retriever's depth for scopes searched through the indexes.")
    scan_limit: int = env("recall_scan_limit", 2_000, ge=0, le=100_000,
                          description="A user with at most this many matching memories is scored in process from one scan.")
    oov_full_share: float = Field(0.5, gt=0, le=1,
                                  description="Share of [UNK] tokens above which the model is taken not to read a text.")
    asking_semantic_share: float = Field(0.5, ge=0, le=1,
                                         description="Share of its semantic signal a memory that only asks keeps: a "
                                                     "question is near the question asked, not its answer.")
    unread_semantic_weight: float = Field(0.0, ge=0, le=1,
                                          description="Share of the semantic weight kept where the model reads neither "
                                                      "text of a pair (the rest goes to keywords).")
    feedback_depth: int = env("recall_feedback_depth", 0, ge=0, le=50,
                              description="Best memories whose mean vector the query moves towards (0: no feedback).")
    feedback_weight: float = env("recall_feedback_weight", 0.0, ge=0, le=5,
                                 description="How far the query moves towards them.")
    session_weight: float = env("recall_session_weight", 0.0, ge=0, le=1,
                                description="Share of a memory's score given by how well its whole session matches.")
    neighbour_share: float = env("recall_neighbour_share", 0.0, ge=0, le=1,
                                 description="A turn scores at least this share of the better of the turns beside it.")
    diversity: float = env("recall_diversity", 0.0, ge=0, le=1,
                           description="Maximal marginal relevance: the weight of a hit's likeness to those above it.")
    context_turns: int = Field(2, ge=0, le=10, description="Preceding turns in a raw memory's keywords.")
    context_max_terms: int = Field(200, ge=0, description="Turns with more terms than this are indexed without context.")
    content_boost: int = Field(2, ge=1, le=5, description="How many times a memory's own terms count against its context's.")
    access_flush_seconds: float = Field(30.0, gt=0, description="Seconds between flushes of recall hits to the access log.")
    access_flush_rows: int = Field(5_000, ge=1, description="Pending hits that bring a flush forward.")


class ConsolidationSettings(Group):
    """Consolidation: merging restatements, expiry, decay and purge; its schedule and its workers."""

    similarity: float = env("consolidation_similarity", 0.85, gt=0, le=1,
                            description="Cosine at or above which two memories the model can read are restatements.")
    reworded_similarity: float = env(
        "consolidation_reworded_similarity", 0.92, gt=0, le=1,
        description="One content word swapped for another needs this cosine (a synonym scores about as close as "
                    "another thing).")
    rephrased_similarity: float = env(
        "consolidation_rephrased_similarity", 0.85, gt=0, le=1,
        description="Other wording that shares a content word besides the subject, with the same negation, people, "
                    "time, intent and names.")
    lexical_similarity: float = env(
        "consolidation_lexical_similarity", 0.8, gt=0, le=1,
        description="Where the model cannot read a text: at least this order-free overlap of words and characters, "
                    "weighted by their idf over the user's memories.")
    llm_judge: bool = env("consolidation_llm_judge", True, description="Put the near misses the rules refuse to the LLM.")
    judge_similarity: float = env("consolidation_judge_similarity", 0.7, gt=0, le=1,
                                  description="Cosine from which a near miss goes to the judge.")
    judge_lexical_similarity: float = env("consolidation_judge_lexical_similarity", 0.3, gt=0, le=1,
                                          description="Lexical similarity from which one does, where the model cannot read.")
    judge_reviews: bool = env(
        "consolidation_judge_reviews", True,
        description="Also put the rules' doubtful links (one word swapped, other wording, Chinese not word for word the "
                    "same) to the LLM judge; a pair it calls two facts is not merged.")
    judge_max_pairs: int = env("consolidation_judge_max_pairs", 100, ge=0, le=500, description="Pairs judged per user and run.")
    oov_guard: float = env("consolidation_oov_guard", 0.1, ge=0, le=1,
                           description="[UNK] share above which a text is compared lexically, not by cosine.")
    decay_after_days: float = env("consolidation_decay_after_days", 90.0, gt=0,
                                  description="A memory neither recalled nor changed this long loses importance.")
    decay_period_days: float = env("consolidation_decay_period_days", 30.0, gt=0, description="Once per this period.")
    decay_factor: float = env("consolidation_decay_factor", 0.9, gt=0, lt=1, description="By this factor.")
    decay_floor: float = env("consolidation_decay_floor", 0.05, ge=0, le=1, description="Down to this importance.")
    retention_days: float = env("consolidation_retention_days", 0.0, ge=0,
                                description="Superseded and expired memories, with their audit events, are deleted this "
                                            "long after they left recall (0: kept for ever).")
    message_retention_days: float = env("consolidation_message_retention_days", 0.0, ge=0,
                                        description="Logged messages older than this are deleted (0: kept for ever).")
    keep_versions_hours: float = env("consolidation_keep_versions_hours", 1.0, ge=0,
                                     description="Old table versions kept after compaction.")
    lease_seconds: float = env("consolidation_lease_seconds", 900.0, gt=0,
                               description="The run lease expires this long after its last renewal.")
    compact_every_users: int = env("consolidation_compact_every_users", 100, ge=0,
                                   description="Users changed between compactions during a run (0: off).")
    workers: int = env("consolidation_workers", 2, ge=1, le=256, description="Ray Data actors of a run.")
    worker_cpus: float = env("consolidation_worker_cpus", 0.25, gt=0, description="CPUs each actor reserves.")
    schedule_enabled: bool = env("consolidation_schedule_enabled", True, description="Scheduled runs inside the Serve app.")
    interval_minutes: float | None = env("consolidation_interval_minutes", None, gt=0,
                                         description="Minutes between runs; wins over the daily time.")
    daily_at: str = env("consolidation_daily_at", "03:00", description="UTC time HH:MM of the daily run.")

    @field_validator("daily_at")
    @classmethod
    def _daily_time(cls, value: str) -> str:
        hour, _, minute = value.partition(":")
        if not (hour.isdigit() and minute.isdigit() and 0 <= int(hour) < 24 and 0 <= int(minute) < 60):
            raise ValueError("consolidation_daily_at must be a UTC time HH:MM, e.g. 03:00")
        return f"{int(hour):02d}:{int(minute):02d}"


class FeedbackSettings(Group):
    """Feedback on memories: how far a vote moves a memory's importance, and how fast that fades."""

    step: float = env("feedback_step", 0.3, gt=0, le=1, description="How far one `useful` or `wrong` vote moves the "
                                                                    "memory's importance, up or down.")
    max_offset: float = env("feedback_max_offset", 0.5, ge=0, le=1,
                            description="The most that votes together move it from its own importance.")
    half_life_days: float = env("feedback_half_life_days", 30.0, gt=0,
                                description="What votes moved halves in this time, back toward the memory's own importance.")
    rate_limit_per_minute: int = env("feedback_rate_limit_per_minute", 60, ge=0,
                                     description="Votes a minute per API key, across the ingress replicas (0: no limit "
                                                 "of their own).")


class ImportSettings(Group):
    """Bulk import and re-embedding (Ray Data jobs)."""

    root: str = env("import_root", "./imports", description="Local files that `POST /v1/jobs/import` may read live here.")
    commit_rows: int = env("import_commit_rows", 5_000, ge=1, description="Rows committed together: a resumable checkpoint.")
    local_max_bytes: int = env("import_local_max_bytes", 1_000_000, ge=0,
                               description="Local files up to this size import in-process (Ray Data's fixed cost is seconds).")
    embed_batch_rows: int = env("import_embed_batch_rows", 512, ge=1,
                                description="Texts per call of an embedding actor (in-process: per model call).")
    embed_model_batch: int | None = env(
        "import_embed_model_batch", None, ge=1, le=4096,
        description="Texts per forward pass inside an actor; unset: 16 on CPU actors, the embedding batch size on "
                    "GPUs and for `openai:` endpoints.")
    embed_num_cpus: float = env("import_embed_num_cpus", 1.0, gt=0, description="CPUs of each embedding actor.")
    embed_num_gpus: float = env("import_embed_num_gpus", 0.0, ge=0, description="GPUs of each embedding actor.")
    embed_max_actors: int = env("import_embed_max_actors", 8, ge=1, description="Most embedding actors.")


class ContextSettings(Group):
    """The prompt block of `POST /v1/context`: budget, tokenizer, summaries of older turns."""

    max_tokens: int = env("context_max_tokens", 1_024, ge=32, le=131_072,
                          description="Budget of a context block that names none.")
    max_tokens_limit: int = env("context_max_tokens_limit", 32_768, ge=32, le=1_048_576,
                                description="The largest budget a request may ask for.")
    tokenizer: str | None = env(
        "context_tokenizer", None,
        description="A `tokenizer.json` (Hugging Face tokenizers) that budgets are counted with; unset: the bundled "
                    "model's WordPiece tokenizer (one token per Chinese character). Point it at your LLM's for "
                    "exact counts.")
    top_k: int = env("context_top_k", 8, ge=0, le=200, description="Memories recalled into a block that names no top_k.")
    memory_share: float = env("context_memory_share", 0.35, ge=0, le=1,
                              description="Share of the budget for recalled memories (what they leave goes to turns).")
    summary_share: float = env("context_summary_share", 0.2, ge=0, le=1,
                               description="Share of the budget for the summary of older turns.")
    session_turns: int = env("context_session_turns", 1_000, ge=1, le=100_000,
                             description="Most recent turns of a session read for its window and summary.")
    summary: Literal["auto", "llm", "extractive"] = env(
        "context_summary", "auto",
        description="How older turns are summarised: `llm` (the configured model), `extractive` (offline), "
                    "`auto`: the LLM where one is configured.")
    summary_cache_size: int = env("context_summary_cache_size", 1_024, ge=0,
                                  description="Session summaries cached per process.")
    summary_cache_seconds: float = env("context_summary_cache_seconds", 600.0, ge=0,
                                       description="How long a cached summary is kept unused.")
