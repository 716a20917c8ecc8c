#!/usr/bin/env bash
# scripts/test.sh — the whole test suite (README command 2; .ci/run calls exactly this).
#
# 1. sets up and starts the project's containerds (scripts/node-setup.sh: packages with etcd, config, images):
#    containerd 2.3 with runc 1.5 from ../shared/runtimes (or $RKUBELET_CONTAINERD2_BIN) twice, under
#    $RKUBELET_WORKDIR2 and $RKUBELET_WORKDIR3 (one per lane, below), and Debian's containerd 1.6 under
#    $RKUBELET_WORKDIR,
# 2. checks formatting, builds everything once, and starts the real control plane the cluster tests share
#    (crates/test-cluster: etcd, kube-apiserver and kube-controller-manager from $KUBE_APISERVER /
#    $KUBE_CONTROLLER_MANAGER or ../shared/k8s/bin, on loopback),
# 3. runs, at once: the unit tests (fake runtime, paused clock), `cargo clippy -D warnings` at the lowest priority,
#    and the end-to-end tests (tests/e2e: the real rkubelet binary against containerd 2.3, the real apiserver and
#    kubectl) in two lanes, each on its own containerd, lane 0 after the benchmark's smoke run; lane 1 ends with the
#    tests that prove what differs on containerd 1.6 (E2E_ON_1_6 below; where containerd 2.3 is not there, one line
#    says so and the whole suite runs on 1.6),
# 4. runs the few tests that need the machine to themselves, the cgroup v2 VM (started when lane 1 ends) beside the
#    first of them,
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

# The end-to-end tests in two lanes that run at once, each against its own containerd (its own root, socket, CNI
# network) with its own ports and cgroup root (`RKUBELET_E2E_LANE`, tests/e2e/common): the tests of a lane run one at
# a time, as before. Lane 0 takes the tests that read the default `kubepods` cgroups or a fixed path of this machine
# (the systemd namespace, kubeadm's cgroup root); lane 1 ends with the 1.6 part. Then, alone on the machine: what
# changes the shared control plane or the whole machine, or is judged against it (the apiserver and etcd stopped,
# the controller-manager restarted to sign short-lived certificates, the real free memory and disk, the device
# plugins' fixed folder /var/lib/kubelet/device-plugins). Every file of tests/e2e is in a list (checked below; a
# binary's tests may be split by name filters); e2e_cgroup_v2 boots its own VM when lane 1 ends, beside the rest.
LANE_0=(
    "e2e_static_pods" "e2e_lifecycle" "e2e_cgroups" "e2e_cpu_manager" "e2e_resize" "e2e_shutdown" "e2e_kubeadm" "e2e_cluster_images" "e2e_server" "e2e_mounts"
    "e2e_cluster --skip apiserver_outage" "e2e_drills_hang" "e2e_drills --skip apiserver_and_etcd"
)
LANE_1=(
    "e2e_certificates --skip rotates" "e2e_drills_disk" "e2e_drills_static" "e2e_cluster_services" "e2e_api_abuse"
    "e2e_cluster_objects" "e2e_housekeeping" "e2e_runtime_outage" "e2e_gated_projections" "e2e_cluster_ephemeral"
    "e2e_cluster_kubelet_api" "e2e_volumes" "e2e_cluster_preemption" "e2e_security_contexts" "e2e_dra" "e2e_csi"
)
# The outages last, after the pressure tests (which wait for the VM): the controller-manager takes a while to recover
# its watches after them (a namespace made then may wait past a minute for its default service account). Then the
# kubeadm cluster (a second control plane and two more containerds: beside a lane it slowed the other lane's tests).
ALONE=(
    "e2e_devices" "e2e_certificates rotates" "e2e_cluster_pressure" "e2e_drills apiserver_and_etcd"
    "e2e_cluster apiserver_outage" "e2e_kubeadm_cluster"
)
VM_TEST="e2e_cgroup_v2"

WORKDIR_1_6="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}"
WORKDIR_2_3="${RKUBELET_WORKDIR2:-/var/lib/rkubelet-dev2}"
WORKDIR_LANE_1="${RKUBELET_WORKDIR3:-/var/lib/rkubelet-dev3}"
export RKUBELET_E2E_CLUSTER="${RKUBELET_E2E_CLUSTER:-$WORKDIR_1_6/cluster}"
TARGET="${CARGO_TARGET_DIR:-target}"

