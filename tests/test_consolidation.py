"""Consolidation: clustering, merging, expiry, decay, purge, the lease and the Ray Data job (with an LLM and on a
schedule: test_consolidation_llm.py)."""

from __future__ import annotations

import io
import json
import shutil
import threading
from contextlib import redirect_stdout
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_memory.consolidation import apply_plan, plan_user
from agent_memory.errors import ConflictError
from agent_memory.job_record import JobRecord
from agent_memory.merge import merge_records
from agent_memory.models import MemoryRecord, OrgScope, Scope, utcnow
from agent_memory.service import MemoryService
from agent_memory.stance import persons, polarity, stance
from agent_memory.wording import (
    content_sequence,
    content_terms,
    exact_key,
    names,
    owned_terms,
    rewording,
    word_set,
)
from cli.main import main
from jobs.consolidate import LEASE, job_id, run_consolidation
from jobs.schedule import _run_and_report, submit_consolidation
from storage.connect import maintenance_of
from tests.conftest import Clock

U = Scope.user("acme", "alice")


def names_agree(a: str, b: str) -> bool:
    """What linking asks of a pair's names: every name or number of each is a word of the other."""
    return names(a) <= word_set(b) and names(b) <= word_set(a)
CLUSTERS = {
    "python": ["The user uses Python for backend work", "The user mainly uses Python for backend work",
               "the user uses python for backend work!"],
    "dog": ["My dog is called Max", "My dog is named Max"],
    "coffee": ["我喜欢喝咖啡", "我很喜欢喝咖啡", "我喜欢喝咖啡。"],
    "home": ["用户住在上海浦东", "用户目前住在上海浦东"],
}
# Each shares words (or, for Chinese, characters) with a cluster but says something else.
LOOKALIKES = ["I like Python", "my colleague hates Python", "I don't use Python for backend work",
              "My cat is called Max", "My sister's dog is called Max", "The user's intern uses Python for backend work",
              "我同事不喜欢喝咖啡", "我同事喜欢喝咖啡", "我喜欢喝茶", "用户住在北京海淀", "用户父母住在上海浦东",
              # One word apart, cosine 0.90: above consolidation_similarity, below the reworded bar.
              "My birthday is in March", "My birthday is in September"]


def plant(service: MemoryService, user: str = "alice", org: str = "acme") -> dict[str, str]:
    """Write the planted memories; return content -> id."""
    texts = [t for group in CLUSTERS.values() for t in group] + LOOKALIKES
    ids = service.add_many(org, [{"user_id": user, "content": t, "importance": 0.5} for t in texts]).ids
    return dict(zip(texts, ids, strict=True))


def memories_of(service: MemoryService, scope: Scope = U) -> dict[str, MemoryRecord]:
    records, _ = service.store.user_memories(scope)
    return {r.id: r for r in records}


def consolidate(service: MemoryService, clock: Clock, **kwargs: Any) -> dict[str, Any]:
    return run_consolidation(service.settings, now=clock(), use_ray=kwargs.pop("use_ray", False), **kwargs)


def test_polarity_content_terms_and_rewording() -> None:
    assert polarity("I don't like Python") and polarity("my colleague hates Python") and polarity("我同事不喜欢喝咖啡")
    assert not polarity("I like Python") and not polarity("我喜欢喝咖啡")
    # An adverb of time is no content term; a person is.
    assert content_terms("我现在住在上海浦东") == content_terms("我目前住在上海浦东")
    assert content_terms("我父母住在上海浦东") - content_terms("我住在上海浦东")
    # Inflection and order are the same terms (Snowball stems: "codes" and "code" agree); one
    # word swapped is a rewording; words added, or changed on both sides, a rephrasing.
    def kind(a: str, b: str) -> str | None:
        return rewording(content_sequence(a), content_sequence(b), owned_terms(a) | owned_terms(b))

    assert kind("My dog is called Max", "Max is what my dog was called") == "same"
    assert kind("The user lives in Berlin", "The user lives in Berlin now.") == "same"
    assert kind("The user codes in Emacs", "the user's code is in Emacs") == "same"
    assert kind("My dog is called Max", "My dog is named Max") == "reworded"
    assert kind("The user works as a nurse", "The user works as a nurse at the city hospital") == "rephrased"
    assert kind("The user is employed as a teacher", "The user works as a teacher at their company") == "rephrased"
    # A noun added after a possessive makes it someone else's fact; so does a person (`stance`).
    assert kind("The user likes tuna", "The user's cat likes tuna") is None
    assert kind("The user is based in Oslo", "The user's company is based in Oslo") is None
    assert kind("I am based in Oslo", "My company is based in Oslo") is None
    assert stance("The user works as a nurse") != stance("The user's sister works as a nurse")
    # Sharing only the subject is sharing nothing.
    assert kind("The user likes tea", "The user drives a bus") is None
    assert content_sequence("My family lives in Italy, mostly") == ["famili", "live", "itali"]
    assert kind("My dog is called Max", "My cat is named Bob") is None  # nothing shared
    assert kind("I am", "I do yoga") is None  # nothing to elaborate on
    assert content_sequence("the user's咖啡") == ["user", "咖", "啡"]
    assert "emili" in content_sequence("我的朋友Emily喜欢咖啡")


