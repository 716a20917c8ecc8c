//! Pod lifecycle events from the PLEG to the sync loop (`pkg/kubelet/pleg/pleg.go`).

use crate::PodUid;

/// What changed for a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodLifecycleEventType {
    /// A container started running.
    ContainerStarted,
    /// A container stopped running.
    ContainerDied,
    /// A container was removed.
    ContainerRemoved,
    /// The pod needs a sync for another reason (e.g. a sandbox changed).
    PodSync,
    /// A container moved to a state the others do not cover (e.g. created, unknown).
    ContainerChanged,
}

/// One lifecycle event of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    /// The pod.
    pub id: PodUid,
    /// What happened.
    pub kind: PodLifecycleEventType,
    /// The container (or sandbox) ID concerned.
    pub data: String,
}
