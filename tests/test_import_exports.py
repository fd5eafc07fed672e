"""Importing the histories people have: a ChatGPT or a Claude `conversations.json`, on both engines and
over HTTP; the current branch only, in order, with its times; a conversation imported whole or not
at all; `--user-id` required; `--org-id` against `--force-org`."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.settings import Settings
from cli.main import main
from jobs.import_rows import resolve_format
from jobs.importer import ImportOptions, dry_run, run_import
from storage import LanceStore
from storage.connect import maintenance_of

T0 = 1_715_000_000.0  # 2024-05-06T12:53:20Z


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _settings(tmp_path: Path, name: str = "lancedb", **overrides: Any) -> Settings:
    return Settings(storage_uri=str(tmp_path / name), _env_file=None, **overrides)  # type: ignore[call-arg]


def _options(tmp_path: Path, path: Path, name: str = "import", **kw: Any) -> ImportOptions:
    kw.setdefault("report_path", str(tmp_path / "reports" / f"{name}.report.json"))
    return ImportOptions(path=str(path), show_progress=False, **kw)


def _tables(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    store = LanceStore(settings.storage.uri, embedding_model=None, embedding_dim=None)
    return {name: maintenance_of(store).table(name).to_arrow().to_pylist() for name in ("memories", "messages", "events")}


def _turns(settings: Settings, session_id: str) -> list[tuple[str, str, str, datetime]]:
    """A session's logged turns in the order the log keeps them: (message id, role, content, time)."""
    rows = [m for m in _tables(settings)["messages"] if m["session_id"] == session_id]
    rows.sort(key=lambda m: (m["created_at"], m["message_id"]))
    return [(m["message_id"], m["role"], m["content"], m["created_at"]) for m in rows]


# -- a ChatGPT export ----------------------------------------------------------------------------


def _node(node_id: str, parent: str | None, children: list[str], role: str | None = None, text: str = "",
          at: float | None = None, *, parts: list[Any] | None = None, content_type: str = "text",
          **message: Any) -> dict[str, Any]:
    body = None
    if role is not None:
        body = {"id": node_id, "author": {"role": role, "name": None, "metadata": {}}, "create_time": at,
                "content": {"content_type": content_type, "parts": [text] if parts is None else parts},
                "status": "finished_successfully", "recipient": "all", "metadata": {}, **message}
    return {"id": node_id, "parent": parent, "children": children, "message": body}


def _conversation(cid: str, nodes: list[dict[str, Any]], current: str, created: float | None = T0,
                  title: str = "A chat") -> dict[str, Any]:
    return {"title": title, "create_time": created, "update_time": created, "id": cid, "conversation_id": cid,
            "mapping": {n["id"]: n for n in nodes}, "current_node": current}


BRANCH = [  # (message id, role, content, time) of the branch that ends at current_node
    ("u1", "user", "I am planning a trip to Lisbon in May.", _at(T0 + 10)),
    ("a1", "assistant", "Lisbon in May is lovely: warm, and before the summer crowds.", _at(T0 + 20)),
    ("u2-new", "user", "I am vegetarian; where should I eat?", _at(T0 + 50)),
    ("a2-new", "assistant", "Try the Vegan Food Project in Cais do Sodré.", _at(T0 + 60)),
    ("u3", "user", "Is this dish vegetarian?", _at(T0 + 70)),
    ("a3", "assistant", "Yes, it looks like a vegetable stew.", _at(T0 + 80.5)),
]


