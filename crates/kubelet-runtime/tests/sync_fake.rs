//! The runtime manager against the in-memory runtime on tokio's paused clock: init containers in order, app
//! containers, crash-loop back-off, sandbox re-creation, kill and removal.

mod common;

use std::time::Duration;

use common::{Env, env, status};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_types::{ContainerState, PodStatus, PodUid};

fn pod(inits: &[&str], apps: &[&str], policy: &str) -> Pod {
    let c = |n: &&str| Container { name: n.to_string(), image: Some("busybox:1".into()), ..Default::default() };
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(inits.iter().map(c).collect()),
            containers: apps.iter().map(c).collect(),
            restart_policy: Some(policy.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn running(st: &PodStatus) -> Vec<&str> {
    st.container_statuses.iter().filter(|c| c.state == ContainerState::Running).map(|c| c.name.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn init_containers_then_apps() {
    let e = env();
    let p = pod(&["i1", "i2"], &["a", "b"], "Always");
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    assert_eq!(r.started, vec!["i1"]);
    // i1 still runs: nothing new starts.
    assert!(e.mgr.sync_pod(&p, &status(&e).await).await.started.is_empty());
    e.fake.exit_container(&e.fake.container_ids("i1")[0], 0);
    assert_eq!(e.mgr.sync_pod(&p, &status(&e).await).await.started, vec!["i2"]);
    e.fake.exit_container(&e.fake.container_ids("i2")[0], 0);
    assert_eq!(e.mgr.sync_pod(&p, &status(&e).await).await.started, vec!["a", "b"]);
    let st = status(&e).await;
    let mut up = running(&st);
    up.sort();
    assert_eq!(up, vec!["a", "b"]);
    assert_eq!(st.sandbox_statuses.len(), 1);
    // Steady state: a sync does nothing.
    e.fake.clear_calls();
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert!(r.ok() && r.started.is_empty());
    assert_eq!(e.fake.count("CreateContainer") + e.fake.count("StopContainer") + e.fake.count("RunPodSandbox"), 0);
}

#[tokio::test(start_paused = true)]
async fn crash_loop_backoff_on_the_paused_clock() {
    let e = env();
    let p = pod(&[], &["a"], "Always");
    e.mgr.sync_pod(&p, &status(&e).await).await;
    let crash = |e: &Env| {
        let id = e.fake.container_ids("a").pop().unwrap();
        e.fake.exit_container(&id, 1);
    };
    crash(&e);
    // The first crash restarts at once and arms a 10 s back-off.
    assert_eq!(e.mgr.sync_pod(&p, &status(&e).await).await.started, vec!["a"]);
    crash(&e);
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert_eq!(r.errors[0].reason, "CrashLoopBackOff");
    assert!(r.errors[0].message.starts_with("back-off 10s restarting failed container=a pod=p_default(uid-1)"));
    assert!(r.only_backoff());
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!e.mgr.sync_pod(&p, &status(&e).await).await.ok(), "still backing off after 9 s");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(e.mgr.sync_pod(&p, &status(&e).await).await.started, vec!["a"], "restarted after 10 s");
    crash(&e);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert!(r.errors[0].message.starts_with("back-off 20s"), "doubled: {}", r.errors[0].message);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert_eq!(r.started, vec!["a"]);
    let st = status(&e).await;
    assert_eq!(st.find_container("a").unwrap().restart_count, 3);
    assert!(e.mgr.reasons().get(&PodUid::from("uid-1"), "a").is_none(), "a successful start clears the reason");
}

#[tokio::test(start_paused = true)]
async fn never_pods_stop_and_dead_sandboxes_are_recreated() {
    let e = env();
    let p = pod(&[], &["a"], "Never");
    e.mgr.sync_pod(&p, &status(&e).await).await;
    e.fake.exit_container(&e.fake.container_ids("a")[0], 0);
    // Nothing to run any more: the sandbox is stopped and nothing restarts.
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert!(r.ok() && r.started.is_empty());
    assert_eq!(e.fake.count("StopPodSandbox"), 1);
    assert!(e.mgr.sync_pod(&p, &status(&e).await).await.started.is_empty());
    assert_eq!(e.fake.count("RunPodSandbox"), 1);

    let e = env();
    let p = pod(&[], &["a"], "Always");
    e.mgr.sync_pod(&p, &status(&e).await).await;
    let sb = status(&e).await.sandbox_statuses[0].id.clone();
    e.fake.kill_sandbox(&sb);
    let r = e.mgr.sync_pod(&p, &status(&e).await).await;
    assert_eq!(r.started, vec!["a"]);
    let st = status(&e).await;
    assert_eq!(st.sandbox_statuses[0].attempt, 1);
    assert_eq!(st.find_container("a").unwrap().restart_count, 1);

    // Kill then remove: nothing of the pod is left.
    e.mgr.kill_pod(Some(&p), &st, None).await.unwrap();
    assert!(running(&status(&e).await).is_empty());
    e.mgr.remove_pod(&PodUid::from("uid-1"), None).await.unwrap();
    assert_eq!(e.fake.object_counts(), (0, 0));
}
