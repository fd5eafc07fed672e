"""Pure unit tests of the text helpers and score fusion (no store, no model)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from agent_memory import scoring
from agent_memory.models import ScoreParts
from agent_memory.text import cjk_share, index_terms, keyword_text, lexical_similarity, terms


def test_english_terms_drop_stopwords_and_lowercase() -> None:
    assert terms("I prefer Python for the Backend") == ["prefer", "python", "backend"]


def test_chinese_becomes_bigrams_and_mixed_text_keeps_words() -> None:
    assert terms("我喜欢苹果") == ["我喜", "喜欢", "欢苹", "苹果"]
    assert terms("用 FastAPI 开发") == ["用", "fastapi", "开发"]


def test_fullwidth_is_normalised() -> None:
    assert keyword_text("ＰＹＴＨＯＮ３") == "python3"


def test_lexical_similarity_reads_chinese() -> None:
    assert lexical_similarity("用户喜欢吃苹果", "用户很喜欢吃苹果") > 0.6
    assert lexical_similarity("用户喜欢吃苹果", "服务器操作系统") == 0.0
    assert cjk_share("我喜欢 Python") == pytest.approx(3 / 9)


def test_recency_halves_at_half_life_and_ignores_future() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert scoring.recency(now - timedelta(days=30), now, 30) == pytest.approx(0.5)
    assert scoring.recency(now + timedelta(days=3), now, 30) == 1.0


def test_fuse_is_a_bounded_weighted_mean() -> None:
    weights = scoring.Weights(0.5, 0.3, 0.1, 0.1)
    top = scoring.fuse(ScoreParts(semantic=1, keyword=1, recency=1, importance=1), weights)
    assert top == pytest.approx(1.0)
    # Recency alone can never lift an irrelevant memory above a tenth of the scale.
    old_relevant = scoring.fuse(ScoreParts(semantic=0.8, keyword=1, recency=0.0, importance=0.5), weights)
    new_irrelevant = scoring.fuse(ScoreParts(semantic=0.1, keyword=0, recency=1.0, importance=0.5), weights)
    assert old_relevant > new_irrelevant


def test_unreadable_text_moves_weight_to_keywords() -> None:
    weights = scoring.Weights(0.5, 0.3, 0.1, 0.1)
    parts = ScoreParts(semantic=1.0, keyword=0.0, recency=0.0, importance=0.0)
    assert scoring.readable_share(1.0, 0.0, 0.5) == 0.0
    assert scoring.fuse(parts, weights, readable=0.0) == 0.0
    assert scoring.fuse(parts, weights, readable=1.0) == pytest.approx(0.5)


def test_keyword_scores_are_relative_to_best() -> None:
    assert scoring.keyword_scores({"a": 4.0, "b": 1.0}) == {"a": 1.0, "b": 0.25}
    assert scoring.keyword_scores({}) == {}


def test_index_terms_stem_and_fold_as_the_full_text_index_does() -> None:
    assert index_terms(keyword_text("The user prefers cafés, running daily")) == ("user", "prefer", "cafe", "run", "daili")
    assert index_terms(keyword_text("用户喜欢跑步")) == ("用户", "户喜", "喜欢", "欢跑", "跑步")
    assert index_terms("a" * 41 + " ok") == ("ok",)  # tokens over 40 bytes are dropped, as by the index


def test_bm25_follows_the_okapi_formula() -> None:
    docs = [("python", "backend"), ("python",), ("tea", "green", "tea")]
    scores = scoring.bm25(["python", "python", "tea"], docs)
    average = 2.0
    idf_python = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    idf_tea = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))

    def term(idf: float, tf: int, length: int) -> float:
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length / average))

    assert scores == pytest.approx([term(idf_python, 1, 2), term(idf_python, 1, 1), term(idf_tea, 2, 3)])
    assert scoring.bm25(["absent"], docs) == [0.0, 0.0, 0.0]
    assert scoring.bm25(["x"], []) == []


def test_index_terms_are_the_same_from_many_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"running preferences number {i} cafés connected" for i in range(400)]
    want = [index_terms.__wrapped__(t) for t in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(index_terms.__wrapped__, texts)) == want
