"""The agent loop example (examples/agent_loop.py) and the LangChain retriever, against the shared
Serve app, with a scripted OpenAI-compatible chat model on loopback in place of a real one."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from agent_memory_http import AsyncMemoryClient, MemoryClient
from agent_memory_http.langchain import AgentMemoryRetriever
from langchain_core.documents import Document

from examples.agent_loop import answer
from loopback.llm_server import Reply, ScriptedLLM, scripted_llm

ROOT = Path(__file__).resolve().parents[1]


def _user() -> str:
    return f"loop-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(serve_app: dict[str, object]) -> Iterator[MemoryClient]:
    with MemoryClient(str(serve_app["url"]), "acme-admin", timeout=60) as c:
        yield c


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with scripted_llm() as server:
        yield server


@pytest.fixture
def chat(llm: ScriptedLLM) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:
        yield c


def _system_prompt(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["body"]["messages"] if m["role"] == "system")


def _memories(client: MemoryClient, user: str, *, timeout: float = 300.0) -> list[str]:
    """The user's memories once the background extraction of a logged turn has stored any."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        contents = [m.content for m in client.iter_memories(user)]
        if contents:
            return contents
        time.sleep(0.5)
    raise AssertionError(f"no memory extracted for {user} within {timeout}s")


# -- the agent loop ----------------------------------------------------------------------------


def test_the_second_turn_sees_the_first_in_its_prompt_and_both_are_logged(
    client: MemoryClient, llm: ScriptedLLM, chat: openai.OpenAI
) -> None:
    user, session = _user(), "pets"
    llm.script(Reply("Nice to meet Miso! Python it is."), Reply("你的猫叫 Miso。"))

    first = answer(client, chat, "scripted", user, session,
                   "My cat is called Miso, and I write all my backends in Python.")
    second = answer(client, chat, "scripted", user, session, "我的猫叫什么名字？")

    assert (first, second) == ("Nice to meet Miso! Python it is.", "你的猫叫 Miso。")
    assert len(llm.requests) == 2 and all(r["body"]["model"] == "scripted" for r in llm.requests)
    assert "Miso" not in _system_prompt(llm.requests[0])
    prompt = _system_prompt(llm.requests[1])
    assert "My cat is called Miso, and I write all my backends in Python." in prompt
    assert "Nice to meet Miso! Python it is." in prompt
    assert llm.requests[1]["body"]["messages"][-1] == {"role": "user", "content": "我的猫叫什么名字？"}

    logged = client.session_messages(user, session)
    assert [(m.role, m.content) for m in logged] == [
        ("user", "My cat is called Miso, and I write all my backends in Python."),
        ("assistant", "Nice to meet Miso! Python it is."),
        ("user", "我的猫叫什么名字？"),
        ("assistant", "你的猫叫 Miso。"),
    ]


def test_what_one_session_taught_is_recalled_in_the_next(
    client: MemoryClient, llm: ScriptedLLM, chat: openai.OpenAI
) -> None:
    user = _user()
    llm.script(Reply("记住了，你对花生过敏。"), Reply("不行，花生酱面条里有花生。"))

    answer(client, chat, "scripted", user, "monday", "我对花生过敏。")
    assert "我对花生过敏。" in _memories(client, user)
    answer(client, chat, "scripted", user, "tuesday", "晚饭可以做花生酱面条吗？")

    prompt = _system_prompt(llm.requests[1])
    assert "我对花生过敏" in prompt
    assert "记住了" not in prompt  # another session's turns stay out of this one's window
    assert [m.content for m in client.session_messages(user, "tuesday")] == [
        "晚饭可以做花生酱面条吗？", "不行，花生酱面条里有花生。"
    ]


def test_the_script_chats_from_stdin(serve_app: dict[str, object], client: MemoryClient, llm: ScriptedLLM) -> None:
    user = _user()
    llm.script(Reply("Hello! How can I help?"), Reply("你好！"))
    out = subprocess.run(
        [sys.executable, "examples/agent_loop.py", "--user-id", user, "--session-id", "cli",
         "--memory-url", str(serve_app["url"]), "--api-key", "acme-writer",
         "--llm-base-url", llm.base_url, "--llm-api-key", "test", "--model", "scripted"],
        input="Hi there\n你好\n", cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )
    assert "Hello! How can I help?" in out.stdout and "你好！" in out.stdout, out.stderr
    assert [m.content for m in client.session_messages(user, "cli")] == [
        "Hi there", "Hello! How can I help?", "你好", "你好！"
    ]


# -- the LangChain retriever -------------------------------------------------------------------


def _seed(client: MemoryClient, user: str) -> dict[str, str]:
    written = client.add_many([
        {"user_id": user, "content": "The user prefers Python for backend work", "metadata": {"source": "chat"}},
        {"user_id": user, "content": "退款需要两级审批", "memory_type": "procedural"},
        {"user_id": user, "content": "Lives in Lisbon with a cat called Miso"},
    ])
    return dict(zip(["python", "refund", "lisbon"], written.ids, strict=True))


def test_the_retriever_returns_the_best_memory_first_as_documents(client: MemoryClient) -> None:
    user = _user()
    ids = _seed(client, user)
    retriever = AgentMemoryRetriever(client=client, user_id=user, top_k=2)

    docs = retriever.invoke("Which language should I use for the API backend?")
    assert 1 <= len(docs) <= 2 and all(isinstance(d, Document) for d in docs)
    best = docs[0]
    assert best.page_content == "The user prefers Python for backend work" and best.id == ids["python"]
    assert best.metadata["id"] == ids["python"] and best.metadata["memory_type"] == "semantic"
    assert 0 < best.metadata["score"] <= 1 and best.metadata["created_at"]
    assert best.metadata["metadata"] == {"source": "chat"}
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)

    zh = retriever.invoke("退款流程是什么？")
    assert zh[0].page_content == "退款需要两级审批" and zh[0].metadata["memory_type"] == "procedural"

    semantic = AgentMemoryRetriever(client=client, user_id=user, memory_types=["semantic"])
    assert {d.metadata["memory_type"] for d in semantic.invoke("退款需要两级审批")} <= {"semantic"}
    assert AgentMemoryRetriever(client=client, user_id=_user()).invoke("Python backend") == []


def test_the_retriever_answers_ainvoke_with_or_without_an_async_client(
    client: MemoryClient, serve_app: dict[str, object]
) -> None:
    user = _user()
    ids = _seed(client, user)

    async def run() -> tuple[list[Document], list[Document]]:
        async with AsyncMemoryClient(str(serve_app["url"]), "acme-reader", timeout=60) as async_client:
            native = AgentMemoryRetriever(client=client, async_client=async_client, user_id=user)
            threaded = AgentMemoryRetriever(client=client, user_id=user)
            return await asyncio.gather(native.ainvoke("退款要几级审批？"),
                                        threaded.ainvoke("Where does the user live?"))

    native, threaded = asyncio.run(run())
    assert native[0].page_content == "退款需要两级审批" and native[0].id == ids["refund"]
    assert threaded[0].page_content == "Lives in Lisbon with a cat called Miso" and threaded[0].id == ids["lisbon"]


@pytest.mark.unit  # a bare interpreter importing the client
def test_the_client_imports_without_langchain() -> None:
    code = ("import sys; sys.modules['langchain_core'] = None\n"
            "import agent_memory_http\n"
            "try:\n    import agent_memory_http.langchain\nexcept ImportError:\n    print('no langchain')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "no langchain"
