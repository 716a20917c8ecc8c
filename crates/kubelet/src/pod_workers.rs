//! Pod workers (`pkg/kubelet/pod_workers.go`): one task per pod UID that runs the pod's life
//! — syncing → terminating → terminated — one step at a time.
//!
//! The sync loop calls [`PodWorkers::update_pod`] for every change; the latest update wins (a pending update
//! replaces an older one that the worker has not started yet), a kill is never lost, and a pod that started
//! terminating never runs again. A worker resyncs its pod every `syncFrequency` by itself, retries failed steps
//! after their delay, and exits once the pod is terminated. Cancellation stops every worker between steps;
//! pods keep running in the runtime.
//!
//! Static pods with the same full name (`name_namespace`: an edited manifest gives a new UID) start one at a time
//! and in the order they arrived (`allowStaticPodStart`): the new one waits until the old one has terminated and
//! been cleaned up, so two kube-apiservers of a control-plane node never run at once. A waiting pod is started as
//! soon as its predecessor finishes (upstream polls every second).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet_types::{Pod, PodUid};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info_span};

use crate::syncer::{PodKey, PodSyncer, SyncOutcome};
use kubelet_eviction::EvictionStatus;

/// Retry delay of a failed termination step.
const TERMINATION_RETRY: Duration = Duration::from_secs(1);
/// How often a static pod waiting for its predecessor checks again (`backOffPeriod`); it is also woken when the
/// predecessor finishes.
const STATIC_POD_START_RETRY: Duration = Duration::from_secs(1);

/// Why an update is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateType {
    /// A new pod.
    Create,
    /// A changed pod.
    Update,
    /// A resync (PLEG event, periodic).
    Sync,
    /// Stop the pod.
    Kill,
}

/// One update for a pod worker.
#[derive(Debug, Clone)]
pub struct UpdatePodOptions {
    /// The kind of update.
    pub update_type: UpdateType,
    /// Identity of the pod.
    pub key: PodKey,
    /// The pod spec (None for pods known only from the runtime).
    pub pod: Option<Arc<Pod>>,
    /// Grace period override for kills.
    pub grace_override: Option<i64>,
    /// The pod was removed from its source: clean up everything once stopped.
    pub removed: bool,
    /// For kills: the status the stopped pod ends with (an eviction's `Failed`/`Evicted`).
    pub status: Option<EvictionStatus>,
}

/// Where a pod is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPhase {
    /// Running (syncing to its spec).
    Syncing,
    /// Being stopped.
    Terminating,
    /// Stopped, cleanup pending.
    Terminated,
    /// Done; the worker exited.
    Finished,
}

#[derive(Debug)]
struct PodState {
    key: PodKey,
    pod: Option<Arc<Pod>>,
    phase: WorkerPhase,
    pending: bool,
    /// The effective grace period of the termination, once it started (`podSyncStatus.gracePeriod`).
    grace: Option<i64>,
    removed: bool,
    notify: Arc<Notify>,
    /// Cancels the termination step in flight (when the grace period is shortened).
    terminating: Option<CancellationToken>,
    /// The status a kill asked for; the first one wins.
    status: Option<EvictionStatus>,
    /// A static pod's full name (`name_namespace`).
    fullname: Option<String>,
    /// A create arrived for this UID after its termination began (a static pod's manifest restored unchanged):
    /// once finished, housekeeping forgets the worker and starts the pod afresh (`restartRequested`).
    restart_requested: bool,
}

/// The grace period a termination uses (`calculateEffectiveGracePeriod`): the shortest of the current one, the
/// pod's deletion grace period and the kill's override; else the pod's `terminationGracePeriodSeconds`; at least
/// 1 s. Also whether it shortened a grace period already in force.
pub fn effective_grace_period(current: Option<i64>, pod: Option<&Pod>, override_: Option<i64>) -> (i64, bool) {
    let mut g = current.unwrap_or(0);
    for o in [pod.and_then(|p| p.metadata.deletion_grace_period_seconds), override_].into_iter().flatten() {
        if g == 0 || o < g {
            g = o;
        }
    }
    if g == 0
        && let Some(t) = pod.and_then(|p| p.spec.as_ref()).and_then(|s| s.termination_grace_period_seconds)
    {
        g = t;
    }
    let g = g.max(1);
    (g, current.is_some_and(|c| c != 0 && c != g))
}

