//! Critical pod preemption at admission (`pkg/kubelet/preemption/preemption.go` CriticalPodAdmissionHandler, as
//! `pkg/kubelet/lifecycle/predicate.go` calls it for the InsufficientResource failures of a critical pod).
//!
//! Contract: the sync loop asks [`CriticalPodPreemption::plan`] about each new pod every admit handler admitted.
//! A critical pod (static, mirror, system-critical priority) that does not fit only for lack of resources — the
//! predicate handler leaves those failures to this module — gets upstream's minimal set of pods to stop
//! (getPodsToPreempt: the pods it may preempt, besteffort first, then burstable, then guaranteed, each class by
//! "distance" to what is missing), or is refused with upstream's `UnexpectedAdmissionError` when no such set
//! exists. [`CriticalPodPreemption::preempt`] then stops them one after the other through the eviction path (a
//! [`PodKiller`]): a `Preempting` event on each, its status `Failed` with reason `Preempting` and the
//! `DisruptionTarget` condition, `kubelet_preemptions{preemption_signal}` counted; the loop starts the critical pod
//! once they have stopped (or their stop failed, which upstream logs and passes over). Upstream's sync loop blocks
//! meanwhile; rkubelet's holds back only the critical pod.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kubelet_eviction::{EvictionStatus, PodKiller};
use kubelet_types::Pod;
use kubelet_types::events::{Recorder, WARNING, pod_reference};
use kubelet_types::pod_update::pod_ref;
use kubelet_types::qos::{QosClass, int_value, is_critical_pod, milli_value, pod_qos};
use tokio::sync::watch;
use tracing::{error, info};

use crate::admission::AdmitResult;

/// The status message and event text of a preempted pod.
pub const MESSAGE: &str = "Preempted in order to admit critical pod";
/// The status reason and event reason of a preempted pod (`events.PreemptContainer`).
pub const REASON: &str = "Preempting";
/// The message of a preempted pod's `DisruptionTarget` condition.
pub const DISRUPTION_MESSAGE: &str = "Pod was preempted by Kubelet to accommodate a critical pod.";
/// The reason of a critical pod for which no pods could be preempted (`lifecycle.UnexpectedAdmissionError`).
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

/// An amount of a resource still to be freed (`admissionRequirement`): millicores for cpu, the integer value
/// otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The resource (`cpu`, `memory`, `pods`, ...).
    pub resource: String,
    /// How much of it.
    pub quantity: i64,
}

/// What a critical pod lacks (`admissionRequirementList`), in the predicate's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements(pub Vec<Requirement>);

/// A pod's request of `resource` as preemption counts it (`resource.GetResourceRequest`): 1 for `pods`, millicores
/// for cpu, the integer value otherwise.
pub fn request(pod: &Pod, resource: &str) -> i64 {
    if resource == "pods" {
        return 1;
    }
    let v = kubelet_types::resources::resource_request(pod, resource);
    if resource == "cpu" { milli_value(v) } else { int_value(v) }
}

impl Requirements {
    /// `distance`: the sum over the requirements of the squared fraction the pod leaves unmet, so that each counts
    /// the same whatever its magnitude.
    pub fn distance(&self, pod: &Pod) -> f64 {
        self.0
            .iter()
            .map(|r| (r.quantity - request(pod, &r.resource), r.quantity))
            .filter(|(remaining, _)| *remaining > 0)
            .map(|(remaining, quantity)| (remaining as f64 / quantity as f64).powi(2))
            .sum()
    }

    /// `subtract`: what would remain to be freed once `pods` are stopped.
    pub fn subtract(&self, pods: &[&Arc<Pod>]) -> Requirements {
        let remaining = self.0.iter().filter_map(|r| {
            let mut quantity = r.quantity;
            for p in pods {
                quantity -= request(p, &r.resource);
                if quantity <= 0 {
                    return None;
                }
            }
            Some(Requirement { resource: r.resource.clone(), quantity })
        });
        Requirements(remaining.collect())
    }

