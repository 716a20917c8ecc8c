//! The CSI volume plugin's inline ephemeral volumes (`pkg/volume/csi/csi_mounter.go` SetUpAt and TearDownAt,
//! `csi_plugin.go` and `csi_util.go`): a pod's `csi` volume is published by its driver's Node service into
//! `<root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount`, with `vol_data.json` beside it, and unpublished
//! when the pod's volumes are torn down.
//!
//! Contract: the volume manager calls [`CsiPlugin::set_up`] once per volume of a running pod (never again once it
//! is published, also after a restart: [`CsiPlugin::is_set_up`] finds it from `vol_data.json` and the mount
//! table; at every sync where the CSIDriver has `requiresRepublish`, as upstream's remount), and [`CsiPlugin::tear_down`] for each CSI folder of a pod whose containers are gone, the orphaned pods
//! of a restart included. Each call may wait up to upstream's 2 minutes on the driver. Errors carry upstream's
//! texts (`kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: ...`) and are retried by the
//! caller at its next sync: a driver not registered yet, a CSIDriver object missing or not synced, a secret not
//! found. A publish that failed for certain leaves nothing behind; one that may have happened keeps its folder so
//! that the teardown unpublishes it. A teardown that fails keeps the folder and the pod's volumes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{CSIVolumeSource, Pod};
use k8s_openapi::api::storage::v1::CSIDriver;
use kubelet_types::objects::ObjectSource;
use kubelet_types::pod_update::pod_ref;
use tracing::{debug, info};

use super::node::{CallError, NodeClient, Publish};
use super::registration::CsiDrivers;
use super::voldata;
use crate::VolumeError;
use crate::token::TokenManager;

/// The CSIDriver objects, as the kubelet's informer holds them (`csiDriverLister`).
pub trait CsiDriverLister: Send + Sync + 'static {
    /// The CSIDriver `name` as last seen; an error while the objects were never listed.
    fn csi_driver(&self, name: &str) -> Result<Option<CSIDriver>, String>;
}

/// The lister, once the apiserver is known (never on a standalone node: inline volumes then fail, as upstream's).
pub type Lister = Arc<OnceLock<Arc<dyn CsiDriverLister>>>;

fn log(text: String) -> VolumeError {
    VolumeError::Csi(format!("kubernetes.io/csi: {text}"))
}

/// The pod's information for drivers that ask for it (`getPodInfoAttrs`).
fn pod_info(pod: &Pod) -> HashMap<String, String> {
    let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_default();
    HashMap::from([
        ("csi.storage.k8s.io/pod.name".into(), pod.metadata.name.clone().unwrap_or_default()),
        ("csi.storage.k8s.io/pod.namespace".into(), pod.metadata.namespace.clone().unwrap_or_default()),
        ("csi.storage.k8s.io/pod.uid".into(), pod.metadata.uid.clone().unwrap_or_default()),
        ("csi.storage.k8s.io/serviceAccount.name".into(), sa),
        ("csi.storage.k8s.io/ephemeral".into(), "true".into()),
    ])
}

/// Whether the kubelet changes the volume's ownership to the fsGroup (`supportsFSGroup`, for an inline volume:
/// always read-write once).
fn kubelet_applies_fs_group(policy: &str, fs_type: &str, read_only: bool) -> bool {
    match policy {
        "None" => false,
        _ if read_only => false,
        "File" => true,
        _ => !fs_type.is_empty(),
    }
}

/// The CSI volume plugin.
pub struct CsiPlugin {
    drivers: Arc<CsiDrivers>,
    lister: Lister,
    node: String,
}

impl CsiPlugin {
    /// The plugin of the node `node`, publishing through the registered `drivers`, reading CSIDrivers from `lister`.
    pub fn new(drivers: Arc<CsiDrivers>, lister: Lister, node: &str) -> Self {
        Self { drivers, lister, node: node.into() }
    }

    fn endpoint(&self, driver: &str) -> Result<String, String> {
        if driver.is_empty() {
            return Err("driver name is empty".into());
        }
        self.drivers
            .endpoint(driver)
            .ok_or_else(|| format!("driver name {driver} not found in the list of registered CSI drivers"))
    }

    /// The CSIDriver object (`getCSIDriver`): `Ok(None)` when there is none.
    fn csi_driver(&self, driver: &str) -> Result<Option<CSIDriver>, String> {
        self.lister.get().ok_or("CSIDriver lister does not exist")?.csi_driver(driver)
    }

