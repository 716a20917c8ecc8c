//! The generic pod lifecycle event generator (`pkg/kubelet/pleg/generic.go`), woken by the runtime's container
//! events where it streams them (the role of `pkg/kubelet/pleg/evented.go`, not its design).
//!
//! The kubelet spawns [`GenericPleg::run`]; it relists every pod from the runtime: `ListPodSandbox` and
//! `ListContainers` and nothing else while nothing changes. What triggers a relist depends on the runtime:
//!
//! - A runtime without `GetContainerEvents` (containerd 1.6 answers Unimplemented, asked once at start): a relist
//!   every `relist_period` ([`RELIST_PERIOD`], 1 s), as upstream's generic PLEG.
//! - A runtime streaming container events (containerd 2): a relist as soon as an event arrives (the events ready
//!   at once make one relist, and relists that events trigger are at least [`EVENT_RELIST_MIN_GAP`] apart), else
//!   every [`EVENTED_RELIST_PERIOD`] (60 s) as a safety net (upstream's alpha Evented PLEG waits 300 s; a change a
//!   runtime failed to announce is seen within a minute here, for 2 CRI calls a minute). The events only wake the relist: their contents are
//!   not used, the relist stays the single source of truth. While the last relist failed or left work for the next
//!   one ([`GenericPleg::has_pending_work`]: held events, pods to inspect again, inspections still running), the
//!   next relist is due after `relist_period`, as in the periodic mode.
//! - When the stream breaks (an error or its end) the PLEG logs it once, relists at once and then every
//!   `relist_period`, and opens the stream again after 1 s, doubling up to 30 s. Once it is open again it relists
//!   at once (the relist compares with the last relist, so a change made while the stream was down is not lost)
//!   and goes back to events.
//!
//! Each relist compares every container's and sandbox's state with
//! the previous relist, refreshes the [`PodCache`] entry of the pods that changed (`GetPodStatus`) and sends their
//! events to the sync loop. A change the pod's worker made and inspected itself is already in the cache and is not
//! inspected again; a change seen while the worker is changing the pod is left to the worker's own inspection and
//! looked at again (its events sent) at the next relist, at most three relists later. A failed inspection marks
//! the entry stale and is retried at the next relist; after each relist the cache forgets pods the runtime no longer
//! has. A relist that fails (runtime down) is logged and retried at the next period; nothing is lost because the
//! next successful relist compares against the last good one. [`PlegHealth`] reports unhealthy when the PLEG was
//! not seen active (a relist completed, or the event stream was opened or delivered an event) for its threshold:
//! 3 minutes in the periodic mode ([`RELIST_THRESHOLD`]), 10 minutes while the event stream is open
//! ([`EVENTED_RELIST_THRESHOLD`], as upstream's `eventedPlegRelistThreshold`).
//! The task ends when its cancellation token fires.
//!
//! Unlike upstream, which inspects the changed pods one after the other inside the relist (so each call that hangs
//! for one pod holds the whole relist for `runtimeRequestTimeout`, and a few of them add up to "PLEG is not
//! healthy", the node NotReady), the relist never waits on one pod: the changed pods are inspected concurrently and
//! the relist waits for them at most [`INSPECTION_WAIT`]. An inspection still running then goes on in the
//! background (bounded by the CRI call deadlines) while the pod's entry is marked stale and its events are held; no
//! second inspection of the pod starts meanwhile, and the relist after it finished uses its result (or inspects
//! again) and sends the events. The other pods' events, the relist period and the PLEG's health are unaffected.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kubelet_cri::{ContainerEventStream, CriError};
use kubelet_types::{ContainerState, PodLifecycleEvent, PodLifecycleEventType, PodUid, SandboxState};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{PodCache, RuntimeManager};

