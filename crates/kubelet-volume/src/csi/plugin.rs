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

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

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

pub(super) fn log_text(text: String) -> String {
    format!("kubernetes.io/csi: {text}")
}

fn log(text: String) -> VolumeError {
    VolumeError::Csi(log_text(text))
}

/// The pod's information for drivers that ask for it (`getPodInfoAttrs`).
pub(super) fn pod_info(pod: &Pod, ephemeral: bool) -> HashMap<String, String> {
    let sa = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_default();
    HashMap::from([
        ("csi.storage.k8s.io/pod.name".into(), pod.metadata.name.clone().unwrap_or_default()),
        ("csi.storage.k8s.io/pod.namespace".into(), pod.metadata.namespace.clone().unwrap_or_default()),
        ("csi.storage.k8s.io/pod.uid".into(), pod.metadata.uid.clone().unwrap_or_default()),
        ("csi.storage.k8s.io/serviceAccount.name".into(), sa),
        ("csi.storage.k8s.io/ephemeral".into(), ephemeral.to_string()),
    ])
}

/// Whether the kubelet changes the volume's ownership to the fsGroup (`supportsFSGroup`; an inline volume is
/// always read-write once).
fn kubelet_applies_fs_group(policy: &str, fs_type: &str, read_only: bool, read_write_once: bool) -> bool {
    match policy {
        "None" => false,
        _ if read_only => false,
        "File" => true,
        _ => !fs_type.is_empty() && read_write_once,
    }
}

/// The lifecycle mode of an inline volume.
pub(super) const EPHEMERAL: &str = "Ephemeral";
/// The lifecycle mode of a PersistentVolume.
pub(super) const PERSISTENT: &str = "Persistent";

/// What a publish needs, of an inline volume or a PersistentVolume.
pub(super) struct Target {
    /// The folder's name under the pod: the volume's name, or the PersistentVolume's.
    pub spec_name: String,
    pub driver: String,
    pub handle: String,
    /// [`EPHEMERAL`] or [`PERSISTENT`].
    pub mode: &'static str,
    pub attributes: HashMap<String, String>,
    /// The node publish secret's namespace and name.
    pub publish_secret: Option<(String, String)>,
    pub fs_type: String,
    pub read_only: bool,
    pub access_mode: Option<String>,
    /// Whether the volume is `ReadWriteOnce` (for the fsGroup under `ReadWriteOnceWithFSType`).
    pub read_write_once: bool,
    pub mount_options: Vec<String>,
    /// Where it was staged (empty: not staged).
    pub staging: String,
    pub publish_context: HashMap<String, String>,
}

/// The CSI volume plugin.
pub struct CsiPlugin {
    drivers: Arc<CsiDrivers>,
    lister: Lister,
    pub(super) storage: Storage,
    pub(super) node: String,
    /// `<root-dir>`: pods under `pods`, staging under `plugins/kubernetes.io/csi`.
    pub(super) root: PathBuf,
    /// The staging paths staged by this process (a new pod of a volume staged before a restart stages it again,
    /// which a driver answers as done).
    pub(super) staged: Mutex<HashSet<PathBuf>>,
    /// One operation at a time per persistent volume (driver and handle).
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The apiserver's PersistentVolumeClaims, PersistentVolumes and VolumeAttachments, once it is known.
pub type Storage = Arc<OnceLock<Arc<dyn kubelet_apiclient::StorageApi>>>;

impl CsiPlugin {
    /// The plugin of the node `node` with its root directory `root`, publishing through the registered `drivers`,
    /// reading CSIDrivers from `lister` and claims, volumes and attachments from `storage`.
    pub fn new(drivers: Arc<CsiDrivers>, lister: Lister, storage: Storage, node: &str, root: &Path) -> Self {
        Self {
            drivers,
            lister,
            storage,
            node: node.into(),
            root: root.to_path_buf(),
            staged: Mutex::default(),
            locks: Mutex::default(),
        }
    }

    /// Waits for the persistent volume's turn.
    pub(super) async fn lock(&self, driver: &str, handle: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = self.locks.lock().unwrap().entry(format!("{driver}^{handle}")).or_default().clone();
        m.lock_owned().await
    }

    /// The socket of a registered driver.
    pub fn driver_endpoint(&self, driver: &str) -> Option<String> {
        self.drivers.endpoint(driver)
    }

    pub(super) fn endpoint(&self, driver: &str) -> Result<String, String> {
        if driver.is_empty() {
            return Err("driver name is empty".into());
        }
        self.drivers
            .endpoint(driver)
            .ok_or_else(|| format!("driver name {driver} not found in the list of registered CSI drivers"))
    }

