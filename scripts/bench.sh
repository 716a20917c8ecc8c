#!/usr/bin/env bash
# The benchmark with budgets (docs/benchmarks.md): starts the project's containerd (scripts/node-setup.sh: 2.3 from
# ../shared/runtimes when it is there, else Debian's 1.6; RKUBELET_CONTAINERD=1.6|2.3 picks one), builds rkubelet
# and rkubelet-bench in release mode and runs every scenario, the whole-node one with the upstream kubelet v1.35
# side by side on the same runtime and pods (`--upstream-kubelet auto`: $KUBELET, else ../shared/k8s/bin/kubelet;
# skipped with a line saying so when neither is there). Writes docs/benchmarks.json and docs/benchmarks.md and
# exits non-zero, naming the figure, when a budget is missed. Extra arguments go to rkubelet-bench (e.g.
# `--scenarios core,fake` or `--pods 110,1000`; `--help` lists them). The whole-node scenario (`node`) needs the real
# control plane: it is started here (crates/test-cluster) and stopped at the end. Takes about 35 minutes (10 of them
# the fuzz targets, 8 the upstream kubelet's run).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=lib/node-common.sh
if [[ -z "${RKUBELET_CONTAINERD:-}" ]]; then
    if (source scripts/lib/node-common.sh && rk_containerd2_bin >/dev/null 2>&1); then
        export RKUBELET_CONTAINERD=2.3
    else
        export RKUBELET_CONTAINERD=1.6
    fi
fi
if [[ "$RKUBELET_CONTAINERD" == 2.3 ]]; then
    export RKUBELET_WORKDIR="${RKUBELET_WORKDIR2:-/var/lib/rkubelet-dev2}"
else
    export RKUBELET_WORKDIR="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}"
fi
export RKUBELET_E2E_CLUSTER="${RKUBELET_E2E_CLUSTER:-$RKUBELET_WORKDIR/cluster}"
TARGET="${CARGO_TARGET_DIR:-target}"
SOCK="$(bash scripts/node-setup.sh "$RKUBELET_WORKDIR")"
echo "bench.sh: containerd $RKUBELET_CONTAINERD at unix://$SOCK" >&2
UPSTREAM=()
if [[ -n "${KUBELET:-}" ]] || ls ../shared/k8s/bin/kubelet.xz /work/shared/k8s/bin/kubelet.xz >/dev/null 2>&1; then
    UPSTREAM=(--upstream-kubelet auto)
else
    echo "bench.sh: no upstream kubelet (neither \$KUBELET nor ../shared/k8s/bin/kubelet.xz): rkubelet alone" >&2
fi
cargo build --release -q -p rkubelet -p rkubelet-bench -p test-cluster
"$TARGET/release/rkubelet-test-cluster" up --dir "$RKUBELET_E2E_CLUSTER" >/dev/null
trap '"$TARGET/release/rkubelet-test-cluster" down --dir "$RKUBELET_E2E_CLUSTER" || true' EXIT
"$TARGET/release/rkubelet-bench" --check --containerd-endpoint "unix://$SOCK" "${UPSTREAM[@]}" \
    --json docs/benchmarks.json --markdown docs/benchmarks.md "$@"
