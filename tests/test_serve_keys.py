"""Keys and limits over HTTP, on the shared Serve app: keys made with `agent-memory keys` work and
stop working without a restart, team keys, a key's own rate limit and its 429, the org quota.

These tests edit the shared app's keys file through the CLI; `keys_file` restores its exact bytes
afterwards, and the keys other tests use are in every version the server reads in between.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agent_memory.merge import superseded
from agent_memory.models import OrgScope, Scope, utcnow
from cli.main import main
from serve_app.limits import running_replicas
from storage import LanceStore
from tests.conftest import QUOTAS, users_on_each_shard

# The replica looks at the keys file once a second; the bound leaves room for a loaded machine.
RELOADED_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def keys_file(serve_app: dict[str, object]) -> Iterator[Path]:
    """The shared app's keys file, put back byte for byte (and mode) when this module is done."""
    path = Path(serve_app["settings"].auth.api_keys_file)  # type: ignore[attr-defined]
    original, mode = path.read_bytes(), path.stat().st_mode
    yield path
    restored = path.with_name(f".{path.name}.restore")
    restored.write_bytes(original)
    os.chmod(restored, mode)
    os.replace(restored, path)


def _issue(capsys: pytest.CaptureFixture[str], keys_file: Path, *argv: str) -> dict:
    assert main(["keys", "create", "--keys-file", str(keys_file), "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _revoke(capsys: pytest.CaptureFixture[str], keys_file: Path, name: str) -> None:
    assert main(["keys", "revoke", "--keys-file", str(keys_file), name]) == 0
    capsys.readouterr()


def _until(status: int, request: Callable[[], httpx.Response]) -> httpx.Response:
    """The first answer with `status`, asked until the server has re-read the keys file."""
    deadline = time.monotonic() + RELOADED_WITHIN_S
    while True:
        answer = request()
        if answer.status_code == status or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def _user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def _store(serve_app: dict[str, object]) -> LanceStore:
    """The shared app's store, opened beside it (for what the API cannot make at once)."""
    return LanceStore(serve_app["settings"].storage.uri, embedding_model=None, embedding_dim=None)  # type: ignore[attr-defined]


def _supersede(serve_app: dict[str, object], org_id: str, user_id: str, memory_id: str, by_id: str) -> None:
    """Retire a stored memory in favour of another, as extraction or consolidation would."""
    store, scope = _store(serve_app), Scope.user(org_id, user_id)
    (record,) = store.get_memories(scope, [memory_id], with_vectors=True)
    assert store.replace_memories(scope, [superseded(record, by_id, utcnow())]) == 1


def _forbidden(answer: httpx.Response, code: str = "team_forbidden") -> None:
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == code, answer.text


def test_a_created_key_works_at_once_and_a_revoked_one_stops(api, keys_file: Path, capsys) -> None:
    made = _issue(capsys, keys_file, "--org", "acme", "--role", "writer", "--name", "hot-reload")
    assert made["key"] not in keys_file.read_text()
    client, user = api(made["key"]), _user()
    started = time.monotonic()
    written = _until(201, lambda: client.post("/v1/memories", json={"user_id": user, "content": "Uses Neovim"}))
    assert written.status_code == 201, written.text
    assert time.monotonic() - started < RELOADED_WITHIN_S
    # The key's org is the one it was made for: acme's admin sees the memory.
    listed = api("acme-admin").get("/v1/memories", params={"user_id": user}).json()["memories"]
    assert [m["content"] for m in listed] == ["Uses Neovim"]

    _revoke(capsys, keys_file, "hot-reload")
    refused = _until(401, lambda: client.get("/v1/memories", params={"user_id": user}))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert api("acme-admin").get("/v1/memories", params={"user_id": user}).status_code == 200


def test_a_broken_keys_file_keeps_the_keys_before(api, keys_file: Path, capsys) -> None:
    made = _issue(capsys, keys_file, "--org", "globex", "--role", "reader", "--name", "survivor")
    survivor = api(made["key"])
    assert _until(200, lambda: survivor.get("/v1/schedule")).status_code == 200
    good = keys_file.read_bytes()
    try:
        keys_file.write_text('{"keys": [{"key_sha256": "trunc')  # an editor's half-written save
        time.sleep(2.5)  # the replica has looked at the file since (once a second)
        for key in (made["key"], "acme-admin", "globex-admin"):
            answer = api(key).get("/v1/schedule")
            assert answer.status_code == 200, answer.text
    finally:
        keys_file.write_bytes(good)
    # Reading resumes with the next good file.
    _revoke(capsys, keys_file, "survivor")
    assert _until(401, lambda: survivor.get("/v1/schedule")).status_code == 401


def test_a_team_key_reaches_only_its_teams(api, keys_file: Path, capsys) -> None:
    made = _issue(capsys, keys_file, "--org", "acme", "--role", "writer", "--name", "support-team",
                  "--team", "support")
    team = api(made["key"])
    user = _user()
    written = _until(201, lambda: team.post("/v1/memories", json={
        "user_id": user, "team_id": "support", "content": "Refunds need two approvals"}))
    assert written.status_code == 201, written.text
    other = api("acme-admin").post("/v1/memories", json={
        "user_id": user, "team_id": "sales", "content": "Discounts above 20% need a director"})
    assert other.status_code == 201

    hits = team.post("/v1/memories/search", json={
        "user_id": user, "scope": "team", "team_id": "support", "query": "refund approvals", "min_score": 0})
    assert hits.status_code == 200 and [m["content"] for m in hits.json()["memories"]] == ["Refunds need two approvals"]
    denied = team.post("/v1/memories/search", json={
        "user_id": user, "scope": "team", "team_id": "sales", "query": "discounts"})
    assert denied.status_code == 403
    error = denied.json()["error"]
    assert error["code"] == "team_forbidden" and "'support'" in error["message"] and "'sales'" in error["message"]
    tagged = team.post("/v1/memories", json={"user_id": user, "team_id": "sales", "content": "x"})
    assert tagged.status_code == 403 and tagged.json()["error"]["code"] == "team_forbidden"
    # A key that names no teams keeps reaching every team of its org.
    assert api("acme-admin").post("/v1/memories/search", json={
        "user_id": user, "scope": "team", "team_id": "sales", "query": "discounts"}).status_code == 200
    _revoke(capsys, keys_file, "support-team")


def test_a_team_key_changes_only_its_teams_memories(api, serve_app, keys_file: Path, capsys) -> None:
    made = _issue(capsys, keys_file, "--org", "acme", "--role", "admin", "--name", "support-admin", "--team", "support")
    team, admin, user = api(made["key"]), api("acme-admin"), _user()
    contents = {
        "own": ("support", "Refunds need two approvals"), "other": ("sales", "Discounts above 20% need a director"),
        "untagged": (None, "Prefers e-mail over phone calls"), "own_old": ("support", "Refunds need one approval"),
        "other_old": ("sales", "Discounts above 10% need a director"),
    }
    written = admin.post("/v1/memories", json={"memories": [
        {"user_id": user, "content": content, **({"team_id": team_id} if team_id else {})}
        for team_id, content in contents.values()
    ]})
    assert written.status_code == 201, written.text
    ids = dict(zip(contents, written.json()["ids"], strict=True))
    _supersede(serve_app, "acme", user, ids["own_old"], ids["own"])
    _supersede(serve_app, "acme", user, ids["other_old"], ids["other"])
    q = {"user_id": user}

    def url(name: str, tail: str = "") -> str:
        return f"/v1/memories/{ids[name]}{tail}"

    # Reads: its team's memories and those of no team; another team's is 403.
    assert _until(200, lambda: team.get(url("own"), params=q)).status_code == 200
    assert team.get(url("untagged"), params=q).json()["content"] == contents["untagged"][1]
    assert team.get(url("own", "/history"), params=q).status_code == 200
    for name in ("other", "other_old"):
        _forbidden(team.get(url(name), params=q))
        _forbidden(team.get(url(name, "/history"), params=q))
    listed = team.get("/v1/memories", params={**q, "status": "all"}).json()["memories"]
    assert sorted(m["id"] for m in listed) == sorted(ids[n] for n in ("own", "untagged", "own_old"))
    hits = team.post("/v1/memories/search", json={**q, "query": "approvals discounts director e-mail", "min_score": 0})
    assert sorted(h["content"] for h in hits.json()["memories"]) == sorted(contents[n][1] for n in ("own", "untagged"))
    _forbidden(team.post("/v1/memories/search", json={**q, "team_id": "sales", "query": "discounts"}))

    # Changes: another team's memory, and one of no team, are refused and left as they were.
    for name in ("other", "untagged"):
        _forbidden(team.patch(url(name), params=q, json={"importance": 0.01}))
        _forbidden(team.delete(url(name), params=q))
    _forbidden(team.post(url("other_old", "/restore"), params=q))
    _forbidden(team.post("/v1/memories", json={**q, "content": "A memory of no team"}))
    for name in ("other", "untagged", "other_old"):
        kept = admin.get(url(name), params=q).json()
        assert kept["content"] == contents[name][1] and kept["importance"] != 0.01
    assert admin.get(url("other_old"), params=q).json()["status"] == "superseded"

    # Its own team's: patched, restored, deleted.
    patched = team.patch(url("own"), params=q, json={"importance": 0.9})
    assert patched.status_code == 200 and patched.json()["importance"] == 0.9, patched.text
    restored = team.post(url("own_old", "/restore"), params=q)
    assert restored.status_code == 200 and restored.json()["status"] == "active", restored.text
    assert team.delete(url("own"), params=q).status_code == 200
    # Events do not say which team a deleted memory was of: its history is for keys without teams.
    _forbidden(team.get(url("own", "/history"), params=q))
    assert [e["action"] for e in admin.get(url("own", "/history"), params=q).json()["events"]][-1] == "deleted"

    # What does not exist, or is another org's, is a 404 as for any key.
    for answer in (team.get("/v1/memories/nope", params=q), team.patch("/v1/memories/nope", params=q, json={"importance": 1}),
                   team.get("/v1/memories/nope/history", params=q), team.get(url("other"), params={"user_id": "nobody"})):
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found", answer.text

    # Work that reaches every team of a user or org needs a key without teams.
    _forbidden(team.post("/v1/conversations", json={**q, "session_id": "s1", "messages": [
        {"role": "user", "content": "I moved to the sales team"}]}))
    _forbidden(team.delete(f"/v1/users/{user}"))
    _forbidden(team.post("/v1/jobs/consolidate", json=q))
    _forbidden(team.post("/v1/jobs/import", json={"path": "history.jsonl"}))
    assert admin.get(url("other"), params=q).status_code == 200
    _revoke(capsys, keys_file, "support-admin")


def test_a_keys_own_rate_limit_answers_429_with_retry_after(api, keys_file: Path, capsys) -> None:
    made = _issue(capsys, keys_file, "--org", "acme", "--role", "reader", "--name", "slow-bot", "--rate-limit", "2")
    slow = api(made["key"])
    # The first request the server knows the key for is the first of its two a minute.
    assert _until(200, lambda: slow.get("/v1/schedule")).status_code == 200
    assert slow.get("/v1/schedule").status_code == 200
    limited = slow.get("/v1/schedule")
    assert limited.status_code == 429
    seconds = int(limited.headers["retry-after"])
    assert 1 <= seconds <= 60
    error = limited.json()["error"]
    assert error["code"] == "rate_limited" and error["retry_after_s"] == seconds
    assert f"retry in {seconds} s" in error["message"]
    # Other keys are not held back by it (the shared app sets no server-wide limit).
    assert api("acme-reader").get("/v1/schedule").status_code == 200
    _revoke(capsys, keys_file, "slow-bot")


def test_the_org_quota_refuses_writes_whole_and_loses_nothing(api, serve_app, keys_file: Path, capsys) -> None:
    org, quota = "quota-org", QUOTAS["quota-org"]
    made = _issue(capsys, keys_file, "--org", org, "--role", "admin", "--name", "quota-writer")
    client, user = api(made["key"]), _user()

    def write(*contents: str, key: str | None = None) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key else {}
        return client.post("/v1/memories", headers=headers,
                           json={"memories": [{"user_id": user, "content": c} for c in contents]})

    first = _until(201, lambda: write("Likes tea", "Lives in Lyon", key="first"))
    assert first.status_code == 201, first.text
    over = write("Has a cat", "Plays chess")
    assert over.status_code == 403
    error = over.json()["error"]
    assert error["code"] == "quota_exceeded" and f"quota of {quota}" in error["message"]
    stored = client.get("/v1/memories", params={"user_id": user}).json()["memories"]
    assert sorted(m["content"] for m in stored) == ["Likes tea", "Lives in Lyon"]
    # A retried write is answered with its ids; it takes no room.
    retried = write("Likes tea", "Lives in Lyon", key="first")
    assert retried.status_code == 201 and retried.json()["ids"] == first.json()["ids"]
    assert write("Has a cat").status_code == 201
    assert write("Plays chess").status_code == 403
    conversation = client.post("/v1/conversations", json={
        "user_id": user, "session_id": "s1", "messages": [{"role": "user", "content": "I moved to Paris"}]})
    assert conversation.status_code == 403 and conversation.json()["error"]["code"] == "quota_exceeded"
    assert client.get("/v1/sessions/s1/messages", params={"user_id": user}).json()["messages"] == []
    assert len(client.get("/v1/memories", params={"user_id": user}).json()["memories"]) == quota
    # Reads go on at the cap.
    assert client.post("/v1/memories/search", json={"user_id": user, "query": "tea"}).status_code == 200
    # A restore makes a memory active again: at the cap, nothing is restored.
    store, (kept, *_) = _store(serve_app), stored
    (row,) = store.get_memories(Scope.user(org, user), [kept["id"]], with_vectors=True)
    row.id, row.content = f"{row.id}-older", "Likes green tea"
    store.insert_memories(OrgScope(org), [superseded(row, kept["id"], utcnow())])
    refused = client.post(f"/v1/memories/{row.id}/restore", params={"user_id": user})
    _forbidden(refused, "quota_exceeded")
    assert client.get(f"/v1/memories/{row.id}", params={"user_id": user}).json()["status"] == "superseded"
    _revoke(capsys, keys_file, "quota-writer")


def test_the_org_quota_holds_across_writer_shards(api, serve_app, keys_file: Path, capsys) -> None:
    """One shard keeps each org's count, which every shard asks before it admits a write."""
    org, quota = "quota-shards", QUOTAS["quota-shards"]
    shards = serve_app["settings"].writer.shards  # type: ignore[attr-defined]
    first, second = users_on_each_shard(org, shards)[:2]
    made = _issue(capsys, keys_file, "--org", org, "--role", "writer", "--name", "shards-writer")
    client = api(made["key"])

    def write(user: str, *contents: str) -> httpx.Response:
        return client.post("/v1/memories", json={"memories": [{"user_id": user, "content": c} for c in contents]})

    assert _until(201, lambda: write(first, "Likes tea", "Lives in Lyon")).status_code == 201
    _forbidden(write(second, "Has a cat", "Plays chess"), "quota_exceeded")  # on the other shard
    assert write(second, "Has a cat").status_code == 201
    _forbidden(write(first, "Plays chess"), "quota_exceeded")
    _forbidden(write(second, "Plays chess"), "quota_exceeded")
    held = [m for user in (first, second) for m in client.get("/v1/memories", params={"user_id": user}).json()["memories"]]
    assert len(held) == quota
    _revoke(capsys, keys_file, "shards-writer")


def test_the_replica_count_comes_from_serves_own_view(serve_app: dict[str, object]) -> None:
    from ray import serve

    assert running_replicas(serve.status(), "agent-memory", "Ingress") == 1
    assert running_replicas(serve.status(), "agent-memory", "NoSuchDeployment") == 1
