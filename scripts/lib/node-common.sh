# shellcheck shell=bash
# shellcheck disable=SC2034  # variables here are used by the scripts that source this file
# Shared helpers for scripts/node-setup.sh and scripts/node-teardown.sh.
# Sourced, not executed. Facts referenced below come from
# /work/shared/notes/runtime-on-this-machine.md.

# Debian puts runc, iptables and ip in /usr/sbin; make sure they are found even
# when the caller has a narrow PATH (containerd inherits this PATH to find runc).
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

RK_DEFAULT_WORKDIR="/var/lib/rkubelet-dev"
RK_FWD_COMMENT="rkubelet: keep pod traffic on this machine"

rk_log() { printf '[%s] %s\n' "${RK_PROG:-rkubelet}" "$*" >&2; }
rk_warn() { printf '[%s] WARNING: %s\n' "${RK_PROG:-rkubelet}" "$*" >&2; }
rk_die() { printf '[%s] ERROR: %s\n' "${RK_PROG:-rkubelet}" "$*" >&2; exit 1; }

rk_require_root() {
    [[ ${EUID:-$(id -u)} -eq 0 ]] || rk_die "must run as root (containerd, iptables and cgroups need it)"
}

# rk_resolve_workdir [ARG] -> sets WORKDIR and derived paths.
# Precedence: argument, then $RKUBELET_WORKDIR, then the default.
rk_resolve_workdir() {
    WORKDIR="${1:-${RKUBELET_WORKDIR:-$RK_DEFAULT_WORKDIR}}"
    [[ "$WORKDIR" == /* ]] || WORKDIR="$PWD/$WORKDIR"
    WORKDIR="${WORKDIR%/}"
    [[ -n "$WORKDIR" && "$WORKDIR" != "/" ]] || rk_die "refusing to use / as WORKDIR"
    SOCK="$WORKDIR/containerd.sock"
    CONFIG="$WORKDIR/containerd.toml"
    PIDFILE="$WORKDIR/containerd.pid"
    CLOG="$WORKDIR/containerd.log"
    CNI_CONF_DIR="$WORKDIR/cni/net.d"
    LOCKFILE="$WORKDIR/.node.lock"
    rk_select_runtime
}

# rk_select_runtime: which containerd WORKDIR runs, and the names that go with it (shared by setup and teardown).
# $RKUBELET_CONTAINERD picks it: `1.6` (Debian's containerd and runc, the default) or `2.3` (containerd 2.3 and runc
# 1.5 from ../shared/runtimes/containerd-2.3); without it, what setup recorded in $WORKDIR/runtime.env. Each
# workdir has its own CNI network, bridge and subnet, so several can run at once: network N (0-9) is `rkubelet`
# (N=0) or `rkubelet<N+1>`, bridge `cni<N>`, subnet 10.<88+N>.0.0/16. $RKUBELET_NETWORK picks N; by default 0 for
# 1.6 and 1 for 2.3 (the test suite's second 2.3 lane takes 2). $WORKDIR/bin holds links to the runtime's programs
# (containerd, its shim, ctr, runc) and comes first in PATH: every script and test finds the right ones there.
rk_select_runtime() {
    local want="${RKUBELET_CONTAINERD:-}" net="${RKUBELET_NETWORK:-}"
    if [[ -z "$want" && -f "$WORKDIR/runtime.env" ]]; then
        want="$(sed -n 's/^RK_CONTAINERD=//p' "$WORKDIR/runtime.env")"
        [[ -n "$net" ]] || net="$(sed -n 's/^RK_NETWORK=//p' "$WORKDIR/runtime.env")"
    fi
    RK_CONTAINERD="${want:-1.6}"
    case "$RK_CONTAINERD" in
        1.6) RK_NETWORK="${net:-0}" ;;
        2.3) RK_NETWORK="${net:-1}" ;;
        *) rk_die "RKUBELET_CONTAINERD=$RK_CONTAINERD: expected 1.6 (Debian's containerd) or 2.3 (../shared/runtimes/containerd-2.3)" ;;
    esac
    [[ "$RK_NETWORK" =~ ^[0-9]$ ]] || rk_die "RKUBELET_NETWORK=$RK_NETWORK: expected one digit, 0-9"
    if ((RK_NETWORK == 0)); then RK_CNI_NETWORK="rkubelet"; else RK_CNI_NETWORK="rkubelet$((RK_NETWORK + 1))"; fi
    RK_BRIDGE="cni$RK_NETWORK"
    RK_POD_CIDR="10.$((88 + RK_NETWORK)).0.0/16"
    export PATH="$WORKDIR/bin:$PATH"
}

# rk_shared_unpacked REL: prints where ../shared/unpack.sh (beside the project, or /work/shared) unpacked REL, a
# program or folder of ../shared (REL.xz, or a folder holding .xz programs). Fails with one line saying why.
rk_shared_unpacked() {
    local rel="$1" project unpack here dest
    project="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    for unpack in "$project/../shared/unpack.sh" /work/shared/unpack.sh; do
        here="$(dirname "$unpack")"
        [[ -f "$unpack" && ( -f "$here/$rel.xz" || -d "$here/$rel" ) ]] || continue
        dest="$(sh "$unpack" 2>/dev/null | tail -n 1)"
        [[ -e "$dest/$rel" ]] || { echo "$unpack did not unpack $rel" >&2; return 1; }
        echo "$dest/$rel"
        return 0
    done
    echo "../shared/$rel not found beside the project" >&2
    return 1
}

# rk_containerd2_bin: prints the folder holding containerd 2.3's programs: $RKUBELET_CONTAINERD2_BIN, else
# ../shared/runtimes/containerd-2.3/bin unpacked by ../shared/unpack.sh. Fails with one line saying why.
rk_containerd2_bin() {
    local bin
    if [[ -n "${RKUBELET_CONTAINERD2_BIN:-}" ]]; then
        [[ -x "$RKUBELET_CONTAINERD2_BIN/containerd" ]] ||
            { echo "RKUBELET_CONTAINERD2_BIN=$RKUBELET_CONTAINERD2_BIN holds no containerd" >&2; return 1; }
        echo "$RKUBELET_CONTAINERD2_BIN"
        return 0
    fi
    bin="$(rk_shared_unpacked runtimes/containerd-2.3/bin 2>&1)" ||
        { echo "containerd 2.3 not found: neither RKUBELET_CONTAINERD2_BIN nor $bin" >&2; return 1; }
    [[ -x "$bin/containerd" ]] || { echo "../shared/unpack.sh did not unpack containerd 2.3 (got $bin)" >&2; return 1; }
    echo "$bin"
}

# rk_shared_program ENV REL: prints the path of a program the tests need from ../shared: $ENV when set, else REL
# (e.g. k8s/bin/sample-device-plugin) unpacked by ../shared/unpack.sh. Fails with one line saying why.
rk_shared_program() {
    local var="$1" rel="$2"
    if [[ -n "${!var:-}" ]]; then
        [[ -x "${!var}" ]] || { echo "$var=${!var} is not an executable" >&2; return 1; }
        echo "${!var}"
        return 0
    fi
    rk_shared_unpacked "$rel"
}

# Serialise setup/teardown runs on the same WORKDIR (parallel test runners may
# call setup at the same time; two of them must not each start a containerd).
# fd 9 holds the lock: anything started in the background must close it (9>&-).
rk_lock() {
    mkdir -p "$WORKDIR"
    exec 9>"$LOCKFILE"
    if ! flock -n 9; then
        rk_log "another node-setup/teardown holds $LOCKFILE; waiting up to 300s"
        flock -w 300 9 || rk_die "timed out waiting for $LOCKFILE"
    fi
}

# True when containerd answers on $SOCK (bounded: ctr would otherwise retry).
rk_socket_answers() {
    [[ -S "$SOCK" ]] && timeout 5 ctr -a "$SOCK" version >/dev/null 2>&1
}

# rk_our_containerd_pid: prints the pid of the containerd started with our
# config, from the pid file, or by an exact match of "--config $CONFIG" in
# /proc/*/cmdline (pid file lost). Never matches other containerd instances.
rk_our_containerd_pid() {
    local pid cmd d
    if [[ -f "$PIDFILE" ]]; then
        pid="$(tr -dc 0-9 <"$PIDFILE")"
        if [[ -n "$pid" && -r /proc/$pid/cmdline ]]; then
            cmd="$(tr '\0' ' ' 2>/dev/null </proc/"$pid"/cmdline || true)"
            if [[ "$cmd" == *containerd*"--config $CONFIG"* ]]; then
                echo "$pid"
                return 0
            fi
        fi
    fi
    for d in /proc/[0-9]*; do
        cmd="$(tr '\0' ' ' 2>/dev/null <"$d/cmdline" || true)"
        if [[ "$cmd" == "containerd --config $CONFIG "* || "$cmd" == */containerd\ --config\ "$CONFIG "* ]]; then
            echo "${d#/proc/}"
            return 0
        fi
    done
    return 1
}

# rk_start_containerd TIMEOUT_SECONDS: start containerd with $CONFIG in the
# background and wait (bounded) until it answers on $SOCK. There is no systemd
# (PID 1 is not systemd here): setsid + nohup detach it from the calling
# shell/session so it outlives us. Returns 1 (after printing the log tail) when
# it dies or does not answer in time; writes $PIDFILE.
rk_start_containerd() {
    local timeout="$1" pid deadline
    rm -f "$SOCK" "$SOCK.ttrpc" "$PIDFILE"
    printf '\n===== %s %s starting containerd =====\n' "$(date -Is)" "$RK_PROG" >>"$CLOG"
    # 9>&-: do not leak the lock's fd into the daemon (it would hold the lock
    # forever). $! is containerd's own pid: setsid execs in place because a
    # background job of a non-interactive shell is not a process-group leader.
    setsid nohup containerd --config "$CONFIG" </dev/null >>"$CLOG" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$PIDFILE"
    deadline=$(($(date +%s) + timeout))
    until rk_socket_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE"
            tail -n 20 "$CLOG" >&2 || true
            rk_warn "containerd exited during startup (see $CLOG, last lines above)"
            return 1
        fi
        if (($(date +%s) >= deadline)); then
            tail -n 20 "$CLOG" >&2 || true
            rk_warn "containerd (pid $pid) did not answer on $SOCK within ${timeout}s (see $CLOG); stopping it"
            rk_stop_containerd "$pid"
            rm -f "$PIDFILE"
            return 1
        fi
        sleep 0.1
    done
    RK_STARTED_PID="$pid"
}

# rk_stop_containerd PID: SIGTERM, bounded wait (10 s), then SIGKILL.
# Running containers survive it: their shims stay.
rk_stop_containerd() {
    local pid="$1" i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    rk_warn "containerd pid $pid ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.3
}
