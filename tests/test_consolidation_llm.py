"""Consolidation with an LLM (summaries, the judge of near misses and its budget), and its schedule."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from agent_memory.judges import JUDGE_PROMPT, SUMMARY_PROMPT, RememberedJudge
from agent_memory.service import MemoryService
from jobs.schedule import ConsolidationSchedule
from loopback.llm_server import ScriptedLLM, scripted_llm
from storage.connect import maintenance_of
from tests.conftest import Clock
from tests.test_consolidation import U, consolidate, memories_of


def _llm_settings(llm: ScriptedLLM) -> dict[str, Any]:
    return {"llm_base_url": llm.base_url, "llm_model": "tiny", "llm_api_key": "k", "llm_backoff_s": 0.0,
            "llm_max_retries": 0}


def test_llm_summary_becomes_the_merged_content(make_service: Any, clock: Clock) -> None:
    with scripted_llm() as llm:
        llm.respond = lambda body: "The user's dog is named Max."
        service = make_service(clock=clock, **_llm_settings(llm))
        a = service.add("acme", {"user_id": "alice", "content": "My dog is called Max", "importance": 0.9})
        service.add("acme", {"user_id": "alice", "content": "My dog is named Max"})
        assert consolidate(service, clock)["clusters"] == 1
    survivor = memories_of(service)[a]
    assert survivor.content == "The user's dog is named Max." and survivor.status == "active"
    # "called" for "named" is one word swapped: the judge reviews the link first; its answer is
    # prose, no verdict, so the rules' link stands and the summary follows.
    assert [r["body"]["messages"][0]["content"] for r in llm.requests] == [JUDGE_PROMPT, SUMMARY_PROMPT]
    assert "My dog is called Max" in llm.requests[1]["body"]["messages"][1]["content"]
    hits = service.recall("acme", {"user_id": "alice", "query": "dog named Max"}).memories
    assert [h.id for h in hits] == [a]


# The facts the loopback judge knows: it answers "same" for a pair whose texts share a fact here.
FACTS = {"我最喜欢吃川菜": "sichuan", "川味菜是我的最爱": "sichuan", "我最喜欢吃粤菜": "canton",
         "The user was born in June": "june", "The user's birthday is in June": "june"}


def _judge_reply(body: dict[str, Any]) -> str:
    """An OpenAI-compatible judge on loopback: SUMMARY_PROMPT gets the first note, pairs a verdict."""
    system, user = (m["content"] for m in body["messages"])
    if system == SUMMARY_PROMPT:
        return user.splitlines()[0].removeprefix("- ")
    pairs = json.loads(user)["pairs"]
    same = [p["pair"] for p in pairs if FACTS.get(p["a"], p["a"]) == FACTS.get(p["b"], p["b"])]
    return json.dumps({"same": same})


def test_an_llm_judges_the_near_misses_the_rules_refuse(make_service: Any, clock: Clock) -> None:
    texts = [*FACTS, "我爸最喜欢吃川菜", "The user's daughter was born in June"]
    with scripted_llm() as llm:
        llm.respond = _judge_reply
        service = make_service(clock=clock, **_llm_settings(llm))
        ids = dict(zip(texts, service.add_many("acme", [{"user_id": "alice", "content": t} for t in texts]).ids,
                       strict=True))
        plan = consolidate(service, clock, dry_run=True)
        assert plan["clusters"] == 2 and not memories_of(service)[ids["我最喜欢吃川菜"]].superseded_by
        report = consolidate(service, clock)
        judged = [r for r in llm.requests if r["body"]["messages"][0]["content"] == JUDGE_PROMPT]
        second = consolidate(service, clock)
    assert report["clusters"] == 2 and report["memories_merged"] == 2 and report["errors"] == []
    assert report["judged"]["confirmed"] == 2 and report["judged"]["asked"] >= 3
    rows = memories_of(service)
    for a, b in (("我最喜欢吃川菜", "川味菜是我的最爱"), ("The user was born in June", "The user's birthday is in June")):
        assert sorted(rows[ids[t]].status for t in (a, b)) == ["active", "superseded"]
    for text in ("我最喜欢吃粤菜", "我爸最喜欢吃川菜", "The user's daughter was born in June"):
        assert rows[ids[text]].status == "active", text
    # The guards hold before the judge: another person's fact is never put to it.
    asked = [p for r in judged for p in json.loads(r["body"]["messages"][1]["content"])["pairs"]]
    assert asked and not any("我爸" in p["a"] + p["b"] or "daughter" in p["a"] + p["b"] for p in asked)
    assert judged[0]["body"]["response_format"]["json_schema"]["name"] == "same_facts"
    # The verdicts are remembered: the second run asks nothing and changes nothing.
    assert second["clusters"] == 0 and second["judged"]["asked"] == 0 and second["judged"]["remembered"] >= 1
    assert len(judged) == 2  # the dry run's request and the run's: the dry run kept no verdict
    # Erasing the user erases its verdicts with the rest.
    assert service.store.erase_user(U)["verdicts"] == report["judged"]["asked"]


def test_an_unusable_verdict_leaves_the_rules_clusters(make_service: Any, clock: Clock) -> None:
    texts = ["我最喜欢吃川菜", "川味菜是我的最爱", "My dog is called Max", "My dog is named Max"]
    with scripted_llm() as llm:
        # The judge answers prose, then a pair that was not asked about, then JSON without its
        # field, then a verdict (no pair is the same); summaries work.
        verdicts = iter(["They look the same to me.", json.dumps({"same": [7]}), "{}", json.dumps({"same": []})])
        llm.respond = lambda body: next(verdicts) if body["messages"][0]["content"] == JUDGE_PROMPT else _judge_reply(body)
        # Near misses only: the rules' link of the dog pair is not put to review here.
        service = make_service(clock=clock, consolidation_judge_reviews=False, **_llm_settings(llm))
        service.add_many("acme", [{"user_id": "alice", "content": t} for t in texts])
        runs = [consolidate(service, clock) for _ in range(5)]
    assert runs[0]["clusters"] == 1 and runs[0]["errors"] == []
    # No verdict is kept until one is usable; the next run asks again. Then it is remembered.
    assert [r["judged"]["asked"] for r in runs] == [1, 1, 1, 1, 0]
    assert [r["judged"]["remembered"] for r in runs] == [0, 0, 0, 0, 1]
    assert [r["clusters"] for r in runs[1:]] == [0, 0, 0, 0]


def test_the_judge_reviews_the_rules_doubtful_links(make_service: Any, clock: Clock) -> None:
    # One word swapped that the model scores alike (0.94): the rules link it; the judge says two facts.
    weekends, weekdays = "The user works at the hospital on weekends", "The user works at the hospital on weekdays"
    same = ["My dog is called Max", "My dog is named Max"]  # a word swapped, the same fact
    with scripted_llm() as llm:
        llm.respond = lambda body: json.dumps({"same": [p["pair"] for p in json.loads(body["messages"][1]["content"])[
            "pairs"] if "dog" in p["a"]]}) if body["messages"][0]["content"] == JUDGE_PROMPT else _judge_reply(body)
        service = make_service(clock=clock, **_llm_settings(llm))
        ids = service.add_many("acme", [{"user_id": "alice", "content": t} for t in [weekends, weekdays, *same]]).ids
        plan = consolidate(service, clock, dry_run=True)
        report = consolidate(service, clock)
        second = consolidate(service, clock)
        off = make_service(clock=clock, consolidation_judge_reviews=False, **_llm_settings(llm))
        off.add_many("acme", [{"user_id": "bob", "content": t} for t in (weekends, weekdays)])
        without = consolidate(off, clock, user_id="bob", org_id="acme")
    doubtful = {frozenset((p["a"]["content"], p["b"]["content"])): p["doubtful"] for p in plan["pair_detail"]}
    assert doubtful[frozenset((weekends, weekdays))] and doubtful[frozenset(same)]
    assert report["clusters"] == 1 and report["judged"]["refused"] == 1 and report["judged"]["asked"] == 2
    rows = memories_of(service)
    assert rows[ids[0]].status == rows[ids[1]].status == "active"
    assert sorted(rows[i].status for i in ids[2:]) == ["active", "superseded"]
    # Remembered: the next run asks nothing and merges nothing; without review the rules merge.
    assert second["clusters"] == 0 and second["judged"]["asked"] == 0 and second["judged"]["remembered"] >= 1
    assert without["clusters"] == 1


def test_a_doubtful_link_past_the_budget_merges_as_the_rules_say(make_service: Any, clock: Clock) -> None:
    with scripted_llm() as llm:
        llm.respond = lambda body: json.dumps({"same": []})
        service = make_service(clock=clock, consolidation_judge_max_pairs=0, **_llm_settings(llm))
        service.add_many("acme", [{"user_id": "alice", "content": t} for t in (
            "The user works at the hospital on weekends", "The user works at the hospital on weekdays")])
        report = consolidate(service, clock)
    assert report["clusters"] == 1 and report["judged"]["unasked"] == 1 and report["judged"]["refused"] == 0
    assert not [r for r in llm.requests if r["body"]["messages"][0]["content"] == JUDGE_PROMPT]


def test_verdicts_are_not_kept_for_a_user_erased_during_the_run(service: MemoryService, clock: Clock) -> None:
    service.add_many("acme", [{"user_id": "alice", "content": t} for t in ("我最喜欢吃川菜", "川味菜是我的最爱")])
    judge = RememberedJudge(lambda pairs: {0}, service.store, U, clock(), budget=10)
    assert judge([("我最喜欢吃川菜", "川味菜是我的最爱")]) == {0}
    service.store.erase_user(U)  # between the question and the end of the user's plan
    judge.keep()
    assert service.store.verdicts(U, [judge.pair_id("我最喜欢吃川菜", "川味菜是我的最爱")]) == {}
    assert maintenance_of(service.store).table("verdicts").count_rows() == 0


def test_the_judge_budget_carries_over_to_the_next_run(make_service: Any, clock: Clock) -> None:
    with scripted_llm() as llm:
        llm.respond = _judge_reply
        service = make_service(clock=clock, consolidation_judge_max_pairs=1, **_llm_settings(llm))
        service.add_many("acme", [{"user_id": "alice", "content": t} for t in FACTS])
        runs = [consolidate(service, clock) for _ in range(4)]
    # One question a run: the near misses left over wait for the next run, and merges follow.
    assert [r["judged"]["asked"] for r in runs][:2] == [1, 1] and runs[0]["judged"]["unasked"] >= 1
    assert sum(r["clusters"] for r in runs) == 2 and runs[-1]["clusters"] == 0
    assert runs[-1]["judged"]["asked"] == 0 and runs[-1]["judged"]["unasked"] == 0


    off = make_service(clock=clock, consolidation_llm_judge=False, **_llm_settings(llm))
    assert "judged" not in consolidate(off, clock, user_id="alice", org_id="acme")


def test_schedule_daily_interval_and_off(settings: Any, clock: Clock) -> None:
    submitted: list[Any] = []
    daily = ConsolidationSchedule(settings.replace(consolidation_daily_at="03:00"), clock,
                                  submit=submitted.append)
    assert daily.next_run == clock().replace(hour=3, minute=0) + timedelta(days=1)
    assert daily.run_due(clock()) is None
    clock.advance(hours=15)
    daily.run_due(clock())
    assert len(submitted) == 1 and daily.next_run == clock().replace(hour=3) + timedelta(days=1)
    every = ConsolidationSchedule(settings.replace(consolidation_interval_minutes=30), clock,
                                  submit=submitted.append)
    assert every.next_run == clock() + timedelta(minutes=30)
    off = ConsolidationSchedule(settings.replace(consolidation_schedule_enabled=False), clock,
                                submit=submitted.append)
    clock.advance(days=2)
    assert off.next_run is None and off.run_due(clock()) is None and len(submitted) == 1
