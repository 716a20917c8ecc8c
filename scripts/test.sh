#!/usr/bin/env bash
# scripts/test.sh — the whole test suite (README command 2; .ci/run calls exactly this).
#
# 1. sets up and starts the project's containerd (scripts/node-setup.sh: packages with etcd, config, images),
# 2. checks formatting and lints (cargo fmt --check, cargo clippy -D warnings),
# 3. starts the real control plane the cluster tests share (crates/test-cluster: etcd, kube-apiserver and
#    kube-controller-manager from $KUBE_APISERVER/$KUBE_CONTROLLER_MANAGER or ../shared/k8s/bin, on loopback),
# 4. runs the benchmark's smoke version, then every test of the workspace: unit tests (fake runtime, paused clock)
#    and the end-to-end tests (tests/e2e: the real rkubelet binary against that containerd, the real apiserver and
#    kubectl),
# 5. stops the control plane and containerd and removes what the tests left (scripts/node-teardown.sh), even on
#    failure.
#
# `scripts/test.sh --long` runs the long scenarios at full length as well (RKUBELET_E2E_LONG=1: the eviction rounds
# ten times each, the fault drills with 30 pods and minute-long outages, the hang drill past upstream's 3-minute PLEG
# threshold, two certificate renewals each) and the tests marked `#[ignore = "long: ..."]`; about 35 minutes more.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

LONG=0
for arg in "$@"; do
    case "$arg" in
        --long) LONG=1 ;;
        *) echo "usage: $0 [--long]" >&2; exit 2 ;;
    esac
done
if ((LONG)); then
    export RKUBELET_E2E_LONG=1
fi

export RKUBELET_WORKDIR="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}"
export RKUBELET_E2E_CLUSTER="${RKUBELET_E2E_CLUSTER:-$RKUBELET_WORKDIR/cluster}"
TARGET="${CARGO_TARGET_DIR:-target}"
teardown() {
    if [[ -x "$TARGET/debug/rkubelet-test-cluster" ]]; then
        "$TARGET/debug/rkubelet-test-cluster" down --dir "$RKUBELET_E2E_CLUSTER" || true
    fi
    bash scripts/node-teardown.sh "$RKUBELET_WORKDIR" >/dev/null 2>&1 || true
}
trap teardown EXIT

SOCK="$(bash scripts/node-setup.sh "$RKUBELET_WORKDIR")"
export RKUBELET_E2E_ENDPOINT="unix://$SOCK"
echo "test.sh: containerd at $RKUBELET_E2E_ENDPOINT" >&2

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The benchmark's smoke run (every scenario, small counts, the debug binary), so the program cannot rot: its figures
# mean nothing and its budgets are not checked; scripts/bench.sh runs the full version with --check.
cargo build -q -p rkubelet -p rkubelet-bench -p test-cluster
# One control plane for the whole run (5-10 s to start); every cluster test takes its own node name and namespace.
"$TARGET/debug/rkubelet-test-cluster" up --dir "$RKUBELET_E2E_CLUSTER" >/dev/null
"$TARGET/debug/rkubelet-bench" --smoke --containerd-endpoint "$RKUBELET_E2E_ENDPOINT" \
    --json "$TARGET/benchmarks-smoke.json"
cargo test --workspace --no-fail-fast
if ((LONG)); then
    cargo test -p rkubelet --tests --no-fail-fast -- --ignored
fi