/// One step of work taken from a pod's state.
struct Work {
    phase: WorkerPhase,
    key: PodKey,
    pod: Option<Arc<Pod>>,
    grace: Option<i64>,
    removed: bool,
    status: Option<EvictionStatus>,
}

#[derive(Default)]
struct Shared {
    pods: Mutex<HashMap<PodUid, PodState>>,
    /// Static pods by full name (locked after `pods`, never alone before it).
    statics: Mutex<StaticPods>,
}

/// `startedStaticPodsByFullname` and `waitingToStartStaticPodsByFullname`.
#[derive(Default)]
struct StaticPods {
    started: HashMap<String, PodUid>,
    waiting: HashMap<String, Vec<PodUid>>,
}

/// Whether the static pod `uid` may start (`allowStaticPodStart`): no other static pod of that full name has
/// started, and it is the first of those waiting that is still meant to run.
fn allow_static_start(
    pods: &HashMap<PodUid, PodState>,
    statics: &mut StaticPods,
    fullname: &str,
    uid: &PodUid,
) -> bool {
    if let Some(started) = statics.started.get(fullname) {
        return started == uid;
    }
    let waiting = statics.waiting.remove(fullname).unwrap_or_default();
    let mut rest = waiting.as_slice();
    while let Some((first, tail)) = rest.split_first() {
        let runnable = pods.get(first).is_some_and(|st| st.phase == WorkerPhase::Syncing);
        if !runnable {
            rest = tail;
            continue;
        }
        if first != uid {
            statics.waiting.insert(fullname.to_string(), rest.to_vec());
            return false;
        }
        rest = tail;
        break;
    }
    if !rest.is_empty() {
        statics.waiting.insert(fullname.to_string(), rest.to_vec());
    }
    statics.started.insert(fullname.to_string(), uid.clone());
    true
}

/// The pod workers.
#[derive(Clone)]
pub struct PodWorkers {
    shared: Arc<Shared>,
    syncer: Arc<dyn PodSyncer>,
    resync: Duration,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl std::fmt::Debug for PodWorkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWorkers").field("pods", &self.shared.pods.lock().unwrap().len()).finish()
    }
}

