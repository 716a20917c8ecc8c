//! The resources the kubelet allocated to each pod (`pkg/kubelet/allocation/allocation_manager.go`: the allocated
//! state, UpdatePodFromAllocation, SetAllocatedResources, RemovePod; `kubelet.go` recordContainerResizeOperations;
//! `pkg/kubelet/events/resize.go` PodResizeCompletedMsg).
//!
//! In-place pod resize (InPlacePodVerticalScaling, on by default in v1.35): a pod's spec may ask for other CPU and
//! memory while it runs; the kubelet runs it with what it *allocated* (checkpointed in `allocated_pods_state`, in
//! upstream's format) until it admits the change. Owned by the sync loop, which records the allocation of each pod it
//! admits, gives the pod workers the allocated pod, and decides on resizes ([`crate::sync_loop`]'s resize module);
//! the status manager holds the resize conditions. A failed write of the checkpoint is logged and the allocation kept
//! in memory, as upstream.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use kubelet_cm::allocation_state::{Containers, PodResourceState, normalized};
use kubelet_types::quantity::ParsedQuantity;
use tracing::error;

/// What a resize is checked against besides the other pods (the node's allocatable CPU and memory, the CPU
/// manager's policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResizeFacts {
    /// The node's allocatable CPU in millicores.
    pub allocatable_cpu_milli: i64,
    /// The node's allocatable memory in bytes.
    pub allocatable_memory: i64,
    /// `cpuManagerPolicy: static`: Guaranteed pods cannot change their CPU in place.
    pub static_cpu_policy: bool,
    /// `memoryManagerPolicy: Static`: Guaranteed pods cannot change their memory in place.
    pub static_memory_policy: bool,
}

/// The allocated resources of the pods.
#[derive(Debug)]
pub struct Allocations {
    state: Arc<PodResourceState>,
}

/// The containers whose resources are allocated (`allocationFromPod`): app containers and native sidecars.
pub fn allocation_from_pod(pod: &Pod) -> Containers {
    kubelet_runtime::resize::resizable_containers(pod)
        .map(|(_, _, c)| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// Whether two requirements are equal as upstream's semantic equality sees them: the same names with equal amounts
/// (an empty list equals a missing one).
pub fn requirements_equal(a: Option<&ResourceRequirements>, b: Option<&ResourceRequirements>) -> bool {
    let same = |x: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                y: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        let (x, y) = (x.filter(|m| !m.is_empty()), y.filter(|m| !m.is_empty()));
        match (x, y) {
            (None, None) => true,
            (Some(x), Some(y)) => {
                x.len() == y.len()
                    && x.iter().all(|(k, q)| {
                        y.get(k).is_some_and(|o| match (ParsedQuantity::parse(&q.0), ParsedQuantity::parse(&o.0)) {
                            (Ok(a), Ok(b)) => a.cmp_value(&b).is_eq(),
                            _ => q == o,
                        })
                    })
            }
            _ => false,
        }
    };
    let claims = |r: Option<&ResourceRequirements>| r.and_then(|r| r.claims.clone()).filter(|c| !c.is_empty());
    same(a.and_then(|r| r.limits.as_ref()), b.and_then(|r| r.limits.as_ref()))
        && same(a.and_then(|r| r.requests.as_ref()), b.and_then(|r| r.requests.as_ref()))
        && claims(a) == claims(b)
}

impl Allocations {
    /// Allocations kept in `state`.
    pub fn new(state: Arc<PodResourceState>) -> Self {
        Self { state }
    }

    /// The pod with its containers' allocated resources in place of the spec's (`UpdatePodFromAllocation`), and
    /// whether they differ; a pod without a recorded allocation is returned as it is.
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> (Arc<Pod>, bool) {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let Some(allocated) = self.state.pod(uid) else { return (pod.clone(), false) };
        let differs = |c: &Container| {
            allocated.get(&c.name).filter(|a| !requirements_equal(c.resources.as_ref(), Some(a))).cloned()
        };
        let spec = pod.spec.as_ref();
        let changed = spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        if !changed.into_iter().any(|c| differs(c).is_some()) {
            return (pod.clone(), false);
        }
        let mut p = (**pod).clone();
        if let Some(spec) = p.spec.as_mut() {
            for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                if let Some(a) = differs(c) {
                    c.resources = Some(a);
                }
            }
        }
        (Arc::new(p), true)
    }

    /// The allocated resources of a pod's container (`GetContainerResourceAllocation`).
    pub fn container(&self, uid: &str, container: &str) -> Option<ResourceRequirements> {
        self.state.container(uid, container)
    }

    /// Records the pod's resources as allocated (`SetAllocatedResources`).
    pub fn set_allocated(&self, pod: &Pod) -> Result<(), String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        self.state.set_pod(uid, allocation_from_pod(pod)).map_err(|e| e.to_string())
    }

    /// As [`Allocations::set_allocated`], logging a failure (upstream goes on with the allocation in memory).
    pub fn record(&self, pod: &Pod) {
        if let Err(e) = self.set_allocated(pod) {
            error!(pod = %kubelet_types::pod_update::pod_ref(pod), error = %e, "SetPodAllocation failed");
        }
    }

    /// Forgets a pod (`RemovePod`).
    pub fn remove(&self, uid: &str) {
        self.state.remove_pod(uid);
    }

    /// Forgets the pods not in `keep` (`RemoveOrphanedPods`).
    pub fn retain(&self, keep: &HashSet<String>) {
        self.state.remove_orphans(keep);
    }
}

