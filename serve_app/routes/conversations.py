"""`/v1/conversations` and `/v1/sessions`: turns logged now and learnt from in the background, and a
session's recent window."""

from typing import Annotated, Any

from agent_memory_http.models import JobAccepted, SessionMessages
from fastapi import APIRouter, Path, Query

from agent_memory.models import Scope
from serve_app.middleware import Caller
from serve_app.routes.common import IngressParts, UserId
from serve_app.schemas import ConversationIn, errors

router = APIRouter(tags=["conversations"])


class ConversationRoutes(IngressParts):
    @router.post("/v1/conversations", status_code=202, response_model=JobAccepted, responses=errors(body=True))
    async def conversations(self, body: ConversationIn, caller: Caller) -> dict[str, str]:
        """Redact and log the turns now; extract memories in the background (`GET /v1/jobs/{id}`).

        `mode`: `rules` (offline patterns, English and Chinese), `llm` (the configured
        OpenAI-compatible model) or `raw` (every turn); default `llm` when an LLM is configured.
        """
        caller.require("writer")
        # Extraction may reinforce or supersede any memory of the user, of any team, and what it
        # makes carries no team.
        caller.require_every_team("learning from a conversation")
        job_id = await self.writers.of(caller.org_id, body.user_id).log_conversation.remote(
            caller.org_id, body.user_id, body.session_id, body.agent_id, body.messages, body.mode, caller.key_id
        )
        return {"job_id": job_id}

    @router.get("/v1/sessions/{session_id}/messages", response_model=SessionMessages, responses=errors())
    async def session_messages(
        self, session_id: Annotated[str, Path(description="The session.")], caller: Caller, user_id: UserId,
        last: Annotated[int, Query(ge=1, le=1000, description="How many of the latest turns.")] = 20,
    ) -> dict[str, Any]:
        """The recent window of a session, oldest first."""
        caller.require("reader")
        records = await self.read(
            lambda: self.reader.session_messages(Scope.user(caller.org_id, user_id), session_id, last=last)
        )
        return {"messages": [r.model_dump(mode="json", exclude={"id", "org_id"}) for r in records]}