# Every e2e test binary is in one list.
listed=" $VM_TEST "
for run in "${LANE_0[@]}" "${LANE_1[@]}" "${ALONE[@]}"; do
    listed+="${run%% *} "
done
for f in tests/e2e/*.rs; do
    name="e2e_$(basename "$f" .rs)"
    [[ "$listed" == *" $name "* ]] || { echo "test.sh: $name is in no lane of scripts/test.sh" >&2; exit 2; }
done

teardown() {
    if [[ -n "${clippy_pid:-}" ]]; then
        kill "$clippy_pid" 2>/dev/null || true
    fi
    if [[ -x "$TARGET/debug/rkubelet-test-cluster" ]]; then
        "$TARGET/debug/rkubelet-test-cluster" down --dir "$RKUBELET_E2E_CLUSTER" || true
    fi
    for w in "$WORKDIR_LANE_1" "$WORKDIR_2_3" "$WORKDIR_1_6"; do
        bash scripts/node-teardown.sh "$w" >/dev/null 2>&1 || true
    done
}
trap teardown EXIT

SOCK_1_6="$(RKUBELET_CONTAINERD=1.6 bash scripts/node-setup.sh "$WORKDIR_1_6")"
echo "test.sh: containerd 1.6 at unix://$SOCK_1_6" >&2
# shellcheck source=lib/node-common.sh
if why="$(source scripts/lib/node-common.sh && rk_containerd2_bin 2>&1 >/dev/null)"; then
    LANE_RUNTIME=2.3
    SOCK_2_3="$(RKUBELET_CONTAINERD=2.3 bash scripts/node-setup.sh "$WORKDIR_2_3")"
    echo "test.sh: containerd 2.3 at unix://$SOCK_2_3" >&2
    WORKDIR_LANE_0="$WORKDIR_2_3"
else
    echo "test.sh: the containerd 2.3 part is skipped: $why; the whole suite runs on containerd 1.6" >&2
    LANE_RUNTIME=1.6
    SOCK_2_3=""
    WORKDIR_LANE_0="$WORKDIR_1_6"
fi
SOCK_LANE_0="$WORKDIR_LANE_0/containerd.sock"
# Lane 1's containerd: the same version as lane 0's, on CNI network 2 (cni2, 10.90.0.0/16).
SOCK_LANE_1="$(RKUBELET_CONTAINERD=$LANE_RUNTIME RKUBELET_NETWORK=2 bash scripts/node-setup.sh "$WORKDIR_LANE_1")"
echo "test.sh: lane 1: containerd $LANE_RUNTIME at unix://$SOCK_LANE_1" >&2
export RKUBELET_WORKDIR="$WORKDIR_LANE_0" RKUBELET_E2E_ENDPOINT="unix://$SOCK_LANE_0" RKUBELET_E2E_LANE=0

cargo fmt --all -- --check
# One build of everything (the tests' dev-dependencies change the features of shared crates, so the binaries are
# built with them, once).
cargo build -q --workspace --all-targets
# One control plane for the whole run (5-10 s to start); every cluster test takes its own node name and namespace.
"$TARGET/debug/rkubelet-test-cluster" up --dir "$RKUBELET_E2E_CLUSTER" >/dev/null
status=0
# Every test binary of the workspace: `<target name> <package folder> <executable>` per line. They are run directly
# below (from their package folder, as cargo runs them), so no later step builds again or waits for cargo's lock.
binaries="$TARGET/test-binaries.tsv"
cargo test --workspace --no-run -q --message-format=json-render-diagnostics | python3 -c '
import json, os, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
' >"$binaries"

# Lints, on their own build folder, at the lowest priority beside the tests: they take the CPU the tests leave idle.
clippy_log="$TARGET/clippy.log"
nice -n 19 cargo clippy --workspace --all-targets --target-dir "$TARGET/clippy" -- -D warnings >"$clippy_log" 2>&1 &
clippy_pid=$!

# run_binary NAME [ARGS...]: one test binary of the list, from its package folder.
run_binary() {
    local name="$1" dir exe
    shift
    IFS=$'\t' read -r _ dir exe < <(awk -F'\t' -v n="$name" '$1 == n' "$binaries" | head -n 1)
    [[ -n "${exe:-}" ]] || { echo "test.sh: no test binary $name" >&2; return 1; }
    (cd "$dir" && "$exe" "$@")
}

# run_e2e LANE WORKDIR LOG "binary [args...]"...: one lane's tests, one after the other, output into LOG.
run_e2e() {
    local lane="$1" workdir="$2" log="$3" rc=0 run words
    shift 3
    for run in "$@"; do
        read -r -a words <<<"$run"
        echo "test.sh: lane $lane on $(sed -n 's/^RK_CONTAINERD=//p' "$workdir/runtime.env"): ${words[*]}" >>"$log"
        RKUBELET_E2E_LANE="$lane" RKUBELET_WORKDIR="$workdir" RKUBELET_E2E_ENDPOINT="unix://$workdir/containerd.sock" \
            run_binary "${words[@]}" >>"$log" 2>&1 || rc=1
    done
    return "$rc"
}
logs=("$TARGET/e2e-lane-0.log" "$TARGET/e2e-lane-1.log" "$TARGET/e2e-1.6.log" "$TARGET/e2e-cgroup-v2.log")
rm -f "${logs[@]}"
# Lane 1 starts at once; lane 0's containerd first serves the benchmark's smoke run (every scenario, small counts, the
# debug binary), so the program cannot rot: its figures mean nothing and its budgets are not checked
# (scripts/bench.sh runs the full version with --check). The unit tests run meanwhile.
echo "test.sh: lane 1 (output in ${logs[1]}), then lane 0 after the benchmark's smoke run (${logs[0]})" >&2
(
    rc=0
    run_e2e 1 "$WORKDIR_LANE_1" "${logs[1]}" "${LANE_1[@]}" || rc=1
    # The 1.6 part on lane 1's ports and cgroup root.
    if [[ -n "$SOCK_2_3" ]]; then
        run_e2e 1 "$WORKDIR_1_6" "${logs[2]}" "${E2E_ON_1_6[@]}" || rc=1
    fi
    exit "$rc"
) &
lane1_pid=$!
(
    rc=0
    "$TARGET/debug/rkubelet-bench" --smoke --containerd-endpoint "unix://$SOCK_LANE_0" \
        --json "$TARGET/benchmarks-smoke.json" >"$TARGET/benchmarks-smoke.log" 2>&1 || rc=1
    run_e2e 0 "$WORKDIR_LANE_0" "${logs[0]}" "${LANE_0[@]}" || rc=1
    exit "$rc"
) &
lane0_pid=$!
# Unit tests (fake runtime, paused clock), the fuzz targets and the doc tests: every binary but the end-to-end ones.
while IFS=$'\t' read -r name dir exe; do
    [[ "$name" == e2e_* ]] && continue
    echo "test.sh: $name ($exe)" >&2
    (cd "$dir" && "$exe") || status=$?
done <"$binaries"
cargo test --workspace --doc -q || status=$?
# The cgroup v2 VM (a core's worth of CPU while it boots) on lane 1's lock once lane 1 is done, beside the rest of
# lane 0 and the first tests that need the machine.
wait "$lane1_pid" || status=$?
RKUBELET_E2E_LANE=1 RKUBELET_WORKDIR="$WORKDIR_LANE_1" RKUBELET_E2E_ENDPOINT="unix://$SOCK_LANE_1" \
    run_binary "$VM_TEST" >"${logs[3]}" 2>&1 &
vm_pid=$!
wait "$lane0_pid" || status=$?
for log in "$TARGET/benchmarks-smoke.log" "${logs[@]:0:3}"; do
    if [[ -f "$log" ]]; then cat "$log"; fi
done

# Alone on the machine (but for the VM): the tests that change it for everyone or use its fixed paths, then, once the
# VM is gone, the pressure tests, which judge against all of the machine's free memory.
echo "test.sh: alone on the machine: ${ALONE[*]}, $VM_TEST beside the first ones (output in ${logs[3]})" >&2
for run in "${ALONE[@]}"; do
    read -r -a words <<<"$run"
    if [[ "${words[0]}" == e2e_cluster_pressure ]]; then
        wait "$vm_pid" || status=$?
        vm_pid=""
        cat "${logs[3]}"
    fi
    run_binary "${words[@]}" || status=$?
done
if [[ -n "$vm_pid" ]]; then
    wait "$vm_pid" || status=$?
    cat "${logs[3]}"
fi
if ((LONG)); then
    while IFS=$'\t' read -r name _ _; do
        [[ "$name" == e2e_* ]] && { run_binary "$name" --ignored || status=$?; }
    done <"$binaries"
fi

echo "test.sh: waiting for cargo clippy (output in $clippy_log)" >&2
wait "$clippy_pid" || { status=1; cat "$clippy_log"; }
clippy_pid=""
exit "$status"
