//! Volumes (`pkg/apis/core/validation/validation.go`: ValidateVolumes, validateVolumeSource,
//! validateHostPathVolumeSource, validateSecretVolumeSource, validateConfigMapVolumeSource, validateKeyToPath,
//! validateProjectedVolumeSource, validateProjectionSources, validateDownwardAPIVolumeSource,
//! validateDownwardAPIVolumeFile, validatePersistentClaimVolumeSource, validateLocalDescendingPath,
//! ValidateLocalNonReservedPath, validatePathNoBacksteps). Names are unique DNS labels and each volume has
//! exactly one source. The sources a static pod uses (emptyDir, hostPath, configMap, secret, projected,
//! downwardAPI, persistentVolumeClaim) are checked in detail; the network and cloud sources are only counted.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath, Volume, VolumeProjection};

use super::container::{validate_object_field_selector, validate_resource_field_selector};
use super::field::{ErrorList, Path, duplicate, forbidden, invalid, not_supported, required};
use super::names::validate_dns1123_label;
use super::resources::parse_quantity_at;

const FILE_MODE_ERROR: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const VOLUME_FIELD_PATHS: &[&str] =
    &["metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"];

/// `validatePathNoBacksteps`: no `..` element.
pub fn validate_path_no_backsteps(target: &str, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if target.split('/').any(|p| p == "..") {
        errs.push(invalid(path, target, "must not contain '..'"));
    }
    errs
}

/// `validateLocalDescendingPath`: relative, without `..` elements.
pub fn validate_local_descending_path(target: &str, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if target.starts_with('/') {
        errs.push(invalid(path, target, "must be a relative path"));
    }
    errs.extend(validate_path_no_backsteps(target, path));
    errs
}

/// `ValidateLocalNonReservedPath`: also not starting with `..`.
pub fn validate_local_non_reserved_path(target: &str, path: &Path) -> ErrorList {
    let mut errs = validate_local_descending_path(target, path);
    if target.starts_with("..") && !target.starts_with("../") {
        errs.push(invalid(path, target, "must not start with '..'"));
    }
    errs
}

fn validate_mode(mode: Option<i32>, path: &Path, errs: &mut ErrorList) {
    if let Some(m) = mode.filter(|m| !(0..=0o777).contains(m)) {
        errs.push(invalid(path, m, FILE_MODE_ERROR));
    }
}

/// `validateKeyToPath`.
fn validate_key_to_path(kp: &KeyToPath, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if kp.key.is_empty() {
        errs.push(required(&path.child("key"), ""));
    }
    if kp.path.is_empty() {
        errs.push(required(&path.child("path"), ""));
    }
    errs.extend(validate_local_non_reserved_path(&kp.path, &path.child("path")));
    validate_mode(kp.mode, &path.child("mode"), &mut errs);
    errs
}

/// `validateDownwardAPIVolumeFile`.
fn validate_downward_file(f: &DownwardAPIVolumeFile, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    if f.path.is_empty() {
        errs.push(required(&path.child("path"), ""));
    }
    errs.extend(validate_local_non_reserved_path(&f.path, &path.child("path")));
    match (&f.field_ref, &f.resource_field_ref) {
        (Some(fr), rfr) => {
            errs.extend(validate_object_field_selector(fr, VOLUME_FIELD_PATHS, &path.child("fieldRef")));
            if rfr.is_some() {
                errs.push(invalid(
                    path,
                    "resource",
                    "fieldRef and resourceFieldRef can not be specified simultaneously",
                ));
            }
        }
        (None, Some(rfr)) => errs.extend(validate_resource_field_selector(rfr, true, &path.child("resourceFieldRef"))),
        (None, None) => errs.push(required(path, "one of fieldRef and resourceFieldRef is required")),
    }
    validate_mode(f.mode, &path.child("mode"), &mut errs);
    errs
}

