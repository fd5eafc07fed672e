"""Storage side of re-embedding: a staging table of new vectors, and the atomic switch of `memories`.

The switch writes the whole `memories` table as one Lance overwrite commit (a new version of the
same dataset): readers see either every old vector with the old model recorded, or every new
vector with the new model recorded, never a mix. Indexes are rebuilt right after; until then Lance
answers filters and full-text queries by scanning, so recall keeps working, only slower.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from agent_memory.errors import ConflictError
from agent_memory.index_text import index_parts
from storage import schema as sc
from storage.tables import FILE_FORMAT, Tables, retrying

STAGING = "memories_reembed"
Embed = Callable[[Sequence[str]], tuple[np.ndarray, Sequence[float]]]


def staging_schema(dim: int, model: str, gloss: bool) -> pa.Schema:
    """New vectors keyed by memory id, with the text they were computed from (the model, and
    whether Chinese texts were embedded through their gloss, in the metadata)."""
    return pa.schema(
        [
            pa.field("id", pa.string(), nullable=False, metadata=sc.PRIMARY_KEY),
            pa.field("index_text", pa.string(), nullable=False),
            pa.field("oov", pa.float32(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ],
        metadata={sc.MODEL_KEY: model.encode(), sc.DIM_KEY: str(dim).encode(), sc.GLOSS_KEY: sc.gloss_name(gloss).encode()},
    )


def open_staging(tables: Tables, model: str, dim: int, gloss: bool) -> Any:
    """The staging table for `model` (with or without the Chinese gloss); a staging table left by a
    run for another model, or the other way of embedding Chinese, is replaced."""
    db = tables.db
    if STAGING in db.table_names():
        table = db.open_table(STAGING)
        staged = sc.TableMetadata.of(table.schema.metadata)
        if (staged.model, staged.dim, staged.chinese_gloss) == (model, dim, gloss):
            return table  # a killed run resumes: rows already staged are kept
    return db.create_table(STAGING, schema=staging_schema(dim, model, gloss), mode="overwrite",
                           data_storage_version=FILE_FORMAT)


def memory_texts(tables: Tables) -> pa.Table:
    """(id, index_text, vector_text) of every memory, at the table's latest version.

    `index_text` keys a staged vector (a row whose text changed is embedded again); `vector_text`
    is what the vector embeds (the memory with its speaker, without context)."""
    rows = tables.table(sc.MEMORIES).to_lance().to_table(columns=["id", "index_text", "content"])
    texts = [index_parts(t, c)[1] for t, c in zip(rows.column("index_text").to_pylist(),
                                                   rows.column("content").to_pylist(), strict=True)]
    return rows.drop_columns(["content"]).append_column("vector_text", pa.array(texts, type=pa.string()))


def stage(staging: Any, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray, oov: Sequence[float]) -> None:
    """Upsert new vectors into the staging table (one commit)."""
    if not len(ids):
        return
    data = pa.Table.from_pydict(
        {"id": list(ids), "index_text": list(texts), "oov": np.asarray(oov, dtype=np.float32),
         "vector": list(np.asarray(vectors, dtype=np.float32))},
        schema=staging.schema,
    )
    retrying(lambda: staging.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
              .execute(data), "stage vectors")


def stale(tables: Tables, staging: Any) -> pa.Table:
    """Memories whose staged vector is missing or was computed from other text (written meanwhile)."""
    current = memory_texts(tables)
    staged = staging.to_lance().to_table(columns=["id", "index_text"])
    known = dict(zip(staged.column("id").to_pylist(), staged.column("index_text").to_pylist(), strict=True))
    keep = [known.get(i) != t for i, t in zip(current.column("id").to_pylist(),
                                              current.column("index_text").to_pylist(), strict=True)]
    return current.filter(pa.array(keep, type=pa.bool_()))


def switch(tables: Tables, staging: Any, model: str, dim: int, embed: Embed, *, gloss: bool, attempts: int = 5) -> int:
    """Catch up rows written meanwhile, then replace `memories` with the new vectors in one commit.

    Returns the number of rows caught up. Writes landing between the last read and the commit are
    detected by the table version and the whole step is repeated.
    """
    table = tables.table(sc.MEMORIES)
    caught_up = 0
    for _ in range(attempts):
        missing = stale(tables, staging)
        if missing.num_rows:
            vectors, oov = embed(missing.column("vector_text").to_pylist())
            stage(staging, missing.column("id").to_pylist(), missing.column("index_text").to_pylist(), vectors, oov)
            caught_up += missing.num_rows
        version = table.version
        dataset = table.to_lance()
        current = dataset.to_table(columns=[c for c in dataset.schema.names if c != "vector"])
        staged = staging.to_lance().to_table()
        by_id = {i: n for n, i in enumerate(staged.column("id").to_pylist())}
        texts_staged = staged.column("index_text").to_pylist()
        order = []
        for memory_id, text in zip(current.column("id").to_pylist(), current.column("index_text").to_pylist(),
                                   strict=True):
            row = by_id.get(memory_id)
            if row is None or texts_staged[row] != text:
                break
            order.append(row)
        if len(order) != current.num_rows or table.version != version:
            continue  # written meanwhile: catch up again
        picked = staged.take(pa.array(order, type=pa.int64()))
        new_schema = sc.memories_schema(dim, model, gloss=gloss)
        columns = {name: current.column(name) for name in current.column_names}
        columns["oov"] = picked.column("oov")
        columns["vector"] = picked.column("vector")
        data = pa.Table.from_arrays([columns[f.name] for f in new_schema], schema=new_schema)
        if table.version != version:
            continue
        # The rewrite also brings a store made with another file format to this one.
        new_table = tables.db.create_table(
            sc.MEMORIES, data, schema=new_schema, mode="overwrite", data_storage_version=FILE_FORMAT
        )
        tables.switch_memories(new_table, model, dim)
        tables.db.drop_table(STAGING)
        return caught_up
    raise ConflictError("memories kept changing during the switch; run reembed again", code="reembed_busy")
