//! Claims resolved through the in-memory apiserver (upstream's refusals, on the paused clock) and PersistentVolumes
//! staged once, published per pod and unstaged after the last one, against a driver's Node service over a unix
//! socket ([`super::stub`], the real clock).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Container, EphemeralVolumeSource, NFSVolumeSource, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
    PersistentVolumeSpec, Pod, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSIDriverSpec, VolumeAttachment, VolumeAttachmentSpec, VolumeAttachmentStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kubelet_apiclient::fake::FakeApi;
use kubelet_types::PodUid;
use kubelet_types::objects::{NoObjects, PodVolumes};

use super::persistent::{Backing, resolve};
use super::plugin::{CsiDriverLister, CsiPlugin};
use super::registration::CsiDrivers;
use super::stub::{DriverMounts, serve};
use super::versions::highest_supported;
use super::voldata;
use crate::sources::NoDownward;
use crate::{Mounter, VolumeManager};

const DRIVER: &str = "hostpath.csi.k8s.io";

fn meta(ns: Option<&str>, name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta { namespace: ns.map(Into::into), name: Some(name.into()), uid: Some(uid.into()), ..Default::default() }
}

fn pvc(name: &str, phase: &str, pv: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(Some("ns"), name, &format!("{name}-uid")),
        spec: Some(PersistentVolumeClaimSpec { volume_name: Some(pv.into()), ..Default::default() }),
        status: Some(PersistentVolumeClaimStatus { phase: Some(phase.into()), ..Default::default() }),
    }
}

fn csi_pv(name: &str, claim_uid: &str, modes: &[&str]) -> PersistentVolume {
    PersistentVolume {
        metadata: meta(None, name, "pv-uid"),
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
            claim_ref: Some(ObjectReference { uid: Some(claim_uid.into()), ..Default::default() }),
            csi: Some(CSIPersistentVolumeSource {
                driver: DRIVER.into(),
                volume_handle: "vol-1".into(),
                volume_attributes: Some(BTreeMap::from([("kind".to_string(), "dir".to_string())])),
                ..Default::default()
            }),
            mount_options: Some(vec!["noatime".into()]),
            ..Default::default()
        }),
        status: None,
    }
}

