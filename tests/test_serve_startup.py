"""Start-up that says so, on a stack of its own (`agent-memory serve` in a subprocess, on a temporary
store and a free port): from its first second until it is ready, its health checks get no answer
(the port is not bound yet) or 503 with a JSON reason, never another component's 404; then 200,
with the stats page and exporter printed and on loopback. The API's requests meanwhile wait or answer
503, never 500."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from cli.net import free_port
from cli.processes import kill_session
from serve_app.config import haproxy_available
from tests.conftest import ROOT, stop_shared_stack

pytestmark = pytest.mark.stack
# Starting Ray, loading the model twice and deploying took about a minute here; a loaded machine
# may take several.
START_S = 600


def _start(store: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, AGENT_MEMORY_STORAGE_URI=str(store), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT),
               AGENT_MEMORY_HAPROXY_STATS_PORT="0", AGENT_MEMORY_HAPROXY_METRICS_PORT="0")
    env.pop("AGENT_MEMORY_API_KEYS_FILE", None)
    return subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pass
    kill_session(proc.pid)


def _answer(client: httpx.Client, url: str) -> tuple[int, dict] | str:
    """(status, JSON body), or what kept an answer from coming (no listener yet, or none in time)."""
    try:
        answer = client.get(url)
    except httpx.TransportError as exc:
        return type(exc).__name__
    assert answer.headers.get("content-type", "").startswith("application/json"), (
        f"{url}: {answer.status_code} {answer.headers.get('content-type')} {answer.text[:300]}")
    return answer.status_code, answer.json()


@pytest.mark.skipif(not haproxy_available(), reason="Serve's own proxy answers 404 until the application is deployed")
def test_health_checks_answer_503_with_a_reason_until_the_server_is_ready(tmp_path: Path) -> None:
    stop_shared_stack()
    port, log = free_port(), tmp_path / "serve.log"
    url = f"http://127.0.0.1:{port}"
    proc = _start(tmp_path / "lancedb", port, log)
    seen: Counter[str] = Counter()
    try:
        deadline = time.monotonic() + START_S
        with httpx.Client(timeout=2) as client:
            while True:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"not ready in {START_S} s; seen {seen}: {log.read_text()[-3000:]}"
                health, ready = _answer(client, f"{url}/healthz"), _answer(client, f"{url}/readyz")
                for path, answer in (("/healthz", health), ("/readyz", ready)):
                    if isinstance(answer, str):
                        seen[f"{path}: {answer}"] += 1
                        continue
                    status, body = answer
                    if status == 200:
                        continue
                    assert status == 503, f"{path}: {status} {body}"
                    # Three shapes: HAProxy's while no application is deployed, then the ingress
                    # replica's own while it starts.
                    reason = (body.get("error", {}).get("message") or body.get("reason")
                              or body.get("checks", {}).get("ingress"))
                    assert reason, f"{path}: 503 without a reason: {body}"
                    seen[f"{path}: 503 {reason.split(':')[0]}"] += 1
                # The API's requests wait for the replica's start (up to a while) or answer 503:
                # never a 500 from a route that ran before what it reads was opened.
                api = _answer(client, f"{url}/v1/memories?user_id=probe")
                if isinstance(api, str):
                    seen[f"/v1/memories: {api}"] += 1
                else:
                    assert api[0] in (200, 401, 503), f"/v1/memories: {api}"  # 401: a keys file in the checkout
                    seen[f"/v1/memories: {api[0]}"] += 1
                if health == (200, {"status": "ok"}):
                    break
                time.sleep(0.25)
        assert any(": 503 " in kind for kind in seen), seen  # the start was seen, not only a closed port
        # Said once ready, with the stats page and the exporter, which answer on loopback.
        deadline = time.monotonic() + 60
        while "HAProxy stats: " not in (text := log.read_text()):
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(0.5)
        assert f"agent-memory is serving at {url}" in text
        line = next(line for line in text.splitlines() if line.startswith("HAProxy stats: "))
        stats, metrics = (part.split()[0] for part in line.removeprefix("HAProxy stats: ").split("Prometheus: "))
        assert stats.startswith("http://127.0.0.1:") and line.endswith("(this machine only)"), line
        assert httpx.get(stats, timeout=30).status_code == 200
        assert "haproxy_" in httpx.get(metrics, timeout=30).text
    finally:
        _stop(proc)
