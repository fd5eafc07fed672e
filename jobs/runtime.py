"""Ray for the jobs: joining a cluster (or starting a local one), and the embedding actors that
import and re-embedding share: their model batch, their pool size and their CPUs, and how what
they embed is gathered into commits."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from agent_memory.embedding import OPENAI_PREFIX, Embedder, build_embedder
from agent_memory.settings import Settings


def ensure_ray(address: str | None = None, *, runtime_env: dict[str, Any] | None = None) -> None:
    """Connect to the cluster at `address`, or start a local Ray, unless this process already has one."""
    import ray

    if ray.is_initialized():
        return
    options: dict[str, Any] = {"log_to_driver": False}
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    else:
        options["configure_logging"] = False
    if address is None:
        options["include_dashboard"] = False
    ray.init(address=address, **options)


def embed_pool(settings: Settings) -> tuple[int, int]:
    """(min, max) embedding actors: as many as the cluster's CPUs (or GPUs) hold, capped by settings."""
    import ray

    resources = ray.cluster_resources()
    if settings.imports.embed_num_gpus > 0:
        fits = int(resources.get("GPU", 0) / settings.imports.embed_num_gpus)
    else:
        fits = int(resources.get("CPU", 1) / settings.imports.embed_num_cpus)
    top = max(1, min(settings.imports.embed_max_actors, fits))
    return 1, top


def embed_cpus(settings: Settings) -> float:
    """CPUs each embedding actor reserves: the setting, or less where the node is partly taken.

    Ray Data's tasks (repartitions, reads) reserve a whole CPU each; where Serve replicas or
    extraction workers already hold part of the node, actors that took the rest would starve
    those tasks and the job would wait forever, so they shrink to leave a CPU free.
    """
    import ray

    free = float(ray.available_resources().get("CPU", 0.0))
    if free >= settings.imports.embed_num_cpus + 1.0:
        return settings.imports.embed_num_cpus
    return max(0.1, round(min(settings.imports.embed_num_cpus, free - 1.0), 2))


CPU_ACTOR_MODEL_BATCH = 16


def actor_model_batch(settings: Settings) -> int:
    """Texts per forward pass in an embedding actor (`import_embed_model_batch`, or its default).

    The small default is for a local model on one CPU thread; a GPU, or a remote endpoint that
    takes a request per batch, keeps `embedding_batch_size`.
    """
    if settings.imports.embed_model_batch is not None:
        return settings.imports.embed_model_batch
    remote = settings.embedding.model.strip().startswith(OPENAI_PREFIX)
    if remote or settings.imports.embed_num_gpus > 0:
        return settings.embedding.batch_size
    return CPU_ACTOR_MODEL_BATCH


class EmbedMemories:
    """Ray Data callable class: loads the model once per actor, embeds a batch of memories."""

    def __init__(self, settings: Settings) -> None:
        self.embedder = build_embedder(settings.replace(embedding_batch_size=actor_model_batch(settings)))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        return embed_batch(self.embedder, batch)


def embed_batch(embedder: Embedder, batch: dict[str, Any]) -> dict[str, Any]:
    """Add `vector`, `oov` and the model's name to a batch of extracted rows (one model call)."""
    texts = [str(t) for t in batch["vector_text"]]
    out = dict(batch)
    out["vector"] = embedder.embed_batch(texts)
    out["oov"] = np.asarray(embedder.oov_shares(texts), dtype=np.float32)
    out["model"] = np.asarray([embedder.name] * len(texts), dtype=object)
    return out


def in_chunks(batches: Iterable[dict[str, Any]], rows: int, counted: Callable[[int], None]) -> Iterator[dict[str, Any]]:
    """Embedded batches of columns joined into chunks of at least `rows` rows (the last one less),
    each batch counted as it arrives: a progress bar moves while a chunk fills, one commit each."""
    held: list[dict[str, Any]] = []
    size = 0
    for batch in batches:
        n = len(batch["vector"])
        counted(n)
        held.append(batch)
        size += n
        if size >= rows:
            yield _joined(held)
            held, size = [], 0
    if held:
        yield _joined(held)


def _joined(batches: list[dict[str, Any]]) -> dict[str, Any]:
    if len(batches) == 1:
        return batches[0]
    return {name: np.concatenate([np.asarray(b[name]) for b in batches]) if isinstance(batches[0][name], np.ndarray)
            else [value for b in batches for value in b[name]] for name in batches[0]}
