"""Import and search throughput with the model on a GPU against the CPU, in one short run.

Self-contained: it builds its own small store (synthetic unit vectors, real texts) and its own
histories (short chat turns, and long messages of about 1,000 characters), so one run on a machine
with a GPU records every figure. For each way the model can run here:

- `cpu`: ONNX Runtime on CPU (the default off a GPU);
- `cuda-torch`: torch in half precision on CUDA (`embedding_device` auto or cuda, the default on a GPU);
- `cuda-onnx`: ONNX Runtime's CUDA provider (`embedding_backend=onnx`; its GPU build, the `gpu` extra),
  where this ONNX Runtime has it;

it measures: the model's ceiling on queries (`serve_latency.ceiling`: batches of 8, warmed up,
median of three); import in
this process (`import_into`, raw mode: validation, the model, the commits) of the short and the
long history, against bare encoding of the same index texts at the same batch size and threads;
and search in this process, one client and 8 clients (threads sharing forward passes through the
query batcher, as the ingress does), on the small store.

    .venv/bin/python benchmarks/gpu_throughput.py                  # about 3-6 minutes on a GPU machine
    .venv/bin/python benchmarks/gpu_throughput.py --memories 20000 --messages 1000 --long-messages 200 --name gpu_smoke

Writes <name>.json to $OUT where that is set (a device machine's output folder), else
benchmarks/results/.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from agent_memory.embedding import BatchingEmbedder, SentenceTransformerEmbedder  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import RESULTS, summarize, write_result  # noqa: E402
from benchmarks.import_throughput import TOPICS, generate, index_texts  # noqa: E402
from benchmarks.recall_latency import QUERIES  # noqa: E402
from benchmarks.serve_latency import ceiling, populate  # noqa: E402
from jobs.importer import import_into  # noqa: E402
from storage import LanceStore  # noqa: E402
from storage.connect import open_service  # noqa: E402

SENTENCES = ["Here is a detailed answer about {t}, with the steps laid out one after another.",
             "First, check what {t} needs before anything else is changed.",
             "Many people find that {t} works best when it is tried for a few weeks.",
             "I have been thinking about {t} and how it fits into my week.",
             "The documentation for {t} suggests a different approach for larger teams.",
             "In short, {t} is worth the effort if you keep the routine simple."]


def long_history(path: Path, messages: int, seed: int = 5) -> None:
    """`messages` turns of about 1,000 characters each (assistant-length answers), 20 to a session."""
    import json

    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(messages):
            session = i // 20
            text = " ".join(rng.choice(SENTENCES).format(t=rng.choice(TOPICS)) for _ in range(14))
            row = {"user_id": f"u{session // 10:05d}", "session_id": f"s{session:06d}", "role": "user",
                   "content": text, "created_at": f"2025-03-{1 + session % 28:02d}T10:{i % 60:02d}:00+00:00",
                   "message_id": f"l{i:07d}", "org_id": "bench"}
            handle.write(json.dumps(row) + "\n")


def import_rate(model: SentenceTransformerEmbedder, history: Path, tmp: Path, label: str) -> dict:
    """Messages/s of `import_into` (raw) and of bare encoding of the same index texts."""
    texts = index_texts(history)
    model.embed_batch(texts[:64])
    started = time.perf_counter()
    model.embed_batch(texts)
    bare = len(texts) / (time.perf_counter() - started)
    settings = Settings(storage_uri=str(tmp / f"import-{label}"), _env_file=None)  # type: ignore[call-arg]
    with open_service(settings, embedder=model) as service:
        started = time.perf_counter()
        result = import_into(service, history, mode="raw", org_id="bench")
        seconds = time.perf_counter() - started
    rate = result.memories_written / seconds
    return {"messages": result.memories_written, "import_messages_per_s": round(rate, 1),
            "bare_encode_messages_per_s": round(bare, 1), "import_vs_bare_encode": round(rate / bare, 3),
            "batch_size": model.batch_size}


def search_rate(model: SentenceTransformerEmbedder, store: LanceStore, settings: Settings, users: int, queries: int,
                clients: int) -> dict:
    """In-process search: one client's latency, then `clients` threads' searches/s and latency."""
    batcher = BatchingEmbedder(model)
    service = MemoryService(store, batcher, settings, defer_access=True)

    def ask(rng: random.Random, tag: str) -> float:
        started = time.perf_counter()
        service.recall("default", {"user_id": f"user-{rng.randrange(users):05d}", "query": f"{rng.choice(QUERIES)} {tag}"})
        return time.perf_counter() - started

    warm = random.Random(1)
    for i in range(30):
        ask(warm, f"warm {i}")
    one = random.Random(2)
    single = [ask(one, f"one {i}") for i in range(queries // 4)]
    latencies: list[float] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        rng = random.Random(100 + k)
        mine = [ask(rng, f"{k}-{i}") for i in range(queries // clients)]
        with lock:
            latencies.extend(mine)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    service.close()
    batcher.close()
    return {"one_client": summarize(single), f"clients_{clients}": {**summarize(latencies),
                                                                    "searches_per_s": round(len(latencies) / wall, 1)}}


def ways() -> list[tuple[str, str, str]]:
    """(label, device, backend) of each way the model runs on this machine."""
    import onnxruntime
    import torch

    found = [("cpu", "cpu", "auto")]
    if torch.cuda.is_available():
        found.append(("cuda-torch", "cuda", "torch"))
        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            found.append(("cuda-onnx", "cuda", "onnx"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--messages", type=int, default=4_000, help="short chat turns imported")
    parser.add_argument("--long-messages", type=int, default=1_000, help="messages of about 1,000 characters imported")
    parser.add_argument("--queries", type=int, default=400, help="searches at 8 clients per way")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64, help="texts per model call on import (embedding_batch_size)")
    parser.add_argument("--name", default="gpu_throughput")
    args = parser.parse_args()
    import torch

    started = time.perf_counter()
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else RESULTS
    results: dict = {"cuda_available": torch.cuda.is_available(), "torch": torch.__version__,
                     "torch_cuda": torch.version.cuda, "ways": {}}
    if torch.cuda.is_available():
        results["gpu"] = torch.cuda.get_device_name(0)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp_name:
        tmp = Path(tmp_name)
        short, long = tmp / "short.jsonl", tmp / "long.jsonl"
        generate(short, args.messages)
        long_history(long, args.long_messages)
        probe = SentenceTransformerEmbedder(device="cpu")
        searched = Settings(storage_uri=str(tmp / "search-lancedb"), _env_file=None)  # type: ignore[call-arg]
        store = LanceStore(searched.storage.uri, embedding_model=probe.name, embedding_dim=probe.dim)
        print(f"populating {args.memories:,} memories ...", flush=True)
        results["setup_s"] = round(populate(store, args.memories, args.users, probe.dim, seed=11), 1)
        del probe
        for label, device, backend in ways():
            model = SentenceTransformerEmbedder(device=device, backend=backend, batch_size=args.batch_size)
            way: dict = {"device": model.device, "backend": model.backend, "ceiling_queries_per_s": ceiling(model)}
            way["import_short"] = import_rate(model, short, tmp, f"{label}-short")
            way["import_long"] = import_rate(model, long, tmp, f"{label}-long")
            way["search"] = search_rate(model, store, searched, args.users, args.queries, args.clients)
            way["search"]["ratio_to_ceiling"] = round(
                way["search"][f"clients_{args.clients}"]["searches_per_s"] / way["ceiling_queries_per_s"], 3)
            results["ways"][label] = way
            print(f"{label}: {way}", flush=True)
            del model
    cpu = results["ways"]["cpu"]
    for way in results["ways"].values():
        way["vs_cpu"] = {
            "ceiling": round(way["ceiling_queries_per_s"] / cpu["ceiling_queries_per_s"], 2),
            "import_short": round(way["import_short"]["import_messages_per_s"] / cpu["import_short"]["import_messages_per_s"], 2),
            "import_long": round(way["import_long"]["import_messages_per_s"] / cpu["import_long"]["import_messages_per_s"], 2),
            "search_8": round(way["search"][f"clients_{args.clients}"]["searches_per_s"]
                              / cpu["search"][f"clients_{args.clients}"]["searches_per_s"], 2)}
    results["wall_s"] = round(time.perf_counter() - started, 1)
    print(f"\n{'way':<12} {'ceiling q/s':>12} {'import short/s':>15} {'import long/s':>14} {'search x8/s':>12} {'1-client p50':>13}")
    for label, way in results["ways"].items():
        print(f"{label:<12} {way['ceiling_queries_per_s']:>12} {way['import_short']['import_messages_per_s']:>15} "
              f"{way['import_long']['import_messages_per_s']:>14} "
              f"{way['search'][f'clients_{args.clients}']['searches_per_s']:>12} {way['search']['one_client']['p50_ms']:>13}")
    print(f"wrote {write_result(args.name, {'params': vars(args), 'results': results}, directory=out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
