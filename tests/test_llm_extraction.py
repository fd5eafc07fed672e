"""The LLM extractor through the real `openai` client, against a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_memory.errors import UnavailableError
from agent_memory.extraction import extract_and_store
from agent_memory.llm import LLMClient, LLMExtractor, RequestPacer
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from loopback.llm_server import Reply, ScriptedLLM, memories_reply, scripted_llm
from storage.connect import maintenance_of
from tests.conftest import Clock

U = Scope.user("acme", "u1")
# The client's timeout: ample for a scripted answer on a loaded machine; a late one takes twice that.
TIMEOUT_S = 3.0
LATE_S = 2 * TIMEOUT_S


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with scripted_llm() as server:
        yield server


@pytest.fixture
def llm_service(make_service: Any, clock: Clock, llm: ScriptedLLM) -> MemoryService:
    return make_service(
        clock=clock, llm_base_url=llm.base_url, llm_model="scripted", llm_api_key="sk-test", llm_timeout_s=TIMEOUT_S,
        llm_max_retries=2, llm_backoff_s=0.01, llm_requests_per_minute=0,
    )


def _log(service: MemoryService, turns: list[str], session: str = "s1") -> list[Any]:
    messages = [{"role": "user", "content": t, "message_id": f"{session}:m{i}"} for i, t in enumerate(turns, 1)]
    records = service.message_records("acme", "u1", session, messages)
    service.log_messages("acme", records)
    return records


def _memory(content: str, **extra: Any) -> dict[str, Any]:
    return {"content": content, "memory_type": "semantic", "importance": 0.6, "confidence": 0.9, **extra}


def test_good_json_is_stored_in_the_language_said(llm_service: MemoryService, llm: ScriptedLLM) -> None:
    llm.script(memories_reply(
        _memory("用户喜欢喝乌龙茶", source_message_ids=["s1:m1"]),
        _memory("Never book meetings on Fridays", memory_type="procedural", importance=0.9, source_message_ids=["s1:m2"]),
        _memory("maybe likes jazz", confidence=0.3),
    ))
    records = _log(llm_service, ["我最喜欢喝乌龙茶", "Please never book meetings on Fridays"])
    result = extract_and_store(llm_service, "acme", records, "llm", actor="test")
    assert len(result.created) == 2 and result.below_confidence == 1
    stored = {m.content: m for m in llm_service.list(U).records}
    assert set(stored) == {"用户喜欢喝乌龙茶", "Never book meetings on Fridays"}
    assert stored["用户喜欢喝乌龙茶"].source_ids == ["s1:m1"]
    assert stored["Never book meetings on Fridays"].memory_type == "procedural"
    request = llm.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["authorization"] == "Bearer sk-test"
    assert request["body"]["response_format"]["type"] == "json_schema"
    assert [m["content"] for m in llm.user_payload()["messages"]] == ["我最喜欢喝乌龙茶", "Please never book meetings on Fridays"]


def test_malformed_json_gets_one_repair(llm_service: MemoryService, llm: ScriptedLLM) -> None:
    llm.script(Reply("Sure! Here are the memories: {memories: [oops"), memories_reply(_memory("The user lives in Lyon")))
    result = extract_and_store(llm_service, "acme", _log(llm_service, ["I live in Lyon"]), "llm", actor="test")
    assert len(result.created) == 1 and len(llm.requests) == 2
    repair = llm.requests[1]["body"]["messages"]
    assert repair[-1]["role"] == "user" and "invalid" in repair[-1]["content"]


def test_output_still_malformed_after_repair_fails_counted_and_keeps_messages(
    llm_service: MemoryService, llm: ScriptedLLM
) -> None:
    llm.script(Reply("not json"), Reply('{"memories": [{"content": "x", "memory_type": "dream"}]}'))
    extractor = LLMExtractor.from_settings(llm_service.settings)
    records = _log(llm_service, ["I live in Lyon"])
    with pytest.raises(UnavailableError) as info:
        extract_and_store(llm_service, "acme", records, "llm", actor="test", extractor=extractor)
    assert info.value.code == "llm_malformed_output"
    assert extractor.client.stats["llm_malformed_output"] == 1 and extractor.client.stats["repairs"] == 1
    assert maintenance_of(llm_service.store).table("memories").count_rows() == 0
    assert maintenance_of(llm_service.store).table("messages").count_rows() == 1  # still there for a later retry


def test_429_then_success_is_retried(llm_service: MemoryService, llm: ScriptedLLM) -> None:
    llm.script(Reply("slow down", status=429, headers={"retry-after": "0"}), Reply("busy", status=503),
               memories_reply(_memory("The user lives in Lyon")))
    extractor = LLMExtractor.from_settings(llm_service.settings)
    result = extract_and_store(llm_service, "acme", _log(llm_service, ["I live in Lyon"]), "llm", actor="test",
                               extractor=extractor)
    assert len(result.created) == 1 and len(llm.requests) == 3
    assert extractor.client.stats["retries"] == 2


def test_timeouts_are_retried_then_fail_typed(llm_service: MemoryService, llm: ScriptedLLM) -> None:
    llm.script(memories_reply(_memory("late"), delay_s=LATE_S), memories_reply(_memory("The user lives in Lyon")))
    result = extract_and_store(llm_service, "acme", _log(llm_service, ["I live in Lyon"]), "llm", actor="test")
    assert [m.content for m in llm_service.list(U).records] == ["The user lives in Lyon"]
    assert len(result.created) == 1
    llm.script(*[memories_reply(_memory("late"), delay_s=LATE_S) for _ in range(3)])
    with pytest.raises(UnavailableError) as info:
        extract_and_store(llm_service, "acme", _log(llm_service, ["I moved to Paris"], "s2"), "llm", actor="test")
    assert info.value.code == "llm_unavailable"


def test_contradiction_named_by_the_model_supersedes(llm_service: MemoryService, llm: ScriptedLLM, clock: Clock) -> None:
    llm.script(memories_reply(_memory("The user's favourite editor is VS Code")))
    first = extract_and_store(llm_service, "acme", _log(llm_service, ["I use VS Code for everything"]), "llm", actor="test")
    clock.advance(days=10)
    # The model is shown the existing memory as E1 and says the new statement contradicts it.
    llm.script(memories_reply(_memory("The user now uses Neovim instead of VS Code", relation="contradicts", existing_id="E1")))
    second = extract_and_store(llm_service, "acme", _log(llm_service, ["I moved to Neovim"], "s2"), "llm", actor="test")
    shown = llm.user_payload()["existing_memories"]
    assert shown == [{"id": "E1", "content": "The user's favourite editor is VS Code", "memory_type": "semantic"}]
    assert second.superseded == [{"id": first.created[0], "superseded_by": second.created[0]}]
    assert [m.content for m in llm_service.list(U).records] == ["The user now uses Neovim instead of VS Code"]
    assert [e.action for e in llm_service.history(U, first.created[0])] == ["created", "superseded"]
    # A restatement named by the model reinforces instead of adding a copy.
    llm.script(memories_reply(_memory("Uses Neovim", relation="restates", existing_id="E1", importance=0.9)))
    third = extract_and_store(llm_service, "acme", _log(llm_service, ["Neovim all day"], "s3"), "llm", actor="test")
    assert third.created == [] and third.reinforced == second.created
    assert llm_service.get(U, second.created[0]).importance == pytest.approx(0.9)


def test_the_request_pacer_spaces_requests() -> None:
    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    pacer = RequestPacer(120, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        pacer.acquire()
    assert waits == [pytest.approx(0.5), pytest.approx(0.5)]


def test_client_refuses_4xx_without_retrying(llm: ScriptedLLM) -> None:
    llm.script(Reply("bad key", status=401), memories_reply())
    client = LLMClient(base_url=llm.base_url, model="m", max_retries=3, backoff_s=0, requests_per_minute=0)
    with pytest.raises(UnavailableError) as info:
        client.extract([{"role": "user", "content": "hi"}])
    assert info.value.code == "llm_rejected" and len(llm.requests) == 1
