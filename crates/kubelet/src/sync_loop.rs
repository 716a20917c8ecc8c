//! The sync loop (`pkg/kubelet/kubelet.go` syncLoop, syncLoopIteration, HandlePodAdditions...,
//! `kubelet_pods.go` HandlePodCleanups).
//!
//! One task owns the [`PodManager`]. Each iteration takes, in this priority order: a pod update from the
//! PodConfig merge, a PLEG event, a changed probe result, a housekeeping tick (every 2 s). Updates and events are handed to the pod
//! workers; housekeeping — only once every source has been seen, so a restarted kubelet never stops pods whose
//! manifest it has not read yet — stops pods the runtime runs that no source wants, removes their leftovers
//! (pod directories, cgroups), forgets finished workers, and every minute starts a garbage collection of dead
//! containers on its own task. The loop itself never waits on the runtime, so a pod whose runtime calls hang holds
//! back only its own worker. A critical pod admitted by preempting others ([`crate::preemption`]) is held back
//! (its updates too) until they have stopped, on a task of its own. The loop ends when cancelled or when the update
//! stream closes.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kubelet_config::podconfig::SourcesReady;
use kubelet_runtime::{PodCache, RuntimeManager};
use kubelet_types::probe::{ProbeResult, ProbeType, ProbeUpdate};
use kubelet_types::{Operation, Pod, PodLifecycleEvent, PodUid, PodUpdate};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::admission::PodAdmitHandler;
use crate::cm::PodCgroups;
use crate::mirror::{MirrorClient, is_mirror_pod};
use crate::pod_manager::PodManager;
use crate::pod_workers::{PodWorkers, UpdatePodOptions, UpdateType, WorkerPhase};
use crate::preemption::{CriticalPodPreemption, Plan, Requirements};
use crate::probes::PodProbes;
use crate::server::SyncLoopHealth;
use crate::status::StatusManager;
use crate::status::generate::is_terminal_phase;
use crate::syncer::PodKey;
use kubelet_types::events::{Recorder, WARNING, pod_reference};

/// Housekeeping period (`housekeepingPeriod`).
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// Dead containers are collected every this many housekeeping ticks (one minute, `ContainerGCPeriod`).
const CONTAINER_GC_TICKS: u32 = 30;

/// Everything the sync loop talks to.
pub struct SyncLoopDeps {
    /// Merged pod updates.
    pub updates: mpsc::Receiver<PodUpdate>,
    /// PLEG events.
    pub pleg_events: mpsc::Receiver<PodLifecycleEvent>,
    /// Changed probe results.
    pub probe_updates: mpsc::Receiver<ProbeUpdate>,
    /// The probe manager.
    pub probes: Arc<dyn PodProbes>,
    /// The pod workers.
    pub workers: PodWorkers,
    /// The runtime manager (for garbage collection).
    pub runtime: Arc<RuntimeManager>,
    /// Runtime pod cache, refreshed by the PLEG.
    pub cache: Arc<PodCache>,
    /// Pod cgroups.
    pub cgroups: Arc<dyn PodCgroups>,
    /// Which sources have been seen.
    pub sources_ready: Arc<SourcesReady>,
    /// Loop health, marked every iteration.
    pub health: Arc<SyncLoopHealth>,
    /// Where the desired pods are published for the HTTP server.
    pub pods_out: watch::Sender<Arc<Vec<Arc<Pod>>>>,
    /// `<root-dir>/pods`.
    pub pods_dir: PathBuf,
    /// Mirror pods in the apiserver (None when standalone).
    pub mirror: Option<Arc<dyn MirrorClient>>,
    /// The volume manager (orphaned pods' volumes are torn down before their directories go).
    pub volumes: Arc<dyn crate::volumes::Volumes>,
    /// Admission checks of new pods.
    pub admit: Vec<Arc<dyn PodAdmitHandler>>,
    /// The pod's resources allocated in the chain (the device manager; None: none to allocate), after the first
    /// [`SyncLoopDeps::allocate_after`] handlers of [`SyncLoopDeps::admit`]: upstream runs eviction and sysctls,
    /// then `GetAllocateResourcesPodAdmitHandler`, then the resource fit and the rest, so a pod short of devices is
    /// refused by the allocation (`UnexpectedAdmissionError`).
    pub allocator: Option<Arc<dyn crate::admission::ResourceAllocator>>,
    /// How many handlers of [`SyncLoopDeps::admit`] run before the allocator.
    pub allocate_after: usize,
    /// Where rejected pods get their status.
    pub status: Arc<StatusManager>,
    /// Where rejections are recorded.
    pub recorder: Arc<dyn Recorder>,
    /// The node's name (its events).
    pub node_name: String,
    /// The pods' allocated resources (in-place resize).
    pub allocations: Arc<crate::allocation::Allocations>,
    /// What resizes are checked against besides the other pods.
    pub resize_facts: crate::allocation::ResizeFacts,
}

