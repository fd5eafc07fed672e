"""The HTTP ingress: the FastAPI app, its routes, and recall itself (IngressDeployment).

Changes go to the Writer, in order; reads that need no model go to the store; search runs in
this replica, one hop from the client. Errors become statuses in serve_app.errors, and every
request passes through serve_app.middleware.
"""

import asyncio
import functools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Annotated, Any

from agent_memory_http.models import (
    Context,
    Deleted,
    Erasure,
    ExportLine,
    Health,
    Job,
    JobAccepted,
    Memory,
    MemoryHistory,
    MemoryPage,
    Readiness,
    Schedule,
    SearchResult,
    SessionMessages,
    WriteResult,
)
from fastapi import FastAPI, Header, Path, Query
from fastapi.responses import JSONResponse, StreamingResponse

from agent_memory.embedding import BatchingEmbedder
from agent_memory.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from agent_memory.models import OrgScope, Scope, check_identifier
from agent_memory.portability import dumps
from agent_memory.settings import Settings
from jobs.consolidate import job_id as consolidation_job_id
from jobs.importer import submit_import
from jobs.schedule import submit_consolidation
from serve_app import metrics
from serve_app.auth import Principal
from serve_app.docs import add_docs
from serve_app.embedder import query_embedder
from serve_app.errors import add_error_handlers, unwrap_remote
from serve_app.middleware import Caller, RequestContext, prepare_state
from serve_app.schemas import (
    ConsolidateIn,
    ContextIn,
    ConversationIn,
    ImportIn,
    MemoryBatchIn,
    MemoryIn,
    PatchIn,
    SearchIn,
    dump,
    errors,
)
from serve_app.shards import WriterShards
from storage import open_store
from storage.connect import open_service

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

app = FastAPI(
    title="agent-memory",
    version="0.1.0",
    description=(
        "Long-term memory for LLM agents: recall before answering (`POST /v1/context` gives the prompt "
        "block in one call), store after answering (`POST /v1/conversations`). Every call is confined to "
        "the org of its API key and to the `user_id` given. Every error answers "
        "`{\"error\": {\"code\", \"message\"}}`."
    ),
    docs_url=None,
    redoc_url=None,
)
add_error_handlers(app)
add_docs(app)
app.add_middleware(RequestContext)


def resolve_import_path(path: str, root: str) -> str:
    """An object-store URI as given, or a local path that must stay inside the import root."""
    if "://" in path:
        if not path.startswith(("s3://", "gs://", "az://")):
            raise InvalidInputError("path must be an object-store URI (s3://...) or a file under the import root")
        return path
    base = FilePath(root).resolve()
    target = (base / path).resolve()
    if base != target and base not in target.parents:
        raise InvalidInputError("path must stay inside the server's import root")
    if not target.is_file():
        raise NotFoundError(f"no file {path!r} under the import root")
    return str(target)


class NDJSONResponse(StreamingResponse):
    """JSON lines, streamed."""

    media_type = "application/x-ndjson"


UserId = Annotated[str, Query(min_length=1, max_length=256, description="The user whose memories these are.")]
MemoryId = Annotated[str, Path(description="The memory's id (the server's, or the `id` it was written with).")]
IdempotencyKey = Annotated[str | None, Header(
    max_length=256, description="Any unique string: a retry with the same key stores nothing twice and answers as "
                                "the first attempt did (the client sends one with every write).")]


