"""Consolidation of one user's memories: cluster restatements, merge each cluster into one memory,
expire what is past its date, decay what goes unused, purge what left recall long ago.

Pure planning (`plan_user`) is separate from applying (`apply_plan`), so a dry run shows exactly
what a real run would do, and tests check plans without a store. Jobs (`jobs/consolidate.py`) run
this per user; nothing here imports Ray or LanceDB.

Which memories are restatements is decided in `agent_memory.linking` (which two may merge) and
`agent_memory.clustering` (the groups every pair of which may), on the guards of
`agent_memory.stance` (negation, other people, time and intent) and `agent_memory.wording`
(names, content words); the LLM summarizer and judge are in `agent_memory.judges`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from agent_memory.clustering import Cluster, Judge, cluster_memories
from agent_memory.index_text import index_text_of
from agent_memory.judges import RememberedJudge, Summarize, build_judge, build_summarizer
from agent_memory.link_signals import candidate_pairs
from agent_memory.linking import corpus_idf
from agent_memory.models import MemoryRecord, Scope
from agent_memory.settings import Settings

if TYPE_CHECKING:
    from agent_memory.service import MemoryService

# Re-exported for jobs/consolidate.py, which builds the LLM parts once per worker.
__all__ = ["ACTOR", "STEPS", "UserPlan", "apply_plan", "build_judge", "build_summarizer", "consolidate_user",
           "decayed_importance", "plan_user"]

ACTOR = "consolidation"
# What a run counts, in the order reports show it.
STEPS = ("clusters", "merged", "expired", "decayed", "purged", "messages_purged")


@dataclass
class UserPlan:
    """Everything one run would change for one user."""

    scope: Scope
    clusters: list[Cluster] = field(default_factory=list)
    expire: list[MemoryRecord] = field(default_factory=list)
    decay: list[tuple[MemoryRecord, float]] = field(default_factory=list)
    purge: list[MemoryRecord] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the run has nothing to do for this user."""
        return not (self.clusters or self.expire or self.decay or self.purge)

    def counts(self) -> dict[str, int]:
        """How many clusters and memories each step touches."""
        return {
            "clusters": len(self.clusters), "merged": sum(len(c.others) for c in self.clusters),
            "expired": len(self.expire), "decayed": len(self.decay), "purged": len(self.purge),
        }


# -- planning: expiry, decay, purge, clusters ----------------------------------------------------


def decayed_importance(record: MemoryRecord, now: datetime, settings: Settings) -> float | None:
    """The importance an unused memory decays to now, or None when it is not due.

    Due once per period after `decay_after_days` without a recall or a change. A decay stamps
    `updated_at`, which starts the next period: running twice in a period decays once.
    """
    floor = settings.consolidation.decay_floor
    if record.importance <= floor + 1e-6:
        return None
    idle_since = max(record.created_at, record.last_accessed_at or record.created_at)
    after = timedelta(days=settings.consolidation.decay_after_days)
    # Compared as a difference: a memory dated near the year 9999 has no datetime `after` later.
    if now - idle_since < after:
        return None
    start = idle_since + after
    period = timedelta(days=settings.consolidation.decay_period_days)
    if record.updated_at < start:
        steps = 1 + math.floor((now - start) / period)
    else:
        steps = math.floor((now - max(record.updated_at, idle_since)) / period)
    if steps < 1:
        return None
    value = max(floor, record.importance * settings.consolidation.decay_factor**steps)
    return round(value, 6) if value < record.importance - 1e-6 else None


def plan_user(
    scope: Scope,
    records: Sequence[MemoryRecord],
    vectors: np.ndarray,
    now: datetime,
    settings: Settings,
    judge: Judge | None = None,
) -> UserPlan:
    """What a run does for one user's memories (any status), given their vectors in the same order."""
    plan = UserPlan(scope)
    retention_days = settings.consolidation.retention_days
    retention = timedelta(days=retention_days)
    live: list[int] = []
    for i, r in enumerate(records):
        if r.status == "active":
            if r.expires_at is not None and r.expires_at <= now:
                plan.expire.append(r)
            else:
                live.append(i)
        elif retention_days > 0 and (r.valid_to or r.updated_at) <= now - retention:
            plan.purge.append(r)
    live_records = [records[i] for i in live]
    plan.clusters = cluster_memories(live_records, vectors[live], settings, judge, idf=corpus_idf(records))
    in_cluster = {r.id for c in plan.clusters for r in (c.canonical, *c.others)}
    for r in live_records:
        if r.id not in in_cluster:
            value = decayed_importance(r, now, settings)
            if value is not None:
                plan.decay.append((r, value))
    return plan


# -- applying ------------------------------------------------------------------------------------


