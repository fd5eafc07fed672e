"""`agent-memory add` and `search` through a running server, timed as a user waits for them.

Each run is a whole command in a fresh process (the interpreter, the CLI, the HTTP client and the
request), named by AGENT_MEMORY_URL as the README says, its wall time measured from the start of
the process to its exit. The benchmark starts `agent-memory serve --load-sample` (what `make run`
runs) on a store of its own in a temporary directory and a free port, or uses the server `--url`
names; one untimed add and search first, then `--runs` of each, alternating; the result holds
every run, the median of each command, the CPU seconds each command's process used (what the
command costs whatever else runs on the machine) and the machine's load average before and after.

    .venv/bin/python benchmarks/cli_server.py                          # a server of its own
    .venv/bin/python benchmarks/cli_server.py --url http://127.0.0.1:8000 --command .venv/bin/agent-memory
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import write_result  # noqa: E402
from cli.net import free_port  # noqa: E402
from cli.processes import kill_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START_S = 900
USER = "alice"
# The README's examples, with the user the benchmark writes to.
ADD = ["add", "--user-id", USER, "I prefer answers in bullet points"]
SEARCH = ["search", "--user-id", USER, "how should I format answers?"]


def _env(**extra: str) -> dict[str, str]:
    """This environment with this checkout and its client first on the import path, no other server named."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("AGENT_MEMORY_URL", "AGENT_MEMORY_STORAGE_URI", "RAY_ADDRESS")}
    path = os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])
    return {**env, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", **extra}


def start_server(store: Path, port: int, logs: Path) -> subprocess.Popen[bytes]:
    """`agent-memory serve --load-sample` on `store`, once it says it serves."""
    out = logs / "serve.out"
    # HAProxy's stats page and exporter on any free ports: on a machine where other stacks start
    # too, 8404 and 9101 may be free when the server looks and taken when HAProxy binds.
    env = _env(AGENT_MEMORY_STORAGE_URI=str(store), AGENT_MEMORY_HAPROXY_STATS_PORT="0",
               AGENT_MEMORY_HAPROXY_METRICS_PORT="0")
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--load-sample", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=out.open("wb"),
                            stderr=(logs / "serve.err").open("wb"), start_new_session=True)
    deadline = time.monotonic() + START_S
    while "agent-memory is serving at" not in out.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise SystemExit("the server did not start:\n" + out.read_text()[-2000:]
                             + (logs / "serve.err").read_text()[-2000:])
        time.sleep(0.5)
    return proc


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as Ctrl-C stops it; whatever is left of its session after that, killed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            pass
    kill_session(proc.pid)


def run_once(command: list[str], argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of one command, from its start to its exit, and the CPU seconds (user and
    system) its process used; it must succeed and print nothing on standard error."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([*command, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"`agent-memory {shlex.join(argv)}` exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def measure(url: str, command: list[str], runs: int) -> dict[str, dict[str, list[float]]]:
    env = _env(AGENT_MEMORY_URL=url)
    if key := os.environ.get("AGENT_MEMORY_API_KEY"):
        env["AGENT_MEMORY_API_KEY"] = key
    samples: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in ("add", "search")}
    run_once(command, ADD, env)  # untimed: the replicas' first request, the files in the page cache
    run_once(command, SEARCH, env)
    for _ in range(runs):
        for name, argv in (("add", ADD), ("search", SEARCH)):
            wall, cpu = run_once(command, argv, env)
            samples[name]["wall"].append(round(wall, 3))
            samples[name]["cpu"].append(round(cpu, 3))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one on a store of its own)")
    parser.add_argument("--command", default=f"{sys.executable} -m cli.main",
                        help="how to call the CLI (default: this interpreter, -m cli.main); e.g. .venv/bin/agent-memory")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--name", default="cli_server")
    args = parser.parse_args()
    command = shlex.split(args.command)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cli-server-") as scratch:
        server = None
        url = args.url
        if url is None:
            port = free_port()
            server = start_server(Path(scratch) / "lancedb", port, Path(scratch))
            url = f"http://127.0.0.1:{port}"
        try:
            samples = measure(url, command, args.runs)
        finally:
            if server is not None:
                stop_server(server)
    load_after = os.getloadavg()
    figures = {name: {"runs_s": runs["wall"], "median_s": round(statistics.median(runs["wall"]), 3),
                      "min_s": min(runs["wall"]), "max_s": max(runs["wall"]),
                      "cpu_runs_s": runs["cpu"], "cpu_median_s": round(statistics.median(runs["cpu"]), 3)}
               for name, runs in samples.items()}
    for name, figure in figures.items():
        print(f"{name:>7}: median {figure['median_s']:.2f} s over {args.runs} runs "
              f"({figure['min_s']:.2f}-{figure['max_s']:.2f} s), the command's CPU {figure['cpu_median_s']:.2f} s")
    path = write_result(args.name, {
        "server": "its own: agent-memory serve --load-sample on a temporary store" if args.url is None else args.url,
        "command": args.command,
        "commands": {"add": shlex.join(["agent-memory", *ADD]), "search": shlex.join(["agent-memory", *SEARCH])},
        "runs": args.runs, "order": "one untimed add and search, then add and search alternating",
        "load_average_1m": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
        "figures": figures,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
