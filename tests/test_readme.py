"""The README's examples, run as written.

- Every `make` target, every `agent-memory` command and every relative link the README names exists.
- Against `agent-memory serve --load-sample` (what `make run` runs) on a store of its own, in a
  directory laid out as a fresh clone (`examples/`, and `./data/lancedb` the server's store): the
  start prints a line for each long phase and no line of the libraries; each curl answers the
  status its comment gives (200 where none) and the documented search answer; the command-line
  block runs through the server, as the README says to (`AGENT_MEMORY_URL`), each command
  answering what it says, the Chinese search finding its memory; the Python snippet runs and writes
  nothing on standard error; then the server stops cleanly on SIGTERM. Only the port is changed:
  `localhost:8000` and `127.0.0.1:8000` become the test's.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from cli.main import cli
from cli.net import free_port
from cli.output import RAY_CORE_LINE
from cli.processes import kill_session
from tests.conftest import ROOT
from tests.test_first_hour import CHATTER, _env, _ready, own_stack  # noqa: F401  (own_stack: a fixture)

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# A line of a library's log: Python logging's level names, as Ray and Serve print them, or Ray's C++ core.
LOG_LINE = re.compile(r"\b(DEBUG|INFO|WARNING)\b")
# What `make run` prints as each long phase starts, in order.
PHASES = ("loading the sample", "starting Ray", "starting the Serve app", "agent-memory is serving at")
START_S = 600
SCRIPT_S = 900
MEMORY_ID = re.compile(r"^[0-9a-f]{32}$")


def _env_here(**extra: str) -> dict[str, str]:
    """The environment of a command run as a user would: the project and its client importable."""
    return {**_env(**extra), "PYTHONPATH": f"{ROOT}:{ROOT / 'clients' / 'python'}"}


def _code(text: str) -> list[str]:
    """The README's code: its fenced blocks and its inline code spans."""
    return [body for _, body in FENCE.findall(text)] + re.findall(r"`([^`\n]+)`", text)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README.read_text(encoding="utf-8")) if lang == language]


def _block_with(language: str, text: str) -> str:
    (block,) = [body for body in _blocks(language) if text in body]
    return block


def _library_lines(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if CHATTER.search(line) or LOG_LINE.search(line) or RAY_CORE_LINE.match(line.encode())]


# -- what the README names exists -------------------------------------------------------------------


def test_every_make_target_the_readme_names_exists() -> None:
    targets = {target for code in _code(README.read_text(encoding="utf-8"))
               for target in re.findall(r"^make ([a-z][a-z-]*)", code, re.MULTILINE)}
    assert {"run", "test", "test-fast", "clean"} <= targets
    for target in sorted(targets):
        ran = subprocess.run(["make", "--no-print-directory", "-n", target], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        assert ran.returncode == 0, f"make {target}: {ran.stderr}"


def test_every_command_the_readme_names_exists() -> None:
    named = {words for code in _code(README.read_text(encoding="utf-8"))
             for words in re.findall(r"(?:^|\s|/)agent-memory ([a-z][a-z-]*(?: [a-z][a-z-]*)?)", code, re.MULTILINE)}
    assert {"add", "search", "import", "forget", "consolidate", "stats", "keys"} <= {w.split()[0] for w in named}
    for words in sorted(named):
        group, *sub = words.split()
        command = cli.get_command(None, group)  # type: ignore[arg-type]
        assert command is not None, f"agent-memory {group}"
        if sub and hasattr(command, "get_command"):
            # `keys create` names a subcommand; `serve --port` or prose after a command does not.
            assert command.get_command(None, sub[0]) is not None, f"agent-memory {words}"


def test_every_relative_link_of_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_the_readme_stays_a_front_page() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) < 250


# -- the examples, run against a server ------------------------------------------------------------


def _run(script: str, *, cwd: Path, env: dict[str, str], executable: str = "bash") -> tuple[str, str]:
    """Run a script in a session of its own (what it starts ends with it); its stdout and stderr."""
    argv = ["bash", "-euo", "pipefail", "-c", script] if executable == "bash" else [executable, "-c", script]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=SCRIPT_S)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 0, f"{script[:2000]}\n--- stdout:\n{out[-3000:]}\n--- stderr:\n{err[-3000:]}"
    return out, err


