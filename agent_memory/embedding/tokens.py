"""What a local model needs besides its graph on ONNX Runtime: its tokenizer, its shape as its
directory describes it, and the threads a call gets. Read here without torch, transformers or
sentence-transformers, whose imports take several seconds of a process's start."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class ModelTokenizer:
    """The tokenizer of a loaded sentence-transformers model (transformers' own)."""

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        self._tokenizer, self.max_length = tokenizer, max_length
        self.unk_id: int | None = getattr(tokenizer, "unk_token_id", None)

    def batch(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The model's inputs: padded to the longest text, cut at `max_length` tokens."""
        encoded = self._tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        return {name: np.asarray(value) for name, value in encoded.items()}

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, without special tokens, whole."""
        return [list(ids) for ids in self._tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


class FileTokenizer:
    """A model's fast tokenizer read straight from its `tokenizer.json` (the `tokenizers` library),
    set to pad and cut as `ModelTokenizer` does; used only where it gave the same ids on the probe
    texts when the model's graph was checked (`OnnxEncoder.from_cache`)."""

    def __init__(self, path: Path, max_length: int, unk_token: str | None) -> None:
        from tokenizers import Tokenizer

        self.max_length = max_length
        self._padded = Tokenizer.from_file(str(path))
        self._padded.enable_truncation(max_length)
        pad = self._padded.padding or {}
        self._padded.enable_padding(pad_id=pad.get("pad_id", 0), pad_type_id=pad.get("pad_type_id", 0),
                                    pad_token=pad.get("pad_token", "[PAD]"))
        self._whole = Tokenizer.from_file(str(path))
        self._whole.no_truncation()
        self._whole.no_padding()
        self.unk_id = self._whole.token_to_id(unk_token) if unk_token else None

    def batch(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        encodings = self._padded.encode_batch(list(texts))
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self._whole.encode_batch(list(texts), add_special_tokens=False)]


@dataclass(frozen=True)
class ModelFiles:
    """A local sentence-transformers directory of the shape ONNX Runtime runs (a Transformer, mean
    Pooling, perhaps Normalize; no prompt, no lower-casing of its own), as its files describe it."""

    tokenizer: Path
    max_length: int
    dim: int
    unk_token: str | None

    @classmethod
    def read(cls, path: str) -> ModelFiles | None:
        """The directory's description, or None where it is not one (a hub name, another shape,
        a file missing or unreadable): such a model loads through sentence-transformers."""
        root = Path(path)
        try:
            modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
            kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
            if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in ([], ["Normalize"]):
                return None
            home = root / modules[0]["path"]
            config = json.loads((home / "sentence_bert_config.json").read_text(encoding="utf-8"))
            pooling = json.loads((root / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
            modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
            st_path = root / "config_sentence_transformers.json"
            st_config = json.loads(st_path.read_text(encoding="utf-8")) if st_path.exists() else {}
            special_path = home / "special_tokens_map.json"
            special = json.loads(special_path.read_text(encoding="utf-8")) if special_path.exists() else {}
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        if (not modes.get("pooling_mode_mean_tokens") or any(v for k, v in modes.items() if k != "pooling_mode_mean_tokens")
                or config.get("do_lower_case") or not isinstance(config.get("max_seq_length"), int)
                or st_config.get("default_prompt_name") or not (home / "tokenizer.json").is_file()):
            return None
        unk = special.get("unk_token")
        unk = unk.get("content") if isinstance(unk, dict) else unk
        return cls(home / "tokenizer.json", config["max_seq_length"], int(pooling["word_embedding_dimension"]), unk)


def default_threads() -> int:
    """Threads for a model call where none are asked: `OMP_NUM_THREADS` where it is set (Ray sets
    it to an actor's CPUs), else one a physical core this process may run on, as torch counts
    (on Linux; where the system says neither, as on macOS, one a CPU)."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = set()
    for cpu in allowed:
        try:
            cores.add(Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))
