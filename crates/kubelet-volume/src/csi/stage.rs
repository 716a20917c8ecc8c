//! The CSI plugin's persistent volumes (`pkg/volume/csi/csi_attacher.go` MountDevice and UnmountDevice,
//! `csi_plugin.go` getPublishContext, with `csi_mounter.go` SetUpAt): a PersistentVolume is staged once per node
//! (`NodeStageVolume` at `plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`, `vol_data.json` beside
//! it) where the driver has `STAGE_UNSTAGE_VOLUME`, then published for each pod; the last pod's teardown on the
//! node unstages it. Where the CSIDriver does not say `attachRequired: false`, the volume's VolumeAttachment to
//! this node must be attached, and its metadata is the publish context.
//!
//! Contract: [`CsiPlugin::set_up_persistent`] at the set-up of a pod's claim, [`CsiPlugin::tear_down`] (in
//! `plugin.rs`) unstages after the last unpublish. Both hold the volume's lock, so a pod starting on a volume and
//! another's teardown do not interleave. Which pods still use a volume is read from their `vol_data.json` files, so
//! the answer survives a restart. Errors are upstream's texts, for the caller's events, retried at the next sync.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume};
use kubelet_proto::csi::v1::node_service_capability::rpc::Type;
use kubelet_types::objects::ObjectSource;
use tracing::info;

use super::node::{CallError, NodeClient, Stage};
use super::persistent::{Backing, CsiPv};
use super::plugin::{CsiPlugin, PERSISTENT, Target, log_text};
use super::voldata;
use crate::VolumeError;
use crate::token::TokenManager;

fn device_error(spec: &str, message: String) -> VolumeError {
    VolumeError::Operation { operation: "MountVolume.MountDevice", spec: spec.into(), message }
}

/// The data file of a staged volume (`driverName`, `volumeHandle`).
fn staging_data(driver: &str, handle: &str) -> voldata::VolumeData {
    voldata::VolumeData::from([
        ("driverName".to_string(), driver.to_string()),
        ("volumeHandle".to_string(), handle.to_string()),
    ])
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o750))
}

impl CsiPlugin {
    /// The PersistentVolume behind the pod's claim volume `v` (see [`super::persistent::resolve`]).
    pub async fn resolve(
        &self,
        pod: &Pod,
        v: &Volume,
        usage: super::persistent::Usage,
    ) -> Result<Backing, VolumeError> {
        let api = self.storage.get().ok_or_else(|| {
            VolumeError::Process(
                "failed to fetch PVC from API server: rkubelet runs without an apiserver (no --kubeconfig)".into(),
            )
        })?;
        super::persistent::resolve(api.as_ref(), pod, v, usage).await.map_err(VolumeError::Process)
    }

    /// Whether the driver's volumes are attached by the attach/detach controller (`skipAttach` false: no CSIDriver
    /// object, or one that does not say `attachRequired: false`; unknown while the objects were never listed).
    pub fn attach_required(&self, driver: &str) -> bool {
        !matches!(self.csi_driver(driver), Ok(Some(d)) if d.spec.attach_required == Some(false))
    }

    /// The publish context (`getPublishContext`): none where the CSIDriver says `attachRequired: false`, else the
    /// attached VolumeAttachment's metadata.
    pub(super) async fn publish_context(&self, driver: &str, handle: &str) -> Result<HashMap<String, String>, String> {
        let object = self.csi_driver(driver)?;
        if object.is_some_and(|d| d.spec.attach_required == Some(false)) {
            return Ok(HashMap::new());
        }
        let name = voldata::attachment_name(handle, driver, &self.node);
        let api = self.storage.get().ok_or("unable to get kubernetes client from host")?;
        let va = api.get_volume_attachment(&name).await.map_err(|e| e.to_string())?;
        let va = va.ok_or_else(|| format!("volumeattachments.storage.k8s.io {name:?} not found"))?;
        let status = va.status.unwrap_or_default();
        if !status.attached {
            // Upstream's reconciler waits for the volume in the Node's volumesAttached before this point.
            return Err(format!(
                "volume kubernetes.io/csi/{driver}^{handle} is not attached to node {} yet (VolumeAttachment {name})",
                self.node
            ));
        }
        Ok(status.attachment_metadata.unwrap_or_default().into_iter().collect())
    }

