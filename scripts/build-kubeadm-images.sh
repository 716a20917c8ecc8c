#!/usr/bin/env bash
# build-kubeadm-images.sh OUTDIR
#
# Builds the images `kubeadm init` runs, out of the control-plane programs in ../shared/k8s/bin, named and tagged
# as this kubeadm asks for them (`kubeadm config images list`), as OCI archives in OUTDIR for `ctr images import`:
#
#   OUTDIR/kube-apiserver.oci.tar           registry.k8s.io/kube-apiserver:<kubeadm's tag>
#   OUTDIR/kube-controller-manager.oci.tar  registry.k8s.io/kube-controller-manager:<kubeadm's tag>
#   OUTDIR/kube-scheduler.oci.tar           registry.k8s.io/kube-scheduler:<kubeadm's tag>
#   OUTDIR/kubeadm-pause.oci.tar            registry.k8s.io/pause:<kubeadm's tag> (scripts/images/pause.c)
#
# Each program sits in /usr/local/bin as in upstream's images (kubeadm's manifests name it as `command: [NAME, ...]`,
# found through PATH), runs as root, with /tmp and the folders it writes. Not built: kube-proxy (no such program in
# ../shared), CoreDNS and etcd (other projects): `kubeadm init` skips those addons and uses an external etcd.
#
# The programs: $KUBEADM, $KUBE_APISERVER, $KUBE_CONTROLLER_MANAGER, $KUBE_SCHEDULER where set, else ../shared
# beside the project (kubeadm and the scheduler are unpacked by ../shared/unpack.sh). An archive newer than its
# program is kept (the layers are reproducible, so a rebuild would give the same digests anyway). Prints OUTDIR.
set -euo pipefail

export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

log() { printf '[build-kubeadm-images] %s\n' "$*" >&2; }
die() { printf '[build-kubeadm-images] ERROR: %s\n' "$*" >&2; exit 1; }

OUTDIR="${1:-}"
[[ -n "$OUTDIR" ]] || die "usage: $0 OUTDIR"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/node-common.sh
source "$SCRIPT_DIR/lib/node-common.sh"
# shellcheck source=lib/oci-image.sh
source "$SCRIPT_DIR/lib/oci-image.sh"

# plain_program ENV NAME: $ENV, else ../shared/k8s/bin/NAME (kept uncompressed there).
plain_program() {
    local var="$1" name="$2" p
    if [[ -n "${!var:-}" ]]; then
        [[ -x "${!var}" ]] || die "$var=${!var} is not an executable"
        echo "${!var}"
        return 0
    fi
    for p in "$SCRIPT_DIR/../../shared/k8s/bin/$name" /work/shared/k8s/bin/"$name"; do
        [[ -x "$p" ]] && { echo "$p"; return 0; }
    done
    die "$name not found: set $var or put ../shared beside the project"
}

kubeadm="$(rk_shared_program KUBEADM k8s/bin/kubeadm)" || die "no kubeadm"
scheduler="$(rk_shared_program KUBE_SCHEDULER k8s/bin/kube-scheduler)" || die "no kube-scheduler"
apiserver="$(plain_program KUBE_APISERVER kube-apiserver)"
controller_manager="$(plain_program KUBE_CONTROLLER_MANAGER kube-controller-manager)"

version="$("$kubeadm" version -o short)"
list="$("$kubeadm" config images list --kubernetes-version "$version" 2>/dev/null)" ||
    die "kubeadm config images list failed"
# ref_of NAME: the reference kubeadm lists for the image NAME (registry.k8s.io/NAME:TAG).
ref_of() {
    local ref
    ref="$(grep -E "^[^ ]+/$1:[^ ]+$" <<<"$list" | head -n 1)"
    [[ -n "$ref" ]] || die "kubeadm $version lists no $1 image (got: $(tr '\n' ' ' <<<"$list"))"
    echo "$ref"
}

# control_plane_image NAME PROGRAM
control_plane_image() {
    local name="$1" program="$2" tar="$OUTDIR/$1.oci.tar" ref rootfs
    ref="$(ref_of "$name")"
    if [[ -f "$tar" && "$tar" -nt "$program" && -f "$tar.ref" && "$(cat "$tar.ref")" == "$ref" ]]; then
        log "$name: $tar is up to date ($ref)"
        return 0
    fi
    rootfs="$OUTDIR/$name.rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs/usr/local/bin" "$rootfs/tmp" "$rootfs/etc" "$rootfs/var/run"
    chmod 1777 "$rootfs/tmp"
    cp "$program" "$rootfs/usr/local/bin/$name"
    chmod 0755 "$rootfs/usr/local/bin/$name"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' \
        >"$rootfs/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\n' >"$rootfs/etc/group"
    printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
    build_image "$name" "$rootfs" \
        "\"Env\":$(json_array PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin),\"Entrypoint\":$(json_array "/usr/local/bin/$name"),\"WorkingDir\":\"/\"" \
        "$ref"
    rm -rf "$rootfs" "$OUTDIR/$name.layout"
    echo "$ref" >"$tar.ref"
}

pause_image() {
    local tar="$OUTDIR/kubeadm-pause.oci.tar" ref rootfs
    ref="$(ref_of pause)"
    if [[ -f "$tar" && "$tar" -nt "$SCRIPT_DIR/images/pause.c" && -f "$tar.ref" && "$(cat "$tar.ref")" == "$ref" ]]; then
        log "pause: $tar is up to date ($ref)"
        return 0
    fi
    rootfs="$OUTDIR/kubeadm-pause.rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs"
    gcc -static -O2 -Wall -Wextra -o "$rootfs/pause" "$SCRIPT_DIR/images/pause.c"
    strip "$rootfs/pause" 2>/dev/null || true
    build_image kubeadm-pause "$rootfs" \
        "\"User\":\"65535:65535\",\"Entrypoint\":$(json_array /pause),\"WorkingDir\":\"/\"" "$ref"
    rm -rf "$rootfs" "$OUTDIR/kubeadm-pause.layout"
    echo "$ref" >"$tar.ref"
}

control_plane_image kube-apiserver "$apiserver"
control_plane_image kube-controller-manager "$controller_manager"
control_plane_image kube-scheduler "$scheduler"
pause_image
log "images of kubeadm $version in $OUTDIR"
echo "$OUTDIR"
