"""The bulk import job: formats, rejects, redaction, exactly-once re-runs and kills, both engines,
and the same pipeline into an open service (`import_into`)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.models import OrgScope
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from jobs.importer import ImportOptions, dry_run, import_into, run_import, submit_import
from jobs.runtime import EmbedMemories, actor_model_batch
from storage import LanceStore, open_store
from storage.connect import maintenance_of
from tests.conftest import ROOT

SAMPLE = ROOT / "examples" / "sample_history.jsonl"
EMAIL = "carol.planted@example.com"
PHONE = "+1 415 555 0132"
CARD = "4111 1111 1111 1111"


def _settings(tmp_path: Path, name: str = "lancedb", **overrides: Any) -> Settings:
    return Settings(storage_uri=str(tmp_path / name), _env_file=None, **overrides)  # type: ignore[call-arg]


def _sample(path: Path, n: int) -> Path:
    lines = SAMPLE.read_text().splitlines()[:n]
    path.write_text("\n".join(lines) + "\n")
    return path


def _options(tmp_path: Path, path: Path, **kw: Any) -> ImportOptions:
    kw.setdefault("report_path", str(tmp_path / "reports" / f"{path.stem}.report.json"))
    return ImportOptions(path=str(path), show_progress=False, **kw)


def _tables(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    store = LanceStore(settings.storage.uri, embedding_model=None, embedding_dim=None)
    return {name: maintenance_of(store).table(name).to_arrow().to_pylist() for name in ("memories", "messages", "events")}


def _ids(settings: Settings) -> dict[str, set[str]]:
    return {name: {r["id"] for r in rows} for name, rows in _tables(settings).items()}


@pytest.mark.store  # the import opens a real LanceDB and loads the model, in this process
def test_jsonl_import_keeps_timestamps_and_links_memories_to_messages(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    result = run_import(settings, _options(tmp_path, _sample(tmp_path / "h.jsonl", 40), engine="local"))
    assert (result.rows_read, result.rows_rejected, result.messages_logged, result.memories_written) == (40, 0, 40, 40)
    tables = _tables(settings)
    source = [json.loads(line) for line in SAMPLE.read_text().splitlines()[:40]]
    by_message = {m["message_id"]: m for m in tables["messages"]}
    for row in source:
        logged = by_message[row["message_id"]]
        assert logged["created_at"].isoformat() == row["created_at"]
        assert logged["org_id"] == row["org_id"] and logged["user_id"] == row["user_id"]
    memories = {m["source_ids"][0]: m for m in tables["memories"]}
    assert set(memories) == {r["message_id"] for r in source}
    assert all(memories[r["message_id"]]["created_at"].isoformat() == r["created_at"] for r in source)
    assert {e["action"] for e in tables["events"]} == {"created"} and len(tables["events"]) == 40
    report = json.loads(Path(result.report_path or "").read_text())
    assert report["memories_written"] == 40 and report["rows_per_s"] > 0
    # The store it made records how its Chinese was embedded (no warning, no reindex asked for).
    assert maintenance_of(open_store(settings, embedding_model=None, embedding_dim=None)).chinese_gloss() is settings.embedding.glosses_chinese() is True


@pytest.mark.store
def test_csv_parquet_and_paired_layouts(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()[:12]]
    columns = ["user_id", "session_id", "role", "content", "created_at", "message_id", "org_id"]
    per_row = tmp_path / "messages.csv"
    with open(per_row, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: r[k] for k in columns} for r in rows)
    paired = tmp_path / "paired.csv"
    paired.write_text(
        "user_id,session_id,created_at,user_content,bot_content\n"
        "p1,s1,2024-01-02T10:00:00+00:00,I moved to Lisbon last spring,Nice! How do you like it?\n"
        "p1,s1,2024-01-02T10:05:00+00:00,\"I love the food, especially pasteis\",Noted.\n"
        "p1,s2,2024-01-03T09:00:00+00:00,Only the user spoke here,\n"
    )
    parquet = tmp_path / "messages.parquet"
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in columns} for r in rows]), parquet)

    s1 = _settings(tmp_path, "csv")
    r1 = run_import(s1, _options(tmp_path, per_row, engine="local"))
    s2 = _settings(tmp_path, "pq")
    r2 = run_import(s2, _options(tmp_path, parquet, engine="local"))
    assert (r1.memories_written, r2.memories_written) == (12, 12)
    # The same turns from CSV and Parquet are the same rows: same ids.
    assert _ids(s1) == _ids(s2)

    s3 = _settings(tmp_path, "paired")
    r3 = run_import(s3, _options(tmp_path, paired, engine="local"))
    assert (r3.rows_read, r3.rows_rejected, r3.messages_logged) == (5, 0, 5)
    messages = {m["message_id"]: m for m in _tables(s3)["messages"]}
    assert set(messages) == {"2:user", "2:assistant", "3:user", "3:assistant", "4:user"}
    assert messages["3:user"]["content"] == "I love the food, especially pasteis"
    assert messages["2:assistant"]["role"] == "assistant" and messages["2:assistant"]["session_id"] == "s1"


def _bad_file(path: Path) -> Path:
    good = SAMPLE.read_text().splitlines()[:6]
    big = json.dumps({"user_id": "u1", "role": "user", "content": "x" * 10_000_000})
    lines = [
        good[0],
        json.dumps({"role": "user", "content": f"no user here, mail {EMAIL}"}),  # line 2: missing_user
        json.dumps({"user_id": "u1", "role": "user", "content": "   "}),  # 3: empty_content
        '{"user_id": "u1", "role": "user", "content": "broken',  # 4: invalid_json
        json.dumps({"user_id": "u1", "role": "user", "content": "hi", "created_at": "next tuesday"}),  # 5
        big,  # 6: line_too_long
        good[1],
        json.dumps({"user_id": "u1", "role": "user", "content": "a" * 9_000}),  # 8: content_too_long
        "[1, 2, 3]",  # 9: invalid_json (not an object)
        *good[2:6],
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.store
def test_bad_rows_go_to_the_rejects_file_with_exact_counts(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = _bad_file(tmp_path / "bad.jsonl")
    result = run_import(settings, _options(tmp_path, path, engine="local"))
    assert result.rows_read == 13 and result.rows_rejected == 7 and result.memories_written == 6
    assert result.rejects_by_reason == {
        "missing_user": 1, "empty_content": 1, "invalid_json": 2, "bad_timestamp": 1, "line_too_long": 1,
        "content_too_long": 1,
    }
    rejects = [json.loads(line) for line in Path(result.rejects_path or "").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [2, 3, 4, 5, 6, 8, 9]
    assert [r["reason"].split(":")[0] for r in rejects] == [
        "missing_user", "empty_content", "invalid_json", "bad_timestamp", "line_too_long", "content_too_long",
        "invalid_json",
    ]
    assert len(Path(result.rejects_path or "").read_bytes()) < 100_000  # the 10 MB line is not copied


@pytest.mark.store
def test_timestamps_outside_the_years_1_to_9999_are_rejects(tmp_path: Path) -> None:
    """In Parquet a timestamp may lie past what Python holds; in text, a UTC offset may carry one
    outside. Either is a `bad_timestamp` reject of its row alone."""
    day_us = 86_400 * 10**6
    first, after_last = -62_135_596_800 * 10**6, 253_402_300_800 * 10**6  # 0001-01-01, 10000-01-01
    parquet = tmp_path / "far.parquet"
    pq.write_table(pa.table({
        "user_id": ["u1"] * 4, "role": ["user"] * 4, "content": ["year 1", "year 10000", "year 0", "year 2026"],
        "created_at": pa.array([first, after_last + day_us, first - day_us, 1_767_225_600 * 10**6],
                               type=pa.timestamp("us", tz="UTC")),
    }), parquet)
    text = tmp_path / "far.jsonl"
    text.write_text("".join(json.dumps({"user_id": "u1", "role": "user", "content": f"at {at}", "created_at": at}) + "\n"
                            for at in ("0001-01-01T00:00:00+01:00", "0399-06-26T18:39:25Z", "9999-12-31T23:59:59-01:00")))
    for path, read, stored in ((parquet, 4, 2), (text, 3, 1)):
        result = run_import(_settings(tmp_path, path.stem), _options(tmp_path, path, engine="local"))
        assert (result.rows_read, result.memories_written) == (read, stored)
        assert result.rejects_by_reason == {"bad_timestamp": read - stored}


@pytest.mark.store
def test_rerun_adds_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = _sample(tmp_path / "h.jsonl", 30)
    first = run_import(settings, _options(tmp_path, path, engine="local"))
    before = _ids(settings)
    again = run_import(settings, _options(tmp_path, path, engine="local"))
    assert first.memories_written == 30
    assert (again.messages_logged, again.memories_written, again.memories_skipped) == (0, 0, 30)
    after = _tables(settings)
    assert {k: {r["id"] for r in v} for k, v in after.items()} == before
    assert [len(v) for v in after.values()] == [30, 30, 30]


@pytest.mark.store
def test_planted_pii_reaches_neither_tables_nor_rejects(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = tmp_path / "pii.jsonl"
    path.write_text("\n".join([
        json.dumps({"user_id": "u1", "session_id": "s", "role": "user", "message_id": "m1",
                    "content": f"Write to me at {EMAIL} or call {PHONE}", "metadata": {"note": EMAIL}}),
        json.dumps({"user_id": "u1", "session_id": "s", "role": "user", "message_id": "m2",
                    "content": f"My card is {CARD}, password: hunter2xyz"}),
        json.dumps({"role": "user", "content": f"rejected, but my mail is {EMAIL} and card {CARD}"}),
    ]) + "\n")
    result = run_import(settings, _options(tmp_path, path, engine="local"))
    assert result.rows_rejected == 1 and result.memories_written == 2
    assert result.redactions["email"] == 3 and result.redactions["bank_card"] == 2
    assert result.redactions["phone"] == 1 and result.redactions["secret"] == 1
    dumped = json.dumps(_tables(settings), default=str) + Path(result.rejects_path or "").read_text()
    dumped += Path(result.report_path or "").read_text()
    for secret in (EMAIL, PHONE, CARD, "hunter2xyz"):
        assert secret not in dumped
    assert "[EMAIL]" in dumped and "[BANK_CARD]" in dumped


@pytest.mark.store
def test_an_org_bound_import_rejects_rows_of_other_orgs(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = tmp_path / "orgs.jsonl"
    path.write_text("\n".join(json.dumps({"user_id": "u1", "role": "user", "content": f"turn {i}", "org_id": org,
                                          "message_id": f"m{i}"}) for i, org in enumerate(["acme", "evil", "acme"])))
    result = run_import(settings, _options(tmp_path, path, engine="local", org_id="acme", only_org=True))
    assert (result.memories_written, result.rejects_by_reason) == (2, {"wrong_org": 1})
    assert {r["org_id"] for r in _tables(settings)["messages"]} == {"acme"}


@pytest.mark.store
def test_dry_run_shows_every_stage_and_writes_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = _bad_file(tmp_path / "bad.jsonl")
    out = dry_run(settings, _options(tmp_path, path))
    assert out["written"] == 0 and out["rows_read"] == 13 and out["rows_rejected"] == 7
    stored = [r for r in out["rows"] if "memory" in r]
    assert len(stored) == 6 and all(r["vector"]["dim"] == 384 for r in stored)
    assert all(abs(r["vector"]["norm"] - 1.0) < 1e-3 for r in stored)
    assert not Path(settings.storage.uri).exists()
    big = _sample(tmp_path / "big.jsonl", 250)
    assert len(dry_run(settings, _options(tmp_path, big))["rows"]) == 100


def test_unknown_mode_and_format_are_clear_errors_and_write_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = _sample(tmp_path / "h.jsonl", 5)
    with pytest.raises(InvalidInputError, match="mode"):
        run_import(settings, _options(tmp_path, path, mode="psychic", engine="local"))
    with pytest.raises(InvalidInputError, match="format"):
        run_import(settings, _options(tmp_path, tmp_path / "h.txt", engine="local"))
    with pytest.raises(InvalidInputError, match="no such file"):
        run_import(settings, _options(tmp_path, tmp_path / "absent.jsonl"))
    assert not Path(settings.storage.uri).exists()


@pytest.mark.store  # the import opens a real LanceDB and loads the model, in this process
def test_a_gzipped_history_is_read_as_it_is_on_s3_and_a_broken_one_writes_nothing(tmp_path: Path) -> None:
    import gzip

    settings = _settings(tmp_path)
    packed = tmp_path / "h.jsonl.gz"
    packed.write_bytes(gzip.compress(_sample(tmp_path / "h.jsonl", 12).read_bytes()))
    result = run_import(settings, _options(tmp_path, packed, engine="local"))
    assert (result.rows_read, result.rows_rejected, result.memories_written) == (12, 0, 12)
    broken = _settings(tmp_path, "broken")
    (tmp_path / "broken.jsonl.gz").write_bytes(gzip.compress(packed.read_bytes())[:40])  # cut short
    with pytest.raises(InvalidInputError, match="not a complete gzip file"):
        run_import(broken, _options(tmp_path, tmp_path / "broken.jsonl.gz", engine="local"))
    assert not Path(broken.storage.uri).exists() or not _ids(broken)["memories"]


def test_ray_pipeline_matches_the_in_process_import(tmp_path: Path, ray_session: None) -> None:
    path = _bad_file(tmp_path / "bad.jsonl")
    with open(path, "a") as handle:
        handle.write("\n".join(SAMPLE.read_text().splitlines()[6:200]) + "\n")
    local = _settings(tmp_path, "local")
    on_ray = _settings(tmp_path, "ray", import_commit_rows=64, import_embed_batch_rows=32)
    r_local = run_import(local, _options(tmp_path, path, engine="local"))
    r_ray = run_import(on_ray, _options(tmp_path, path, engine="ray", report_path=str(tmp_path / "r" / "ray.json")))
    assert r_ray.engine == "ray"
    assert maintenance_of(open_store(on_ray, embedding_model=None, embedding_dim=None)).chinese_gloss() is True  # as the actors embedded it
    for key in ("rows_read", "rows_rejected", "messages_logged", "memories_written", "redactions", "rejects_by_reason"):
        assert getattr(r_ray, key) == getattr(r_local, key), key
    assert _ids(on_ray) == _ids(local)
    memories = {r["id"]: r for r in _tables(local)["memories"]}
    for row in _tables(on_ray)["memories"]:
        assert row["index_text"] == memories[row["id"]]["index_text"]
        assert row["created_at"] == memories[row["id"]]["created_at"]
        # The actors' smaller batches and length order change padding, not the vectors.
        assert np.allclose(row["vector"], memories[row["id"]]["vector"], atol=1e-5)
    assert Path(r_ray.rejects_path or "").read_text() == Path(r_local.rejects_path or "").read_text()
    again = run_import(on_ray, _options(tmp_path, path, engine="ray", report_path=str(tmp_path / "r" / "2.json")))
    assert (again.messages_logged, again.memories_written) == (0, 0)
    assert _ids(on_ray) == _ids(local)


@pytest.mark.store
def test_embedding_actors_batch_small_on_cpu_and_as_configured_on_gpu(tmp_path: Path) -> None:
    assert actor_model_batch(_settings(tmp_path, "ray")) == 16
    assert actor_model_batch(_settings(tmp_path, "ray", import_embed_num_gpus=1, embedding_batch_size=256)) == 256
    assert actor_model_batch(_settings(tmp_path, "ray", import_embed_model_batch=48)) == 48
    # A remote endpoint takes a request per batch: it keeps its own batch size.
    assert actor_model_batch(_settings(tmp_path, "ray", embedding_model="openai:text-embedding-3-small")) == 64
    assert EmbedMemories(_settings(tmp_path, "ray")).embedder.batch_size == 16  # type: ignore[attr-defined]


def _count(settings: Settings, table: str) -> int:
    try:
        return maintenance_of(LanceStore(settings.storage.uri, embedding_model=None, embedding_dim=None)).table(table).count_rows()
    except Exception:
        return 0


def test_killed_import_rerun_ends_exact(tmp_path: Path, ray_session: None) -> None:
    import ray

    # Twelve commits of 40 rows: the kill comes once two or three are in, the rest is left to the rerun.
    total = 480
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(SAMPLE.read_text().splitlines()[:total]) + "\n")
    settings = _settings(tmp_path, "killed", import_commit_rows=40, import_embed_batch_rows=40)
    env = dict(os.environ, PYTHONPATH=str(ROOT), AGENT_MEMORY_IMPORT_COMMIT_ROWS="40",
               AGENT_MEMORY_IMPORT_EMBED_BATCH_ROWS="40", AGENT_MEMORY_STORAGE_URI=settings.storage.uri)
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "import", str(path), "--engine", "ray", "--address", address,
         "--report", str(tmp_path / "killed.report.json")],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 600
    at_kill = 0
    while time.monotonic() < deadline and proc.poll() is None:
        at_kill = _count(settings, "memories")
        if at_kill >= 80:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    proc.wait(timeout=30)
    assert 0 < at_kill < total, f"the import was not caught part-way ({at_kill} rows)"
    assert 0 < _count(settings, "memories") < total

    rerun = run_import(settings, _options(tmp_path, path, engine="ray"))
    assert rerun.memories_written + rerun.memories_skipped == total
    reference = _settings(tmp_path, "reference")
    run_import(reference, _options(tmp_path, path, engine="local"))
    assert _ids(settings) == _ids(reference)
    assert [len(v) for v in _tables(settings).values()] == [total, total, total]


def test_submitted_import_job_reports_progress_and_result(tmp_path: Path, ray_session: None) -> None:
    settings = _settings(tmp_path)
    store = open_store(settings, embedding_model="all-MiniLM-L6-v2", embedding_dim=384)
    path = _sample(tmp_path / "h.jsonl", 50)
    job_id = submit_import(settings, path=str(path), org_id="acme", store=store)
    assert store.get_job(OrgScope("acme"), job_id)["state"] in ("queued", "running")
    deadline = time.monotonic() + 300
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = store.get_job(OrgScope("acme"), job_id) or {}
        if job.get("state") in ("succeeded", "failed"):
            break
        time.sleep(0.5)
    assert job["state"] == "succeeded", job.get("error")
    assert job["progress"] == 1.0 and job["report"]["memories_written"] == 50
    assert Path(job["report"]["report_path"]).parent == tmp_path / "import-reports"
    assert store.get_job(OrgScope("other-org"), job_id) is None


@pytest.mark.parametrize("engine", [pytest.param("local", marks=pytest.mark.store), pytest.param("ray", marks=pytest.mark.ray)])
def test_rules_mode_import_reports_the_memories_it_stored(tmp_path: Path, engine: str, request: pytest.FixtureRequest) -> None:
    if engine == "ray":
        request.getfixturevalue("ray_session")
    path = tmp_path / "rules.jsonl"
    rows = [
        {"user_id": "r1", "session_id": "s1", "role": "user", "content": "Hi there, nice weather today!",
         "message_id": "a", "created_at": "2025-01-02T10:00:00+00:00"},
        {"user_id": "r1", "session_id": "s1", "role": "user", "content": "I prefer Neovim for all my coding.",
         "message_id": "b", "created_at": "2025-01-02T10:01:00+00:00"},
        {"user_id": "r1", "session_id": "s1", "role": "user", "content": "以后都用中文回答我。",
         "message_id": "c", "created_at": "2025-01-02T10:02:00+00:00"},
        {"user_id": "r2", "session_id": "s1", "role": "user", "content": "I live in Lisbon.",
         "message_id": "d", "created_at": "2025-01-02T10:00:00+00:00"},
        {"user_id": "r2", "session_id": "s2", "role": "user", "content": "I moved to Porto last month.",
         "message_id": "e", "created_at": "2025-02-02T10:00:00+00:00"},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    settings = _settings(tmp_path)
    report = tmp_path / "report.json"
    result = run_import(settings, _options(tmp_path, path, mode="rules", engine=engine, report_path=str(report)))
    assert result.messages == result.messages_logged == 5
    store = LanceStore(settings.storage.uri, embedding_model=None, embedding_dim=None)
    memories = maintenance_of(store).table("memories").to_arrow().to_pylist()
    active = [m for m in memories if m["status"] == "active"]
    # What the report says is what the store holds: every memory made, the one a move retired.
    assert result.memories == result.memories_written == len(memories) == 4
    assert (len(active), result.memories_superseded, result.memories_skipped) == (3, 1, 0)
    assert result.embedding_model == store.embedding_model
    assert json.loads(report.read_text())["memories_written"] == 4
    contents = " ".join(m["content"] for m in active)
    assert "Neovim" in contents and "中文" in contents and "Porto" in contents and "weather" not in contents
    again = run_import(settings, _options(tmp_path, path, mode="rules", engine=engine, report_path=str(report)))
    assert (again.messages_logged, again.memories, again.memories_written, again.memories_skipped) == (0, 4, 0, 4)
    assert maintenance_of(store).table("memories").count_rows() == 4


def test_import_into_an_open_service_is_the_local_engine_on_its_store(
    tmp_path: Path, make_service: Callable[..., MemoryService]
) -> None:
    path = _bad_file(tmp_path / "bad.jsonl")
    reference = _settings(tmp_path, "reference")
    expected = run_import(reference, _options(tmp_path, path, engine="local"))
    service = make_service()
    result = import_into(service, path)
    for key in ("rows_read", "rows_rejected", "messages_logged", "memories_written", "redactions", "rejects_by_reason"):
        assert getattr(result, key) == getattr(expected, key), key
    assert result.engine == "local" and result.report_path is None and result.rejects_path is None
    assert result.duration_s > 0 and result.rows_per_s > 0
    assert _ids(service.settings) == _ids(reference)
    again = import_into(service, path)
    assert (again.messages_logged, again.memories_written, again.memories_skipped) == (0, 0, 6)
    assert _ids(service.settings) == _ids(reference)


def test_import_into_with_force_org_writes_every_row_to_that_org(tmp_path: Path, service: MemoryService) -> None:
    path = tmp_path / "orgs.jsonl"
    path.write_text("\n".join(json.dumps({"user_id": "u1", "role": "user", "content": f"turn {i}", "org_id": org,
                                          "message_id": f"m{i}"}) for i, org in enumerate(["acme", "evil", "acme"])))
    result = import_into(service, path, org_id="default", force_org=True)
    assert (result.rows_rejected, result.messages_logged, result.memories_written) == (0, 3, 3)
    tables = _tables(service.settings)
    assert {r["org_id"] for r in tables["messages"]} == {r["org_id"] for r in tables["memories"]} == {"default"}
    with pytest.raises(InvalidInputError, match="mode"):
        import_into(service, path, mode="psychic")  # type: ignore[arg-type]
