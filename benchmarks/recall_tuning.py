"""Recall tuning on cached sets: rows built as `raw` import builds them, vectors cached on disk by
their text, and every question ranked in process by the product's own scan scoring and fusion.

A set is read once per process and its vectors once per machine (`--cache`): a setting is then
scored on every dev set in seconds, not in the minutes an import takes. What it measures is what
`agent-memory eval` measures on the same rows (the check in `--verify` compares the two), so the
figures of the final settings are taken with `agent-memory eval` itself.

    PYTHONPATH=. .venv/bin/python benchmarks/recall_tuning.py --cache data/recall-cache \\
        --set locomo=../shared/data/locomo-dev --set lme=../shared/data/longmemeval-dev \\
        --set memsim=../shared/data/memsim-dev --set zh-dev=benchmarks/data/zh_dialogues/dev \\
        --set sample=examples/sample_history.jsonl,examples/sample_questions.jsonl \\
        --grid '{"weight_keyword": [0.4, 0.45, 0.5]}'
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory import recall, spread  # noqa: E402
from agent_memory.errors import InvalidInputError  # noqa: E402
from agent_memory.evaluation import answer_sessions, load_questions, session_metrics, turn_metrics  # noqa: E402
from agent_memory.history import parse_file  # noqa: E402
from agent_memory.models import MemoryRecord  # noqa: E402
from agent_memory.service import MemoryService, group_sessions  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.text import index_terms, keyword_text  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from storage import schema as sc  # noqa: E402
from storage.recall_scan import scanned_pool  # noqa: E402

FIXED_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class VectorCache:
    """Vectors and [UNK] shares by the text embedded, kept in one .npz per model."""

    def __init__(self, directory: Path, settings: Settings) -> None:
        self.path = directory / f"vectors-{hashlib.sha1(settings.embedding.model.encode()).hexdigest()[:10]}.npz"
        self.settings = settings
        self.embedder: Any = None
        self.index: dict[str, int] = {}
        self.vectors: list[np.ndarray] = []
        self.oov: list[float] = []
        if self.path.exists():
            data = np.load(self.path, allow_pickle=False)
            self.index = {k: i for i, k in enumerate(data["keys"].tolist())}
            self.vectors = list(data["vectors"])
            self.oov = data["oov"].tolist()
        self.dirty = False
        self.saved_at = time.perf_counter()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def get(self, texts: Sequence[str], *, batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Each text's vector and [UNK] share, embedding those not cached (by the text the model is
        given: a Chinese text's gloss where the settings gloss Chinese)."""
        if self.settings.embedding.glosses_chinese():
            from agent_memory.embedding import GlossingEmbedder

            texts = GlossingEmbedder.read(texts)
        keys = [self.key(t) for t in texts]
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in self.index))
        if missing:
            if self.embedder is None:
                from agent_memory.embedding import build_embedder

                self.embedder = build_embedder(self.settings.replace(embedding_gloss_chinese="off"))
            started = time.perf_counter()
            for at in range(0, len(missing), batch):
                chunk = missing[at : at + batch]
                vectors = self.embedder.embed_batch(chunk)
                oov = self.embedder.oov_shares(chunk)
                for text, vector, share in zip(chunk, vectors, oov, strict=True):
                    self.index[self.key(text)] = len(self.vectors)
                    self.vectors.append(np.asarray(vector, dtype=np.float32))
                    self.oov.append(float(share))
                self.dirty = True
                print(f"  embedded {min(at + batch, len(missing))}/{len(missing)} "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
                if time.perf_counter() - self.saved_at > 120:
                    self.save()
        rows = [self.index[k] for k in keys]
        return np.stack([self.vectors[i] for i in rows]) if rows else np.zeros((0, 384), np.float32), \
            np.asarray([self.oov[i] for i in rows], dtype=np.float32)

    def save(self) -> None:
        if not self.dirty:
            return
        keys = np.array(sorted(self.index, key=self.index.__getitem__))
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=np.stack(self.vectors), oov=np.asarray(self.oov, dtype=np.float32))
        tmp.replace(self.path)
        self.dirty = False
        self.saved_at = time.perf_counter()


@dataclass
class UserRows:
    """One user's memories as the per-user scan reads them."""

    records: list[MemoryRecord]
    table: pa.Table
    sources: list[list[str]]
    session_of: dict[str, str] = field(default_factory=dict)


