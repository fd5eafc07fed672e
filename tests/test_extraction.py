"""Rules extraction and the reinforce / supersede decisions, on a real LanceDB and the bundled model."""

from __future__ import annotations

from typing import Any

import pytest

from agent_memory.errors import InvalidInputError
from agent_memory.extraction import extract_and_store
from agent_memory.models import Scope
from agent_memory.rows import RowBuilder
from agent_memory.rules import RulesExtractor
from agent_memory.service import MemoryService
from storage.connect import maintenance_of
from tests.conftest import Clock

U = Scope.user("acme", "u1")


def _messages(turns: list[tuple[str, str]], prefix: str) -> list[dict[str, str]]:
    return [{"role": role, "content": text, "message_id": f"{prefix}:m{i}"} for i, (role, text) in enumerate(turns, 1)]


def _log(service: MemoryService, turns: list[tuple[str, str]], *, session: str = "s1", user: str = "u1",
         prefix: str | None = None) -> list[Any]:
    records = service.message_records("acme", user, session, _messages(turns, prefix or session))
    service.log_messages("acme", records)
    return records


def _active(service: MemoryService, user: str = "u1") -> list[str]:
    return [r.content for r in service.list(Scope.user("acme", user), limit=100).records]


def test_rules_find_facts_in_both_languages_and_skip_chit_chat(rows: RowBuilder) -> None:
    records = rows.message_records("acme", "u1", "s1", _messages([
        ("user", "Hi! I prefer tea over coffee."),
        ("assistant", "Noted! What else?"),
        ("user", "Never schedule meetings on Fridays."),
        ("user", "今天天气不错，阳光挺好的。"),
        ("user", "以后回答我的时候请用要点列表。"),
        ("user", "我住在杭州，差不多五年了。"),
        ("user", "Thanks, super helpful."),
        ("user", "I'm flying to Lisbon on May 3 for a week."),
        ("user", "Can you tell me a joke?"),
    ], "s1"))
    found = {c.content: c for c in RulesExtractor().extract(records)}
    assert set(found) == {
        "I prefer tea over coffee.", "Never schedule meetings on Fridays.", "以后回答我的时候请用要点列表。",
        "我住在杭州，差不多五年了。", "I'm flying to Lisbon on May 3 for a week.",
    }
    assert found["Never schedule meetings on Fridays."].memory_type == "procedural"
    assert found["以后回答我的时候请用要点列表。"].memory_type == "procedural"
    assert found["我住在杭州，差不多五年了。"].slot == "home" and found["我住在杭州，差不多五年了。"].value == "杭州"
    assert found["I'm flying to Lisbon on May 3 for a week."].memory_type == "episodic"
    assert found["I prefer tea over coffee."].source_ids == ["s1:m1"]


def test_chit_chat_stores_nothing(service: MemoryService) -> None:
    records = _log(service, [("user", "今天天气不错"), ("assistant", "是啊！"), ("user", "Hello again 👋"), ("user", "haha thanks!")])
    result = extract_and_store(service, "acme", records, "rules", actor="test")
    assert result.candidates == 0 and result.created == []
    assert maintenance_of(service.store).table("memories").count_rows() == 0
    assert maintenance_of(service.store).table("messages").count_rows() == 4  # the log keeps everything


def test_restatement_reinforces_and_rerun_adds_nothing(service: MemoryService, clock: Clock) -> None:
    first = _log(service, [("user", "I live in Denver.")], session="s1")
    result = extract_and_store(service, "acme", first, "rules", actor="test")
    assert len(result.created) == 1
    memory_id = result.created[0]
    clock.advance(days=3)
    again = _log(service, [("user", "I live in Denver!")], session="s2")
    result = extract_and_store(service, "acme", again, "rules", actor="test")
    assert result.created == [] and result.reinforced == [memory_id]
    memory = service.get(U, memory_id)
    assert memory.source_ids == ["s1:m1", "s2:m1"]
    assert [e.action for e in service.history(U, memory_id)] == ["created", "reinforced"]
    # Running extraction over the same messages again changes nothing and records nothing.
    events = maintenance_of(service.store).table("events").count_rows()
    for records in (first, again):
        rerun = extract_and_store(service, "acme", records, "rules", actor="test")
        assert rerun.created == [] and rerun.reinforced == [] and rerun.superseded == []
    assert maintenance_of(service.store).table("memories").count_rows() == 1
    assert maintenance_of(service.store).table("events").count_rows() == events


