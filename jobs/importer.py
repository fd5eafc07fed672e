"""Bulk history import: read -> validate -> redact -> extract -> embed -> write, the one importer.

Entry points: `run_import` (a file into the settings' store, on Ray Data or in this process; the
CLI's `agent-memory import`), `import_into` (a file into a service already open: `eval`, the
demo's sample, tests, benchmarks), `dry_run` (the first rows through every stage, nothing
written) and `submit_import` (a queued job on the cluster; the Serve app's import endpoint).
Each returns or records one report, `ImportResult`.

Stages (modules beside this one; both engines call the same functions, so they produce the same
rows and ids):

1. read (`import_rows`): the file's bytes (local path or object-store URI) become numbered rows;
   a ChatGPT or Claude export (`import_exports`) is streamed, each conversation one row of its
   turns, in order, as history rows of the `user_id` given.
2. validate + redact (`import_rows`): `agent_memory.history.parse_turn` and the service's
   `message_records` (the core's redactor) turn each row into a message-log row, or into a
   reject (line, reason, the row itself redacted). Redactions are counted by kind. An export's
   conversation is all or nothing: any part of it that fails rejects it whole, as one reject.
3. extract (`raw`, `import_rows`): turns are grouped by (org, user, session), ordered, and each
   becomes one episodic memory through the service's `raw_memories` + `prepare` (deterministic ids).
4. embed (`jobs.runtime`): a callable class on an actor pool (`ActorPoolStrategy`), the model
   loaded once per actor through `build_embedder`; `num_cpus`/`num_gpus` per actor come from
   settings. The local engine embeds each chunk in this process.
5. write (`import_write`): the driver consumes the embedded stream in chunks of
   `import_commit_rows` and commits each chunk with `merge_insert` on `id` (insert-if-absent):
   messages, then memories (through the service's `write_records`, so creation events match the
   API path), then events. `rules`/`llm` log the turns, then extract per user in turn order.

The engines: `import_local` (small files, and `import_into`) and `import_ray` (object-store URIs
and files over `import_local_max_bytes`).

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
import json
import logging
import sys
import time
import uuid
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent_memory.embedding import build_embedder
from agent_memory.errors import AgentMemoryError, InvalidInputError, UnavailableError
from agent_memory.history import ImportMode
from agent_memory.job_record import JobRecord
from agent_memory.models import OrgScope, utcnow
from agent_memory.service import MemoryService
from agent_memory.settings import Settings, job_report_dir
from jobs.import_exports import EXPORT_FORMATS
from jobs.import_local import run_local
from jobs.import_ray import run_ray
from jobs.import_report import ImportFormat, ImportOptions, ImportResult
from jobs.import_rows import (
    EXTRACTED_COLUMNS,
    FileKind,
    as_columns,
    check_user,
    is_local,
    raw_memory_rows,
    read_rows,
    resolve_format,
    split_validated,
    validate_rows,
)
from jobs.import_write import ImportWriter
from jobs.runtime import embed_batch, ensure_ray
from storage import open_store
from storage.connect import maintenance_of

__all__ = ["ImportOptions", "ImportResult", "dry_run", "import_into", "run_import", "submit_import"]

log = logging.getLogger(__name__)
DRY_RUN_ROWS = 100
KIND = "import"


def check_mode(mode: str) -> None:
    """Refuse a mode other than `raw`, `rules` or `llm`, before anything is read or written."""
    if mode not in ("raw", "rules", "llm"):
        raise InvalidInputError(f"mode must be raw, rules or llm, not {mode!r}")


def check_options(options: ImportOptions, settings: Settings) -> FileKind:
    """The file's format (detected where `auto`), once the options make sense together; nothing
    is written before."""
    kind = resolve_format(options.path, options.fmt, settings)
    check_mode(options.mode)
    check_user(kind, options.user_id)
    return kind


def choose_engine(options: ImportOptions, settings: Settings) -> Literal["ray", "local"]:
    """`ray` for object-store URIs and files over `import_local_max_bytes`; small local files run here."""
    if options.engine != "auto":
        return options.engine
    if not is_local(options.path):
        return "ray"
    local = Path(options.path.removeprefix("file://"))
    if not local.exists():
        raise InvalidInputError(f"no such file: {options.path}")
    return "local" if local.stat().st_size <= settings.imports.local_max_bytes else "ray"


def report_paths(options: ImportOptions) -> tuple[Path, Path]:
    """Where a run writes its report and its rejects: as given, else under ./import-reports."""
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


def run_import(settings: Settings, options: ImportOptions, *, store: Any = None) -> ImportResult:
    """Import a history file end to end and write its report and rejects file; return the counts."""
    started = time.perf_counter()
    options = replace(options, fmt=check_options(options, settings))
    engine = choose_engine(options, settings)
    result = ImportResult(path=options.path, mode=options.mode, engine=engine, org_id=options.org_id)
    report_path, rejects_path = report_paths(options)
    job = _JobRow(settings, options, store) if options.job_id else None
    if job:
        job.update("running", 0.0)
    on_progress = job.progress if job else None
    writer = ImportWriter(settings, result, store=store, keep_turns=options.mode != "raw", actor=options.actor)
    try:
        if engine == "ray":
            run_ray(settings, options, result, writer, rejects_path=rejects_path, on_progress=on_progress)
        else:
            run_local(options, result, writer, MemoryService.row_builder(settings), rejects_path=rejects_path,
                      on_progress=on_progress)
        if writer.service is not None:
            writer.extract_per_user(options.mode)
            # Fold the new fragments into the indexes, so recall sees the import at full speed. The
            # rows are committed already: a compaction that still fails leaves them to the
            # Writer's next pass rather than failing the import.
            try:
                maintenance_of(writer.service.store).optimize()
            except Exception as exc:  # noqa: BLE001 - upkeep, not the import's outcome
                log.warning("the import's closing compaction failed, the rows are stored: %s", exc)
        result.duration_s = time.perf_counter() - started
        result.report_path = str(report_path)
        result.rejects_path = str(rejects_path) if result.rows_rejected else None
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(result.as_dict(), indent=2, ensure_ascii=False) + "\n")
    except AgentMemoryError as exc:
        if job:
            job.update("failed", None, error=f"{exc.code}: {exc.message}")
        raise
    except Exception as exc:
        if job:
            job.update("failed", None, error=f"{type(exc).__name__}: {exc}")
        raise
    if job:
        job.update("succeeded", 1.0, report=result.as_dict())
    return result


def import_into(
    service: MemoryService, path: str | Path, *, fmt: ImportFormat = "auto", mode: ImportMode = "raw",
    org_id: str = "default", force_org: bool = False, user_id: str | None = None,
) -> ImportResult:
    """Import a history file into an open service, in this process: its store, its model, its clock.

    The local engine of `run_import`, for callers that hold a service (`agent-memory eval`, the
    demo's sample, tests, benchmarks). It writes no report or rejects file, and leaves compaction
    to the caller. `org_id` is the org of rows that name none; with `force_org` it is every row's.
    `user_id` is the user of a chat export's turns.
    """
    started = time.perf_counter()
    options = ImportOptions(path=str(path), fmt=fmt, mode=mode, org_id=org_id, engine="local",
                            show_progress=False, force_org=force_org, user_id=user_id)
    options.fmt = check_options(options, service.settings)
    if service.embedder is None:
        raise UnavailableError("import_into needs a service with its embedding model loaded")
    result = ImportResult(path=options.path, mode=mode, engine="local")
    writer = ImportWriter(service.settings, result, service=service, keep_turns=mode != "raw")
    run_local(options, result, writer, service, embedder=service.embedder)
    writer.extract_per_user(mode)
    result.duration_s = time.perf_counter() - started
    return result


def dry_run(settings: Settings, options: ImportOptions, *, limit: int = DRY_RUN_ROWS) -> dict[str, Any]:
    """The first `limit` rows through every stage, nothing written: what each row would become.
    For a chat export, the first conversations, up to `limit` turns."""
    kind = check_options(options, settings)
    conversations = kind in EXPORT_FORMATS
    rows: list[dict[str, Any]] = []
    turns = 0
    for row in read_rows(options.path, kind, settings, options.user_id):
        rows.append(row)
        turns += len(json.loads(row["row"])["turns"]) if conversations else 1
        if turns >= limit:
            break
    builder = MemoryService.row_builder(settings)
    validated = validate_rows(rows, builder, options.org_id, force_org=options.force_org,
                              conversations=conversations)
    result = ImportResult(path=options.path, mode=options.mode, engine="dry-run")
    messages, rejects = split_validated(validated, result)
    out_rows: list[dict[str, Any]] = [{"line": r["line"], "rejected": r["reason"], "row": r["row"]} for r in rejects]
    if options.mode == "raw" and messages:
        extracted = raw_memory_rows(messages, builder)
        embedded = embed_batch(build_embedder(settings), as_columns(extracted, EXTRACTED_COLUMNS))
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
        stored = self.store.get_job(OrgScope(self.org_id), self.job_id)
        now = utcnow()
        job = JobRecord.from_row(stored) if stored else JobRecord.new(self.job_id, self.org_id, KIND, now=now)
        job = replace(job, kind=KIND, state=state, updated_at=now, error=error,
                      progress=job.progress if progress is None else progress,
                      report=job.report if report is None else report)
        self.store.put_job(OrgScope(self.org_id), job.as_row())

    def progress(self, share: float) -> None:
        # A commit per jobs-row update: at most every 2 s, not per chunk of a fast import.
        if time.monotonic() - self._last >= 2.0:
            self._last = time.monotonic()
            self.update("running", share)


def submit_import(
    settings: Settings, *, path: str, fmt: ImportFormat = "auto", mode: ImportMode = "raw", org_id: str = "default",
    user_id: str | None = None, store: Any = None, actor: str = "import",
) -> str:
    """Record a queued `import` job and start it on the connected Ray cluster; return the job id.
    What it writes is audited as `actor`'s (the caller's key name).

    The job runs in a detached Ray actor (`ImportRunner`), so it outlives the replica or process
    that submitted it, and it updates its jobs row as it goes; `GET /v1/jobs/{id}` reads that row.
    The caller must have Ray initialised (the Serve app has). Ray's job-submission API is not
    used: the local Ray that `agent-memory serve` and the tests start has no dashboard, hence no
    job API, while an actor works the same on a laptop and on a cluster.
    """
    import ray

    options = ImportOptions(path=path, fmt=fmt, mode=mode, org_id=org_id, engine="auto", show_progress=False,
                            only_org=True, user_id=user_id, actor=actor)
    kind = check_options(options, settings)
    store = store or open_store(settings, embedding_model=None, embedding_dim=None)
    job_id = uuid.uuid4().hex
    job = JobRecord.new(job_id, org_id, KIND, report={"path": path, "mode": mode, "format": fmt})
    store.put_job(OrgScope(org_id), job.as_row())
    options = replace(options, fmt=kind, job_id=job_id,
                      report_path=str(job_report_dir(settings) / f"{job_id}.report.json"))
    # Submitted from the Serve app, whose replicas hold part of each node: embedding actors
    # reserve at most half a CPU so that the pool can start beside them.
    settings = settings.replace(import_embed_num_cpus=min(settings.imports.embed_num_cpus, 0.5))
    # num_cpus=0: the runner only drives and commits; the pipeline's own stages reserve the CPUs.
    runner = ray.remote(num_cpus=0, max_restarts=0)(ImportRunner).options(
        name=f"import-{job_id}", lifetime="detached"
    ).remote()
    runner.run.remote(settings, options)
    return job_id


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
    parser.add_argument("--format", default="auto", choices=["auto", "jsonl", "csv", "parquet", "chatgpt", "claude"])
    parser.add_argument("--mode", default="raw", choices=["raw", "rules", "llm"])
    parser.add_argument("--org-id", default="default")
    parser.add_argument("--force-org", action="store_true")
    parser.add_argument("--user-id", default=None)
    parser.add_argument("--job-id", default=None)
    parser.add_argument("--address", default=None)
    args = parser.parse_args(argv)
    settings = Settings()
    if args.address:
        ensure_ray(args.address)
    result = run_import(settings, ImportOptions(path=args.path, fmt=args.format, mode=args.mode,
                                                org_id=args.org_id, force_org=args.force_org, user_id=args.user_id,
                                                job_id=args.job_id, show_progress=False))
    print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
