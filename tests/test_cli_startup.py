"""Loading the CLI (every command, `--help` included) imports none of the heavy engines: LanceDB
opens with a store, Ray with an actor or a job, Ray Serve when the app is built, the model and an
LLM client where they are used. Their speed is measured in benchmarks/cli_startup.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit  # a bare interpreter loading the CLI
ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("lancedb", "lance", "ray", "torch", "onnxruntime", "transformers", "sentence_transformers", "openai")

LOADED = f"""
import json, sys
import cli.main
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & set({list(HEAVY)!r}))))
"""


def test_loading_the_cli_imports_no_heavy_engine() -> None:
    done = subprocess.run([sys.executable, "-c", LOADED], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_help_answers_without_them() -> None:
    done = subprocess.run([sys.executable, "-m", "cli.main", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "serve" in done.stdout and "import" in done.stdout
