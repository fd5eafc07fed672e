"""Bulk history import as a Ray Data job: read -> validate -> redact -> extract -> embed -> write.

Stages (each a function or callable class below, run by Ray Data or, for small local files, in
this process; both engines call the same functions, so they produce the same rows and ids):

1. read: the file's bytes (local path or object-store URI) become numbered rows.
2. validate + redact: `agent_memory.history.parse_turn` and the service's `message_records`
   (the core's redactor) turn each row into a message-log row, or into a reject (line, reason,
   the row itself redacted). Redactions are counted by kind.
3. extract (`raw`): turns are grouped by (org, user, session), ordered, and each becomes one
   episodic memory through the service's `raw_memories` + `prepare` (deterministic ids).
4. embed: a callable class on an actor pool (`ActorPoolStrategy`), the model loaded once per actor
   through `build_embedder`; `num_cpus`/`num_gpus` per actor come from settings.
5. write: the driver consumes the embedded stream in chunks of `import_commit_rows` and commits
   each chunk with `merge_insert` on `id` (insert-if-absent): messages, then memories (through
   the service's `write_records`, so creation events match the API path), then events.

Exactly once. Ids are deterministic, and every commit inserts only ids that are absent, so each
chunk is idempotent. A run killed part-way (the driver, or a worker: Ray retries the task or
restarts the actor) leaves a prefix of whole chunks committed (a Lance commit is atomic); the
re-run recomputes the same rows and inserts exactly the missing ones. We commit in chunks rather
than once per job so a killed import keeps its work, the jobs row can report progress, and the
driver never holds the whole import in memory. Ray's `Dataset.write_lance` is not used: it fails
with the published pylance and only appends (FIELD-NOTES.md), and an append cannot be re-run.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent_memory.embedding import Embedder, build_embedder
from agent_memory.errors import AgentMemoryError, InvalidInputError
from agent_memory.extraction import extract_and_store
from agent_memory.history import Format, ImportMode, detect_format, expand_paired, parse_turn, read_stream
from agent_memory.models import MemoryRecord, MessageRecord
from agent_memory.service import MemoryService, group_sessions
from agent_memory.settings import Settings
from jobs.runtime import EmbedMemories, embed_batch, embed_cpus, embed_pool, ensure_ray
from storage import open_store
from storage.connect import open_service

log = logging.getLogger(__name__)
Engine = Literal["auto", "ray", "local"]
DRY_RUN_ROWS = 100
# Rows per validation task: enough to amortise a task, small enough to use every core.
VALIDATE_BATCH_ROWS = 4_096


@dataclass
class ImportOptions:
    """What to import and how."""

    path: str
    fmt: Format = "auto"
    mode: ImportMode = "raw"
    org_id: str = "default"
    engine: Engine = "auto"
    report_path: str | None = None
    rejects_path: str | None = None
    job_id: str | None = None
    show_progress: bool = True
    # Submitted over HTTP, a file may only write to the caller's org: rows naming another are rejected.
    only_org: bool = False


@dataclass
class ImportResult:
    """The counts of one run; `as_dict` is the JSON report."""

    path: str
    mode: str
    engine: str = "local"
    rows_read: int = 0
    rows_rejected: int = 0
    messages: int = 0
    messages_logged: int = 0
    memories: int = 0
    memories_written: int = 0
    memories_skipped: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    report_path: str | None = None
    rejects_path: str | None = None
    embedding_model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The final JSON report."""
        rate = self.rows_read / self.duration_s if self.duration_s else 0.0
        return {
            "path": self.path, "mode": self.mode, "engine": self.engine, "rows_read": self.rows_read,
            "rows_rejected": self.rows_rejected, "rejects_by_reason": self.rejects_by_reason,
            "messages": self.messages, "messages_logged": self.messages_logged, "memories": self.memories,
            "memories_written": self.memories_written, "memories_skipped": self.memories_skipped,
            "redactions": dict(sorted(self.redactions.items())), "duration_s": round(self.duration_s, 3),
            "rows_per_s": round(rate, 1), "embedding_model": self.embedding_model,
            "report_path": self.report_path, "rejects_path": self.rejects_path,
        }


