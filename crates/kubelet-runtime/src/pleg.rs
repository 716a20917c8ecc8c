//! The generic pod lifecycle event generator (`pkg/kubelet/pleg/generic.go`).
//!
//! [`GenericPleg::run`] relists every pod from the runtime each `relist_period` (1 s): `ListPodSandbox` and
//! `ListContainers` and nothing else while nothing changes. It compares every container's and sandbox's state with
//! the previous relist, refreshes the [`PodCache`] entry of the pods that changed (`GetPodStatus`) and sends their
//! events to the sync loop. A change the pod's worker made and inspected itself is already in the cache and is not
//! inspected again; a change seen while the worker is changing the pod is left to the worker's own inspection and
//! looked at again (its events sent) at the next relist, at most three relists later. A failed inspection marks
//! the entry stale and is retried at the next relist; after each relist the cache forgets pods the runtime no longer
//! has. A relist that fails (runtime down) is logged and retried at the next period; nothing is lost because the
//! next successful relist compares against the last good one. [`PlegHealth`] reports unhealthy when no relist has
//! completed for 3 minutes, as upstream. The task ends when its cancellation token fires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet_types::{ContainerState, PodLifecycleEvent, PodLifecycleEventType, PodUid, SandboxState};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::{PodCache, RuntimeManager};

/// Relist period (`genericPlegRelistPeriod`).
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// A relist older than this makes the PLEG unhealthy (`genericPlegRelistThreshold`).
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);

/// PLEG's view of one container or sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlegState {
    Running,
    Exited,
    Unknown,
}

/// Health of the PLEG, shared with the healthz handler and the node status.
#[derive(Debug)]
pub struct PlegHealth {
    last_relist: Mutex<Instant>,
    threshold: Duration,
}

impl PlegHealth {
    /// Healthy as of now.
    pub fn new(threshold: Duration) -> Self {
        Self { last_relist: Mutex::new(Instant::now()), threshold }
    }

    fn mark(&self) {
        *self.last_relist.lock().unwrap() = Instant::now();
    }

    /// `Ok` while the last relist is recent, else upstream's message.
    pub fn healthy(&self) -> Result<(), String> {
        let since = self.last_relist.lock().unwrap().elapsed();
        if since > self.threshold {
            return Err(format!("pleg was last seen active {since:?} ago; threshold is {:?}", self.threshold));
        }
        Ok(())
    }
}

/// The generic PLEG.
pub struct GenericPleg {
    manager: Arc<RuntimeManager>,
    cache: Arc<PodCache>,
    events: mpsc::Sender<PodLifecycleEvent>,
    health: Arc<PlegHealth>,
    period: Duration,
    old: HashMap<PodUid, HashMap<String, PlegState>>,
    names: HashMap<PodUid, (String, String)>,
    last_relist: Option<tokio::time::Instant>,
    /// Pods whose inspection failed: inspected again at the next relist (`podsToReinspect`).
    reinspect: std::collections::HashSet<PodUid>,
    /// Events of pods whose worker was changing them, held until the next relist looked at them again, with how
    /// many relists they have waited.
    held: HashMap<PodUid, (Vec<PodLifecycleEvent>, u32)>,
}

/// Relists a change seen while the pod's worker changes the pod may wait for that worker's own inspection.
const MAX_DEFERRED_RELISTS: u32 = 3;

impl GenericPleg {
    /// A PLEG sending to `events` (bounded; a full channel drops that relist's events with a warning, as
    /// upstream, and the periodic resync repairs it).
    pub fn new(
        manager: Arc<RuntimeManager>,
        cache: Arc<PodCache>,
        events: mpsc::Sender<PodLifecycleEvent>,
        health: Arc<PlegHealth>,
        period: Duration,
    ) -> Self {
        Self {
            manager,
            cache,
            events,
            health,
            period,
            old: HashMap::new(),
            names: HashMap::new(),
            last_relist: None,
            reinspect: Default::default(),
            held: HashMap::new(),
        }
    }

