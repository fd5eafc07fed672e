"""The one wiring of the service: the embedder and the store the settings name, in a MemoryService.

The CLI, the jobs, the Serve app, notebooks and benchmarks all open their service here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from agent_memory.embedding import Embedder, build_embedder
from agent_memory.models import utcnow
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from storage.lance_store import LanceStore, open_store
from storage.maintenance import StoreMaintenance
from storage.tables import gloss_mismatch, recorded_metadata


def open_service(
    settings: Settings,
    *,
    with_embedder: bool = True,
    embedder: Embedder | None = None,
    store: LanceStore | None = None,
    model: tuple[str, int] | None = None,
    chinese_gloss: bool | None = None,
    clock: Callable[[], datetime] = utcnow,
    defer_access: bool = False,
    with_maintenance: bool = False,
) -> MemoryService:
    """A MemoryService on the settings' store, with their embedder unless told otherwise.

    `embedder` hands in a model already loaded (or one embedding elsewhere); `with_embedder=False`
    opens the store without loading any (reads, erasure, maintenance). `model` (name, dim) creates
    or checks the store for vectors embedded elsewhere, as import and re-embed actors do, with
    `chinese_gloss` saying how those embedded Chinese (`Embedder.glosses_chinese`; what a store
    created here records). `store`
    shares one open store between services; it must hold the embedder's vectors. `with_maintenance`
    hands the service the store's maintenance interface (erasure, store-wide counts): for the
    Writer, jobs and the CLI, not for what serves reads.
    """
    if embedder is None and with_embedder:
        embedder = build_embedder(settings)
    name, dim = (embedder.name, embedder.dim) if embedder is not None else model or (None, None)
    if store is None:
        store = open_store(settings, embedding_model=name, embedding_dim=dim,
                           chinese_gloss=embedder.glosses_chinese if embedder is not None else chinese_gloss)
    else:
        store.check_model(name, dim)
    maintenance = maintenance_of(store) if with_maintenance else None
    return MemoryService(store, embedder, settings, clock=clock, defer_access=defer_access, maintenance=maintenance)


def maintenance_of(store: LanceStore) -> StoreMaintenance:
    """The maintenance interface of an open store: for jobs, the Writer, notebooks and tests."""
    return StoreMaintenance(store.connection, store.access)


def gloss_notice(settings: Settings) -> str | None:
    """The warning each process of these settings logs as it opens the store, where the store's
    Chinese memories were embedded another way than the settings embed Chinese (`warn_of_gloss`);
    None where they agree, where the store holds no memories table yet, or where it cannot be read
    here (the processes that open it say why). Loads no model and creates nothing."""
    try:
        recorded = recorded_metadata(settings.storage.uri, settings.storage.options)
    except Exception:  # noqa: BLE001 - a store out of reach now: those that open it report that
        return None
    if recorded is None:
        return None
    return gloss_mismatch(settings.storage.uri, recorded.chinese_gloss, settings.embedding.glosses_chinese())
