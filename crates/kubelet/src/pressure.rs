//! The core's side of the eviction manager (`kubelet.go` wiring of `eviction.NewManager`: the summary provider,
//! `GetActivePods`, `killPodNow`, `podResourcesAreReclaimed`, the eviction admit handler).
//!
//! - [`SummaryStats`]: the eviction figures from the same Summary `/stats/summary` serves.
//! - [`WorkerKiller`]: an eviction handed to the pod's worker as a kill with the eviction's status; waits until
//!   the containers stopped (`killPodNow`'s timeout: grace × 1.5 + 10 s).
//! - [`PodsView`]: the active pods (published by the sync loop, without those whose worker is stopping them).
//! - [`PressureAdmit`]: the eviction admit handler.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use kubelet_eviction::{
    ActivePods, ContainerUsage, EvictionStatus, FsUsage, NodeStats, Observation, PodKiller, PodUsage, PressureState,
    Signal, StatsSource,
};
use kubelet_server::stats::{FsStats, StatsProvider, Summary, Time};
use kubelet_types::Pod;
use kubelet_types::pod_update::pod_uid;
use tokio::sync::watch;

use crate::admission::{AdmitResult, PodAdmitHandler};
use crate::pod_workers::{PodWorkers, UpdatePodOptions, UpdateType, WorkerPhase};
use crate::status::StatusManager;
use crate::status::generate::is_terminal_phase;
use crate::syncer::PodKey;

fn time(t: &Time) -> Option<SystemTime> {
    t.0.map(SystemTime::from)
}

fn fs(f: &Option<FsStats>) -> FsUsage {
    FsUsage { bytes: f.as_ref().and_then(|f| f.used_bytes), inodes: f.as_ref().and_then(|f| f.inodes_used) }
}

fn bytes_obs(f: &FsStats) -> Option<Observation> {
    Some(Observation { available: f.available_bytes? as i64, capacity: f.capacity_bytes? as i64, time: time(&f.time) })
}

fn inodes_obs(f: &FsStats) -> Option<Observation> {
    Some(Observation { available: f.inodes_free? as i64, capacity: f.inodes? as i64, time: time(&f.time) })
}

/// The eviction figures of a Summary (`makeSignalObservations`, `cachedStatsFunc`).
pub fn node_stats(s: &Summary) -> NodeStats {
    let mut out = NodeStats::default();
    let o = &mut out.observations;
    let mem = |m: &kubelet_server::stats::MemoryStats| {
        Some(Observation {
            available: m.available_bytes? as i64,
            capacity: (m.available_bytes? + m.working_set_bytes?) as i64,
            time: time(&m.time),
        })
    };
    if let Some(v) = s.node.memory.as_ref().and_then(mem) {
        o.insert(Signal::MemoryAvailable, v);
    }
    let pods = s.node.system_containers.iter().find(|c| c.name == "pods");
    if let Some(v) = pods.and_then(|c| c.memory.as_ref()).and_then(mem) {
        o.insert(Signal::AllocatableMemoryAvailable, v);
    }
    if let Some(f) = &s.node.fs {
        bytes_obs(f).map(|v| o.insert(Signal::NodeFsAvailable, v));
        inodes_obs(f).map(|v| o.insert(Signal::NodeFsInodesFree, v));
    }
    let runtime = s.node.runtime.as_ref();
    if let Some(f) = runtime.and_then(|r| r.image_fs.as_ref()) {
        bytes_obs(f).map(|v| o.insert(Signal::ImageFsAvailable, v));
        inodes_obs(f).map(|v| o.insert(Signal::ImageFsInodesFree, v));
        // Another filesystem than the root dir's (`HasDedicatedImageFs`): told apart by size.
        out.dedicated_image_fs = s.node.fs.as_ref().is_some_and(|n| {
            (n.capacity_bytes, n.inodes) != (f.capacity_bytes, f.inodes) && f.capacity_bytes.is_some()
        });
    }
    if let Some(f) = runtime.and_then(|r| r.container_fs.as_ref()) {
        bytes_obs(f).map(|v| o.insert(Signal::ContainerFsAvailable, v));
        inodes_obs(f).map(|v| o.insert(Signal::ContainerFsInodesFree, v));
    }
    if let Some(r) = &s.node.rlimit
        && let (Some(max), Some(cur)) = (r.maxpid, r.curproc)
    {
        o.insert(Signal::PidAvailable, Observation { available: max - cur, capacity: max, time: time(&r.time) });
    }
    for p in s.pods.iter().flatten() {
        let usage = PodUsage {
            memory_working_set: p.memory.as_ref().and_then(|m| m.working_set_bytes),
            processes: p.process_stats.as_ref().and_then(|ps| ps.process_count),
            containers: p
                .containers
                .iter()
                .flatten()
                .map(|c| ContainerUsage {
                    name: c.name.clone(),
                    memory_working_set: c.memory.as_ref().and_then(|m| m.working_set_bytes),
                    rootfs: fs(&c.rootfs),
                    rootfs_time: c.rootfs.as_ref().and_then(|f| time(&f.time)),
                    logs: fs(&c.logs),
                })
                .collect(),
            volumes: p
                .volume
                .iter()
                .map(|v| (v.name.clone(), FsUsage { bytes: v.fs.used_bytes, inodes: v.fs.inodes_used }))
                .collect(),
            ephemeral_storage: fs(&p.ephemeral_storage),
        };
        out.pods.insert(p.pod_ref.uid.clone(), usage);
    }
    out
}

