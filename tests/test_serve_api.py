"""The HTTP API of the real Serve app, over loopback, sharing one Ray + Serve per session."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from cli.main import main
from serve_app.upkeep import FullOptimizeSchedule


def _user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


# Bound of every wait for background work: generous, for a loaded two-core machine.
WAIT_S = 300


def _wait_job(client, job_id: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while (job := client.get(f"/v1/jobs/{job_id}").json())["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.2)
    return job


def test_health_and_readiness(api) -> None:
    c = api(None)
    assert c.get("/healthz").json() == {"status": "ok"}
    ready = c.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["degraded"] is False
    docs = c.get("/openapi.json").json()
    assert "/v1/memories/search" in docs["paths"] and "退款" in str(docs)


def test_write_search_get_patch_delete_history(api) -> None:
    c, user = api(), _user()
    r = c.post("/v1/memories", json={"user_id": user, "content": "The user prefers Python for backend work"})
    assert r.status_code == 201
    (memory_id,) = r.json()["ids"]
    r = c.post("/v1/memories", json={"memories": [
        {"user_id": user, "content": "退款需要两级审批", "memory_type": "procedural"},
        {"user_id": user, "content": "Lives in Lisbon", "metadata": {"source": "profile"}},
    ]})
    assert r.status_code == 201 and len(r.json()["ids"]) == 2
    hits = c.post("/v1/memories/search", json={"user_id": user, "query": "which language for the backend?"}).json()
    assert hits["degraded"] is False and hits["memories"][0]["id"] == memory_id
    first = hits["memories"][0]
    assert set(first) == {"id", "content", "memory_type", "score", "scores", "created_at", "source_ids", "metadata"}
    assert set(first["scores"]) == {"semantic", "keyword", "recency", "importance"} and 0 <= first["score"] <= 1
    zh = c.post("/v1/memories/search", json={"user_id": user, "query": "退款流程", "memory_types": ["procedural"]}).json()
    assert [m["content"] for m in zh["memories"]] == ["退款需要两级审批"]
    filtered = c.post("/v1/memories/search", json={"user_id": user, "query": "Lisbon", "filters": {"source": "profile"}})
    assert [m["content"] for m in filtered.json()["memories"]] == ["Lives in Lisbon"]

    got = c.get(f"/v1/memories/{memory_id}", params={"user_id": user}).json()
    assert got["content"] == "The user prefers Python for backend work"
    patched = c.patch(f"/v1/memories/{memory_id}", params={"user_id": user}, json={"content": "Prefers Go now", "importance": 0.9})
    assert patched.status_code == 200 and patched.json()["content"] == "Prefers Go now"
    events = c.get(f"/v1/memories/{memory_id}/history", params={"user_id": user}).json()["events"]
    assert [e["action"] for e in events] == ["created", "updated"]
    listing = c.get("/v1/memories", params={"user_id": user, "limit": 2}).json()
    assert len(listing["memories"]) == 2 and listing["next_cursor"]
    rest = c.get("/v1/memories", params={"user_id": user, "limit": 2, "cursor": listing["next_cursor"]}).json()
    assert len(rest["memories"]) == 1 and rest["next_cursor"] is None
    assert c.delete(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 200
    assert c.get(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 404
    assert [e["action"] for e in c.get(f"/v1/memories/{memory_id}/history", params={"user_id": user}).json()["events"]][-1] == "deleted"


def test_idempotency_key(api) -> None:
    c, user = api(), _user()
    body = {"user_id": user, "content": "Has two cats"}
    key = {"Idempotency-Key": uuid.uuid4().hex}
    first = c.post("/v1/memories", json=body, headers=key)
    again = c.post("/v1/memories", json=body, headers=key)
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    clash = c.post("/v1/memories", json={**body, "content": "Has three cats"}, headers=key)
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "idempotency_conflict"
    assert len(c.get("/v1/memories", params={"user_id": user}).json()["memories"]) == 1


def test_tenant_isolation_and_roles(api) -> None:
    user = _user()
    acme, globex, reader = api("acme-admin"), api("globex-admin"), api("acme-reader")
    (memory_id,) = acme.post("/v1/memories", json={"user_id": user, "content": "acme secret roadmap"}).json()["ids"]
    assert globex.get(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 404
    assert globex.post("/v1/memories/search", json={"user_id": user, "query": "roadmap"}).json()["memories"] == []
    assert acme.get(f"/v1/memories/{memory_id}", params={"user_id": "someone-else"}).status_code == 404
    assert globex.delete(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 404
    assert reader.post("/v1/memories/search", json={"user_id": user, "query": "roadmap"}).status_code == 200
    denied = reader.post("/v1/memories", json={"user_id": user, "content": "x"})
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    assert api("acme-writer").delete(f"/v1/users/{user}").status_code == 403
    assert api(None).post("/v1/memories/search", json={"user_id": user, "query": "x"}).status_code == 401
    assert api("no-such-key").get("/v1/memories", params={"user_id": user}).status_code == 401
    assert acme.get(f"/v1/memories/{memory_id}", params={"user_id": user}).status_code == 200


def test_erase_user_over_http(api) -> None:
    c, user = api(), _user()
    c.post("/v1/memories", json={"user_id": user, "content": "erase me please"})
    # A recall hit the ingress flushes to the access log only after the erasure's answer.
    assert c.post("/v1/memories/search", json={"user_id": user, "query": "erase me"}).json()["memories"]
    acked: list[tuple[str, str]] = []
    stop = threading.Event()

    def write(n: int) -> None:  # other users' writes keep flowing through the erasure and its purge
        client, i = api(), 0
        while not stop.is_set():
            other = f"{user}-other-{n}"
            r = client.post("/v1/memories", json={"user_id": other, "content": f"note {i} of writer {n}"})
            assert r.status_code == 201, r.text
            acked.append((other, r.json()["ids"][0]))
            i += 1

    writers = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for thread in writers:
        thread.start()
    def acknowledged(at_least: int) -> None:
        deadline = time.monotonic() + WAIT_S
        while len(acked) < at_least:
            assert time.monotonic() < deadline, f"only {len(acked)} writes acknowledged"
            time.sleep(0.1)

    try:
        acknowledged(3)  # the writers are writing
        erased = c.delete(f"/v1/users/{user}")
        assert erased.status_code == 202 and erased.json()["erased"]["memories"] == 1
        # Gone from every read at once; the purge's job is the receipt.
        assert c.get("/v1/memories", params={"user_id": user}).json()["memories"] == []
        during = len(acked)
        job = _wait_job(c, erased.json()["job_id"])
        job_id = job["id"]
        acknowledged(during + 3)  # writes acknowledged during and after the purge too
    finally:
        stop.set()
        for thread in writers:
            thread.join()
    assert job["state"] == "succeeded", job
    receipt = job["report"]
    assert receipt["user_id"] == user and receipt["rows_deleted"]["memories"] == 1
    assert receipt["rows_deleted"]["access"] >= 1  # the late hit, flushed after the answer
    assert set(receipt["tables"]) == {"memories", "messages", "events", "jobs", "verdicts", "access"}
    assert receipt["tables"]["memories"]["files_rewritten"] >= 1 and receipt["tables"]["memories"]["versions_removed"] >= 1
    assert "erase me" not in json.dumps(job)
    assert api("globex-admin").get(f"/v1/jobs/{job_id}").status_code == 404  # another org's receipt
    # Every write acknowledged during the erasure is there.
    for other, memory_id in acked:
        assert c.get(f"/v1/memories/{memory_id}", params={"user_id": other}).status_code == 200, memory_id


def test_conversation_job_and_session_window(api) -> None:
    c, user = api(), _user()
    r = c.post("/v1/conversations", json={"user_id": user, "session_id": "s1", "mode": "raw", "messages": [
        {"role": "user", "content": "Which language should I use?", "name": "Ana"},
        {"role": "assistant", "content": "What do you like?"},
        {"role": "user", "content": "Rust, mostly. My email is ana@example.com"},
    ]})
    assert r.status_code == 202
    job_id = r.json()["job_id"]
    job = _wait_job(c, job_id)
    assert job["state"] == "succeeded" and job["kind"] == "conversation"
    window = c.get("/v1/sessions/s1/messages", params={"user_id": user, "last": 2}).json()["messages"]
    assert [m["role"] for m in window] == ["assistant", "user"]
    assert "ana@example.com" not in str(window) and "[EMAIL]" in window[1]["content"]
    hits = c.post("/v1/memories/search", json={"user_id": user, "query": "rust"}).json()["memories"]
    assert hits[0]["content"].startswith("Rust, mostly")
    assert api("globex-admin").get(f"/v1/jobs/{job_id}").status_code == 404


def test_conversation_rules_extraction_supersedes_a_flip(api) -> None:
    c, user = api(), _user()
    first = c.post("/v1/conversations", json={"user_id": user, "session_id": "s1", "messages": [
        {"role": "user", "content": "I prefer VS Code for coding."}]})
    assert _wait_job(c, first.json()["job_id"])["state"] == "succeeded"
    second = c.post("/v1/conversations", json={"user_id": user, "session_id": "s2", "messages": [
        {"role": "user", "content": "Actually I switched from VS Code to Neovim last month."},
        {"role": "assistant", "content": "Got it."}, {"role": "user", "content": "今天天气不错"}]})
    assert _wait_job(c, second.json()["job_id"])["state"] == "succeeded"
    hits = c.post("/v1/memories/search", json={"user_id": user, "query": "which editor does the user use?"}).json()
    contents = [m["content"] for m in hits["memories"]]
    assert any("Neovim" in text for text in contents)
    assert not any("VS Code" in text and "Neovim" not in text for text in contents)
    assert not any("天气" in text for text in contents)
    old = c.get("/v1/memories", params={"user_id": user, "status": "superseded"}).json()["memories"]
    assert old and "VS Code" in old[0]["content"]
    # A wrong supersede is undone by a writer: the old memory is active again, with an event.
    restore = f"/v1/memories/{old[0]['id']}/restore"
    assert api("acme-reader").post(restore, params={"user_id": user}).status_code == 403
    back = c.post(restore, params={"user_id": user})
    assert back.status_code == 200 and back.json()["status"] == "active" and back.json()["superseded_by"] is None
    history = c.get(f"/v1/memories/{old[0]['id']}/history", params={"user_id": user}).json()["events"]
    assert [e["action"] for e in history][-2:] == ["superseded", "restored"]
    again = c.post(restore, params={"user_id": user})
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_superseded"
    assert c.post("/v1/memories/nope/restore", params={"user_id": user}).status_code == 404


def test_import_job_over_http(api, serve_app) -> None:
    import json
    from pathlib import Path

    root = Path(serve_app["settings"].imports.root)
    root.mkdir(parents=True, exist_ok=True)
    user = _user()
    rows = [{"user_id": user, "session_id": "s1", "role": "user", "content": f"imported fact number {i}",
             "message_id": f"m{i}", "created_at": f"2025-03-0{i + 1}T10:00:00+00:00"} for i in range(3)]
    rows.append({"user_id": user, "org_id": "globex", "role": "user", "content": "not mine", "message_id": "x"})
    (root / f"{user}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    c = api()
    assert c.post("/v1/jobs/import", json={"path": "../../etc/passwd"}).status_code == 422
    # Object stores the import cannot read are refused at once, not accepted as a job that fails.
    refused = c.post("/v1/jobs/import", json={"path": "gs://bucket/history.jsonl"})
    assert refused.status_code == 422 and "s3://" in refused.json()["error"]["message"], refused.text
    assert c.post("/v1/jobs/import", json={"path": "missing.jsonl"}).status_code == 404
    assert api("acme-writer").post("/v1/jobs/import", json={"path": f"{user}.jsonl"}).status_code == 403
    r = c.post("/v1/jobs/import", json={"path": f"{user}.jsonl", "mode": "raw"})
    assert r.status_code == 202, r.text
    job = _wait_job(c, r.json()["job_id"])
    assert job["state"] == "succeeded" and job["kind"] == "import", job
    stored = c.get("/v1/memories", params={"user_id": user}).json()["memories"]
    assert sorted(m["content"] for m in stored) == [f"imported fact number {i}" for i in range(3)]
    assert job["report"]["rows_rejected"] == 1


def test_the_writer_compacts_the_fragments_new_writes_leave(api, serve_app) -> None:
    """Three commits leave three one-row fragments outside the indexes; the Writer's upkeep (every
    writer_upkeep_seconds, 2 s) folds them, whatever else the shared store holds or receives
    meanwhile: at most the newest of them may still stand alone."""
    from datetime import timedelta

    import lancedb

    c, user = api(), _user()
    table = lancedb.connect(serve_app["settings"].storage.uri, read_consistency_interval=timedelta(0)).open_table("memories")

    def uncovered() -> dict[int, int]:
        """Each fragment no index covers, and how many of the user's rows it holds."""
        dataset = table.to_lance()
        indexed = set().union(*(i["fragment_ids"] for i in dataset.list_indices() if i["name"] == "user_id_idx"))
        return {f.fragment_id: f.count_rows(f"user_id = '{user}'") for f in dataset.get_fragments()
                if f.fragment_id not in indexed}

    for i in range(3):  # three commits
        assert c.post("/v1/memories", json={"user_id": user, "content": f"upkeep note {i}"}).status_code == 201
    # The one-row fragments the commits left (a fold may have taken some already).
    singles = {fragment for fragment, rows in uncovered().items() if rows == 1}
    deadline = time.monotonic() + 300  # generous: the upkeep thread shares two cores with everything else
    while len(left := singles & set(uncovered())) > 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(left) <= 1, f"the upkeep left {sorted(left)} of the new fragments {sorted(singles)} unfolded"
    hits = c.post("/v1/memories/search", json={"user_id": user, "query": "upkeep note"}).json()["memories"]
    assert sorted(h["content"] for h in hits) == [f"upkeep note {i}" for i in range(3)]


