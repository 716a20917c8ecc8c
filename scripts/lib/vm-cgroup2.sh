#!/usr/bin/env bash
# scripts/lib/vm-cgroup2.sh COMMAND DIR [ARGS...]
#
# A throw-away qemu virtual machine whose kernel (Debian's
# linux-image-*-amd64, booted with cgroup_no_v1=all) has a pure cgroup v2
# hierarchy with the cpu, cpuset, memory, pids, io, hugetlb, rdma and misc
# controllers enabled at the root. For testing the cgroup v2 code of the
# kubelet on this machine, whose own cgroups are a v1/v2 hybrid with
# cpu/memory/pids bound to v1. On this machine it runs under TCG (software
# emulation): /dev/kvm is PVM's, which cannot run a stock kernel. Slow, but
# real: see scripts/lib/vm-cgroup2.md for findings and timings.
#
# The VM runs the HOST's programs: its root is an overlay of the host's "/"
# (9p, read-only) with a tmpfs on top, so /usr (containerd, runc, CNI plugins,
# busybox, bash), /work and /tmp (the project's built binaries) look as on the
# host, and everything written inside stays in the VM's RAM, except in DIR
# (and RK_VM_SHARES), which is shared read-write at the same path. Fresh
# tmpfs on /run, /var/lib/containerd, /var/lib/kubelet, /var/lib/cni,
# /var/log (containerd's overlayfs snapshots cannot live on the overlay root).
# Nothing runs in it but busybox init, a command agent and what you start.
#
#   prepare         install qemu-system-x86 (apt) when missing; download
#                   Debian's kernel package (apt-get download, extracted
#                   with dpkg-deb into RK_VM_CACHE, not installed), make its
#                   modules.dep (busybox depmod) and the initramfs. Done by
#                   start when needed; ~15 s the first time, then nothing.
#   start DIR       boot the VM (idempotent), wait until its agent is ready,
#                   print qemu's pid. ~17-22 s with TCG (busy host).
#   exec DIR CMD..  run CMD inside (bash, as root, in the caller's working
#                   directory when it exists inside, else /), print its stdout
#                   and stderr (after it ended, not streamed), exit with its
#                   status (124 when RK_VM_EXEC_TIMEOUT passed). No stdin, no
#                   tty; the environment is the VM's (use `env VAR=x CMD`).
#                   Concurrent execs are fine. ~0.5 s for `true` (TCG).
#   containerd DIR [IMAGE.oci.tar...]
#                   start Debian's containerd inside (idempotent; cgroupfs
#                   driver: SystemdCgroup = false, cgroup v2; hugetlb limits
#                   of containers applied (disable_hugetlb_controller = false); root
#                   /var/lib/containerd, socket /run/containerd/containerd.sock,
#                   both the VM's own; log /var/log/containerd.log; CNI bridge
#                   cni0 10.88.0.0/16 inside), then `ctr -n k8s.io images
#                   import` each tar (e.g. /var/lib/rkubelet-dev/images/busybox.oci.tar);
#                   prints the socket path. ~5-10 s. The socket is only
#                   reachable inside: use exec ctr/crictl.
#   status DIR      "running (pid N)" or "not running" (exit 3)
#   stop DIR        kill qemu (everything inside is gone with it), remove the
#                   FIFOs, pid file and job folders; console.log stays. <2 s.
#
# Environment knobs:
#   RK_VM_MEM            guest RAM in MiB (default 1536; tmpfs live in it)
#   RK_VM_CPUS           vCPUs (default: host's nproc)
#   RK_VM_HOSTFWD        space-separated qemu user-net forwards, e.g.
#                        "tcp:127.0.0.1:18255-:10255" (host 18255 -> guest 10255)
#   RK_VM_SHARES         space-separated host folders shared read-write at the
#                        same path inside (DIR always is); "PATH:ro" read-only
#   RK_VM_TMPFS          space-separated extra guest paths to mount a tmpfs on
#   RK_VM_CMDLINE        extra kernel command line
#   RK_VM_CPU            qemu -cpu model (default host with kvm, qemu64 with
#                        tcg: faster under TCG than max or Skylake-Client here)
#   RK_VM_TB_SIZE        TCG translation cache in MiB (default 256)
#   RK_VM_ROOT_CACHE     9p cache mode of the host's "/" inside: none (default:
#                        host changes, e.g. a rebuilt binary, show at once) or
#                        loose (guest page cache; files read again are not
#                        re-fetched, but host changes made after the first
#                        read may not be seen)
#   RK_VM_ACCEL          kvm | tcg | auto (default auto: tcg when /dev/kvm is
#                        PVM's (module kvm_pvm, as on this machine: it cannot
#                        run a stock kernel, see the .md), else kvm if /dev/kvm
#                        exists, else tcg). tcg is multi-threaded TCG
#                        (software emulation: slow, see the .md).
#   RK_VM_START_TIMEOUT  seconds (default 60 with kvm, 300 with tcg)
#   RK_VM_EXEC_TIMEOUT   seconds an exec waits for its command (default 600)
#   RK_VM_CACHE          kernel/initramfs cache (default /var/cache/rk-vm-cgroup2)
#   RK_VM_KERNEL_PKG     e.g. linux-image-6.1.0-57-amd64 (default: what
#                        linux-image-amd64 depends on; the generic flavour is
#                        needed: -cloud-amd64 has no 9p)
#
# Files in DIR: qemu.pid, qemu.log (qemu's stderr), console.log (the guest's
# ttyS0: kernel, init and agent messages), ctl.in/ctl.out (FIFOs of the
# virtio-serial port "rk.ctl"), guest/ (setup.sh, agent.sh, ready, made by
# start), jobs/ID/ (cmd, out, err, rc of an exec; removed after it).
#
# How exec works: the host writes DIR/jobs/ID/cmd, then the line "ID" into
# the FIFO DIR/ctl.in (qemu's `-chardev pipe`), which the guest agent reads
# from the virtio-serial port; the agent runs `bash cmd >out 2>err` in the
# background and renames rc.tmp to rc when it ends; the host polls for rc
# (DIR is a 9p share, so the files are the same on both sides).
#
# Findings: see scripts/lib/vm-cgroup2.md.
#
# Example:
#   D=/tmp/rkvm; scripts/lib/vm-cgroup2.sh start $D
#   scripts/lib/vm-cgroup2.sh exec $D cat /sys/fs/cgroup/cgroup.subtree_control
#   scripts/lib/vm-cgroup2.sh exec $D sh -c 'mkdir /sys/fs/cgroup/t && echo 64M >/sys/fs/cgroup/t/memory.max'
#   scripts/lib/vm-cgroup2.sh stop $D
set -euo pipefail

