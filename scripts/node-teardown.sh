#!/usr/bin/env bash
# node-teardown.sh [WORKDIR]
#
# Undoes scripts/node-setup.sh: removes every container, stops the containerd
# started for WORKDIR and cleans the state containerd/CNI keep outside it.
#
#   WORKDIR  default /var/lib/rkubelet-dev, or $RKUBELET_WORKDIR.
#   RKUBELET_PURGE=1  also delete WORKDIR itself (images included); without it
#                     the content store stays, so the next setup needs no
#                     image rebuild.
#
# A clean teardown would remove pods through CRI (StopPodSandbox runs CNI DEL),
# but crictl is not packaged in Debian 12. So this works one level lower with
# `ctr` and then removes by hand what CNI DEL would have removed: IPAM leases,
# cached results, portmap chains, network namespaces. See "State that
# containerd/CNI keep outside their work folder" in
# /work/shared/notes/runtime-on-this-machine.md.
#
# Idempotent; every wait is bounded. Note that cni0 and /sys/fs/cgroup/*/kubepods
# are machine-wide names: run one development node per machine.
#
# Kept on purpose: the iptables FORWARD DROP rule for cni0 (harmless without
# the bridge, and safer to keep than to remove), and the Debian packages.
set -euo pipefail

RK_PROG="node-teardown" # read by the rk_log helpers
export RK_PROG
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/node-common.sh
source "$SCRIPT_DIR/lib/node-common.sh"

T0=$(date +%s%N)
elapsed() { echo "$(( ($(date +%s%N) - T0) / 1000000 )) ms"; }

rk_require_root
rk_resolve_workdir "${1:-}"
[[ -d "$WORKDIR" ]] && rk_lock
rk_log "WORKDIR=$WORKDIR"

# Network namespaces of pods (CRI creates /var/run/netns/cni-<uuid>). Gathered
# from container specs and from CNI's result cache, before both disappear.
declare -A NETNS=()
collect_netns_from() { # reads text on stdin
    local p
    while IFS= read -r p; do
        [[ -n "$p" ]] && NETNS["$p"]=1
    done < <(grep -o '/var/run/netns/cni-[0-9a-f-]*\|/run/netns/cni-[0-9a-f-]*' || true)
}
for f in /var/lib/cni/results/"$RK_CNI_NETWORK"-*; do
    if [[ -f "$f" ]]; then collect_netns_from <"$f"; fi
done

# --------------------------------------------------------------------------
# 1. Through containerd, if it answers: kill and delete every task, then
#    delete every container (and its snapshot), in every namespace (k8s.io
#    for CRI, plus whatever tests made with `ctr run`).
# --------------------------------------------------------------------------
# If our containerd is down (crashed, killed, machine rebooted) but its state
# exists, start it for the cleanup: its metadata still lists the containers,
# and a later setup would otherwise show them as stale pods. It reconnects to
# any shims still alive, so their tasks can be killed properly too.
if ! rk_socket_answers && [[ -f "$CONFIG" && -f "$WORKDIR/root/io.containerd.metadata.v1.bolt/meta.db" ]] &&
    ! rk_our_containerd_pid >/dev/null; then
    rk_log "containerd not running; starting it briefly to delete its containers"
    rk_start_containerd 30 || rk_warn "could not start containerd; cleaning up without it"
fi

