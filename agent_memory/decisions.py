"""The decisions of extraction: each memory an extractor proposes is compared with the user's
closest active memories and reinforces one, supersedes what it contradicts, or is created, in
message order (`agent_memory.extraction` says when each applies). What a change of mind takes back
and what still holds of a memory it revises in part are decided here too.

Memory ids derive from the source message ids and the normalised content, so running extraction
again over the same messages adds nothing and records no new decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agent_memory.clauses import is_habit, replaces_habit
from agent_memory.holdings import (
    asserted_text,
    closeness,
    contradicts,
    held_text,
    meta,
    restated,
    retractable,
    same_readers,
    still_holds,
)
from agent_memory.ids import stable_id
from agent_memory.merge import kept_apart, merge_records, superseded
from agent_memory.models import MemoryRecord, NewMemory, Scope
from agent_memory.rules import ProposedMemory
from agent_memory.service import MemoryService
from agent_memory.store import RecallFilter
from agent_memory.text import comparable, keyword_text
from agent_memory.wording import topic_words


@dataclass
class ExtractionResult:
    """What one extraction did: counts and the ids of every decision."""

    mode: str
    messages: int = 0
    candidates: int = 0
    created: list[str] = field(default_factory=list)
    reinforced: list[str] = field(default_factory=list)
    superseded: list[dict[str, str]] = field(default_factory=list)
    unchanged: int = 0
    below_confidence: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view (a job's report)."""
        return asdict(self)

    def add(self, other: ExtractionResult) -> None:
        """Fold another result (another user or session) into this one."""
        self.messages += other.messages
        self.candidates += other.candidates
        self.created += other.created
        self.reinforced += other.reinforced
        self.superseded += other.superseded
        self.unchanged += other.unchanged
        self.below_confidence += other.below_confidence


def extracted_id(org_id: str, user_id: str, source_ids: Sequence[str], content: str) -> str:
    """The id of an extracted memory: from its source messages and its normalised content."""
    return stable_id("memory:extracted", org_id, user_id, *sorted(source_ids), comparable(content))


