#!/usr/bin/env bash
# node-setup.sh [WORKDIR]
#
# Sets up a real containerd (with its CRI plugin) on this machine for rkubelet
# development and tests, and leaves it running in the background.
#
#   WORKDIR  default /var/lib/rkubelet-dev, or $RKUBELET_WORKDIR.
#
# Idempotent: every step checks first and only does what is missing, so it is
# safe (and fast, ~1 s) to run before every test session.
#
# stdout: only the containerd socket path (last step), so callers can do
#   SOCK=$(scripts/node-setup.sh)
# Progress messages go to stderr.
#
# Environment knobs:
#   RKUBELET_WORKDIR            see above
#   RKUBELET_START_TIMEOUT      seconds to wait for containerd's socket (default 30)
#   RKUBELET_REBUILD_IMAGES=1   rebuild and re-import the images even if present
#   RKUBELET_SNAPSHOTTER        overlayfs (default) or native
#
# Facts this relies on: /work/shared/notes/runtime-on-this-machine.md
# (Debian 12, root, PID 1 is not systemd, cgroup v1 hybrid, containerd 1.6.20).
set -euo pipefail

RK_PROG="node-setup" # read by the rk_log helpers
export RK_PROG
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/node-common.sh
source "$SCRIPT_DIR/lib/node-common.sh"

T0=$(date +%s%N)
elapsed() { echo "$(( ($(date +%s%N) - T0) / 1000000 )) ms"; }

rk_require_root
rk_resolve_workdir "${1:-}"
rk_lock
rk_log "WORKDIR=$WORKDIR"

SNAPSHOTTER="${RKUBELET_SNAPSHOTTER:-overlayfs}"
START_TIMEOUT="${RKUBELET_START_TIMEOUT:-30}"

# --------------------------------------------------------------------------
# 1. Packages. Debian 12 packages everything needed except crictl (not
#    packaged; not needed here). gcc + libc6-dev build the static pause.
# --------------------------------------------------------------------------
# etcd-server: the etcd of the cluster tests' control plane (crates/test-cluster starts it; its service is not used).
# systemd, python3: the systemd cgroup driver's tests run a systemd as PID 1 of its own namespaces
# (scripts/lib/systemd-ns.sh); the machine itself is not booted with it. qemu-system-x86: the cgroup v2 test boots a
# VM with Debian's kernel (scripts/lib/vm-cgroup2.sh), as this machine binds cpu, memory and pids to cgroup v1.
# docker-registry, apache2-utils: the private-registry tests run Debian's registry (distribution 2.8) behind TLS with
# htpasswd (bcrypt) authentication. prometheus: the /metrics/cadvisor test scrapes rkubelet with Debian's Prometheus
# (started by the test on a loopback port; the package's own service is not used).
PACKAGES=(containerd runc containernetworking-plugins busybox-static iptables iproute2 gcc libc6-dev util-linux etcd-server
    systemd python3 qemu-system-x86 docker-registry apache2-utils prometheus)