if rk_socket_answers; then
    CTR=(timeout 20 ctr -a "$SOCK")
    for ns in $("${CTR[@]}" namespaces ls -q 2>/dev/null || true); do
        containers="$("${CTR[@]}" -n "$ns" containers ls -q 2>/dev/null || true)"
        tasks="$("${CTR[@]}" -n "$ns" tasks ls -q 2>/dev/null || true)"
        [[ -z "$containers$tasks" ]] && continue
        rk_log "namespace $ns: $(wc -w <<<"$tasks") task(s), $(wc -w <<<"$containers") container(s)"
        for c in $containers; do
            # process substitution, not a pipe: NETNS must be filled in this shell
            collect_netns_from < <("${CTR[@]}" -n "$ns" containers info "$c" 2>/dev/null || true)
        done
        for t in $tasks; do
            "${CTR[@]}" -n "$ns" tasks kill -a -s SIGKILL "$t" >/dev/null 2>&1 || true
        done
        # Bounded wait until no task is still RUNNING/PAUSED (10 s).
        for ((i = 0; i < 100; i++)); do
            "${CTR[@]}" -n "$ns" tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"' | grep -q . || break
            sleep 0.1
        done
        # The CRI plugin deletes the task of a killed CRI container by itself
        # (on the exit event), so a failed `tasks rm` only matters when the
        # task is still listed afterwards.
        for t in $tasks; do
            if ! err="$("${CTR[@]}" -n "$ns" tasks rm -f "$t" 2>&1 >/dev/null)" &&
                "${CTR[@]}" -n "$ns" tasks ls -q 2>/dev/null | grep -qxF "$t"; then
                rk_warn "could not delete task $ns/$t: $err"
            fi
        done
        for c in $containers; do
            "${CTR[@]}" -n "$ns" containers rm "$c" >/dev/null 2>&1 ||
                rk_warn "could not delete container $ns/$c"
            # CNI result cache of a sandbox (containerd's loopback + ours)
            rm -f "/var/lib/cni/results/cni-loopback-$c-lo" "/var/lib/cni/results/$RK_CNI_NETWORK-$c-eth0"
        done
    done
else
    rk_log "containerd not answering on $SOCK; cleaning up without it"
fi

# --------------------------------------------------------------------------
# 2. Stop our containerd (pid file, or exact --config match; never another
#    instance).
# --------------------------------------------------------------------------
if pid="$(rk_our_containerd_pid)"; then
    rk_log "stopping containerd pid $pid"
    rk_stop_containerd "$pid"
elif rk_socket_answers; then
    rk_warn "something answers on $SOCK but it was not started with $CONFIG; leaving it alone"
else
    rk_log "containerd not running"
fi
rm -f "$PIDFILE"
rk_socket_answers || rm -f "$SOCK" "$SOCK.ttrpc"

# --------------------------------------------------------------------------
# 3. Shims of our containerd that outlived it (containerd was dead, or a task
#    could not be deleted). A shim's children are the containers' init
#    processes: kill those first (killing the shim alone orphans them).
#    Matched by their exact "-address $SOCK" argument.
# --------------------------------------------------------------------------
shims=()
for d in /proc/[0-9]*; do
    cmd="$(tr '\0' ' ' 2>/dev/null <"$d/cmdline" || true)"
    [[ "$cmd" == *containerd-shim*" -address $SOCK "* ]] && shims+=("${d#/proc/}")
