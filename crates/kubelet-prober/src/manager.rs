//! The probe manager (`pkg/kubelet/prober/prober_manager.go`): one worker per (pod, container, probe type), the
//! three result caches, and `UpdatePodStatus`, which turns results into `started` and `ready`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, ContainerStatus as ApiContainerStatus, Probe};
use kubelet_cri::RuntimeService;
use kubelet_types::events::Recorder;
use kubelet_types::pod_update::is_restartable_init_container;
use kubelet_types::probe::{ContainerHealth, PodProbeStatus, PodStatusSource, ProbeResult, ProbeType, ProbeUpdate};
use kubelet_types::{Clock, Pod, PodUid};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info_span};

use crate::results::ResultsCache;
use crate::worker::{Worker, WorkerHandle};

/// Bound of the probe update channel (upstream's results channels hold 20 each): workers wait while the sync
/// loop catches up.
pub const UPDATE_CHANNEL_CAPACITY: usize = 64;

type WorkerKey = (PodUid, String, ProbeType);

/// What the manager needs.
pub struct ProbeManagerDeps {
    /// The runtime (exec probes).
    pub runtime: Arc<dyn RuntimeService>,
    /// The latest API pod statuses (container IDs, start times, pod IP).
    pub status: Arc<dyn PodStatusSource>,
    /// Where `Unhealthy` and `ProbeWarning` events go.
    pub recorder: Arc<dyn Recorder>,
    /// Wall clock (initial delays count from the container's start time).
    pub clock: Arc<dyn Clock>,
    /// Stops every worker.
    pub cancel: CancellationToken,
    /// Where workers are spawned.
    pub tracker: TaskTracker,
}

pub(crate) struct Shared {
    pub(crate) runtime: Arc<dyn RuntimeService>,
    pub(crate) status: Arc<dyn PodStatusSource>,
    pub(crate) recorder: Arc<dyn Recorder>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) started: tokio::time::Instant,
    workers: Mutex<HashMap<WorkerKey, WorkerHandle>>,
}

impl Shared {
    /// A worker ended: forget it unless a newer worker took its place.
    pub(crate) fn worker_done(&self, uid: &PodUid, name: &str, t: ProbeType, stop: &CancellationToken) {
        stop.cancel();
        let mut w = self.workers.lock().unwrap();
        let key = (uid.clone(), name.to_string(), t);
        if w.get(&key).is_some_and(|h| h.stop.is_cancelled()) {
            w.remove(&key);
        }
    }
}

/// The probe manager.
pub struct ProbeManager {
    shared: Arc<Shared>,
    liveness: Arc<ResultsCache>,
    readiness: Arc<ResultsCache>,
    startup: Arc<ResultsCache>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl std::fmt::Debug for ProbeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeManager").field("workers", &self.shared.workers.lock().unwrap().len()).finish()
    }
}

fn probe_of(c: &Container, t: ProbeType) -> Option<&Probe> {
    match t {
        ProbeType::Liveness => c.liveness_probe.as_ref(),
        ProbeType::Readiness => c.readiness_probe.as_ref(),
        ProbeType::Startup => c.startup_probe.as_ref(),
    }
}

