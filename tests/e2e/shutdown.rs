//! End to end: graceful node shutdown (issue 30) against the real systemd-logind, rkubelet a node of the real
//! cluster. Debian's systemd runs as PID 1 of its own namespaces with the system bus and logind inside
//! (`scripts/lib/systemd-ns.sh logind`), and rkubelet and containerd inside too; a `PowerOff` call to logind is the
//! shutdown (its `poweroff.target` is an empty stand-in, so the namespace stays up and logind then announces the end).
//!
//! With `shutdownGracePeriod: 8s` and `shutdownGracePeriodCriticalPods: 3s`, rkubelet raises logind's
//! `InhibitDelayMaxSec` from its default 5 s to 8 s and holds a delay lock; on `PrepareForShutdown` the node turns
//! NotReady ("node is shutting down"), a new pod is refused (`NodeShutdown`), the ordinary pods stop first (one that
//! ignores SIGTERM is killed after the 5 s of its group) and the system-node-critical pod after them, each `Failed`
//! with reason `Terminated` and a `DisruptionTarget` condition; then the lock is released.

mod common;

use std::time::Duration;

use common::cluster::TestEnv;
use common::systemd_ns::SystemdNs;
use common::*;
use serde_json::Value;
use tokio::time::Instant;

fn finished_at(p: &Value) -> String {
    let s = container_status(p, "app").cloned().unwrap_or_default();
    s["state"]["terminated"]["finishedAt"].as_str().unwrap_or_default().to_string()
}

fn kubelet_inhibitors(ns: &SystemdNs) -> usize {
    let out = ns.exec(&[
        "busctl",
        "call",
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager",
        "ListInhibitors",
    ]);
    out.matches("\"kubelet\"").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logind_shutdown_stops_the_pods_by_priority_within_their_grace_periods_and_the_node_goes_not_ready() {
    let _g = serial().await;
    let ns = SystemdNs::start();
    ns.logind();
    let delay = |ns: &SystemdNs| {
        ns.exec(&[
            "busctl",
            "get-property",
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "InhibitDelayMaxUSec",
        ])
        .trim()
        .to_string()
    };
    assert_eq!(delay(&ns), "t 5000000", "logind's default");
    let env = TestEnv::new().await;
    let config = ns.node_config("shutdownGracePeriod: 8s\nshutdownGracePeriodCriticalPods: 3s\n");
    let wrapper = vec![(WRAPPER_ENV.to_string(), ns.wrapper().display().to_string())];
    let mut node = env.start_node_env(config, wrapper);
    env.wait_node_ready(&mut node).await;
    node.wait_for("the kubelet's inhibitor lock", Duration::from_secs(30), || async {
        (kubelet_inhibitors(&ns) == 1).then_some(())
    })
    .await;
    assert_eq!(delay(&ns), "t 8000000", "InhibitDelayMaxSec raised to the grace period");

    // Ordinary pods (priority 0): one stops at SIGTERM, one ignores it; a system-node-critical one.
    env.create(&env.pod_yaml("web", &[("app", SERVE)], "")).await;
    let stubborn = env
        .pod_yaml("stubborn", &[("app", "trap '' TERM; while true; do sleep 0.2; done")], "")
        .replace("terminationGracePeriodSeconds: 2", "terminationGracePeriodSeconds: 30");
    env.create(&stubborn).await;
    env.create(&env.pod_yaml("agent", &[("app", SERVE)], "  priorityClassName: system-node-critical\n")).await;
    for p in ["web", "stubborn", "agent"] {
        env.wait_pod_running(&mut node, p).await;
    }

    let t0 = Instant::now();
    let out = ns.exec(&[
        "busctl",
        "call",
        "org.freedesktop.login1",
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager",
        "PowerOff",
        "b",
        "false",
    ]);
    assert!(out.trim().is_empty(), "PowerOff: {out}");
    let n = node
        .wait_for("the node NotReady for the shutdown", Duration::from_secs(30), || async {
            let n = env.node_object().await?;
            let ready = n["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
            (ready["status"] == "False").then_some(ready)
        })
        .await;
    assert_eq!(n["reason"], "KubeletNotReady");
    assert!(n["message"].as_str().unwrap_or_default().contains("node is shutting down"), "{n}");
    // A pod that arrives now is refused.
    env.create(&env.pod_yaml("late", &[("app", SERVE)], "")).await;
    let late = node
        .wait_for("the late pod refused", Duration::from_secs(30), || async {
            env.pod("late").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(late["status"]["reason"], "NodeShutdown");
    assert_eq!(late["status"]["message"], "Pod was rejected: Pod was rejected as the node is shutting down.");

    let mut stopped = vec![];
    for name in ["web", "stubborn", "agent"] {
        let p = node
            .wait_for(&format!("pod {name} stopped for the shutdown"), Duration::from_secs(30), || async {
                env.pod(name).await.filter(|p| p["status"]["phase"] == "Failed" && !finished_at(p).is_empty())
            })
            .await;
        assert_eq!(p["status"]["reason"], "Terminated", "{name}: {}", p["status"]);
        assert_eq!(p["status"]["message"], "Pod was terminated in response to imminent node shutdown.");
        let dt =
            p["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "DisruptionTarget").cloned();
        assert_eq!(dt.as_ref().map(|c| c["reason"].clone()), Some(Value::from("TerminationByKubelet")), "{name}");
        stopped.push(finished_at(&p));
    }
    let last_stopped = t0.elapsed();
    assert!(stopped[0] <= stopped[2] && stopped[1] <= stopped[2], "the critical pod last: {stopped:?}");
    // Released, then taken again once logind announces the end of its (stand-in) power-off.
    let log_path = node.log_path();
    node.wait_for("the inhibitor lock released", Duration::from_secs(30), || async {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        log.contains("Shutdown manager completed processing shutdown event").then_some(())
    })
    .await;
    let log = node.log();
    let grace = |pod: &str| {
        let line = log.lines().find(|l| l.contains("killing pod with gracePeriod") && l.contains(&format!("/{pod}")));
        line.and_then(|l| l.split("gracePeriod=").nth(1)).map(|g| g.split_whitespace().next().unwrap_or("").to_string())
    };
    assert_eq!(grace("web").as_deref(), Some("2"), "its own shorter grace period");
    assert_eq!(grace("stubborn").as_deref(), Some("5"), "the budget of priority 0: 8 s less the critical 3 s");
    assert_eq!(grace("agent").as_deref(), Some("2"));
    println!("e2e_shutdown: PrepareForShutdown to the last pod stopped in the apiserver: {last_stopped:?}");
    let metrics = http_get(read_only_port(), "/metrics").await.map(|(_, b)| b).unwrap_or_default();
    assert!(metrics.contains("kubelet_graceful_shutdown_start_time_seconds "), "{}", tail(&metrics, 20));
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(node.root.join("graceful_node_shutdown_state")).unwrap())
            .unwrap();
    assert!(state["endTime"].as_str().unwrap() > state["startTime"].as_str().unwrap(), "{state}");
    node.kill9();
}
