"""Bulk import throughput: the whole `agent-memory import` command against bare model encoding.

On the same deterministic history (English and Chinese chat turns, 20-turn sessions), measures:

1. import: `python -m cli.main import FILE --mode raw` as a subprocess, timed as a user
   waits for it (interpreter and Ray start-up, the pipeline, the commits and the index refresh),
   with the peak resident memory of its whole process tree (Ray's workers included), sampled.
2. bare encode: `SentenceTransformer.encode` with the bundled model, at the best of several batch
   sizes (chosen on a sample, then timed on every text), of the same texts the import embeds (each
   memory's index text: short turns carry their preceding turns) and of the bare message texts.
3. row by row: embed-then-add one message at a time through the Python API (`service.add`),
   timed on a sample (2,000 messages by default).

Targets: import messages/s >= 0.8 x bare encoding (of the index texts), and >= 10 x row by row.

    .venv/bin/python benchmarks/import_throughput.py                      # the full run: 50,000 messages
    .venv/bin/python benchmarks/import_throughput.py --messages 5000 --loop-sample 300   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_memory.embedding import bundled_model_path  # noqa: E402
from agent_memory.service import MemoryService  # noqa: E402
from agent_memory.settings import Settings  # noqa: E402
from benchmarks.common import write_result  # noqa: E402
from jobs.import_rows import numbered_rows, raw_memory_rows, split_validated, validate_rows  # noqa: E402
from jobs.importer import ImportResult  # noqa: E402
from storage.connect import open_service  # noqa: E402

TOPICS = ["Python", "Rust", "the billing service", "Kubernetes", "green tea", "a trip to Kyoto", "the login outage",
          "dark mode", "PostgreSQL", "the Q3 roadmap", "hiking", "a golden retriever", "Friday deploys", "jazz"]
USER_TURNS = ["I really like {t}, it has been great lately", "Can you remind me about {t} next week?",
              "We had a long discussion about {t} with my manager yesterday", "Yes, last Tuesday!",
              "I switched to {t} last month and I am not going back", "Not really, {t} is not my thing",
              "请记住我更喜欢{t}", "上周我们讨论了{t}，结果还不错", "Ok thanks", "My email is user{u}@example.com, use it for {t}"]
BOT_TURNS = ["Noted, I will remember that you like {t}.", "Sure, I will remind you about {t}.",
             "How did the discussion about {t} go?", "Got it.", "Thanks for letting me know about {t}.",
             "好的，我记住了。"]


def generate(path: Path, messages: int, seed: int = 7) -> list[str]:
    """Write `messages` turns (20-turn sessions, 10 sessions a user) to JSONL; return their texts."""
    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    texts = []
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(messages):
            session, turn = divmod(i, 20)
            user = session // 10
            role = "user" if turn % 2 == 0 else "assistant"
            pool = USER_TURNS if role == "user" else BOT_TURNS
            content = rng.choice(pool).format(t=rng.choice(TOPICS), u=user)
            created = start + timedelta(days=session % 300, minutes=turn * 3 + session)
            row = {"user_id": f"u{user:05d}", "session_id": f"s{session:06d}", "role": role, "content": content,
                   "created_at": created.isoformat(), "message_id": f"m{i:07d}", "org_id": "bench"}
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            texts.append(content)
    return texts


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, []))
    return total


def run_import(path: Path, workdir: Path, engine: str) -> dict[str, float]:
    """The whole CLI import as a subprocess: wall time, peak tree RSS, and its JSON report."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               AGENT_MEMORY_STORAGE_URI=str(workdir / "lancedb"))
    command = [sys.executable, "-m", "cli.main", "import", str(path), "--mode", "raw", "--engine", engine,
               "--report", str(workdir / "import.report.json")]
    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid))
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"import failed with exit code {proc.returncode}")
    report = json.loads(out)
    return {"wall_s": wall, "peak_rss_mb": peak / 2**20, "report": report}


def index_texts(path: Path) -> list[str]:
    """What the import embeds: each turn with its speaker (`MemoryRecord.vector_text`)."""

    builder = MemoryService.row_builder(Settings(_env_file=None))  # type: ignore[call-arg]
    validated = validate_rows(numbered_rows(path.read_bytes(), "jsonl"), builder, "default")
    messages, _ = split_validated(validated, ImportResult(path=str(path), mode="raw"))
    return [row["vector_text"] for row in raw_memory_rows(messages, builder)]


