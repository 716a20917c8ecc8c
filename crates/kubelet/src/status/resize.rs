//! The pods' resize conditions (`status_manager.go` podResizeConditions: SetPodResizePendingCondition,
//! SetPodResizeInProgressCondition, Clear..., BackfillPodResizeConditions, IsPodResizeDeferred/Infeasible,
//! updatedPodResizeCondition and the pending and in-progress gauges).
//!
//! Written by the sync loop's allocation of resizes (`PodResizePending` with reason `Deferred` or `Infeasible`, and
//! `PodResizeInProgress` once a resize is allocated) and by the pod workers (`PodResizeInProgress` cleared when the
//! runtime has what was allocated, or given reason `Error` when actuating failed); read by the pod workers into the
//! status they generate. A condition keeps its `lastTransitionTime` while its reason stays; an in-progress condition
//! keeps its `observedGeneration` until cleared, as upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::PodCondition;
use kubelet_types::clock::api_time;
use kubelet_types::{Clock, Pod, PodUid};

/// `v1.PodResizePending`.
pub const PENDING: &str = "PodResizePending";
/// `v1.PodResizeInProgress`.
pub const IN_PROGRESS: &str = "PodResizeInProgress";
/// `v1.PodReasonDeferred`.
pub const DEFERRED: &str = "Deferred";
/// `v1.PodReasonInfeasible`.
pub const INFEASIBLE: &str = "Infeasible";
/// `v1.PodReasonError`.
pub const ERROR: &str = "Error";

#[derive(Debug, Default, Clone)]
struct Conditions {
    pending: Option<PodCondition>,
    in_progress: Option<PodCondition>,
}

/// The resize conditions of every pod.
pub struct ResizeConditions {
    pods: Mutex<HashMap<PodUid, Conditions>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ResizeConditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResizeConditions").finish_non_exhaustive()
    }
}

impl ResizeConditions {
    /// No conditions.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { pods: Mutex::default(), clock }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PodUid, Conditions>> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `updatedPodResizeCondition`.
    fn updated(
        &self,
        kind: &str,
        old: Option<&PodCondition>,
        reason: &str,
        message: &str,
        generation: i64,
    ) -> PodCondition {
        let now = api_time(self.clock.now());
        let transition = match old {
            Some(o) if o.reason.as_deref().unwrap_or("") == reason => o.last_transition_time.clone(),
            _ => Some(now.clone()),
        };
        PodCondition {
            type_: kind.into(),
            status: "True".into(),
            last_probe_time: Some(now),
            last_transition_time: transition,
            observed_generation: (generation != 0).then_some(generation),
            reason: (!reason.is_empty()).then(|| reason.to_string()),
            message: (!message.is_empty()).then(|| message.to_string()),
        }
    }

    /// The pod's conditions, pending first (`GetPodResizeConditions`).
    pub fn get(&self, uid: &PodUid) -> Vec<PodCondition> {
        let pods = self.lock();
        let Some(c) = pods.get(uid) else { return vec![] };
        c.pending.iter().chain(c.in_progress.iter()).cloned().collect()
    }

    /// `SetPodResizePendingCondition`.
    pub fn set_pending(&self, uid: &PodUid, reason: &str, message: &str, generation: i64) {
        let mut pods = self.lock();
        let c = pods.entry(uid.clone()).or_default();
        c.pending = Some(self.updated(PENDING, c.pending.as_ref(), reason, message, generation));
        record(&pods);
    }

    /// `SetPodResizeInProgressCondition`: an existing condition keeps its generation, and its reason and message
    /// unless new ones are given.
    pub fn set_in_progress(&self, uid: &PodUid, reason: &str, message: &str, generation: i64) {
        let mut pods = self.lock();
        let c = pods.entry(uid.clone()).or_default();
        let (mut reason, mut message, mut generation) = (reason.to_string(), message.to_string(), generation);
        if let Some(old) = &c.in_progress {
            if reason.is_empty() && message.is_empty() {
                reason = old.reason.clone().unwrap_or_default();
                message = old.message.clone().unwrap_or_default();
            }
            generation = old.observed_generation.unwrap_or(0);
        }
        c.in_progress = Some(self.updated(IN_PROGRESS, c.in_progress.as_ref(), &reason, &message, generation));
        record(&pods);
    }

    /// `ClearPodResizePendingCondition`.
    pub fn clear_pending(&self, uid: &PodUid) {
        let mut pods = self.lock();
        if let Some(c) = pods.get_mut(uid)
            && c.pending.take().is_some()
        {
            record(&pods);
        }
    }

