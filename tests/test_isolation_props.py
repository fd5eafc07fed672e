"""Tenant isolation over HTTP, as properties: whatever user id, query, filter or memory id a caller
sends, recall, list, get and history return only that caller's own memories, in its own org.

A few memories of two users of org acme and one of org globex (the same user id as one of acme's)
are written once per module through the real Serve app; hypothesis then varies the keys, user ids
(injection-shaped, wildcard, non-Latin, NUL, empty, too long), queries, filters and memory ids.
Ids the identifier rules refuse must get a clear 422, never a skip. Last, every endpoint listed in
the live OpenAPI document is called with each key against a memory, user, session and job of the
other org, and must answer exactly as it answers for ones that do not exist at all.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from agent_memory.models import MAX_ID_CHARS
from tests.conftest import API_KEYS, ROOT

settings.register_profile(
    "ci", max_examples=100, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("ci")

KEYS = ["acme-admin", "acme-writer", "acme-reader", "globex-admin"]
ORG_OF = {key: org for key, (org, _) in API_KEYS.items()}
ROLE_OF = {key: role for key, (_, role) in API_KEYS.items()}
ROLES = ("none", "reader", "writer", "admin")

# A made-up word in every memory of the population: letters only, so redaction leaves it alone.
CANARY = "zephyrquill"
PLAIN = "alice"
NASTY = "alice' OR '1'='1 -- \"%_\\ 张伟"
TEAM = "team' OR '1'='1"
# Who holds memories: (org, user id). globex's user has acme's plain user's id.
OWNERS = [("acme", PLAIN), ("acme", NASTY), ("globex", PLAIN)]
# The same metadata on everyone's memories, so that a filter matches other users' memories too.
SHARED_METADATA = {"shared": "x' OR '1'='1", "pct": "100%_", "nul": "a\x00b", "bs": "back\\slash",
                   "zh": "张伟", "n": 7, "flag": True, "none": None}

INJECTIONS = [
    "' OR 1=1 --", "' OR '1'='1", "x' OR user_id != '", '" OR ""="', "') OR ('1'='1", "\\", "\\'", "%", "_",
    "%_%", "*", "NULL", "'; DROP TABLE memories; --", "org_id = 'globex'", "张伟", "пользователь", "مستخدم",
    "ユーザー", "🙂", "\u200b", "\x00", " ", "", "\t\n", "\u3000", "a" * (MAX_ID_CHARS + 1), "é" * MAX_ID_CHARS,
]
# Any Unicode text (NUL and control characters included); lone surrogates cannot be sent as UTF-8.
ANY_TEXT = st.characters(codec="utf-8")


def id_problem(value: str) -> bool:
    """Whether the identifier rules (agent_memory.models.check_identifier) refuse `value`."""
    return not value.strip() or len(value) > MAX_ID_CHARS or "\x00" in value


def near_misses(user_id: str) -> list[str]:
    """Ids a careless filter would confuse with `user_id`: wildcards, case, padding, prefixes."""
    return [user_id + "%", user_id[:-1] + "_", user_id[:-1] + "%", user_id.upper(), f" {user_id}", f"{user_id} ",
            user_id[:3], user_id + "\x00", f"{user_id}' OR '1'='1", user_id.replace("'", "''"),
            user_id.replace("\\", "\\\\")]


KNOWN_USERS = sorted({user for _, user in OWNERS})
user_ids = st.one_of(
    st.sampled_from(KNOWN_USERS),
    st.sampled_from([miss for user in KNOWN_USERS for miss in near_misses(user)]),
    st.sampled_from(INJECTIONS),
    st.builds(lambda user, suffix: user + suffix, st.sampled_from(KNOWN_USERS), st.sampled_from(INJECTIONS)),
    st.text(ANY_TEXT, max_size=12),
    st.text(ANY_TEXT, min_size=MAX_ID_CHARS - 2, max_size=MAX_ID_CHARS + 2),
)
queries = st.one_of(
    st.sampled_from([CANARY, f"{CANARY} falcon budget", "猎鹰项目 预算", "100%", "x' OR '1'='1", "张伟", "*", "NULL",
                     "\\", "\x00", " ", "", '"quoted"']),
    st.builds(lambda a, b: f"{a} {b}", st.sampled_from([CANARY, "falcon"]), st.sampled_from(INJECTIONS)),
    st.text(ANY_TEXT, max_size=40),
)
filter_values = st.one_of(
    st.sampled_from(list(SHARED_METADATA.values()) + [PLAIN, NASTY]),
    st.text(ANY_TEXT, max_size=12), st.integers(), st.booleans(), st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
filter_keys = st.one_of(st.sampled_from([*SHARED_METADATA, "owner"]), st.sampled_from(INJECTIONS[:22]),
                        st.text(ANY_TEXT, max_size=12))
filters = st.one_of(
    st.none(),
    st.sampled_from([{k: v} for k, v in SHARED_METADATA.items()] + [{"owner": PLAIN}, {"owner": NASTY}]),
    st.dictionaries(filter_keys, filter_values, max_size=3),
)


@dataclass
class Population:
    """The memories written for this module, and a client per key."""

    url: str
    clients: dict[str, httpx.Client]
    owned: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    absent: dict[str, Any] = field(default_factory=dict)

    @property
    def every_id(self) -> set[str]:
        return set().union(*self.owned.values())

    def own(self, key: str, user_id: str) -> set[str]:
        return self.owned.get((ORG_OF[key], user_id), set())


@pytest.fixture(scope="module")
def population(serve_app: dict[str, Any]) -> Iterator[Population]:
    url = str(serve_app["url"])
    clients = {key: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) for key in KEYS}
    pop = Population(url=url, clients=clients)
    writer = {"acme": "acme-writer", "globex": "globex-admin"}
    for org, user in OWNERS:
        label = f"{org}/{'plain' if user == PLAIN else 'nasty'}"
        memories = [
            {"content": f"{CANARY} falcon budget for {label}: 100% approved, don't tell 张伟 \"quoted\" back\\slash"},
            {"content": f"{CANARY} 猎鹰项目 预算 {label}", "memory_type": "procedural"},
            {"content": f"{CANARY} x' OR '1'='1 -- {label} NUL\x00byte", "memory_type": "episodic"},
        ]
        body = {"memories": [{**m, "user_id": user, "team_id": TEAM, "metadata": {**SHARED_METADATA, "owner": user}}
                             for m in memories]}
        r = clients[writer[org]].post("/v1/memories", json=body)
        assert r.status_code == 201, r.text
        pop.owned[(org, user)] = set(r.json()["ids"])
    assert len(pop.every_id) == 3 * len(OWNERS)
    # How a memory that exists nowhere is refused: every refusal must read the same.
    pop.absent = clients["acme-reader"].get("/v1/memories/absent-0", params={"user_id": PLAIN}).json()
    yield pop
    for client in clients.values():
        client.close()


def assert_invalid(r: httpx.Response) -> None:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_input" and error["message"], r.text


def assert_owned(pop: Population, key: str, user_id: str, memory_id: str) -> None:
    """The caller may read `memory_id` as `user_id`'s, and it is that user's, in the caller's org."""
    if memory_id in pop.every_id:
        assert memory_id in pop.own(key, user_id), f"{key} as {user_id!r} got another tenant's {memory_id}"
        return
    # Not the population's (other tests' or the write property's): it must still be the caller's own.
    r = pop.clients[key].get(f"/v1/memories/{quote(memory_id, safe='')}", params={"user_id": user_id})
    assert r.status_code == 200, r.text
    assert (r.json()["org_id"], r.json()["user_id"]) == (ORG_OF[key], user_id)


