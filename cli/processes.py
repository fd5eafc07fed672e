"""The processes of a session: listed (psutil), ended whole, and a child told by the kernel when its
parent dies (Linux's PR_SET_PDEATHSIG, which psutil has no counterpart for).

`agent-memory serve` runs its server in a session of its own, and `cli.local_cluster` each Ray node:
every process they start stays in that session, whatever process group it leads.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable

import psutil

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def session_pids(sid: int) -> list[int]:
    """The live processes (not zombies) of session `sid`."""
    pids = []
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] not in GONE and os.getsid(process.pid) == sid:
                pids.append(process.pid)
        except (ProcessLookupError, PermissionError):  # gone meanwhile, or another user's
            continue
    return pids


def kill_session(sid: int, *, spare: int | None = None) -> None:
    """SIGKILL every process of session `sid` but `spare`, and any they start meanwhile.

    Ray's workers lead process groups of their own inside the session, so the group of the
    session's leader is not enough.
    """
    for _ in range(50):
        pids = [pid for pid in session_pids(sid) if pid != spare]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def dies_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel send the child SIGTERM when this process dies (Linux's
    PR_SET_PDEATHSIG), or None where prctl is unavailable: the child then watches its parent pid.

    The setting belongs to the thread that starts the child, here the main thread, which lives as
    long as the process. It runs in the child between fork and exec, after start_new_session's
    setsid(); neither setsid nor exec clears it.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # should it fail, the child's watch remains
        if os.getppid() != parent:  # this process died before the call: no signal will ever come
            os._exit(1)

    return set_death_signal