    /// `ClearPodResizeInProgressCondition`: whether there was one.
    pub fn clear_in_progress(&self, uid: &PodUid) -> bool {
        let mut pods = self.lock();
        let cleared = pods.get_mut(uid).is_some_and(|c| c.in_progress.take().is_some());
        if cleared {
            record(&pods);
        }
        cleared
    }

    /// Whether the pod's resize waits for room (`IsPodResizeDeferred`).
    pub fn is_deferred(&self, uid: &PodUid) -> bool {
        self.pending_reason(uid).as_deref() == Some(DEFERRED)
    }

    /// Whether the pod's resize cannot be done (`IsPodResizeInfeasible`).
    pub fn is_infeasible(&self, uid: &PodUid) -> bool {
        self.pending_reason(uid).as_deref() == Some(INFEASIBLE)
    }

    fn pending_reason(&self, uid: &PodUid) -> Option<String> {
        self.lock().get(uid)?.pending.as_ref()?.reason.clone()
    }

    /// Takes the conditions a restarted kubelet finds in the pods' API statuses (`BackfillPodResizeConditions`).
    pub fn backfill(&self, pods: &[Arc<Pod>]) {
        let mut map = self.lock();
        for pod in pods {
            let uid = kubelet_types::pod_update::pod_uid(pod);
            for c in pod.status.iter().flat_map(|s| s.conditions.iter().flatten()) {
                let (reason, message) = (c.reason.as_deref().unwrap_or(""), c.message.as_deref().unwrap_or(""));
                let generation = c.observed_generation.unwrap_or(0);
                match c.type_.as_str() {
                    PENDING => {
                        let new = self.updated(PENDING, None, reason, message, generation);
                        map.entry(uid.clone()).or_default().pending = Some(new);
                    }
                    IN_PROGRESS => {
                        let new = self.updated(IN_PROGRESS, None, reason, message, generation);
                        map.entry(uid.clone()).or_default().in_progress = Some(new);
                    }
                    _ => {}
                }
            }
        }
        record(&map);
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &PodUid) {
        let mut pods = self.lock();
        if pods.remove(uid).is_some() {
            record(&pods);
        }
    }
}

/// `recordPendingResizeCount`, `recordInProgressResizeCount`.
fn record(pods: &HashMap<PodUid, Conditions>) {
    let mut pending: HashMap<String, usize> = HashMap::new();
    let mut in_progress = 0;
    for c in pods.values() {
        if let Some(p) = &c.pending {
            *pending.entry(p.reason.clone().unwrap_or_default().to_lowercase()).or_default() += 1;
        }
        in_progress += usize::from(c.in_progress.is_some());
    }
    let gauge = &kubelet_metrics::kubelet::POD_PENDING_RESIZES;
    gauge.reset();
    for (reason, n) in pending {
        gauge.set(&[&reason], n as f64);
    }
    kubelet_metrics::kubelet::POD_IN_PROGRESS_RESIZES.set(&[], in_progress as f64);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_types::clock::TestClock;

    #[tokio::test(start_paused = true)]
    async fn reasons_keep_their_transition_time_and_in_progress_keeps_its_generation_until_cleared() {
        let r = ResizeConditions::new(Arc::new(TestClock::fixed()));
        let uid = PodUid::from("u1".to_string());
        r.set_pending(&uid, DEFERRED, "Node didn't have enough resource: cpu", 2);
        let first = r.get(&uid)[0].last_transition_time.clone();
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        r.set_pending(&uid, DEFERRED, "Node didn't have enough resource: memory", 3);
        let c = &r.get(&uid)[0];
        assert_eq!((c.last_transition_time.clone(), c.observed_generation), (first.clone(), Some(3)));
        assert!(r.is_deferred(&uid) && !r.is_infeasible(&uid));
        r.set_pending(&uid, INFEASIBLE, "x", 3);
        assert_ne!(r.get(&uid)[0].last_transition_time, first, "a new reason is a transition");
        r.clear_pending(&uid);
        r.set_in_progress(&uid, "", "", 4);
        r.set_in_progress(&uid, ERROR, "boom", 5);
        let c = &r.get(&uid)[0];
        assert_eq!((c.type_.as_str(), c.reason.as_deref(), c.observed_generation), (IN_PROGRESS, Some(ERROR), Some(4)));
        r.set_in_progress(&uid, "", "", 6);
        assert_eq!(r.get(&uid)[0].message.as_deref(), Some("boom"), "kept without a new reason");
        assert!(r.clear_in_progress(&uid));
        assert!(!r.clear_in_progress(&uid));
        assert!(r.get(&uid).is_empty());
    }
}
