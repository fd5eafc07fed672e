"""Pure unit tests of the text helpers and score fusion (no store, no model)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from agent_memory import scoring, text
from agent_memory.store import Candidate, Pool, Retrieved
from agent_memory.text import chinese_words, index_terms, is_chinese, keyword_text, lexical_similarity, terms


def test_english_terms_drop_stopwords_and_lowercase() -> None:
    assert terms("I prefer Python for the Backend") == ["prefer", "python", "backend"]
    # A stop word with a clitic is a stop word; a content word keeps its possessive (stemmed away later).
    assert terms("What's the user's IDE? They're sure we'll go") == ["user's", "ide", "sure", "go"]


def test_chinese_becomes_bigrams_and_dictionary_words_and_mixed_text_keeps_words() -> None:
    # Bigrams of the run, then its words and their characters, less function words (我 is one).
    assert terms("我喜欢苹果") == ["我喜", "喜欢", "欢苹", "苹果", "喜欢", "苹果", "喜", "欢", "苹", "果"]
    assert terms("用 FastAPI 开发") == ["用", "用", "用", "fastapi", "开发", "开发", "开", "发"]
    # A function word's bigram and characters go too: 怎样 says nothing of what is asked.
    assert not {"怎样", "怎", "样"} & set(terms("王芳的家庭情况是怎样的？"))
    # A one-character word that no bigram holds alone is a term of its own: a question about 猫 finds it.
    assert "猫" in terms("我养了一只猫，叫土豆") and "猫" in terms("她养了什么猫？")
    assert "什么" not in terms("她养了什么猫？")  # a function word, as a word and as a bigram
    # A bigram of function words' characters only goes too (是怎 of 是|怎样, 她是); one with a
    # content character stays (么忙, 况是).
    assert not {"是怎", "她是"} & (set(terms("王芳的家庭情况是怎样的？")) | set(terms("她是怎么忙过来的")))
    assert {"况是", "么忙"} <= set(terms("王芳的家庭情况是怎样的？")) | set(terms("她是怎么忙过来的"))
    # Kana and hangul runs stay bigrams only.
    assert terms("ありがとう") == ["あり", "りが", "がと", "とう"]


def test_chinese_words_are_the_same_from_many_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    chinese_words.cache_clear()
    text._segmenter = None  # the dictionary is loaded by whichever thread comes first
    texts = ["王芳后端一般用什么语言写", "她母亲接受的是哪种手术", "周末去杭州看了西湖"] * 20
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda t: terms(t), texts))
    assert results == [terms(t) for t in texts]


def test_a_text_only_asks_when_every_sentence_is_a_question() -> None:
    for asks in ("好的，家里有没有需要考虑的人？", "Sure, what's up?", "Where to? When?", "真的吗？？"):
        assert text.only_asks(asks), asks
    for tells in ("That is great! How about you?", "有，一对双胞胎儿子。", "Thanks.", "好的吗", "", "?!"):
        assert not text.only_asks(tells), tells


def test_fullwidth_is_normalised() -> None:
    assert keyword_text("ＰＹＴＨＯＮ３") == "python3"


def test_lexical_similarity_reads_chinese() -> None:
    assert lexical_similarity("用户喜欢吃苹果", "用户很喜欢吃苹果") > 0.6
    assert lexical_similarity("用户喜欢吃苹果", "服务器操作系统") == 0.0


def test_a_text_is_chinese_when_a_quarter_of_its_letters_are_cjk() -> None:
    assert is_chinese("我喜欢 Python") and is_chinese("Assistant: 不用谢") and is_chinese("我写代码全都在Neovim里。")
    assert not is_chinese("I had 饺子 for dinner") and not is_chinese("Python 3.12") and not is_chinese("")


def test_sentences_end_at_marks_faces_and_line_breaks_not_decimal_points() -> None:
    assert text.sentences("Split 137.50 between 5? Sure.") == ["Split 137.50 between 5?", "Sure."]
    assert text.sentences("the Pixel died 💀 I'm on an iPhone now") == ["the Pixel died 💀", "I'm on an iPhone now"]
    assert text.sentences("住在杭州；养了一只猫\n好的！") == ["住在杭州；", "养了一只猫", "好的！"]


def test_recency_halves_at_half_life_and_ignores_future() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    created = [(now - timedelta(days=30)).timestamp(), (now + timedelta(days=3)).timestamp(), now.timestamp()]
    assert scoring.recency(np.array(created), now.timestamp(), 30).tolist() == pytest.approx([0.5, 1.0, 1.0])


def _parts(*rows: tuple[float, float, float, float]) -> scoring.ScoreArrays:
    """Score components of a pool, one (semantic, keyword, recency, importance) per candidate."""
    return scoring.ScoreArrays(*(np.array(column, dtype=np.float64) for column in zip(*rows, strict=True)))


def test_fuse_is_a_bounded_weighted_mean() -> None:
    weights = scoring.Weights(0.5, 0.3, 0.1, 0.1)
    top, old_relevant, new_irrelevant = scoring.fuse(
        _parts((1, 1, 1, 1), (0.8, 1, 0.0, 0.5), (0.1, 0, 1.0, 0.5)), weights
    ).tolist()
    assert top == pytest.approx(1.0)
    # Recency alone can never lift an irrelevant memory above a tenth of the scale.
    assert old_relevant > new_irrelevant
    assert scoring.fuse(_parts((1, 1, 1, 1)), scoring.Weights(0, 0, 0, 0)).tolist() == [0.0]


def test_unreadable_text_moves_weight_to_keywords() -> None:
    weights = scoring.Weights(0.5, 0.3, 0.1, 0.1)
    parts = _parts((1.0, 0.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0))
    assert scoring.readable_share(1.0, np.array([0.0, 0.5]), 0.5).tolist() == [0.0, 0.0]
    assert scoring.readable_share(0.0, np.array([0.0, 0.25]), 0.5).tolist() == [1.0, 0.5]
    assert scoring.fuse(parts, weights, readable=np.array([0.0, 1.0])).tolist() == pytest.approx([0.0, 0.5])


def test_keyword_scores_are_relative_to_best_and_missing_is_zero() -> None:
    assert scoring.keyword_scores(np.array([4.0, 1.0, np.nan])).tolist() == [1.0, 0.25, 0.0]
    assert scoring.keyword_scores(np.array([np.nan, np.nan])).tolist() == [0.0, 0.0]
    assert scoring.keyword_scores(np.array([])).tolist() == []
    assert scoring.semantic(np.array([0.5, -0.2, np.nan, 1.0000001])).tolist() == [0.5, 0.0, 0.0, 1.0]


def test_a_weak_best_match_stays_weak() -> None:
    # The best of unrelated texts (cosine 0.2) is not made a perfect match; a strong best is 1.
    assert scoring.semantic(np.array([0.2, 0.1]), scale=0.5).tolist() == pytest.approx([0.4, 0.2])
    assert scoring.semantic(np.array([0.8, 0.4]), scale=0.5).tolist() == pytest.approx([1.0, 0.5])
    # BM25 relative to its best, unless the best holds little of the query's idf mass.
    assert scoring.keyword_scores(np.array([2.0, 1.0]), idf_mass=10.0, share=0.5).tolist() == pytest.approx([0.4, 0.2])
    assert scoring.keyword_scores(np.array([8.0, 2.0]), idf_mass=10.0, share=0.5).tolist() == pytest.approx([1.0, 0.25])
    assert scoring.keyword_scores(np.array([8.0, 2.0]), idf_mass=None, share=0.5).tolist() == pytest.approx([1.0, 0.25])


def test_idf_mass_counts_every_query_word_and_the_cjk_terms_that_occur() -> None:
    docs = [["zed", "editor"], ["tea"], ["tea", "green"], ["coffee"]]
    scores, mass = scoring.bm25_with_mass(["zed", "tea", "absent"], docs)
    assert scores.tolist() == pytest.approx(scoring.bm25(["zed", "tea", "absent"], docs).tolist())
    # A word no memory holds weighs as the rarest term: the best match of the others stays partial.
    assert mass == pytest.approx(float(scoring.idf(4, 1) + scoring.idf(4, 2) + scoring.idf(4, 0)))
    # A CJK term no memory holds (a bigram across words, 么语 of 什么语言) adds nothing.
    assert scoring.bm25_with_mass(["zed", "么语"], docs)[1] == pytest.approx(float(scoring.idf(4, 1)))
    assert scoring.bm25_with_mass(["absent"], docs)[1] == pytest.approx(float(scoring.idf(4, 0)))
    # A document of average length holding each found term once scores about the mass.
    average = scoring.bm25(["zed", "tea"], [*docs, ["zed", "tea"]])
    assert average[-1] == pytest.approx(scoring.bm25_with_mass(["zed", "tea"], [*docs, ["zed", "tea"]])[1], rel=0.25)
    assert scoring.bm25_with_mass(["x"], []) == (pytest.approx(np.zeros(0)), 0.0)


def test_a_pool_of_candidate_lists_keeps_each_retrievers_order() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    dense = [Candidate("b", 0.9, now, 0.5, 0.0), Candidate("a", 0.4, now, 0.6, 0.1)]
    lexical = [Candidate("c", 7.0, now - timedelta(days=1), 0.2, 0.0), Candidate("a", 3.0, now, 0.6, 0.1)]
    pool = Pool.of(dense, lexical)
    assert sorted(pool.ids) == ["a", "b", "c"]
    assert Retrieved(pool, lambda ids: []).dense == dense
    assert Retrieved(pool, lambda ids: []).lexical == lexical


def test_index_terms_stem_and_fold_as_the_full_text_index_does() -> None:
    assert index_terms(keyword_text("The user prefers cafés, running daily")) == ("user", "prefer", "cafe", "run", "daili")
    assert index_terms(keyword_text("用户喜欢跑步")) == (
        "用户", "户喜", "喜欢", "欢跑", "跑步", "用户", "喜欢", "跑步", "用", "户", "喜", "欢", "跑", "步")
    assert index_terms("a" * 41 + " ok") == ("ok",)  # tokens over 40 bytes are dropped, as by the index


def test_bm25_follows_the_okapi_formula() -> None:
    docs = [("python", "backend"), ("python",), ("tea", "green", "tea")]
    scores = scoring.bm25(["python", "python", "tea"], docs)
    average = 2.0
    idf_python = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_tea = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))

    def term(idf: float, tf: int, length: int) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / average))

    assert scores.tolist() == pytest.approx([term(idf_python, 1, 2), term(idf_python, 1, 1), term(idf_tea, 2, 3)])
    assert scoring.bm25(["absent"], docs).tolist() == [0.0, 0.0, 0.0]
    assert scoring.bm25(["x"], []).tolist() == []
    # A long query (a pasted page, bigrams of a long Chinese sentence) scores what it shares only.
    long_query = [f"filler{i}" for i in range(20_000)] + ["python", "tea"]
    assert scoring.bm25(long_query, docs).tolist() == pytest.approx(scoring.bm25(["python", "tea"], docs).tolist())


def test_group_sums_add_each_groups_rows_and_leave_empty_groups_zero() -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((200, 7)).astype(np.float32)
    groups = rng.integers(0, 12, 200)
    groups[groups == 5] = 6  # group 5 holds no row
    expected = np.zeros((13, 7))
    np.add.at(expected, groups, rows)
    assert np.array_equal(scoring.group_sums(rows, groups, 13), expected)
    # Each group one run, in no order of their numbers (a user's sessions as the scan reads them).
    runs = np.repeat(rng.permutation(13)[:9], rng.integers(1, 22, 9))  # at most 189 rows
    block = rows[: len(runs)]
    expected = np.zeros((13, 7))
    np.add.at(expected, runs, block)
    assert np.array_equal(scoring.group_sums(block, runs, 13), expected)
    assert scoring.group_sums(np.zeros((0, 3)), np.zeros(0, dtype=int), 2).tolist() == [[0.0] * 3] * 2
    # A session of a pool is one document: its turns' term counts and lengths add up.
    counts = scoring.term_counts(["tea", "green"], [("tea",), ("green", "tea"), ("coffee",)])
    assert counts.tf.tolist() == [[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    grouped = counts.grouped(np.array([0, 0, 1]), 2)
    assert grouped.tf.tolist() == [[2.0, 1.0], [0.0, 0.0]] and grouped.lengths.tolist() == [3.0, 1.0]


def test_index_terms_are_the_same_from_many_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"running preferences number {i} cafés connected" for i in range(400)]
    want = [index_terms.__wrapped__(t) for t in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(index_terms.__wrapped__, texts)) == want
