"""Consolidation as a Ray Data job over every (org, user) of the store.

The job fans users out to a pool of actors (`map_batches` with `ActorPoolStrategy`); each actor
opens the store once and consolidates the users of its batches one at a time, reading each user
through the store's `user_id` index. Grouping through the index rather than
`groupby(org, user).map_groups(...)` keeps vectors out of the object store: a groupby would
read the whole table, vectors included, and shuffle it, to hand each user's rows to one call,
which the index gives for a few milliseconds per user. No decision ever spans two users.

One run at a time: the run holds the `consolidation` lease in the store, renewed while it works;
a killed run's lease expires after `consolidation_lease_seconds`. Recall and writes go on during
a run (merges are ordinary small commits). After the users, the tables are compacted, indexes
refreshed and versions older than `consolidation_keep_versions_hours` cleaned.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from agent_memory.consolidation import build_judge, build_summarizer, consolidate_user
from agent_memory.errors import ConflictError
from agent_memory.job_record import JobRecord
from agent_memory.models import OrgScope, Scope, check_identifier, utcnow
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore
from jobs.progress import ProgressBar
from jobs.runtime import ensure_ray
from storage import open_store
from storage.connect import maintenance_of, open_service
from storage.maintenance import StoreMaintenance
from storage.schema import SYSTEM_ORG

log = logging.getLogger(__name__)
LEASE = "consolidation"
# What a retention purge keeps of the tables' latest history (see StoreMaintenance.purge_versions).
RETENTION_PURGE_KEEP = timedelta(minutes=10)
COUNTS = ("clusters", "merged", "expired", "decayed", "purged", "messages_purged")
# Below this many users, Ray Data's fixed start-up (seconds) costs more than the work itself.
IN_PROCESS_MAX_USERS = 20


def _open_service(settings: Settings, now: datetime) -> MemoryService:
    """A memory service on the configured store; the model is loaded only if LLM summaries need it."""
    return open_service(settings, with_embedder=settings.llm.configured, clock=lambda: now)


class ConsolidateUsers:
    """Ray Data callable: opens the store once per actor, then consolidates each user of a batch alone."""

    def __init__(self, settings: Settings, now: datetime, dry_run: bool) -> None:
        self.service = _open_service(settings, now)
        self.summarize = build_summarizer(settings)
        self.judge = build_judge(settings)
        self.now = now
        self.dry_run = dry_run

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[str]]:
        reports = [
            json.dumps(_consolidate_one(self.service, str(org), str(user), self.now, self.dry_run, self.summarize,
                                        self.judge), ensure_ascii=False, default=str)
            for org, user in zip(batch["org_id"], batch["user_id"], strict=True)
        ]
        return {"report": reports}


def _consolidate_one(service: Any, org_id: str, user_id: str, now: datetime, dry_run: bool, summarize: Any,
                     judge: Any) -> dict:
    try:
        return consolidate_user(service, Scope.user(org_id, user_id), now, dry_run=dry_run, summarize=summarize,
                                judge=judge)
    except Exception as exc:
        # One user's failure must not stop the others; the next run retries them.
        log.exception("consolidation failed for %s/%s", org_id, user_id)
        return {"org_id": org_id, "user_id": user_id, "error": f"{type(exc).__name__}: {exc}"}


def _on_ray(owners: list[tuple[str, str]], settings: Settings, now: datetime, dry_run: bool,
            address: str | None) -> Iterator[dict[str, Any]]:
    import ray
    from ray.data import ActorPoolStrategy

    ensure_ray(address)
    workers = max(1, min(settings.consolidation.workers, len(owners)))
    ds = ray.data.from_items([{"org_id": o, "user_id": u} for o, u in owners],
                             override_num_blocks=max(1, min(len(owners), workers * 4)))
    ds = ds.map_batches(
        ConsolidateUsers,
        fn_constructor_kwargs={"settings": settings, "now": now, "dry_run": dry_run},
        # Scales down to one actor where a scheduler task or Serve replicas hold the other CPUs.
        batch_size=16, compute=ActorPoolStrategy(min_size=1, max_size=workers), num_cpus=settings.consolidation.worker_cpus,
    )
    for row in ds.iter_rows():
        yield json.loads(row["report"])


def _in_process(owners: list[tuple[str, str]], settings: Settings, now: datetime, dry_run: bool) -> Iterator[dict]:
    service = _open_service(settings, now)
    summarize, judge = build_summarizer(settings), build_judge(settings)
    with service:
        for org_id, user_id in owners:
            yield _consolidate_one(service, org_id, user_id, now, dry_run, summarize, judge)


def run_consolidation(
    settings: Settings,
    *,
    org_id: str | None = None,
    user_id: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    use_ray: bool | None = None,
    address: str | None = None,
    owner: str | None = None,
    show_progress: bool = False,
    recorded: bool | None = None,
) -> dict[str, Any]:
    """Consolidate every user (of one org, or one user) and return the run's JSON report.

    `now` is the run's clock for expiry, decay and retention (tests set it). `use_ray` None picks
    Ray Data above `IN_PROCESS_MAX_USERS` users and runs in-process below. A dry run plans only:
    it changes no memory, and takes the lease only where it is recorded (a job: one run at a time on
    the cluster, whose workers would otherwise wait on one another's CPUs). Raises ConflictError
    while another run holds the lease.
    `show_progress`: a progress bar of the users done on standard error. `recorded`: whether the run
    has a job row (default: unless a dry run); a recorded dry run's row holds its plan (`clusters`,
    `plan_report`), readable before a real run.
    """
    recorded = not dry_run if recorded is None else recorded
    started = time.perf_counter()
    now = now or utcnow()
    check_identifier("org_id", org_id, required=False)
    check_identifier("user_id", user_id, required=False)
    if user_id is not None and org_id is None:
        org_id = "default"
    store = open_store(settings, embedding_model=None, embedding_dim=None)
    maintenance = maintenance_of(store)
    owners = [(org_id, user_id)] if user_id is not None else maintenance.memory_owners(_org(org_id))
    run = _Run(settings, maintenance, owner or f"run-{uuid.uuid4().hex[:12]}",
               timedelta(seconds=settings.consolidation.lease_seconds), now, started, dry_run,
               leased=not dry_run or recorded)
    with _lease(run):  # from here on the lease goes back however the run ends (a store error included)
        report: dict[str, Any] = {"run_id": run.owner, "dry_run": dry_run, "now": run.now.isoformat(),
                                  "users": len(owners)}
        shapes_before = maintenance.stats()["tables"]
        job = JobRecord(id=job_id(run.owner), org_id=report_org(org_id), user_id=user_id, kind="consolidation",
                        state="running", created_at=run.now, updated_at=utcnow(),
                        report={"users": len(owners), "dry_run": dry_run})
        if recorded:
            store.put_job(OrgScope(job.org_id), job.as_row())
        with _failed_on_error(store, job if recorded else None):
            if not dry_run:
                # Recall hits logged since the last run become part of the rows first: expiry reads
                # when a memory was last used, and merges add up the counts. The rows this rewrites
                # are put back in order with the rest at the end of the run.
                report["access_folded"] = maintenance.fold_access(_covered(org_id, user_id))
            report.update(_consolidate_users(run, owners, use_ray=use_ray, address=address, show_progress=show_progress))
            report.update(_tables_after(run, shapes_before, purged=bool(report["purged"] or report["messages_purged"])))
    report.update(_memories_shape(report["tables"]["memories"]), duration_s=round(time.perf_counter() - started, 3))
    if recorded:
        # Users that failed are retried by the next run; the job says which.
        done = replace(job, state="failed" if report["errors"] else "succeeded", progress=1.0, updated_at=utcnow(),
                       report=plan_report(report) if dry_run else _job_summary(report))
        store.put_job(OrgScope(job.org_id), done.as_row())
    return report


@dataclass(frozen=True)
class _Run:
    """What the stages of one run share: its settings, the store's upkeep, its lease and its clock."""

    settings: Settings
    maintenance: StoreMaintenance
    owner: str  # the run id, and the lease's owner
    ttl: timedelta
    now: datetime
    started: float  # time.perf_counter() when the run began
    dry_run: bool
    leased: bool

    def at(self, counter: float) -> datetime:
        """The run's clock at a `time.perf_counter()` reading: `now` moved on by the time since the start."""
        return self.now + timedelta(seconds=counter - self.started)

    def clock(self) -> datetime:
        """The run's clock now."""
        return self.at(time.perf_counter())