RK_PROG="vm-cgroup2"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

log() { printf '[%s] %s\n' "$RK_PROG" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$RK_PROG" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$RK_PROG" "$*" >&2; exit 1; }

SELF="$(readlink -f "${BASH_SOURCE[0]}")"
CACHE="${RK_VM_CACHE:-/var/cache/rk-vm-cgroup2}"
MEM="${RK_VM_MEM:-1536}"
CPUS="${RK_VM_CPUS:-$(nproc)}"
EXEC_TIMEOUT="${RK_VM_EXEC_TIMEOUT:-600}"
ROOT_CACHE="${RK_VM_ROOT_CACHE:-none}"
# tmpfs mounted inside over the overlay root (see the header).
GUEST_TMPFS="/run /var/lib/containerd /var/lib/kubelet /var/lib/cni /var/log ${RK_VM_TMPFS:-}"
# Modules the initramfs loads (with their dependencies) to mount the 9p root
# and talk over virtio-serial. Everything else is loaded from the extracted
# package after the switch to the real root (busybox modprobe).
INITRD_MODULES="virtio_pci 9pnet_virtio 9p overlay virtio_console"

usage() {
    sed -n '2,/^set -euo/p' "$SELF" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# pick_accel: sets ACCEL_ARGS (qemu options) and ACCEL (kvm|tcg).
pick_accel() {
    ACCEL="${RK_VM_ACCEL:-auto}"
    if [[ "$ACCEL" == auto ]]; then
        if [[ -d /sys/module/kvm_pvm ]]; then
            ACCEL=tcg # PVM runs only PVM-enabled guest kernels; Debian's hangs
        elif [[ -c /dev/kvm && -w /dev/kvm ]]; then
            ACCEL=kvm
        else
            ACCEL=tcg
        fi
    fi
    case "$ACCEL" in
        kvm) ACCEL_ARGS=(-machine q35,accel=kvm -cpu "${RK_VM_CPU:-host}") ;;
        tcg) ACCEL_ARGS=(-machine q35 -accel "tcg,thread=multi,tb-size=${RK_VM_TB_SIZE:-256}" -cpu "${RK_VM_CPU:-qemu64}") ;;
        *) die "RK_VM_ACCEL=$ACCEL: want kvm, tcg or auto" ;;
    esac
    local def=60
    [[ "$ACCEL" == tcg ]] && def=300
    START_TIMEOUT="${RK_VM_START_TIMEOUT:-$def}"
}