    /// Relists until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.relist().await {
                warn!(error = %e, "GenericPLEG: unable to retrieve pods");
            }
        }
    }

    /// One relist: returns the events sent.
    pub async fn relist(&mut self) -> Result<Vec<PodLifecycleEvent>, kubelet_cri::CriError> {
        use kubelet_metrics::kubelet as m;
        let start = tokio::time::Instant::now();
        if let Some(prev) = self.last_relist.replace(start) {
            m::PLEG_RELIST_INTERVAL.observe(&[], (start - prev).as_secs_f64());
        }
        let pods = self.manager.get_pods(true).await?;
        self.health.mark();
        let wall = self.manager.clock().now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        m::PLEG_LAST_SEEN.set(&[], wall.as_secs() as f64);
        running_metrics(&pods);
        let mut new: HashMap<PodUid, HashMap<String, PlegState>> = HashMap::with_capacity(pods.len());
        for p in &pods {
            let mut m = HashMap::with_capacity(p.containers.len() + p.sandboxes.len());
            for c in &p.containers {
                m.insert(c.id.clone(), container_pleg_state(c.state));
            }
            for (id, st) in &p.sandboxes {
                m.insert(id.clone(), sandbox_pleg_state(*st));
            }
            self.names.insert(p.id.clone(), (p.name.clone(), p.namespace.clone()));
            new.insert(p.id.clone(), m);
        }
        let empty = HashMap::new();
        let mut all_events = vec![];
        let uids: Vec<PodUid> =
            new.keys().chain(self.old.keys()).cloned().collect::<std::collections::HashSet<_>>().into_iter().collect();
        for uid in uids {
            let old = self.old.get(&uid).unwrap_or(&empty);
            let cur = new.get(&uid).unwrap_or(&empty);
            let mut events = vec![];
            for id in old.keys().chain(cur.keys().filter(|k| !old.contains_key(*k))) {
                events.extend(generate_events(&uid, id, old.get(id).copied(), cur.get(id).copied()));
            }
            // A pod the cache lacks is inspected even without an event (a worker forgot it while the runtime still
            // had some of it).
            let retry = self.reinspect.remove(&uid) || (!cur.is_empty() && !self.cache.has(&uid));
            let (held, waited) = self.held.remove(&uid).unwrap_or_default();
            events.splice(0..0, held);
            if events.is_empty() && !retry {
                continue;
            }
            // A change the pod's worker made and inspected itself is in the cache already: no second inspection.
            if self.cache.get_fresh(&uid).is_some_and(|st| states_of(&st) == *cur) {
                all_events.extend(events);
                continue;
            }
            // The pod's worker is changing it and inspects what it did when done: look again at the next relist
            // (a few at most), and send the events then, so the worker syncs on a status that has the change.
            if !cur.is_empty() && waited < MAX_DEFERRED_RELISTS && self.cache.is_syncing(&uid) {
                self.held.insert(uid.clone(), (events, waited + 1));
                self.reinspect.insert(uid.clone());
                continue;
            }
            if !cur.is_empty() {
                let (name, ns) = self.names.get(&uid).cloned().unwrap_or_default();
                let observed = tokio::time::Instant::now();
                match self.manager.get_pod_status(&uid, &name, &ns).await {
                    Ok(st) => {
                        self.cache.set(st, observed);
                    }
                    Err(e) => {
                        warn!(podUID = %uid, error = %e, "PLEG: failed to inspect pod; will retry at the next relist");
                        self.cache.mark_stale(&uid, observed);
                        self.reinspect.insert(uid.clone());
                    }
                }
            }
            all_events.extend(events);
        }
        // Pods the runtime no longer has are forgotten (their entries observed before this relist's lists).
        self.cache.reconcile(&new, start);
        self.reinspect.retain(|u| new.contains_key(u));
        self.held.retain(|u, _| new.contains_key(u));
        self.cache.mark_primed();
        self.names.retain(|u, _| new.contains_key(u));
        self.old = new;
        for e in &all_events {
            debug!(podUID = %e.id, event = ?e.kind, data = %e.data, "PLEG event");
            if self.events.try_send(e.clone()).is_err() {
                warn!("event channel is full, discard this relist() cycle event");
                kubelet_metrics::kubelet::PLEG_DISCARD_EVENTS.inc(&[]);
                break;
            }
        }
        kubelet_metrics::kubelet::PLEG_RELIST_DURATION.observe(&[], start.elapsed().as_secs_f64());
        Ok(all_events)
    }
}

