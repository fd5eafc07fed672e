"""Private memories over HTTP, as properties: whatever user id, query, filter, agent filter, memory
id or time a key of an agent sends, search, context, list (now and as of a moment), get, history
and the timeline return the user's shared memories and that agent's own private ones, never
another agent's private memory, and another agent's memory reads as one that does not exist.

Two users of org acme (one with an injection-shaped id) each hold a memory of no agent, a shared
memory of the planner, and a private memory of the planner and of the support bot, written once per
module through the real Serve app with the agents' own keys; hypothesis varies the rest. No agent's
key exports a user (an export holds every agent's memories). And in the store, whatever restatements
of one fact agents write shared or private, consolidation's plan never merges a private memory with
one of another reader class.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

from agent_memory.consolidation import plan_user
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from tests.conftest import AGENT_KEYS, Clock
from tests.test_isolation_props import INJECTIONS, filters, id_problem, queries

ORG = "acme"
CANARY = "quillhaven"
USERS = ["agent-alice", "agent-alice' OR visibility = 'private' OR '1'='1 -- 张伟"]
# The keys of the properties: two agents' writers, one agent's admin, and an org-level reader.
KEYS = ["acme-planner", "acme-support", "acme-support-admin", "acme-reader"]
AGENT_OF = {key: agent for key, (_, _, agent) in AGENT_KEYS.items()} | {"acme-reader": None}


@dataclass
class Population:
    """Each memory's reader class: (user, agent or None, private or not), and a client per key."""

    clients: dict[str, httpx.Client]
    memories: dict[str, tuple[str, str | None, bool]] = field(default_factory=dict)
    written_at: datetime | None = None

    def readable(self, key: str, user_id: str) -> set[str]:
        """What `key` may read of `user_id`'s memories: all for an org-level key, else the shared ones
        and its agent's private ones."""
        agent = AGENT_OF[key]
        return {m for m, (owner, by, private) in self.memories.items()
                if owner == user_id and (agent is None or not private or by == agent)}

    def forbidden(self, key: str) -> set[str]:
        """Every private memory of another agent than `key`'s."""
        agent = AGENT_OF[key]
        return {m for m, (_, by, private) in self.memories.items() if agent is not None and private and by != agent}


