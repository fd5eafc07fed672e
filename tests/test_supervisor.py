"""`agent-memory serve`'s supervisor without a server: stop signals passed on, sessions ended
whole, and the kernel's word to the child when the supervisor dies (Linux). Plain processes stand
in for the server; the whole stack is tests/test_stop_and_crash.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cli.processes import dies_with_this_process, kill_session, session_pids
from cli.serve import STOP_SIGNALS, Supervisor, stop_signals

pytestmark = pytest.mark.unit  # plain Python processes stand in for the server
ROOT = Path(__file__).resolve().parents[1]
LINUX = sys.platform.startswith("linux")
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
# A session leader that starts two processes in process groups of their own, as Ray's raylet
# starts its workers, and prints their pids.
SPAWNER = """
import os, subprocess, sys, time
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=os.setpgrp)
        for _ in range(2)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(120)
"""


def _gone(pids: list[int], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_signal_before_the_server_exists_is_passed_on_once_it_does() -> None:
    supervisor = Supervisor()
    supervisor.on_signal(signal.SIGTERM, None)  # between installing the handlers and starting the child
    child = subprocess.Popen(SLEEP, start_new_session=True)
    assert supervisor.watch(child) == -signal.SIGTERM


def test_a_second_signal_ends_the_whole_session() -> None:
    supervisor = Supervisor()
    supervisor.on_signal(signal.SIGTERM, None)
    supervisor.on_signal(signal.SIGINT, None)
    child = subprocess.Popen(SLEEP, start_new_session=True)
    assert supervisor.watch(child) == -signal.SIGKILL


def test_a_stop_signal_ignored_from_the_start_stays_ignored() -> None:
    """`nohup` ignores SIGHUP: the supervisor leaves it so, and stops on the others."""
    # A run started in the background without job control has SIGINT ignored already.
    heard = [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert stop_signals() == [s for s in heard if s != signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, before)
    assert (signal.SIGHUP in stop_signals()) == (signal.SIGHUP in heard)


def test_ending_a_session_reaches_processes_in_groups_of_their_own() -> None:
    leader = subprocess.Popen([sys.executable, "-c", SPAWNER], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert leader.stdout is not None
    kids = [int(p) for p in leader.stdout.readline().split()]
    assert all(os.getpgid(k) == k and os.getsid(k) == leader.pid for k in kids)
    assert sorted(session_pids(leader.pid)) == sorted([leader.pid, *kids])
    kill_session(leader.pid, spare=leader.pid)
    assert _gone(kids) and leader.poll() is None  # spared
    kill_session(leader.pid)
    assert leader.wait(timeout=10) == -signal.SIGKILL and session_pids(leader.pid) == []


@pytest.mark.skipif(not LINUX, reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_hears_of_its_supervisors_death() -> None:
    """A stand-in supervisor starts its child as `agent-memory serve` does, then is killed with SIGKILL: the
    child gets SIGTERM from the kernel."""
    assert dies_with_this_process() is not None
    supervisor = subprocess.Popen([sys.executable, "-c", """
import subprocess, sys, time
from cli.processes import dies_with_this_process
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
                          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\\n"
                          "print('ready', flush=True); time.sleep(120); sys.exit(1)"],
                         start_new_session=True, preexec_fn=dies_with_this_process())
print(child.pid, flush=True)
time.sleep(120)
"""], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    assert supervisor.stdout is not None
    child = psutil.Process(int(supervisor.stdout.readline()))
    time.sleep(1)  # the child's handler is in place
    supervisor.kill()
    supervisor.wait(timeout=10)
    assert _gone([child.pid], timeout=10), "the child outlived its supervisor"