def _lease(run: _Run) -> AbstractContextManager[None]:
    """The consolidation lease held for a block (where the run takes it), given back at the run's clock."""
    if not run.leased:
        return nullcontext()
    return run.maintenance.leases.holding(LEASE, run.owner, run.ttl, run.now, clock=run.clock)


@contextmanager
def _failed_on_error(store: MemoryStore, job: JobRecord | None) -> Iterator[None]:
    """Mark the run's job row (where it has one) failed with `TypeName: message` if the block raises."""
    try:
        yield
    except Exception as exc:
        if job is not None:
            failed = replace(job, state="failed", updated_at=utcnow(), error=f"{type(exc).__name__}: {exc}")
            store.put_job(OrgScope(job.org_id), failed.as_row())
        raise


def _org(org_id: str | None) -> OrgScope | None:
    """The one org a run covers, or None for every org."""
    return OrgScope(org_id) if org_id is not None else None


def _covered(org_id: str | None, user_id: str | None) -> Scope | OrgScope | None:
    """What a run covers: one user, one org, or (None) every org."""
    if org_id is None:
        return None
    return Scope.user(org_id, user_id) if user_id is not None else OrgScope(org_id)


def _consolidate_users(run: _Run, owners: list[tuple[str, str]], *, use_ray: bool | None, address: str | None,
                       show_progress: bool) -> dict[str, Any]:
    """Consolidate each user, on Ray Data or in this process, and total their reports (`engine` first)."""
    on_ray = bool(owners) and (use_ray if use_ray is not None else len(owners) > IN_PROCESS_MAX_USERS)
    stream = (_on_ray(owners, run.settings, run.now, run.dry_run, address) if on_ray
              else _in_process(owners, run.settings, run.now, run.dry_run))
    with ProgressBar(len(owners), desc="consolidate", unit="user", show=show_progress) as bar:
        users = _collect(_counted(stream, bar), run,
                         compact_every=0 if run.dry_run else run.settings.consolidation.compact_every_users)
    return {"engine": "ray-data" if on_ray else "in-process", **_totals(users, run.dry_run)}