# resolve_dir DIR -> sets DIR (absolute, no trailing /) and the state file names.
resolve_dir() {
    [[ -n "${1:-}" ]] || usage
    DIR="$1"
    [[ "$DIR" == /* ]] || DIR="$PWD/$DIR"
    DIR="${DIR%/}"
    [[ -n "$DIR" && "$DIR" != "/" ]] || die "refusing to use / as DIR"
    [[ "$DIR" != *[[:space:],]* ]] || die "DIR must not contain spaces or commas (qemu option syntax): $DIR"
    PIDFILE="$DIR/qemu.pid"
    QLOG="$DIR/qemu.log"
    CONSOLE="$DIR/console.log"
    CTL="$DIR/ctl" # qemu -chardev pipe: FIFOs $CTL.in (host -> guest) and $CTL.out
    GDIR="$DIR/guest"
    JOBS="$DIR/jobs"
    LOCKFILE="$DIR/.lock"
}

lock() {
    mkdir -p "$DIR"
    exec 9>"$LOCKFILE"
    flock -w 120 9 || die "timed out waiting for $LOCKFILE"
}

# running_pid: prints qemu's pid when the one recorded in DIR is alive and ours.
running_pid() {
    local pid
    [[ -f "$PIDFILE" ]] || return 1
    pid="$(tr -dc 0-9 <"$PIDFILE")"
    [[ -n "$pid" && -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -qF -- "rk.dir=$DIR " || return 1
    echo "$pid"
}

# --------------------------------------------------------------------------
# prepare: qemu, kernel package, modules.dep, initramfs
# --------------------------------------------------------------------------
ensure_qemu() {
    command -v qemu-system-x86_64 >/dev/null && return 0
    log "installing qemu-system-x86 (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86 >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86 >&2; } ||
        die "could not install qemu-system-x86"
}

# kernel_pkg: the kernel package to use (sets KPKG, KVER, KDIR).
kernel_pkg() {
    KPKG="${RK_VM_KERNEL_PKG:-}"
    if [[ -z "$KPKG" && -L "$CACHE/current" && -f "$CACHE/current/.done" ]]; then
        KPKG="$(basename "$(readlink "$CACHE/current")")"
    fi
    if [[ -z "$KPKG" ]]; then
        KPKG="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')"
        if [[ -z "$KPKG" ]]; then
            apt-get update -q >&2 || true
            KPKG="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')"
        fi
        [[ -n "$KPKG" ]] || die "cannot tell which package linux-image-amd64 depends on (set RK_VM_KERNEL_PKG)"
    fi
    [[ "$KPKG" == linux-image-*-amd64 && "$KPKG" != *cloud* ]] ||
        die "RK_VM_KERNEL_PKG=$KPKG: need a generic linux-image-VERSION-amd64 (the cloud flavour has no 9p)"
    KVER="${KPKG#linux-image-}"
    KDIR="$CACHE/$KPKG"
}

ensure_kernel() {
    kernel_pkg
    [[ -f "$KDIR/.done" ]] && return 0
    log "fetching $KPKG (apt-get download + dpkg-deb -x into $KDIR; nothing is installed)"
    local tmp
    mkdir -p "$CACHE"
    tmp="$(mktemp -d "$CACHE/.dl.XXXXXX")"
    chmod 0755 "$tmp" # apt's _apt user downloads into it
    (cd "$tmp" && apt-get download -q "$KPKG" >&2) ||
        { apt-get update -q >&2 && (cd "$tmp" && apt-get download -q "$KPKG" >&2); } ||
        { rm -rf "$tmp"; die "apt-get download $KPKG failed"; }
    rm -rf "$KDIR"
    mkdir -p "$KDIR"
    dpkg-deb -x "$tmp"/"$KPKG"_*.deb "$KDIR"
    rm -rf "$tmp"
    [[ -f "$KDIR/boot/vmlinuz-$KVER" ]] || die "no $KDIR/boot/vmlinuz-$KVER in $KPKG"
    # No kmod on the host: busybox makes modules.dep/.alias/.symbols (~6 s).
    busybox depmod -b "$KDIR" "$KVER"
    touch "$KDIR/.done"
    ln -sfn "$KPKG" "$CACHE/current"
}

# mod_deps NAME...: module files (relative to lib/modules/KVER), dependencies
# first, each once.
mod_deps() {
    local dep="$KDIR/lib/modules/$KVER/modules.dep"
    local -A seen=()
    local -a out=()
    visit() {
        local path line d
        path="$(awk -F: -v m="$1" '{ n = $1; sub(".*/", "", n); sub("\\.ko.*$", "", n); gsub("-", "_", n) } n == m { print $1; exit }' "$dep")"
        [[ -n "$path" ]] || die "module $1 not found in $dep"
        [[ -n "${seen[$path]:-}" ]] && return 0
        seen[$path]=1
        line="$(grep -m1 "^$path:" "$dep" | cut -d: -f2-)"
        for d in $line; do
            visit "$(basename "$d" | sed -e 's/\.ko.*$//' -e 's/-/_/g')"
        done
        out+=("$path")
    }
    local m
    for m in "$@"; do visit "$m"; done
    printf '%s\n' "${out[@]}"
}

ensure_initramfs() {
    INITRD="$KDIR/initramfs.cpio"
    [[ -f "$INITRD" && "$INITRD" -nt "$SELF" ]] && return 0
    log "building $INITRD"
    local root m
    root="$(mktemp -d "$CACHE/.initrd.XXXXXX")"
    mkdir -p "$root"/{bin,modules,proc,sys,dev,host,upper,newroot}
    cp /usr/bin/busybox "$root/bin/busybox" # busybox-static: no libraries needed
    file -L "$root/bin/busybox" 2>/dev/null | grep -q 'statically linked' || [[ ! -x /usr/bin/file ]] ||
        die "/usr/bin/busybox is not static (install busybox-static)"
    : >"$root/modules/order"
    while IFS= read -r m; do
        [[ "$m" == *.ko ]] || die "compressed module $m: not supported by this script"
        cp "$KDIR/lib/modules/$KVER/$m" "$root/modules/"
        basename "$m" >>"$root/modules/order"
    done < <(mod_deps $INITRD_MODULES)
    cat >"$root/init" <<'INIT'
#!/bin/busybox sh
# /init of the initramfs made by scripts/lib/vm-cgroup2.sh: load the virtio,
# 9p and overlay modules, mount the host's "/" (9p tag hostroot, read-only)
# under a tmpfs overlay as the new root, DIR (tag rkstate) read-write at its
# own path, then switch_root to busybox init with DIR/guest/inittab.
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() { echo "rk-vm initramfs: $*" >/dev/console; sleep 1; poweroff -f; }
for m in $(cat /modules/order); do insmod "/modules/$m" || fail "insmod $m"; done
DIR= CACHE=none
for a in $(cat /proc/cmdline); do
    case "$a" in rk.dir=*) DIR="${a#rk.dir=}" ;; rk.rootcache=*) CACHE="${a#rk.rootcache=}" ;; esac
