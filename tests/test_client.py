"""The Python client (clients/python): every method against the real shared Serve app, and its
retries against a small scripted HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agent_memory_http import (
    AgentMemoryError,
    AsyncMemoryClient,
    ConflictError,
    InvalidInputError,
    Job,
    Memory,
    MemoryClient,
    MemoryEvent,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitedError,
    SearchHit,
    SearchResult,
    SessionMessage,
    Turn,
    UnauthorizedError,
    UnavailableError,
)

ROOT = Path(__file__).resolve().parents[1]


def _user() -> str:
    return f"client-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(serve_app: dict[str, object]) -> Iterator[MemoryClient]:
    with MemoryClient(str(serve_app["url"]), "acme-admin", timeout=60) as c:
        yield c


# -- against the real app ---------------------------------------------------------------------


def test_round_trip_of_every_method_in_english_and_chinese(client: MemoryClient, serve_app) -> None:
    user = _user()
    assert client.health().status == "ok"
    ready = client.ready()
    assert ready.ready is True and ready.checks["store"] == "ok"

    first = client.add(user, "The user prefers Python for backend work", importance=0.8, metadata={"source": "chat"})
    batch = client.add_many([
        {"user_id": user, "content": "退款需要两级审批", "memory_type": "procedural"},
        {"user_id": user, "content": "Lives in Lisbon", "id": "home-city", "metadata": {"source": "profile"}},
    ])
    assert len(first.ids) == 1 and len(batch.ids) == 2

    hits = client.search(user, "which language for the backend?", top_k=5)
    assert isinstance(hits, SearchResult) and hits.degraded is False
    assert isinstance(hits.memories[0], SearchHit) and hits.memories[0].id == first.id
    assert 0 <= hits.memories[0].score <= 1 and hits.memories[0].scores.semantic > 0
    zh = client.search(user, "退款流程", memory_types=["procedural"])
    assert [h.content for h in zh.memories] == ["退款需要两级审批"]
    filtered = client.search(user, "Lisbon", filters={"source": "profile"}, mode="keyword")
    assert [h.content for h in filtered.memories] == ["Lives in Lisbon"]

    by_client_id = client.get(user, "home-city")
    assert isinstance(by_client_id, Memory) and by_client_id.id == batch.ids[1] and by_client_id.status == "active"
    patched = client.update(user, batch.ids[0], content="退款需要三级审批", importance=0.9)
    assert patched.content == "退款需要三级审批" and patched.importance == 0.9
    assert client.update(user, batch.ids[0], expires_at=None).expires_at is None
    events = client.history(user, batch.ids[0])
    assert all(isinstance(e, MemoryEvent) for e in events) and [e.action for e in events][:2] == ["created", "updated"]

    page = client.list(user, limit=2)
    assert len(page.memories) == 2 and page.next_cursor
    assert sorted(m.id for m in client.iter_memories(user, page_size=2)) == sorted([first.id, *batch.ids])
    assert client.delete(user, first.id).deleted == first.id
    with pytest.raises(NotFoundError):
        client.get(user, first.id)
    assert [e.action for e in client.history(user, first.id)][-1] == "deleted"

    accepted = client.log_conversation(user, "会话-1", [
        Turn(role="user", content="我叫小明，我住在上海。"),
        {"role": "assistant", "content": "好的，记住了。"},
    ], mode="raw")
    job = client.wait_for_job(accepted.job_id)
    assert isinstance(job, Job) and job.state == "succeeded" and job.kind == "conversation" and job.done
    window = client.session_messages(user, "会话-1")
    assert all(isinstance(m, SessionMessage) for m in window)
    assert [(m.role, m.content) for m in window] == [("user", "我叫小明，我住在上海。"), ("assistant", "好的，记住了。")]
    assert "上海" in client.search(user, "住在哪里").memories[0].content

    root = Path(serve_app["settings"].imports.root)
    root.mkdir(parents=True, exist_ok=True)
    rows = [{"user_id": user, "session_id": "old", "role": "user", "content": f"imported note {i}",
             "message_id": f"m{i}", "created_at": f"2025-03-0{i + 1}T10:00:00+00:00"} for i in range(2)]
    (root / f"{user}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    imported = client.wait_for_job(client.submit_import(f"{user}.jsonl", mode="raw").job_id)
    assert imported.state == "succeeded" and imported.kind == "import", imported
    consolidation = client.wait_for_job(client.consolidate(user).job_id)
    assert consolidation.kind == "consolidation" and consolidation.state == "succeeded", consolidation
    assert client.schedule().enabled is True

    erasure = client.erase_user(user)
    assert erasure.erased["memories"] >= 4 and erasure.job_id.startswith("erase-")
    assert client.list(user).memories == [] and client.get_job(erasure.job_id).kind == "erasure"


def test_restore_undoes_a_supersede(client: MemoryClient) -> None:
    user = _user()
    client.wait_for_job(client.log_conversation(user, "s1", [
        {"role": "user", "content": "I prefer VS Code for coding."}]).job_id)
    client.wait_for_job(client.log_conversation(user, "s2", [
        {"role": "user", "content": "Actually I switched from VS Code to Neovim last month."}]).job_id)
    (old,) = client.list(user, status="superseded").memories
    back = client.restore(user, old.id)
    assert back.status == "active" and back.superseded_by is None
    with pytest.raises(ConflictError) as conflict:  # not superseded any more: a first attempt says so
        client.restore(user, old.id)
    assert conflict.value.status == 409 and conflict.value.code == "not_superseded"


def test_errors_are_typed(client: MemoryClient, serve_app) -> None:
    user = _user()
    with pytest.raises(NotFoundError) as missing:
        client.get(user, "no-such-memory")
    assert missing.value.status == 404 and missing.value.code == "not_found" and missing.value.request_id
    with MemoryClient(str(serve_app["url"]), "acme-reader") as reader:
        assert reader.search(user, "anything").memories == []
        with pytest.raises(PermissionDeniedError) as denied:
            reader.add(user, "readers cannot write")
    assert denied.value.status == 403 and denied.value.code == "forbidden"
    with pytest.raises(InvalidInputError) as invalid:
        client.add(user, "", importance=0.5)
    assert invalid.value.status == 422 and "content" in invalid.value.message
    assert isinstance(invalid.value, ValueError)
    with pytest.raises(InvalidInputError):
        client.search(user, "x", top_k=0)
    with pytest.raises(InvalidInputError, match="memories.1.memory_type") as local:  # found before sending
        client.add_many([{"user_id": user, "content": "ok"}, {"user_id": user, "content": "x", "memory_type": "bogus"}])
    assert local.value.status is None
    with MemoryClient(str(serve_app["url"]), "not-a-key") as stranger, pytest.raises(UnauthorizedError):
        stranger.list(user)
    # Not retried: one attempt each.
    assert missing.value.attempts == denied.value.attempts == invalid.value.attempts == 1


def test_the_same_idempotency_key_stores_once(client: MemoryClient) -> None:
    user, key = _user(), uuid.uuid4().hex
    first = client.add(user, "Has two cats", idempotency_key=key)
    again = client.add(user, "Has two cats", idempotency_key=key)
    assert first.ids == again.ids and len(client.list(user).memories) == 1
    with pytest.raises(ConflictError) as clash:
        client.add(user, "Has three cats", idempotency_key=key)
    assert clash.value.code == "idempotency_conflict"
    # Turns without ids or times are keyed by the call's key: posting them again logs nothing twice.
    turns = [{"role": "user", "content": "我养了两只猫"}]
    for _ in range(2):
        client.wait_for_job(client.log_conversation(user, "s", turns, mode="raw", idempotency_key=key).job_id)
    assert [m.content for m in client.session_messages(user, "s")] == ["我养了两只猫"]


def test_async_client_round_trip(serve_app) -> None:
    user = _user()

    async def run() -> None:
        async with AsyncMemoryClient(str(serve_app["url"]), "acme-writer", timeout=60) as c:
            assert (await c.health()).status == "ok" and (await c.ready()).ready
            written = await c.add_many([{"user_id": user, "content": "更喜欢用 Rust 写命令行工具"},
                                        {"user_id": user, "content": "Takes the 8:15 train to work"}])
            hits = await c.search(user, "用什么语言写命令行工具？")
            assert hits.memories[0].id == written.ids[0]
            assert (await c.get(user, written.ids[1])).content == "Takes the 8:15 train to work"
            assert (await c.update(user, written.ids[1], content="Takes the 9:00 train")).content == "Takes the 9:00 train"
            assert [e.action for e in await c.history(user, written.ids[1])] == ["created", "updated"]
            assert len((await c.list(user)).memories) == 2
            assert sorted([m.id async for m in c.iter_memories(user, page_size=1)]) == sorted(written.ids)
            job = await c.wait_for_job((await c.log_conversation(
                user, "s1", [{"role": "user", "content": "明天下午三点开会"}], mode="raw")).job_id)
            assert job.state == "succeeded"
            assert [m.content for m in await c.session_messages(user, "s1")] == ["明天下午三点开会"]
            assert (await c.delete(user, written.ids[0])).deleted == written.ids[0]
            with pytest.raises(NotFoundError):
                await c.get(user, written.ids[0])
            with pytest.raises(PermissionDeniedError):
                await c.erase_user(user)  # a writer may not
            assert (await c.schedule()).enabled is True

    asyncio.run(run())


# -- retries, against a scripted server on loopback -------------------------------------------------


class Script:
    """A loopback HTTP server that answers each request with the next scripted answer and records it."""

    def __init__(self, answers: list[tuple[int, dict[str, str], object] | None]) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, object]] = []
        script = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                script.requests.append({"method": self.command, "path": self.path, "at": time.monotonic(),
                                        "headers": dict(self.headers), "body": body.decode()})
                answer = script.answers.pop(0) if script.answers else (500, {}, {"error": {"code": "internal"}})
                if answer is None:  # hang up without answering
                    self.close_connection = True
                    return
                status, headers, payload = answer
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Script:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def header(self, name: str) -> list[object]:
        return [r["headers"].get(name) for r in self.requests]  # type: ignore[union-attr]


RATE_LIMITED = (429, {"Retry-After": "1"}, {"error": {"code": "rate_limited", "message": "slow down", "retry_after_s": 1}})
UNAVAILABLE = (503, {}, {"error": {"code": "unavailable", "message": "writer restarting"}})
CREATED = (201, {}, {"ids": ["m1"]})


def test_a_429_is_retried_after_retry_after_with_the_same_idempotency_key() -> None:
    with Script([RATE_LIMITED, CREATED]) as server, MemoryClient(server.url, "k", backoff_base=0.01) as c:
        assert c.add("u1", "记住这件事").ids == ["m1"]
    first, second = server.requests
    assert second["at"] - first["at"] >= 1.0  # type: ignore[operator]
    keys = server.header("Idempotency-Key")
    assert keys[0] and keys[0] == keys[1]
    assert server.header("x-request-id")[0] == server.header("x-request-id")[1]
    assert server.header("Authorization") == ["Bearer k", "Bearer k"]
    assert json.loads(str(first["body"])) == {"user_id": "u1", "content": "记住这件事"}


def test_503s_are_retried_and_every_write_carries_a_key_of_its_own() -> None:
    answers = [UNAVAILABLE, UNAVAILABLE, CREATED, CREATED]
    with Script(answers) as server, MemoryClient(server.url, backoff_base=0.01) as c:
        assert c.add("u1", "first").ids == ["m1"]
        assert c.add("u1", "second", idempotency_key="mine").ids == ["m1"]
    keys = server.header("Idempotency-Key")
    assert len(keys) == 4 and keys[0] == keys[1] == keys[2] != keys[3] == "mine"


def test_retries_end_with_a_typed_error() -> None:
    limited = (429, {"Retry-After": "0"}, {"error": {"code": "rate_limited", "message": "slow down", "retry_after_s": 0}})
    with Script([limited] * 3) as server, MemoryClient(server.url, max_retries=2, backoff_base=0.01) as c:
        with pytest.raises(RateLimitedError) as exc:
            c.search("u1", "anything")
    assert len(server.requests) == 3 and exc.value.attempts == 3 and exc.value.retry_after == 0
    quota = (403, {}, {"error": {"code": "quota_exceeded", "message": "org at its quota"}})
    with Script([quota, (404, {}, {"error": {"code": "not_found", "message": "no memory x"}})]) as server, \
            MemoryClient(server.url, backoff_base=0.01) as c:
        with pytest.raises(QuotaExceededError) as over:
            c.add("u1", "one more")
        assert isinstance(over.value, PermissionDeniedError) and over.value.code == "quota_exceeded"
        with pytest.raises(NotFoundError, match="no memory x"):
            c.get("u1", "x")
    assert len(server.requests) == 2  # other 4xx are never retried


def test_connection_refused_is_retried_then_unavailable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with MemoryClient(f"http://127.0.0.1:{port}", max_retries=2, backoff_base=0.05) as c:
        started = time.monotonic()
        with pytest.raises(UnavailableError) as exc:
            c.health()
    assert exc.value.status is None and exc.value.attempts == 3 and exc.value.code == "unreachable"
    assert time.monotonic() - started >= 0.05 / 2 + 0.1 / 2  # two backoffs, each at least half its step


def test_a_dropped_connection_is_retried_only_where_repeating_is_safe() -> None:
    with Script([None, CREATED, None]) as server, MemoryClient(server.url, backoff_base=0.01) as c:
        assert c.add("u1", "kept by its key").ids == ["m1"]
        with pytest.raises(UnavailableError):
            c.submit_import("history.jsonl")  # a second import would start a second job
    assert [r["path"] for r in server.requests] == ["/v1/memories", "/v1/memories", "/v1/jobs/import"]


def test_a_restore_whose_first_attempt_landed_answers_the_memory() -> None:
    memory = {"id": "m1", "user_id": "u1", "content": "x", "memory_type": "semantic", "status": "active"}
    conflict = (409, {}, {"error": {"code": "not_superseded", "message": "memory m1 is not superseded"}})
    with Script([UNAVAILABLE, conflict, (200, {}, memory)]) as server, MemoryClient(server.url, backoff_base=0.01) as c:
        assert c.restore("u1", "m1").status == "active"
    assert [(r["method"], r["path"]) for r in server.requests] == [
        ("POST", "/v1/memories/m1/restore?user_id=u1"), ("POST", "/v1/memories/m1/restore?user_id=u1"),
        ("GET", "/v1/memories/m1?user_id=u1")]


def test_async_client_retries_with_the_same_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with Script([RATE_LIMITED, (202, {}, {"job_id": "j1", "unknown_field": 1})]) as server:
        monkeypatch.setenv("AGENT_MEMORY_URL", server.url)
        monkeypatch.setenv("AGENT_MEMORY_API_KEY", "from-env")

        async def run() -> str:
            async with AsyncMemoryClient(backoff_base=0.01) as c:
                accepted = await c.log_conversation("u1", "s1", [{"role": "user", "content": "hello"}])
                assert accepted.model_extra == {"unknown_field": 1}
                return accepted.job_id

        assert asyncio.run(run()) == "j1"
    first, second = server.requests
    assert second["at"] - first["at"] >= 1.0  # type: ignore[operator]
    assert server.header("Authorization") == ["Bearer from-env"] * 2
    keys = server.header("Idempotency-Key")
    assert keys[0] and keys[0] == keys[1]
    assert first["body"] == second["body"]  # the same turn ids on both attempts
    (turn,) = json.loads(str(first["body"]))["messages"]
    assert turn["message_id"]


def test_errors_share_one_base() -> None:
    for cls in (InvalidInputError, UnauthorizedError, PermissionDeniedError, QuotaExceededError, NotFoundError,
                ConflictError, RateLimitedError, UnavailableError):
        assert issubclass(cls, AgentMemoryError)
    assert str(NotFoundError("no memory x", status=404, code="not_found")) == "404 not_found: no memory x"


# -- the distribution ---------------------------------------------------------------------------------


@pytest.mark.unit  # a bare interpreter importing the client
def test_the_client_needs_neither_torch_nor_ray(tmp_path: Path) -> None:
    code = ("import sys, agent_memory_http; "
            "print(sorted(m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
            "{'torch', 'ray', 'lancedb', 'agent_memory', 'numpy'}))")
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    declared = re.search(r"^dependencies = \[(.*)\]$", (ROOT / "clients/python/pyproject.toml").read_text(), re.M)
    assert declared and re.findall(r'"([a-z]+)', declared.group(1)) == ["httpx", "pydantic"]


def _quickstart() -> str:
    """The Python blocks of the client README's Quickstart, in order: one script."""
    readme = (ROOT / "clients/python/README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```python\n(.*?)```", section, re.S))


