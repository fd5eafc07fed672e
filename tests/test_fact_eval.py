"""Extraction scored turn by turn against human-written facts: Multi-Session Chat's shape and LoCoMo's observations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.evaluation import evaluate_facts, load_fact_dialogues, observation_dialogues, token_f1
from agent_memory.service import MemoryService
from cli.main import main


def test_token_f1() -> None:
    assert token_f1("I have two jobs.", "I have two jobs") == 1.0
    assert token_f1("I have two dogs", "I have two jobs") == pytest.approx(0.75)
    assert token_f1("hello", "I have two jobs") == 0.0


def test_fact_dialogues_are_validated(tmp_path: Path) -> None:
    bad = tmp_path / "dialogues.jsonl"
    bad.write_text('{"id": "d1", "turns": [{"role": "narrator", "content": "x", "fact": ""}]}\n')
    with pytest.raises(InvalidInputError, match="turns"):
        load_fact_dialogues(bad)
    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "d1", "turns": [{"role": "user", "content": "x", "fact": ""}]}\n'
                    '{"id": "d2", "turns": [{"role": "user", "content": "y", "fact": ""}]}\n')
    assert [d["id"] for d in load_fact_dialogues(good, only={"d2"})] == ["d2"]


def _write_observations(tmp_path: Path) -> tuple[Path, Path]:
    history = tmp_path / "history.jsonl"
    rows = [("D1:1", "Ann", "user", "I adopted a cat last week."), ("D1:2", "Bo", "assistant", "Nice! I run marathons."),
            ("D1:3", "Ann", "user", "Cool.")]
    history.write_text("".join(json.dumps({"user_id": "c1", "session_id": "session_1", "role": role, "name": name,
                                           "content": text, "message_id": mid,
                                           "created_at": "2023-05-08T13:56:00+00:00"}) + "\n"
                               for mid, name, role, text in rows))
    observations = tmp_path / "observations.jsonl"
    observations.write_text(
        json.dumps({"user_id": "c1", "speaker": "Ann", "fact": "Ann adopted a cat.", "evidence": ["D1:1"]}) + "\n"
        + json.dumps({"user_id": "c1", "speaker": "Bo", "fact": "Bo runs marathons.", "evidence": ["D1:2", "D1:1"]}) + "\n")
    return history, observations


def test_observations_score_each_speaker_in_turn_as_the_user(tmp_path: Path) -> None:
    ann, bo = observation_dialogues(*_write_observations(tmp_path))
    assert ann["id"] == "c1:Ann" and [t["role"] for t in ann["turns"]] == ["user", "assistant", "user"]
    assert [t["fact"] for t in ann["turns"]] == ["Ann adopted a cat.", "", ""]
    assert [t["role"] for t in bo["turns"]] == ["assistant", "user", "assistant"]
    assert [t["fact"] for t in bo["turns"]] == ["", "Bo runs marathons.", ""]  # not cited on Ann's turn


def test_turn_level_figures_follow_their_definitions(service: MemoryService) -> None:
    dialogue = {"id": "d1", "turns": [
        {"role": "assistant", "content": "Hi! What do you do?", "fact": ""},
        {"role": "user", "content": "I work as a nurse at the city hospital.", "fact": "I am a nurse."},
        {"role": "assistant", "content": "Do you have pets?", "fact": ""},
        {"role": "user", "content": "ok thanks, bye!", "fact": ""},
        {"role": "user", "content": "Hmm, let me think about it.", "fact": "I have a cat."},
    ]}
    report = evaluate_facts(service, [dialogue], "rules")
    assert report["user_turns"] == 3 and report["with_fact"] == 2 and report["base_rate"] == pytest.approx(0.6667)
    assert report["yielded"] == 1 and report["precision"] == 1.0 and report["recall"] == 0.5
    assert report["content_f1"] == pytest.approx(token_f1("I work as a nurse at the city hospital.", "I am a nurse."), abs=1e-4)


@pytest.mark.store
def test_cli_eval_scores_per_turn_facts_and_observations(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_MEMORY_LLM_BASE_URL", raising=False)
    dialogues = tmp_path / "dialogues.jsonl"
    dialogues.write_text(json.dumps({"id": "d1", "turns": [
        {"role": "assistant", "content": "Hi! What do you do?", "fact": ""},
        {"role": "user", "content": "I work as a nurse at the city hospital.", "fact": "I am a nurse."},
        {"role": "assistant", "content": "Shall I set the reminder for 9?", "fact": ""},
        {"role": "user", "content": "ok that works, bye!", "fact": ""},
    ]}) + "\n")
    assert main(["eval", "--facts", str(dialogues), "--json", "--storage-uri", str(tmp_path / "db")]) == 0
    report = json.loads(capsys.readouterr().out)["rules"]
    assert (report["user_turns"], report["with_fact"], report["base_rate"]) == (2, 1, 0.5)
    assert report["precision"] == 1.0 and report["recall"] == 1.0 and 0.0 < report["content_f1"] <= 1.0
    _write_observations(tmp_path)
    assert main(["eval", "--observations", str(tmp_path), "--storage-uri", str(tmp_path / "db")]) == 0
    table = capsys.readouterr().out
    assert "base rate" in table and "content F1" in table and table.splitlines()[1].split()[-1] == "2"