def _chatgpt_export(path: Path) -> Path:
    branch = _conversation("conv-branch", [
        _node("root", None, ["sys"]),
        _node("sys", "root", ["u1"], "system", "You are ChatGPT.", None,
              metadata={"is_visually_hidden_from_conversation": True}),
        _node("u1", "sys", ["a1"], "user", BRANCH[0][2], T0 + 10),
        _node("a1", "u1", ["u2-old", "u2-new"], "assistant", BRANCH[1][2], T0 + 20),
        # The message as first written, and its answer: edited since, so not on the current branch.
        _node("u2-old", "a1", ["a2-old"], "user", "What about hotels near the river?", T0 + 30),
        _node("a2-old", "u2-old", [], "assistant", "The old answer, about hotels.", T0 + 40),
        _node("u2-new", "a1", ["call"], "user", BRANCH[2][2], T0 + 50),
        # A call to a tool and what the tool answered: neither is a turn of the conversation.
        _node("call", "u2-new", ["tool"], "assistant", "search('vegetarian Lisbon')", T0 + 55, content_type="code",
              recipient="browser"),
        _node("tool", "call", ["a2-new"], "tool", "Results: 10 vegetarian restaurants", T0 + 56),
        _node("a2-new", "tool", ["u3"], "assistant", BRANCH[3][2], T0 + 60),
        _node("u3", "a2-new", ["a3"], "user", at=T0 + 70, content_type="multimodal_text", parts=[
            {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-1", "width": 512},
            BRANCH[4][2],
        ]),
        # A voice reply: what was said is its transcription, the audio is left out.
        _node("a3", "u3", [], "assistant", at=T0 + 80.5, content_type="multimodal_text", parts=[
            {"content_type": "audio_transcription", "text": BRANCH[5][2], "direction": "out"},
            {"content_type": "audio_asset_pointer", "asset_pointer": "sediment://file-2", "size_bytes": 1000},
        ]),
    ], current="a3", title="Lisbon trip")
    # Messages without a time of their own take the conversation's, and keep their order.
    undated = _conversation("conv-undated", [
        _node("r", None, ["d1"]),
        _node("d1", "r", ["d2"], "user", "Remember that my cat is called Miso."),
        _node("d2", "d1", [], "assistant", "I will remember Miso."),
    ], current="d2", created=T0 + 1000)
    bad_mapping = {"id": "conv-bad-mapping", "title": "x", "create_time": T0, "mapping": [], "current_node": "n1"}
    bad_current = _conversation("conv-bad-current", [
        _node("n1", None, [], "user", "This turn would be fine alone.", T0),
    ], current="ghost")
    no_role = _conversation("conv-no-role", [
        _node("n1", None, ["n2"], "user", "The first turn of a broken conversation.", T0),
        {"id": "n2", "parent": "n1", "children": [], "message": {
            "id": "n2", "author": {}, "content": {"content_type": "text", "parts": ["who said this?"]}}},
    ], current="n2")
    too_long = _conversation("conv-too-long", [
        _node("n1", None, ["n2"], "user", "A short question before a very long answer.", T0),
        _node("n2", "n1", [], "assistant", "x" * 9_000, T0 + 1),
    ], current="n2")
    after = _conversation("conv-after", [
        _node("f1", None, [], "user", "I switched my editor to Neovim.", T0 + 2000),
    ], current="f1")
    path.write_text(json.dumps([branch, undated, bad_mapping, bad_current, no_role, too_long, after], indent=1))
    return path


GOOD = {"conv-branch", "conv-undated", "conv-too-long", "conv-after"}
BAD = {2: "conv-bad-mapping", 3: "conv-bad-current", 4: "conv-no-role"}


@pytest.mark.store
def test_chatgpt_export_imports_the_current_branch_whole_conversations_only(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = _chatgpt_export(tmp_path / "conversations.json")
    result = run_import(settings, _options(tmp_path, path, fmt="chatgpt", user_id="ana", org_id="acme", engine="local"))
    assert (result.messages_logged, result.memories_written, result.rows_rejected) == (12, 12, 3)
    assert result.rejects_by_reason == {"invalid_conversation": 3}

    assert _turns(settings, "conv-branch") == BRANCH
    assert _turns(settings, "conv-undated") == [
        ("d1", "user", "Remember that my cat is called Miso.", _at(T0 + 1000)),
        ("d2", "assistant", "I will remember Miso.", _at(T0 + 1000) + timedelta(microseconds=1)),
    ]
    assert [t[2] for t in _turns(settings, "conv-after")] == ["I switched my editor to Neovim."]
    # An answer longer than the content limit is kept, as consecutive parts at its time.
    long = _turns(settings, "conv-too-long")
    assert [(t[0], len(t[2])) for t in long] == [("n1", 43), ("n2", 8_000), ("n2#02", 1_000)]
    assert long[1][3] == long[2][3]
    tables = _tables(settings)
    assert {(m["org_id"], m["user_id"]) for m in tables["messages"] + tables["memories"]} == {("acme", "ana")}
    assert {m["session_id"] for m in tables["messages"]} == GOOD  # nothing of a rejected conversation
    memories = {m["source_ids"][0]: m for m in tables["memories"] if m["session_id"] == "conv-branch"}
    assert {k: (m["content"], m["created_at"]) for k, m in memories.items()} == {t[0]: (t[2], t[3]) for t in BRANCH}
    logged = next(m for m in tables["messages"] if m["message_id"] == "u1")
    assert json.loads(logged["metadata"]) == {"source": "chatgpt", "title": "Lisbon trip"}

    rejects = [json.loads(line) for line in Path(result.rejects_path or "").read_text().splitlines()]
    assert [r["line"] for r in rejects] == list(BAD)
    for reject, (index, cid) in zip(rejects, BAD.items(), strict=True):
        assert f"conversation {index} (id {cid!r})" in reject["reason"]
        assert reject["row"] == {"conversation": index, "conversation_id": cid, "user_id": "ana"}
    assert "mapping is not an object" in rejects[0]["reason"]
    assert "current_node 'ghost' is not in mapping" in rejects[1]["reason"]
    assert "message 'n2' has no author.role" in rejects[2]["reason"]

    again = run_import(settings, _options(tmp_path, path, "again", fmt="chatgpt", user_id="ana", org_id="acme",
                                          engine="local"))
    assert (again.messages_logged, again.memories_written, again.memories_skipped) == (0, 0, 12)
    assert [len(v) for v in _tables(settings).values()] == [12, 12, 12]


@pytest.mark.store
def test_claude_export_reads_both_text_shapes_and_its_times(tmp_path: Path) -> None:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([
        {"uuid": "cl-1", "name": "Dinner", "created_at": "2024-06-01T09:00:00.000000Z", "chat_messages": [
            {"uuid": "m1", "sender": "human", "text": "I am allergic to peanuts.",
             "created_at": "2024-06-01T09:00:05.123456Z"},
            {"uuid": "m2", "sender": "assistant", "text": "", "created_at": "2024-06-01T09:00:09Z", "content": [
                {"type": "text", "text": "Noted: no peanuts."}, {"type": "tool_use", "name": "search", "input": {}}]},
            {"uuid": "m3", "sender": "human", "text": "Suggest a dinner.", "created_at": "2024-06-01T09:01:00+00:00",
             "content": [{"type": "text", "text": "Suggest a dinner."}]},
            {"uuid": "m4", "sender": "assistant", "text": "", "content": [], "created_at": "2024-06-01T09:01:01Z"},
            {"uuid": "m5", "sender": "assistant", "text": "How about a lentil curry?",
             "created_at": "2024-06-01T09:01:30.5Z", "attachments": [], "files": []},
        ]},
        {"uuid": "cl-2", "name": "", "created_at": "2024-07-01T10:00:00Z", "chat_messages": [
            {"uuid": "k1", "sender": "human", "text": "My sister is called Ana."}]},
        {"uuid": "cl-bad", "name": "x", "created_at": "2024-07-01T10:00:00Z", "chat_messages": [
            {"uuid": "b1", "sender": "human", "text": "fine"}, {"uuid": "b2", "text": "no sender"}]},
    ]))
    settings = _settings(tmp_path)
    result = run_import(settings, _options(tmp_path, path, fmt="claude", user_id="bo", engine="local"))
    assert (result.messages_logged, result.rows_rejected) == (5, 1)
    utc = timezone.utc
    assert _turns(settings, "cl-1") == [
        ("m1", "user", "I am allergic to peanuts.", datetime(2024, 6, 1, 9, 0, 5, 123456, tzinfo=utc)),
        ("m2", "assistant", "Noted: no peanuts.", datetime(2024, 6, 1, 9, 0, 9, tzinfo=utc)),
        ("m3", "user", "Suggest a dinner.", datetime(2024, 6, 1, 9, 1, tzinfo=utc)),
        ("m5", "assistant", "How about a lentil curry?", datetime(2024, 6, 1, 9, 1, 30, 500000, tzinfo=utc)),
    ]
    assert _turns(settings, "cl-2") == [("k1", "user", "My sister is called Ana.", datetime(2024, 7, 1, 10, tzinfo=utc))]
    (reject,) = [json.loads(line) for line in Path(result.rejects_path or "").read_text().splitlines()]
    assert reject["line"] == 2 and "conversation 2 (id 'cl-bad')" in reject["reason"]
    assert "'b2' has sender None" in reject["reason"]
    assert not [m for m in _tables(settings)["messages"] if m["session_id"] == "cl-bad"]


@pytest.mark.store
def test_formats_are_detected_from_what_a_json_file_holds(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    chatgpt = _chatgpt_export(tmp_path / "conversations.json")
    claude = tmp_path / "claude.json"
    claude.write_text('\ufeff [{"uuid": "c", "name": "n", "chat_messages": []}]', encoding="utf-8")
    history = tmp_path / "history.json"  # JSON lines under a .json name, as before
    history.write_text(json.dumps({"user_id": "u", "role": "user", "content": "hi"}) + "\n")
    rows = tmp_path / "rows.json"  # an array of something else: read as before, its rejects say why
    rows.write_text(json.dumps([{"user_id": "u", "role": "user", "content": "hi"}]))
    assert [resolve_format(str(p), "auto", settings) for p in (chatgpt, claude, history, rows)] == [
        "chatgpt", "claude", "jsonl", "jsonl"]
    assert resolve_format(str(tmp_path / "h.jsonl"), "auto", settings) == "jsonl"  # by its name, unread
    result = run_import(settings, _options(tmp_path, chatgpt, user_id="ana", engine="local"))
    assert result.messages_logged == 12
    with pytest.raises(InvalidInputError, match="chatgpt or claude"):
        resolve_format(str(tmp_path / "export.txt"), "auto", settings)

    preview = dry_run(settings, _options(tmp_path, chatgpt, user_id="ana"), limit=7)
    assert preview["written"] == 0 and preview["rows_read"] == 8  # whole conversations, up to 7 turns
    assert [r["message"]["message_id"] for r in preview["rows"]] == [t[0] for t in BRANCH] + ["d1", "d2"]


def test_an_export_needs_a_user_and_only_an_export_takes_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(tmp_path)
    chatgpt = _chatgpt_export(tmp_path / "conversations.json")
    history = tmp_path / "history.jsonl"
    history.write_text(json.dumps({"user_id": "u", "role": "user", "content": "hi"}) + "\n")
    with pytest.raises(InvalidInputError, match="--user-id"):
        run_import(settings, _options(tmp_path, chatgpt, engine="local"))
    with pytest.raises(InvalidInputError, match="user_id"):
        run_import(settings, _options(tmp_path, chatgpt, fmt="chatgpt", user_id=" ", engine="local"))
    with pytest.raises(InvalidInputError, match="ChatGPT and Claude exports"):
        run_import(settings, _options(tmp_path, history, user_id="u", engine="local"))
    code = main(["import", str(chatgpt), "--format", "claude", "--storage-uri", settings.storage.uri,
                 "--report", str(tmp_path / "cli.report.json")])
    assert code == 1 and "a claude export carries no user id" in capsys.readouterr().err
    assert not Path(settings.storage.uri).exists() and not (tmp_path / "cli.report.json").exists()


def test_a_file_that_is_not_json_fails_at_its_byte_and_writes_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    good = _chatgpt_export(tmp_path / "good.json").read_bytes()
    cut = good.index(b'"conv-after"')
    broken = tmp_path / "broken.json"
    broken.write_bytes(good[:cut] + b"}" + good[cut:])  # a stray brace inside the last conversation
    with pytest.raises(InvalidInputError, match=rf"invalid JSON in .*broken\.json at byte {cut}, after 6 conversations"):
        run_import(settings, _options(tmp_path, broken, fmt="chatgpt", user_id="ana", engine="local"))
    truncated = tmp_path / "truncated.json"
    truncated.write_bytes(good[:-10])
    with pytest.raises(InvalidInputError, match=rf"at byte {len(good) - 10}, .*premature EOF") as caught:
        run_import(settings, _options(tmp_path, truncated, fmt="chatgpt", user_id="ana", engine="local"))
    assert caught.value.code == "invalid_json"
    not_array = tmp_path / "object.json"
    not_array.write_text('{"conversations": []}')
    with pytest.raises(InvalidInputError, match="not a JSON array of conversations"):
        run_import(settings, _options(tmp_path, not_array, fmt="claude", user_id="ana", engine="local"))
    assert not Path(settings.storage.uri).exists()


def _orgs_file(path: Path) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in [
        {"user_id": "u1", "role": "user", "content": "a row of acme", "org_id": "acme", "message_id": "m1"},
        {"user_id": "u1", "role": "user", "content": "a row naming no org", "message_id": "m2"},
    ]) + "\n")
    return path


