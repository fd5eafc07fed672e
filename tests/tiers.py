"""The test tiers. Every test gets one tier marker, from what it needs:

- `unit`: no model, no store, no Ray (`make test-fast`, `pytest -m unit`);
- `store`: a real LanceDB on a temporary directory and/or the real model;
- `ray`: the shared local Ray (Ray Data jobs, actors), without Serve;
- `serve`: the shared Serve app over HTTP;
- `stack`: a stack of its own, in subprocesses.

The tier comes from the fixtures a test uses, directly or through other fixtures (FIXTURE_TIERS),
so a new test is marked without anyone thinking of it; a test that builds what it needs in its
body says so with the marker. A session of unit tests fails a test that loads the model or
LanceDB, starts Ray, or runs a Python process it was not marked `unit` for by hand (UnitGuard).
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest

TIERS = ("unit", "store", "ray", "serve", "stack")  # each needs what the ones before it need, or more
# The tier of every test that uses the fixture, directly or through another fixture.
FIXTURE_TIERS = {
    "embedder": "store", "make_service": "store", "service": "store", "s3_server": "store",
    "ray_session": "ray", "serve_app": "serve", "api": "serve",
    "own_stack": "stack",  # stops the shared Ray and Serve for a stack of its own
}
# Run in this order: tests on the shared Ray without Serve (and those needing less) first, then
# those on the shared Serve app, then those that start a stack of their own (they stop the shared
# Ray and Serve first). Serve's replicas and the extraction workers its conversation jobs start
# hold part of one of the node's two CPUs from then on, and a Ray Data task reserves a whole CPU:
# a pipeline run beside them would wait forever (docs/import.md).
STAGES = {"serve": 1, "stack": 2}
VOUCHED = pytest.StashKey[bool]()  # marked `unit` by hand: its Python subprocesses are light


def tier_of(item: pytest.Item) -> str:
    """The tier of a collected test: its fixtures', or its marker's where that is higher. One tier a
    test: a marker below what its fixtures need, or two markers, would put it in two."""
    marked = {m.name for m in item.iter_markers() if m.name in TIERS}
    needs = {f: FIXTURE_TIERS[f] for f in getattr(item, "fixturenames", ()) if f in FIXTURE_TIERS}
    tier = max(marked | set(needs.values()) | {"unit"}, key=TIERS.index)
    if len(marked) > 1 or marked - {tier}:
        uses = ", ".join(sorted(f"{f} ({t})" for f, t in needs.items())) or "no fixture of a tier"
        raise pytest.UsageError(f"{item.nodeid} is marked {' and '.join(sorted(marked))} but uses {uses}: "
                                "give it one tier marker, at least what its fixtures need, or none")
    item.stash[VOUCHED] = "unit" in marked
    return tier


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the markers added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tiers = {item.nodeid: tier_of(item) for item in items}
    for item in items:
        if item.get_closest_marker(tiers[item.nodeid]) is None:
            item.add_marker(tiers[item.nodeid])
    items.sort(key=lambda item: STAGES.get(tiers[item.nodeid], 0))


class UnitGuard:
    """In a session of unit tests only, fails a test that imports the model's or LanceDB's
    libraries, starts Ray, or runs a Python process (ours or Ray's) without being marked `unit`
    by hand. A test that does so needs a heavier tier: the unit tier stays fast without anyone
    checking it. It watches through an audit hook (imports and subprocesses of this process)."""

    HEAVY_MODULES = frozenset({"lancedb", "lance", "torch", "sentence_transformers", "transformers", "onnxruntime"})

    def __init__(self) -> None:
        self.on = False
        self.watching = False
        self.imported: list[str] = []
        self.programs: list[tuple[str, str]] = []  # (the executable, the command line)
        self.ray_before = False

    def install(self) -> None:
        self.on = True
        sys.addaudithook(self._audit)  # an audit hook stays for the process: it only records while watching

    def _audit(self, event: str, args: tuple[object, ...]) -> None:
        if not self.watching or event not in ("import", "subprocess.Popen", "os.posix_spawn"):
            return
        try:  # an exception here would be the audited call's: never raise
            if event == "import":
                top = str(args[0]).partition(".")[0]
                if top in self.HEAVY_MODULES and top not in self.imported:
                    self.imported.append(top)
            else:
                executable, argv = args[0], args[1]
                words = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv)  # type: ignore[call-overload]
                command = " ".join(os.fsdecode(w) if isinstance(w, (bytes, os.PathLike)) else str(w) for w in words[:5])
                self.programs.append((os.fsdecode(executable), command))  # type: ignore[arg-type]
        except Exception:
            pass

    def start(self) -> None:
        self.imported, self.programs, self.ray_before, self.watching = [], [], _ray_running(), True

    def check(self, item: pytest.Item) -> None:
        self.watching = False
        found = [f"imported {name}" for name in self.imported]
        if _ray_running() and not self.ray_before:
            found.append("started Ray")
        if not item.stash.get(VOUCHED, False):
            found += [f"ran {command!r}" for executable, command in self.programs if _ours_or_python(executable)]
        if found:
            pytest.fail(
                f"{item.nodeid} is a unit test but {'; '.join(found)}. The unit tier runs without the model, "
                "LanceDB and Ray: give the test the fixture of what it uses (embedder, service, make_service, "
                "ray_session, serve_app, ...) or mark it store, ray, serve or stack. A test whose Python "
                "subprocess needs none of them is marked unit by hand.", pytrace=False)


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _ours_or_python(executable: str) -> bool:
    """Whether a program is Python (an interpreter, or a script such as `agent-memory` or `ray`), or
    a binary of an installed package (Ray's)."""
    path = Path(shutil.which(executable) or executable).absolute()
    if path.name.startswith("python") or path.resolve() == Path(sys.executable).resolve():
        return True
    if any(path.is_relative_to(sysconfig.get_path(key)) for key in ("purelib", "platlib")):
        return True
    try:
        with path.open("rb") as program:
            first = program.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


UNIT_GUARD = UnitGuard()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.items and all(item.get_closest_marker("unit") for item in session.items):
        UNIT_GUARD.install()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if UNIT_GUARD.on:
        UNIT_GUARD.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    result = yield
    if UNIT_GUARD.on:
        UNIT_GUARD.check(item)
    return result
