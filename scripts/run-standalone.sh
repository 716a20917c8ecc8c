#!/usr/bin/env bash
# scripts/run-standalone.sh — README command 1: everything from a fresh machine to a running node.
#
# Installs and starts containerd with locally built images (scripts/node-setup.sh), builds rkubelet, starts it
# on config/kubelet-standalone.yaml (a standalone node running the static pods of config/manifests), waits until
# the sample pod runs and shows it. rkubelet then keeps running in the foreground: Ctrl-C stops it (pods keep
# running, as with the Go kubelet; scripts/node-teardown.sh removes everything).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SOCK="$(bash scripts/node-setup.sh)"
echo "containerd is running at $SOCK" >&2

echo "building rkubelet (a first build takes a few minutes)..." >&2
cargo build --release -p rkubelet
BIN=target/release/rkubelet
LOG="${RKUBELET_RUN_LOG:-/tmp/rkubelet-standalone.log}"

"$BIN" --config config/kubelet-standalone.yaml --v=2 >"$LOG" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null' INT TERM
echo "rkubelet started (pid $PID), log: $LOG" >&2

# Wait for the sample pod on the read-only API (http://127.0.0.1:10255/pods), then show it.
if ! python3 scripts/lib/pods.py --wait-running 120; then
    echo "last log lines:" >&2
    tail -n 30 "$LOG" >&2
    kill -TERM "$PID" 2>/dev/null || true
    exit 1
fi
echo
echo "Container logs are under /var/log/pods and /var/log/containers; pod status: python3 scripts/lib/pods.py"
echo "rkubelet keeps running (Ctrl-C stops it; pods keep running). Log: $LOG"
wait $PID