def test_stance_people_and_names() -> None:
    # Characters of a negator inside words that do not negate ("特别" especially, "非常" very).
    assert not polarity("我特别喜欢喝咖啡") and not polarity("我非常喜欢喝咖啡") and polarity("我不太喜欢喝咖啡")
    assert persons("The user's wife likes tea") == {"wife"} and persons("我老婆喜欢喝茶") == {"老婆"}
    # A role that is also a job is someone else only after a possessive.
    assert persons("The user works as a product manager") == set()
    assert persons("The user's manager speaks Vietnamese") == {"manager"}
    assert persons("别人的狗叫旺财") == {"别人"} and not polarity("别人的狗叫旺财")
    assert persons("The user's ex-wife lives in Oslo") == {"wife"}
    assert persons("我会弹吉他") == set() and not polarity("我住在非洲") and not polarity("我想买戒指")
    assert polarity("The user seldom eats meat") and not polarity("The user eats meat")
    # Ordinary phrases are not plans: going to a place, thinking of ideals.
    assert stance("The user is going to the gym on Mondays") == stance("The user goes to the gym on Mondays")
    assert stance("我的理想是当老师") == stance("我是老师") and stance("我想当老师") != stance("我是老师")
    # Plans and past habits are other facts; two wordings of a plan agree.
    assert stance("The user used to have a Pixel phone") != stance("The user has a Pixel phone")
    assert stance("我打算去日本旅游") == stance("我计划去日本旅行") != stance("我去日本旅游")
    assert stance("The user plans to move to Oslo") == stance("The user wants to move to Oslo")
    # Names and numbers must be the same; a capital that starts a sentence is no name.
    assert names_agree("Italian cuisine is the user's favourite.", "The user's favorite cuisine is Italian")
    assert not names_agree("The user uses a Pixel 8 phone", "The user uses a Pixel 7 phone")
    assert not names_agree("The user's blood type is AB-", "The user's blood type is AB+")
    assert names_agree("The user is on a gluten-free diet", "The user eats gluten-free")
    # A Latin name inside Chinese text counts; a sentence in capitals names nothing by its capitals.
    assert not names_agree("我喜欢用Python", "我喜欢用Go") and names_agree("我喜欢用Python", "我最喜欢Python")
    assert names_agree("THE USER LIKES TEA", "The user likes tea")
    assert exact_key("The user's blood type is AB-.") != exact_key("The user's blood type is AB+.")
    assert exact_key("My dog is called Max!") == exact_key("my dog is called max")
    assert rewording(content_sequence("The user codes in Emacs"), content_sequence("The user writes code in Emacs")) == (
        "rephrased"
    )


def test_rephrasings_merge_but_other_people_times_and_names_stay_apart(
    service: MemoryService, clock: Clock
) -> None:
    # Each lookalike's cosine to the first text is above consolidation_similarity (0.885 to 0.961
    # with the bundled model): only the guards keep them apart.
    same = ["The user is employed as a teacher", "The user works as a teacher at their company"]
    same_zh = ["我家的狗叫旺财", "我的狗名叫旺财", "我特别喜欢喝咖啡", "我喜欢喝咖啡"]
    apart = ["The user's manager works as a teacher at their company",
             "The user used to work as a teacher at their company",
             "The user wants to work as a teacher at their company",
             "The user's blood type is AB-", "The user's blood type is AB+",
             "The user uses a Pixel 8 phone", "The user uses a Pixel 7 phone",
             "我以前喜欢喝咖啡", "我打算去日本旅游", "我去日本旅游"]
    texts = same + same_zh + apart
    ids = dict(zip(texts, service.add_many("acme", [{"user_id": "alice", "content": t} for t in texts]).ids,
                   strict=True))
    report = consolidate(service, clock)
    assert report["clusters"] == 3 and report["memories_merged"] == 3, report
    rows = memories_of(service)
    for group in (same, same_zh[:2], same_zh[2:]):
        assert sorted(rows[ids[t]].status for t in group) == ["active", "superseded"], group
    for text in apart:
        assert rows[ids[text]].status == "active", text