/// Relist period (`genericPlegRelistPeriod`).
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// A relist older than this makes the PLEG unhealthy (`genericPlegRelistThreshold`).
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// How long a relist waits for the inspections it started; one still running goes on without holding the relist.
pub const INSPECTION_WAIT: Duration = Duration::from_secs(1);
/// Relist period while the runtime streams container events, a safety net (upstream's `eventedPlegRelistPeriod`
/// is 300 s).
pub const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(60);
/// How long the relist stays periodic after the event stream came back (the runtime restarted): what changed while
/// it came back may never be announced.
pub const RECONNECT_SETTLE: Duration = Duration::from_secs(60);
/// The health threshold while the runtime streams container events (`eventedPlegRelistThreshold`).
pub const EVENTED_RELIST_THRESHOLD: Duration = Duration::from_secs(600);
/// Shortest time between the starts of two relists that events trigger: a node starting many pods at once
/// relists at most this often, not once per event.
pub const EVENT_RELIST_MIN_GAP: Duration = Duration::from_millis(100);
/// First and longest wait before opening a broken event stream again.
const STREAM_RETRY_MIN: Duration = Duration::from_secs(1);
const STREAM_RETRY_MAX: Duration = Duration::from_secs(30);

/// A pod inspection (`GetPodStatus`) running on its own task.
struct Inspection {
    /// When it began (the status it returns is the runtime's as of then).
    observed: Instant,
    task: tokio::task::JoinHandle<kubelet_cri::CriResult<kubelet_types::PodStatus>>,
}

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
    threshold: Mutex<Duration>,
}

impl PlegHealth {
    /// Healthy as of now, unhealthy once not seen active for `threshold`.
    pub fn new(threshold: Duration) -> Self {
        Self { last_relist: Mutex::new(Instant::now()), threshold: Mutex::new(threshold) }
    }

    /// The PLEG was active now (a relist completed, an event arrived).
    fn mark(&self) {
        *self.last_relist.lock().unwrap() = Instant::now();
    }

    /// How long the PLEG may go unseen; the PLEG sets it when its mode changes ([`EVENTED_RELIST_THRESHOLD`] while
    /// the event stream is open, the threshold it was created with otherwise).
    pub fn set_threshold(&self, threshold: Duration) {
        *self.threshold.lock().unwrap() = threshold;
    }

    /// The current threshold.
    pub fn threshold(&self) -> Duration {
        *self.threshold.lock().unwrap()
    }

    /// `Ok` while the PLEG was seen active recently, else upstream's message.
    pub fn healthy(&self) -> Result<(), String> {
        let since = self.last_relist.lock().unwrap().elapsed();
        let threshold = self.threshold();
        if since > threshold {
            return Err(format!("pleg was last seen active {since:?} ago; threshold is {threshold:?}"));
        }
        Ok(())
    }
}

/// Where the relists' triggers come from besides the period.
enum Watch {
    /// The runtime does not stream container events: relists every period, for good.
    Unsupported,
    /// The runtime's container events, open since `since`.
    Streaming { stream: ContainerEventStream, since: Instant },
    /// The stream broke (or did not open); it is opened again at `retry`.
    Broken { retry: Instant },
}

/// What woke the PLEG.
enum Wake {
    Relist,
    /// An item of the event stream (an event's creation time, the stream's error) or its end.
    Event(Option<kubelet_cri::CriResult<i64>>),
    Reopen,
}

