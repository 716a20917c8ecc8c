//! End to end: critical pod preemption at admission, rkubelet a node of the real cluster (the real kube-apiserver
//! and controller-manager, the real containerd, the real `kubectl`).
//!
//! The node's allocatable cpu is made one core (`kubeReserved` takes the rest). Pods from the apiserver fill it;
//! a static pod with `priorityClassName: system-node-critical` that does not fit then preempts the Burstable pod
//! whose request makes room (`Failed`, `Preempting`, upstream's message, the `DisruptionTarget` condition and a
//! `Preempting` event), not the BestEffort one, and runs; `kubelet_preemptions` counts it under `cpu`. A static
//! pod that no preemption can fit is refused with upstream's `UnexpectedAdmissionError`.

mod common;

use std::time::Duration;

use common::cluster::TestEnv;
use common::*;
use serde_json::Value;

/// A static pod of the test's namespace asking `cpu`, critical by its priority class (and as any static pod).
fn critical_manifest(env: &TestEnv, name: &str, cpu: &str) -> String {
    manifest(
        name,
        &[],
        &[("app", SERVE)],
        "  priorityClassName: system-node-critical\n  terminationGracePeriodSeconds: 2\n",
    )
    .replace("metadata:\n", &format!("metadata:\n  namespace: {}\n", env.ns))
        + &format!("    resources:\n      requests:\n        cpu: {cpu}\n")
}

async fn wait_phase(env: &TestEnv, node: &mut Node, name: &str, phase: &str) -> Value {
    node.wait_for(&format!("pod {name} {phase} in the apiserver"), Duration::from_secs(90), || async {
        env.pod(name).await.filter(|p| p["status"]["phase"] == phase)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_critical_pod_that_does_not_fit_preempts_a_burstable_pod_and_runs() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let reserve = format!("kubeReserved:\n  cpu: {}m\n", (cores - 1) * 1000);
    let mut node = env.start_node_with(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap() + if cores > 1 { reserve.as_str() } else { "" },
        vec![],
    );
    let n = env.wait_node_ready(&mut node).await;
    assert_eq!(n["status"]["allocatable"]["cpu"], "1", "{}", n["status"]);

    // From the apiserver: a BestEffort pod and a Burstable one asking 600m.
    env.create(&env.pod_yaml("idle", &[("app", SERVE)], "")).await;
    let burstable = env.pod_yaml("web", &[("app", SERVE)], "") + "    resources:\n      requests:\n        cpu: 600m\n";
    env.create(&burstable).await;
    env.wait_pod_running(&mut node, "idle").await;
    env.wait_pod_running(&mut node, "web").await;

    // A static critical pod asking 500m lacks 100m: the Burstable pod makes room, the BestEffort one frees no cpu.
    node.write_manifest("agent.yaml", &critical_manifest(&env, "agent", "500m"));
    let web = wait_phase(&env, &mut node, "web", "Failed").await;
    assert_eq!(web["status"]["reason"], "Preempting", "{}", web["status"]);
    assert_eq!(web["status"]["message"], "Preempted in order to admit critical pod");
    let conditions = web["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let dt = conditions.iter().find(|c| c["type"] == "DisruptionTarget").expect("a DisruptionTarget condition");
    assert_eq!((dt["status"].as_str(), dt["reason"].as_str()), (Some("True"), Some("TerminationByKubelet")));
    assert_eq!(dt["message"], "Pod was preempted by Kubelet to accommodate a critical pod.");
    let events = env.get(&["events", "--field-selector", "involvedObject.name=web,reason=Preempting"]).await.unwrap();
    let e = &events["items"][0];
    assert_eq!(
        (e["type"].as_str(), e["message"].as_str()),
        (Some("Warning"), Some("Preempted in order to admit critical pod"))
    );
    let agent = format!("agent-{}", env.node);
    env.wait_pod_running(&mut node, &agent).await;
    let idle = env.pod("idle").await.unwrap();
    assert_eq!(idle["status"]["phase"], "Running", "the BestEffort pod stays");
    assert_eq!(container_status(&idle, "app").unwrap()["restartCount"], 0);
    assert!(sandboxes_of(&rt, "web").await.iter().all(|s| s.state != 0), "the preempted pod's sandbox is stopped");
    let metrics = http_get(read_only_port(), "/metrics").await.map(|(_, b)| b).unwrap_or_default();
    assert!(metrics.contains("kubelet_preemptions{preemption_signal=\"cpu\"} 1"), "{}", tail(&metrics, 30));

    // A static critical pod asking 2 cpus: even every pod it may preempt would not free enough.
    node.write_manifest("huge.yaml", &critical_manifest(&env, "huge", "2"));
    let huge = wait_phase(&env, &mut node, &format!("huge-{}", env.node), "Failed").await;
    assert_eq!(huge["status"]["reason"], "UnexpectedAdmissionError", "{}", huge["status"]);
    assert_eq!(
        huge["status"]["message"],
        "Pod was rejected: Unexpected error while attempting to recover from admission failure: preemption: error \
         finding a set of pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1500), ]"
    );
    assert!(env.pod(&agent).await.is_some_and(|p| all_running(&p)), "the admitted critical pod keeps running");
    assert!(env.pod("idle").await.is_some_and(|p| all_running(&p)));
    node.stop_and_clean(&rt).await;
}