fn is_running(s: &ApiContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn runtime_id(s: &ApiContainerStatus) -> &str {
    let id = s.container_id.as_deref().unwrap_or_default();
    id.split_once("://").map(|(_, i)| i).unwrap_or(id)
}

impl ProbeManager {
    /// A manager and the channel its result changes arrive on.
    pub fn new(deps: ProbeManagerDeps) -> (Self, mpsc::Receiver<ProbeUpdate>) {
        let (tx, rx) = mpsc::channel(UPDATE_CHANNEL_CAPACITY);
        let shared = Arc::new(Shared {
            runtime: deps.runtime,
            status: deps.status,
            recorder: deps.recorder,
            clock: deps.clock,
            started: tokio::time::Instant::now(),
            workers: Mutex::new(HashMap::new()),
        });
        let m = Self {
            shared,
            liveness: Arc::new(ResultsCache::new(ProbeType::Liveness, tx.clone())),
            readiness: Arc::new(ResultsCache::new(ProbeType::Readiness, tx.clone())),
            startup: Arc::new(ResultsCache::new(ProbeType::Startup, tx)),
            cancel: deps.cancel,
            tracker: deps.tracker,
        };
        (m, rx)
    }

    fn cache(&self, t: ProbeType) -> &Arc<ResultsCache> {
        match t {
            ProbeType::Liveness => &self.liveness,
            ProbeType::Readiness => &self.readiness,
            ProbeType::Startup => &self.startup,
        }
    }

    /// Starts a worker for every probe of the pod that has none (`AddPod`): app containers and native sidecars.
    pub fn add_pod(&self, pod: &Arc<Pod>) {
        let Some(spec) = pod.spec.as_ref() else { return };
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut workers = self.shared.workers.lock().unwrap();
        for c in spec.containers.iter().chain(sidecars) {
            for t in [ProbeType::Startup, ProbeType::Readiness, ProbeType::Liveness] {
                let Some(probe) = probe_of(c, t) else { continue };
                let key = (uid.clone(), c.name.clone(), t);
                if let Some(h) = workers.get(&key) {
                    *h.pod.lock().unwrap() = pod.clone();
                    continue;
                }
                self.seed_from_status(pod, &c.name, t);
                let stop = self.cancel.child_token();
                let trigger = Arc::new(Notify::new());
                let pod_cell = Arc::new(Mutex::new(pod.clone()));
                let w = Worker::new(
                    t,
                    probe.clone(),
                    c.clone(),
                    pod_cell.clone(),
                    uid.clone(),
                    self.cache(t).clone(),
                    self.shared.clone(),
                    stop.clone(),
                    trigger.clone(),
                );
                workers.insert(key, WorkerHandle { stop, trigger, pod: pod_cell });
                debug!(podUID = %uid, containerName = %c.name, probeType = %t, "starting probe worker");
                let span = info_span!("probe", podUID = %uid, containerName = %c.name, probeType = %t);
                self.tracker.spawn(w.run().instrument(span));
            }
        }
    }

    /// A restarted kubelet keeps what the pod's status (as it last wrote it) says of a running container: ready
    /// stays ready and started stays started until the new worker's own probes decide, so a restart changes no
    /// status. Upstream starts readiness at Failure, which turns every probed pod NotReady (and takes it out of its
    /// Services' endpoints) until the first probe.
    fn seed_from_status(&self, pod: &Pod, container: &str, t: ProbeType) {
        let Some(status) = pod.status.as_ref() else { return };
        let all = status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten());
        for s in all.filter(|s| s.name == container && is_running(s) && s.container_id.is_some()) {
            let known = match t {
                ProbeType::Readiness => s.ready && s.started == Some(true),
                ProbeType::Startup => s.started == Some(true),
                ProbeType::Liveness => false,
            };
            if known {
                self.cache(t).seed(runtime_id(s), ProbeResult::Success);
            }
        }
    }

    fn stop_where(&self, keep: impl Fn(&WorkerKey) -> bool) {
        let mut workers = self.shared.workers.lock().unwrap();
        workers.retain(|k, h| {
            let k_keep = keep(k);
            if !k_keep {
                h.stop.cancel();
            }
            k_keep
        });
    }

    /// Stops the liveness and startup workers of a terminating pod (`StopLivenessAndStartup`): nothing restarts its
    /// containers any more, while readiness keeps reporting.
    pub fn stop_liveness_and_startup(&self, uid: &PodUid) {
        self.stop_where(|(u, _, t)| !(u == uid && matches!(t, ProbeType::Liveness | ProbeType::Startup)));
    }

    /// Stops every worker of a pod (`RemovePod`).
    pub fn remove_pod(&self, uid: &PodUid) {
        self.stop_where(|(u, _, _)| u != uid);
    }

    /// Stops workers of pods no longer desired (`CleanupPods`, housekeeping).
    pub fn cleanup_pods(&self, desired: &HashSet<PodUid>) {
        self.stop_where(|(u, _, _)| desired.contains(u));
    }

    /// Number of running workers.
    pub fn worker_count(&self) -> usize {
        self.shared.workers.lock().unwrap().len()
    }

    fn has_worker(&self, uid: &PodUid, name: &str, t: ProbeType) -> bool {
        self.shared.workers.lock().unwrap().contains_key(&(uid.clone(), name.to_string(), t))
    }

    fn trigger(&self, uid: &PodUid, name: &str, t: ProbeType) {
        if let Some(h) = self.shared.workers.lock().unwrap().get(&(uid.clone(), name.to_string(), t)) {
            h.trigger.notify_one();
        }
    }

    fn started(&self, uid: &PodUid, s: &ApiContainerStatus) -> bool {
        if !is_running(s) {
            return false;
        }
        match self.startup.get(runtime_id(s)) {
            Some(r) => r == ProbeResult::Success,
            None => !self.has_worker(uid, &s.name, ProbeType::Startup),
        }
    }

    fn ready(&self, uid: &PodUid, s: &ApiContainerStatus) -> bool {
        if !is_running(s) {
            return false;
        }
        if self.readiness.get(runtime_id(s)) == Some(ProbeResult::Success) {
            return true;
        }
        let probed = self.has_worker(uid, &s.name, ProbeType::Readiness);
        if probed {
            // Not ready yet: ask for a check now rather than at the next period.
            self.trigger(uid, &s.name, ProbeType::Readiness);
        }
        !probed
    }
}

impl PodProbeStatus for ProbeManager {
    fn update_pod_status(&self, pod: &Pod, init: &mut [ApiContainerStatus], apps: &mut [ApiContainerStatus]) {
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        for s in apps.iter_mut() {
            let started = self.started(&uid, s);
            s.started = Some(started);
            s.ready = started && self.ready(&uid, s);
        }
        for s in init.iter_mut() {
            let started = self.started(&uid, s);
            s.started = Some(started);
            if is_restartable_init_container(pod, &s.name) {
                s.ready = started && self.ready(&uid, s);
            }
        }
    }
}

impl ContainerHealth for ProbeManager {
    fn result(&self, probe: ProbeType, container_id: &str) -> Option<ProbeResult> {
        self.cache(probe).get(container_id)
    }
}
