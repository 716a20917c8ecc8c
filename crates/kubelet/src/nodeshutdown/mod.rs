//! Graceful node shutdown (`pkg/kubelet/nodeshutdown`: nodeshutdown_manager.go, nodeshutdown_manager_linux.go,
//! storage.go): with `shutdownGracePeriod` (and `shutdownGracePeriodCriticalPods`) or
//! `shutdownGracePeriodByPodPriority` set, the kubelet holds a logind `delay` inhibitor lock on shutdown, raising
//! logind's `InhibitDelayMaxSec` to the sum of the grace periods when it is lower. When logind announces a shutdown
//! (`PrepareForShutdown(true)`) the node turns NotReady ("node is shutting down"), new pods are refused
//! (`NodeShutdown`), and the running pods are stopped group by group from the lowest priority up, each group within
//! its grace period (a pod's own shorter `terminationGracePeriodSeconds` wins), ending `Failed` with reason
//! `Terminated` and a `DisruptionTarget` condition; then the lock is released and the machine goes down. A cancelled
//! shutdown (`false`) takes the lock again. The start and end times go to `graceful_node_shutdown_state` and the
//! `kubelet_graceful_shutdown_*_time_seconds` gauges.
//!
//! Contract: [`ShutdownManager::start`] is called once at start-up; an error there (no logind, a lock refused) is
//! logged by the caller and the node runs without graceful shutdown, as upstream. Once started, a broken watch is
//! started again after a second. The admit handler and the node's readiness read [`NodeShutdown`].

pub mod logind;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use kubelet_eviction::{ActivePods, EvictionStatus, PodKiller};
use kubelet_types::Pod;
use kubelet_types::events::{NORMAL, Recorder};
use kubelet_types::qos::SYSTEM_CRITICAL_PRIORITY;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::admission::{AdmitResult, PodAdmitHandler};
use logind::{InhibitLock, Logind};

/// The reason of pods refused while the node shuts down (`NodeShutdownNotAdmittedReason`).
pub const NOT_ADMITTED_REASON: &str = "NodeShutdown";
/// Their message.
pub const NOT_ADMITTED_MESSAGE: &str = "Pod was rejected as the node is shutting down.";
/// The reason of pods stopped for the shutdown (`nodeShutdownReason`).
pub const SHUTDOWN_REASON: &str = "Terminated";
/// Their message.
pub const SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// The state file under the root directory (`localStorageStateFile`).
pub const STATE_FILE: &str = "graceful_node_shutdown_state";
/// Why the node is not ready meanwhile.
pub const SHUTTING_DOWN: &str = "node is shutting down";
/// How long after a broken watch it is started again (`dbusReconnectPeriod`).
const RECONNECT_PERIOD: Duration = Duration::from_secs(1);

/// One priority range and its grace period (`ShutdownGracePeriodByPodPriority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The lowest priority of the range.
    pub priority: i32,
    /// Its grace period in seconds.
    pub grace_seconds: i64,
}

/// The groups, lowest priority first (`newPodManager`): `by_priority` when set, else two from the grace periods
/// (`migrateConfig`: the rest for priority 0, the critical part for system-critical pods); empty means disabled.
pub fn groups(grace: Duration, critical: Duration, by_priority: &[Group]) -> Vec<Group> {
    let mut g = if by_priority.is_empty() {
        if grace.is_zero() || critical > grace {
            vec![]
        } else {
            let default = grace - critical;
            vec![
                Group { priority: 0, grace_seconds: default.as_secs() as i64 },
                Group { priority: SYSTEM_CRITICAL_PRIORITY, grace_seconds: (grace - default).as_secs() as i64 },
            ]
        }
    } else {
        by_priority.to_vec()
    };
    g.sort_by_key(|g| g.priority);
    g
}

/// The pods of each group (`groupByPriority`): a pod goes to the highest group whose priority it reaches, the lowest
/// group when it reaches none.
pub fn group_by_priority(groups: &[Group], pods: &[Arc<Pod>]) -> Vec<(Group, Vec<Arc<Pod>>)> {
    let mut out: Vec<(Group, Vec<Arc<Pod>>)> = groups.iter().map(|g| (*g, vec![])).collect();
    if out.is_empty() {
        return out;
    }
    for p in pods {
        let priority = kubelet_types::qos::pod_priority(p);
        let i = groups.iter().rposition(|g| g.priority <= priority).unwrap_or(0);
        out[i].1.push(p.clone());
    }
    out
}

/// Whether the node is shutting down; read by admission and the node's readiness.
#[derive(Debug)]
pub struct NodeShutdown {
    shutting_down: AtomicBool,
    changed: watch::Sender<u64>,
}

impl Default for NodeShutdown {
    fn default() -> Self {
        Self { shutting_down: AtomicBool::new(false), changed: watch::channel(0).0 }
    }
}

impl NodeShutdown {
    /// Whether a shutdown is under way.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Why the node is not ready, while it shuts down (`ShutdownStatus`).
    pub fn error(&self) -> Option<String> {
        self.is_shutting_down().then(|| SHUTTING_DOWN.to_string())
    }

