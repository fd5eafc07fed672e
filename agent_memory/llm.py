"""The LLM extractor: any OpenAI-compatible chat endpoint (OpenAI, DeepSeek, Qwen, vLLM, Ollama).

The model is shown the new messages and the user's closest existing memories and answers with a
JSON object validated by pydantic: each memory's content (in the language it was said), type,
importance, confidence, and whether it restates or contradicts an existing memory. Requests go
through a process-wide rate limit, time out, and are retried with exponential backoff on 429,
5xx, timeouts and dropped connections. Output that does not validate gets one repair request;
after that the extraction fails with a typed error, is counted, and the messages stay in the log
for a later retry.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_memory.errors import InvalidInputError, UnavailableError
from agent_memory.models import MemoryRecord, MemoryType, MessageRecord, describe_validation_error
from agent_memory.rules import ProposedMemory
from agent_memory.settings import Settings

log = logging.getLogger(__name__)


class ExtractedMemory(BaseModel):
    """One memory as the model must return it."""

    model_config = ConfigDict(extra="ignore")

    content: str = Field(min_length=1, max_length=2000)
    memory_type: MemoryType
    importance: float = Field(ge=0, le=1)
    confidence: float = Field(ge=0, le=1)
    source_message_ids: list[str] = Field(default_factory=list)
    relation: Literal["new", "restates", "contradicts"] = "new"
    existing_id: str | None = None


class ExtractionOutput(BaseModel):
    """The whole answer: the memories worth keeping (possibly none)."""

    model_config = ConfigDict(extra="ignore")

    memories: list[ExtractedMemory]


SYSTEM_PROMPT = """You extract long-term memories about a user from a conversation with an AI agent.
Keep only what will still matter in later conversations: the user's stable facts and preferences
(semantic), rules or instructions the agent must follow (procedural), and notable events or plans
with their dates (episodic). Ignore greetings, thanks, small talk, weather, and one-off requests.
Write each memory as one short self-contained sentence about the user, in the same language the
user used (Chinese stays Chinese). Use only what the messages say.
You are also given the user's existing memories. If a memory restates one of them, set relation to
"restates" and existing_id to its id. If it contradicts one (the user changed their mind or the
fact changed), set relation to "contradicts" and existing_id to the id it replaces. Otherwise
relation is "new".
importance: 0..1, how much it matters later. confidence: 0..1, how sure you are the user meant it.
Answer with only a JSON object: {"memories": [{"content", "memory_type", "importance",
"confidence", "source_message_ids", "relation", "existing_id"}]}. No memories: {"memories": []}."""


class RequestPacer:
    """Paces the requests to an LLM endpoint: at most `per_minute` a minute, spaced evenly; shared by
    every thread of a process."""

    def __init__(
        self, per_minute: float, *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.interval = 60.0 / per_minute if per_minute > 0 else 0.0
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next = 0.0

    def acquire(self) -> float:
        """Wait for the next slot; return how long it waited."""
        if self.interval <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            slot = max(now, self._next)
            self._next = slot + self.interval
        wait = slot - now
        if wait > 0:
            self._sleep(wait)
        return wait


_PACERS: dict[tuple[str, float], RequestPacer] = {}
_PACERS_LOCK = threading.Lock()


def shared_pacer(base_url: str, per_minute: float) -> RequestPacer:
    """The one pacer of this process for an endpoint."""
    with _PACERS_LOCK:
        key = (base_url, per_minute)
        if key not in _PACERS:
            _PACERS[key] = RequestPacer(per_minute)
        return _PACERS[key]


# Failures of every client in this process, so that none is lost silently (jobs report them too).
FAILURES: Counter[str] = Counter()
_FENCE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$")


def parse_json(text: str) -> Any:
    """The JSON of a model's answer, code fences aside; raises ValueError with a readable reason."""
    cleaned = _FENCE.sub("", text or "").strip()
    try:
        return json.loads(cleaned)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not JSON ({exc.msg} at position {exc.pos})") from None


def parse_output(text: str) -> ExtractionOutput:
    """The model's answer as validated output; raises ValueError with a readable reason."""
    data = parse_json(text)
    if isinstance(data, list):
        data = {"memories": data}
    try:
        return ExtractionOutput.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"the JSON does not match the schema: {describe_validation_error(exc)}") from None


