"""`/v1/memories` and `/v1/context`: writes, recall, the prompt block, and one memory's reads and changes.

Each body arrives validated as the core's model (`serve_app.schemas`) and is handed down as it is.
"""

import asyncio
import functools
import time
from typing import Annotated, Any

from agent_memory_http.models import (
    Context,
    Deleted,
    Memory,
    MemoryHistory,
    MemoryPage,
    SearchResult,
    WriteResult,
)
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from agent_memory.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from agent_memory.models import Scope
from serve_app.middleware import Caller
from serve_app.routes.common import IdempotencyKey, IngressParts, MemoryId, UserId
from serve_app.schemas import ContextIn, MemoryBatchIn, MemoryIn, PatchIn, SearchIn, errors

router = APIRouter(tags=["memories"])
# A memory's own path: its id is never `search` (serve_app.routes.common.MemoryIdConvertor).
ONE = "/v1/memories/{memory_id:memory_id}"


class MemoryRoutes(IngressParts):
    @router.post("/v1/memories", status_code=201, response_model=WriteResult, responses=errors(409, body=True))
    async def write(
        self, body: MemoryIn | MemoryBatchIn, caller: Caller, idempotency_key: IdempotencyKey = None,
    ) -> dict[str, list[str]]:
        """Store one memory, or `{"memories": [...]}`; durable when acknowledged."""
        caller.require("writer")
        items = body.memories if isinstance(body, MemoryBatchIn) else [body]
        limit = self.settings.limits.max_batch_memories
        if len(items) > limit:
            raise InvalidInputError(f"{len(items)} memories in one request; the limit is {limit}")
        for item in items:
            # A team's searches return what carries its id: a key kept to some teams adds to those
            # only, and only memories it may change afterwards (never one of no team).
            caller.require_team(item.team_id)
        memories = [item.as_new_memory() for item in items]
        result = await self.writers.add(caller.org_id, memories, idempotency_key, caller.key_id)
        return {"ids": result["ids"]}

    @router.post("/v1/memories/search", response_model=SearchResult, responses=errors(body=True))
    async def search(self, body: SearchIn, caller: Caller) -> JSONResponse:
        """Recall: vector + keyword search fused with recency and importance, inside one user (or,
        with `scope: team`, one team). A key kept to teams names only its own as `team_id`, and
        finds no memory of another team."""
        caller.require("reader")
        if body.team_id is not None:
            caller.require_team(body.team_id)
        started = time.perf_counter()
        # The store leaves out the memories of teams the key may not read (`visible_teams`).
        recall = functools.partial(self.recaller.recall, caller.org_id, body, visible_teams=caller.teams)
        result = await asyncio.get_running_loop().run_in_executor(self.recall_pool, recall)
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.recall_latency.observe(elapsed_ms, tags={"degraded": str(result.degraded).lower()})
        # Plain JSON at once, without FastAPI's generic encoder (0.3 ms a search).
        return JSONResponse(result.model_dump(mode="json"))

    @router.post("/v1/context", response_model=Context, responses=errors(body=True))
    async def context(self, body: ContextIn, caller: Caller) -> JSONResponse:
        """Recall-and-inject in one call: the block an agent puts in its prompt before answering.

        The memories that answer `query` (each with its type and date), a summary of the session's
        turns older than the window (by the configured LLM, or extractive offline; cached and
        refreshed as the session grows) and the session's recent turns, whole, within `max_tokens`
        counted with the tokenizer the answer names; in the session's language (English or
        Chinese); as `text` and as `parts`.
        """
        caller.require("reader")
        block = functools.partial(self.recaller.context, caller.org_id, body, visible_teams=caller.teams)
        return JSONResponse(await asyncio.get_running_loop().run_in_executor(self.recall_pool, block))

    @router.get("/v1/memories", response_model=MemoryPage, responses=errors())
    async def list_memories(
        self, caller: Caller, user_id: UserId,
        limit: Annotated[int, Query(ge=1, le=1000, description="Memories per page.")] = 50,
        cursor: Annotated[str | None, Query(description="The `next_cursor` of the page before.")] = None,
        status: Annotated[str, Query(description="`active`, `superseded`, `expired` or `all`.")] = "active",
    ) -> dict[str, Any]:
        """A user's memories, newest first (for a key kept to teams, those of its teams and of no
        team: a page may then hold fewer than `limit`; `next_cursor` goes on from where it ended)."""
        caller.require("reader")
        scope = Scope.user(caller.org_id, user_id)
        page = await self.read(
            lambda: self.reader.list(scope, limit=limit, cursor=cursor, status=None if status == "all" else status)
        )
        records = [m for m in page.records if caller.may_read(m.team_id)]
        return {"memories": [m.public() for m in records], "next_cursor": page.next_cursor}

    @router.get(ONE, response_model=Memory, responses=errors(404))
    async def get_memory(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """One memory; another user's or org's id is a 404, another team's (for a key kept to teams) a 403."""
        caller.require("reader")
        record = await self.read(self.reader.get, Scope.user(caller.org_id, user_id), memory_id)
        caller.require_read(record.team_id)
        return record.public()

    @router.patch(ONE, response_model=Memory, responses=errors(404, body=True))
    async def patch_memory(self, memory_id: MemoryId, body: PatchIn, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Change content, type, importance, metadata or expiry in place (content re-embedded)."""
        caller.require("writer")
        scope = Scope.user(caller.org_id, user_id)
        await self.require_changeable(caller, scope, memory_id)
        return await self.writers.of(caller.org_id, user_id).run.remote(
            caller.org_id, "update", scope, memory_id, body, actor=caller.key_id
        )

    @router.delete(ONE, response_model=Deleted, responses=errors(404))
    async def delete_memory(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Delete one memory; its audit trail stays."""
        caller.require("writer")
        scope = Scope.user(caller.org_id, user_id)
        await self.require_changeable(caller, scope, memory_id)
        await self.writers.of(caller.org_id, user_id).run.remote(caller.org_id, "delete", scope, memory_id,
                                                                 actor=caller.key_id)
        return {"deleted": memory_id}

    @router.post(ONE + "/restore", response_model=Memory, responses=errors(404, 409))
    async def restore_memory(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Undo a wrong supersede or merge: the superseded memory is active again (409 if it is not
        superseded), with a `restored` event; consolidation keeps it apart from what replaced it.
        It is one more active memory: an org at its memory quota restores nothing."""
        caller.require("writer")
        scope = Scope.user(caller.org_id, user_id)
        await self.require_changeable(caller, scope, memory_id)
        return await self.writers.of(caller.org_id, user_id).run.remote(
            caller.org_id, "restore", scope, memory_id, actor=caller.key_id
        )

    @router.get(ONE + "/history", response_model=MemoryHistory, responses=errors(404))
    async def history(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """The memory's audit events, oldest first (also after it was deleted, except for a key kept to
        teams: events do not say which team a deleted memory was of)."""
        caller.require("reader")
        scope = Scope.user(caller.org_id, user_id)
        events = await self.read(self.reader.history, scope, memory_id)
        if caller.teams is not None:
            try:
                record = await self.read(self.reader.get, scope, memory_id)
            except NotFoundError:
                raise PermissionDeniedError(
                    f"memory {memory_id} is deleted and its events do not say its team: a key kept to teams "
                    "cannot read its history; use a key without teams", code="team_forbidden",
                ) from None
            caller.require_read(record.team_id)
        return {"events": [e.model_dump(mode="json") for e in events]}
