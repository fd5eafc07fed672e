"""Re-embedding every memory with another model, as a Ray Data job, switched atomically at the end.

1. snapshot: the text every memory's vector embeds (`MemoryRecord.vector_text`) is embedded with
   the new model by the same actor pool as the importer (`jobs.importer.EmbedMemories`), in chunks committed to a staging
   table. Recall keeps using the old vectors meanwhile: nothing in `memories` changes.
2. catch-up: memories written or changed during the job (their id is not staged, or their text
   differs from the staged text) are embedded in-process; this repeats until nothing is stale.
3. switch: `memories` is rewritten with the new vectors and the new model recorded, as one Lance
   commit (see storage/reembed.py); indexes are rebuilt after it.

A killed run leaves `memories` untouched and the staging table resumable: the next run re-embeds
only what is not staged yet. Afterwards a store opened with the old model setting is the
`embedding_model_mismatch` error that names the model now in force.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from agent_memory.embedding import Embedder, build_embedder
from agent_memory.settings import Settings
from jobs.progress import ProgressBar
from jobs.runtime import (
    EmbedMemories,
    embed_batch,
    embed_cpus,
    embed_pool,
    ensure_ray,
    in_chunks,
    repartitioned,
    task_cpus,
)
from storage import open_store
from storage.connect import maintenance_of
from storage.reembed import open_staging, stage, stale, switch
from storage.schema import gloss_name

Engine = Literal["ray", "local"]


class Reembedding:
    """One re-embedding of a store: snapshot, catch-up and switch, callable step by step."""

    def __init__(self, settings: Settings, model: str, *, store: Any = None) -> None:
        self.settings = settings
        self.target = settings.replace(embedding_model=model)
        self.store = store or open_store(settings, embedding_model=None, embedding_dim=None)
        self.tables = maintenance_of(self.store).tables
        self.embedder: Embedder = build_embedder(self.target)
        self.previous = self.store.embedding_model
        self.gloss = self.embedder.glosses_chinese
        self.staging = open_staging(self.tables, self.embedder.name, self.embedder.dim, self.gloss)

    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, list[float]]:
        """New vectors and [UNK] shares for texts, in this process."""
        return self.embedder.embed_batch(texts), self.embedder.oov_shares(texts)

    def snapshot(self, *, engine: Engine = "ray", show_progress: bool = False) -> int:
        """Embed every memory not staged yet; return how many were embedded."""
        todo = stale(self.tables, self.staging)
        if not todo.num_rows:
            return 0
        with ProgressBar(todo.num_rows, desc="reembed", unit="memory", show=show_progress) as bar:
            # Blocks of `import_embed_batch_rows`, staged in commits of `import_commit_rows`: the bar
            # moves between commits.
            blocks = self._embedded_here(todo) if engine == "local" else self._embedded_on_ray(todo)
            for chunk in in_chunks(blocks, self.settings.imports.commit_rows, bar.update):
                stage(self.staging, list(chunk["id"]), list(chunk["index_text"]), chunk["vector"], chunk["oov"])
        return todo.num_rows

    def _embedded_here(self, todo: pa.Table) -> Iterator[dict[str, Any]]:
        block = self.settings.imports.embed_batch_rows
        for start in range(0, todo.num_rows, block):
            rows = todo.slice(start, block)
            vectors, oov = self.embed(rows.column("vector_text").to_pylist())
            yield {"id": rows.column("id").to_pylist(), "index_text": rows.column("index_text").to_pylist(),
                   "vector": vectors, "oov": np.asarray(oov, dtype=np.float32)}

    def _embedded_on_ray(self, todo: pa.Table) -> Iterator[dict[str, Any]]:
        import ray
        from ray.data import ActorPoolStrategy

        ensure_ray()
        low, high = embed_pool(self.settings)
        # Blocks of a batch each, the split reserving only what a node has free (jobs.runtime).
        dataset = repartitioned(ray.data.from_arrow(todo), self.settings.imports.embed_batch_rows, task_cpus()).map_batches(
            EmbedMemories, fn_constructor_kwargs={"settings": self.target},
            compute=ActorPoolStrategy(min_size=low, max_size=high),
            batch_size=self.settings.imports.embed_batch_rows,
            num_cpus=embed_cpus(self.settings) if not self.settings.imports.embed_num_gpus
            else self.settings.imports.embed_num_cpus,
            num_gpus=self.settings.imports.embed_num_gpus or None, batch_format="numpy",
        )
        yield from dataset.iter_batches(batch_size=None, batch_format="numpy")

    def switch(self) -> int:
        """Catch up what changed meanwhile and switch `memories` to the new vectors; return rows caught up."""
        return switch(self.tables, self.staging, self.embedder.name, self.embedder.dim, self.embed, gloss=self.gloss)


def reembed(settings: Settings, model: str, *, engine: Engine = "ray", show_progress: bool = False,
            store: Any = None) -> dict[str, Any]:
    """Recompute every memory's vector with `model` and switch to it when complete; return a report."""
    started = time.perf_counter()
    job = Reembedding(settings, model, store=store)
    embedded = job.snapshot(engine=engine, show_progress=show_progress)
    caught_up = job.switch()
    return {
        "previous_model": job.previous, "model": job.embedder.name, "dim": job.embedder.dim,
        "chinese_gloss": gloss_name(job.gloss),
        "memories": job.tables.table("memories").count_rows(), "embedded": embedded, "caught_up": caught_up,
        "duration_s": round(time.perf_counter() - started, 3), "engine": engine,
        "next": f"set AGENT_MEMORY_EMBEDDING_MODEL={job.embedder.name} for every server and job",
    }


__all__ = ["Reembedding", "reembed", "embed_batch"]
