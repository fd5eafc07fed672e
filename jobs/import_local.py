"""The import's local engine: every stage in this process, for small files (where Ray Data's fixed
cost dominates) and for a service that is already open (`jobs.importer.import_into`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent_memory.embedding import Embedder, build_embedder
from agent_memory.service import MemoryService
from jobs.import_exports import EXPORT_FORMATS
from jobs.import_report import ImportOptions, ImportResult
from jobs.import_rows import (
    EXTRACTED_COLUMNS,
    as_columns,
    raw_memory_rows,
    read_rows,
    resolve_format,
    split_validated,
    validate_rows,
)
from jobs.import_write import ImportWriter, Progress, record_rejects
from jobs.runtime import embed_batch, in_chunks


def run_local(
    options: ImportOptions, result: ImportResult, writer: ImportWriter, builder: MemoryService, *,
    embedder: Embedder | None = None, rejects_path: Path | None = None,
    on_progress: Callable[[float], None] | None = None,
) -> None:
    """Read, validate, extract, embed and commit the whole file here, in chunks of `import_commit_rows`.

    `builder` validates, redacts and keys the rows (a row builder, or the open service itself, so
    that its clock dates them); `embedder` is the model to embed with (else the settings' own).
    """
    settings = builder.settings
    kind = resolve_format(options.path, options.fmt, settings)
    # The whole file is read (a chat export streamed) before anything is written.
    rows = list(read_rows(options.path, kind, settings, options.user_id))
    validated = validate_rows(rows, builder, options.org_id, only_org=options.only_org, force_org=options.force_org,
                              conversations=kind in EXPORT_FORMATS)
    messages, rejects = split_validated(validated, result)
    record_rejects(rejects, result, rejects_path)
    extracted = raw_memory_rows(messages, builder) if options.mode == "raw" else []
    result.messages = len(messages)
    result.memories = len(extracted)
    progress = Progress(len(extracted), options.show_progress, on_progress)
    writer.on_commit = progress
    try:
        embedder = embedder or build_embedder(settings)
        step, block = settings.imports.commit_rows, settings.imports.embed_batch_rows
        # Embedded a block at a time, as an actor of the Ray engine does: the bar moves between commits.
        blocks = (embed_batch(embedder, as_columns(extracted[start : start + block], EXTRACTED_COLUMNS))
                  for start in range(0, len(extracted), block))
        for chunk in in_chunks(blocks, step, progress.embedded):
            writer.commit(chunk)
        if options.mode != "raw" and messages:
            service = writer.open(embedder.name, embedder.dim, embedder)
            for start in range(0, len(messages), step):
                writer.commit_messages(messages[start : start + step], service)
    finally:
        progress.close()
