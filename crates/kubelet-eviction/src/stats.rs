//! What the eviction manager decides on, and the traits it owns towards the rest of the kubelet
//! (`pkg/kubelet/eviction/types.go`: SummaryProvider, ActivePodsFunc, KillPodFunc, ImageGC, ContainerGC).
//!
//! The core builds [`NodeStats`] from the same Summary that `/stats/summary` serves, so what eviction acts on is
//! what an operator sees.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use kubelet_types::Pod;

use crate::threshold::Observations;

/// Usage of one filesystem by a container, a volume or a pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsUsage {
    /// Bytes used.
    pub bytes: Option<u64>,
    /// Inodes used.
    pub inodes: Option<u64>,
}

/// One container's usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    /// Container name.
    pub name: String,
    /// Memory working set.
    pub memory_working_set: Option<u64>,
    /// The writable layer.
    pub rootfs: FsUsage,
    /// When the runtime measured the writable layer.
    pub rootfs_time: Option<std::time::SystemTime>,
    /// The log files.
    pub logs: FsUsage,
}

/// One pod's usage (`statsapi.PodStats`, the part eviction reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    /// The pod cgroup's memory working set.
    pub memory_working_set: Option<u64>,
    /// Processes of the pod.
    pub processes: Option<u64>,
    /// Running containers.
    pub containers: Vec<ContainerUsage>,
    /// Volumes measured, by name.
    pub volumes: HashMap<String, FsUsage>,
    /// The pod's whole ephemeral storage (writable layers, logs, local volumes, `etc-hosts`).
    pub ephemeral_storage: FsUsage,
}

/// One pass's figures.
#[derive(Debug, Clone, Default)]
pub struct NodeStats {
    /// The signals' observations.
    pub observations: Observations,
    /// Pods by UID.
    pub pods: HashMap<String, PodUsage>,
    /// The image filesystem is another filesystem than the root dir's (`HasDedicatedImageFs`).
    pub dedicated_image_fs: bool,
}

/// Where the figures come from.
#[async_trait]
pub trait StatsSource: Send + Sync + 'static {
    /// Current figures, the pods' only when `pods` (they cost a listing of the runtime and a walk of every pod's
    /// cgroups; a pass needs them only to rank pods or to check local storage limits). An error skips the pass.
    async fn node_stats(&self, pods: bool) -> Result<NodeStats, String>;
    /// Makes the next pods' figures ask the runtime for its latest writable layer figures instead of reusing
    /// earlier ones (a disk ranking must see what was written since).
    async fn refresh_writable_layers(&self) {}
}

/// The pods eviction may act on.
pub trait ActivePods: Send + Sync + 'static {
    /// Pods admitted and not yet terminating (`GetActivePods`).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Whether an evicted pod has stopped and its resources are released (`podResourcesAreReclaimed`).
    fn cleaned_up(&self, pod: &Pod) -> bool;
}

/// The status an evicted pod ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionStatus {
    /// `Evicted`.
    pub reason: String,
    /// Upstream's message naming the resource.
    pub message: String,
    /// The `DisruptionTarget` condition's message (None: no condition, as local-storage evictions).
    pub disruption_message: Option<String>,
}

/// Stops pods (`KillPodFunc`): the core hands the kill to the pod's worker with the grace period and the status.
#[async_trait]
pub trait PodKiller: Send + Sync + 'static {
    /// Stops `pod` with `grace_seconds` and gives it `status`; returns once its containers stopped (or the wait
    /// gave up).
    async fn kill(&self, pod: &Arc<Pod>, grace_seconds: i64, status: EvictionStatus) -> Result<(), String>;
}

/// Node-level reclaim before pods are evicted (`ContainerGC.DeleteAllUnusedContainers`,
/// `ImageGC.DeleteUnusedImages`).
#[async_trait]
pub trait NodeReclaimer: Send + Sync + 'static {
    /// Removes every dead container and sandbox not needed; returns how many containers went.
    async fn delete_unused_containers(&self) -> Result<usize, String>;
    /// Removes every image no container uses; returns the bytes freed.
    async fn delete_unused_images(&self) -> Result<u64, String>;
}