    /// Bumped at every change (the node status manager's wake).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn set(&self, on: bool) {
        self.shutting_down.store(on, Ordering::SeqCst);
        self.changed.send_modify(|v| *v += 1);
    }
}

/// Refuses pods while the node shuts down (`managerImpl.Admit`).
#[derive(Debug, Clone)]
pub struct ShutdownAdmit(pub Arc<NodeShutdown>);

impl PodAdmitHandler for ShutdownAdmit {
    fn admit(&self, _pod: &Pod, _others: &[Arc<Pod>]) -> Option<AdmitResult> {
        self.0
            .is_shutting_down()
            .then(|| AdmitResult { reason: NOT_ADMITTED_REASON.into(), message: NOT_ADMITTED_MESSAGE.into() })
    }
}

/// `graceful_node_shutdown_state`: Go's `time.Time` JSON (RFC 3339 with nanoseconds; the zero time when unset).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct State {
    #[serde(rename = "startTime")]
    start_time: String,
    #[serde(rename = "endTime")]
    end_time: String,
}

const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// `t` as Go's `time.Time` marshals it (RFC 3339 with nanoseconds, trailing zeros dropped).
fn go_time(t: SystemTime) -> String {
    let s = chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let (secs, _) = s.split_once('.').unwrap_or((&s, ""));
    let fraction = s[secs.len()..].trim_end_matches('Z').trim_end_matches('0').trim_end_matches('.');
    format!("{secs}{fraction}Z")
}

fn unix_seconds(s: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    (s != ZERO_TIME).then(|| t.timestamp() as f64)
}

/// The node shutdown manager.
pub struct ShutdownManager {
    /// The shared state.
    pub state: Arc<NodeShutdown>,
    /// The groups ([`groups`]); empty: disabled.
    pub groups: Vec<Group>,
    /// logind.
    pub logind: Arc<dyn Logind>,
    /// The pods to stop.
    pub pods: Arc<dyn ActivePods>,
    /// Stops them.
    pub killer: Arc<dyn PodKiller>,
    /// Where the node's events go.
    pub recorder: Arc<dyn Recorder>,
    /// The node, for its events.
    pub node_ref: k8s_openapi::api::core::v1::ObjectReference,
    /// `<root>/graceful_node_shutdown_state`.
    pub state_file: PathBuf,
    /// The wall clock.
    pub clock: Arc<dyn kubelet_types::Clock>,
}

/// Runs a blocking logind call off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| e.to_string())?
}

impl ShutdownManager {
    /// The sum of the grace periods (`periodRequested`).
    pub fn period_requested(&self) -> Duration {
        Duration::from_secs(self.groups.iter().map(|g| g.grace_seconds.max(0) as u64).sum())
    }

    /// Takes the lock and starts watching for shutdowns (`Start`); the watch then runs until `cancel`.
    pub async fn start(self, tracker: &tokio_util::task::TaskTracker, cancel: CancellationToken) -> Result<(), String> {
        let this = Arc::new(self);
        info!(shutdownGracePeriodRequested = ?this.period_requested(), shutdownGracePeriodByPodPriority = ?this.groups, "Creating node shutdown manager");
        this.set_metrics();
        let (lock, events) = this.watch().await?;
        tracker.spawn(this.run(lock, events, cancel));
        Ok(())
    }

    /// Raises logind's delay if needed, takes the lock, subscribes to the signals (`start`).
    async fn watch(&self) -> Result<(InhibitLock, mpsc::Receiver<bool>), String> {
        let l = self.logind.clone();
        let current = blocking(move || l.current_inhibit_delay()).await?;
        let requested = self.period_requested();
        if requested > current {
            let l = self.logind.clone();
            blocking(move || l.override_inhibit_delay(requested))
                .await
                .map_err(|e| format!("unable to override inhibit delay by shutdown manager: {e}"))?;
            let l = self.logind.clone();
            blocking(move || l.reload_logind_conf()).await?;
            // The reload is asynchronous: polled with back-off (100 ms doubling, 5 tries).
            let mut updated = current;
            let mut wait = Duration::from_millis(100);
            let mut attempt = 0;
            while attempt < 5 {
                attempt += 1;
                tokio::time::sleep(wait).await;
                wait *= 2;
                let l = self.logind.clone();
                updated = blocking(move || l.current_inhibit_delay()).await?;
                if requested <= updated {
                    break;
                }
            }
            if requested > updated {
                return Err(format!(
                    "node shutdown manager was timed out after {attempt} attempts waiting for logind InhibitDelayMaxSec to \
                     update to {requested:?} (ShutdownGracePeriod), current value is {updated:?}"
                ));
            }
        }
        let l = self.logind.clone();
        let lock = blocking(move || l.inhibit_shutdown()).await?;
        let l = self.logind.clone();
        let events =
            blocking(move || l.monitor_shutdown()).await.map_err(|e| format!("failed to monitor shutdown: {e}"))?;
        Ok((lock, events))
    }

