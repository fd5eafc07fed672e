"""On the sample history: after a `rules` import, a flipped preference recalls the newer fact only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_memory.models import OrgScope, Scope
from agent_memory.service import MemoryService
from cli.main import main
from jobs.conversations import conversation_job_id
from jobs.importer import import_into
from tests.conftest import ROOT

USERS = {"u03", "u06", "u21", "u24"}  # English and Chinese users whose preference flips


def test_flipped_preference_recalls_the_newer_fact(service: MemoryService, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (ROOT / "examples" / "sample_history.jsonl").open(encoding="utf-8")]
    subset = tmp_path / "history.jsonl"
    subset.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows if r["user_id"] in USERS), encoding="utf-8")
    report = import_into(service, subset, mode="rules")
    assert report.messages_logged == sum(r["user_id"] in USERS for r in rows) and report.memories_written > 5
    by_id = {r["message_id"]: r for r in rows}
    questions = [json.loads(line) for line in (ROOT / "examples" / "sample_questions.jsonl").open(encoding="utf-8")]
    flips = [q for q in questions if q["kind"] == "flip" and q["user_id"] in USERS]
    assert {q["user_id"] for q in flips} == USERS
    for q in flips:
        scope = Scope.user(q["org_id"], q["user_id"])
        hits = service.recall(q["org_id"], {"user_id": q["user_id"], "query": q["question"], "top_k": 10}).memories
        newer = [h for h in hits if set(q["evidence"]) & set(h.source_ids)]
        assert newer, f"{q['question']!r}: the new fact {by_id[q['evidence'][0]]['content']!r} was not recalled"
        retired = service.list(scope, status="superseded").records
        assert retired, "the older preference was not superseded"
        assert not {r.id for r in retired} & {h.id for h in hits}
        old = next(r for r in retired if r.superseded_by == newer[0].id)
        assert [e.action for e in service.history(scope, old.id)] == ["created", "superseded"]
        assert [e.action for e in service.history(scope, newer[0].id)][0] == "created"


def test_cli_jobs_show_and_retry(service: MemoryService, tmp_path: Path, capsys: Any) -> None:
    records = service.message_records("acme", "u1", "s1", [{"role": "user", "content": "I live in Denver.", "message_id": "m1"}])
    service.log_messages("acme", records)
    job_id = conversation_job_id("acme", "u1", "s1", ["m1"], "rules")
    now = service.clock()
    service.store.put_job(OrgScope("acme"), {
        "id": job_id, "org_id": "acme", "user_id": "u1", "kind": "conversation", "state": "failed", "progress": 0.0,
        "created_at": now, "updated_at": now, "error": "llm_unavailable: down",
        "report": {"user_id": "u1", "session_id": "s1", "mode": "rules", "message_ids": ["m1"], "attempts": 3},
    })
    uri = service.settings.storage.uri
    assert main(["jobs", "show", job_id, "--org-id", "acme", "--storage-uri", uri]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "failed"
    assert main(["jobs", "retry", job_id, "--org-id", "acme", "--storage-uri", uri]) == 0
    job = json.loads(capsys.readouterr().out)
    assert job["state"] == "succeeded" and job["report"]["attempts"] == 4 and len(job["report"]["created"]) == 1
    assert main(["jobs", "retry", job_id, "--org-id", "acme", "--storage-uri", uri]) == 1  # not failed: refused
    assert main(["jobs", "show", "nope", "--org-id", "acme", "--storage-uri", uri]) == 1


@pytest.mark.store
def test_cli_eval_with_int8_questions(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    # Stored exactly, asked through the int8 query model: the same questions find about as much.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    history, questions = tmp_path / "history.jsonl", tmp_path / "questions.jsonl"
    for name, path in (("sample_history.jsonl", history), ("sample_questions.jsonl", questions)):
        lines = (ROOT / "examples" / name).read_text(encoding="utf-8").splitlines()
        path.write_text("".join(line + "\n" for line in lines if json.loads(line)["user_id"] in USERS), encoding="utf-8")
    reports, int8_graphs = {}, {}
    for precision in ("fp32", "int8"):
        assert main(["eval", "--history", str(history), "--questions", str(questions), "--json",
                     "--query-precision", precision]) == 0
        reports[precision] = json.loads(capsys.readouterr().out)
        int8_graphs[precision] = list((tmp_path / "cache").rglob("*-int8-*.onnx"))
    assert reports["int8"]["query_precision"] == "int8" and reports["fp32"]["query_precision"] == "fp32"
    # Ranked with the floor off; how often the configured floor would cut an evidence hit, apart.
    floor = reports["fp32"]["floor"]
    assert floor["min_score"] > 0 and floor["evidence_hits"] > 0 and 0 <= floor["evidence_hits_cut"] < 0.2
    assert not int8_graphs["fp32"] and len(int8_graphs["int8"]) == 1  # only the int8 run made (and used) it
    english = {mode: (reports["fp32"]["by_category"]["en"][mode], reports["int8"]["by_category"]["en"][mode])
               for mode in ("hybrid", "dense")}
    for exact, quick in english.values():
        assert exact["recall@10"] > 0.5 and abs(quick["recall@10"] - exact["recall@10"]) <= 0.1
