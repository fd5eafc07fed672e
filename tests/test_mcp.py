"""`agent-memory mcp`: the four tools through the MCP SDK's own client, over stdio and streamable
HTTP against the shared Serve app, and over a local store with --embedded."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_memory_http import MemoryClient
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from cli.mcp_server import RemoteMemories, build_server
from cli.net import free_port

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"remember", "recall", "list_memories", "forget"}
# What the server's process needs of this one's environment; everything else comes from its flags.
ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SCENARIO_S = 180

T = TypeVar("T")


def _user() -> str:
    return f"mcp-{uuid.uuid4().hex[:8]}"


def _run(scenario: Awaitable[T]) -> T:
    return asyncio.run(asyncio.wait_for(scenario, SCENARIO_S))


@asynccontextmanager
async def _stdio(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """A session with `agent-memory mcp ARGS` started as a subprocess on stdio."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "cli.main", "mcp", *args], cwd=ROOT,
                                   env={**ENV, **(env or {})})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _remote(serve_app: dict[str, object], key: str) -> tuple[str, ...]:
    return ("--url", str(serve_app["url"]), "--api-key", key)


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def _ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return result.structured_content


async def _remember(session: ClientSession, user: str, content: str, **fields: Any) -> str:
    return _ok(await session.call_tool("remember", {"user_id": user, "content": content, **fields}))["result"]


async def _listed(session: ClientSession, user: str) -> dict[str, dict[str, Any]]:
    listing = _ok(await session.call_tool("list_memories", {"user_id": user}))
    return {m["id"]: m for m in listing["memories"]}


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the MCP server exited with {process.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")


# -- against the shared Serve app ---------------------------------------------------------------


def test_remember_recall_list_and_forget_over_stdio(serve_app: dict[str, object]) -> None:
    user = _user()

    async def scenario() -> None:
        async with _stdio(*_remote(serve_app, "acme-writer")) as session:
            assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS

            english = await _remember(session, user, "The user prefers Python for backend work")
            chinese = await _remember(session, user, "退款需要两级审批", memory_type="procedural",
                                      metadata={"source": "chat"})

            recalled = await session.call_tool("recall", {"user_id": user, "query": "which language for the backend?"})
            found = _ok(recalled)
            assert found["memories"][0]["id"] == english and 0 < found["memories"][0]["score"] <= 1
            assert _text(recalled) == found["text"] and "The user prefers Python for backend work" in found["text"]
            recalled = await session.call_tool("recall", {"user_id": user, "query": "退款流程", "top_k": 1})
            assert [m["id"] for m in _ok(recalled)["memories"]] == [chinese]
            assert "退款需要两级审批" in _text(recalled)

            listed = await _listed(session, user)
            assert set(listed) == {english, chinese}
            assert listed[chinese]["memory_type"] == "procedural" and listed[chinese]["metadata"] == {"source": "chat"}

            assert _ok(await session.call_tool("forget", {"user_id": user, "memory_id": english}))["deleted"] == english
            assert set(await _listed(session, user)) == {chinese}
            again = _ok(await session.call_tool("recall", {"user_id": user, "query": "backend language"}))
            assert english not in {m["id"] for m in again["memories"]}

            # The server's own errors come back as tool errors with its code; the MCP server goes on.
            missing = await session.call_tool("forget", {"user_id": user, "memory_id": english})
            assert missing.is_error and "not_found" in _text(missing)

            refused = await session.call_tool("forget", {"user_id": user})
            assert refused.is_error and "--allow-erase" in _text(refused)
            assert set(await _listed(session, user)) == {chinese}

    _run(scenario())


def test_forget_erases_a_whole_user_only_with_allow_erase_and_an_admin_key(serve_app: dict[str, object]) -> None:
    user, neighbour = _user(), _user()
    with MemoryClient(str(serve_app["url"]), "acme-admin", timeout=60) as client:
        kept = client.add(neighbour, "Lives in Lisbon").id
        client.add_many([{"user_id": user, "content": "Lives in Porto"},
                         {"user_id": user, "content": "喜欢喝绿茶", "memory_type": "semantic"}])

    async def scenario() -> None:
        async with _stdio("--allow-erase", *_remote(serve_app, "acme-writer")) as session:
            forbidden = await session.call_tool("forget", {"user_id": user})
            assert forbidden.is_error and "forbidden" in _text(forbidden)
            assert len(await _listed(session, user)) == 2

        # The key from AGENT_MEMORY_API_KEY, as an MCP client's config would set it.
        async with _stdio("--allow-erase", "--url", str(serve_app["url"]),
                          env={"AGENT_MEMORY_API_KEY": "acme-admin"}) as session:
            erased = _ok(await session.call_tool("forget", {"user_id": user}))
            assert erased["erased"]["memories"] == 2 and erased["job_id"]
            assert await _listed(session, user) == {}
            assert set(await _listed(session, neighbour)) == {kept}

    _run(scenario())


def test_streamable_http_transport(serve_app: dict[str, object], tmp_path: Path) -> None:
    user = _user()
    with MemoryClient(str(serve_app["url"]), "acme-admin", timeout=60) as client:
        stored = client.add(user, "The team deploys on Fridays only after the smoke tests pass").id
    port = free_port()
    with (tmp_path / "mcp.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "mcp", "--transport", "http", "--port", str(port),
             *_remote(serve_app, "acme-reader")],
            cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=log,
        )
        try:
            _wait_for_port(port, process)

            async def scenario() -> None:
                async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                        ClientSession(read, write) as session:
                    await session.initialize()
                    assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
                    recalled = await session.call_tool("recall", {"user_id": user, "query": "when do we deploy?"})
                    assert [m["id"] for m in _ok(recalled)["memories"]] == [stored]
                    assert "smoke tests" in _text(recalled)
                    # A reader key: the server refuses the write, and says so through the tool.
                    refused = await session.call_tool("remember", {"user_id": user, "content": "Deploys on Mondays"})
                    assert refused.is_error and "forbidden" in _text(refused)

            _run(scenario())
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    # Stopped in order, as by Ctrl-C: the HTTP server first, then the backend.
    assert process.returncode == 130
    assert "Application shutdown complete" in (tmp_path / "mcp.log").read_text()


