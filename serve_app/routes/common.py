"""What the route classes share: the parts of an ingress replica, and the parameters and answers
several resources use."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Header, Path, Query
from fastapi.responses import StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from agent_memory.models import RESERVED_MEMORY_IDS, Scope
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from serve_app.auth import Principal
from serve_app.shards import WriterShards

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle
    from ray.util.metrics import Histogram

    from storage import LanceStore


class IngressParts:
    """The parts every route reaches through `self` (set up by `IngressDeployment`).

    Changes go to the Writer shards, in order; reads that need no model go to `reader`; recall runs
    in this replica through `recaller`, on `recall_pool`.
    """

    settings: Settings
    writers: WriterShards
    embedder: DeploymentHandle
    scheduler: DeploymentHandle
    store: LanceStore
    reader: MemoryService
    recaller: MemoryService
    recall_pool: ThreadPoolExecutor
    recall_latency: Histogram
    # The replica's start (the Embedder's model, the store, the query model), after its constructor:
    # health checks answer 503 meanwhile and the API's routes wait for it (serve_app.middleware).
    starting: asyncio.Task[None]
    phase: str

    def start_state(self) -> tuple[str, str | None]:
        """`("ok", None)` once started; `("starting", what it is doing)`; `("failed", why)`."""
        if not self.starting.done():
            return "starting", self.phase
        failure = None if self.starting.cancelled() else self.starting.exception()
        if self.starting.cancelled() or failure is not None:
            return "failed", f"{self.phase} failed: {type(failure).__name__ if failure else 'cancelled'}"
        return "ok", None

    async def read(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` on a worker thread (the store's reads block)."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def require_changeable(self, caller: Principal, scope: Scope, memory_id: str) -> None:
        """For a key kept to teams: `team_forbidden` unless the memory carries one of its teams.
        A memory that is not the user's, or not there, stays a 404."""
        if caller.teams is not None:
            record = await self.read(self.reader.get, scope, memory_id)
            caller.require_team(record.team_id)


class MemoryIdConvertor(Convertor[str]):
    """A memory id in a path: one segment, never a reserved word such as `search`, so that
    `GET /v1/memories/search` is the search route's (405: it answers POST), not a lookup."""

    regex = "".join(f"(?!{word}(?:/|$))" for word in sorted(RESERVED_MEMORY_IDS)) + "[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("memory_id", MemoryIdConvertor())


class NDJSONResponse(StreamingResponse):
    """JSON lines, streamed."""

    media_type = "application/x-ndjson"


UserId = Annotated[str, Query(min_length=1, max_length=256, description="The user whose memories these are.")]
MemoryId = Annotated[str, Path(description="The memory's id (the server's, or the `id` it was written with).")]
IdempotencyKey = Annotated[str | None, Header(
    max_length=256, description="Any unique string: a retry with the same key stores nothing twice and answers as "
                                "the first attempt did (the client sends one with every write).")]