@dataclass
class LabelledSet:
    name: str
    users: dict[str, UserRows]
    questions: list[dict[str, Any]]
    query_vectors: np.ndarray
    query_oov: np.ndarray


def _set_paths(spec: str) -> tuple[str, Path, Path, Path | None, str | None]:
    """NAME=DIR or NAME=HISTORY,QUESTIONS, with #CATEGORY (or #en / #zh for the sample) to keep a part."""
    name, _, where = spec.partition("=")
    where, _, category = where.partition("#")
    if "," in where:
        history, questions = where.split(",", 1)
        return name, Path(history), Path(questions), None, category or None
    sessions = Path(where) / "sessions.jsonl"
    return (name, Path(where) / "history.jsonl", Path(where) / "questions.jsonl",
            sessions if sessions.exists() else None, category or None)


def question_dates(path: Path | None) -> dict[str, str]:
    """LongMemEval's question dates by user (`sessions.jsonl`), as ISO 8601."""
    if path is None:
        return {}
    out = {}
    for line in path.read_text().splitlines():
        item = json.loads(line)
        when = datetime.strptime(item["question_date"].split(" (")[0] + " " + item["question_date"].split(") ")[1],
                                 "%Y/%m/%d %H:%M")
        out[item["user_id"]] = when.replace(tzinfo=timezone.utc).isoformat()
    return out


def build_rows(settings: Settings, history: Path) -> dict[str, tuple[list[MemoryRecord], list[str]]]:
    """Each user's raw memories, as `agent-memory import --mode raw` builds them, and their vector texts."""
    service = MemoryService.row_builder(settings, clock=lambda: FIXED_NOW)
    turns, _, _ = parse_file(str(history), "auto", "default")
    sessions: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for turn in turns:
        sessions[(turn.org_id, turn.user_id, turn.session_id)].append(turn.message)
    messages = []
    for (org, user, session), items in sessions.items():
        for item in items:  # one by one, as the import validates them: a turn too long is rejected alone
            try:
                messages.extend(service.message_records(org, user, session, [item]))
            except InvalidInputError:
                continue
    out: dict[str, tuple[list[MemoryRecord], list[str]]] = defaultdict(lambda: ([], []))
    for session in group_sessions(messages):
        for message, memory in zip(session, service.raw_memories(session), strict=True):
            record = service.prepare(message.org_id, memory)
            out[record.user_id][0].append(record)
            out[record.user_id][1].append(record.vector_text)
    return dict(out)


def scan_table(records: list[MemoryRecord], vectors: np.ndarray, oov: np.ndarray) -> pa.Table:
    """The columns the per-user scan reads, for these records."""
    n = len(records)
    dim = vectors.shape[1] if n else 384
    return pa.table({
        "id": [r.id for r in records],
        "content": [r.content for r in records],
        "keywords": [r.keywords for r in records],
        "session_id": [r.session_id for r in records],
        "created_at": pa.array([r.created_at for r in records], sc.TIMESTAMP),
        "importance": pa.array([r.importance for r in records], pa.float32()),
        "oov": pa.array(oov, pa.float32()),
        "memory_type": [r.memory_type for r in records],
        "source_ids": pa.array([r.source_ids for r in records], pa.list_(pa.string())),
        "metadata": ["{}"] * n,
        "feedback_offset": pa.array([0.0] * n, pa.float32()),  # no feedback yet: importance as stored
        "feedback_at": pa.array([None] * n, sc.TIMESTAMP),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), dim),
    })


def load_set(spec: str, settings: Settings, cache: VectorCache) -> LabelledSet:
    name, history, questions_path, sessions_path, part = _set_paths(spec)
    questions = load_questions(questions_path)
    if part in ("en", "zh"):
        from agent_memory.text import is_chinese

        questions = [q for q in questions if is_chinese(q["question"]) == (part == "zh")]
    elif part:
        questions = [q for q in questions if q.get("category") == part]
    dates = question_dates(sessions_path)
    for q in questions:
        if q["user_id"] in dates and not q.get("question_date"):
            q["question_date"] = dates[q["user_id"]]
    users = {}
    for user, (records, texts) in build_rows(settings, history).items():
        vectors, oov = cache.get(texts)
        users[user] = UserRows(records, scan_table(records, vectors, oov), [r.source_ids or [] for r in records])
        users[user].session_of = {s: r.session_id or "" for r in records for s in (r.source_ids or [])}
    qv, qoov = cache.get([q["question"] for q in questions])
    cache.save()
    return LabelledSet(name, users, questions, qv, qoov)


