#!/usr/bin/env bash
# A Ray head plus N workers as separate nodes on this machine (cli/local_cluster.py), each with its
# own CPUs, label, temp dir and ports, sharing a token of the cluster's own:
#   cluster/start_local_cluster.sh start [--workers 2] [--gpu-workers 1] [--cpus-per-node 2]
#   cluster/start_local_cluster.sh status
#   cluster/start_local_cluster.sh stop      # this cluster only; other Ray instances are left be
# `start` prints the client env (RAY_ADDRESS, RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH) to export before
# `agent-memory serve|import|consolidate --address "$RAY_ADDRESS"`. Set AGENT_MEMORY_STORAGE_URI
# (and _OPTIONS) before `start`: the nodes inherit it.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-$(command -v python3)}"
[ -x .venv/bin/python ] && python=.venv/bin/python
command="${1:-start}"
shift || true
exec "$python" -m cli.local_cluster "$command" "$@"
