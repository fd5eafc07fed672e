"""Erasure down to the bytes: after a user's rows are deleted (`MemoryService.erase_user`, gone
from every read at once), the purge rewrites every data file that held one of their rows,
rebuilds the indexes of those tables, deletes every older version, and removes their rows from
the rejects files the service's imports wrote. The erasure's job row is the receipt: who, when,
rows per table, files rewritten, rejects removed; never content.

Over HTTP the purge runs after the answer, beside the writes of other users (the Writer's
maintenance thread), which retries a failed purge with a growing delay; elsewhere
`MemoryService.erase_user` runs both steps at once. An erasure cut short (the process died) or
failed is finished at the next start (`resume_erasures`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_memory.audit import purge_event
from agent_memory.errors import NotFoundError
from agent_memory.job_record import ERASURE, JobRecord
from agent_memory.models import OrgScope, Scope
from agent_memory.settings import Settings, job_report_dir

if TYPE_CHECKING:
    from agent_memory.service import MemoryService

log = logging.getLogger(__name__)

# The kind of the jobs whose reports name the rejects files of HTTP imports (jobs.importer.KIND).
IMPORT_KIND = "import"


def finish_erasure(
    service: MemoryService, settings: Settings, org_id: str, job_id: str, *,
    in_turn: Callable[[Callable[[], Any]], Any] | None = None,
) -> dict[str, Any]:
    """Finish an erasure: delete the user's rows if that step was cut short, then purge (every
    table, see `StoreMaintenance.purge_versions`, with `in_turn`) and scrub the org's rejects
    files; marks its job succeeded and returns the receipt. On failure the job is marked failed,
    its attempts counted, and the error raised: running it again purges again, nothing is lost.
    """
    scope = OrgScope(org_id)
    row = service.store.get_job(scope, job_id)
    if row is None or row.get("kind") != ERASURE:
        raise NotFoundError(f"erasure job {job_id} not found")
    job = JobRecord.from_row(row)
    try:
        if "rows_deleted" not in job.report:  # the process died between the job row and the delete
            job = service.delete_user_rows(job)
        user_id = str(job.report["user_id"])
        deleted = {name: int(n) for name, n in dict(job.report["rows_deleted"]).items()}
        assert service.maintenance is not None  # erase_user refused without it
        late = service.maintenance.drop_orphan_access(Scope.user(org_id, user_id))
        if late:
            deleted["access"] = deleted.get("access", 0) + late
            job = replace(job, report={**job.report, "rows_deleted": deleted})
        tables = service.maintenance.purge_versions(reindex=[name for name, n in deleted.items() if n], in_turn=in_turn)
        rejects = scrub_rejects(rejects_files(service, settings, org_id), org_id, user_id)
    except Exception as exc:
        log.exception("erasure %s: purge failed", job_id)
        report = {**job.report, "attempts": int(job.report.get("attempts") or 0) + 1}
        service.store.put_job(scope, replace(job, state="failed", error=f"{type(exc).__name__}: {exc}"[:500],
                                             updated_at=service.clock(), report=report).as_row())
        raise
    now = service.clock()
    receipt = {
        **{k: v for k, v in job.report.items() if k != "attempts"}, "finished_at": now.isoformat(), "tables": tables,
        "files_rewritten": sum(t["files_rewritten"] for t in tables.values()), "rejects_removed": rejects,
    }
    service.store.put_job(scope, replace(job, state="succeeded", progress=1.0, error=None, updated_at=now,
                                         report=receipt).as_row())
    service.store.append_events(Scope.user(org_id, user_id), [purge_event(org_id, user_id, now, {
        "job_id": job_id, "tables": tables, "files_rewritten": receipt["files_rewritten"], "rejects_removed": rejects,
    })])
    return {"job_id": job_id, **receipt}


def unfinished_erasures(
    service: MemoryService, before: datetime | None = None, mine: Callable[[str, str | None], bool] | None = None,
) -> list[tuple[str, str]]:
    """(org, job id) of every erasure left running, or failed after its rows were deleted, of every
    org (of the users `mine(org, user)` accepts, where given: a Writer shard's), created before
    `before`, oldest first. An erasure that failed before its rows were deleted answered an error:
    it is the caller's to send again, not this one's to finish."""
    assert service.maintenance is not None
    return [
        (job["org_id"], job["id"]) for job in service.maintenance.jobs_in(ERASURE, ("running", "failed"))
        # Created after `before`: a fresh erasure, whose own purge is on its way.
        if (before is None or job["created_at"] < before)
        and (mine is None or mine(job["org_id"], job.get("user_id")))
        and (job["state"] == "running" or "rows_deleted" in dict(job["report"] or {}))
    ]


def resume_erasures(
    service: MemoryService, settings: Settings, *, in_turn: Callable[[Callable[[], Any]], Any] | None = None,
    before: datetime | None = None, mine: Callable[[str, str | None], bool] | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """Finish every erasure left running or failed (of the users `mine` accepts), oldest first; one
    that fails again stays failed (with its attempts counted) and the next is tried.
    {"finished": [(org, job id)...], "failed": [...]}."""
    done: dict[str, list[tuple[str, str]]] = {"finished": [], "failed": []}
    for org_id, job_id in unfinished_erasures(service, before, mine):
        try:
            finish_erasure(service, settings, org_id, job_id, in_turn=in_turn)
            done["finished"].append((org_id, job_id))
        except Exception:  # noqa: BLE001 - logged and recorded on the job by finish_erasure
            done["failed"].append((org_id, job_id))
    return done


def report_dirs(settings: Settings) -> list[Path]:
    """Where the service's imports leave reports and rejects: the submitted jobs' directory and
    `./import-reports` (the CLI's default)."""
    dirs = {job_report_dir(settings), Path("import-reports").resolve()}
    return sorted(d for d in dirs if d.is_dir())


def rejects_files(service: MemoryService, settings: Settings, org_id: str) -> dict[Path, str | None]:
    """Every rejects file the service's imports wrote, with the org its rows without one took
    (None where no report says): the org's import jobs' files, and every `*.rejects.jsonl` in
    `report_dirs` by its report beside it."""
    files: dict[Path, str | None] = {}
    for path in sorted(p for d in report_dirs(settings) for p in d.glob("*.rejects.jsonl")):
        report = path.with_name(path.name.removesuffix(".rejects.jsonl") + ".report.json")
        try:
            files[path.resolve()] = json.loads(report.read_text(encoding="utf-8")).get("org_id")
        except (OSError, ValueError, AttributeError):
            files[path.resolve()] = None
    assert service.maintenance is not None
    for job in service.maintenance.jobs_in(IMPORT_KIND, ("succeeded", "failed")):
        if job["org_id"] != org_id:
            continue
        rejects = dict(job["report"] or {}).get("rejects_path")
        if rejects and Path(rejects).is_file():
            files[Path(rejects).resolve()] = org_id
    return files


def scrub_rejects(files: dict[Path, str | None], org_id: str, user_id: str) -> dict[str, int]:
    """Remove the user's rows from these rejects files (path -> the org of its rows without
    one); each file changed is rewritten whole, with its mode, synced, and replaced atomically.
    {"files", "rows"} changed.

    A reject is the user's when its row names the user and this org, or names the user and no
    org in a file of this org's import. A reject without a row to read (its line was not a JSON
    object) is matched, in a file of this org, on a `"user_id": "<user>"` pair in its text.
    """
    changed = rows = 0
    for path, file_org in sorted(files.items()):
        try:
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
        except FileNotFoundError:
            continue
        lines = text.splitlines(keepends=True)
        kept = [line for line in lines if not _names_user(line, org_id, user_id, file_org)]
        if len(kept) == len(lines):
            continue
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(handle, "w", encoding="utf-8", errors="surrogateescape") as out:
                out.writelines(kept)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temp, path.stat().st_mode & 0o7777)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        changed += 1
        rows += len(lines) - len(kept)
    return {"files": changed, "rows": rows}


def _names_user(line: str, org_id: str, user_id: str, file_org: str | None) -> bool:
    row, text = None, line
    try:
        reject = json.loads(line)
        if isinstance(reject, dict):
            row, text = reject.get("row"), str(reject.get("reason") or "")
    except ValueError:
        pass
    if isinstance(row, dict):
        if str(row.get("user_id")) != user_id:
            return False
        return row.get("org_id") == org_id or (not row.get("org_id") and file_org == org_id)
    return file_org == org_id and re.search(rf'"user_id"\s*:\s*{re.escape(json.dumps(user_id, ensure_ascii=False))}', text) is not None
