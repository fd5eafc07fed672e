"""The learned decision: weights shipped as JSON and run on numpy, candidates and their clauses scored."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from agent_memory.decision import BUNDLED, DecidedExtractor, DecisionModel, proposals
from agent_memory.decision.extractor import joined, parts
from agent_memory.decision.features import SIGNALS, contexts, signals
from agent_memory.decision.model import Head
from agent_memory.embedding import Embedder
from agent_memory.errors import InvalidInputError
from agent_memory.extraction import build_extractor, extract_and_store
from agent_memory.models import MessageRecord, Scope
from agent_memory.rules import ProposedMemory, RulesExtractor
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from tests.conftest import ROOT


def _messages(*turns: tuple[str, str]) -> list[MessageRecord]:
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    return [MessageRecord(id=f"r{i}", org_id="o", user_id="u", session_id="s", message_id=f"m{i}", role=role,
                          content=content, created_at=base + timedelta(minutes=i))
            for i, (role, content) in enumerate(turns)]


def _candidate(content: str, message: MessageRecord, rule: str = "clause") -> ProposedMemory:
    return ProposedMemory(content=content, memory_type="semantic", importance=0.5, confidence=0.65,
                     source_ids=[message.message_id], message=message, extractor="rules", rule=rule)


def test_bundled_weights_match_the_signals_the_code_computes() -> None:
    model = DecisionModel.load(BUNDLED)
    assert model.signals == SIGNALS
    assert model.heads["text"].inputs == 384 + len(SIGNALS) and model.heads["signals"].inputs == len(SIGNALS)
    assert 0.0 < model.threshold < 1.0 and model.embedding_model == "all-MiniLM-L6-v2"
    message = _messages(("user", "I have two dogs."))[0]
    assert len(signals(_candidate("I have two dogs.", message), contexts([message])[message.message_id])) == len(SIGNALS)


def test_a_model_round_trips_through_json_and_picks_its_head(tmp_path: Path) -> None:
    def head(inputs: int, weight: float) -> Head:
        return Head(np.zeros(inputs, np.float32), np.ones(inputs, np.float32),
                    ((np.full((inputs, 1), weight, np.float32), np.zeros(1, np.float32)),), (2.0, -1.0))

    model = DecisionModel(("a", "b"), "all-MiniLM-L6-v2", {"text": head(5, 1.0), "signals": head(2, -1.0)}, 0.6, {})
    model.save(tmp_path / "model.json")
    loaded = DecisionModel.load(tmp_path / "model.json")
    signals_ = np.array([[1.0, 0.0], [1.0, 0.0]])
    vectors = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    p = loaded.probabilities(signals_, vectors, np.array([True, False]))
    # text head: z = 3, calibrated 2*3-1 = 5; signals head: z = -1, calibrated -3.
    assert p == pytest.approx([1 / (1 + np.exp(-5.0)), 1 / (1 + np.exp(3.0))], abs=1e-6)
    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(InvalidInputError, match="not a decision model"):
        DecisionModel.load(tmp_path / "other.json")


@pytest.mark.unit  # a light subprocess: numpy and the package, no model
def test_the_decision_runs_without_training_libraries() -> None:
    code = ("import sys; from agent_memory.decision import DecisionModel; DecisionModel.load(); "
            "assert not any(m.split('.')[0] in ('sklearn', 'scipy') for m in sys.modules), 'training library loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_statement_splits_into_its_clauses_and_keeps_what_is_left_whole() -> None:
    message = _messages(("user", "x"))[0]
    pieces = parts(_candidate("Bringing something to a potluck on Saturday and I have type 1 diabetes.", message))
    assert [p.content for p in pieces] == ["Bringing something to a potluck on Saturday", "and I have type 1 diabetes."]
    assert joined(["and I have type 1 diabetes."]) == "I have type 1 diabetes."
    # A change of mind, an instruction, an answer and Chinese stay whole.
    flip = _candidate("I quit the orchestra, I sing in a choir now", message)
    flip.retracts = "strong"
    assert parts(flip) == []
    assert parts(_candidate("我有痛风，周末和朋友聚会要吃火锅", message)) == []
    assert parts(_candidate("I have two dogs.", message)) == []


def test_sentences_the_rules_leave_out_are_proposed_where_the_model_reads_them() -> None:
    messages = _messages(("assistant", "Do you like cars?"), ("user", "Cars are my thing. Can you recommend a museum?"),
                         ("user", "车是我的爱好。"))
    found = proposals(messages, RulesExtractor())
    extra = [c for c in found if c.rule == "sentence"]
    assert [c.content for c in extra] == ["Cars are my thing."]
    assert all(c.message.message_id != "m2" for c in extra)  # Chinese waits for a gloss into English
    assert [c.content for c in proposals(messages, RulesExtractor(), sentences_too=False)] == [
        c.content for c in RulesExtractor().extract(messages)]


def test_a_candidate_s_confidence_blends_the_model_s_probability_with_its_rule_s() -> None:
    messages = _messages(("user", "I work as a nurse and I love hiking."), ("user", "Scratch that, I hate hiking now."))
    model = DecisionModel.load(BUNDLED)
    rules = RulesExtractor().extract(messages)
    alone = DecidedExtractor(model, None, rule_weight=0.0).extract(messages)
    blended = DecidedExtractor(model, None, rule_weight=0.2).extract(messages)
    assert [c.content for c in blended] == [c.content for c in rules] and any(c.retracts for c in rules)
    for rule, p, c in zip(rules, alone, blended, strict=True):
        mixed = 0.8 * p.confidence + 0.2 * rule.confidence
        floor = rule.confidence if rule.retracts else 0.0  # a change of mind keeps at least its rule's
        assert c.confidence == pytest.approx(max(mixed, floor), abs=1e-3)


def test_the_bundled_decision_keeps_facts_and_drops_chit_chat(embedder: Embedder) -> None:
    messages = _messages(
        ("assistant", "Hi! How are you today?"),
        ("user", "I'm good, thanks! I have two dogs and I work as a nurse at night."),
        ("assistant", "That sounds busy."),
        ("user", "It is what it is lol. The weather is nice today though."),
    )
    extractor = DecidedExtractor.bundled(embedder)
    found = extractor.extract(messages)
    kept = [c for c in found if c.confidence >= extractor.model.threshold]
    assert any("two dogs" in c.content for c in kept) and any("nurse" in c.content for c in kept)
    assert not any("weather" in c.content or "what it is" in c.content for c in kept)


def _converse(service: MemoryService, user: str, turns: list[tuple[str, str]]) -> list[str]:
    """One conversation through offline extraction; the user's active memories after it."""
    messages = [{"role": role, "content": text, "message_id": f"{user}:m{i}"} for i, (role, text) in enumerate(turns)]
    records = service.message_records("acme", user, "s1", messages)
    service.log_messages("acme", records)
    extract_and_store(service, "acme", records, "rules", actor="test")
    return [r.content for r in service.list(Scope.user("acme", user), limit=100).records]


