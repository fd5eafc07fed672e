"""Consolidation quality on labelled restatements and look-alikes: pairwise precision and recall
of the merges, per language and per class.

Reads the sets in `benchmarks/data/consolidation/` (written apart from the rules, split once into
dev and held-out; see its README): duplicate groups labelled by how a restatement differs (word
order, function words, a qualifier, a synonym) and look-alike pairs labelled by what makes them
two facts (negation, another person, another time, another entity, swapped roles, another
attribute). The items are dealt to users, twelve each in a fixed shuffle, so that unrelated
memories sit next to each other as they do in a real user's memory; every memory is embedded
with the real model and written to a real store, and each user's memories are clustered by the
code consolidation runs (`plan_user`). The embedder is the one the settings name (the
environment's `AGENT_MEMORY_*`: `AGENT_MEMORY_EMBEDDING_GLOSS_CHINESE` says how Chinese is embedded).

A merged pair inside a duplicate group is right; any other merged pair is wrong (a look-alike
pair, or two items of different facts). Precision is over every merged pair; recall is per
class, and over word order, function words and qualifiers together (the synonym class is
reported on its own). `--show` prints each wrong merge and each missed pair with the signals of
the decision.

`--judge oracle` puts the near misses to an LLM judge through the real client, served on
loopback by an OpenAI-compatible server that answers from the labels (two texts are the same
fact when they are in one duplicate group). It checks the judge's plumbing on these sets and
shows how far its near misses reach; it says nothing of a real model's judgement.

    PYTHONPATH=. .venv/bin/python benchmarks/consolidation_quality.py --split dev [--show]
    PYTHONPATH=. .venv/bin/python benchmarks/consolidation_quality.py --split heldout --name consolidation_quality_heldout
    PYTHONPATH=. .venv/bin/python benchmarks/consolidation_quality.py --split heldout --judge oracle \
        --name consolidation_quality_heldout_oracle_judge
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory.consolidation import plan_user  # noqa: E402
from agent_memory.embedding import build_embedder  # noqa: E402
from agent_memory.judges import build_judge  # noqa: E402
from agent_memory.link_signals import pair_signals  # noqa: E402
from agent_memory.models import Scope  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import oracle_judge, write_result  # noqa: E402
from loopback.llm_server import scripted_llm  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import maintenance_of  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "consolidation"
MAIN_CLASSES = ("word_order", "function_words", "qualifier")
ITEMS_PER_USER = 12


def _ratio(a: int, b: int) -> float:
    return round(a / b, 4) if b else 1.0


def _load(lang: str, split: str, data: Path = DATA) -> dict[str, Any]:
    return json.loads((data / f"{lang}_{split}.json").read_text())


def oracle(split: str, langs: list[str], data: Path = DATA) -> Any:
    """A judge's answers from the labels: two texts are one fact when one duplicate group holds both."""
    return oracle_judge({t: g["id"] for lang in langs for g in _load(lang, split, data)["groups"] for t in g["texts"]})