def test_the_population_is_what_the_properties_assume(population: Population) -> None:
    """The properties are not vacuous: each owner reads its own three memories and recall finds them."""
    for (org, user), ids in population.owned.items():
        key = "acme-reader" if org == "acme" else "globex-admin"
        listed = population.clients[key].get("/v1/memories", params={"user_id": user}).json()["memories"]
        assert {m["id"] for m in listed} == ids
        hits = population.clients[key].post("/v1/memories/search", json={
            "user_id": user, "query": f"{CANARY} falcon budget", "mode": "keyword", "min_score": 0}).json()["memories"]
        assert {h["id"] for h in hits} == ids


# -- properties ----------------------------------------------------------------------------------


@given(key=st.sampled_from(KEYS), user_id=user_ids, query=queries, filters=filters,
       mode=st.sampled_from(["hybrid", "dense", "keyword"]), scope=st.sampled_from(["user", "user", "team"]),
       top_k=st.integers(1, 200))
def test_recall_returns_only_the_callers_own_memories(
    population: Population, key: str, user_id: str, query: str, filters: dict | None, mode: str, scope: str, top_k: int
) -> None:
    body: dict[str, Any] = {"user_id": user_id, "query": query, "mode": mode, "top_k": top_k, "min_score": 0}
    if scope == "team":
        body.update(scope="team", team_id=TEAM)
    if filters is not None:
        body["filters"] = filters
    note(f"{key}: POST /v1/memories/search {body!r}")
    r = population.clients[key].post("/v1/memories/search", json=body)
    event(f"status {r.status_code}, {'hits' if r.status_code == 200 and r.json()['memories'] else 'no hits'}")
    if id_problem(user_id) or not query.strip() or any("\x00" in k for k in filters or {}):
        assert_invalid(r)
        return
    assert r.status_code == 200, r.text
    hits = [hit["id"] for hit in r.json()["memories"]]
    assert len(hits) == len(set(hits)) <= top_k
    if scope == "team":
        # A team search spans the users of the caller's org that carry the team, never another org.
        org_ids = set().union(*(ids for (org, _), ids in population.owned.items() if org == ORG_OF[key]))
        assert set(hits) & population.every_id <= org_ids, f"{key}: a team search crossed orgs: {hits}"
        assert set(hits) <= org_ids, f"{key}: a team search found what the team does not hold: {hits}"
        return
    for hit in hits:
        assert_owned(population, key, user_id, hit)
    own = population.own(key, user_id)
    if own and filters is None and mode == "dense" and top_k >= len(own):
        # Dense recall with min_score 0 answers every active memory: the caller's own, all of them.
        assert set(hits) == own


