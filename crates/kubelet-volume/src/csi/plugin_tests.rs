//! The CSI volume plugin's inline ephemeral volumes against a driver's Node service over a unix socket
//! ([`super::stub`]) and CSIDriver objects from a table: upstream's refusals, the publish request, `vol_data.json`,
//! the fsGroup, the teardown, and the volume manager's use of it across a restart. Real sockets, so the real clock.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    CSIVolumeSource, ConfigMap, LocalObjectReference, Pod, PodSecurityContext, PodSpec, Secret, Service, Volume,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_types::PodUid;
use kubelet_types::objects::{ObjectSource, PodVolumes};

use super::plugin::{CsiDriverLister, CsiPlugin, Lister};
use super::registration::CsiDrivers;
use super::stub::{Driver, DriverMounts, serve};
use super::versions::highest_supported;
use super::voldata;
use crate::sources::NoDownward;
use crate::token::{NoTokens, TokenManager};
use crate::{VolumeError, VolumeManager};

const DRIVER: &str = "hostpath.csi.k8s.io";

/// CSIDriver objects by name.
#[derive(Default)]
struct Objects(Mutex<HashMap<String, CSIDriver>>);

impl CsiDriverLister for Objects {
    fn csi_driver(&self, name: &str) -> Result<Option<CSIDriver>, String> {
        Ok(self.0.lock().unwrap().get(name).cloned())
    }
}

fn csi_driver(modes: &[&str], pod_info: bool, policy: &str) -> CSIDriver {
    CSIDriver {
        metadata: ObjectMeta { name: Some(DRIVER.into()), ..Default::default() },
        spec: CSIDriverSpec {
            volume_lifecycle_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
            pod_info_on_mount: Some(pod_info),
            fs_group_policy: Some(policy.into()),
            ..Default::default()
        },
    }
}

/// One Secret, `ns/creds`.
struct OneSecret;

#[async_trait::async_trait]
impl ObjectSource for OneSecret {
    async fn config_map(&self, _: &str, _: &str) -> Result<Option<ConfigMap>, String> {
        Ok(None)
    }
    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        Ok((ns == "ns" && name == "creds").then(|| Secret {
            data: Some([("user".to_string(), ByteString(b"me".to_vec()))].into()),
            ..Default::default()
        }))
    }
    async fn services(&self, _: &str) -> Result<Vec<Service>, String> {
        Ok(vec![])
    }
}