/// Figures from the Summary provider.
pub struct SummaryStats(pub Arc<crate::stats::SummaryProvider>);

#[async_trait]
impl StatsSource for SummaryStats {
    async fn node_stats(&self, pods: bool) -> Result<NodeStats, String> {
        let s =
            if pods { self.0.summary(false).await.map_err(|e| e.to_string())? } else { self.0.node_summary().await };
        Ok(node_stats(&s))
    }

    async fn refresh_writable_layers(&self) {
        self.0.expire_writable_layers().await;
    }
}

/// Evictions through the pod workers.
pub struct WorkerKiller(pub PodWorkers);

#[async_trait]
impl PodKiller for WorkerKiller {
    async fn kill(&self, pod: &Arc<Pod>, grace: i64, status: EvictionStatus) -> Result<(), String> {
        let uid = pod_uid(pod);
        self.0.update_pod(UpdatePodOptions {
            update_type: UpdateType::Kill,
            key: PodKey::of(pod),
            pod: Some(pod.clone()),
            grace_override: Some(grace),
            removed: false,
            status: Some(status),
        });
        let timeout = Duration::from_secs((grace + grace / 2 + 10).max(0) as u64);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.0.phase(&uid) {
                None | Some(WorkerPhase::Terminated | WorkerPhase::Finished) => return Ok(()),
                _ if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("timeout waiting to kill pod {}", kubelet_types::pod_update::pod_ref(pod)));
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// The pods eviction may rank: desired, not terminal, not being stopped.
pub struct PodsView {
    /// The sync loop's published pods.
    pub pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    /// The workers.
    pub workers: PodWorkers,
    /// The statuses.
    pub status: Arc<StatusManager>,
}

impl ActivePods for PodsView {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        let pods = self.pods.borrow().clone();
        pods.iter()
            .filter(|p| {
                let uid = pod_uid(p);
                let phase = self.status.get(&uid).and_then(|s| s.phase.clone());
                let api_phase = p.status.as_ref().and_then(|s| s.phase.clone());
                !is_terminal_phase(phase.as_deref())
                    && !is_terminal_phase(api_phase.as_deref())
                    && p.metadata.deletion_timestamp.is_none()
                    && self.workers.phase(&uid).is_none_or(|w| w == WorkerPhase::Syncing)
            })
            .cloned()
            .collect()
    }

    fn cleaned_up(&self, pod: &Pod) -> bool {
        self.workers.phase(&pod_uid(pod)).is_none_or(|w| w == WorkerPhase::Finished)
    }
}

/// The eviction admit handler (`managerImpl.Admit`).
///
/// A restarted kubelet admits every pod of its sources again, also those it runs. Upstream's eviction manager knows
/// no pressure yet at that moment (its first figures come from cAdvisor after the first pods are admitted), but
/// nothing orders the two (kubernetes#83612): rkubelet's first pass is done within milliseconds of start-up, so a
/// restart under DiskPressure refused, and stopped, every pod the node ran. Pods the runtime already had a sandbox
/// of when rkubelet started were admitted by the kubelet before it: pressure does not refuse them again; whether
/// they stay is the eviction manager's decision (ranking, grace periods), as for any running pod.
pub struct PressureAdmit {
    state: Arc<PressureState>,
    admitted_before: std::collections::HashSet<String>,
}

impl PressureAdmit {
    /// The handler of the pressure conditions in `state`.
    pub fn new(state: Arc<PressureState>) -> Self {
        Self { state, admitted_before: Default::default() }
    }