@pytest.mark.parametrize(
    "before, after, new_value",
    [
        ("I do all my coding in VS Code.", "Actually I switched from VS Code to Neovim last month.", "Neovim"),
        ("我平时只喝美式咖啡，别的饮料都不太喝。", "我最近不喝美式咖啡了，改喝乌龙茶。", "乌龙茶"),
        ("我住在杭州，差不多五年了。", "我住在成都。", "成都"),
        ("My favourite food is sushi.", "My favourite food is ramen now.", "ramen"),
        ("I love cilantro.", "I hate cilantro.", "hate"),
        ("我最喜欢吃火锅，一周吃三次都不腻。", "最近吃火锅吃腻了，现在最爱麻辣烫。", "麻辣烫"),
        ("Rule for you: never schedule meetings on Fridays.", "I switched from Fridays to Mondays for focus time.", "Mondays"),
    ],
)
def test_contradiction_supersedes_and_keeps_history(
    service: MemoryService, clock: Clock, before: str, after: str, new_value: str
) -> None:
    old = extract_and_store(service, "acme", _log(service, [("user", before)], session="s1"), "rules", actor="test")
    assert len(old.created) == 1
    clock.advance(days=30)
    new = extract_and_store(service, "acme", _log(service, [("user", after)], session="s2"), "rules", actor="test")
    assert len(new.created) == 1
    assert new.superseded == [{"id": old.created[0], "superseded_by": new.created[0]}]
    active = _active(service)
    assert active == [after]
    retired = service.get(U, old.created[0])
    assert retired.status == "superseded" and retired.superseded_by == new.created[0]
    assert retired.valid_to is not None and retired.content == before
    assert [e.action for e in service.history(U, old.created[0])] == ["created", "superseded"]
    hits = service.recall("acme", {"user_id": "u1", "query": after, "top_k": 5}).memories
    assert [h.id for h in hits] == new.created
    assert new_value in hits[0].content


def test_contradiction_within_one_conversation_keeps_the_later_fact(service: MemoryService) -> None:
    records = _log(service, [("user", "My favourite drink is green tea."), ("user", "No wait, my favourite drink is cold brew.")])
    result = extract_and_store(service, "acme", records, "rules", actor="test")
    assert len(result.created) == 2 and len(result.superseded) == 1
    assert _active(service) == ["my favourite drink is cold brew."]
    assert maintenance_of(service.store).table("memories").count_rows() == 2  # the older statement stays in history


def test_a_chinese_change_of_mind_supersedes_the_old_preference(service: MemoryService) -> None:
    first = _log(service, [("user", "我喜欢用 Python 写后端服务。")], session="s1")
    extract_and_store(service, "acme", first, "rules", actor="test")
    later = _log(service, [("user", "我现在不喜欢用 Python 了，以后后端都用 Go 写。"), ("assistant", "好的。")], session="s2")
    result = extract_and_store(service, "acme", later, "rules", actor="test")
    assert len(result.superseded) == 1
    assert [r.content for r in service.list(U, limit=10, status="superseded").records] == ["我喜欢用 Python 写后端服务。"]
    hits = service.recall("acme", {"user_id": "u1", "query": "后端 编程语言 偏好", "memory_types": ["semantic"]}).memories
    assert "Go" in hits[0].content


