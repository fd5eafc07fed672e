"""What a new user meets in the first hour, each on the real parts.

- The port: `make run PORT=8001` passes it on; `AGENT_MEMORY_PORT` is used, `--port` wins over
  it, and a port in use says how to pick another; a server started with the variable listens there.
- Quiet output: `agent-memory import` of the shipped sample prints no line of the libraries'
  warnings or loading bars; `--verbose` brings them back.
- Progress: at a terminal (a pseudo-terminal here) an import and a consolidation draw a bar with
  the rate and the time left; in a pipe, none.
- Over HTTP: a wrong method is 405 with the error body; a body sent as anything but JSON is 415
  and says to send JSON; every audit event of a call names the caller's key.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from cli.net import free_port
from cli.processes import kill_session
from tests.conftest import ROOT, stop_shared_stack

SAMPLE = ROOT / "examples" / "sample_history.jsonl"
# A line of the libraries' own chatter: Python warnings, Lance's and Ray's notices, the model's bar.
CHATTER = re.compile(r"warn|Loading weights|deprecat", re.IGNORECASE)
# tqdm's bar: done/total, [elapsed<left, rate unit/s]
BAR = r"{desc}:\s+\d+%\|[^|]*\|\s*\d+/{total} \[\d\d:\d\d<\d\d:\d\d,\s+[\d.]+{unit}/s\]"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), **extra)
    for name in ("AGENT_MEMORY_API_KEYS_FILE", "AGENT_MEMORY_PORT", "AGENT_MEMORY_HOST", "PYTHONWARNINGS"):
        if name not in extra:
            env.pop(name, None)
    return env


def _cli(*argv: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _at_a_terminal(argv: list[str], env: dict[str, str], *, columns: int = 0, timeout: float = 600) -> tuple[int, str]:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal (`columns` wide, 0: a terminal
    that tells no size); its exit status and all it wrote."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30 if columns else 0, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, env=env,
                            stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True)
    os.close(terminal)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's last writer closed it
                break
            if not chunk:
                break
            out += chunk
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    return code, out.decode("utf-8", errors="replace")


# -- the port --------------------------------------------------------------------------------------


def test_make_run_passes_port_on() -> None:
    # --no-print-directory: under another make (make test) the last line would be "Leaving directory".
    ran = subprocess.run(["make", "--no-print-directory", "-n", "run", "PORT=8001"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "PORT"})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1].endswith("cli.main serve --load-sample --port 8001")
    plain = subprocess.run(["make", "--no-print-directory", "-n", "run"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "PORT"})
    assert "--port" not in plain.stdout.strip().splitlines()[-1]


@pytest.mark.stack  # `agent-memory serve` of its own (refused: the port is taken)
def test_the_port_comes_from_the_variable_unless_a_flag_names_one(tmp_path: Path) -> None:
    """Checked where the server would listen: on a port in use it stops before anything starts,
    naming the port it chose and how to choose another."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = _env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"), AGENT_MEMORY_PORT=str(port))
        from_variable = _cli("serve", env=env, timeout=120)
        from_flag = _cli("serve", "--port", str(port), env={**env, "AGENT_MEMORY_PORT": str(free_port())},
                         timeout=120)
    for refused in (from_variable, from_flag):
        assert refused.returncode == 2, refused.stderr
        assert f"port {port} on 127.0.0.1 is in use" in refused.stderr
        assert "--port" in refused.stderr and "AGENT_MEMORY_PORT" in refused.stderr
    assert not (tmp_path / "lancedb").exists()  # nothing started, nothing written


@pytest.fixture
def own_stack() -> Iterator[list[subprocess.Popen[bytes]]]:
    """No shared Ray or Serve while a stack of its own runs; whatever a failed test leaves is ended."""
    stop_shared_stack()
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:  # the supervisor's session, and the server's (its child, a session of its own)
        try:
            sessions = {proc.pid, *(child.pid for child in psutil.Process(proc.pid).children())}
        except psutil.NoSuchProcess:
            sessions = {proc.pid}
        for sid in sessions:
            kill_session(sid)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.stack
def test_a_server_started_with_the_variable_listens_on_its_port(
    own_stack: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    env = _env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"), AGENT_MEMORY_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve"], cwd=ROOT, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    own_stack.append(proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    # Ready, and said so (the line comes once `serve.run` returns, which may be after the first answer).
    while not (f"agent-memory is serving at {url}" in log.read_text() and _ready(url)):
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "the server did not start: " + log.read_text()[-3000:]
        time.sleep(0.25)
    # Without API keys the caller is anonymous, and so is the actor of what it writes.
    with httpx.Client(base_url=url, timeout=60) as client:
        written = client.post("/v1/memories", json={"user_id": "u1", "content": "I keep my notes in Obsidian"})
        assert written.status_code == 201, written.text
        (memory_id,) = written.json()["ids"]
        events = client.get(f"/v1/memories/{memory_id}/history", params={"user_id": "u1"}).json()["events"]
    assert [(e["action"], e["actor"]) for e in events] == [("created", "anonymous")]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]


