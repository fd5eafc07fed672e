"""The context block (`MemoryService.context`, behind `POST /v1/context`): the budget holds whatever
the session and the budget, the summary covers exactly the turns the window dropped, English and
Chinese, offline and by an LLM (the loopback OpenAI-compatible server), on a real store and model."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from tokenizers import Tokenizer

from agent_memory.errors import InvalidInputError
from agent_memory.models import MessageRecord
from agent_memory.service import MemoryService
from loopback.llm_server import Reply, scripted_llm

ORG = "acme"
START = datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc)

EN_TURNS = [
    ("user", "My sister Ana lives in Porto and I visit her every spring."),
    ("assistant", "Lovely, Porto in spring is a good time to go."),
    ("user", "Thanks!"),
    ("assistant", "Anything else I can help with?"),
] + [
    (role, f"Turn {i}: we compare hotels near the river in Lisbon, this one costs {100 + i} euros a night."
     if role == "user" else f"Noted: option {i} has breakfast and a view of the bridge.")
    for i in range(4, 44) for role in ("user" if i % 2 == 0 else "assistant",)
]
ZH_TURNS = [
    ("user", "我妹妹住在成都，我每年春节都去看她。"),
    ("assistant", "好的，成都的春节很热闹。"),
    ("user", "好的"),
] + [
    (role, f"第{i}轮：我们在比较杭州西湖边的酒店，这家每晚{300 + i}元，含早餐。"
     if role == "user" else f"记下了：第{i}个选项可以看到湖景，离地铁站很近。")
    for i in range(3, 43) for role in ("user" if i % 2 == 0 else "assistant",)
]


def log_session(service: MemoryService, user_id: str, session_id: str, turns: list[tuple[str, str]],
                first: int = 0) -> list[MessageRecord]:
    records = [
        MessageRecord(id=f"{session_id}-{first + i}", org_id=ORG, user_id=user_id, session_id=session_id,
                      message_id=f"t{first + i:04d}", role=role, content=content,  # type: ignore[arg-type]
                      created_at=START + timedelta(minutes=first + i))
        for i, (role, content) in enumerate(turns)
    ]
    service.log_messages(ORG, records)
    return records


@pytest.fixture(scope="module")
def tokenizer(bundled_tokenizer: Tokenizer) -> Tokenizer:
    return bundled_tokenizer


def tokens(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("turns", [EN_TURNS, ZH_TURNS], ids=["en", "zh"])
def test_the_budget_is_never_exceeded(service: MemoryService, tokenizer: Tokenizer, turns: list[tuple[str, str]]) -> None:
    log_session(service, "u1", "s1", turns)
    service.add_many(ORG, [
        {"user_id": "u1", "content": "The user's sister Ana lives in Porto."},
        {"user_id": "u1", "content": "用户的妹妹住在成都。", "memory_type": "semantic"},
        {"user_id": "u1", "content": "Book hotels with breakfast included.", "memory_type": "procedural"},
    ])
    query = turns[-2][1]
    for budget in (32, 40, 64, 100, 160, 256, 400, 700, 1000, 2000, 8000):
        block = service.context(ORG, {"user_id": "u1", "session_id": "s1", "query": query, "max_tokens": budget})
        counted = tokens(tokenizer, block["text"])
        assert counted == block["tokens"] <= budget, (budget, counted, block["tokens"])
        assert block["max_tokens"] == budget
        recent = block["parts"]["recent"]
        # The window is the newest turns, whole and in order, ending with the last.
        if recent:
            assert [t["message_id"] for t in recent] == [f"t{i:04d}" for i in range(len(turns) - len(recent), len(turns))]
            assert all(t["content"] in block["text"] for t in recent)
    # With room for all of it, every turn is in the window and there is nothing to summarise.
    block = service.context(ORG, {"user_id": "u1", "session_id": "s1", "query": query, "max_tokens": 8000})
    assert len(block["parts"]["recent"]) == len(turns) and block["parts"]["summary"] is None


def test_the_summary_covers_the_turns_the_window_dropped(service: MemoryService) -> None:
    log_session(service, "u1", "s1", EN_TURNS)
    block = service.context(ORG, {"user_id": "u1", "session_id": "s1", "query": "Where does my sister live?",
                                  "max_tokens": 600, "top_k": 0})
    recent, summary = block["parts"]["recent"], block["parts"]["summary"]
    assert block["language"] == "en" and block["parts"]["memories"] == []
    first_recent = int(recent[0]["message_id"][1:])
    assert 0 < first_recent < len(EN_TURNS)
    assert summary["turns"] == first_recent
    assert (summary["first_message_id"], summary["last_message_id"]) == ("t0000", f"t{first_recent - 1:04d}")
    assert summary["source"] == "extractive"
    # The fact said first, long out of the window, is in the summary; the content-free turns are not.
    assert "Ana lives in Porto" in summary["text"]
    assert "Thanks!" not in summary["text"] and "Anything else" not in summary["text"]
    assert block["text"].index("Earlier in this conversation:") < block["text"].index("Recent turns of this conversation:")


def test_a_chinese_session_gets_a_chinese_block(service: MemoryService, tokenizer: Tokenizer) -> None:
    log_session(service, "u2", "s2", ZH_TURNS)
    service.add(ORG, {"user_id": "u2", "content": "用户每年春节去成都看妹妹。", "memory_type": "episodic"})
    block = service.context(ORG, {"user_id": "u2", "session_id": "s2", "query": "我妹妹住在哪里？", "max_tokens": 500})
    assert block["language"] == "zh"
    text = block["text"]
    assert text.startswith("关于用户的记忆") and "本次对话较早的内容：" in text and "本次对话最近的几轮：" in text
    assert "- [经历，" in text and "用户：" in text and "助手：" in text
    assert "成都" in block["parts"]["summary"]["text"]
    assert "用户：好的\n" not in block["parts"]["summary"]["text"] + "\n"
    assert tokens(tokenizer, text) <= 500


def test_memories_come_with_type_and_date_and_respect_the_filters(service: MemoryService) -> None:
    service.add_many(ORG, [
        {"user_id": "u3", "content": "The user does all their coding in Zed.", "memory_type": "semantic",
         "created_at": "2026-10-05T08:00:00Z"},
        {"user_id": "u3", "content": "Always answer the user in short bullet points.", "memory_type": "procedural"},
        {"user_id": "other", "content": "The other user codes in Emacs.", "memory_type": "semantic"},
    ])
    block = service.context(ORG, {"user_id": "u3", "query": "Which code editor does the user use?"})
    assert block["parts"]["recent"] == [] and block["parts"]["summary"] is None
    first = block["parts"]["memories"][0]
    assert first["content"] == "The user does all their coding in Zed."
    assert "- [fact, 2026-10-05] The user does all their coding in Zed." in block["text"]
    assert "Emacs" not in block["text"]
    only = service.context(ORG, {"user_id": "u3", "query": "How should answers look?", "memory_types": ["procedural"]})
    assert [m["memory_type"] for m in only["parts"]["memories"]] == ["procedural"]
    none = service.context(ORG, {"user_id": "u3", "query": "editor", "top_k": 0})
    assert none["parts"]["memories"] == [] and none["text"] == ""


def test_a_memory_the_window_shows_is_not_repeated(service: MemoryService) -> None:
    turns = log_session(service, "u4", "s4", [("user", "I do all my coding in Zed these days."),
                                               ("assistant", "Zed is fast, good choice.")])
    service.add_many(ORG, service.raw_memories(turns))
    block = service.context(ORG, {"user_id": "u4", "session_id": "s4", "query": "Which editor do I use?"})
    assert [t["content"] for t in block["parts"]["recent"]][0] == "I do all my coding in Zed these days."
    assert block["parts"]["memories"] == []
    assert block["text"].count("coding in Zed") == 1


def test_bad_requests_are_refused(service: MemoryService) -> None:
    for body in ({"user_id": "u1", "query": "x", "max_tokens": 31},
                 {"user_id": "u1", "query": "x", "max_tokens": 40_000},
                 {"user_id": "u1", "query": " "},
                 {"user_id": "u1", "query": "x", "session_id": "a\x00b"},
                 {"user_id": "u1", "query": "x", "extra": 1}):
        with pytest.raises(InvalidInputError):
            service.context(ORG, body)


def test_an_llm_summary_is_cached_and_refreshed_with_the_new_turns_only(make_service) -> None:  # type: ignore[no-untyped-def]
    with scripted_llm() as llm:
        llm.script(Reply("The user's sister Ana lives in Porto; they are comparing Lisbon hotels."),
                   Reply("Ana lives in Porto; Lisbon hotels compared up to option 45."))
        service: MemoryService = make_service(llm_base_url=llm.base_url, llm_model="scripted")
        log_session(service, "u5", "s5", EN_TURNS)
        ask = {"user_id": "u5", "session_id": "s5", "query": "Which hotel?", "max_tokens": 600, "top_k": 0}
        first = service.context(ORG, ask)
        summary = first["parts"]["summary"]
        assert summary["source"] == "llm" and summary["text"].startswith("The user's sister Ana")
        assert len(llm.requests) == 1
        sent = llm.requests[0]["body"]["messages"][1]["content"]
        assert "Ana lives in Porto" in sent and "Thanks!" in sent  # every dropped turn goes to the LLM
        # The same session again: the cached summary, no request.
        assert service.context(ORG, ask)["parts"]["summary"] == summary
        assert len(llm.requests) == 1
        # The session grows: the LLM gets the summary so far and only the turns dropped since.
        log_session(service, "u5", "s5", [
            ("user", "Option 44 then, please book it for the second week of March with a late checkout."),
            ("assistant", "Booked option 44 for the second week of March, late checkout confirmed by the hotel."),
        ], first=len(EN_TURNS))
        grown = service.context(ORG, ask)["parts"]["summary"]
        assert grown["text"].startswith("Ana lives in Porto") and grown["turns"] > summary["turns"]
        refresh = llm.requests[1]["body"]["messages"][1]["content"]
        assert refresh.startswith("Earlier in this conversation:\nThe user's sister Ana lives in Porto")
        assert "My sister Ana lives in Porto" not in refresh
        # A user's erasure drops their cached summaries.
        service.erase_user(ORG, "u5")
        assert not [k for k in service.context_builder.summarizer._cache if k[1] == "u5"]


def test_an_llm_that_fails_leaves_the_extractive_summary(make_service) -> None:  # type: ignore[no-untyped-def]
    with scripted_llm() as llm:
        llm.script(*[Reply(json.dumps({"error": {"message": "down"}}), status=500)] * 3)
        service: MemoryService = make_service(llm_base_url=llm.base_url, llm_model="scripted", llm_max_retries=0)
        log_session(service, "u6", "s6", EN_TURNS)
        block = service.context(ORG, {"user_id": "u6", "session_id": "s6", "query": "hotel", "max_tokens": 500})
        assert block["parts"]["summary"]["source"] == "extractive"
        assert "Ana lives in Porto" in block["parts"]["summary"]["text"]
