"""Every table, job and export on S3-compatible object storage: a real S3 server on loopback
(moto, `loopback.s3_server`), the real model, no Ray. And processes committing to the same S3
tables at once (two Writer shards, an import, a consolidation run) lose nothing and duplicate
nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from agent_memory.analytics import monthly_counts, near_duplicate_clusters, project_2d
from agent_memory.embedding import Embedder, bundled_model_path
from agent_memory.extraction import extract_and_store
from agent_memory.models import Scope
from agent_memory.portability import dumps
from agent_memory.service import MemoryService
from agent_memory.settings import Settings, job_report_dir
from jobs.consolidate import LEASE, run_consolidation
from jobs.importer import ImportOptions, run_import
from jobs.reembed import reembed
from loopback.s3_server import S3Server
from storage import LanceStore
from storage.connect import maintenance_of
from storage.schema import TABLES
from tests.conftest import ROOT, Clock

ORG = "acme"
CANARY = "quokkacanaryzx"  # letters only: redaction leaves it alone


def _prefix(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")


def _settings(server: S3Server, prefix: str) -> Settings:
    return Settings(storage_uri=server.uri(prefix), storage_options=server.storage_options,
                    _env_file=None)  # type: ignore[call-arg]


@pytest.fixture
def s3_settings(s3_server: S3Server, request: pytest.FixtureRequest) -> Settings:
    """Settings of a store of this test's own under the bucket."""
    return _settings(s3_server, _prefix(request.node.name))


@pytest.fixture(scope="module")
def s3_service(embedder: Embedder, s3_server: S3Server) -> Iterator[MemoryService]:
    """One store on S3 for the tests that each keep to an org of their own (opening one costs
    dozens of commits over HTTP)."""
    settings = _settings(s3_server, "shared")
    store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim,
                       storage_options=settings.storage.options)
    with MemoryService(store, embedder, settings, clock=Clock(), defer_access=False,
                       maintenance=maintenance_of(store)) as service:
        yield service


@pytest.fixture
def own_service(embedder: Embedder, s3_settings: Settings) -> Iterator[MemoryService]:
    """A service on a store of this test's own."""
    store = LanceStore(s3_settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim,
                       storage_options=s3_settings.storage.options)
    with MemoryService(store, embedder, s3_settings, clock=Clock(), defer_access=False,
                       maintenance=maintenance_of(store)) as service:
        yield service


def _keys(server: S3Server, settings: Settings) -> list[str]:
    return server.objects(settings.storage.uri.removeprefix(f"s3://{server.bucket}/") + "/")


def test_the_server_refuses_a_second_create_of_one_key(s3_server: S3Server) -> None:
    """What Lance's commits rest on: a put with `If-None-Match: *` of a key that exists is refused."""
    client = s3_server._client()
    client.put_object(Bucket=s3_server.bucket, Key="probe/manifest", Body=b"first")
    with pytest.raises(client.exceptions.ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=s3_server.bucket, Key="probe/manifest", Body=b"second", IfNoneMatch="*")
    assert s3_server.read("probe/manifest") == b"first"


def test_service_writes_searches_updates_and_deletes_on_s3(
    s3_service: MemoryService, s3_server: S3Server, tmp_path: Path
) -> None:
    ids = s3_service.add_many("svc", [{"user_id": "u1", "content": c} for c in (
        "I prefer Python for backend services", "I am allergic to peanuts", "My dog is called Max")]).ids
    assert s3_service.add_many("svc", [{"user_id": "u1", "content": "I am allergic to peanuts"}]).ids == [ids[1]]
    scope = Scope.user("svc", "u1")
    assert s3_service.recall("svc", {"user_id": "u1", "query": "food allergy"}).memories[0].id == ids[1]
    s3_service.update(scope, ids[0], {"content": "I now prefer Rust for backend services"})
    s3_service.delete(scope, ids[2])
    assert sorted(r.content for r in s3_service.list(scope).records) == [
        "I am allergic to peanuts", "I now prefer Rust for backend services"]
    assert [e.action for e in s3_service.history(scope, ids[0])] == ["created", "updated"]
    assert s3_service.recall("svc", {"user_id": "u2", "query": "peanuts"}).memories == []

    # Everything lives in the bucket: a manifest per table, nothing written beside the process.
    keys = _keys(s3_server, s3_service.settings)
    assert {k.split("/")[1] for k in keys} >= {f"{name}.lance" for name in TABLES}
    assert any("/_versions/" in k and k.endswith(".manifest") for k in keys)
    assert s3_service.stats("svc")["memories"]["total"] == 2
    # A second process's view: a fresh store sees the same rows.
    again = LanceStore(s3_service.settings.storage.uri, embedding_model=None, embedding_dim=None,
                       storage_options=s3_service.settings.storage.options)
    assert maintenance_of(again).table("memories").count_rows("status = 'active'") == 2