# -- quiet output and progress ---------------------------------------------------------------------


@pytest.mark.store
def test_import_prints_no_warning_and_verbose_brings_the_libraries_back(tmp_path: Path) -> None:
    env = _env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"))
    imported = _cli("import", str(SAMPLE), "--report", str(tmp_path / "report.json"), env=env)
    assert imported.returncode == 0, imported.stderr
    assert '"memories_written": 2828' in imported.stdout
    assert [line for line in imported.stderr.splitlines() if CHATTER.search(line)] == []
    assert "%|" not in imported.stderr  # not a terminal: no progress bar either
    # The store the import made says how it embedded Chinese: nothing to warn of.
    quiet = _cli("search", "--user-id", "u01", "editor", env=env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    # The model loaded through its libraries (torch asked for; otherwise the cached graph runs
    # without them): quiet, unless asked.
    torch = {**env, "AGENT_MEMORY_EMBEDDING_BACKEND": "torch"}
    quiet = _cli("search", "--user-id", "u01", "editor", env=torch)
    loud = _cli("search", "--user-id", "u01", "editor", "--verbose", env=torch)
    assert quiet.returncode == loud.returncode == 0, quiet.stderr + loud.stderr
    assert quiet.stderr == ""
    assert "Loading weights" in loud.stderr


@pytest.mark.store
def test_import_and_consolidation_show_rate_and_time_left_at_a_terminal(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:300]), encoding="utf-8")
    # Blocks of 100 texts: the bar moves three times before the one commit.
    env = _env(AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"), AGENT_MEMORY_IMPORT_EMBED_BATCH_ROWS="100")
    code, shown = _at_a_terminal(["import", str(history), "--report", str(tmp_path / "report.json")], env, columns=100)
    assert code == 0, shown[-3000:]
    assert re.search(BAR.format(desc="import", total=300, unit="msg"), shown), shown[-3000:]
    assert re.search(r"import:\s+33%\|", shown), "the bar did not move before the commit"
    assert not [line for line in re.split(r"[\r\n]", shown) if CHATTER.search(line)]
    code, shown = _at_a_terminal(["consolidate", "--engine", "local", "--dry-run"], env)
    assert code == 0, shown[-3000:]
    assert re.search(BAR.format(desc="consolidate", total=r"\d+", unit="user"), shown), shown[-3000:]


# -- over HTTP -------------------------------------------------------------------------------------


def _user() -> str:
    return f"first-hour-{uuid.uuid4().hex[:8]}"


def test_a_wrong_method_is_405_with_the_error_body(api) -> None:  # type: ignore[no-untyped-def]
    answer = api().put("/v1/memories", json={"user_id": "u1", "content": "x"})
    assert answer.status_code == 405
    error = answer.json()["error"]
    assert error["code"] == "method_not_allowed"
    assert "PUT" in error["message"] and "POST" in error["message"]
    assert {"GET", "POST"} <= {m.strip() for m in answer.headers["allow"].split(",")}
    other = api().delete("/v1/conversations")
    assert other.status_code == 405 and other.json()["error"]["code"] == "method_not_allowed"
    assert other.headers["allow"] == "POST"


def test_a_body_not_sent_as_json_is_415_and_says_so(api) -> None:  # type: ignore[no-untyped-def]
    c, user = api("acme-writer"), _user()
    body = f'{{"user_id": "{user}", "content": "I use tabs"}}'
    refusals = [
        c.post("/v1/memories", content=body, headers={"content-type": "text/plain"}),
        c.post("/v1/memories", data={"user_id": user, "content": "I use tabs"}),  # a form, as curl -d sends
        c.post("/v1/memories", files={"content": ("note.txt", b"I use tabs")}),
        c.post("/v1/memories/search", content=body, headers={"content-type": "text/plain"}),
        c.patch("/v1/memories/some-id", params={"user_id": user}, content='{"importance": 0.9}',
                headers={"content-type": "text/plain"}),
        # Chunked, without a length: found while the body is read.
        c.post("/v1/memories", content=iter([body.encode()]), headers={"content-type": "text/plain"}),
    ]
    for answer in refusals:
        assert answer.status_code == 415, answer.text
        error = answer.json()["error"]
        assert error["code"] == "unsupported_media_type"
        assert "application/json" in error["message"]
    assert "text/plain" in refusals[0].json()["error"]["message"]
    assert "application/x-www-form-urlencoded" in refusals[1].json()["error"]["message"]
    stored = c.get("/v1/memories", params={"user_id": user}).json()["memories"]
    assert stored == []  # nothing refused was written
    accepted = c.post("/v1/memories", content=body, headers={"content-type": "application/json; charset=utf-8"})
    assert accepted.status_code == 201, accepted.text


def _wait_job(client: httpx.Client, job_id: str) -> dict:
    deadline = time.monotonic() + 300
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.1)


