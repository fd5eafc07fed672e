"""A user's export and its restore (agent_memory.portability) on a real store and model: the round
trip export, erase, restore, export gives the same bytes; a bad file writes nothing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from agent_memory.errors import ConflictError, InvalidInputError
from agent_memory.models import MessageRecord, Scope
from agent_memory.portability import dumps
from agent_memory.service import MemoryService

ORG = "acme"
START = datetime(2026, 10, 1, 8, 0, tzinfo=timezone.utc)


def fill(service: MemoryService, user: str) -> None:
    """Memories in every state, with metadata, access counts and events; turns in two sessions."""
    ids = service.add_many(ORG, [
        {"user_id": user, "content": "The user prefers Python for backend work", "importance": 0.8,
         "metadata": {"source": "chat", "n": 3}, "team_id": "core", "created_at": "2026-09-01T10:00:00Z"},
        {"user_id": user, "content": "用户喜欢用 Go 写后端服务。", "memory_type": "semantic"},
        {"user_id": user, "content": "Refunds need two approvals", "memory_type": "procedural",
         "expires_at": "2030-01-01T00:00:00Z"},
        {"user_id": user, "content": "The user flew to Lisbon in March", "memory_type": "episodic"},
    ]).ids
    scope = Scope.user(ORG, user)
    service.update(scope, ids[0], {"importance": 0.9, "metadata": {"source": "chat", "n": 4}})
    old = service.get(scope, ids[1])
    service.supersede(scope, old, ids[0])
    service.delete(scope, ids[3])
    service.recall(ORG, {"user_id": user, "query": "backend language"})
    service.access.flush()
    service.log_messages(ORG, [
        MessageRecord(id=f"{user}-{s}-{i}", org_id=ORG, user_id=user, session_id=s, message_id=f"{s}-m{i}",
                      role="user" if i % 2 == 0 else "assistant", content=f"turn {i} of {s} 第{i}轮",
                      created_at=START + timedelta(minutes=i), metadata={"i": i})
        for s in ("s1", "s2") for i in range(3)
    ])


def export_text(service: MemoryService, user: str) -> str:
    return "".join(dumps(line) + "\n" for line in service.export_user(Scope.user(ORG, user)))


def test_export_erase_restore_export_is_identical(service: MemoryService) -> None:
    fill(service, "u1")
    fill(service, "bystander")
    first = export_text(service, "u1")
    lines = [json.loads(line) for line in first.splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds[0] == "export" and kinds[-1] == "end"
    assert lines[-1] == {"kind": "end", "memories": 3, "messages": 6, "events": kinds.count("event")}
    memories = {m["content"]: m for m in lines if m["kind"] == "memory"}
    python, go = memories["The user prefers Python for backend work"], memories["用户喜欢用 Go 写后端服务。"]
    assert go["status"] == "superseded" and go["superseded_by"] == python["id"] and go["valid_to"]
    assert python["importance"] == pytest.approx(0.9) and python["metadata"] == {"source": "chat", "n": 4}
    assert python["access_count"] >= 1 and python["last_accessed_at"] and python["team_id"] == "core"
    assert "vector" not in python and "org_id" not in python and python["index_text"]
    assert {e["action"] for e in lines if e["kind"] == "event"} >= {"created", "updated", "superseded", "deleted"}

    service.erase_user(ORG, "u1")
    assert export_text(service, "u1").count("\n") == 2  # the header and the end line
    restored = service.restore_user(ORG, first.splitlines())
    assert restored == {"user_id": "u1", "restored": {"memories": 3, "messages": 6, "events": kinds.count("event")}}
    assert export_text(service, "u1") == first
    # What was restored is searched as before, and the neighbour was never touched.
    hits = service.recall(ORG, {"user_id": "u1", "query": "which language for the backend?"}).memories
    assert hits[0].content == "The user prefers Python for backend work"
    assert '"user_id":"bystander"' in export_text(service, "bystander")


def test_a_restore_needs_an_empty_user_and_a_whole_valid_file(service: MemoryService) -> None:
    fill(service, "u2")
    text = export_text(service, "u2")
    with pytest.raises(ConflictError) as refused:
        service.restore_user(ORG, text.splitlines())
    assert refused.value.code == "user_not_empty"
    service.erase_user(ORG, "u2")
    lines = text.splitlines()
    broken = [
        (lines[:-1], "without its end line"),
        (lines[:2] + ["{not json"] + lines[2:], "line 3: not JSON"),
        ([lines[0], lines[1].replace('"memory_type":"semantic"', '"memory_type":"gossip"'), *lines[2:]], "line 2: memory"),
        ([lines[0], lines[1].replace('"user_id":"u2"', '"user_id":"u3"'), *lines[2:]], "line 2: a row of user 'u3'"),
        (lines[:1] + lines[2:], "the end line counts"),
        ([lines[0].replace('"version":1', '"version":9'), *lines[1:]], "not an agent-memory export"),
        ([], "the file is empty"),
    ]
    for bad, message in broken:
        with pytest.raises(InvalidInputError) as caught:
            service.restore_user(ORG, bad)
        assert message in caught.value.message, (message, caught.value.message)
        assert export_text(service, "u2").count("\n") == 2  # nothing was written
    service.restore_user(ORG, lines)
    assert export_text(service, "u2") == text


def test_the_round_trip_over_http_and_the_command_line(serve_app: dict[str, object], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Export over HTTP, erase over HTTP, restore with `agent-memory import --format memories` on
    the app's store, export again: the same lines. Exporting needs an admin key."""
    import os
    import subprocess
    import sys
    import uuid
    from pathlib import Path

    from agent_memory_http import MemoryClient, PermissionDeniedError

    user = f"export-{uuid.uuid4().hex[:8]}"
    url = str(serve_app["url"])
    with MemoryClient(url, "acme-admin", timeout=60) as admin:
        first_id = admin.add(user, "The user prefers Python for backend work", importance=0.8).id
        admin.add(user, "用户喜欢用 Go 写后端服务。")
        admin.update(user, first_id, importance=0.9)
        job = admin.log_conversation(user, "s1", [{"role": "user", "content": "I do all my coding in Zed."},
                                                  {"role": "assistant", "content": "Zed it is."}], mode="raw")
        assert admin.wait_for_job(job.job_id, timeout=300).state == "succeeded"
        exported = admin.export_user(user)
        assert exported[0] == {"kind": "export", "version": 1, "user_id": user}
        assert exported[-1] == {"kind": "end", "memories": 4, "messages": 2,
                                "events": sum(line["kind"] == "event" for line in exported)}
        assert {e["actor"] for e in exported if e["kind"] == "event" and e["action"] == "updated"} == {"acme-admin"}
        with MemoryClient(url, "acme-writer", timeout=60) as writer, pytest.raises(PermissionDeniedError):
            writer.export_user(user)

        erasure = admin.erase_user(user)
        assert admin.wait_for_job(erasure.job_id, timeout=300).state == "succeeded"
        assert len(admin.export_user(user)) == 2
        path = tmp_path / "export.jsonl"
        path.write_text("".join(dumps(line) + "\n" for line in exported), encoding="utf-8")
        settings = serve_app["settings"]
        env = {**os.environ, "AGENT_MEMORY_STORAGE_URI": settings.storage.uri, "HF_HUB_OFFLINE": "1"}  # type: ignore[attr-defined]
        run = subprocess.run([sys.executable, "-m", "cli.main", "import", str(path), "--format", "memories",
                              "--org-id", "acme"], env=env, capture_output=True, text=True, timeout=300,
                             cwd=Path(__file__).resolve().parents[1])
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["restored"]["memories"] == 4
        assert admin.export_user(user) == exported
        assert admin.search(user, "which language for the backend?").memories[0].id == first_id
