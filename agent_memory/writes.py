"""Changes that add or retire memory rows, each with its audit events: batches of new memories
(idempotent, embedded beside the id lookup), merges, and supersessions."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from agent_memory.access import AccessRecorder
from agent_memory.audit import audit_view, memory_event
from agent_memory.embedding import Embedder
from agent_memory.errors import ConflictError, NotFoundError
from agent_memory.ids import stable_id
from agent_memory.merge import apart_ids, merge_records, restored, superseded
from agent_memory.models import MemoryEvent, MemoryRecord, OrgScope, Scope
from agent_memory.store import MemoryStore

OnConflict = Literal["error", "skip"]


@dataclass(frozen=True)
class WriteResult:
    """The ids of a write, in request order, and which of them were newly stored."""

    ids: list[str]
    created: set[str]


class Writes:
    """Row-adding and row-retiring commits on one store; `embedder` gives the model (or raises)."""

    def __init__(self, store: MemoryStore, embedder: Callable[[], Embedder], has_embedder: Callable[[], bool],
                 access: AccessRecorder, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.embedder = embedder
        self.has_embedder = has_embedder
        self.access = access
        self.clock = clock
        self._lock = threading.Lock()
        self._helper: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the helper thread."""
        if self._helper is not None:
            self._helper.shutdown(wait=True)

    def embed_records(self, records: Sequence[MemoryRecord]) -> None:
        """Fill vectors and vocabulary coverage of records in one batched model call."""
        if not records:
            return
        embedder = self.embedder()
        texts = [r.vector_text for r in records]
        vectors = embedder.embed_batch(texts)
        shares = embedder.oov_shares(texts)
        for record, vector, share in zip(records, vectors, shares, strict=True):
            record.vector = vector.tolist()
            record.oov = float(share)

    def embed_beside(self, records: Sequence[MemoryRecord]) -> Future[None] | None:
        """`embed_records` on a helper thread; None when there is nothing to embed."""
        if not records or not self.has_embedder():
            return None
        with self._lock:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-beside")
        return self._helper.submit(self.embed_records, records)

    def write_batch(
        self,
        org_id: str,
        requests: Sequence[Sequence[MemoryRecord]],
        *,
        actor: str | Sequence[str],
        on_conflict: OnConflict = "error",
    ) -> list[WriteResult | ConflictError]:
        """Write several requests' records with one embedding call and one commit.

        Each request succeeds or fails alone: a request whose idempotency key or id was used with
        another body gets a ConflictError and writes nothing; the others are committed together.
        `actor` is the audit actor of every request, or of each in turn (requests of several callers).
        """
        actors = [actor] * len(requests) if isinstance(actor, str) else list(actor)
        if len(actors) != len(requests):
            raise ValueError(f"{len(actors)} actors for {len(requests)} requests")
        first: dict[str, MemoryRecord] = {}
        for records in requests:
            for r in records:
                first.setdefault(r.id, r)
        # The model embeds the texts while the store looks their ids up: both mostly wait on
        # other processes or native threads. Only a retried write's texts are embedded for nothing.
        embedding = self.embed_beside([r for r in first.values() if r.vector is None])
        # id -> origin hash of what is stored, or accepted earlier in this batch
        try:
            known = self.store.origin_hashes(OrgScope(org_id), sorted(first))
        except BaseException:
            if embedding is not None:
                embedding.cancel()
            raise
        stored = set(known)
        results: list[WriteResult | ConflictError] = []
        fresh: dict[str, MemoryRecord] = {}
        accepted: list[tuple[int, list[MemoryRecord]]] = []
        for index, records in enumerate(requests):
            unique: dict[str, MemoryRecord] = {}
            clash = False
            for r in records:
                seen = unique.get(r.id)
                if seen is not None and seen.origin_hash != r.origin_hash:
                    clash = True
                unique.setdefault(r.id, r)
                if r.id in known and known[r.id] != r.origin_hash:
                    clash = True
            if clash and on_conflict == "error":
                results.append(ConflictError(
                    "this idempotency key or memory id was already used with a different body",
                    code="idempotency_conflict",
                ))
                continue
            for r in unique.values():
                if r.id not in known:
                    known[r.id] = r.origin_hash
                    fresh[r.id] = r
            accepted.append((index, list(unique.values())))
            results.append(WriteResult([r.id for r in records], set()))
        new_records = list(fresh.values())
        if embedding is not None:
            if new_records:
                embedding.result()  # a model that failed fails the batch, as it always did
            else:
                embedding.cancel()  # a retry of stored writes: no vector is needed
        # Records embedded upstream (a batch job's actor pool) keep their vectors.
        self.embed_records([r for r in new_records if r.vector is None])
        # `fresh` holds only ids the lookup above found absent: the store need not look them up again.
        created = self.store.insert_memories(OrgScope(org_id), new_records, known_absent=True) if new_records else set()
        # Creation events have deterministic ids: a retry after a crash between the two commits
        # completes the audit trail instead of duplicating it.
        events = []
        for index, records in accepted:
            result = results[index]
            assert isinstance(result, WriteResult)
            result.created.update(r.id for r in records if r.id in created and r.id in fresh)
            events += [
                self._event(r, "created", actors[index], after=audit_view(r), event_id=stable_id("event:created", r.id))
                for r in records if r.id in created or r.id in stored
            ]
        self.store.append_events(OrgScope(org_id), events)
        return results

    def merge_many(
        self,
        scope: Scope,
        groups: Sequence[tuple[MemoryRecord, Sequence[MemoryRecord]]],
        *,
        action: Literal["reinforced", "merged"] = "merged",
        actor: str = "system",
    ) -> list[MemoryRecord]:
        """`merge` for many disjoint (canonical, others) groups of one scope in a few commits.

        Same order as `merge`: every merged memory is written (one commit for the existing, one for
        the new) before any source is superseded (one commit), then the events (one commit).
        """
        if not groups:
            return []
        now = self.clock()
        plans = []
        for canonical, others in groups:
            others = [o for o in others if o.id != canonical.id]
            plans.append((canonical, others, merge_records(canonical, others, now)))
        stored = {r.id for r in self.store.get_memories(scope, [c.id for c, _, _ in plans])}
        existing = [m for c, _, m in plans if c.id in stored]
        fresh = [m for c, _, m in plans if c.id not in stored]
        if existing and self.store.replace_memories(scope, existing) != len(existing):
            raise NotFoundError("a memory to merge into was deleted meanwhile")
        if fresh:
            self.embed_records([m for m in fresh if m.vector is None])
            self.store.insert_memories(scope, fresh)
        retired = [superseded(o, merged.id, now) for _, others, merged in plans for o in others]
        self.store.replace_memories(scope, retired)
        self.access.discard(scope.org_id, [r.id for r in retired])
        events: list[MemoryEvent] = []
        for canonical, others, merged in plans:
            before = None
            if canonical.id in stored:
                before = {"source_ids": list(canonical.source_ids), "importance": canonical.importance,
                          "access_count": canonical.access_count, "content": canonical.content}
            # The text it holds from now on (a summary may have replaced it): the timeline replays it.
            after = {"source_ids": merged.source_ids, "importance": merged.importance,
                     "access_count": merged.access_count, "absorbed": [o.id for o in others],
                     "content": merged.content, "memory_type": merged.memory_type}
            events.append(self._event(merged, action, actor, before=before, after=after))
            events += [
                self._event(o, "superseded", actor, before={"status": "active"},
                            after={"status": "superseded", "superseded_by": merged.id})
                for o in others
            ]
        self.store.append_events(scope, events)
        for _, _, merged in plans:
            merged.vector = None
        return [merged for _, _, merged in plans]

    def supersede(self, scope: Scope, old: MemoryRecord, new_id: str, *, actor: str = "system") -> None:
        """Retire `old` in favour of the memory `new_id` (a contradiction: the newer fact wins)."""
        if not self.store.get_memories(scope, [new_id]):
            raise NotFoundError(f"memory {new_id} not found")
        now = self.clock()
        if not self.store.replace_memories(scope, [superseded(old, new_id, now)]):
            raise NotFoundError(f"memory {old.id} not found")
        self.access.discard(scope.org_id, [old.id])
        self.store.append_events(scope, [self._event(
            old, "superseded", actor, before={"status": old.status},
            after={"status": "superseded", "superseded_by": new_id},
        )])

    def restore(self, scope: Scope, record: MemoryRecord, *, actor: str) -> MemoryRecord:
        """Make a superseded or expired memory active again (undo a wrong merge or supersede, an
        `outdated` vote or an expiry), with an event.

        The memory that replaced it stays as it is; the two are kept apart from then on, so that
        consolidation does not merge them again. An expiry date already past is cleared.
        """
        if record.status not in ("superseded", "expired"):
            raise ConflictError(f"memory {record.id} is {record.status}: only a superseded or expired memory can be "
                                "restored", code="not_superseded")
        back = restored(record, self.clock())
        if not self.store.replace_memories(scope, [back]):
            raise NotFoundError(f"memory {record.id} not found")
        before = {"status": record.status, "superseded_by": record.superseded_by,
                  "valid_to": record.valid_to.isoformat() if record.valid_to else None}
        after: dict[str, Any] = {"status": "active", "valid_to": None, "kept_apart_from": apart_ids(back)}
        if back.expires_at != record.expires_at:
            before["expires_at"], after["expires_at"] = record.expires_at.isoformat() if record.expires_at else None, None
        self.store.append_events(scope, [self._event(back, "restored", actor, before=before, after=after)])
        return back

    def _event(self, record: MemoryRecord, action: str, actor: str, **change: Any) -> MemoryEvent:
        return memory_event(record, action, actor, self.clock(), **change)

    # -- batched changes of consolidation and extraction ----------------------------------------

    def reinforce_many(self, scope: Scope, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], *, actor: str,
                       at: datetime | None = None) -> int:
        """Write each (before, merged) restatement over the memory it reinforces; a `reinforced` event each."""
        if not pairs:
            return 0
        at = at or self.clock()
        written = self.store.replace_memories(scope, [merged for _, merged in pairs])
        self.store.append_events(scope, [
            memory_event(merged, "reinforced", actor, at,
                         before={"source_ids": list(before.source_ids), "importance": before.importance},
                         after={"source_ids": list(merged.source_ids), "importance": merged.importance})
            for before, merged in pairs
        ])
        return written

    def retire_many(self, scope: Scope, pairs: Sequence[tuple[MemoryRecord, MemoryRecord]], *, actor: str,
                    at: datetime | None = None) -> int:
        """Supersede memories in one commit: each (current, retired) pair is the memory and the row that
        retires it (status, `superseded_by`, `valid_to` set); a `superseded` event each."""
        if not pairs:
            return 0
        at = at or self.clock()
        written = self.store.replace_memories(scope, [retired for _, retired in pairs])
        self.access.discard(scope.org_id, [retired.id for _, retired in pairs])
        self.store.append_events(scope, [
            memory_event(current, "superseded", actor, at, before={"status": "active", "content": current.content},
                         after={"status": "superseded", "superseded_by": retired.superseded_by})
            for current, retired in pairs
        ])
        return written

    def expire_many(self, scope: Scope, records: Sequence[MemoryRecord], *, actor: str,
                    at: datetime | None = None) -> int:
        """Mark memories past their expiry `expired` (out of recall until purged); an event each,
        with an id of the memory's own, so a repeated run adds none."""
        if not records:
            return 0
        at = at or self.clock()
        rows = [r.model_copy(update={"status": "expired", "valid_to": r.expires_at, "updated_at": at}) for r in records]
        written = self.store.replace_memories(scope, rows)
        self.store.append_events(scope, [
            memory_event(r, "expired", actor, at, event_id=stable_id("event:expired", r.id),
                         before={"status": "active"}, after={"status": "expired"})
            for r in records
        ])
        return written

    def decay_many(self, scope: Scope, pairs: Sequence[tuple[MemoryRecord, float]], *, actor: str,
                   at: datetime | None = None) -> int:
        """Lower the importance of memories nobody recalled or changed for long; an event each
        (one per memory and run time)."""
        if not pairs:
            return 0
        at = at or self.clock()
        written = self.store.replace_memories(
            scope, [r.model_copy(update={"importance": value, "updated_at": at}) for r, value in pairs])
        self.store.append_events(scope, [
            memory_event(r, "updated", actor, at, event_id=stable_id("event:decayed", r.id, at.isoformat()),
                         before={"importance": r.importance}, after={"importance": value})
            for r, value in pairs
        ])
        return written

    def purge_many(self, scope: Scope, records: Sequence[MemoryRecord], *, actor: str, reason: str,
                   at: datetime | None = None) -> int:
        """Delete memories that left recall long ago, and their audit events (which hold their
        content); a content-free event each, saying why.

        The events go first: cut short after them, the memories are still there for the next
        run to purge; the other way round, events with their content would outlive them."""
        if not records:
            return 0
        at = at or self.clock()
        self.store.drop_memory_events(scope, [r.id for r in records])
        deleted = self.store.delete_memories(scope, [r.id for r in records])
        self.access.discard(scope.org_id, [r.id for r in records])
        self.store.append_events(scope, [
            memory_event(r, "deleted", actor, at, event_id=stable_id("event:purged", r.id),
                         before={"status": r.status, "superseded_by": r.superseded_by}, after={"reason": reason})
            for r in records
        ])
        return deleted
