"""What a command writes: its results, and nothing of the libraries unless `--verbose`.

A command prints its result on standard output and its own notices, errors and progress bars on
standard error. Without `-v` the libraries' output stays off the terminal: Python warnings, log
records below ERROR, the model's weight-loading bars, and the lines Ray's C++ core writes straight
to the process's standard error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any, BinaryIO

# A line of Ray's C++ core: `[2025-01-02 03:04:05,678 E 123 123] core_worker.cc:2465: ...`.
RAY_CORE_LINE = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [DIWEF] \d+ \d+\] [\w.]+:\d+: ")


def print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def say(text: str, *, err: bool = False) -> None:
    """Print a line if anyone can still read it: a closed terminal answers writes with EIO."""
    stream = sys.stderr if err else sys.stdout
    try:
        print(text, file=stream, flush=True)
    except OSError:
        # Later lines go nowhere, and an unflushable buffer does not fail the exit.
        quiet = open(os.devnull, "w")  # stands in for the stream until the exit
        if err:
            sys.stderr = quiet
        else:
            sys.stdout = quiet


@contextlib.contextmanager
def quiet_libraries(*, logs: bool = False) -> Iterator[None]:
    """Keep the libraries' own output off the terminal while a command runs: Python warnings
    (Lance's deprecations, LanceDB's and Ray's notices), the model's weight-loading bars, Ray's C++
    lines and, unless `logs`, log records below ERROR (Ray's and Ray Data's start-up and execution
    lines, our own notices too).

    What a command prints itself, its progress bars and its errors stay. Restored on exit, for
    callers that run commands in their own process. A server (`logs`) keeps its log lines and
    its standard error as it is: the processes it starts inherit it and may outlive this one.
    """
    from huggingface_hub.utils import disable_progress_bars

    disabled = logging.root.manager.disable
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        # Read by transformers when it is imported, during the command: its "Loading weights" bar.
        stack.enter_context(disable_progress_bars())
        if not logs:
            logging.disable(logging.WARNING)
            stack.enter_context(_without_ray_core_lines())
        try:
            yield
        finally:
            logging.disable(disabled)


@contextlib.contextmanager
def _without_ray_core_lines() -> Iterator[None]:
    """Drop the lines Ray's C++ core writes to this process's standard error (file descriptor 2).

    Ray Data's actor pools make the driver's core worker log an error line about constructor
    arguments in the object store and `max_restarts` for every pool, however small its arguments
    (ray-project/ray#57733); a user can do nothing about it, and the line stays in the driver's log
    file in Ray's session directory. Python's own writes (results, notices, progress bars) go to
    the terminal directly, through a `sys.stderr` on a copy of it; only what is written to the
    descriptor itself passes through a filter. Nothing is changed when `sys.stderr` is not this
    process's own (a caller that captures it).
    """
    if sys.stderr is not sys.__stderr__ or sys.stderr is None:
        yield
        return
    try:
        sys.stderr.flush()
        terminal = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    python_stderr = sys.stderr
    sys.stderr = open(terminal, "w", encoding=python_stderr.encoding, errors="backslashreplace",
                      buffering=1, closefd=False)
    readable, writable = os.pipe()
    os.dup2(writable, 2)
    os.close(writable)
    forward = threading.Thread(target=_forward, args=(open(readable, "rb", buffering=0),
                                                      open(terminal, "wb", closefd=False)),
                               name="ray-core-lines", daemon=True)
    forward.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # closes the pipe's last writer: the forwarder reads to its end and stops
        forward.join(timeout=5)
        sys.stderr = python_stderr
        os.close(terminal)


def _forward(pipe: BinaryIO, terminal: BinaryIO) -> None:
    """Copy what reaches the pipe to the terminal, line by line, but Ray's core lines."""
    pending = b""
    with pipe:
        while chunk := pipe.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not RAY_CORE_LINE.match(line))
            if kept:
                terminal.write(kept)
                terminal.flush()
    if pending and not RAY_CORE_LINE.match(pending):
        terminal.write(pending)
        terminal.flush()