fn pod(volume: CSIVolumeSource) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some("sa".into()),
            security_context: Some(PodSecurityContext { fs_group: Some(2345), ..Default::default() }),
            volumes: Some(vec![Volume { name: "data".into(), csi: Some(volume), ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn source() -> CSIVolumeSource {
    CSIVolumeSource {
        driver: DRIVER.into(),
        volume_attributes: Some([("size".to_string(), "1Mi".to_string())].into()),
        node_publish_secret_ref: Some(LocalObjectReference { name: "creds".into() }),
        ..Default::default()
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    drivers: Arc<CsiDrivers>,
    objects: Arc<Objects>,
    lister: Lister,
    driver: Arc<Driver>,
    endpoint: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let (driver, endpoint) = serve(&root, vec![]);
    let objects = Arc::new(Objects::default());
    let lister: Lister = Arc::new(OnceLock::new());
    Setup { _dir: dir, root, drivers: Arc::default(), objects, lister, driver, endpoint }
}

impl Setup {
    fn plugin(&self) -> CsiPlugin {
        CsiPlugin::new(self.drivers.clone(), self.lister.clone(), Arc::default(), "node-a", &self.root)
    }

    fn register(&self) {
        self.drivers.add(DRIVER, &self.endpoint, highest_supported(&["1.0.0".into()]).unwrap());
    }

    fn pod_dir(&self) -> PathBuf {
        self.root.join("pods/uid-1")
    }

    async fn set_up(&self, p: &Pod) -> Result<PathBuf, VolumeError> {
        let tokens = TokenManager::new(Arc::new(NoTokens), Arc::new(kubelet_types::clock::SystemClock));
        let src = p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0].csi.clone().unwrap();
        self.plugin().set_up(p, "data", &src, &self.pod_dir(), &OneSecret, &tokens, |_| false).await
    }
}

fn text(r: Result<PathBuf, VolumeError>) -> String {
    r.unwrap_err().to_string()
}

#[tokio::test]
async fn an_inline_volume_is_refused_with_upstreams_texts_until_driver_and_csidriver_allow_it() {
    let s = setup();
    let p = pod(source());
    assert_eq!(
        text(s.set_up(&p).await),
        "kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name hostpath.csi.k8s.io not found in \
         the list of registered CSI drivers"
    );
    s.register();
    assert_eq!(
        text(s.set_up(&p).await),
        "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: CSIDriver lister does not exist",
        "a node without an apiserver"
    );
    let _ = s.lister.set(s.objects.clone());
    assert_eq!(
        text(s.set_up(&p).await),
        "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not \
         supported by driver hostpath.csi.k8s.io (no CSIDriver object)"
    );
    s.objects.0.lock().unwrap().insert(DRIVER.into(), csi_driver(&["Persistent"], true, "File"));
    assert_eq!(
        text(s.set_up(&p).await),
        "kubernetes.io/csi: mounter.SetupAt failed to check volume lifecycle mode: volume mode \"Ephemeral\" not \
         supported by driver hostpath.csi.k8s.io (only supports [\"Persistent\"])"
    );
    s.objects.0.lock().unwrap().insert(DRIVER.into(), csi_driver(&["Persistent", "Ephemeral"], true, "File"));
    let mut missing = source();
    missing.node_publish_secret_ref = Some(LocalObjectReference { name: "other".into() });
    assert_eq!(
        text(s.set_up(&pod(missing)).await),
        "fetching NodePublishSecretRef ns/other failed: failed to find the secret other in the namespace ns with \
         error: secrets \"other\" not found"
    );
    assert!(s.driver.published.lock().unwrap().is_empty(), "nothing reached the driver");
    assert!(!s.pod_dir().exists(), "nothing was made");
}

#[tokio::test]
async fn a_publish_sends_upstreams_request_writes_vol_data_and_applies_the_fs_group_then_the_teardown_undoes_it() {
    let s = setup();
    s.register();
    let _ = s.lister.set(s.objects.clone());
    s.objects.0.lock().unwrap().insert(DRIVER.into(), csi_driver(&["Ephemeral"], true, "File"));
    let mount = s.set_up(&pod(source())).await.unwrap();
    assert_eq!(mount, s.pod_dir().join("volumes/kubernetes.io~csi/data/mount"));
    let req = s.driver.published.lock().unwrap()[0].clone();
    assert_eq!(req.volume_id, voldata::ephemeral_volume_handle("uid-1", "data"));
    assert_eq!(req.target_path, mount.display().to_string());
    assert!(req.staging_target_path.is_empty(), "no staging for an inline volume");
    assert_eq!(req.secrets, HashMap::from([("user".to_string(), "me".to_string())]));
    let want: HashMap<String, String> = [
        ("size", "1Mi"),
        ("csi.storage.k8s.io/pod.name", "web"),
        ("csi.storage.k8s.io/pod.namespace", "ns"),
        ("csi.storage.k8s.io/pod.uid", "uid-1"),
        ("csi.storage.k8s.io/serviceAccount.name", "sa"),
        ("csi.storage.k8s.io/ephemeral", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(req.volume_context, want);
    let data = voldata::load(mount.parent().unwrap()).unwrap();
    assert_eq!(data["volumeLifecycleMode"], "Ephemeral");
    assert_eq!(data["nodeName"], "node-a");
    assert_eq!(std::fs::metadata(&mount).unwrap().gid(), 2345, "fsGroupPolicy File: the kubelet applies the group");
    assert!(CsiPlugin::is_set_up(&s.pod_dir(), "data", |p| p == mount));
    assert!(!CsiPlugin::is_set_up(&s.pod_dir(), "data", |_| false), "not mounted (a reboot): published again");

    // Without podInfoOnMount the pod's information stays out; with policy None the group too.
    let s2 = setup();
    s2.register();
    let _ = s2.lister.set(s2.objects.clone());
    s2.objects.0.lock().unwrap().insert(DRIVER.into(), csi_driver(&["Ephemeral"], false, "None"));
    let m2 = s2.set_up(&pod(source())).await.unwrap();
    let ctx = s2.driver.published.lock().unwrap()[0].volume_context.clone();
    assert_eq!(ctx, HashMap::from([("size".to_string(), "1Mi".to_string())]));
    assert_ne!(std::fs::metadata(&m2).unwrap().gid(), 2345);

    let dir = mount.parent().unwrap().to_path_buf();
    s.plugin().tear_down(&dir, |_| false).await.unwrap();
    let handle = voldata::ephemeral_volume_handle("uid-1", "data");
    assert_eq!(*s.driver.unpublished.lock().unwrap(), vec![(handle, mount.display().to_string())]);
    assert!(!dir.exists(), "target, vol_data.json and folder gone");
}

#[tokio::test]
async fn a_failed_publish_leaves_nothing_an_uncertain_one_is_unpublished_and_a_gone_driver_keeps_the_volume() {
    let s = setup();
    s.register();
    let _ = s.lister.set(s.objects.clone());
    s.objects.0.lock().unwrap().insert(DRIVER.into(), csi_driver(&["Ephemeral"], true, "File"));
    let dir = voldata::volume_dir(&s.pod_dir(), "data");
    *s.driver.fail.lock().unwrap() = Some(tonic::Code::InvalidArgument);
    assert_eq!(text(s.set_up(&pod(source())).await), "rpc error: code = InvalidArgument desc = no");
    assert!(!dir.exists(), "a final error: the folder goes");
    *s.driver.fail.lock().unwrap() = Some(tonic::Code::DeadlineExceeded);
    assert_eq!(text(s.set_up(&pod(source())).await), "rpc error: code = DeadlineExceeded desc = no");
    assert!(dir.join(voldata::VOL_DATA_FILE).exists(), "uncertain: kept for the teardown");
    *s.driver.fail.lock().unwrap() = None;

    // The driver is gone: the teardown fails and keeps everything, then succeeds once it is back.
    let gone = CsiPlugin::new(Arc::default(), s.lister.clone(), Arc::default(), "node-a", &s.root);
    let e = gone.tear_down(&dir, |_| false).await.unwrap_err().to_string();
    assert_eq!(
        e,
        "kubernetes.io/csi: Unmounter.TearDownAt failed to get CSI client: driver name hostpath.csi.k8s.io not found \
         in the list of registered CSI drivers"
    );
    assert!(dir.join(voldata::VOL_DATA_FILE).exists());
    s.plugin().tear_down(&dir, |_| false).await.unwrap();
    assert_eq!(s.driver.unpublished.lock().unwrap().len(), 1);
    assert!(!dir.exists());
}

#[tokio::test]
async fn the_volume_manager_publishes_once_reconstructs_after_a_restart_and_unpublishes_at_teardown() {
    let s = setup();
    s.register();
    let _ = s.lister.set(s.objects.clone());
    s.objects.0.lock().unwrap().insert(DRIVER.into(), csi_driver(&["Ephemeral"], true, "File"));
    let manager = || {
        VolumeManager::new(s.root.join("pods"), Arc::new(OneSecret), Arc::new(NoDownward), Arc::new(DriverMounts))
            .with_csi(Arc::new(s.plugin()))
    };
    let p = pod(source());
    let uid = PodUid("uid-1".into());
    let m = manager();
    assert_eq!(m.mount_pod(&p).await.unwrap(), vec![]);
    assert_eq!(m.mount_pod(&p).await.unwrap(), vec![], "a later sync publishes nothing");
    let mount = s.pod_dir().join("volumes/kubernetes.io~csi/data/mount");
    assert_eq!(m.volumes(&uid)["data"].host_path, mount);
    // A restarted kubelet finds it published and does not ask again.
    let restarted = manager();
    assert_eq!(restarted.mount_pod(&p).await.unwrap(), vec![]);
    assert_eq!(restarted.volumes(&uid)["data"].host_path, mount);
    assert_eq!(s.driver.published.lock().unwrap().len(), 1, "published once");
    // A driver with `requiresRepublish` is asked at every sync; a failure then does not stop the pod.
    s.objects.0.lock().unwrap().get_mut(DRIVER).unwrap().spec.requires_republish = Some(true);
    assert_eq!(restarted.mount_pod(&p).await.unwrap(), vec![]);
    assert_eq!(s.driver.published.lock().unwrap().len(), 2, "published again");
    *s.driver.fail.lock().unwrap() = Some(tonic::Code::Internal);
    let refresh = restarted.mount_pod(&p).await.unwrap();
    assert_eq!(refresh.len(), 1, "reported as a refresh failure: {refresh:?}");
    assert_eq!(restarted.volumes(&uid)["data"].host_path, mount, "the volume stays with the pod");
    *s.driver.fail.lock().unwrap() = None;
    restarted.unmount_pod(&uid).await.unwrap();
    assert_eq!(s.driver.unpublished.lock().unwrap().len(), 1);
    assert!(!s.pod_dir().join("volumes").exists());
}