def test_a_swapped_word_needs_the_reworded_similarity(service: MemoryService, clock: Clock) -> None:
    # The same fact in other words, at cosine 0.918 with the bundled model: one content word swapped.
    service.add_many("acme", [{"user_id": "alice", "content": t} for t in ("My dog is called Max", "My dog's name is Max")])
    records, vectors = service.store.user_memories(U)

    def clusters(**thresholds: float) -> int:
        return len(plan_user(U, records, vectors, clock(), service.settings.replace(**thresholds)).clusters)

    assert clusters() == 0  # defaults: 0.85 for the same words, 0.92 for a swapped one
    assert clusters(consolidation_reworded_similarity=0.9) == 1
    # A reworded pair never needs less than a pair with the same words.
    assert clusters(consolidation_similarity=0.95, consolidation_reworded_similarity=0.9) == 0


def test_planted_clusters_merge_and_lookalikes_stay_apart(service: MemoryService, clock: Clock) -> None:
    ids = plant(service)
    report = consolidate(service, clock)
    assert report["clusters"] == 4 and report["memories_merged"] == 6 and report["errors"] == []
    rows = memories_of(service)
    for group in CLUSTERS.values():
        members = [rows[ids[t]] for t in group]
        active = [m for m in members if m.status == "active"]
        assert len(active) == 1, group
        survivor = active[0]
        for m in members:
            if m.id != survivor.id:
                assert m.status == "superseded" and m.superseded_by == survivor.id
        # Union of sources, highest importance: nothing of the restatements is lost.
        assert survivor.updated_at == clock()
    for text in LOOKALIKES:
        assert rows[ids[text]].status == "active", text
    # The merged memory's history says what it absorbed; a superseded one says by whom.
    canonical = next(rows[ids[t]] for t in CLUSTERS["coffee"] if rows[ids[t]].status == "active")
    merged_event = service.history(U, canonical.id)[-1]
    assert merged_event.action == "merged" and len(merged_event.after["absorbed"]) == 2


def test_merge_unions_sources_and_sums_access(service: MemoryService, clock: Clock) -> None:
    a = service.add("acme", {"user_id": "alice", "content": "My dog is called Max", "importance": 0.9,
                             "source_ids": ["m1"]})
    b = service.add("acme", {"user_id": "alice", "content": "My dog is named Max", "importance": 0.2,
                             "source_ids": ["m2"]})
    service.store.record_access(OrgScope("acme"), {"alice": {a: 2, b: 3}}, clock())
    consolidate(service, clock)
    rows = memories_of(service)
    survivor = rows[a]  # the more important one stands for both
    assert survivor.status == "active" and rows[b].superseded_by == a
    assert sorted(survivor.source_ids) == ["m1", "m2"] and survivor.access_count == 5
    assert survivor.importance == pytest.approx(0.9)


def test_recall_returns_the_merged_memory_once(service: MemoryService, clock: Clock) -> None:
    ids = plant(service)
    query = {"user_id": "alice", "query": "which language for backend work", "top_k": 10}
    before = [h.id for h in service.recall("acme", query).memories]
    assert sum(1 for t in CLUSTERS["python"] if ids[t] in before) == 3
    consolidate(service, clock)
    after = [h.id for h in service.recall("acme", query).memories]
    assert sum(1 for t in CLUSTERS["python"] if ids[t] in after) == 1
    assert len(after) == len(set(after))