# -- on a local store ---------------------------------------------------------------------------


@pytest.mark.store
def test_embedded_store_without_a_server(tmp_path: Path) -> None:
    user, neighbour = _user(), _user()

    async def scenario() -> None:
        async with _stdio("--embedded", "--allow-erase", "--storage-uri", str(tmp_path / "lancedb")) as session:
            english = await _remember(session, user, "The user prefers Python for backend work")
            chinese = await _remember(session, user, "退款需要两级审批", memory_type="procedural")
            kept = await _remember(session, neighbour, "Lives in Lisbon")

            recalled = await session.call_tool("recall", {"user_id": user, "query": "退款流程"})
            assert _ok(recalled)["memories"][0]["id"] == chinese and "退款需要两级审批" in _text(recalled)
            assert set(await _listed(session, user)) == {english, chinese}

            assert _ok(await session.call_tool("forget", {"user_id": user, "memory_id": english}))["deleted"] == english
            assert set(await _listed(session, user)) == {chinese}
            missing = await session.call_tool("forget", {"user_id": user, "memory_id": english})
            assert missing.is_error and "not_found" in _text(missing)

            erased = _ok(await session.call_tool("forget", {"user_id": user}))
            assert erased["erased"]["memories"] == 1 and erased["job_id"]
            assert await _listed(session, user) == {}
            assert set(await _listed(session, neighbour)) == {kept}

    _run(scenario())


@pytest.mark.unit  # refused before a store is opened
def test_embedded_refuses_a_server_url() -> None:
    command = [sys.executable, "-m", "cli.main", "mcp", "--embedded", "--url", "http://127.0.0.1:8000"]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "--embedded opens the local store" in done.stderr and done.stdout == ""


def test_forget_says_whether_it_erases_users() -> None:
    """The tool's description tells the model what `forget` without an id does on this server."""
    async def description(allow_erase: bool) -> str:
        with MemoryClient("http://127.0.0.1:9") as client:  # never called
            server = build_server(RemoteMemories(client), allow_erase=allow_erase)
            return {tool.name: tool.description or "" for tool in await server.list_tools()}["forget"]

    assert "unrecoverably" in asyncio.run(description(True))
    assert "--allow-erase" in asyncio.run(description(False))