def _orgs(settings: Settings) -> dict[str, str]:
    tables = _tables(settings)
    orgs = {m["message_id"]: m["org_id"] for m in tables["messages"]}
    assert {m["source_ids"][0]: m["org_id"] for m in tables["memories"]} == orgs
    return orgs


@pytest.mark.store
def test_org_id_fills_rows_without_one_and_force_org_overrides_every_row(tmp_path: Path) -> None:
    path = _orgs_file(tmp_path / "orgs.jsonl")
    for name, flags, expected in (("fill", [], {"m1": "acme", "m2": "globex"}),
                                  ("force", ["--force-org"], {"m1": "globex", "m2": "globex"})):
        settings = _settings(tmp_path, name)
        code = main(["import", str(path), "--org-id", "globex", *flags, "--engine", "local",
                     "--storage-uri", settings.storage.uri, "--report", str(tmp_path / f"{name}.report.json")])
        assert code == 0
        assert _orgs(settings) == expected


def test_exports_and_force_org_on_the_ray_engine(tmp_path: Path, ray_session: None) -> None:
    path = _chatgpt_export(tmp_path / "conversations.json")
    local, on_ray = _settings(tmp_path, "local"), _settings(tmp_path, "ray")
    r_local = run_import(local, _options(tmp_path, path, "local", user_id="ana", engine="local"))
    r_ray = run_import(on_ray, _options(tmp_path, path, "ray", user_id="ana", engine="ray"))
    assert r_ray.engine == "ray"
    for key in ("rows_read", "rows_rejected", "messages_logged", "memories_written", "rejects_by_reason"):
        assert getattr(r_ray, key) == getattr(r_local, key), key
    assert Path(r_ray.rejects_path or "").read_text() == Path(r_local.rejects_path or "").read_text()
    assert _turns(on_ray, "conv-branch") == BRANCH
    assert {n: {r["id"] for r in rows} for n, rows in _tables(on_ray).items()} == \
        {n: {r["id"] for r in rows} for n, rows in _tables(local).items()}

    # A file that stops being JSON fails in the Ray read task with the same error, unwrapped.
    broken = tmp_path / "broken.json"
    broken.write_bytes(path.read_bytes()[:-10])
    empty = _settings(tmp_path, "broken")
    with pytest.raises(InvalidInputError, match="premature EOF; nothing was imported") as caught:
        run_import(empty, _options(tmp_path, broken, "broken", fmt="chatgpt", user_id="ana", engine="ray"))
    assert caught.value.code == "invalid_json"
    assert not Path(empty.storage.uri).exists()

    forced = _settings(tmp_path, "forced")
    run_import(forced, _options(tmp_path, _orgs_file(tmp_path / "orgs.jsonl"), "forced", org_id="globex",
                                force_org=True, engine="ray"))
    assert _orgs(forced) == {"m1": "globex", "m2": "globex"}