def test_second_run_is_a_no_op_even_after_recalls(service: MemoryService, clock: Clock) -> None:
    plant(service)
    consolidate(service, clock)
    snapshot = {i: r.model_dump() for i, r in memories_of(service).items()}
    # Access-count updates between runs are not changes a run counts.
    service.recall("acme", {"user_id": "alice", "query": "coffee 咖啡 Python"})
    service.access.flush()
    second = consolidate(service, clock)
    assert {k: second[k] for k in ("clusters", "memories_merged", "expired", "decayed", "purged")} == {
        "clusters": 0, "memories_merged": 0, "expired": 0, "decayed": 0, "purged": 0}
    after = {i: r.model_dump(exclude={"access_count", "last_accessed_at"}) for i, r in memories_of(service).items()}
    assert after == {i: {k: v for k, v in r.items() if k not in ("access_count", "last_accessed_at")}
                     for i, r in snapshot.items()}


def _dry_run(service: MemoryService, pairs: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, Any]]:
    """Store the pairs' texts for one user; the ids by text, and `consolidate --dry-run`'s plan."""
    texts = [t for pair in pairs for t in pair]
    ids = dict(zip(texts, service.add_many("acme", [{"user_id": "alice", "content": t} for t in texts]).ids,
                   strict=True))
    out = io.StringIO()
    with redirect_stdout(out):
        main(["consolidate", "--dry-run", "--engine", "local", "--storage-uri", service.settings.storage.uri])
    return ids, json.loads(out.getvalue())


def _merged_pairs(plan: dict[str, Any]) -> set[frozenset[str]]:
    return {frozenset([c["canonical"]["id"], *(m["id"] for m in c["merged"])]) for c in plan["cluster_detail"]}


def test_reordered_and_reworded_chinese_merges_and_swapped_roles_never_do(service: MemoryService, clock: Clock) -> None:
    same = [("用户主要使用 Python 进行开发。", "用户开发主要使用 Python。"),
            ("我对花生和芒果过敏。", "我对芒果和花生过敏。"),
            ("用户是左撇子。", "我是个左撇子呀"),
            ("The user is allergic to cats.", "I'm allergic to cats.")]
    swapped = [("I prefer trains over planes.", "I prefer planes over trains."),
               ("我不喝咖啡，只喝茶。", "我不喝茶，只喝咖啡。"),
               ("The user moved from Berlin to Munich.", "The user moved from Munich to Berlin."),
               ("同事向用户借了钱。", "用户向同事借了钱。"),
               ("My husband cooks and I do the dishes.", "I cook and my husband does the dishes.")]
    ids, plan = _dry_run(service, same + swapped)
    assert _merged_pairs(plan) == {frozenset((ids[a], ids[b])) for a, b in same}
    # The dry run shows, for each pair it looked at, the signals that decided it.
    signals = {frozenset((p["a"]["id"], p["b"]["id"])): p for p in plan["pair_detail"]}
    for a, b in swapped:
        shown = signals[frozenset((ids[a], ids[b]))]
        assert shown["roles_swapped"] and not shown["stance_agrees"] and not shown["linked"], (a, b)
    reordered = signals[frozenset((ids[same[0][0]], ids[same[0][1]]))]
    assert reordered["linked"] and not reordered["model_reads"] and reordered["lexical"] >= 0.8
    assert set(reordered) >= {"negation", "people", "time", "names", "wording", "cosine", "exact", "kept_apart"}


def test_a_restored_merge_stays_undone(service: MemoryService, clock: Clock) -> None:
    a = service.add("acme", {"user_id": "alice", "content": "My dog is called Max", "importance": 0.9})
    b = service.add("acme", {"user_id": "alice", "content": "My dog is named Max", "importance": 0.2})
    consolidate(service, clock)
    assert memories_of(service)[b].superseded_by == a
    back = service.restore(U, b, actor="alice")
    assert (back.status, back.superseded_by, back.valid_to) == ("active", None, None)
    rows = memories_of(service)
    assert rows[a].status == rows[b].status == "active"
    restored = service.history(U, b)[-1]
    assert (restored.action, restored.actor) == ("restored", "alice")
    assert restored.before["status"] == "superseded" and restored.before["superseded_by"] == a
    assert restored.before["valid_to"] and restored.after == {"status": "active", "valid_to": None, "kept_apart_from": [a]}
    # The next runs leave the two apart; only a superseded memory can be restored.
    assert consolidate(service, clock)["memories_merged"] == 0
    assert memories_of(service)[b].status == "active"
    with pytest.raises(ConflictError, match="only a superseded or expired memory"):
        service.restore(U, b)
    # A third restatement does not bring them together again, and a new metadata keeps them apart.
    c = service.add("acme", {"user_id": "alice", "content": "My dog is named Max!", "importance": 0.5})
    service.update(U, b, {"metadata": {"source": "profile"}})
    consolidate(service, clock)
    rows = memories_of(service)
    assert rows[b].metadata["kept_apart_from"] == [a]
    # c and b are one fact (c, more important, stands for both); a stays apart from them.
    assert rows[a].status == "active" and rows[b].superseded_by == c and rows[c].status == "active"
    # The CLI does the same on the embedded store.
    service.supersede(U, memories_of(service)[b], a)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["restore", "--org-id", "acme", "--user-id", "alice", "--memory-id", b,
                     "--storage-uri", service.settings.storage.uri])
    assert code == 0 and json.loads(out.getvalue())["status"] == "active"
    assert memories_of(service)[b].status == "active"