def test_offline_extraction_stores_what_the_decision_keeps(service: MemoryService) -> None:
    """The model's probability is each candidate's confidence: a durable fact reaches
    `extraction_min_confidence` and is stored; what states nothing of the user is not."""
    assert isinstance(build_extractor(service.settings, "rules", service.embedder), DecidedExtractor)
    stored = _converse(service, "u1", [
        ("assistant", "Hi! What should I know about you?"),
        ("user", "I work as a nurse on night shifts and I'm allergic to peanuts."),
        ("assistant", "Thanks, noted. Anything else?"),
        ("user", "Lovely, thanks for telling me!"),
        ("assistant", "Shall I set the reminder for 9?"),
        ("user", "ok that works, bye!"),
    ])
    assert any("nurse" in m for m in stored) and any("peanuts" in m for m in stored)
    assert not any("Lovely" in m or "bye" in m for m in stored)
    # Each stored memory's confidence is the model's probability, at or above the setting.
    records = service.list(Scope.user("acme", "u1"), limit=100).records
    assert all(r.confidence >= service.settings.extraction.min_confidence for r in records)


def test_a_candidate_under_the_bar_is_not_stored(service: MemoryService) -> None:
    """Someone else's fact is proposed by the grammar and scored under the bar: counted, not stored."""
    messages = [{"role": "user", "content": "My coworker thinks pineapple on pizza is a crime.", "message_id": "u2:m0"}]
    records = service.message_records("acme", "u2", "s1", messages)
    service.log_messages("acme", records)
    found = DecidedExtractor.bundled(service.embedder).extract(records)
    result = extract_and_store(service, "acme", records, "rules", actor="test")
    assert len(result.created) == sum(c.confidence >= 0.6 for c in found)
    assert result.below_confidence == sum(c.confidence < 0.6 for c in found)


def test_the_rules_own_confidences_are_a_setting_away(tmp_path: Path) -> None:
    settings = Settings(storage_uri=str(tmp_path), _env_file=None, extraction_decision="rules")  # type: ignore[call-arg]
    extractor = build_extractor(settings, "rules")
    assert type(extractor) is RulesExtractor