fn resize_operation(new: f64, old: f64) -> Option<&'static str> {
    if new == 0.0 && old != 0.0 {
        Some("remove")
    } else if old == 0.0 && new != 0.0 {
        Some("add")
    } else if new < old {
        Some("decrease")
    } else if new > old {
        Some("increase")
    } else {
        None
    }
}

/// Whether a resizable container of `new` asks for other CPU or memory than in `old`, counting each change in
/// `kubelet_container_requested_resizes_total` (`recordContainerResizeOperations`).
pub fn record_resize_operations(old: Option<&Pod>, new: &Pod) -> bool {
    let Some(old) = old else { return true };
    let amount = |r: Option<&ResourceRequirements>, limits: bool, name: &str| {
        let list = r.and_then(|r| if limits { r.limits.as_ref() } else { r.requests.as_ref() });
        list.and_then(|l| l.get(name)).and_then(|q| kubelet_types::quantity::parse_quantity(&q.0)).unwrap_or(0.0)
    };
    let mut resized = false;
    for (_, sidecar, oc) in kubelet_runtime::resize::resizable_containers(old) {
        let Some((_, _, nc)) =
            kubelet_runtime::resize::resizable_containers(new).find(|(_, s, c)| c.name == oc.name && *s == sidecar)
        else {
            continue;
        };
        for (resource, requirement, limits) in [
            ("memory", "requests", false),
            ("memory", "limits", true),
            ("cpu", "requests", false),
            ("cpu", "limits", true),
        ] {
            let (n, o) =
                (amount(nc.resources.as_ref(), limits, resource), amount(oc.resources.as_ref(), limits, resource));
            if let Some(op) = resize_operation(n, o) {
                resized = true;
                kubelet_metrics::kubelet::CONTAINER_REQUESTED_RESIZES.inc(&[op, requirement, resource]);
            }
        }
    }
    resized
}

/// The `ResizeCompleted` event's message (`PodResizeCompletedMsg`): the allocated resources of every init and app
/// container as JSON.
pub fn resize_completed_message(pod: &Pod) -> String {
    #[derive(serde::Serialize)]
    struct Allocation {
        name: String,
        resources: ResourceRequirements,
    }
    #[derive(serde::Serialize)]
    struct Summary {
        #[serde(rename = "initContainers", skip_serializing_if = "Vec::is_empty")]
        init_containers: Vec<Allocation>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        containers: Vec<Allocation>,
    }
    let of = |c: &Container| Allocation {
        name: c.name.clone(),
        resources: normalized(&c.resources.clone().unwrap_or_default()),
    };
    let spec = pod.spec.as_ref();
    let summary = Summary {
        init_containers: spec.into_iter().flat_map(|s| s.init_containers.iter().flatten()).map(of).collect(),
        containers: spec.into_iter().flat_map(|s| s.containers.iter()).map(of).collect(),
    };
    match serde_json::to_string(&summary) {
        Ok(json) => format!("Pod resize completed: {json}"),
        Err(_) => "Pod resize completed".into(),
    }
}

#[cfg(test)]
#[path = "allocation_tests.rs"]
mod tests;
