//! One pod whose runtime calls hang (the in-memory runtime holds back every status call of its sandbox and
//! containers), on the whole core and tokio's paused clock: the PLEG keeps relisting, the other pods' changes are
//! synced, a new pod starts, neither the container deleter nor the periodic container garbage collection (which want
//! to remove the pod's older dead container) hold back anything; once the runtime answers again, the pod catches up.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::fake_node::FakeNode;
use kubelet::status::StatusManager;
use kubelet_config::podconfig::SourcesReady;
use kubelet_cri::{FakeRuntime, RuntimeService, api};
use kubelet_types::{Operation, PodSource, PodUid, PodUpdate, TestClock};
use tokio::sync::mpsc;

fn pod(name: &str, uid: &str, container: &str) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            annotations: Some([("kubernetes.io/config.source".to_string(), "file".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: container.into(),
                image: Some("busybox:1".into()),
                ..Default::default()
            }],
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    })
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..600 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never happened within 60 s: {what}");
}

fn running(status: &StatusManager, uid: &str) -> bool {
    status.get(&PodUid::from(uid)).is_some_and(|s| {
        s.phase.as_deref() == Some("Running")
            && s.container_statuses.iter().flatten().all(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
    })
}

async fn add(updates: &mpsc::Sender<PodUpdate>, p: Arc<Pod>) {
    updates.send(PodUpdate { op: Operation::Add, source: PodSource::File, pods: vec![p] }).await.unwrap();
}

/// Sandbox and container IDs of the pod `uid`.
async fn objects_of(fake: &FakeRuntime, uid: &str) -> Vec<String> {
    let selector: std::collections::HashMap<String, String> =
        [("io.kubernetes.pod.uid".to_string(), uid.into())].into();
    let sandboxes = fake
        .list_pod_sandbox(Some(api::PodSandboxFilter { label_selector: selector.clone(), ..Default::default() }))
        .await
        .unwrap();
    let containers = fake
        .list_containers(Some(api::ContainerFilter { label_selector: selector, ..Default::default() }))
        .await
        .unwrap();
    sandboxes.into_iter().map(|s| s.id).chain(containers.into_iter().map(|c| c.id)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_runtime_calls_hang_holds_back_no_other_pod_nor_the_loop() {
    let (fake, clock) = kubelet::fake_node::fake_runtime_on_test_clock(&["busybox:1"]);
    let dir = tempfile::tempdir().unwrap();
    let ready = SourcesReady::new([PodSource::File]);
    let node = FakeNode::start(fake.clone(), clock, dir.path(), ready.clone());
    let (status, updates) = (node.status.clone(), node.updates.clone());
    add(&updates, pod("stuck", "u1", "crash")).await;
    add(&updates, pod("other", "u2", "app")).await;
    wait_until("both pods running", || running(&status, "u1") && running(&status, "u2")).await;

    // The stuck pod's container died twice; the older dead instance is removed as the newer one dies (upstream's
    // container deleter keeps the newest dead instance).
    let first = fake.container_ids("crash")[0].clone();
    for _ in 0..2 {
        let id = fake.container_ids("crash").last().unwrap().clone();
        fake.exit_container(&id, 1);
        wait_until("the container restarted", || fake.container_ids("crash").last().is_some_and(|l| *l != id)).await;
        wait_until("running again", || running(&status, "u1")).await;
    }
    wait_until("the oldest dead instance removed", || !fake.container_ids("crash").contains(&first)).await;
    assert_eq!(fake.container_ids("crash").len(), 2, "the newest dead instance and the running one");
    // Now every status call of the pod hangs, and its running container dies too.
    for id in objects_of(&fake, "u1").await {
        fake.hang(&id);
    }
    let last = fake.container_ids("crash").last().unwrap().clone();
    fake.exit_container(&last, 1);
    // Every source is seen from now on: housekeeping runs, and the collection a minute later.
    let mut pc = kubelet_config::podconfig::PodConfig::new(ready.clone(), Arc::new(TestClock::fixed()));
    pc.merge(kubelet_config::sources::SourceUpdate::set(PodSource::File, vec![]));
    assert!(ready.all_ready());
    tokio::time::sleep(Duration::from_secs(65)).await;

    // The other pod's container dies and is restarted (a PLEG event, a sync); a new pod starts.
    let other = fake.container_ids("app")[0].clone();
    fake.exit_container(&other, 1);
    wait_until("the other pod's container restarted", || fake.container_ids("app").len() == 2).await;
    wait_until("the other pod running again", || running(&status, "u2")).await;
    add(&updates, pod("late", "u3", "late")).await;
    wait_until("the new pod running", || running(&status, "u3")).await;
    // The stuck pod shows what was last known: nothing could be inspected since.
    assert_eq!(fake.container_ids("crash").len(), 2, "nothing restarted or removed without an inspection");
    assert!(running(&status, "u1"), "the last known status stays");

    // The runtime answers again: the pod's dead container is restarted, and the older dead instance goes.
    let oldest = fake.container_ids("crash")[0].clone();
    for id in objects_of(&fake, "u1").await {
        fake.release(&id);
    }
    let restarted = || fake.container_ids("crash").last().is_some_and(|id| *id != last);
    wait_until("the stuck pod's container restarted", restarted).await;
    wait_until("the stuck pod running again", || running(&status, "u1")).await;
    wait_until("the older dead instance removed", || !fake.container_ids("crash").contains(&oldest)).await;
    node.stop().await;
}
