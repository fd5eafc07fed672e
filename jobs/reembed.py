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

import sys
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from agent_memory.embedding import Embedder, build_embedder
from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings
from jobs.runtime import EmbedMemories, embed_batch, embed_cpus, embed_pool, ensure_ray
from storage import open_store
from storage.connect import maintenance_of
from storage.reembed import open_staging, stage, stale, switch

Engine = Literal["ray", "local"]


class Reembedding:
    """One re-embedding of a store: snapshot, catch-up and switch, callable step by step."""

    def __init__(self, settings: Settings, model: str, *, store: Any = None) -> None:
        self.settings = settings
        self.target = settings.replace(embedding_model=model)
        self.store = store or open_store(settings, embedding_model=None, embedding_dim=None)
        self.tables = maintenance_of(self.store).tables
        self.embedder: Embedder = build_embedder(self.target)
        if self.embedder.name == self.store.embedding_model:
            raise InvalidInputError(f"the store already holds vectors of {self.embedder.name!r}")
        self.previous = self.store.embedding_model
        self.staging = open_staging(self.tables, self.embedder.name, self.embedder.dim)

    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, list[float]]:
        """New vectors and [UNK] shares for texts, in this process."""
        return self.embedder.embed_batch(texts), self.embedder.oov_shares(texts)

    def snapshot(self, *, engine: Engine = "ray", show_progress: bool = False) -> int:
        """Embed every memory not staged yet; return how many were embedded."""
        todo = stale(self.tables, self.staging)
        if not todo.num_rows:
            return 0
        step = self.settings.imports.commit_rows
        bar = _bar(todo.num_rows, show_progress)
        try:
            if engine == "local":
                for start in range(0, todo.num_rows, step):
                    chunk = todo.slice(start, step)
                    vectors, oov = self.embed(chunk.column("vector_text").to_pylist())
                    stage(self.staging, chunk.column("id").to_pylist(), chunk.column("index_text").to_pylist(),
                          vectors, oov)
                    _tick(bar, chunk.num_rows)
                return todo.num_rows
            import ray
            from ray.data import ActorPoolStrategy

            ensure_ray()
            low, high = embed_pool(self.settings)
            dataset = ray.data.from_arrow(todo).repartition(
                target_num_rows_per_block=self.settings.imports.embed_batch_rows
            ).map_batches(
                EmbedMemories, fn_constructor_kwargs={"settings": self.target},
                compute=ActorPoolStrategy(min_size=low, max_size=high),
                batch_size=self.settings.imports.embed_batch_rows,
                num_cpus=embed_cpus(self.settings) if not self.settings.imports.embed_num_gpus
                else self.settings.imports.embed_num_cpus,
                num_gpus=self.settings.imports.embed_num_gpus or None, batch_format="numpy",
            )
            for batch in dataset.iter_batches(batch_size=step, batch_format="numpy"):
                stage(self.staging, list(batch["id"]), list(batch["index_text"]), batch["vector"], batch["oov"])
                _tick(bar, len(batch["id"]))
            return todo.num_rows
        finally:
            if bar is not None:
                bar.close()

    def switch(self) -> int:
        """Catch up what changed meanwhile and switch `memories` to the new vectors; return rows caught up."""
        return switch(self.tables, self.staging, self.embedder.name, self.embedder.dim, self.embed)


def reembed(settings: Settings, model: str, *, engine: Engine = "ray", show_progress: bool = False,
            store: Any = None) -> dict[str, Any]:
    """Recompute every memory's vector with `model` and switch to it when complete; return a report."""
    started = time.perf_counter()
    job = Reembedding(settings, model, store=store)
    embedded = job.snapshot(engine=engine, show_progress=show_progress)
    caught_up = job.switch()
    return {
        "previous_model": job.previous, "model": job.embedder.name, "dim": job.embedder.dim,
        "memories": job.tables.table("memories").count_rows(), "embedded": embedded, "caught_up": caught_up,
        "duration_s": round(time.perf_counter() - started, 3), "engine": engine,
        "next": f"set AGENT_MEMORY_EMBEDDING_MODEL={job.embedder.name} for every server and job",
    }


def _bar(total: int, show: bool) -> Any:
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="memory", desc="reembed", file=sys.stderr, dynamic_ncols=True)


def _tick(bar: Any, n: int) -> None:
    if bar is not None:
        bar.update(n)


__all__ = ["Reembedding", "reembed", "embed_batch"]