def test_a_correction_is_one_memory_and_the_request_beside_a_fact_is_not_kept(service: MemoryService) -> None:
    records = _log(service, [
        ("user", "I like dark mode in every editor."),
        ("user", "Actually I no longer like dark mode; I prefer light mode now."),
        ("user", "我是高中数学老师，帮我想个导数课的开场白"),
        ("user", "I live in Lyon — sorry, Lille. Where can I find a good bakery?"),
        ("user", "My boss is super particular about oat milk."),
    ])
    extract_and_store(service, "acme", records, "rules", actor="test")
    active = _active(service)
    assert "Actually I no longer like dark mode; I prefer light mode now." in active
    assert not any(text.rstrip(";").endswith("no longer like dark mode") for text in active)
    assert "我是高中数学老师" in active and not any("开场白" in text for text in active)
    assert "I live in Lille." in active and not any("Lyon" in text or "bakery" in text for text in active)
    assert not any("oat milk" in text for text in active)
    old = [r.content for r in service.list(U, limit=10, status="superseded").records]
    assert old == ["I like dark mode in every editor."]


def test_a_switch_supersedes_the_preference_it_is_about_not_an_event_that_names_it(service: MemoryService) -> None:
    first = _log(service, [
        ("user", "I gave a talk about VS Code extensions at PyCon last year."),
        ("user", "I prefer VS Code for coding."),
    ], session="s1")
    extract_and_store(service, "acme", first, "rules", actor="test")
    later = _log(service, [("user", "I switched from VS Code to Neovim last month.")], session="s2")
    extract_and_store(service, "acme", later, "rules", actor="test")
    active = _active(service)
    assert "I prefer VS Code for coding." not in active
    assert "I gave a talk about VS Code extensions at PyCon last year." in active
    assert any("Neovim" in text for text in active)


@pytest.mark.parametrize(("before", "after"), [
    ("I am a nurse.", "I dropped my kids at school and went for a run."),
    ("I love coffee.", "I stopped by the bakery on my way."),
    ("I live in Berlin.", "I quit smoking last year."),
    ("I use Linux at home.", "I use VS Code now."),
    ("I like jazz.", "I like sushi these days."),
    # Only "instead" says a habit is replaced; what holds these days may be about something else.
    ("I usually cook dinner for the family.", "These days I am learning Spanish on Duolingo."),
    ("我平时喜欢周末去爬山。", "现在都在学日语，准备考N2。"),
    # The age of someone of the user's is theirs: "scratch that" does not take it back.
    ("My daughter Mia is 5.", "Scratch that, we are out of milk."),
])
def test_a_statement_that_is_no_change_of_mind_about_it_leaves_a_memory_alone(
    service: MemoryService, before: str, after: str
) -> None:
    records = _log(service, [("user", before), ("assistant", "Noted."), ("user", after)])
    extract_and_store(service, "acme", records, "rules", actor="test")
    assert before in _active(service)
    assert service.list(U, limit=10, status="superseded").records == []


def test_unrelated_facts_do_not_interfere(service: MemoryService) -> None:
    extract_and_store(service, "acme", _log(service, [("user", "I live in Denver."), ("user", "我家养了一只猫。")],
                                            user="u2"), "rules", actor="test")
    result = extract_and_store(service, "acme", _log(service, [("user", "I have a dog called Max."),
                                                               ("user", "Never call me before 9am.")], session="s2"),
                               "rules", actor="test")
    assert len(result.created) == 2 and result.superseded == [] and result.reinforced == []
    assert len(_active(service, "u2")) == 2  # another user's home is not this user's


def test_raw_mode_stores_every_turn_once(service: MemoryService) -> None:
    records = _log(service, [("user", "hello"), ("assistant", "hi, how can I help?")])
    result = extract_and_store(service, "acme", records, "raw", actor="test")
    assert len(result.created) == 2
    assert extract_and_store(service, "acme", records, "raw", actor="test").created == []
    assert maintenance_of(service.store).table("memories").count_rows() == 2