done
if ((${#shims[@]})); then
    rk_warn "killing ${#shims[@]} leftover shim(s) of $SOCK and their containers: ${shims[*]}"
    for s in "${shims[@]}"; do
        for d in /proc/[0-9]*; do
            # field 4 of /proc/PID/stat is the parent pid (comm may hold spaces: cut after ')')
            ppid="$(sed -n 's/^.*) [A-Za-z] \([0-9]*\).*/\1/p' "$d/stat" 2>/dev/null || true)"
            if [[ "$ppid" == "$s" ]]; then kill -KILL "${d#/proc/}" 2>/dev/null || true; fi
        done
        kill -KILL "$s" 2>/dev/null || true
    done
    sleep 0.3
fi

# --------------------------------------------------------------------------
# 4. Unmount everything under WORKDIR (rootfs overlays, sandbox /dev/shm),
#    deepest first, then the pods' network namespaces.
# --------------------------------------------------------------------------
umount_path() {
    umount "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || rk_warn "could not unmount $1"
}
mapfile -t mounts < <(awk -v pfx="$WORKDIR/" 'index($5, pfx) == 1 { print $5 }' /proc/self/mountinfo |
    sed 's/\\040/ /g' | sort -r -u)
if ((${#mounts[@]})); then
    rk_log "unmounting ${#mounts[@]} mount(s) under $WORKDIR"
    for m in "${mounts[@]}"; do umount_path "$m"; done
fi
if ((${#NETNS[@]})); then
    rk_log "removing ${#NETNS[@]} pod network namespace(s)"
    for n in "${!NETNS[@]}"; do
        if [[ -e "$n" ]]; then
            grep -qF " $(readlink -f "$n") " /proc/self/mountinfo && umount_path "$n"
            rm -f "$n"
        fi
    done
fi

# --------------------------------------------------------------------------
# 5. What CNI DEL would have removed (only our network's entries).
# --------------------------------------------------------------------------
# Also containerd's own loopback result for the same containers.
for f in /var/lib/cni/results/"$RK_CNI_NETWORK"-*-eth0; do
    [[ -e "$f" ]] || continue
    id="${f#/var/lib/cni/results/"$RK_CNI_NETWORK"-}"
    rm -f "/var/lib/cni/results/cni-loopback-${id%-eth0}-lo"
done
rm -rf "/var/lib/cni/networks/$RK_CNI_NETWORK"
rm -f /var/lib/cni/results/"$RK_CNI_NETWORK"-*
# portmap: a pod with hostPorts gets a chain CNI-DN-<hash>, jumped to from
# CNI-HOSTPORT-DNAT by a rule commented 'dnat name: "rkubelet" id: "<sandbox>"'.
# Delete those jump rules and their chains; the shared CNI-HOSTPORT-* chains
# stay (portmap re-uses them).
if iptables -w 10 -t nat -S CNI-HOSTPORT-DNAT >/dev/null 2>&1; then
    mapfile -t dnat_rules < <(iptables -w 10 -t nat -S CNI-HOSTPORT-DNAT |
        grep -F -- "--comment \"dnat name: \\\"$RK_CNI_NETWORK\\\" id:" || true)
    for rule in "${dnat_rules[@]}"; do
        chain="$(grep -o -- '-j CNI-DN-[A-Za-z0-9]*' <<<"$rule" | cut -d' ' -f2)"
        # the rule text is iptables -S output, quoted for a shell: eval it back
        eval "iptables -w 10 -t nat -D ${rule#-A }" || rk_warn "could not delete nat rule: $rule"
        if [[ -n "$chain" ]]; then
            if iptables -w 10 -t nat -F "$chain" && iptables -w 10 -t nat -X "$chain"; then
                rk_log "removed portmap chain $chain"
            else
                rk_warn "could not remove portmap chain $chain"
            fi
        fi
    done
fi

# --------------------------------------------------------------------------
# 6. Leftover cgroups. containerd never removes the pod-level folders
#    (/kubepods/<qos>/pod<uid>), and `ctr run` leaves an empty /k8s.io parent;
#    the test suite's second lane roots its pods at /rk-e2e-lane<N>.
#    rmdir depth-first; rmdir only removes empty cgroups, so anything still
#    holding processes is reported, never killed.
# --------------------------------------------------------------------------
shopt -s nullglob
busy=0
for top in /sys/fs/cgroup/*/kubepods* /sys/fs/cgroup/kubepods* /sys/fs/cgroup/*/rk-e2e-lane* /sys/fs/cgroup/*/k8s.io \
    /sys/fs/cgroup/k8s.io; do
    [[ -d "$top" ]] || continue
    while IFS= read -r -d '' dir; do
        if ! rmdir "$dir" 2>/dev/null; then
            busy=$((busy + 1))
            rk_warn "cgroup $dir not removed (processes: $(tr '\n' ' ' <"$dir/cgroup.procs" 2>/dev/null))"
        fi
    done < <(find "$top" -depth -type d -print0 2>/dev/null)
done
shopt -u nullglob
((busy == 0)) && rk_log "no kubepods/k8s.io cgroups left"

# --------------------------------------------------------------------------
# 7. The bridge (the CNI bridge plugin never deletes it).
# --------------------------------------------------------------------------
if ip link show "$RK_BRIDGE" >/dev/null 2>&1; then
    ip link delete "$RK_BRIDGE" && rk_log "deleted link $RK_BRIDGE"
fi

if [[ "${RKUBELET_PURGE:-0}" == 1 && -d "$WORKDIR" ]]; then
    if awk -v pfx="$WORKDIR/" 'index($5, pfx) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
        rk_warn "mounts remain under $WORKDIR; not deleting it"
    else
        rk_log "RKUBELET_PURGE=1: deleting $WORKDIR"
        rm -rf --one-file-system "$WORKDIR"
    fi
fi

rk_log "teardown done in $(elapsed)"
