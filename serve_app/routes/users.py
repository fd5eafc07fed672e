"""`/v1/users/{user_id}`: everything of one user, erased or exported."""

from typing import Annotated, Any

from agent_memory_http.models import Erasure, ExportLine
from fastapi import APIRouter, Path

from agent_memory.models import Scope, check_identifier
from agent_memory.portability import dumps
from serve_app.middleware import Caller
from serve_app.routes.common import IngressParts, NDJSONResponse
from serve_app.schemas import errors

router = APIRouter(tags=["users"])


class UserRoutes(IngressParts):
    @router.delete("/v1/users/{user_id}", status_code=202, response_model=Erasure, responses=errors())
    async def erase_user(
        self, user_id: Annotated[str, Path(description="The user to erase, everything of theirs.")], caller: Caller
    ) -> dict[str, Any]:
        """Erase everything of a user, unrecoverably: gone from every read when this answers; the
        job `job_id` then removes their bytes from every file of the store (its report is the receipt)."""
        caller.require("admin")
        caller.require_every_team("erasing a user")
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
        check_identifier("user_id", user_id)
        lines = await self.read(lambda: list(self.reader.export_user(Scope.user(caller.org_id, user_id))))
        return NDJSONResponse(dumps(line) + "\n" for line in lines)