# -- stage 1: read ------------------------------------------------------------------------------


def numbered_rows(data: bytes, kind: Literal["jsonl", "csv", "parquet"]) -> list[dict[str, Any]]:
    """A history file's bytes as rows {line, row (JSON text) or None, error or None}."""
    out = []
    for number, row, error in read_stream(io.BytesIO(data), kind):
        text = None if row is None else json.dumps(row, ensure_ascii=False, default=str)
        out.append({"line": number, "row": text, "error": error})
    return out


READ_SCHEMA_FIELDS = (("line", "int64"), ("row", "string"), ("error", "string"))


def _read_file_rows(batch: Any, kind: str) -> Any:
    import pyarrow as pa

    rows: list[dict[str, Any]] = []
    for data in batch.column("bytes").to_pylist():
        rows.extend(numbered_rows(bytes(data), kind))  # type: ignore[arg-type]
    # An explicit schema: a column of nothing but nulls must stay a string column.
    schema = pa.schema([(name, getattr(pa, kind_)()) for name, kind_ in READ_SCHEMA_FIELDS])
    return pa.Table.from_pylist(rows, schema=schema)


# -- stage 2: validate and redact ---------------------------------------------------------------


def validate_rows(
    rows: Sequence[dict[str, Any]], service: MemoryService, org_id: str, *, only_org: bool = False
) -> list[dict[str, Any]]:
    """Each read row as turns: a message-log row (JSON) or a redacted reject, with redaction counts."""
    out: list[dict[str, Any]] = []
    redactor = service.redactor
    for item in rows:
        number = int(item["line"])
        if item.get("error") or item.get("row") is None:
            out.append(_reject_row(number, item.get("error") or "invalid_row", None, redactor))
            continue
        for turn_row in expand_paired(number, json.loads(item["row"])):
            try:
                turn = parse_turn(number, turn_row, org_id)
                if only_org and turn.org_id != org_id:
                    raise InvalidInputError(f"wrong_org: this import may only write to org {org_id!r}")
                counts = dict(redactor.redact(turn.message.content).counts)
                for value in turn.message.metadata.values():
                    if isinstance(value, str):
                        _add_counts(counts, redactor.redact(value).counts)
                record = service.message_records(
                    turn.org_id, turn.user_id, turn.session_id, [turn.message], agent_id=turn.agent_id
                )[0]
            except InvalidInputError as exc:
                reason = exc.message
                if "longer than" in reason:
                    reason = f"content_too_long: {reason}"
                out.append(_reject_row(number, reason, turn_row, redactor))
                continue
            out.append({
                "line": number, "org_id": record.org_id, "user_id": record.user_id,
                "session_id": record.session_id, "message": record.model_dump_json(), "reject": "",
                "redactions": json.dumps(counts),
            })
    return out


def _reject_row(number: int, reason: str, row: dict[str, Any] | None, redactor: Any) -> dict[str, Any]:
    """A reject as written to the rejects file: every string in it redacted, the reason included."""
    counts: dict[str, int] = {}

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            redaction = redactor.redact(value)
            for kind, n in redaction.counts.items():
                counts[kind] = counts.get(kind, 0) + n
            return redaction.text
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    reject = {"line": number, "reason": clean(reason[:500]), "row": clean(row) if row is not None else None}
    return {"line": number, "org_id": "", "user_id": "", "session_id": "", "message": "",
            "reject": json.dumps(reject, ensure_ascii=False, default=str), "redactions": json.dumps(counts)}


def _validate_batch(batch: Any, settings: Settings, org_id: str, only_org: bool) -> Any:
    service = MemoryService.row_builder(settings)
    return _arrow(validate_rows(batch.to_pylist(), service, org_id, only_org=only_org), VALIDATED_COLUMNS)


