//! Raw block PersistentVolumes (`volumeMode: Block`; `pkg/volume/csi/csi_block.go`, `pkg/volume/util` MapBlockVolume
//! and UnmapBlockVolume, `volumepathhandler`), with upstream's paths under
//! `<root>/plugins/kubernetes.io/csi/volumeDevices`:
//! - `staging/<pv>`: `NodeStageVolume`'s target, once per node;
//! - `publish/<pv>/<podUID>`: `NodePublishVolume`'s target, a device file the driver makes, per pod;
//! - `<pv>/data/vol_data.json`: the volume's handle and driver, for the teardown;
//! - `<pv>/dev/<podUID>`: the published device bind-mounted, with a loop device over it that keeps the device
//!   open while the pod uses it (upstream's file descriptor lock);
//! - and the pod's `volumeDevices/kubernetes.io~csi/<pv>`: a symbolic link to the published device, which the
//!   runtime gives the containers at their `volumeDevices` paths.
//!
//! Contract: [`CsiPlugin::map_block`] at the set-up of a pod's Block claim, [`CsiPlugin::unmap_block`] for each
//! link in a pod's `volumeDevices/kubernetes.io~csi` when its containers are gone (the last pod of the volume on the
//! node unstages it). Both hold the volume's lock. A mapped volume is found again after a restart from the link and
//! the bind mount ([`CsiPlugin::is_mapped`]). Errors are upstream's texts, retried at the next sync.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use kubelet_proto::csi::v1::node_service_capability::rpc::Type;
use kubelet_types::objects::ObjectSource;
use tracing::info;

use super::node::{CallError, NodeClient, Publish, Stage};
use super::persistent::CsiPv;
use super::plugin::{CsiPlugin, log_text};
use super::voldata;
use crate::{Mounter, VolumeError};

/// `fsTypeBlockName`: the filesystem type that asks a driver for a block volume.
const BLOCK: &str = "block";

/// The plugin's block folder.
fn devices_dir(root: &Path) -> PathBuf {
    root.join("plugins/kubernetes.io/csi/volumeDevices")
}

/// The staging path of a block volume (`GetStagingPath`).
pub fn staging_path(root: &Path, spec: &str) -> PathBuf {
    devices_dir(root).join("staging").join(spec)
}

/// The publish target of a pod's block volume (`getPublishPath`).
pub fn publish_path(root: &Path, spec: &str, pod_uid: &str) -> PathBuf {
    devices_dir(root).join("publish").join(spec).join(pod_uid)
}

/// The global map folder of a block volume (`GetGlobalMapPath`): its bind mounts per pod.
pub fn global_map_dir(root: &Path, spec: &str) -> PathBuf {
    devices_dir(root).join(spec).join("dev")
}

/// The folder of `vol_data.json` of a block volume (`getVolumeDeviceDataDir`).
pub fn data_dir(root: &Path, spec: &str) -> PathBuf {
    devices_dir(root).join(spec).join("data")
}

/// The folder of a pod's block volume links (`GetPodVolumeDeviceDir`).
pub fn pod_links_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("volumeDevices").join(voldata::PLUGIN_DIR)
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o750))
}

