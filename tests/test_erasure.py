"""Erasure down to the bytes: a canary written for one user through every path is, after the
erasure, in no row of any data file (rows hidden by deletion files included), no index, and no
byte of any file under the store or the import reports; everyone else's rows are intact."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from agent_memory.erasure import scrub_rejects
from agent_memory.extraction import extract_and_store
from agent_memory.job_record import ERASURE, JobRecord
from agent_memory.models import OrgScope, Scope
from agent_memory.service import MemoryService
from agent_memory.settings import job_report_dir
from jobs.conversations import KIND as CONVERSATION
from jobs.conversations import run_conversation_job
from jobs.importer import ImportOptions, run_import
from loopback.llm_server import ScriptedLLM, scripted_llm
from storage.connect import maintenance_of
from storage.schema import TABLES

CANARY = "zebracanaryqx"  # letters only: redaction leaves it alone
ORG, VICTIM = "acme", "erin"


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with scripted_llm() as server:
        # The victim's turns give a memory with the canary, everyone else's give none.
        server.respond = lambda body: json.dumps({"memories": [
            {"content": f"The user collects {CANARY} stamps", "memory_type": "semantic", "importance": 0.6,
             "confidence": 0.9}] if CANARY in json.dumps(body) else []})
        yield server


def _history(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _turns(user: str, session: str, texts: list[str], org: str = ORG) -> list[dict[str, Any]]:
    return [{"org_id": org, "user_id": user, "session_id": session, "role": "user", "content": text,
             "created_at": f"2025-05-0{1 + i % 9}T10:00:00+00:00", "message_id": f"{session}:m{i}"}
            for i, text in enumerate(texts)]


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def _physical_cells(store: Path) -> Iterator[str]:
    """Every string cell of every data file under the store, read as written: deletion files,
    which hide rows from a dataset read, are not applied."""
    from lance.file import LanceFileReader

    for path in store.glob("*.lance/data/*.lance"):
        table: pa.Table = LanceFileReader(str(path)).read_all().to_table()
        for column in table.columns:
            for value in column.to_pylist():
                if value is not None:
                    yield json.dumps(value, default=str)


def test_erasure_leaves_no_trace_in_any_file_of_the_store_or_the_reports(
    make_service: Callable[..., MemoryService], llm: ScriptedLLM, tmp_path: Path
) -> None:
    service = make_service(llm_base_url=llm.base_url, llm_model="scripted", llm_api_key="sk-test",
                           llm_requests_per_minute=0)
    settings, store_dir = service.settings, Path(service.settings.storage.uri)
    reports = job_report_dir(settings)
    # 99 other users (and the same user id in another org) around the victim: after compaction
    # the victim's share of each fragment is about 1%.
    for batch in range(3):
        service.add_many(ORG, [{"user_id": f"b{u}", "content": f"bystander {u} plays chess, game {batch}"}
                               for u in range(99)])
    service.add("globex", {"user_id": VICTIM, "content": "another org's erin keeps bees"})

    # Every path a user's content takes into the store.
    one = service.add(ORG, {"user_id": VICTIM, "content": f"single write {CANARY}", "metadata": {"tag": CANARY}})
    service.add_many(ORG, [{"user_id": VICTIM, "content": f"batch write {CANARY} {i}"} for i in range(3)])
    service.update(Scope.user(ORG, VICTIM), one, {"content": f"patched to {CANARY} again"})
    records = service.message_records(ORG, VICTIM, "chat", [{"role": "user", "content": f"I love {CANARY} tea."}])
    service.log_messages(ORG, records)
    assert extract_and_store(service, ORG, records, "rules", actor="test").created
    for mode in ("raw", "rules", "llm"):
        rows = _turns(VICTIM, f"imp-{mode}", [f"I really like {CANARY} music.", f"My favourite word is {CANARY}."])
        rows += _turns("b7", f"imp-{mode}-b", ["I play chess on Sundays."])
        rows.append({**rows[0], "role": "robot", "message_id": f"imp-{mode}:bad"})  # goes to the rejects
        report = run_import(settings, ImportOptions(
            path=_history(tmp_path / f"{mode}.jsonl", rows), mode=mode, org_id=ORG, engine="local",
            show_progress=False, report_path=str(reports / f"{mode}.report.json")), store=service.store)
        assert report.rows_rejected == 1 and report.memories_written >= 1, (mode, report.as_dict())
    assert service.recall(ORG, {"user_id": VICTIM, "query": CANARY}).memories
    service.access.flush()
    maintenance_of(service.store).optimize()
    bystanders = {u: sorted(r.content for r in service.list(Scope.user(ORG, u), limit=100).records) for u in ("b0", "b7", "b98")}
    everywhere = _files(store_dir, reports)
    assert any(CANARY.encode() in p.read_bytes() for p in everywhere), "the canary must be on disk before"

    receipt = service.erase_user(ORG, VICTIM, actor="test")

    # No byte of any file under the store or the reports, no cell of any data file read physically.
    assert [str(p) for p in _files(store_dir, reports) if CANARY.encode() in p.read_bytes()] == []
    assert not any(CANARY in cell for cell in _physical_cells(store_dir))
    maintenance = maintenance_of(service.store)
    for name in TABLES:  # the purged version of each table the user was in (and the receipt's commit after it)
        if receipt["rows_deleted"][name]:
            assert len(maintenance.versions(name)) <= 2, name
    memories = maintenance.table("memories")
    assert memories.search(CANARY, query_type="fts", fts_columns="keywords").to_list() == []
    # Nothing of the user reads back; everyone else's rows do.
    assert service.recall(ORG, {"user_id": VICTIM, "query": CANARY, "min_score": 0}).memories == []
    assert {u: sorted(r.content for r in service.list(Scope.user(ORG, u), limit=100).records) for u in bystanders} == bystanders
    assert service.list(Scope.user("globex", VICTIM)).records[0].content == "another org's erin keeps bees"
    # The receipt: who, when, rows per table, files rewritten, rejects removed; no content.
    assert receipt["user_id"] == VICTIM and receipt["actor"] == "test" and receipt["finished_at"]
    assert receipt["rows_deleted"]["memories"] >= 9 and receipt["rows_deleted"]["messages"] >= 7
    assert receipt["files_rewritten"] >= 3 and receipt["rejects_removed"] == {"files": 3, "rows": 3}
    assert CANARY not in json.dumps(receipt)
    assert service.store.get_job(OrgScope(ORG), receipt["job_id"])["state"] == "succeeded"
    events = maintenance.table("events").to_arrow().to_pylist()
    assert sorted(e["action"] for e in events if e["user_id"] == VICTIM and e["org_id"] == ORG) == ["erased", "purged"]
    # Erasing again finds no memory or message and says so; the first receipt stays.
    again = service.erase_user(ORG, VICTIM, actor="test")
    assert again["rows_deleted"]["memories"] == again["rows_deleted"]["messages"] == 0 and again["finished_at"]
    assert service.store.get_job(OrgScope(ORG), receipt["job_id"])["state"] == "succeeded"


def test_an_erasure_cut_short_or_failed_is_finished_at_the_next_start(make_service: Callable[..., MemoryService]) -> None:
    service = make_service()
    for user in ("cut", "failed", "bystander"):
        service.add_many(ORG, [{"user_id": user, "content": f"{user} note {CANARY} {i}"} for i in range(3)])
    # Cut short after the job row, before any row was deleted (what erase_user writes first).
    cut = JobRecord.new("erase-cut", ORG, ERASURE, state="running", report={"user_id": "cut", "actor": "test"})
    service.store.put_job(OrgScope(ORG), cut.as_row())
    # Rows deleted, then the purge failed.
    started = service.erase_user(ORG, "failed", actor="test", purge=False)
    failed = JobRecord.from_row(service.store.get_job(OrgScope(ORG), started["job_id"]))
    service.store.put_job(OrgScope(ORG), replace(failed, state="failed", error="OSError: disk gone").as_row())

    outcome = service.erasures.resume()

    assert sorted(job for _, job in outcome["finished"]) == sorted(["erase-cut", started["job_id"]])
    assert outcome["failed"] == []
    for job_id in ("erase-cut", started["job_id"]):
        job = service.store.get_job(OrgScope(ORG), job_id)
        assert job["state"] == "succeeded" and job["error"] is None and job["report"]["rows_deleted"]["memories"] == 3
    assert [c for c in _physical_cells(Path(service.settings.storage.uri)) if CANARY in c and "bystander" not in c] == []
    assert len(service.list(Scope.user(ORG, "bystander")).records) == 3
    assert service.erasures.resume() == {"finished": [], "failed": []}


def test_rejects_of_other_users_and_orgs_are_kept(tmp_path: Path) -> None:
    lines = [
        {"line": 1, "reason": "bad role", "row": {"org_id": "acme", "user_id": "erin", "content": "x"}},
        {"line": 2, "reason": "bad role", "row": {"user_id": "erin", "content": "no org: the import's"}},
        {"line": 3, "reason": "bad role", "row": {"org_id": "globex", "user_id": "erin", "content": "kept"}},
        {"line": 4, "reason": "bad role", "row": {"org_id": "acme", "user_id": "erin2", "content": "kept"}},
        {"line": 5, "reason": 'not JSON: {"user_id": "erin", "con', "row": None},
    ]
    path = tmp_path / "a.rejects.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    path.chmod(0o600)
    # A file of another org's import: its rows without an org are that org's.
    other = tmp_path / "b.rejects.jsonl"
    other.write_text("".join(json.dumps(line) + "\n" for line in lines[1:3]), encoding="utf-8")
    files = {path: "acme", other: "globex"}
    assert scrub_rejects(files, "acme", "erin") == {"files": 1, "rows": 3}
    assert [json.loads(line)["line"] for line in path.read_text().splitlines()] == [3, 4]
    assert path.stat().st_mode & 0o777 == 0o600
    assert [json.loads(line)["line"] for line in other.read_text().splitlines()] == [2, 3]
    assert scrub_rejects(files, "acme", "erin") == {"files": 0, "rows": 0}



def test_an_extraction_that_meets_an_erasure_writes_nothing_back(make_service: Callable[..., MemoryService]) -> None:
    with scripted_llm() as server:
        service = make_service(llm_base_url=server.base_url, llm_model="scripted", llm_api_key="sk-test",
                               llm_requests_per_minute=0)
        records = service.message_records(ORG, VICTIM, "chat", [{"role": "user", "content": f"I love {CANARY} tea."}])
        service.log_messages(ORG, records)
        job = JobRecord.new("conv-1", ORG, CONVERSATION, user_id=VICTIM, report={
            "user_id": VICTIM, "session_id": "chat", "mode": "llm", "message_ids": [r.message_id for r in records],
            "attempts": 0})
        service.store.put_job(OrgScope(ORG), job.as_row())

        def erase_while_extracting(body: dict[str, Any]) -> str:
            # The model answers after the user was erased: the job holds their content in memory.
            service.erase_user(ORG, VICTIM, actor="test")
            return json.dumps({"memories": [{"content": f"The user loves {CANARY} tea", "memory_type": "semantic",
                                             "importance": 0.6, "confidence": 0.9}]})

        server.respond = erase_while_extracting
        assert run_conversation_job(service, ORG, "conv-1") == "failed"
    assert service.list(Scope.user(ORG, VICTIM), status=None).records == []
    row = service.store.get_job(OrgScope(ORG), "conv-1")
    assert row["user_id"] is None and row["report"] == {} and row["error"].startswith("user_erased")
    assert CANARY not in json.dumps(row, default=str)
