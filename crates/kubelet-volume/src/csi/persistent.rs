//! The persistent volume behind a pod's `persistentVolumeClaim` or generic `ephemeral` volume
//! (`pkg/kubelet/volumemanager/populator/desired_state_of_world_populator.go` createVolumeSpec, getPVCExtractPV,
//! getPVSpec; `component-helpers/storage/ephemeral`): the claim (for an ephemeral volume `<pod>-<volume>`, which the
//! pod must own) is read from the apiserver, must be bound and not being deleted, and its PersistentVolume must be
//! bound to it. Errors carry upstream's texts (`error processing PVC ns/name: PVC is not bound`); the volume
//! manager reports them as upstream's `Unable to attach or mount volumes` and tries again at the next sync.
//!
//! Contract: called at the set-up of each such volume, two GETs (the Node authorizer allows exactly these).

use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolume, Pod, Volume};
use kubelet_apiclient::StorageApi;

/// The finalizer that keeps a claim in use from going (`kubernetes.io/pvc-protection`).
const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// What a claim's PersistentVolume is, for the volume manager.
#[derive(Clone, Debug, PartialEq)]
pub enum Backing {
    /// A CSI volume.
    Csi(Box<CsiPv>),
    /// A `hostPath` PersistentVolume: the host's folder, checked by its type.
    HostPath {
        /// The path.
        path: String,
        /// Its `type`.
        type_: String,
    },
}

/// A CSI PersistentVolume as the pod uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct CsiPv {
    /// The PersistentVolume's name (the spec name: its folder under the pod, its name in events).
    pub pv_name: String,
    /// The PersistentVolume's CSI source.
    pub source: CSIPersistentVolumeSource,
    /// Read-only: the claim reference's `readOnly` or the source's.
    pub read_only: bool,
    /// The PersistentVolume's first access mode.
    pub access_mode: Option<String>,
    /// Whether it lists `ReadWriteOnce` or `ReadWriteOncePod` (`hasReadWriteOnce`, for the fsGroup under
    /// `ReadWriteOnceWithFSType`).
    pub read_write_once: bool,
    /// Its mount options.
    pub mount_options: Vec<String>,
    /// A raw block volume (`volumeMode: Block`).
    pub block: bool,
}

impl CsiPv {
    /// The volume's unique name (`kubernetes.io/csi/<driver>^<handle>`), as `volumesInUse` and `volumesAttached` show it.
    pub fn unique_name(&self) -> String {
        format!("kubernetes.io/csi/{}^{}", self.source.driver, self.source.volume_handle)
    }
}

/// The claim's name of a pod volume that has one (`ephemeral.VolumeClaimName` for an ephemeral volume), and whether
/// it is ephemeral.
pub fn claim_name(pod: &Pod, v: &Volume) -> Option<(String, bool)> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some((c.claim_name.clone(), false));
    }
    v.ephemeral.as_ref().map(|_| (format!("{}-{}", pod.metadata.name.as_deref().unwrap_or_default(), v.name), true))
}

/// How the pod's containers use a volume: in their `volumeMounts`, in their `volumeDevices`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Mounted (a Filesystem volume).
    pub mounted: bool,
    /// A device (a Block volume).
    pub device: bool,
}

/// How the pod's containers (init, app and ephemeral) use the volume `name`.
pub fn usage(pod: &Pod, name: &str) -> Usage {
    let spec = pod.spec.as_ref();
    let mut u = Usage::default();
    let plain = spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
    for c in plain {
        u.mounted |= c.volume_mounts.iter().flatten().any(|m| m.name == name);
        u.device |= c.volume_devices.iter().flatten().any(|d| d.name == name);
    }
    for c in spec.into_iter().flat_map(|s| s.ephemeral_containers.iter().flatten()) {
        u.mounted |= c.volume_mounts.iter().flatten().any(|m| m.name == name);
        u.device |= c.volume_devices.iter().flatten().any(|d| d.name == name);
    }
    u
}

