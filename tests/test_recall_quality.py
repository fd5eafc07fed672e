"""What each signal sees of a conversation turn, the noise floor, the reindex migration, and the
demo's questions on the shipped sample (real LanceDB, real bundled model)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from agent_memory.embedding import Embedder, GlossingEmbedder
from agent_memory.extraction import extract_and_store
from agent_memory.index_text import index_parts
from agent_memory.models import Scope
from agent_memory.service import MemoryService
from agent_memory.settings import Settings
from cli.demo import DEMO_QUESTIONS, SAMPLE_MODE
from jobs.importer import import_into
from jobs.reindex import reindex
from storage.connect import gloss_notice, maintenance_of
from storage.lance_store import LanceStore, open_store
from tests.conftest import ROOT, Clock

U = Scope.user("acme", "u1")


def _write_history(path: Path, sessions: list[list[tuple[str, str, str | None]]]) -> Path:
    """A history file of (role, content, name) turns, one list per session, a minute apart."""
    start = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
    lines = []
    for s, turns in enumerate(sessions, start=1):
        for t, (role, content, name) in enumerate(turns, start=1):
            row = {"org_id": "acme", "user_id": "u1", "session_id": f"s{s}", "role": role, "content": content,
                   "created_at": (start + timedelta(days=s, minutes=t)).isoformat(), "message_id": f"s{s}:m{t}"}
            if name:
                row["name"] = name
            lines.append(json.dumps(row, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _top(service: MemoryService, query: str, **extra: object) -> list[str]:
    return [h.content for h in service.recall("acme", {"user_id": "u1", "query": query, **extra}).memories]


EDITOR_CHAT = [
    [("user", "Hey, got a minute?", "Caroline"), ("assistant", "Sure, what's up?", None),
     ("user", "I do all my coding in Zed these days.", "Caroline"), ("assistant", "Nice, good choice.", None),
     ("user", "Thanks, super helpful.", "Caroline"), ("assistant", "Anytime!", None)],
    [("user", "Our refund rule: refunds within 30 days only.", "Caroline"), ("assistant", "Noted.", None),
     ("user", "好的", "Caroline"), ("assistant", "Hello! How can I help?", None)],
]

FRIENDS_CHAT = [
    [("user", "Hey Mel! How was your week?", "Caroline"),
     ("assistant", "Busy! I finally painted that sunrise over the lake.", "Melanie"),
     ("user", "Wow, thanks for sharing.", "Caroline"), ("assistant", "Caroline, what have you been up to?", "Melanie"),
     ("user", "I joined a pottery class on Tuesdays.", "Caroline")],
]


def test_a_content_free_turn_never_outranks_the_fact_it_follows(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    service = make_service()
    import_into(service, _write_history(tmp_path / "h.jsonl", EDITOR_CHAT))
    for query in ("Which editor does the user use?", "Which code editor does Caroline use?", "Zed"):
        assert _top(service, query, min_score=0)[0] == "I do all my coding in Zed these days.", query
    # The acknowledgement is stored (raw mode keeps every turn) and found by its own words.
    assert _top(service, "super helpful thanks")[0] == "Thanks, super helpful."


def test_a_turn_that_only_asks_counts_its_own_words_once(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    """It tells nothing; the answer after it holds its words as context (the family question of
    the demo, below, is found that way)."""
    service = make_service()
    chat = [[("user", "Can you plan my evening?", None), ("assistant", "Who is at home with you?", None),
             ("user", "My twin boys, they just started school.", None), ("assistant", "Is that all? Nobody else?", None)]]
    import_into(service, _write_history(tmp_path / "h.jsonl", chat))
    records = {r.content: r for r in service.list(U, limit=100).records}
    assert records["Can you plan my evening?"].keywords.split() == ["plan", "evening"]
    assert records["Who is at home with you?"].keywords.split() == ["home", "plan", "evening"]
    assert records["Is that all? Nobody else?"].keywords.split()[:2] == ["nobody", "else"]
    assert records["My twin boys, they just started school."].keywords.split().count("twin") == 2


def test_the_vector_embeds_the_turn_with_its_speaker_and_keywords_add_the_turns_before(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    service = make_service()
    import_into(service, _write_history(tmp_path / "h.jsonl", FRIENDS_CHAT))
    records = {r.content: r for r in service.list(U, limit=100).records}
    stored = service.store.get_memories(U, [records["Wow, thanks for sharing."].id], with_vectors=True)[0]
    context, own = index_parts(stored.index_text, stored.content)
    assert own == "Caroline: Wow, thanks for sharing." == stored.vector_text
    assert context == "Caroline: Hey Mel! How was your week?\nMelanie: Busy! I finally painted that sunrise over the lake."
    words = stored.keywords.split()  # the turn's own terms twice (content_boost), its context's once
    assert words.count("thanks") == 2 and words.count("sunrise") == 1 and words.count("caroline") == 3
    # The vector is the turn's own: equal to embedding "Caroline: Wow, thanks for sharing." alone.
    alone = service.embedder.embed_batch(["Caroline: Wow, thanks for sharing."])[0]
    assert float(alone @ np.asarray(stored.vector)) == pytest.approx(1.0, abs=1e-4)
    assert _top(service, "What did Melanie paint?")[0] == "Busy! I finally painted that sunrise over the lake."
    # An update keeps the context and the speaker.
    updated = service.update(U, stored.id, {"content": "Wow, lovely."})
    again = service.store.get_memories(U, [updated.id])[0]
    assert again.index_text == f"{context}\nCaroline: Wow, lovely."


def test_a_chat_with_one_person_embeds_turns_without_names(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    # Caroline and an assistant (named by its role, or not at all): the name would only tie all her
    # turns to the word, so neither the vector nor the keywords carry it.
    service = make_service()
    chat = [[(role, content, "Assistant" if role == "assistant" else name) for role, content, name in EDITOR_CHAT[0]]]
    import_into(service, _write_history(tmp_path / "h.jsonl", chat))
    for record in service.store.user_memories(U)[0]:
        assert record.vector_text == record.content and "caroline" not in record.keywords.split()


def test_noise_does_not_fill_the_list_by_default(make_service: Callable[..., MemoryService]) -> None:
    service = make_service()
    service.add_many("acme", [
        {"user_id": "u1", "content": "Refunds are accepted within 30 days of purchase."},
        {"user_id": "u1", "content": "The user's favourite editor is Zed."},
        {"user_id": "u1", "content": "用户每周五下午去健身房"},
    ])
    assert _top(service, "Which editor does the user use?") == ["The user's favourite editor is Zed."]
    # A memory that shares nothing with the question scores near 0, however fresh and important.
    everything = service.recall("acme", {"user_id": "u1", "query": "What is the capital of Mongolia?", "min_score": 0})
    assert max(h.score for h in everything.memories if h.content.startswith("Refunds")) < 0.05
    assert "Refunds are accepted within 30 days of purchase." not in _top(service, "What is the capital of Mongolia?")
    # Nothing relevant at all (keywords carry Chinese, and none match): an empty answer is an answer.
    assert _top(service, "她喜欢看什么电影？") == []
    # min_score 0 keeps every hit, as before the floor.
    assert len(_top(service, "她喜欢看什么电影？", min_score=0)) == 3
    assert service.settings.recall.min_score > 0


def test_chinese_questions_find_their_turns_through_words_and_bigrams(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    service = make_service()
    chat = [[("user", "我养了一只猫，叫土豆，三岁了", "林晓"), ("assistant", "好可爱！", None),
             ("user", "嗯嗯", "林晓"), ("user", "下周我妈要做膝盖手术，有点担心", "林晓"),
             ("assistant", "希望手术顺利。", None), ("user", "谢谢！", "林晓")]]
    import_into(service, _write_history(tmp_path / "h.jsonl", chat))
    assert _top(service, "林晓养的是什么宠物？猫", min_score=0)[0].startswith("我养了一只猫")
    assert _top(service, "她妈妈要做什么手术？", min_score=0)[0].startswith("下周我妈要做膝盖手术")


def test_reindex_brings_old_rows_to_what_this_version_writes(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    service = make_service()
    import_into(service, _write_history(tmp_path / "h.jsonl", FRIENDS_CHAT + EDITOR_CHAT))
    service.add("acme", {"user_id": "u1", "content": "用户喜欢喝绿茶"})
    current = {r.id: r for r in service.store.user_memories(U)[0]}
    # Rows as the previous layout wrote them: no speaker, stale keywords, and a vector of the whole
    # index text, context included (for a one-person chat the index text itself is unchanged).
    old = []
    for record in current.values():
        context, _ = index_parts(record.index_text, record.content)
        text = f"{context}\n{record.content}" if context else record.content
        vector = service.embedder.embed_batch([text])[0].tolist()
        old.append(record.model_copy(update={"index_text": text, "keywords": "stale", "vector": vector}))
    service.store.replace_memories(U, old)
    maintenance_of(service.store).set_index_format(1)
    editor_ack = next(r for r in old if r.content == "Thanks, super helpful.")
    assert editor_ack.index_text == current[editor_ack.id].index_text  # unchanged text, stale vector

    dry = reindex(service.settings, service=service, dry_run=True)
    assert dry["written"] == 0 and dry["index_format"] == 1
    assert dry["would_record"] == {"index_format": 2, "chinese_gloss": "off"}  # the bare model's way
    report = reindex(service.settings, service=service)
    assert report["changed"] == report["written"] == len(current) and report["skipped"] == 0
    assert report["reembedded"] == sum(1 for r in old if current[r.id].vector_text != r.index_text) > 0
    assert report["index_format"] == 2 == maintenance_of(service.store).index_format()
    after = {r.id: r for r in service.store.get_memories(U, list(current), with_vectors=True)}
    for memory_id, record in current.items():
        assert (after[memory_id].index_text, after[memory_id].keywords) == (record.index_text, record.keywords)
        expected = service.embedder.embed_batch([record.vector_text])[0]
        assert float(expected @ np.asarray(after[memory_id].vector)) == pytest.approx(1.0, abs=1e-4), record.content
    fact = next(r for r in old if r.content.startswith("I joined a pottery class"))
    assert _top(service, "What class did Caroline join?")[0] == fact.content
    # Nothing left to do: a second run writes nothing.
    assert reindex(service.settings, service=service)["changed"] == 0


def test_reindex_embeds_chinese_again_after_the_way_chinese_is_embedded_changed(
    make_service: Callable[..., MemoryService], embedder: Embedder, clock: Clock
) -> None:
    service = make_service(clock=clock)  # the bare model: Chinese embedded as written, and recorded so
    ids = service.add_many("acme", [{"user_id": "u1", "content": "我老公在银行上班"},
                                    {"user_id": "u1", "content": "Drinks green tea"}]).ids
    maintenance = maintenance_of(service.store)
    assert maintenance.chinese_gloss() is False and maintenance.stats()["chinese_gloss"] == "off"
    before = {r.id: r for r in service.store.get_memories(U, ids, with_vectors=True)}
    glossing = GlossingEmbedder(embedder)
    reglossed = MemoryService(service.store, glossing, service.settings, clock=clock, maintenance=maintenance)

    dry = reindex(service.settings, service=reglossed, dry_run=True)
    assert (dry["written"], dry["chinese_gloss"], dry["would_record"]) == (0, "off", {"index_format": 2, "chinese_gloss": "on"})
    assert reindex(service.settings, service=reglossed, org_id="acme", dry_run=True)["would_record"] is None
    # One org's run embeds its Chinese again but records nothing: other orgs may hold Chinese too.
    one_org = reindex(service.settings, service=reglossed, org_id="acme")
    assert (one_org["reembedded"], one_org["chinese_gloss"]) == (1, "off") and maintenance.chinese_gloss() is False
    report = reindex(service.settings, service=reglossed)  # still recorded "off": embedded again
    assert (report["changed"], report["reembedded"], report["skipped"], report["chinese_gloss"]) == (1, 1, 0, "on")
    assert maintenance.chinese_gloss() is True and maintenance.stats()["chinese_gloss"] == "on"
    after = {r.id: r for r in service.store.get_memories(U, ids, with_vectors=True)}
    chinese, english = after[ids[0]], after[ids[1]]
    expected = glossing.embed_batch([chinese.vector_text])[0]
    assert float(expected @ np.asarray(chinese.vector)) == pytest.approx(1.0, abs=1e-4)
    assert float(np.asarray(before[ids[0]].vector) @ np.asarray(chinese.vector)) < 0.9
    assert before[ids[0]].oov > 0.3 and chinese.oov == 0.0  # the model reads all of the gloss
    assert english.vector == before[ids[1]].vector
    again = reindex(service.settings, service=reglossed)
    assert again["changed"] == 0 and "would_record" not in again  # only a dry run says what it would record
    # And back: the store records what it holds, so the bare model embeds the Chinese row again.
    assert reindex(service.settings, service=service)["reembedded"] == 1 and maintenance.chinese_gloss() is False


@pytest.mark.store  # a LanceDB on a temporary directory
def test_a_store_records_how_its_chinese_is_embedded_and_warns_of_the_other_way(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(storage_uri=str(tmp_path / "lancedb"), _env_file=None)  # type: ignore[call-arg]
    model = {"embedding_model": "all-MiniLM-L6-v2", "embedding_dim": 384}
    store = open_store(settings, **model, chinese_gloss=True)
    assert maintenance_of(store).chinese_gloss() is True and maintenance_of(store).stats()["chinese_gloss"] == "on"
    with caplog.at_level(logging.WARNING, logger="storage.tables"):
        open_store(settings, **model, chinese_gloss=True)
        open_store(settings, embedding_model=None, embedding_dim=None)  # embeds nothing: nothing to say
        assert not caplog.records
        open_store(settings, **model, chinese_gloss=False)
    assert "were embedded through its English gloss" in caplog.text and "agent-memory reindex" in caplog.text
    caplog.clear()
    unsaid = LanceStore(str(tmp_path / "other"), **model)  # a process that does not say: nothing recorded
    assert maintenance_of(unsaid).chinese_gloss() is None
    with caplog.at_level(logging.WARNING, logger="storage.tables"):
        open_store(settings.replace(storage_uri=str(tmp_path / "other")), **model, chinese_gloss=True)
    assert "do not say how they were embedded" in caplog.text


@pytest.mark.store  # a LanceDB on a temporary directory
def test_the_warning_is_read_from_the_store_alone_for_a_server_to_print(tmp_path: Path) -> None:
    """`agent-memory serve` prints it at start-up (its replicas only log it in Ray's logs): read
    from the store's metadata and the settings, loading no model and creating nothing."""
    settings = Settings(storage_uri=str(tmp_path / "lancedb"), _env_file=None)  # type: ignore[call-arg]
    assert settings.embedding.glosses_chinese()  # the bundled model: Chinese embedded through its gloss
    assert gloss_notice(settings) is None and not (tmp_path / "lancedb").exists()  # no store yet
    open_store(settings, embedding_model="all-MiniLM-L6-v2", embedding_dim=384, chinese_gloss=False)
    notice = gloss_notice(settings)
    assert notice is not None and "\n" not in notice
    assert "were embedded as written" in notice and "`agent-memory reindex`" in notice
    assert gloss_notice(settings.replace(embedding_gloss_chinese="off")) is None
    assert gloss_notice(settings.replace(storage_uri=str(tmp_path / "missing"))) is None


def test_reindex_never_overwrites_a_row_changed_since_it_was_read(
    make_service: Callable[..., MemoryService], clock: Clock
) -> None:
    service = make_service(clock=clock)
    ids = service.add_many("acme", [{"user_id": "u1", "content": "Uses VS Code"},
                                    {"user_id": "u1", "content": "Drinks green tea"}]).ids
    read = {r.id: r for r in service.store.get_memories(U, ids, with_vectors=True)}
    clock.advance(seconds=1)
    service.update(U, ids[0], {"content": "Uses Zed"})  # lands between the read and the write
    stale = [r.model_copy(update={"keywords": "rebuilt"}) for r in read.values()]
    assert service.store.reindex_memories(U, stale) == 1
    after = {r.id: r for r in service.store.get_memories(U, ids)}
    assert after[ids[0]].content == "Uses Zed" and after[ids[0]].keywords != "rebuilt"
    assert after[ids[1]].keywords == "rebuilt"


def _demo_service(make_service: Callable[..., MemoryService], tmp_path: Path) -> MemoryService:
    """The shipped sample's rows of the demo's users, imported as `make run` imports them."""
    users = {user for user, _ in DEMO_QUESTIONS}
    rows = [line for line in (ROOT / "examples" / "sample_history.jsonl").open(encoding="utf-8")
            if json.loads(line)["user_id"] in users]
    (tmp_path / "sample.jsonl").write_text("".join(rows), encoding="utf-8")
    service = make_service()
    import_into(service, tmp_path / "sample.jsonl", mode=SAMPLE_MODE)
    return service


def _content_free() -> set[str]:
    """The sample's turns that say nothing of the user: greetings, thanks, small talk, goodbyes,
    and the assistant's replies to them (examples/sample_phrases.json)."""
    phrases = json.loads((ROOT / "examples" / "sample_phrases.json").read_text(encoding="utf-8"))
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            found.add(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for name in ("GREETINGS", "FRIDAY_GREETINGS", "GREETING_REPLIES", "CLOSERS", "SMALL_TALK", "DISTRACTOR_REPLIES", "ACKS"):
        walk(phrases[name])
    return found


def _evidence(user: str, question: str) -> set[str]:
    labelled = {(q["user_id"], q["question"]): set(q["evidence"]) for q in
                map(json.loads, (ROOT / "examples" / "sample_questions.jsonl").open(encoding="utf-8"))}
    labelled[("u01", "Which editor does the user use?")] = labelled[("u01", "Which code editor does the user use?")]
    return labelled[(user, question)]


def test_the_demo_questions_find_their_evidence_first(make_service: Callable[..., MemoryService], tmp_path: Path) -> None:
    """The questions `make run` and the README ask, on the shipped sample (their users' rows): each
    finds its evidence first, and neither its top 3 nor the README's context for "Which editor
    should I configure?" holds a turn that says nothing of the user ("Hello! How can I help?")."""
    service = _demo_service(make_service, tmp_path)
    empty = _content_free()
    for user, question in DEMO_QUESTIONS:
        hits = service.recall("acme", {"user_id": user, "query": question, "top_k": 3}).memories
        assert hits and set(hits[0].source_ids) & _evidence(user, question), (question, [h.content for h in hits])
        assert not [h.content for h in hits if h.content in empty or (h.metadata or {}).get("role") == "assistant"]
    context = service.context("acme", {"user_id": "u01", "session_id": "s42", "query": "Which editor should I configure?",
                                       "max_tokens": 800})
    memories = [m["content"] for m in context["parts"]["memories"]]
    assert memories and memories[0] == "I do all my coding in Zed." and not set(memories) & empty, memories


def test_a_conversation_sent_a_few_turns_at_a_time_is_indexed_as_an_import_indexes_it(
    make_service: Callable[..., MemoryService], tmp_path: Path
) -> None:
    service = make_service()
    import_into(service, _write_history(tmp_path / "h.jsonl", FRIENDS_CHAT))
    want = {r.content: (r.index_text, r.keywords) for r in service.store.user_memories(U)[0]}
    turns = [{"role": role, "content": content, "name": name, "message_id": f"s1:m{i}",
              "created_at": datetime(2025, 3, 2, 9, i, tzinfo=timezone.utc)}
             for i, (role, content, name) in enumerate(FRIENDS_CHAT[0], start=1)]
    for start in range(0, len(turns), 2):  # two turns per request, as an agent posts them
        records = service.message_records("acme", "u2", "s1", turns[start : start + 2])
        service.log_messages("acme", records)
        extract_and_store(service, "acme", records, "raw", actor="test")
    got = {r.content: (r.index_text, r.keywords) for r in service.store.user_memories(Scope.user("acme", "u2"))[0]}
    assert got == want and any("\n" in text for text, _ in got.values())