def apply_plan(
    service: MemoryService, plan: UserPlan, now: datetime, summarize: Summarize | None = None
) -> dict[str, int]:
    """Carry out one user's plan; return what actually changed.

    Rows are re-read first: a memory deleted, changed or merged since planning is left alone,
    and access counts recorded meanwhile are kept. Merged memories are written before their
    sources are superseded (`MemoryService.merge_many`), so a run killed anywhere loses nothing
    and the next run resumes. Expiry, decay and purge events have deterministic ids, so a run
    repeated after a crash completes the audit trail instead of duplicating it.
    """
    scope = plan.scope
    planned = [r for c in plan.clusters for r in (c.canonical, *c.others)]
    planned += plan.expire + [r for r, _ in plan.decay]
    fresh = {r.id: r for r in service.store.get_memories(scope, [r.id for r in planned])}

    def unchanged(r: MemoryRecord) -> bool:
        now_r = fresh.get(r.id)
        return now_r is not None and now_r.status == "active" and now_r.updated_at == r.updated_at

    done = dict.fromkeys(STEPS, 0)
    writes = service.writes
    done["expired"] = writes.expire_many(scope, [fresh[r.id] for r in plan.expire if unchanged(r)], actor=ACTOR, at=now)
    groups = _merge_groups(service, plan.clusters, fresh, unchanged, summarize)
    if groups:
        service.merge_many(scope, groups, action="merged", actor=ACTOR)
        done["clusters"] = len(groups)
        done["merged"] = sum(len(o) for _, o in groups)
    decayed = [(fresh[r.id], value) for r, value in plan.decay if unchanged(r)]
    done["decayed"] = writes.decay_many(scope, decayed, actor=ACTOR, at=now)
    done["purged"] = writes.purge_many(scope, plan.purge, actor=ACTOR, reason="retention", at=now)
    return done


def purge_messages(service: MemoryService, scope: Scope, now: datetime) -> int:
    """Delete the user's logged messages older than `consolidation_message_retention_days` (0: none)."""
    days = service.settings.consolidation.message_retention_days
    return service.store.drop_messages_before(scope, now - timedelta(days=days)) if days > 0 else 0


def _merge_groups(
    service: MemoryService,
    clusters: Sequence[Cluster],
    fresh: dict[str, MemoryRecord],
    unchanged: Callable[[MemoryRecord], bool],
    summarize: Summarize | None,
) -> list[tuple[MemoryRecord, list[MemoryRecord]]]:
    """The (canonical, others) groups still to merge, as stored now, each canonical with its expiry
    and (with `summarize`) its summarised content."""
    groups = []
    for cluster in clusters:
        if not unchanged(cluster.canonical):
            continue
        others = [fresh[o.id] for o in cluster.others if unchanged(o)]
        if not others:
            continue
        canonical = fresh[cluster.canonical.id]
        permanent = [m.expires_at is None for m in (canonical, *others)]
        # A fact stated once without an end date does not expire because a restatement had one.
        expiry = None if any(permanent) else max(m.expires_at for m in (canonical, *others))  # type: ignore[type-var]
        canonical = canonical.model_copy(update={"expires_at": expiry})
        if summarize is not None:
            canonical = _summarized(service, canonical, others, summarize)
        groups.append((canonical, others))
    return groups


def _summarized(
    service: MemoryService, canonical: MemoryRecord, others: Sequence[MemoryRecord], summarize: Summarize
) -> MemoryRecord:
    """The canonical memory with its content replaced by an LLM summary of the cluster (re-embedded)."""
    texts = [canonical.content, *(o.content for o in others)]
    summary = service.redactor.redact_text(summarize(texts).strip())
    if not summary or summary == canonical.content:
        return canonical
    record = canonical.model_copy(deep=True)
    record.content = summary
    record.index_text = index_text_of(summary)
    record.keywords = service.keywords_of(record.index_text, summary)
    service.embed_records([record])
    return record


def consolidate_user(
    service: MemoryService,
    scope: Scope,
    now: datetime,
    *,
    dry_run: bool = False,
    summarize: Summarize | None = None,
    judge: Judge | None = None,
) -> dict[str, Any]:
    """Plan and (unless a dry run) apply consolidation for one user; return the user's report."""
    # The user scan reads the store: the service has no method that returns every status with vectors.
    records, vectors = service.store.user_memories(scope)
    remembered = None
    if judge is not None:
        remembered = RememberedJudge(judge, service.store, scope, now, budget=service.settings.consolidation.judge_max_pairs)
    plan = plan_user(scope, records, vectors, now, service.settings, remembered)
    report: dict[str, Any] = {"org_id": scope.org_id, "user_id": scope.user_id, "memories": len(records)}
    if remembered is not None:
        report["judged"] = remembered.tally()
    if dry_run:
        report.update(plan.counts())
        report["cluster_detail"] = [c.as_dict() for c in plan.clusters]
        # The memories the plan clustered: active and not past their expiry.
        live = [k for k, r in enumerate(records) if r.status == "active" and not (r.expires_at and r.expires_at <= now)]
        report["pair_detail"] = candidate_pairs([records[k] for k in live], vectors[live], service.settings,
                                                corpus_idf(records))
        return report
    report["found"] = plan.counts()
    report.update(apply_plan(service, plan, now, summarize) if not plan.empty else dict.fromkeys(STEPS, 0))
    report["messages_purged"] = purge_messages(service, scope, now)
    if remembered is not None:
        remembered.keep()
    return report
