"""Start-up of the `agent-memory` command, beside a reference checkout in the same run.

What a user waits for before any command does its work: a fresh interpreter importing the CLI
module (`python -c "import cli.main"`), printing its help (`python -m cli.main --help`) and a
command's (`python -m cli.main add --help`), and a first query vector of the bundled model (what
every command on the store in this process, a Serve replica and an import actor load first:
`build_embedder(settings).embed_query(...)`, the ONNX graph already in the cache). The reference is another checkout of the project (for
example an earlier commit in a git worktree) run with the same interpreter and packages, its own
tree and its own HTTP client (`clients/python`) first on `PYTHONPATH`.
Rounds alternate (reference, current, reference, ...) so drift on the machine hits both sides;
the result holds every round, the medians and the median of the paired ratios.

    git worktree add /tmp/reference <commit>
    python benchmarks/cli_startup.py --reference /tmp/reference --reference-module agent_memory.cli
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_once(tree: Path, argv: list[str]) -> float:
    """Wall seconds of `python ARGV` in `tree`, that tree and its client first on the import path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "clients" / "python")]),
           "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"`python {' '.join(argv)}` failed in {tree}:\n{done.stderr[-2000:]}")
    return elapsed


FIRST_VECTOR = ("from agent_memory.embedding import build_embedder; from agent_memory.settings import Settings; "
                "build_embedder(Settings(_env_file=None)).embed_query('which editor do I use')")


def probes(module: str) -> dict[str, list[str]]:
    return {"import": ["-c", f"import {module}"], "help": ["-m", module, "--help"],
            "command_help": ["-m", module, "add", "--help"], "first_vector": ["-c", FIRST_VECTOR]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="cli.main", help="the CLI module of this checkout")
    parser.add_argument("--reference", type=Path, required=True, help="root of the reference checkout")
    parser.add_argument("--reference-module", default="cli.main", help="the CLI module of the reference")
    parser.add_argument("--reference-label", default="", help="what the reference is (a commit), for the result")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--name", default="cli_startup")
    args = parser.parse_args()
    sides = {"reference": (args.reference.resolve(), args.reference_module), "current": (ROOT, args.module)}
    for tree, module in sides.values():  # one untimed run each: bytecode compiled, files cached
        for argv in probes(module).values():
            run_once(tree, argv)
    samples: dict[str, dict[str, list[float]]] = {side: {probe: [] for probe in probes("")} for side in sides}
    for _ in range(args.rounds):
        for side, (tree, module) in sides.items():
            for probe, argv in probes(module).items():
                samples[side][probe].append(round(run_once(tree, argv), 3))
    figures = {}
    for probe in probes(""):
        ref, cur = samples["reference"][probe], samples["current"][probe]
        ratios = [round(c / r, 3) for r, c in zip(ref, cur, strict=True)]
        figures[probe] = {
            "reference_s": ref, "current_s": cur,
            "reference_median_s": round(statistics.median(ref), 3), "current_median_s": round(statistics.median(cur), 3),
            "ratios_current_over_reference": ratios, "median_ratio": round(statistics.median(ratios), 3),
        }
        print(f"{probe:>12}: reference {figures[probe]['reference_median_s']:.2f} s, "
              f"current {figures[probe]['current_median_s']:.2f} s, median ratio {figures[probe]['median_ratio']:.2f}")
    path = write_result(args.name, {
        "sides": {
            "reference": {"tree": str(args.reference), "module": args.reference_module, "label": args.reference_label},
            "current": {"tree": str(ROOT), "module": args.module},
        },
        "probes": {name: " ".join(["python", *argv]) for name, argv in probes("<module>").items()},
        "rounds": args.rounds, "order": "alternating: reference then current, each round",
        "figures": figures,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