    /// The same handler, knowing the pods the runtime has a sandbox of (in any state) at start-up; a runtime that
    /// cannot list them leaves every pod to the pressure check.
    pub async fn with_running_pods(mut self, runtime: &dyn kubelet_cri::RuntimeService) -> Self {
        match runtime.list_pod_sandbox(None).await {
            Ok(sandboxes) => {
                self.admitted_before = sandboxes
                    .into_iter()
                    .filter_map(|s| {
                        s.labels
                            .get(kubelet_types::labels::POD_UID)
                            .cloned()
                            .or_else(|| s.metadata.map(|m| m.uid).filter(|u| !u.is_empty()))
                    })
                    .collect()
            }
            Err(e) => tracing::warn!(error = %e, "unable to list the pods the runtime runs at start-up"),
        }
        self
    }
}

impl PodAdmitHandler for PressureAdmit {
    fn admit(&self, pod: &Pod, _others: &[Arc<Pod>]) -> Option<AdmitResult> {
        let (reason, message) = self.state.admit(pod)?;
        if self.admitted_before.contains(pod.metadata.uid.as_deref().unwrap_or("")) {
            tracing::info!(pod = %kubelet_types::pod_update::pod_ref(pod), podUID = %pod_uid(pod), message = %message, "pod ran before this start: admitted under node pressure");
            return None;
        }
        Some(AdmitResult { reason, message })
    }
}

/// Node-level reclaim: dead containers (`DeleteAllUnusedContainers`) and unused images.
pub struct RuntimeReclaimer {
    /// The runtime manager.
    pub runtime: Arc<kubelet_runtime::RuntimeManager>,
    /// The sync loop's published pods.
    pub pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    /// The workers (whose pods are finished).
    pub workers: PodWorkers,
    /// The statuses (which pods were evicted).
    pub status: Arc<StatusManager>,
    /// Whether every pod source has been read.
    pub sources_ready: Arc<kubelet_config::podconfig::SourcesReady>,
    /// The image collector.
    pub images: Arc<kubelet_runtime::image_gc::ImageGcManager>,
}

#[async_trait]
impl kubelet_eviction::NodeReclaimer for RuntimeReclaimer {
    /// The container garbage collection with `evictNonDeletedPods`: terminated pods lose their dead containers and
    /// sandboxes too, running ones keep their newest dead instance per container.
    async fn delete_unused_containers(&self) -> Result<usize, String> {
        let pods = self.pods.borrow().clone();
        let lookup = |uid: &kubelet_types::PodUid| pods.iter().find(|p| &pod_uid(p) == uid).cloned();
        let ready = self.sources_ready.all_ready();
        let states = crate::gc::PodStates { pod: &lookup, workers: &self.workers, status: &self.status, synced: ready };
        let policy = kubelet_runtime::container_gc::GcPolicy::default();
        self.runtime.garbage_collect(policy, ready, true, &states).await.map_err(|e| e.join("; "))
    }

    async fn delete_unused_images(&self) -> Result<u64, String> {
        self.images.delete_unused_images().await.map(|b| b.max(0) as u64).map_err(|e| e.to_string())
    }
}

/// Runs the image garbage collector every [`IMAGE_GC_PERIOD`](kubelet_runtime::image_gc::IMAGE_GC_PERIOD), the
/// first pass at once (`StartGarbageCollection`); two failed passes in a row record `ImageGCFailed` on the node.
/// Ends when cancelled.
pub async fn run_image_gc(
    gc: Arc<kubelet_runtime::image_gc::ImageGcManager>,
    recorder: Arc<dyn kubelet_types::events::Recorder>,
    node_ref: k8s_openapi::api::core::v1::ObjectReference,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(kubelet_runtime::image_gc::IMAGE_GC_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failed_before = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        match gc.garbage_collect().await {
            Ok(freed) => {
                if freed > 0 {
                    tracing::info!(bytesFreed = freed, "image garbage collection freed space");
                }
                failed_before = false;
            }
            Err(e) => {
                if failed_before {
                    recorder.event(&node_ref, kubelet_types::events::WARNING, "ImageGCFailed", e.to_string());
                }
                tracing::warn!(error = %e, "image garbage collection failed");
                failed_before = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kubelet_cri::{CriError, RuntimeService, api, fake::FakeRuntime};
    use kubelet_eviction::NodeCondition;

    fn pod(uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta { uid: Some(uid.into()), name: Some(uid.into()), ..Default::default() },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn pods_the_runtime_ran_at_start_are_not_refused_for_pressure() {
        let rt = FakeRuntime::new(&[]);
        let config = api::PodSandboxConfig {
            labels: [(kubelet_types::labels::POD_UID.to_string(), "running".to_string())].into(),
            ..Default::default()
        };
        let id = rt.run_pod_sandbox(config, "").await.unwrap();
        rt.stop_pod_sandbox(&id).await.unwrap();
        let state = Arc::new(PressureState::with_conditions([NodeCondition::DiskPressure]));
        let admit = PressureAdmit::new(state.clone()).with_running_pods(&rt).await;
        assert_eq!(admit.admit(&pod("running"), &[]), None, "a sandbox in any state: admitted before");
        let refused = admit.admit(&pod("new"), &[]).expect("a new pod is refused under DiskPressure");
        assert_eq!(refused.reason, "Evicted");
        assert_eq!(refused.message, "The node had condition: [DiskPressure]. ");
        // Without pressure nothing is refused; a runtime that cannot list leaves every pod to the check.
        let calm = PressureAdmit::new(Arc::new(PressureState::default())).with_running_pods(&rt).await;
        assert_eq!(calm.admit(&pod("new"), &[]), None);
        rt.inject_error("ListPodSandbox", CriError::Unavailable { op: "ListPodSandbox", message: "down".into() });
        let blind = PressureAdmit::new(state).with_running_pods(&rt).await;
        assert!(blind.admit(&pod("running"), &[]).is_some());
    }
}
