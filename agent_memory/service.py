"""The memory service: every operation on memories, written against the store interface.

Notebooks, the CLI, Ray jobs, the Serve app and tests all use this one object. It needs no Ray.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np

from agent_memory import scoring
from agent_memory.access import AccessRecorder
from agent_memory.audit import audit_view, erasure_event, memory_event
from agent_memory.embedding import Embedder
from agent_memory.errors import ConflictError, InvalidInputError, NotFoundError, UnavailableError
from agent_memory.ids import fingerprint, memory_id, stable_id
from agent_memory.merge import merge_records, superseded
from agent_memory.models import (
    MemoryEvent,
    MemoryPatch,
    MemoryRecord,
    Message,
    MessageRecord,
    NewMemory,
    RecallHit,
    RecallResult,
    Scope,
    ScoreParts,
    SearchQuery,
    as_utc,
    check_identifier,
    index_parts,
    index_speaker,
    index_text_of,
    parse_input,
    speaker_name,
    utcnow,
)
from agent_memory.redaction import Redactor
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore, Page, Pool, RecallFilter
from agent_memory.text import field_text, keyword_text, terms

log = logging.getLogger(__name__)
OnConflict = Literal["error", "skip"]


@dataclass(frozen=True)
class WriteResult:
    """The ids of a write, in request order, and which of them were newly stored."""

    ids: list[str]
    created: set[str]


class MemoryService:
    """Add, recall, update, delete and erase memories for many tenants on one store."""

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder | None,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = utcnow,
        defer_access: bool = True,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.clock = clock
        self.redactor = Redactor(enabled=settings.redaction_enabled)
        self.weights = scoring.Weights.from_settings(settings)
        self.access = AccessRecorder(
            store.record_access, clock, settings.access_flush_seconds, settings.access_flush_rows
        )
        if defer_access:
            self.access.start()
        self._lock = threading.Lock()
        self._helper: ThreadPoolExecutor | None = None

    @classmethod
    def row_builder(cls, settings: Settings, *, clock: Callable[[], datetime] = utcnow) -> MemoryService:
        """A service that only validates, redacts and keys rows (no store, no model): for batch workers."""
        return cls(_NoStore(), None, settings, clock=clock, defer_access=False)

    def close(self) -> None:
        """Flush deferred access counts and stop background threads."""
        self.access.close()
        if self._helper is not None:
            self._helper.shutdown(wait=True)

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def _require_embedder(self) -> Embedder:
        if self.embedder is None:
            raise UnavailableError("no embedding model is loaded")
        return self.embedder

    def _redact_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        return {k: self.redactor.redact_text(v) if isinstance(v, str) else v for k, v in metadata.items()}

    def _check_limits(self, item: NewMemory) -> None:
        if len(item.content) > self.settings.max_content_chars:
            raise InvalidInputError(
                f"content is {len(item.content)} characters; the limit is {self.settings.max_content_chars}"
            )
        size = len(json.dumps(item.metadata, ensure_ascii=False, default=str).encode())
        if size > self.settings.max_metadata_bytes:
            raise InvalidInputError(f"metadata is {size} bytes; the limit is {self.settings.max_metadata_bytes}")

    def prepare(
        self, org_id: str, item: NewMemory, *, idempotency_key: str | None = None, position: int = 0
    ) -> MemoryRecord:
        """Validate, redact and key one memory (without its vector)."""
        check_identifier("org_id", org_id)
        self._check_limits(item)
        now = self.clock()
        content = self.redactor.redact_text(item.content)
        context = self.redactor.redact_text(item.context) if item.context else None
        metadata = self._redact_metadata(item.metadata)
        origin = {
            "content": content, "memory_type": item.memory_type, "agent_id": item.agent_id,
            "session_id": item.session_id, "team_id": item.team_id, "importance": item.importance,
            "confidence": item.confidence, "metadata": metadata, "source_ids": sorted(item.source_ids),
            "created_at": item.created_at.isoformat() if item.created_at else None,
            "expires_at": item.expires_at.isoformat() if item.expires_at else None, "id": item.id,
        }
        key_id = memory_id(
            org_id,
            item.user_id,
            client_id=item.id,
            idempotency_key=idempotency_key,
            position=position,
            message_ids=[*item.source_ids, item.memory_type] if item.source_ids else None,
            natural_key=[item.agent_id, item.session_id, item.team_id, item.memory_type, content, origin["created_at"]],
        )
        created = item.created_at or now
        speaker = speaker_name(self.redactor.redact_text(item.speaker)) if item.speaker else None
        index_text, keywords = self._index(content, context, speaker)
        return MemoryRecord(
            id=key_id, org_id=org_id, team_id=item.team_id, user_id=item.user_id, agent_id=item.agent_id,
            session_id=item.session_id, content=content, index_text=index_text,
            keywords=keywords, memory_type=item.memory_type, importance=item.importance,
            confidence=item.confidence, status="active", valid_from=created, created_at=created,
            updated_at=now, access_count=0, expires_at=item.expires_at, source_ids=list(item.source_ids),
            metadata=metadata, origin_hash=fingerprint(origin),
        )

    def _index(self, content: str, context: str | None, speaker: str | None = None) -> tuple[str, str]:
        """The text search sees (context, then "speaker: content") and its keyword terms."""
        index_text = index_text_of(content, context, speaker)
        return index_text, self.keywords_of(index_text, content)

    def keywords_of(self, index_text: str, content: str) -> str:
        """The keyword terms of an index text: the memory's own (with its speaker), then its context's.

        The own terms count `content_boost` times (field boosting by repetition), so a turn that
        only repeats its context's words ("Thanks!" after a fact) ranks below the turn that said them.
        """
        context, own = index_parts(index_text, content)
        parts = [field_text(own)] * self.settings.content_boost
        if context:
            parts.append(field_text(context))
        return " ".join(parts)

    def embed_records(self, records: Sequence[MemoryRecord]) -> None:
        """Fill vectors and vocabulary coverage of records in one batched model call."""
        if not records:
            return
        embedder = self._require_embedder()
        texts = [r.vector_text for r in records]
        vectors = embedder.embed_batch(texts)
        shares = embedder.oov_shares(texts)
        for record, vector, share in zip(records, vectors, shares, strict=True):
            record.vector = vector.tolist()
            record.oov = float(share)

    def _embed_beside(self, records: Sequence[MemoryRecord]) -> Future[None] | None:
        """`embed_records` on a helper thread; None when there is nothing to embed."""
        if not records or self.embedder is None:
            return None
        with self._lock:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-beside")
        return self._helper.submit(self.embed_records, records)

    def add(
        self, org_id: str, memory: NewMemory | dict[str, Any], *, idempotency_key: str | None = None,
        actor: str = "api",
    ) -> str:
        """Store one memory; return its id. A retry stores nothing twice."""
        return self.add_many(org_id, [memory], idempotency_key=idempotency_key, actor=actor).ids[0]

    def add_many(
        self,
        org_id: str,
        memories: Sequence[NewMemory | dict[str, Any]],
        *,
        idempotency_key: str | None = None,
        actor: str = "api",
        on_conflict: OnConflict = "error",
    ) -> WriteResult:
        """Store many memories with one embedding call and one commit; all or nothing on bad input."""
        if not memories:
            raise InvalidInputError("no memories given")
        if len(memories) > self.settings.max_batch_memories:
            raise InvalidInputError(
                f"{len(memories)} memories in one request; the limit is {self.settings.max_batch_memories}"
            )
        items: list[NewMemory] = []
        for position, raw in enumerate(memories):
            try:
                items.append(parse_input(NewMemory, raw))
            except InvalidInputError as exc:
                prefix = f"memories[{position}]: " if len(memories) > 1 else ""
                raise InvalidInputError(prefix + exc.message) from None
        records = [
            self.prepare(org_id, item, idempotency_key=idempotency_key, position=i) for i, item in enumerate(items)
        ]
        return self.write_records(org_id, records, actor=actor, on_conflict=on_conflict)

    def write_records(
        self, org_id: str, records: Sequence[MemoryRecord], *, actor: str, on_conflict: OnConflict = "error"
    ) -> WriteResult:
        """Write prepared records: dedupe, detect idempotency conflicts, embed the new, commit, audit."""
        result = self.write_batch(org_id, [records], actor=actor, on_conflict=on_conflict)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def write_batch(
        self,
        org_id: str,
        requests: Sequence[Sequence[MemoryRecord]],
        *,
        actor: str,
        on_conflict: OnConflict = "error",
    ) -> list[WriteResult | ConflictError]:
        """Write several requests' records with one embedding call and one commit.

        Each request succeeds or fails alone: a request whose idempotency key or id was used with
        another body gets a ConflictError and writes nothing; the others are committed together.
        """
        first: dict[str, MemoryRecord] = {}
        for records in requests:
            for r in records:
                first.setdefault(r.id, r)
        # The model embeds the texts while the store looks their ids up: both mostly wait on
        # other processes or native threads. Only a retried write's texts are embedded for nothing.
        embedding = self._embed_beside([r for r in first.values() if r.vector is None])
        # id -> origin hash of what is stored, or accepted earlier in this batch
        try:
            known = self.store.origin_hashes(org_id, sorted(first))
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
        created = self.store.insert_memories(org_id, new_records, known_absent=True) if new_records else set()
        # Creation events have deterministic ids: a retry after a crash between the two commits
        # completes the audit trail instead of duplicating it.
        events = []
        for index, records in accepted:
            result = results[index]
            assert isinstance(result, WriteResult)
            result.created.update(r.id for r in records if r.id in created and r.id in fresh)
            events += [
                self._event(r, "created", actor, after=audit_view(r), event_id=stable_id("event:created", r.id))
                for r in records if r.id in created or r.id in stored
            ]
        self.store.append_events(org_id, events)
        return results

    def _event(self, record: MemoryRecord, action: str, actor: str, **change: Any) -> MemoryEvent:
        return memory_event(record, action, actor, self.clock(), **change)

    # -- reading and changing one memory -------------------------------------------------------

    def get(self, scope: Scope, memory_id_: str, *, with_vector: bool = False) -> MemoryRecord:
        """One memory of the scope, with the recall hits logged since the last fold counted in; the
        id may be the stored id or the client id it was written with."""
        return self._with_pending_access(scope, [self._stored(scope, memory_id_, with_vector=with_vector)])[0]

    def _with_pending_access(self, scope: Scope, records: list[MemoryRecord]) -> list[MemoryRecord]:
        """Records as shown: stored access counts plus the hits still in the access log (the rows
        themselves are not changed, so writing a record back never counts its hits twice)."""
        pending = self.store.pending_access(scope, [r.id for r in records])
        for record in records:
            if record.id in pending:
                hits, last = pending[record.id]
                record.access_count += hits
                record.last_accessed_at = max(last, record.last_accessed_at or last)
        return records

    def _stored(self, scope: Scope, memory_id_: str, *, with_vector: bool = False) -> MemoryRecord:
        """One memory of the scope as stored (what changes to it start from)."""
        check_identifier("memory id", memory_id_)
        candidates = [memory_id_]
        if scope.user_id is not None:
            candidates.append(memory_id(scope.org_id, scope.user_id, client_id=memory_id_))
        found = self.store.get_memories(scope, candidates, with_vectors=with_vector)
        if not found:
            raise NotFoundError(f"memory {memory_id_} not found")
        return found[0]

    def list(self, scope: Scope, *, limit: int = 50, cursor: str | None = None, status: str | None = "active") -> Page:
        """The scope's memories, newest first."""
        if not 1 <= limit <= 1000:
            raise InvalidInputError("limit must be between 1 and 1000")
        if status not in (None, "active", "superseded", "expired"):
            raise InvalidInputError("status must be active, superseded, expired or all")
        page = self.store.list_memories(scope, limit=limit, cursor=cursor, status=status)
        self._with_pending_access(scope, page.records)
        return page

    def update(self, scope: Scope, memory_id_: str, patch: MemoryPatch | dict[str, Any], *, actor: str = "api") -> MemoryRecord:
        """Change a memory in place (content re-embedded) and record the change."""
        change = parse_input(MemoryPatch, patch)
        fields = change.model_dump(exclude_unset=True)
        if not fields:
            raise InvalidInputError("nothing to change: give content, memory_type, importance, metadata or expires_at")
        current = self._stored(scope, memory_id_, with_vector=True)
        updated = current.model_copy(deep=True)
        if "content" in fields and fields["content"] is not None:
            if len(fields["content"]) > self.settings.max_content_chars:
                raise InvalidInputError(f"content is longer than {self.settings.max_content_chars} characters")
            updated.content = self.redactor.redact_text(fields["content"])
            context, _ = index_parts(current.index_text, current.content)
            speaker = index_speaker(current.index_text, current.content)
            updated.index_text, updated.keywords = self._index(updated.content, context, speaker)
            self.embed_records([updated])
        for name in ("memory_type", "importance", "expires_at"):
            if name in fields and (fields[name] is not None or name == "expires_at"):
                setattr(updated, name, fields[name])
        if "metadata" in fields and fields["metadata"] is not None:
            updated.metadata = self._redact_metadata(fields["metadata"])
            if len(json.dumps(updated.metadata, default=str).encode()) > self.settings.max_metadata_bytes:
                raise InvalidInputError(f"metadata is larger than {self.settings.max_metadata_bytes} bytes")
        updated.updated_at = self.clock()
        if not self.store.replace_memories(scope, [updated]):
            raise NotFoundError(f"memory {memory_id_} not found")
        changed = [k for k in fields if getattr(current, k) != getattr(updated, k)]
        before = {k: _jsonable(getattr(current, k)) for k in changed}
        after = {k: _jsonable(getattr(updated, k)) for k in changed}
        self.store.append_events(scope.org_id, [self._event(updated, "updated", actor, before=before, after=after)])
        updated.vector = None
        return self._with_pending_access(scope, [updated])[0]

    def delete(self, scope: Scope, memory_id_: str, *, actor: str = "api") -> None:
        """Delete one memory and record that it was deleted (the event keeps no content)."""
        current = self._stored(scope, memory_id_)
        if not self.store.delete_memories(scope, [current.id]):
            raise NotFoundError(f"memory {memory_id_} not found")
        self.access.discard(scope.org_id, [current.id])
        self.store.append_events(
            scope.org_id, [self._event(current, "deleted", actor, before={"memory_type": current.memory_type})]
        )

    def history(self, scope: Scope, memory_id_: str) -> list[MemoryEvent]:
        """The audit events of a memory, oldest first; works after deletion too."""
        check_identifier("memory id", memory_id_)
        events = self.store.memory_events(scope, memory_id_)
        if not events and scope.user_id is not None:
            events = self.store.memory_events(scope, memory_id(scope.org_id, scope.user_id, client_id=memory_id_))
        if not events:
            raise NotFoundError(f"memory {memory_id_} not found")
        return events

    def erase_user(self, org_id: str, user_id: str, *, actor: str = "api") -> dict[str, int]:
        """Erase every trace of a user, unrecoverably; leave one content-free event saying so."""
        check_identifier("org_id", org_id)
        check_identifier("user_id", user_id)
        self.access.discard_user(org_id, user_id)
        counts = self.store.erase_user(org_id, user_id)
        self.access.discard_user(org_id, user_id)
        event = erasure_event(org_id, user_id, actor, self.clock(), counts)
        self.store.append_events(org_id, [event])
        return counts

    def merge(
        self,
        scope: Scope,
        canonical: MemoryRecord,
        others: Sequence[MemoryRecord],
        *,
        action: Literal["reinforced", "merged"] = "merged",
        actor: str = "system",
    ) -> MemoryRecord:
        """Fold `others` into `canonical` (new or existing) and supersede them, with an event for each.

        The merged memory is written before its sources are superseded, so a run killed in
        between leaves every fact findable, and a re-run finds the sources and finishes the job.
        `canonical` must carry its vector when it is new.
        """
        return self.merge_many(scope, [(canonical, others)], action=action, actor=actor)[0]

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
            self.store.insert_memories(scope.org_id, fresh)
        retired = [superseded(o, merged.id, now) for _, others, merged in plans for o in others]
        self.store.replace_memories(scope, retired)
        self.access.discard(scope.org_id, [r.id for r in retired])
        events: list[MemoryEvent] = []
        for canonical, others, merged in plans:
            before = None
            if canonical.id in stored:
                before = {"source_ids": list(canonical.source_ids), "importance": canonical.importance,
                          "access_count": canonical.access_count}
            after = {"source_ids": merged.source_ids, "importance": merged.importance,
                     "access_count": merged.access_count, "absorbed": [o.id for o in others]}
            events.append(self._event(merged, action, actor, before=before, after=after))
            events += [
                self._event(o, "superseded", actor, before={"status": "active"},
                            after={"status": "superseded", "superseded_by": merged.id})
                for o in others
            ]
        self.store.append_events(scope.org_id, events)
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
        self.store.append_events(scope.org_id, [self._event(
            old, "superseded", actor, before={"status": old.status},
            after={"status": "superseded", "superseded_by": new_id},
        )])

    # -- recall --------------------------------------------------------------------------------

    def recall(self, org_id: str, query: SearchQuery | dict[str, Any]) -> RecallResult:
        """Prefilter, search by vector and by keywords, fuse, cut at min_score, return top_k."""
        check_identifier("org_id", org_id)
        q: SearchQuery = parse_input(SearchQuery, query)
        if q.scope == "team":
            if q.team_id is None:
                raise InvalidInputError("scope 'team' needs a team_id")
            scope = Scope(org_id=org_id, team_id=q.team_id, agent_id=q.agent_id, session_id=q.session_id)
        else:
            scope = Scope(org_id=org_id, user_id=q.user_id, team_id=q.team_id, agent_id=q.agent_id, session_id=q.session_id)
        if q.since and q.until and q.since > q.until:
            raise InvalidInputError("since must not be after until")
        now = self.clock()
        recall_filter = RecallFilter(
            memory_types=tuple(q.memory_types) if q.memory_types else None, metadata=dict(q.filters or {}),
            since=q.since, until=q.until, now=now,
        )
        pool = max(self.settings.recall_candidates, q.top_k)
        keywords = keyword_text(q.query)
        degraded = False
        query_vector: np.ndarray | None = None
        query_oov = 0.0
        if q.mode != "keyword":
            try:
                embedder = self._require_embedder()
                query_vector = embedder.embed_query(q.query)
                query_oov = embedder.oov_shares([q.query])[0]
            except UnavailableError:
                if q.mode == "dense":
                    raise
                degraded = True
        # Vector top-N deep enough to cover every memory of a typical user, so that a keyword hit
        # almost always has its true similarity; flat search costs the same at any depth.
        found = self.store.search(
            scope, query_vector, keywords if q.mode != "dense" else "", recall_filter,
            dense_limit=max(pool, self.settings.recall_dense_depth), keyword_limit=pool,
        )
        floor = q.min_score if q.min_score is not None else self.settings.recall_min_score
        ranked = self._rank(found.pool, query_oov, now, q.mode if not degraded else "keyword", q.top_k, floor)
        records = {r.id: r for r in found.records([memory_id_ for memory_id_, _, _ in ranked])}
        hits = [
            _hit(records[memory_id_], score, parts) for memory_id_, score, parts in ranked if memory_id_ in records
        ]
        by_user: dict[str, list[str]] = {}
        for hit in hits:
            by_user.setdefault(hit.user_id, []).append(hit.id)
        for user_id, ids in by_user.items():
            self.access.record(org_id, user_id, ids)
        return RecallResult(memories=hits, degraded=degraded)

    def _rank(
        self, pool: Pool, query_oov: float, now: datetime, mode: str, top_k: int, min_score: float
    ) -> list[tuple[str, float, ScoreParts]]:
        """Fuse the pool's signals into (id, score, parts) of the best `top_k` at or over `min_score`.

        The whole pool is scored with array arithmetic; ties go to the smaller id.
        """
        weights = self.weights.for_mode(mode)  # type: ignore[arg-type]
        parts = scoring.ScoreArrays(
            semantic=scoring.semantic(pool.cosine, self.settings.recall_semantic_scale) if mode != "keyword"
            else np.zeros(len(pool.ids)),
            keyword=scoring.keyword_scores(pool.bm25, pool.idf_mass, self.settings.recall_keyword_scale),
            recency=scoring.recency(pool.created_at, as_utc(now).timestamp(), self.settings.recency_half_life_days),
            importance=pool.importance,
        )
        readable = scoring.readable_share(query_oov, pool.oov, self.settings.oov_full_share)
        scores = np.round(scoring.fuse(parts, weights, readable), 6).tolist()
        kept = range(len(scores)) if min_score <= 0 else [i for i, s in enumerate(scores) if s >= min_score]
        best = sorted(kept, key=lambda i: (-scores[i], pool.ids[i]))[:top_k]
        return [(pool.ids[i], scores[i], parts.parts(i)) for i in best]

    # -- messages ------------------------------------------------------------------------------

    def message_records(
        self,
        org_id: str,
        user_id: str,
        session_id: str,
        messages: Sequence[Message | dict[str, Any]],
        *,
        agent_id: str | None = None,
    ) -> list[MessageRecord]:
        """Validate and redact conversation turns into log rows with deterministic ids."""
        check_identifier("org_id", org_id)
        check_identifier("user_id", user_id)
        check_identifier("session_id", session_id)
        check_identifier("agent_id", agent_id, required=False)
        base = self.clock()
        out: list[MessageRecord] = []
        for position, raw in enumerate(messages):
            try:
                message: Message = parse_input(Message, raw)
            except InvalidInputError as exc:
                raise InvalidInputError(f"messages[{position}]: {exc.message}") from None
            if len(message.content) > self.settings.max_content_chars:
                raise InvalidInputError(
                    f"messages[{position}]: content is longer than {self.settings.max_content_chars} characters"
                )
            content = self.redactor.redact_text(message.content)
            # Turns sent together without timestamps keep their order through microsecond steps.
            created = message.created_at or base.replace(microsecond=(base.microsecond + position) % 1_000_000)
            message_id = message.message_id or stable_id(
                "message:natural", org_id, user_id, session_id, message.role, created.isoformat(), content
            )[:16]
            out.append(
                MessageRecord(
                    id=stable_id("message", org_id, user_id, session_id, message_id), org_id=org_id,
                    user_id=user_id, agent_id=agent_id, session_id=session_id, message_id=message_id,
                    role=message.role, name=message.name, content=content, created_at=created,
                    metadata=self._redact_metadata(message.metadata),
                )
            )
        return out

    def log_messages(self, org_id: str, records: Sequence[MessageRecord]) -> set[str]:
        """Append turns to the message log (insert-if-absent)."""
        return self.store.append_messages(org_id, records)

    def session_messages(self, scope: Scope, session_id: str, *, last: int = 20) -> list[MessageRecord]:
        """The recent window of a session, oldest first."""
        check_identifier("session_id", session_id)
        if not 1 <= last <= 1000:
            raise InvalidInputError("last must be between 1 and 1000")
        return self.store.session_messages(scope, session_id, last)

    def raw_memories(self, messages: Sequence[MessageRecord]) -> list[NewMemory]:
        """`raw` mode: each turn of one session (in order) becomes one episodic memory.

        The vector embeds the turn alone. Where two or more people talk (named speakers, a name
        that only says the role, such as "Assistant", not counting), it embeds the turn with its
        speaker ("Caroline: I painted a sunrise."): a question names the person it is about. In a
        chat between one person and an assistant the name would only tie every turn of the
        person to the word, so it is left out. The turns before it (`context_turns`, with their
        speakers) go to its keywords only, for turns of up to `context_max_terms` terms: an answer
        ("Yes, last week!") is found by the question it answers, while a content-free turn never
        borrows the vector of the fact it follows.
        """
        out: list[NewMemory] = []
        turns = self.settings.context_turns
        labelled = len({name for m in messages if (name := person_name(m))}) > 1
        for i, message in enumerate(messages):
            short = len(terms(message.content, keep_stopwords=True)) <= self.settings.context_max_terms
            previous = messages[max(0, i - turns) : i] if short else []
            out.append(
                NewMemory(
                    user_id=message.user_id, content=message.content, memory_type="episodic",
                    agent_id=message.agent_id, session_id=message.session_id,
                    importance=0.3 if message.role == "user" else 0.2, confidence=1.0,
                    created_at=message.created_at, source_ids=[message.message_id],
                    context="\n".join(_speaker_line(m) if labelled else m.content for m in previous) or None,
                    speaker=speaker_name(message.name) if labelled else None, metadata={"role": message.role},
                )
            )
        return out

    def logged_raw_memories(self, messages: Sequence[MessageRecord]) -> list[NewMemory]:
        """`raw_memories` of some turns of one session, read within the whole logged session.

        A conversation arrives a few turns at a time: its first turns take their context from the
        turns logged before them, and whether the session has several people is decided on all of
        it, as an import and `agent-memory reindex` decide it.
        """
        if not messages:
            return []
        first = messages[0]
        logged = self.store.session_messages(Scope.user(first.org_id, first.user_id), first.session_id, 1_000_000)
        session = {m.message_id: m for m in logged} | {m.message_id: m for m in messages}
        ordered = sorted(session.values(), key=lambda m: (m.created_at, m.message_id))
        wanted = {m.message_id for m in messages}
        return [memory for memory in self.raw_memories(ordered) if memory.source_ids[0] in wanted]

    def stats(self, org_id: str | None = None) -> dict[str, Any]:
        """What the store holds."""
        return self.store.stats(org_id)


