#!/usr/bin/env bash
# build-images.sh SOCKET [OUTDIR]
#
# Builds the two local images the development node needs and imports them
# into containerd's `k8s.io` namespace (the namespace the CRI plugin uses):
#
#   localhost/pause:1                          static `pause` from scripts/images/pause.c
#   localhost/busybox:1, localhost/busybox:latest   Debian's busybox-static + applet links
#   localhost/sample-device-plugin:1           upstream's e2e device plugin, when
#                                              $RKUBELET_SAMPLE_DEVICE_PLUGIN names its program
#   localhost/dra-test-driver:1                upstream's e2e DRA driver, when
#                                              $RKUBELET_DRA_TEST_DRIVER names its program
#   localhost/hostpathplugin:3,                the CSI hostpath driver (with busybox's mount, util-linux's losetup)
#                                              and node registrar, when
#   localhost/csi-node-driver-registrar:1,     $RKUBELET_HOSTPATHPLUGIN, $RKUBELET_CSI_NODE_DRIVER_REGISTRAR and
#   localhost/csi-provisioner:1                $RKUBELET_CSI_PROVISIONER do
#
# Why this exists: no container registry is reachable from these machines
# (see /work/shared/notes/runtime-on-this-machine.md), and there is no docker.
# So each image is assembled by hand as an OCI image layout
# (oci-layout, index.json, blobs/sha256/*), tarred, and imported with
# `ctr images import`.
#
# Naming: ctr 1.6 names an imported OCI image after the index entry's
# `org.opencontainers.image.ref.name` annotation. When that annotation holds a
# full reference ("localhost/busybox:1") the image gets exactly that name, so
# no --base-name is needed (with only a tag, ctr would need --base-name).
# The script checks the resulting names with `ctr images ls -q` at the end.
#
# Layers are built reproducibly (sorted, mtime 0, numeric owner 0), so
# rebuilding yields the same digests and re-importing is a no-op.
#
# OUTDIR (or env RKUBELET_IMAGES_DIR) keeps the build outputs; without it a
# temporary directory is used and removed afterwards. Never the repository.
set -euo pipefail

export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"

log() { printf '[build-images] %s\n' "$*" >&2; }
die() { printf '[build-images] ERROR: %s\n' "$*" >&2; exit 1; }

SOCKET="${1:-}"
[[ -n "$SOCKET" ]] || die "usage: $0 SOCKET [OUTDIR]"
[[ -S "$SOCKET" ]] || die "containerd socket $SOCKET does not exist (run scripts/node-setup.sh)"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PAUSE_SRC="$SCRIPT_DIR/images/pause.c"
[[ -f "$PAUSE_SRC" ]] || die "missing $PAUSE_SRC"

for tool in gcc tar sha256sum ctr; do
    command -v "$tool" >/dev/null || die "'$tool' not found (scripts/node-setup.sh installs it)"
done
BUSYBOX="/bin/busybox"
[[ -x "$BUSYBOX" ]] || die "$BUSYBOX missing: install Debian package busybox-static"
"$BUSYBOX" --list >/dev/null 2>&1 || die "$BUSYBOX does not look like busybox"
# Debian's dynamically linked `busybox` package would not run inside the image
# (no libc there): it must be busybox-static. ldd says "not a dynamic
# executable" (and exits non-zero) for static binaries.
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    die "$BUSYBOX is dynamically linked: install busybox-static, not busybox"
fi

OUTDIR="${2:-${RKUBELET_IMAGES_DIR:-}}"
if [[ -z "$OUTDIR" ]]; then
    OUTDIR="$(mktemp -d /tmp/rkubelet-images.XXXXXX)"
    trap 'rm -rf "$OUTDIR"' EXIT
fi
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"

CTR=(ctr -a "$SOCKET" -n k8s.io)
# shellcheck source=lib/oci-image.sh
source "$SCRIPT_DIR/lib/oci-image.sh"

import_image() {
    local tarball="$1"
    log "importing $(basename "$tarball") into namespace k8s.io"
    # Unpack (the default) into the CRI plugin's snapshotter (overlayfs unless
    # node-setup chose otherwise): CRI 1.6 does not unpack an image itself when
    # creating a container.
    timeout 120 "${CTR[@]}" images import --snapshotter "${RKUBELET_SNAPSHOTTER:-overlayfs}" "$tarball" >/dev/null ||
        die "ctr images import $tarball failed"
}

# ---------------------------------------------------------------- pause ----
build_pause() {
    local rootfs="$OUTDIR/pause.rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs"
    log "compiling $PAUSE_SRC (gcc -static -O2)"
    gcc -static -O2 -Wall -Wextra -o "$rootfs/pause" "$PAUSE_SRC"
    strip "$rootfs/pause" 2>/dev/null || true
    chmod 0755 "$rootfs/pause"
    # Same user as upstream's pause image: it needs no file access at all.
    build_image pause "$rootfs" \
        "\"User\":\"65535:65535\",\"Entrypoint\":$(json_array /pause),\"WorkingDir\":\"/\"" \
        localhost/pause:1
}