def bare_encode(model: object, texts: list[str], batch_sizes: list[int], sample: int) -> dict[str, object]:
    """Best batch size on a sample, then every text encoded at that size."""
    probe = texts[:sample]
    model.encode(probe[:64], batch_size=32)  # type: ignore[attr-defined]  # warm-up
    rates = {}
    for size in batch_sizes:
        started = time.perf_counter()
        model.encode(probe, batch_size=size, normalize_embeddings=True)  # type: ignore[attr-defined]
        rates[size] = len(probe) / (time.perf_counter() - started)
    best = max(rates, key=lambda s: rates[s])
    started = time.perf_counter()
    model.encode(texts, batch_size=best, normalize_embeddings=True)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - started
    return {"best_batch_size": best, "probe_rates": {str(k): round(v, 1) for k, v in rates.items()},
            "seconds": seconds, "messages_per_s": len(texts) / seconds}


def row_by_row(path: Path, workdir: Path, sample: int) -> dict[str, float]:
    """Embed-then-add, one message per call, through the Python API."""

    rows = [json.loads(line) for line in path.read_text().splitlines()[:sample]]
    settings = Settings(storage_uri=str(workdir / "loop-lancedb"), _env_file=None)  # type: ignore[call-arg]
    with open_service(settings) as service:
        service.add("bench", {"user_id": "warm", "content": "warm-up"})
        started = time.perf_counter()
        for row in rows:
            service.add(row["org_id"], {"user_id": row["user_id"], "content": row["content"],
                                        "memory_type": "episodic", "session_id": row["session_id"],
                                        "created_at": row["created_at"], "source_ids": [row["message_id"]]})
        seconds = time.perf_counter() - started
    return {"messages": len(rows), "seconds": seconds, "messages_per_s": len(rows) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--loop-sample", type=int, default=2_000)
    parser.add_argument("--engine", default="auto", choices=["auto", "ray", "local"])
    parser.add_argument("--batch-sizes", default="16,32,64,128")
    parser.add_argument("--probe", type=int, default=2_000, help="texts used to choose the batch size")
    parser.add_argument("--name", default="import_throughput", help="results file name under benchmarks/results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp:
        workdir = Path(tmp)
        history = workdir / "history.jsonl"
        texts = generate(history, args.messages)
        print(f"{args.messages} messages, {history.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
        imported = run_import(history, workdir, args.engine)
        report = imported["report"]
        assert report["memories_written"] == args.messages, report
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(bundled_model_path(), device="cpu")
        sizes = [int(s) for s in args.batch_sizes.split(",")]
        # The target compares with encoding what the import embeds (index texts); the messages'
        # own texts are timed too, to show what the recall design's context costs.
        encode = bare_encode(model, index_texts(history), sizes, args.probe)
        encode_messages = bare_encode(model, texts, sizes, args.probe)
        loop = row_by_row(history, workdir, args.loop_sample)
    import_rate = args.messages / imported["wall_s"]
    result = {
        "messages": args.messages, "engine": report["engine"],
        "import": {"wall_s": round(imported["wall_s"], 2), "messages_per_s": round(import_rate, 1),
                   "peak_rss_mb": round(imported["peak_rss_mb"]), "pipeline_s": report["duration_s"]},
        "bare_encode": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in encode.items()},
        "bare_encode_message_texts": {k: (round(v, 2) if isinstance(v, float) else v)
                                      for k, v in encode_messages.items()},
        "row_by_row": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in loop.items()},
        "import_vs_encode": round(import_rate / float(encode["messages_per_s"]), 3),  # type: ignore[arg-type]
        "import_vs_encode_message_texts": round(import_rate / float(encode_messages["messages_per_s"]), 3),  # type: ignore[arg-type]
        "import_vs_row_by_row": round(import_rate / loop["messages_per_s"], 1),
        "targets": {"import_vs_encode": ">= 0.8", "import_vs_row_by_row": ">= 10"},
    }
    path = write_result(args.name, result)
    print(f"| path | messages | seconds | messages/s |\n| --- | --- | --- | --- |\n"
          f"| `agent-memory import` ({report['engine']}, whole command) | {args.messages} | "
          f"{imported['wall_s']:.1f} | {import_rate:.0f} |\n"
          f"| bare `encode` of the index texts (batch {encode['best_batch_size']}) | {args.messages} | "
          f"{encode['seconds']:.1f} | {encode['messages_per_s']:.0f} |\n"
          f"| bare `encode` of the message texts (batch {encode_messages['best_batch_size']}) | {args.messages} | "
          f"{encode_messages['seconds']:.1f} | {encode_messages['messages_per_s']:.0f} |\n"
          f"| row by row `service.add` | {loop['messages']} | {loop['seconds']:.1f} | {loop['messages_per_s']:.0f} |\n"
          f"\nimport / encode = {result['import_vs_encode']} (target >= 0.8); import / row-by-row = "
          f"{result['import_vs_row_by_row']}x (target >= 10); peak RSS of the import's process tree "
          f"{imported['peak_rss_mb']:.0f} MiB\nwritten to {path}")


if __name__ == "__main__":
    main()
