"""The extraction evaluation: the rules extractor meets its targets on the set in the repo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.evaluation import evaluate_extraction, fact_matches, load_extraction_cases
from agent_memory.service import MemoryService
from cli.main import main
from tests.conftest import ROOT

CASES = ROOT / "examples" / "extraction_cases.jsonl"


def test_fact_matching() -> None:
    assert fact_matches("green tea", "I prefer green tea over coffee.")
    assert fact_matches("周五 会议", "周五我要专心写代码，千万别给我安排任何会议。")
    assert fact_matches("Zed", "其实我上个月已经从Emacs换成Zed了。")
    assert fact_matches("meetings Fridays", "never schedule a meeting on Friday")
    assert not fact_matches("green tea", "I prefer black tea.")
    assert not fact_matches("杭州", "我住在成都")


def test_rules_meet_precision_and_recall_targets(service: MemoryService) -> None:
    cases = load_extraction_cases(CASES)
    assert {c["lang"] for c in cases} == {"en", "zh"} and any(c["superseded"] for c in cases)
    report = evaluate_extraction(service, cases, "rules")
    assert report["precision"] >= 0.9 and report["recall"] >= 0.6
    for lang in ("en", "zh"):
        assert report["by_lang"][lang]["precision"] >= 0.9 and report["by_lang"][lang]["recall"] >= 0.6
    assert report["forbidden_hits"] == 0 and report["flips_retired"] == 1.0


def test_bad_cases_file_is_a_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"messages": [], "expected": []}\n')
    with pytest.raises(InvalidInputError, match="messages"):
        load_extraction_cases(bad)


@pytest.mark.store
def test_cli_eval_extraction_prints_precision_and_recall(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    small = tmp_path / "cases.jsonl"
    lines = CASES.read_text(encoding="utf-8").splitlines()
    small.write_text("\n".join(lines[:3] + lines[-3:]) + "\n", encoding="utf-8")
    monkeypatch.delenv("AGENT_MEMORY_LLM_BASE_URL", raising=False)
    assert main(["eval", "--extraction", str(small), "--json", "--storage-uri", str(tmp_path / "db")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"rules"} and report["rules"]["cases"] == 6
    assert 0.0 <= report["rules"]["precision"] <= 1.0 and 0.0 <= report["rules"]["recall"] <= 1.0
    assert main(["eval", "--storage-uri", str(tmp_path / "db")]) == 2
