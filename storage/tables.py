"""One open LanceDB database and its tables: opening and creating them, their indexes, reads, and
commits retried on conflict. The tenant store and the maintenance interface share one of these."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import pyarrow as pa

from agent_memory.errors import ConflictError, UnavailableError
from agent_memory.models import OrgScope, Scope
from storage import schema as sc
from storage.filters import Where, scoped

log = logging.getLogger(__name__)
T = TypeVar("T")


def index_configs(name: str) -> list[tuple[str, Any]]:
    """The scalar and full-text indexes of table `name`, as (column, LanceDB index config)."""
    from lancedb.index import FTS, Bitmap, BTree, LabelList  # lancedb is imported when a store opens

    fts = FTS(base_tokenizer="whitespace", lower_case=True, stem=True, remove_stop_words=False, ascii_folding=True)
    return {
        sc.MEMORIES: [
            ("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree()), ("team_id", BTree()),
            ("status", Bitmap()), ("memory_type", Bitmap()), ("metadata_kv", LabelList()), ("keywords", fts),
        ],
        sc.MESSAGES: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree()), ("session_id", BTree())],
        sc.EVENTS: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree()), ("memory_id", BTree())],
        sc.JOBS: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree())],
        sc.VERDICTS: [("id", BTree()), ("org_id", Bitmap()), ("user_id", BTree())],
        sc.ACCESS: [("org_id", Bitmap()), ("user_id", BTree()), ("memory_id", BTree())],
    }[name]


# The Lance file format of every table this store creates. The 2.2 format (pylance 14's default)
# stores a page whose values are all equal as a constant, and reading a few rows of such a page
# costs about as much as the whole page: with importance, oov, memory_type and metadata the same
# in every row (defaults, English-only text), a user's scan at 1M memories took 7.3 ms, against
# 2.2 ms for the same rows in 2.1 files (which are also 5% smaller).
FILE_FORMAT = "2.1"
RETRIES = 6
OPTIMIZE_ATTEMPTS = 10  # waits of 10 ms doubling: about 5 s in all


class CommitRetries:
    """Commit conflicts retried in this process, for the serving layer's metrics."""

    count = 0


def retrying(action: Callable[[], T], what: str, attempts: int = RETRIES) -> T:
    """Run a commit, retrying on Lance's commit conflicts with a short backoff (10 ms, doubling), and
    where the version it started from was dropped meanwhile (an erasure's purge in another process
    keeps only the latest versions): the retry starts from the latest."""
    for attempt in range(attempts):
        try:
            return action()
        except Exception as exc:  # Lance surfaces conflicts as OSError/RuntimeError with text
            text = str(exc).lower()
            if attempt + 1 < attempts and (any(word in text for word in ("conflict", "retry", "concurrent"))
                                           or dropped_version(text)):
                CommitRetries.count += 1
                time.sleep(0.01 * 2**attempt)
                continue
            raise
    raise AssertionError("unreachable")


def dropped_version(text: str) -> bool:
    """Whether Lance's error (lower case) says a version's manifest is gone: a version read or
    committed on was removed by a purge of old versions after it was resolved."""
    return "not found" in text and "_versions/" in text and ".manifest" in text


def check_model(uri: str, stored: tuple[str, int], model: str | None, dim: int | None) -> None:
    """Raise ConflictError unless `stored` (model, dim) is the model asked for (None asks nothing)."""
    stored_model, stored_dim = stored
    if model is not None and (stored_model != model or (dim is not None and stored_dim != dim)):
        raise ConflictError(
            f"the store at {uri} holds vectors of {stored_model!r} ({stored_dim}-d), but the configured "
            f"embedding model is {model!r} ({dim}-d). Set AGENT_MEMORY_EMBEDDING_MODEL={stored_model} "
            f"or re-embed the store with `agent-memory reembed --model {model}`.",
            code="embedding_model_mismatch",
        )


def declare_primary_key(table: Any) -> Any:
    """The table, with its `id` declared the primary key where a store made before that lacks it."""
    if "id" in table.schema.names and not table.schema.field("id").metadata:
        key = {k.decode(): v.decode() for k, v in sc.PRIMARY_KEY.items()}
        try:
            retrying(lambda: table.to_lance().update_field_metadata({"id": key}), "declare the primary key")
        except Exception:  # noqa: BLE001 - a read-only store, or an id column that allows nulls
            # The store still works: only two inserts of one new id at the same moment go undetected.
            log.warning("could not declare `id` the primary key of %s", table.name, exc_info=True)
    return table