def _sections(text: str) -> list[tuple[str, str]]:
    """The output of a script whose commands each print `@@ <command>` first: (command, output) pairs."""
    parts = re.split(r"^@@ (.*)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def _start_server(clone: Path, port: int, logs: Path, started: list[subprocess.Popen[bytes]]) -> str:
    env = _env_here(AGENT_MEMORY_STORAGE_URI=str(clone / "data" / "lancedb"))
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--load-sample", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=(logs / "out.log").open("wb"),
                            stderr=(logs / "err.log").open("wb"), start_new_session=True)
    started.append(proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while not (f"agent-memory is serving at {url}" in (logs / "out.log").read_text() and _ready(url)):
        shown = (logs / "out.log").read_text()[-3000:] + (logs / "err.log").read_text()[-3000:]
        assert proc.poll() is None, shown
        assert time.monotonic() < deadline, "the server did not start: " + shown
        time.sleep(0.5)
    return url


def _check_curl_block(clone: Path, port: int) -> None:
    """Each curl as written (but the port), with its status and body; statuses as the comments give them."""
    block = _block_with("bash", "curl -s localhost:8000/v1/memories/search")
    script = block.replace("localhost:8000", f"localhost:{port}")
    # Each curl prints its body, then its status on a line of its own.
    prelude = "curl() { command curl -w '\\n@@ %{http_code}\\n' \"$@\"; }\n"
    out, _ = _run(prelude + script, cwd=clone, env=_env_here())
    answers = re.findall(r"(.*?)\n@@ (\d{3})\n", out, flags=re.DOTALL)
    commands = re.split(r"^(?=curl )", block, flags=re.MULTILINE)[1:]
    assert len(answers) == len(commands) == 4, out
    by_path = {}
    for command, (body, status) in zip(commands, answers, strict=True):
        expected = re.search(r"# -> (\d{3})", command)
        path = re.search(r"localhost:8000(\S+)", command).group(1)  # type: ignore[union-attr]
        assert int(status) == int(expected.group(1) if expected else 200), f"{command}\n-> {status} {body}"
        by_path[path] = json.loads(body)
    assert "Zed" in by_path["/v1/context"]["text"]  # u01's editor, in the block for the prompt
    # The search answer as the README describes it, key for key.
    described = re.search(r"A search answers `(\{.*?\})`", README.read_text(encoding="utf-8"), re.DOTALL)
    keys = re.findall(r'"(\w+)"', described.group(1))  # type: ignore[union-attr]
    search = by_path["/v1/memories/search"]
    hit = search["memories"][0]
    assert search["degraded"] is False
    assert {*search, *hit, *hit["scores"]} == set(keys)
    assert "Zed" in hit["content"]
    assert MEMORY_ID.match(by_path["/v1/memories"]["ids"][0])
    # The conversation's memories are extracted in the background: its job ends well.
    job_id = by_path["/v1/conversations"]["job_id"]
    deadline = time.monotonic() + 300
    while (job := httpx.get(f"http://127.0.0.1:{port}/v1/jobs/{job_id}", timeout=30).json())["state"] not in (
            "succeeded", "failed"):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    assert job["state"] == "succeeded", job


def _check_cli_block(clone: Path, port: int, bin_dir: Path) -> None:
    """The command-line block through the server (AGENT_MEMORY_URL, as the README says), each
    command's answer checked, and no line of the libraries on any command's stderr."""
    block = _block_with("bash", "agent-memory add --user-id alice")
    mentioned = re.search(r"export AGENT_MEMORY_URL=(http://127\.0\.0\.1:8000)", README.read_text(encoding="utf-8"))
    assert mentioned, "the README says how to name the server"
    prelude = "agent-memory() { echo \"@@ $*\"; echo \"@@ $*\" >&2; command agent-memory \"$@\"; }\n"
    env = _env_here(AGENT_MEMORY_URL=f"http://127.0.0.1:{port}", PATH=f"{bin_dir}:{_env()['PATH']}")
    out, err = _run(prelude + block, cwd=clone, env=env)
    ran = _sections(out)
    assert [command.split()[0] for command, _ in ran] == [
        line.split()[1] for line in block.splitlines() if line.startswith("agent-memory ")]
    for command, output in ran:
        verb = command.split()[0]
        if verb == "add":
            assert MEMORY_ID.match(output.strip()), (command, output)
        elif verb == "search" and "--json" in command:
            found = json.loads(output)["memories"]
            assert found and found[0]["content"] == "回答请用要点列出", output  # the Chinese example finds it
        elif verb == "search":
            assert "bullet points" in output.strip().splitlines()[0], output
        elif verb == "forget":
            assert json.loads(output)["erased"]["memories"] >= 2, output
        elif verb == "import":
            report = json.loads(output)
            assert (report["mode"], report["messages_logged"], report["rows_rejected"]) == ("rules", 10, 0), output
            assert report["memories_written"] == 5, output  # as the README counts them
        elif verb == "consolidate":
            assert json.loads(output)["errors"] == [], output
        elif verb == "stats":
            assert json.loads(output)["memories"]["total"] > 0, output
        else:
            raise AssertionError(f"no check for `agent-memory {command}`: add one")
    for command, said in _sections(err):
        assert _library_lines(said) == [], (command, said)
    # What `import --mode rules` stored is alice's, in the org the server answers for.
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        hits = client.post("/v1/memories/search", json={"user_id": "alice", "query": "Which pet do I have?"}).json()
    assert "Miso" in hits["memories"][0]["content"], hits


@pytest.mark.stack
def test_the_readme_runs_as_written(own_stack: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:  # noqa: F811
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "examples").symlink_to(ROOT / "examples")
    bin_dir = tmp_path / "bin"  # `agent-memory`, as `.venv/bin` has it
    bin_dir.mkdir()
    (bin_dir / "agent-memory").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cli.main "$@"\n')
    (bin_dir / "agent-memory").chmod(0o755)
    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir()

    url = _start_server(clone, port, logs, own_stack)

    shown = (logs / "out.log").read_text()
    positions = [shown.find(phase) for phase in PHASES]
    assert -1 not in positions and positions == sorted(positions), shown
    _check_curl_block(clone, port)
    _check_cli_block(clone, port, bin_dir)
    snippet = _block_with("python", "from agent_memory import open_service")
    out, err = _run(snippet + "\nprint(hits[0].content)\n", cwd=clone, env=_env_here(), executable=sys.executable)
    assert out.strip() == "Refunds need two approvals", out
    assert err == "", err[-3000:]  # no line of the libraries, the model's loading bar included
    (server,) = own_stack
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=180) == 0, (logs / "out.log").read_text()[-3000:]
    assert "stopped" in (logs / "out.log").read_text()
    assert _library_lines((logs / "err.log").read_text()) == [], (logs / "err.log").read_text()[-3000:]
    assert not _ready(url)
