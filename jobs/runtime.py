"""Ray for the jobs: joining a cluster (or starting a local one), and the embedding actors that
import and re-embedding share: their model batch, their pool size and their CPUs, and how what
they embed is gathered into commits."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from agent_memory.embedding import OPENAI_PREFIX, Embedder, build_embedder
from agent_memory.errors import UnavailableError
from agent_memory.settings import Settings


def ensure_ray(address: str | None = None, *, runtime_env: dict[str, Any] | None = None) -> None:
    """Join the cluster at `address` (else at RAY_ADDRESS), or start a Ray of this process's own,
    unless this process already has one.

    Never a bare `ray.init()`: that joins whatever cluster the last `ray start` on this machine
    recorded (`ray_current_cluster` in Ray's temp dir), another program's or a dead one, where it
    fails or waits. RAY_ADDRESS is read here because it is how Ray hands a submitted job (`ray job
    submit`, a KubeRay `RayJob`) its cluster.
    """
    import ray

    if ray.is_initialized():
        return
    target = address or os.environ.get(RAY_ADDRESS_VARIABLE) or "local"
    options: dict[str, Any] = {"log_to_driver": False}
    if runtime_env is not None:
        options["runtime_env"] = runtime_env
    else:
        options["configure_logging"] = False
    if target == "local":
        options["include_dashboard"] = False
    ray.init(address=target, **options)


RAY_ADDRESS_VARIABLE = "RAY_ADDRESS"
# The least share of a CPU a pipeline's task or embedding actor reserves: where no node has that
# much free, the job is refused at once rather than left waiting for a CPU.
MIN_CPUS = 0.05
# How long a job waits for that much to come free before it is refused.
BUSY_WAIT_S = 30.0


def node_free_cpus() -> list[float]:
    """The CPUs free now on each node of the cluster."""
    # Ray 2.60 has no public per-node view of what is free (`ray.available_resources()` sums the
    # nodes, and a task or actor runs on one).
    from ray._private.state import available_resources_per_node

    return [float(free.get("CPU", 0.0)) for free in available_resources_per_node().values()]


def freest(need: float, wait_s: float = BUSY_WAIT_S) -> float:
    """The CPUs free on the freest node, once one has `need` free or after `wait_s` seconds: what
    an ended job held (a killed import's actors) takes a moment to come back."""
    deadline = time.monotonic() + wait_s
    while True:
        best = max(node_free_cpus(), default=0.0)
        if best >= need or time.monotonic() >= deadline:
            return best
        time.sleep(0.5)


def task_cpus() -> float:
    """CPUs each of a pipeline's tasks (read, validate, filter, extract) reserves: one where a node
    has a whole CPU free, else the share the freest node has.

    Ray Data's tasks reserve a whole CPU unless told otherwise; on nodes that Serve replicas or
    extraction workers hold in part (0.25 CPU each), such a task would wait forever.
    """
    return min(1.0, _share(freest(MIN_CPUS), "the import's tasks"))


def embed_cpus(settings: Settings) -> float:
    """CPUs each embedding actor reserves: the setting, or the share the freest node has.

    The embedding stage runs after reading and extraction have finished, so its actors do not
    leave room for the pipeline's tasks. With GPUs, the setting (the actor's CPUs beside its GPU).
    """
    if settings.imports.embed_num_gpus > 0:
        return settings.imports.embed_num_cpus
    return min(settings.imports.embed_num_cpus, _share(freest(MIN_CPUS), "an embedding actor"))


def embed_pool(settings: Settings) -> tuple[int, int]:
    """(min, max) embedding actors: at most as many as the cluster's CPUs (or GPUs) hold, capped by
    settings; at least one on each node that can hold one, so that the work spreads over the
    nodes (Ray Data places actors with SPREAD) rather than waiting on one.

    Refused at once (UnavailableError) where the actors ask for GPUs the cluster does not have.
    """
    import ray

    resources = ray.cluster_resources()
    if settings.imports.embed_num_gpus > 0:
        fits = int(resources.get("GPU", 0) / settings.imports.embed_num_gpus)
        if fits == 0:
            raise UnavailableError(
                f"import_embed_num_gpus is {settings.imports.embed_num_gpus} but no node of the Ray cluster "
                "has a GPU: add a GPU node (`ray start --num-gpus 1 --address ...`) or set "
                "AGENT_MEMORY_IMPORT_EMBED_NUM_GPUS=0", code="no_gpu")
        holders = sum(1 for node in ray.nodes() if node["Alive"]
                      and node["Resources"].get("GPU", 0) >= settings.imports.embed_num_gpus)
    else:
        fits = int(resources.get("CPU", 1) / settings.imports.embed_num_cpus)
        cpus = embed_cpus(settings)
        holders = sum(1 for free in node_free_cpus() if free >= cpus)
    top = max(1, min(settings.imports.embed_max_actors, fits))
    return max(1, min(top, holders)), top


def repartitioned(dataset: Any, rows: int, cpus: float) -> Any:
    """`dataset.repartition(target_num_rows_per_block=rows)`, its tasks reserving `cpus`.

    Ray 2.60's `repartition` takes no resources: its tasks reserve a whole CPU, and after a map
    that reserves less they are not fused into the map's tasks (their resources differ).
    """
    split = dataset.repartition(target_num_rows_per_block=rows)
    split._logical_plan.dag.ray_remote_args["num_cpus"] = cpus  # the StreamingRepartition just added
    return split


def check_shuffle_fits() -> None:
    """Refuse at once (UnavailableError) where no node has a whole CPU free for a shuffle's tasks.

    A `groupby` shuffles, and Ray 2.60's shuffle tasks reserve a whole CPU each, with no option
    to ask for less: where no node has one free, the job would wait forever.
    """
    best = freest(1.0)
    if best < 1.0:
        raise UnavailableError(
            f"no node of the Ray cluster has a whole CPU free for the import's shuffle (most free on one "
            f"node: {best:.2f}): Serve replicas, workers or other jobs hold the rest; add a node "
            "(`ray start --address ...`), lower their `num_cpus`, or run the import with `--engine local`",
            code="ray_busy")


def _share(free: float, what: str) -> float:
    """`free` CPUs rounded down to a twentieth, or UnavailableError where that is below MIN_CPUS."""
    share = int(free * 20) / 20
    if share < MIN_CPUS:
        raise UnavailableError(
            f"no node of the Ray cluster has CPU free for {what} (most free on one node: {free:.2f}): "
            "Serve replicas, workers or other jobs hold every CPU; add a node (`ray start --address ...`), "
            "lower their `num_cpus`, or run the job with `--engine local`", code="ray_busy")
    return share


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