    async fn run(self: Arc<Self>, mut lock: InhibitLock, mut events: mpsc::Receiver<bool>, cancel: CancellationToken) {
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => return,
                e = events.recv() => e,
            };
            let Some(shutting_down) = event else {
                error!("Ended to watching the node for shutdown events");
                drop(lock);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(RECONNECT_PERIOD) => {}
                    }
                    info!("Restarting watch for node shutdown events");
                    match self.watch().await {
                        Ok((l, e)) => {
                            (lock, events) = (l, e);
                            break;
                        }
                        Err(e) => error!(error = %e, "Unable to watch the node for shutdown events"),
                    }
                }
                continue;
            };
            let (kind, message) = if shutting_down {
                ("shutdown", "Shutdown manager detected shutdown event")
            } else {
                ("cancelled", "Shutdown manager detected shutdown cancellation")
            };
            info!(event = kind, "Shutdown manager detected new shutdown event");
            self.recorder.event(&self.node_ref, NORMAL, "NodeShutdown", message.into());
            self.state.set(shutting_down);
            if shutting_down {
                self.process_shutdown().await;
                // Releasing the lock lets the shutdown go on.
                lock = InhibitLock(None);
                info!("Shutdown manager completed processing shutdown event, node will shutdown shortly");
            } else {
                let l = self.logind.clone();
                match blocking(move || l.inhibit_shutdown()).await {
                    Ok(l) => lock = l,
                    Err(e) => error!(error = %e, "Unable to take the inhibitor lock again after a cancelled shutdown"),
                }
            }
        }
    }

    fn store(&self, state: &State) {
        let write = || -> std::io::Result<()> {
            let tmp = self.state_file.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec(state).unwrap_or_default())?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &self.state_file)
        };
        if let Err(e) = write() {
            error!(path = %self.state_file.display(), error = %e, "Failed to store graceful shutdown state");
        }
    }

    /// The gauges from the state file (`setMetrics`).
    fn set_metrics(&self) {
        let Ok(bytes) = std::fs::read(&self.state_file) else { return };
        match serde_json::from_slice::<State>(&bytes) {
            Ok(s) => {
                if let Some(t) = unix_seconds(&s.start_time) {
                    kubelet_metrics::kubelet::GRACEFUL_SHUTDOWN_START_TIME.set(&[], t);
                }
                if let Some(t) = unix_seconds(&s.end_time) {
                    kubelet_metrics::kubelet::GRACEFUL_SHUTDOWN_END_TIME.set(&[], t);
                }
            }
            Err(e) => error!(error = %e, "Failed to load graceful shutdown state"),
        }
    }

    /// Stops the active pods group by group (`processShutdownEvent`, `killPods`).
    async fn process_shutdown(&self) {
        info!("Shutdown manager processing shutdown event");
        let pods = self.pods.active_pods();
        let started = self.clock.now();
        self.store(&State { start_time: go_time(started), end_time: ZERO_TIME.into() });
        let secs = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs() as f64).unwrap_or(0.0);
        kubelet_metrics::kubelet::GRACEFUL_SHUTDOWN_START_TIME.set(&[], secs(started));
        kubelet_metrics::kubelet::GRACEFUL_SHUTDOWN_END_TIME.set(&[], 0.0);
        for (group, pods) in group_by_priority(&self.groups, &pods) {
            if pods.is_empty() {
                continue;
            }
            let kills = pods.iter().map(|p| {
                let own = p.spec.as_ref().and_then(|s| s.termination_grace_period_seconds);
                let grace = own.filter(|g| *g <= group.grace_seconds).unwrap_or(group.grace_seconds);
                info!(pod = %kubelet_types::pod_update::pod_ref(p), gracePeriod = grace, "Shutdown manager killing pod with gracePeriod");
                let status = EvictionStatus {
                    reason: SHUTDOWN_REASON.into(),
                    message: SHUTDOWN_MESSAGE.into(),
                    disruption_message: Some(SHUTDOWN_MESSAGE.into()),
                };
                async move {
                    match self.killer.kill(p, grace, status).await {
                        Ok(()) => info!(pod = %kubelet_types::pod_update::pod_ref(p), "Shutdown manager finished killing pod"),
                        Err(e) => warn!(pod = %kubelet_types::pod_update::pod_ref(p), error = %e, "Shutdown manager failed killing pod"),
                    }
                    // Until the pod is cleaned up (its volumes unmounted), as upstream's WaitForAllPodsUnmount.
                    while !self.pods.cleaned_up(p) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            });
            let wait = Duration::from_secs(group.grace_seconds.max(0) as u64);
            match tokio::time::timeout(wait, futures::future::join_all(kills)).await {
                Ok(_) => info!(
                    gracePeriod = group.grace_seconds,
                    priority = group.priority,
                    "Done waiting for all pods in group to terminate"
                ),
                Err(_) => info!(
                    gracePeriod = group.grace_seconds,
                    priority = group.priority,
                    "Shutdown manager pod killing time out"
                ),
            }
        }
        let ended = self.clock.now();
        self.store(&State { start_time: go_time(started), end_time: go_time(ended) });
        kubelet_metrics::kubelet::GRACEFUL_SHUTDOWN_END_TIME.set(&[], secs(ended));
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
