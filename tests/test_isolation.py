"""No recall, list, get, update or delete ever returns or touches another user's or org's memory."""

from __future__ import annotations

import itertools

import pytest

from agent_memory.embedding import Embedder
from agent_memory.errors import NotFoundError
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from storage import LanceStore

NASTY_IDS = [
    "alice",
    "u1' OR '1'='1",
    "u1",
    "u1 ",
    " u1",
    "bob smith",
    "x'); DELETE FROM memories; --",
    'quote"double',
    "back\\slash",
    "percent%_wild*",
    "张伟",
    "emoji-🙂",
    "user_id = 'alice'",
    "NULL",
    "a" * 200,
]
ORGS = ["acme", "acme' OR org_id != 'x", "globex"]


@pytest.fixture
def populated(service: MemoryService) -> dict[tuple[str, str], str]:
    ids: dict[tuple[str, str], str] = {}
    for org, user in itertools.product(ORGS, NASTY_IDS):
        content = f"secret project codename for {user!r} in {org!r}: falcon"
        ids[(org, user)] = service.add(org, {"user_id": user, "content": content, "metadata": {"owner": user}})
    return ids


def test_recall_only_sees_own_memories(service: MemoryService, populated: dict[tuple[str, str], str]) -> None:
    for org, user in populated:
        hits = service.recall(org, {"user_id": user, "query": "secret project codename falcon", "top_k": 50}).memories
        assert [h.id for h in hits] == [populated[(org, user)]]
        hits = service.recall(org, {"user_id": user, "query": "falcon", "mode": "keyword", "top_k": 50}).memories
        assert [h.id for h in hits] == [populated[(org, user)]]


def test_list_get_update_delete_stay_inside_scope(service: MemoryService, populated: dict[tuple[str, str], str]) -> None:
    for (org, user), memory_id in populated.items():
        scope = Scope.user(org, user)
        page = service.list(scope, limit=100)
        assert [m.id for m in page.records] == [memory_id]
        others = [mid for key, mid in populated.items() if key != (org, user)]
        for other in others[:5]:
            with pytest.raises(NotFoundError):
                service.get(scope, other)
            with pytest.raises(NotFoundError):
                service.update(scope, other, {"importance": 0.9})
            with pytest.raises(NotFoundError):
                service.delete(scope, other)
            with pytest.raises(NotFoundError):
                service.history(scope, other)
    # Nothing was changed by the refused calls.
    for (org, user), memory_id in populated.items():
        record = service.get(Scope.user(org, user), memory_id)
        assert record.importance == 0.5 and record.user_id == user and record.org_id == org


def test_delete_and_erase_touch_only_their_user(service: MemoryService, populated: dict[tuple[str, str], str]) -> None:
    victim = ("acme", "u1' OR '1'='1")
    service.delete(Scope.user(*victim), populated[victim])
    service.erase_user("acme", "u1")
    for key, memory_id in populated.items():
        if key in (victim, ("acme", "u1")):
            with pytest.raises(NotFoundError):
                service.get(Scope.user(*key), memory_id)
        else:
            assert service.get(Scope.user(*key), memory_id).id == memory_id


def test_same_client_id_in_two_orgs_never_collides(service: MemoryService) -> None:
    a = service.add("acme", {"user_id": "u", "content": "acme fact", "id": "m-1"})
    b = service.add("globex", {"user_id": "u", "content": "globex fact", "id": "m-1"})
    assert a != b
    assert service.get(Scope.user("acme", "u"), "m-1").content == "acme fact"
    assert service.get(Scope.user("globex", "u"), "m-1").content == "globex fact"


@pytest.mark.parametrize("scan_limit", [2_000, 0], ids=["scan", "indexes"])
def test_recall_for_a_caller_kept_to_teams_finds_its_teams_and_no_team(
    service: MemoryService, embedder: Embedder, scan_limit: int
) -> None:
    """The store leaves out other teams' memories, so top_k is filled with what the caller may read."""
    for team in ("support", "sales", "o'team", None):
        service.add_many("acme", [{"user_id": "u1", "team_id": team, "content": f"deploy note {i} of {team}"}
                                  for i in range(3)])
    store = LanceStore(service.store.uri, embedding_model=embedder.name, embedding_dim=embedder.dim,
                       scan_limit=scan_limit)
    reader = MemoryService(store, embedder, service.settings, defer_access=False)
    query = {"user_id": "u1", "query": "deploy note", "top_k": 6, "min_score": 0}

    def teams_of(hits: list) -> set[str]:
        return {h.content.split(" of ", 1)[1] for h in hits}

    try:
        assert len(reader.recall("acme", query).memories) == 6
        for teams, readable in [({"support"}, {"support", "None"}), ({"o'team", "sales"}, {"o'team", "sales", "None"}),
                                (set(), {"None"}), ({"nobody's"}, {"None"})]:
            hits = reader.recall("acme", query, visible_teams=teams).memories
            assert teams_of(hits) <= readable and len(hits) == min(6, 3 * len(readable)), teams
        team_only = reader.recall("acme", {**query, "team_id": "support"}, visible_teams={"support"}).memories
        assert teams_of(team_only) == {"support"}
    finally:
        reader.close()