def _arrow(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> Any:
    """Rows as an Arrow table of string columns (`line` as int64)."""
    import pyarrow as pa

    schema = pa.schema([(n, pa.int64() if n == "line" else pa.string()) for n in names])
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], schema=schema)


VALIDATED_COLUMNS = ("line", "org_id", "user_id", "session_id", "message", "reject", "redactions")


# -- stage 3: extract ---------------------------------------------------------------------------


def raw_memory_rows(message_json: Sequence[str], service: MemoryService) -> list[dict[str, Any]]:
    """`raw` mode for the turns of one or more sessions: each turn with its memory (JSON) and the text
    its vector embeds."""
    messages = [MessageRecord.model_validate_json(m) for m in message_json]
    out = []
    for session in group_sessions(messages):
        for message, memory in zip(session, service.raw_memories(session), strict=True):
            record = service.prepare(message.org_id, memory)
            out.append({"org_id": message.org_id, "message": message.model_dump_json(),
                        "memory": record.model_dump_json(exclude={"vector"}), "vector_text": record.vector_text})
    return out


def _extract_group(batch: Any, settings: Settings) -> Any:
    rows = raw_memory_rows(batch.column("message").to_pylist(), MemoryService.row_builder(settings))
    return _arrow(rows, EXTRACTED_COLUMNS)


EXTRACTED_COLUMNS = ("org_id", "message", "memory", "vector_text")


# -- stage 4: embed -----------------------------------------------------------------------------


# Embedding actors: jobs/runtime.py (shared with re-embedding).


# -- stage 5: write -----------------------------------------------------------------------------


class ImportWriter:
    """Commits embedded chunks (insert-if-absent on id) and keeps the counts and the jobs row."""

    def __init__(self, settings: Settings, result: ImportResult, *, org_id: str, job_id: str | None,
                 store: Any = None, on_commit: Callable[[int], None] | None = None) -> None:
        self.settings = settings
        self.result = result
        self.org_id = org_id
        self.job_id = job_id
        self.service: MemoryService | None = None
        self._store = store
        self.on_commit = on_commit
        self.committed = 0
        # Extraction modes keep each user's turns for the per-user extraction after the log is written.
        self.turns: dict[tuple[str, str], list[MessageRecord]] | None = None

    def open(self, model: str, dim: int, embedder: Embedder | None = None) -> MemoryService:
        """The service writing to the store (created for this model, or checked against it)."""
        if self.service is None:
            self.service = open_service(self.settings, embedder=embedder, with_embedder=False, store=self._store,
                                        model=(model, dim))
        return self.service

    def commit_messages(self, message_json: Sequence[str], service: MemoryService) -> None:
        """Log one chunk of messages (one commit per org)."""
        by_org: dict[str, list[MessageRecord]] = {}
        for text in message_json:
            record = MessageRecord.model_validate_json(text)
            by_org.setdefault(record.org_id, []).append(record)
            if self.turns is not None:
                self.turns.setdefault((record.org_id, record.user_id), []).append(record)
        for org, records in by_org.items():
            self.result.messages_logged += len(service.log_messages(org, records))

    def commit(self, batch: dict[str, Any]) -> None:
        """Commit one embedded chunk: its messages, then its memories and their creation events."""
        vectors = np.asarray(batch["vector"], dtype=np.float32)
        if not len(vectors):
            return
        service = self.open(str(batch["model"][0]), int(vectors.shape[1]))
        self.result.embedding_model = str(batch["model"][0])
        self.commit_messages(list(batch["message"]), service)
        by_org: dict[str, list[MemoryRecord]] = {}
        for text, vector, oov in zip(batch["memory"], vectors, batch["oov"], strict=True):
            record = MemoryRecord.model_validate_json(text)
            record.vector = vector.tolist()
            record.oov = float(oov)
            by_org.setdefault(record.org_id, []).append(record)
        for org, records in by_org.items():
            written = service.write_records(org, records, actor="import", on_conflict="skip")
            self.result.memories_written += len(written.created)
            self.result.memories_skipped += len(records) - len(written.created)
        self.committed += len(vectors)
        self._progress()

    def _progress(self) -> None:
        if self.on_commit is not None:
            self.on_commit(self.committed)


