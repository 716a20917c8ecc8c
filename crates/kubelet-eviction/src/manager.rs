//! The eviction manager (`pkg/kubelet/eviction/eviction_manager.go`).
//!
//! [`EvictionManager::run`] synchronizes every monitoring period (10 s), and at once when the memory-pressure
//! notifier wakes it. One pass: take the figures, find the thresholds crossed (keeping those not yet reclaimed by
//! their minimum reclaim), track when each was first seen and when each node condition was last seen, report a
//! condition until `evictionPressureTransitionPeriod` has passed without it, act on the thresholds whose grace
//! period is over and whose figures are new. Local storage limits (emptyDir `sizeLimit`, pod and container
//! `ephemeral-storage` limits) evict first. Otherwise the most urgent threshold (memory first) is reclaimed:
//! node-level reclaim (dead containers, unused images) first, and if that was not enough, one pod per pass, ranked
//! as upstream; critical pods are never evicted. After an eviction the manager waits (up to 30 s) for the pod to be
//! cleaned up (stopped, volumes and cgroup gone) and synchronizes again at once on new figures. A pod evicted for
//! disk leaves its containers' writable layers behind until they are removed, and the runtime frees a removed
//! layer a moment later (containerd's garbage collection, which may wait seconds): the next pass's node-level
//! reclaim removes them and, after an eviction for the same signal, gives the runtime up to [`RELEASE_TIMEOUT`]
//! to release the space before it judges whether another pod must go, so that no pod pays for usage already
//! evicted. (The pods' own figures cannot tell when: the runtime measures writable layers every few seconds.) A failed stats read skips the pass; errors never end the loop.
//! Ends when cancelled.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_types::events::{Recorder, WARNING, pod_reference};
use kubelet_types::pod_update::pod_ref;
use kubelet_types::{Clock, Pod};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::rank::{eviction_message, rank};
use crate::stats::{ActivePods, EvictionStatus, NodeReclaimer, NodeStats, PodKiller, PodUsage, StatsSource};
use crate::threshold::{NodeCondition, Observations, Resource, Signal, Threshold, thresholds_met};

/// Upstream's `evictionMonitoringPeriod`.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// How long to wait for an evicted pod to be cleaned up (`podCleanupTimeout`).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the cleanup is checked (`podCleanupPollFreq`).
pub const POD_CLEANUP_POLL: Duration = Duration::from_secs(1);
/// How long node-level reclaim waits for an evicted pod's space to show as released.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the figures are read meanwhile.
pub const RELEASE_POLL: Duration = Duration::from_millis(500);
/// An eviction older than this is not waited for (the pressure went away meanwhile).
const RELEASE_MAX_AGE: Duration = Duration::from_secs(120);
/// How long a disk ranking waits for writable layer figures measured after the threshold was crossed.
pub const FRESH_FIGURES_TIMEOUT: Duration = Duration::from_secs(30);
/// The grace period of hard evictions (`immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_GRACE_SECONDS: i64 = 1;
/// The reason of evicted pods and of refusals under pressure.
pub const REASON: &str = "Evicted";

/// Settings.
#[derive(Debug, Clone)]
pub struct EvictionConfig {
    /// Every threshold (see [`crate::parse_thresholds`]).
    pub thresholds: Vec<Threshold>,
    /// `evictionPressureTransitionPeriod`.
    pub pressure_transition_period: Duration,
    /// `evictionMaxPodGracePeriod` (soft evictions).
    pub max_pod_grace_period: i64,
    /// `localStorageCapacityIsolation`.
    pub local_storage_capacity_isolation: bool,
    /// How often a pass runs without a notification.
    pub monitoring_period: Duration,
}

/// What the manager talks to.
pub struct EvictionDeps {
    /// Figures.
    pub stats: Arc<dyn StatsSource>,
    /// Pods.
    pub pods: Arc<dyn ActivePods>,
    /// Stops pods.
    pub killer: Arc<dyn PodKiller>,
    /// Frees node-level resources.
    pub reclaimer: Arc<dyn NodeReclaimer>,
    /// Events.
    pub recorder: Arc<dyn Recorder>,
    /// The node, for its events.
    pub node_ref: ObjectReference,
    /// Wall clock (the age of the figures).
    pub clock: Arc<dyn Clock>,
    /// Wake-ups of the memory-pressure notifier (None: polling only).
    pub wakeups: Option<mpsc::Receiver<()>>,
}

/// The conditions the node reports and admission reads; cheap to share.
#[derive(Debug, Default)]
pub struct PressureState {
    conditions: Mutex<BTreeSet<NodeCondition>>,
}

