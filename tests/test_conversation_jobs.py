"""Background conversation extraction on local Ray: per-user order, backpressure, retries, restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from agent_memory.errors import ConflictError, UnavailableError
from agent_memory.job_record import JobRecord
from agent_memory.models import OrgScope, Scope
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from jobs.conversations import (
    KIND,
    NAMESPACE,
    conversation_job_id,
    resume_pending_jobs,
    retry_job,
    scheduler,
    scheduler_name,
    submit_conversation,
    wait_for_job,
)
from loopback.llm_server import Reply, ScriptedLLM, memories_reply, scripted_llm
from storage import LanceStore, open_store
from storage.connect import maintenance_of

ORG = "acme"
JOB_S = 300  # a job's bound: extraction workers load the model first, and a failed one is retried


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with scripted_llm() as server:
        yield server


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, ray_session: None, embedder: Any, llm: ScriptedLLM) -> Iterator[tuple[Settings, MemoryService]]:
    path = tmp_path_factory.mktemp("jobs") / "lancedb"
    settings = Settings(
        storage_uri=str(path), _env_file=None, conversation_queue_size=2, extraction_job_attempts=2,  # type: ignore[call-arg]
        extraction_retry_backoff_s=0.05, extraction_worker_cpus=0.25, llm_base_url=llm.base_url, llm_model="scripted",
        llm_max_retries=0, llm_requests_per_minute=0, conversation_mode="rules",
    )
    store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
    service = MemoryService(store, embedder, settings, defer_access=False)
    yield settings, service
    service.close()
    _release_extraction_actors()


def _release_extraction_actors() -> None:
    """Detached schedulers and workers outlive a test; free their CPUs for the modules after this one."""
    import ray

    for actor in ray.util.list_named_actors(all_namespaces=True):
        if actor["namespace"] == NAMESPACE:
            ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE), no_restart=True)
    deadline = time.monotonic() + 120
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources().get("CPU", 0) and time.monotonic() < deadline:
        time.sleep(0.2)


def _conversation(service: MemoryService, user: str, session: str, *texts: str) -> list[Any]:
    records = service.message_records(ORG, user, session, [
        {"role": "user", "content": t, "message_id": f"{session}:m{i}"} for i, t in enumerate(texts, 1)
    ])
    service.log_messages(ORG, records)
    return records


def test_jobs_of_one_user_run_in_order_and_a_full_queue_refuses(env: tuple[Settings, MemoryService]) -> None:
    settings, service = env
    first = _conversation(service, "u1", "s1", "I do all my coding in VS Code.")
    second = _conversation(service, "u1", "s2", "Actually I switched from VS Code to Neovim last month.")
    third = _conversation(service, "u1", "s3", "Quick update: I dropped Neovim, I'm on Zed full-time now.")
    a = submit_conversation(settings, ORG, "u1", "s1", first)
    b = submit_conversation(settings, ORG, "u1", "s2", second, "rules")
    with pytest.raises(UnavailableError) as info:  # two jobs wait or run: the queue (size 2) is full
        submit_conversation(settings, ORG, "u1", "s3", third)
    assert info.value.code == "queue_full"
    assert submit_conversation(settings, ORG, "u1", "s1", first) == a  # the same messages name the same job
    done = [wait_for_job(settings, ORG, job_id, timeout_s=JOB_S) for job_id in (a, b)]
    c = submit_conversation(settings, ORG, "u1", "s3", third)
    done.append(wait_for_job(settings, ORG, c, timeout_s=JOB_S))
    assert [j["state"] for j in done] == ["succeeded"] * 3
    spans = [(datetime.fromisoformat(j["report"]["started_at"]), datetime.fromisoformat(j["report"]["finished_at"])) for j in done]
    assert spans[0][1] <= spans[1][0]  # one user's jobs never overlap
    ids = [j["report"]["created"][0] for j in done]
    u1 = Scope.user(ORG, "u1")
    assert [m.content for m in service.list(u1).records] == ["Quick update: I dropped Neovim, I'm on Zed full-time now."]
    assert service.get(u1, ids[0]).superseded_by == ids[1] and service.get(u1, ids[1]).superseded_by == ids[2]
    assert done[1]["report"]["superseded"] == [{"id": ids[0], "superseded_by": ids[1]}]


def test_failed_job_is_retried_then_fails_and_can_be_retried_by_hand(env: tuple[Settings, MemoryService], llm: ScriptedLLM) -> None:
    settings, service = env
    records = _conversation(service, "u2", "s1", "我最喜欢喝乌龙茶")
    llm.script(Reply("down", status=500), Reply("still down", status=500))
    job_id = submit_conversation(settings, ORG, "u2", "s1", records, "llm")
    job = wait_for_job(settings, ORG, job_id, timeout_s=JOB_S)
    assert job["state"] == "failed" and "llm_unavailable" in job["error"] and job["report"]["attempts"] == 2
    assert maintenance_of(service.store).table("messages").count_rows("user_id = 'u2'") == 1
    with pytest.raises(ConflictError):
        retry_job(settings, ORG, _succeeded_job(settings))
    llm.script(memories_reply({"content": "用户最喜欢喝乌龙茶", "memory_type": "semantic", "importance": 0.6, "confidence": 0.9}))
    retry_job(settings, ORG, job_id)
    job = wait_for_job(settings, ORG, job_id, timeout_s=JOB_S)
    assert job["state"] == "succeeded" and job["error"] is None
    assert [m.content for m in service.list(Scope.user(ORG, "u2")).records] == ["用户最喜欢喝乌龙茶"]


def _succeeded_job(settings: Settings) -> str:
    store = open_store(settings, embedding_model=None, embedding_dim=None)
    rows = maintenance_of(store).table("jobs").search().where(f"kind = '{KIND}' AND state = 'succeeded'").limit(1).to_arrow().to_pylist()
    return rows[0]["id"]


def test_jobs_left_by_a_dead_scheduler_are_resumed(env: tuple[Settings, MemoryService]) -> None:
    import ray

    settings, service = env
    records = _conversation(service, "u3", "s1", "I live in Denver.")
    # A replica accepted the job (row written, queued) and died before running it.
    job_id = conversation_job_id(ORG, "u3", "s1", ["s1:m1"], "rules")
    job = JobRecord.new(job_id, ORG, KIND, user_id="u3", state="running", report={
        "user_id": "u3", "session_id": "s1", "mode": "rules", "message_ids": [r.message_id for r in records], "attempts": 1,
    })
    service.store.put_job(OrgScope(ORG), job.as_row())
    ray.kill(ray.get_actor(scheduler_name(settings), namespace="agent-memory"), no_restart=True)
    assert job_id in resume_pending_jobs(settings)
    job = wait_for_job(settings, ORG, job_id, timeout_s=JOB_S)
    assert job["state"] == "succeeded" and len(job["report"]["created"]) == 1
    assert ray.get(scheduler(settings).size.remote()) == 0
    assert [m.content for m in service.list(Scope.user(ORG, "u3")).records] == ["I live in Denver."]


def test_a_job_record_round_trips_through_the_jobs_table(service: MemoryService) -> None:
    job = JobRecord.new("job-1", ORG, KIND, user_id="u9", report={"mode": "rules", "message_ids": ["m1"], "attempts": 0})
    service.store.put_job(OrgScope(ORG), job.as_row())
    row = service.store.get_job(OrgScope(ORG), "job-1")
    assert row == job.as_row() and JobRecord.from_row(row) == job
    assert service.store.get_job(OrgScope("globex"), "job-1") is None