# -- running ------------------------------------------------------------------------------------


def _columns(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, list[Any]]:
    return {name: [r.get(name) for r in rows] for name in names}


def _add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    for kind, n in counts.items():
        into[kind] = into.get(kind, 0) + int(n)


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def object_store_filesystem(path: str, storage_options: dict[str, str]) -> Any:
    """A pyarrow filesystem for an `s3://` URI from LanceDB-style storage options (None for local)."""
    if _is_local(path):
        return None
    if not path.startswith("s3://"):
        raise InvalidInputError(f"unsupported URI {path!r}: give a local path or an s3:// URI")
    from pyarrow import fs

    opts = {k.lower(): v for k, v in storage_options.items()}
    endpoint = opts.get("aws_endpoint") or opts.get("endpoint")
    scheme = None
    if endpoint and "://" in endpoint:
        scheme, endpoint = endpoint.split("://", 1)
    return fs.S3FileSystem(
        access_key=opts.get("aws_access_key_id"), secret_key=opts.get("aws_secret_access_key"),
        session_token=opts.get("aws_session_token"), region=opts.get("aws_region") or opts.get("region"),
        endpoint_override=endpoint, scheme=scheme or ("http" if opts.get("allow_http") == "true" else "https"),
    )


def _read_bytes(path: str, settings: Settings) -> bytes:
    filesystem = object_store_filesystem(path, settings.storage_options)
    if filesystem is None:
        local = path.removeprefix("file://")
        if not Path(local).exists():
            raise InvalidInputError(f"no such file: {path}")
        return Path(local).read_bytes()
    with filesystem.open_input_stream(path.removeprefix("s3://")) as handle:
        return handle.read()


def choose_engine(options: ImportOptions, settings: Settings) -> Literal["ray", "local"]:
    """`ray` for object-store URIs and files over `import_local_max_bytes`; small local files run here."""
    if options.engine != "auto":
        return options.engine
    if not _is_local(options.path):
        return "ray"
    local = Path(options.path.removeprefix("file://"))
    if not local.exists():
        raise InvalidInputError(f"no such file: {options.path}")
    return "local" if local.stat().st_size <= settings.import_local_max_bytes else "ray"


def _require_extractor(mode: str) -> Callable[..., Any] | None:
    """None for `raw`; the extraction entry point for `rules` and `llm`; an error for anything else."""
    if mode == "raw":
        return None
    if mode not in ("rules", "llm"):
        raise InvalidInputError(f"mode must be raw, rules or llm, not {mode!r}")
    return extract_and_store


def _report_paths(options: ImportOptions) -> tuple[Path, Path]:
    if options.report_path:
        report = Path(options.report_path)
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        stem = Path(options.path.rstrip("/")).name.split(".")[0] or "import"
        report = Path("import-reports") / f"{stem}-{stamp}.report.json"
    rejects = Path(options.rejects_path) if options.rejects_path else report.with_name(
        report.name.removesuffix(".report.json").removesuffix(".json") + ".rejects.jsonl"
    )
    return report, rejects