def test_full_compactions_wait_for_their_commits_and_their_gap() -> None:
    now = [1000.0]
    schedule = FullOptimizeSchedule(every=3, min_seconds=600, clock=lambda: now[0])
    assert [schedule.commit() for _ in range(3)] == [False, False, True]  # the first: commits alone
    assert [schedule.commit() for _ in range(5)] == [False] * 5  # enough commits, too soon
    now[0] += 600
    assert schedule.commit(busy=True) is False  # one still running
    assert schedule.commit() is True
    assert [schedule.commit() for _ in range(3)] == [False] * 3
    ungapped = FullOptimizeSchedule(every=2, min_seconds=0, clock=lambda: now[0])
    assert [ungapped.commit() for _ in range(4)] == [False, True, False, True]


def test_consolidation_on_demand_and_schedule(api) -> None:
    c, user = api("globex-admin"), _user()
    c.post("/v1/memories", json={"memories": [
        {"user_id": user, "content": "I mainly use Python for work."},
        {"user_id": user, "content": "I mainly use Python for work!"},
        {"user_id": user, "content": "My colleague hates Python."},
    ]})
    assert api("acme-writer").post("/v1/jobs/consolidate", json={}).status_code == 403
    r = c.post("/v1/jobs/consolidate", json={"user_id": user})
    assert r.status_code == 202
    job = _wait_job(c, r.json()["job_id"])
    assert job["state"] == "succeeded" and job["kind"] == "consolidation", job
    active = c.get("/v1/memories", params={"user_id": user}).json()["memories"]
    assert sorted(m["content"] for m in active) == ["I mainly use Python for work.", "My colleague hates Python."] or \
        sorted(m["content"] for m in active) == ["I mainly use Python for work!", "My colleague hates Python."]
    schedule = c.get("/v1/schedule").json()
    assert schedule["enabled"] is True and schedule["next_run"]


