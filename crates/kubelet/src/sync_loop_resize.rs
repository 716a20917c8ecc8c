//! The sync loop's decisions on in-place resizes (`allocation_manager.go` handlePodResourcesResize, canResizePod,
//! retryPendingResizes, PushPendingResize, sortPendingResizes, isResizeIncreasingRequests; the resize parts of
//! `kubelet.go` HandlePodAdditions, HandlePodUpdates, HandlePodRemoves, HandlePodReconcile).
//!
//! A pod update that changes a resizable container's CPU or memory queues the pod; each retry (at once, when a pod
//! is removed or shrinks, and every 3 minutes, 30 s until every source was seen) decides every queued resize in
//! upstream's order: a resize that cannot be done is `Infeasible` (static pods, a Guaranteed pod's CPU under the
//! static CPU manager, more than the node's allocatable), one the other pods leave no room for is `Deferred` (the
//! admit handlers' message) and stays queued, and one that fits is allocated (checkpointed) and the pod synced, its
//! `PodResizeInProgress` condition set until the runtime has it.

use std::sync::Arc;
use std::time::Duration;

use kubelet_runtime::qos::pod_qos;
use kubelet_types::qos::QosClass;
use kubelet_types::resources::{PodResourcesOptions, pod_requests, resource_request};
use kubelet_types::{Pod, PodUid};
use tracing::{debug, error, info};

use super::SyncLoop;
use crate::pod_workers::UpdateType;
use crate::status::resize::{DEFERRED, INFEASIBLE};

/// The first retry of pending resizes while the sources are not all seen (`initialRetryDelay`).
pub(super) const INITIAL_RETRY_DELAY: Duration = Duration::from_secs(30);
/// The period of retries of pending resizes (`retryDelay`).
pub(super) const RETRY_DELAY: Duration = Duration::from_secs(180);

fn generation(pod: &Pod) -> i64 {
    pod.metadata.generation.unwrap_or(0)
}

fn cpu_and_memory(pod: &Pod) -> (f64, f64) {
    let r = pod_requests(pod, PodResourcesOptions::default());
    (r.get("cpu").copied().unwrap_or(0.0), r.get("memory").copied().unwrap_or(0.0))
}

impl SyncLoop {
    /// Queues a pod whose resize waits (`PushPendingResize`).
    pub(super) fn push_pending_resize(&mut self, uid: PodUid) {
        if !self.pending_resizes.contains(&uid) {
            self.pending_resizes.push(uid);
            self.sort_pending_resizes();
        }
    }

    /// Whether the pod's resize asks for more CPU or memory than allocated (`isResizeIncreasingRequests`).
    fn resize_increases_requests(&self, pod: &Arc<Pod>) -> bool {
        let (allocated, differs) = self.deps.allocations.allocated_pod(pod);
        if !differs {
            return false;
        }
        let ((cpu, mem), (old_cpu, old_mem)) = (cpu_and_memory(pod), cpu_and_memory(&allocated));
        mem > old_mem || cpu > old_cpu
    }

    /// Orders the queue (`sortPendingResizes`): resizes that do not increase requests first, then by priority, then
    /// Guaranteed before the rest, then the longest pending first.
    fn sort_pending_resizes(&mut self) {
        let mut pods: Vec<Arc<Pod>> =
            self.pending_resizes.iter().filter_map(|uid| self.pods.get(uid).cloned()).collect();
        let key = |p: &Arc<Pod>| {
            let uid = kubelet_types::pod_update::pod_uid(p);
            let since = self
                .deps
                .status
                .resize()
                .get(&uid)
                .into_iter()
                .find(|c| c.type_ == crate::status::resize::PENDING)
                .and_then(|c| c.last_transition_time.map(|t| t.0));
            (
                self.resize_increases_requests(p),
                std::cmp::Reverse(kubelet_types::qos::pod_priority(p)),
                pod_qos(p) != QosClass::Guaranteed,
                since.is_none(),
                since,
            )
        };
        pods.sort_by_cached_key(key);
        self.pending_resizes = pods.iter().map(|p| kubelet_types::pod_update::pod_uid(p)).collect();
    }