def _actors(client: httpx.Client, user: str, memory_id: str) -> list[tuple[str, str]]:
    events = client.get(f"/v1/memories/{memory_id}/history", params={"user_id": user}).json()["events"]
    return [(e["action"], e["actor"]) for e in events]


def test_every_audit_event_names_the_callers_key(api, serve_app) -> None:  # type: ignore[no-untyped-def]
    """The shared app's keys are named after themselves: each event's actor is the key that made it."""
    admin, writer, user = api("acme-admin"), api("acme-writer"), _user()
    # Concurrent writes of two keys share commits; each keeps its own actor.
    ids: dict[str, list[str]] = {"acme-admin": [], "acme-writer": []}

    def write(key: str, client: httpx.Client, i: int) -> None:
        answer = client.post("/v1/memories", json={"user_id": user, "content": f"note {i} written with {key}"})
        assert answer.status_code == 201, answer.text
        ids[key] += answer.json()["ids"]

    threads = [threading.Thread(target=write, args=(key, client, i)) for i in range(6)
               for key, client in (("acme-admin", api("acme-admin")), ("acme-writer", api("acme-writer")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key, written in ids.items():
        assert len(written) == 6
        for memory_id in written:
            assert _actors(admin, user, memory_id) == [("created", key)]
    patched, deleted = ids["acme-writer"][0], ids["acme-writer"][1]
    assert admin.patch(f"/v1/memories/{patched}", params={"user_id": user}, json={"importance": 0.9}).status_code == 200
    assert writer.delete(f"/v1/memories/{deleted}", params={"user_id": user}).status_code == 200
    assert _actors(admin, user, patched) == [("created", "acme-writer"), ("updated", "acme-admin")]
    assert _actors(admin, user, deleted) == [("created", "acme-writer"), ("deleted", "acme-writer")]
    # Extraction from a writer's conversations: what it creates and supersedes is the writer's.
    for session, text in (("s1", "I prefer VS Code for coding."),
                          ("s2", "Actually I switched from VS Code to Neovim last month.")):
        sent = writer.post("/v1/conversations", json={"user_id": user, "session_id": session, "mode": "rules",
                                                      "messages": [{"role": "user", "content": text}]})
        assert sent.status_code == 202, sent.text
        assert _wait_job(writer, sent.json()["job_id"])["state"] == "succeeded"
    old = writer.get("/v1/memories", params={"user_id": user, "status": "superseded"}).json()["memories"]
    assert old and "VS Code" in old[0]["content"]
    assert admin.post(f"/v1/memories/{old[0]['id']}/restore", params={"user_id": user}).status_code == 200
    assert _actors(admin, user, old[0]["id"]) == [("created", "acme-writer"), ("superseded", "acme-writer"),
                                                  ("restored", "acme-admin")]
    extracted = [m for m in writer.get("/v1/memories", params={"user_id": user, "limit": 100}).json()["memories"]
                 if "Neovim" in m["content"]]
    assert extracted and all(actor == "acme-writer" for m in extracted for _, actor in _actors(admin, user, m["id"]))
    # An import submitted over HTTP: its memories are the admin's.
    root = Path(serve_app["settings"].imports.root)
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{user}.jsonl").write_text(
        f'{{"user_id": "{user}", "session_id": "s9", "role": "user", "content": "imported: I run on Fridays", '
        f'"message_id": "m1", "created_at": "2025-03-01T10:00:00+00:00"}}\n', encoding="utf-8")
    submitted = admin.post("/v1/jobs/import", json={"path": f"{user}.jsonl", "mode": "raw"})
    assert submitted.status_code == 202, submitted.text
    assert _wait_job(admin, submitted.json()["job_id"])["state"] == "succeeded"
    (imported,) = [m for m in admin.get("/v1/memories", params={"user_id": user, "limit": 100}).json()["memories"]
                   if m["content"].startswith("imported:")]
    assert _actors(admin, user, imported["id"]) == [("created", "acme-admin")]
