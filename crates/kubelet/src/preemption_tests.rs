//! Upstream's cases of `pkg/kubelet/preemption/preemption_test.go`, and the handler's plan and kills.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Container, NodeStatus, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

const CRITICAL: i32 = kubelet_types::qos::SYSTEM_CRITICAL_PRIORITY;

fn list(items: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!items.is_empty()).then(|| items.iter().map(|(k, v)| (k.to_string(), Quantity(v.to_string()))).collect())
}

/// A pod of one container with `requests` and `limits` (upstream's getPodWithResources).
fn pod(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: format!("{name}-container"),
                resources: Some(ResourceRequirements {
                    requests: list(requests),
                    limits: list(limits),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            termination_grace_period_seconds: Some(7),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn with_priority(p: Arc<Pod>, priority: i32) -> Arc<Pod> {
    let mut p = (*p).clone();
    p.spec.as_mut().unwrap().priority = Some(priority);
    Arc::new(p)
}

const SMALL: &[(&str, &str)] = &[("cpu", "100m"), ("memory", "100Mi")];
const LARGE: &[(&str, &str)] = &[("cpu", "300m"), ("memory", "300Mi")];

/// Upstream's getTestPods.
struct Pods {
    best_effort: Arc<Pod>,
    burstable: Arc<Pod>,
    high_burstable: Arc<Pod>,
    guaranteed: Arc<Pod>,
    high_guaranteed: Arc<Pod>,
    cluster_critical: Arc<Pod>,
    node_critical: Arc<Pod>,
}

fn pods() -> Pods {
    Pods {
        best_effort: pod("bestEffort", &[], &[]),
        burstable: pod("burstable", SMALL, &[]),
        high_burstable: pod("high-request-burstable", LARGE, &[]),
        guaranteed: pod("guaranteed", SMALL, SMALL),
        high_guaranteed: pod("high-request-guaranteed", LARGE, LARGE),
        cluster_critical: with_priority(pod("cluster-critical", SMALL, &[]), CRITICAL),
        node_critical: with_priority(pod("node-critical", SMALL, &[]), CRITICAL + 100),
    }
}

/// Upstream's getAdmissionRequirementList: cpu in millicores, memory in MiB, pods.
fn reqs(cpu: i64, memory_mi: i64, pods: i64) -> Requirements {
    let all = [("cpu", cpu), ("memory", memory_mi << 20), ("pods", pods)];
    Requirements(
        all.iter()
            .filter(|(_, q)| *q > 0)
            .map(|(r, q)| Requirement { resource: r.to_string(), quantity: *q })
            .collect(),
    )
}

fn names(pods: &[Arc<Pod>]) -> Vec<String> {
    pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
}

#[test]
fn pods_to_preempt_as_upstream() {
    let p = pods();
    let cc = &p.cluster_critical;
    let all5 = || {
        vec![
            p.best_effort.clone(),
            p.burstable.clone(),
            p.high_burstable.clone(),
            p.guaranteed.clone(),
            p.high_guaranteed.clone(),
        ]
    };
    let ok = |preemptor: &Arc<Pod>, input: Vec<Arc<Pod>>, r: Requirements| {
        names(&pods_to_preempt(preemptor, &input, &r).unwrap_or_else(|e| panic!("{e}")))
    };
    assert!(ok(cc, vec![], reqs(0, 0, 0)).is_empty(), "no requirements");
    assert!(pods_to_preempt(cc, &[], &reqs(0, 0, 1)).is_err(), "no pods");
    assert_eq!(ok(cc, vec![p.burstable.clone()], reqs(100, 100, 1)), ["burstable"], "equal pods and requirements");
    let e = pods_to_preempt(cc, std::slice::from_ref(&p.burstable), &reqs(200, 200, 2)).unwrap_err();
    assert_eq!(
        e,
        "no set of running pods found to reclaim resources: [(res: cpu, q: 100), (res: memory, q: 104857600), \
         (res: pods, q: 1), ]",
        "higher requirements than pod requests"
    );
    assert_eq!(ok(cc, vec![p.burstable.clone(), p.best_effort.clone()], reqs(0, 0, 1)), ["bestEffort"]);
    assert_eq!(ok(cc, vec![p.burstable.clone(), p.guaranteed.clone()], reqs(0, 0, 1)), ["burstable"]);
    let three = |a: &Arc<Pod>, b: &Arc<Pod>| vec![p.best_effort.clone(), a.clone(), b.clone()];
    assert_eq!(
        ok(cc, three(&p.high_burstable, &p.burstable), reqs(100, 100, 0)),
        ["burstable"],
        "the lower request burstable when it meets the requirements"
    );
    assert_eq!(
        ok(cc, three(&p.burstable, &p.high_burstable), reqs(150, 150, 0)),
        ["high-request-burstable"],
        "the higher request burstable when the lower does not"
    );
    // Upstream compares these as sets; the closest pod comes first.
    assert_eq!(ok(cc, all5(), reqs(350, 350, 0)), ["high-request-burstable", "burstable"], "multiple pods");
    assert_eq!(
        ok(cc, all5(), reqs(0, 550, 0)),
        ["high-request-burstable", "high-request-guaranteed"],
        "guaranteed when it has to, and not the extra burstable"
    );
    assert_eq!(ok(&p.node_critical, vec![cc.clone()], reqs(100, 0, 0)), ["cluster-critical"]);
    assert!(pods_to_preempt(cc, std::slice::from_ref(&p.node_critical), &reqs(100, 0, 0)).is_err());
    // Besteffort pods free no memory: a critical pod short of memory cannot have them.
    assert!(pods_to_preempt(cc, std::slice::from_ref(&p.best_effort), &reqs(0, 1, 0)).is_err());
    // Critical pods (static ones too) are never preempted for a critical pod of no higher priority.
    assert!(pods_to_preempt(cc, std::slice::from_ref(cc), &reqs(0, 0, 1)).is_err());
}

#[test]
fn distance_subtract_and_tie_breaks_as_upstream() {
    let p = pods();
    assert_eq!(reqs(0, 0, 0).distance(&p.burstable), 0.0);
    assert_eq!(reqs(100, 100, 1).distance(&p.best_effort), 2.0, "no requests: cpu and memory fully unmet");
    assert_eq!(reqs(100, 100, 1).distance(&p.burstable), 0.0);
    assert_eq!(reqs(50, 50, 0).distance(&p.burstable), 0.0);
    assert_eq!(reqs(200, 200, 0).distance(&p.burstable), 0.5);

    assert_eq!(reqs(0, 0, 0).subtract(&[&p.burstable]), reqs(0, 0, 0));
    assert_eq!(reqs(100, 100, 1).subtract(&[&p.best_effort]), reqs(100, 100, 0));
    assert_eq!(reqs(100, 100, 1).subtract(&[&p.burstable]), reqs(0, 0, 0));
    assert_eq!(reqs(50, 50, 0).subtract(&[&p.burstable]), reqs(0, 0, 0));
    assert_eq!(reqs(200, 200, 1).subtract(&[&p.burstable]), reqs(100, 100, 0));
    assert_eq!(reqs(150, 0, 1).to_string(), "[(res: cpu, q: 150), (res: pods, q: 1), ]");

    let low_memory = pod("low-memory", &[("memory", "50Mi"), ("cpu", "100m")], &[]);
    let high_memory = pod("high-memory", &[("memory", "200Mi"), ("cpu", "100m")], &[]);
    let high_cpu = pod("high-cpu", &[("memory", "50Mi"), ("cpu", "200m")], &[]);
    assert!(!smaller_resource_request(&low_memory, &p.best_effort));
    assert!(smaller_resource_request(&low_memory, &high_memory));
    assert!(!smaller_resource_request(&high_memory, &high_cpu), "memory before cpu");
    assert!(smaller_resource_request(&low_memory, &low_memory), "equal requests: true");
    let storage = |n, q| pod(n, &[("storage", q)], &[]);
    assert!(smaller_resource_request(&storage("a", "300Mi"), &storage("b", "200Mi")), "only memory and cpu count");
}

#[test]
fn preemptable_as_upstream() {
    let p = pods();
    let mut static_pod = (*p.burstable).clone();
    static_pod.metadata.annotations = Some([("kubernetes.io/config.source".into(), "file".into())].into());
    assert!(preemptable(&static_pod, &p.guaranteed), "a static pod is critical");
    assert!(!preemptable(&static_pod, &p.cluster_critical));
    assert!(!preemptable(&p.guaranteed, &p.best_effort), "no priorities: nothing");
    let low = with_priority(p.best_effort.clone(), 10);
    assert!(preemptable(&with_priority(p.guaranteed.clone(), 11), &low), "a higher priority");
    assert!(!preemptable(&with_priority(p.guaranteed.clone(), 10), &low));
}

/// Kills as the workers would, recorded; those named in `fail` fail.
#[derive(Default)]
struct Killer {
    killed: Mutex<Vec<(String, i64, EvictionStatus)>>,
    fail: Vec<String>,
}

#[async_trait::async_trait]
impl PodKiller for Killer {
    async fn kill(&self, pod: &Arc<Pod>, grace: i64, status: EvictionStatus) -> Result<(), String> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if self.fail.contains(&name) {
            return Err(format!("timeout waiting to kill pod default/{name}"));
        }
        self.killed.lock().unwrap().push((name, grace, status));
        Ok(())
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<(String, String, String, String)>>);

impl Recorder for Events {
    fn event(&self, object: &k8s_openapi::api::core::v1::ObjectReference, kind: &str, reason: &str, message: String) {
        let name = object.name.clone().unwrap_or_default();
        self.0.lock().unwrap().push((name, kind.into(), reason.into(), message));
    }
}

fn node(cpu: &str, memory: &str) -> Node {
    let allocatable = [("cpu", cpu), ("memory", memory), ("pods", "110")];
    Node {
        metadata: ObjectMeta { name: Some("n".into()), ..Default::default() },
        status: Some(NodeStatus { allocatable: list(&allocatable), ..Default::default() }),
        ..Default::default()
    }
}

fn static_pod(name: &str, requests: &[(&str, &str)]) -> Arc<Pod> {
    let mut p = (*pod(name, requests, &[])).clone();
    p.metadata.annotations = Some([("kubernetes.io/config.source".into(), "file".into())].into());
    Arc::new(p)
}

#[tokio::test(start_paused = true)]
async fn a_critical_pod_preempts_the_fewest_smallest_pods_or_is_refused_as_upstream() {
    let (_tx, rx) = watch::channel(Some(node("1", "1Gi")));
    let killer = Arc::new(Killer { fail: vec!["doomed".into()], ..Default::default() });
    let events = Arc::new(Events::default());
    let h = CriticalPodPreemption::new(rx, killer.clone(), events.clone());
    let p = pods();
    let running = vec![p.best_effort.clone(), pod("web", &[("cpu", "600m")], &[]), p.guaranteed.clone()];

    // Not critical, or fitting: nothing to do here (the predicate handler refuses the first).
    assert_eq!(h.plan(&pod("big", &[("cpu", "900m")], &[]), &running), Plan::Admit);
    assert_eq!(h.plan(&static_pod("agent", &[("cpu", "300m")]), &running), Plan::Admit);

    // 700m used of 1: a static pod asking 500m lacks 200m; the burstable pod frees it, the guaranteed one stays.
    let agent = static_pod("agent", &[("cpu", "500m")]);
    let Plan::Preempt { victims, requirements } = h.plan(&agent, &running) else { panic!("a preemption") };
    assert_eq!(names(&victims), ["web"]);
    assert_eq!(requirements.to_string(), "[(res: cpu, q: 200), ]");
    let before = kubelet_metrics::kubelet::PREEMPTIONS.get(&["cpu"]);
    h.preempt(&agent, &victims, &requirements).await;
    let killed = killer.killed.lock().unwrap().clone();
    let status = EvictionStatus {
        reason: "Preempting".into(),
        message: "Preempted in order to admit critical pod".into(),
        disruption_message: Some("Pod was preempted by Kubelet to accommodate a critical pod.".into()),
    };
    assert_eq!(killed, [("web".to_string(), 7, status)], "the pod's own grace period, upstream's status");
    let want = ("web".into(), "Warning".into(), "Preempting".into(), "Preempted in order to admit critical pod".into());
    assert_eq!(events.0.lock().unwrap().clone(), [want]);
    assert_eq!(kubelet_metrics::kubelet::PREEMPTIONS.get(&["cpu"]), before + 1.0);

    // A stop that fails is passed over and not counted; the next victim is still stopped.
    let doomed = pod("doomed", &[("cpu", "400m")], &[]);
    let two = vec![doomed.clone(), pod("other", &[("cpu", "400m")], &[])];
    let before = kubelet_metrics::kubelet::PREEMPTIONS.get(&["cpu"]);
    h.preempt(&agent, &two, &requirements).await;
    assert_eq!(killer.killed.lock().unwrap().last().unwrap().0, "other");
    assert_eq!(kubelet_metrics::kubelet::PREEMPTIONS.get(&["cpu"]), before + 1.0);
    assert_eq!(events.0.lock().unwrap().len(), 3, "both were told");

    // More than all the pods it may preempt would free: refused with upstream's reason and message.
    let huge = static_pod("huge", &[("cpu", "2")]);
    let Plan::Refuse(r) = h.plan(&huge, &running) else { panic!("a refusal") };
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert_eq!(
        r.message,
        "Unexpected error while attempting to recover from admission failure: preemption: error finding a set of \
         pods to preempt: no set of running pods found to reclaim resources: [(res: cpu, q: 1000), ]"
    );
}