impl PressureState {
    /// A state with `conditions` in force (a node that starts under pressure; tests).
    pub fn with_conditions(conditions: impl IntoIterator<Item = NodeCondition>) -> Self {
        Self { conditions: Mutex::new(conditions.into_iter().collect()) }
    }

    /// The pressure conditions in force.
    pub fn conditions(&self) -> BTreeSet<NodeCondition> {
        self.conditions.lock().unwrap().clone()
    }

    /// Whether `c` is in force.
    pub fn has(&self, c: NodeCondition) -> bool {
        self.conditions.lock().unwrap().contains(&c)
    }

    fn set(&self, c: BTreeSet<NodeCondition>) -> bool {
        let mut cur = self.conditions.lock().unwrap();
        let changed = *cur != c;
        *cur = c;
        changed
    }
}

/// The manager.
pub struct EvictionManager {
    cfg: EvictionConfig,
    d: EvictionDeps,
    state: Arc<PressureState>,
    first_observed: HashMap<(Signal, bool), (Threshold, Instant)>,
    condition_last_observed: HashMap<NodeCondition, Instant>,
    thresholds_met: Vec<Threshold>,
    last_observations: Observations,
    /// When a pod was last evicted for each disk signal: its space is expected back.
    releasing: HashMap<Signal, Instant>,
    /// Wall time each signal's threshold was first seen met, while it is.
    crossed_at: HashMap<Signal, std::time::SystemTime>,
    /// The last pass waited for new figures: the next one runs after [`RELEASE_POLL`], not a whole period.
    retry_soon: bool,
}

/// The figures of one pod, by UID.
fn usage_of<'a>(stats: &'a NodeStats) -> impl Fn(&Pod) -> Option<PodUsage> + 'a {
    move |p: &Pod| stats.pods.get(p.metadata.uid.as_deref().unwrap_or("")).cloned()
}

impl EvictionManager {
    /// A manager; its [`PressureState`] is shared with node status and admission.
    pub fn new(cfg: EvictionConfig, d: EvictionDeps) -> Self {
        Self {
            cfg,
            d,
            state: Arc::new(PressureState::default()),
            first_observed: HashMap::new(),
            condition_last_observed: HashMap::new(),
            thresholds_met: vec![],
            last_observations: HashMap::new(),
            releasing: HashMap::new(),
            crossed_at: HashMap::new(),
            retry_soon: false,
        }
    }

    /// Sets the notifier's wake-ups (tests).
    #[cfg(test)]
    pub(crate) fn d_wakeups(&mut self, rx: mpsc::Receiver<()>) {
        self.d.wakeups = Some(rx);
    }

    /// Shares `state` (made before the manager, for node status and admission) instead of its own.
    pub fn with_state(mut self, state: Arc<PressureState>) -> Self {
        self.state = state;
        self
    }

    /// The shared conditions.
    pub fn state(&self) -> Arc<PressureState> {
        self.state.clone()
    }