def test_bad_mode_and_missing_llm_are_typed_errors(service: MemoryService) -> None:
    records = _log(service, [("user", "I prefer tea.")])
    with pytest.raises(InvalidInputError, match="mode"):
        extract_and_store(service, "acme", records, "magic", actor="test")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="AGENT_MEMORY_LLM_BASE_URL"):
        extract_and_store(service, "acme", records, "llm", actor="test")
    with pytest.raises(InvalidInputError, match="org"):
        extract_and_store(service, "globex", records, "rules", actor="test")
    assert maintenance_of(service.store).table("memories").count_rows() == 0


def test_low_confidence_candidates_are_not_stored(make_service: Any, clock: Clock) -> None:
    service = make_service(clock=clock, extraction_min_confidence=0.95)
    records = _log(service, [("user", "I prefer tea over coffee.")])
    result = extract_and_store(service, "acme", records, "rules", actor="test")
    assert result.below_confidence == 1 and result.created == []
    assert maintenance_of(service.store).table("memories").count_rows() == 0


@pytest.mark.parametrize(("before", "after", "new"), [
    # The old value in other words than the memory's ("at the shelter", "volunteer at an animal shelter").
    ("I volunteer at an animal shelter on Sundays.",
     "I don't volunteer at the shelter anymore — I coach a kids' soccer team on Sundays now.", "soccer"),
    # A ratio is no clause boundary; "so I switched" starts the clause that says what holds now.
    ("I do 16:8 intermittent fasting.", "16:8 was too hard so I switched to 14:10.", "14:10"),
    # The object said first, the speaker left out.
    ("我平时用 Notion 记笔记。", "Notion 基本不用了，现在改用 Obsidian。", "Obsidian"),
    ("我在学法语。", "法语先不学了，太难了。我报了个西班牙语班。", "西班牙语"),
    # A plan is taken back as a fact is; "scratch that" names nothing, so it takes back the last statement.
    ("I'm flying to Rome on May 3 for a wedding.", "Scratch that, the wedding moved, so I'm going to Naples instead.",
     "Naples"),
    # What happened once and holds since is a fact a change of mind takes back.
    ("I switched my phone to a Pixel a few weeks ago.", "Gave up lol. I went back to my old iPhone yesterday.", "iPhone"),
    # A habit said to replace another takes back the habit, in other words; someone only mentioned
    # ("after the kids are asleep") leaves the habit the user's.
    ("I usually hit the gym late at night after the kids are asleep.", "These days I swim at 6am instead.", "swim"),
])
def test_a_change_of_mind_in_other_words_supersedes_what_it_is_about(
    service: MemoryService, before: str, after: str, new: str
) -> None:
    records = _log(service, [("user", before), ("assistant", "Got it."), ("user", after)])
    extract_and_store(service, "acme", records, "rules", actor="test")
    active = _active(service)
    assert before not in active
    assert any(new in text for text in active), active
    assert [r.content for r in service.list(U, limit=10, status="superseded").records] == [before]


@pytest.mark.xfail(strict=True, reason="the learned decision scores it under extraction_min_confidence (agent_memory/decision/CARD.md, limits)")
def test_scratch_that_takes_back_what_it_is_about_not_the_last_sentence(service: MemoryService) -> None:
    instruction = "From now on I want every answer in Spanish, please."
    records = _log(service, [("user", f"{instruction} I'm trying to get back to B2 level."), ("assistant", "¡Claro!"),
                             ("user", "Scratch that, English by default, and Spanish only when I say 'practice mode'.")])
    extract_and_store(service, "acme", records, "rules", actor="test")
    assert [r.content for r in service.list(U, limit=10, status="superseded").records] == [instruction]
    assert any("B2" in text for text in _active(service))


@pytest.mark.parametrize(("before", "after", "kept"), [
    ("我是素食者，蛋奶都吃。", "补充一下，今年起我不再吃蛋了。", "我是素食者"),
    ("I'm a night owl, and I no longer drink coffee after lunch. I play chess at the Riverside club.",
     "I quit the Riverside club.", "I'm a night owl"),
])
def test_a_change_of_mind_that_revises_part_of_a_memory_keeps_the_rest(
    service: MemoryService, before: str, after: str, kept: str
) -> None:
    records = _log(service, [("user", before), ("assistant", "OK."), ("user", after)])
    first = extract_and_store(service, "acme", records, "rules", actor="test")
    active = _active(service)
    assert before not in active and any(text.startswith(kept) for text in active), active
    assert not any(("蛋奶" in text or "Riverside club." in text) and text != after for text in active), active
    again = extract_and_store(service, "acme", records, "rules", actor="test")  # a rerun adds nothing
    assert again.created == [] and sorted(_active(service)) == sorted(active) and first.created