def test_a_fresh_install_of_the_client_alone_runs_its_quickstart(serve_app: dict[str, object], tmp_path: Path) -> None:
    """clients/python installed by pip into a new virtual environment with no package index (its two
    dependencies, httpx and pydantic, and the build's setuptools are read from this environment's
    site-packages), then the README's Quickstart run as written, against the shared server, as the
    admin of an org of its own."""
    import sysconfig

    from serve_app.auth import KeysFile

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    source = tmp_path / "clients-python"  # a copy: the build writes beside the sources
    shutil.copytree(ROOT / "clients/python", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "PYTHON"))}
    # This environment's pip, installing into the new one (`--python`): the new one has none.
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "--no-deps",
                                "--no-build-isolation", "--disable-pip-version-check", str(source)],
                               capture_output=True, text=True, timeout=300, env={**env, "PIP_CONFIG_FILE": os.devnull})
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    where = subprocess.run([python, "-I", "-c", "import importlib.metadata as m, agent_memory_http as c; "
                            "print(m.version('agent-memory-http'), c.__file__)"],
                           capture_output=True, text=True, check=True, env=env, cwd=tmp_path).stdout.split()
    assert where[0] == "0.1.0" and where[1].startswith(site)

    keys = KeysFile(serve_app["settings"].auth.api_keys_file)  # type: ignore[attr-defined]
    issued = keys.issue(org_id=f"quickstart-{uuid.uuid4().hex[:8]}", role="admin")
    try:
        script = tmp_path / "quickstart.py"
        script.write_text(_quickstart(), encoding="utf-8")
        run_env = {**env, "AGENT_MEMORY_URL": str(serve_app["url"]), "AGENT_MEMORY_API_KEY": issued.secret}
        deadline = time.monotonic() + 60  # the server takes a new key within a second or two
        while True:
            ran = subprocess.run([python, "-I", str(script)], capture_output=True, text=True, timeout=300,
                                 env=run_env, cwd=tmp_path)
            if ran.returncode == 0 or "unauthorized" not in ran.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert ran.returncode == 0, ran.stderr[-3000:]
        printed = ran.stdout.splitlines()
        assert "succeeded" in printed and "退款需要两级审批" in printed
        assert "The user prefers Python for backend work" in ran.stdout
    finally:
        keys.revoke(issued.entry["name"])