def add_missing_columns(table: Any, declared: pa.Schema) -> Any:
    """The table, with the columns of `declared` that a store made before them lacks, each filled
    with its default (`schema.COLUMN_DEFAULTS`): one commit per table, once.

    Several processes may open an old store at once: a commit that loses the race finds the
    columns there when it looks again. A store that cannot be written (read-only credentials) is
    left as it is, with a warning: reads that filter on the new columns then fail.
    """
    for _ in range(RETRIES):
        missing = {f.name: sc.COLUMN_DEFAULTS[f.name] for f in declared if f.name not in table.schema.names}
        if not missing:
            return table
        try:
            table.add_columns(missing)
            log.info("added the columns %s to %s", ", ".join(missing), table.name)
        except Exception as exc:  # noqa: BLE001 - another process added them first, or the store is read-only
            log.warning("could not add the columns %s to %s: %s", ", ".join(missing), table.name, exc)
            time.sleep(0.05)
    return table


def gloss_mismatch(uri: str, recorded: bool | None, embedder: bool | None) -> str | None:
    """What to tell operators where the store's Chinese memories were embedded another way than
    the embedder of this process embeds Chinese (`embedder` None: it embeds nothing); None where
    they agree. Every read still works; Chinese questions only compare poorly with those memories
    until a reindex."""
    if embedder is None or recorded == embedder:
        return None
    way = {True: "through its English gloss", False: "as written"}
    said = f"were embedded {way[recorded]}" if recorded is not None else "do not say how they were embedded"
    return (f"the Chinese memories of the store at {uri} {said}, and this process embeds Chinese {way[embedder]} "
            "(embedding_gloss_chinese): run `agent-memory reindex` once every server and job embeds it so")


def warn_of_gloss(uri: str, recorded: bool | None, embedder: bool | None) -> None:
    """Log `gloss_mismatch` as a warning, where there is one."""
    message = gloss_mismatch(uri, recorded, embedder)
    if message is not None:
        log.warning("%s", message)


def recorded_metadata(uri: str, storage_options: dict[str, str] | None = None) -> sc.TableMetadata | None:
    """What the store at `uri` records in the schema metadata of `memories` (None: no such table
    yet), read without creating or changing anything."""
    if "://" not in uri and not os.path.isdir(uri):
        return None  # connecting would make the directory
    import lancedb  # heavy: imported when a store is read

    db = lancedb.connect(uri, storage_options=storage_options or None)
    try:
        table = db.open_table(sc.MEMORIES)
    except (FileNotFoundError, ValueError):
        return None
    return sc.TableMetadata.of(table.schema.metadata)


# Inserts of this many rows or more read the table's ids whole (Tables.insert_absent).
EXACT_INSERT_ROWS = 64


