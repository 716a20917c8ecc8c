//! What container garbage collection knows of pods (`pod_workers.go` ShouldPodContentBeRemoved,
//! ShouldPodRuntimeBeRemoved), for the sync loop's periodic pass and the eviction manager's reclaim.

use std::sync::Arc;

use kubelet_runtime::container_gc::PodRemoval;
use kubelet_types::{Pod, PodUid};

use crate::pod_workers::{PodWorkers, WorkerPhase};
use crate::status::StatusManager;

/// Pod states from the desired pods, the workers and the statuses.
pub struct PodStates<'a> {
    /// The desired pod of a UID, if any.
    pub pod: &'a (dyn Fn(&PodUid) -> Option<Arc<Pod>> + Sync),
    /// The workers.
    pub workers: &'a PodWorkers,
    /// The statuses.
    pub status: &'a StatusManager,
    /// Every pod source has been read (`podsSynced`): a pod nobody knows is gone.
    pub synced: bool,
}

impl PodRemoval for PodStates<'_> {
    fn content_removable(&self, uid: &PodUid) -> bool {
        let Some(phase) = self.workers.phase(uid) else { return self.synced };
        let evicted = self
            .status
            .get(uid)
            .is_some_and(|s| s.phase.as_deref() == Some("Failed") && s.reason.as_deref() == Some("Evicted"));
        let deleted = (self.pod)(uid).is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        evicted || (deleted && phase == WorkerPhase::Finished)
    }

    fn runtime_removable(&self, uid: &PodUid) -> bool {
        match self.workers.phase(uid) {
            Some(phase) => phase == WorkerPhase::Finished,
            None => self.synced,
        }
    }
}