/// The sync loop.
pub struct SyncLoop {
    deps: SyncLoopDeps,
    pods: PodManager,
    /// Mirror pods seen in the apiserver, by full name; never run.
    mirrors: HashMap<(String, String), Arc<Pod>>,
    mirror_task: Option<tokio::task::JoinHandle<()>>,
    /// The removal of orphaned pod directories in flight (their CSI volumes are unpublished first, which can take
    /// a driver's time).
    orphans_task: Option<tokio::task::JoinHandle<()>>,
    /// The container garbage collection pass in flight.
    gc_task: Option<tokio::task::JoinHandle<()>>,
    ticks: u32,
    /// When the pod list last changed without being published yet (see [`PUBLISH_DELAY`]).
    unpublished_since: Option<tokio::time::Instant>,
    /// Pods refused at admission: never run, only stopped (cleaned up) when deleted.
    rejected: HashSet<PodUid>,
    /// Critical pod preemption (None: critical pods that lack resources are admitted as the handlers said).
    preemption: Option<Arc<CriticalPodPreemption>>,
    /// Critical pods admitted whose preemptions are under way: started (with their latest update) once those end.
    preempting: HashSet<PodUid>,
    /// Pods being preempted: admission counts them as gone.
    victims: HashSet<PodUid>,
    /// Preemptions that ended.
    preempted: (mpsc::Sender<Preempted>, mpsc::Receiver<Preempted>),
    /// Removes dead containers as they die (started with the loop).
    deletor: Option<crate::container_deletor::ContainerDeletor>,
    /// Pods whose resize waits, in the order they are decided ([`resize`]).
    pending_resizes: Vec<PodUid>,
    /// When pending resizes are decided again.
    resize_retry_at: tokio::time::Instant,
}

#[path = "sync_loop_resize.rs"]
mod resize;

/// An ended preemption: the critical pod and the pods stopped for it.
type Preempted = (PodUid, Vec<PodUid>);

/// Ended preemptions waiting for the loop: one per critical pod admitted by preempting, which are rare; a full
/// channel only makes the preemption's task wait.
const PREEMPTED_CHANNEL_CAPACITY: usize = 16;

/// The pod list for the read-only API is published at most this long after a change: building it costs O(pods),
/// and while thousands of pods start, updates arrive faster than that is worth paying for each.
const PUBLISH_DELAY: Duration = Duration::from_millis(100);

/// Whether a running container of `new` reports less CPU or memory in its status than in `old` (HandlePodReconcile's
/// check of the status resources).
fn status_resources_shrank(old: &Pod, new: &Pod) -> bool {
    let requests = |p: &Pod| {
        let mut cpu_mem = (0.0, 0.0);
        for s in p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()) {
            let r = s.resources.as_ref().and_then(|r| r.requests.as_ref());
            let get = |n: &str| r.and_then(|r| r.get(n)).and_then(|q| kubelet_types::quantity::parse_quantity(&q.0));
            cpu_mem.0 += get("cpu").unwrap_or(0.0);
            cpu_mem.1 += get("memory").unwrap_or(0.0);
        }
        cpu_mem
    };
    let (o, n) = (requests(old), requests(new));
    n.0 < o.0 || n.1 < o.1
}