    /// Decides every queued resize (`retryPendingResizes`); `trigger` labels the accepted deferred ones.
    pub(super) async fn retry_pending_resizes(&mut self, trigger: &str) {
        if !self.deps.sources_ready.all_ready() {
            debug!("skipping evaluation of pending resizes; sources are not ready");
            self.resize_retry_at = tokio::time::Instant::now() + INITIAL_RETRY_DELAY;
            return;
        }
        self.resize_retry_at = tokio::time::Instant::now() + RETRY_DELAY;
        let mut still = vec![];
        for uid in std::mem::take(&mut self.pending_resizes) {
            let Some(pod) = self.pods.get(&uid).cloned() else {
                debug!(podUID = %uid, "pod not found; removing from pending resizes");
                continue;
            };
            let conditions = self.deps.status.resize();
            let (before, was_deferred) = (conditions.get(&uid), conditions.is_deferred(&uid));
            let allocated = match self.handle_pod_resources_resize(&pod).await {
                Err(e) => {
                    error!(pod = %kubelet_types::pod_update::pod_ref(&pod), error = %e, "failed to handle pod resources resize");
                    still.push(uid.clone());
                    false
                }
                Ok(allocated) => {
                    let conditions = self.deps.status.resize();
                    if conditions.is_deferred(&uid) {
                        debug!(pod = %kubelet_types::pod_update::pod_ref(&pod), "pod resize is deferred; will reevaluate later");
                        still.push(uid.clone());
                    } else if allocated {
                        info!(pod = %kubelet_types::pod_update::pod_ref(&pod), podUID = %uid, trigger, "pod resize allocated");
                        if was_deferred {
                            kubelet_metrics::kubelet::POD_DEFERRED_ACCEPTED_RESIZES.inc(&[trigger]);
                        }
                    }
                    allocated
                }
            };
            if allocated || self.deps.status.resize().get(&uid) != before {
                self.dispatch(UpdateType::Sync, &pod, false);
            }
        }
        self.pending_resizes = still;
    }

    /// Decides one pod's resize (`handlePodResourcesResize`): whether it was allocated.
    async fn handle_pod_resources_resize(&mut self, pod: &Arc<Pod>) -> Result<bool, String> {
        let uid = kubelet_types::pod_update::pod_uid(pod);
        let conditions = self.deps.status.resize();
        if !self.deps.allocations.allocated_pod(pod).1 {
            conditions.clear_pending(&uid);
            return Ok(false);
        }
        if let Err((message, reason)) = kubelet_runtime::resize::resize_allowed(pod) {
            kubelet_metrics::kubelet::POD_INFEASIBLE_RESIZES.inc(&[reason]);
            conditions.set_pending(&uid, INFEASIBLE, message, generation(pod));
            return Ok(false);
        }
        match self.can_resize_pod(pod).await {
            Ok(()) => {
                self.deps.allocations.set_allocated(pod)?;
                let conditions = self.deps.status.resize();
                conditions.clear_pending(&uid);
                conditions.clear_in_progress(&uid);
                conditions.set_in_progress(&uid, "", "", generation(pod));
                Ok(true)
            }
            Err((reason, message)) => {
                info!(pod = %kubelet_types::pod_update::pod_ref(pod), podUID = %uid, reason, message = %message, "resize cannot be accommodated");
                self.deps.status.resize().set_pending(&uid, reason, &message, generation(pod));
                Ok(false)
            }
        }
    }