class Decider:
    """Decides and applies the candidates of one user, in order, with batched reads and writes."""

    def __init__(self, service: MemoryService, scope: Scope, actor: str) -> None:
        self.service = service
        self.settings = service.settings
        # The conversation's agent reads what it may (`scope.viewer_agent`); without one, the shared memories.
        self.scope = scope
        self.actor = actor
        self.now = service.clock()
        # Working state: what the store will hold once this run is applied.
        self.new: dict[str, MemoryRecord] = {}  # created in this run, in order
        self.changed: dict[str, MemoryRecord] = {}  # existing memories reinforced in this run
        self.originals: dict[str, MemoryRecord] = {}
        self.retired: dict[str, tuple[MemoryRecord, str]] = {}  # id -> (memory, superseded_by)
        self.result = ExtractionResult(mode="")

    # -- running ---------------------------------------------------------------------------------

    def run(self, candidates: Sequence[ProposedMemory], messages: int, mode: str) -> ExtractionResult:
        """Decide the candidates proposed from `messages` turns in order, then apply the decisions."""
        self.result = ExtractionResult(mode=mode, messages=messages, candidates=len(candidates))
        keep = []
        for candidate in candidates:
            if candidate.confidence < self.settings.extraction.min_confidence:
                self.result.below_confidence += 1
                continue
            keep.append(candidate)
        if not keep:
            return self.result
        records = [self._record(c) for c in keep]
        # One batched model call for every candidate (but those whose vector the extractor computed
        # of the same text); the same vectors are compared and stored.
        self._reuse_vectors(keep, records)
        self.service.embed_records([r for r in records if r.vector is None])
        stored = {r.id: r for r in self.service.store.get_memories(self.scope, [r.id for r in records], with_vectors=True)}
        for candidate, record in zip(keep, records, strict=True):
            self._decide(candidate, record, stored.get(record.id))
        self._apply()
        return self.result

    def _reuse_vectors(self, candidates: Sequence[ProposedMemory], records: Sequence[MemoryRecord]) -> None:
        known = [(r, c.vector) for c, r in zip(candidates, records, strict=True)
                 if c.vector is not None and r.vector_text == c.content]
        if not known or self.service.embedder is None:
            return
        shares = self.service.embedder.oov_shares([r.vector_text for r, _ in known])
        for (record, vector), share in zip(known, shares, strict=True):
            record.vector, record.oov = [float(x) for x in vector], float(share)

    def _record(self, candidate: ProposedMemory) -> MemoryRecord:
        message = candidate.message
        metadata: dict[str, Any] = {"extractor": candidate.extractor}
        if candidate.rule:
            metadata["rule"] = candidate.rule
        if candidate.slot:
            metadata["slot"] = candidate.slot
        if candidate.value:
            metadata["value"] = candidate.value
        if candidate.replaces:
            metadata["replaces"] = list(candidate.replaces)
        return self._prepared(NewMemory(
            user_id=self.scope.user_id or message.user_id, content=candidate.content, memory_type=candidate.memory_type,
            agent_id=message.agent_id, session_id=message.session_id, importance=candidate.importance,
            confidence=candidate.confidence, created_at=message.created_at, source_ids=list(candidate.source_ids),
            context=candidate.context, metadata=metadata,
        ))

    def _prepared(self, item: NewMemory) -> MemoryRecord:
        """The row of an extracted memory, with the id its sources and content give it."""
        record = self.service.prepare(self.scope.org_id, item)
        record.id = extracted_id(self.scope.org_id, record.user_id, item.source_ids, record.content)
        return record

    # -- looking up what is known ----------------------------------------------------------------

    def _filter(self, **metadata: Any) -> RecallFilter:
        return RecallFilter(metadata=metadata, now=self.now)

    def neighbours_of_text(self, text: str, embedded: MemoryRecord | None = None) -> list[MemoryRecord]:
        """The user's active memories closest to a text (what the LLM is shown); with the text's
        record already `embedded`, its vector is used rather than a second model call."""
        if not text.strip():
            return []
        k, full = self.settings.extraction.neighbours, self.settings.recall.oov_full_share
        ids = [c.id for c in self.service.store.keyword_search(self.scope, keyword_text(text), self._filter(), k)]
        if embedded is not None:
            vector = np.asarray(embedded.vector) if embedded.vector is not None and embedded.oov < full else None
        elif self.service.embedder is not None and self.service.embedder.oov_shares([text])[0] < full:
            vector = self.service.embedder.embed_batch([text])[0]
        else:
            vector = None
        if vector is not None:
            ids += [c.id for c in self.service.store.vector_search(self.scope, vector, self._filter(), k)]
        found = {r.id: r for r in self.service.store.get_memories(self.scope, list(dict.fromkeys(ids)))
                 if self.readable(r)}
        return [found[i] for i in dict.fromkeys(ids) if i in found][: 2 * k]

    def readable(self, record: MemoryRecord) -> bool:
        """Whether the conversation's agent reads the memory (without an agent: whether it is shared)."""
        viewer = self.scope.viewer_agent
        return record.visibility == "shared" or (viewer is not None and record.agent_id == viewer)

    def _neighbours(self, candidate: ProposedMemory, record: MemoryRecord) -> list[MemoryRecord]:
        """Active memories (stored, or made in this run) that this candidate may restate or contradict."""
        store = self.service.store
        k = self.settings.extraction.neighbours
        vector = np.asarray(record.vector, dtype=np.float32)
        ids: list[str] = [c.id for c in store.keyword_search(self.scope, record.keywords, self._filter(), k)]
        if record.oov < self.settings.recall.oov_full_share:
            ids += [c.id for c in store.vector_search(self.scope, vector, self._filter(), k)]
        if candidate.slot:
            # Exact within the user's rows: every memory of the same slot, whatever its language.
            ids += [c.id for c in store.vector_search(self.scope, vector, self._filter(slot=candidate.slot), 50)]
        for old in candidate.replaces:
            ids += [c.id for c in store.keyword_search(self.scope, keyword_text(old), self._filter(), k)]
        for named in (candidate.restates, candidate.contradicts):
            if named:
                ids.append(named)
        wanted = [i for i in dict.fromkeys(ids) if i not in self.new and i not in self.changed]
        found = store.get_memories(self.scope, wanted, with_vectors=True) if wanted else []
        pool = [r for r in found if r.status == "active"] + list(self.changed.values()) + list(self.new.values())
        return [r for r in pool if r.id not in self.retired and r.id != record.id and same_readers(r, record)]

    # -- deciding ----------------------------------------------------------------------------------

    def _retracted(self, candidate: ProposedMemory, record: MemoryRecord, pool: list[MemoryRecord]) -> MemoryRecord | None:
        """What a change of mind takes back when no memory states the old value it names (if any).

        One that names an old value no memory states as written takes back the latest statement
        that shares a content word with that value ("quit the coke" and "4 cans of Coke Zero a
        day"). Any other takes back the latest statement of this conversation that shares a content
        word with it ("Scratch that ... Spanish only when I say so" takes back "every answer in
        Spanish", not the sentence said after it). Else "scratch that", "changed my mind", "no
        longer", "算了" (strong) take back what the user said last in this conversation; "from now
        on", "now", "以后都" (weak) take back only what they are about: the user's closest earlier
        statement, by the overlap of their content words (at least `extraction_retract_similarity`)
        or, where the model reads both, cosine (at least `extraction_retract_cosine`). Events and
        other people's facts are never taken back.
        """
        earlier = [r for r in self._recent(record) if retractable(r)]
        session = [r for r in earlier if r.session_id == record.session_id]
        if candidate.replaces:
            # It names what it takes back: only the user's own statement about that, in any wording,
            # the latest of this run's and the stored ones, then of those it was compared with.
            named = frozenset().union(*(topic_words(old) for old in candidate.replaces))
            nearby = [p for p in pool if retractable(p) and p.created_at <= record.created_at]
            return next((o for o in [*earlier, *nearby] if named & topic_words(held_text(o))), None)
        about = topic_words(asserted_text(record))
        for other in session:
            if about & topic_words(asserted_text(other)):
                return other  # the latest statement of this conversation about the same thing
        if candidate.retracts == "strong" and session:
            return session[0]
        if replaces_habit(record.content):
            # "Nowadays I'm up at 5 to study instead" takes back "I usually do it late at night".
            habit = next((o for o in session if is_habit(o.content)), None)
            if habit is not None:
                return habit
        bars = self.settings.extraction
        best, best_score = None, 1.0  # relative to the bars: 1.0 is "at a bar"
        candidates = {r.id: r for r in [*earlier, *(p for p in pool if retractable(p))]}
        for other in candidates.values():
            if other.id == record.id or other.created_at > record.created_at:
                continue
            theirs = topic_words(asserted_text(other))
            shared = len(about & theirs)
            score = (2 * shared / (len(about) + len(theirs)) if shared else 0.0) / bars.retract_similarity
            full = self.settings.recall.oov_full_share
            if record.vector is not None and other.vector is not None and record.oov < full and other.oov < full:
                cosine = float(np.dot(np.asarray(record.vector), np.asarray(other.vector)))
                score = max(score, cosine / bars.retract_cosine)
            if score >= best_score:
                best, best_score = other, score
        return best

    def _recent(self, record: MemoryRecord) -> list[MemoryRecord]:
        """The user's active memories stated before this one, latest first: this run's, then stored."""
        # By when each was said: what still holds of a revised memory is as old as that memory.
        made = sorted((r for r in reversed(self.new.values()) if r.id != record.id and r.id not in self.retired),
                      key=lambda r: r.created_at, reverse=True)
        page = self.service.store.list_memories(self.scope, limit=10, cursor=None, status="active").records
        stored = [r for r in page if r.id not in self.retired and r.id not in self.new and r.created_at <= record.created_at]
        stored = [self.changed.get(r.id, r) for r in stored]
        recent = made + sorted(stored, key=lambda r: r.created_at, reverse=True)
        return [r for r in recent if same_readers(r, record)]

    def _decide(self, candidate: ProposedMemory, record: MemoryRecord, stored_self: MemoryRecord | None) -> None:
        pool = self._neighbours(candidate, record)
        contradicted = [o for o in pool if contradicts(candidate, o)]
        if candidate.retracts and not contradicted and stored_self is None:
            taken_back = self._retracted(candidate, record, pool)
            if taken_back is not None:
                contradicted.append(taken_back)
        if stored_self is not None:
            # Extracted before from the same messages: nothing to add; finish any supersede left
            # undone (none when it was itself taken back since).
            self.result.unchanged += 1
            holder = stored_self
            if stored_self.status != "active":
                return
        else:
            others = [o for o in pool if o not in contradicted]
            target = restated(candidate, record, others, self.settings)
            if target is not None:
                self._reinforce(target, record)
                holder = self.changed.get(target.id) or self.new.get(target.id) or target
            else:
                self.new[record.id] = record
                self.result.created.append(record.id)
                holder = record
        for old in contradicted:
            if old.id != holder.id and not kept_apart(old, holder):  # a restored memory stays restored
                self._supersede(old, holder)
                if candidate.replaces:
                    self._keep_rest(old, candidate.replaces)

    def _keep_rest(self, old: MemoryRecord, replaced: Sequence[str]) -> None:
        """What still holds of a memory revised in part is a memory of its own, from the same turns;
        one the user's memories already state is reinforced instead, and one stored by an earlier
        run of the same turns is left as it is."""
        rest = still_holds(old, replaced)
        if not rest:
            return
        metadata: dict[str, Any] = {"extractor": meta(old, "extractor") or "rules", "kept_from": old.id}
        if meta(old, "replaces"):
            metadata["replaces"] = list(meta(old, "replaces"))  # what it took back itself stays taken back
        record = self._prepared(NewMemory(
            user_id=old.user_id, content=rest, memory_type=old.memory_type, agent_id=old.agent_id,
            session_id=old.session_id, importance=old.importance, confidence=old.confidence, created_at=old.created_at,
            source_ids=list(old.source_ids), metadata=metadata, visibility=old.visibility,
        ))
        if record.id in self.new or self.service.store.get_memories(self.scope, [record.id]):
            return
        self.service.embed_records([record])
        pool = [r for r in [*self.neighbours_of_text(rest, record), *self.changed.values(), *self.new.values()]
                if r.status == "active" and r.id not in self.retired and r.id != old.id and same_readers(r, record)]
        closest = max(((closeness(record, r, self.settings), r) for r in pool), key=lambda c: c[0], default=None)
        if closest is not None and closest[0] >= 1.0:
            self._reinforce(closest[1], record)
            return
        self.new[record.id] = record
        self.result.created.append(record.id)

    def _reinforce(self, target: MemoryRecord, record: MemoryRecord) -> None:
        if set(record.source_ids) <= set(target.source_ids):
            self.result.unchanged += 1
            return
        merged = merge_records(target, [record], self.now)
        if target.id in self.new:
            self.new[target.id] = merged
        else:
            self.originals.setdefault(target.id, target)
            self.changed[target.id] = merged
        self.result.reinforced.append(target.id)

    def _supersede(self, old: MemoryRecord, by: MemoryRecord) -> None:
        self.retired[old.id] = (old, by.id)
        self.changed.pop(old.id, None)
        self.result.superseded.append({"id": old.id, "superseded_by": by.id})

    # -- applying ----------------------------------------------------------------------------------

    def _apply(self) -> None:
        """New memories first (one embed, one commit), then reinforcements, then supersessions.

        A run killed in between leaves every fact findable; running it again finds the new
        memories stored and completes what is missing.
        """
        service, scope = self.service, self.scope
        if self.new:
            service.write_records(scope.org_id, list(self.new.values()), actor=self.actor, on_conflict="skip")
        reinforced = [(self.originals[r.id], r) for r in self.changed.values() if r.id not in self.retired]
        service.writes.reinforce_many(scope, reinforced, actor=self.actor, at=self.now)
        retired = []
        for old, by_id in self.retired.values():
            current = self.new.get(old.id) or self.changed.get(old.id) or old
            row = superseded(current, by_id, self.now)
            # The fact stopped holding when the newer statement was made, not when it was processed.
            newer = self.new.get(by_id) or self.changed.get(by_id)
            if newer is not None and newer.valid_from <= self.now:
                row.valid_to = max(newer.valid_from, current.valid_from)
            retired.append((current, row))
        service.writes.retire_many(scope, retired, actor=self.actor, at=self.now)
