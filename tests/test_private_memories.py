"""Memories private to an agent, on a real LanceDB and the bundled model: who reads them (the store
filters, as it filters by tenant), what consolidation and extraction may do with them, what an
export and an erasure cover, and a store made before the field, which opens with every memory shared."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from agent_memory.consolidation import plan_user
from agent_memory.errors import InvalidInputError, NotFoundError
from agent_memory.extraction import extract_and_store
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from storage import LanceStore
from storage import schema as sc
from tests.conftest import Clock

ORG = "acme"


def _population(service: MemoryService) -> dict[str, str]:
    """One user's memories: shared ones (of no agent, of the planner) and private ones of two agents."""
    ids = service.add_many(ORG, [
        {"user_id": "u1", "content": "The user drinks green tea every morning"},
        {"user_id": "u1", "content": "The user books flights with Lufthansa", "agent_id": "planner"},
        {"user_id": "u1", "content": "The planner suspects the user dislikes layovers", "agent_id": "planner",
         "visibility": "private"},
        {"user_id": "u1", "content": "The support bot flagged a refund dispute about a flight", "agent_id": "support",
         "visibility": "private"},
    ]).ids
    return dict(zip(("shared", "planner_shared", "planner_private", "support_private"), ids, strict=True))


def _seen(service: MemoryService, viewer: str | None) -> dict[str, set[str]]:
    scope = Scope.user(ORG, "u1", viewer)
    recalled = service.recall(ORG, {"user_id": "u1", "query": "flight tea layovers refund", "min_score": 0,
                                    "mode": "dense", "top_k": 50}, viewer_agent=viewer).memories
    events, _ = service.timeline(scope)
    return {
        "list": {r.id for r in service.list(scope, limit=100, status=None).records},
        "recall": {h.id for h in recalled},
        "timeline": {e["memory_id"] for e in events},
    }


def test_an_agent_reads_the_shared_memories_and_its_own_private_ones(service: MemoryService) -> None:
    ids = _population(service)
    shared = {ids["shared"], ids["planner_shared"]}
    expected = {None: set(ids.values()), "planner": shared | {ids["planner_private"]},
                "support": shared | {ids["support_private"]}, "stranger": shared}
    for viewer, wanted in expected.items():
        assert _seen(service, viewer) == {"list": wanted, "recall": wanted, "timeline": wanted}, viewer
    # By id, another agent's private memory reads as one that does not exist, and cannot be changed.
    support = Scope.user(ORG, "u1", "support")
    for read in (lambda: service.get(support, ids["planner_private"]),
                 lambda: service.history(support, ids["planner_private"]),
                 lambda: service.update(support, ids["planner_private"], {"importance": 0.9}),
                 lambda: service.feedback(support, ids["planner_private"], {"signal": "wrong"}),
                 lambda: service.delete(support, ids["planner_private"])):
        with pytest.raises(NotFoundError):
            read()
    assert service.get(Scope.user(ORG, "u1"), ids["planner_private"]).importance == 0.5
    # The agent filter of a search names whose memories to find; it never widens what the caller reads.
    found = service.recall(ORG, {"user_id": "u1", "query": "refund dispute", "agent_id": "support",
                                 "min_score": 0}, viewer_agent="planner").memories
    assert found == []
    assert service.get(Scope.user(ORG, "u1"), ids["support_private"]).visibility == "private"


def test_a_private_memory_needs_its_agent_and_an_org_may_make_private_the_default(
    make_service: Callable[..., MemoryService], clock: Clock
) -> None:
    service = make_service(clock=clock, default_visibility_by_org={"secretive": "private"})
    with pytest.raises(InvalidInputError, match="private memory needs its agent_id"):
        service.add(ORG, {"user_id": "u1", "content": "nobody's secret", "visibility": "private"})
    kept = service.add("secretive", {"user_id": "u1", "content": "The planner's own note", "agent_id": "planner"})
    assert service.get(Scope.user("secretive", "u1"), kept).visibility == "private"
    plain = service.add("secretive", {"user_id": "u1", "content": "A memory of no agent"})
    assert service.get(Scope.user("secretive", "u1"), plain).visibility == "shared"
    elsewhere = service.add(ORG, {"user_id": "u1", "content": "The planner's note elsewhere", "agent_id": "planner"})
    assert service.get(Scope.user(ORG, "u1"), elsewhere).visibility == "shared"


def test_consolidation_never_merges_across_readers(service: MemoryService, clock: Clock) -> None:
    text = "The user is allergic to peanuts"
    ids = service.add_many(ORG, [
        {"user_id": "u1", "content": text, "agent_id": "planner", "id": "shared-1"},
        {"user_id": "u1", "content": text + ".", "agent_id": "planner", "id": "shared-2"},
        {"user_id": "u1", "content": text, "agent_id": "planner", "visibility": "private", "id": "mine"},
        {"user_id": "u1", "content": text, "agent_id": "support", "visibility": "private", "id": "theirs"},
    ]).ids
    records, vectors = service.store.user_memories(Scope.user(ORG, "u1"))
    plan = plan_user(Scope.user(ORG, "u1"), records, vectors, clock(), service.settings)
    merged = [{c.canonical.id, *(o.id for o in c.others)} for c in plan.clusters]
    assert merged == [{ids[0], ids[1]}]  # the two shared restatements, and only them


def _said(service: MemoryService, turn: str, session: str, agent: str) -> list[str]:
    records = service.message_records(ORG, "u1", session, [{"role": "user", "content": turn, "message_id": session}],
                                      agent_id=agent)
    service.log_messages(ORG, records)
    return extract_and_store(service, ORG, records, "rules", actor="test").created