fn container_pleg_state(s: ContainerState) -> PlegState {
    match s {
        ContainerState::Running => PlegState::Running,
        ContainerState::Exited => PlegState::Exited,
        _ => PlegState::Unknown,
    }
}

fn sandbox_pleg_state(s: SandboxState) -> PlegState {
    if s == SandboxState::Ready { PlegState::Running } else { PlegState::Exited }
}

/// The states a relist would see of a cached pod status.
fn states_of(st: &kubelet_types::PodStatus) -> HashMap<String, PlegState> {
    let containers = st.container_statuses.iter().map(|c| (c.id.clone(), container_pleg_state(c.state)));
    containers.chain(st.sandbox_statuses.iter().map(|s| (s.id.clone(), sandbox_pleg_state(s.state)))).collect()
}

/// `kubelet_running_pods` (pods with a ready sandbox) and `kubelet_running_containers` per state
/// (`updateRunningPodAndContainerMetrics`; states not seen are set to 0 rather than left stale).
fn running_metrics(pods: &[kubelet_types::runtime::RuntimePod]) {
    let mut states = [("created", 0u32), ("running", 0), ("exited", 0), ("unknown", 0)];
    for p in pods {
        for c in &p.containers {
            let i = match c.state {
                ContainerState::Created => 0,
                ContainerState::Running => 1,
                ContainerState::Exited => 2,
                ContainerState::Unknown => 3,
            };
            states[i].1 += 1;
        }
    }
    for (state, n) in states {
        kubelet_metrics::kubelet::RUNNING_CONTAINERS.set(&[state], f64::from(n));
    }
    let running = pods.iter().filter(|p| p.sandboxes.iter().any(|(_, s)| *s == SandboxState::Ready)).count();
    kubelet_metrics::kubelet::RUNNING_PODS.set(&[], running as f64);
}

