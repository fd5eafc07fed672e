"""Helpers shared by the benchmarks: timing summaries and result files the README cites."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def summarize(samples_s: list[float]) -> dict[str, float]:
    """Median, p95, p99 and mean in milliseconds."""
    ms = sorted(s * 1000 for s in samples_s)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(round(p / 100 * (len(ms) - 1))))]

    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(pct(95), 2), "p99_ms": round(pct(99), 2),
            "mean_ms": round(statistics.fmean(ms), 2), "n": len(ms)}


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Call fn and return (result, seconds)."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


# The packages whose speed the figures depend on: a fresh install takes the newest each range allows.
VERSIONED = ("ray", "lancedb", "pylance", "pyarrow", "numpy", "onnxruntime", "onnxruntime-gpu", "onnx", "torch",
             "transformers", "tokenizers", "sentence-transformers", "fastapi", "starlette", "uvicorn", "pydantic")


def package_versions() -> dict[str, str]:
    """Installed versions of VERSIONED (absent ones left out)."""
    from importlib import metadata

    found = {}
    for package in VERSIONED:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def write_result(name: str, payload: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Write <directory>/<name>.json (benchmarks/results/ by default) with the machine, package
    versions and date stamped in."""
    directory.mkdir(parents=True, exist_ok=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "packages": package_versions()}
    payload = {"benchmark": name, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "machine": machine, **payload}
    path = directory / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return path


def cpu_by_process(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by a process and its descendants, by process role.

    Ray workers are named after their actor (`ray::ServeReplica:agent-memory:Ingress`), so Serve
    deployments, the proxy and the controller appear by name; the driver is `driver`.
    """
    import psutil

    root = psutil.Process(pid)
    seconds: dict[str, float] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            cmd = proc.cmdline()
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if proc.pid == pid:
            name = "driver"
        elif cmd and cmd[0].startswith("ray::"):
            name = cmd[0].removeprefix("ray::").split(" ")[0].split(".")[0]  # the actor, not its method
        else:
            name = proc.name()
        seconds[name] = seconds.get(name, 0.0) + times.user + times.system
    return seconds


def cpu_per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Milliseconds of CPU per request by process role between two `cpu_by_process` snapshots."""
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    per_request = {name: 1000 * s / requests for name, s in sorted(spent.items(), key=lambda kv: -kv[1])}
    shares = {name: round(ms, 2) for name, ms in per_request.items() if ms >= 0.1}
    shares["total"] = round(sum(per_request.values()), 2)
    return shares


def oracle_judge(fact_of: dict[str, Any]) -> Any:
    """An OpenAI-compatible responder (`loopback.llm_server`) for consolidation's LLM calls that
    knows the answers: two texts are the same fact when `fact_of` gives both the same fact; a
    summary keeps the first note."""
    from agent_memory.judges import JUDGE_PROMPT

    def respond(body: dict[str, Any]) -> str:
        system, user = (m["content"] for m in body["messages"])
        if system != JUDGE_PROMPT:
            return user.splitlines()[0].removeprefix("- ")
        pairs = json.loads(user)["pairs"]
        return json.dumps({"same": [p["pair"] for p in pairs if fact_of.get(p["a"]) and fact_of.get(p["a"]) == fact_of.get(p["b"])]})

    return respond
