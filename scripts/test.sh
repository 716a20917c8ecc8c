#!/usr/bin/env bash
# scripts/test.sh — the whole test suite (README command 2; .ci/run calls exactly this).
#
# 1. sets up and starts the project's two containerds (scripts/node-setup.sh: packages with etcd, config, images):
#    containerd 2.3 with runc 1.5 from ../shared/runtimes (or $RKUBELET_CONTAINERD2_BIN) under $RKUBELET_WORKDIR2,
#    and Debian's containerd 1.6 under $RKUBELET_WORKDIR,
# 2. checks formatting and lints (cargo fmt --check, cargo clippy -D warnings),
# 3. starts the real control plane the cluster tests share (crates/test-cluster: etcd, kube-apiserver and
#    kube-controller-manager from $KUBE_APISERVER/$KUBE_CONTROLLER_MANAGER or ../shared/k8s/bin, on loopback),
# 4. runs the benchmark's smoke version, then every test of the workspace: unit tests (fake runtime, paused clock)
#    and the end-to-end tests (tests/e2e: the real rkubelet binary against containerd 2.3, the real apiserver and
#    kubectl), then the end-to-end tests that prove what differs on containerd 1.6 against it (E2E_ON_1_6 below;
#    where containerd 2.3 is not there, one line says so and the whole suite runs on 1.6),
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

# The end-to-end tests that run on containerd 1.6 as well (test binary, then name filters): what 1.6 answers
# differently (no RuntimeConfig, no runtime handlers, no image mounts, its OOM and cancelled-start quirks) and a
# node's everyday pods through the apiserver. Every feature test runs on 2.3 (README, "The two runtimes of the
# tests").
E2E_ON_1_6=(
    "e2e_cluster node_registers pod_created_with_kubectl host_users"
    "e2e_lifecycle oom_killed"
    "e2e_runtime_outage"
    "e2e_security_contexts recursive_read_only"
    "e2e_volumes image_volume"
    "e2e_drills rkubelet_killed"
)

WORKDIR_1_6="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}"
WORKDIR_2_3="${RKUBELET_WORKDIR2:-/var/lib/rkubelet-dev2}"
export RKUBELET_E2E_CLUSTER="${RKUBELET_E2E_CLUSTER:-$WORKDIR_1_6/cluster}"
TARGET="${CARGO_TARGET_DIR:-target}"
teardown() {
    if [[ -x "$TARGET/debug/rkubelet-test-cluster" ]]; then
        "$TARGET/debug/rkubelet-test-cluster" down --dir "$RKUBELET_E2E_CLUSTER" || true
    fi
    bash scripts/node-teardown.sh "$WORKDIR_2_3" >/dev/null 2>&1 || true
    bash scripts/node-teardown.sh "$WORKDIR_1_6" >/dev/null 2>&1 || true
}
trap teardown EXIT

SOCK_1_6="$(RKUBELET_CONTAINERD=1.6 bash scripts/node-setup.sh "$WORKDIR_1_6")"
echo "test.sh: containerd 1.6 at unix://$SOCK_1_6" >&2
# shellcheck source=lib/node-common.sh
if why="$(source scripts/lib/node-common.sh && rk_containerd2_bin 2>&1 >/dev/null)"; then
    SOCK_2_3="$(RKUBELET_CONTAINERD=2.3 bash scripts/node-setup.sh "$WORKDIR_2_3")"
    echo "test.sh: containerd 2.3 at unix://$SOCK_2_3" >&2
    export RKUBELET_WORKDIR="$WORKDIR_2_3" RKUBELET_E2E_ENDPOINT="unix://$SOCK_2_3"
else
    echo "test.sh: the containerd 2.3 part is skipped: $why; the whole suite runs on containerd 1.6" >&2
    SOCK_2_3=""
    export RKUBELET_WORKDIR="$WORKDIR_1_6" RKUBELET_E2E_ENDPOINT="unix://$SOCK_1_6"
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The benchmark's smoke run (every scenario, small counts, the debug binary), so the program cannot rot: its figures
# mean nothing and its budgets are not checked; scripts/bench.sh runs the full version with --check.
cargo build -q -p rkubelet -p rkubelet-bench -p test-cluster
# One control plane for the whole run (5-10 s to start); every cluster test takes its own node name and namespace.
"$TARGET/debug/rkubelet-test-cluster" up --dir "$RKUBELET_E2E_CLUSTER" >/dev/null
"$TARGET/debug/rkubelet-bench" --smoke --containerd-endpoint "$RKUBELET_E2E_ENDPOINT" \
    --json "$TARGET/benchmarks-smoke.json"
status=0
# The cgroup v2 test boots its own VM (its own kernel and containerd, nothing of this machine's runtimes): with
# both containerds here it runs beside the 1.6 part below instead of in the line.
VM_TEST=pods_on_cgroup_v2
skip=()
if [[ -n "$SOCK_2_3" ]]; then
    skip=(--skip "$VM_TEST")
fi
cargo test --workspace --no-fail-fast -- "${skip[@]}" || status=$?
if ((LONG)); then
    cargo test -p rkubelet --tests --no-fail-fast -- --ignored || status=$?
fi
if [[ -n "$SOCK_2_3" ]]; then
    vm_log="$TARGET/e2e-cgroup-v2.log"
    echo "test.sh: beside the 1.6 part: e2e_cgroup_v2 (output in $vm_log, shown when it ends)" >&2
    cargo test -p rkubelet --no-fail-fast --test e2e_cgroup_v2 -- "$VM_TEST" >"$vm_log" 2>&1 &
    vm_pid=$!
    for run in "${E2E_ON_1_6[@]}"; do
        read -r -a words <<<"$run"
        echo "test.sh: on containerd 1.6: ${words[*]}" >&2
        RKUBELET_WORKDIR="$WORKDIR_1_6" RKUBELET_E2E_ENDPOINT="unix://$SOCK_1_6" \
            cargo test -p rkubelet --no-fail-fast --test "${words[0]}" -- "${words[@]:1}" || status=$?
    done
    wait "$vm_pid" || status=$?
    cat "$vm_log"
fi
exit "$status"
