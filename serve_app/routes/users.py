"""`/v1/users`: the org's users with their counts, and of one user: the timeline of their memories,
everything of theirs erased or exported."""

from datetime import datetime
from typing import Annotated, Any

from agent_memory_http.models import Erasure, ExportLine, Timeline, UserPage
from fastapi import APIRouter, Path, Query

from agent_memory.models import Scope, check_identifier
from agent_memory.portability import dumps
from serve_app.middleware import Caller
from serve_app.routes.common import IngressParts, NDJSONResponse
from serve_app.schemas import errors

router = APIRouter(tags=["users"])


class UserRoutes(IngressParts):
    @router.get("/v1/users", response_model=UserPage, responses=errors())
    async def users(
        self, caller: Caller,
        limit: Annotated[int, Query(ge=1, le=1000, description="Users per page.")] = 50,
        cursor: Annotated[str | None, Query(description="The `next_cursor` of the page before.")] = None,
        prefix: Annotated[str | None, Query(max_length=256, description="Only users whose id starts with this.")] = None,
    ) -> dict[str, Any]:
        """The org's users (who hold memories or logged turns), ordered by id: each with their memories
        counted by status and their active ones by type, and their last activity. A key kept to teams or
        an agent's key cannot list them (the counts span every team's and agent's memories)."""
        caller.require("reader")
        caller.require_every_team("the users' counts")
        caller.require_every_agent("the users' counts")
        users, next_cursor = await self.read(
            lambda: self.reader.users(caller.org_id, limit=limit, cursor=cursor, prefix=prefix))
        return {"users": users, "next_cursor": next_cursor}

    @router.get("/v1/users/{user_id}/timeline", response_model=Timeline, responses=errors())
    async def timeline(
        self, user_id: Annotated[str, Path(description="The user whose memories' changes to replay.")], caller: Caller,
        since: Annotated[datetime | None, Query(description="Only events at or after this time (ISO 8601).")] = None,
        until: Annotated[datetime | None, Query(description="Only events at or before this time (ISO 8601).")] = None,
        limit: Annotated[int, Query(ge=1, le=5000, description="Events per page.")] = 500,
        cursor: Annotated[str | None, Query(description="The `next_cursor` of the page before.")] = None,
    ) -> dict[str, Any]:
        """Every change of the user's memories, oldest first: each created, updated, reinforced,
        superseded, merged, expired, restored, deleted memory and each vote on one, with its text and
        status after the change (an erased user's timeline holds only the erasure's events, without
        text). An agent's key sees the changes of the memories it may read; a key kept to teams
        cannot read it (events do not say a memory's team)."""
        caller.require("reader")
        caller.require_every_team("the timeline")
        check_identifier("user_id", user_id)
        events, next_cursor = await self.read(lambda: self.reader.timeline(
            self.scope_of(caller, user_id), since=since, until=until, limit=limit, cursor=cursor))
        return {"events": events, "next_cursor": next_cursor}

    @router.delete("/v1/users/{user_id}", status_code=202, response_model=Erasure, responses=errors())
    async def erase_user(
        self, user_id: Annotated[str, Path(description="The user to erase, everything of theirs.")], caller: Caller
    ) -> dict[str, Any]:
        """Erase everything of a user, unrecoverably: gone from every read when this answers; the
        job `job_id` then removes their bytes from every file of the store (its report is the receipt)."""
        caller.require("admin")
        caller.require_every_team("erasing a user")
        caller.require_every_agent("erasing a user")
        check_identifier("user_id", user_id)
        started = await self.writers.of(caller.org_id, user_id).erase_user.remote(caller.org_id, user_id, caller.key_id)
        self.recaller.forget_summaries(caller.org_id, user_id)
        return {"erased": started["rows_deleted"], "job_id": started["job_id"]}

    @router.get("/v1/users/{user_id}/export", response_class=NDJSONResponse, responses={
        200: {"model": ExportLine, "description": "The export, one JSON object a line (`application/x-ndjson`)."},
        **errors(stream=True),
    })
    async def export_user(
        self, user_id: Annotated[str, Path(description="The user whose memory to export.")], caller: Caller
    ) -> NDJSONResponse:
        """Everything of a user, streamed as JSON lines: every memory in any state (ids, status,
        `superseded_by`, validity, importance, access counts, sources, metadata), every logged turn
        and the audit events of their memories. `agent-memory import --format memories` restores
        it into an empty user with the same ids and states."""
        caller.require("admin")
        caller.require_every_team("exporting a user")  # their memories of every team
        caller.require_every_agent("exporting a user")  # and of every agent
        check_identifier("user_id", user_id)
        lines = await self.read(lambda: list(self.reader.export_user(Scope.user(caller.org_id, user_id))))
        return NDJSONResponse(dumps(line) + "\n" for line in lines)
