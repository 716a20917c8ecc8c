//! The kubelet-managed files of a container (`/etc/hosts`, the termination-message file) when the pod directory
//! cannot take them, on the in-memory runtime: what upstream tolerates does not hold a container back, and a file
//! the pod's running containers see is not rewritten for nothing.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{env, status};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn pod(apps: &[&str]) -> Pod {
    let c = |n: &&str| Container {
        name: n.to_string(),
        image: Some("busybox:1".into()),
        termination_message_path: Some("/dev/termination-log".into()),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec { containers: apps.iter().map(c).collect(), ..Default::default() }),
        ..Default::default()
    }
}

/// The container paths of the mounts a container was created with.
fn mounts(e: &common::Env, name: &str) -> Vec<String> {
    let id = e.fake.container_ids(name).pop().expect("the container was created");
    e.fake.container_config(&id).unwrap().mounts.into_iter().map(|m| m.container_path).collect()
}

#[tokio::test(start_paused = true)]
async fn a_termination_file_that_cannot_be_made_does_not_hold_the_container_back() {
    let e = env();
    let pod_dir = e.mgr.config().root_dir.join("pods/uid-1");
    // Where the termination-message files of container `a` go is taken (as a full disk refuses a new file).
    std::fs::create_dir_all(pod_dir.join("containers")).unwrap();
    std::fs::write(pod_dir.join("containers/a"), "").unwrap();
    let r = e.mgr.sync_pod(&pod(&["a", "b"]), &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    assert_eq!(r.started, vec!["a", "b"]);
    assert_eq!(mounts(&e, "a"), ["/etc/hosts"], "a runs without its termination-message file, as upstream's");
    assert_eq!(mounts(&e, "b"), ["/etc/hosts", "/dev/termination-log"]);
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_hosts_file_is_not_rewritten_for_the_next_container() {
    let e = env();
    let p = pod(&["a"]);
    assert!(e.mgr.sync_pod(&p, &status(&e).await).await.ok());
    let hosts = e.mgr.config().root_dir.join("pods/uid-1/etc-hosts");
    let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options().write(true).open(&hosts).unwrap().set_modified(long_ago).unwrap();
    let ino = std::fs::metadata(&hosts).unwrap().ino();
    // A second container of the same pod (the pod's first one keeps running with this file mounted).
    let mut two = p.clone();
    two.spec.as_mut().unwrap().containers.extend(pod(&["b"]).spec.unwrap().containers);
    let r = e.mgr.sync_pod(&two, &status(&e).await).await;
    assert_eq!(r.started, vec!["b"], "{:?}", r.errors);
    let after = std::fs::metadata(&hosts).unwrap();
    assert_eq!((after.ino(), after.modified().unwrap()), (ino, long_ago), "not written again");
    assert!(std::fs::read_to_string(&hosts).unwrap().contains("10.88.0."), "the pod's IP is in it");
}