    /// Whether nothing remains to be freed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Upstream's `toString`: `[(res: cpu, q: 200), ]`.
impl std::fmt::Display for Requirements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for r in &self.0 {
            write!(f, "(res: {}, q: {}), ", r.resource, r.quantity)?;
        }
        f.write_str("]")
    }
}

/// `kubetypes.Preemptable`: a critical pod may preempt any pod that is not critical; otherwise only a pod of lower
/// priority, when both have one.
pub fn preemptable(preemptor: &Pod, preemptee: &Pod) -> bool {
    if is_critical_pod(preemptor) && !is_critical_pod(preemptee) {
        return true;
    }
    let priority = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority);
    matches!((priority(preemptor), priority(preemptee)), (Some(a), Some(b)) if a > b)
}

/// `smallerResourceRequest`: whether `a` requests less than `b`, memory first, then cpu (true when equal).
fn smaller_resource_request(a: &Pod, b: &Pod) -> bool {
    for resource in ["memory", "cpu"] {
        let (ra, rb) = (request(a, resource), request(b, resource));
        if ra != rb {
            return ra < rb;
        }
    }
    true
}

fn no_set(remaining: &Requirements) -> String {
    format!("no set of running pods found to reclaim resources: {remaining}")
}

/// `getPodsToPreemptByDistance`: repeatedly the pod closest to what remains (on a tie, the one with the smaller
/// request; later pods win ties), until nothing remains.
fn by_distance(mut pods: Vec<Arc<Pod>>, mut requirements: Requirements) -> Result<Vec<Arc<Pod>>, String> {
    let mut out = vec![];
    while !requirements.is_empty() {
        if pods.is_empty() {
            return Err(no_set(&requirements));
        }
        let mut best_distance = (requirements.0.len() + 1) as f64;
        let mut best = 0;
        for (i, pod) in pods.iter().enumerate() {
            let d = requirements.distance(pod);
            if d < best_distance || (d == best_distance && smaller_resource_request(pod, &pods[best])) {
                best_distance = d;
                best = i;
            }
        }
        requirements = requirements.subtract(&[&pods[best]]);
        // As upstream: the last pod takes the chosen one's place.
        out.push(pods.swap_remove(best));
    }
    Ok(out)
}

/// `getPodsToPreempt`: the pods to stop so that `preemptor` fits, besteffort first, then burstable, then
/// guaranteed, each class as few and as small as it can be given that the classes below it are stopped whole;
/// an error naming what cannot be freed when even all of them would not do.
pub fn pods_to_preempt(
    preemptor: &Pod,
    pods: &[Arc<Pod>],
    requirements: &Requirements,
) -> Result<Vec<Arc<Pod>>, String> {
    let (mut best_effort, mut burstable, mut guaranteed) = (vec![], vec![], vec![]);
    for p in pods.iter().filter(|p| preemptable(preemptor, p)) {
        match pod_qos(p) {
            QosClass::BestEffort => best_effort.push(p.clone()),
            QosClass::Burstable => burstable.push(p.clone()),
            QosClass::Guaranteed => guaranteed.push(p.clone()),
        }
    }
    let refs = |lists: &[&Vec<Arc<Pod>>]| -> Vec<Arc<Pod>> { lists.iter().flat_map(|l| l.iter().cloned()).collect() };
    let subtract = |pods: Vec<Arc<Pod>>| requirements.subtract(&pods.iter().collect::<Vec<_>>());
    let unable = subtract(refs(&[&best_effort, &burstable, &guaranteed]));
    if !unable.is_empty() {
        return Err(no_set(&unable));
    }
    let guaranteed_out = by_distance(guaranteed, subtract(refs(&[&best_effort, &burstable])))?;
    let burstable_out = by_distance(burstable, subtract(refs(&[&best_effort, &guaranteed_out])))?;
    let best_effort_out = by_distance(best_effort, subtract(refs(&[&burstable_out, &guaranteed_out])))?;
    Ok(refs(&[&best_effort_out, &burstable_out, &guaranteed_out]))
}

