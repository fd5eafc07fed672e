"""Bulk import throughput: the whole `agent-memory import` command against bare encoding.

One stated reference: bare encoding of the same texts (the index texts the import embeds) by the
same model the import loads (`build_embedder`: ONNX Runtime on CPU), at the import's own batch
size (`embedding_batch_size`, in blocks of `import_embed_batch_rows`, as the import calls it) and
threads (the process's), in this process. Against it:

1. import: `python -m cli.main import FILE --mode raw|rules --engine local` as a subprocess, timed
   as a user waits for it (interpreter start-up, imports, the model's load, the pipeline, the
   commits and the index refresh), with the peak resident memory of its process tree; and its
   pipeline alone (the report's `duration_s`).
2. row by row (optional, `--loop-sample`): embed-then-add one message at a time (`service.add`).

Two histories: short chat turns (deterministic, English and Chinese, 20-turn sessions) and long
messages (`--long`: the first `--long-messages` turns of a history file, such as the LongMemEval
dev history, about 1,000 characters a message). Each (history, mode) is measured `--rounds` times,
import and reference alternated, and the median of the rounds' ratios reported.
Target: import >= 0.8 x the reference for short messages.

    .venv/bin/python benchmarks/import_throughput.py --long ../shared/data/longmemeval-dev/history.jsonl
    .venv/bin/python benchmarks/import_throughput.py --messages 2000 --long-messages 300 --rounds 1   # a quick check
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


def run_import(path: Path, workdir: Path, engine: str, mode: str = "raw") -> dict[str, float]:
    """The whole CLI import as a subprocess: wall time, peak tree RSS, and its JSON report."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")]),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               AGENT_MEMORY_STORAGE_URI=str(workdir / "lancedb"))
    command = [sys.executable, "-m", "cli.main", "import", str(path), "--mode", mode, "--engine", engine,
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


def reference(model: object, texts: list[str], block: int) -> float:
    """Messages/s of bare encoding: `texts` in blocks of `block`, as the import calls the model."""
    model.embed_batch(texts[:64])  # type: ignore[attr-defined]  # warm-up
    started = time.perf_counter()
    for start in range(0, len(texts), block):
        model.embed_batch(texts[start : start + block])  # type: ignore[attr-defined]
    return len(texts) / (time.perf_counter() - started)


def long_history(source: Path, path: Path, messages: int) -> None:
    """The first `messages` turns of `source` (its own ids and users), in the bench org."""
    with open(source, encoding="utf-8") as lines, open(path, "w", encoding="utf-8") as out:
        for i, line in enumerate(lines):
            if i >= messages:
                break
            out.write(json.dumps({**json.loads(line), "org_id": "bench"}, ensure_ascii=False) + "\n")


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
    parser.add_argument("--messages", type=int, default=4_000, help="short chat turns")
    parser.add_argument("--long", type=Path, default=None, help="a history of long messages (the LongMemEval dev one)")
    parser.add_argument("--long-messages", type=int, default=600)
    parser.add_argument("--modes", default="raw,rules")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop-sample", type=int, default=0, help="messages added row by row (0: not measured)")
    parser.add_argument("--engine", default="local", choices=["auto", "ray", "local"])
    parser.add_argument("--name", default="import_throughput", help="results file name under benchmarks/results")
    args = parser.parse_args()
    import statistics

    from agent_memory.embedding import build_embedder

    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    model = build_embedder(settings)  # as the local engine loads it: its batch size, the process's threads
    block = settings.imports.embed_batch_rows
    cases: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="import-bench-") as tmp:
        workdir = Path(tmp)
        histories = {"short": workdir / "short.jsonl"}
        generate(histories["short"], args.messages)
        if args.long:
            histories["long"] = workdir / "long.jsonl"
            long_history(args.long, histories["long"], args.long_messages)
        texts = {label: index_texts(path) for label, path in histories.items()}
        for round_ in range(args.rounds):
            for label, path in histories.items():
                for mode in args.modes.split(","):
                    case = cases.setdefault(f"{label}_{mode}", {"rounds": []})
                    run_dir = workdir / f"{label}-{mode}-{round_}"
                    run_dir.mkdir()
                    # Alternated: the reference first in even rounds, the import first in odd ones.
                    order = ("reference", "import") if round_ % 2 == 0 else ("import", "reference")
                    measured: dict = {}
                    for what in order:
                        if what == "reference":
                            measured["reference_per_s"] = reference(model, texts[label], block)
                        else:
                            imported = run_import(path, run_dir, args.engine, mode)
                            measured.update({
                                "messages": imported["report"]["messages_logged"],
                                "memories": imported["report"]["memories_written"],
                                "command_s": round(imported["wall_s"], 2),
                                "pipeline_s": round(imported["report"]["duration_s"], 2),
                                "peak_rss_mb": round(imported["peak_rss_mb"])})
                    n = len(texts[label])
                    measured["import_per_s"] = round(n / measured["command_s"], 1)
                    measured["pipeline_per_s"] = round(n / measured["pipeline_s"], 1)
                    measured["reference_per_s"] = round(measured["reference_per_s"], 1)
                    measured["ratio"] = round(measured["import_per_s"] / measured["reference_per_s"], 3)
                    measured["pipeline_ratio"] = round(measured["pipeline_per_s"] / measured["reference_per_s"], 3)
                    case["rounds"].append(measured)
                    print(f"round {round_ + 1} {label} {mode}: {measured}", file=sys.stderr, flush=True)
        if args.loop_sample:
            cases["row_by_row"] = row_by_row(histories["short"], workdir, args.loop_sample)
    for case in cases.values():
        if "rounds" in case:
            case["median"] = {k: statistics.median(r[k] for r in case["rounds"])
                              for k in ("import_per_s", "pipeline_per_s", "reference_per_s", "ratio", "pipeline_ratio")}
    result = {"reference": f"bare encoding of the index texts by build_embedder (backend {getattr(model, 'backend', '?')}, "
                           f"batch {settings.embedding.batch_size}, blocks of {block}, the process's threads)",
              "engine": args.engine, "cases": cases, "targets": {"short ratio": ">= 0.8"}}
    path = write_result(args.name, {"params": {k: str(v) for k, v in vars(args).items()}, **result})
    print("| history | mode | import, whole command /s | pipeline /s | reference /s | ratio | pipeline ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, case in cases.items():
        if "median" in case:
            m = case["median"]
            label, mode = name.split("_", 1)
            print(f"| {label} | {mode} | {m['import_per_s']} | {m['pipeline_per_s']} | {m['reference_per_s']} | "
                  f"**{m['ratio']}x** | {m['pipeline_ratio']}x |")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
