#!/usr/bin/env bash
# A Ray head plus N local workers on this machine: `cluster/start_local_cluster.sh 2`, then
# `agent-memory serve --address auto`. Stop with `ray stop`.
set -euo pipefail
workers="${1:-1}"
cpus_per_node="${CPUS_PER_NODE:-1}"
ray start --head --num-cpus="$cpus_per_node" --port=6379 --include-dashboard=false
for _ in $(seq 1 "$workers"); do
  ray start --address=127.0.0.1:6379 --num-cpus="$cpus_per_node"
done
ray status