fn full_name(p: &Pod) -> (String, String) {
    (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default())
}

impl SyncLoop {
    /// A loop over `deps`.
    pub fn new(deps: SyncLoopDeps) -> Self {
        Self {
            deps,
            pods: PodManager::default(),
            mirrors: HashMap::new(),
            mirror_task: None,
            orphans_task: None,
            gc_task: None,
            ticks: 0,
            unpublished_since: None,
            rejected: HashSet::new(),
            preemption: None,
            preempting: HashSet::new(),
            victims: HashSet::new(),
            preempted: mpsc::channel(PREEMPTED_CHANNEL_CAPACITY),
            deletor: None,
            pending_resizes: vec![],
            resize_retry_at: tokio::time::Instant::now() + resize::INITIAL_RETRY_DELAY,
        }
    }

    /// The same loop, making room for critical pods that lack resources (`CriticalPodAdmissionHandler`).
    pub fn with_preemption(mut self, preemption: Arc<CriticalPodPreemption>) -> Self {
        self.preemption = Some(preemption);
        self
    }

    /// Runs until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let policy = kubelet_runtime::container_gc::GcPolicy::default();
        self.deletor = Some(crate::container_deletor::ContainerDeletor::spawn(
            self.deps.runtime.clone(),
            policy.max_per_pod_container,
            cancel.child_token(),
        ));
        let mut housekeeping = tokio::time::interval(HOUSEKEEPING_PERIOD);
        housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.deps.health.mark();
            let publish_at = self.unpublished_since.map(|t| t + PUBLISH_DELAY);
            if publish_at.is_some_and(|at| at <= tokio::time::Instant::now()) {
                self.publish();
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                u = self.deps.updates.recv() => match u {
                    Some(u) => self.handle_update(u).await,
                    None => return,
                },
                Some(done) = self.preempted.1.recv() => self.preemption_done(done),
                Some(e) = self.deps.pleg_events.recv() => self.handle_pleg(e),
                Some(u) = self.deps.probe_updates.recv() => self.handle_probe(u),
                _ = housekeeping.tick() => self.housekeeping(),
                _ = tokio::time::sleep_until(self.resize_retry_at), if !self.pending_resizes.is_empty() => {
                    self.retry_pending_resizes("periodic_retry").await;
                }
                _ = tokio::time::sleep_until(publish_at.unwrap_or_else(tokio::time::Instant::now)), if publish_at.is_some() => {
                    self.publish();
                }
            }
        }
    }

    fn publish(&mut self) {
        self.unpublished_since = None;
        let pods: Vec<Arc<Pod>> = self.pods.pods().cloned().collect();
        self.deps.pods_out.send_replace(Arc::new(pods));
    }

    /// Hands the pod to its worker with the resources allocated to it (the worker never runs a resize the loop has
    /// not admitted).
    fn dispatch(&self, t: UpdateType, pod: &Arc<Pod>, removed: bool) {
        let (pod, _) = self.deps.allocations.allocated_pod(pod);
        self.deps.workers.update_pod(UpdatePodOptions {
            update_type: t,
            key: PodKey::of(&pod),
            pod: Some(pod),
            grace_override: None,
            removed,
            status: None,
        });
    }

    async fn handle_update(&mut self, mut u: PodUpdate) {
        // Mirror pods only show static pods in the apiserver: remember them, never run them.
        let (mirrors, pods): (Vec<_>, Vec<_>) = u.pods.into_iter().partition(|p| is_mirror_pod(p));
        for m in mirrors {
            let (ns, name) =
                (m.metadata.namespace.clone().unwrap_or_default(), m.metadata.name.clone().unwrap_or_default());
            if u.op == Operation::Remove {
                self.mirrors.remove(&full_name(&m));
                self.deps.status.set_mirror(&ns, &name, None);
            } else {
                self.deps.status.set_mirror(&ns, &name, m.metadata.uid.clone());
                self.mirrors.insert(full_name(&m), m);
            }
        }
        u.pods = pods;
        if u.pods.is_empty() {
            // Nothing to run: an empty set only tells that a source was seen, which the merge tracks.
            return;
        }
        info!(op = %u.op, source = %u.source, pods = ?u.pods.iter().map(|p| kubelet_types::pod_update::pod_ref(p)).collect::<Vec<_>>(), "SyncLoop");
        let mut shrank_reconcile = false;
        match u.op {
            Operation::Add => {
                let mut pods = u.pods;
                pods.sort_by(|a, b| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp));
                let mut differing = vec![];
                for p in &pods {
                    let uid = kubelet_types::pod_update::pod_uid(p);
                    let known = self.pods.get(&uid).is_some();
                    self.pods.add_or_update(p.clone());
                    if !known && !self.admit(p).await {
                        continue;
                    }
                    if self.deps.allocations.allocated_pod(p).1 {
                        differing.push(uid);
                    }
                    // Only a pod new to the loop is a create: a create for a UID whose termination began asks
                    // for its restart (the pod workers' `restartRequested`).
                    self.dispatch(if known { UpdateType::Update } else { UpdateType::Create }, p, false);
                }
                self.resize_after_additions(&pods, differing).await;
            }
            Operation::Update | Operation::Delete => {
                for p in u.pods {
                    let uid = kubelet_types::pod_update::pod_uid(&p);
                    let old = self.pods.get(&uid).cloned();
                    self.pods.add_or_update(p.clone());
                    if !self.rejected.contains(&uid) {
                        self.resize_on_update(old.as_ref(), &p).await;
                    }
                    // A rejected pod only ever gets stopped (so its deletion completes).
                    if self.rejected.contains(&uid) && p.metadata.deletion_timestamp.is_none() {
                        continue;
                    }
                    // A pod waiting for its preemption starts with its latest update once that ends.
                    if self.preempting.contains(&uid) {
                        continue;
                    }
                    self.dispatch(UpdateType::Update, &p, false);
                }
            }
            Operation::Remove => {
                for p in u.pods {
                    let uid = kubelet_types::pod_update::pod_uid(&p);
                    self.pods.remove(&uid);
                    self.deps.allocations.remove(uid.as_str());
                    self.rejected.remove(&uid);
                    self.preempting.remove(&uid);
                    self.dispatch(UpdateType::Kill, &p, true);
                }
                if !self.pending_resizes.is_empty() {
                    self.retry_pending_resizes("pods_removed").await;
                }
            }
            Operation::Reconcile => {
                // A running container that got smaller may make room for a deferred resize.
                shrank_reconcile = !self.pending_resizes.is_empty()
                    && u.pods.iter().any(|p| {
                        let old = self.pods.get(&kubelet_types::pod_update::pod_uid(p));
                        old.is_some_and(|o| status_resources_shrank(o, p))
                    });
                for p in u.pods {
                    // A status change of another client (a readiness gate's condition) that changes `Ready`
                    // asks for a sync, as upstream's HandlePodReconcile.
                    let resync = crate::status::generate::needs_readiness_reconcile(&p);
                    self.pods.add_or_update(p.clone());
                    if resync && !self.preempting.contains(&kubelet_types::pod_update::pod_uid(&p)) {
                        self.dispatch(UpdateType::Sync, &p, false);
                    }
                }
            }
        }
        self.unpublished_since.get_or_insert_with(tokio::time::Instant::now);
        if shrank_reconcile {
            self.retry_pending_resizes("pod_resized").await;
        }
    }

    /// Runs the admit handlers on a new pod (`canAdmitPod`); a rejected pod gets its Failed status and an event
    /// (`rejectPod`) and is not run. Pods already terminal are not checked. A critical pod that lacks resources
    /// is refused, or admitted by preempting other pods, after which it starts ([`SyncLoop::preemption_done`]).
    /// Returns whether the pod is to be run now.
    async fn admit(&mut self, pod: &Arc<Pod>) -> bool {
        if is_terminal_phase(pod.status.as_ref().and_then(|s| s.phase.as_deref())) {
            return true;
        }
        let uid = kubelet_types::pod_update::pod_uid(pod);
        let others = self.admitted_pods(&uid);
        // A restarted kubelet admits a pod with what it had allocated (the source of truth for a pod whose resize
        // it had not admitted yet); an admitted pod's resources are recorded as allocated.
        let (allocated, _) = self.deps.allocations.allocated_pod(pod);
        let r = match self.check_admission(&allocated, &others).await {
            Some(r) => r,
            None => match self.preemption.as_ref().map(|p| p.plan(&allocated, &others)) {
                None | Some(Plan::Admit) => {
                    self.deps.allocations.record(&allocated);
                    return true;
                }
                Some(Plan::Preempt { victims, requirements }) => {
                    self.deps.allocations.record(&allocated);
                    self.start_preemption(pod, victims, requirements);
                    return false;
                }
                Some(Plan::Refuse(r)) => r,
            },
        };
        warn!(pod = %kubelet_types::pod_update::pod_ref(pod), podUID = %uid, reason = %r.reason, message = %r.message, "pod rejected at admission");
        self.deps.recorder.event(&pod_reference(pod), WARNING, &r.reason, r.message.clone());
        let status = k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            reason: Some(r.reason),
            message: Some(format!("Pod was rejected: {}", r.message)),
            qos_class: Some(kubelet_runtime::qos::pod_qos(pod).as_str().into()),
            ..Default::default()
        };
        self.deps.status.set_pod_status(pod, status);
        self.rejected.insert(uid);
        false
    }

    /// The first refusal of the admit handlers, with the device allocation in upstream's place among them
    /// (`canAdmitPod`); `others` are the admitted pods as allocated.
    async fn check_admission(&self, pod: &Arc<Pod>, others: &[Arc<Pod>]) -> Option<crate::admission::AdmitResult> {
        let (before, after) = self.deps.admit.split_at(self.deps.allocate_after.min(self.deps.admit.len()));
        if let Some(r) = before.iter().find_map(|h| h.admit(pod, others)) {
            return Some(r);
        }
        if let Some(a) = &self.deps.allocator
            && let Some(r) = a.allocate(pod, others).await
        {
            return Some(r);
        }
        after.iter().find_map(|h| h.admit(pod, others))
    }

    /// Stops `victims` for the critical `pod` on a task of its own; the loop is told when they are stopped.
    fn start_preemption(&mut self, pod: &Arc<Pod>, victims: Vec<Arc<Pod>>, requirements: Requirements) {
        let Some(preemption) = self.preemption.clone() else { return };
        let uid = kubelet_types::pod_update::pod_uid(pod);
        let stopped: Vec<PodUid> = victims.iter().map(|v| kubelet_types::pod_update::pod_uid(v)).collect();
        self.victims.extend(stopped.iter().cloned());
        self.preempting.insert(uid.clone());
        let (done, pod) = (self.preempted.0.clone(), pod.clone());
        tokio::spawn(async move {
            preemption.preempt(&pod, &victims, &requirements).await;
            let _ = done.send((uid, stopped)).await;
        });
    }

    /// A preemption ended: the critical pod starts with its latest update (unless removed meanwhile).
    fn preemption_done(&mut self, (uid, stopped): Preempted) {
        for v in &stopped {
            self.victims.remove(v);
        }
        if self.preempting.remove(&uid)
            && let Some(p) = self.pods.get(&uid).cloned()
        {
            self.dispatch(UpdateType::Create, &p, false);
        }
    }

    /// The pods admitted and still active (`GetActivePods` as admission sees it): neither refused, nor finished,
    /// nor terminal unless still stopping, nor being preempted. Pods admitted earlier in the same batch count.
    fn admitted_pods(&self, except: &PodUid) -> Vec<Arc<Pod>> {
        self.pods
            .pods()
            .filter(|p| {
                let uid = kubelet_types::pod_update::pod_uid(p);
                if &uid == except || self.rejected.contains(&uid) || self.victims.contains(&uid) {
                    return false;
                }
                let worker = self.deps.workers.phase(&uid);
                if worker == Some(WorkerPhase::Finished) {
                    return false;
                }
                let status_phase = self.deps.status.get(&uid).and_then(|s| s.phase.clone());
                let api_phase = p.status.as_ref().and_then(|s| s.phase.clone());
                let terminal = is_terminal_phase(status_phase.as_deref()) || is_terminal_phase(api_phase.as_deref());
                !terminal || worker == Some(WorkerPhase::Terminating)
            })
            .map(|p| self.deps.allocations.allocated_pod(p).0)
            .collect()
    }

    fn handle_pleg(&mut self, e: PodLifecycleEvent) {
        debug!(podUID = %e.id, event = ?e.kind, "SyncLoop (PLEG)");
        if e.kind == kubelet_types::PodLifecycleEventType::ContainerDied {
            self.clean_up_containers_in_pod(&e.id, &e.data);
        }
        if let Some(p) = self.pods.get(&e.id).cloned() {
            self.dispatch(UpdateType::Sync, &p, false);
        } else if let Some(phase) = self.deps.workers.phase(&e.id)
            && phase != WorkerPhase::Finished
        {
            let key = self
                .deps
                .cache
                .get(&e.id)
                .map(|s| PodKey { uid: e.id.clone(), name: s.name.clone(), namespace: s.namespace.clone() })
                .unwrap_or(PodKey { uid: e.id.clone(), name: String::new(), namespace: String::new() });
            self.deps.workers.update_pod(UpdatePodOptions {
                update_type: UpdateType::Sync,
                key,
                pod: None,
                grace_override: None,
                removed: false,
                status: None,
            });
        }
    }

    /// A container of the pod died (`cleanUpContainersInPod`): its older dead instances go, and every dead
    /// container of a pod whose content may go (evicted, or deleted and stopped).
    fn clean_up_containers_in_pod(&self, uid: &PodUid, died: &str) {
        let (Some(deletor), Some(status)) = (&self.deletor, self.deps.cache.get(uid)) else { return };
        let lookup = |u: &PodUid| self.pods.get(u).cloned();
        let states = crate::gc::PodStates {
            pod: &lookup,
            workers: &self.deps.workers,
            status: &self.deps.status,
            synced: self.deps.sources_ready.all_ready(),
        };
        use kubelet_runtime::container_gc::PodRemoval;
        // Not while the pod is being stopped: its final status is read from its containers after the kill (the
        // stopped pod's own cleanup removes them once that status is out).
        let stopping = self.deps.workers.phase(uid) == Some(WorkerPhase::Terminating);
        deletor.container_died(died, &status, states.content_removable(uid) && !stopping);
    }

    /// A probe result changed (`handleProbeSync`): a readiness or startup verdict goes into the pod's status at once
    /// (`SetContainerReadiness`, `SetContainerStartup`), and the pod is synced so the rest of its status and, for a
    /// failed liveness or startup probe, its containers follow. A liveness success changes nothing.
    fn handle_probe(&mut self, u: ProbeUpdate) {
        if u.probe == ProbeType::Liveness && u.result != ProbeResult::Failure {
            return;
        }
        debug!(podUID = %u.pod_uid, containerID = %u.container_id, probe = %u.probe, result = ?u.result, "SyncLoop (probe)");
        if let Some(p) = self.pods.get(&u.pod_uid).cloned() {
            let ok = u.result == ProbeResult::Success;
            match u.probe {
                ProbeType::Readiness => self.deps.status.set_container_readiness(&p, &u.container_id, ok),
                ProbeType::Startup => self.deps.status.set_container_startup(&p, &u.container_id, ok),
                ProbeType::Liveness => {}
            }
            self.dispatch(UpdateType::Sync, &p, false);
        }
    }

    /// Starts a mirror pod reconciliation unless one is still running.
    fn reconcile_mirrors(&mut self) {
        let Some(client) = self.deps.mirror.clone() else { return };
        if self.mirror_task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let statics: HashMap<(String, String), Arc<Pod>> = self
            .pods
            .pods()
            .filter(|p| kubelet_types::pod_update::is_static_pod(p))
            .map(|p| (full_name(p), p.clone()))
            .collect();
        let mirrors = self.mirrors.clone();
        self.mirror_task = Some(tokio::spawn(crate::mirror::reconcile(client, statics, mirrors)));
    }

    /// `HandlePodCleanups`.
    fn housekeeping(&mut self) {
        if !self.deps.sources_ready.all_ready() {
            debug!("skipping housekeeping: not every pod source is ready");
            return;
        }
        self.ticks += 1;
        let desired: HashSet<PodUid> = self.pods.pods().map(|p| kubelet_types::pod_update::pod_uid(p)).collect();
        self.deps.workers.forget_finished(&|u| desired.contains(u));
        self.deps.probes.cleanup_pods(&desired);
        let mut known: HashSet<PodUid> = self.deps.workers.known().into_iter().collect();
        // Desired pods no worker knows: a static pod whose manifest came back unchanged (same UID) after it was
        // stopped; it starts again (upstream: "likely due to UID reuse").
        let restart: Vec<Arc<Pod>> = self
            .pods
            .pods()
            .filter(|p| {
                let uid = kubelet_types::pod_update::pod_uid(p);
                !known.contains(&uid) && !self.rejected.contains(&uid) && !self.preempting.contains(&uid)
            })
            .cloned()
            .collect();
        for p in &restart {
            info!(pod = %kubelet_types::pod_update::pod_ref(p), podUID = %kubelet_types::pod_update::pod_uid(p), "pod will be restarted: it is desired and not known to the pod workers (UID reused)");
            self.dispatch(UpdateType::Create, p, false);
            known.insert(kubelet_types::pod_update::pod_uid(p));
        }

        // Pods the runtime has that no source wants and no worker handles: stop and remove them.
        let runtime_pods = self.deps.cache.statuses();
        for st in &runtime_pods {
            if desired.contains(&st.id) || known.contains(&st.id) {
                continue;
            }
            info!(pod = %format!("{}/{}", st.namespace, st.name), podUID = %st.id, "stopping and removing orphaned pod");
            self.deps.workers.update_pod(UpdatePodOptions {
                update_type: UpdateType::Kill,
                key: PodKey { uid: st.id.clone(), name: st.name.clone(), namespace: st.namespace.clone() },
                pod: None,
                grace_override: None,
                removed: true,
                status: None,
            });
        }
        let active: HashSet<PodUid> =
            desired.iter().chain(known.iter()).chain(runtime_pods.iter().map(|s| &s.id)).cloned().collect();

        // Leftover pod directories and cgroups of pods that are gone entirely, once the runtime's pods are known
        // (before the PLEG's first relist a pod still running would look gone).
        // The directories are listed now, against what is active now (a pod added later has a new UID); their
        // removal runs beside the loop, one pass at a time.
        let idle = self.orphans_task.as_ref().is_none_or(|t| t.is_finished());
        let rd = if idle && self.deps.cache.is_primed() { std::fs::read_dir(&self.deps.pods_dir).ok() } else { None };
        let orphans: Vec<(PodUid, std::path::PathBuf)> = rd
            .into_iter()
            .flat_map(|rd| rd.flatten())
            .map(|e| (PodUid(e.file_name().to_string_lossy().into_owned()), e.path()))
            .filter(|(uid, _)| !active.contains(uid))
            .collect();
        if !orphans.is_empty() {
            let volumes = self.deps.volumes.clone();
            // A pod that comes back meanwhile (a static pod's manifest restored: same UID) keeps its directory.
            let desired = self.deps.pods_out.subscribe();
            self.orphans_task = Some(tokio::spawn(async move {
                for (uid, path) in orphans {
                    if desired.borrow().iter().any(|p| kubelet_types::pod_update::pod_uid(p) == uid) {
                        continue;
                    }
                    info!(podUID = %uid, path = %path.display(), "removing orphaned pod directory");
                    if let Err(err) = volumes.unmount_pod(&uid).await {
                        warn!(podUID = %uid, error = %err, "unable to tear down volumes of an orphaned pod; will retry");
                        continue;
                    }
                    if let Err(err) = std::fs::remove_dir_all(&path) {
                        warn!(podUID = %uid, error = %err, "unable to remove orphaned pod directory");
                    }
                }
            }));
        }
        // The same for user namespace ranges (one a running pod uses must never be handed out) and cgroups.
        if self.deps.cache.is_primed() {
            self.deps.runtime.cleanup_user_namespaces(&active);
            // Allocations and actuated resources of pods gone entirely (RemoveOrphanedPods).
            let keep: HashSet<String> = active.iter().map(|u| u.as_str().to_string()).collect();
            self.deps.allocations.retain(&keep);
            self.deps.runtime.forget_actuated_except(&keep);
            for uid in self.deps.cgroups.list_pods() {
                if !active.contains(&uid) {
                    info!(podUID = %uid, "removing orphaned pod cgroup");
                    let _ = self.deps.cgroups.destroy_pod(&uid);
                }
            }
        }
        self.deps.runtime.gc_backoff();
        self.reconcile_mirrors();

        if self.ticks.is_multiple_of(CONTAINER_GC_TICKS) {
            self.collect_containers();
        }
    }

    /// Starts a container garbage collection pass on its own task, unless the last one still runs: as upstream's
    /// (`StartGarbageCollection`), it runs beside the loop, so a runtime call that hangs (for one pod's container)
    /// holds back the collection only, never the pods' updates and events. It sees the desired pods as of now.
    fn collect_containers(&mut self) {
        if self.gc_task.as_ref().is_some_and(|t| !t.is_finished()) {
            debug!("container garbage collection still running; skipping this period");
            return;
        }
        let pods: HashMap<PodUid, Arc<Pod>> =
            self.pods.pods().map(|p| (kubelet_types::pod_update::pod_uid(p), p.clone())).collect();
        let (runtime, workers, status) =
            (self.deps.runtime.clone(), self.deps.workers.clone(), self.deps.status.clone());
        let (recorder, node) = (self.deps.recorder.clone(), self.deps.node_name.clone());
        self.gc_task = Some(tokio::spawn(async move {
            let lookup = |uid: &PodUid| pods.get(uid).cloned();
            let states = crate::gc::PodStates { pod: &lookup, workers: &workers, status: &status, synced: true };
            let policy = kubelet_runtime::container_gc::GcPolicy::default();
            if let Err(errors) = runtime.garbage_collect(policy, true, false, &states).await {
                let message = errors.join("; ");
                warn!(error = %message, "container garbage collection failed");
                let node = crate::nodestatus::manager::node_reference(&node);
                recorder.event(&node, WARNING, "ContainerGCFailed", message);
            }
        }));
    }
}
