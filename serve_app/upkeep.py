"""The Writer's upkeep of the store, beside its commits: folds of the small fragments new commits
leave, full compactions on a schedule, and erasures' purges with their retries.

With several Writer shards, one of them keeps the store at a time (`UpkeepLease`). The work runs
on threads of its own, never in the commit queue, except an erasure's drop of old versions, which
takes its turn there (`in_turn`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from agent_memory.models import utcnow
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from storage.leases import Leases

# Serve's own logger: its JSON encoding (set in cluster/serve_config.yaml) adds request ids.
log = logging.getLogger("ray.serve")
# A failed erasure purge is tried again after 30 s, 2 min, 8 min and 32 min, then at the next start.
PURGE_RETRY_S = 30.0
PURGE_RETRIES = 4
# The tables whose new fragments the upkeep folds: the Writer's writes and their audit events, and
# the ingress replicas' access-log flushes.
FOLDED_TABLES = ("memories", "events", "access")


class FullOptimizeSchedule:
    """When the Writer's full compaction is due: after `every` commits, and not within
    `min_seconds` of the previous one (the first may come as soon as the commits are there).

    A full pass rewrites every index, and every replica then reads them afresh. At 1M memories,
    one every 100 commits cut 8 clients searching beside one writing from 107 to 29 searches/s
    (the ingress's CPU per search 9.8 -> 27 ms).
    """

    def __init__(self, every: int, min_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.min_seconds, self._clock = every, min_seconds, clock
        self._commits = 0
        self._last = -math.inf

    def commit(self, *, busy: bool = False) -> bool:
        """Count a commit; True when a pass should start now (`busy`: one is still running)."""
        self._commits += 1
        now = self._clock()
        if busy or self._commits < self.every or now - self._last < self.min_seconds:
            return False
        self._commits, self._last = 0, now
        return True


class UpkeepLease:
    """Whether this Writer keeps the store now (folds, indexes, full compactions): with several
    shards, the one holding the `writer-upkeep` lease; with one, always.

    The lease (storage.leases, on the jobs table) is taken or renewed at most every `ttl_s / 3`
    and expires after `ttl_s`, so a shard that died hands the upkeep to another within a minute.
    """

    NAME = "writer-upkeep"

    def __init__(self, leases: Leases, owner: str, *, shared: bool, ttl_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._leases, self._owner, self._shared = leases, owner, shared
        self._ttl = timedelta(seconds=ttl_s)
        self._clock = clock
        self._checked = -math.inf
        self._held = not shared

    def held(self) -> bool:
        if not self._shared:
            return True
        now = self._clock()
        if now - self._checked >= self._ttl.total_seconds() / 3:
            self._checked = now
            try:
                self._held = self._leases.acquire(self.NAME, self._owner, self._ttl, utcnow())
            except Exception as exc:  # noqa: BLE001 - storage hiccup: not the holder until the next try
                log.warning("could not take or renew the upkeep lease: %s", exc)
                self._held = False
        return self._held

    def release(self) -> None:
        if self._shared and self._held:
            try:
                self._leases.release(self.NAME, self._owner, self._ttl, utcnow())
            except Exception:  # noqa: BLE001 - it expires on its own
                log.warning("could not release the upkeep lease; it expires in %s", self._ttl)
            self._held = False


class StoreUpkeep:
    """One Writer's upkeep of the store: what it folds and compacts, and the erasures it purges.

    `in_turn(call)` runs `call` in the Writer's queue, between commits. Folds, compactions and
    purges run one at a time (`optimizing`), on threads of their own.
    """

    def __init__(self, service: MemoryService, settings: Settings, owner: str, *, shared: bool,
                 in_turn: Callable[[Callable[[], Any]], Any]) -> None:
        self._service, self._settings, self._in_turn = service, settings, in_turn
        writer = settings.writer
        self._full_passes = FullOptimizeSchedule(
            writer.optimize_every,
            # Without the upkeep's folds this pass is the only compaction: no minimum gap then.
            writer.optimize_min_seconds if writer.upkeep_seconds > 0 else 0.0,
        )
        self.lease = UpkeepLease(service.maintenance.leases, owner, shared=shared)
        self._maintenance = ThreadPoolExecutor(max_workers=1, thread_name_prefix="optimize")
        self.optimizing = threading.Lock()
        self._stopping = threading.Event()
        self._fold_due = threading.Event()
        self._commits_since_fold = 0
        if writer.upkeep_seconds > 0:
            threading.Thread(target=self._fold_loop, name="upkeep", daemon=True).start()

    def committed(self) -> None:
        """After each commit (on the commit thread): bring the next fold forward once enough
        commits pile up, and start a full compaction when one is due."""
        self._commits_since_fold += 1
        if self._commits_since_fold >= self._settings.writer.fold_commits:
            self._fold_due.set()  # the upkeep folds the new fragments now rather than at its next tick
        if self._full_passes.commit(busy=self.optimizing.locked()) and self.lease.held():
            # The upkeep keeps new fragments folded, and the scalar indexes updated once enough
            # rows pile up; this full pass compacts what the folds left, brings every index (the
            # full-text one too) up to date and drops old versions. It takes a second or more, so
            # it runs beside the commits instead of holding the queue (a commit that races it is
            # retried like any commit conflict).
            self._maintenance.submit(self._optimize)

    def _optimize(self) -> None:
        with self.optimizing:
            try:
                self._service.maintenance.optimize(retain=timedelta(hours=1))
            except Exception:
                log.exception("periodic optimize failed; writes continue")

    def _fold_loop(self) -> None:
        """Every `writer_upkeep_seconds`, or sooner after `writer_fold_commits` commits, fold the
        small fragments that recent commits left outside the indexes and index them once
        `writer_reindex_rows` pile up (StoreMaintenance.fold_new_rows). Searches, id lookups and the
        next write's insert-if-absent would otherwise open and scan each of them."""
        maintenance, seen = self._service.maintenance, None
        seconds = self._settings.writer.upkeep_seconds
        while not self._stopping.is_set():
            self._fold_due.wait(seconds)
            self._fold_due.clear()
            self._commits_since_fold = 0
            if self._stopping.is_set() or not self.lease.held():
                continue  # stopping, or another shard keeps the store
            if not self.optimizing.acquire(blocking=False):
                continue  # a compaction or an erasure is running
            try:
                versions = [maintenance.table(name).version for name in FOLDED_TABLES]
                if versions != seen:
                    maintenance.fold_new_rows(reindex_rows=self._settings.writer.reindex_rows, tables=FOLDED_TABLES)
                    seen = [maintenance.table(name).version for name in FOLDED_TABLES]
            except Exception as exc:  # noqa: BLE001 - a commit conflict or a storage hiccup: next round
                log.warning("fragment upkeep failed, tried again in %.0f s: %s", seconds, exc)
            finally:
                self.optimizing.release()

    def purge(self, org_id: str, job_id: str, attempt: int = 1) -> None:
        """An erasure's purge, on the maintenance thread (after or before a compaction, never
        beside one; the folds wait for it), while commits go on; its drop of old versions takes
        its turn in the queue. A failed purge is tried again after `PURGE_RETRY_S` x
        4^(attempt - 1), `PURGE_RETRIES` times, then at the next start."""
        with self.optimizing:
            try:
                self._service.erasures.finish(org_id, job_id, in_turn=self._in_turn)
                return
            except Exception:
                log.exception("erasure %s: purge attempt %d failed", job_id, attempt)
        if attempt <= PURGE_RETRIES:
            self.purge_later(PURGE_RETRY_S * 4 ** (attempt - 1), org_id, job_id, attempt + 1)

    def purge_later(self, delay_s: float, org_id: str, job_id: str, attempt: int = 1) -> None:
        """Queue an erasure's purge on the maintenance thread after `delay_s` (unless stopping:
        the next start finishes it)."""
        def submit() -> None:
            if not self._stopping.is_set():
                self._maintenance.submit(self.purge, org_id, job_id, attempt)

        timer = threading.Timer(delay_s, submit)
        timer.daemon = True
        timer.start()

    def resume_erasures(self, before: datetime, mine: Callable[[str, str | None], bool]) -> None:
        """Finish this shard's erasures accepted before `before` (a restart) on the maintenance thread."""
        self._maintenance.submit(self._resume_erasures, before, mine)

    def _resume_erasures(self, before: datetime, mine: Callable[[str, str | None], bool]) -> None:
        with self.optimizing:
            try:
                outcome = self._service.erasures.resume(in_turn=self._in_turn, before=before, mine=mine)
            except Exception:
                log.exception("could not look for unfinished erasures")
                return
        for org_id, job_id in outcome["failed"]:  # tried again later, like a purge failed after its answer
            self.purge_later(PURGE_RETRY_S, org_id, job_id, 2)

    @property
    def stopping(self) -> bool:
        """Whether `stop` was called (the replica is going away)."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Stop folding and scheduling purges; give the lease back."""
        self._stopping.set()
        self._fold_due.set()
        self.lease.release()