def _wait_job(client: Any, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")


def test_an_export_over_http_needs_a_user_and_lands_in_the_keys_org(api: Any, serve_app: dict[str, Any]) -> None:
    root = Path(serve_app["settings"].imports.root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"export-{uuid.uuid4().hex[:8]}.json"
    _chatgpt_export(root / name)
    user = f"user-{uuid.uuid4().hex[:8]}"
    c = api()
    for body in ({"path": name}, {"path": name, "format": "chatgpt"}):
        refused = c.post("/v1/jobs/import", json=body)
        assert refused.status_code == 422 and "user id" in refused.json()["error"]["message"], refused.text
    history = root / f"{user}.jsonl"
    history.write_text(json.dumps({"user_id": user, "role": "user", "content": "hi"}) + "\n")
    assert c.post("/v1/jobs/import", json={"path": history.name, "user_id": user}).status_code == 422
    r = c.post("/v1/jobs/import", json={"path": name, "user_id": user})
    assert r.status_code == 202, r.text
    job = _wait_job(c, r.json()["job_id"])
    assert job["state"] == "succeeded", job
    assert (job["report"]["messages_logged"], job["report"]["rows_rejected"]) == (12, 3)
    stored = c.get("/v1/memories", params={"user_id": user, "limit": 50}).json()["memories"]
    assert sorted(m["content"] for m in stored) == sorted(
        [t[2] for t in BRANCH] + ["Remember that my cat is called Miso.", "I will remember Miso.",
                                  "I switched my editor to Neovim.", "A short question before a very long answer.",
                                  "x" * 8_000, "x" * 1_000])
    # The key's org (acme): another org's key sees none of it.
    assert api("globex-admin").get("/v1/memories", params={"user_id": user}).json()["memories"] == []