pkg_installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for p in "${PACKAGES[@]}"; do
    pkg_installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
    rk_log "installing missing packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Lock timeout: another apt run (e.g. a provisioning job) may hold the lock.
    apt_opts=(-y -q -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    apt-get "${apt_opts[@]}" update >&2 || rk_die "apt-get update failed"
    apt-get "${apt_opts[@]}" install --no-install-recommends "${missing[@]}" >&2 ||
        rk_die "apt-get install ${missing[*]} failed"
else
    rk_log "packages present: ${PACKAGES[*]}"
fi
for bin in containerd ctr runc iptables ip gcc flock etcd docker-registry htpasswd; do
    command -v "$bin" >/dev/null || rk_die "'$bin' still missing after package install"
done
# kubectl drives the end-to-end tests. It is not a Debian package: the machine image carries it (/usr/bin/kubectl).
command -v kubectl >/dev/null ||
    rk_die "kubectl not found on PATH: the end-to-end tests drive the cluster with it; install a kubectl (1.32 or later)"
for plugin in bridge host-local portmap loopback; do
    [[ -x /usr/lib/cni/$plugin ]] || rk_die "CNI plugin /usr/lib/cni/$plugin missing (containernetworking-plugins)"
done

# The Debian package's own containerd service is not running (no systemd as
# PID 1) and we never use /etc/containerd/config.toml: our instance has its
# own config, root, state and socket under WORKDIR, so it cannot clash with a
# system containerd on /run/containerd/containerd.sock.

if [[ "$SNAPSHOTTER" == overlayfs ]] && ! grep -qw overlay /proc/filesystems; then
    modprobe overlay 2>/dev/null || true
    if ! grep -qw overlay /proc/filesystems; then
        rk_warn "kernel has no overlay filesystem; falling back to the 'native' snapshotter (~200 ms slower per container)"
        SNAPSHOTTER=native
    fi
fi
export RKUBELET_SNAPSHOTTER="$SNAPSHOTTER" # build-images.sh imports into the same one

# --------------------------------------------------------------------------
# Helper: replace FILE with the content of TMP only when it differs.
# TMP must be on the same filesystem so `mv` is an atomic rename.
# Returns 0 when FILE changed, 1 when it was already up to date.
# --------------------------------------------------------------------------
install_if_changed() {
    local tmp="$1" file="$2"
    if [[ -f "$file" ]] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        return 1
    fi
    chmod 0644 "$tmp"
    mv -f "$tmp" "$file"
    return 0
}

# --------------------------------------------------------------------------
# 2. containerd config (version 2 format).
# --------------------------------------------------------------------------
mkdir -p "$WORKDIR"/{root,state,images,cni,certs.d,bin} "$CNI_CONF_DIR"
chmod 0711 "$WORKDIR/root" "$WORKDIR/state"

# The runtime's programs, linked into $WORKDIR/bin (first in PATH, see rk_select_runtime): Debian's for 1.6,
# ../shared/runtimes/containerd-2.3 for 2.3 (containerd finds its shim, the shim its runc, through PATH).
if [[ "$RK_CONTAINERD" == 2.3 ]]; then
    RT_BIN="$(rk_containerd2_bin)" || rk_die "RKUBELET_CONTAINERD=2.3: $(rk_containerd2_bin 2>&1 >/dev/null)"
    RT_PROGRAMS=("$RT_BIN/containerd" "$RT_BIN/containerd-shim-runc-v2" "$RT_BIN/ctr" "$RT_BIN/runc")
else
    RT_PROGRAMS=(/usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr /usr/sbin/runc)
fi
for prog in "${RT_PROGRAMS[@]}"; do
    [[ -x "$prog" ]] || rk_die "$prog missing: the containerd $RK_CONTAINERD programs are needed"
    [[ "$(readlink "$WORKDIR/bin/$(basename "$prog")" 2>/dev/null)" == "$prog" ]] ||
        ln -sfn "$prog" "$WORKDIR/bin/$(basename "$prog")"
done
runtime_env_tmp="$(mktemp "$WORKDIR/.runtime.env.XXXXXX")"
printf 'RK_CONTAINERD=%s\nRK_NETWORK=%s\nRK_CNI_NETWORK=%s\nRK_BRIDGE=%s\nRK_POD_CIDR=%s\n' \
    "$RK_CONTAINERD" "$RK_NETWORK" "$RK_CNI_NETWORK" "$RK_BRIDGE" "$RK_POD_CIDR" >"$runtime_env_tmp"
install_if_changed "$runtime_env_tmp" "$WORKDIR/runtime.env" || true
rk_log "containerd $RK_CONTAINERD: $("$WORKDIR/bin/containerd" --version), $("$WORKDIR/bin/runc" --version | head -n 1)"

# The second runtime handler (`runc-alt`, for RuntimeClass tests): runc itself, through a wrapper that notes each
# container it creates, so a test can tell which handler ran a sandbox.
alt_tmp="$(mktemp "$WORKDIR/bin/.runc-alt.XXXXXX")"
cat >"$alt_tmp" <<ALT
#!/bin/sh
# Generated by scripts/node-setup.sh: the runc-alt runtime handler. Notes each 'create' (its last argument is the
# container ID), then runs runc.
for a in "\$@"; do last="\$a"; done
case " \$* " in *" create "*) echo "\$last" >>"$WORKDIR/runc-alt.created" ;; esac
exec "$WORKDIR/bin/runc" "\$@"
ALT
install_if_changed "$alt_tmp" "$WORKDIR/bin/runc-alt" || true
chmod 0755 "$WORKDIR/bin/runc-alt"

# The part every containerd config of this script shares: format VERSION, where the reasons are (WHY), paths.
toml_head() {
    cat <<EOF
# Generated by scripts/node-setup.sh -- edits are overwritten.
# Why each setting: $2
version = $1
root = "$WORKDIR/root"
state = "$WORKDIR/state"
oom_score = 0

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins]
EOF
}
config_tmp="$(mktemp "$WORKDIR/.containerd.toml.XXXXXX")"
if [[ "$RK_CONTAINERD" == 2.3 ]]; then
    # containerd 2's layout (version 3). The same choices as the 1.6 file below, plus CDI (spec files in /etc/cdi
    # and /var/run/cdi) and runc 1.5 by path: user namespaces need its idmapped mounts. Network namespaces under
    # its own state folder, apart from the 1.6 runtime's.
    cat >"$config_tmp" <<EOF
