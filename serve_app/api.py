"""The HTTP API: FastAPI routes, auth, one exception handler, request ids, body-size limit.

Nothing below this module knows about HTTP; typed core errors become statuses here, once.
"""


import asyncio
import json
import logging
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve
from ray.exceptions import RayError
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent_memory.embedding import BatchingEmbedder, Embedder, build_embedder
from agent_memory.errors import (
    AgentMemoryError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from agent_memory.models import Scope, check_identifier, utcnow
from agent_memory.settings import Settings
from serve_app import metrics
from serve_app.app import RemoteEmbedder, _unwrap
from serve_app.auth import ANONYMOUS, ApiKeys, Principal, UnauthorizedError
from serve_app.schemas import (
    ConsolidateIn,
    ConversationIn,
    ImportIn,
    MemoryBatchIn,
    MemoryIn,
    PatchIn,
    SearchIn,
    dump,
)
from storage import open_store

# Serve's own logger: with `logging_config: {encoding: JSON}` every line is JSON with the request id.
log = logging.getLogger("ray.serve")

STATUS = {
    InvalidInputError: 422,
    NotFoundError: 404,
    ConflictError: 409,
    UnauthorizedError: 401,
    PermissionDeniedError: 403,
    UnavailableError: 503,
}

app = FastAPI(
    title="agent-memory",
    version="0.1.0",
    description=(
        "Long-term memory for LLM agents: recall before answering, store after answering. "
        "Every call is confined to the org of its API key and to the `user_id` given."
    ),
)


class TooLargeError(InvalidInputError):
    """The request body is over the configured limit."""

    code = "body_too_large"


class RateLimitedError(UnavailableError):
    """Too many requests for this key."""

    code = "rate_limited"


def error_response(exc: BaseException) -> JSONResponse:
    """The one mapping from errors to `{"error": {"code", "message"}}` responses."""
    exc = _unwrap(exc)
    if isinstance(exc, TooLargeError):
        status = 413
    elif isinstance(exc, RateLimitedError):
        status = 429
    elif isinstance(exc, AgentMemoryError):
        status = next((s for cls, s in STATUS.items() if isinstance(exc, cls)), 400)
        if exc.code == "queue_full":
            status = 429
    elif isinstance(exc, (RayError, TimeoutError)):
        # A replica died or is restarting: the caller may retry (with the same Idempotency-Key).
        return JSONResponse(
            {"error": {"code": "unavailable", "message": f"service temporarily unavailable ({type(exc).__name__})"}},
            status_code=503,
        )
    else:
        log.exception("unexpected error", exc_info=exc)
        return JSONResponse({"error": {"code": "internal", "message": "internal error"}}, status_code=500)
    return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=status)


@app.exception_handler(Exception)
async def _any_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc)


@app.exception_handler(AgentMemoryError)
async def _typed_error(request: Request, exc: AgentMemoryError) -> JSONResponse:
    return error_response(exc)


@app.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    # A body that is one memory or a batch fails both ways: report the shape it was meant to have.
    meant = "MemoryBatchIn" if isinstance(exc.body, dict) and "memories" in exc.body else "MemoryIn"
    if any(meant in err.get("loc", ()) for err in errors):
        errors = [e for e in errors if meant in e.get("loc", ())]
    parts = []
    for err in errors:
        loc = [p for p in err.get("loc", ()) if p not in ("body", "MemoryIn", "MemoryBatchIn")]
        where = ".".join(str(p) for p in loc) or "body"
        parts.append(f"{where}: {str(err.get('msg', 'invalid')).removeprefix('Value error, ')}")
    return JSONResponse({"error": {"code": "invalid_input", "message": "; ".join(parts)}}, status_code=422)


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse({"error": {"code": code, "message": str(exc.detail)}}, status_code=exc.status_code)


def serve_request_id() -> str | None:
    """The id Serve gave the request being handled (None outside a replica)."""
    try:
        return serve.context._get_serve_request_context().request_id or None
    except Exception:  # a Serve version without the context, or outside a request
        return None