def rank_question(data: LabelledSet, index: int, settings: Settings, mode: str = "hybrid",
                  top_k: int = 50) -> list[list[str]]:
    """The sources of the top `top_k` memories recall ranks for question `index`."""
    q = data.questions[index]
    rows = data.users[q["user_id"]]
    asked = recall.Asked.of(q["question"], as_of=_as_of(q))
    vector = data.query_vectors[index] if mode != "keyword" else None
    terms = index_terms(keyword_text(q["question"])) if mode != "dense" else ()
    pool_size = max(settings.recall.candidates, top_k)
    table = rows.table if spread.wanted(settings.recall) else rows.table.drop_columns(["session_id"])
    pool = scanned_pool(table, vector, terms, rows.table.num_rows, pool_size)
    ranked = recall.rank(pool, asked, float(data.query_oov[index]), settings, mode, top_k, 0.0)
    by_id = {r.id: s for r, s in zip(rows.records, rows.sources, strict=True)}
    return [by_id[memory_id] for memory_id, _, _ in ranked]


def _as_of(q: dict[str, Any]) -> datetime:
    when = q.get("question_date")
    return datetime.fromisoformat(when) if when else FIXED_NOW


def score_set(data: LabelledSet, settings: Settings, modes: Iterable[str] = ("hybrid",)) -> dict[str, Any]:
    """recall@5/@10 and MRR per mode, overall, by category and by user; session scores where sessions are named."""
    out: dict[str, Any] = {}
    for mode in modes:
        per: list[dict[str, float]] = []
        for i, q in enumerate(data.questions):
            ranked = rank_question(data, i, settings, mode)
            metrics = turn_metrics(ranked, set(q["evidence"]), 10)
            rows = data.users[q["user_id"]]
            wanted = answer_sessions(q["evidence"], rows.session_of)
            if wanted:
                metrics.update(session_metrics([[rows.session_of.get(s, "") for s in r] for r in ranked], wanted))
            metrics["category"] = str(q.get("category") or "all")  # type: ignore[assignment]
            metrics["user"] = q["user_id"]  # type: ignore[assignment]
            per.append(metrics)
        out[mode] = per
    return out


def mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return float(np.mean(values)) if values else float("nan")


def summary(per: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k in ("recall@5", "recall@10", "mrr", "any@5", "all@5", "any@10", "all@10") if k in per[0]]
    return {k: round(mean(per, k), 4) for k in keys}


def grid_points(spec: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = list(spec)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(spec[k] for k in keys))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", required=True)
    parser.add_argument("--cache", default="data/recall-cache", help="directory of the vector cache")
    parser.add_argument("--grid", default=None, metavar="JSON", help='{"setting": [values, ...]} (every combination) or [{"setting": value, ...}, ...], scored on every set')
    parser.add_argument("--modes", default="hybrid", help="comma-separated: hybrid,dense,keyword")
    parser.add_argument("--by-category", action="store_true")
    parser.add_argument("--name", default=None, help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    base = Settings(_env_file=None)  # type: ignore[call-arg]
    cache = VectorCache(Path(args.cache), base)
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    sets = []
    for spec in args.set:
        started = time.perf_counter()
        sets.append(load_set(spec, base, cache))
        print(f"loaded {sets[-1].name}: {len(sets[-1].questions)} questions "
              f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
    spec = json.loads(args.grid) if args.grid else [{}]
    points = spec if isinstance(spec, list) else grid_points(spec)
    results = []
    for point in points:
        settings = base.replace(**point)
        row: dict[str, Any] = {"settings": point, "sets": {}}
        for data in sets:
            started = time.perf_counter()
            scored = score_set(data, settings, args.modes.split(","))
            elapsed = time.perf_counter() - started
            row["sets"][data.name] = {mode: summary(per) for mode, per in scored.items()}
            if args.by_category:
                for mode, per in scored.items():
                    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
                    for r in per:
                        groups[r["category"]].append(r)
                    row["sets"][data.name][f"{mode}_by_category"] = {
                        c: {**summary(g), "n": len(g)} for c, g in sorted(groups.items())}
            row["sets"][data.name]["ms_per_question"] = round(1000 * elapsed / len(data.questions) / len(scored), 2)
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.name:
        write_result(args.name, {"points": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
