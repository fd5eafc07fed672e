"""Re-deriving what search reads of every memory: index text, keyword terms, and the vector where
the text it embeds changed. A store written by an older version is brought to what this version
writes, in place, while the service keeps running.

Per user, the memories are read and rebuilt:

- a conversation turn stored by `raw` mode (one source message, a `role` in its metadata) is
  rebuilt from the message log as `raw` mode builds it now: its speaker, and the turns before it
  for its keywords. A turn whose message is no longer in the log keeps its text.
- every memory gets its keyword terms again from its index text (the tokenizer may have changed).

Only rows whose index text, keywords or vector change are written, one merge per batch, each row
only if nothing changed it since it was read (same `updated_at`, status and access count): a
write, a patch or an access fold that lands meanwhile wins, and the row is counted as skipped for
the next run to pick up. Running it twice changes nothing the second time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from agent_memory.models import MemoryRecord, MessageRecord, Scope, index_parts, index_text_of
from agent_memory.settings import Settings

log = logging.getLogger(__name__)
# Memories written in one merge.
BATCH = 512


def _is_turn(record: MemoryRecord) -> bool:
    return (record.memory_type == "episodic" and len(record.source_ids) == 1 and record.session_id is not None
            and "role" in record.metadata)


def rebuilt(service: Any, scope: Scope, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """The records of one user whose index text or keywords differ from what this version writes."""
    turns: dict[str, dict[str, tuple[str, str]]] = {}
    for session_id in sorted({r.session_id for r in records if _is_turn(r) and r.session_id}):
        messages: list[MessageRecord] = service.store.session_messages(scope, session_id, 1_000_000)
        built = {}
        for message, memory in zip(messages, service.raw_memories(messages), strict=True):
            record = service.prepare(scope.org_id, memory)
            context, own = index_parts(record.index_text, record.content)
            built[message.message_id] = (context or "", own[: len(own) - len(record.content)])
        turns[session_id] = built
    changed = []
    for record in records:
        context, own = index_parts(record.index_text, record.content)
        speaker_prefix = own[: len(own) - len(record.content)]
        if _is_turn(record) and record.session_id in turns and record.source_ids[0] in turns[record.session_id]:
            context, speaker_prefix = turns[record.session_id][record.source_ids[0]]
        index_text = index_text_of(record.content, context or None, speaker_prefix.removesuffix(": ") or None)
        keywords = service.keywords_of(index_text, record.content)
        if index_text != record.index_text or keywords != record.keywords:
            changed.append(record.model_copy(update={"index_text": index_text, "keywords": keywords}))
    return changed


def reindex(settings: Settings, *, org_id: str | None = None, dry_run: bool = False, service: Any = None) -> dict[str, Any]:
    """Rebuild every memory's index text and keywords (and vector where its text changed); counts."""
    from agent_memory.cli import build_service

    own = service is None
    service = service or build_service(settings)
    counts = {"users": 0, "memories": 0, "changed": 0, "reembedded": 0, "written": 0, "skipped": 0}
    try:
        for org, user in service.store.memory_owners(org_id):
            scope = Scope.user(org, user)
            records, vectors = service.store.user_memories(scope)
            counts["users"] += 1
            counts["memories"] += len(records)
            changed = rebuilt(service, scope, records)
            counts["changed"] += len(changed)
            if dry_run or not changed:
                continue
            before = {r.id: (r.vector_text, vector) for r, vector in zip(records, vectors, strict=True)}
            for start in range(0, len(changed), BATCH):
                batch = changed[start : start + BATCH]
                moved = [r for r in batch if r.vector_text != before[r.id][0]]
                for record in batch:
                    record.vector = before[record.id][1].tolist()
                service.embed_records(moved)
                counts["reembedded"] += len(moved)
                written = service.store.reindex_memories(scope, batch)
                counts["written"] += written
                counts["skipped"] += len(batch) - written
    finally:
        if own:
            service.close()
    log.info("reindex: %s", counts)
    return {"dry_run": dry_run, **counts}
