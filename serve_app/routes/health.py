"""Liveness and readiness: 503 with the reason while the replica starts, then what each part says."""

import asyncio

from agent_memory_http.models import Health, Readiness
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from agent_memory.embedding import BatchingEmbedder
from serve_app.errors import unwrap_remote
from serve_app.routes.common import IngressParts

router = APIRouter(tags=["health"])

STARTING = {503: {"model": Health, "description": "Not started yet (or could not start): `status` and `reason` say which."}}


class HealthRoutes(IngressParts):
    @router.get("/healthz", response_model=Health, responses=STARTING)
    async def healthz(self) -> JSONResponse:
        """Liveness: 200 once this replica has started; 503 with the reason before, or if it could not."""
        status, reason = self.start_state()
        if reason is not None:
            return JSONResponse({"status": status, "reason": reason}, status_code=503)
        return JSONResponse({"status": "ok"})

    @router.get("/readyz", response_model=Readiness,
                responses={503: {"model": Readiness, "description": "Not ready: starting, or the writer or the "
                                                                    "store does not answer."}})
    async def readyz(self) -> JSONResponse:
        """Readiness: the model answers, the writer runs, the store is reachable."""
        status, reason = self.start_state()
        if reason is not None:
            return JSONResponse({"ready": False, "degraded": False, "checks": {"ingress": f"{status}: {reason}"}},
                                status_code=503)
        checks: dict[str, str] = {}
        timeout = self.settings.embedding.timeout_s
        try:
            await asyncio.wait_for(self.embedder.embed_one.remote("readiness probe"), timeout)
            checks["embedder"] = "ok"
        except Exception as exc:
            checks["embedder"] = f"unavailable: {type(unwrap_remote(exc)).__name__}"
        if isinstance(self.recaller.embedder, BatchingEmbedder):
            # Search embeds its queries in this replica: its own model decides `degraded` too.
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self.recall_pool, self.recaller.embedder.embed_query, "readiness probe"
                )
                checks["query_embedder"] = "ok"
            except Exception as exc:
                checks["query_embedder"] = f"unavailable: {type(exc).__name__}"
        try:
            await asyncio.wait_for(asyncio.gather(*(w.ping.remote() for w in self.writers.handles)), timeout)
            checks["writer"] = "ok"
        except Exception as exc:
            checks["writer"] = f"unavailable: {type(unwrap_remote(exc)).__name__}"
        try:
            await self.read(self.store.ping)
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unavailable: {type(exc).__name__}"
        ready = checks["store"] == "ok" and checks["writer"] == "ok"
        # Degraded: search answers from keywords alone, or writes cannot be embedded.
        degraded = any(checks[k] != "ok" for k in ("embedder", "query_embedder") if k in checks)
        body = {"ready": ready, "degraded": degraded, "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)