def test_users_are_never_merged_together(service: MemoryService, clock: Clock) -> None:
    a = service.add("acme", {"user_id": "alice", "content": "My dog is called Max"})
    b = service.add("acme", {"user_id": "bob", "content": "My dog is called Max"})
    c = service.add("other", {"user_id": "alice", "content": "My dog is called Max"})
    report = consolidate(service, clock)
    assert report["users"] == 3 and report["clusters"] == 0
    assert memories_of(service)[a].status == "active"
    assert memories_of(service, Scope.user("acme", "bob"))[b].status == "active"
    assert memories_of(service, Scope.user("other", "alice"))[c].status == "active"


def test_compaction_during_a_run_changes_no_outcome(service: MemoryService, clock: Clock) -> None:
    users = ["alice", "bob", "carol"]
    outcomes: list[Any] = []
    for every, org in ((0, "never"), (1, "each")):  # no compaction, and one after every changed user
        for user in users:
            plant(service, user, org)
        assert maintenance_of(service.store).stats()["tables"]["memories"]["fragments"] > 1
        settings = service.settings.replace(consolidation_compact_every_users=every)
        report = run_consolidation(settings, now=clock(), use_ray=False)
        assert report["clusters"] == 3 * len(CLUSTERS) and not report["errors"]
        for user in users:
            status = {r.content: r.status for r in memories_of(service, Scope.user(org, user)).values()}
            # Which member of a cluster survives may differ (ties break on ids, which name the org).
            outcomes.append(([sorted(status[t] for t in group) for group in CLUSTERS.values()],
                             [status[t] for t in LOOKALIKES]))
    assert outcomes[:3] == outcomes[3:]
    assert outcomes[0][0] == [["active"] + ["superseded"] * (len(g) - 1) for g in CLUSTERS.values()]


def test_expiry_and_purge_follow_the_clock(make_service: Any, clock: Clock) -> None:
    service = make_service(clock=clock, consolidation_retention_days=30)
    soon = service.add("acme", {"user_id": "alice", "content": "Meeting with Bob on Friday",
                                "expires_at": (clock() + timedelta(days=2)).isoformat()})
    keep = service.add("acme", {"user_id": "alice", "content": "I live in Lisbon"})
    assert consolidate(service, clock)["expired"] == 0
    clock.advance(days=3)
    report = consolidate(service, clock)
    assert report["expired"] == 1 and memories_of(service)[soon].status == "expired"
    clock.advance(days=26)  # 27 days after expiry: still kept, still reversible
    assert consolidate(service, clock)["purged"] == 0 and soon in memories_of(service)
    clock.advance(days=4)
    assert consolidate(service, clock)["purged"] == 1
    rows = memories_of(service)
    assert soon not in rows and rows[keep].status == "active"
    # Its audit events, which held its content, went with it; one content-free event says why.
    history = service.history(U, soon)
    assert [e.action for e in history] == ["deleted"] and "Bob" not in str(history[0].model_dump())
    assert [e.action for e in service.history(U, keep)] == ["created"]


