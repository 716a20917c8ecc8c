//! The volume manager's unit tests: refreshes, timeouts, gated projections.

use super::*;
use crate::sources::NoDownward;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, HostPathVolumeSource, PodSpec};
use kubelet_types::objects::NoObjects;

/// One ConfigMap `cm` whose reads fail while `down`.
#[derive(Default)]
struct Flaky(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl ObjectSource for Flaky {
    async fn config_map(&self, _: &str, _: &str) -> Result<Option<k8s_openapi::api::core::v1::ConfigMap>, String> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("failed to sync configmap cache: timed out waiting for the condition".into());
        }
        Ok(Some(k8s_openapi::api::core::v1::ConfigMap {
            data: Some([("k".to_string(), "v".to_string())].into()),
            ..Default::default()
        }))
    }
    async fn secret(&self, _: &str, _: &str) -> Result<Option<k8s_openapi::api::core::v1::Secret>, String> {
        Ok(None)
    }
    async fn services(&self, _: &str) -> Result<Vec<k8s_openapi::api::core::v1::Service>, String> {
        Ok(vec![])
    }
}

#[tokio::test]
async fn refresh_failures_of_volumes_set_up_before_do_not_block_the_pod_even_after_a_restart() {
    use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, PodSecurityContext};
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let objects = Arc::new(Flaky::default());
    let manager =
        || VolumeManager::new(tmp.path().join("pods"), objects.clone(), Arc::new(NoDownward), Arc::new(SystemMounter));
    let cm = Volume {
        name: "cfg".into(),
        config_map: Some(ConfigMapVolumeSource { name: "cm".into(), ..Default::default() }),
        ..Default::default()
    };
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes: Some(vec![cm]),
            security_context: Some(PodSecurityContext { fs_group: Some(2000), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let m = manager();
    assert_eq!(m.mount_pod(&pod).await.unwrap(), vec![]);
    let file = tmp.path().join("pods/u1/volumes/kubernetes.io~configmap/cfg/k");
    assert_eq!(std::fs::metadata(&file).unwrap().gid(), 2000, "the files carry the fsGroup");
    objects.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let refresh = m.mount_pod(&pod).await.unwrap();
    assert_eq!(refresh.len(), 1, "reported, not blocking");
    assert!(m.volumes(&PodUid("u1".into())).contains_key("cfg"), "still mounted for the containers");
    // A new process finds the volume set up and does not block the pod either.
    let restarted = manager();
    assert_eq!(restarted.mount_pod(&pod).await.unwrap().len(), 1);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "v", "the last contents stay");
    // A pod whose volume was never set up is blocked.
    let mut other = pod.clone();
    other.metadata.uid = Some("u2".into());
    assert_eq!(restarted.mount_pod(&other).await.unwrap_err().failures.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn every_volume_is_tried_and_a_long_wait_gives_upstreams_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let m =
        VolumeManager::new(tmp.path().join("pods"), Arc::new(NoObjects), Arc::new(NoDownward), Arc::new(SystemMounter));
    let missing = tmp.path().join("missing");
    let host = |name: &str| Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource { path: missing.display().to_string(), type_: Some("File".into()) }),
        ..Default::default()
    };
    let scratch =
        Volume { name: "scratch".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() };
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec { volumes: Some(vec![host("a"), scratch, host("b")]), ..Default::default() }),
        ..Default::default()
    };
    let e = m.mount_pod(&pod).await.unwrap_err();
    let names: Vec<&str> = e.failures.iter().map(|f| f.volume.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(e.unable, None);
    assert!(m.volumes(&PodUid("u1".into())).contains_key("scratch"), "the good volume is set up meanwhile");
    tokio::time::advance(MOUNT_WAIT_TIMEOUT).await;
    let e = m.mount_pod(&pod).await.unwrap_err();
    assert_eq!(
        e.unable.as_deref(),
        Some("unmounted volumes=[a b], unattached volumes=[], failed to process volumes=[]: context deadline exceeded")
    );
    assert_eq!(m.mount_pod(&pod).await.unwrap_err().unable, None, "the wait starts again");
    std::fs::write(&missing, "").unwrap();
    assert_eq!(m.mount_pod(&pod).await.unwrap(), vec![]);
    std::fs::remove_file(&missing).unwrap();
    assert_eq!(m.mount_pod(&pod).await.unwrap(), vec![], "hostPath is checked once, at set-up");
    m.unmount_pod(&PodUid("u1".into())).await.unwrap();
    assert!(!tmp.path().join("pods/u1/volumes").exists());
}