@given(key=st.sampled_from(KEYS), user_id=user_ids, limit=st.one_of(st.integers(1, 4), st.integers(-1, 1001)),
       status=st.one_of(st.sampled_from(["active", "all"]),
                        st.sampled_from(["superseded", "expired", "ACTIVE", "active' OR '1'='1", "%", "", "\x00"])))
def test_list_returns_only_the_callers_own_memories(
    population: Population, key: str, user_id: str, limit: int, status: str
) -> None:
    client, seen, cursor = population.clients[key], [], None
    for _ in range(20):
        params: dict[str, Any] = {"user_id": user_id, "limit": limit, "status": status}
        if cursor is not None:
            params["cursor"] = cursor
        note(f"{key}: GET /v1/memories {params!r}")
        r = client.get("/v1/memories", params=params)
        event(f"status {r.status_code}")
        if id_problem(user_id) or not 1 <= limit <= 1000 or status not in ("active", "all", "superseded", "expired"):
            assert_invalid(r)
            return
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["memories"]) <= limit
        for memory in page["memories"]:
            assert (memory["org_id"], memory["user_id"]) == (ORG_OF[key], user_id), memory
            seen.append(memory["id"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert not set(seen) & (population.every_id - population.own(key, user_id))
    if status in ("active", "all"):
        assert set(seen) & population.every_id == population.own(key, user_id)


memory_ids = st.one_of(
    st.integers(0, 3 * len(OWNERS) - 1),  # a population memory, by its place in the sorted ids
    st.sampled_from([i for i in INJECTIONS if i.strip() and "/" not in i]),
    st.text(ANY_TEXT, min_size=1, max_size=40).filter(lambda s: "/" not in s and s not in (".", "..")),
)


@given(key=st.sampled_from(KEYS), user_id=st.one_of(st.none(), user_ids), memory=memory_ids,
       what=st.sampled_from(["", "/history"]))
def test_get_and_history_answer_another_tenants_memory_as_absent(
    population: Population, key: str, user_id: str | None, memory: int | str, what: str
) -> None:
    """`memory` is a population memory (by number) or any id; `user_id` None is its owner's id, which
    in the other org is a different user of the same name."""
    if isinstance(memory, int):
        memory_id = sorted(population.every_id)[memory]
        owner = next(user for (_, user), ids in population.owned.items() if memory_id in ids)
    else:
        memory_id, owner = memory, PLAIN
    user_id = owner if user_id is None else user_id
    note(f"{key}: GET /v1/memories/{memory_id!r}{what} user_id={user_id!r}")
    r = population.clients[key].get(f"/v1/memories/{quote(memory_id, safe='')}{what}", params={"user_id": user_id})
    event(f"status {r.status_code}")
    if id_problem(user_id) or id_problem(memory_id):
        assert_invalid(r)
        return
    if memory_id in population.own(key, user_id):
        assert r.status_code == 200, r.text
        if what:
            assert {e["user_id"] for e in r.json()["events"]} == {user_id}
        else:
            assert (r.json()["org_id"], r.json()["user_id"], r.json()["id"]) == (ORG_OF[key], user_id, memory_id)
        return
    # Another user's or org's memory reads exactly as one that does not exist: status and message.
    assert r.status_code == 404, r.text
    assert r.json() == json.loads(json.dumps(population.absent).replace("absent-0", _json_str(memory_id))), r.text


def _json_str(value: str) -> str:
    """`value` as it appears inside a JSON string."""
    return json.dumps(value)[1:-1]


@settings(max_examples=50)
@given(user_id=user_ids.map(lambda u: u + "-w" if u in KNOWN_USERS else u), content=queries, metadata=st.dictionaries(filter_keys, filter_values, max_size=3))
def test_what_a_user_writes_only_that_user_reads(
    population: Population, user_id: str, content: str, metadata: dict[str, Any]
) -> None:
    acme, globex = population.clients["acme-writer"], population.clients["globex-admin"]
    note(f"acme-writer: POST /v1/memories user_id={user_id!r} content={content!r} metadata={metadata!r}")
    r = acme.post("/v1/memories", json={"user_id": user_id, "content": content, "metadata": metadata})
    event(f"status {r.status_code}")
    if id_problem(user_id) or not content.strip() or any(not k or len(k) > 128 for k in metadata):
        assert_invalid(r)
        return
    if r.status_code == 409:  # the same text for the same user with other metadata: a derived-id conflict
        assert r.json()["error"]["code"] == "idempotency_conflict"
        return
    assert r.status_code == 201, r.text
    (memory_id,) = r.json()["ids"]
    path = f"/v1/memories/{memory_id}"
    stored = population.clients["acme-reader"].get(path, params={"user_id": user_id})
    assert stored.status_code == 200 and (stored.json()["org_id"], stored.json()["user_id"]) == ("acme", user_id)
    other = PLAIN if user_id != PLAIN else NASTY
    for client, as_user in ((globex, user_id), (acme, other)):
        assert client.get(path, params={"user_id": as_user}).status_code == 404
        listed = client.get("/v1/memories", params={"user_id": as_user, "limit": 1000, "status": "all"}).json()
        assert memory_id not in {m["id"] for m in listed["memories"]}
        search = {"user_id": as_user, "query": content, "mode": "dense", "top_k": 200, "min_score": 0}
        stored_filters = {k: v for k, v in stored.json()["metadata"].items() if "\x00" not in k}
        for body in (search, {**search, "filters": stored_filters}):
            hits = client.post("/v1/memories/search", json=body)
            assert hits.status_code == 200, hits.text
            assert memory_id not in {h["id"] for h in hits.json()["memories"]}


# -- every endpoint, against the other org's things ---------------------------------------------


@dataclass(frozen=True)
class Target:
    """The things a request names: a user, a memory (and its client id), a session, a job."""

    user: str
    memory: str
    client_id: str
    idempotency_key: str
    session: str
    job: str

    def replacements(self) -> dict[str, str]:
        return {self.memory: "<memory>", self.job: "<job>", self.client_id: "<client-id>",
                self.idempotency_key: "<key>", self.session: "<session>", self.user: "<user>"}


def _documented_roles() -> dict[tuple[str, str], str]:
    """(method, path with `{}` for each parameter) -> role, from the endpoints table of docs/api.md."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(GET|POST|PATCH|PUT|DELETE) (/[^`]*)` \| (\w+) \|", text, flags=re.M)
    return {(method, re.sub(r"\{[^}]*\}", "{}", path)): role for method, path, role in rows}


def _victims(clients: dict[str, httpx.Client], run: str) -> dict[str, Target]:
    """In each org, a throwaway user with a memory (written with a client id and an idempotency key
    that the other org then uses too), a session and its conversation job."""
    victims = {}
    for org, key in (("acme", "acme-admin"), ("globex", "globex-admin")):
        user, session = f"victim-{org}-{run}", f"session-{org}-{run}"
        r = clients[key].post("/v1/memories", headers={"Idempotency-Key": f"shared-key-{run}"}, json={
            "user_id": user, "id": f"shared-id-{run}", "content": f"{CANARY} victim secret of {org}"})
        assert r.status_code == 201, r.text
        job = clients[key].post("/v1/conversations", json={
            "user_id": user, "session_id": session, "mode": "raw",
            "messages": [{"role": "user", "content": f"{CANARY} victim turn of {org}", "message_id": "m1"}]})
        assert job.status_code == 202, job.text
        victims[org] = Target(user=user, memory=r.json()["ids"][0], client_id=f"shared-id-{run}",
                              idempotency_key=f"shared-key-{run}", session=session, job=job.json()["job_id"])
    return victims


def _request(method: str, path: str, operation: dict, target: Target) -> dict[str, Any]:
    """A well-formed request for `operation` that names `target`'s things wherever it names any."""
    by_name = {"memory_id": target.memory, "job_id": target.job, "session_id": target.session,
               "user_id": target.user}
    url = re.sub(r"\{([^}]*)\}", lambda m: quote(by_name.get(m[1], target.memory), safe=""), path)
    params, headers = {}, {}
    for param in operation.get("parameters", []):
        if param["in"] == "query" and param.get("required"):
            params[param["name"]] = by_name.get(param["name"], target.user)
        if param["in"] == "header" and param["name"].lower() == "idempotency-key":
            headers["Idempotency-Key"] = target.idempotency_key
    request: dict[str, Any] = {"method": method, "url": url, "params": params, "headers": headers}
    bodies = {
        "POST /v1/memories": {"user_id": target.user, "id": target.client_id, "content": "probe",
                              "created_at": "2025-01-01T00:00:00Z"},
        "POST /v1/memories/search": {"user_id": target.user, "query": f"{CANARY} victim secret", "min_score": 0},
        # The session's turns; its recall is the search's, probed above (a second probe's buffered
        # hits would land in the erasure's access count on one side only, as the flush falls).
        "POST /v1/context": {"user_id": target.user, "session_id": target.session,
                             "query": f"{CANARY} victim secret", "top_k": 0},
        "PATCH /v1/memories/{memory_id}": {"importance": 0.9},
        "POST /v1/memories/{memory_id}/feedback": {"signal": "useful", "note": "probe"},
        "POST /v1/conversations": {"user_id": target.user, "session_id": target.session, "mode": "raw",
                                   "messages": [{"role": "user", "content": "probe", "message_id": "probe-1"}]},
        "POST /v1/jobs/import": {"path": f"absent-{target.user}.jsonl"},
        "POST /v1/jobs/consolidate": {"user_id": target.user},
    }
    if "requestBody" in operation:
        label = f"{method} {path}"
        assert label in bodies, f"{label} is new: give it a body that names the target's things here"
        request["json"] = bodies[label]
    return request


HEX_ID = re.compile(r"\b(?:erase-|consolidation-run-)?[0-9a-f]{12,32}\b")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:\d\d)?")


def _normalized(response: httpx.Response, target: Target) -> tuple[int, str]:
    """Status and body with the target's names and the ids and times the server made blanked out."""
    text = response.text
    for value, placeholder in sorted(target.replacements().items(), key=lambda kv: -len(kv[0])):
        text = text.replace(_json_str(value), placeholder)
    return response.status_code, TIMESTAMP.sub("<time>", HEX_ID.sub("<id>", text))


def _settle(clients: dict[str, httpx.Client], jobs: list[tuple[str, str]], timeout_s: float = 300) -> None:
    """Wait for the extraction jobs the calls started, so that what the erasures count is settled.
    (Not for consolidation runs: one that finds the lease taken stays `queued` for good.)"""
    deadline = time.monotonic() + timeout_s
    for key, job_id in jobs:
        while (job := clients[key].get(f"/v1/jobs/{job_id}").json())["state"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
            time.sleep(0.1)


def test_every_endpoint_answers_the_other_orgs_things_as_absent(population: Population) -> None:
    clients = {**population.clients,
               None: httpx.Client(base_url=population.url, timeout=60),
               "not-a-key": httpx.Client(base_url=population.url, headers={"Authorization": "Bearer not-a-key"},
                                         timeout=60)}
    run = uuid.uuid4().hex[:8]
    victims = _victims(clients, run)
    documented = _documented_roles()
    doc = clients[None].get("/openapi.json").json()
    operations = [(method.upper(), path, op) for path, ops in doc["paths"].items() for method, op in ops.items()]
    assert len(operations) >= 17
    undocumented = [f"{m} {p}" for m, p, _ in operations if (m, re.sub(r"\{[^}]*\}", "{}", p)) not in documented]
    assert not undocumented, f"endpoints missing from the table in docs/api.md: {undocumented}"
    # Reads first: then what a read answers does not depend on what the caller's own writes left.
    operations.sort(key=lambda o: (o[0] not in ("GET", "HEAD") and not o[1].endswith("/search"), o[0] == "DELETE"))

    absent = {org: Target(user=f"absent-{org}-{run}", memory=uuid.uuid4().hex, client_id=f"absent-id-{run}",
                          idempotency_key=f"absent-key-{run}", session=f"absent-session-{run}", job=uuid.uuid4().hex)
              for org in ("acme", "globex")}
    jobs: list[tuple[str, str]] = []
    checked = 0
    for method, path, op in operations:
        if method == "DELETE" and jobs:
            _settle(clients, jobs)
            jobs.clear()
        role_needed = documented[(method, re.sub(r"\{[^}]*\}", "{}", path))]
        by_id = any(p["in"] == "path" and p["name"] not in ("user_id", "session_id") for p in op.get("parameters", []))
        for key in [*KEYS, None, "not-a-key"]:
            own_org = ORG_OF.get(key or "", "acme")
            victim = victims["globex" if own_org == "acme" else "acme"]
            answers = []
            for target in (victim, absent[own_org]):
                r = clients[key].request(**_request(method, path, op, target))
                answers.append(r)
                if r.status_code == 202 and "/conversations" in path:
                    jobs.append((str(key), r.json()["job_id"]))
            there, nowhere = answers
            where = f"{method} {path} with {key}"
            assert there.status_code < 500, f"{where}: {there.text}"
            # The other org's things read exactly as things that do not exist: status and body.
            assert _normalized(there, victim) == _normalized(nowhere, absent[own_org]), (
                f"{where}: {there.status_code} {there.text[:300]} / {nowhere.status_code} {nowhere.text[:300]}")
            assert "victim secret of" not in there.text and "victim turn of" not in there.text, where
            if role_needed == "none":
                assert there.status_code == 200, where
            elif key not in ORG_OF:
                assert there.status_code == 401 and there.json()["error"]["code"] == "unauthorized", where
            elif ROLES.index(ROLE_OF[key]) < ROLES.index(role_needed):
                assert there.status_code == 403 and there.json()["error"]["code"] == "forbidden", where
            elif by_id:
                assert there.status_code == 404 and there.json()["error"]["code"] == "not_found", where
            else:
                assert there.status_code in (200, 201, 202, 404), where
            checked += 1
    assert checked == len(operations) * (len(KEYS) + 2)

    # Nothing of either victim was touched: their memory, session and job are as they were.
    for org, key in (("acme", "acme-reader"), ("globex", "globex-admin")):
        victim = victims[org]
        memory = clients[key].get(f"/v1/memories/{victim.memory}", params={"user_id": victim.user})
        assert memory.status_code == 200 and memory.json()["importance"] == 0.5, memory.text
        assert memory.json()["content"] == f"{CANARY} victim secret of {org}"
        history = clients[key].get(f"/v1/memories/{victim.memory}/history", params={"user_id": victim.user}).json()
        assert [e["action"] for e in history["events"]] == ["created"]
        turns = clients[key].get(f"/v1/sessions/{victim.session}/messages", params={"user_id": victim.user}).json()
        assert [t["content"] for t in turns["messages"]] == [f"{CANARY} victim turn of {org}"]
        assert clients[key].get(f"/v1/jobs/{victim.job}").status_code == 200
    for key in (None, "not-a-key"):
        clients[key].close()
