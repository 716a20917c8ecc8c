//! End to end: a container runtime that is missing at start, or restarts under running pods, is retried with
//! back-off; rkubelet never crashes and never loses a pod.

mod common;

use std::time::Duration;

use common::drill::{start_containerd, stop_containerd};
use common::*;

#[tokio::test]
async fn containerd_restart_under_running_pods_is_survived() {
    let (_g, _rt_before_restart) = fresh_runtime().await;
    let m = manifest("survivor", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    let mut node = Node::start(&[("survivor.yaml", &m)]);
    let before = node.wait_running("survivor-e2e-node").await;

    stop_containerd(nix::sys::signal::Signal::SIGTERM);
    let log = node.log_path();
    node.wait_for("the outage noticed", Duration::from_secs(30), || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains("container runtime is down").then_some(())
    })
    .await;
    // Meanwhile a new manifest arrives; it must run once the runtime is back.
    let late = manifest("late", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    node.write_manifest("late.yaml", &late);
    node.assert_alive();

    start_containerd();
    let rt = runtime().await;
    node.wait_for("late Running after the runtime came back", Duration::from_secs(90), || async {
        pod("late-e2e-node").await.filter(all_running)
    })
    .await;
    let after = node
        .wait_for("survivor still Running", Duration::from_secs(30), || async {
            pod("survivor-e2e-node").await.filter(all_running)
        })
        .await;
    assert_eq!(
        container_status(&after, "app").unwrap()["containerID"],
        container_status(&before, "app").unwrap()["containerID"],
        "the running container was kept across the containerd restart"
    );
    assert_eq!(container_status(&after, "app").unwrap()["restartCount"], 0);
    assert!(node.log().contains("container runtime is up again"));
    node.wait_healthy().await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn missing_runtime_socket_at_start_is_waited_for() {
    let (_g, rt) = fresh_runtime().await;
    let m = manifest("patient", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    let mut node = Node::start_with(&[("patient.yaml", &m)], |n| {
        // The endpoint points at a socket that does not exist yet.
        let link = n.dir.join("cri.sock");
        std::fs::read_to_string(&n.config).unwrap().replace(&endpoint(), &format!("unix://{}", link.display()))
    });
    node.wait_healthy().await;
    let log = node.log_path();
    node.wait_for("the missing runtime logged", Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.matches("container runtime is not reachable yet").count() >= 2).then_some(())
    })
    .await;
    node.assert_alive();
    let real = endpoint().trim_start_matches("unix://").to_string();
    std::os::unix::fs::symlink(real, node.dir.join("cri.sock")).unwrap();
    node.wait_for("patient Running once the socket exists", Duration::from_secs(90), || async {
        pod("patient-e2e-node").await.filter(all_running)
    })
    .await;
    node.stop_and_clean(&rt).await;
}
