#!/usr/bin/env bash
# The benchmark with budgets (docs/benchmarks.md): starts the project's containerd (scripts/node-setup.sh), builds
# rkubelet and rkubelet-bench in release mode and runs every scenario. Writes docs/benchmarks.json and
# docs/benchmarks.md and exits non-zero, naming the figure, when a budget is missed. Extra arguments go to
# rkubelet-bench (e.g. `--scenarios core,fake` or `--pods 110,1000`; `--help` lists them). Takes about 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

SOCK="$(bash scripts/node-setup.sh)"
cargo build --release -q -p rkubelet -p rkubelet-bench
exec "${CARGO_TARGET_DIR:-target}/release/rkubelet-bench" --check --containerd-endpoint "unix://$SOCK" \
    --json docs/benchmarks.json --markdown docs/benchmarks.md "$@"