def test_chunked_bodies_are_limited_while_read_and_request_ids_are_kept(api) -> None:
    c = api()
    user = _user()

    def chunks(body: bytes, size: int = 10_000):
        for start in range(0, len(body), size):
            yield body[start : start + size]

    headers = {"content-type": "application/json", "x-request-id": "trace-42"}
    big = b'{"user_id": "u", "content": "' + b"x" * 300_000 + b'"}'
    r = c.post("/v1/memories", content=chunks(big), headers=headers)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    assert r.headers["x-request-id"] == "trace-42"
    small = json.dumps({"user_id": user, "content": "分块上传的记忆 chunked upload"}, ensure_ascii=False).encode()
    r = c.post("/v1/memories", content=chunks(small, 7), headers=headers)
    assert r.status_code == 201, r.text
    assert r.headers["x-request-id"] == "trace-42"
    hits = c.post("/v1/memories/search", json={"user_id": user, "query": "chunked upload"}).json()
    assert [h["content"] for h in hits["memories"]] == ["分块上传的记忆 chunked upload"]


@pytest.mark.parametrize(
    "method, path, kwargs, status",
    [
        ("post", "/v1/memories", {"json": {"user_id": "u", "content": ""}}, 422),
        ("post", "/v1/memories", {"json": {"user_id": "u", "content": "x", "memory_type": "dream"}}, 422),
        ("post", "/v1/memories", {"json": {"user_id": "u", "content": "x", "importance": "NaN"}}, 422),
        ("post", "/v1/memories", {"json": {"user_id": "u", "content": "x", "created_at": "yesterday"}}, 422),
        ("post", "/v1/memories", {"json": {"memories": []}}, 422),
        ("post", "/v1/memories", {"json": ["not", "an", "object"]}, 422),
        ("post", "/v1/memories", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 422),
        ("post", "/v1/memories", {"json": {"user_id": "u", "content": "x" * 9000}}, 422),
        ("post", "/v1/memories", {"json": {"user_id": "u", "content": "x", "id": "search"}}, 422),
        ("get", "/v1/memories/search", {"params": {"user_id": "u", "query": "x"}}, 405),
        ("post", "/v1/memories", {"content": b"x" * 300_000}, 413),
        ("post", "/v1/memories/search", {"json": {"user_id": "u", "query": "x", "top_k": 0}}, 422),
        ("post", "/v1/memories/search", {"json": {"user_id": "u", "query": "x", "since": "2026-02-01", "until": "2026-01-01"}}, 422),
        ("post", "/v1/memories/search", {"json": {"user_id": "u", "query": "x", "scope": "team"}}, 422),
        ("get", "/v1/memories", {"params": {"user_id": "u", "cursor": "bogus"}}, 422),
        ("get", "/v1/memories", {"params": {"limit": 5}}, 422),
        ("get", "/v1/memories/nope", {"params": {"user_id": "u"}}, 404),
        ("patch", "/v1/memories/nope", {"params": {"user_id": "u"}, "json": {}}, 422),
        ("get", "/v1/jobs/nope", {}, 404),
        ("get", "/v1/nowhere", {}, 404),
        ("post", "/v1/conversations", {"json": {"user_id": "u", "session_id": "s", "messages": [{"role": "robot", "content": "x"}]}}, 422),
    ],
)
def test_bad_input_is_a_clear_4xx(api, method: str, path: str, kwargs: dict, status: int) -> None:
    r = getattr(api(), method)(path, **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] and error["message"]
    assert r.headers["x-request-id"]