/// Records tmpfs mounts instead of making them.
#[derive(Default)]
struct RecordingMounter(Mutex<Vec<PathBuf>>);

impl Mounter for RecordingMounter {
    fn mount_tmpfs(&self, path: &Path, _size: Option<u64>) -> Result<(), String> {
        self.0.lock().unwrap().push(path.to_path_buf());
        Ok(())
    }
    fn unmount(&self, path: &Path) -> Result<(), String> {
        self.0.lock().unwrap().retain(|m| m != path);
        Ok(())
    }
    fn mounts_under(&self, path: &Path) -> Vec<PathBuf> {
        self.0.lock().unwrap().iter().filter(|m| m.starts_with(path)).cloned().collect()
    }
}

#[tokio::test(start_paused = true)]
async fn gated_projected_sources_fail_the_mount_with_upstreams_text_and_are_never_skipped() {
    use k8s_openapi::api::core::v1::{
        ClusterTrustBundleProjection, DownwardAPIProjection, PodCertificateProjection, ProjectedVolumeSource,
        VolumeProjection,
    };
    let projected = |name: &str, source: VolumeProjection| {
        // A source that works comes first: the volume still fails as a whole.
        let fine = VolumeProjection { downward_api: Some(DownwardAPIProjection::default()), ..Default::default() };
        Volume {
            name: name.into(),
            projected: Some(ProjectedVolumeSource { sources: Some(vec![fine, source]), default_mode: None }),
            ..Default::default()
        }
    };
    let bundle = |name: Option<&str>, signer: Option<&str>| VolumeProjection {
        cluster_trust_bundle: Some(ClusterTrustBundleProjection {
            name: name.map(Into::into),
            signer_name: signer.map(Into::into),
            path: "ca.pem".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cert = VolumeProjection {
        pod_certificate: Some(PodCertificateProjection {
            signer_name: "example.com/signer".into(),
            key_type: "ED25519".into(),
            credential_bundle_path: Some("creds.pem".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut pod = Pod::default();
    pod.metadata.uid = Some("u1".into());
    pod.spec = Some(PodSpec {
        volumes: Some(vec![
            projected("by-name", bundle(Some("root-ca"), None)),
            projected("by-signer", bundle(None, Some("example.com/signer"))),
            projected("neither", bundle(None, None)),
            projected("cert", cert),
        ]),
        ..Default::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let manager = |gated: GatedProjections| {
        let mounter = Arc::new(RecordingMounter::default());
        VolumeManager::new(tmp.path().join("pods"), Arc::new(NoObjects), Arc::new(NoDownward), mounter)
            .with_gated_projections(gated)
    };
    let failures = |e: MountFailures| -> Vec<(String, String)> {
        e.failures.into_iter().map(|f| (f.volume, f.error.to_string())).collect()
    };
    let off = manager(GatedProjections::default());
    let e = off.mount_pod(&pod).await.expect_err("the pod waits for its volumes");
    let static_mode = "ClusterTrustBundle projection is not supported in static kubelet mode";
    let want = [
        ("by-name", static_mode),
        ("by-signer", static_mode),
        ("neither", "ClusterTrustBundle projection requires either name or signerName to be set"),
        ("cert", "unimplemented"),
    ];
    assert_eq!(failures(e), want.map(|(v, m)| (v.to_string(), m.to_string())));
    assert!(off.volumes(&PodUid("u1".into())).is_empty(), "no volume is handed to the containers");
    let dir = tmp.path().join("pods/u1/volumes/kubernetes.io~projected/by-name");
    assert!(!dir.join(atomic_writer::DATA_DIR).exists(), "nothing was written");
    // The next sync fails the same way: the pod is never started without the content.
    assert_eq!(off.mount_pod(&pod).await.unwrap_err().failures.len(), 4);

    let on = manager(GatedProjections { cluster_trust_bundle: true, pod_certificate: true });
    let e = failures(on.mount_pod(&pod).await.unwrap_err());
    assert_eq!(e.len(), 4);
    assert!(e[0].1.starts_with("ClusterTrustBundle projection is not implemented by rkubelet yet"), "{e:?}");
    assert_eq!(e[2].1, want[2].1, "an invalid source is named as upstream whatever the gate");
    assert!(e[3].1.starts_with("PodCertificate projection is not implemented by rkubelet yet"), "{e:?}");
    assert!(on.volumes(&PodUid("u1".into())).is_empty());
    on.unmount_pod(&PodUid("u1".into())).await.unwrap();
}