done
[ -n "$DIR" ] || fail "no rk.dir= on the kernel command line"
O=trans=virtio,version=9p2000.L,msize=524288
mount -t 9p -o "$O,cache=$CACHE,ro" hostroot /host || fail "mount 9p hostroot"
mount -t tmpfs -o mode=0755 rkupper /upper
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/host,upperdir=/upper/u,workdir=/upper/w rkroot /newroot || fail "mount overlay root"
mkdir -p "/newroot$DIR"
mount -t 9p -o "$O,cache=mmap" rkstate "/newroot$DIR" || fail "mount 9p rkstate at $DIR"
[ -f "/newroot$DIR/guest/inittab" ] || fail "no $DIR/guest/inittab"
cp "/newroot$DIR/guest/inittab" /newroot/etc/inittab
mount --move /dev /newroot/dev
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
exec switch_root /newroot /usr/bin/busybox init
INIT
    chmod 0755 "$root/init"
    (cd "$root" && find . | busybox cpio -o -H newc >"$INITRD.tmp" 2>/dev/null)
    mv "$INITRD.tmp" "$INITRD"
    rm -rf "$root"
}

cmd_prepare() {
    ensure_qemu
    ensure_kernel
    ensure_initramfs
    pick_accel
    log "ready ($ACCEL): kernel $KDIR/boot/vmlinuz-$KVER, initramfs $INITRD"
}