def test_a_few_words_that_say_more_of_a_statement_join_it(service: MemoryService) -> None:
    records = _log(service, [("user", "I keep my savings at Chase and the interest is honestly a joke. Like 0.01%."),
                             ("assistant", "Ouch."), ("user", "I hate cilantro. Love parsley.")])
    extract_and_store(service, "acme", records, "rules", actor="test")
    assert sorted(_active(service)) == ["I hate cilantro.", "I keep my savings at Chase and the interest is honestly a "
                                        "joke. Like 0.01%.", "Love parsley."]


def test_what_still_holds_of_a_revised_memory_is_as_old_as_it(service: MemoryService) -> None:
    records = _log(service, [("user", "I'm a night owl, and I play chess at the Riverside club."), ("assistant", "Nice."),
                             ("user", "I quit the Riverside club."), ("assistant", "OK."), ("user", "Changed my mind.")])
    extract_and_store(service, "acme", records, "rules", actor="test")
    superseded = [r.content for r in service.list(U, limit=10, status="superseded").records]
    assert "I quit the Riverside club." in superseded, superseded  # the latest statement, not the part kept
    assert any(text.startswith("I'm a night owl") for text in _active(service))


def test_a_change_of_mind_said_with_filler_waits_for_what_holds(service: MemoryService) -> None:
    records = _log(service, [("user", "I'm flying to Rome on Thursday. I'm vegetarian."), ("assistant", "Noted."),
                             ("user", "Scratch that, sorry! I'll fly to Rome on Tuesday.")])
    extract_and_store(service, "acme", records, "rules", actor="test")
    assert [r.content for r in service.list(U, limit=10, status="superseded").records] == [
        "I'm flying to Rome on Thursday."]
    assert "I'm vegetarian." in _active(service)


@pytest.mark.xfail(strict=True, reason="the learned decision scores it under extraction_min_confidence (agent_memory/decision/CARD.md, limits)")
def test_a_change_of_mind_that_says_what_holds_ends_there(service: MemoryService) -> None:
    records = _log(service, [("user", "We're repainting the living room on the 22nd."), ("assistant", "Nice!"),
                             ("user", "Changed my mind, going with terracotta! And it's pushed to the 29th because my "
                                      "brother-in-law can only help that weekend.")])
    extract_and_store(service, "acme", records, "rules", actor="test")
    active = _active(service)
    assert "Changed my mind, going with terracotta!" in active and any("29th" in text for text in active), active
    assert not any("brother-in-law" in text for text in active), active  # his reason, not the user's fact