/// The next item of the event stream, without its contents (only the relist looks at the runtime's state); never,
/// without a stream.
/// The next event's creation time (Unix nanoseconds, as the runtime stamped it).
async fn next_event(watch: &mut Watch) -> Option<kubelet_cri::CriResult<i64>> {
    match watch {
        Watch::Streaming { stream, .. } => stream.next().await.map(|r| r.map(|ev| ev.created_at)),
        _ => std::future::pending().await,
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
    /// many relists they have waited; and events of pods whose inspection is still running.
    held: HashMap<PodUid, (Vec<PodLifecycleEvent>, u32)>,
    /// Inspections that outlasted their relist's [`INSPECTION_WAIT`], by pod.
    inflight: HashMap<PodUid, Inspection>,
    /// Whether the runtime's container events are asked for (off: the periodic relist only).
    use_events: bool,
}

impl Drop for GenericPleg {
    fn drop(&mut self) {
        for i in self.inflight.values() {
            i.task.abort();
        }
    }
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
            inflight: HashMap::new(),
            use_events: true,
        }
    }

    /// Never asks for the runtime's container events: a relist every period, as upstream's generic PLEG
    /// (`featureGates: {EventedPLEG: false}`).
    pub fn without_events(mut self) -> Self {
        self.use_events = false;
        self
    }

    /// An event made at `created_at` (Unix nanoseconds) arrived: its age
    /// (`kubelet_evented_pleg_connection_latency_seconds`).
    fn arrived(&self, created_at: i64) {
        let now = self.manager.clock().now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let age = now.as_nanos() as i64 - created_at;
        if created_at > 0 && age >= 0 {
            kubelet_metrics::kubelet::EVENTED_PLEG_CONN_LATENCY.observe(&[], age as f64 / 1e9);
        }
    }

    /// Stores the outcome of an inspection begun at `observed`: the status, or (failed) a stale entry and another
    /// inspection at the next relist.
    fn inspected(
        &mut self,
        uid: &PodUid,
        observed: Instant,
        res: Result<kubelet_cri::CriResult<kubelet_types::PodStatus>, tokio::task::JoinError>,
    ) {
        match res {
            Ok(Ok(st)) => {
                self.cache.set(st, observed);
            }
            Ok(Err(e)) => {
                warn!(podUID = %uid, error = %e, "PLEG: failed to inspect pod; will retry at the next relist");
                self.cache.mark_stale(uid, observed);
                self.reinspect.insert(uid.clone());
            }
            Err(e) => {
                warn!(podUID = %uid, error = %e, "PLEG: pod inspection did not complete; will retry at the next relist");
                self.cache.mark_stale(uid, observed);
                self.reinspect.insert(uid.clone());
            }
        }
    }

    /// Takes in the inspections of earlier relists that have finished since; their pods are looked at again now.
    async fn finished_inspections(&mut self) {
        let done: Vec<PodUid> =
            self.inflight.iter().filter(|(_, i)| i.task.is_finished()).map(|(u, _)| u.clone()).collect();
        for uid in done {
            let Some(i) = self.inflight.remove(&uid) else { continue };
            let res = i.task.await;
            self.inspected(&uid, i.observed, res);
            self.reinspect.insert(uid);
        }
    }

    /// Whether the last relist left work that the next one does (events held, pods to inspect again, inspections
    /// still running): that relist is then due after the period even while container events stream.
    pub fn has_pending_work(&self) -> bool {
        !self.held.is_empty() || !self.reinspect.is_empty() || !self.inflight.is_empty()
    }

    /// Relists until cancelled: on container events where the runtime streams them, else every period (see the
    /// module documentation).
    pub async fn run(mut self, cancel: CancellationToken) {
        let periodic_threshold = self.health.threshold();
        let mut backoff = STREAM_RETRY_MIN;
        // The stream opens before the first relist: a change after that relist is an event.
        let mut watch = self.open_events(&mut backoff, periodic_threshold, true).await;
        let mut reconnected = false;
        let mut due = Instant::now();
        loop {
            let retry = match &watch {
                Watch::Broken { retry } => Some(*retry),
                _ => None,
            };
            let wake = tokio::select! {
                biased;
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(due) => Wake::Relist,
                item = next_event(&mut watch) => Wake::Event(item),
                _ = tokio::time::sleep_until(retry.unwrap_or(due)), if retry.is_some() => Wake::Reopen,
            };
            match wake {
                Wake::Relist => {}
                Wake::Event(mut item) => {
                    // Every event ready now makes one relist. `lost`: the stream failed (Some(Some(error))) or
                    // ended (Some(None)).
                    let mut events = 0usize;
                    let lost = loop {
                        match item {
                            Some(Ok(created_at)) => {
                                events += 1;
                                self.arrived(created_at);
                                let Watch::Streaming { stream, .. } = &mut watch else { break None };
                                match stream.next().now_or_never() {
                                    Some(next) => item = next.map(|r| r.map(|ev| ev.created_at)),
                                    None => break None,
                                }
                            }
                            Some(Err(e)) => break Some(Some(e)),
                            None => break Some(None),
                        }
                    };
                    if events > 0 {
                        self.health.mark();
                        let now = Instant::now();
                        let earliest = self.last_relist.map_or(now, |l| (l + EVENT_RELIST_MIN_GAP).max(now));
                        due = due.min(earliest);
                        debug!(events, "container events received; relisting");
                    }
                    if let Some(end) = lost {
                        self.stream_lost(&mut watch, end, &mut backoff, periodic_threshold);
                        due = Instant::now();
                    }
                    continue;
                }
                Wake::Reopen => {
                    watch = self.open_events(&mut backoff, periodic_threshold, false).await;
                    reconnected = true;
                    if matches!(watch, Watch::Streaming { .. }) {
                        due = Instant::now();
                    }
                    continue;
                }
            }
            let start = Instant::now();
            let ok = match self.relist().await {
                Ok(_) => true,
                Err(e) => {
                    warn!(error = %e, "GenericPLEG: unable to retrieve pods");
                    false
                }
            };
            // After a reconnect (the runtime restarted) the periodic relist goes on for a while: a change the runtime
            // made while it came back may never be announced.
            let settled = match &watch {
                Watch::Streaming { since, .. } => !reconnected || since.elapsed() >= RECONNECT_SETTLE,
                _ => false,
            };
            let wait = if settled && ok && !self.has_pending_work() { EVENTED_RELIST_PERIOD } else { self.period };
            due = start + wait;
        }
    }

    /// Opens the runtime's container event stream (at start when `first`, else after it broke).
    async fn open_events(&self, backoff: &mut Duration, periodic_threshold: Duration, first: bool) -> Watch {
        if !self.use_events {
            info!(period = ?self.period, "container events are off (featureGates EventedPLEG: false); relisting every period");
            self.health.set_threshold(periodic_threshold);
            return Watch::Unsupported;
        }
        match self.manager.runtime().container_events().await {
            Ok(stream) => {
                kubelet_metrics::kubelet::EVENTED_PLEG_CONN.inc(&[]);
                info!("container events stream connected");
                self.health.set_threshold(EVENTED_RELIST_THRESHOLD);
                self.health.mark();
                Watch::Streaming { stream, since: Instant::now() }
            }
            Err(CriError::Unimplemented { .. }) => self.unsupported(periodic_threshold),
            Err(e) => {
                kubelet_metrics::kubelet::EVENTED_PLEG_CONN_ERR.inc(&[]);
                if first {
                    warn!(error = %e, "container events stream broken; relisting every second until it is back");
                } else {
                    debug!(error = %e, retry = ?*backoff, "container events stream not back yet");
                }
                let retry = Instant::now() + *backoff;
                *backoff = (*backoff * 2).min(STREAM_RETRY_MAX);
                Watch::Broken { retry }
            }
        }
    }

    /// The runtime does not stream container events (`GetContainerEvents` is Unimplemented).
    fn unsupported(&self, periodic_threshold: Duration) -> Watch {
        info!(period = ?self.period, "the runtime does not stream container events; relisting every period");
        self.health.set_threshold(periodic_threshold);
        Watch::Unsupported
    }

    /// The event stream ended (`end` None) or failed: relists every period until it is opened again.
    fn stream_lost(
        &self,
        watch: &mut Watch,
        end: Option<CriError>,
        backoff: &mut Duration,
        periodic_threshold: Duration,
    ) {
        if let Some(CriError::Unimplemented { .. }) = end {
            *watch = self.unsupported(periodic_threshold);
            return;
        }
        // A stream that lived long starts the back-off over; one that keeps breaking at once does not.
        if let Watch::Streaming { since, .. } = watch
            && since.elapsed() >= STREAM_RETRY_MAX
        {
            *backoff = STREAM_RETRY_MIN;
        }
        kubelet_metrics::kubelet::EVENTED_PLEG_CONN_ERR.inc(&[]);
        let error = end.map_or_else(|| "the runtime ended the stream".to_string(), |e| e.to_string());
        warn!(error = %error, "container events stream broken; relisting every second until it is back");
        // The stream was alive until now; from now on the relists (every period) keep the PLEG seen.
        self.health.mark();
        self.health.set_threshold(periodic_threshold);
        *watch = Watch::Broken { retry: Instant::now() + *backoff };
        *backoff = (*backoff * 2).min(STREAM_RETRY_MAX);
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
        self.finished_inspections().await;
        let empty = HashMap::new();
        let mut all_events = vec![];
        let mut inspections = vec![];
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
                // Still being inspected since an earlier relist: its events wait for that inspection, nothing here
                // waits for it.
                if self.inflight.contains_key(&uid) {
                    self.held.insert(uid.clone(), (events, waited));
                    self.reinspect.insert(uid.clone());
                    continue;
                }
                let (name, ns) = self.names.get(&uid).cloned().unwrap_or_default();
                let observed = tokio::time::Instant::now();
                let (manager, u) = (self.manager.clone(), uid.clone());
                let task = tokio::spawn(async move { manager.get_pod_status(&u, &name, &ns).await });
                inspections.push((uid, events, Inspection { observed, task }));
                continue;
            }
            all_events.extend(events);
        }
        // The relist waits for its inspections together, up to INSPECTION_WAIT; one still running goes on alone.
        let deadline = tokio::time::Instant::now() + INSPECTION_WAIT;
        for (uid, events, mut i) in inspections {
            match tokio::time::timeout_at(deadline, &mut i.task).await {
                Ok(res) => {
                    self.inspected(&uid, i.observed, res);
                    all_events.extend(events);
                }
                Err(_) => {
                    let (name, ns) = self.names.get(&uid).cloned().unwrap_or_default();
                    warn!(
                        pod = %format!("{ns}/{name}"),
                        podUID = %uid,
                        wait = ?INSPECTION_WAIT,
                        "PLEG: pod inspection is taking long; the relist goes on without it and uses it when done"
                    );
                    self.cache.mark_stale(&uid, i.observed);
                    self.reinspect.insert(uid.clone());
                    self.held.insert(uid.clone(), (events, 0));
                    self.inflight.insert(uid, i);
                }
            }
        }
        // Pods the runtime no longer has are forgotten (their entries observed before this relist's lists).
        self.cache.reconcile(&new, start);
        self.reinspect.retain(|u| new.contains_key(u));
        self.held.retain(|u, _| new.contains_key(u));
        self.inflight.retain(|u, i| {
            let keep = new.contains_key(u);
            if !keep {
                i.task.abort();
            }
            keep
        });
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
#[path = "pleg_events_tests.rs"]
mod events_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::{FakeRuntime, RuntimeService, api};
    use kubelet_types::TestClock;

    /// A PLEG on the fake runtime: the runtime, the cache, the event channel (of `capacity`) and the health.
    pub(super) fn on_fake(
        capacity: usize,
    ) -> (Arc<FakeRuntime>, Arc<PodCache>, mpsc::Receiver<PodLifecycleEvent>, Arc<PlegHealth>, GenericPleg) {
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let mgr =
            Arc::new(RuntimeManager::new(fake.clone(), fake.clone(), Default::default(), Arc::new(TestClock::fixed())));
        let cache = Arc::new(PodCache::default());
        let (tx, rx) = mpsc::channel(capacity);
        let health = Arc::new(PlegHealth::new(RELIST_THRESHOLD));
        let pleg = GenericPleg::new(mgr, cache.clone(), tx, health.clone(), RELIST_PERIOD);
        (fake, cache, rx, health, pleg)
    }

    #[tokio::test(start_paused = true)]
    async fn relist_reports_start_death_and_removal() {
        let (fake, cache, mut rx, health, mut pleg) = on_fake(16);
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

    /// A pod with a sandbox and a running container `app` in the fake; returns (sandbox, container).
    pub(super) async fn running_pod(fake: &FakeRuntime, uid: &str) -> (String, String) {
        let labels: std::collections::HashMap<String, String> = [
            ("io.kubernetes.pod.uid".to_string(), uid.to_string()),
            ("io.kubernetes.container.name".to_string(), "app".to_string()),
        ]
        .into();
        let meta = api::PodSandboxMetadata { uid: uid.into(), name: format!("pod-{uid}"), ..Default::default() };
        let config = api::PodSandboxConfig { metadata: Some(meta), labels: labels.clone(), ..Default::default() };
        let sb = fake.run_pod_sandbox(config, "").await.unwrap();
        let cfg = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
            labels,
            ..Default::default()
        };
        let cid = fake.create_container(&sb, cfg, Default::default()).await.unwrap();
        fake.start_container(&cid).await.unwrap();
        (sb, cid)
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_whose_inspection_hangs_holds_back_neither_the_relist_nor_the_other_pods() {
        let (fake, cache, mut rx, health, mut pleg) = on_fake(1000);
        let (_, stuck) = running_pod(&fake, "stuck").await;
        let (_, other) = running_pod(&fake, "other").await;
        pleg.relist().await.unwrap();
        while rx.try_recv().is_ok() {}
        let (stuck_uid, other_uid) = (PodUid::from("stuck"), PodUid::from("other"));

        // The stuck pod's container dies and cannot be inspected; the other one dies too.
        fake.hang(&stuck);
        fake.exit_container(&stuck, 137);
        fake.exit_container(&other, 1);
        let start = Instant::now();
        let ev = pleg.relist().await.unwrap();
        assert_eq!(start.elapsed(), INSPECTION_WAIT, "the relist waited for the stuck inspection no longer");
        assert_eq!(
            ev,
            vec![PodLifecycleEvent {
                id: other_uid.clone(),
                kind: PodLifecycleEventType::ContainerDied,
                data: other.clone()
            }]
        );
        assert_eq!(cache.get(&other_uid).unwrap().container_statuses[0].state, ContainerState::Exited);
        assert!(cache.get_fresh(&stuck_uid).is_none(), "the stuck pod's entry no longer holds");
        assert!(matches!(cache.lookup(&stuck_uid, "", ""), crate::Cached::Unknown));

        // More than the PLEG threshold of relists: each takes no time, none starts another inspection of the stuck
        // pod, a change of the other pod is inspected and sent at once, the PLEG stays healthy.
        let (_, again) = running_pod(&fake, "again").await;
        fake.clear_calls();
        let start = Instant::now();
        let mut relists = 0;
        while start.elapsed() < RELIST_THRESHOLD + Duration::from_secs(20) {
            let t = Instant::now();
            let ev = pleg.relist().await.unwrap();
            assert_eq!(t.elapsed(), Duration::ZERO, "relist {relists} waited");
            assert!(ev.iter().all(|e| e.id != stuck_uid), "the stuck pod's events wait for its inspection");
            if relists == 0 {
                assert_eq!(ev.iter().filter(|e| e.id == PodUid::from("again")).count(), 2, "{ev:?}");
                assert_eq!(cache.get(&PodUid::from("again")).unwrap().container_statuses[0].id, again);
            }
            assert!(health.healthy().is_ok());
            relists += 1;
            tokio::time::sleep(RELIST_PERIOD).await;
        }
        assert!(relists >= 200, "{relists} relists");
        // Each relist listed once; only the new pod was inspected (one filtered list of each kind).
        assert_eq!(fake.count("ListPodSandbox"), relists + 1);
        assert_eq!(fake.count("ListContainers"), relists + 1);

        // The runtime answers again: the relist after the inspection finished uses it and sends the held event.
        while rx.try_recv().is_ok() {}
        fake.release(&stuck);
        tokio::task::yield_now().await;
        let ev = pleg.relist().await.unwrap();
        assert_eq!(
            ev,
            vec![PodLifecycleEvent {
                id: stuck_uid.clone(),
                kind: PodLifecycleEventType::ContainerDied,
                data: stuck.clone()
            }]
        );
        assert_eq!(rx.try_recv().unwrap().id, stuck_uid);
        let st = cache.get_fresh(&stuck_uid).expect("fresh again");
        assert_eq!((st.container_statuses[0].state, st.container_statuses[0].exit_code), (ContainerState::Exited, 137));
    }
}
