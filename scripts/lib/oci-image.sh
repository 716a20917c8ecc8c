# scripts/lib/oci-image.sh: sourced by the image scripts (build-images.sh, build-kubeadm-images.sh).
# Assembles an OCI image layout by hand (oci-layout, index.json, blobs/sha256/*) from one folder as its single,
# reproducible layer, and tars it for `ctr images import`. The caller sets OUTDIR and defines die().

# OCI platform of this machine (dpkg names match GOARCH for the usual ones).
case "$(dpkg --print-architecture 2>/dev/null || uname -m)" in
    amd64 | x86_64) ARCH=amd64 ;;
    arm64 | aarch64) ARCH=arm64 ;;
    *) die "unsupported architecture $(uname -m)" ;;
esac

EPOCH="1970-01-01T00:00:00Z" # fixed, so configs (and digests) are reproducible

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
size_of() { stat -c %s "$1"; }

# json_array a b c  ->  ["a","b","c"]   (values here never contain " or \)
json_array() {
    local out="" v
    for v in "$@"; do out+="${out:+,}\"$v\""; done
    printf '[%s]' "$out"
}

# put_blob LAYOUT FILE -> moves FILE into LAYOUT/blobs/sha256/<digest>, prints digest
put_blob() {
    local layout="$1" file="$2" digest
    digest="$(sha256_of "$file")"
    mkdir -p "$layout/blobs/sha256"
    mv -f "$file" "$layout/blobs/sha256/$digest"
    printf '%s' "$digest"
}

# build_image NAME ROOTFS CONFIG_FRAGMENT REF...
#   NAME             short name used for file names
#   ROOTFS           directory that becomes the single layer
#   CONFIG_FRAGMENT  JSON members for the image config's "config" object
#   REF...           full image references to put in index.json
# Writes $OUTDIR/NAME.oci.tar
build_image() {
    local name="$1" rootfs="$2" cfg="$3"
    shift 3
    local layout="$OUTDIR/$name.layout"
    rm -rf "$layout"
    mkdir -p "$layout/blobs/sha256"

    # Layer: uncompressed tar, so its digest is also its diff_id.
    local layer_tmp="$layout/layer.tar"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --format=gnu -C "$rootfs" -cf "$layer_tmp" .
    local layer_size layer_digest
    layer_size="$(size_of "$layer_tmp")"
    layer_digest="$(put_blob "$layout" "$layer_tmp")"

    local config_tmp="$layout/config.json"
    printf '{"created":"%s","architecture":"%s","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"%s","created_by":"rkubelet scripts/build-images.sh"}]}' \
        "$EPOCH" "$ARCH" "$cfg" "$layer_digest" "$EPOCH" >"$config_tmp"
    local config_size config_digest
    config_size="$(size_of "$config_tmp")"
    config_digest="$(put_blob "$layout" "$config_tmp")"

    local manifest_tmp="$layout/manifest.json"
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
        "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$manifest_tmp"
    local manifest_size manifest_digest
    manifest_size="$(size_of "$manifest_tmp")"
    manifest_digest="$(put_blob "$layout" "$manifest_tmp")"

    # One index entry per reference, all pointing at the same manifest. The
    # ref.name annotation is the FULL reference (see the naming note above).
    local entries="" ref
    for ref in "$@"; do
        entries+="${entries:+,}$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"%s"}}' \
            "$manifest_digest" "$manifest_size" "$ARCH" "$ref")"
    done
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}' "$entries" >"$layout/index.json"
    printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        --format=gnu -C "$layout" -cf "$OUTDIR/$name.oci.tar" oci-layout index.json blobs
    log "built $name: manifest sha256:${manifest_digest:0:12} layer $((layer_size / 1024)) KiB -> $OUTDIR/$name.oci.tar"
}

