//! The volume manager's claims (`persistentVolumeClaim` and generic `ephemeral` volumes) and the CSI volumes' usage
//! (`pkg/kubelet/volumemanager` with `pkg/volume/csi`'s metrics): see [`VolumeManager::set_up_claim`],
//! [`VolumeManager::volumes_in_use`] and [`VolumeManager::csi_volume_stats`].

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};
use kubelet_types::objects::MountedVolume;
use kubelet_types::{PodUid, pod_update::pod_ref};
use tracing::info;

use super::{Claimed, VolumeManager};
use crate::csi::plugin::CsiPlugin;
use crate::{VolumeError, hostpath};

impl VolumeManager {
    /// Sets up a claim's volume (`persistentVolumeClaim` or generic `ephemeral`): its PersistentVolume resolved,
    /// then a hostPath checked or a CSI volume staged and published, or found published by an earlier kubelet. A
    /// volume set up before is resolved again only where its driver asks for a republish.
    pub(super) async fn set_up_claim(
        &self,
        pod: &Pod,
        v: &Volume,
        before: Option<&MountedVolume>,
    ) -> Result<MountedVolume, VolumeError> {
        use crate::csi::persistent::Backing;
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        if let Some(m) = before {
            let pods = self.csi_pods.lock().unwrap();
            let driver = pods.get(&uid).and_then(|p| p.claims.get(&v.name)).map(|c| c.driver.clone());
            drop(pods);
            match driver {
                Some(d) if self.csi()?.requires_republish(&d) => {}
                _ => return Ok(m.clone()),
            }
        }
        let csi = self.csi()?;
        match csi.resolve(pod, v, crate::csi::persistent::usage(pod, &v.name)).await? {
            Backing::HostPath { path, type_ } => {
                if before.is_none() {
                    hostpath::check_type(Path::new(&path), &type_).map_err(VolumeError::HostPath)?;
                }
                let read_only = v.persistent_volume_claim.as_ref().and_then(|c| c.read_only) == Some(true);
                Ok(MountedVolume { host_path: PathBuf::from(path), read_only, block: false })
            }
            Backing::Csi(pv) => {
                let claim = crate::csi::persistent::claim_name(pod, v).map(|(c, _)| c).unwrap_or_default();
                let entry = Claimed { unique: pv.unique_name(), driver: pv.source.driver.clone(), claim };
                let new = {
                    let mut pods = self.csi_pods.lock().unwrap();
                    let claims = &mut pods.entry(uid.clone()).or_default().claims;
                    let new = claims.get(&v.name).is_none_or(|c| c.unique != entry.unique);
                    claims.insert(v.name.clone(), entry);
                    new
                };
                if new {
                    self.in_use_changes.send_modify(|n| *n += 1);
                }
                let pod_dir = self.pods_dir.join(uid.as_str());
                if before.is_none() && csi.attach_required(&pv.source.driver) {
                    self.verify_attached(&pv)?;
                }
                if pv.block {
                    let mounter = self.mounter.as_ref();
                    let link = crate::csi::block::pod_links_dir(&pod_dir).join(&pv.pv_name);
                    if before.is_none() && csi.is_mapped(&pod_dir, &pv.pv_name, uid.as_str(), mounter) {
                        info!(pod = %pod_ref(pod), volume = %v.name, path = %link.display(), "CSI block volume reconstructed from its link and bind mount");
                    } else {
                        csi.map_block(pod, &pv, &pod_dir, self.objects.as_ref(), mounter).await?;
                    }
                    return Ok(MountedVolume { host_path: link, read_only: pv.read_only, block: true });
                }
                let mounted = |p: &Path| self.is_mount_point(p);
                if before.is_none() && CsiPlugin::is_set_up(&pod_dir, &pv.pv_name, mounted) {
                    let host_path = crate::csi::voldata::mount_dir(&pod_dir, &pv.pv_name);
                    info!(pod = %pod_ref(pod), volume = %v.name, path = %host_path.display(), "CSI volume reconstructed from vol_data.json and the mount table");
                    return Ok(MountedVolume { host_path, read_only: pv.read_only, block: false });
                }
                let host_path =
                    csi.set_up_persistent(pod, &pv, &pod_dir, self.objects.as_ref(), &self.tokens, mounted).await?;
                Ok(MountedVolume { host_path, read_only: pv.read_only, block: false })
            }
        }
    }

    /// `VerifyControllerAttachedVolume`: an attach-required volume mounts only once the Node reports it in use (so
    /// the attach/detach controller will not detach it under the pod) and the controller lists it as attached.
    fn verify_attached(&self, pv: &crate::csi::persistent::CsiPv) -> Result<(), VolumeError> {
        let unique = pv.unique_name();
        let node = self.node.as_ref().and_then(|n| n.borrow().clone());
        let status = node.and_then(|n| n.status).unwrap_or_default();
        if !status.volumes_in_use.iter().flatten().any(|u| *u == unique) {
            return Err(VolumeError::Unattached(format!(
                "Volume has not been added to the list of VolumesInUse in the node's volume status for volume \
                 {unique:?} (UniqueName: {unique:?})"
            )));
        }
        if !status.volumes_attached.iter().flatten().any(|a| a.name == unique) {
            return Err(VolumeError::Unattached(format!(
                "Volume not attached according to node status for volume {unique:?} (UniqueName: {unique:?})"
            )));
        }
        Ok(())
    }

