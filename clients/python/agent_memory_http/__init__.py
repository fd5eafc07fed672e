"""The Python client of the agent-memory HTTP API (distribution `agent-memory-http`).

    from agent_memory_http import MemoryClient

    with MemoryClient() as memory:  # AGENT_MEMORY_URL, AGENT_MEMORY_API_KEY
        memory.add("u1", "The user prefers Python for backend work")
        hits = memory.search("u1", "which language for the backend?").memories

`AsyncMemoryClient` has the same methods as coroutines. Only httpx and pydantic are needed.
"""

from ._calls import UNSET
from .async_client import AsyncMemoryClient
from .client import MemoryClient
from .errors import (
    AgentMemoryError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitedError,
    UnauthorizedError,
    UnavailableError,
)
from .models import (
    Context,
    ContextMemory,
    ContextParts,
    ContextSummary,
    ContextTurn,
    Deleted,
    Erasure,
    Health,
    Job,
    JobAccepted,
    Memory,
    MemoryEvent,
    MemoryPage,
    NewMemory,
    Readiness,
    Schedule,
    ScoreParts,
    SearchHit,
    SearchResult,
    SessionMessage,
    Turn,
    WriteResult,
)

__version__ = "0.1.0"

__all__ = [
    "UNSET",
    "AgentMemoryError",
    "AsyncMemoryClient",
    "ConflictError",
    "Context",
    "ContextMemory",
    "ContextParts",
    "ContextSummary",
    "ContextTurn",
    "Deleted",
    "Erasure",
    "Health",
    "InvalidInputError",
    "Job",
    "JobAccepted",
    "Memory",
    "MemoryClient",
    "MemoryEvent",
    "MemoryPage",
    "NewMemory",
    "NotFoundError",
    "PermissionDeniedError",
    "QuotaExceededError",
    "RateLimitedError",
    "Readiness",
    "Schedule",
    "ScoreParts",
    "SearchHit",
    "SearchResult",
    "SessionMessage",
    "Turn",
    "UnauthorizedError",
    "UnavailableError",
    "WriteResult",
]