def test_conversation_logging_on_s3(s3_service: MemoryService) -> None:
    turns = [{"role": "user", "content": "I live in Lisbon and I am vegetarian."},
             {"role": "assistant", "content": "Noted!"}]
    records = s3_service.message_records("conv", "u1", "chat-1", turns)
    assert len(s3_service.log_messages("conv", records)) == 2
    assert s3_service.log_messages("conv", records) == set()  # a retry logs nothing twice
    assert [m.content for m in s3_service.session_messages(Scope.user("conv", "u1"), "chat-1")] == [
        t["content"] for t in turns]
    assert extract_and_store(s3_service, "conv", records, "rules", actor="test").created
    assert s3_service.recall("conv", {"user_id": "u1", "query": "where does the user live"}).memories


def test_import_with_the_local_engine_on_s3(s3_settings: Settings, tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text("\n".join((ROOT / "examples" / "sample_history.jsonl").read_text().splitlines()[:30]) + "\n")
    options = ImportOptions(path=str(history), mode="rules", engine="local", show_progress=False,
                            report_path=str(tmp_path / "reports" / "h.report.json"))
    first = run_import(s3_settings, options)
    assert first.engine == "local" and first.messages_logged > 0 and first.memories_written > 0
    again = run_import(s3_settings, options)
    assert again.messages_logged == 0 and again.memories_written == 0  # a rerun adds nothing
    store = LanceStore(s3_settings.storage.uri, embedding_model=None, embedding_dim=None,
                       storage_options=s3_settings.storage.options)
    for name in ("memories", "messages"):
        ids = maintenance_of(store).table(name).to_arrow().column("id").to_pylist()
        assert len(ids) == len(set(ids)), name


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second model: the bundled encoder with a seeded random 384->32 projection."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(3)
    base = SentenceTransformer(bundled_model_path(), device="cpu")
    dense = models.Dense(in_features=384, out_features=32, activation_function=torch.nn.Identity())
    path = tmp_path_factory.mktemp("models") / "tiny-32"
    SentenceTransformer(modules=[base[0], base[1], dense], device="cpu").save(str(path))
    return str(path)


def test_reembed_on_s3(own_service: MemoryService, tiny_model: str) -> None:
    ids = own_service.add_many(ORG, [{"user_id": "u1", "content": c} for c in (
        "I prefer Python for backend services", "I am allergic to peanuts")]).ids
    report = reembed(own_service.settings, tiny_model, engine="local")
    assert report["embedded"] == 2 and report["dim"] == 32
    store = LanceStore(own_service.settings.storage.uri, embedding_model=report["model"], embedding_dim=32,
                       storage_options=own_service.settings.storage.options)
    rows = maintenance_of(store).table("memories").to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(ids) and all(len(r["vector"]) == 32 for r in rows)
    assert "memories_reembed" not in store.connection.db.table_names()  # the staging table is dropped


def test_consolidation_on_s3(s3_service: MemoryService) -> None:
    clock = Clock()
    s3_service.add_many("cons", [{"user_id": "alice", "content": c} for c in (
        "The user uses Python for backend work", "The user mainly uses Python for backend work",
        "My dog is called Max", "I am allergic to peanuts")])
    report = run_consolidation(s3_service.settings, org_id="cons", now=clock(), use_ray=False)
    assert report["engine"] == "in-process" and report["users"] == 1 and not report["errors"]
    assert report["memories_merged"] >= 1
    active = s3_service.list(Scope.user("cons", "alice")).records
    assert len(active) == 4 - report["memories_merged"]
    assert maintenance_of(s3_service.store).leases.holder(LEASE, clock()) is None  # released


def test_erasure_on_s3_leaves_no_byte_of_the_user_in_the_bucket(
    s3_service: MemoryService, s3_server: S3Server
) -> None:
    s3_service.add_many("era", [{"user_id": f"b{u}", "content": f"bystander {u} plays chess"} for u in range(20)])
    one = s3_service.add("era", {"user_id": "erin", "content": f"single write {CANARY}", "metadata": {"tag": CANARY}})
    s3_service.add_many("era", [{"user_id": "erin", "content": f"batch write {CANARY} {i}"} for i in range(3)])
    s3_service.update(Scope.user("era", "erin"), one, {"content": f"patched to {CANARY} again"})
    records = s3_service.message_records("era", "erin", "chat", [{"role": "user", "content": f"I love {CANARY} tea."}])
    s3_service.log_messages("era", records)
    assert s3_service.recall("era", {"user_id": "erin", "query": CANARY}).memories
    s3_service.access.flush()
    maintenance = maintenance_of(s3_service.store)
    maintenance.optimize()
    keys = _keys(s3_server, s3_service.settings)
    assert any(CANARY.encode() in s3_server.read(k) for k in keys), "the canary must be in the bucket before"

    receipt = s3_service.erase_user("era", "erin", actor="test")

    assert [k for k in _keys(s3_server, s3_service.settings) if CANARY.encode() in s3_server.read(k)] == []
    for name in TABLES:  # every retained version, read whole
        table = maintenance.table(name)
        for version in maintenance.versions(name):
            rows = table.to_lance().checkout_version(version).to_table().to_pylist()
            assert not any(CANARY in json.dumps(r, default=str) for r in rows), (name, version)
        if receipt["rows_deleted"][name]:
            assert len(maintenance.versions(name)) <= 2, name
    assert s3_service.recall("era", {"user_id": "erin", "query": CANARY, "min_score": 0}).memories == []
    assert len(s3_service.list(Scope.user("era", "b7")).records) == 1


def test_export_erase_restore_on_s3(s3_service: MemoryService) -> None:
    scope = Scope.user("exp", "u1")
    ids = s3_service.add_many("exp", [{"user_id": "u1", "content": "The user prefers Python", "metadata": {"n": 1}},
                                    {"user_id": "u1", "content": "用户喜欢用 Go 写后端服务。"}]).ids
    s3_service.delete(scope, ids[1])
    s3_service.log_messages("exp", s3_service.message_records("exp", "u1", "s1", [{"role": "user", "content": "hello"}]))
    first = "".join(dumps(line) + "\n" for line in s3_service.export_user(scope))
    held = json.loads(first.splitlines()[-1])["memories"]
    s3_service.erase_user("exp", "u1", actor="test")
    assert s3_service.export_user(scope) and s3_service.list(scope, status=None).records == []
    assert s3_service.restore_user("exp", first.splitlines())["restored"]["memories"] == held >= 1
    assert "".join(dumps(line) + "\n" for line in s3_service.export_user(scope)) == first


def test_the_analytics_read_a_store_on_s3(s3_service: MemoryService) -> None:
    s3_service.add_many("ana", [{"user_id": "u1", "content": c} for c in (
        "The user uses Python for backend work", "The user mainly uses Python for backend work",
        "My dog is called Max")])
    rows = s3_service.maintenance.table("memories").to_pandas()  # as the notebooks read it
    rows = rows[rows["org_id"] == "ana"]
    assert monthly_counts(rows["created_at"], rows["memory_type"]).to_numpy().sum() == 3
    vectors = np.stack(rows["vector"].to_numpy())
    labels, pairs = near_duplicate_clusters(vectors, rows["user_id"], 0.8)
    assert len(pairs) == 1 and sorted(labels.tolist()) == [-1, 0, 0]
    assert project_2d(vectors).shape == (3, 2)


def test_job_reports_of_a_store_on_s3_go_to_a_local_directory(
    s3_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert job_report_dir(s3_settings) == tmp_path / "import-reports"
    local = s3_settings.replace(storage_uri=str(tmp_path / "store"))
    assert job_report_dir(local) == tmp_path / "import-reports"


# Run in a process of its own by the test below: `writer N`, `import PATH` or `consolidate`. Each
# gets ready (model loaded, store open), says so, waits for the go, works, and prints its result.
ROLE = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from agent_memory.settings import Settings
    from storage.connect import open_service
    from storage.tables import CommitRetries

    role, arg, flags = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    settings = Settings(_env_file=None)
    if role == "writer":
        service = open_service(settings)
        service.embedder.embed_batch(["warm"])
    elif role == "import":
        from jobs.importer import ImportOptions, run_import
        from storage import open_store
        from agent_memory.embedding import build_embedder
        store = open_store(settings, embedding_model=None, embedding_dim=None)
        build_embedder(settings).embed_batch(["warm"])  # loads (and caches) the model first
    else:
        from jobs.consolidate import run_consolidation
    (flags / f"ready-{os.getpid()}").touch()
    while not (flags / "go").exists():
        time.sleep(0.05)
    if role == "writer":
        acked = []
        for batch in range(4):
            contents = [f"shard {arg} user {u} fact {batch}: code {batch * 10 + u} for room {arg}{u}{batch}"
                        for u in range(3)]
            result = service.add_many("acme", [{"user_id": f"w{arg}-u{u}", "content": c}
                                               for u, c in enumerate(contents)], actor=f"shard-{arg}")
            acked += list(zip(result.ids, contents))
        out = {"acked": acked}
    elif role == "import":
        result = run_import(settings, ImportOptions(path=arg, mode="rules", engine="local", show_progress=False,
                                                    report_path=str(flags / "import.report.json")))
        out = {"messages_logged": result.messages_logged, "memories_written": result.memories_written}
    else:
        report = run_consolidation(settings, use_ray=False)
        out = {"errors": report["errors"], "merged": report["memories_merged"], "users": report["users"]}
    print(json.dumps({**out, "retries": CommitRetries.count}))
""")


def test_writers_an_import_and_consolidation_at_once_lose_and_duplicate_nothing(
    own_service: MemoryService, s3_server: S3Server, tmp_path: Path
) -> None:
    settings = own_service.settings
    # Users for consolidation to merge, written first; the import's users and the shards' are others.
    own_service.add_many(ORG, [{"user_id": "c1", "content": c} for c in (
        "The user uses Python for backend work", "The user mainly uses Python for backend work",
        "My dog is called Max", "My dog is named Max")])
    turns = [{"org_id": ORG, "user_id": f"imp{u}", "session_id": f"s{u}", "role": "user",
              "content": f"I live in city number {u} and I am {20 + u} years old, turn {i}.",
              "created_at": f"2025-05-0{1 + i}T10:00:00+00:00", "message_id": f"imp{u}-m{i}"}
             for u in range(4) for i in range(5)]
    history = tmp_path / "history.jsonl"
    history.write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    flags = tmp_path / "flags"
    flags.mkdir()
    env = {**os.environ, **s3_server.env(settings.storage.uri.removeprefix(f"s3://{s3_server.bucket}/")),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": "1"}
    roles = [("writer", "0"), ("writer", "1"), ("import", str(history)), ("consolidate", "-")]
    procs = [subprocess.Popen([sys.executable, "-c", ROLE, role, arg, str(flags)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for role, arg in roles]
    try:
        _wait_for(lambda: len(list(flags.glob("ready-*"))) == len(roles) or any(p.poll() is not None for p in procs))
        (flags / "go").touch()
        outputs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    writers, imported, consolidated = results[:2], results[2], results[3]
    assert consolidated["errors"] == [] and consolidated["users"] >= 1

    tables = maintenance_of(LanceStore(settings.storage.uri, embedding_model=None, embedding_dim=None,
                                       storage_options=settings.storage.options))
    memories = tables.table("memories").to_arrow().to_pylist()
    by_id = Counter(r["id"] for r in memories)
    by_content = Counter(r["content"] for r in memories)
    acked = [tuple(pair) for w in writers for pair in w["acked"]]
    assert len(acked) == 24 and len({i for i, _ in acked}) == 24
    assert [(i, by_id[i], by_content[c]) for i, c in acked if by_id[i] != 1 or by_content[c] != 1] == []
    for name in ("memories", "messages", "events", "jobs"):
        ids = Counter(tables.table(name).to_arrow().column("id").to_pylist())
        assert [i for i, n in ids.items() if n > 1] == [], name
    messages = tables.table("messages").to_arrow().to_pylist()
    assert sorted(m["message_id"] for m in messages if m["user_id"].startswith("imp")) == sorted(
        t["message_id"] for t in turns)
    assert imported["messages_logged"] == len(turns)
    assert sum(1 for r in memories if r["user_id"].startswith("imp")) == imported["memories_written"] > 0
    assert sum(1 for r in memories if r["user_id"] == "c1") == 4  # merged ones keep their rows


def _wait_for(ready: Callable[[], bool], timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, "the processes did not get ready"
        time.sleep(0.1)


def test_racing_commits_from_many_processes_keep_every_row_once(s3_server: S3Server, tmp_path: Path) -> None:
    """Appends, insert-if-absent on shared ids, updates, deletes and compaction from 3 processes
    on one S3 table at once, through the store's retry: every row once, no write lost."""
    import lancedb
    import pyarrow as pa

    from storage.schema import PRIMARY_KEY

    uri = s3_server.uri("race")
    lancedb.connect(uri, storage_options=s3_server.storage_options).create_table("t", schema=pa.schema([
        pa.field("id", pa.string(), nullable=False, metadata=PRIMARY_KEY), pa.field("v", pa.int64())]))
    script = textwrap.dedent("""
        import json, sys, time
        from pathlib import Path
        import lancedb, pyarrow as pa
        from storage.tables import Tables, retrying

        me, uri, options, go = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), Path(sys.argv[4])
        table = lancedb.connect(uri, storage_options=options).open_table("t")
        while not go.exists():
            time.sleep(0.01)
        for r in range(5):
            own = [f"{me}-{r}-{i}" for i in range(4)]
            retrying(lambda: table.add(pa.table({"id": own, "v": [0] * 4}, schema=table.schema)), "add")
            shared = pa.table({"id": [f"s-{r}-{i}" for i in range(3)], "v": [0] * 3}, schema=table.schema)
            retrying(lambda: table.merge_insert("id").when_not_matched_insert_all().use_index(False)
                     .execute(shared), "insert")
            retrying(lambda: table.update(where=f"id = '{me}-{r}-0'", values={"v": 1}), "update")
            retrying(lambda: table.delete(f"id = '{me}-{r}-3'"), "delete")
            if r % 2:
                try:
                    retrying(lambda: table.to_lance().optimize.compact_files(), "compact", attempts=10)
                except OSError as exc:  # a compaction that kept losing gives up: it writes nothing
                    assert "conflict" in str(exc).lower(), exc
    """)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", script, f"p{n}", uri, json.dumps(s3_server.storage_options),
                               str(go)], env=env, stderr=subprocess.PIPE, text=True) for n in range(3)]
    go.touch()
    errors = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-2000:] for e in errors]
    rows = lancedb.connect(uri, storage_options=s3_server.storage_options).open_table("t").to_arrow().to_pylist()
    ids = Counter(r["id"] for r in rows)
    expected = {f"p{n}-{r}-{i}" for n in range(3) for r in range(5) for i in range(3)} | {
        f"s-{r}-{i}" for r in range(5) for i in range(3)}
    assert set(ids) == expected and max(ids.values()) == 1
    assert {r["id"] for r in rows if r["v"] == 1} == {f"p{n}-{r}-0" for n in range(3) for r in range(5)}



def test_a_table_made_before_ids_were_primary_keys_gets_the_declaration(s3_server: S3Server) -> None:
    import lancedb
    import pyarrow as pa

    from storage.schema import PRIMARY_KEY
    from storage.tables import declare_primary_key

    db = lancedb.connect(s3_server.uri("older"), storage_options=s3_server.storage_options)
    table = db.create_table("t", pa.table({"id": ["a"], "v": [1]}, schema=pa.schema([
        pa.field("id", pa.string(), nullable=False), pa.field("v", pa.int64())])))
    assert not table.schema.field("id").metadata
    declare_primary_key(table)
    assert db.open_table("t").schema.field("id").metadata == PRIMARY_KEY
    assert db.open_table("t").to_arrow().to_pylist() == [{"id": "a", "v": 1}]