class LLMClient:
    """Chat completions with timeouts, a rate limit, retries with backoff and one repair attempt."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        requests_per_minute: float = 60.0,
        response_format: Literal["json_schema", "json_object"] = "json_schema",
        temperature: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import openai  # heavy (about 2 s): loaded where an LLM is used, not by every process

        # Our own retry loop (max_retries=0 below) so every retry and failure is counted here.
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0)
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.pacer = shared_pacer(base_url, requests_per_minute)
        self.response_format = response_format
        self.temperature = temperature
        self.sleep = sleep
        self.stats: Counter[str] = Counter()

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMClient:
        """The client the settings configure; refuses when no LLM is configured."""
        if not settings.llm.configured:
            raise InvalidInputError(
                "mode 'llm' needs an LLM: set AGENT_MEMORY_LLM_BASE_URL and AGENT_MEMORY_LLM_MODEL (and the key)"
            )
        return cls(
            base_url=str(settings.llm.base_url), model=str(settings.llm.model), api_key=settings.llm.api_key,
            timeout_s=settings.llm.timeout_s, max_retries=settings.llm.max_retries, backoff_s=settings.llm.backoff_s,
            backoff_max_s=settings.llm.backoff_max_s, requests_per_minute=settings.llm.requests_per_minute,
            response_format=settings.llm.response_format, temperature=settings.llm.temperature,
        )

    def _format(self, schema: type[BaseModel], name: str) -> dict[str, Any]:
        if self.response_format == "json_object":
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema.model_json_schema()}}

    def _backoff(self, attempt: int, exc: Exception) -> float:
        delay = self.backoff_s * 2**attempt
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after:
            try:
                delay = max(delay, float(retry_after))
            except ValueError:
                pass
        return min(delay, self.backoff_max_s)

    def _fail(self, kind: str, message: str) -> UnavailableError:
        self.stats[kind] += 1
        FAILURES[kind] += 1
        log.warning("LLM request failed (%s): %s", kind, message)
        return UnavailableError(message, code=kind)

    def chat(
        self,
        messages: list[dict[str, str]],
        *,
        schema: type[BaseModel] | None = ExtractionOutput,
        name: str = "memories",
        temperature: float | None = None,
    ) -> str:
        """One completion's text, retried on 429, 5xx, timeouts and connection errors.

        The answer is asked for in the JSON of `schema`, or as free text where `schema` is None;
        `temperature` overrides the client's for this request.
        """
        import openai

        shape: dict[str, Any] = {} if schema is None else {"response_format": self._format(schema, name)}
        for attempt in range(self.max_retries + 1):
            self.pacer.acquire()
            self.stats["requests"] += 1
            try:
                response = self.client.chat.completions.create(
                    model=self.model, messages=messages,  # type: ignore[arg-type]
                    temperature=self.temperature if temperature is None else temperature, **shape,
                )
            except (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError) as exc:
                if attempt == self.max_retries:
                    raise self._fail("llm_unavailable", f"the LLM did not answer after {attempt + 1} attempts: {exc}") from exc
                self.stats["retries"] += 1
                self.sleep(self._backoff(attempt, exc))
                continue
            except openai.APIStatusError as exc:
                raise self._fail("llm_rejected", f"the LLM refused the request ({exc.status_code}): {exc}") from exc
            choices = getattr(response, "choices", None) or []
            if not choices:
                return ""
            return choices[0].message.content or ""
        raise AssertionError("unreachable")

    def extract(self, messages: list[dict[str, str]]) -> ExtractionOutput:
        """Validated output; one repair request when the first answer does not validate."""
        text = self.chat(messages)
        try:
            return parse_output(text)
        except ValueError as first:
            self.stats["repairs"] += 1
            repair = [
                *messages,
                {"role": "assistant", "content": text[:4000]},
                {"role": "user", "content": f"Your answer was invalid: {first}. Reply with only the corrected JSON object."},
            ]
            text = self.chat(repair)
            try:
                return parse_output(text)
            except ValueError as second:
                raise self._fail("llm_malformed_output", f"the LLM answer stayed invalid after a repair: {second}") from None


class LLMExtractor:
    """Extraction by an OpenAI-compatible model, given the new messages and the user's closest memories."""

    name = "llm"

    def __init__(self, client: LLMClient) -> None:
        self.client = client

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMExtractor:
        """The extractor the settings configure."""
        return cls(LLMClient.from_settings(settings))

    def prompt(self, messages: Sequence[MessageRecord], existing: Sequence[MemoryRecord]) -> list[dict[str, str]]:
        """The chat messages sent to the model; existing memories get short ids (E1, E2...)."""
        payload = {
            "existing_memories": [
                {"id": f"E{i}", "content": m.content, "memory_type": m.memory_type} for i, m in enumerate(existing, 1)
            ],
            "messages": [
                {"id": m.message_id, "role": m.role, "content": m.content, "created_at": m.created_at.isoformat()}
                for m in messages
            ],
        }
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
        ]

    def extract(self, messages: Sequence[MessageRecord], existing: Sequence[MemoryRecord]) -> list[ProposedMemory]:
        """Candidates in the order the model gave them, tied to the messages they came from."""
        if not any(m.role == "user" for m in messages):
            return []
        output = self.client.extract(self.prompt(messages, existing))
        known = {f"E{i}": m.id for i, m in enumerate(existing, 1)}
        by_id = {m.message_id: m for m in messages}
        user_ids = [m.message_id for m in messages if m.role == "user"]
        out: list[ProposedMemory] = []
        for item in output.memories:
            sources = [s for s in item.source_message_ids if s in by_id] or user_ids
            anchor = max((by_id[s] for s in sources), key=lambda m: (m.created_at, m.message_id))
            target = known.get(item.existing_id or "") if item.relation != "new" else None
            out.append(ProposedMemory(
                content=item.content.strip(), memory_type=item.memory_type, importance=item.importance,
                confidence=item.confidence, source_ids=sources, message=anchor, extractor=self.name,
                restates=target if item.relation == "restates" else None,
                contradicts=target if item.relation == "contradicts" else None,
            ))
        return out
