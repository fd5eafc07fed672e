"""Deferred access bookkeeping: recall counts hits in memory and a background flush writes them in
batches, so that no write ever sits on the recall hot path."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime

log = logging.getLogger(__name__)

# (org, {user: {memory id: hits}}, time of the flush) -> rows written
FlushFn = Callable[[str, dict[str, dict[str, int]], datetime], int]


class AccessRecorder:
    """Buffers (org, user, memory id) hits and flushes them every `interval` seconds or `max_rows` ids."""

    def __init__(self, flush: FlushFn, clock: Callable[[], datetime], interval: float = 2.0, max_rows: int = 1000) -> None:
        self._flush_fn = flush
        self._clock = clock
        self._interval = interval
        self._max_rows = max_rows
        self._pending: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._size = 0  # distinct ids pending, kept as they come rather than summed on every hit
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, org_id: str, user_id: str, memory_ids: Iterable[str]) -> None:
        """Count one access of each memory; cheap and lock-short."""
        with self._lock:
            bucket = self._pending[(org_id, user_id)]
            before = len(bucket)
            for memory_id in memory_ids:
                bucket[memory_id] += 1
            self._size += len(bucket) - before
            size = self._size
        if size >= self._max_rows:
            self._wake.set()

    def discard_user(self, org_id: str, user_id: str) -> None:
        """Drop a user's pending updates (their data is being erased)."""
        with self._lock:
            self._size -= len(self._pending.pop((org_id, user_id), {}))

    def discard(self, org_id: str, memory_ids: Iterable[str]) -> None:
        """Drop pending updates of memories that were deleted or merged."""
        ids = set(memory_ids)
        with self._lock:
            for (org, _user), bucket in self._pending.items():
                if org == org_id:
                    for memory_id in ids & bucket.keys():
                        del bucket[memory_id]
                        self._size -= 1

    def pending(self) -> int:
        """How many memory ids wait to be flushed."""
        with self._lock:
            return self._size

    def flush(self) -> int:
        """Write every pending count now, one batch per org; return the rows written."""
        with self._flush_lock:
            with self._lock:
                pending, self._pending = self._pending, defaultdict(lambda: defaultdict(int))
                self._size = 0
            by_org: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
            for (org_id, user_id), bucket in pending.items():
                if bucket:
                    by_org[org_id][user_id] = dict(bucket)
            updated = 0
            at = self._clock()
            for org_id, counts in by_org.items():
                if counts:
                    try:
                        updated += self._flush_fn(org_id, counts, at)
                    except Exception:
                        # Access counts are statistics: losing one flush must never break recall.
                        log.exception("access flush failed for org %s", org_id)
            return updated

    def start(self) -> None:
        """Flush in a daemon thread until `close`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="access-flush", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            self.flush()

    def close(self) -> None:
        """Stop the thread and flush what is left."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()
