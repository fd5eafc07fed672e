"""Re-deriving what search reads of every memory: index text, keyword terms, and the vector where
the text it embeds changed. A store written by an older version is brought to what this version
writes, in place, while the service keeps running.

Per user, the memories are read and rebuilt:

- a conversation turn stored by `raw` mode (one source message, a `role` in its metadata) is
  rebuilt from the message log as `raw` mode builds it now: its speaker, and the turns before it
  for its keywords. A turn whose message is no longer in the log keeps its text.
- every memory gets its keyword terms again from its index text (the tokenizer may have changed).

A store written before layout 2 (`storage.schema.INDEX_FORMAT_KEY`) has vectors of the whole
index text, context included: every memory whose vector text differs is re-embedded, and the
store is recorded as layout 2 once a run over all orgs skipped nothing. A store whose Chinese
memories were embedded the other way than the settings embed Chinese now (as written, or
through their gloss: `storage.schema.GLOSS_KEY`, `embedding_gloss_chinese`) has every Chinese
memory re-embedded, and records the settings' way once a run over all orgs skipped nothing.

Only rows whose index text, keywords or vector change are written, one merge per batch, each row
only if nothing changed it since it was read (same `updated_at`, status and access count): a
write, a patch or an access fold that lands meanwhile wins, and the row is counted as skipped for
the next run to pick up. Running it twice changes nothing the second time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

from agent_memory.errors import InvalidInputError
from agent_memory.index_text import index_parts, index_speaker, index_text_of
from agent_memory.models import MemoryRecord, MessageRecord, OrgScope, Scope
from agent_memory.settings import Settings
from agent_memory.text import is_chinese
from storage.connect import open_service
from storage.schema import INDEX_FORMAT, gloss_name

log = logging.getLogger(__name__)
# Memories written in one merge.
BATCH = 512


def _is_turn(record: MemoryRecord) -> bool:
    return (record.memory_type == "episodic" and len(record.source_ids) == 1 and record.session_id is not None
            and "role" in record.metadata)


def needs_vector(record: MemoryRecord, embedded: str, *, regloss: bool) -> bool:
    """Whether a rebuilt record's vector must be made again: the text its vector embedded
    (`embedded`) is not its vector text, or it is Chinese and Chinese is embedded another way now."""
    return record.vector_text != embedded or (regloss and is_chinese(record.vector_text))


class Change(NamedTuple):
    """A memory whose index text, keywords or vector differ from what this version writes."""

    record: MemoryRecord  # with the new index text and keywords
    reembed: bool  # its vector must be made again (`needs_vector`)


def rebuilt(service: Any, scope: Scope, records: Sequence[MemoryRecord], *, legacy: bool = False,
            regloss: bool = False) -> list[Change]:
    """The records of one user whose index text, keywords or vector differ from what this version
    writes, with the new index text and keywords, and whether each vector must be made again.

    `legacy`: the store's vectors embed the whole index text (layout 1), not `vector_text`.
    `regloss`: the store's Chinese vectors were embedded the other way than the service's embedder
    embeds Chinese (as written, or through the gloss).
    """
    turns: dict[str, dict[str, tuple[str | None, str | None]]] = {}
    for session_id in sorted({r.session_id for r in records if _is_turn(r) and r.session_id}):
        messages: list[MessageRecord] = service.store.session_messages(scope, session_id, 1_000_000)
        built = {}
        for message, memory in zip(messages, service.raw_memories(messages), strict=True):
            try:
                record = service.prepare(scope.org_id, memory)
            except InvalidInputError as exc:  # a turn over today's limits keeps the text it has
                log.warning("reindex: message %s of %s kept as it is: %s", message.message_id, scope.user_id, exc)
                continue
            context, _ = index_parts(record.index_text, record.content)
            built[message.message_id] = (context, index_speaker(record.index_text, record.content))
        turns[session_id] = built
    changed = []
    for record in records:
        context, _ = index_parts(record.index_text, record.content)
        speaker = index_speaker(record.index_text, record.content)
        if _is_turn(record) and record.session_id in turns and record.source_ids[0] in turns[record.session_id]:
            context, speaker = turns[record.session_id][record.source_ids[0]]
        index_text = index_text_of(record.content, context, speaker)
        keywords = service.keywords_of(index_text, record.content)
        new = record.model_copy(update={"index_text": index_text, "keywords": keywords})
        embedded = record.index_text if legacy else record.vector_text
        reembed = needs_vector(new, embedded, regloss=regloss)
        if reembed or index_text != record.index_text or keywords != record.keywords:
            changed.append(Change(new, reembed))
    return changed


def reindex(settings: Settings, *, org_id: str | None = None, dry_run: bool = False, service: Any = None) -> dict[str, Any]:
    """Rebuild every memory's index text and keywords (and vector where its text changed); counts.

    A store whose vectors embed the whole index text (written before layout 2) has each memory
    whose vector text differs from it re-embedded; a store whose Chinese memories were embedded
    another way than the settings embed Chinese has each of them re-embedded. Once a run over every
    org writes every row it meant to, the store records layout 2 and the settings' way; a dry run
    says what that would record (`would_record`; None for one org, which records nothing).
    """
    own = service is None
    service = service or open_service(settings, with_maintenance=True)
    maintenance = service.maintenance
    if maintenance is None:
        raise InvalidInputError("reindex walks every user: pass a service opened with its maintenance interface")
    if service.embedder is None:
        raise InvalidInputError("reindex embeds what changed: pass a service opened with its embedder")
    legacy = maintenance.index_format() < INDEX_FORMAT
    glossed = service.embedder.glosses_chinese
    regloss = maintenance.chinese_gloss() != glossed  # None (not recorded): embedded again whichever way
    counts = {"users": 0, "memories": 0, "changed": 0, "reembedded": 0, "written": 0, "skipped": 0}
    try:
        for org, user in maintenance.memory_owners(OrgScope(org_id) if org_id is not None else None):
            scope = Scope.user(org, user)
            records, vectors = service.store.user_memories(scope)
            counts["users"] += 1
            counts["memories"] += len(records)
            changed = rebuilt(service, scope, records, legacy=legacy, regloss=regloss)
            counts["changed"] += len(changed)
            if dry_run or not changed:
                continue
            old_vectors = {r.id: vector for r, vector in zip(records, vectors, strict=True)}
            for start in range(0, len(changed), BATCH):
                batch = changed[start : start + BATCH]
                for change in batch:
                    change.record.vector = old_vectors[change.record.id].tolist()
                moved = [change.record for change in batch if change.reembed]
                service.embed_records(moved)
                counts["reembedded"] += len(moved)
                written = service.store.reindex_memories(scope, [change.record for change in batch])
                counts["written"] += written
                counts["skipped"] += len(batch) - written
        if not dry_run and org_id is None and counts["skipped"] == 0:
            if legacy:
                maintenance.set_index_format(INDEX_FORMAT)
            if regloss:
                maintenance.set_chinese_gloss(glossed)
        layout = maintenance.index_format()
        gloss = gloss_name(maintenance.chinese_gloss())
    finally:
        if own:
            service.close()
    log.info("reindex: %s", counts)
    report = {"dry_run": dry_run, "index_format": layout, "chinese_gloss": gloss, **counts}
    if dry_run:
        # What the store would record after the same run for real, were no row skipped: only a run
        # over every org records (another org may hold old rows, or Chinese embedded the old way).
        report["would_record"] = None if org_id is not None else {
            "index_format": INDEX_FORMAT if legacy else layout, "chinese_gloss": gloss_name(glossed)}
    return report