def test_retention_is_off_by_default_and_messages_have_their_own(make_service: Any, clock: Clock) -> None:
    service = make_service(clock=clock)
    a = service.add("acme", {"user_id": "alice", "content": "My dog is called Max", "importance": 0.9})
    service.add("acme", {"user_id": "alice", "content": "My dog is named Max"})
    service.log_messages("acme", service.message_records("acme", "alice", "s1", [{"role": "user", "content": "hi"}]))
    consolidate(service, clock)
    clock.advance(days=3650)
    report = consolidate(service, clock)
    assert report["purged"] == 0 and report["messages_purged"] == 0 and len(memories_of(service)) == 2
    kept = make_service(clock=clock, consolidation_message_retention_days=30)
    kept.log_messages("acme", kept.message_records("acme", "alice", "s2", [{"role": "user", "content": "new"}]))
    assert consolidate(kept, clock)["messages_purged"] == 1  # the old one, not the one of today
    assert [m.content for m in kept.store.session_messages(U, "s2", 10)] == ["new"]
    assert kept.store.session_messages(U, "s1", 10) == [] and a in memories_of(kept)


def test_superseded_memories_are_purged_after_retention(make_service: Any, clock: Clock) -> None:
    service = make_service(clock=clock, consolidation_retention_days=10)
    a = service.add("acme", {"user_id": "alice", "content": "My dog is called Max", "importance": 0.9})
    b = service.add("acme", {"user_id": "alice", "content": "My dog is named Max"})
    consolidate(service, clock)
    clock.advance(days=11)
    assert consolidate(service, clock)["purged"] == 1
    assert set(memories_of(service)) == {a} and b not in memories_of(service)


def test_decay_applies_once_per_period(make_service: Any, clock: Clock) -> None:
    service = make_service(clock=clock, consolidation_decay_after_days=90, consolidation_decay_period_days=30,
                           consolidation_decay_factor=0.5)
    idle = service.add("acme", {"user_id": "alice", "content": "I once visited Porto", "importance": 0.8})
    used = service.add("acme", {"user_id": "alice", "content": "I work on the billing service", "importance": 0.8})
    clock.advance(days=100)
    service.store.record_access(OrgScope("acme"), {"alice": {used: 1}}, clock())  # logged: the run folds it in first
    assert consolidate(service, clock)["decayed"] == 1
    assert memories_of(service)[idle].importance == pytest.approx(0.4) and memories_of(service)[used].importance == pytest.approx(0.8)
    assert consolidate(service, clock)["decayed"] == 0  # same period: no second decay
    clock.advance(days=31)
    assert consolidate(service, clock)["decayed"] == 1
    assert memories_of(service)[idle].importance == pytest.approx(0.2)


def test_memories_dated_at_the_ends_of_the_calendar_consolidate(service: MemoryService, clock: Clock) -> None:
    first = service.add("acme", {"user_id": "alice", "content": "I once visited Porto", "created_at": "0001-01-01T00:00:00Z"})
    last = service.add("acme", {"user_id": "alice", "content": "I work on the billing service",
                                "created_at": "9999-12-31T23:59:59.999999Z"})
    clock.advance(days=31)  # a period unchanged since it was written
    report = consolidate(service, clock)
    assert report["errors"] == [] and report["decayed"] == 1  # the one idle since the year 1
    assert memories_of(service)[first].importance < 0.5 and memories_of(service)[last].importance == 0.5


def test_a_killed_run_resumes(service: MemoryService, clock: Clock) -> None:
    ids = plant(service)
    records, vectors = service.store.user_memories(U)
    plan = plan_user(U, records, vectors, clock(), service.settings)
    assert len(plan.clusters) == 4
    # Killed after the first cluster was applied...
    first = plan.clusters[0]
    plan.clusters = plan.clusters[:1]
    apply_plan(service, plan, clock())
    # ...and, in the second cluster, after the merged memory was written but before its sources
    # were superseded (the order MemoryService.merge writes in).
    second = plan_user(U, *service.store.user_memories(U), clock(), service.settings).clusters
    second = [c for c in second if c.canonical.id != first.canonical.id][0]
    service.store.replace_memories(U, [merge_records(second.canonical, second.others, clock())])
    report = consolidate(service, clock)
    assert report["clusters"] == 3
    rows = memories_of(service)
    for group in CLUSTERS.values():
        members = [rows[ids[t]] for t in group]
        assert sum(m.status == "active" for m in members) == 1
        survivor = next(m for m in members if m.status == "active")
        # Never lost: every source of every restatement is on the surviving memory.
        assert {s for m in members for s in m.source_ids} <= set(survivor.source_ids)
    assert consolidate(service, clock)["clusters"] == 0


