"""The test tiers (tests/conftest.py): a test's tier comes from the fixtures it uses and its markers,
and a session of unit tests fails a unit test that loads LanceDB or runs a Python process it was not
marked for. Checked on tests written here, in a pytest of their own (a subprocess)."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.unit  # the pytest subprocess collects these tests, and runs the unit ones

SAMPLE = '''
import subprocess
import sys

import pytest


def test_pure(clock, rows, tmp_path):
    assert rows.message_records("acme", "u1", "s1", [{"role": "user", "content": "hi"}])


def test_on_a_store(service):
    pass


def test_on_ray(make_service, ray_session):
    pass


def test_over_http(api):
    pass


@pytest.mark.store
def test_marked_store():
    pass


@pytest.mark.parametrize("engine", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_by_parameter(engine):
    pass


@pytest.mark.stack
def test_a_stack_of_its_own():
    pass


def test_loads_lancedb_unmarked():
    import lancedb  # noqa: F401


def test_runs_python_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.unit
def test_runs_python_marked_unit():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_runs_a_shell():
    subprocess.run(["sh", "-c", "true"], check=True)
'''

# Prints each collected test's tier, selected or not.
TIER_PRINTER = '''
TIERS = ("unit", "store", "ray", "serve", "stack")


def _show(items, how):
    for item in items:
        print("TIER", item.name, [m.name for m in item.iter_markers() if m.name in TIERS], how)


def pytest_deselected(items):
    _show(items, "deselected")


def pytest_collection_finish(session):
    _show(session.items, "selected")
'''


def test_tiers_are_derived_and_the_unit_tier_stays_light(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # none of the installed plugins is needed here
    pytester.makeconftest("from tests.conftest import *  # noqa: F403 (the suite's fixtures, tiers and guard)\n")
    pytester.makepyfile(test_sample=SAMPLE, tier_printer=TIER_PRINTER)
    result = pytester.runpytest_subprocess("-m", "unit", "-p", "tier_printer", "-p", "no:cacheprovider",
                                           "-W", "ignore::pytest.PytestUnknownMarkWarning")
    tiers = {}
    for line in result.outlines:
        if line.startswith("TIER "):
            _, name, marks, how = line.split(" ", 3)
            tiers[name] = (marks, how)
    assert tiers == {
        "test_pure": ("['unit']", "selected"),
        "test_on_a_store": ("['store']", "deselected"),
        "test_on_ray": ("['ray']", "deselected"),
        "test_over_http": ("['serve']", "deselected"),
        "test_marked_store": ("['store']", "deselected"),
        "test_by_parameter[local]": ("['unit']", "selected"),
        "test_by_parameter[ray]": ("['ray']", "deselected"),
        "test_a_stack_of_its_own": ("['stack']", "deselected"),
        "test_loads_lancedb_unmarked": ("['unit']", "selected"),
        "test_runs_python_unmarked": ("['unit']", "selected"),
        "test_runs_python_marked_unit": ("['unit']", "selected"),
        "test_runs_a_shell": ("['unit']", "selected"),
    }, result.outlines
    # The guard: the test that loaded LanceDB and the one that ran Python unmarked fail, by name.
    result.assert_outcomes(passed=6, errors=2, deselected=6)
    errors = "\n".join(result.outlines)
    assert "test_loads_lancedb_unmarked is a unit test but imported lancedb" in errors
    assert "test_runs_python_unmarked is a unit test but ran '" in errors
    assert "test_runs_python_marked_unit is a unit test" not in errors
