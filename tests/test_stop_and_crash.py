"""Whole stacks of their own (`agent-memory serve` in a subprocess: the supervisor, the server,
local Ray, Serve's proxy), after the shared one is torn down: two Serve stacks cannot share a
machine's proxy ports.

- `kill -9` of every process of the stack while 16 clients write, then a restart on the same
  store: every acknowledged write is there once, and retrying every write with its idempotency
  key stores nothing twice.
- SIGTERM while 16 clients write: exit 0, no process of the server's session left (those started
  after the signal included), nothing acknowledged lost; a second signal stops the stack at once,
  leaving no process either. SIGHUP (a terminal closed) stops it as SIGTERM does.
- `kill -9` of the supervisor alone: the server stops by itself and leaves no process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from cli.net import free_port
from cli.processes import kill_session
from storage import LanceStore
from storage.connect import maintenance_of
from tests.conftest import ROOT, stop_shared_stack

pytestmark = pytest.mark.stack
CLIENTS = 16
# Every stack a test started: whatever a failed test leaves is ended before the next one starts.
STARTED: list[subprocess.Popen[bytes]] = []


def _as_from_a_terminal() -> None:
    """The stop signals as a terminal's shell leaves them (a run under `nohup`, or started in the
    background without job control, inherits SIGHUP or SIGINT ignored)."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _start(store: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, AGENT_MEMORY_STORAGE_URI=str(store), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("AGENT_MEMORY_API_KEYS_FILE", None)
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_as_from_a_terminal)
    STARTED.append(proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise AssertionError("the stack did not start: " + log.read_text()[-3000:])


def _stack(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The supervisor and every process under it (the server, Ray's processes, the proxy)."""
    root = psutil.Process(proc.pid)
    return [root, *root.children(recursive=True)]


def _children(proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children()
    except psutil.NoSuchProcess:
        return []


def _server(proc: subprocess.Popen[bytes]) -> int:
    """The server's pid, which is also its session's id (the supervisor starts it in a new session)."""
    (server,) = psutil.Process(proc.pid).children()
    assert os.getsid(server.pid) == server.pid
    return server.pid


def _in_session(sid: int) -> list[str]:
    """Every live process of the session, whenever it was started and whoever its parent is now."""
    out = []
    for p in psutil.process_iter(["name", "status"]):
        try:
            if os.getsid(p.pid) == sid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.info['name']}")
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
    return out


def _session_ends(sid: int, timeout: float = 120) -> list[str]:
    """Wait for the session to hold no process; what it still holds at the timeout."""
    deadline = time.monotonic() + timeout
    while (left := _in_session(sid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _wait_for_log(log: Path, text: str, after: int, timeout: float = 120) -> None:
    """Wait for `text` in the log, past its first `after` characters."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text()[after:]:
        assert time.monotonic() < deadline, f"{text!r} not logged: " + log.read_text()[-3000:]
        time.sleep(0.1)


def _alive(processes: list[psutil.Process]) -> list[str]:
    out = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return out


class Writers:
    """16 clients, each writing its own user's notes with one idempotency key per note, until stopped."""

    def __init__(self, url: str, tag: str) -> None:
        self.url, self.tag = url, tag
        self.stop = threading.Event()
        self.acked: dict[str, list[str]] = {}  # idempotency key -> ids acknowledged
        self.sent: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=CLIENTS)
        self._futures = [self._pool.submit(self._client, k) for k in range(CLIENTS)]

    def _client(self, k: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            i = 0
            while not self.stop.is_set():
                key, body = f"{self.tag}-{k}-{i}", {"user_id": f"{self.tag}-{k}", "content": f"note {i} of writer {k}"}
                with self._lock:
                    self.sent.append((key, body))
                try:
                    r = client.post("/v1/memories", json=body, headers={"Idempotency-Key": key})
                except httpx.HTTPError:
                    return  # the stack is going away
                if r.status_code == 201:
                    with self._lock:
                        self.acked[key] = r.json()["ids"]
                i += 1

    def join(self) -> None:
        self.stop.set()
        for f in self._futures:
            f.result(timeout=120)
        self._pool.shutdown()

    def users(self) -> list[str]:
        return [f"{self.tag}-{k}" for k in range(CLIENTS)]


def _stored(store: Path, users: list[str]) -> Counter[str]:
    table = maintenance_of(LanceStore(str(store), embedding_model=None, embedding_dim=None)).table("memories")
    rows = table.to_lance().to_table(columns=["id", "user_id"]).to_pylist()
    return Counter(r["id"] for r in rows if r["user_id"] in set(users))


def _wait_for_acks(writers: Writers, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(writers.acked) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(writers.acked) >= n, f"only {len(writers.acked)} writes acknowledged"


@pytest.fixture
def own_stack() -> Iterator[None]:
    """No shared Ray or Serve while a stack of its own runs (they are last in the session)."""
    stop_shared_stack()
    yield
    while STARTED:  # a test that failed half-way leaves its stack: end it, the ports with it
        proc = STARTED.pop()
        for sid in {proc.pid, *(c.pid for c in _children(proc))}:
            kill_session(sid)


def test_kill_9_of_the_whole_stack_then_a_restart_loses_and_duplicates_nothing(own_stack: None, tmp_path: Path) -> None:
    store, log = tmp_path / "lancedb", tmp_path / "serve.log"
    proc, url = _start(store, log)
    writers = Writers(url, "crash")
    _wait_for_acks(writers, 100)
    stack = _stack(proc)
    for p in stack:  # every process at once, as a power cut would
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(stack, timeout=120)
    writers.join()
    acked = dict(writers.acked)
    stored = _stored(store, writers.users())
    assert all(stored[i] == 1 for ids in acked.values() for i in ids), "an acknowledged write is missing or doubled"

    proc, url = _start(store, log)
    try:
        def retry(user: str) -> None:  # every write of one client again, in its order, with its key
            with httpx.Client(base_url=url, timeout=60) as client:
                for key, body in writers.sent:
                    if body["user_id"] != user:
                        continue
                    r = client.post("/v1/memories", json=body, headers={"Idempotency-Key": key})
                    assert r.status_code == 201, r.text
                    if key in acked:
                        assert r.json()["ids"] == acked[key]

        with ThreadPoolExecutor(max_workers=CLIENTS) as pool:  # the clients at once, as they wrote
            for done in [pool.submit(retry, user) for user in writers.users()]:
                done.result()
        stored = _stored(store, writers.users())
        assert all(stored[i] == 1 for ids in acked.values() for i in ids)
        assert sum(stored.values()) == len({key for key, _ in writers.sent})  # one memory per key, none twice
    finally:  # a second signal stops the whole stack at once
        stack, sid, logged = _stack(proc), _server(proc), len(log.read_text())
        proc.send_signal(signal.SIGTERM)
        _wait_for_log(log, "stopping:", after=logged)  # the first signal was passed on: the next is a second
        # SIGTERM again: SIGINT would do, but not where this test runs with SIGINT ignored (a
        # command started with `&` by a shell without job control), which the supervisor respects.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGKILL  # the server was killed, not stopped
        _, alive = psutil.wait_procs(stack, timeout=120)
        assert _alive(alive) == [], "processes left behind"
        assert _in_session(sid) == [], "processes of the server's session left behind"
    assert sum(_stored(store, writers.users()).values()) == len({key for key, _ in writers.sent})


def test_sigterm_during_writes_drains_exits_0_and_leaves_no_process(own_stack: None, tmp_path: Path) -> None:
    store, log = tmp_path / "lancedb", tmp_path / "serve.log"
    proc, url = _start(store, log)
    writers = Writers(url, "stop")
    _wait_for_acks(writers, 100)
    stack, sid = _stack(proc), _server(proc)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=180)
    writers.join()
    gone, alive = psutil.wait_procs(stack, timeout=120)
    assert code == 0, log.read_text()[-3000:]
    assert _alive(alive) == [], "processes left behind"
    assert _in_session(sid) == [], "processes of the server's session left behind"
    assert "stopped" in log.read_text()
    stored = _stored(store, writers.users())
    assert all(stored[i] == 1 for ids in writers.acked.values() for i in ids), "an acknowledged write was lost"


def test_sighup_stops_the_server_as_sigterm_does(own_stack: None, tmp_path: Path) -> None:
    store, log = tmp_path / "lancedb", tmp_path / "serve.log"
    proc, url = _start(store, log)
    sid = _server(proc)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert _session_ends(sid) == [], "processes of the server's session left behind"
    assert "stopped" in log.read_text()


def test_the_server_stops_when_its_supervisor_is_killed(own_stack: None, tmp_path: Path) -> None:
    """`kill -9` of the supervisor alone: the kernel tells the server, which stops as on SIGTERM and
    ends what is left of its session; nothing of the stack outlives it."""
    store, log = tmp_path / "lancedb", tmp_path / "serve.log"
    proc, url = _start(store, log)
    sid = _server(proc)
    stack = _stack(proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _session_ends(sid) == [], "processes of the server's session outlived its supervisor"
    _, alive = psutil.wait_procs(stack, timeout=120)
    assert _alive(alive) == [], "processes left behind"
    assert "stopped" in log.read_text(), log.read_text()[-3000:]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{url}/readyz", timeout=2)