def test_the_lease_blocks_a_second_run_and_expires(service: MemoryService, clock: Clock) -> None:
    plant(service)
    ttl = timedelta(seconds=service.settings.consolidation.lease_seconds)
    assert maintenance_of(service.store).leases.acquire(LEASE, "killed-run", ttl, clock())
    with pytest.raises(ConflictError) as err:
        consolidate(service, clock)
    assert err.value.code == "consolidation_running"
    assert memories_of(service) and all(r.status == "active" for r in memories_of(service).values())
    clock.advance(seconds=ttl.total_seconds() + 1)  # the killed run never renewed: its lease expires
    assert consolidate(service, clock)["clusters"] == 4
    assert maintenance_of(service.store).leases.holder(LEASE, clock()) is None  # released at the end


def test_a_run_the_store_fails_under_gives_its_lease_back(service: MemoryService, clock: Clock) -> None:
    """A store error between taking the lease and the run's work (here a table's files gone) ends
    the run with the error, and the next run is not refused for a lease nobody renews."""
    plant(service)
    shutil.rmtree(Path(service.settings.storage.uri) / "memories.lance" / "data")
    with pytest.raises(Exception, match="(?i)not found"):
        consolidate(service, clock, org_id="acme", user_id="alice")
    assert maintenance_of(service.store).leases.holder(LEASE, clock()) is None


def test_a_run_refused_by_the_lease_ends_its_job_failed(service: MemoryService) -> None:
    """The cluster task of a submitted run that finds the lease taken: its job row, written
    `queued` at submission, ends `failed` with the reason; a row the run moved on stays as it is."""
    plant(service)
    ttl = timedelta(seconds=service.settings.consolidation.lease_seconds)
    assert maintenance_of(service.store).leases.acquire(LEASE, "run-holder", ttl, utcnow())
    acme = OrgScope("acme")
    queued = JobRecord.new(job_id("run-refused"), "acme", "consolidation", user_id="alice",
                           report={"run_id": "run-refused"})
    service.store.put_job(acme, queued.as_row())
    options = {"org_id": "acme", "user_id": "alice", "dry_run": False}
    assert _run_and_report(service.settings, {**options, "owner": "run-refused"})["code"] == "consolidation_running"
    job = service.store.get_job(acme, job_id("run-refused"))
    assert job is not None and job["state"] == "failed", job
    assert job["error"].startswith("consolidation_running: another consolidation run (run-holder) holds the lease")
    assert job["created_at"] == queued.created_at and job["report"] == {"run_id": "run-refused"}
    # No row yet (the submission's write not seen): one is written, already failed.
    _run_and_report(service.settings, {**options, "owner": "run-unseen"})
    assert service.store.get_job(acme, job_id("run-unseen"))["state"] == "failed"
    # A row the run itself moved on is its own to end.
    running = replace(JobRecord.new(job_id("run-moved"), "acme", "consolidation"), state="running")
    service.store.put_job(acme, running.as_row())
    _run_and_report(service.settings, {**options, "owner": "run-moved"})
    assert service.store.get_job(acme, job_id("run-moved"))["state"] == "running"
    assert all(r.status == "active" for r in memories_of(service).values())


def test_two_runs_at_once_one_wins(service: MemoryService, clock: Clock) -> None:
    plant(service)
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(consolidate(service, clock)["clusters"])
        except ConflictError as exc:
            results.append(exc.code)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Either one ran while the other was refused, or they ran one after the other (the second finding nothing).
    assert sorted(map(str, results)) in (["4", "consolidation_running"], ["0", "4"])


def test_dry_run_shows_clusters_and_changes_nothing(service: MemoryService, clock: Clock) -> None:
    ids = plant(service)
    before = {i: r.model_dump() for i, r in memories_of(service).items()}
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["consolidate", "--dry-run", "--engine", "local", "--storage-uri", service.settings.storage.uri])
    assert code == 0
    report = json.loads(out.getvalue())
    assert report["dry_run"] and report["clusters"] == 4
    shown = {frozenset([c["canonical"]["id"], *(m["id"] for m in c["merged"])]) for c in report["cluster_detail"]}
    assert shown == {frozenset(ids[t] for t in group) for group in CLUSTERS.values()}
    assert {i: r.model_dump() for i, r in memories_of(service).items()} == before


