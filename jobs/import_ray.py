"""The import's Ray Data engine: for object-store URIs and files over `import_local_max_bytes`.

Read and validation are tasks over blocks of `VALIDATE_BATCH_ROWS` (a chat export is read by one
task that streams it, a block every few hundred conversations); `raw` extraction is a
`groupby(org, user, session).map_groups`; embedding is `EmbedMemories` on an actor pool sized by
the cluster and the settings. The driver consumes the embedded stream in chunks of
`import_commit_rows` and commits each through the `ImportWriter`; only rejects and redaction
counts come back to it otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agent_memory.embedding import build_embedder
from agent_memory.errors import AgentMemoryError, InvalidInputError
from agent_memory.settings import Settings
from jobs.import_exports import EXPORT_FORMATS
from jobs.import_report import ImportOptions, ImportResult, add_counts
from jobs.import_rows import (
    EXPORT_BLOCK_CONVERSATIONS,
    extract_group,
    object_store_filesystem,
    read_export_rows,
    read_file_rows,
    resolve_format,
    validate_batch,
)
from jobs.import_write import ImportWriter, Progress, record_rejects
from jobs.runtime import (
    EmbedMemories,
    check_shuffle_fits,
    embed_cpus,
    embed_pool,
    ensure_ray,
    in_chunks,
    repartitioned,
    task_cpus,
)

# Rows per validation task: enough to amortise a task, small enough to use every core.
VALIDATE_BATCH_ROWS = 4_096


def run_ray(
    settings: Settings, options: ImportOptions, result: ImportResult, writer: ImportWriter, *,
    rejects_path: Path | None = None, on_progress: Callable[[float], None] | None = None,
) -> None:
    """The pipeline on Ray Data; the driver commits the embedded stream chunk by chunk."""
    progress = Progress(None, options.show_progress, on_progress)
    try:
        _pipeline(settings, options, result, writer, progress, rejects_path)
    finally:
        progress.close()


def _pipeline(settings: Settings, options: ImportOptions, result: ImportResult, writer: ImportWriter,
              progress: Progress, rejects_path: Path | None) -> None:
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    ensure_ray()
    # One bar of the import's own (its stage; then rows embedded, their rate and the time left)
    # rather than Ray Data's, several per dataset and operator.
    DataContext.get_current().enable_progress_bars = False
    progress.stage("import: reading and validating")
    kind = resolve_format(options.path, options.fmt, settings)
    filesystem = object_store_filesystem(options.path, settings.storage.options)
    if filesystem is None and not Path(options.path.removeprefix("file://")).exists():
        raise InvalidInputError(f"no such file: {options.path}")
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    # Every stage says what it reserves: Ray Data's default, a whole CPU per task, may be more
    # than any node has free beside Serve, and such a task would wait forever.
    light = task_cpus()
    if options.mode == "raw":
        check_shuffle_fits()  # before anything is read
    block_rows = VALIDATE_BATCH_ROWS
    if kind in EXPORT_FORMATS:
        block_rows = EXPORT_BLOCK_CONVERSATIONS  # a conversation is a row, of many turns
        read = ray.data.from_items([{"path": options.path}]).map_batches(
            read_export_rows, fn_kwargs={"kind": kind, "settings": settings, "user_id": options.user_id},
            batch_size=1, batch_format="pyarrow", num_cpus=light,
        )
    else:
        raw = ray.data.read_binary_files(options.path.removeprefix("file://"), filesystem=filesystem, num_cpus=light)
        read = raw.map_batches(read_file_rows, fn_kwargs={"kind": kind}, batch_size=1, batch_format="pyarrow",
                               num_cpus=light)
    # One file is one block (or, for an export, a few): split it so validation uses every core.
    validate_kwargs = {"settings": settings, "org_id": options.org_id, "only_org": options.only_org,
                       "force_org": options.force_org, "conversations": kind in EXPORT_FORMATS}
    # Materialized: the whole file is read and validated (a file that is not JSON fails) before
    # anything is written.
    with _task_errors_unwrapped():
        validated = (
            repartitioned(read, block_rows, light)
            .map_batches(validate_batch, fn_kwargs=validate_kwargs, batch_size=None, batch_format="pyarrow",
                         num_cpus=light)
            .materialize()
        )
    messages_only = validated.filter(expr="reject == ''", num_cpus=light)
    # Only rejects and rows with redactions come back to the driver: few, even for a huge file.
    rejects = [json.loads(r["reject"]) for r in validated.filter(expr="reject != ''", num_cpus=light)
               .select_columns(["reject"], num_cpus=light).take_all()]
    for row in (validated.filter(expr="redactions != '{}'", num_cpus=light)
                .select_columns(["redactions"], num_cpus=light).take_all()):
        add_counts(result.redactions, json.loads(row["redactions"]))
    result.rows_read = validated.count()
    record_rejects(rejects, result, rejects_path)
    result.messages = result.rows_read - result.rows_rejected
    if options.mode != "raw":
        progress.stage("import: logging messages")
        embedder = build_embedder(settings)
        service = writer.open(embedder.name, embedder.dim, embedder)
        for batch in messages_only.iter_batches(batch_size=settings.imports.commit_rows, batch_format="numpy"):
            writer.commit_messages(list(batch["message"]), service)
        return
    progress.stage("import: grouping sessions")
    # Few partitions: a shuffle's cost grows with them, and sessions are small.
    grouped = messages_only.groupby(["org_id", "user_id", "session_id"],
                                    num_partitions=max(1, min(4 * cpus, result.messages // 5_000 + 1)))
    extracting = repartitioned(
        grouped.map_groups(extract_group, fn_kwargs={"settings": settings}, batch_format="pyarrow", num_cpus=light),
        # Blocks of one embedding batch, cut in the extraction's tasks: every actor of the pool gets work.
        settings.imports.embed_batch_rows, light,
    )
    extracted = extracting.materialize()  # cheap; finished first, it leaves every core to the embedding
    result.memories = result.messages
    low, high = embed_pool(settings)
    cpu_only = settings.imports.embed_num_gpus == 0
    embedded = extracted.map_batches(
        EmbedMemories,
        fn_constructor_kwargs={"settings": settings},
        compute=ActorPoolStrategy(min_size=low, max_size=max(low, min(high, cpus)) if cpu_only else high),
        batch_size=settings.imports.embed_batch_rows,
        num_cpus=embed_cpus(settings) if cpu_only else settings.imports.embed_num_cpus,
        num_gpus=settings.imports.embed_num_gpus or None,
        batch_format="numpy",
    )
    progress.stage("import", total=result.memories)
    writer.on_commit = progress
    # Blocks as the actors finish them, gathered into commits of `import_commit_rows`.
    blocks = embedded.iter_batches(batch_size=None, batch_format="numpy")
    for chunk in in_chunks(blocks, settings.imports.commit_rows, progress.embedded):
        writer.commit(chunk)


@contextmanager
def _task_errors_unwrapped() -> Iterator[None]:
    """Our own errors raised in a Ray task (a file that is not JSON, say) as themselves, not wrapped."""
    from ray.exceptions import RayTaskError

    try:
        yield
    except RayTaskError as exc:
        if isinstance(exc.cause, AgentMemoryError):
            raise exc.cause from None
        raise