class _Progress:
    """A terminal progress bar (tqdm) and the jobs row, both fed by committed-row counts."""

    def __init__(self, total: int, show: bool, job: Callable[[float], None] | None) -> None:
        self.bar = None
        if show:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="msg", desc="import", file=sys.stderr, dynamic_ncols=True)
        self.total = max(total, 1)
        self.job = job
        self.done = 0

    def __call__(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.done)
        self.done = done
        if self.job is not None:
            self.job(min(done / self.total, 0.99))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_import(settings: Settings, options: ImportOptions, *, store: Any = None) -> ImportResult:
    """Import a history file end to end and write its report and rejects file; return the counts."""
    started = time.perf_counter()
    detect_format(options.path, options.fmt)
    extractor = _require_extractor(options.mode)
    engine = choose_engine(options, settings)
    result = ImportResult(path=options.path, mode=options.mode, engine=engine)
    report_path, rejects_path = _report_paths(options)
    jobs = _JobRow(settings, options, store) if options.job_id else None
    if jobs:
        jobs.update("running", 0.0)
    try:
        if engine == "ray":
            writer = _run_ray(settings, options, result, rejects_path, store, jobs)
        else:
            writer = _run_local(settings, options, result, rejects_path, store, jobs)
        if writer.service is not None:
            if extractor is not None:
                _extract_per_user(writer, extractor, options.mode)
            # Fold the new fragments into the indexes, so recall sees the import at full speed. The
            # rows are committed already: a compaction that still fails leaves them to the
            # Writer's next pass rather than failing the import.
            try:
                writer.service.store.optimize()
            except Exception as exc:  # noqa: BLE001 - upkeep, not the import's outcome
                log.warning("the import's closing compaction failed, the rows are stored: %s", exc)
        result.duration_s = time.perf_counter() - started
        result.report_path = str(report_path)
        result.rejects_path = str(rejects_path) if result.rows_rejected else None
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result.as_dict(), indent=2, ensure_ascii=False) + "\n")
    except AgentMemoryError as exc:
        if jobs:
            jobs.update("failed", None, error=f"{exc.code}: {exc.message}")
        raise
    except Exception as exc:
        if jobs:
            jobs.update("failed", None, error=f"{type(exc).__name__}: {exc}")
        raise
    if jobs:
        jobs.update("succeeded", 1.0, report=result.as_dict())
    return result


def _extract_per_user(writer: ImportWriter, extractor: Callable[..., Any], mode: str) -> None:
    """`rules`/`llm`: the extraction module, one (org, user) at a time, in conversation order."""
    assert writer.service is not None and writer.turns is not None
    for (org_id, _user), turns in sorted(writer.turns.items()):
        turns.sort(key=lambda m: (m.created_at, m.session_id, m.message_id))
        extractor(writer.service, org_id, turns, mode, actor="import")


def _write_rejects(rejects: list[dict[str, Any]], path: Path, result: ImportResult) -> None:
    """Write the (already redacted) rejects, sorted by line, and count them by reason."""
    rejects.sort(key=lambda r: r["line"])
    result.rows_rejected = len(rejects)
    for reject in rejects:
        key = str(reject["reason"]).split(":")[0]
        result.rejects_by_reason[key] = result.rejects_by_reason.get(key, 0) + 1
    if rejects:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            for reject in rejects:
                handle.write(json.dumps(reject, ensure_ascii=False, default=str) + "\n")


def _run_local(settings: Settings, options: ImportOptions, result: ImportResult, rejects_path: Path,
               store: Any, jobs: _JobRow | None) -> ImportWriter:
    """The same stages, in this process: for small files, where Ray Data's fixed cost dominates."""
    kind = detect_format(options.path, options.fmt)
    rows = numbered_rows(_read_bytes(options.path, settings), kind)
    builder = MemoryService.row_builder(settings)
    validated = validate_rows(rows, builder, options.org_id, only_org=options.only_org)
    messages, rejects = _split(validated, result)
    _write_rejects(rejects, rejects_path, result)
    extracted = raw_memory_rows(messages, builder) if options.mode == "raw" else []
    result.messages = len(messages)
    result.memories = len(extracted)
    progress = _Progress(len(extracted), options.show_progress, jobs.progress if jobs else None)
    writer = ImportWriter(settings, result, org_id=options.org_id, job_id=options.job_id, store=store,
                          on_commit=progress)
    try:
        embedder = build_embedder(settings)
        step = settings.import_commit_rows
        for start in range(0, len(extracted), step):
            chunk = _columns(extracted[start : start + step], EXTRACTED_COLUMNS)
            writer.commit(embed_batch(embedder, chunk))
        if options.mode != "raw" and messages:
            writer.turns = {}
            service = writer.open(embedder.name, embedder.dim, embedder)
            for start in range(0, len(messages), step):
                writer.commit_messages(messages[start : start + step], service)
    finally:
        progress.close()
    return writer