    /// Stages (once) and publishes the pod's PersistentVolume `pv` and answers its target
    /// (`<pod dir>/volumes/kubernetes.io~csi/<pv name>/mount`).
    pub async fn set_up_persistent(
        &self,
        pod: &Pod,
        pv: &CsiPv,
        pod_dir: &Path,
        objects: &dyn ObjectSource,
        tokens: &TokenManager,
        is_mounted: impl Fn(&Path) -> bool,
    ) -> Result<PathBuf, VolumeError> {
        let (driver, handle, spec) = (pv.source.driver.as_str(), pv.source.volume_handle.as_str(), &pv.pv_name);
        let _one = self.lock(driver, handle).await;
        // MountDevice.
        let endpoint = self.endpoint(driver).map_err(|e| {
            device_error(spec, log_text(format!("attacher.MountDevice failed to create newCsiDriverClient: {e}")))
        })?;
        let client = NodeClient::of(driver, &endpoint);
        let caps = client.capabilities().await.map_err(|e| device_error(spec, e.to_string()))?;
        let publish_context = self.publish_context(driver, handle).await.map_err(|e| device_error(spec, e))?;
        let staging = voldata::staging_path(&self.root, driver, handle);
        let stages = caps.contains(&Type::StageUnstageVolume);
        if !self.staged.lock().unwrap().contains(&staging) {
            make_dir(&staging).map_err(|e| {
                device_error(
                    spec,
                    log_text(format!(
                        "attacher.MountDevice failed to create dir {:?}:  {e}",
                        staging.display().to_string()
                    )),
                )
            })?;
            if stages {
                self.stage(pod, pv, &client, &staging, objects, &publish_context, &is_mounted)
                    .await
                    .map_err(|e| device_error(spec, e))?;
            }
            self.staged.lock().unwrap().insert(staging.clone());
        }
        // SetUp.
        let secret = pv.source.node_publish_secret_ref.as_ref();
        let target = Target {
            spec_name: pv.pv_name.clone(),
            driver: driver.to_string(),
            handle: handle.to_string(),
            mode: PERSISTENT,
            attributes: pv.source.volume_attributes.clone().unwrap_or_default().into_iter().collect(),
            publish_secret: secret
                .map(|r| (r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default())),
            fs_type: pv.source.fs_type.clone().unwrap_or_default(),
            read_only: pv.read_only,
            access_mode: pv.access_mode.clone(),
            read_write_once: pv.read_write_once,
            mount_options: pv.mount_options.clone(),
            staging: if stages { staging.display().to_string() } else { String::new() },
            publish_context,
        };
        self.set_up_at(pod, &target, pod_dir, objects, tokens, is_mounted)
            .await
            .map_err(|message| VolumeError::Operation { operation: "MountVolume.SetUp", spec: spec.clone(), message })
    }

    /// `NodeStageVolume` with `vol_data.json` beside the staging path (removed again after a final failure).
    #[allow(clippy::too_many_arguments)]
    async fn stage(
        &self,
        pod: &Pod,
        pv: &CsiPv,
        client: &NodeClient,
        staging: &Path,
        objects: &dyn ObjectSource,
        publish_context: &HashMap<String, String>,
        is_mounted: &impl Fn(&Path) -> bool,
    ) -> Result<(), String> {
        let (driver, handle) = (pv.source.driver.as_str(), pv.source.volume_handle.as_str());
        let secrets = match &pv.source.node_stage_secret_ref {
            Some(r) => {
                let (ns, name) = (r.namespace.as_deref().unwrap_or_default(), r.name.as_deref().unwrap_or_default());
                super::plugin::secret_data(objects, ns, name)
                    .await
                    .map_err(|e| format!("fetching NodeStageSecretRef {ns}/{name} failed: {e}"))?
            }
            None => HashMap::new(),
        };
        let dir = staging.parent().unwrap_or(staging);
        if let Err(e) = voldata::save(dir, &staging_data(driver, handle)) {
            let _ = voldata::remove_mount_dir(staging, is_mounted);
            return Err(log_text(format!("failed to save volume info data: {e}")));
        }
        let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let request = Stage {
            volume_id: handle.to_string(),
            staging_target_path: staging.display().to_string(),
            publish_context: publish_context.clone(),
            volume_context: pv.source.volume_attributes.clone().unwrap_or_default().into_iter().collect(),
            secrets,
            fs_type: pv.source.fs_type.clone().unwrap_or_default(),
            mount_flags: pv.mount_options.clone(),
            fs_group: psc.and_then(|c| c.fs_group),
            access_mode: pv.access_mode.clone(),
        };
        match client.stage(request).await {
            Ok(()) => {
                info!(pod = %kubelet_types::pod_update::pod_ref(pod), driverName = driver, volumeHandle = handle, path = %staging.display(), "CSI volume staged");
                Ok(())
            }
            Err(CallError::Final(e)) => {
                let _ = voldata::remove_mount_dir(staging, is_mounted);
                Err(e)
            }
            Err(CallError::Uncertain(e)) => Err(e),
        }
    }

    /// The staged persistent volumes on this node (driver, handle), from the staging folders' `vol_data.json`.
    fn staged_on_node(&self) -> Vec<(String, String)> {
        let plugin = self.root.join("plugins/kubernetes.io/csi");
        let drivers = std::fs::read_dir(&plugin).into_iter().flatten().flatten();
        drivers
            .filter(|d| d.file_name() != "volumeDevices")
            .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
            .filter_map(|v| voldata::load(&v.path()).ok())
            .filter_map(|d| Some((d.get("driverName")?.clone(), d.get("volumeHandle")?.clone())))
            .collect()
    }

