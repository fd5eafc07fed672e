"""`/v1/jobs` and `/v1/schedule`: imports and consolidation submitted to the cluster, and any job's state."""

from pathlib import Path as FilePath
from typing import Annotated, Any

from agent_memory_http.models import Job, JobAccepted, Schedule
from fastapi import APIRouter, Path

from agent_memory.errors import InvalidInputError, NotFoundError
from agent_memory.models import OrgScope, check_identifier
from jobs.consolidate import job_id as consolidation_job_id
from jobs.importer import submit_import
from jobs.schedule import submit_consolidation
from serve_app.middleware import Caller
from serve_app.routes.common import IngressParts
from serve_app.schemas import ConsolidateIn, ImportIn, errors

router = APIRouter(tags=["jobs"])


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


class JobRoutes(IngressParts):
    @router.post("/v1/jobs/import", status_code=202, response_model=JobAccepted, responses=errors(404, body=True))
    async def submit_import(self, body: ImportIn, caller: Caller) -> dict[str, str]:
        """Submit a bulk import of a history file to the cluster; rows of other orgs are rejected.

        `path` is an object-store URI (`s3://...`) or a file under the server's import root
        (`AGENT_MEMORY_IMPORT_ROOT`): a client never names arbitrary server files.
        """
        caller.require("admin")
        caller.require_every_team("an import")  # its rows may name any team
        path = resolve_import_path(body.path, self.settings.imports.root)
        await self.writers.any.check_room.remote(caller.org_id)  # an org at its memory quota imports nothing
        job_id = await self.read(lambda: submit_import(
            self.settings, path=path, fmt=body.format, mode=body.mode, org_id=caller.org_id, user_id=body.user_id,
            store=self.store, actor=caller.key_id,
        ))
        return {"job_id": job_id}

    @router.post("/v1/jobs/consolidate", status_code=202, response_model=JobAccepted, responses=errors(409, body=True))
    async def consolidate(self, body: ConsolidateIn, caller: Caller) -> dict[str, str]:
        """Start consolidation of the caller's org (or one user) on the cluster now."""
        caller.require("admin")
        caller.require_every_team("consolidation")  # it merges and retires memories of every team
        # The run's job row is written `queued` before its task starts: answerable at once.
        run = await self.read(lambda: submit_consolidation(
            self.settings, org_id=caller.org_id, user_id=body.user_id, dry_run=False, store=self.store
        ))
        return {"job_id": consolidation_job_id(run.run_id)}

    @router.get("/v1/schedule", response_model=Schedule, responses=errors())
    async def schedule(self, caller: Caller) -> dict[str, Any]:
        """The consolidation schedule: on or off, the next run, the last submission."""
        caller.require("reader")
        return await self.scheduler.status.remote()

    @router.get("/v1/jobs/{job_id}", response_model=Job, responses=errors(404))
    async def get_job(self, job_id: Annotated[str, Path(description="The job's id.")], caller: Caller) -> dict[str, Any]:
        """Any background job of the caller's org."""
        caller.require("reader")
        check_identifier("job id", job_id)
        job = await self.read(self.store.get_job, OrgScope(caller.org_id), job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return {k: job[k] for k in ("id", "kind", "state", "progress", "error", "report", "created_at", "updated_at")}