    /// The CSIDriver object (`getCSIDriver`): `Ok(None)` when there is none.
    pub(super) fn csi_driver(&self, driver: &str) -> Result<Option<CSIDriver>, String> {
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

    /// Publishes the pod's inline volume `name` (`SetUpAt` of an ephemeral volume) and answers its target. A
    /// failure removes what it made unless the target is mounted (`is_mounted`: a republish keeps the volume).
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
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let target = Target {
            spec_name: name.to_string(),
            driver: src.driver.clone(),
            handle: voldata::ephemeral_volume_handle(uid, name),
            mode: EPHEMERAL,
            attributes: src.volume_attributes.clone().unwrap_or_default().into_iter().collect(),
            publish_secret: src.node_publish_secret_ref.as_ref().map(|r| (ns.to_string(), r.name.clone())),
            fs_type: src.fs_type.clone().unwrap_or_default(),
            read_only: src.read_only == Some(true),
            access_mode: None,
            read_write_once: true,
            mount_options: vec![],
            staging: String::new(),
            publish_context: HashMap::new(),
        };
        self.set_up_at(pod, &target, pod_dir, objects, tokens, is_mounted).await.map_err(VolumeError::Csi)
    }

    /// The CSIDriver's lifecycle mode and fsGroup policy checks (`supportsVolumeLifecycleMode`,
    /// `getFSGroupPolicy`): the policy and the object, or the error.
    fn check_driver(&self, driver: &str, mode: &str) -> Result<(String, Option<CSIDriver>), String> {
        let object = self
            .csi_driver(driver)
            .map_err(|e| log_text(format!("mounter.SetupAt failed to check volume lifecycle mode: {e}")))?;
        let Some(object) = object else {
            if mode == EPHEMERAL {
                return Err(log_text(format!(
                    "mounter.SetupAt failed to check volume lifecycle mode: volume mode \"{mode}\" not supported by \
                     driver {driver} (no CSIDriver object)"
                )));
            }
            // No CSIDriver object: a persistent volume with the default policy.
            return Ok(("ReadWriteOnceWithFSType".into(), None));
        };
        let spec = &object.spec;
        let modes = spec.volume_lifecycle_modes.clone().unwrap_or_else(|| vec![PERSISTENT.into()]);
        if !modes.iter().any(|m| m == mode) {
            return Err(log_text(format!(
                "mounter.SetupAt failed to check volume lifecycle mode: volume mode \"{mode}\" not supported by \
                 driver {driver} (only supports {modes:?})"
            )));
        }
        match spec.fs_group_policy.as_deref() {
            Some(p) if !p.is_empty() => Ok((p.to_string(), Some(object.clone()))),
            _ => Err(log_text(
                "mounter.SetupAt failed to check fsGroup policy: kubernetes.io/csi: expected valid fsGroupPolicy, \
                 received nil value or empty string"
                    .into(),
            )),
        }
    }