    /// The unique names of the CSI PersistentVolumes the node's pods use (`GetVolumesInUse`, for the Node's
    /// `volumesInUse`), sorted.
    /// These are the claims of the pods set up and, read from disk, every persistent volume still published or
    /// staged on the node: so after a restart the list is whole before any pod synced, and a volume stays in it
    /// until it is unstaged (upstream's `GetVolumesInUse` with its actual state).
    pub fn volumes_in_use(&self) -> Vec<String> {
        let pods = self.csi_pods.lock().unwrap();
        let mut all: std::collections::BTreeSet<String> =
            pods.values().flat_map(|p| p.claims.values().map(|c| c.unique.clone())).collect();
        drop(pods);
        if let Some(csi) = &self.csi {
            all.extend(csi.in_use_on_node());
        }
        all.into_iter().collect()
    }

    /// The usage of every published CSI volume whose driver reports it (`NodeGetVolumeStats` where the driver has
    /// `GET_VOLUME_STATS`; upstream's CSI metrics provider), with the driver's volume condition where `health`
    /// (`CSIVolumeHealth`) and the driver has `VOLUME_CONDITION`. One call per volume, up to 2 minutes each; a
    /// volume whose driver fails or is gone is left out (logged).
    pub async fn csi_volume_stats(&self, health: bool) -> Vec<CsiVolumeStat> {
        use kubelet_proto::csi::v1::node_service_capability::rpc::Type;
        let mounted = self.mounted.lock().unwrap().clone();
        let pods = self.csi_pods.lock().unwrap().clone();
        let mut out = vec![];
        for (uid, volumes) in mounted {
            let pod = pods.get(&uid).cloned().unwrap_or_default();
            for (name, m) in volumes {
                // A filesystem volume's `vol_data.json` is beside its target; a block volume's in its data folder,
                // its usage asked of its map in the global map folder (upstream's `MetricsCsi` of the block mapper).
                let (data_dir, path) = if m.block {
                    let Some(spec) = m.host_path.file_name().map(|s| s.to_string_lossy().into_owned()) else {
                        continue;
                    };
                    let root = self.pods_dir.parent().unwrap_or(&self.pods_dir);
                    let dev = crate::csi::block::global_map_dir(root, &spec).join(uid.as_str());
                    (crate::csi::block::data_dir(root, &spec), dev)
                } else {
                    let Some(dir) = m.host_path.parent() else { continue };
                    if dir.parent().and_then(|p| p.file_name()).is_none_or(|n| n != crate::csi::voldata::PLUGIN_DIR) {
                        continue;
                    }
                    (dir.to_path_buf(), m.host_path.clone())
                };
                let Ok(data) = crate::csi::voldata::load(&data_dir) else { continue };
                let get = |k: &str| data.get(k).cloned().unwrap_or_default();
                let Some(endpoint) = self.csi.as_ref().and_then(|c| c.driver_endpoint(&get("driverName"))) else {
                    continue;
                };
                let client = crate::csi::node::NodeClient::of(&get("driverName"), &endpoint);
                let caps = match client.capabilities().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(podUID = %uid, volume = %name, error = %e, "failed to calculate volume metrics");
                        continue;
                    }
                };
                if !caps.contains(&Type::GetVolumeStats) {
                    continue;
                }
                let path = path.display().to_string();
                let resp = match client.volume_stats(&get("volumeHandle"), &path).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::debug!(podUID = %uid, volume = %name, error = %e, "failed to calculate volume metrics");
                        continue;
                    }
                };
                let condition = (health && caps.contains(&Type::VolumeCondition))
                    .then(|| resp.volume_condition.clone().unwrap_or_default())
                    .map(|c| (c.abnormal, c.message));
                if condition.is_none() && resp.usage.is_empty() {
                    continue;
                }
                let mut stat = CsiVolumeStat {
                    pod_uid: uid.as_str().to_string(),
                    namespace: pod.namespace.clone(),
                    pod_name: pod.name.clone(),
                    volume: name.clone(),
                    claim: pod.claims.get(&name).map(|c| c.claim.clone()),
                    condition,
                    ..Default::default()
                };
                for u in resp.usage {
                    let (avail, total, used) = (u.available.max(0) as u64, u.total.max(0) as u64, u.used.max(0) as u64);
                    if u.unit == kubelet_proto::csi::v1::volume_usage::Unit::Bytes as i32 {
                        (stat.available_bytes, stat.capacity_bytes, stat.used_bytes) = (avail, total, used);
                    } else if u.unit == kubelet_proto::csi::v1::volume_usage::Unit::Inodes as i32 {
                        (stat.inodes_free, stat.inodes, stat.inodes_used) = (avail, total, used);
                    }
                }
                out.push(stat);
            }
        }
        out
    }
}

/// A CSI volume's usage, as its driver reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsiVolumeStat {
    /// The pod's UID, namespace and name.
    pub pod_uid: String,
    pub namespace: String,
    pub pod_name: String,
    /// The volume's name in the pod.
    pub volume: String,
    /// The claim behind it (`persistentVolumeClaim` or generic `ephemeral`), for `pvcRef` and the
    /// `kubelet_volume_stats_*` metrics.
    pub claim: Option<String>,
    pub available_bytes: u64,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub inodes_free: u64,
    pub inodes: u64,
    pub inodes_used: u64,
    /// Abnormal and the driver's message, where asked for (`CSIVolumeHealth`) and reported.
    pub condition: Option<(bool, String)>,
}
