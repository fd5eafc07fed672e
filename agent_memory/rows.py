"""Rows from what callers send: memories validated, redacted, keyed and indexed; conversation turns
validated and redacted into log rows, and turned into raw memories. No store and no model here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from agent_memory.errors import InvalidInputError
from agent_memory.ids import fingerprint, memory_id, stable_id
from agent_memory.index_text import index_parts, index_text_of, speaker_name
from agent_memory.models import (
    MemoryRecord,
    Message,
    MessageRecord,
    NewMemory,
    check_identifier,
    parse_input,
    turn_order,
)
from agent_memory.redaction import Redactor
from agent_memory.settings import Settings
from agent_memory.text import field_text, only_asks, terms


class RowBuilder:
    """Validates, redacts and keys rows under one set of settings and one clock."""

    def __init__(self, settings: Settings, clock: Callable[[], datetime]) -> None:
        self.settings = settings
        self.clock = clock
        self.redactor = Redactor(enabled=settings.auth.redaction_enabled)

    def redact_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """Metadata with every string value redacted."""
        return {k: self.redactor.redact_text(v) if isinstance(v, str) else v for k, v in metadata.items()}

    def check_limits(self, item: NewMemory) -> None:
        """Refuse content and metadata over the configured sizes."""
        if len(item.content) > self.settings.limits.max_content_chars:
            raise InvalidInputError(
                f"content is {len(item.content)} characters; the limit is {self.settings.limits.max_content_chars}"
            )
        size = len(json.dumps(item.metadata, ensure_ascii=False, default=str).encode())
        if size > self.settings.limits.max_metadata_bytes:
            raise InvalidInputError(f"metadata is {size} bytes; the limit is {self.settings.limits.max_metadata_bytes}")

    def prepare(
        self, org_id: str, item: NewMemory, *, idempotency_key: str | None = None, position: int = 0
    ) -> MemoryRecord:
        """Validate, redact and key one memory (without its vector)."""
        check_identifier("org_id", org_id)
        self.check_limits(item)
        visibility = self.visibility_of(org_id, item)
        now = self.clock()
        content = self.redactor.redact_text(item.content)
        context = self.redactor.redact_text(item.context) if item.context else None
        metadata = self.redact_metadata(item.metadata)
        origin = {
            "content": content, "memory_type": item.memory_type, "agent_id": item.agent_id,
            "session_id": item.session_id, "team_id": item.team_id, "importance": item.importance,
            "confidence": item.confidence, "metadata": metadata, "source_ids": sorted(item.source_ids),
            "created_at": item.created_at.isoformat() if item.created_at else None,
            "expires_at": item.expires_at.isoformat() if item.expires_at else None, "id": item.id,
        }
        if visibility == "private":
            # Only where it is private: shared writes keep the hashes they always had (retries match).
            origin["visibility"] = visibility
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
        index_text, keywords = self.index(content, context, speaker)
        return MemoryRecord(
            id=key_id, org_id=org_id, team_id=item.team_id, user_id=item.user_id, agent_id=item.agent_id,
            session_id=item.session_id, content=content, index_text=index_text,
            keywords=keywords, memory_type=item.memory_type, importance=item.importance,
            confidence=item.confidence, status="active", valid_from=created, created_at=created,
            updated_at=now, access_count=0, expires_at=item.expires_at, source_ids=list(item.source_ids),
            metadata=metadata, origin_hash=fingerprint(origin), visibility=visibility,
        )

    def visibility_of(self, org_id: str, item: NewMemory) -> str:
        """Who reads the memory: as it says, else the org's default where it has an agent, else shared.
        A private memory is its agent's: InvalidInputError without one."""
        if item.visibility is not None:
            if item.visibility == "private" and item.agent_id is None:
                raise InvalidInputError("visibility: a private memory needs its agent_id (the agent it is private to)")
            return item.visibility
        return self.settings.auth.visibility_of(org_id) if item.agent_id is not None else "shared"

    def index(self, content: str, context: str | None, speaker: str | None = None) -> tuple[str, str]:
        """The text search sees (context, then "speaker: content") and its keyword terms."""
        index_text = index_text_of(content, context, speaker)
        return index_text, self.keywords_of(index_text, content)

    def keywords_of(self, index_text: str, content: str) -> str:
        """The keyword terms of an index text: the memory's own (with its speaker), then its context's.

        The own terms count `content_boost` times (field boosting by repetition), so a turn that
        only repeats its context's words ("Thanks!" after a fact) ranks below the turn that said them.
        """
        context, own = index_parts(index_text, content)
        parts = [field_text(own)] * (1 if only_asks(content) else self.settings.recall.content_boost)
        if context:
            parts.append(field_text(context))
        return " ".join(parts)

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
            if len(message.content) > self.settings.limits.max_content_chars:
                raise InvalidInputError(
                    f"messages[{position}]: content is longer than {self.settings.limits.max_content_chars} characters"
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
                    role=message.role, name=self.redactor.redact_text(message.name) if message.name else None,
                    content=content, created_at=created,
                    metadata=self.redact_metadata(message.metadata),
                )
            )
        return out

    def raw_memories(self, messages: Sequence[MessageRecord]) -> list[NewMemory]:
        """`raw` mode: each turn of one session (in order) becomes one episodic memory.

        The vector embeds the turn alone. Where two or more people talk (named speakers, a name
        that only says the role, such as "Assistant", not counting), it embeds the turn with its
        speaker ("Caroline: I painted a sunrise."): a question names the person it is about. In a
        chat between one person and an assistant the name would only tie every turn of the
        person to the word, so it is left out. The turns before it (`context_turns`, with their
        speakers) go to its keywords only, for turns of up to `context_max_terms` terms that follow
        another speaker's turn: an answer ("Yes, last week!") is found by the question it answers,
        while a content-free turn never borrows the vector of the fact it follows, and one
        person's statements in a row (a list of facts) each keep their own words.
        """
        out: list[NewMemory] = []
        turns = self.settings.recall.context_turns
        labelled = len({name for m in messages if (name := person_name(m))}) > 1
        for i, message in enumerate(messages):
            short = len(terms(message.content, keep_stopwords=True)) <= self.settings.recall.context_max_terms
            # Only a turn that follows another speaker's turn answers something: one person's
            # statements in a row are facts of their own, and each would carry the others' words.
            answers = i > 0 and speaker_of(messages[i - 1]) != speaker_of(message)
            previous = messages[max(0, i - turns) : i] if short and answers else []
            out.append(
                NewMemory(
                    user_id=message.user_id, content=message.content, memory_type="episodic",
                    agent_id=message.agent_id, session_id=message.session_id,
                    importance=0.3 if message.role == "user" else 0.2, confidence=1.0,
                    created_at=message.created_at, source_ids=[message.message_id],
                    context="\n".join(speaker_line(m) if labelled else m.content for m in previous) or None,
                    speaker=speaker_name(message.name) if labelled else None, metadata={"role": message.role},
                )
            )
        return out


# Speaker names that only say the speaker's role: no person to tell apart from another.
ROLE_NAMES = frozenset({"user", "assistant", "system", "bot", "ai", "用户", "助手"})


def person_name(message: MessageRecord) -> str | None:
    """The message's speaker as a person's name, or None where it has none or only its role."""
    name = speaker_name(message.name)
    if name is None or name.lower() in ROLE_NAMES or name.lower() == message.role:
        return None
    return name


def speaker_of(message: MessageRecord) -> str:
    """Who says a turn: the person's name, or the role where it names none."""
    return person_name(message) or message.role


def speaker_line(message: MessageRecord) -> str:
    """A turn as a line of its conversation: "speaker: content"."""
    return f"{speaker_name(message.name) or message.role}: {message.content}"


def group_sessions(records: Iterable[MessageRecord]) -> list[list[MessageRecord]]:
    """Messages grouped by (org, user, session), each group in conversation order."""
    groups: dict[tuple[str, str, str], list[MessageRecord]] = {}
    for record in records:
        groups.setdefault((record.org_id, record.user_id, record.session_id), []).append(record)
    return [sorted(g, key=lambda m: turn_order(m.created_at, m.message_id)) for g in groups.values()]