class IngressDeployment:
    """HTTP, and recall itself; changes go to the Writer; reads that need no model go to the store.
    `app.build` makes it the `Ingress` deployment, serving `app`."""

    async def __init__(
        self, settings: Settings, writers: "list[DeploymentHandle]", embedder: "DeploymentHandle",
        scheduler: "DeploymentHandle", *, local_queries: bool = False,
    ) -> None:
        self._settings = settings
        # Each user's changes go to one Writer shard (serve_app.shards).
        self._writers, self._embedder, self._scheduler = WriterShards(writers), embedder, scheduler
        info = await embedder.info.remote()
        self._store = open_store(settings, embedding_model=info["name"], embedding_dim=info["dim"])
        # Reads only (get, list, history, sessions); changes go through the Writer, in order.
        self._reader = open_service(settings, with_embedder=False, store=self._store)
        # Recall runs here, one hop from the client (see benchmarks/serve_latency.py), with access
        # bookkeeping deferred. Queries are embedded in this replica, concurrent ones sharing a
        # forward pass, or, where the Embedder holds a GPU, there (build() decides).
        queries = await query_embedder(settings, embedder, info, local=local_queries)
        self._recaller = open_service(settings, embedder=queries, store=self._store, defer_access=True)
        self._recall_pool = ThreadPoolExecutor(max_workers=settings.serving.recall_threads, thread_name_prefix="recall")
        self._recall_latency = metrics.recall_latency()
        # Keys (re-read as their file changes) and rate limits; the task keeps the limiter's
        # replica count current, for limits that hold across every ingress replica.
        self._replica_count = prepare_state(settings)

    def __del__(self) -> None:
        if hasattr(self, "_recaller"):
            self._recaller.close()  # flushes the deferred access counts
            if isinstance(self._recaller.embedder, BatchingEmbedder):
                self._recaller.embedder.close()

    async def _read(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _require_changeable(self, caller: Principal, scope: Scope, memory_id: str) -> None:
        """For a key kept to teams: `team_forbidden` unless the memory carries one of its teams.
        A memory that is not the user's, or not there, stays a 404."""
        if caller.teams is not None:
            record = await self._read(self._reader.get, scope, memory_id)
            caller.require_team(record.team_id)

    # -- health ------------------------------------------------------------------------------

    @app.get("/healthz", tags=["health"], response_model=Health)
    async def healthz(self) -> dict[str, str]:
        """Liveness."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], response_model=Readiness,
             responses={503: {"model": Readiness, "description": "Not ready: the writer or the store does not answer."}})
    async def readyz(self) -> JSONResponse:
        """Readiness: the model answers, the writer runs, the store is reachable."""
        checks: dict[str, str] = {}
        try:
            await asyncio.wait_for(self._embedder.embed_one.remote("readiness probe"), self._settings.embedding.timeout_s)
            checks["embedder"] = "ok"
        except Exception as exc:
            checks["embedder"] = f"unavailable: {type(unwrap_remote(exc)).__name__}"
        if isinstance(self._recaller.embedder, BatchingEmbedder):
            # Search embeds its queries in this replica: its own model decides `degraded` too.
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self._recall_pool, self._recaller.embedder.embed_query, "readiness probe"
                )
                checks["query_embedder"] = "ok"
            except Exception as exc:
                checks["query_embedder"] = f"unavailable: {type(exc).__name__}"
        try:
            await asyncio.wait_for(asyncio.gather(*(w.ping.remote() for w in self._writers.handles)),
                                   self._settings.embedding.timeout_s)
            checks["writer"] = "ok"
        except Exception as exc:
            checks["writer"] = f"unavailable: {type(unwrap_remote(exc)).__name__}"
        try:
            await self._read(self._store.ping)
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unavailable: {type(exc).__name__}"
        ready = checks["store"] == "ok" and checks["writer"] == "ok"
        # Degraded: search answers from keywords alone, or writes cannot be embedded.
        degraded = any(checks[k] != "ok" for k in ("embedder", "query_embedder") if k in checks)
        body = {"ready": ready, "degraded": degraded, "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)

    # -- memories ------------------------------------------------------------------------------

    @app.post("/v1/memories", status_code=201, tags=["memories"], response_model=WriteResult,
              responses=errors(409, body=True))
    async def write(
        self, body: MemoryIn | MemoryBatchIn, caller: Caller,
        idempotency_key: IdempotencyKey = None,
    ) -> dict[str, list[str]]:
        """Store one memory, or `{"memories": [...]}`; durable when acknowledged."""
        caller.require("writer")
        items = [dump(m) for m in body.memories] if isinstance(body, MemoryBatchIn) else [dump(body)]
        if len(items) > self._settings.limits.max_batch_memories:
            raise InvalidInputError(f"{len(items)} memories in one request; the limit is {self._settings.limits.max_batch_memories}")
        for item in items:
            # A team's searches return what carries its id: a key kept to some teams adds to those
            # only, and only memories it may change afterwards (never one of no team).
            caller.require_team(item.get("team_id"))
        result = await self._writers.add(caller.org_id, items, idempotency_key, caller.key_id)
        return {"ids": result["ids"]}

    @app.post("/v1/memories/search", tags=["memories"], response_model=SearchResult, responses=errors(body=True))
    async def search(self, body: SearchIn, caller: Caller) -> JSONResponse:
        """Recall: vector + keyword search fused with recency and importance, inside one user (or,
        with `scope: team`, one team). A key kept to teams names only its own as `team_id`, and
        finds no memory of another team."""
        caller.require("reader")
        if body.team_id is not None:
            caller.require_team(body.team_id)
        started = time.perf_counter()
        result = await asyncio.get_running_loop().run_in_executor(
            self._recall_pool, self._recaller.recall, caller.org_id, dump(body)
        )
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._recall_latency.observe(elapsed_ms, tags={"degraded": str(result.degraded).lower()})
        payload = result.model_dump(mode="json")
        if caller.teams is not None and body.team_id is None:
            payload["memories"] = [hit for hit in payload["memories"] if caller.may_read(hit.get("team_id"))]
        for hit in payload["memories"]:
            for key in ("user_id", "team_id", "agent_id", "session_id"):
                hit.pop(key, None)
        # Already plain JSON: answered as is, without FastAPI's generic encoder (0.3 ms a search).
        return JSONResponse(payload)

    @app.post("/v1/context", tags=["memories"], response_model=Context, responses=errors(body=True))
    async def context(self, body: ContextIn, caller: Caller) -> JSONResponse:
        """Recall-and-inject in one call: the block an agent puts in its prompt before answering.

        The memories that answer `query` (each with its type and date), a summary of the session's
        turns older than the window (by the configured LLM, or extractive offline; cached and
        refreshed as the session grows) and the session's recent turns, whole, within `max_tokens`
        counted with the tokenizer the answer names; in the session's language (English or
        Chinese); as `text` and as `parts`.
        """
        caller.require("reader")
        visible = None if caller.teams is None else caller.may_read
        block = await asyncio.get_running_loop().run_in_executor(
            self._recall_pool, functools.partial(self._recaller.context, caller.org_id, dump(body), visible=visible)
        )
        return JSONResponse(block)

    @app.get("/v1/memories", tags=["memories"], response_model=MemoryPage, responses=errors())
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
        page = await self._read(
            lambda: self._reader.list(scope, limit=limit, cursor=cursor, status=None if status == "all" else status)
        )
        records = [m for m in page.records if caller.may_read(m.team_id)]
        return {"memories": [m.public() for m in records], "next_cursor": page.next_cursor}

    @app.get("/v1/memories/{memory_id}", tags=["memories"], response_model=Memory, responses=errors(404))
    async def get_memory(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """One memory; another user's or org's id is a 404, another team's (for a key kept to teams) a 403."""
        caller.require("reader")
        record = await self._read(self._reader.get, Scope.user(caller.org_id, user_id), memory_id)
        caller.require_read(record.team_id)
        return record.public()

    @app.patch("/v1/memories/{memory_id}", tags=["memories"], response_model=Memory, responses=errors(404, body=True))
    async def patch_memory(self, memory_id: MemoryId, body: PatchIn, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Change content, type, importance, metadata or expiry in place (content re-embedded)."""
        caller.require("writer")
        scope = Scope.user(caller.org_id, user_id)
        await self._require_changeable(caller, scope, memory_id)
        return await self._writers.of(caller.org_id, user_id).run.remote(
            caller.org_id, "update", scope, memory_id, dump(body), actor=caller.key_id
        )

    @app.delete("/v1/memories/{memory_id}", tags=["memories"], response_model=Deleted, responses=errors(404))
    async def delete_memory(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Delete one memory; its audit trail stays."""
        caller.require("writer")
        scope = Scope.user(caller.org_id, user_id)
        await self._require_changeable(caller, scope, memory_id)
        await self._writers.of(caller.org_id, user_id).run.remote(
            caller.org_id, "delete", scope, memory_id, actor=caller.key_id
        )
        return {"deleted": memory_id}

    @app.post("/v1/memories/{memory_id}/restore", tags=["memories"], response_model=Memory,
              responses=errors(404, 409))
    async def restore_memory(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Undo a wrong supersede or merge: the superseded memory is active again (409 if it is not
        superseded), with a `restored` event; consolidation keeps it apart from what replaced it.
        It is one more active memory: an org at its memory quota restores nothing."""
        caller.require("writer")
        scope = Scope.user(caller.org_id, user_id)
        await self._require_changeable(caller, scope, memory_id)
        return await self._writers.of(caller.org_id, user_id).run.remote(
            caller.org_id, "restore", scope, memory_id, actor=caller.key_id
        )

    @app.get("/v1/memories/{memory_id}/history", tags=["memories"], response_model=MemoryHistory,
             responses=errors(404))
    async def history(self, memory_id: MemoryId, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """The memory's audit events, oldest first (also after it was deleted, except for a key kept to
        teams: events do not say which team a deleted memory was of)."""
        caller.require("reader")
        scope = Scope.user(caller.org_id, user_id)
        events = await self._read(self._reader.history, scope, memory_id)
        if caller.teams is not None:
            try:
                record = await self._read(self._reader.get, scope, memory_id)
            except NotFoundError:
                raise PermissionDeniedError(
                    f"memory {memory_id} is deleted and its events do not say its team: a key kept to teams "
                    "cannot read its history; use a key without teams", code="team_forbidden",
                ) from None
            caller.require_read(record.team_id)
        return {"events": [e.model_dump(mode="json") for e in events]}

    @app.delete("/v1/users/{user_id}", status_code=202, tags=["users"], response_model=Erasure, responses=errors())
    async def erase_user(
        self, user_id: Annotated[str, Path(description="The user to erase, everything of theirs.")], caller: Caller
    ) -> dict[str, Any]:
        """Erase everything of a user, unrecoverably: gone from every read when this answers; the
        job `job_id` then removes their bytes from every file of the store (its report is the receipt)."""
        caller.require("admin")
        caller.require_every_team("erasing a user")
        check_identifier("user_id", user_id)
        started = await self._writers.of(caller.org_id, user_id).erase_user.remote(caller.org_id, user_id, caller.key_id)
        self._recaller.forget_summaries(caller.org_id, user_id)
        return {"erased": started["rows_deleted"], "job_id": started["job_id"]}

    @app.get("/v1/users/{user_id}/export", tags=["users"], response_class=NDJSONResponse, responses={
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
        lines = await self._read(lambda: list(self._reader.export_user(Scope.user(caller.org_id, user_id))))
        return NDJSONResponse(dumps(line) + "\n" for line in lines)

    # -- conversations, sessions, jobs ---------------------------------------------------------

    @app.post("/v1/conversations", status_code=202, tags=["conversations"], response_model=JobAccepted,
              responses=errors(body=True))
    async def conversations(self, body: ConversationIn, caller: Caller) -> dict[str, str]:
        """Redact and log the turns now; extract memories in the background (`GET /v1/jobs/{id}`).

        `mode`: `rules` (offline patterns, English and Chinese), `llm` (the configured
        OpenAI-compatible model) or `raw` (every turn); default `llm` when an LLM is configured.
        """
        caller.require("writer")
        # Extraction may reinforce or supersede any memory of the user, of any team, and what it
        # makes carries no team.
        caller.require_every_team("learning from a conversation")
        messages = [dump(m) for m in body.messages]
        job_id = await self._writers.of(caller.org_id, body.user_id).log_conversation.remote(
            caller.org_id, body.user_id, body.session_id, body.agent_id, messages, body.mode, caller.key_id
        )
        return {"job_id": job_id}

    @app.get("/v1/sessions/{session_id}/messages", tags=["conversations"], response_model=SessionMessages,
             responses=errors())
    async def session_messages(
        self, session_id: Annotated[str, Path(description="The session.")], caller: Caller, user_id: UserId,
        last: Annotated[int, Query(ge=1, le=1000, description="How many of the latest turns.")] = 20,
    ) -> dict[str, Any]:
        """The recent window of a session, oldest first."""
        caller.require("reader")
        records = await self._read(
            lambda: self._reader.session_messages(Scope.user(caller.org_id, user_id), session_id, last=last)
        )
        return {"messages": [r.model_dump(mode="json", exclude={"id", "org_id"}) for r in records]}

    @app.post("/v1/jobs/import", status_code=202, tags=["jobs"], response_model=JobAccepted,
              responses=errors(404, body=True))
    async def submit_import(self, body: ImportIn, caller: Caller) -> dict[str, str]:
        """Submit a bulk import of a history file to the cluster; rows of other orgs are rejected.

        `path` is an object-store URI (`s3://...`) or a file under the server's import root
        (`AGENT_MEMORY_IMPORT_ROOT`): a client never names arbitrary server files.
        """
        caller.require("admin")
        caller.require_every_team("an import")  # its rows may name any team
        path = resolve_import_path(body.path, self._settings.imports.root)
        await self._writers.any.check_room.remote(caller.org_id)  # an org at its memory quota imports nothing
        job_id = await self._read(lambda: submit_import(
            self._settings, path=path, fmt=body.format, mode=body.mode, org_id=caller.org_id, user_id=body.user_id,
            store=self._store, actor=caller.key_id,
        ))
        return {"job_id": job_id}

    @app.post("/v1/jobs/consolidate", status_code=202, tags=["jobs"], response_model=JobAccepted,
              responses=errors(409, body=True))
    async def consolidate(self, body: ConsolidateIn, caller: Caller) -> dict[str, str]:
        """Start consolidation of the caller's org (or one user) on the cluster now."""
        caller.require("admin")
        caller.require_every_team("consolidation")  # it merges and retires memories of every team
        # The run's job row is written `queued` before its task starts: answerable at once.
        run = await self._read(lambda: submit_consolidation(
            self._settings, org_id=caller.org_id, user_id=body.user_id, dry_run=False, store=self._store
        ))
        return {"job_id": consolidation_job_id(run.run_id)}

    @app.get("/v1/schedule", tags=["jobs"], response_model=Schedule, responses=errors())
    async def schedule(self, caller: Caller) -> dict[str, Any]:
        """The consolidation schedule: on or off, the next run, the last submission."""
        caller.require("reader")
        return await self._scheduler.status.remote()

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], response_model=Job, responses=errors(404))
    async def get_job(self, job_id: Annotated[str, Path(description="The job's id.")], caller: Caller) -> dict[str, Any]:
        """Any background job of the caller's org."""
        caller.require("reader")
        check_identifier("job id", job_id)
        job = await self._read(self._store.get_job, OrgScope(caller.org_id), job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return {k: job[k] for k in ("id", "kind", "state", "progress", "error", "report", "created_at", "updated_at")}


@functools.cache
def ingress_class() -> type:
    """IngressDeployment serving `app`, made once per process.

    Serve rewrites the app's routes when it wraps the class (their `self` becomes a dependency, in
    the functions' signatures), so a replica must receive this module's classes and functions as
    they are here, by value, not import them afresh.
    """
    from ray import cloudpickle, serve

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return serve.ingress(app)(IngressDeployment)