@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
@pytest.mark.parametrize("params", [{}, {"user_id": "u01", "query": "pet"}])
def test_search_answers_405_to_every_method_but_post(api, method: str, params: dict) -> None:
    r = getattr(api(), method)("/v1/memories/search", params=params)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == "POST"
    assert r.json()["error"] == {"code": "method_not_allowed", "message":
                                 f"{method.upper()} is not allowed on /v1/memories/search; it answers POST"}


def test_a_memory_id_is_never_the_word_search(api) -> None:
    c, user = api(), _user()
    refused = c.post("/v1/memories", json={"user_id": user, "content": "x", "id": "search"})
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["message"].startswith("id: 'search' is reserved")
    (kept,) = c.post("/v1/memories", json={"user_id": user, "content": "a search engine", "id": "Search"}).json()["ids"]
    assert c.get("/v1/memories/Search", params={"user_id": user}).json()["id"] == kept
    assert c.get(f"/v1/memories/{kept}/history", params={"user_id": user}).status_code == 200


@pytest.mark.parametrize(("body", "where"), [
    (b'{"user_id": "u", x}', "line 1, column 18 (character 17): Expecting property name enclosed in double quotes"),
    (b'{\n  "user_id": "u",\n  "content": "x",\n}', "line 4, column 1 (character 38): Expecting property name"),
    (b'{"user_id": "u", "content": "unfinished', "line 1, column 29 (character 28): Unterminated string"),
])
def test_a_body_that_is_not_json_is_told_where_and_why(api, body: bytes, where: str) -> None:
    r = api().post("/v1/memories", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_input" and error["message"].startswith(f"body: not valid JSON at {where}"), error


def test_haproxy_monitoring_answers_on_loopback_only(serve_app) -> None:
    import os
    import socket

    import httpx
    import psutil

    if os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") != "1":
        pytest.skip("served through Serve's own proxy here (no HAProxy binary)")
    stats, metrics = (int(os.environ[f"RAY_SERVE_HAPROXY_{name}_PORT"]) for name in ("STATS", "METRICS"))
    assert httpx.get(f"http://127.0.0.1:{stats}/stats", timeout=30).status_code == 200
    assert "haproxy_" in httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=30).text
    others = [a.address for addresses in psutil.net_if_addrs().values() for a in addresses
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    if not others:
        pytest.skip("this machine has no address but loopback")
    for port in (stats, metrics):
        with pytest.raises(OSError), socket.create_connection((others[0], port), timeout=5):
            pass


def test_serve_refuses_a_port_already_taken(serve_app, tmp_path, capfd) -> None:
    port = serve_app["url"].rsplit(":", 1)[1]  # the running app's own port
    assert main(["serve", "--port", port, "--storage-uri", str(tmp_path / "lancedb")]) == 2
    # Said by the server, a child process of the supervisor `main` runs: on the file descriptor.
    assert f"port {port} on 127.0.0.1 is in use" in capfd.readouterr().err
    assert not (tmp_path / "lancedb").exists()  # refused before anything started or was written


# Values that break naive handlers: wrong types, extremes, empty and oversized, odd characters.
ODD_VALUES = [None, 0, -1, 10**40, 1e308, -0.5, True, "", " ", "x" * 20_000, "💥", "a\x00b", "'; DROP TABLE memories; --",
              "用户' OR '1'='1", "2026-13-45T99:99:99", [], [1, "a", None], {}, {"$gt": ""}, {"nested": {"deep": [{}]}}]


def _mutations(body: dict, rng) -> list:
    """Bodies that differ from a valid one by one field (odd value, or gone), one extra field, or shape."""
    out: list = []
    for key in body:
        out.extend({**body, key: value} for value in rng.sample(ODD_VALUES, 6))
        out.append({k: v for k, v in body.items() if k != key})
    out += [{**body, "unexpected": rng.choice(ODD_VALUES)}, [body], "text", 42, None]
    return out


def test_no_input_answers_500(api) -> None:
    import random

    rng = random.Random(7)
    c = api()
    user = _user()
    kept = c.post("/v1/memories", json={"user_id": user, "content": "a memory to patch"}).json()["ids"][0]
    write = {"user_id": user, "content": "likes tea", "memory_type": "semantic", "importance": 0.5,
             "metadata": {"k": "v"}, "team_id": "t1", "expires_at": "2030-01-01T00:00:00Z"}
    calls: list[tuple[str, str, dict]] = []
    calls += [("post", "/v1/memories", {"json": b}) for b in _mutations(write, rng)]
    calls += [("post", "/v1/memories", {"json": {"memories": [b]}}) for b in _mutations(write, rng)[::3]]
    search = {"user_id": user, "query": "tea", "top_k": 5, "mode": "hybrid", "memory_types": ["semantic"],
              "filters": {"k": "v"}, "since": "2026-01-01T00:00:00Z", "min_score": 0.1, "scope": "user"}
    calls += [("post", "/v1/memories/search", {"json": b}) for b in _mutations(search, rng)]
    patch = {"content": "likes green tea", "importance": 0.9, "metadata": {"k": "w"}}
    calls += [("patch", f"/v1/memories/{kept}", {"params": {"user_id": user}, "json": b}) for b in _mutations(patch, rng)]
    turn = {"user_id": user, "session_id": "s1", "messages": [{"role": "user", "content": "I like tea"}]}
    calls += [("post", "/v1/conversations", {"json": b}) for b in _mutations(turn, rng)[::2]]
    for value in ["", "💥", "a" * 2000, "../../etc/passwd", "%00", "-1", "1e308"]:
        calls += [
            ("get", "/v1/memories", {"params": {"user_id": value, "limit": value, "cursor": value, "status": value}}),
            ("get", f"/v1/memories/{value}", {"params": {"user_id": value}}),
            ("get", f"/v1/memories/{value}/history", {"params": {"user_id": value}}),
            ("get", f"/v1/sessions/{value}/messages", {"params": {"user_id": value, "last": value}}),
            ("get", f"/v1/jobs/{value}", {}),
        ]
    for method, path, kwargs in calls:
        r = getattr(c, method)(path, **kwargs)
        assert r.status_code < 500, f"{method} {path} {kwargs}: {r.status_code} {r.text[:300]}"
        if r.status_code >= 400:
            assert set(r.json()["error"]) == {"code", "message"}, r.text
    # The odd writes that were valid are stored whole, once each: nothing half-written.
    listed = c.get("/v1/memories", params={"user_id": user, "limit": 1000}).json()["memories"]
    assert len({m["id"] for m in listed}) == len(listed)
    assert all(m["content"] for m in listed)


def test_the_embedder_deployment_batches_one_text_per_caller(serve_app) -> None:
    """`embed_one` is the query path where the Embedder holds a GPU: concurrent callers share a
    model call, its batching is tuned at runtime, and each caller gets its own text's vector."""
    import asyncio

    import numpy as np
    from ray import serve

    texts = [f"the user's note number {i}" for i in range(12)] + ["退款需要两级审批", "ขอคืนเงินต้องอนุมัติสองขั้น"]

    async def ask() -> tuple[list, tuple]:
        # The Serve switches of the app route a handle's calls in the caller's event loop, as
        # the replicas do: the handle is made and used inside this one.
        handle = serve.get_deployment_handle("Embedder", app_name="agent-memory")
        one = await asyncio.gather(*[handle.embed_one.remote(t) for t in texts])
        return one, await handle.embed_many.remote(texts)

    loop = asyncio.new_event_loop()  # left open: Serve's router keeps a reference to it
    one, (vectors, shares) = loop.run_until_complete(ask())
    assert len(one) == len(texts)
    for i, (vector, share) in enumerate(one):
        assert np.allclose(vector, vectors[i], atol=1e-4) and share == pytest.approx(shares[i])
    # The Thai text is out of the model's vocabulary; the Chinese one is read through its gloss.
    assert one[-1][1] > 0.5 > max(one[0][1], one[-2][1])