$(toml_head 3 "the 1.6 branch of this script, and ../shared/runtimes/containerd-2.3/README.md")
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "$SNAPSHOTTER"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "localhost/pause:1"
    [plugins."io.containerd.cri.v1.images".registry]
      config_path = "$WORKDIR/certs.d"
  [plugins."io.containerd.cri.v1.runtime"]
    disable_apparmor = true
    enable_selinux = false
    disable_hugetlb_controller = true
    tolerate_missing_hugetlb_controller = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_cdi = true
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "$WORKDIR/bin/runc"
          SystemdCgroup = false
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc-alt]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc-alt.options]
          BinaryName = "$WORKDIR/bin/runc-alt"
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
EOF
else
    cat >"$config_tmp" <<EOF
$(toml_head 2 "/work/shared/notes/runtime-on-this-machine.md")
  [plugins."io.containerd.grpc.v1.cri"]
    # No registry is reachable: the sandbox image is built locally (build-images.sh).
    sandbox_image = "localhost/pause:1"
    # cgroup v1 hybrid, no systemd as PID 1: cgroupfs driver.
    systemd_cgroup = false
    # The VM has no AppArmor profile loading; SELinux is off.
    disable_apparmor = true
    enable_selinux = false
    # Only cgroup2 'unified' has hugetlb here; v1 has no hugetlb controller.
    disable_hugetlb_controller = true
    tolerate_missing_hugetlb_controller = true
    # REQUIRED: the VM lacks CAP_SYS_RESOURCE, a negative oom_score_adj cannot
    # be set; without this every RunPodSandbox fails with runc's misleading
    # "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    # Exec/Attach/PortForward streaming server only on loopback.
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "$SNAPSHOTTER"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
      # A second handler for RuntimeClass tests: runc through a wrapper that notes what it created.
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-alt]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-alt.options]
          SystemdCgroup = false
          BinaryName = "$WORKDIR/bin/runc-alt"
    [plugins."io.containerd.grpc.v1.cri".registry]
      # Per-registry settings (hosts.toml: the CA of a test registry), read at each pull.
      config_path = "$WORKDIR/certs.d"
    [plugins."io.containerd.grpc.v1.cri".cni]
      # Debian's containernetworking-plugins install to /usr/lib/cni.
      bin_dir = "/usr/lib/cni"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
EOF
fi
config_changed=false
if install_if_changed "$config_tmp" "$CONFIG"; then
    config_changed=true
    rk_log "wrote containerd config $CONFIG"
else
    rk_log "containerd config up to date"
fi

# --------------------------------------------------------------------------
# 3. CNI conflist: bridge cni0 + host-local IPAM + portmap (containerd adds
#    loopback itself). containerd watches conf_dir and a half-written file
#    fails to load, so write it next to the folder and mv it in.
# --------------------------------------------------------------------------
cni_tmp="$(mktemp "$WORKDIR/cni/.conflist.XXXXXX")"
cat >"$cni_tmp" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$RK_CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$RK_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$RK_POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    {
      "type": "portmap",
      "capabilities": { "portMappings": true }
    }
  ]
}
EOF
if install_if_changed "$cni_tmp" "$CNI_CONF_DIR/10-$RK_CNI_NETWORK.conflist"; then
    rk_log "wrote CNI config $CNI_CONF_DIR/10-$RK_CNI_NETWORK.conflist"
else
    rk_log "CNI config up to date"
fi

# --------------------------------------------------------------------------
# 4. Keep pod traffic on this machine: only loopback and our own bridge are
#    legitimate targets. Forwarding within cni0 stays allowed. The bridge
#    plugin (isGateway) turns on ip_forward, so this rule matters.
#    -C first so re-runs do not stack duplicate rules.
# --------------------------------------------------------------------------
fwd_rule=(FORWARD -i "$RK_BRIDGE" ! -o "$RK_BRIDGE" -m comment --comment "$RK_FWD_COMMENT" -j DROP)
if iptables -w 10 -C "${fwd_rule[@]}" 2>/dev/null; then
    rk_log "iptables FORWARD rule present"
else
    iptables -w 10 -I "${fwd_rule[@]}" || rk_die "could not add iptables rule: iptables -I ${fwd_rule[*]}"
    rk_log "added iptables rule: -I ${fwd_rule[*]}"
fi

