"""Without --address (or RAY_ADDRESS) a command starts a Ray of its own: it never joins the cluster
that Ray's `ray_current_cluster` file names (another program's, or a dead one), in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
# A port nothing listens on: joining it fails or waits, never succeeds.
DEAD_ADDRESS = "127.0.0.1:1"


@pytest.fixture
def ray_tmpdir() -> Iterator[Path]:
    """A Ray temp dir of this test's own, short for Ray's socket paths, whose `ray_current_cluster`
    names a dead cluster (the machine's own /tmp/ray is left be)."""
    root = Path(tempfile.mkdtemp(prefix="amr-", dir="/tmp"))
    (root / "ray").mkdir()
    (root / "ray" / "ray_current_cluster").write_text(DEAD_ADDRESS)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.stack
def test_import_on_ray_starts_its_own_ray_despite_a_recorded_dead_cluster(ray_tmpdir: Path, tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text("".join((ROOT / "examples" / "sample_history.jsonl").read_text().splitlines(True)[:40]))
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(RAY_TMPDIR=str(ray_tmpdir), HF_HUB_OFFLINE="1", AGENT_MEMORY_STORAGE_URI=str(tmp_path / "lancedb"))
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "import", str(history), "--engine", "ray", "--report", str(tmp_path / "r.json")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["engine"] == "ray" and report["memories_written"] == 40, report
    # Its own Ray ran in the given temp dir, and the dead cluster's record is still the only one.
    assert any(p.name.startswith("session_") for p in (ray_tmpdir / "ray").iterdir())
    assert (ray_tmpdir / "ray" / "ray_current_cluster").read_text() == DEAD_ADDRESS


def test_address_defaults_to_ray_address_and_else_to_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def address() -> str | None:
        return cli.commands["import"].make_context("import", ["history.jsonl"]).params["address"]

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert address() is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6380")
    assert address() == "10.0.0.5:6380"