@pytest.mark.parametrize(("turn", "kept", "not_kept"), [
    ("我想周末带孩子去爬山，有什么推荐的路线吗？", None, "爬山"),  # a wish said as the reason to ask
    ("我每天早上去游泳，中午去健身房，这样安排合理吗？", "健身房", None),  # a habit has a when: it stays
    ("我妈今年七十，有糖尿病，每天打胰岛素。", None, "糖尿病"),  # what follows is the mother's
    ("backend dev here, any tips for learning Rust?", "backend dev", "Rust"),
    ("I'm 41 — wait no, I turned 42 in May.", "42", "41"),
    ("My savings account pays 0.5% interest.", "0.5%", None),
    ("who wrote Dune again? I always forget", None, "forget"),
    ("Use short answers with me, always. I read on my phone.", "short answers", None),
    # Who the user is, framing a question; a condition and what would follow it.
    ("作为一个常年上夜班的保安，白天怎么才能睡踏实？", "保安", None),
    ("As a nurse on night shifts, how do I sleep during the day?", "nurse", "sleep"),
    ("要是能中五百万，我第一件事就是带爸妈去环球旅行，哈哈。", None, "环球旅行"),
    ("如果你需要知道的话，我是会计，每周一开会。", "会计", None),  # "会" inside a word is no "would"
    ("要是明天下雨，我会在家办公。", None, "在家办公"),
    # Someone else's clause, then the user's after "and I" / "even though I".
    ("Priya on my team is vegan and I'm allergic to soy. Any cuisines that work for both of us?", "soy", "vegan"),
    ("My manager, Derek, keeps putting meetings at 8am even though I do school drop-off every morning.", "drop-off",
     "8am"),
    ("Roommate keeps eating my food from the fridge and it drives me nuts.", None, "fridge"),
    ("My mother-in-law only reads Chinese.", None, "Chinese"),
    ("Bringing something to a potluck on Saturday and I have type 1 diabetes.", "diabetes", "potluck"),
    ("I don't own a car, so for a weekend in the Peak District, is it doable by train?", "own a car", "Peak District"),
    # What a doctor says of the user; a text quoted to be edited; facts listed after "some context".
    ("医生说我血糖偏高，这几天吃饭要注意啥？", "血糖偏高", None),
    ("帮我把这段话改正式一点：'王总，明天我请一天假，家里有点事。'", None, "请一天假"),
    ("Some context so you stop asking 😅\n- freelance illustrator\n- based in Leipzig", "illustrator", "context"),
    ("帮我润色一下简历。背景：做了八年小学语文老师，现在想转去做课程研发。", "语文老师", "润色"),
    # What the answer should be like, said after the question; what others do.
    ("我们读书会每个月聚一次，下次选什么书好？最好是小说。", None, "小说"),
    ("Any ideas for dinner? Ideally something with tofu, I'm vegan.", "vegan", "tofu"),
    ("现在大家轮流选书，下个月轮到老周。", None, "老周"),
    ("平时大家都叫我小周。", "小周", None),
    ("Background: vegan.", "vegan", None),
    ("I'm learning Spanish because my wife and I are moving to Madrid.", "my wife and I are moving", None),
    # Chinese clauses the speaker's by their shape, before a question too; things that are not.
    ("工作那部分我已经挪到飞书文档了。生活的还在印象笔记里，这部分怎么分类？", "印象笔记", None),
    ("坐标长沙，推荐几家本地人去的湘菜馆？", "长沙", "湘菜馆"),
    ("快递还在路上。我住在杭州。", "杭州", "快递"),
    ("如果效果好，我会长期坚持跑步。", None, "跑步"),
    ("如果你好奇的话，我是会计。", "会计", None),
    ("the Pixel died last month 💀 I'm on an iPhone 15 now. How do I back it up?", "iPhone 15", None),
    ("Can you stop adding disclaimers at the end of every answer?", "disclaimers", None),
    ("别再叫我'您'了，怪别扭的，叫我小周就行。", "小周", None),
    # What those shapes must not swallow.
    ("If it helps, I'm vegetarian.", "vegetarian", None),
    ("My older sister and I share a flat in Leeds.", "sister", None),
    pytest.param("Teacher here, 10 years in.", "Teacher", None, marks=pytest.mark.xfail(strict=True, reason="the learned decision scores it under extraction_min_confidence (agent_memory/decision/CARD.md, limits)")),
    ("I'm scared of flying.", "flying", None),
    ("My wife got a new job, started last week.", None, "started"),
    ("I grew up in the '90s, I'm 38 now. My parents' house is in Leeds.", "38", None),
])
def test_what_a_turn_says_about_the_user(service: MemoryService, turn: str, kept: str | None, not_kept: str | None) -> None:
    extract_and_store(service, "acme", _log(service, [("user", turn)]), "rules", actor="test")
    active = _active(service)
    if kept:
        assert any(kept in text for text in active), active
    if not_kept:
        assert not any(not_kept in text for text in active), active