# -------------------------------------------------------------- busybox ----
build_busybox() {
    local rootfs="$OUTDIR/busybox.rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs"/{bin,etc,tmp,root,proc,sys,dev,var,home}
    chmod 1777 "$rootfs/tmp"
    chmod 0700 "$rootfs/root"
    cp "$BUSYBOX" "$rootfs/bin/busybox"
    chmod 0755 "$rootfs/bin/busybox"
    # Every applet as a relative symlink in /bin (that is what PATH points at).
    local applet n=0
    while IFS= read -r applet; do
        [[ -z "$applet" || "$applet" == busybox || "$applet" == */* ]] && continue
        ln -sf busybox "$rootfs/bin/$applet"
        n=$((n + 1))
    done < <("$BUSYBOX" --list)
    # Scripts with `#!/usr/bin/env` or `/usr/bin/...` paths keep working.
    mkdir -p "$rootfs/usr"
    ln -s ../bin "$rootfs/usr/bin"
    ln -s bin "$rootfs/sbin"
    cat >"$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
    cat >"$rootfs/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
GROUP
    chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
    log "busybox rootfs: $n applet links in /bin"
    build_image busybox "$rootfs" \
        "\"Env\":$(json_array PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin),\"Cmd\":$(json_array sh),\"WorkingDir\":\"/\"" \
        localhost/busybox:1 localhost/busybox:latest
}

# ------------------------------------------ upstream's e2e test programs ----
# Upstream's e2e device plugin ($RKUBELET_SAMPLE_DEVICE_PLUGIN), DRA driver ($RKUBELET_DRA_TEST_DRIVER) and the CSI
# hostpath driver and node registrar, static Go programs from ../shared: the program alone as the entrypoint, with /tmp and the host folders they write into.
# PROGRAM_TAG: the tag (1 unless set). With PROGRAM_APPLETS set, busybox-static and those applets in /bin too (the CSI driver runs `mount`, `umount`,
# `fallocate`, `cp` and `dd`, as its upstream image's distribution gives it).
# build_program_image NAME PROGRAM DIR...
build_program_image() {
    local name="$1" program="$2"
    shift 2
    local rootfs="$OUTDIR/$name.rootfs"
    rm -rf "$rootfs"
    mkdir -p "$rootfs/tmp"
    for d in "$@"; do mkdir -p "$rootfs/$d"; done
    chmod 1777 "$rootfs/tmp"
    cp "$program" "$rootfs/$name"
    chmod 0755 "$rootfs/$name"
    if [[ -n "${PROGRAM_APPLETS:-}" ]]; then
        mkdir -p "$rootfs/bin"
        cp "$BUSYBOX" "$rootfs/bin/busybox"
        chmod 0755 "$rootfs/bin/busybox"
        local applet
        for applet in $PROGRAM_APPLETS; do ln -sf busybox "$rootfs/bin/$applet"; done
    fi
    # PROGRAM_HOST_TOOLS: programs of this machine's Debian packages copied in with the libraries they load
    # (`ldd`), for what busybox lacks (util-linux's `losetup -j`, which the CSI driver's block volumes use).
    local tool lib
    for tool in ${PROGRAM_HOST_TOOLS:-}; do
        tool="$(command -v "$tool")" || die "$tool missing: install Debian package util-linux"
        mkdir -p "$rootfs/$(dirname "$tool")"
        cp -L "$tool" "$rootfs/$tool"
        for lib in $(ldd "$tool" | grep -o '/[^ ]*'); do
            mkdir -p "$rootfs/$(dirname "$lib")"
            cp -L "$lib" "$rootfs/$lib"
        done
    done
    build_image "$name" "$rootfs" \
        "\"Env\":$(json_array PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin),\"Entrypoint\":$(json_array "/$name"),\"WorkingDir\":\"/\"" \
        "localhost/$name:${PROGRAM_TAG:-1}"
}

build_pause
build_busybox
import_image "$OUTDIR/pause.oci.tar"
import_image "$OUTDIR/busybox.oci.tar"
if [[ -n "${RKUBELET_SAMPLE_DEVICE_PLUGIN:-}" ]]; then
    build_program_image sample-device-plugin "$RKUBELET_SAMPLE_DEVICE_PLUGIN" var/lib/kubelet/device-plugins var/run/cdi
    import_image "$OUTDIR/sample-device-plugin.oci.tar"
fi
if [[ -n "${RKUBELET_HOSTPATHPLUGIN:-}" && -n "${RKUBELET_CSI_NODE_DRIVER_REGISTRAR:-}" &&
    -n "${RKUBELET_CSI_PROVISIONER:-}" ]]; then
    PROGRAM_TAG=3 PROGRAM_APPLETS="sh mount umount fallocate cp dd" PROGRAM_HOST_TOOLS="losetup" \
        build_program_image hostpathplugin \
        "$RKUBELET_HOSTPATHPLUGIN" csi csi-data-dir var/lib/kubelet/pods var/lib/kubelet/plugins
    import_image "$OUTDIR/hostpathplugin.oci.tar"
    build_program_image csi-node-driver-registrar "$RKUBELET_CSI_NODE_DRIVER_REGISTRAR" csi registration
    import_image "$OUTDIR/csi-node-driver-registrar.oci.tar"
    build_program_image csi-provisioner "$RKUBELET_CSI_PROVISIONER" csi etc/provisioner
    import_image "$OUTDIR/csi-provisioner.oci.tar"
fi
if [[ -n "${RKUBELET_DRA_TEST_DRIVER:-}" ]]; then
    build_program_image dra-test-driver "$RKUBELET_DRA_TEST_DRIVER" var/lib/kubelet/plugins \
        var/lib/kubelet/plugins_registry var/run/cdi
    import_image "$OUTDIR/dra-test-driver.oci.tar"
fi

# Verify the names ctr actually gave the images (guards against ctr naming
# them "import-<date>" or by tag only).
present="$("${CTR[@]}" images ls -q)"
for ref in localhost/pause:1 localhost/busybox:1 localhost/busybox:latest; do
    grep -qxF "$ref" <<<"$present" || die "after import, image $ref is not listed by 'ctr -n k8s.io images ls -q' (got: $(tr '\n' ' ' <<<"$present"))"
done
log "images ready: localhost/pause:1 localhost/busybox:1 localhost/busybox:latest"
