"""The memory service: every operation on memories, written against the store interface.

Notebooks, the CLI, Ray jobs, the Serve app and tests all use this one object; it needs no Ray.
It validates and hands each kind of work to the part that does it: rows (`rows.RowBuilder`),
new and retired rows with their audit events (`writes.Writes`), one memory read or changed in
place (`edits.Edits`), recall (`recall.Recaller`), a user's erasure (`erasure.Erasures`) and
export (`portability`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from agent_memory import listings
from agent_memory.access import AccessRecorder
from agent_memory.context import ContextBuilder
from agent_memory.edits import Edits
from agent_memory.embedding import Embedder
from agent_memory.erasure import Erasures
from agent_memory.errors import ConflictError, InvalidInputError, UnavailableError
from agent_memory.feedback import Feedback
from agent_memory.models import (
    ContextQuery,
    MemoryEvent,
    MemoryPatch,
    MemoryRecord,
    Message,
    MessageRecord,
    NewMemory,
    OrgScope,
    RecallResult,
    Scope,
    SearchQuery,
    check_identifier,
    parse_input,
    utcnow,
)
from agent_memory.portability import export_lines, parse_export
from agent_memory.portability import restore as restore_export
from agent_memory.recall import Recaller
from agent_memory.rows import RowBuilder, group_sessions, person_name
from agent_memory.settings import Settings
from agent_memory.store import MemoryStore, Page, StoreMaintenance
from agent_memory.timeline import timeline_page
from agent_memory.writes import OnConflict, WriteResult, Writes

__all__ = ["MemoryService", "WriteResult", "OnConflict", "group_sessions", "person_name"]


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
        maintenance: StoreMaintenance | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.clock = clock
        # Erasure's version purge and store-wide counts; only the Writer, jobs and the CLI get one.
        self.maintenance = maintenance
        self.access = AccessRecorder(
            lambda org_id, counts, at: store.record_access(OrgScope(org_id), counts, at),
            clock, settings.recall.access_flush_seconds, settings.recall.access_flush_rows,
        )
        if defer_access:
            self.access.start()
        self.rows = RowBuilder(settings, clock)
        self.redactor = self.rows.redactor
        self.writes = Writes(store, self._require_embedder, lambda: self.embedder is not None, self.access, clock)
        self.recaller = Recaller(store, self._require_embedder, settings, self.access, clock)
        self.edits = Edits(store, self.rows, self.writes.embed_records, self.access, settings, clock)
        self.erasures = Erasures(store, maintenance, self.access, settings, clock)

    @classmethod
    def row_builder(cls, settings: Settings, *, clock: Callable[[], datetime] = utcnow) -> MemoryService:
        """A service that only validates, redacts and keys rows (no store, no model): for batch workers."""
        return cls(_NoStore(), None, settings, clock=clock, defer_access=False)

    def close(self) -> None:
        """Flush deferred access counts and stop background threads."""
        self.access.close()
        self.writes.close()

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_embedder(self) -> Embedder:
        if self.embedder is None:
            raise UnavailableError("no embedding model is loaded")
        return self.embedder

    # -- rows ----------------------------------------------------------------------------------

    def prepare(
        self, org_id: str, item: NewMemory, *, idempotency_key: str | None = None, position: int = 0
    ) -> MemoryRecord:
        """Validate, redact and key one memory (without its vector)."""
        return self.rows.prepare(org_id, item, idempotency_key=idempotency_key, position=position)

    def keywords_of(self, index_text: str, content: str) -> str:
        """The keyword terms of an index text (see RowBuilder.keywords_of)."""
        return self.rows.keywords_of(index_text, content)

    def index(self, content: str, context: str | None, speaker: str | None = None) -> tuple[str, str]:
        """The text search sees (context, then "speaker: content") and its keyword terms."""
        return self.rows.index(content, context, speaker)

    def embed_records(self, records: Sequence[MemoryRecord]) -> None:
        """Fill vectors and vocabulary coverage of records in one batched model call."""
        self.writes.embed_records(records)

    def message_records(
        self, org_id: str, user_id: str, session_id: str, messages: Sequence[Message | dict[str, Any]], *,
        agent_id: str | None = None,
    ) -> list[MessageRecord]:
        """Validate and redact conversation turns into log rows with deterministic ids."""
        return self.rows.message_records(org_id, user_id, session_id, messages, agent_id=agent_id)

    def raw_memories(self, messages: Sequence[MessageRecord]) -> list[NewMemory]:
        """`raw` mode: each turn of one session becomes one episodic memory (see RowBuilder)."""
        return self.rows.raw_memories(messages)

    # -- writing -------------------------------------------------------------------------------

    def add(
        self, org_id: str, memory: NewMemory | dict[str, Any], *, idempotency_key: str | None = None,
        actor: str = "api",
    ) -> str:
        """Store one memory; return its id. A retry stores nothing twice."""
        return self.add_many(org_id, [memory], idempotency_key=idempotency_key, actor=actor).ids[0]

    def add_many(self, org_id: str, memories: Sequence[NewMemory | dict[str, Any]], *,
                 idempotency_key: str | None = None, actor: str = "api", on_conflict: OnConflict = "error",
                 ) -> WriteResult:
        """Store many memories with one embedding call and one commit; all or nothing on bad input."""
        if not memories:
            raise InvalidInputError("no memories given")
        if len(memories) > self.settings.limits.max_batch_memories:
            raise InvalidInputError(
                f"{len(memories)} memories in one request; the limit is {self.settings.limits.max_batch_memories}"
            )
        items: list[NewMemory] = []
        for position, raw in enumerate(memories):
            try:
                items.append(parse_input(NewMemory, raw))
            except InvalidInputError as exc:
                prefix = f"memories[{position}]: " if len(memories) > 1 else ""
                raise InvalidInputError(prefix + exc.message) from None
        records = [
            self.rows.prepare(org_id, item, idempotency_key=idempotency_key, position=i) for i, item in enumerate(items)
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

    def write_batch(self, org_id: str, requests: Sequence[Sequence[MemoryRecord]], *, actor: str | Sequence[str],
                    on_conflict: OnConflict = "error") -> list[WriteResult | ConflictError]:
        """Write several requests' records with one embedding call and one commit; each request
        succeeds or fails alone, with its own audit actor where `actor` gives one per request
        (see Writes.write_batch)."""
        return self.writes.write_batch(org_id, requests, actor=actor, on_conflict=on_conflict)

    # -- reading and changing one memory -------------------------------------------------------

    def get(self, scope: Scope, memory_id_: str, *, with_vector: bool = False) -> MemoryRecord:
        """One memory of the scope, with the recall hits logged since the last fold counted in; the
        id may be the stored id or the client id it was written with."""
        return self.edits.get(scope, memory_id_, with_vector=with_vector)

    def list(self, scope: Scope, *, limit: int = 50, cursor: str | None = None, status: str | None = "active",
             as_of: datetime | None = None) -> Page:
        """The scope's memories, newest first (with `as_of`: those it held then)."""
        return self.edits.list(scope, limit=limit, cursor=cursor, status=status, as_of=as_of)

    def update(self, scope: Scope, memory_id_: str, patch: MemoryPatch | dict[str, Any], *, actor: str = "api") -> MemoryRecord:
        """Change a memory in place (content re-embedded) and record the change."""
        return self.edits.update(scope, memory_id_, patch, actor=actor)

    def feedback(self, scope: Scope, memory_id_: str, vote: Feedback | dict[str, Any], *, actor: str = "api") -> MemoryRecord:
        """A vote on a memory: `useful` and `wrong` move its importance (fading back), `outdated`
        expires it; with a `feedback` event (agent_memory.feedback)."""
        return self.edits.feedback(scope, memory_id_, vote, actor=actor)

    def delete(self, scope: Scope, memory_id_: str, *, actor: str = "api") -> None:
        """Delete one memory and record that it was deleted (the event keeps no content)."""
        self.edits.delete(scope, memory_id_, actor=actor)

    def history(self, scope: Scope, memory_id_: str) -> list[MemoryEvent]:
        """The audit events of a memory, oldest first; works after deletion too."""
        return self.edits.history(scope, memory_id_)

    def timeline(self, scope: Scope, *, since: datetime | None = None, until: datetime | None = None,
                 limit: int = 500, cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the user's timeline, oldest first, and the next page's cursor (agent_memory.timeline)."""
        return timeline_page(self.store, scope, since=since, until=until, limit=limit, cursor=cursor)

    def erase_user(self, org_id: str, user_id: str, *, actor: str = "api", purge: bool = True) -> dict[str, Any]:
        """Erase a user, unrecoverably: open the erasure's job (its report is the receipt), delete
        the user's rows in every table (gone from every read at once), then, unless `purge` is
        False (the Writer purges beside its next commits), remove the rows' bytes from every
        file of the store and the import rejects (`agent_memory.erasure.Erasures`).
        Returns the receipt: {"job_id", "rows_deleted", ...}.

        The job row is written first, so an erasure cut short anywhere is finished at the next
        start. It names the user only in its report, not as its owner, and so outlives a later
        erasure of the same user. The audit event says who erased whom and how many rows went.
        """
        if self.maintenance is None:
            raise UnavailableError("erasure purges old versions: open the service with its maintenance interface")
        self.forget_summaries(org_id, user_id)
        job = self.erasures.start(org_id, user_id, actor)
        if purge:
            return self.erasures.finish(org_id, job.id)
        return {"job_id": job.id, **job.report}

    def export_user(self, scope: Scope) -> Iterator[dict[str, Any]]:
        """Everything of one user as the lines of an export file (agent_memory.portability): their
        memories in every state, their turns and their memories' events; restorable with
        `restore_user`."""
        memories, _ = self.store.user_memories(scope)
        memories = self.edits.with_pending_access(scope, memories)
        return export_lines(scope.user_id, memories, self.store.user_messages(scope), self.store.user_events(scope))

    def restore_user(self, org_id: str, lines: Iterable[str | bytes]) -> dict[str, Any]:
        """Load an export into `org_id`, into the same user, who must have nothing stored: the
        same ids, states, access counts, turns and events (vectors made again with this store's
        model). The whole file is read and checked before anything is written."""
        check_identifier("org_id", org_id)
        export = parse_export(lines, org_id)
        restored = restore_export(self.store, self.rows, self.writes.embed_records, org_id, export)
        return {"user_id": export.user_id, "restored": restored}

    def merge(self, scope: Scope, canonical: MemoryRecord, others: Sequence[MemoryRecord], *,
              action: Literal["reinforced", "merged"] = "merged", actor: str = "system") -> MemoryRecord:
        """Fold `others` into `canonical` (new or existing) and supersede them, with an event for each.

        The merged memory is written before its sources are superseded, so a run killed in
        between leaves every fact findable, and a re-run finds the sources and finishes the job.
        `canonical` must carry its vector when it is new.
        """
        return self.merge_many(scope, [(canonical, others)], action=action, actor=actor)[0]

    def merge_many(self, scope: Scope, groups: Sequence[tuple[MemoryRecord, Sequence[MemoryRecord]]], *,
                   action: Literal["reinforced", "merged"] = "merged", actor: str = "system") -> list[MemoryRecord]:
        """`merge` for many disjoint (canonical, others) groups of one scope in a few commits."""
        return self.writes.merge_many(scope, groups, action=action, actor=actor)

    def supersede(self, scope: Scope, old: MemoryRecord, new_id: str, *, actor: str = "system") -> None:
        """Retire `old` in favour of the memory `new_id` (a contradiction: the newer fact wins)."""
        self.writes.supersede(scope, old, new_id, actor=actor)

    def restore(self, scope: Scope, memory_id_: str, *, actor: str = "api") -> MemoryRecord:
        """Undo a wrong supersede or merge: the superseded memory is active again (409 otherwise)."""
        back = self.writes.restore(scope, self.edits.stored(scope, memory_id_), actor=actor)
        return self.edits.with_pending_access(scope, [back])[0]

    # -- recall --------------------------------------------------------------------------------

    def recall(self, org_id: str, query: SearchQuery | dict[str, Any], *,
               visible_teams: Collection[str] | None = None, viewer_agent: str | None = None) -> RecallResult:
        """Prefilter, search by vector and by keywords, fuse, cut at min_score, return top_k.
        `visible_teams`: a caller kept to these teams finds their memories and those of no team;
        `viewer_agent`: a caller acting as this agent finds the shared memories and its private ones."""
        return self.recaller.recall(org_id, query, visible_teams=visible_teams, viewer_agent=viewer_agent)

    def context(self, org_id: str, query: ContextQuery | dict[str, Any], *,
                visible_teams: Collection[str] | None = None, viewer_agent: str | None = None) -> dict[str, Any]:
        """The block an agent puts in its prompt: recalled memories, a summary of the session's older
        turns and its recent ones, within `max_tokens` (agent_memory.context). `visible_teams` and
        `viewer_agent` as for `recall`."""
        request: ContextQuery = parse_input(ContextQuery, query)
        builder = self.context_builder
        builder.budget(request)  # a budget over the limit is refused before any work
        scope = Scope.user(org_id, request.user_id)
        turns = (self.store.session_messages(scope, request.session_id, self.settings.context.session_turns)
                 if request.session_id else [])
        top_k = self.settings.context.top_k if request.top_k is None else request.top_k
        recalled = RecallResult(memories=[])
        if top_k:
            recalled = self.recall(org_id, SearchQuery(
                user_id=request.user_id, query=request.query, top_k=top_k, memory_types=request.memory_types
            ), visible_teams=visible_teams, viewer_agent=viewer_agent)
        return builder.build(org_id, request, turns, recalled.memories, degraded=recalled.degraded)

    @cached_property
    def context_builder(self) -> ContextBuilder:
        """Made on the first context request: it loads a tokenizer, and an LLM client where summaries use one."""
        mode = self.settings.context.summary
        llm = None
        if mode == "llm" or (mode == "auto" and self.settings.llm.configured):
            from agent_memory.llm import LLMClient

            client = LLMClient.from_settings(self.settings)
            llm = lambda messages: client.chat(messages, schema=None, name="summary")  # noqa: E731
        return ContextBuilder(self.settings.context, llm)

    def forget_summaries(self, org_id: str, user_id: str) -> None:
        """Drop the user's cached session summaries (on erasure)."""
        if "context_builder" in self.__dict__:
            self.context_builder.summarizer.forget_user(org_id, user_id)

    # -- messages ------------------------------------------------------------------------------

    def log_messages(self, org_id: str, records: Sequence[MessageRecord]) -> set[str]:
        """Append turns to the message log (insert-if-absent)."""
        return self.store.append_messages(OrgScope(org_id), records)

    def session_messages(self, scope: Scope, session_id: str, *, last: int = 20) -> list[MessageRecord]:
        """The recent window of a session, oldest first."""
        check_identifier("session_id", session_id)
        if not 1 <= last <= 1000:
            raise InvalidInputError("last must be between 1 and 1000")
        return self.store.session_messages(scope, session_id, last)

    def users(self, org_id: str, *, limit: int = 50, cursor: str | None = None,
              prefix: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the org's users by id, with their counts (agent_memory.listings)."""
        return listings.users(self.store, OrgScope(org_id), limit=limit, cursor=cursor, prefix=prefix)

    def jobs(self, org_id: str, *, kind: str | None = None, state: str | None = None, limit: int = 50,
             cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the org's jobs, newest first (agent_memory.listings)."""
        return listings.jobs(self.store, OrgScope(org_id), kind=kind, state=state, limit=limit, cursor=cursor)

    def stats(self, org_id: str | None = None) -> dict[str, Any]:
        """What the store holds: of one org, or of every org (through the maintenance interface)."""
        if org_id is not None:
            return self.store.stats(OrgScope(org_id))
        if self.maintenance is None:
            raise UnavailableError("counts across orgs need the maintenance interface")
        return self.maintenance.stats(None)


class _NoStore:
    """The store of a row-building service: any storage call is a programming error, said clearly."""

    embedding_model = ""
    embedding_dim = 0

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise UnavailableError(f"this service only builds rows; it has no store to {name}")

        return refuse
