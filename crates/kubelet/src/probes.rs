//! What the pod workers and the sync loop ask of the probe manager (`pkg/kubelet/prober` Manager): start probing
//! a pod, stop its liveness and startup probes when it terminates, forget it. Implemented by
//! [`kubelet_prober::ProbeManager`] and, for nodes without probing, by [`NoProbes`].

use std::collections::HashSet;
use std::sync::Arc;

use kubelet_types::probe::{NoProbes, PodProbeStatus};
use kubelet_types::{Pod, PodUid};

/// The probe manager as the core uses it.
pub trait PodProbes: PodProbeStatus {
    /// Starts the probe workers of a running pod (every sync; idempotent).
    fn add_pod(&self, pod: &Arc<Pod>);
    /// A terminating pod is no longer restarted by its probes.
    fn stop_liveness_and_startup(&self, uid: &PodUid);
    /// A terminated pod is not probed at all.
    fn remove_pod(&self, uid: &PodUid);
    /// Stops probing pods that are not desired any more (housekeeping).
    fn cleanup_pods(&self, desired: &HashSet<PodUid>);
}

impl PodProbes for kubelet_prober::ProbeManager {
    fn add_pod(&self, pod: &Arc<Pod>) {
        kubelet_prober::ProbeManager::add_pod(self, pod)
    }
    fn stop_liveness_and_startup(&self, uid: &PodUid) {
        kubelet_prober::ProbeManager::stop_liveness_and_startup(self, uid)
    }
    fn remove_pod(&self, uid: &PodUid) {
        kubelet_prober::ProbeManager::remove_pod(self, uid)
    }
    fn cleanup_pods(&self, desired: &HashSet<PodUid>) {
        kubelet_prober::ProbeManager::cleanup_pods(self, desired)
    }
}

impl PodProbes for NoProbes {
    fn add_pod(&self, _pod: &Arc<Pod>) {}
    fn stop_liveness_and_startup(&self, _uid: &PodUid) {}
    fn remove_pod(&self, _uid: &PodUid) {}
    fn cleanup_pods(&self, _desired: &HashSet<PodUid>) {}
}