def _tables_after(run: _Run, shapes_before: dict[str, Any], *, purged: bool) -> dict[str, Any]:
    """`tables` (and `retention_purge`) of the report: a real run compacts the tables, refreshes their
    indexes and cleans old versions; a dry run shows them as they were."""
    if run.dry_run:
        return {"tables": {name: {"before": shape} for name, shape in shapes_before.items()}}
    retention = run.settings.consolidation
    after: dict[str, Any] = {
        "tables": run.maintenance.optimize(retain=timedelta(hours=retention.keep_versions_hours), cluster=True)}
    if purged or retention.retention_days or retention.message_retention_days:
        # What retention deleted leaves the files too, as an erasure's rows do. With retention on
        # this runs every time, so a purge cut short is done by the next run. The versions of the
        # last minutes stay: the Writer and other jobs may still be committing on them (their
        # files go at the next run).
        after["retention_purge"] = run.maintenance.purge_versions(
            ["memories", "events", "messages", "access"], keep=RETENTION_PURGE_KEEP)
    return after


def job_id(run_id: str) -> str:
    """The `jobs` row id of a run (what `GET /v1/jobs/{id}` takes)."""
    return f"consolidation-{run_id}"


def report_org(org_id: str | None) -> str:
    """The org a run's job row belongs to: the org it covered, or the system org for all of them."""
    return org_id if org_id is not None else SYSTEM_ORG


def _memories_shape(memories: dict[str, Any]) -> dict[str, Any]:
    """`fragments` and `versions` of the report: the memories table's before the run and after it."""
    return {"fragments": {"before": memories["before"]["fragments"], "after": memories.get("after", {}).get("fragments")},
            "versions": {"before": memories["before"]["versions"], "after": memories.get("after", {}).get("versions")}}


def _counted(stream: Iterable[dict], bar: ProgressBar) -> Iterator[dict]:
    """The per-user reports, each counted on the bar as it arrives."""
    for user_report in stream:
        bar.update(1)
        yield user_report


# Versions a mid-run compaction keeps: longer than any read a worker or a recall holds open.
MID_RUN_RETAIN = timedelta(minutes=10)