/// What admission does with a pod its handlers admitted.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Run it now: not critical, or it fits.
    Admit,
    /// Stop `victims` first (never empty), then run it.
    Preempt {
        /// The pods to stop, in order.
        victims: Vec<Arc<Pod>>,
        /// What the critical pod lacks (its first resource is the metric's `preemption_signal`).
        requirements: Requirements,
    },
    /// Refuse it: no set of pods would free enough.
    Refuse(AdmitResult),
}

/// The critical pod admission handler.
pub struct CriticalPodPreemption {
    node: watch::Receiver<Option<Node>>,
    killer: Arc<dyn PodKiller>,
    recorder: Arc<dyn Recorder>,
}

impl CriticalPodPreemption {
    /// A handler reading the Node (its allocatable) from `node`, stopping pods through `killer` and recording the
    /// `Preempting` events with `recorder`.
    pub fn new(node: watch::Receiver<Option<Node>>, killer: Arc<dyn PodKiller>, recorder: Arc<dyn Recorder>) -> Self {
        Self { node, killer, recorder }
    }

    /// What to do with `pod`, which every admit handler admitted, given the pods `others` already admitted
    /// (`HandleAdmissionFailure`, reached only when the predicates failed for resources alone).
    pub fn plan(&self, pod: &Pod, others: &[Arc<Pod>]) -> Plan {
        if !is_critical_pod(pod) {
            return Plan::Admit;
        }
        let Some(node) = self.node.borrow().clone() else { return Plan::Admit };
        let missing = crate::predicate::insufficient_resources(pod, others, &node);
        if missing.is_empty() {
            return Plan::Admit;
        }
        let requirements =
            Requirements(missing.into_iter().map(|(resource, quantity)| Requirement { resource, quantity }).collect());
        match pods_to_preempt(pod, others, &requirements) {
            Ok(victims) => Plan::Preempt { victims, requirements },
            Err(e) => Plan::Refuse(AdmitResult {
                reason: UNEXPECTED_ADMISSION_ERROR.into(),
                message: format!(
                    "Unexpected error while attempting to recover from admission failure: preemption: error \
                     finding a set of pods to preempt: {e}"
                ),
            }),
        }
    }

    /// Stops `victims` one after the other for `pod` (`evictPodsToFreeRequests`), each with its own grace period;
    /// returns once every stop has ended. A stop that fails is logged and passed over, as upstream does.
    pub async fn preempt(&self, pod: &Pod, victims: &[Arc<Pod>], requirements: &Requirements) {
        let signal = requirements.0.first().map(|r| r.resource.as_str()).unwrap_or("");
        for victim in victims {
            self.recorder.event(&pod_reference(victim), WARNING, REASON, MESSAGE.into());
            let uid = victim.metadata.uid.as_deref().unwrap_or_default();
            info!(pod = %pod_ref(victim), podUID = uid, insufficientResources = %requirements, requestingPod = %pod_ref(pod), "Preempting pod to free up resources");
            let grace = victim.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
            let status = EvictionStatus {
                reason: REASON.into(),
                message: MESSAGE.into(),
                disruption_message: Some(DISRUPTION_MESSAGE.into()),
            };
            if let Err(e) = self.killer.kill(victim, grace, status).await {
                error!(pod = %pod_ref(victim), error = %e, "Failed to evict pod");
                continue;
            }
            kubelet_metrics::kubelet::PREEMPTIONS.inc(&[signal]);
            info!(pod = %pod_ref(victim), "Pod evicted successfully");
        }
    }
}

#[cfg(test)]
#[path = "preemption_tests.rs"]
mod tests;
