"""Erasure down to the bytes: after a user's rows are deleted (`Erasures.start`, which
`MemoryService.erase_user` calls: gone from every read at once), the purge rewrites every data
file that held one of their rows, rebuilds the indexes of those tables, deletes every older
version, and removes their rows from the rejects files the service's imports wrote. The erasure's job row is the receipt: who, when,
rows per table, files rewritten, rejects removed; never content.

Over HTTP the purge runs after the answer, beside the writes of other users (the Writer's
maintenance thread), which retries a failed purge with a growing delay; elsewhere
`MemoryService.erase_user` runs both steps at once. An erasure cut short (the process died) or
failed is finished at the next start (`Erasures.resume`).
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
from typing import Any

from agent_memory.access import AccessRecorder
from agent_memory.audit import erasure_event, purge_event
from agent_memory.errors import NotFoundError, UnavailableError
from agent_memory.ids import ordered_id
from agent_memory.job_record import ERASURE, JobRecord
from agent_memory.models import OrgScope, Scope
from agent_memory.settings import Settings, job_report_dir
from agent_memory.store import MemoryStore, StoreMaintenance

log = logging.getLogger(__name__)

# The kind of the jobs whose reports name the rejects files of HTTP imports (jobs.importer.KIND).
IMPORT_KIND = "import"


class Erasures:
    """A store's erasures, from the job row to the purge: `start` deletes a user's rows (what
    `MemoryService.erase_user` answers with), `finish` purges their bytes, `resume` finishes what
    a stopped process left. Needs the store's maintenance interface for the purge."""

    def __init__(
        self, store: MemoryStore, maintenance: StoreMaintenance | None, access: AccessRecorder, settings: Settings,
        clock: Callable[[], datetime],
    ) -> None:
        self.store = store
        self.maintenance = maintenance
        self.access = access
        self.settings = settings
        self.clock = clock

    def _maintenance(self) -> StoreMaintenance:
        if self.maintenance is None:
            raise UnavailableError("erasure purges old versions: open the service with its maintenance interface")
        return self.maintenance

    def start(self, org_id: str, user_id: str, actor: str) -> JobRecord:
        """Open the erasure's job (its report is the receipt), then delete the user's rows in
        every table (gone from every read at once); the job as it is now.

        The job row is written first, so an erasure cut short anywhere is finished at the next
        start. It names the user only in its report, not as its owner, and so outlives a later
        erasure of the same user.
        """
        self._maintenance()
        now = self.clock()
        job = JobRecord.new(f"erase-{ordered_id()}", org_id, ERASURE, state="running", now=now, report={
            "user_id": user_id, "actor": actor, "requested_at": now.isoformat(),
        })
        self.store.put_job(OrgScope(org_id), job.as_row())
        try:
            return self.delete_user_rows(job)
        except Exception as exc:
            # Nothing was acknowledged: the job ends here (a later start must not delete what
            # the user writes after this answer), and the caller sends the erasure again.
            self.store.put_job(OrgScope(org_id), replace(job, state="failed", updated_at=self.clock(),
                                                         error=f"{type(exc).__name__}: {exc}"[:500]).as_row())
            raise UnavailableError(
                f"the erasure of {user_id!r} could not delete every row ({type(exc).__name__}); some may be gone: "
                "send it again", code="erasure_incomplete",
            ) from exc

    def delete_user_rows(self, job: JobRecord) -> JobRecord:
        """An erasure's first step: delete the rows of the job's user in every table, record the
        counts in its report and leave the `erased` event; the job as it is now."""
        user_id = str(job.report["user_id"])
        scope = Scope.user(job.org_id, user_id)
        self.access.discard_user(job.org_id, user_id)
        counts = self.store.erase_user(scope)  # idempotent: a resume after a crash here deletes what is left
        self.access.discard_user(job.org_id, user_id)
        job = replace(job, updated_at=self.clock(), report={**job.report, "rows_deleted": counts})
        self.store.put_job(OrgScope(job.org_id), job.as_row())
        self.store.append_events(scope, [erasure_event(job.org_id, user_id, str(job.report.get("actor")),
                                                       job.updated_at, counts, job.id)])
        return job

    def finish(self, org_id: str, job_id: str, *,
               in_turn: Callable[[Callable[[], Any]], Any] | None = None) -> dict[str, Any]:
        """Finish an erasure: delete the user's rows if that step was cut short, then purge (every
        table, see `StoreMaintenance.purge_versions`, with `in_turn`) and scrub the org's rejects
        files; marks its job succeeded and returns the receipt. On failure the job is marked failed,
        its attempts counted, and the error raised: running it again purges again, nothing is lost.
        """
        maintenance = self._maintenance()
        scope = OrgScope(org_id)
        row = self.store.get_job(scope, job_id)
        if row is None or row.get("kind") != ERASURE:
            raise NotFoundError(f"erasure job {job_id} not found")
        job = JobRecord.from_row(row)
        try:
            if "rows_deleted" not in job.report:  # the process died between the job row and the delete
                job = self.delete_user_rows(job)
            user_id = str(job.report["user_id"])
            deleted = {name: int(n) for name, n in dict(job.report["rows_deleted"]).items()}
            late = maintenance.drop_orphan_access(Scope.user(org_id, user_id))
            if late:
                deleted["access"] = deleted.get("access", 0) + late
                job = replace(job, report={**job.report, "rows_deleted": deleted})
            tables = maintenance.purge_versions(reindex=[name for name, n in deleted.items() if n], in_turn=in_turn)
            rejects = scrub_rejects(self.rejects_files(org_id), org_id, user_id)
        except Exception as exc:
            log.exception("erasure %s: purge failed", job_id)
            report = {**job.report, "attempts": int(job.report.get("attempts") or 0) + 1}
            self.store.put_job(scope, replace(job, state="failed", error=f"{type(exc).__name__}: {exc}"[:500],
                                              updated_at=self.clock(), report=report).as_row())
            raise
        now = self.clock()
        receipt = {
            **{k: v for k, v in job.report.items() if k != "attempts"}, "finished_at": now.isoformat(), "tables": tables,
            "files_rewritten": sum(t["files_rewritten"] for t in tables.values()), "rejects_removed": rejects,
        }
        self.store.put_job(scope, replace(job, state="succeeded", progress=1.0, error=None, updated_at=now,
                                          report=receipt).as_row())
        self.store.append_events(Scope.user(org_id, user_id), [purge_event(org_id, user_id, now, {
            "job_id": job_id, "tables": tables, "files_rewritten": receipt["files_rewritten"], "rejects_removed": rejects,
        })])
        return {"job_id": job_id, **receipt}

    def unfinished(
        self, before: datetime | None = None, mine: Callable[[str, str | None], bool] | None = None,
    ) -> list[tuple[str, str]]:
        """(org, job id) of every erasure left running, or failed after its rows were deleted, of every
        org (of the users `mine(org, user)` accepts, where given: a Writer shard's), created before
        `before`, oldest first. An erasure that failed before its rows were deleted answered an error:
        it is the caller's to send again, not this one's to finish."""
        return [
            (job["org_id"], job["id"]) for job in self._maintenance().jobs_in(ERASURE, ("running", "failed"))
            # Created after `before`: a fresh erasure, whose own purge is on its way.
            if (before is None or job["created_at"] < before)
            and (mine is None or mine(job["org_id"], job.get("user_id")))
            and (job["state"] == "running" or "rows_deleted" in dict(job["report"] or {}))
        ]

    def resume(
        self, *, in_turn: Callable[[Callable[[], Any]], Any] | None = None, before: datetime | None = None,
        mine: Callable[[str, str | None], bool] | None = None,
    ) -> dict[str, list[tuple[str, str]]]:
        """Finish every erasure left running or failed (of the users `mine` accepts), oldest first; one
        that fails again stays failed (with its attempts counted) and the next is tried.
        {"finished": [(org, job id)...], "failed": [...]}."""
        done: dict[str, list[tuple[str, str]]] = {"finished": [], "failed": []}
        for org_id, job_id in self.unfinished(before, mine):
            try:
                self.finish(org_id, job_id, in_turn=in_turn)
                done["finished"].append((org_id, job_id))
            except Exception:  # noqa: BLE001 - logged and recorded on the job by finish
                done["failed"].append((org_id, job_id))
        return done

    def rejects_files(self, org_id: str) -> dict[Path, str | None]:
        """Every rejects file the service's imports wrote, with the org its rows without one took
        (None where no report says): the org's import jobs' files, and every `*.rejects.jsonl` in
        `report_dirs` by its report beside it."""
        files: dict[Path, str | None] = {}
        for path in sorted(p for d in report_dirs(self.settings) for p in d.glob("*.rejects.jsonl")):
            report = path.with_name(path.name.removesuffix(".rejects.jsonl") + ".report.json")
            try:
                files[path.resolve()] = json.loads(report.read_text(encoding="utf-8")).get("org_id")
            except (OSError, ValueError, AttributeError):
                files[path.resolve()] = None
        for job in self._maintenance().jobs_in(IMPORT_KIND, ("succeeded", "failed")):
            if job["org_id"] != org_id:
                continue
            rejects = dict(job["report"] or {}).get("rejects_path")
            if rejects and Path(rejects).is_file():
                files[Path(rejects).resolve()] = org_id
        return files


def report_dirs(settings: Settings) -> list[Path]:
    """Where the service's imports leave reports and rejects: the submitted jobs' directory and
    `./import-reports` (the CLI's default)."""
    dirs = {job_report_dir(settings), Path("import-reports").resolve()}
    return sorted(d for d in dirs if d.is_dir())


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