class _NoStore:
    """The store of a row-building service: any storage call is a programming error, said clearly."""

    embedding_model = ""
    embedding_dim = 0

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise UnavailableError(f"this service only builds rows; it has no store to {name}")

        return refuse


def _hit(record: MemoryRecord, score: float, parts: ScoreParts) -> RecallHit:
    return RecallHit(
        id=record.id, content=record.content, memory_type=record.memory_type, score=score, scores=parts,
        created_at=record.created_at, source_ids=list(record.source_ids or []), metadata=record.metadata,
        user_id=record.user_id, team_id=record.team_id, agent_id=record.agent_id, session_id=record.session_id,
    )


# Speaker names that only say the speaker's role: no person to tell apart from another.
ROLE_NAMES = frozenset({"user", "assistant", "system", "bot", "ai", "用户", "助手"})


def person_name(message: MessageRecord) -> str | None:
    """The message's speaker as a person's name, or None where it has none or only its role."""
    name = speaker_name(message.name)
    if name is None or name.lower() in ROLE_NAMES or name.lower() == message.role:
        return None
    return name


def _speaker_line(message: MessageRecord) -> str:
    return f"{speaker_name(message.name) or message.role}: {message.content}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def group_sessions(records: Iterable[MessageRecord]) -> list[list[MessageRecord]]:
    """Messages grouped by (org, user, session), each group in conversation order."""
    groups: dict[tuple[str, str, str], list[MessageRecord]] = {}
    for record in records:
        groups.setdefault((record.org_id, record.user_id, record.session_id), []).append(record)
    return [sorted(g, key=lambda m: (m.created_at, m.message_id)) for g in groups.values()]