class RequestContext:
    """Request ids, the body-size limit (before any parsing), and one JSON log line per request.

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs each
    request in a task group of its own, which cost more CPU than the rest of this middleware
    (measured with py-spy on the search path).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        # Serve's proxy gives every request an id (the client's `x-request-id` when it sends one),
        # returns it in the `x-request-id` header and logs it; our log line carries the same id.
        request_id = serve_request_id() or headers.get(b"x-request-id", b"").decode("latin-1") or uuid.uuid4().hex
        status = {"code": 500, "started": False}

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        state = scope["app"].state  # the FastAPI app's (Starlette sets it before any middleware)
        try:
            try:
                await self._limited(scope, receive, send_status, state.settings.max_body_bytes, headers)
            except Exception as exc:
                # Errors without a handler of their own (a replica that died, a timeout) would
                # otherwise be answered outside this middleware, unseen by its log and metrics.
                if status["started"]:
                    raise
                await error_response(exc)(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            state.requests.inc(tags={"route": route, "status": str(status["code"])})
            log.info(json.dumps({
                "event": "request", "request_id": request_id, "method": scope["method"], "route": route,
                "status": status["code"], "ms": round((time.perf_counter() - started) * 1000, 2),
            }))

    async def _limited(self, scope: dict[str, Any], receive: Any, send: Any, limit: int, headers: dict) -> None:
        """Answer 413 for a body over `limit`, told by its length or found while reading it."""
        too_large = TooLargeError(f"request body over {limit} bytes")
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                await error_response(too_large)(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        if scope["method"] not in ("POST", "PATCH", "PUT"):
            await self.app(scope, receive, send)
            return
        # A chunked body is read up to the limit, never further, then handed on whole.
        body, more = bytearray(), True
        while more and len(body) <= limit:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if len(body) > limit:
            await error_response(too_large)(scope, receive, send)
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


app.add_middleware(RequestContext)


def resolve_import_path(path: str, root: str) -> str:
    """An object-store URI as given, or a local path that must stay inside the import root."""
    if "://" in path:
        if not path.startswith(("s3://", "gs://", "az://")):
            raise InvalidInputError("path must be an object-store URI (s3://...) or a file under the import root")
        return path
    base = Path(root).resolve()
    target = (base / path).resolve()
    if base != target and base not in target.parents:
        raise InvalidInputError("path must stay inside the server's import root")
    if not target.is_file():
        raise NotFoundError(f"no file {path!r} under the import root")
    return str(target)


async def principal(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The caller: the key's org and role, or the anonymous default org when no keys are configured.

    Asynchronous although it never waits: FastAPI runs a plain function dependency in a worker
    thread, a hand-off per request that cost the event loop more than the check itself.
    """
    state = request.app.state
    keys: ApiKeys | None = state.keys
    caller = ANONYMOUS if keys is None else keys.authenticate(authorization)
    limit = state.settings.rate_limit_per_minute
    if limit:
        now = time.monotonic()
        window = state.rate[caller.key_id]
        window[:] = [t for t in window if now - t < 60]
        if len(window) >= limit:
            raise RateLimitedError(f"more than {limit} requests a minute for this key")
        window.append(now)
    return caller


Caller = Annotated[Principal, Depends(principal)]
UserId = Annotated[str, Query(min_length=1, max_length=256, description="the user whose memories these are")]