fn validate_projection(sources: &[VolumeProjection], path: &Path, errs: &mut ErrorList) {
    let mut all_paths = BTreeSet::new();
    let mut claim = |p: &str, bad: &str, errs: &mut ErrorList| {
        if !p.is_empty() && !all_paths.insert(p.to_string()) {
            errs.push(invalid(path, bad, "conflicting duplicate paths"));
        }
    };
    for (i, s) in sources.iter().enumerate() {
        let sp = path.child("sources").index(i);
        let mut n = 0;
        if let Some(sec) = &s.secret {
            n += 1;
            let pp = sp.child("secret");
            if sec.name.is_empty() {
                errs.push(required(&pp.child("name"), ""));
            }
            for (j, kp) in sec.items.iter().flatten().enumerate() {
                errs.extend(validate_key_to_path(kp, &pp.child("items").index(j)));
                claim(&kp.path, sec.name.as_str(), errs);
            }
        }
        if let Some(cm) = &s.config_map {
            n += 1;
            let pp = sp.child("configMap");
            if cm.name.is_empty() {
                errs.push(required(&pp.child("name"), ""));
            }
            for (j, kp) in cm.items.iter().flatten().enumerate() {
                errs.extend(validate_key_to_path(kp, &pp.child("items").index(j)));
                claim(&kp.path, cm.name.as_str(), errs);
            }
        }
        if let Some(d) = &s.downward_api {
            n += 1;
            for f in d.items.iter().flatten() {
                errs.extend(validate_downward_file(f, &sp.child("downwardAPI")));
                claim(&f.path, &f.path, errs);
            }
        }
        if let Some(t) = &s.service_account_token {
            n += 1;
            let pp = sp.child("serviceAccountToken");
            let exp = t.expiration_seconds.unwrap_or(3600);
            if exp < 600 {
                errs.push(invalid(
                    &pp.child("expirationSeconds"),
                    exp,
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if exp > 1 << 32 {
                errs.push(invalid(
                    &pp.child("expirationSeconds"),
                    exp,
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
            if t.path.is_empty() {
                errs.push(required(&path.child("path"), ""));
            } else {
                errs.extend(validate_local_non_reserved_path(&t.path, &path.child("path")));
            }
        }
        if s.cluster_trust_bundle.is_some() {
            n += 1;
        }
        if s.pod_certificate.is_some() {
            n += 1;
        }
        if n > 1 {
            errs.push(forbidden(&sp, "may not specify more than 1 volume type per source"));
        }
    }
}

/// The sources of a volume, in upstream's order and with its field names (`downwarAPI` is upstream's spelling
/// in the "more than 1" error).
fn sources(v: &Volume) -> [(&'static str, bool); 30] {
    [
        ("emptyDir", v.empty_dir.is_some()),
        ("hostPath", v.host_path.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("secret", v.secret.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("flocker", v.flocker.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("rbd", v.rbd.is_some()),
        ("cinder", v.cinder.is_some()),
        ("cephFS", v.cephfs.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("downwarAPI", v.downward_api.is_some()),
        ("fc", v.fc.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("configMap", v.config_map.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("storageos", v.storageos.is_some()),
        ("projected", v.projected.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("csi", v.csi.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("image", v.image.is_some()),
    ]
}

const HOST_PATH_TYPES: &[&str] =
    &["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"];

/// `validateVolumeSource`: exactly one source, and the detail of the first one.
fn validate_source(v: &Volume, path: &Path) -> ErrorList {
    let mut errs = ErrorList::default();
    let mut first = None;
    for (field, set) in sources(v) {
        if !set {
            continue;
        }
        if first.is_some() {
            errs.push(forbidden(&path.child(field), "may not specify more than 1 volume type"));
        } else {
            first = Some(field);
        }
    }
    match first {
        None => errs.push(required(path, "must specify a volume type")),
        Some("emptyDir") => {
            if let Some(q) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) {
                let sp = path.child("emptyDir").child("sizeLimit");
                match parse_quantity_at(q, &sp) {
                    Ok(q) if q.is_negative() => {
                        errs.push(forbidden(&sp, "SizeLimit field must be a valid resource quantity"))
                    }
                    Ok(_) => {}
                    Err(e) => errs.push(e),
                }
            }
        }
        Some("hostPath") => {
            let hp = v.host_path.as_ref().expect("counted");
            let p = path.child("hostPath");
            if hp.path.is_empty() {
                errs.push(required(&p.child("path"), ""));
            } else {
                errs.extend(validate_path_no_backsteps(&hp.path, &p.child("path")));
                if let Some(t) = hp.type_.as_deref().filter(|t| !HOST_PATH_TYPES.contains(t)) {
                    errs.push(not_supported(&p.child("type"), t, HOST_PATH_TYPES));
                }
            }
        }
        Some("secret") => {
            let s = v.secret.as_ref().expect("counted");
            let p = path.child("secret");
            if s.secret_name.as_deref().unwrap_or("").is_empty() {
                errs.push(required(&p.child("secretName"), ""));
            }
            validate_mode(s.default_mode, &p.child("defaultMode"), &mut errs);
            for (i, kp) in s.items.iter().flatten().enumerate() {
                errs.extend(validate_key_to_path(kp, &p.child("items").index(i)));
            }
        }
        Some("configMap") => {
            let c = v.config_map.as_ref().expect("counted");
            let p = path.child("configMap");
            if c.name.is_empty() {
                errs.push(required(&p.child("name"), ""));
            }
            validate_mode(c.default_mode, &p.child("defaultMode"), &mut errs);
            for (i, kp) in c.items.iter().flatten().enumerate() {
                errs.extend(validate_key_to_path(kp, &p.child("items").index(i)));
            }
        }
        Some("downwarAPI") => {
            let d = v.downward_api.as_ref().expect("counted");
            let p = path.child("downwardAPI");
            validate_mode(d.default_mode, &p.child("defaultMode"), &mut errs);
            for f in d.items.iter().flatten() {
                errs.extend(validate_downward_file(f, &p));
            }
        }
        Some("projected") => {
            let pr = v.projected.as_ref().expect("counted");
            let p = path.child("projected");
            validate_mode(pr.default_mode, &p.child("defaultMode"), &mut errs);
            validate_projection(pr.sources.as_deref().unwrap_or(&[]), &p, &mut errs);
        }
        Some("persistentVolumeClaim") => {
            if v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name.is_empty()) {
                errs.push(required(&path.child("persistentVolumeClaim").child("claimName"), ""));
            }
        }
        Some(_) => {}
    }
    errs
}

/// `ValidateVolumes`: the valid volumes by name, and the errors. A volume with an error is not among the valid
/// ones, so mounts of it are also reported as not found, as upstream.
pub fn validate_volumes<'a>(volumes: &'a [Volume], path: &Path) -> (BTreeMap<String, &'a Volume>, ErrorList) {
    let mut errs = ErrorList::default();
    let mut valid = BTreeMap::new();
    for (i, v) in volumes.iter().enumerate() {
        let p = path.index(i);
        let np = p.child("name");
        let mut el = validate_source(v, &p);
        if v.name.is_empty() {
            el.push(required(&np, ""));
        } else {
            el.extend(validate_dns1123_label(&v.name, &np));
        }
        if valid.contains_key(&v.name) {
            el.push(duplicate(&np, v.name.as_str()));
        }
        if el.is_empty() {
            valid.insert(v.name.clone(), v);
        } else {
            errs.extend(el);
        }
    }
    (valid, errs)
}