    /// Runs until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        if self.cfg.thresholds.is_empty() && !self.cfg.local_storage_capacity_isolation {
            info!("eviction manager: no thresholds; nothing to do");
            return;
        }
        let mut wakeups = self.d.wakeups.take();
        loop {
            let evicted = tokio::select! {
                _ = cancel.cancelled() => return,
                e = self.synchronize() => e,
            };
            if !evicted.is_empty() {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = self.wait_for_cleanup(&evicted) => {},
                }
                continue;
            }
            let period =
                if std::mem::take(&mut self.retry_soon) { RELEASE_POLL * 2 } else { self.cfg.monitoring_period };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
                Some(()) = async { match wakeups.as_mut() { Some(w) => w.recv().await, None => std::future::pending().await } } => {
                    debug!("eviction manager: woken by the memory pressure notifier");
                }
            }
        }
    }

    async fn wait_for_cleanup(&self, pods: &[Arc<Pod>]) {
        let deadline = Instant::now() + POD_CLEANUP_TIMEOUT;
        loop {
            if pods.iter().all(|p| self.d.pods.cleaned_up(p)) {
                info!(pods = ?pods.iter().map(|p| pod_ref(p)).collect::<Vec<_>>(), "eviction manager: pods successfully cleaned up");
                return;
            }
            if Instant::now() >= deadline {
                warn!(pods = ?pods.iter().map(|p| pod_ref(p)).collect::<Vec<_>>(), "eviction manager: timed out waiting for pods to be cleaned up");
                return;
            }
            tokio::time::sleep(POD_CLEANUP_POLL).await;
        }
    }

    /// One pass (`synchronize`); returns the pods evicted.
    pub async fn synchronize(&mut self) -> Vec<Arc<Pod>> {
        let active = self.d.pods.active_pods();
        // The pods' figures only when a pod has a local storage limit to check; fetched later if pods must be ranked.
        let with_pods = self.cfg.local_storage_capacity_isolation && active.iter().any(|p| crate::local::has_limits(p));
        let mut stats = match self.d.stats.node_stats(with_pods).await {
            Ok(s) => s,
            Err(e) => {
                error!(error = %e, "eviction manager: failed to get summary stats");
                return vec![];
            }
        };
        let observations = stats.observations.clone();
        let mut met = thresholds_met(&self.cfg.thresholds, &observations, false);
        if !self.thresholds_met.is_empty() {
            for t in thresholds_met(&self.thresholds_met, &observations, true) {
                if !met.iter().any(|m| m.key() == t.key()) {
                    met.push(t);
                }
            }
        }
        let now = Instant::now();
        let mut first: HashMap<(Signal, bool), (Threshold, Instant)> = HashMap::new();
        for t in &met {
            let at = self.first_observed.get(&t.key()).map(|(_, at)| *at).unwrap_or(now);
            first.insert(t.key(), (t.clone(), at));
        }
        let mut last_observed = self.condition_last_observed.clone();
        for t in &met {
            last_observed.insert(t.signal.condition(), now);
        }
        let conditions: BTreeSet<NodeCondition> = last_observed
            .iter()
            .filter(|(_, at)| now.duration_since(**at) < self.cfg.pressure_transition_period)
            .map(|(c, _)| *c)
            .collect();
        if self.state.set(conditions.clone()) {
            info!(conditions = ?conditions.iter().map(|c| c.as_str()).collect::<Vec<_>>(), "eviction manager: node pressure conditions changed");
        }
        let mut actionable: Vec<Threshold> = first
            .values()
            .filter(|(t, at)| {
                let waited = now.duration_since(*at);
                if waited < t.grace_period {
                    debug!(threshold = %t, waited = ?waited, "eviction manager: eviction criteria not yet met");
                    return false;
                }
                true
            })
            .map(|(t, _)| t.clone())
            .collect();
        actionable.sort_by_key(|t| (t.signal, !t.is_hard()));
        self.first_observed = first;
        let wall = self.d.clock.now();
        self.crossed_at.retain(|s, _| met.iter().any(|t| t.signal == *s));
        for t in &met {
            self.crossed_at.entry(t.signal).or_insert(wall);
        }
        self.condition_last_observed = last_observed;
        self.thresholds_met = actionable.clone();
        // Only thresholds whose figures changed since the last pass act (`thresholdsUpdatedStats`).
        let actionable: Vec<Threshold> = actionable
            .into_iter()
            .filter(|t| {
                let Some(o) = observations.get(&t.signal) else { return false };
                match (self.last_observations.get(&t.signal).and_then(|l| l.time), o.time) {
                    (Some(last), Some(cur)) => cur > last,
                    _ => true,
                }
            })
            .collect();
        self.last_observations = observations.clone();

        if self.cfg.local_storage_capacity_isolation {
            let evicted = self.local_storage_eviction(&active, &stats).await;
            if !evicted.is_empty() {
                return evicted;
            }
        }
        // Memory first, then signals the manager can reclaim (`byEvictionPriority`).
        let Some(to_reclaim) = actionable.iter().find(|t| t.signal.is_memory()).or_else(|| actionable.first()).cloned()
        else {
            debug!("eviction manager: no resources are starved");
            return vec![];
        };
        let resource = to_reclaim.signal.resource();
        info!(resourceName = %resource, "eviction manager: attempting to reclaim");
        self.d.recorder.event(
            &self.d.node_ref,
            WARNING,
            "EvictionThresholdMet",
            format!("Attempting to reclaim {resource}"),
        );
        if self.reclaim_node_level(to_reclaim.signal, &stats).await {
            info!(resourceName = %resource, "eviction manager: able to reduce resource pressure without evicting pods");
            return vec![];
        }
        info!(resourceName = %resource, "eviction manager: must evict pod(s) to reclaim");
        let disk = matches!(resource, Resource::EphemeralStorage | Resource::Inodes);
        if disk {
            // The runtime's writable layer figures are reused for minutes otherwise.
            self.d.stats.refresh_writable_layers().await;
        }
        if !with_pods || disk {
            match self.d.stats.node_stats(true).await {
                Ok(s) => stats.pods = s.pods,
                Err(e) => {
                    error!(error = %e, "eviction manager: failed to get the pods' stats");
                    return vec![];
                }
            }
        }
        if disk && self.layers_measured_before_crossing(to_reclaim.signal, &active, &stats) {
            self.retry_soon = true;
            return vec![];
        }
        let mut ranked = active;
        let usage = usage_of(&stats);
        rank(&mut ranked, to_reclaim.signal, &usage, stats.dedicated_image_fs);
        debug!(pods = ?ranked.iter().map(|p| pod_ref(p)).collect::<Vec<_>>(), "eviction manager: pods ranked for eviction");
        let wall = self.d.clock.now();
        for t in &actionable {
            if let Some(at) = observations.get(&t.signal).and_then(|o| o.time) {
                let age = wall.duration_since(at).unwrap_or_default().as_secs_f64();
                kubelet_metrics::kubelet::EVICTION_STATS_AGE.observe(&[t.signal.as_str()], age);
            }
        }
        for pod in ranked {
            let grace = if to_reclaim.is_hard() {
                IMMEDIATE_GRACE_SECONDS
            } else {
                let own = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
                own.map_or(self.cfg.max_pod_grace_period, |g| g.min(self.cfg.max_pod_grace_period))
            };
            let (message, annotations) =
                eviction_message(resource, &pod, usage(&pod).as_ref(), &actionable, &observations);
            let status =
                EvictionStatus { reason: REASON.into(), message: message.clone(), disruption_message: Some(message) };
            if self.evict_pod_annotated(&pod, grace, status, &annotations).await {
                kubelet_metrics::kubelet::EVICTIONS.inc(&[to_reclaim.signal.as_str()]);
                if matches!(resource, Resource::EphemeralStorage | Resource::Inodes) {
                    self.releasing.insert(to_reclaim.signal, Instant::now());
                }
                return vec![pod];
            }
        }
        info!("eviction manager: unable to evict any pods from the node");
        vec![]
    }

    /// Frees node-level resources for `signal` and tells whether that resolved every threshold with its minimum
    /// reclaim (`reclaimNodeLevelResources`). Memory and PIDs have nothing to reclaim.
    async fn reclaim_node_level(&mut self, signal: Signal, stats: &NodeStats) -> bool {
        let (containers, images) = match signal {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable | Signal::PidAvailable => return false,
            // With a dedicated image filesystem, nodefs pressure has nothing to reclaim but logs (left to rotation).
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree if stats.dedicated_image_fs => return false,
            _ => (true, true),
        };
        let resource = signal.resource();
        let before = stats.observations.get(&signal).map(|o| o.available);
        if containers {
            match self.d.reclaimer.delete_unused_containers().await {
                Ok(n) => {
                    info!(resourceName = %resource, containersRemoved = n, "eviction manager: unused containers deleted")
                }
                Err(e) => {
                    info!(resourceName = %resource, error = %e, "eviction manager: unexpected error when attempting to reduce resource pressure")
                }
            }
        }
        if images {
            match self.d.reclaimer.delete_unused_images().await {
                Ok(freed) => {
                    info!(resourceName = %resource, bytesFreed = freed, "eviction manager: unused images deleted")
                }
                Err(e) => {
                    info!(resourceName = %resource, error = %e, "eviction manager: unexpected error when attempting to reduce resource pressure")
                }
            }
        }
        let resolved = self.await_release(signal).await;
        if let (Some(before), Some(after)) = (before, resolved.1) {
            let unit = if resource == Resource::Inodes { "inodes" } else { "bytes" };
            info!(resourceName = %resource, freed = (after - before).max(0), unit, "eviction manager: node-level reclaim freed");
        }
        resolved.0
    }

    /// Whether a pod's writable layer was last measured before `signal`'s threshold was crossed (the runtime
    /// measures them every few seconds): ranked on such figures, a pod that has just written gigabytes looks
    /// empty and a bystander goes in its place. The pass then evicts nothing and the next one, a second later,
    /// ranks on new figures, unless the runtime has not measured for [`FRESH_FIGURES_TIMEOUT`] since the crossing.
    fn layers_measured_before_crossing(&self, signal: Signal, active: &[Arc<Pod>], stats: &NodeStats) -> bool {
        let Some(crossed) = self.crossed_at.get(&signal).copied() else { return false };
        let waited = self.d.clock.now().duration_since(crossed).unwrap_or_default();
        let stale: Vec<String> = active
            .iter()
            .filter(|p| {
                let usage = stats.pods.get(p.metadata.uid.as_deref().unwrap_or(""));
                usage.is_some_and(|u| u.containers.iter().any(|c| c.rootfs_time.is_some_and(|t| t < crossed)))
            })
            .map(|p| pod_ref(p))
            .collect();
        if stale.is_empty() {
            return false;
        }
        if waited >= FRESH_FIGURES_TIMEOUT {
            warn!(resourceName = %signal.resource(), pods = ?stale, "eviction manager: ranking on writable layer figures measured before the threshold was crossed");
            return false;
        }
        info!(resourceName = %signal.resource(), pods = ?stale, "eviction manager: waiting for the runtime to measure the writable layers written since the threshold was crossed");
        true
    }

    /// Reads the figures after node-level reclaim; after an eviction for `signal` within [`RELEASE_MAX_AGE`],
    /// again every [`RELEASE_POLL`] until every threshold is resolved, at most [`RELEASE_TIMEOUT`] (the runtime
    /// frees a removed writable layer after the removal). Returns whether the thresholds are resolved and the
    /// signal's last figure.
    async fn await_release(&mut self, signal: Signal) -> (bool, Option<i64>) {
        let start = Instant::now();
        let waiting = self.releasing.remove(&signal).is_some_and(|at| start.duration_since(at) < RELEASE_MAX_AGE);
        loop {
            let after = match self.d.stats.node_stats(false).await {
                Ok(after) => after,
                Err(e) => {
                    error!(error = %e, "eviction manager: failed to get summary stats after resource reclaim");
                    return (false, None);
                }
            };
            let available = after.observations.get(&signal).map(|o| o.available);
            if thresholds_met(&self.cfg.thresholds, &after.observations, true).is_empty() {
                return (true, available);
            }
            if !waiting {
                return (false, available);
            }
            if start.elapsed() >= RELEASE_TIMEOUT {
                info!(resourceName = %signal.resource(), waited = ?start.elapsed(), "eviction manager: pressure remains after the evicted pods' space was released");
                return (false, available);
            }
            debug!(resourceName = %signal.resource(), available = ?available, "eviction manager: waiting for the runtime to release the evicted pods' space");
            tokio::time::sleep(RELEASE_POLL).await;
        }
    }

    /// Evicts `pod` unless it is critical (`evictPod`); true when the kill was issued.
    pub(crate) async fn evict_pod_annotated(
        &self,
        pod: &Arc<Pod>,
        grace: i64,
        status: EvictionStatus,
        annotations: &[(String, String)],
    ) -> bool {
        if kubelet_types::qos::is_critical_pod(pod) {
            error!(pod = %pod_ref(pod), "eviction manager: cannot evict a critical pod");
            return false;
        }
        self.d.recorder.event(&pod_reference(pod), WARNING, REASON, status.message.clone());
        info!(pod = %pod_ref(pod), podUID = pod.metadata.uid.as_deref().unwrap_or(""), message = %status.message, annotations = ?annotations, gracePeriod = grace, "evicting pod");
        match self.d.killer.kill(pod, grace, status).await {
            Ok(()) => info!(pod = %pod_ref(pod), "eviction manager: pod is evicted successfully"),
            Err(e) => error!(pod = %pod_ref(pod), error = %e, "eviction manager: pod failed to evict"),
        }
        true
    }
}

