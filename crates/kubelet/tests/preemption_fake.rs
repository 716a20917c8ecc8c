//! Critical pod preemption through the whole core — PodConfig updates → sync loop admission → pod workers →
//! runtime manager — on the in-memory runtime and tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, ObjectReference, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::fake_node::{FakeNode, FakeNodeOptions};
use kubelet::status::StatusManager;
use kubelet_config::podconfig::SourcesReady;
use kubelet_types::events::Recorder;
use kubelet_types::{Operation, PodSource, PodUid, PodUpdate};

fn quantities(items: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    items.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect()
}

/// A pod of one container asking `cpu` (none: BestEffort), from `source`.
fn pod(name: &str, source: &str, cpu: Option<&str>) -> Arc<Pod> {
    let resources =
        cpu.map(|c| ResourceRequirements { requests: Some(quantities(&[("cpu", c)])), ..Default::default() });
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(name.into()),
            annotations: Some([("kubernetes.io/config.source".to_string(), source.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("busybox:1".into()),
                resources,
                ..Default::default()
            }],
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[derive(Default)]
struct Events(Mutex<Vec<(String, String, String, String)>>);

impl Recorder for Events {
    fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String) {
        let name = object.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push((name, kind.into(), reason.into(), message));
    }
}

async fn wait_phase(status: &StatusManager, uid: &str, phase: &str) {
    let mut rx = status.subscribe();
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if status.get(&PodUid::from(uid)).is_some_and(|s| s.phase.as_deref() == Some(phase)) {
                return;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("pod {uid} never reached {phase}"));
}

fn add(source: PodSource, pods: Vec<Arc<Pod>>) -> PodUpdate {
    PodUpdate { op: Operation::Add, source, pods }
}

#[tokio::test(start_paused = true)]
async fn a_static_pod_that_does_not_fit_preempts_a_burstable_pod_then_runs_and_one_that_never_fits_is_refused() {
    let (fake, clock) = kubelet::fake_node::fake_runtime_on_test_clock(&["busybox:1"]);
    let dir = tempfile::tempdir().unwrap();
    let ready = SourcesReady::new([PodSource::File, PodSource::Api]);
    let events = Arc::new(Events::default());
    let node = Node {
        metadata: ObjectMeta { name: Some("fake-node".into()), ..Default::default() },
        status: Some(NodeStatus {
            allocatable: Some(quantities(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "110")])),
            ..Default::default()
        }),
        ..Default::default()
    };
    let opts = FakeNodeOptions { node: Some(node), recorder: Some(events.clone()) };
    let n = FakeNode::start_with(fake.clone(), clock, dir.path(), ready, opts);
    let status = n.status.clone();

    // From the apiserver: a BestEffort pod and a Burstable one asking 600m of the node's 1 cpu.
    let pods = vec![pod("idle", "api", None), pod("web", "api", Some("600m"))];
    n.updates.send(add(PodSource::Api, pods)).await.unwrap();
    wait_phase(&status, "idle", "Running").await;
    wait_phase(&status, "web", "Running").await;
    fake.clear_calls();

    // A static pod (critical) asking 500m lacks 100m: the Burstable pod is preempted, the BestEffort one (which
    // frees no cpu) stays, and the static pod starts only once the preempted pod has stopped.
    n.updates.send(add(PodSource::File, vec![pod("agent", "file", Some("500m"))])).await.unwrap();
    wait_phase(&status, "web", "Failed").await;
    let web = status.get(&PodUid::from("web")).unwrap();
    assert_eq!(web.reason.as_deref(), Some("Preempting"));
    assert_eq!(web.message.as_deref(), Some("Preempted in order to admit critical pod"));
    let dt = web.conditions.iter().flatten().find(|c| c.type_ == "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!((dt.status.as_str(), dt.reason.as_deref()), ("True", Some("TerminationByKubelet")));
    assert_eq!(dt.message.as_deref(), Some("Pod was preempted by Kubelet to accommodate a critical pod."));
    wait_phase(&status, "agent", "Running").await;
    assert_eq!(status.get(&PodUid::from("idle")).unwrap().phase.as_deref(), Some("Running"));
    let calls = fake.calls();
    let stopped = calls.iter().position(|c| *c == "StopPodSandbox").expect("the preempted pod's sandbox stopped");
    let started = calls.iter().position(|c| *c == "RunPodSandbox").expect("the static pod's sandbox started");
    assert!(stopped < started, "the critical pod waited for the preempted one: {calls:?}");
    let preempting: Vec<_> = events.0.lock().unwrap().iter().filter(|e| e.2 == "Preempting").cloned().collect();
    let want = ("web".into(), "Warning".into(), "Preempting".into(), "Preempted in order to admit critical pod".into());
    assert_eq!(preempting, [want]);

    // A static pod asking 2 cpus: even the BestEffort pod would not free enough (and static pods are never
    // preempted for another), so it is refused with upstream's reason.
    n.updates.send(add(PodSource::File, vec![pod("huge", "file", Some("2"))])).await.unwrap();
    wait_phase(&status, "huge", "Failed").await;
    let huge = status.get(&PodUid::from("huge")).unwrap();
    assert_eq!(huge.reason.as_deref(), Some("UnexpectedAdmissionError"));
    assert_eq!(
        huge.message.as_deref(),
        Some(
            "Pod was rejected: Unexpected error while attempting to recover from admission failure: preemption: \
             error finding a set of pods to preempt: no set of running pods found to reclaim resources: \
             [(res: cpu, q: 1500), ]"
        )
    );
    assert_eq!(status.get(&PodUid::from("agent")).unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(status.get(&PodUid::from("idle")).unwrap().phase.as_deref(), Some("Running"));
    n.stop().await;
}
