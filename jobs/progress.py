"""The progress bar of a long job at a terminal: what is done of how much, the rate and the time left.

A job is told whether to show one (the CLI shows it where standard error is a terminal, never in
a log or a pipe); hidden, every call does nothing.
"""

from __future__ import annotations

import os
import sys
from typing import Any


class ProgressBar:
    """A tqdm bar on standard error, or nothing where it is not shown; as a context manager, closed
    at the end of the block however it ends."""

    def __init__(self, total: int | None, *, desc: str, unit: str, show: bool) -> None:
        self._bar: Any = None
        if show:
            from tqdm import tqdm

            # The terminal's size as it changes; one that tells none (0 x 0) would show nothing:
            # it gets 80 columns and 20 lines.
            sized = _columns() > 0
            self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=sized,
                             ncols=None if sized else 80, nrows=None if sized else 20)

    def update(self, done: int) -> None:
        """Count `done` more units."""
        if self._bar is not None:
            self._bar.update(done)

    def stage(self, desc: str, total: int | None = None) -> None:
        """Name the stage the job is in; a `total` starts the count (and its clock) again from zero."""
        if self._bar is None:
            return
        self._bar.set_description_str(desc, refresh=total is None)
        if total is not None:
            self._bar.reset(total=total)

    def close(self) -> None:
        """Leave the bar as it ended."""
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _columns() -> int:
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 0
