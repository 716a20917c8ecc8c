#!/usr/bin/env bash
# scripts/lib/systemd-ns.sh COMMAND DIR [ARGS...]
#
# A throw-away systemd (Debian's systemd 252) as PID 1 of its own PID, mount,
# cgroup, UTS and IPC namespaces, for testing the systemd cgroup driver on
# this machine, where PID 1 is not systemd (process_api) and cgroups are the
# v1 "hybrid" layout. The network namespace stays the host's. State lives in
# DIR (absolute or relative path; keep it short: containerd's socket goes to
# DIR/containerd/containerd.sock, a unix socket path must stay < 108 bytes).
#
#   start DIR       start systemd (idempotent), wait until
#                   `systemctl is-system-running` says running/degraded, write
#                   DIR/pid (systemd's host pid); prints that pid. ~0.4 s.
#   exec DIR CMD..  run CMD inside: joins the namespace's root cgroups, then
#                   nsenter -m -p -C -u -i (keeps the working directory and
#                   the environment; exit status is CMD's). CMD can reach
#                   /run/systemd/private (systemctl, systemd-run, p2p D-Bus).
#   containerd DIR  start a second containerd (/usr/bin/containerd) inside as
#                   the transient unit rk-containerd.service, with
#                   SystemdCgroup = true for runc and its own config, root,
#                   state, socket, log and CNI config under DIR/containerd;
#                   prints the socket path (idempotent). ~0.1 s.
#   logind DIR      start the system bus (dbus.socket/dbus.service) and
#                   systemd-logind inside, for graceful node shutdown; a
#                   tmpfs over /etc/systemd keeps logind's drop-ins inside.
#   status DIR      `systemctl status` inside (exit 3 when not running)
#   stop DIR        SIGKILL to systemd (kills everything in the namespace,
#                   containers included; the mount namespace and all mounts
#                   made inside go with it), remove every cgroup start made and
#                   the CNI bridge/IPAM files of `containerd`. ~0.25 s.
#
# Environment knobs:
#   RK_SYSTEMD_CGROUP         cgroup name under which systemd's tree lives
#                             (default rk-systemd; one instance per name)
#   RK_SYSTEMD_START_TIMEOUT  seconds (default 30)
#   RK_SYSTEMD_LOG_LEVEL      systemd's --log-level (default info)
#   RK_SYSTEMD_CNI_NETWORK / _BRIDGE / _SUBNET   CNI of `containerd`
#                             (default rk-systemd / rksd0 / 10.89.0.0/16)
#   RKUBELET_SNAPSHOTTER      as in node-setup.sh (default overlayfs)
#   RK_SYSTEMD_NETNS          a network namespace (its name under /run/netns,
#                             made by the caller) to run in instead of the
#                             host's: a second "machine" with its own
#                             addresses, ports and CNI bridge; /sys is then
#                             that namespace's sysfs. exec enters it too.
#   RK_SYSTEMD_PRIVATE        absolute paths (blank-separated) that are the
#                             namespace's own instead of the host's: each is
#                             DIR/root/PATH bound over PATH inside (e.g.
#                             /etc/kubernetes /var/lib/kubelet for a kubeadm
#                             node), so two nodes never share kubelet state
#   RK_SYSTEMD_HOSTNAME       the namespace's host name (its own UTS namespace)
#   RK_SYSTEMD_HOSTS          lines added to the namespace's own copy of
#                             /etc/hosts ("10.0.0.2 node-b"), so that names
#                             resolve without a DNS server
#   RK_SYSTEMD_SANDBOX_IMAGE  containerd's sandbox image (default localhost/pause:1)
#
# Files in DIR: pid, unshare.pid, cgroups (host cgroup dirs made by start),
# hierarchies, units/ (SYSTEMD_UNIT_PATH), generators/ (empty on purpose),
# systemd.log (systemd's console), start.log, containerd/ (config.toml, root,
# state, containerd.sock, containerd.log, cni/net.d).
#
# How it is built (see also scripts/lib/systemd-ns.md):
# - start makes CALLER_CGROUP/rk-systemd in every mounted hierarchy (cpu,
#   cpuacct, cpuset, memory, devices, freezer, blkio, pids, name=systemd,
#   cgroup2 "unified"). CALLER_CGROUP is "/" except memory, where process_api
#   puts each session in /process_api/<id>: systemd's memory tree is
#   /sys/fs/cgroup/memory/process_api/<id>/rk-systemd/... . A detached helper
#   joins them, then `unshare --cgroup --pid --mount --uts --ipc --fork
#   --propagation private --mount-proc` runs this script as PID 1 (__init):
#   it drops the copies of host tmpfs/overlay/nsfs mounts (the ~1000 pod-volume
#   tmpfs under /tmp: they would be pinned), mounts a tmpfs on /run and on
#   /sys/fs/cgroup, re-mounts every hierarchy (rooted at .../rk-systemd
#   through the cgroup namespace), binds a pty over /dev/console, makes
#   fs.file-max, fs.nr_open, net.unix.max_dgram_qlen, /etc/machine-id and /sys
#   read-only, and execs systemd --system --unit=rk-systemd.target with
#   container=rk-systemd and SYSTEMD_UNIT_PATH=DIR/units (that target plus
#   empty stand-ins for sysinit/basic/shutdown/... targets, so units with
#   default dependencies work; nothing else: no journald, udev, tmpfiles,
#   dbus). The host filesystem (/, /work, /tmp, /var, /etc) stays visible and
#   writable inside; /run, /proc, /sys/fs/cgroup are the namespace's own.
#
# Findings (Debian 12, systemd 252.38, containerd 1.6.20, runc 1.1.5, hybrid
# cgroup v1, 2 CPUs; measured 2 Dec):
# - start ~0.35-0.55 s (systemd itself: "Startup finished in 32ms"); stop
#   ~0.25 s; containerd up ~0.1 s; `ctr run` of busybox ~0.15 s.
# - containerd with SystemdCgroup=true inside works: `ctr run
#   --runc-systemd-cgroup --cgroup rkdemo-burstable.slice:rk:c3 ...` gives
#   the unit rk-c3.scope (Delegate=yes) in rkdemo.slice/rkdemo-burstable.slice,
#   listed by `systemctl list-units`/`systemctl status rkdemo.slice`; host path
#   /sys/fs/cgroup/cpu/rk-systemd/rkdemo.slice/rkdemo-burstable.slice/rk-c3.scope
#   with --memory-limit/--cpu-quota written (memory.limit_in_bytes 67108864,
#   cpu.cfs_quota_us 20000; systemctl show: MemoryLimit=67108864,
#   CPUQuotaPerSecUSec=200ms). Inside the container /proc/self/cgroup reads
#   /rkdemo.slice/rkdemo-burstable.slice/rk-c3.scope (cgroup namespace).
# - The containerd socket is usable from the host PID/mount namespace for
#   everything that is pure gRPC: `ctr --address DIR/containerd/containerd.sock
#   version`, `images import`, `task ls`, CRI. Not `ctr run` with its default
#   stdio: ctr makes FIFOs in the HOST's /run/containerd/fifo, the shim looks
#   in the namespace's private /run ("failed to open stdin fifo ... no such
#   file"). Works with `ctr run --fifo-dir DIR/fifo` (a folder on the shared
#   disk) or `ctr run -d --null-io`. (Note: that failing ctr creates
#   /run/containerd/fifo on the host, and `run -d` leaves container+snapshot.)
# - A kubelet must run inside anyway (exec): runc/containerd's systemd driver
#   passes PIDs, which systemd resolves in its PID namespace; D-Bus on
#   /run/systemd/private rejects peers from the host PID namespace
#   (SO_PEERCRED pid 0); mounts the kubelet makes (volumes) are only seen by
#   containers if made in this mount namespace (host mounts are private: the
#   namespace is a snapshot, later host mounts do not appear inside).
# - Gotchas solved here: systemd logs to /dev/console only if it is a tty and
#   reopens it per message (a file/FIFO bound there stays empty) -> pty +
#   python3 copier into DIR/systemd.log; PID 1 systemd writes fs.file-max,
#   fs.nr_open, net.unix.max_dgram_qlen (global / host netns) at boot, opens
#   /etc/machine-id O_RDWR|O_CREAT and does KDSIGACCEPT on /dev/tty0 -> all
#   made read-only or /dev/null in the namespace (checked with strace -D);
#   generators (sysv for /etc/init.d/*, getty, fstab) would run -> empty
#   SYSTEMD_GENERATOR_PATH; umount(8) of ~1000 inherited mounts took 2-4 s ->
#   umount2() from python3; nsenter resets the working directory -> --wd;
#   nsenter keeps the caller's cgroups (outside the namespace root, "/..")
#   -> exec joins the namespace's root cgroups first.
# - Harmless log lines: "Failed to find module 'autofs4'", "Failed to create
#   symlink /sys/fs/cgroup/cpu: File exists", "Couldn't move remaining
#   userspace processes, ignoring: Input/output error", "Failed to dump
#   process list for 'vm', ignoring: Input/output error" (in systemctl
#   status: its CGroup tree of "/" stays empty; per-unit status shows it).
#   "Tainted: cgroupsv1". Containers' devices cgroup may stay at the slice.
# - systemd only creates dirs in hierarchies whose controller a unit needs
#   (memory/pids by default, cpu with CPU settings); runc creates the rest.
#   Limits are v1 files (cgroup2 here has only hugetlb).
# - Not done/tested: pods through CRI (the CNI bridge rksd0 would be created
#   on the host; stop deletes it and the host-local IPAM files, not portmap
#   iptables chains); graceful shutdown (SIGRTMIN+4 did not stop it in the
#   earlier experiment; stop uses SIGKILL, fine for tests).
#
# Example:
#   D=/tmp/rksd; scripts/lib/systemd-ns.sh start $D
#   SOCK=$(scripts/lib/systemd-ns.sh containerd $D)
#   ctr -a $SOCK -n k8s.io images import /var/lib/rkubelet-dev/images/busybox.oci.tar
#   scripts/lib/systemd-ns.sh exec $D ctr -a $SOCK -n k8s.io run --rm \
#       --runc-systemd-cgroup --cgroup demo.slice:rk:c1 localhost/busybox:1 c1 cat /proc/self/cgroup
#   scripts/lib/systemd-ns.sh exec $D systemctl status demo.slice
#   scripts/lib/systemd-ns.sh stop $D
set -euo pipefail

