"""Linking Chinese memories: restatements in other words through the dictionary, and the guards
that keep look-alikes apart. The bundled model reads Chinese at best through its English gloss, so
Chinese memories link on their words, their vectors at most confirming them; all but the last test
are pure unit tests (no store, no model)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np
import pytest

from agent_memory import linking
from agent_memory.clustering import cluster_memories
from agent_memory.embedding import Embedder, GlossingEmbedder
from agent_memory.link_signals import pair_signals
from agent_memory.linking import link_graph
from agent_memory.models import MemoryRecord
from agent_memory.settings import Settings
from agent_memory.wording import possessions, role_tokens, swaps_owners, swaps_roles

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


def memory(k: int, text: str, *, oov: float = 1.0) -> MemoryRecord:
    """A memory the model cannot read (oov 1.0: Chinese with the bundled model), unless told."""
    return MemoryRecord(id=f"m{k}", org_id="acme", user_id="alice", content=text, index_text=text,
                        memory_type="semantic", importance=0.5, confidence=1.0, valid_from=NOW, created_at=NOW,
                        updated_at=NOW, oov=oov)


def signals(a: str, b: str) -> dict[str, object]:
    vector = np.full(4, 0.5, dtype=np.float32)  # Chinese embeds alike with the bundled model
    return pair_signals(memory(0, a), memory(1, b), vector, vector, SETTINGS)


def linked_pairs(texts: Sequence[str]) -> set[tuple[str, str]]:
    records = [memory(k, t) for k, t in enumerate(texts)]
    links, _ = link_graph(records, np.full((len(texts), 4), 0.5, dtype=np.float32), SETTINGS)
    return {(texts[i], texts[j]) for i in links for j in links[i] if i < j}


@pytest.mark.parametrize(("a", "b"), [
    ("我老公在银行上班。", "我丈夫在银行上班。"),
    ("我上个月换了一台新电脑。", "我上个月换了一台新计算机。"),
    ("用户的闺女在上海读大学。", "用户的女儿在上海读大学。"),
    ("我明年打算去日本旅游。", "我明年打算去日本旅行。"),
])
def test_chinese_restatements_in_other_words_link_through_the_dictionary_and_are_doubtful(a: str, b: str) -> None:
    found = signals(a, b)
    assert found["linked"] and found["dictionary"], found
    # The link rests on the dictionary, not on the user's words: a configured judge reviews it.
    assert found["doubtful"], found


@pytest.mark.parametrize(("a", "b"), [
    ("我老公是医生。", "我丈夫是护士。"),  # another element besides the synonym
    ("我租了一套两居室。", "我买了一套两居室。"),  # no sense in common
    ("我老公抽烟。", "我丈夫戒烟了。"),  # negation in a verb
    ("我对芒果过敏。", "我儿子对芒果过敏。"),  # another person
    ("我下个月换电脑。", "我上个月换了计算机。"),  # another time
    ("我平时爱喝绿茶。", "我平时爱喝红茶。"),  # another thing
])
def test_look_alikes_stay_apart_whatever_the_dictionary_says(a: str, b: str) -> None:
    found = signals(a, b)
    assert not found["linked"] and not found["dictionary"], found


@pytest.mark.parametrize(("a", "b"), [
    ("我是我弟的房东。", "我弟是我的房东。"),  # whose landlord
    ("我是我们组长的师傅。", "我们组长是我的师傅。"),
    ("我更喜欢喝茶而不是咖啡。", "我更喜欢喝咖啡而不是茶。"),  # jieba cuts 喝茶 and 喝咖啡 whole
])
def test_the_same_chinese_words_with_roles_swapped_stay_apart(a: str, b: str) -> None:
    found = signals(a, b)
    assert found["roles_swapped"] and not found["linked"], found


@pytest.mark.parametrize(("a", "b"), [
    ("用户的老家在湖南长沙。", "湖南长沙是用户的老家。"),  # a copula's sides trade places
    ("用户爱看的是科幻小说。", "科幻小说是用户爱看的。"),
    ("我对花生和芒果过敏。", "我对芒果和花生过敏。"),
    ("我周六上午去游泳。", "周六上午我去游泳。"),
])
def test_chinese_in_another_order_still_links(a: str, b: str) -> None:
    found = signals(a, b)
    assert found["linked"] and not found["roles_swapped"], found


def test_whose_thing_it_is() -> None:
    a, b = "我是我弟的房东。", "我弟是我的房东。"
    assert possessions(a) == {("弟", "房东")} and possessions(b) == {("我", "房东")}
    assert swaps_owners(possessions(a), possessions(b), role_tokens(a), role_tokens(b))
    # The user in the third person is the user: the same owner.
    c, d = "用户的老家在湖南长沙。", "我的老家在湖南长沙。"
    assert not swaps_owners(possessions(c), possessions(d), role_tokens(c), role_tokens(d))
    # A word one statement cuts whole is split where the other has its part.
    assert swaps_roles(role_tokens("我更喜欢喝茶而不是咖啡"), role_tokens("我更喜欢喝咖啡而不是茶"))


def test_a_memory_links_to_its_restatement_and_not_to_its_look_alike_among_others() -> None:
    texts = ["我老公在银行上班。", "我丈夫在银行上班。", "我老公是医生。", "我丈夫是护士。", "我对芒果过敏。",
             "我每天晚上去江边跑步。", "我每天晚上去江边慢跑。", "我周末喜欢去爬山。"]
    assert linked_pairs(texts) == {("我老公在银行上班。", "我丈夫在银行上班。"),
                                   ("我每天晚上去江边跑步。", "我每天晚上去江边慢跑。")}


def test_a_judge_that_calls_a_dictionary_link_two_facts_keeps_them_apart() -> None:
    texts = ["我老公在银行上班。", "我丈夫在银行上班。", "我喜欢喝咖啡", "我很喜欢喝咖啡"]
    records = [memory(k, t) for k, t in enumerate(texts)]
    vectors = np.full((len(texts), 4), 0.5, dtype=np.float32)
    assert len(cluster_memories(records, vectors, SETTINGS)) == 2
    asked: list[tuple[str, str]] = []

    def two_facts(pairs: Sequence[tuple[str, str]]) -> set[int]:
        asked.extend(pairs)
        return set()  # no pair is the same fact

    clusters = cluster_memories(records, vectors, SETTINGS, judge=two_facts)
    assert ("我老公在银行上班。", "我丈夫在银行上班。") in asked
    # The words the user said alike are not in doubt: only the dictionary's link is undone.
    assert [sorted([c.canonical.content, *(o.content for o in c.others)]) for c in clusters] == [["我喜欢喝咖啡", "我很喜欢喝咖啡"]]


def test_the_dictionary_is_not_read_without_two_chinese_memories(monkeypatch: pytest.MonkeyPatch) -> None:
    def unread() -> None:
        raise AssertionError("the dictionary was read")

    monkeypatch.setattr(linking, "default_glosser", unread)
    texts = ["I like green tea", "I really like green tea", "我喜欢喝绿茶"]
    records = [memory(0, texts[0], oov=0.0), memory(1, texts[1], oov=0.0), memory(2, texts[2])]
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    links, _ = link_graph(records, vectors, SETTINGS)
    assert 1 in links[0] and not links[2]


# Chinese embedded through its English gloss: the model reads it in part (a low [UNK] share).
GLOSSED = Settings(_env_file=None, embedding_gloss_chinese="auto")  # type: ignore[call-arg]


def glossed_pair(a: str, b: str, cosine: float) -> tuple[list[MemoryRecord], np.ndarray]:
    vectors = np.array([[1.0, 0.0], [cosine, math.sqrt(1.0 - cosine**2)]], dtype=np.float32)
    return [memory(0, a, oov=0.0), memory(1, b, oov=0.0)], vectors


@pytest.mark.parametrize(("a", "b"), [
    ("我经常加班。", "我很少加班。"),  # "frequently" / "very few": 0.905 through the gloss
    ("我下班后喜欢做饭。", "我下班后懒得做饭。"),
    ("我喜欢喝咖啡。", "我不喜欢喝咖啡。"),  # "like" / "not like"
    ("用户的女儿在北京工作。", "用户的女儿在北京出生。"),  # another attribute
    ("我结婚五年了。", "我结婚五个月了。"),  # another time
])
def test_glossed_look_alikes_stay_apart_even_where_their_glosses_embed_alike(a: str, b: str) -> None:
    records, vectors = glossed_pair(a, b, 1.0)
    links, _ = link_graph(records, vectors, GLOSSED)
    assert not links[0], pair_signals(records[0], records[1], vectors[0], vectors[1], GLOSSED)


@pytest.mark.parametrize(("a", "b"), [
    ("用户的老公是医生。", "用户的丈夫是大夫。"),  # both gloss "user husband is doctor"
    ("我一熬夜就头疼。", "我一熬夜就头痛。"),
])
def test_glossed_restatements_whose_glosses_say_the_same_words_link_when_their_vectors_agree(a: str, b: str) -> None:
    records, vectors = glossed_pair(a, b, 0.95)
    found = pair_signals(records[0], records[1], vectors[0], vectors[1], GLOSSED)
    assert found["linked"] and found["dictionary"] and found["doubtful"], found
    # The same words are not enough: the gloss cosine must reach consolidation_similarity too.
    records, vectors = glossed_pair("用户的老公是医生。", "用户的丈夫是大夫。", 0.5)
    assert not pair_signals(records[0], records[1], vectors[0], vectors[1], GLOSSED)["linked"]


def test_chinese_with_the_bundled_model_is_compared_by_its_words_whatever_the_store_was_written_with() -> None:
    # A Chinese memory with a low [UNK] share holds a glossed vector, even where the setting is off now.
    off = Settings(_env_file=None, embedding_gloss_chinese="off")  # type: ignore[call-arg]
    records, vectors = glossed_pair("我经常加班。", "我很少加班。", 1.0)
    assert not pair_signals(records[0], records[1], vectors[0], vectors[1], off)["linked"]
    # A model that reads Chinese itself is trusted with its cosine.
    multilingual = Settings(_env_file=None, embedding_model="BAAI/bge-m3")  # type: ignore[call-arg]
    records, vectors = glossed_pair("我老公在银行上班。", "我老公在银行工作。", 0.95)
    found = pair_signals(records[0], records[1], vectors[0], vectors[1], multilingual)
    assert found["model_reads"] and found["linked"], found


def test_with_the_bundled_models_gloss_vectors_a_negation_stays_apart_and_a_synonym_links(embedder: Embedder) -> None:
    glossing = GlossingEmbedder(embedder)
    texts = ["我经常加班。", "我很少加班。", "用户的老公是医生。", "用户的丈夫是大夫。", "我周末喜欢去爬山。"]
    vectors = glossing.embed_batch(texts)
    records = [memory(k, t, oov=share) for k, (t, share) in enumerate(zip(texts, glossing.oov_shares(texts), strict=True))]
    assert float(vectors[0] @ vectors[1]) > GLOSSED.consolidation.similarity  # the cosine alone would merge them
    links, _ = link_graph(records, vectors, GLOSSED)
    assert {(texts[i], texts[j]) for i in links for j in links[i] if i < j} == {("用户的老公是医生。", "用户的丈夫是大夫。")}