def _collect(stream: Iterable[dict], run: _Run, compact_every: int = 0) -> list[dict]:
    """Drain the per-user reports, renewing the lease (where the run holds it) whenever a third of
    its time has passed.

    Every `compact_every` changed users the tables are compacted and new rows indexed, so that
    the workers' reads do not slow down over a long run; versions are kept for MID_RUN_RETAIN,
    which covers any snapshot a worker or a recall still reads.
    """
    users: list[dict] = []
    last_renewal = time.perf_counter()
    changed = 0
    for user_report in stream:
        users.append(user_report)
        changed += any(int(user_report.get(n, 0)) for n in COUNTS)
        if compact_every and changed >= compact_every:
            changed = 0
            try:
                run.maintenance.optimize(retain=MID_RUN_RETAIN)
            except Exception:  # a commit conflict with a worker: the next round or the final pass compacts
                log.warning("mid-run compaction failed; the run continues", exc_info=True)
        elapsed = time.perf_counter()
        if run.leased and elapsed - last_renewal > run.ttl.total_seconds() / 3:
            if not run.maintenance.leases.renew(LEASE, run.owner, run.ttl, run.at(elapsed)):
                raise ConflictError("the consolidation lease was lost (the run took longer than its lease)",
                                    code="consolidation_lease_lost")
            last_renewal = elapsed
    return users


def _totals(users: list[dict], dry_run: bool) -> dict[str, Any]:
    totals: dict[str, Any] = {name: sum(int(u.get(name, 0)) for u in users) for name in COUNTS}
    totals["memories_merged"] = totals.pop("merged")
    totals["clusters_found"] = sum(int(u.get("found", u).get("clusters", 0)) for u in users if "error" not in u)
    totals["errors"] = [{"org_id": u["org_id"], "user_id": u["user_id"], "error": u["error"]}
                        for u in users if "error" in u]
    if dry_run:
        totals["cluster_detail"] = [c for u in users for c in u.get("cluster_detail", [])]
        totals["pair_detail"] = [{"user_id": u["user_id"], **p} for u in users for p in u.get("pair_detail", [])]
    totals["users_changed"] = sum(1 for u in users if any(int(u.get(n, 0)) for n in COUNTS))
    judged = [u["judged"] for u in users if "judged" in u]
    if judged:
        totals["judged"] = {k: sum(j[k] for j in judged) for k in ("asked", "remembered", "unasked", "confirmed", "refused")}
    return totals


# Clusters a dry run's job row shows (the rest are counted): a row is read whole by every look at it.
PLAN_CLUSTERS_SHOWN = 500


def plan_report(report: dict[str, Any], shown: int = PLAN_CLUSTERS_SHOWN) -> dict[str, Any]:
    """A dry run's job report: what a run would do, counted, and the merges it would make
    (`clusters`: the canonical memory, the members, and why they were linked), so that they can
    be read before a real run (which plans again: memories changed since may change its plan)."""
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for pair in report.get("pair_detail", []):
        pairs[(pair["a"]["id"], pair["b"]["id"])] = pairs[(pair["b"]["id"], pair["a"]["id"])] = pair
    clusters = []
    for cluster in report.get("cluster_detail", [])[:shown]:
        members = [cluster["canonical"], *cluster["merged"]]
        links = []
        for k, a in enumerate(members):
            for b in members[k + 1:]:
                pair = pairs.get((a["id"], b["id"]))
                if pair is not None:
                    links.append({"a": a["id"], "b": b["id"], "reason": link_reason(pair),
                                  "cosine": pair["cosine"], "lexical": pair["lexical"]})
        clusters.append({
            "user_id": cluster["user_id"], "canonical": cluster["canonical"], "members": members,
            "min_similarity": cluster["min_similarity"], "links": links,
            "why": f"each of the {len(links)} pairs of these {len(members)} memories says the same fact "
                   f"(lowest similarity {cluster['min_similarity']}); the canonical one is the most important, "
                   "recent and specific",
        })
    keep = ("users", "clusters_found", "memories_merged", "expired", "decayed", "purged", "duration_s", "errors")
    return {"dry_run": True, **{k: report[k] for k in keep if k in report}, "clusters": clusters,
            "clusters_shown": len(clusters), "clusters_left_out": max(0, len(report.get("cluster_detail", [])) - shown)}


def link_reason(pair: dict[str, Any]) -> str:
    """Why linking took two memories for one fact, in words."""
    if pair.get("exact"):
        return "the same text"
    if pair.get("model_reads"):
        wording = {"same": "the same words", "reworded": "one word swapped", "rephrased": "other wording"}
        return f"close in meaning (cosine {pair['cosine']}), {wording.get(pair.get('wording') or '', 'other words')}"
    return f"the same words where the model cannot read the text (lexical {pair['lexical']})"


def _job_summary(report: dict[str, Any]) -> dict[str, Any]:
    keep = ("users", "users_changed", "clusters_found", "clusters", "memories_merged", "expired", "decayed",
            "purged", "messages_purged", "judged", "fragments", "versions", "duration_s", "errors")
    return {k: report[k] for k in keep if k in report}