RK_PROG="systemd-ns"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

log() { printf '[%s] %s\n' "$RK_PROG" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$RK_PROG" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$RK_PROG" "$*" >&2; exit 1; }

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
CG_NAME="${RK_SYSTEMD_CGROUP:-rk-systemd}"
START_TIMEOUT="${RK_SYSTEMD_START_TIMEOUT:-30}"
LOG_LEVEL="${RK_SYSTEMD_LOG_LEVEL:-info}"
SYSTEMD_BIN=/lib/systemd/systemd
CNI_NETWORK="${RK_SYSTEMD_CNI_NETWORK:-rk-systemd}"
CNI_BRIDGE="${RK_SYSTEMD_CNI_BRIDGE:-rksd0}"
CNI_SUBNET="${RK_SYSTEMD_CNI_SUBNET:-10.89.0.0/16}"

usage() {
    sed -n '2,/^set -euo/p' "$SELF" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

# resolve_dir DIR -> sets DIR (absolute, no trailing /) and the state file names.
resolve_dir() {
    [[ -n "${1:-}" ]] || usage
    DIR="$1"
    [[ "$DIR" == /* ]] || DIR="$PWD/$DIR"
    DIR="${DIR%/}"
    [[ -n "$DIR" && "$DIR" != "/" ]] || die "refusing to use / as DIR"
    PIDFILE="$DIR/pid"                # systemd's pid in the host PID namespace
    UNSHARE_PIDFILE="$DIR/unshare.pid" # its parent (unshare, host side)
    CGFILE="$DIR/cgroups"             # host cgroup directories made by start (removed by stop)
    HIERFILE="$DIR/hierarchies"       # "MOUNTPOINT OPTIONS" of each cgroup hierarchy to re-mount inside
    UNITDIR="$DIR/units"              # SYSTEMD_UNIT_PATH: the only unit folder systemd reads
    SDLOG="$DIR/systemd.log"          # systemd's console (/dev/console inside is bound to it)
    STARTLOG="$DIR/start.log"         # stderr of unshare and of the namespace's init script
    LOCKFILE="$DIR/.lock"
}

lock() {
    mkdir -p "$DIR"
    exec 9>"$LOCKFILE"
    flock -w 120 9 || die "timed out waiting for $LOCKFILE"
}

# running_pid: prints systemd's host pid when the one recorded in DIR is alive.
running_pid() {
    local pid comm
    [[ -f "$PIDFILE" ]] || return 1
    pid="$(tr -dc 0-9 <"$PIDFILE")"
    [[ -n "$pid" && -r /proc/$pid/comm ]] || return 1
    comm="$(cat /proc/"$pid"/comm 2>/dev/null || true)"
    [[ "$comm" == systemd ]] || return 1
    # Must be PID 1 of another PID namespace (not some host systemd that reused the pid).
    [[ "$(readlink /proc/"$pid"/ns/pid)" != "$(readlink /proc/self/ns/pid)" ]] || return 1
    grep -q '^NSpid:.*[[:space:]]1$' /proc/"$pid"/status || return 1
    echo "$pid"
}

# in_ns PID CMD...: run CMD in systemd's namespaces (the network one is the host's unless RK_SYSTEMD_NETNS).
in_ns() {
    local pid="$1"
    shift
    nsenter -t "$pid" -m -p -C -u -i -n -- "$@"
}

# --------------------------------------------------------------------------
# cgroup hierarchies of the caller: for every mounted v1 hierarchy and
# cgroup2, "MOUNTPOINT OPTIONS CALLER_PATH". OPTIONS are the mount options
# that re-attach to the same hierarchy ("cpu", "none,name=systemd", "" for
# cgroup2). CALLER_PATH is the caller's cgroup there ("/" except memory,
# where process_api puts each session in /process_api/<id>).
# --------------------------------------------------------------------------
list_hierarchies() {
    local id ctrls path mnt opts
    while IFS=: read -r id ctrls path; do
        if [[ "$id" == 0 ]]; then
            mnt="$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break; if ($(i+1) == "cgroup2") { print $5; exit } }' /proc/self/mountinfo)"
            [[ -n "$mnt" ]] && echo "$mnt cgroup2 $path"
            continue
        fi
        [[ -n "$ctrls" ]] || continue
        # the mount whose super options hold every controller of this hierarchy
        mnt="$(awk -v want="$ctrls" '{
            for (i = 1; i <= NF; i++) if ($i == "-") break
            if ($(i+1) != "cgroup") next
            n = split($(i+3), have, ","); split(want, w, ",")
            for (k in w) { found = 0; for (j = 1; j <= n; j++) if (have[j] == w[k]) found = 1; if (!found) next }
            print $5; exit }' /proc/self/mountinfo)"
        [[ -n "$mnt" ]] || continue # hierarchy not mounted: nothing to do with it
        opts="$ctrls"
        [[ "$ctrls" == name=* ]] && opts="none,$ctrls"
        echo "$mnt $opts $path"
    done </proc/self/cgroup
}

# cgroup_has_procs DIR: true when any cgroup under DIR (inclusive) has a process.
cgroup_has_procs() {
    local f
    while IFS= read -r f; do
        [[ -s "$f" ]] && return 0
    done < <(find "$1" -name cgroup.procs 2>/dev/null)
    return 1
}

# remove_cgroups: rmdir (depth first) every directory recorded in $CGFILE.
# Processes that were just killed may take a moment to leave: bounded retries.
remove_cgroups() {
    local d left i
    [[ -f "$CGFILE" ]] || return 0
    for ((i = 0; i < 50; i++)); do
        left=0
        while IFS= read -r d; do
            [[ -d "$d" ]] || continue
            find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
            [[ -d "$d" ]] && left=1
        done <"$CGFILE"
        ((left)) || break
        sleep 0.1
    done
    if ((left)); then
        while IFS= read -r d; do
            [[ -d "$d" ]] && warn "could not remove cgroup $d (still has processes?)"
        done <"$CGFILE"
        return 1
    fi
    rm -f "$CGFILE"
}

# --------------------------------------------------------------------------
# start
# --------------------------------------------------------------------------
write_units() {
    mkdir -p "$UNITDIR"
    # The target systemd starts. No default dependencies: nothing else is pulled in.
    cat >"$UNITDIR/rk-systemd.target" <<'EOF'
[Unit]
Description=rkubelet systemd-in-namespace (scripts/lib/systemd-ns.sh)
DefaultDependencies=no
EOF
    # (-.slice, system.slice and init.scope are built into systemd.)
    # Empty stand-ins for the targets that units with DefaultDependencies=yes
    # (a plain `systemd-run`, `systemd-run --scope`, slices) order themselves
    # against. Without them such jobs fail on not-found units. They do nothing:
    # no journald, udev, tmpfiles etc. run on the shared host filesystem.
    local t
    for t in sysinit basic shutdown umount final local-fs local-fs-pre swap sockets timers paths slices network network-online multi-user; do
        printf '[Unit]\nDescription=%s.target (empty stand-in, scripts/lib/systemd-ns.sh)\nDefaultDependencies=no\n' "$t" >"$UNITDIR/$t.target"
    done
}

cmd_start() {
    resolve_dir "$1"
    lock
    local pid t0 state deadline
    t0=$(date +%s%N)
    if pid="$(running_pid)"; then
        log "already running: systemd pid $pid (DIR $DIR)"
    else
        [[ -x "$SYSTEMD_BIN" ]] || die "$SYSTEMD_BIN missing (Debian package systemd)"
        # A previous run that died without stop: remove its leftovers first.
        if [[ -f "$CGFILE" ]]; then
            log "removing leftovers of a previous run in $DIR"
            cleanup_dead
        fi
        rm -f "$PIDFILE" "$UNSHARE_PIDFILE"
        : >"$SDLOG"
        : >"$STARTLOG"
        write_units
        list_hierarchies >"$HIERFILE"
        [[ -s "$HIERFILE" ]] || die "no cgroup hierarchy found in /proc/self/mountinfo"
        # Dedicated cgroups: CALLER_PATH/$CG_NAME in every hierarchy.
        : >"$CGFILE"
        local mnt opts path d parent
        while read -r mnt opts path; do
            parent="$mnt${path%/}"
            d="$parent/$CG_NAME"
            if [[ -d "$d" ]]; then
                cgroup_has_procs "$d" && die "$d is in use (another systemd-ns instance?); set RK_SYSTEMD_CGROUP to another name"
                find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || die "stale $d cannot be removed"
            fi
            mkdir "$d"
            echo "$d" >>"$CGFILE"
            if [[ "$opts" == cpuset ]]; then
                cat "$parent/cpuset.cpus" >"$d/cpuset.cpus"
                cat "$parent/cpuset.mems" >"$d/cpuset.mems"
            fi
        done <"$HIERFILE"
        log "starting systemd (cgroups: $CG_NAME, log: $SDLOG)"
        # __host moves itself into the cgroups, then unshare(1) makes the
        # namespaces and runs __init as their PID 1, which execs systemd.
        # setsid: detached from the caller's session. 9>&-: not holding the lock.
        setsid "$SELF" __host "$DIR" </dev/null >>"$STARTLOG" 2>&1 9>&- &
        echo $! >"$UNSHARE_PIDFILE"
        # systemd is unshare's child.
        deadline=$(($(date +%s) + START_TIMEOUT))
        until pid="$(pgrep -P "$(cat "$UNSHARE_PIDFILE")" -x systemd 2>/dev/null)"; do
            if ! kill -0 "$(cat "$UNSHARE_PIDFILE")" 2>/dev/null || (($(date +%s) >= deadline)); then
                tail -n 20 "$STARTLOG" >&2 || true
                cleanup_dead
                die "systemd did not start (see $STARTLOG)"
            fi
            sleep 0.05
        done
        echo "$pid" >"$PIDFILE"
    fi
    # Wait until the manager reports running (or degraded: a unit failed).
    deadline=$(($(date +%s) + START_TIMEOUT))
    while :; do
        state="$(in_ns "$pid" systemctl is-system-running 2>/dev/null || true)"
        case "$state" in
            running | degraded) break ;;
        esac
        if ! kill -0 "$pid" 2>/dev/null || (($(date +%s) >= deadline)); then
            tail -n 20 "$SDLOG" >&2 || true
            die "systemd (pid $pid) not running after ${START_TIMEOUT}s (state '${state:-no answer}'); see $SDLOG"
        fi
        sleep 0.05
    done
    log "systemd pid $pid is $state ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
    echo "$pid"
}

# Host side, detached: join the dedicated cgroups, then make the namespaces.
cmd___host() {
    resolve_dir "$1"
    local d
    while IFS= read -r d; do
        echo 0 >"$d/cgroup.procs"
    done <"$CGFILE"
    # --cgroup: the cgroup namespace is rooted at the cgroups just joined, so
    #   the hierarchies mounted inside (and systemd's "/") are .../$CG_NAME.
    # --propagation private: nothing mounted inside shows up on the host.
    # --mount-proc: a /proc of the new PID namespace.
    local netns=()
    if [[ -n "${RK_SYSTEMD_NETNS:-}" ]]; then
        [[ -e "/run/netns/$RK_SYSTEMD_NETNS" ]] || die "no network namespace /run/netns/$RK_SYSTEMD_NETNS"
        netns=(nsenter "--net=/run/netns/$RK_SYSTEMD_NETNS" --)
    fi
    exec "${netns[@]}" unshare --cgroup --pid --mount --uts --ipc --fork --propagation private --mount-proc \
        "$SELF" __init "$DIR"
}

# PID 1 of the new namespaces: prepare the mount namespace, exec systemd.
cmd___init() {
    resolve_dir "$1"
    local mnt fstype root opts path f i
    # 1. Drop this namespace's copies of mounts it must not pin: the host's
    #    tmpfs/overlay/nsfs mounts (pod volumes of other kubelets under /tmp,
    #    container rootfs of the project's containerd, network namespaces
    #    under /run/netns). Keeps /, /proc, /sys, /dev, disk filesystems and
    #    whatever DIR lives on. Deepest first.
    local drop=()
    while read -r mnt fstype root; do
        case "$mnt" in
            / | /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | /mnt/sandboxing/*) continue ;;
        esac
        [[ "$DIR/" == "$mnt/"* ]] && continue
        case "$fstype" in
            tmpfs | overlay | nsfs | proc | cgroup | cgroup2 | fuse.* | squashfs) ;;
            *) [[ "$root" == / ]] && continue ;; # a whole disk filesystem: keep
        esac
        drop+=("$mnt")
    done < <(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") break; print $5, $(i+1), $4 }' /proc/self/mountinfo | sort -r -k1,1)
    # umount2(MNT_DETACH) straight from python: umount(8) re-reads mountinfo
    # for every target, ~2 s for the ~1000 leftover pod-volume tmpfs under /tmp
    # here (4 s with one umount process each); this takes ~50 ms.
    # (mountinfo escapes blanks as \040: unicode_escape undoes it.)
    ((${#drop[@]} == 0)) || printf '%s\n' "${drop[@]}" | python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
for p in sys.stdin.read().splitlines():
    libc.umount2(p.encode().decode("unicode_escape").encode(), 2)
'
    # 2. Private /run: /run/systemd/{private,system,transient}, containerd's
    #    /run/containerd, runc's state and /run/netns stay inside.
    mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
    mkdir -p /run/lock
    ln -s /dev/shm /run/shm
    # 2b. In a network namespace of its own: that namespace's sysfs (its /sys/class/net), before the cgroups go
    #     under it. The folders of RK_SYSTEMD_PRIVATE, and the host name.
    if [[ -n "${RK_SYSTEMD_NETNS:-}" ]]; then
        mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
    fi
    local p
    for p in ${RK_SYSTEMD_PRIVATE:-}; do
        [[ "$p" == /?* ]] || { echo "RK_SYSTEMD_PRIVATE: $p is not an absolute path" >&2; exit 1; }
        mkdir -p "$DIR/root$p" "$p"
        mount --bind "$DIR/root$p" "$p"
    done
    # (systemd sets the host name from /etc/hostname as it boots)
    if [[ -n "${RK_SYSTEMD_HOSTNAME:-}" ]]; then
        echo "$RK_SYSTEMD_HOSTNAME" >"$DIR/hostname"
        mount --bind "$DIR/hostname" /etc/hostname
        hostname "$RK_SYSTEMD_HOSTNAME"
    fi
    if [[ -n "${RK_SYSTEMD_HOSTS:-}" ]]; then
        { cat /etc/hosts; printf '%s\n' "$RK_SYSTEMD_HOSTS"; } >"$DIR/hosts"
        mount --bind "$DIR/hosts" /etc/hosts
    fi
    # 3. The cgroup hierarchies again, seen through the cgroup namespace: each
    #    is rooted at .../$CG_NAME of the host.
    mount -t tmpfs -o mode=755,nosuid,nodev,noexec cgroup /sys/fs/cgroup
    while read -r mnt opts path; do
        mkdir -p "$mnt"
        if [[ "$opts" == cgroup2 ]]; then
            mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$mnt"
        else
            mount -t cgroup -o "nosuid,nodev,noexec,$opts" cgroup "$mnt"
        fi
    done <"$HIERFILE"
    # 4. systemd's console. PID 1 replaces its stdio with /dev/null and logs to
    #    /dev/console (the host's serial console otherwise), reopening it for
    #    every message, and only if it is a terminal (a file or FIFO bound
    #    there gets nothing). So: a pty, its slave bound over /dev/console, a
    #    small python3 loop appending the master side to $SDLOG. The loop is a
    #    child of PID 1 in the PID namespace, so it dies with systemd.
    python3 -c '
import os, sys, tty
master, slave = os.openpty()
tty.setraw(slave)                     # no \r\n translation
with open("/run/rk-systemd-console", "w") as f:
    f.write(os.ttyname(slave))
log = open(sys.argv[1], "ab", buffering=0)
os.closerange(0, 3)
while True:
    try:
        data = os.read(master, 65536)
    except OSError:
        break
    if not data:
        break
    log.write(data.replace(b"\r", b""))  # systemd resets the tty: \r\n
' "$SDLOG" &
    for ((i = 0; i < 200; i++)); do
        [[ -s /run/rk-systemd-console ]] && break
        sleep 0.01
    done
    mount --bind "$(cat /run/rk-systemd-console)" /dev/console
    # 5. Global knobs PID 1 systemd "bumps" at boot (fs.* are not namespaced,
    #    net.unix.max_dgram_qlen is per network namespace and we share the
    #    host's): read-only for this namespace only. The rest of /proc/sys
    #    stays writable for what runs inside (CNI, kubelet). /sys read-only
    #    (as in a container); the cgroup mounts under it stay writable.
    for f in /proc/sys/fs/file-max /proc/sys/fs/nr_open /proc/sys/net/unix/max_dgram_qlen; do
        mount --bind "$f" "$f" && mount -o remount,bind,ro "$f" "$f"
    done
    mount -o remount,bind,ro /sys
    # systemd opens /etc/machine-id O_RDWR|O_CREAT (it writes only when the id
    # is missing): read-only here. It also does KDSIGACCEPT on /dev/tty0 (the
    # host's VT: keyboard-request signal): /dev/null there.
    mount --bind /etc/machine-id /etc/machine-id && mount -o remount,bind,ro /etc/machine-id /etc/machine-id
    mount --bind /dev/null /dev/tty0
    # 6. systemd as PID 1: container mode ($container), only our unit folder.
    #    No generators (fstab, getty, sysv for /etc/init.d/*: they would
    #    only write units to /run nobody loads, and log to the host's kmsg).
    mkdir -p "$DIR/generators"
    exec env -i container=rk-systemd PATH=/usr/sbin:/usr/bin:/sbin:/bin SYSTEMD_UNIT_PATH="$UNITDIR" \
        SYSTEMD_GENERATOR_PATH="$DIR/generators" SYSTEMD_ENVIRONMENT_GENERATOR_PATH="$DIR/generators" \
        "$SYSTEMD_BIN" --system --unit=rk-systemd.target --log-target=console \
        --log-level="$LOG_LEVEL" --show-status=no
}

# --------------------------------------------------------------------------
# exec
# --------------------------------------------------------------------------
cmd_exec() {
    resolve_dir "${1:-}"
    shift
    (($#)) || usage
    local pid
    pid="$(running_pid)" || die "no systemd running for $DIR (run: $0 start $DIR)"
    # Join the namespace's root cgroups first (nsenter does not move the
    # process): otherwise CMD stays in the caller's cgroups, outside the
    # cgroup namespace, and its /proc/self/cgroup reads "/.." everywhere.
    local d
    while IFS= read -r d; do
        echo 0 >"$d/cgroup.procs" || warn "could not join $d"
    done <"$CGFILE"
    # -m -p -C -u -i -n: all of systemd's namespaces (the network one is the host's unless RK_SYSTEMD_NETNS).
    # --wd: keep the working directory (setns to a mount namespace resets it to /).
    exec nsenter -t "$pid" -m -p -C -u -i -n --wd="$PWD" -- "$@"
}

# --------------------------------------------------------------------------
# stop
# --------------------------------------------------------------------------
# cleanup_dead: after systemd is gone, remove its cgroups and state files.
cleanup_dead() {
    local upid
    if [[ -f "$UNSHARE_PIDFILE" ]]; then
        upid="$(tr -dc 0-9 <"$UNSHARE_PIDFILE")"
        if [[ -n "$upid" ]] && [[ "$(tr '\0' ' ' </proc/"$upid"/cmdline 2>/dev/null)" == *"__host $DIR"* || "$(tr '\0' ' ' </proc/"$upid"/cmdline 2>/dev/null)" == *"unshare "*"__init $DIR"* ]]; then
            kill -KILL "$upid" 2>/dev/null || true
        fi
    fi
    remove_cgroups || return 1
    rm -f "$PIDFILE" "$UNSHARE_PIDFILE" "$HIERFILE"
}

cmd_stop() {
    resolve_dir "$1"
    [[ -d "$DIR" ]] || { log "nothing to stop ($DIR does not exist)"; return 0; }
    lock
    local pid i
    if pid="$(running_pid)"; then
        # SIGKILL to the PID namespace's init kills every process in it (and in
        # the containers' nested PID namespaces); the mount namespace, with all
        # mounts made inside (overlay rootfs, /run tmpfs), goes with its last process.
        log "stopping systemd pid $pid"
        kill -KILL "$pid"
        for ((i = 0; i < 100; i++)); do
            [[ -d /proc/$pid ]] || break
            sleep 0.05
        done
        [[ -d /proc/$pid ]] && warn "systemd pid $pid still present after 5 s"
    fi
    cleanup_dead || die "cleanup incomplete"
    # Host-side leftovers of pods run by `containerd` (the network namespace is
    # the host's): the CNI bridge and host-local IPAM/result files. The pods'
    # network namespaces (/run/netns inside) and veths went with the namespace.
    # (Not removed: portmap iptables chains, if a pod used hostPort.)
    if [[ -d "$DIR/containerd" ]]; then
        local ipn=(ip)
        [[ -z "${RK_SYSTEMD_NETNS:-}" ]] || ipn=(ip -n "$RK_SYSTEMD_NETNS")
        if [[ ( -z "${RK_SYSTEMD_NETNS:-}" || -e "/run/netns/$RK_SYSTEMD_NETNS" ) ]] &&
            "${ipn[@]}" link show "$CNI_BRIDGE" >/dev/null 2>&1; then
            "${ipn[@]}" link delete "$CNI_BRIDGE" || warn "could not delete bridge $CNI_BRIDGE"
        fi
        rm -rf "/var/lib/cni/networks/$CNI_NETWORK"
        rm -f /var/lib/cni/results/"$CNI_NETWORK"-*
    fi
    log "stopped; cgroups removed"
}

# --------------------------------------------------------------------------
# containerd: a second containerd (the project's, 1.6 or 2.3) inside the
# namespace with the systemd cgroup driver, as the transient service
# rk-containerd.service (Delegate=yes, KillMode=process, like upstream's
# containerd.service). Own root/state/sockets/config/log under
# DIR/containerd; the config follows scripts/node-setup.sh except
# SystemdCgroup = true and its own CNI network (bridge $CNI_BRIDGE,
# $CNI_SUBNET, so it cannot clash with the project's cni0/10.88.0.0/16).
# Prints the socket path. Idempotent.
# --------------------------------------------------------------------------
cmd_containerd() {
    resolve_dir "$1"
    local pid cdir sock deadline t0 state
    pid="$(running_pid)" || die "no systemd running for $DIR (run: $0 start $DIR)"
    t0=$(date +%s%N)
    # The programs of the project's containerd (scripts/node-setup.sh links them into $RKUBELET_WORKDIR/bin: 1.6
    # or 2.3), else Debian's. containerd 2 migrates this version 2 file on load.
    local bindir=/usr/bin
    if [[ -x "${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}/bin/containerd" ]]; then
        bindir="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}/bin"
    fi
    PATH="$bindir:$PATH"
    cdir="$DIR/containerd"
    sock="$cdir/containerd.sock"
    ((${#sock} < 100)) || die "socket path $sock too long for a unix socket; use a shorter DIR"
    state="$(in_ns "$pid" systemctl is-active rk-containerd.service 2>/dev/null || true)"
    if [[ "$state" == active ]] && timeout 5 ctr -a "$sock" version >/dev/null 2>&1; then
        log "containerd already answering on $sock"
        echo "$sock"
        return 0
    fi
    mkdir -p "$cdir"/{root,state,cni/net.d}
    chmod 0711 "$cdir/root" "$cdir/state"
    cat >"$cdir/config.toml" <<TOML
# Generated by scripts/lib/systemd-ns.sh (see scripts/node-setup.sh for why each setting)
version = 2
root = "$cdir/root"
state = "$cdir/state"
oom_score = 0

[grpc]
  address = "$sock"

[ttrpc]
  address = "$sock.ttrpc"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "${RK_SYSTEMD_SANDBOX_IMAGE:-localhost/pause:1}"
    # (the runtime-v1 knob; the runc v2 option below is the one that counts)
    systemd_cgroup = false
    disable_apparmor = true
    enable_selinux = false
    disable_hugetlb_controller = true
    tolerate_missing_hugetlb_controller = true
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "${RKUBELET_SNAPSHOTTER:-overlayfs}"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          # the systemd cgroup driver: runc asks systemd (D-Bus, /run/systemd/private)
          # for a scope per container, under the slice named in the cgroup path
          SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$cdir/cni/net.d"
      max_conf_num = 1
TOML
    cat >"$cdir/cni/net.d/10-$CNI_NETWORK.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$CNI_SUBNET" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
JSON
    rm -f "$sock" "$sock.ttrpc"
    in_ns "$pid" systemctl reset-failed rk-containerd.service 2>/dev/null || true
    # PATH: containerd finds runc (/usr/sbin) and its shim through it.
    in_ns "$pid" systemd-run --quiet --unit=rk-containerd --description="containerd for $DIR" \
        -p Delegate=yes -p KillMode=process -p LimitNOFILE=1048576 \
        -p StandardOutput="append:$cdir/containerd.log" -p StandardError="append:$cdir/containerd.log" \
        --setenv=PATH="$PATH" \
        "$bindir/containerd" --config "$cdir/config.toml" >&2 ||
        die "systemd-run of containerd failed"
    deadline=$(($(date +%s) + 30))
    until timeout 5 ctr -a "$sock" version >/dev/null 2>&1; do
        state="$(in_ns "$pid" systemctl is-active rk-containerd.service 2>/dev/null || true)"
        if [[ "$state" != active && "$state" != activating ]] || (($(date +%s) >= deadline)); then
            tail -n 20 "$cdir/containerd.log" >&2 || true
            die "containerd did not answer on $sock (unit state '$state'; see $cdir/containerd.log)"
        fi
        sleep 0.1
    done
    log "containerd answering on $sock ($(( ($(date +%s%N) - t0) / 1000000 )) ms; log $cdir/containerd.log)"
    echo "$sock"
}

# The system bus (Debian's dbus.socket and dbus.service, so systemd joins the bus as upstream's kubelet expects to
# find it there) and systemd-logind (a transient unit of that name: the kubelet reloads it with KillUnit), with a
# stand-in poweroff.target (empty: logind's shutdown "completes" without taking the namespace down, then logind
# announces PrepareForShutdown(false)) and a tmpfs over /etc/systemd inside, so logind's drop-ins never reach the host.
cmd_logind() {
    resolve_dir "$1"
    local pid t0
    pid="$(running_pid)" || die "no systemd running for $DIR (run: $0 start $DIR)"
    t0=$(date +%s%N)
    if [[ "$(in_ns "$pid" systemctl is-active systemd-logind.service 2>/dev/null || true)" == active ]]; then
        log "logind already running"
        return 0
    fi
    cp /lib/systemd/system/dbus.socket /lib/systemd/system/dbus.service "$DIR/units/"
    printf '[Unit]\nDescription=Power-Off (stand-in)\nDefaultDependencies=no\n' >"$DIR/units/poweroff.target"
    in_ns "$pid" mount -t tmpfs -o mode=0755 rk-etc-systemd /etc/systemd
    in_ns "$pid" systemctl daemon-reload
    in_ns "$pid" systemctl start dbus.socket dbus.service
    in_ns "$pid" systemd-run --quiet --unit=systemd-logind.service /lib/systemd/systemd-logind
    local deadline=$(( $(date +%s) + 10 ))
    until in_ns "$pid" busctl get-property org.freedesktop.login1 /org/freedesktop/login1 \
            org.freedesktop.login1.Manager InhibitDelayMaxUSec >/dev/null 2>&1; do
        (( $(date +%s) < deadline )) || die "logind did not answer on the system bus within 10 s"
        sleep 0.05
    done
    log "dbus and logind running ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
}

cmd_status() {
    resolve_dir "$1"
    local pid
    pid="$(running_pid)" || { echo "not running"; return 3; }
    in_ns "$pid" systemctl status --no-pager
}

case "${1:-}" in
    start) shift; cmd_start "$@" ;;
    exec) shift; cmd_exec "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status "$@" ;;
    containerd) shift; cmd_containerd "$@" ;;
    logind) shift; cmd_logind "$@" ;;
    __host) shift; cmd___host "$@" ;;
    __init) shift; cmd___init "$@" ;;
    *) usage ;;
esac
