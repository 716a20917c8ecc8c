#!/usr/bin/env bash
# The benchmark with budgets (docs/benchmarks.md): starts the project's containerd (scripts/node-setup.sh), builds
# rkubelet and rkubelet-bench in release mode and runs every scenario. Writes docs/benchmarks.json and
# docs/benchmarks.md and exits non-zero, naming the figure, when a budget is missed. Extra arguments go to
# rkubelet-bench (e.g. `--scenarios core,fake` or `--pods 110,1000`; `--help` lists them). The whole-node scenario
# (`node`) needs the real control plane: it is started here (crates/test-cluster) and stopped at the end.
# Takes about 26 minutes (10 of them the fuzz targets).
set -euo pipefail
cd "$(dirname "$0")/.."

export RKUBELET_WORKDIR="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}"
export RKUBELET_E2E_CLUSTER="${RKUBELET_E2E_CLUSTER:-$RKUBELET_WORKDIR/cluster}"
TARGET="${CARGO_TARGET_DIR:-target}"
SOCK="$(bash scripts/node-setup.sh "$RKUBELET_WORKDIR")"
cargo build --release -q -p rkubelet -p rkubelet-bench -p test-cluster
"$TARGET/release/rkubelet-test-cluster" up --dir "$RKUBELET_E2E_CLUSTER" >/dev/null
trap '"$TARGET/release/rkubelet-test-cluster" down --dir "$RKUBELET_E2E_CLUSTER" || true' EXIT
"$TARGET/release/rkubelet-bench" --check --containerd-endpoint "unix://$SOCK" \
    --json docs/benchmarks.json --markdown docs/benchmarks.md "$@"
