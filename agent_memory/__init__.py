"""agent-memory: long-term memory for LLM agents. The domain core: no Ray and no LanceDB in here."""

from agent_memory.errors import (
    AgentMemoryError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from agent_memory.models import NewMemory, Scope, SearchQuery
from agent_memory.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "AgentMemoryError", "ConflictError", "InvalidInputError", "NotFoundError", "PermissionDeniedError",
    "UnavailableError", "NewMemory", "Scope", "SearchQuery", "Settings", "open_service",
]


def open_service(settings: Settings | None = None, **kwargs):  # type: ignore[no-untyped-def]
    """A MemoryService on the store and model the settings name (for notebooks and scripts).

    The convenience `storage.connect.open_service` under the core's name: the core itself never
    wires in storage, so the import waits for the call. A script or notebook runs on its own
    store, so it gets the maintenance interface too (erasure, counts across orgs, the tables).
    """
    from storage.connect import open_service as connect

    kwargs.setdefault("with_maintenance", True)
    return connect(settings or Settings(), **kwargs)