fn pod(name: &str, uid: &str, v: Volume) -> Pod {
    let mount = VolumeMount { name: v.name.clone(), mount_path: "/data".into(), ..Default::default() };
    Pod {
        metadata: meta(Some("ns"), name, uid),
        spec: Some(PodSpec {
            volumes: Some(vec![v]),
            containers: vec![Container { name: "app".into(), volume_mounts: Some(vec![mount]), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn claim(name: &str) -> Volume {
    Volume {
        name: "data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource { claim_name: name.into(), read_only: None }),
        ..Default::default()
    }
}

async fn refused(api: &FakeApi, p: &Pod) -> String {
    let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    resolve(api, p, v, super::persistent::usage(p, &v.name)).await.unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn a_claim_resolves_to_its_bound_volume_or_is_refused_with_upstreams_texts() {
    let api = FakeApi::new();
    let p = pod("web", "pod-uid", claim("data"));
    let prefix = "error processing PVC ns/data: ";
    assert_eq!(
        refused(&api, &p).await,
        format!("{prefix}failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found")
    );
    api.put_pvc(pvc("data", "Pending", ""));
    assert_eq!(refused(&api, &p).await, format!("{prefix}PVC is not bound"));
    let mut deleting = pvc("data", "Bound", "pv-1");
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    api.put_pvc(deleting.clone());
    assert_eq!(refused(&api, &p).await, format!("{prefix}PVC is being deleted"));
    deleting.metadata.finalizers = Some(vec!["kubernetes.io/pvc-protection".into()]);
    api.put_pvc(deleting);
    assert_eq!(
        refused(&api, &p).await,
        format!("{prefix}failed to fetch PV pv-1 from API server: persistentvolumes \"pv-1\" not found"),
        "a protected claim in deletion is still used"
    );
    api.put_pvc(pvc("data", "Bound", "pv-1"));
    api.put_pv(csi_pv("pv-1", "other-uid", &["ReadWriteOnce"]));
    assert_eq!(
        refused(&api, &p).await,
        format!(
            "{prefix}found PV object pv-1 but its pv.Spec.ClaimRef.UID other-uid does not point to claim.UID data-uid"
        )
    );
    let mut block = csi_pv("pv-1", "data-uid", &["ReadWriteOnce"]);
    block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    api.put_pv(block);
    assert_eq!(refused(&api, &p).await, "volume data has volumeMode Block, but is specified in volumeMounts");
    let mut nfs = csi_pv("pv-1", "data-uid", &["ReadWriteOnce"]);
    let spec = nfs.spec.as_mut().unwrap();
    spec.csi = None;
    spec.nfs = Some(NFSVolumeSource { server: "s".into(), path: "/".into(), read_only: None });
    api.put_pv(nfs);
    assert_eq!(
        refused(&api, &p).await,
        "PersistentVolume pv-1 has source nfs, which rkubelet does not support (supported: csi, hostPath)"
    );
    let mut host = csi_pv("pv-1", "data-uid", &["ReadWriteOnce"]);
    let spec = host.spec.as_mut().unwrap();
    spec.csi = None;
    spec.host_path = Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
        path: "/srv/data".into(),
        type_: Some("Directory".into()),
    });
    api.put_pv(host);
    let v = &p.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    assert_eq!(
        resolve(&api, &p, v, super::persistent::usage(&p, &v.name)).await,
        Ok(Backing::HostPath { path: "/srv/data".into(), type_: "Directory".into() })
    );
    api.put_pv(csi_pv("pv-1", "data-uid", &["ReadWriteOnce"]));
    let Backing::Csi(pv) = resolve(&api, &p, v, super::persistent::usage(&p, &v.name)).await.unwrap() else {
        panic!("a CSI volume")
    };
    assert_eq!(pv.unique_name(), "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1");
    assert_eq!((pv.pv_name.as_str(), pv.read_only, pv.read_write_once), ("pv-1", false, true));

    // A generic ephemeral volume: the claim `<pod>-<volume>`, which the pod must own.
    let eph =
        Volume { name: "scratch".into(), ephemeral: Some(EphemeralVolumeSource::default()), ..Default::default() };
    let p2 = pod("web", "pod-uid", eph);
    let mut made = pvc("web-scratch", "Bound", "pv-1");
    api.put_pvc(made.clone());
    assert_eq!(refused(&api, &p2).await, "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)");
    made.metadata.owner_references = Some(vec![OwnerReference {
        controller: Some(true),
        uid: "pod-uid".into(),
        kind: "Pod".into(),
        name: "web".into(),
        api_version: "v1".into(),
        ..Default::default()
    }]);
    api.put_pvc(made);
    api.put_pv(csi_pv("pv-1", "web-scratch-uid", &["ReadWriteOnce"]));
    assert!(matches!(
        resolve(
            &api,
            &p2,
            &p2.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0],
            super::persistent::usage(&p2, "scratch")
        )
        .await,
        Ok(Backing::Csi(_))
    ));
}

struct Objects(CSIDriver);

impl CsiDriverLister for Objects {
    fn csi_driver(&self, _: &str) -> Result<Option<CSIDriver>, String> {
        Ok(Some(self.0.clone()))
    }
}

#[tokio::test]
async fn a_volume_is_attached_staged_once_published_per_pod_and_unstaged_after_its_last_pod() {
    use kubelet_proto::csi::v1::node_service_capability::rpc::Type;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (driver, endpoint) = serve(&root, vec![Type::StageUnstageVolume]);
    let drivers = Arc::new(CsiDrivers::default());
    drivers.add(DRIVER, &endpoint, highest_supported(&["1.0.0".into()]).unwrap());
    let object = CSIDriver {
        metadata: meta(None, DRIVER, "d"),
        spec: CSIDriverSpec {
            pod_info_on_mount: Some(true),
            fs_group_policy: Some("File".into()),
            volume_lifecycle_modes: Some(vec!["Persistent".into()]),
            ..Default::default()
        },
    };
    let lister: super::plugin::Lister = Arc::new(OnceLock::new());
    let _ = lister.set(Arc::new(Objects(object)));
    let api = Arc::new(FakeApi::new());
    let storage: super::plugin::Storage = Arc::new(OnceLock::new());
    let _ = storage.set(api.clone());
    let plugin = CsiPlugin::new(drivers, lister, storage, "node-a", &root);
    let (node, node_rx) = tokio::sync::watch::channel(Some(k8s_openapi::api::core::v1::Node::default()));
    let m = VolumeManager::new(root.join("pods"), Arc::new(NoObjects), Arc::new(NoDownward), Arc::new(DriverMounts))
        .with_csi(Arc::new(plugin))
        .with_node(node_rx);
    let in_use = m.in_use_changes();
    api.put_pvc(pvc("data", "Bound", "pv-1"));
    api.put_pv(csi_pv("pv-1", "data-uid", &["ReadWriteMany"]));
    let (a, b) = (pod("a", "uid-a", claim("data")), pod("b", "uid-b", claim("data")));

    // Attach required (the CSIDriver does not say otherwise): not before the Node reports the volume in use and
    // the controller lists it attached (no event, as upstream's), then its VolumeAttachment gives the context.
    let unique = "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1";
    let e = m.mount_pod(&a).await.unwrap_err();
    assert_eq!(e.failures[0].event(), None);
    assert!(e.failures[0].error.to_string().starts_with("Volume has not been added to the list of VolumesInUse"));
    assert!(in_use.has_changed().unwrap(), "the node status is woken to report it");
    assert_eq!(m.volumes_in_use(), [unique]);
    let mut status =
        k8s_openapi::api::core::v1::NodeStatus { volumes_in_use: Some(vec![unique.to_string()]), ..Default::default() };
    node.send_replace(Some(k8s_openapi::api::core::v1::Node { status: Some(status.clone()), ..Default::default() }));
    let e = m.mount_pod(&a).await.unwrap_err();
    assert!(e.failures[0].error.to_string().starts_with("Volume not attached according to node status"));
    tokio::time::pause();
    tokio::time::advance(crate::MOUNT_WAIT_TIMEOUT).await;
    let e = m.mount_pod(&a).await.unwrap_err();
    tokio::time::resume();
    assert_eq!(
        e.unable.as_deref(),
        Some(
            "unmounted volumes=[data], unattached volumes=[data], failed to process volumes=[]: context deadline exceeded"
        )
    );
    status.volumes_attached =
        Some(vec![k8s_openapi::api::core::v1::AttachedVolume { name: unique.into(), device_path: String::new() }]);
    node.send_replace(Some(k8s_openapi::api::core::v1::Node { status: Some(status), ..Default::default() }));
    let e = m.mount_pod(&a).await.unwrap_err();
    let attachment = voldata::attachment_name("vol-1", DRIVER, "node-a");
    assert_eq!(
        e.failures[0].event().unwrap(),
        format!(
            "MountVolume.MountDevice failed for volume \"pv-1\" : volumeattachments.storage.k8s.io \"{attachment}\" not found"
        )
    );
    api.put_volume_attachment(VolumeAttachment {
        metadata: meta(None, &attachment, "va"),
        spec: VolumeAttachmentSpec { attacher: DRIVER.into(), node_name: "node-a".into(), ..Default::default() },
        status: Some(VolumeAttachmentStatus {
            attached: true,
            attachment_metadata: Some(BTreeMap::from([("device".to_string(), "/dev/x".to_string())])),
            ..Default::default()
        }),
    });
    assert_eq!(m.mount_pod(&a).await.unwrap(), vec![]);
    assert_eq!(m.mount_pod(&b).await.unwrap(), vec![]);
    let staging = voldata::staging_path(&root, DRIVER, "vol-1");
    let hashed = staging.parent().unwrap();
    assert_eq!(hashed.parent().unwrap(), root.join("plugins/kubernetes.io/csi").join(DRIVER));
    assert_eq!(hashed.file_name().unwrap().len(), 64, "sha256 of the handle, in hex");
    let staged = driver.staged.lock().unwrap().clone();
    assert_eq!(staged.len(), 1, "staged once for both pods");
    assert_eq!(staged[0].staging_target_path, staging.display().to_string());
    assert_eq!(staged[0].publish_context["device"], "/dev/x");
    let stage_data = voldata::load(staging.parent().unwrap()).unwrap();
    assert_eq!(stage_data.keys().collect::<Vec<_>>(), ["driverName", "volumeHandle"]);
    let published = driver.published.lock().unwrap().clone();
    assert_eq!(published.len(), 2);
    let req = &published[0];
    assert_eq!(req.staging_target_path, staging.display().to_string());
    assert_eq!(req.target_path, root.join("pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount").display().to_string());
    assert_eq!(req.volume_context["kind"], "dir");
    assert_eq!(req.volume_context["csi.storage.k8s.io/ephemeral"], "false");
    assert_eq!(req.publish_context["device"], "/dev/x");
    let cap = req.volume_capability.clone().unwrap();
    use kubelet_proto::csi::v1::volume_capability::access_mode::Mode;
    assert_eq!(cap.access_mode.unwrap().mode, Mode::MultiNodeMultiWriter as i32);
    let data = voldata::load(&root.join("pods/uid-a/volumes/kubernetes.io~csi/pv-1")).unwrap();
    assert_eq!((data["specVolID"].as_str(), data["volumeLifecycleMode"].as_str()), ("pv-1", "Persistent"));
    assert_eq!(
        m.volumes(&PodUid("uid-a".into()))["data"].host_path,
        root.join("pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount")
    );
    assert_eq!(m.volumes_in_use(), ["kubernetes.io/csi/hostpath.csi.k8s.io^vol-1"]);

    // The first pod goes: unpublished, still staged for the second; the second goes: unstaged.
    m.unmount_pod(&PodUid("uid-a".into())).await.unwrap();
    assert_eq!(driver.unpublished.lock().unwrap().len(), 1);
    assert!(driver.unstaged.lock().unwrap().is_empty(), "b still uses it");
    m.unmount_pod(&PodUid("uid-b".into())).await.unwrap();
    assert_eq!(*driver.unstaged.lock().unwrap(), vec![("vol-1".to_string(), staging.display().to_string())]);
    assert!(!staging.parent().unwrap().exists(), "the staging folder and its vol_data.json are gone");
    assert!(m.volumes_in_use().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_claim_that_cannot_be_processed_is_reported_at_once_as_upstream() {
    let tmp = tempfile::tempdir().unwrap();
    let api = Arc::new(FakeApi::new());
    let storage: super::plugin::Storage = Arc::new(OnceLock::new());
    let _ = storage.set(api.clone());
    let plugin = CsiPlugin::new(Arc::default(), Arc::default(), storage, "node-a", tmp.path());
    let m =
        VolumeManager::new(tmp.path().join("pods"), Arc::new(NoObjects), Arc::new(NoDownward), Arc::new(DriverMounts))
            .with_csi(Arc::new(plugin));
    api.put_pvc(pvc("data", "Pending", ""));
    let e = m.mount_pod(&pod("web", "uid-1", claim("data"))).await.unwrap_err();
    assert_eq!(e.failures[0].event(), None, "no MountVolume.SetUp event");
    assert_eq!(
        e.unable.as_deref(),
        Some(
            "unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC \
             ns/data: PVC is not bound"
        )
    );
}

/// A node whose driver stages (attach not required) behind the in-memory apiserver, with `mounter`.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    driver: Arc<super::stub::Driver>,
    api: Arc<FakeApi>,
    m: VolumeManager,
}

fn fixture(mounter: Arc<dyn Mounter>, policy: Option<&str>) -> Fixture {
    use kubelet_proto::csi::v1::node_service_capability::rpc::Type;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let (driver, endpoint) = serve(&root, vec![Type::StageUnstageVolume]);
    let drivers = Arc::new(CsiDrivers::default());
    drivers.add(DRIVER, &endpoint, highest_supported(&["1.0.0".into()]).unwrap());
    let mut object = CSIDriver { metadata: meta(None, DRIVER, "d"), spec: CSIDriverSpec::default() };
    object.spec.attach_required = Some(false);
    object.spec.fs_group_policy = policy.map(Into::into);
    let lister: super::plugin::Lister = Arc::new(OnceLock::new());
    let _ = lister.set(Arc::new(Objects(object)));
    let api = Arc::new(FakeApi::new());
    let storage: super::plugin::Storage = Arc::new(OnceLock::new());
    let _ = storage.set(api.clone());
    let m = VolumeManager::new(root.join("pods"), Arc::new(NoObjects), Arc::new(NoDownward), mounter)
        .with_csi(Arc::new(CsiPlugin::new(drivers, lister, storage, "node-a", &root)));
    Fixture { _tmp: tmp, root, driver, api, m }
}

/// Bind mounts and loop locks recorded, not made.
#[derive(Default)]
struct BlockMounts {
    binds: std::sync::Mutex<Vec<(std::path::PathBuf, std::path::PathBuf)>>,
    locked: std::sync::Mutex<Vec<std::path::PathBuf>>,
}

impl Mounter for BlockMounts {
    fn mount_tmpfs(&self, _: &std::path::Path, _: Option<u64>) -> Result<(), String> {
        Err("no tmpfs here".into())
    }
    fn unmount(&self, path: &std::path::Path) -> Result<(), String> {
        self.binds.lock().unwrap().retain(|(_, t)| t != path);
        Ok(())
    }
    fn mounts_under(&self, path: &std::path::Path) -> Vec<std::path::PathBuf> {
        self.binds.lock().unwrap().iter().filter(|(_, t)| t.starts_with(path)).map(|(_, t)| t.clone()).collect()
    }
    fn bind_mount(&self, source: &std::path::Path, target: &std::path::Path) -> Result<(), String> {
        self.binds.lock().unwrap().push((source.to_path_buf(), target.to_path_buf()));
        Ok(())
    }
    fn lock_device(&self, path: &std::path::Path) -> Result<(), String> {
        self.locked.lock().unwrap().push(path.to_path_buf());
        Ok(())
    }
    fn unlock_device(&self, path: &std::path::Path) -> Result<(), String> {
        self.locked.lock().unwrap().retain(|p| p != path);
        Ok(())
    }
}

#[tokio::test]
async fn a_block_volume_is_staged_published_bound_locked_and_linked_then_undone_after_its_last_pod() {
    let mounts = Arc::new(BlockMounts::default());
    let Fixture { _tmp, root, driver, api, m } = fixture(mounts.clone(), None);
    api.put_pvc(pvc("disk", "Bound", "pv-b"));
    let mut pv = csi_pv("pv-b", "disk-uid", &["ReadWriteOnce"]);
    pv.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    api.put_pv(pv);
    let device_pod = |name: &str, uid: &str| {
        let mut p = pod(name, uid, claim("disk"));
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.volume_mounts = None;
        c.volume_devices = Some(vec![k8s_openapi::api::core::v1::VolumeDevice {
            name: "data".into(),
            device_path: "/dev/xvda".into(),
        }]);
        p
    };
    assert_eq!(m.mount_pod(&device_pod("a", "uid-a")).await.unwrap(), vec![]);
    assert_eq!(m.mount_pod(&device_pod("b", "uid-b")).await.unwrap(), vec![]);
    let devices = root.join("plugins/kubernetes.io/csi/volumeDevices");
    let staged = driver.staged.lock().unwrap().clone();
    assert_eq!(staged.len(), 1, "staged once");
    assert_eq!(staged[0].staging_target_path, devices.join("staging/pv-b").display().to_string());
    let published = driver.published.lock().unwrap().clone();
    assert_eq!(published[0].target_path, devices.join("publish/pv-b/uid-a").display().to_string());
    assert!(matches!(
        published[0].volume_capability.clone().unwrap().access_type,
        Some(kubelet_proto::csi::v1::volume_capability::AccessType::Block(_))
    ));
    let a = m.volumes(&PodUid("uid-a".into()))["data"].clone();
    assert!(a.block);
    assert_eq!(a.host_path, root.join("pods/uid-a/volumeDevices/kubernetes.io~csi/pv-b"));
    assert_eq!(std::fs::read_link(&a.host_path).unwrap(), devices.join("publish/pv-b/uid-a"));
    let bound = devices.join("pv-b/dev/uid-a");
    assert!(mounts.binds.lock().unwrap().contains(&(devices.join("publish/pv-b/uid-a"), bound.clone())));
    assert!(mounts.locked.lock().unwrap().contains(&bound));
    assert_eq!(voldata::load(&devices.join("pv-b/data")).unwrap()["volumeHandle"], "vol-1");

    // A Filesystem claim used as a device is refused with upstream's text.
    let mut fs_pv = csi_pv("pv-f", "files-uid", &["ReadWriteOnce"]);
    fs_pv.spec.as_mut().unwrap().csi.as_mut().unwrap().volume_handle = "vol-f".into();
    api.put_pvc(pvc("files", "Bound", "pv-f"));
    api.put_pv(fs_pv);
    let mut wrong = device_pod("c", "uid-c");
    wrong.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0] = claim("files");
    let e = m.mount_pod(&wrong).await.unwrap_err();
    assert!(e.unable.unwrap().ends_with("volume data has volumeMode Filesystem, but is specified in volumeDevices"));

    m.unmount_pod(&PodUid("uid-a".into())).await.unwrap();
    assert!(driver.unstaged.lock().unwrap().is_empty(), "b still maps it");
    assert!(!mounts.locked.lock().unwrap().contains(&bound) && mounts.mounts_under(&bound).is_empty());
    m.unmount_pod(&PodUid("uid-b".into())).await.unwrap();
    assert_eq!(driver.unstaged.lock().unwrap().len(), 1);
    assert_eq!(driver.unpublished.lock().unwrap().len(), 2);
    assert!(!devices.join("staging/pv-b").exists() && !devices.join("pv-b").exists(), "folders gone");
    assert!(!root.join("pods/uid-b/volumeDevices").exists());
}

#[tokio::test]
async fn a_failed_unstage_is_retried_and_a_volume_staged_for_a_failed_publish_is_unstaged_after_its_pod() {
    let Fixture { _tmp, root, driver, api, m } = fixture(Arc::new(DriverMounts), Some("File"));
    api.put_pvc(pvc("data", "Bound", "pv-1"));
    api.put_pv(csi_pv("pv-1", "data-uid", &["ReadWriteOnce"]));
    let a = pod("a", "uid-a", claim("data"));
    let uid = PodUid("uid-a".into());
    assert_eq!(m.mount_pod(&a).await.unwrap(), vec![]);
    let unique = "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1".to_string();
    *driver.fail_unstage.lock().unwrap() = Some(tonic::Code::Unavailable);
    let e = m.unmount_pod(&uid).await.unwrap_err();
    assert!(e.to_string().contains("attacher.UnmountDevice failed"), "{e}");
    assert!(root.join("pods/uid-a/volumes/kubernetes.io~csi/pv-1/vol_data.json").exists(), "kept for the retry");
    assert_eq!(m.volumes_in_use(), vec![unique.clone()], "still in use until unstaged");
    m.unmount_pod(&uid).await.unwrap();
    assert_eq!(driver.unstaged.lock().unwrap().len(), 1);
    assert!(m.volumes_in_use().is_empty());

    // Staged, then the publish fails for good: the pod's teardown unstages what no pod publishes.
    *driver.fail.lock().unwrap() = Some(tonic::Code::InvalidArgument);
    let b = pod("b", "uid-b", claim("data"));
    assert!(m.mount_pod(&b).await.is_err());
    assert_eq!(driver.staged.lock().unwrap().len(), 2, "staged again");
    assert!(!root.join("pods/uid-b/volumes/kubernetes.io~csi/pv-1").exists(), "a final error leaves no folder");
    assert_eq!(m.volumes_in_use(), vec![unique], "the staged volume is in use");
    m.unmount_pod(&PodUid("uid-b".into())).await.unwrap();
    assert_eq!(driver.unstaged.lock().unwrap().len(), 2, "unstaged by the sweep");
    assert!(m.volumes_in_use().is_empty());
}