/// The volume `v` of the pod resolved to its PersistentVolume; `usage` says how the containers use it (a Block
/// volume may only be a device, a Filesystem one only a mount).
pub async fn resolve(api: &dyn StorageApi, pod: &Pod, v: &Volume, usage: Usage) -> Result<Backing, String> {
    let (claim, ephemeral) = claim_name(pod, v).ok_or("not a claim")?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let processing = |e: String| format!("error processing PVC {ns}/{claim}: {e}");
    let pvc = match api.get_pvc(ns, &claim).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            let e = format!("persistentvolumeclaims {claim:?} not found");
            return Err(processing(format!("failed to fetch PVC from API server: {e}")));
        }
        Err(e) => return Err(processing(format!("failed to fetch PVC from API server: {e}"))),
    };
    let protected = pvc.metadata.finalizers.iter().flatten().any(|f| f == PVC_PROTECTION);
    if pvc.metadata.deletion_timestamp.is_some() && !protected {
        return Err(processing("PVC is being deleted".into()));
    }
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err(processing("PVC is not bound".into()));
    }
    let pv_name = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
    if pv_name.is_empty() {
        return Err(processing("PVC has empty pvc.Spec.VolumeName".into()));
    }
    if ephemeral {
        let owned = pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref());
        if !owned {
            let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
            return Err(format!("PVC {ns}/{claim} was not created for pod {ns}/{pod_name} (pod is not owner)"));
        }
    }
    let pv = match api.get_pv(&pv_name).await {
        Ok(Some(pv)) => pv,
        Ok(None) => {
            let e = format!("persistentvolumes {pv_name:?} not found");
            return Err(processing(format!("failed to fetch PV {pv_name} from API server: {e}")));
        }
        Err(e) => return Err(processing(format!("failed to fetch PV {pv_name} from API server: {e}"))),
    };
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(claim_ref) = &spec.claim_ref else {
        return Err(processing(format!(
            "found PV object {pv_name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        )));
    };
    let pvc_uid = pvc.metadata.uid.clone().unwrap_or_default();
    if claim_ref.uid.as_deref().unwrap_or_default() != pvc_uid {
        return Err(processing(format!(
            "found PV object {pv_name} but its pv.Spec.ClaimRef.UID {} does not point to claim.UID {pvc_uid}",
            claim_ref.uid.as_deref().unwrap_or_default()
        )));
    }
    let mode = spec.volume_mode.as_deref().unwrap_or("Filesystem");
    if usage.mounted && mode != "Filesystem" {
        return Err(format!("volume {} has volumeMode {mode}, but is specified in volumeMounts", v.name));
    }
    if usage.device && mode != "Block" {
        return Err(format!("volume {} has volumeMode {mode}, but is specified in volumeDevices", v.name));
    }
    let claim_read_only = v.persistent_volume_claim.as_ref().and_then(|c| c.read_only) == Some(true);
    backing(&pv, &pv_name, claim_read_only)
}

fn backing(pv: &PersistentVolume, pv_name: &str, claim_read_only: bool) -> Result<Backing, String> {
    let spec = pv.spec.clone().unwrap_or_default();
    if let Some(h) = &spec.host_path {
        return Ok(Backing::HostPath { path: h.path.clone(), type_: h.type_.clone().unwrap_or_default() });
    }
    let Some(source) = spec.csi.clone() else {
        let kind = serde_json::to_value(&spec)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()))
            .unwrap_or_default()
            .into_iter()
            .find(|k| {
                !matches!(
                    k.as_str(),
                    "accessModes"
                        | "capacity"
                        | "claimRef"
                        | "mountOptions"
                        | "nodeAffinity"
                        | "persistentVolumeReclaimPolicy"
                        | "storageClassName"
                        | "volumeMode"
                        | "volumeAttributesClassName"
                )
            })
            .unwrap_or_else(|| "unknown".into());
        return Err(format!(
            "PersistentVolume {pv_name} has source {kind}, which rkubelet does not support (supported: csi, hostPath)"
        ));
    };
    let modes = spec.access_modes.clone().unwrap_or_default();
    Ok(Backing::Csi(Box::new(CsiPv {
        pv_name: pv_name.to_string(),
        read_only: claim_read_only || source.read_only == Some(true),
        source,
        access_mode: modes.first().cloned(),
        read_write_once: modes.iter().any(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod"),
        mount_options: spec.mount_options.clone().unwrap_or_default(),
        block: spec.volume_mode.as_deref() == Some("Block"),
    })))
}