    /// `SetUpAt`: publishes `t` into `<pod dir>/volumes/kubernetes.io~csi/<spec name>/mount`; the error in
    /// upstream's words.
    pub(super) async fn set_up_at(
        &self,
        pod: &Pod,
        t: &Target,
        pod_dir: &Path,
        objects: &dyn ObjectSource,
        tokens: &TokenManager,
        is_mounted: impl Fn(&Path) -> bool,
    ) -> Result<PathBuf, String> {
        let driver = t.driver.as_str();
        let endpoint =
            self.endpoint(driver).map_err(|e| log_text(format!("mounter.SetUpAt failed to get CSI client: {e}")))?;
        let (policy, object) = self.check_driver(driver, t.mode)?;
        let dir = voldata::volume_dir(pod_dir, &t.spec_name);
        let mount = dir.join("mount");
        let secrets = match &t.publish_secret {
            Some((ns, name)) => secret_data(objects, ns, name)
                .await
                .map_err(|e| format!("fetching NodePublishSecretRef {ns}/{name} failed: {e}"))?,
            None => HashMap::new(),
        };
        let mut context = t.attributes.clone();
        let spec = object.as_ref().map(|o| &o.spec);
        if spec.is_some_and(|s| s.pod_info_on_mount == Some(true)) {
            context.extend(pod_info(pod, t.mode == EPHEMERAL));
        }
        if let Some(requests) = spec.and_then(|s| s.token_requests.as_ref()).filter(|r| !r.is_empty()) {
            let tokens = service_account_tokens(pod, requests, tokens).await.map_err(|e| {
                log_text(format!("mounter.SetUpAt failed to get service accoount token attributes: {e}"))
            })?;
            context.insert("csi.storage.k8s.io/serviceAccount.tokens".into(), tokens);
        }
        std::fs::create_dir_all(&dir)
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))
            })
            .map_err(|e| {
                log_text(format!("mounter.SetUpAt failed to create dir {:?}:  {e}", dir.display().to_string()))
            })?;
        let data = voldata::volume_data(&t.spec_name, &t.handle, driver, &self.node, t.mode);
        if let Err(e) = voldata::save(&dir, &data) {
            let _ = voldata::remove_mount_dir(&mount, &is_mounted);
            return Err(log_text(format!("mounter.SetUpAt failed to save volume info data: {e}")));
        }
        let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
        let fs_group = psc.and_then(|c| c.fs_group);
        let publish = Publish {
            volume_id: t.handle.clone(),
            target_path: mount.display().to_string(),
            staging_target_path: t.staging.clone(),
            publish_context: t.publish_context.clone(),
            volume_context: context,
            secrets,
            readonly: t.read_only,
            fs_type: t.fs_type.clone(),
            mount_flags: t.mount_options.clone(),
            fs_group,
            access_mode: t.access_mode.clone(),
        };
        let delegated = match NodeClient::of(driver, &endpoint).publish(publish).await {
            Ok(d) => d,
            Err(CallError::Final(e)) => {
                if let Err(r) = voldata::remove_mount_dir(&mount, &is_mounted) {
                    debug!(pod = %pod_ref(pod), volume = %t.spec_name, error = %r, "mounter.SetupAt failed to remove mount dir after a NodePublish() error");
                }
                return Err(e);
            }
            // It may be published: the folder stays for the teardown to unpublish.
            Err(CallError::Uncertain(e)) => return Err(e),
        };
        let kubelet_applies = kubelet_applies_fs_group(&policy, &t.fs_type, t.read_only, t.read_write_once);
        if let Some(gid) = fs_group.filter(|_| !delegated && kubelet_applies) {
            let on_mismatch = psc.and_then(|c| c.fs_group_change_policy.as_deref()) == Some("OnRootMismatch");
            crate::ownership::set_volume_ownership(&mount, gid as u32, false, on_mismatch)
                .map_err(|e| format!("applyFSGroup failed for vol {}: {e}", t.handle))?;
        }
        info!(pod = %pod_ref(pod), volume = %t.spec_name, driverName = driver, volumeHandle = %t.handle, "CSI volume published");
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
        let persistent = get("volumeLifecycleMode") != EPHEMERAL;
        // A persistent volume's publish, unpublish and unstaging are one at a time on this node.
        let _one = if persistent { Some(self.lock(driver, handle).await) } else { None };
        let endpoint =
            self.endpoint(driver).map_err(|e| log(format!("Unmounter.TearDownAt failed to get CSI client: {e}")))?;
        NodeClient::of(driver, &endpoint)
            .unpublish(handle, &mount.display().to_string())
            .await
            .map_err(|e| log(format!("Unmounter.TearDownAt failed: {e}")))?;
        info!(driverName = driver, volumeHandle = handle, path = %mount.display(), "CSI volume unpublished");
        // The last pod of a persistent volume unstages it before its own folder goes: a failed unstage keeps the
        // folder, so the next teardown unpublishes (a no-op for the driver) and unstages again.
        if persistent && !self.published_on_node(driver, handle, Some(dir)) {
            let spec = get("specVolID").to_string();
            self.unmount_device(&endpoint, driver, handle, &is_mounted)
                .await
                .map_err(|message| VolumeError::Operation { operation: "UnmountDevice", spec, message })?;
        }
        voldata::remove_mount_dir(&mount, &is_mounted)
            .map_err(|e| log(format!("Unmounter.TearDownAt failed to clean mount dir [{}]: {e}", mount.display())))?;
        Ok(())
    }
}

/// The data of the secret `ns/name` as strings (`getCredentialsFromSecret`), the error in upstream's words.
pub(super) async fn secret_data(
    objects: &dyn ObjectSource,
    ns: &str,
    name: &str,
) -> Result<HashMap<String, String>, String> {
    let failed = |e: String| format!("failed to find the secret {name} in the namespace {ns} with error: {e}");
    let secret = objects.secret(ns, name).await.map_err(failed)?;
    let secret = secret.ok_or_else(|| failed(format!("secrets {name:?} not found")))?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect())
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
