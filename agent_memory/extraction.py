"""From conversation turns to memories, without destroying what is known.

`extract_and_store` is the one entry point of the conversation endpoint and of imports. Per mode:

- `raw`: every turn becomes one episodic memory (the service's `raw_memories`);
- `rules`: the offline patterns of `agent_memory.rules`, each candidate's confidence set by the
  learned decision (`agent_memory.decision`: the probability that it states a durable fact about the
  user, blended with its rule's confidence), so that `extraction_min_confidence` decides what is stored (`extraction_decision = rules`
  keeps the rules' own confidences);
- `llm`: the configured OpenAI-compatible model (`agent_memory.llm`).

Each proposed memory (a candidate) is then compared with the user's closest active memories and
one decision is taken, in message order:

- *reinforce*: it restates a memory (same slot and value, near-identical wording, or the LLM says
  so): the memory absorbs its source ids and importance through the one merge function
  (`agent_memory.merge.merge_records`), instead of a copy being added;
- *supersede*: it contradicts a memory (same slot with another value, a named old value such as
  "switched from VS Code", an opposite opinion, or the LLM says so): the new memory is stored and
  the old one gets `status = superseded`, `valid_to` and `superseded_by`; it leaves recall and
  stays in history;
- *create*: it is new.

Nothing is hard-deleted. Every decision is an audit event (created, reinforced, superseded).
Closeness never rests on cosine alone: the bundled model cannot read Chinese, so term overlap
(words and CJK bigrams) and the rules' slots carry it there, and cosine counts only where the
model reads both texts.

Memory ids derive from the source message ids and the normalised content, so running extraction
again over the same messages adds nothing and records no new decision. The decisions are made in
`agent_memory.decisions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from agent_memory.decision import DecidedExtractor
from agent_memory.decisions import Decider, ExtractionResult
from agent_memory.embedding.base import Embedder
from agent_memory.errors import InvalidInputError
from agent_memory.llm import LLMExtractor
from agent_memory.models import MemoryRecord, MessageRecord, NewMemory, Scope, turn_order
from agent_memory.rules import ProposedMemory, RulesExtractor
from agent_memory.service import MemoryService, group_sessions

__all__ = ["MODES", "ExtractionResult", "Extractor", "Mode", "build_extractor", "extract_and_store"]

Mode = Literal["raw", "rules", "llm"]
MODES: tuple[str, ...] = ("raw", "rules", "llm")


class Extractor(Protocol):
    """Anything that proposes memories from a conversation, given what the user already has."""

    name: str

    def extract(self, messages: Sequence[MessageRecord], existing: Sequence[MemoryRecord]) -> list[ProposedMemory]:
        """Candidates in message order."""
        ...


def build_extractor(settings: Any, mode: Mode, embedder: Embedder | None = None) -> Extractor | None:
    """The extractor of a mode (None for `raw`); `llm` needs an LLM in the settings. Offline, the
    learned decision reads each candidate through `embedder` (without one, its signals alone)."""
    if mode == "raw":
        return None
    if mode == "rules":
        if settings.extraction.decision == "rules":
            return RulesExtractor()
        return DecidedExtractor.bundled(embedder)
    if mode == "llm":
        return LLMExtractor.from_settings(settings)
    raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


def extract_and_store(
    service: MemoryService,
    org_id: str,
    messages: Sequence[MessageRecord],
    mode: Mode,
    *,
    actor: str,
    extractor: Extractor | None = None,
) -> ExtractionResult:
    """Turn logged (redacted) messages into memories per mode, applying decisions in message order.

    Messages may span sessions and users; each user's messages are handled in time order. The
    messages must already be in the log: they are the provenance of every memory made here.
    """
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    result = ExtractionResult(mode=mode)
    by_user: dict[str, list[MessageRecord]] = {}
    for message in messages:
        if message.org_id != org_id:
            raise InvalidInputError("every message must belong to the org being written")
        by_user.setdefault(message.user_id, []).append(message)
    if mode != "raw" and extractor is None:
        extractor = build_extractor(service.settings, mode, service.embedder)
    for user_id, user_messages in by_user.items():
        ordered = sorted(user_messages, key=lambda m: (m.created_at, m.session_id, turn_order(m.created_at, m.message_id)))
        if mode == "raw":
            result.add(_store_raw(service, org_id, ordered, actor))
        else:
            assert extractor is not None
            # The conversation's agent reads (and its statements change) what it may read, no more.
            agents = {m.agent_id for m in ordered}
            viewer = agents.pop() if len(agents) == 1 else None
            result.add(_extract_user(service, Scope.user(org_id, user_id, viewer), actor, extractor, ordered, mode))
    return result


def logged_raw_memories(service: MemoryService, messages: Sequence[MessageRecord]) -> list[NewMemory]:
    """The raw memories of some turns of one session, read within the whole logged session.

    A conversation arrives a few turns at a time: its first turns take their context from the
    turns logged before them, and whether the session has several people is decided on all of
    it, as an import and `agent-memory reindex` decide it.
    """
    if not messages:
        return []
    first = messages[0]
    logged = service.store.session_messages(Scope.user(first.org_id, first.user_id), first.session_id, 1_000_000)
    session = {m.message_id: m for m in logged} | {m.message_id: m for m in messages}
    ordered = sorted(session.values(), key=lambda m: turn_order(m.created_at, m.message_id))
    wanted = {m.message_id for m in messages}
    return [memory for memory in service.raw_memories(ordered) if memory.source_ids[0] in wanted]


def _store_raw(service: MemoryService, org_id: str, messages: list[MessageRecord], actor: str) -> ExtractionResult:
    result = ExtractionResult(mode="raw", messages=len(messages))
    records = [service.prepare(org_id, m) for session in group_sessions(messages)
               for m in logged_raw_memories(service, session)]
    result.candidates = len(records)
    written = service.write_records(org_id, records, actor=actor, on_conflict="skip")
    result.created = [i for i in written.ids if i in written.created]
    result.unchanged = len(records) - len(result.created)
    return result


def _extract_user(service: MemoryService, scope: Scope, actor: str, extractor: Extractor,
                  messages: list[MessageRecord], mode: str) -> ExtractionResult:
    """One user's messages, in time order: proposed memories (the extractor is shown the user's
    memories closest to what they said), then decided and applied."""
    decider = Decider(service, scope, actor)
    existing = decider.neighbours_of_text(" ".join(m.content for m in messages if m.role == "user"))
    return decider.run(extractor.extract(messages, existing), len(messages), mode)
