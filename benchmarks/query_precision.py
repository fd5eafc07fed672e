"""The int8 query model against the exact one: the model's CPU per query, closeness of the vectors,
and recall quality on the shipped sample set (memories stored exactly, questions asked both ways).

    .venv/bin/python benchmarks/query_precision.py [--queries 200 --name query_precision]

Writes benchmarks/results/<name>.json; docs/performance.md, "Query precision", cites it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agent_memory.embedding import SentenceTransformerEmbedder  # noqa: E402
from agent_memory.evaluation import evaluate_recall, load_questions  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from benchmarks.recall_latency import QUERIES, SUBJECTS, query_batches  # noqa: E402
from jobs.importer import import_into  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import maintenance_of, open_service  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def cpu_per_query(model: SentenceTransformerEmbedder, batch: int, rounds: int) -> float:
    """CPU milliseconds per query, in batches of `batch` distinct queries (one warm-up batch)."""
    batches = query_batches(batch, rounds + 1)
    model.embed_batch(batches[0])
    started = time.process_time()
    for texts in batches[1:]:
        model.embed_batch(texts)
    return round((time.process_time() - started) / (rounds * batch) * 1000, 3)


def recall_quality(exact: SentenceTransformerEmbedder, quick: SentenceTransformerEmbedder) -> dict:
    """recall@k and MRR on the sample set: stored with the exact model, asked with each."""
    questions = load_questions(EXAMPLES / "sample_questions.jsonl")
    with tempfile.TemporaryDirectory(prefix="bench-precision-") as tmp:
        settings = Settings(storage_uri=f"{tmp}/lancedb", _env_file=None, embedding_cache_size=0)  # type: ignore[call-arg]
        store = LanceStore(settings.storage.uri, embedding_model=exact.name, embedding_dim=exact.dim)
        with open_service(settings, embedder=exact, store=store, defer_access=False) as writer:
            import_into(writer, EXAMPLES / "sample_history.jsonl", mode="raw", org_id="default")
            maintenance_of(store).optimize()
        quality = {}
        for name, model in (("fp32", exact), ("int8", quick)):
            with open_service(settings, embedder=model, store=store, defer_access=False) as asking:
                report = evaluate_recall(asking, questions, top_k=10)
            quality[name] = {category: {mode: report["by_category"][category][mode] for mode in ("hybrid", "dense")}
                             for category in report["by_category"]}
        return quality


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200, help="queries whose vectors are compared")
    parser.add_argument("--rounds", type=int, default=40, help="batches timed per batch size")
    parser.add_argument("--name", default="query_precision")
    args = parser.parse_args()

    # One thread each: the model's own cost, as an ingress under load runs it.
    exact = SentenceTransformerEmbedder(cache_size=0, threads=1)
    quick = SentenceTransformerEmbedder(cache_size=0, threads=1, precision="int8")
    assert quick.precision == "int8", "no int8 graph for the model"
    results: dict = {"cpu_ms_per_query": {}}
    for batch in (1, 8):
        results["cpu_ms_per_query"][f"batch_{batch}"] = {
            "fp32": cpu_per_query(exact, batch, args.rounds), "int8": cpu_per_query(quick, batch, args.rounds)}
        print(f"batch {batch}: {results['cpu_ms_per_query'][f'batch_{batch}']}", flush=True)

    rng = random.Random(7)
    texts = [f"{rng.choice(QUERIES)} {rng.choice(SUBJECTS)}" for _ in range(args.queries)]
    cosines = (exact.embed_batch(texts) * quick.embed_batch(texts)).sum(axis=1)
    results["cosine_to_exact"] = {"mean": round(float(cosines.mean()), 4), "min": round(float(cosines.min()), 4),
                                  "p05": round(float(np.percentile(cosines, 5)), 4), "queries": len(texts)}
    print(f"cosine to the exact vectors: {results['cosine_to_exact']}", flush=True)

    results["sample_set"] = recall_quality(exact, quick)
    for name, by_category in results["sample_set"].items():
        for category, modes in by_category.items():
            print(f"{name} {category}: " + ", ".join(
                f"{mode} recall@10 {m['recall@10']:.3f} mrr {m['mrr']:.3f}" for mode, m in modes.items()))
    print(f"wrote {write_result(args.name, {'params': vars(args), 'results': results})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