fn generate_events(uid: &PodUid, id: &str, old: Option<PlegState>, new: Option<PlegState>) -> Vec<PodLifecycleEvent> {
    if old == new {
        return vec![];
    }
    let ev = |kind| PodLifecycleEvent { id: uid.clone(), kind, data: id.to_string() };
    match new {
        Some(PlegState::Running) => vec![ev(PodLifecycleEventType::ContainerStarted)],
        Some(PlegState::Exited) => vec![ev(PodLifecycleEventType::ContainerDied)],
        // ContainerChanged is not reliable and nobody consumes it: upstream filters it out.
        Some(PlegState::Unknown) => vec![],
        None => match old {
            Some(PlegState::Exited) => vec![ev(PodLifecycleEventType::ContainerRemoved)],
            _ => vec![ev(PodLifecycleEventType::ContainerDied), ev(PodLifecycleEventType::ContainerRemoved)],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::{FakeRuntime, RuntimeService, api};
    use kubelet_types::TestClock;

    #[tokio::test(start_paused = true)]
    async fn relist_reports_start_death_and_removal() {
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let mgr =
            Arc::new(RuntimeManager::new(fake.clone(), fake.clone(), Default::default(), Arc::new(TestClock::fixed())));
        let cache = Arc::new(PodCache::default());
        let (tx, mut rx) = mpsc::channel(16);
        let health = Arc::new(PlegHealth::new(RELIST_THRESHOLD));
        let mut pleg = GenericPleg::new(mgr, cache.clone(), tx, health.clone(), RELIST_PERIOD);
        assert!(pleg.relist().await.unwrap().is_empty());

        let labels: std::collections::HashMap<String, String> = [
            ("io.kubernetes.pod.uid".to_string(), "u1".to_string()),
            ("io.kubernetes.container.name".to_string(), "app".to_string()),
        ]
        .into();
        let sb = fake
            .run_pod_sandbox(
                api::PodSandboxConfig {
                    labels: labels.clone(),
                    // As every sandbox the kubelet creates: the pod's identity in the metadata (what the relist reads).
                    metadata: Some(api::PodSandboxMetadata { uid: "u1".into(), ..Default::default() }),
                    ..Default::default()
                },
                "",
            )
            .await
            .unwrap();
        let cfg = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
            labels,
            ..Default::default()
        };
        let cid = fake.create_container(&sb, cfg, Default::default()).await.unwrap();
        fake.start_container(&cid).await.unwrap();
        let ev = pleg.relist().await.unwrap();
        assert_eq!(ev.iter().filter(|e| e.kind == PodLifecycleEventType::ContainerStarted).count(), 2);
        assert_eq!(rx.try_recv().unwrap().id, PodUid::from("u1"));
        assert_eq!(cache.get(&PodUid::from("u1")).unwrap().container_statuses.len(), 1);

        fake.exit_container(&cid, 1);
        let ev = pleg.relist().await.unwrap();
        assert_eq!(
            ev,
            vec![PodLifecycleEvent { id: "u1".into(), kind: PodLifecycleEventType::ContainerDied, data: cid.clone() }]
        );

        fake.remove_container(&cid).await.unwrap();
        let ev = pleg.relist().await.unwrap();
        assert_eq!(ev[0].kind, PodLifecycleEventType::ContainerRemoved);

        // A runtime outage fails the relist; three minutes of it make the PLEG unhealthy.
        fake.inject_error(
            "ListPodSandbox",
            kubelet_cri::CriError::Unavailable { op: "ListPodSandbox", message: "down".into() },
        );
        assert!(pleg.relist().await.is_err());
        assert!(health.healthy().is_ok());
        tokio::time::sleep(RELIST_THRESHOLD + Duration::from_secs(1)).await;
        assert!(health.healthy().unwrap_err().contains("pleg was last seen active"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_during_a_workers_sync_is_inspected_once_and_sent_at_the_next_relist() {
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        fake.set_record_calls(true);
        let mgr =
            Arc::new(RuntimeManager::new(fake.clone(), fake.clone(), Default::default(), Arc::new(TestClock::fixed())));
        let cache = Arc::new(PodCache::default());
        let (tx, mut rx) = mpsc::channel(16);
        let mut pleg = GenericPleg::new(
            mgr.clone(),
            cache.clone(),
            tx,
            Arc::new(PlegHealth::new(RELIST_THRESHOLD)),
            RELIST_PERIOD,
        );
        pleg.relist().await.unwrap();
        let uid = PodUid::from("u1");
        let meta = api::PodSandboxMetadata { uid: "u1".into(), name: "web".into(), ..Default::default() };
        let labels = [("io.kubernetes.pod.uid".to_string(), "u1".to_string())].into();
        let config = api::PodSandboxConfig { metadata: Some(meta), labels, ..Default::default() };
        // The worker creates the sandbox; the relist sees it meanwhile and leaves the inspection to the worker.
        let guard = cache.syncing(&uid);
        fake.run_pod_sandbox(config, "").await.unwrap();
        fake.clear_calls();
        assert!(pleg.relist().await.unwrap().is_empty(), "held while the worker syncs");
        assert_eq!(fake.count("PodSandboxStatus"), 0);
        let observed = tokio::time::Instant::now();
        let st = mgr.get_pod_status(&uid, "web", "").await.unwrap();
        assert_eq!(st.sandbox_statuses.len(), 1);
        cache.set(st, observed);
        drop(guard);
        fake.clear_calls();
        let ev = pleg.relist().await.unwrap();
        assert_eq!(ev.len(), 1, "sent at the next relist: {ev:?}");
        assert_eq!(rx.try_recv().unwrap().kind, PodLifecycleEventType::ContainerStarted);
        assert_eq!(fake.count("PodSandboxStatus"), 0, "the worker's inspection is in the cache");
        // A change nobody inspected is inspected by the relist after a sync that did not look.
        let guard = cache.syncing(&uid);
        let sb = fake.list_pod_sandbox(None).await.unwrap()[0].id.clone();
        fake.stop_pod_sandbox(&sb).await.unwrap();
        assert!(pleg.relist().await.unwrap().is_empty());
        drop(guard);
        fake.clear_calls();
        let ev = pleg.relist().await.unwrap();
        assert_eq!(ev.iter().map(|e| e.kind).collect::<Vec<_>>(), [PodLifecycleEventType::ContainerDied]);
        assert_eq!(fake.count("PodSandboxStatus"), 1, "inspected once");
        assert_eq!(cache.get(&uid).unwrap().sandbox_statuses[0].state, SandboxState::NotReady);
    }
}