def test_ray_data_job_submitted_to_the_cluster(service: MemoryService, clock: Clock, ray_session: None) -> None:
    import ray

    ids = plant(service)
    service.add_many("acme", [{"user_id": "bob", "content": t} for t in CLUSTERS["dog"]])
    run = submit_consolidation(service.settings)  # what the Serve app's scheduler calls
    report = ray.get(run.result, timeout=300)
    assert report["run_id"] == run.run_id and report["engine"] == "ray-data" and report["users"] == 2
    assert report["clusters"] == 5 and report["memories_merged"] == 7 and report["errors"] == []
    assert report["fragments"]["after"] <= report["fragments"]["before"]
    assert memories_of(service)[ids["I like Python"]].status == "active"
    job = service.store.get_job(OrgScope("__system__"), job_id(run.run_id))
    assert job is not None and job["state"] == "succeeded" and job["report"]["clusters"] == 5


def test_restatements_merge_and_other_relations_aspects_and_numbers_stay_apart(service: MemoryService, clock: Clock) -> None:
    same = [("The user doesn't drink soda.", "I really don't drink soda."),  # persons mixed, a negated auxiliary
            ("我有俩哥哥。", "我有两个哥哥。"),  # 俩 is 两个
            ("用户是个程序员。", "用户是名程序员。"),  # a measure word after 是
            ("我骑自行车上班。", "我一向骑自行车上班。")]  # a qualifier
    apart = [("My sister lives in Porto.", "My sister is from Porto."),  # another relation to one place
             ("I played chess until last year.", "I've been playing chess since last year."),  # since: still so
             ("I studied Spanish last semester.", "I'm studying Spanish this semester."),
             ("The user is still renovating the kitchen.", "The user has already renovated the kitchen."),
             ("用户每月工资八千二。", "用户每月工资二千八。"),  # numbers in Chinese numerals
             ("用户比他妈妈高。", "用户的妈妈比他高。")]  # 他 is the user
    ids, plan = _dry_run(service, same + apart)
    assert _merged_pairs(plan) == {frozenset((ids[a], ids[b])) for a, b in same}


def test_contractions_digit_groups_and_aspect_words_merge_while_roles_and_time_frames_stay_apart(
    service: MemoryService, clock: Clock
) -> None:
    same = [("My rent is $1,800 a month.", "My rent is $1800 a month."),  # a digit group's comma
            ("I've been to Iceland twice.", "I have been to Iceland twice."),  # a contraction
            ("我正在减肥呢。", "我在减肥。"),  # 正在 is 在
            ("我家狗叫豆豆。", "我家的狗叫豆豆。"),  # 我家 is 我家的
            ("我儿子5岁，我女儿3岁。", "我女儿3岁，我儿子5岁。")]  # two facts side by side, reordered
    apart = [("I had a Peloton subscription until May.", "I've had a Peloton subscription since May."),
             ("I've had a PS5 for ages.", "I've wanted a PS5 for ages."),  # a wish
             ("My brother gave me his old laptop.", "I gave my brother my old laptop."),  # giver and receiver
             ("我爸在教我用微信。", "我在教我爸用微信。"),
             ("我表哥雇了我。", "我雇了我表哥。"),
             ("我上了两年夜班了。", "我上过两年夜班。"),  # 过: once, not still
             ("用户的房贷在招商银行。", "用户公婆的房贷在招商银行。")]  # the in-laws'
    ids, plan = _dry_run(service, same + apart)
    assert _merged_pairs(plan) == {frozenset((ids[a], ids[b])) for a, b in same}


def test_a_dry_run_submitted_as_a_job_waits_its_turn_for_the_lease(service: MemoryService) -> None:
    """A recorded dry run (POST /v1/jobs/consolidate with dry_run) is one run among the others for
    the lease: refused while another holds it, its job failed with the reason. A dry run of the
    command line, which has no job, plans beside a running one."""
    plant(service)
    ttl = timedelta(seconds=service.settings.consolidation.lease_seconds)
    assert maintenance_of(service.store).leases.acquire(LEASE, "run-holder", ttl, utcnow())
    options = {"org_id": "acme", "user_id": "alice", "dry_run": True}
    answer = _run_and_report(service.settings, {**options, "owner": "run-dry", "recorded": True})
    assert answer["code"] == "consolidation_running", answer
    assert service.store.get_job(OrgScope("acme"), job_id("run-dry"))["state"] == "failed"
    assert run_consolidation(service.settings, org_id="acme", user_id="alice", dry_run=True, use_ray=False)["dry_run"]
    assert maintenance_of(service.store).leases.holder(LEASE, utcnow())["owner"] == "run-holder"