    /// The unique names of the persistent volumes published or staged on this node, read from disk
    /// (`kubernetes.io/csi/<driver>^<handle>`): what the node must keep reporting in use, also after a restart
    /// and until each is unstaged.
    pub fn in_use_on_node(&self) -> std::collections::BTreeSet<String> {
        let published = self
            .published_volumes()
            .into_iter()
            .filter(|(_, d)| d.get("volumeLifecycleMode").map(String::as_str) != Some("Ephemeral"))
            .filter_map(|(_, d)| Some((d.get("driverName")?.clone(), d.get("volumeHandle")?.clone())));
        let blocks = std::fs::read_dir(self.root.join("plugins/kubernetes.io/csi/volumeDevices"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|v| voldata::load(&v.path().join("data")).ok())
            .filter_map(|d| Some((d.get("driverName")?.clone(), d.get("volumeHandle")?.clone())));
        published
            .chain(self.staged_on_node())
            .chain(blocks)
            .map(|(d, h)| format!("kubernetes.io/csi/{d}^{h}"))
            .collect()
    }

    /// Unstages the filesystem volumes staged on this node that no pod publishes any more (upstream's
    /// `unmountDetachDevices`): those a set-up staged but failed to publish for a pod since deleted. Each under its
    /// volume's lock; a failure is logged and tried at the next sweep.
    pub async fn sweep_staged(&self, is_mounted: impl Fn(&Path) -> bool) {
        for (driver, handle) in self.staged_on_node() {
            let _one = self.lock(&driver, &handle).await;
            if self.published_on_node(&driver, &handle, None) {
                continue;
            }
            let Ok(endpoint) = self.endpoint(&driver) else { continue };
            info!(driverName = %driver, volumeHandle = %handle, "unstaging a CSI volume no pod publishes");
            if let Err(e) = self.unmount_device(&endpoint, &driver, &handle, &is_mounted).await {
                tracing::warn!(driverName = %driver, volumeHandle = %handle, error = %e, "failed to unstage a CSI volume no pod publishes; will retry");
            }
        }
    }

    /// Every pod's published CSI volume on this node: its folder and its `vol_data.json`.
    fn published_volumes(&self) -> Vec<(PathBuf, voldata::VolumeData)> {
        let pods = std::fs::read_dir(self.root.join("pods")).into_iter().flatten().flatten();
        pods.flat_map(|p| std::fs::read_dir(p.path().join("volumes").join(voldata::PLUGIN_DIR)).into_iter().flatten())
            .flatten()
            .filter_map(|v| voldata::load(&v.path()).ok().map(|d| (v.path(), d)))
            .collect()
    }

    /// Whether a pod on this node still has the volume published (a `vol_data.json` of it under `pods`, but the
    /// folder `except`).
    pub(super) fn published_on_node(&self, driver: &str, handle: &str, except: Option<&Path>) -> bool {
        self.published_volumes().into_iter().filter(|(dir, _)| except.is_none_or(|e| dir != e)).any(|(_, d)| {
            d.get("driverName").map(String::as_str) == Some(driver)
                && d.get("volumeHandle").map(String::as_str) == Some(handle)
        })
    }

    /// `UnmountDevice`: `NodeUnstageVolume` where the driver stages, then the staging folder and its
    /// `vol_data.json` go. Nothing staged (no `vol_data.json`): done.
    pub(super) async fn unmount_device(
        &self,
        endpoint: &str,
        driver: &str,
        handle: &str,
        is_mounted: &impl Fn(&Path) -> bool,
    ) -> Result<(), String> {
        let staging = voldata::staging_path(&self.root, driver, handle);
        let dir = staging.parent().unwrap_or(&staging).to_path_buf();
        self.staged.lock().unwrap().remove(&staging);
        if let Err(e) = voldata::load(&dir) {
            if !dir.join(voldata::VOL_DATA_FILE).exists() {
                // Never staged (or a driver without staging): its empty folder goes.
                let _ = voldata::remove_mount_dir(&staging, is_mounted);
                return Ok(());
            }
            return Err(e);
        }
        let client = NodeClient::of(driver, endpoint);
        let caps = client.capabilities().await.map_err(|e| {
            log_text(format!("attacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set: {e}"))
        })?;
        if caps.contains(&Type::StageUnstageVolume) {
            client
                .unstage(handle, &staging.display().to_string())
                .await
                .map_err(|e| log_text(format!("attacher.UnmountDevice failed: {e}")))?;
        }
        voldata::remove_mount_dir(&staging, is_mounted)
            .map_err(|e| log_text(format!("failed to clean up global mount {}: {e}", dir.display())))?;
        info!(driverName = driver, volumeHandle = handle, path = %staging.display(), "CSI volume unstaged");
        Ok(())
    }
}
