"""`/v1/jobs` and `/v1/schedule`: imports and consolidation submitted to the cluster, and any job's state."""

from pathlib import Path as FilePath
from typing import Annotated, Any

from agent_memory_http.models import Job, JobAccepted, JobPage, Schedule
from fastapi import APIRouter, Path, Query

from agent_memory.errors import InvalidInputError, NotFoundError
from agent_memory.models import OrgScope, check_identifier
from jobs.consolidate import job_id as consolidation_job_id
from jobs.importer import submit_import
from jobs.schedule import submit_consolidation
from serve_app.auth import Principal
from serve_app.middleware import Caller
from serve_app.routes.common import IngressParts
from serve_app.schemas import ConsolidateIn, ImportIn, errors

router = APIRouter(tags=["jobs"])


def resolve_import_path(path: str, root: str) -> str:
    """An object-store URI as given, or a local path that must stay inside the import root."""
    if "://" in path:
        if not path.startswith("s3://"):  # what the import reads (jobs.import_rows.object_store_filesystem)
            raise InvalidInputError("path must be an s3:// URI or a file under the import root")
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
        caller.require_every_agent("an import")
        path = resolve_import_path(body.path, self.settings.imports.root)
        await self.writers.any.check_room.remote(caller.org_id)  # an org at its memory quota imports nothing
        job_id = await self.read(lambda: submit_import(
            self.settings, path=path, fmt=body.format, mode=body.mode, org_id=caller.org_id, user_id=body.user_id,
            store=self.store, actor=caller.key_id,
        ))
        return {"job_id": job_id}

    @router.post("/v1/jobs/consolidate", status_code=202, response_model=JobAccepted, responses=errors(409, body=True))
    async def consolidate(self, body: ConsolidateIn, caller: Caller) -> dict[str, str]:
        """Start consolidation of the caller's org (or one user) on the cluster now. With `dry_run` it
        changes nothing: its job's report holds the merges a run would make (`clusters`: each
        cluster's canonical memory, its members' ids and texts, and why they were linked)."""
        caller.require("admin")
        caller.require_every_team("consolidation")  # it merges and retires memories of every team
        caller.require_every_agent("consolidation")
        # The run's job row is written `queued` before its task starts: answerable at once.
        run = await self.read(lambda: submit_consolidation(
            self.settings, org_id=caller.org_id, user_id=body.user_id, dry_run=body.dry_run, store=self.store,
            recorded=True,
        ))
        return {"job_id": consolidation_job_id(run.run_id)}

    @router.get("/v1/schedule", response_model=Schedule, responses=errors())
    async def schedule(self, caller: Caller) -> dict[str, Any]:
        """The consolidation schedule: on or off, the next run, the last submission."""
        caller.require("reader")
        return await self.scheduler.status.remote()

    @router.get("/v1/jobs", response_model=JobPage, responses=errors())
    async def list_jobs(
        self, caller: Caller,
        kind: Annotated[str | None, Query(max_length=256, description="Only jobs of this kind (`conversation`, "
                                                                      "`import`, `consolidation`, `erasure`, ...).")] = None,
        state: Annotated[str | None, Query(max_length=256, description="Only jobs in this state (`queued`, `running`, "
                                                                       "`succeeded`, `failed`).")] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="Jobs per page.")] = 50,
        cursor: Annotated[str | None, Query(description="The `next_cursor` of the page before.")] = None,
    ) -> dict[str, Any]:
        """The org's background jobs, newest first, each as `GET /v1/jobs/{job_id}` answers it."""
        caller.require("reader")
        jobs, next_cursor = await self.read(
            lambda: self.reader.jobs(caller.org_id, kind=kind, state=state, limit=limit, cursor=cursor))
        return {"jobs": [job_answer(job, caller) for job in jobs], "next_cursor": next_cursor}

    @router.get("/v1/jobs/{job_id}", response_model=Job, responses=errors(404))
    async def get_job(self, job_id: Annotated[str, Path(description="The job's id.")], caller: Caller) -> dict[str, Any]:
        """Any background job of the caller's org."""
        caller.require("reader")
        check_identifier("job id", job_id)
        job = await self.read(self.store.get_job, OrgScope(caller.org_id), job_id)
        if job is None:
            raise NotFoundError(f"job {job_id} not found")
        return job_answer(job, caller)


def job_answer(job: dict[str, Any], caller: Principal) -> dict[str, Any]:
    """A job as the API answers it. A consolidation dry run's clusters quote memories of every team
    and agent: a key kept to teams or an agent's key reads its counts only."""
    answer = {k: job[k] for k in ("id", "kind", "state", "progress", "error", "report", "created_at", "updated_at")}
    if (caller.teams is not None or caller.agent_id is not None) and isinstance((answer["report"] or {}).get("clusters"), list):
        answer["report"] = {k: v for k, v in answer["report"].items() if k != "clusters"}
    return answer