def score_language(service: MemoryService, lang: str, split: str, *, show: bool, data_dir: Path = DATA) -> dict[str, Any]:
    """Write one language's set (items dealt to users), cluster each user, score the merged pairs."""
    data = _load(lang, split, data_dir)
    items = [("group", g) for g in data["groups"]] + [("lookalike", p) for p in data["lookalikes"]]
    random.Random(7).shuffle(items)
    base = datetime(2025, 1, 1, tzinfo=timezone.utc)
    truth: dict[str, tuple[str, str, str]] = {}  # memory id -> (item id, kind, class)
    users: list[str] = []
    for start in range(0, len(items), ITEMS_PER_USER):
        user = f"{lang}-{split}-{start // ITEMS_PER_USER}"
        users.append(user)
        batch, meta = [], []
        for kind, item in items[start : start + ITEMS_PER_USER]:
            for k, text in enumerate(item["texts"]):
                batch.append({"user_id": user, "content": text, "importance": 0.5,
                              "created_at": (base + timedelta(minutes=len(batch) + k)).isoformat()})
                meta.append((item["id"], kind, item["class"]))
        ids = service.add_many("eval", batch).ids
        truth.update(zip(ids, meta, strict=True))
    merged_pairs: set[frozenset[str]] = set()
    texts: dict[str, str] = {}
    signals: dict[frozenset[str], dict[str, Any]] = {}
    for user in users:
        scope = Scope.user("eval", user)
        records, vectors = service.store.user_memories(scope)
        texts.update({r.id: r.content for r in records})
        plan = plan_user(scope, records, vectors, base + timedelta(days=1), service.settings, build_judge(service.settings))
        for cluster in plan.clusters:
            members = [cluster.canonical.id, *(o.id for o in cluster.others)]
            merged_pairs.update(frozenset(p) for p in combinations(members, 2))
        if show:
            for a, b in combinations(range(len(records)), 2):
                pair = frozenset((records[a].id, records[b].id))
                signals[pair] = pair_signals(records[a], records[b], vectors[a], vectors[b], service.settings)
    expected: dict[str, set[frozenset[str]]] = {}
    by_item: dict[str, list[str]] = {}
    for memory_id, (item_id, _, _) in truth.items():
        by_item.setdefault(item_id, []).append(memory_id)
    lookalike_pairs: dict[str, set[frozenset[str]]] = {}
    for members in by_item.values():
        _, kind, cls = truth[members[0]]
        into = expected if kind == "group" else lookalike_pairs
        into.setdefault(cls, set()).update(frozenset(p) for p in combinations(members, 2))
    true_pairs = set().union(*expected.values())
    right = merged_pairs & true_pairs
    wrong = merged_pairs - true_pairs
    report: dict[str, Any] = {
        "lang": lang, "split": split, "memories": len(truth), "users": len(users),
        "merged_pairs": len(merged_pairs), "precision": _ratio(len(right), len(merged_pairs)),
        # A set may hold none of these classes (set 5: restatements in other words only).
        "recall_main": _ratio(sum(len(expected.get(c, set()) & merged_pairs) for c in MAIN_CLASSES),
                              sum(len(expected.get(c, set())) for c in MAIN_CLASSES)),
        "recall_by_class": {c: _ratio(len(pairs & merged_pairs), len(pairs)) for c, pairs in sorted(expected.items())},
        "false_merges_by_class": {c: len(pairs & merged_pairs) for c, pairs in sorted(lookalike_pairs.items())},
        "false_merges_across_items": len(wrong - set().union(*lookalike_pairs.values())),
    }
    if show:
        def describe(pair: frozenset[str]) -> str:
            a, b = sorted(pair)
            return f"{truth[a][2]:<15} {texts[a]!r} ~ {texts[b]!r}  {json.dumps(signals.get(pair), ensure_ascii=False)}"
        for pair in sorted(wrong, key=lambda p: truth[sorted(p)[0]][2]):
            print("WRONG ", describe(pair))
        for pair in sorted(true_pairs - merged_pairs, key=lambda p: truth[sorted(p)[0]][2]):
            print("MISSED", describe(pair))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="dev", choices=["dev", "heldout"])
    parser.add_argument("--langs", default="en,zh")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="the set's directory (<lang>_<split>.json files; default: benchmarks/data/consolidation)")
    parser.add_argument("--show", action="store_true", help="print wrong merges and missed pairs with their signals")
    parser.add_argument("--judge", choices=["none", "oracle"], default="none",
                        help="oracle: an LLM judge on loopback that answers from the labels (see above)")
    parser.add_argument("--name", default=None, help="write benchmarks/results/<name>.json")
    args = parser.parse_args()
    if args.judge == "oracle":
        with scripted_llm() as llm:
            llm.respond = oracle(args.split, args.langs.split(","), args.data)
            run(args, {"llm_base_url": llm.base_url, "llm_model": "oracle", "llm_requests_per_minute": 0,
                       "llm_max_retries": 0})
            print(f"judge requests: {len(llm.requests)}")
        return
    run(args, {})


def run(args: argparse.Namespace, llm: dict[str, Any]) -> None:
    """Score every language of the split, with these LLM settings (none: the rules alone)."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(storage_uri=str(Path(tmp) / "store"), _env_file=None, **llm)  # type: ignore[call-arg]
        embedder = build_embedder(settings)
        store = LanceStore(settings.storage.uri, embedding_model=embedder.name, embedding_dim=embedder.dim)
        with MemoryService(store, embedder, settings, defer_access=False, maintenance=maintenance_of(store)) as service:
            reports = [score_language(service, lang, args.split, show=args.show, data_dir=args.data) for lang in args.langs.split(",")]
    for r in reports:
        print(f"{r['lang']} {r['split']}: precision {r['precision']:.3f}  recall (order, function words, qualifiers) "
              f"{r['recall_main']:.3f}  by class {r['recall_by_class']}  false merges {r['false_merges_by_class']} "
              f"across items {r['false_merges_across_items']}")
    if args.name:
        write_result(args.name, {"data": args.data.name, "split": args.split, "judge": args.judge,
                                 "embedding_gloss_chinese": settings.embedding.gloss_chinese, "languages": reports})


if __name__ == "__main__":
    main()
