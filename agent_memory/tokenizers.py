"""The two tokenizers text is read with, each loaded on first use: jieba's Chinese word segmenter
(its dictionary ships in the package) and the Snowball English stemmer.

Keyword search (`agent_memory.text`), the wording guards and the Chinese gloss
(`agent_memory.gloss`) all segment and stem through these, so that they read a text alike.
"""

from __future__ import annotations

import threading
from functools import lru_cache

_segmenter_lock = threading.Lock()
_segmenter = None


def _jieba():  # type: ignore[no-untyped-def]
    """The process's jieba tokenizer, loaded once (its dictionary ships in the package)."""
    global _segmenter
    if _segmenter is None:
        with _segmenter_lock:
            if _segmenter is None:
                import logging

                import jieba

                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                _segmenter = tokenizer
    return _segmenter


@lru_cache(maxsize=65_536)
def chinese_words(han: str) -> tuple[str, ...]:
    """The dictionary words of a run of Han characters (jieba, without its HMM guesses for unknown
    words: bigrams already cover those, and the dictionary alone is faster and deterministic)."""
    return tuple(_jieba().cut(han, HMM=False))


_local = threading.local()


def _stemmer():  # type: ignore[no-untyped-def]
    """This thread's Snowball English stemmer (PyStemmer objects must not be shared across threads)."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        import Stemmer  # PyStemmer: the Snowball English stemmer the index's tokenizer also uses

        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def stem_words(words: list[str]) -> list[str]:
    """English words reduced to their Snowball stems (likes/liked/liking -> like, codes -> code)."""
    return list(_stemmer().stemWords(words))
