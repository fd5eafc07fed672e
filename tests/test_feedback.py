"""Feedback on memories, on a real LanceDB and the bundled model: how far a vote moves a memory's
importance, how that fades, where it stops, what recall weighs, `outdated` and its restore, and the
audit event; the arithmetic itself without a store."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent_memory.errors import ConflictError, InvalidInputError
from agent_memory.feedback import effective_importance, remaining
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from tests.conftest import Clock

U = Scope.user("acme", "u1")
DAY = 86_400.0


def test_what_is_left_of_a_vote_halves_every_half_life_and_past_votes_only_count() -> None:
    now = 100 * DAY
    left = remaining(np.array([0.4, -0.4, 0.4, 0.4]), np.array([now, now - 30 * DAY, np.nan, now + DAY]), now, 30.0)
    assert left.tolist() == pytest.approx([0.4, -0.2, 0.0, 0.0])
    assert effective_importance(np.array([0.9, 0.1]), np.array([0.5, -0.5]), np.array([now, now]), now, 30.0).tolist() == [
        1.0, 0.0]


def test_useful_and_wrong_move_importance_within_bounds_and_fade(service: MemoryService, clock: Clock) -> None:
    memory = service.add("acme", {"user_id": "u1", "content": "The user prefers aisle seats", "importance": 0.5})
    up = service.feedback(U, memory, {"signal": "useful"}, actor="bot")
    step, cap = service.settings.feedback.step, service.settings.feedback.max_offset
    assert (up.importance, up.feedback_offset, up.feedback_at) == (0.5, pytest.approx(step), clock())
    for _ in range(5):  # votes in a row add up to the cap, never past it
        up = service.feedback(U, memory, {"signal": "useful"}, actor="bot")
    assert up.feedback_offset == pytest.approx(cap)
    clock.advance(days=service.settings.feedback.half_life_days)
    hit = service.recall("acme", {"user_id": "u1", "query": "aisle seats"}).memories[0]
    assert hit.scores.importance == pytest.approx(0.5 + cap / 2, abs=1e-6)  # recall weighs what is left
    down = service.feedback(U, memory, {"signal": "wrong", "note": "asked about trains"}, actor="bot")
    assert down.feedback_offset == pytest.approx(cap / 2 - step)
    for _ in range(5):  # never below 0 in all: a low importance has less room down
        down = service.feedback(U, memory, {"signal": "wrong"}, actor="bot")
    assert down.feedback_offset == pytest.approx(-cap)
    clock.advance(days=3650)
    assert service.recall("acme", {"user_id": "u1", "query": "aisle seats"}).memories[0].scores.importance == (
        pytest.approx(0.5, abs=1e-6))
    low = service.add("acme", {"user_id": "u1", "content": "The user once mentioned a red car", "importance": 0.1})
    assert service.feedback(U, low, {"signal": "wrong"}, actor="bot").feedback_offset == pytest.approx(-0.1)


def test_outdated_expires_a_memory_until_it_is_restored(service: MemoryService, clock: Clock) -> None:
    memory = service.add("acme", {"user_id": "u1", "content": "The user lives in Lisbon"})
    gone = service.feedback(U, memory, {"signal": "outdated", "note": "moved, call me at +1 415 555 0100"},
                            actor="support-bot")
    assert (gone.status, gone.valid_to) == ("expired", clock())
    assert service.recall("acme", {"user_id": "u1", "query": "where does the user live"}).memories == []
    with pytest.raises(ConflictError) as twice:
        service.feedback(U, memory, {"signal": "outdated"}, actor="support-bot")
    assert twice.value.code == "not_active"
    clock.advance(hours=1)
    back = service.restore(U, memory, actor="ops")
    assert (back.status, back.valid_to) == ("active", None)
    assert [h.id for h in service.recall("acme", {"user_id": "u1", "query": "where does the user live"}).memories] == [
        memory]
    events = service.history(U, memory)
    assert [e.action for e in events] == ["created", "feedback", "restored"]
    vote = events[1]
    assert vote.actor == "support-bot" and vote.after["signal"] == "outdated" and vote.after["status"] == "expired"
    assert "[PHONE]" in vote.after["note"] and "555" not in vote.after["note"]  # the note is redacted as content is
    with pytest.raises(ConflictError) as active:
        service.restore(U, memory, actor="ops")
    assert active.value.code == "not_superseded"


@pytest.mark.parametrize("vote", [{"signal": "great"}, {"signal": "useful", "note": "x" * 1001}, {},
                                  {"signal": "useful", "weight": 3}])
def test_a_bad_vote_is_refused_and_changes_nothing(service: MemoryService, vote: dict) -> None:
    memory = service.add("acme", {"user_id": "u1", "content": "The user likes jazz"})
    with pytest.raises(InvalidInputError):
        service.feedback(U, memory, vote, actor="bot")
    assert [e.action for e in service.history(U, memory)] == ["created"]
    assert math.isclose(service.get(U, memory).feedback_offset, 0.0)