fn removed(r: std::io::Result<()>) -> std::io::Result<()> {
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl CsiPlugin {
    /// Whether the pod's block volume `spec` is mapped (by this process or an earlier kubelet): its link is there and
    /// the published device is bind-mounted in the global map folder.
    pub fn is_mapped(&self, pod_dir: &Path, spec: &str, pod_uid: &str, mounter: &dyn Mounter) -> bool {
        let link = pod_links_dir(pod_dir).join(spec);
        let global = global_map_dir(&self.root, spec).join(pod_uid);
        std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink())
            && mounter.mounts_under(&global).contains(&global)
    }

    /// Stages (once), publishes and maps the pod's Block PersistentVolume `pv` (`SetUpDevice`, `MapPodDevice`,
    /// `MapBlockVolume`); answers the pod's link to the device.
    pub async fn map_block(
        &self,
        pod: &Pod,
        pv: &CsiPv,
        pod_dir: &Path,
        objects: &dyn ObjectSource,
        mounter: &dyn Mounter,
    ) -> Result<PathBuf, VolumeError> {
        let (driver, handle, spec) = (pv.source.driver.as_str(), pv.source.volume_handle.as_str(), &pv.pv_name);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let failed = |operation: &'static str, message: String| VolumeError::Operation {
            operation,
            spec: spec.clone(),
            message,
        };
        let _one = self.lock(driver, handle).await;
        let data = voldata::volume_data(spec, handle, driver, &self.node, "Persistent");
        let data: voldata::VolumeData = data.into_iter().filter(|(k, _)| k != "volumeLifecycleMode").collect();
        let dir = data_dir(&self.root, spec);
        make_dir(&dir)
            .map_err(|e| log_text(format!("failed to create data dir {}:  {e}", dir.display())))
            .and_then(|()| {
                voldata::save(&dir, &data)
                    .map_err(|e| log_text(format!("csi.NewBlockVolumeMapper failed to save volume info data: {e}")))
            })
            .map_err(|e| failed("MapVolume.SetUpDevice", e))?;
        let endpoint = self.endpoint(driver).map_err(|e| {
            failed("MapVolume.SetUpDevice", log_text(format!("blockMapper.SetUpDevice failed to get CSI client: {e}")))
        })?;
        let client = NodeClient::of(driver, &endpoint);
        let publish_context = self.publish_context(driver, handle).await.map_err(|e| {
            failed(
                "MapVolume.SetUpDevice",
                log_text(format!("blockMapper.SetupDevice failed to get volume attachment: {e}")),
            )
        })?;
        // `failed to get NodeStageSecretRef ns/name: ...`, as the block mapper words it.
        let secrets = |r: &Option<k8s_openapi::api::core::v1::SecretReference>, which: &'static str| {
            let r = r.as_ref().map(|r| (r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default()));
            async move {
                let Some((ns, name)) = r else { return Ok(HashMap::new()) };
                let data = super::plugin::secret_data(objects, &ns, &name).await;
                data.map_err(|e| format!("failed to get {which} {ns}/{name}: {e}"))
            }
        };
        let caps = client.capabilities().await.map_err(|e| failed("MapVolume.SetUpDevice", e.to_string()))?;
        let staging = staging_path(&self.root, spec);
        if caps.contains(&Type::StageUnstageVolume) && !self.staged.lock().unwrap().contains(&staging) {
            make_dir(&staging).map_err(|e| {
                failed(
                    "MapVolume.SetUpDevice",
                    log_text(format!(
                        "blockMapper.stageVolumeForBlock failed to create dir {}: {e}",
                        staging.display()
                    )),
                )
            })?;
            let stage_secrets = secrets(&pv.source.node_stage_secret_ref, "NodeStageSecretRef")
                .await
                .map_err(|e| failed("MapVolume.SetUpDevice", e))?;
            let request = Stage {
                volume_id: handle.to_string(),
                staging_target_path: staging.display().to_string(),
                publish_context: publish_context.clone(),
                volume_context: pv.source.volume_attributes.clone().unwrap_or_default().into_iter().collect(),
                secrets: stage_secrets,
                fs_type: BLOCK.into(),
                access_mode: pv.access_mode.clone(),
                ..Default::default()
            };
            client.stage(request).await.map_err(|e| failed("MapVolume.SetUpDevice", e.to_string()))?;
            self.staged.lock().unwrap().insert(staging.clone());
        }
        // MapPodDevice.
        let target = publish_path(&self.root, spec, &uid);
        let publish_dir = target.parent().unwrap_or(&target).to_path_buf();
        make_dir(&publish_dir).map_err(|e| {
            failed(
                "MapVolume.MapPodDevice",
                log_text(format!(
                    "blockMapper.publishVolumeForBlock failed to create dir {}:  {e}",
                    publish_dir.display()
                )),
            )
        })?;
        let publish_secrets =
            secrets(&pv.source.node_publish_secret_ref, "NodePublishSecretRef").await.map_err(|e| {
                failed("MapVolume.MapPodDevice", log_text(format!("blockMapper.publishVolumeForBlock {e}")))
            })?;
        let mut context: HashMap<String, String> =
            pv.source.volume_attributes.clone().unwrap_or_default().into_iter().collect();
        if self.csi_driver(driver).ok().flatten().is_some_and(|d| d.spec.pod_info_on_mount == Some(true)) {
            context.extend(super::plugin::pod_info(pod, false));
        }
        let publish = Publish {
            volume_id: handle.to_string(),
            target_path: target.display().to_string(),
            staging_target_path: staging.display().to_string(),
            publish_context,
            volume_context: context,
            secrets: publish_secrets,
            readonly: pv.read_only,
            fs_type: BLOCK.into(),
            access_mode: pv.access_mode.clone(),
            ..Default::default()
        };
        if let Err(e) = client.publish(publish).await {
            let message = match e {
                CallError::Final(m) | CallError::Uncertain(m) => m,
            };
            return Err(failed("MapVolume.MapPodDevice", message));
        }
        // MapBlockVolume: the device bind-mounted in the global map folder, the pod's link, the loop device's lock.
        let global = global_map_dir(&self.root, spec);
        let bound = global.join(&uid);
        let map = |e: String| failed("MapVolume.MapBlockVolume", e);
        make_dir(&global).map_err(|e| map(format!("failed to mkdir {}: {e}", global.display())))?;
        if !mounter.mounts_under(&bound).contains(&bound) {
            if !bound.exists() {
                std::fs::File::create(&bound)
                    .map_err(|e| map(format!("failed to open file {}: {e}", bound.display())))?;
            }
            mounter.bind_mount(&target, &bound).map_err(|e| {
                // No stray file: the last pod's teardown counts the files in the map folder.
                let _ = std::fs::remove_file(&bound);
                map(format!(
                    "failed to bind mount devicePath: {} to linkPath {}: {e}",
                    target.display(),
                    bound.display()
                ))
            })?;
        }
        let links = pod_links_dir(pod_dir);
        make_dir(&links).map_err(|e| map(format!("failed to mkdir {}: {e}", links.display())))?;
        let link = links.join(spec);
        removed(std::fs::remove_file(&link))
            .map_err(|e| map(format!("failed to remove file {}: {e}", link.display())))?;
        std::os::unix::fs::symlink(&target, &link).map_err(|e| map(e.to_string()))?;
        mounter.lock_device(&bound).map_err(|e| map(format!("blkUtil.AttachFileDevice failed. {e}")))?;
        info!(pod = %kubelet_types::pod_update::pod_ref(pod), driverName = driver, volumeHandle = handle, path = %link.display(), "CSI block volume mapped");
        Ok(link)
    }

    /// Unmaps the pod's block volume `spec` (`UnmapBlockVolume`, `UnmapPodDevice`) and, as its last pod on the node,
    /// unstages it and removes its folders (`TearDownDevice`).
    pub async fn unmap_block(
        &self,
        pod_dir: &Path,
        pod_uid: &str,
        spec: &str,
        mounter: &dyn Mounter,
    ) -> Result<(), VolumeError> {
        let failed = |operation: &'static str, message: String| VolumeError::Operation {
            operation,
            spec: spec.to_string(),
            message,
        };
        let link = pod_links_dir(pod_dir).join(spec);
        let data = match voldata::load(&data_dir(&self.root, spec)) {
            Ok(d) => d,
            // Its device was torn down after the link's last removal failed: only the link is left.
            Err(_)
                if !data_dir(&self.root, spec).exists() && !global_map_dir(&self.root, spec).join(pod_uid).exists() =>
            {
                return removed(std::fs::remove_file(&link)).map_err(|e| failed("UnmapVolume", e.to_string()));
            }
            Err(e) => {
                let text = format!("unmapper failed to load volume data file [{spec}]: {e}");
                return Err(failed("UnmapVolume", log_text(text)));
            }
        };
        let get = |k: &str| data.get(k).cloned().unwrap_or_default();
        let (driver, handle) = (get("driverName"), get("volumeHandle"));
        let _one = self.lock(&driver, &handle).await;
        let global = global_map_dir(&self.root, spec);
        let bound = global.join(pod_uid);
        let unmap = |e: String| failed("UnmapVolume.UnmapBlockVolume", e);
        // The pod's link goes last: until every step below succeeded it is how the next teardown finds the volume.
        mounter.unlock_device(&bound).map_err(|e| unmap(format!("blkUtil.DetachFileDevice failed. {e}")))?;
        if mounter.mounts_under(&bound).contains(&bound) {
            mounter.unmount(&bound).map_err(|e| unmap(format!("failed to unmount {}: {e}", bound.display())))?;
        }
        removed(std::fs::remove_file(&bound)).map_err(|e| unmap(e.to_string()))?;
        let endpoint = self.endpoint(&driver).map_err(|e| {
            failed(
                "UnmapVolume.UnmapPodDevice",
                log_text(format!("blockMapper.UnmapPodDevice failed to get CSI client: {e}")),
            )
        })?;
        let client = NodeClient::of(&driver, &endpoint);
        let target = publish_path(&self.root, spec, pod_uid);
        client.unpublish(&handle, &target.display().to_string()).await.map_err(|e| {
            failed("UnmapVolume.UnmapPodDevice", log_text(format!("blockMapper.unpublishVolumeForBlock failed: {e}")))
        })?;
        removed(std::fs::remove_file(&target)).map_err(|e| failed("UnmapVolume.UnmapPodDevice", e.to_string()))?;
        info!(driverName = %driver, volumeHandle = %handle, path = %target.display(), "CSI block volume unmapped");
        // The last pod of the volume on the node: TearDownDevice.
        let others = std::fs::read_dir(&global).map(|rd| rd.count()).unwrap_or(0);
        if others > 0 {
            return removed(std::fs::remove_file(&link)).map_err(|e| unmap(e.to_string()));
        }
        let teardown = |e: String| failed("UnmapDevice.TearDownDevice", e);
        let staging = staging_path(&self.root, spec);
        self.staged.lock().unwrap().remove(&staging);
        if staging.exists() {
            let caps = client.capabilities().await.map_err(|e| {
                teardown(log_text(format!(
                    "blockMapper.unstageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability: {e}"
                )))
            })?;
            if caps.contains(&Type::StageUnstageVolume) {
                client
                    .unstage(&handle, &staging.display().to_string())
                    .await
                    .map_err(|e| teardown(log_text(format!("blockMapper.unstageVolumeForBlock failed: {e}"))))?;
            }
            removed(std::fs::remove_dir_all(&staging)).map_err(|e| teardown(e.to_string()))?;
        }
        // cleanupOrphanDeviceFiles.
        let publish_dir = target.parent().unwrap_or(&target).to_path_buf();
        removed(std::fs::remove_dir(&publish_dir)).map_err(|e| {
            teardown(log_text(format!("failed to remove publish directory [{}]: {e}", publish_dir.display())))
        })?;
        let volume_dir = devices_dir(&self.root).join(spec);
        if mounter.mounts_under(&volume_dir).is_empty() {
            removed(std::fs::remove_dir_all(&volume_dir)).map_err(|e| teardown(e.to_string()))?;
        }
        info!(driverName = %driver, volumeHandle = %handle, "CSI block volume unstaged");
        removed(std::fs::remove_file(&link)).map_err(|e| unmap(e.to_string()))
    }
}