    /// Whether the driver's CSIDriver asks for `NodePublishVolume` at every sync of a pod (`requiresRepublish`,
    /// `RequiresRemount`: drivers whose content expires, such as tokens).
    pub fn requires_republish(&self, driver: &str) -> bool {
        self.csi_driver(driver).ok().flatten().is_some_and(|d| d.spec.requires_republish == Some(true))
    }

    /// Whether the volume `name` of the pod in `pod_dir` was published (by this process or an earlier kubelet):
    /// its `vol_data.json` is there and its target is mounted.
    pub fn is_set_up(pod_dir: &Path, name: &str, is_mounted: impl Fn(&Path) -> bool) -> bool {
        let dir = voldata::volume_dir(pod_dir, name);
        voldata::load(&dir).is_ok() && is_mounted(&dir.join("mount"))
    }

    /// Publishes the pod's inline volume `name` (`SetUpAt`) and answers its target. A failure removes what it made
    /// unless the target is mounted (`is_mounted`: a republish keeps the volume).
    #[allow(clippy::too_many_arguments)]
    pub async fn set_up(
        &self,
        pod: &Pod,
        name: &str,
        src: &CSIVolumeSource,
        pod_dir: &Path,
        objects: &dyn ObjectSource,
        tokens: &TokenManager,
        is_mounted: impl Fn(&Path) -> bool,
    ) -> Result<PathBuf, VolumeError> {
        let driver = src.driver.as_str();
        let endpoint =
            self.endpoint(driver).map_err(|e| log(format!("mounter.SetUpAt failed to get CSI client: {e}")))?;
        let object = self
            .csi_driver(driver)
            .map_err(|e| log(format!("mounter.SetupAt failed to check volume lifecycle mode: {e}")))?;
        let Some(object) = object else {
            return Err(log(format!(
                "mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not supported by \
                 driver {driver} (no CSIDriver object)"
            )));
        };
        let spec = &object.spec;
        let modes = spec.volume_lifecycle_modes.clone().unwrap_or_else(|| vec!["Persistent".into()]);
        if !modes.iter().any(|m| m == "Ephemeral") {
            return Err(log(format!(
                "mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not supported by \
                 driver {driver} (only supports {modes:?})"
            )));
        }
        let policy = match spec.fs_group_policy.as_deref() {
            Some(p) if !p.is_empty() => p,
            _ => {
                return Err(log(
                    "mounter.SetupAt failed to check fsGroup policy: kubernetes.io/csi: expected valid fsGroupPolicy, \
                     received nil value or empty string"
                        .into(),
                ));
            }
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let handle = voldata::ephemeral_volume_handle(uid, name);
        let dir = voldata::volume_dir(pod_dir, name);
        let mount = dir.join("mount");
        let mut secrets = HashMap::new();
        if let Some(r) = src.node_publish_secret_ref.as_ref() {
            let secret_name = r.name.as_str();
            let failed = |e: String| {
                VolumeError::Csi(format!(
                    "fetching NodePublishSecretRef {ns}/{secret_name} failed: failed to find the secret {secret_name} \
                     in the namespace {ns} with error: {e}"
                ))
            };
            let secret = objects.secret(ns, secret_name).await.map_err(failed)?;
            let secret = secret.ok_or_else(|| failed(format!("secrets {secret_name:?} not found")))?;
            for (k, v) in secret.data.unwrap_or_default() {
                secrets.insert(k, String::from_utf8_lossy(&v.0).into_owned());
            }
        }
        let mut context: HashMap<String, String> =
            src.volume_attributes.clone().unwrap_or_default().into_iter().collect();
        if spec.pod_info_on_mount == Some(true) {
            context.extend(pod_info(pod));
        }
        if let Some(requests) = spec.token_requests.as_ref().filter(|r| !r.is_empty()) {
            let tokens = service_account_tokens(pod, requests, tokens)
                .await
                .map_err(|e| log(format!("mounter.SetUpAt failed to get service accoount token attributes: {e}")))?;
            context.insert("csi.storage.k8s.io/serviceAccount.tokens".into(), tokens);
        }
        std::fs::create_dir_all(&dir)
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))
            })
            .map_err(|e| log(format!("mounter.SetUpAt failed to create dir {:?}:  {e}", dir.display().to_string())))?;
        let data = voldata::ephemeral_volume_data(uid, name, driver, &self.node);
        if let Err(e) = voldata::save(&dir, &data) {
            let _ = voldata::remove_mount_dir(&mount, &is_mounted);
            return Err(log(format!("mounter.SetUpAt failed to save volume info data: {e}")));
        }
        let fs_type = src.fs_type.clone().unwrap_or_default();
        let read_only = src.read_only == Some(true);
        let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let fs_group = psc.and_then(|c| c.fs_group);
        let publish = Publish {
            volume_id: handle.clone(),
            target_path: mount.display().to_string(),
            volume_context: context,
            secrets,
            readonly: read_only,
            fs_type: fs_type.clone(),
            fs_group,
            ..Default::default()
        };
        let delegated = match NodeClient::new(&endpoint).publish(publish).await {
            Ok(d) => d,
            Err(CallError::Final(e)) => {
                if let Err(r) = voldata::remove_mount_dir(&mount, &is_mounted) {
                    debug!(pod = %pod_ref(pod), volume = name, error = %r, "mounter.SetupAt failed to remove mount dir after a NodePublish() error");
                }
                return Err(VolumeError::Csi(e));
            }
            // It may be published: the folder stays for the teardown to unpublish.
            Err(CallError::Uncertain(e)) => return Err(VolumeError::Csi(e)),
        };
        if let Some(gid) = fs_group.filter(|_| !delegated && kubelet_applies_fs_group(policy, &fs_type, read_only)) {
            let on_mismatch = psc.and_then(|c| c.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
            crate::ownership::set_volume_ownership(&mount, gid as u32, false, on_mismatch)
                .map_err(|e| VolumeError::Csi(format!("applyFSGroup failed for vol {handle}: {e}")))?;
        }
        info!(pod = %pod_ref(pod), volume = name, driverName = driver, volumeHandle = %handle, "CSI volume published");
        Ok(mount)
    }

    /// Unpublishes the CSI volume in `dir` (`<pod dir>/volumes/kubernetes.io~csi/<volume>`, `TearDownAt`) and
    /// removes its folder. A folder without `vol_data.json` whose target is not mounted (a publish that never got
    /// that far) is only removed.
    pub async fn tear_down(&self, dir: &Path, is_mounted: impl Fn(&Path) -> bool) -> Result<(), VolumeError> {
        let mount = dir.join("mount");
        let data = match voldata::load(dir) {
            Ok(d) => d,
            Err(e) if is_mounted(&mount) => return Err(log(format!("Unmounter.TearDownAt failed: {e}"))),
            Err(_) => {
                return voldata::remove_mount_dir(&mount, is_mounted).map_err(|e| {
                    log(format!("Unmounter.TearDownAt failed to clean mount dir [{}]: {e}", mount.display()))
                });
            }
        };
        let get = |k: &str| data.get(k).map(String::as_str).unwrap_or_default();
        let (driver, handle) = (get("driverName"), get("volumeHandle"));
        let endpoint =
            self.endpoint(driver).map_err(|e| log(format!("Unmounter.TearDownAt failed to get CSI client: {e}")))?;
        NodeClient::new(&endpoint)
            .unpublish(handle, &mount.display().to_string())
            .await
            .map_err(|e| log(format!("Unmounter.TearDownAt failed: {e}")))?;
        voldata::remove_mount_dir(&mount, is_mounted)
            .map_err(|e| log(format!("Unmounter.TearDownAt failed to clean mount dir [{}]: {e}", mount.display())))?;
        info!(driverName = driver, volumeHandle = handle, path = %mount.display(), "CSI volume unpublished");
        Ok(())
    }
}

/// The pod's service account tokens the driver asks for (`podServiceAccountTokenAttrs`): Go's JSON of the token
/// request statuses by audience.
async fn service_account_tokens(
    pod: &Pod,
    requests: &[k8s_openapi::api::storage::v1::TokenRequest],
    tokens: &TokenManager,
) -> Result<String, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.as_deref()).unwrap_or("default");
    let mut out = std::collections::BTreeMap::new();
    for r in requests {
        let audiences = if r.audience.is_empty() { vec![] } else { vec![r.audience.clone()] };
        let request = crate::token::pod_bound_request(pod, audiences, r.expiration_seconds);
        let answer = tokens.service_account_token(ns, sa, &request).await.map_err(|e| e.to_string())?;
        let status = serde_json::to_value(answer.status).map_err(|e| e.to_string())?;
        out.insert(r.audience.clone(), status);
    }
    serde_json::to_string(&out).map_err(|e| e.to_string())
}