def _split(validated: Sequence[dict[str, Any]], result: ImportResult) -> tuple[list[str], list[dict[str, Any]]]:
    messages: list[str] = []
    rejects: list[dict[str, Any]] = []
    result.rows_read += len(validated)
    for row in validated:
        _add_counts(result.redactions, json.loads(row["redactions"] or "{}"))
        if row["reject"]:
            rejects.append(json.loads(row["reject"]))
        else:
            messages.append(row["message"])
    return messages, rejects


def _run_ray(settings: Settings, options: ImportOptions, result: ImportResult, rejects_path: Path,
             store: Any, jobs: _JobRow | None) -> ImportWriter:
    """The pipeline on Ray Data; the driver commits the embedded stream chunk by chunk."""
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    ensure_ray()
    context = DataContext.get_current()
    context.enable_progress_bars = options.show_progress
    kind = detect_format(options.path, options.fmt)
    filesystem = object_store_filesystem(options.path, settings.storage_options)
    if filesystem is None and not Path(options.path.removeprefix("file://")).exists():
        raise InvalidInputError(f"no such file: {options.path}")
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    raw = ray.data.read_binary_files(options.path.removeprefix("file://"), filesystem=filesystem)
    read = raw.map_batches(_read_file_rows, fn_kwargs={"kind": kind}, batch_size=1, batch_format="pyarrow")
    # One file is one block: split it so validation uses every core.
    validated = (
        read.repartition(target_num_rows_per_block=VALIDATE_BATCH_ROWS)
        .map_batches(_validate_batch, fn_kwargs={"settings": settings, "org_id": options.org_id, "only_org": options.only_org},
                     batch_size=None, batch_format="pyarrow")
        .materialize()
    )
    messages_only = validated.filter(expr="reject == ''")
    # Only rejects and rows with redactions come back to the driver: few, even for a huge file.
    rejects = [json.loads(r["reject"]) for r in validated.filter(expr="reject != ''")
               .select_columns(["reject"]).take_all()]
    for row in validated.filter(expr="redactions != '{}'").select_columns(["redactions"]).take_all():
        _add_counts(result.redactions, json.loads(row["redactions"]))
    result.rows_read = validated.count()
    _write_rejects(rejects, rejects_path, result)
    result.messages = result.rows_read - result.rows_rejected
    writer = ImportWriter(settings, result, org_id=options.org_id, job_id=options.job_id, store=store)
    if options.mode != "raw":
        embedder = build_embedder(settings)
        writer.turns = {}
        service = writer.open(embedder.name, embedder.dim, embedder)
        for batch in messages_only.iter_batches(batch_size=settings.import_commit_rows, batch_format="numpy"):
            writer.commit_messages(list(batch["message"]), service)
        return writer
    extracted = (
        # Few partitions: a shuffle's cost grows with them, and sessions are small.
        messages_only.groupby(["org_id", "user_id", "session_id"],
                              num_partitions=max(1, min(4 * cpus, result.messages // 5_000 + 1)))
        .map_groups(_extract_group, fn_kwargs={"settings": settings}, batch_format="pyarrow")
        # Extraction is cheap; finishing it first leaves every core to the embedding actors.
        .materialize()
    )
    result.memories = result.messages
    low, high = embed_pool(settings)
    embedded = extracted.repartition(target_num_rows_per_block=settings.import_embed_batch_rows).map_batches(
        EmbedMemories,
        fn_constructor_kwargs={"settings": settings},
        compute=ActorPoolStrategy(min_size=low, max_size=max(low, min(high, cpus))
                                  if settings.import_embed_num_gpus == 0 else high),
        batch_size=settings.import_embed_batch_rows,
        num_cpus=embed_cpus(settings) if settings.import_embed_num_gpus == 0 else settings.import_embed_num_cpus,
        num_gpus=settings.import_embed_num_gpus or None,
        batch_format="numpy",
    )
    progress = _Progress(result.memories, options.show_progress, jobs.progress if jobs else None)
    writer.on_commit = progress
    try:
        for batch in embedded.iter_batches(batch_size=settings.import_commit_rows, batch_format="numpy"):
            writer.commit(batch)
    finally:
        progress.close()
    return writer


# -- dry run ------------------------------------------------------------------------------------


def dry_run(settings: Settings, options: ImportOptions, *, limit: int = DRY_RUN_ROWS) -> dict[str, Any]:
    """The first `limit` rows through every stage, nothing written: what each row would become."""
    _require_extractor(options.mode)
    kind = detect_format(options.path, options.fmt)
    rows = numbered_rows(_read_bytes(options.path, settings), kind)[:limit]
    builder = MemoryService.row_builder(settings)
    validated = validate_rows(rows, builder, options.org_id)
    result = ImportResult(path=options.path, mode=options.mode, engine="dry-run")
    messages, rejects = _split(validated, result)
    out_rows: list[dict[str, Any]] = [{"line": r["line"], "rejected": r["reason"], "row": r["row"]} for r in rejects]
    if options.mode == "raw" and messages:
        extracted = raw_memory_rows(messages, builder)
        embedded = embed_batch(build_embedder(settings), _columns(extracted, EXTRACTED_COLUMNS))
        for i, row in enumerate(extracted):
            message = json.loads(row["message"])
            memory = json.loads(row["memory"])
            vector = embedded["vector"][i]
            out_rows.append({
                "line": next((v["line"] for v in validated if v["message"] and
                              json.loads(v["message"])["id"] == message["id"]), None),
                "message": {k: message[k] for k in ("user_id", "session_id", "message_id", "role", "content",
                                                    "created_at")},
                "memory": {k: memory[k] for k in ("id", "memory_type", "content", "index_text", "created_at")},
                "vector": {"dim": int(vector.shape[0]), "norm": round(float(np.linalg.norm(vector)), 4),
                           "oov": round(float(embedded["oov"][i]), 3)},
            })
    out_rows.sort(key=lambda r: r["line"] or 0)
    return {"dry_run": True, "rows_read": result.rows_read, "rows_rejected": len(rejects),
            "redactions": result.redactions, "written": 0, "rows": out_rows}


# -- jobs ---------------------------------------------------------------------------------------


class _JobRow:
    """The `jobs` row of a submitted import: state, progress, error, report."""

    def __init__(self, settings: Settings, options: ImportOptions, store: Any) -> None:
        self.store = store or open_store(settings, embedding_model=None, embedding_dim=None)
        self.org_id = options.org_id
        self.job_id = str(options.job_id)
        self._last = 0.0

    def update(self, state: str, progress: float | None, *, error: str | None = None,
               report: dict[str, Any] | None = None) -> None:
        job = self.store.get_job(self.org_id, self.job_id) or {}
        now = datetime.now(timezone.utc)
        job.update({"id": self.job_id, "org_id": self.org_id, "kind": "import", "state": state,
                    "updated_at": now, "error": error})
        job.setdefault("created_at", now)
        if progress is not None:
            job["progress"] = progress
        if report is not None:
            job["report"] = report
        self.store.put_job(self.org_id, job)

    def progress(self, share: float) -> None:
        # A commit per jobs-row update: at most every 2 s, not per chunk of a fast import.
        if time.monotonic() - self._last >= 2.0:
            self._last = time.monotonic()
            self.update("running", share)


def submit_import(
    settings: Settings, *, path: str, fmt: Format = "auto", mode: ImportMode = "raw", org_id: str = "default",
    store: Any = None,
) -> str:
    """Record a queued `import` job and start it on the connected Ray cluster; return the job id.

    The job runs in a detached Ray actor (`ImportRunner`), so it outlives the replica or process
    that submitted it, and it updates its jobs row as it goes; `GET /v1/jobs/{id}` reads that row.
    The caller must have Ray initialised (the Serve app has). Ray's job-submission API is not
    used: the local Ray that `agent-memory serve` and the tests start has no dashboard, hence no
    job API, while an actor works the same on a laptop and on a cluster.
    """
    import ray

    detect_format(path, fmt)
    _require_extractor(mode)
    store = store or open_store(settings, embedding_model=None, embedding_dim=None)
    job_id = uuid.uuid4().hex
    now = datetime.now(timezone.utc)
    store.put_job(org_id, {"id": job_id, "org_id": org_id, "kind": "import", "state": "queued", "progress": 0.0,
                           "created_at": now, "updated_at": now, "error": None,
                           "report": {"path": path, "mode": mode, "format": fmt}})
    options = ImportOptions(path=path, fmt=fmt, mode=mode, org_id=org_id, engine="auto", job_id=job_id,
                            show_progress=False, only_org=True, report_path=str(job_report_dir(settings) / f"{job_id}.report.json"))
    # Submitted from the Serve app, whose replicas hold part of each node: embedding actors
    # reserve at most half a CPU so that the pool can start beside them.
    settings = settings.model_copy(update={"import_embed_num_cpus": min(settings.import_embed_num_cpus, 0.5)})
    # num_cpus=0: the runner only drives and commits; the pipeline's own stages reserve the CPUs.
    runner = ray.remote(num_cpus=0, max_restarts=0)(ImportRunner).options(
        name=f"import-{job_id}", lifetime="detached"
    ).remote()
    runner.run.remote(settings, options)
    return job_id


def job_report_dir(settings: Settings) -> Path:
    """Where submitted imports leave their report and rejects: beside a local store, else ./import-reports."""
    if _is_local(settings.storage_uri):
        return Path(settings.storage_uri.removeprefix("file://")).resolve().parent / "import-reports"
    return Path("import-reports").resolve()


class ImportRunner:
    """The detached actor of a submitted import: runs it, then exits."""

    def run(self, settings: Settings, options: ImportOptions) -> dict[str, Any]:
        """Run the import (failures land in its jobs row) and end this actor."""
        import ray

        try:
            return run_import(settings, options).as_dict()
        except Exception as exc:  # the jobs row already says why; nobody awaits this result
            log.warning("import job %s failed: %s", options.job_id, exc)
            return {"error": str(exc)}
        finally:
            ray.actor.exit_actor()


def main(argv: list[str] | None = None) -> int:
    """`python -m jobs.importer`: the same job as `agent-memory import` (for Ray job submission)."""
    parser = argparse.ArgumentParser(prog="python -m jobs.importer")
    parser.add_argument("path")
    parser.add_argument("--format", default="auto", choices=["auto", "jsonl", "csv", "parquet"])
    parser.add_argument("--mode", default="raw", choices=["raw", "rules", "llm"])
    parser.add_argument("--org-id", default="default")
    parser.add_argument("--job-id", default=None)
    parser.add_argument("--address", default=None)
    args = parser.parse_args(argv)
    settings = Settings()
    if args.address:
        ensure_ray(args.address)
    result = run_import(settings, ImportOptions(path=args.path, fmt=args.format, mode=args.mode,
                                                org_id=args.org_id, job_id=args.job_id, show_progress=False))
    print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())