def test_a_private_statement_never_retires_a_shared_memory(make_service: Callable[..., MemoryService],
                                                            clock: Clock) -> None:
    shared = make_service(clock=clock)
    (old,) = _said(shared, "My favourite food is sushi.", "s1", "planner")
    clock.advance(days=1)
    private = make_service(clock=clock, default_visibility="private")
    (new,) = _said(private, "My favourite food is ramen.", "s2", "planner")
    everyone = Scope.user(ORG, "u1")
    assert (private.get(everyone, old).status, private.get(everyone, new).visibility) == ("active", "private")
    # Said again to the planner in the same words, it reinforces the planner's private memory.
    clock.advance(days=1)
    assert _said(private, "My favourite food is ramen.", "s3", "planner") == []
    assert private.get(everyone, new).source_ids == ["s2", "s3"]
    # A shared statement of another agent retires the shared memory, and leaves the planner's private one alone.
    (third,) = _said(shared, "My favourite food is pho.", "s4", "support")
    assert private.get(everyone, old).status == "superseded" and private.get(everyone, old).superseded_by == third
    assert private.get(everyone, new).status == "active"


def test_export_and_erasure_cover_private_memories(service: MemoryService) -> None:
    ids = _population(service)
    lines = list(service.export_user(Scope.user(ORG, "u1")))
    exported = {line["id"]: line["visibility"] for line in lines if line["kind"] == "memory"}
    assert exported[ids["planner_private"]] == "private" and exported[ids["shared"]] == "shared"
    events = [line for line in lines if line["kind"] == "event" and line["memory_id"] == ids["support_private"]]
    assert [(e["agent_id"], e["visibility"]) for e in events] == [("support", "private")]
    receipt = service.erase_user(ORG, "u1")
    assert receipt["rows_deleted"]["memories"] == 4
    assert service.list(Scope.user(ORG, "u1"), status=None).records == []
    service.restore_user(ORG, [json.dumps(line) for line in lines])
    assert service.get(Scope.user(ORG, "u1"), ids["planner_private"]).visibility == "private"
    with pytest.raises(NotFoundError):
        service.get(Scope.user(ORG, "u1", "support"), ids["planner_private"])


def _old_layout(path: Path, dim: int, model: str) -> None:
    """A store as written before memories had a visibility and feedback: the tables without those columns."""
    import lancedb

    db = lancedb.connect(str(path))
    memories = pa.schema([f for f in sc.memories_schema(dim, model) if f not in sc.ADDED_MEMORY_FIELDS],
                         metadata=sc.memories_schema(dim, model).metadata)
    events = pa.schema([f for f in sc.EVENTS_SCHEMA if f not in sc.ADDED_EVENT_FIELDS])
    vector = (np.ones(dim, dtype=np.float32) / np.sqrt(dim)).tolist()
    row = {"id": "m1", "org_id": ORG, "team_id": None, "user_id": "u1", "agent_id": "planner", "session_id": None,
           "content": "The user likes the window seat", "index_text": "The user likes the window seat",
           "keywords": "user like window seat", "memory_type": "semantic", "importance": 0.5, "confidence": 1.0,
           "status": "active", "superseded_by": None, "valid_from": Clock().now, "valid_to": None,
           "created_at": Clock().now, "updated_at": Clock().now, "last_accessed_at": None, "access_count": 0,
           "expires_at": None, "source_ids": [], "metadata": "{}", "metadata_kv": [], "oov": 0.0, "origin_hash": "h",
           "vector": vector}
    db.create_table(sc.MEMORIES, pa.Table.from_pylist([row], schema=memories), data_storage_version="2.1")
    event = {"id": "e1", "org_id": ORG, "user_id": "u1", "memory_id": "m1", "action": "created", "actor": "test",
             "created_at": Clock().now, "before": None, "after": '{"content": "The user likes the window seat"}'}
    db.create_table(sc.EVENTS, pa.Table.from_pylist([event], schema=events), data_storage_version="2.1")


def test_a_store_made_before_visibility_opens_with_every_memory_shared(
    make_service: Callable[..., MemoryService], tmp_path: Path, embedder
) -> None:
    _old_layout(tmp_path / "lancedb", embedder.dim, embedder.name)
    service = make_service()
    store = service.store
    assert isinstance(store, LanceStore)
    for name in (sc.MEMORIES, sc.EVENTS):
        assert {"visibility"} <= set(store.connection.table(name).schema.names)
    assert store.connection.table(sc.MEMORIES).schema.metadata[sc.MODEL_KEY] == embedder.name.encode()
    old = service.get(Scope.user(ORG, "u1", "support"), "m1")  # shared: another agent reads it
    assert (old.visibility, old.feedback_offset, old.feedback_at) == ("shared", 0.0, None)
    assert [e.visibility for e in service.history(Scope.user(ORG, "u1", "support"), "m1")] == ["shared"]
    hits = service.recall(ORG, {"user_id": "u1", "query": "window seat"}, viewer_agent="support").memories
    assert [h.id for h in hits] == ["m1"]
    # New rows go in beside the old ones, and a second opening adds nothing.
    service.add(ORG, {"user_id": "u1", "content": "A private note", "agent_id": "planner", "visibility": "private"})
    again = LanceStore(service.settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
    assert again.connection.table(sc.MEMORIES).schema == store.connection.table(sc.MEMORIES).schema
    assert len(service.list(Scope.user(ORG, "u1", "support")).records) == 1