    /// Whether the resize fits now (`canResizePod`): Err with `Infeasible` or `Deferred` and the message.
    async fn can_resize_pod(&mut self, pod: &Arc<Pod>) -> Result<(), (&'static str, String)> {
        let facts = self.deps.resize_facts;
        if pod_qos(pod) == QosClass::Guaranteed && facts.static_cpu_policy && self.guaranteed_changes(pod, "cpu") {
            kubelet_metrics::kubelet::POD_INFEASIBLE_RESIZES.inc(&["guaranteed_pod_cpu_manager_static_policy"]);
            return Err((
                INFEASIBLE,
                "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\"".into(),
            ));
        }
        if pod_qos(pod) == QosClass::Guaranteed && facts.static_memory_policy && self.guaranteed_changes(pod, "memory")
        {
            kubelet_metrics::kubelet::POD_INFEASIBLE_RESIZES.inc(&["guaranteed_pod_memory_manager_static_policy"]);
            return Err((
                INFEASIBLE,
                "Resize is infeasible for Guaranteed Pods alongside Memory Manager policy \"Static\"".into(),
            ));
        }
        let cpu = kubelet_types::qos::milli_value(resource_request(pod, "cpu"));
        let memory = kubelet_types::qos::int_value(resource_request(pod, "memory"));
        let message = if memory > facts.allocatable_memory {
            Some(format!("memory, requested: {memory}, capacity: {}", facts.allocatable_memory))
        } else if cpu > facts.allocatable_cpu_milli {
            Some(format!("cpu, requested: {cpu}, capacity: {}", facts.allocatable_cpu_milli))
        } else {
            None
        };
        if let Some(m) = message {
            kubelet_metrics::kubelet::POD_INFEASIBLE_RESIZES.inc(&["insufficient_node_allocatable"]);
            return Err((INFEASIBLE, format!("Node didn't have enough capacity: {m}")));
        }
        let uid = kubelet_types::pod_update::pod_uid(pod);
        let others = self.admitted_pods(&uid);
        match self.check_admission(pod, &others).await {
            None => Ok(()),
            Some(r) => Err((DEFERRED, r.message)),
        }
    }

    /// Whether a resizable container of a Guaranteed pod asks for another request of `resource` than allocated
    /// (`guaranteedPodResourceResizeRequired`).
    fn guaranteed_changes(&self, pod: &Pod, resource: &str) -> bool {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        kubelet_runtime::resize::resizable_containers(pod).any(|(_, _, c)| {
            let amount = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
                let q = r.and_then(|r| r.requests.as_ref()).and_then(|l| l.get(resource));
                q.and_then(|q| kubelet_types::quantity::parse_quantity(&q.0)).unwrap_or(0.0)
            };
            amount(c.resources.as_ref()) != amount(self.deps.allocations.container(uid, &c.name).as_ref())
        })
    }

    /// A pod update from its source (`HandlePodUpdates`'s resize part): a changed resize is decided at once; one
    /// reverted to the allocation is no longer pending.
    pub(super) async fn resize_on_update(&mut self, old: Option<&Arc<Pod>>, new: &Arc<Pod>) {
        if !crate::allocation::record_resize_operations(old.map(|p| &**p), new) {
            return;
        }
        let uid = kubelet_types::pod_update::pod_uid(new);
        if self.deps.allocations.allocated_pod(new).1 {
            self.push_pending_resize(uid);
            self.retry_pending_resizes("pod_updated").await;
        } else {
            self.deps.status.resize().clear_pending(&uid);
        }
    }

    /// After a batch of new pods (`HandlePodAdditions`'s resize part): the resize conditions a restarted kubelet
    /// finds in the pods' statuses are taken over and the pods whose spec differs from their allocation queued.
    pub(super) async fn resize_after_additions(&mut self, pods: &[Arc<Pod>], differing: Vec<PodUid>) {
        self.deps.status.resize().backfill(pods);
        if differing.is_empty() {
            return;
        }
        for uid in differing {
            self.push_pending_resize(uid);
        }
        self.retry_pending_resizes("pods_added").await;
    }
}