@pytest.fixture(scope="module")
def population(serve_app: dict[str, Any]) -> Iterator[Population]:
    url = str(serve_app["url"])
    keys = [*KEYS, "acme-admin"]
    pop = Population({k: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {k}"}, timeout=60) for k in keys})
    for user in USERS:
        writes = [("acme-admin", None, False), ("acme-planner", "planner", False), ("acme-planner", "planner", True),
                  ("acme-support", "support", True)]
        for key, agent, private in writes:
            label = f"{agent or 'nobody'} {'private' if private else 'shared'}"
            body: dict[str, Any] = {"user_id": user, "content": f"{CANARY} flight notes, {label}: aisle seat, 张伟",
                                    "metadata": {"kind": "x' OR '1'='1"}}
            if private:
                body["visibility"] = "private"
            r = pop.clients[key].post("/v1/memories", json=body)
            assert r.status_code == 201, r.text
            pop.memories[r.json()["ids"][0]] = (user, agent, private)
    pop.written_at = datetime.now(timezone.utc)
    yield pop
    for client in pop.clients.values():
        client.close()


def test_the_population_is_what_the_properties_assume(population: Population) -> None:
    admin = population.clients["acme-reader"]
    for user in USERS:
        listed = {m["id"]: m for m in admin.get("/v1/memories", params={"user_id": user}).json()["memories"]}
        assert set(listed) == population.readable("acme-reader", user) and len(listed) == 4
        assert sorted(m["visibility"] for m in listed.values()) == ["private", "private", "shared", "shared"]
        for key in KEYS[:3]:
            assert len(population.readable(key, user)) == 3


agent_filters = st.one_of(st.none(), st.sampled_from(["planner", "support", "nobody", "planner' OR '1'='1"]),
                          st.sampled_from(INJECTIONS[:12]))
user_ids = st.one_of(st.sampled_from(USERS), st.sampled_from([u + "%" for u in USERS] + [u.upper() for u in USERS]),
                     st.sampled_from(INJECTIONS))


def _check_ids(population: Population, key: str, user_id: str, ids: set[str]) -> None:
    assert not ids & population.forbidden(key), f"{key} as {user_id!r} read another agent's private memory: {ids}"
    known = ids & set(population.memories)
    assert known <= population.readable(key, user_id), f"{key} as {user_id!r} read what it may not: {known}"


@given(key=st.sampled_from(KEYS), user_id=user_ids, query=queries, filters=filters, agent=agent_filters,
       mode=st.sampled_from(["hybrid", "dense", "keyword"]), as_of=st.booleans(), top_k=st.integers(1, 50))
def test_search_never_returns_another_agents_private_memory(
    population: Population, key: str, user_id: str, query: str, filters: dict | None, agent: str | None, mode: str,
    as_of: bool, top_k: int,
) -> None:
    body: dict[str, Any] = {"user_id": user_id, "query": query, "mode": mode, "top_k": top_k, "min_score": 0}
    if filters is not None:
        body["filters"] = filters
    if agent is not None:
        body["agent_id"] = agent
    if as_of:
        body["as_of"] = datetime.now(timezone.utc).isoformat()
    note(f"{key}: POST /v1/memories/search {body!r}")
    r = population.clients[key].post("/v1/memories/search", json=body)
    event(f"status {r.status_code}")
    if id_problem(user_id) or not query.strip() or id_problem(agent or "x") or any("\x00" in k for k in filters or {}):
        assert r.status_code == 422, r.text
        return
    assert r.status_code == 200, r.text
    hits = {h["id"] for h in r.json()["memories"]}
    _check_ids(population, key, user_id, hits)
    if user_id in USERS and filters is None and agent is None and mode == "dense" and top_k >= 4:
        assert hits == population.readable(key, user_id)  # dense with min_score 0: every memory it may read
    # The prompt block recalls through the same filter: no other agent's private text gets into it.
    context = population.clients[key].post("/v1/context", json={"user_id": user_id, "query": query, "top_k": 20})
    assert context.status_code == 200, context.text
    for label in {f"{population.memories[m][1]} private" for m in population.forbidden(key)}:
        assert label not in context.json()["text"]


@given(key=st.sampled_from(KEYS), user_id=user_ids, status=st.sampled_from(["active", "all", "superseded"]),
       as_of=st.one_of(st.none(), st.just("written"), st.just("now")), limit=st.integers(1, 5))
def test_list_and_timeline_never_show_another_agents_private_memory(
    population: Population, key: str, user_id: str, status: str, as_of: str | None, limit: int
) -> None:
    client, seen, cursor = population.clients[key], set(), None
    params: dict[str, Any] = {"user_id": user_id, "status": status, "limit": limit}
    if as_of is not None:
        moment = population.written_at if as_of == "written" else datetime.now(timezone.utc)
        params["as_of"] = moment.isoformat()  # type: ignore[union-attr]
    for _ in range(20):
        note(f"{key}: GET /v1/memories {params!r}")
        r = client.get("/v1/memories", params={**params, **({"cursor": cursor} if cursor else {})})
        if id_problem(user_id):
            assert r.status_code == 422, r.text
            return
        assert r.status_code == 200, r.text
        seen |= {m["id"] for m in r.json()["memories"]}
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    _check_ids(population, key, user_id, seen)
    if user_id in USERS and status in ("active", "all"):
        assert seen == population.readable(key, user_id)
    timeline = client.get(f"/v1/users/{quote(user_id, safe='')}/timeline")
    event(f"timeline {timeline.status_code}")
    if timeline.status_code == 200:
        events = timeline.json()["events"]
        _check_ids(population, key, user_id, {e["memory_id"] for e in events if e["memory_id"]})
        assert all(f"{CANARY} flight notes" not in (e["content"] or "") or e["memory_id"] not in population.forbidden(key)
                   for e in events)


@given(key=st.sampled_from(KEYS), memory=st.integers(0, 7), what=st.sampled_from(["", "/history"]))
def test_another_agents_private_memory_reads_as_absent(population: Population, key: str, memory: int, what: str) -> None:
    memory_id = sorted(population.memories)[memory]
    user_id, _, _ = population.memories[memory_id]
    client = population.clients[key]
    r = client.get(f"/v1/memories/{memory_id}{what}", params={"user_id": user_id})
    note(f"{key}: GET /v1/memories/{memory_id}{what}")
    if memory_id in population.readable(key, user_id):
        assert r.status_code == 200, r.text
        return
    absent = client.get(f"/v1/memories/absent-0{what}", params={"user_id": user_id})
    assert r.status_code == absent.status_code == 404
    assert r.json()["error"]["message"].replace(memory_id, "absent-0") == absent.json()["error"]["message"]
    changes = [client.patch(f"/v1/memories/{memory_id}", params={"user_id": user_id}, json={"importance": 0.9}),
               client.post(f"/v1/memories/{memory_id}/restore", params={"user_id": user_id}),
               client.delete(f"/v1/memories/{memory_id}", params={"user_id": user_id})]
    assert [c.status_code for c in changes] == [404, 404, 404]
    assert population.clients["acme-admin"].get(f"/v1/memories/{memory_id}", params={"user_id": user_id}).json()[
        "importance"] == 0.5


def test_an_agents_key_exports_nothing_and_an_org_key_exports_every_reader_class(population: Population) -> None:
    """An export holds every memory of the user, private ones of any agent included: no agent's key
    gets one, not even an agent's admin key (nor the org's user list); an org-level admin's has all four."""
    for user in USERS:
        path = f"/v1/users/{quote(user, safe='')}/export"
        for key in KEYS[:3]:
            refused = population.clients[key].get(path)
            # A writer lacks the role; an agent's admin is refused for being an agent's.
            code = "agent_forbidden" if AGENT_KEYS[key][1] == "admin" else "forbidden"
            assert refused.status_code == 403 and refused.json()["error"]["code"] == code, refused.text
            assert CANARY not in refused.text
            assert population.clients[key].get("/v1/users").json()["error"]["code"] == "agent_forbidden"
        lines = [json.loads(line) for line in population.clients["acme-admin"].get(path).text.splitlines()]
        exported = {line["id"]: line for line in lines if line["kind"] == "memory"}
        assert set(exported) == population.readable("acme-reader", user)
        assert {(m["agent_id"], m["visibility"]) for m in exported.values()} == {
            (None, "shared"), ("planner", "shared"), ("planner", "private"), ("support", "private")}


# A reader class: (agent, visibility). A memory of no agent is shared.
READER_CLASSES = [(None, "shared"), ("planner", "shared"), ("planner", "private"), ("support", "shared"),
                  ("support", "private")]
RESTATEMENTS = ["The user is allergic to peanuts", "The user is allergic to peanuts.",
                "the user is allergic to peanuts!", "The user has a peanut allergy"]


@given(memories=st.lists(st.tuples(st.sampled_from(RESTATEMENTS), st.sampled_from(READER_CLASSES)),
                         min_size=2, max_size=8))
def test_consolidation_never_merges_a_private_memory_with_another_reader_class(
    service: MemoryService, clock: Clock, memories: list[tuple[str, tuple[str | None, str]]]
) -> None:
    """Whatever restatements of one fact the agents write, shared or private, a consolidation plan's
    clusters hold private memories only with memories of the same agent, private too."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    ids = service.add_many(ORG, [{"user_id": user, "content": text, "agent_id": agent, "visibility": visibility,
                                  "id": f"m{i}"} for i, (text, (agent, visibility)) in enumerate(memories)]).ids
    note(f"{list(zip(ids, memories, strict=True))}")
    scope = Scope.user(ORG, user)
    records, vectors = service.store.user_memories(scope)
    plan = plan_user(scope, records, vectors, clock(), service.settings)
    event(f"clusters {len(plan.clusters)}")
    for cluster in plan.clusters:
        members = [cluster.canonical, *cluster.others]
        classes = {(m.agent_id, m.visibility) for m in members}
        if any(m.visibility == "private" for m in members):
            assert len(classes) == 1, f"a private memory merged across readers: {classes}"
    # The same fact twice in one reader class is merged: the property is not met by merging nothing.
    by_class: dict[tuple[str | None, str], list[str]] = {}
    for text, reader in memories:
        by_class.setdefault(reader, []).append(text)
    if any(len(texts) > len(set(texts)) for texts in by_class.values()):
        assert plan.clusters