@serve.deployment(name="Ingress", ray_actor_options={"num_cpus": 0.3})
@serve.ingress(app)
class IngressDeployment:
    """HTTP, and recall itself; changes go to the Writer; reads that need no model go to the store."""

    async def __init__(
        self, settings: Settings, writer: DeploymentHandle, embedder: DeploymentHandle, scheduler: DeploymentHandle,
        *, local_queries: bool = False,
    ) -> None:
        from agent_memory.service import MemoryService

        self._settings = settings
        self._writer, self._embedder, self._scheduler = writer, embedder, scheduler
        info = await embedder.info.remote()
        self._store = open_store(settings, embedding_model=info["name"], embedding_dim=info["dim"])
        # Reads only (get, list, history, sessions); changes go through the Writer, in order.
        self._reader = MemoryService(self._store, None, settings, defer_access=False)
        # Recall runs here, one hop from the client (see benchmarks/serve_latency.py), with access
        # bookkeeping deferred. Queries are embedded in this replica, concurrent ones sharing a
        # forward pass, or, where the Embedder holds a GPU, there (build() decides).
        queries: Embedder
        if local_queries:
            model = await asyncio.get_running_loop().run_in_executor(
                None, lambda: build_embedder(
                    settings, threads=settings.query_threads, precision=settings.query_embedding_precision
                ),
            )
            batch_sizes = metrics.embed_batch_size()
            queries = BatchingEmbedder(
                model, cache_size=settings.embedding_cache_size, timeout_s=settings.embedder_timeout_s,
                on_batch=lambda n: batch_sizes.observe(n, tags={"path": "query"}),
            )
        else:
            queries = RemoteEmbedder(
                embedder, info["name"], info["dim"], settings.embedder_timeout_s, asyncio.get_running_loop()
            )
        self._recaller = MemoryService(self._store, queries, settings, defer_access=True)
        self._recall_pool = ThreadPoolExecutor(max_workers=settings.recall_threads, thread_name_prefix="recall")
        self._recall_latency = metrics.recall_latency()
        app.state.settings = settings
        app.state.keys = ApiKeys.load(settings.api_keys_file)
        app.state.rate = defaultdict(list)
        app.state.requests = metrics.requests()

    def __del__(self) -> None:
        if hasattr(self, "_recaller"):
            self._recaller.close()  # flushes the deferred access counts
            if isinstance(self._recaller.embedder, BatchingEmbedder):
                self._recaller.embedder.close()

    async def _read(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    # -- health ------------------------------------------------------------------------------

    @app.get("/healthz", tags=["health"])
    async def healthz(self) -> dict[str, str]:
        """Liveness."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz(self) -> JSONResponse:
        """Readiness: the model answers, the writer runs, the store is reachable."""
        checks: dict[str, str] = {}
        try:
            await asyncio.wait_for(self._embedder.embed_one.remote("readiness probe"), self._settings.embedder_timeout_s)
            checks["embedder"] = "ok"
        except Exception as exc:
            checks["embedder"] = f"unavailable: {type(_unwrap(exc)).__name__}"
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
            await asyncio.wait_for(self._writer.ping.remote(), self._settings.embedder_timeout_s)
            checks["writer"] = "ok"
        except Exception as exc:
            checks["writer"] = f"unavailable: {type(_unwrap(exc)).__name__}"
        try:
            await self._read(self._store.table("memories").count_rows)
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unavailable: {type(exc).__name__}"
        ready = checks["store"] == "ok" and checks["writer"] == "ok"
        # Degraded: search answers from keywords alone, or writes cannot be embedded.
        degraded = any(checks[k] != "ok" for k in ("embedder", "query_embedder") if k in checks)
        body = {"ready": ready, "degraded": degraded, "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)

    # -- memories ------------------------------------------------------------------------------

    @app.post("/v1/memories", status_code=201, tags=["memories"])
    async def write(
        self, body: MemoryIn | MemoryBatchIn, caller: Caller,
        idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
    ) -> dict[str, list[str]]:
        """Store one memory, or `{"memories": [...]}`; durable when acknowledged."""
        caller.require("writer")
        items = [dump(m) for m in body.memories] if isinstance(body, MemoryBatchIn) else [dump(body)]
        if len(items) > self._settings.max_batch_memories:
            raise InvalidInputError(f"{len(items)} memories in one request; the limit is {self._settings.max_batch_memories}")
        result = await self._writer.add.remote(caller.org_id, items, idempotency_key)
        return {"ids": result["ids"]}

    @app.post("/v1/memories/search", tags=["memories"])
    async def search(self, body: SearchIn, caller: Caller) -> JSONResponse:
        """Recall: vector + keyword search fused with recency and importance, inside one user."""
        caller.require("reader")
        started = time.perf_counter()
        result = await asyncio.get_running_loop().run_in_executor(
            self._recall_pool, self._recaller.recall, caller.org_id, dump(body)
        )
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._recall_latency.observe(elapsed_ms, tags={"degraded": str(result.degraded).lower()})
        payload = result.model_dump(mode="json")
        for hit in payload["memories"]:
            for key in ("user_id", "team_id", "agent_id", "session_id"):
                hit.pop(key, None)
        # Already plain JSON: answered as is, without FastAPI's generic encoder (0.3 ms a search).
        return JSONResponse(payload)

    @app.get("/v1/memories", tags=["memories"])
    async def list_memories(
        self, caller: Caller, user_id: UserId, limit: Annotated[int, Query(ge=1, le=1000)] = 50,
        cursor: str | None = None, status: str = "active",
    ) -> dict[str, Any]:
        """A user's memories, newest first."""
        caller.require("reader")
        scope = Scope.user(caller.org_id, user_id)
        page = await self._read(
            lambda: self._reader.list(scope, limit=limit, cursor=cursor, status=None if status == "all" else status)
        )
        return {"memories": [m.public() for m in page.records], "next_cursor": page.next_cursor}

    @app.get("/v1/memories/{memory_id}", tags=["memories"])
    async def get_memory(self, memory_id: str, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """One memory; another user's or org's id is a 404."""
        caller.require("reader")
        record = await self._read(self._reader.get, Scope.user(caller.org_id, user_id), memory_id)
        return record.public()

    @app.patch("/v1/memories/{memory_id}", tags=["memories"])
    async def patch_memory(self, memory_id: str, body: PatchIn, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Change content, type, importance, metadata or expiry in place (content re-embedded)."""
        caller.require("writer")
        return await self._writer.run.remote(
            caller.org_id, "update", Scope.user(caller.org_id, user_id), memory_id, dump(body), actor=caller.key_id
        )

    @app.delete("/v1/memories/{memory_id}", tags=["memories"])
    async def delete_memory(self, memory_id: str, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """Delete one memory; its audit trail stays."""
        caller.require("writer")
        await self._writer.run.remote(
            caller.org_id, "delete", Scope.user(caller.org_id, user_id), memory_id, actor=caller.key_id
        )
        return {"deleted": memory_id}

    @app.get("/v1/memories/{memory_id}/history", tags=["memories"])
    async def history(self, memory_id: str, caller: Caller, user_id: UserId) -> dict[str, Any]:
        """The memory's audit events, oldest first."""
        caller.require("reader")
        events = await self._read(self._reader.history, Scope.user(caller.org_id, user_id), memory_id)
        return {"events": [e.model_dump(mode="json") for e in events]}

    @app.delete("/v1/users/{user_id}", tags=["users"])
    async def erase_user(self, user_id: str, caller: Caller) -> dict[str, Any]:
        """Erase everything of a user, unrecoverably (every table, old versions and files)."""
        caller.require("admin")
        check_identifier("user_id", user_id)
        counts = await self._writer.run.remote(caller.org_id, "erase_user", caller.org_id, user_id, actor=caller.key_id)
        return {"erased": counts}

    # -- conversations, sessions, jobs ---------------------------------------------------------

    @app.post("/v1/conversations", status_code=202, tags=["conversations"])
    async def conversations(self, body: ConversationIn, caller: Caller) -> dict[str, str]:
        """Redact and log the turns now; extract memories in the background (`GET /v1/jobs/{id}`).

        `mode`: `rules` (offline patterns, English and Chinese), `llm` (the configured
        OpenAI-compatible model) or `raw` (every turn); default `llm` when an LLM is configured.
        """
        caller.require("writer")
        messages = [dump(m) for m in body.messages]
        job_id = await self._writer.log_conversation.remote(
            caller.org_id, body.user_id, body.session_id, body.agent_id, messages, body.mode
        )
        return {"job_id": job_id}

    @app.get("/v1/sessions/{session_id}/messages", tags=["conversations"])
    async def session_messages(
        self, session_id: str, caller: Caller, user_id: UserId, last: Annotated[int, Query(ge=1, le=1000)] = 20
    ) -> dict[str, Any]:
        """The recent window of a session, oldest first."""
        caller.require("reader")
        records = await self._read(
            lambda: self._reader.session_messages(Scope.user(caller.org_id, user_id), session_id, last=last)
        )
        return {"messages": [r.model_dump(mode="json", exclude={"id", "org_id"}) for r in records]}

    @app.post("/v1/jobs/import", status_code=202, tags=["jobs"])
    async def submit_import(self, body: ImportIn, caller: Caller) -> dict[str, str]:
        """Submit a bulk import of a history file to the cluster; rows of other orgs are rejected.

        `path` is an object-store URI (`s3://...`) or a file under the server's import root
        (`AGENT_MEMORY_IMPORT_ROOT`): a client never names arbitrary server files.
        """
        caller.require("admin")
        from jobs.importer import submit_import

        path = resolve_import_path(body.path, self._settings.import_root)
        job_id = await self._read(lambda: submit_import(
            self._settings, path=path, fmt=body.format, mode=body.mode, org_id=caller.org_id, store=self._store
        ))
        return {"job_id": job_id}

    @app.post("/v1/jobs/consolidate", status_code=202, tags=["jobs"])
    async def consolidate(self, body: ConsolidateIn, caller: Caller) -> dict[str, str]:
        """Start consolidation of the caller's org (or one user) on the cluster now."""
        caller.require("admin")
        from jobs.consolidate import job_id
        from jobs.schedule import submit_consolidation

        run = await self._read(lambda: submit_consolidation(
            self._settings, org_id=caller.org_id, user_id=body.user_id, dry_run=False
        ))
        now = utcnow()
        queued = {"id": job_id(run.run_id), "org_id": caller.org_id, "user_id": body.user_id,
                  "kind": "consolidation", "state": "queued", "progress": 0.0, "created_at": now,
                  "updated_at": now, "error": None, "report": {"run_id": run.run_id}}
        # Answerable at once; the run overwrites this row as it starts and ends. If it started
        # first, its row stands.
        existing = await self._read(self._store.get_job, caller.org_id, queued["id"])
        if existing is None:
            await self._read(self._store.put_job, caller.org_id, queued)
        return {"job_id": queued["id"]}

    @app.get("/v1/schedule", tags=["jobs"])
    async def schedule(self, caller: Caller) -> dict[str, Any]:
        """The consolidation schedule: on or off, the next run, the last submission."""
        caller.require("reader")
        return await self._scheduler.status.remote()

    @app.get("/v1/jobs/{job_id}", tags=["jobs"])
    async def get_job(self, job_id: str, caller: Caller) -> dict[str, Any]:
        """Any background job of the caller's org."""
        caller.require("reader")
        check_identifier("job id", job_id)
        job = await self._read(self._store.get_job, caller.org_id, job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return {k: job[k] for k in ("id", "kind", "state", "progress", "error", "report", "created_at", "updated_at")}