# --------------------------------------------------------------------------
# 5. Start containerd unless it already answers (no systemd to do it; see
#    rk_start_containerd in lib/node-common.sh).
# --------------------------------------------------------------------------
if rk_socket_answers; then
    if $config_changed; then
        if pid="$(rk_our_containerd_pid)"; then
            # Running tasks survive a containerd restart (their shims stay).
            rk_log "config changed: restarting containerd (pid $pid) to apply it"
            rk_stop_containerd "$pid"
        else
            rk_warn "config changed but the containerd on $SOCK was not started by this script; restart it yourself"
        fi
    else
        rk_log "containerd already answering on $SOCK"
    fi
fi

if ! rk_socket_answers; then
    # A leftover process with our config but a dead socket: replace it.
    if pid="$(rk_our_containerd_pid)"; then
        rk_warn "containerd pid $pid (our config) does not answer on $SOCK; stopping it"
        rk_stop_containerd "$pid"
    fi
    rk_log "starting containerd (log: $CLOG)"
    t_start=$(date +%s%N)
    rk_start_containerd "$START_TIMEOUT" || rk_die "containerd did not start; see $CLOG"
    rk_log "containerd pid $RK_STARTED_PID answering on $SOCK ($(( ($(date +%s%N) - t_start) / 1000000 )) ms after launch)"
fi

# A bad CRI section does not stop containerd: it only skips the CRI plugin.
# So check the plugin really loaded; rkubelet cannot work without it.
cri_status="$(timeout 10 ctr -a "$SOCK" plugins ls 2>/dev/null | awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" { print $NF }')"
if [[ "$cri_status" != "ok" ]]; then
    grep -i 'cri' "$CLOG" | tail -n 10 >&2 || true
    rk_die "containerd's CRI plugin is not loaded (status '${cri_status:-absent}'); see $CLOG"
fi
rk_log "CRI plugin loaded"

# --------------------------------------------------------------------------
# 6. Images: built locally (no registry reachable), imported into k8s.io.
# --------------------------------------------------------------------------
need_images=false
refs=(localhost/pause:1 localhost/busybox:1 localhost/busybox:latest)
# Upstream's e2e device plugin, as an image of its own, where ../shared has it (the device tests need it).
if plugin="$(rk_shared_program SAMPLE_DEVICE_PLUGIN k8s/bin/sample-device-plugin 2>&1)"; then
    export RKUBELET_SAMPLE_DEVICE_PLUGIN="$plugin"
    refs+=(localhost/sample-device-plugin:1)
else
    rk_log "no sample-device-plugin image: $plugin"
fi
# Upstream's e2e DRA driver likewise (the DRA tests need it).
if driver="$(rk_shared_program DRA_TEST_DRIVER k8s/bin/dra-test-driver 2>&1)"; then
    export RKUBELET_DRA_TEST_DRIVER="$driver"
    refs+=(localhost/dra-test-driver:1)
else
    rk_log "no dra-test-driver image: $driver"
fi
# The CSI components (hostpath driver, node registrar and provisioner) likewise (the CSI tests need them).
if csi="$(rk_shared_program HOSTPATHPLUGIN csi/bin/hostpathplugin 2>&1)" &&
    registrar="$(rk_shared_program CSI_NODE_DRIVER_REGISTRAR csi/bin/csi-node-driver-registrar 2>&1)" &&
    provisioner="$(rk_shared_program CSI_PROVISIONER csi/bin/csi-provisioner 2>&1)"; then
    export RKUBELET_HOSTPATHPLUGIN="$csi" RKUBELET_CSI_NODE_DRIVER_REGISTRAR="$registrar" \
        RKUBELET_CSI_PROVISIONER="$provisioner"
    refs+=(localhost/hostpathplugin:3 localhost/csi-node-driver-registrar:1 localhost/csi-provisioner:1)
else
    rk_log "no CSI images: ${provisioner:-${registrar:-$csi}}"
fi
if [[ "${RKUBELET_REBUILD_IMAGES:-0}" == 1 ]]; then
    need_images=true
else
    present="$(timeout 10 ctr -a "$SOCK" -n k8s.io images ls -q)" || rk_die "ctr images ls failed on $SOCK"
    for ref in "${refs[@]}"; do
        grep -qxF "$ref" <<<"$present" || need_images=true
    done
fi
if $need_images; then
    rk_log "building and importing images"
    "$SCRIPT_DIR/build-images.sh" "$SOCK" "$WORKDIR/images"
else
    rk_log "images present: ${refs[*]}"
fi

rk_log "ready in $(elapsed). CRI endpoint: unix://$SOCK"
echo "$SOCK"