class Tables:
    """The database at `uri` with every table open (created, indexed, where new)."""

    def __init__(
        self,
        uri: str,
        *,
        embedding_model: str | None,
        embedding_dim: int | None,
        chinese_gloss: bool | None = None,
        storage_options: dict[str, str] | None = None,
        read_consistency: timedelta | None = timedelta(0),
    ) -> None:
        self.uri = uri
        self.read_consistency = read_consistency
        self.storage_options = storage_options or None
        import lancedb  # heavy (about a second): imported when a store opens, not with the CLI

        # On s3:// Lance writes each version's manifest with `If-None-Match: *`: of two processes
        # committing one version, the object store refuses the second, which rebases or retries.
        # No lock or option is needed; the store must honour the condition (docs/scaling.md).
        try:
            self.db = lancedb.connect(uri, storage_options=self.storage_options, read_consistency_interval=read_consistency)
        except Exception as exc:
            raise UnavailableError(f"cannot open the store at {uri}: {exc}") from exc
        self._tables: dict[str, Any] = {}
        self.embedding_model, self.embedding_dim = self._open_memories(embedding_model, embedding_dim, chinese_gloss)
        for name, table_schema in (
            (sc.MESSAGES, sc.MESSAGES_SCHEMA), (sc.EVENTS, sc.EVENTS_SCHEMA), (sc.JOBS, sc.JOBS_SCHEMA),
            (sc.VERDICTS, sc.VERDICTS_SCHEMA), (sc.ACCESS, sc.ACCESS_SCHEMA),
        ):
            self._tables[name] = self._open_or_create(name, table_schema)

    def _open_or_create(self, name: str, table_schema: pa.Schema) -> Any:
        try:
            return add_missing_columns(declare_primary_key(self.db.open_table(name)), table_schema)
        except (FileNotFoundError, ValueError):
            table = self.db.create_table(name, schema=table_schema, exist_ok=True, data_storage_version=FILE_FORMAT)
            self.create_indexes(table, name)
            return table

    def _open_memories(self, model: str | None, dim: int | None, gloss: bool | None) -> tuple[str, int]:
        try:
            table = declare_primary_key(self.db.open_table(sc.MEMORIES))
        except (FileNotFoundError, ValueError):
            if model is None or dim is None:
                raise UnavailableError(
                    f"no memories table at {self.uri}: start the service or import data first"
                ) from None
            table = self.db.create_table(
                sc.MEMORIES, schema=sc.memories_schema(dim, model, gloss=gloss), exist_ok=True,
                data_storage_version=FILE_FORMAT,
            )
            self.create_indexes(table, sc.MEMORIES)
        stored = sc.TableMetadata.of(table.schema.metadata)
        check_model(self.uri, (stored.model, stored.dim), model, dim)
        warn_of_gloss(self.uri, stored.chinese_gloss, gloss)
        add_missing_columns(table, sc.memories_schema(stored.dim or 1, stored.model))
        self._tables[sc.MEMORIES] = table
        return stored.model, stored.dim

    def check_model(self, model: str | None, dim: int | None) -> None:
        """Raise ConflictError unless the store holds vectors of this model (None checks nothing)."""
        check_model(self.uri, (self.embedding_model, self.embedding_dim), model, dim)

    def create_indexes(self, table: Any, name: str, *, replace: bool = False) -> None:
        """Build the table's scalar and full-text indexes that are missing (all of them with `replace`)."""
        for column, config in index_configs(name):
            # Several processes may open a new store at once: an index another one just built
            # is fine, and a commit conflict is retried.
            existing = {tuple(ix.columns) for ix in table.list_indices()}
            if replace or (column,) not in existing:
                retrying(lambda c=column, cfg=config: table.create_index(c, config=cfg, replace=True), "index")

    def table(self, name: str) -> Any:
        """The LanceDB table of that name."""
        return self._tables[name]

    def switch_memories(self, table: Any, model: str, dim: int) -> None:
        """Serve `memories` from a table just written whole (re-embedding's switch), indexed anew."""
        self._tables[sc.MEMORIES] = table
        self.embedding_model, self.embedding_dim = model, dim
        self.create_indexes(table, sc.MEMORIES)

    def read(self, name: str, where: Where | None, columns: list[str] | None = None) -> pa.Table:
        """A table's rows matching `where` (all of them for None), at its latest version.

        Straight from the Lance dataset: a LanceDB query costs about 1.5 ms more per call.
        """
        filter_ = where.render() if where is not None else None
        return self._tables[name].to_lance().to_table(columns=columns, filter=filter_)

    def rows(self, name: str, where: Where, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """`read`, as dicts."""
        return self.read(name, where, columns).to_pylist()

    def existing_ids(self, name: str, scope: Scope | OrgScope, ids: Sequence[str]) -> set[str]:
        """The ids among `ids` that a table already holds inside the scope."""
        if not ids:
            return set()
        return {r["id"] for r in self.rows(name, scoped(scope, owner_only=True).isin("id", ids), ["id"])}

    def insert_absent(self, name: str, rows: list[dict[str, Any]], table_schema: pa.Schema) -> Any:
        """Insert the rows whose id is absent, in one commit; the merge's result (counts, version).

        Two processes inserting the same new id at once (two imports of one file, an import run
        again while the first still commits) must not both add it. Lance catches that race
        through the ids each merge inserted, recorded when `id` is the declared primary key, but
        only on its scanning join: the join through the `id` index records none (pylance 14; 4
        processes racing on shared ids left 5 duplicates in 150 rows that way, none by the scan).
        The scan reads the `id` column whole (29 ms against 9 ms for 8 new rows at 200k rows), so
        bulk commits of `EXACT_INSERT_ROWS` or more, whose cost it is shared by, scan; smaller ones,
        the Writer's, go through the index: each user's writes come from one Writer shard, in
        order, so no other process inserts their ids (docs/scaling.md).
        """
        if not rows:
            return None
        data = pa.Table.from_pylist(rows, schema=table_schema)
        table = self._tables[name]
        indexed = len(rows) < EXACT_INSERT_ROWS
        return retrying(lambda: table.merge_insert("id").when_not_matched_insert_all().use_index(indexed).execute(data),
                        f"insert {name}")

    def shape(self, name: str) -> dict[str, int]:
        """Rows, fragments and retained versions of a table."""
        table = self._tables[name]
        stats = table.stats()
        return {
            "rows": int(stats.get("num_rows", 0)),
            "fragments": int(stats.get("fragment_stats", {}).get("num_fragments", 0)),
            "versions": len(table.list_versions()),
        }