fn deletion_requested(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

impl PodWorkers {
    /// Workers syncing with `syncer`, resyncing each pod every `resync`.
    pub fn new(syncer: Arc<dyn PodSyncer>, resync: Duration, cancel: CancellationToken, tracker: TaskTracker) -> Self {
        Self { shared: Arc::new(Shared::default()), syncer, resync, cancel, tracker }
    }

    /// Hands an update to the pod's worker, starting the worker for a new pod.
    pub fn update_pod(&self, opts: UpdatePodOptions) {
        let mut pods = self.shared.pods.lock().unwrap();
        let static_name = opts
            .pod
            .as_deref()
            .filter(|p| kubelet_types::pod_update::is_static_pod(p))
            .map(|_| format!("{}_{}", opts.key.name, opts.key.namespace));
        let uid = opts.key.uid.clone();
        let kill = opts.update_type == UpdateType::Kill || opts.pod.as_deref().is_some_and(deletion_requested);
        let st = match pods.get_mut(&uid) {
            Some(st) => {
                if st.phase != WorkerPhase::Syncing && opts.update_type == UpdateType::Create && !kill {
                    debug!(pod = %opts.key, "pod is terminating but has been requested to restart with the same UID; it restarts once terminated");
                    st.restart_requested = true;
                    return;
                }
                if st.phase == WorkerPhase::Finished {
                    debug!(pod = %opts.key, "pod is finished; ignoring update");
                    return;
                }
                st
            }
            None => {
                if opts.update_type == UpdateType::Sync && opts.pod.is_none() {
                    return;
                }
                let notify = Arc::new(Notify::new());
                pods.insert(
                    uid.clone(),
                    PodState {
                        key: opts.key.clone(),
                        pod: None,
                        phase: WorkerPhase::Syncing,
                        pending: false,
                        grace: None,
                        removed: false,
                        notify: notify.clone(),
                        terminating: None,
                        status: None,
                        fullname: static_name.clone(),
                        restart_requested: false,
                    },
                );
                // Static pods start in the order they are received.
                if let Some(name) = static_name {
                    self.shared.statics.lock().unwrap().waiting.entry(name).or_default().push(uid.clone());
                }
                let this = self.clone();
                let span = info_span!("pod_worker", pod = %opts.key, podUID = %uid);
                self.tracker.spawn(this.worker(uid.clone(), notify).instrument(span));
                pods.get_mut(&uid).expect("just inserted")
            }
        };
        if let Some(p) = opts.pod {
            st.pod = Some(p);
        }
        if kill && st.phase == WorkerPhase::Syncing {
            st.phase = WorkerPhase::Terminating;
        }
        if kill {
            // A shorter grace period wins, as upstream; shortening one in force restarts the termination with it.
            let (grace, shortened) = effective_grace_period(st.grace, st.pod.as_deref(), opts.grace_override);
            st.grace = Some(grace);
            if shortened && let Some(t) = &st.terminating {
                debug!(pod = %opts.key, gracePeriod = grace, "grace period shortened during termination");
                t.cancel();
            }
            st.removed |= opts.removed;
            if st.status.is_none() {
                st.status = opts.status;
            }
        }
        st.pending = true;
        st.notify.notify_one();
    }

    /// The phase of a pod's worker, if any.
    pub fn phase(&self, uid: &PodUid) -> Option<WorkerPhase> {
        self.shared.pods.lock().unwrap().get(uid).map(|s| s.phase)
    }

    /// UIDs of every pod with a worker state (finished ones included until forgotten).
    pub fn known(&self) -> Vec<PodUid> {
        self.shared.pods.lock().unwrap().keys().cloned().collect()
    }

    /// Forgets finished pods that are no longer desired, or whose restart with the same UID was asked for
    /// (housekeeping, `SyncKnownPods`); the caller then sends a create for every desired pod not
    /// [`known`](Self::known).
    pub fn forget_finished(&self, desired: &dyn Fn(&PodUid) -> bool) {
        self.shared
            .pods
            .lock()
            .unwrap()
            .retain(|uid, st| st.phase != WorkerPhase::Finished || (desired(uid) && !st.restart_requested));
    }

    fn take(&self, uid: &PodUid) -> Option<Work> {
        let mut pods = self.shared.pods.lock().unwrap();
        let st = pods.get_mut(uid)?;
        st.pending = false;
        Some(Work {
            phase: st.phase,
            key: st.key.clone(),
            pod: st.pod.clone(),
            grace: st.grace,
            removed: st.removed,
            status: st.status.clone(),
        })
    }

    /// Whether the pod may run its sync now: always, but for a static pod whose predecessor of the same full name
    /// has not finished.
    fn may_start(&self, uid: &PodUid) -> bool {
        let pods = self.shared.pods.lock().unwrap();
        let Some(name) = pods.get(uid).and_then(|st| st.fullname.clone()) else { return true };
        let mut statics = self.shared.statics.lock().unwrap();
        allow_static_start(&pods, &mut statics, &name, uid)
    }

    /// A finished static pod hands its full name on: the next one waiting is woken at once.
    fn release_static(&self, uid: &PodUid) {
        let mut pods = self.shared.pods.lock().unwrap();
        let Some(name) = pods.get(uid).and_then(|st| st.fullname.clone()) else { return };
        let mut statics = self.shared.statics.lock().unwrap();
        if statics.started.get(&name) == Some(uid) {
            statics.started.remove(&name);
        }
        if let Some(w) = statics.waiting.get_mut(&name) {
            w.retain(|u| u != uid);
            if w.is_empty() {
                statics.waiting.remove(&name);
            }
        }
        let next = statics.waiting.get(&name).and_then(|w| w.first()).cloned();
        drop(statics);
        if let Some(st) = next.and_then(|n| pods.get_mut(&n)) {
            st.pending = true;
            st.notify.notify_one();
        }
    }

    fn advance(&self, uid: &PodUid, from: WorkerPhase, to: WorkerPhase) {
        if let Some(st) = self.shared.pods.lock().unwrap().get_mut(uid)
            && st.phase == from
        {
            st.phase = to;
        }
    }

    async fn worker(self, uid: PodUid, notify: Arc<Notify>) {
        let mut next_at: Option<Instant> = None;
        let mut run_now = false;
        // `kubelet_pod_worker_duration_seconds{operation_type}`: the first sync creates, an update updates, a
        // timer resyncs.
        let mut operation = "create";
        let mut synced_once = false;
        loop {
            if !run_now {
                let deadline = next_at.unwrap_or_else(|| Instant::now() + self.resync);
                let woken = tokio::select! {
                    _ = self.cancel.cancelled() => return,
                    _ = notify.notified() => true,
                    _ = tokio::time::sleep_until(deadline) => false,
                };
                // A stale wake-up (its update was already taken) does not count as work.
                let pending = self.shared.pods.lock().unwrap().get(&uid).is_some_and(|s| s.pending);
                if woken && !pending {
                    continue;
                }
                if synced_once {
                    operation = if pending { "update" } else { "sync" };
                }
            }
            if self.cancel.is_cancelled() {
                return;
            }
            run_now = false;
            next_at = None;
            let Some(Work { phase, key, pod, grace, removed, status }) = self.take(&uid) else { return };
            match phase {
                WorkerPhase::Syncing => {
                    let Some(pod) = pod else { continue };
                    if !self.may_start(&uid) {
                        debug!(pod = %key, podUID = %uid, "static pod waits for the termination of a previous one of the same full name");
                        next_at = Some(Instant::now() + STATIC_POD_START_RETRY);
                        continue;
                    }
                    let span = info_span!("sync_pod", pod = %key, podUID = %uid);
                    let otel = kubelet_trace::pod_span("syncPod", &key.namespace, &key.name, &uid.0, Some(operation));
                    let started = Instant::now();
                    let outcome = kubelet_trace::within(&otel, self.syncer.sync_pod(&pod).instrument(span)).await;
                    if let SyncOutcome::Retry(_) = outcome {
                        otel.fail("pod sync failed; will retry");
                    }
                    otel.end();
                    kubelet_metrics::kubelet::POD_WORKER_DURATION
                        .observe(&[operation], started.elapsed().as_secs_f64());
                    synced_once = true;
                    match outcome {
                        SyncOutcome::Synced => {}
                        SyncOutcome::Retry(d) => next_at = Some(Instant::now() + d),
                        SyncOutcome::Requeue(d) => next_at = Some(Instant::now() + d.min(self.resync)),
                        SyncOutcome::Terminal => {
                            self.advance(&uid, WorkerPhase::Syncing, WorkerPhase::Terminating);
                            run_now = true;
                        }
                    }
                }
                WorkerPhase::Terminating => {
                    let span = info_span!("sync_terminating_pod", pod = %key, podUID = %uid);
                    let token = CancellationToken::new();
                    if let Some(st) = self.shared.pods.lock().unwrap().get_mut(&uid) {
                        st.terminating = Some(token.clone());
                    }
                    let otel = kubelet_trace::pod_span("syncTerminatingPod", &key.namespace, &key.name, &uid.0, None);
                    let step = kubelet_trace::within(
                        &otel,
                        self.syncer.sync_terminating_pod(&key, pod.as_ref(), grace, status.as_ref()).instrument(span),
                    );
                    let started = Instant::now();
                    let res = tokio::select! {
                        r = step => Some(r),
                        _ = token.cancelled() => None,
                    };
                    kubelet_metrics::kubelet::POD_WORKER_DURATION.observe(&["kill"], started.elapsed().as_secs_f64());
                    if let Some(st) = self.shared.pods.lock().unwrap().get_mut(&uid) {
                        st.terminating = None;
                    }
                    if let Some(Err(e)) = &res {
                        otel.fail(e);
                    }
                    otel.end();
                    let Some(res) = res else {
                        // The grace period was shortened: stop again with the new one.
                        run_now = true;
                        continue;
                    };
                    match res {
                        Ok(()) => {
                            self.advance(&uid, WorkerPhase::Terminating, WorkerPhase::Terminated);
                            run_now = true;
                        }
                        Err(e) => {
                            tracing::warn!(pod = %key, podUID = %uid, error = %e, "error terminating pod; will retry");
                            next_at = Some(Instant::now() + TERMINATION_RETRY);
                        }
                    }
                }
                WorkerPhase::Terminated => {
                    let span = info_span!("sync_terminated_pod", pod = %key, podUID = %uid);
                    let otel = kubelet_trace::pod_span("syncTerminatedPod", &key.namespace, &key.name, &uid.0, None);
                    let res = kubelet_trace::within(
                        &otel,
                        self.syncer.sync_terminated_pod(&key, pod.as_ref(), removed).instrument(span),
                    )
                    .await;
                    if let Err(e) = &res {
                        otel.fail(e);
                    }
                    otel.end();
                    match res {
                        Ok(()) => {
                            self.advance(&uid, WorkerPhase::Terminated, WorkerPhase::Finished);
                            self.release_static(&uid);
                            // A removal that arrived while cleaning up a terminal pod still needs its cleanup.
                            let again =
                                self.shared.pods.lock().unwrap().get(&uid).is_some_and(|s| s.removed && !removed);
                            if again {
                                self.advance(&uid, WorkerPhase::Finished, WorkerPhase::Terminated);
                                run_now = true;
                                continue;
                            }
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(pod = %key, podUID = %uid, error = %e, "error cleaning up terminated pod; will retry");
                            next_at = Some(Instant::now() + TERMINATION_RETRY);
                        }
                    }
                }
                WorkerPhase::Finished => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    struct Recorder {
        log: Mutex<Vec<String>>,
        outcome: Mutex<Option<SyncOutcome>>,
        gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl PodSyncer for Recorder {
        async fn sync_pod(&self, pod: &Arc<Pod>) -> SyncOutcome {
            self.log
                .lock()
                .unwrap()
                .push(format!("sync {}", pod.metadata.resource_version.clone().unwrap_or_default()));
            let _permit = self.gate.acquire().await.unwrap();
            self.outcome.lock().unwrap().unwrap_or(SyncOutcome::Synced)
        }
        async fn sync_terminating_pod(
            &self,
            _k: &PodKey,
            _p: Option<&Arc<Pod>>,
            grace: Option<i64>,
            _s: Option<&EvictionStatus>,
        ) -> Result<(), String> {
            self.log.lock().unwrap().push(format!("terminating {grace:?}"));
            Ok(())
        }
        async fn sync_terminated_pod(&self, _k: &PodKey, _p: Option<&Arc<Pod>>, removed: bool) -> Result<(), String> {
            self.log.lock().unwrap().push(format!("terminated removed={removed}"));
            Ok(())
        }
    }

    fn pod(v: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                name: Some("p".into()),
                namespace: Some("default".into()),
                resource_version: Some(v.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn opts(t: UpdateType, p: Arc<Pod>) -> UpdatePodOptions {
        UpdatePodOptions {
            update_type: t,
            key: PodKey::of(&p),
            pod: Some(p),
            grace_override: None,
            removed: t == UpdateType::Kill,
            status: None,
        }
    }

    async fn wait_for(rec: &Recorder, n: usize) -> Vec<String> {
        wait_log(&rec.log, n).await
    }

    /// The log once it has `n` entries (or after the workers had their chance to run).
    async fn wait_log(log: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
        for _ in 0..10_000 {
            if log.lock().unwrap().len() >= n {
                break;
            }
            tokio::task::yield_now().await;
        }
        log.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn latest_update_wins_and_kill_terminates_once() {
        let rec = Arc::new(Recorder {
            gate: tokio::sync::Semaphore::new(0),
            log: Default::default(),
            outcome: Default::default(),
        });
        let w = PodWorkers::new(rec.clone(), Duration::from_secs(60), CancellationToken::new(), TaskTracker::new());
        w.update_pod(opts(UpdateType::Create, pod("1")));
        assert_eq!(wait_for(&rec, 1).await, vec!["sync 1"]);
        // While sync 1 is blocked, two updates arrive: only the latest runs.
        w.update_pod(opts(UpdateType::Update, pod("2")));
        w.update_pod(opts(UpdateType::Update, pod("3")));
        rec.gate.add_permits(100);
        assert_eq!(wait_for(&rec, 2).await, vec!["sync 1", "sync 3"]);
        let mut k = opts(UpdateType::Kill, pod("3"));
        k.grace_override = Some(5);
        w.update_pod(k);
        let log = wait_for(&rec, 4).await;
        assert_eq!(log[2..], ["terminating Some(5)".to_string(), "terminated removed=true".to_string()]);
        assert_eq!(w.phase(&"u1".into()), Some(WorkerPhase::Finished));
        // Updates after the end are ignored; forgetting the pod frees its state.
        w.update_pod(opts(UpdateType::Update, pod("4")));
        tokio::task::yield_now().await;
        assert_eq!(rec.log.lock().unwrap().len(), 4);
        w.forget_finished(&|_| false);
        assert!(w.known().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn resyncs_periodically_and_terminal_pods_terminate() {
        let rec = Arc::new(Recorder {
            gate: tokio::sync::Semaphore::new(1000),
            log: Default::default(),
            outcome: Default::default(),
        });
        let w = PodWorkers::new(rec.clone(), Duration::from_secs(60), CancellationToken::new(), TaskTracker::new());
        w.update_pod(opts(UpdateType::Create, pod("1")));
        wait_for(&rec, 1).await;
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(wait_for(&rec, 2).await.len(), 2, "resync after syncFrequency");
        *rec.outcome.lock().unwrap() = Some(SyncOutcome::Terminal);
        w.update_pod(opts(UpdateType::Sync, pod("1")));
        let log = wait_for(&rec, 5).await;
        assert_eq!(log[3..], ["terminating None".to_string(), "terminated removed=false".to_string()]);
    }

    #[test]
    fn effective_grace_period_as_upstream() {
        let mut p = (*pod("1")).clone();
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            termination_grace_period_seconds: Some(30),
            ..Default::default()
        });
        assert_eq!(effective_grace_period(None, Some(&p), None), (30, false));
        assert_eq!(effective_grace_period(None, Some(&p), Some(0)), (30, false), "zero asks for the pod's own");
        p.metadata.deletion_grace_period_seconds = Some(10);
        assert_eq!(effective_grace_period(None, Some(&p), None), (10, false));
        assert_eq!(effective_grace_period(Some(10), Some(&p), Some(20)), (10, false), "never lengthened");
        assert_eq!(effective_grace_period(Some(10), Some(&p), Some(3)), (3, true));
        assert_eq!(effective_grace_period(None, None, None), (1, false), "a pod only the runtime knows");
    }

    /// Terminations that block until cancelled, unless the grace period is at most 2 s.
    struct SlowKill(Mutex<Vec<i64>>);

    #[async_trait]
    impl PodSyncer for SlowKill {
        async fn sync_pod(&self, _pod: &Arc<Pod>) -> SyncOutcome {
            SyncOutcome::Synced
        }
        async fn sync_terminating_pod(
            &self,
            _k: &PodKey,
            _p: Option<&Arc<Pod>>,
            g: Option<i64>,
            _s: Option<&EvictionStatus>,
        ) -> Result<(), String> {
            let g = g.unwrap_or(0);
            self.0.lock().unwrap().push(g);
            if g > 2 {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
        async fn sync_terminated_pod(&self, _k: &PodKey, _p: Option<&Arc<Pod>>, _r: bool) -> Result<(), String> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_shortened_grace_period_restarts_the_termination_with_it() {
        let s = Arc::new(SlowKill(Mutex::new(vec![])));
        let w = PodWorkers::new(s.clone(), Duration::from_secs(60), CancellationToken::new(), TaskTracker::new());
        let mut k = opts(UpdateType::Kill, pod("1"));
        k.grace_override = Some(30);
        w.update_pod(k);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*s.0.lock().unwrap(), vec![30]);
        let mut k = opts(UpdateType::Kill, pod("1"));
        k.grace_override = Some(2);
        w.update_pod(k);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*s.0.lock().unwrap(), vec![30, 2]);
        assert_eq!(w.phase(&"u1".into()), Some(WorkerPhase::Finished));
    }

    /// Logs each step with the pod's UID; terminations wait for a permit.
    struct StepLog {
        log: Mutex<Vec<String>>,
        kill_gate: tokio::sync::Semaphore,
    }

    #[async_trait]
    impl PodSyncer for StepLog {
        async fn sync_pod(&self, pod: &Arc<Pod>) -> SyncOutcome {
            self.log.lock().unwrap().push(format!("sync {}", pod.metadata.uid.clone().unwrap_or_default()));
            SyncOutcome::Synced
        }
        async fn sync_terminating_pod(
            &self,
            k: &PodKey,
            _p: Option<&Arc<Pod>>,
            _g: Option<i64>,
            _s: Option<&EvictionStatus>,
        ) -> Result<(), String> {
            let _permit = self.kill_gate.acquire().await.unwrap();
            self.log.lock().unwrap().push(format!("terminating {}", k.uid.0));
            Ok(())
        }
        async fn sync_terminated_pod(&self, k: &PodKey, _p: Option<&Arc<Pod>>, _r: bool) -> Result<(), String> {
            self.log.lock().unwrap().push(format!("terminated {}", k.uid.0));
            Ok(())
        }
    }

    fn static_pod(uid: &str) -> Arc<Pod> {
        let mut p = (*pod("1")).clone();
        p.metadata.uid = Some(uid.into());
        p.metadata.annotations = Some([(kubelet_types::labels::CONFIG_SOURCE.to_string(), "file".to_string())].into());
        Arc::new(p)
    }

    #[tokio::test(start_paused = true)]
    async fn a_static_pod_starts_only_after_its_predecessor_of_the_same_name_finished() {
        let steps = Arc::new(StepLog { log: Default::default(), kill_gate: tokio::sync::Semaphore::new(0) });
        let w = PodWorkers::new(steps.clone(), Duration::from_secs(60), CancellationToken::new(), TaskTracker::new());
        let log = |n: usize| wait_log(&steps.log, n);
        w.update_pod(opts(UpdateType::Create, static_pod("old")));
        assert_eq!(log(1).await, ["sync old"]);
        // The manifest changed: the old pod is killed, the new one (same name, new UID) arrives at once.
        w.update_pod(opts(UpdateType::Kill, static_pod("old")));
        w.update_pod(opts(UpdateType::Create, static_pod("new")));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(log(2).await, ["sync old"], "the new pod waits while the old one terminates");
        steps.kill_gate.add_permits(1);
        let seen = log(4).await;
        assert_eq!(seen, ["sync old", "terminating old", "terminated old", "sync new"]);
        // An ordinary pod of another name is never held back.
        let mut other = (*static_pod("other")).clone();
        other.metadata.name = Some("q".into());
        w.update_pod(opts(UpdateType::Create, Arc::new(other)));
        assert_eq!(log(5).await[4], "sync other");
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_for_a_terminated_uid_restarts_it_after_housekeeping() {
        let steps = Arc::new(StepLog { log: Default::default(), kill_gate: tokio::sync::Semaphore::new(100) });
        let w = PodWorkers::new(steps.clone(), Duration::from_secs(60), CancellationToken::new(), TaskTracker::new());
        let log = |n: usize| wait_log(&steps.log, n);
        w.update_pod(opts(UpdateType::Create, static_pod("same")));
        log(1).await;
        w.update_pod(opts(UpdateType::Kill, static_pod("same")));
        // The manifest is back (same UID) while the old pod is still being stopped.
        w.update_pod(opts(UpdateType::Create, static_pod("same")));
        assert_eq!(log(3).await, ["sync same", "terminating same", "terminated same"]);
        assert_eq!(w.phase(&"same".into()), Some(WorkerPhase::Finished));
        // Housekeeping forgets the finished worker although the pod is desired; a new create starts it.
        w.forget_finished(&|_| true);
        assert!(w.known().is_empty());
        w.update_pod(opts(UpdateType::Create, static_pod("same")));
        assert_eq!(log(4).await.last().map(String::as_str), Some("sync same"));
        assert_eq!(w.phase(&"same".into()), Some(WorkerPhase::Syncing));
        // A finished pod that is still desired and was not asked to restart stays finished (terminal pods).
        w.update_pod(opts(UpdateType::Kill, static_pod("same")));
        assert_eq!(log(6).await.len(), 6);
        w.forget_finished(&|_| true);
        assert_eq!(w.known().len(), 1);
    }
}