impl EvictionManager {
    /// Evicts `pod` without event annotations.
    pub(crate) async fn evict_pod(&self, pod: &Arc<Pod>, grace: i64, status: EvictionStatus) -> bool {
        self.evict_pod_annotated(pod, grace, status, &[]).await
    }
}

impl PressureState {
    /// The eviction admit handler (`managerImpl.Admit`): without pressure every pod is admitted, and critical pods
    /// always are. Under memory pressure alone, only BestEffort pods are refused, unless they tolerate the
    /// `node.kubernetes.io/memory-pressure` taint; any other pressure refuses every pod. Returns the refusal's
    /// reason and message.
    pub fn admit(&self, pod: &Pod) -> Option<(String, String)> {
        let conditions = self.conditions();
        if conditions.is_empty() || kubelet_types::qos::is_critical_pod(pod) {
            return None;
        }
        if conditions.len() == 1 && conditions.contains(&NodeCondition::MemoryPressure) {
            if kubelet_types::qos::pod_qos(pod) != kubelet_types::qos::QosClass::BestEffort {
                return None;
            }
            let taint = k8s_openapi::api::core::v1::Taint {
                key: "node.kubernetes.io/memory-pressure".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            };
            let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
            if kubelet_types::scheduling::tolerations_tolerate(tolerations, &taint) {
                return None;
            }
        }
        let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
        Some((REASON.into(), format!("The node had condition: [{}]. ", names.join(" "))))
    }
}
