"""Settings: grouped in code, read from the flat `AGENT_MEMORY_*` variables, documented from the class."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_memory.settings import FLAT, GROUPS, Settings
from cli.settings_doc import render

ROOT = Path(__file__).resolve().parents[1]


def test_docs_settings_page_is_generated_from_the_class() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == render(), "docs/settings.md is stale: run `python -m cli.settings_doc > docs/settings.md`"


def test_every_variable_keeps_its_flat_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_MEMORY_RECALL_MIN_SCORE", "0.25")
    monkeypatch.setenv("AGENT_MEMORY_WEIGHT_SEMANTIC", "0.6")
    monkeypatch.setenv("AGENT_MEMORY_STORAGE_URI", "/tmp/elsewhere")
    monkeypatch.setenv("AGENT_MEMORY_CONSOLIDATION_DAILY_AT", "4:05")
    monkeypatch.setenv("AGENT_MEMORY_LLM_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AGENT_MEMORY_LLM_MODEL", "m")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.recall.min_score == 0.25 and settings.recall.weight_semantic == 0.6
    assert settings.storage.uri == "/tmp/elsewhere" and settings.consolidation.daily_at == "04:05"
    assert settings.llm.configured and settings.default_conversation_mode == "llm"
    # An argument wins over the environment, by its flat name as a Serve config gives it.
    assert Settings(_env_file=None, recall_min_score=0.5).recall.min_score == 0.5  # type: ignore[call-arg]


def test_the_flat_names_are_the_variables_of_before() -> None:
    # Each group's fields under the names users set: no two groups claim one, none is lost.
    assert len(FLAT) == sum(len(cls.model_fields) for cls in GROUPS.values()) == len(Settings.names())
    for name in ("storage_uri", "embedding_model", "query_embedding_precision", "llm_base_url", "weight_keyword",
                 "recall_scan_limit", "write_window_ms", "consolidation_similarity", "import_root", "api_keys_file"):
        assert name in FLAT


def test_unknown_and_invalid_settings_are_refused() -> None:
    with pytest.raises(ValidationError, match="unknown settings: recall_min_scor"):
        Settings(_env_file=None, recall_min_scor=0.2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        Settings(_env_file=None, recall_min_score=2)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="HH:MM"):
        Settings(_env_file=None, consolidation_daily_at="25:00")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown setting"):
        Settings(_env_file=None).replace(nope=1)  # type: ignore[call-arg]


def test_replace_changes_only_what_it_names_and_validates() -> None:
    base = Settings(_env_file=None, storage_uri="/tmp/a", weight_semantic=0.7)  # type: ignore[call-arg]
    changed = base.replace(storage_uri="/tmp/b", recall_min_score=0)
    assert (changed.storage.uri, changed.recall.min_score, changed.recall.weight_semantic) == ("/tmp/b", 0.0, 0.7)
    assert base.storage.uri == "/tmp/a"
    with pytest.raises(ValidationError):
        base.replace(recall_candidates=0)