# --------------------------------------------------------------------------
# start
# --------------------------------------------------------------------------
# parse_shares: SHARE_PATHS[i], SHARE_MODES[i] (rw|ro) from RK_VM_SHARES.
parse_shares() {
    SHARE_PATHS=()
    SHARE_MODES=()
    local s p mode
    for s in ${RK_VM_SHARES:-}; do
        p="$s" mode=rw
        if [[ "$s" == *:ro ]]; then p="${s%:ro}" mode=ro; fi
        p="$(readlink -f "$p")" || die "RK_VM_SHARES: $s does not exist"
        [[ -d "$p" ]] || die "RK_VM_SHARES: $p is not a folder"
        [[ "$p" != *[[:space:],]* ]] || die "RK_VM_SHARES: no spaces or commas in paths ($p)"
        SHARE_PATHS+=("$p")
        SHARE_MODES+=("$mode")
    done
}

# write_guest_files: DIR/guest/{inittab,setup.sh,agent.sh}, run inside by
# busybox init from the 9p share (so they are the host's files).
write_guest_files() {
    mkdir -p "$GDIR" "$JOBS"
    rm -f "$GDIR/ready" "$GDIR/setup.failed"
    cat >"$GDIR/inittab" <<EOF
# busybox init's table (written by scripts/lib/vm-cgroup2.sh start)
::sysinit:/usr/bin/bash $GDIR/setup.sh
::respawn:/usr/bin/bash $GDIR/agent.sh
::shutdown:/usr/bin/busybox sync
EOF
    local i shares="" tmpfs_list
    for i in "${!SHARE_PATHS[@]}"; do
        shares+="rkshare$i ${SHARE_PATHS[$i]} ${SHARE_MODES[$i]}"$'\n'
    done
    {
        cat <<EOF
#!/usr/bin/env bash
# Guest setup, run once by busybox init (written by scripts/lib/vm-cgroup2.sh start).
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DIR=$(printf %q "$DIR")
GDIR=$(printf %q "$GDIR")
KVER=$(printf %q "$KVER")
KMODS=$(printf %q "$KDIR/lib/modules/$KVER")
TMPFS=$(printf %q "$GUEST_TMPFS")
SHARES=$(printf %q "$shares")
EOF
        cat <<'EOF'
fail() { echo "rk-vm setup: $*" >&2; echo "$*" >"$GDIR/setup.failed"; exit 1; }
t_up() { cut -d' ' -f1 /proc/uptime; }
hostname rk-vm
# Pseudo filesystems (proc, sys, dev came from the initramfs).
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev shm /dev/shm
mount -t mqueue mqueue /dev/mqueue 2>/dev/null || true
# The only cgroup hierarchy: cgroup2 (cgroup_no_v1=all on the command line).
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
for c in cpuset cpu io memory hugetlb pids rdma misc; do
    grep -qw "$c" /sys/fs/cgroup/cgroup.controllers && echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
for c in cpu memory pids; do
    grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control || fail "controller $c not enabled (cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers))"
done
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
# Writable, overlay-free places (containerd's overlayfs snapshots need a real upper fs).
for d in $TMPFS; do
    mkdir -p "$d" && mount -t tmpfs -o mode=0755 tmpfs "$d" || fail "tmpfs on $d"
done
mkdir -p /run/lock
# Extra shares.
while read -r tag path mode; do
    [[ -n "$tag" ]] || continue
    mkdir -p "$path"
    mount -t 9p -o "trans=virtio,version=9p2000.L,msize=524288,cache=mmap,$mode" "$tag" "$path" || fail "9p $tag on $path"
done <<<"$SHARES"
# Kernel modules of the extracted package; busybox stands in for kmod's
# modprobe (also for the kernel's own request_module).
mkdir -p "/lib/modules/$KVER"
mount --bind "$KMODS" "/lib/modules/$KVER" || fail "bind $KMODS"
[[ -e /usr/sbin/modprobe ]] || ln -s /usr/bin/busybox /usr/sbin/modprobe
[[ -e /usr/sbin/insmod ]] || ln -s /usr/bin/busybox /usr/sbin/insmod
[[ -e /usr/sbin/lsmod ]] || ln -s /usr/bin/busybox /usr/sbin/lsmod
echo /usr/sbin/modprobe >/proc/sys/kernel/modprobe
for m in virtio_net bridge br_netfilter veth nf_conntrack nf_nat nf_tables nft_chain_nat nft_compat xt_MASQUERADE xt_mark xt_comment xt_addrtype iptable_nat iptable_filter ip6table_filter ip6table_nat sch_htb vsock; do
    modprobe "$m" 2>/dev/null || echo "rk-vm setup: modprobe $m failed (ignored)" >&2
done
# Network: qemu user networking (10.0.2.2 is the host's loopback).
ip link set lo up
i=0
while [[ ! -e /sys/class/net/eth0 ]] && ((i++ < 50)); do sleep 0.02; done
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 ||
    echo "rk-vm setup: eth0 setup failed" >&2
echo "nameserver 10.0.2.3" >/etc/resolv.conf
echo 1 >/proc/sys/net/ipv4/ip_forward
echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || true
ulimit -n 1048576 2>/dev/null || true
echo "ready $(t_up)" >"$GDIR/ready.tmp" && mv "$GDIR/ready.tmp" "$GDIR/ready"
echo "rk-vm setup: ready after $(t_up) s of uptime" >&2
EOF
    } >"$GDIR/setup.sh"
    {
        cat <<EOF
#!/usr/bin/env bash
# Command agent (respawned by busybox init; written by scripts/lib/vm-cgroup2.sh start).
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
JOBS=$(printf %q "$JOBS")
EOF
        cat <<'EOF'
ulimit -n 1048576 2>/dev/null || true
port=
for n in /sys/class/virtio-ports/*/name; do
    [[ "$(cat "$n" 2>/dev/null)" == rk.ctl ]] && port="/dev/$(basename "$(dirname "$n")")"
done
[[ -c "$port" ]] || { echo "rk-vm agent: no virtio port rk.ctl" >&2; sleep 1; exit 1; }
exec 3<"$port"
# One line per job: its id (a folder name under $JOBS).
while IFS= read -r id <&3; do
    [[ "$id" =~ ^[A-Za-z0-9._-]+$ && -f "$JOBS/$id/cmd" ]] || { echo "rk-vm agent: bad job '$id'" >&2; continue; }
    (
        cd /
        j="$JOBS/$id"
        setsid bash "$j/cmd" </dev/null >"$j/out" 2>"$j/err" 3<&-
        echo $? >"$j/rc.tmp" && mv "$j/rc.tmp" "$j/rc"
    ) 3<&- &
done
echo "rk-vm agent: port closed" >&2
EOF
    } >"$GDIR/agent.sh"
}

cmd_start() {
    resolve_dir "$1"
    lock
    local pid t0 deadline i args
    t0=$(now_ms)
    if pid="$(running_pid)" && [[ -f "$GDIR/ready" ]]; then
        log "already running: qemu pid $pid (DIR $DIR)"
        echo "$pid"
        return 0
    fi
    [[ -n "${pid:-}" ]] && { warn "qemu $pid is running but not ready: restarting"; kill "$pid" 2>/dev/null || true; sleep 0.2; }
    ensure_qemu
    ensure_kernel
    ensure_initramfs
    pick_accel
    parse_shares
    cleanup_files
    write_guest_files
    rm -f "$CTL.in" "$CTL.out"
    mkfifo "$CTL.in" "$CTL.out"
    : >"$CONSOLE"
    args=(
        -name rk-vm-cgroup2 "${ACCEL_ARGS[@]}" -smp "$CPUS" -m "$MEM"
        -nodefaults -no-user-config -display none -no-reboot
        -kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$INITRD"
        -append "console=ttyS0 panic=-1 loglevel=4 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 rk.dir=$DIR rk.rootcache=$ROOT_CACHE ${RK_VM_CMDLINE:-}"
        -serial "file:$CONSOLE"
        # host "/" read-only (multidevs=remap: it spans many host filesystems)
        -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
        -device "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot"
        -fsdev "local,id=rkstate,path=$DIR,security_model=none,multidevs=remap"
        -device "virtio-9p-pci,fsdev=rkstate,mount_tag=rkstate"
        # control channel: FIFOs $CTL.in/.out <-> virtio-serial port rk.ctl
        -device virtio-serial-pci
        -chardev "pipe,id=rkctl,path=$CTL"
        -device "virtserialport,chardev=rkctl,name=rk.ctl"
        -device virtio-rng-pci
        -pidfile "$PIDFILE" -daemonize
    )
    for i in "${!SHARE_PATHS[@]}"; do
        args+=(-fsdev "local,id=rkshare$i,path=${SHARE_PATHS[$i]},security_model=none,multidevs=remap$([[ ${SHARE_MODES[$i]} == ro ]] && echo ,readonly=on)")
        args+=(-device "virtio-9p-pci,fsdev=rkshare$i,mount_tag=rkshare$i")
    done
    local net="user,id=net0,net=10.0.2.0/24" f
    for f in ${RK_VM_HOSTFWD:-}; do net+=",hostfwd=$f"; done
    args+=(-netdev "$net" -device "virtio-net-pci,netdev=net0")
    log "booting ($ACCEL, kernel $KVER, ${MEM} MiB, $CPUS vCPUs; console $CONSOLE)"
    # 9>&-: the daemonized qemu must not hold the lock.
    qemu-system-x86_64 "${args[@]}" </dev/null >"$QLOG" 2>&1 9>&- || { cat "$QLOG" >&2; die "qemu failed to start (see $QLOG)"; }
    pid="$(running_pid)" || die "qemu started but its pid file is missing"
    deadline=$(($(date +%s) + START_TIMEOUT))
    until [[ -f "$GDIR/ready" ]]; do
        if [[ -f "$GDIR/setup.failed" ]] || ! kill -0 "$pid" 2>/dev/null || (($(date +%s) >= deadline)); then
            tail -n 30 "$CONSOLE" >&2 || true
            kill "$pid" 2>/dev/null || true
            die "VM not ready (see $CONSOLE, $QLOG)"
        fi
        sleep 0.05
    done
    log "qemu pid $pid ready ($(($(now_ms) - t0)) ms; guest $(cut -d' ' -f2 "$GDIR/ready") s uptime)"
    echo "$pid"
}

# --------------------------------------------------------------------------
# exec
# --------------------------------------------------------------------------
cmd_exec() {
    resolve_dir "$1"
    shift
    (($# > 0)) || usage
    local pid id j deadline rc
    pid="$(running_pid)" || die "no VM running for $DIR (run: $0 start $DIR)"
    [[ -f "$GDIR/ready" ]] || die "VM for $DIR not ready"
    id="$(date +%s%N).$$.$RANDOM"
    j="$JOBS/$id"
    mkdir -p "$j"
    {
        printf '# job of scripts/lib/vm-cgroup2.sh exec\n'
        printf 'cd %q 2>/dev/null || cd /\n' "$PWD"
        printf 'exec'
        printf ' %q' "$@"
        printf '\n'
    } >"$j/cmd"
    # A line of < PIPE_BUF bytes is written atomically: concurrent execs do not
    # mix. qemu holds the FIFO open (O_RDWR), so this does not block while it runs.
    timeout 10 bash -c 'printf "%s\n" "$1" >"$2"' _ "$id" "$CTL.in" || { rm -rf "$j"; die "cannot write to $CTL.in"; }
    deadline=$(($(date +%s) + EXEC_TIMEOUT))
    until [[ -f "$j/rc" ]]; do
        if ! kill -0 "$pid" 2>/dev/null; then die "VM died (see $CONSOLE)"; fi
        if (($(date +%s) >= deadline)); then
            cat "$j/out" 2>/dev/null || true
            cat "$j/err" >&2 2>/dev/null || true
            warn "job $id still running after ${EXEC_TIMEOUT}s; left in $j"
            return 124
        fi
        sleep 0.01
    done
    cat "$j/out"
    cat "$j/err" >&2
    rc="$(cat "$j/rc")"
    rm -rf "$j"
    return "$rc"
}

# --------------------------------------------------------------------------
# stop / status
# --------------------------------------------------------------------------
cleanup_files() {
    rm -f "$PIDFILE" "$CTL.in" "$CTL.out"
    rm -rf "$JOBS"
    rm -f "$GDIR/ready" "$GDIR/setup.failed"
}

cmd_stop() {
    resolve_dir "$1"
    [[ -d "$DIR" ]] || { log "nothing to stop ($DIR does not exist)"; return 0; }
    lock
    local pid i
    if pid="$(running_pid)"; then
        log "stopping qemu pid $pid"
        kill -TERM "$pid"
        for ((i = 0; i < 250; i++)); do
            [[ -d /proc/$pid ]] || break
            sleep 0.02
        done
        if [[ -d /proc/$pid ]]; then
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.1
        fi
    fi
    cleanup_files
    log "stopped"
}

# --------------------------------------------------------------------------
# containerd: the project's containerd (1.6 or 2.3) inside the VM (config as in
# scripts/node-setup.sh, but cgroup v2 and the VM's own paths). Started
# setsid'd from an exec job, so it outlives that job.
# --------------------------------------------------------------------------
cmd_containerd() {
    resolve_dir "$1"
    shift
    local t
    local -a tars=()
    for t in "$@"; do
        t="$(readlink -f "$t")" && [[ -f "$t" ]] || die "no such image tar: $t"
        tars+=("$t")
    done
    mkdir -p "$GDIR"
    cat >"$GDIR/containerd.sh" <<'EOF'
#!/usr/bin/env bash
# Start containerd inside the VM (written by scripts/lib/vm-cgroup2.sh containerd).
set -euo pipefail
SOCK=/run/containerd/containerd.sock
if ! ctr -a $SOCK version >/dev/null 2>&1; then
    mkdir -p /run/containerd /var/lib/containerd /var/lib/cni/net.d
    cat >/run/containerd/config.toml <<'TOML'
# Generated by scripts/lib/vm-cgroup2.sh (see scripts/node-setup.sh for why each setting)
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0

[grpc]
  address = "/run/containerd/containerd.sock"

[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "localhost/pause:1"
    systemd_cgroup = false
    disable_apparmor = true
    enable_selinux = false
    restrict_oom_score_adj = true
    # The VM's cgroup v2 has hugetlb: containers get the huge page limits the kubelet sends (containerd 1.6
    # drops them by default).
    disable_hugetlb_controller = false
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          # cgroupfs driver: no systemd in the VM; runc writes the v2 files itself
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/var/lib/cni/net.d"
      max_conf_num = 1
TOML
    cat >/var/lib/cni/net.d/10-rk-vm.conflist <<'JSON'
{
  "cniVersion": "0.4.0",
  "name": "rk-vm",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.88.0.0/16" }]], "routes": [{ "dst": "0.0.0.0/0" }] }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
JSON
    setsid containerd --config /run/containerd/config.toml </dev/null >>/var/log/containerd.log 2>&1 &
    pid=$!
    for ((i = 0; i < 1200; i++)); do
        ctr -a $SOCK version >/dev/null 2>&1 && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    ctr -a $SOCK version >/dev/null 2>&1 || { tail -n 20 /var/log/containerd.log >&2; exit 1; }
fi
for t in "$@"; do
    ctr -a $SOCK -n k8s.io images import --all-platforms "$t" >/dev/null
done
echo $SOCK
EOF
    # The programs of the project's containerd (scripts/node-setup.sh links them into $RKUBELET_WORKDIR/bin: 1.6 or
    # 2.3; the VM sees the host's files), else Debian's. containerd 2 migrates the version 2 file above on load.
    local bindir="${RKUBELET_WORKDIR:-/var/lib/rkubelet-dev}/bin"
    if [[ -x "$bindir/containerd" ]]; then
        sed -i "s|^set -euo pipefail\$|set -euo pipefail\nexport PATH=\"$bindir:\$PATH\"|" "$GDIR/containerd.sh"
    fi
    cmd_exec "$DIR" bash "$GDIR/containerd.sh" "${tars[@]}"
}

cmd_status() {
    resolve_dir "$1"
    local pid
    if pid="$(running_pid)"; then
        if [[ -f "$GDIR/ready" ]]; then echo "running (pid $pid)"; else echo "booting (pid $pid)"; fi
        return 0
    fi
    echo "not running"
    return 3
}

case "${1:-}" in
    prepare) shift; cmd_prepare "$@" ;;
    start) shift; cmd_start "$@" ;;
    exec) shift; cmd_exec "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status "$@" ;;
    containerd) shift; cmd_containerd "$@" ;;
    *) usage ;;
esac
