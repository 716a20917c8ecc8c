//! The runtime manager (`pkg/kubelet/kuberuntime/kuberuntime_manager.go`, `kuberuntime_container.go`,
//! `kuberuntime_sandbox.go`, `kuberuntime_image.go`): lists and inspects pods through CRI, syncs a pod to its
//! spec and kills it.
//!
//! Called by the pod workers (one call at a time per pod, never concurrently for the same pod) and by the PLEG.
//! Every failure is returned as a [`SyncError`] with upstream's reason (`CrashLoopBackOff`, `ErrImagePull`,
//! `CreateContainerError`, ...); the reason is also kept in the [`ReasonCache`] for the pod status. The caller
//! retries at its next sync.
//!
//! A sync starts containers in `SyncPod`'s order: the ephemeral containers that never ran (step 5, before the
//! init containers so a debugger can join a pod whose initialization is stuck), the init containers (step 6),
//! the app containers (step 8). Ephemeral containers are stopped only by [`RuntimeManager::kill_pod`], with the
//! rest of the pod.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use kubelet_cri::{CriError, CriResult, ImageService, RuntimeService, api};
use kubelet_types::pod_update::{ephemeral_container_common, pod_ref, pod_uid};
use kubelet_types::probe::{ContainerHealth, NoProbes};
use kubelet_types::{
    Clock, ContainerState, ContainerStatus, PodStatus, PodUid, RuntimeContainer, RuntimePod, SandboxState,
    SandboxStatus, labels as keys,
};
use tracing::{debug, info, warn};

use crate::actions::{PodActions, compute_pod_actions};
use crate::container::StartSpec;
pub use crate::kill::{KillRequest, termination_grace_period};
use crate::labels::container_info;
use crate::logs::termination_message;
use crate::reasons::ReasonCache;
use crate::{Backoff, config_gen};
use kubelet_types::events::{LogRecorder, NORMAL, Recorder, WARNING, pod_reference, reason};

/// Crash-loop back-off: 10 s doubling to 300 s (`kubelet.go` backOffPeriod, MaxContainerBackOff).
pub const CRASH_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// Maximum crash-loop back-off.
pub const CRASH_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// The minimum grace period of a container kill (`minimumGracePeriodInSeconds`).
pub const MIN_GRACE_PERIOD_SECONDS: i64 = 2;

/// What the runtime manager needs of the kubelet configuration.
#[derive(Debug, Clone)]
pub struct RuntimeManagerConfig {
    /// `/var/log/pods`.
    pub pod_logs_dir: PathBuf,
    /// `/var/log/containers`.
    pub container_logs_dir: PathBuf,
    /// `--root-dir` (`/var/lib/kubelet`); pod directories are `<root>/pods/<uid>`.
    pub root_dir: PathBuf,
    /// `clusterDNS`.
    pub cluster_dns: Vec<String>,
    /// `clusterDomain`.
    pub cluster_domain: String,
    /// `resolvConf` (None: empty).
    pub resolv_conf: Option<PathBuf>,
    /// `cgroupsPerQOS`.
    pub cgroups_per_qos: bool,
    /// `cgroupDriver: systemd`: pod cgroups are slices.
    pub systemd_cgroup: bool,
    /// `cgroupRoot` (`/`, `/kubeadm-node`): the pods cgroup is `<cgroupRoot>/kubepods`.
    pub cgroup_root: String,
    /// `cpuCFSQuota`.
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod` in microseconds.
    pub cpu_cfs_quota_period_us: i64,
    /// No CFS quota for containers with exclusive CPUs, their pods and sandboxes (`DisableCPUQuotaWithExclusiveCPUs`).
    pub quota_lift: crate::cpus::QuotaLift,
    /// Node memory capacity in bytes (for OOM score of Burstable pods).
    pub memory_capacity: u64,
    /// `seccompDefault`: containers without a profile get the runtime's default one.
    pub seccomp_default: bool,
    /// The node's hosts file, copied for host-network pods.
    pub node_hosts_file: PathBuf,
    /// The node's IPs (for pods' DNS without a resolv.conf).
    pub node_ips: Vec<String>,
    /// The node's huge page sizes as cgroups name them (`2MB`, `1GB`): each container gets a limit of each.
    pub hugepage_sizes: Vec<String>,
    /// Swap for containers (`memorySwap`).
    pub swap: crate::swap::SwapSettings,
}

impl Default for RuntimeManagerConfig {
    fn default() -> Self {
        Self {
            pod_logs_dir: "/var/log/pods".into(),
            container_logs_dir: "/var/log/containers".into(),
            root_dir: "/var/lib/kubelet".into(),
            cluster_dns: vec![],
            cluster_domain: "cluster.local".into(),
            resolv_conf: Some("/etc/resolv.conf".into()),
            cgroups_per_qos: true,
            systemd_cgroup: false,
            cgroup_root: "/".into(),
            cpu_cfs_quota: true,
            cpu_cfs_quota_period_us: 100_000,
            quota_lift: Default::default(),
            memory_capacity: 8 << 30,
            seccomp_default: false,
            node_hosts_file: "/etc/hosts".into(),
            node_ips: vec![],
            hugepage_sizes: vec![],
            swap: Default::default(),
        }
    }
}

/// One failed step of a sync.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{action} {target}: {reason}: {message}")]
pub struct SyncError {
    /// `StartContainer`, `KillContainer`, `CreatePodSandbox`, `KillPodSandbox`, `ConfigPodSandbox`.
    pub action: &'static str,
    /// The container name or the pod.
    pub target: String,
    /// Upstream's brief reason.
    pub reason: String,
    /// Human message.
    pub message: String,
}

/// Outcome of a sync: the failed steps (empty means success).
#[derive(Debug, Clone, Default)]
pub struct SyncResult {
    /// Failed steps.
    pub errors: Vec<SyncError>,
    /// Containers started by this sync, by name.
    pub started: Vec<String>,
    /// The sync asked the runtime to change something (kill, remove, create or start), so the pod's cached
    /// status no longer holds; a sync that changed nothing leaves it true.
    pub changed: bool,
    /// The sync set out to make the pod's sandbox (whether it succeeded or not).
    pub sandbox_attempted: bool,
}

impl SyncResult {
    /// Whether every step succeeded.
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Whether the only failures are back-offs (not worth logging as errors).
    pub fn only_backoff(&self) -> bool {
        self.errors.iter().all(|e| e.reason == "CrashLoopBackOff" || e.reason == "ImagePullBackOff")
    }
}

/// The runtime manager.
pub struct RuntimeManager {
    pub(crate) runtime: Arc<dyn RuntimeService>,
    pub(crate) images: Arc<dyn ImageService>,
    pub(crate) cfg: RuntimeManagerConfig,
    pub(crate) crash_backoff: Backoff,
    pub(crate) image_backoff: Backoff,
    pub(crate) reasons: Arc<ReasonCache>,
    pub(crate) runtime_name: OnceLock<String>,
    /// Sandboxes this manager stopped (StopPodSandbox succeeded): not stopped again; forgotten when removed.
    pub(crate) stopped_sandboxes: std::sync::Mutex<std::collections::HashSet<String>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) recorder: Arc<dyn Recorder>,
    pub(crate) health: Arc<dyn ContainerHealth>,
    /// Containers the kernel log says were OOM-killed (the runtime's reason can miss one).
    pub(crate) oom_kills: Arc<crate::oom_kills::OomKills>,
    pub(crate) objects: Arc<dyn crate::env::ObjectSource>,
    pub(crate) node: crate::env::NodeFacts,
    /// Mounted volumes of pods.
    pub(crate) volumes: Arc<dyn kubelet_types::objects::PodVolumes>,
    /// Pulls allowed at once (`serializeImagePulls`, `maxParallelImagePulls`).
    pub(crate) pulls: Arc<tokio::sync::Semaphore>,
    /// The last pull error per pod and image, for the back-off message.
    pub(crate) pull_errors: std::sync::Mutex<HashMap<String, String>>,
    /// Per pod, when its first image pull started and its last one ended (`pod_startup_latency_tracker`).
    pub(crate) pull_windows: std::sync::Mutex<HashMap<PodUid, (tokio::time::Instant, tokio::time::Instant)>>,
    /// Image pull credentials (pull secrets, the node's docker config files, credential provider plugins).
    pub(crate) credentials: crate::pull::Credentials,
    /// The runtime's handlers and their features, as the runtime state last saw them.
    pub(crate) handlers: tokio::sync::watch::Receiver<crate::runtime_handlers::RuntimeInfo>,
    /// The pods' user namespaces (None: every pod in the node's, and `hostUsers: false` fails its sandbox).
    pub(crate) userns: Option<Arc<crate::userns::UsernsManager>>,
    /// The images the pods mount as image volumes (for the image garbage collector).
    pub(crate) image_volumes_in_use: Arc<crate::images::ImageVolumesInUse>,
    /// The device managers (device plugins, DRA): what each container gets.
    pub(crate) devices: Arc<dyn crate::devices::ContainerDevices>,
    /// The CPU manager: each container's cpuset.
    pub(crate) cpus: Arc<dyn crate::cpus::ContainerCpus>,
    /// The memory manager: each container's memory nodes.
    pub(crate) mems: Arc<dyn crate::cpus::ContainerMems>,
    /// The pod cgroups, for in-place resizes.
    pub(crate) pod_cgroups: Arc<dyn crate::resize::PodCgroupResizer>,
    /// What the runtime was last told of each container's resources (`actuated_pods_state`).
    pub(crate) actuated: Arc<kubelet_cm::allocation_state::PodResourceState>,
}

impl std::fmt::Debug for RuntimeManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeManager").field("cfg", &self.cfg).finish()
    }
}

pub(crate) fn ns_to_system_time(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

fn container_state(s: i32) -> ContainerState {
    match api::ContainerState::try_from(s) {
        Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

fn sandbox_state(s: i32) -> SandboxState {
    if s == api::PodSandboxState::SandboxReady as i32 { SandboxState::Ready } else { SandboxState::NotReady }
}

fn uid_filter_sandbox(uid: &PodUid) -> api::PodSandboxFilter {
    api::PodSandboxFilter { label_selector: [(keys::POD_UID.to_string(), uid.0.clone())].into(), ..Default::default() }
}

fn uid_filter_container(uid: &PodUid) -> api::ContainerFilter {
    api::ContainerFilter { label_selector: [(keys::POD_UID.to_string(), uid.0.clone())].into(), ..Default::default() }
}

impl RuntimeManager {
    /// A manager over the given services.
    pub fn new(
        runtime: Arc<dyn RuntimeService>,
        images: Arc<dyn ImageService>,
        cfg: RuntimeManagerConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            runtime,
            images,
            cfg,
            crash_backoff: Backoff::new(CRASH_BACKOFF_INITIAL, CRASH_BACKOFF_MAX, clock.clone()),
            image_backoff: Backoff::new(CRASH_BACKOFF_INITIAL, CRASH_BACKOFF_MAX, clock.clone()),
            clock,
            recorder: Arc::new(LogRecorder),
            health: Arc::new(NoProbes),
            objects: Arc::new(crate::env::NoObjects),
            node: crate::env::NodeFacts::default(),
            volumes: Arc::new(kubelet_types::objects::NoVolumes),
            pulls: Arc::new(tokio::sync::Semaphore::new(1)),
            pull_errors: Default::default(),
            pull_windows: Default::default(),
            reasons: Arc::new(ReasonCache::default()),
            runtime_name: OnceLock::new(),
            stopped_sandboxes: Default::default(),
            oom_kills: Default::default(),
            credentials: None,
            handlers: tokio::sync::watch::channel(Default::default()).1,
            userns: None,
            image_volumes_in_use: Default::default(),
            devices: Arc::new(crate::devices::NoDevices),
            cpus: Arc::new(crate::cpus::NoCpus),
            mems: Arc::new(crate::cpus::NoMems),
            pod_cgroups: Arc::new(crate::resize::NoPodCgroups),
            actuated: Arc::new(kubelet_cm::allocation_state::PodResourceState::in_memory()),
        }
    }

    /// Gives containers the devices `devices` allocated them (device nodes, mounts, variables, CDI names).
    pub fn with_devices(mut self, devices: Arc<dyn crate::devices::ContainerDevices>) -> Self {
        self.devices = devices;
        self
    }

    /// Gives containers the memory NUMA nodes `mems` assigns them.
    pub fn with_mems(mut self, mems: Arc<dyn crate::cpus::ContainerMems>) -> Self {
        self.mems = mems;
        self
    }

    /// Gives containers the cpuset `cpus` assigns them.
    pub fn with_cpus(mut self, cpus: Arc<dyn crate::cpus::ContainerCpus>) -> Self {
        self.cpus = cpus;
        self
    }

    /// The images the pods mount as image volumes, for the image garbage collector.
    pub fn image_volumes_in_use(&self) -> Arc<crate::images::ImageVolumesInUse> {
        self.image_volumes_in_use.clone()
    }

    /// Gives pods with `hostUsers: false` their own user namespaces from `m` (upstream's userns manager).
    pub fn with_user_namespaces(mut self, m: Arc<crate::userns::UsernsManager>) -> Self {
        self.userns = Some(m);
        self
    }

    /// The pod's user namespace for the CRI (`GetOrCreateUserNamespaceMappings` with the handler's feature): the
    /// node's for `hostUsers` unset or true, the pod's own range for `hostUsers: false` where the pod's runtime
    /// handler supports user namespaces, else upstream's refusal text.
    pub(crate) fn user_namespace(&self, pod: &Pod) -> Result<Option<api::UserNamespace>, String> {
        let host_users = pod.spec.as_ref().and_then(|s| s.host_users);
        let Some(m) = &self.userns else {
            return match host_users {
                Some(false) => {
                    Err("can't set `spec.hostUsers: false`, runtime does not support user namespaces".into())
                }
                _ => Ok(None),
            };
        };
        let handler = self.pod_runtime_handler(pod)?;
        let supports = {
            let info = self.handlers.borrow();
            match info.handler(&handler) {
                Some(h) => Ok(h.user_namespaces),
                None if info.handlers.is_empty() => Ok(false),
                None => Err(format!("the handler {handler:?} is not known")),
            }
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        m.get_or_create(uid, host_users, &handler, supports).map(Some).map_err(|e| e.to_string())
    }

    /// Unprepares the pod's ResourceClaims once all its containers stopped (`UnprepareDynamicResources`, before the
    /// pod's final status).
    pub async fn unprepare_dynamic_resources(&self, pod: &Pod) -> Result<(), String> {
        self.devices.unprepare(pod).await
    }

    /// Forgets what a terminated pod held once nothing of it runs (its cgroup is gone): its user namespace range
    /// (`Release`), the images of its image volumes and its devices.
    pub fn forget_terminated_pod(&self, uid: &PodUid) {
        if let Some(m) = &self.userns {
            m.release(&uid.0);
        }
        self.image_volumes_in_use.forget(&uid.0);
        self.devices.release(&uid.0);
    }

    /// Frees the ranges of pods no longer known (`CleanupOrphanedPodUsernsAllocations`, from housekeeping).
    pub fn cleanup_user_namespaces(&self, known: &std::collections::HashSet<PodUid>) {
        if let Some(m) = &self.userns {
            m.cleanup_orphans(&known.iter().map(|u| u.0.clone()).collect());
        }
    }

    /// Follows the runtime's handlers and features (recursive read-only mounts, user namespaces) as the runtime
    /// state publishes them; without it the runtime is taken to report none (as containerd 1.6).
    pub fn with_runtime_handlers(
        mut self,
        handlers: tokio::sync::watch::Receiver<crate::runtime_handlers::RuntimeInfo>,
    ) -> Self {
        self.handlers = handlers;
        self
    }

    /// The runtime handler of the pod's RuntimeClass (`""`: the default one), or why it cannot be resolved.
    pub(crate) fn pod_runtime_handler(&self, pod: &Pod) -> Result<String, String> {
        let class = pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_deref()).filter(|n| !n.is_empty());
        match class {
            Some(name) => self.objects.runtime_handler(name),
            None => Ok(String::new()),
        }
    }

    /// Whether the handler of the pod's RuntimeClass makes recursive read-only mounts, for the pod's status
    /// (`runtimeClassSupportsRecursiveReadOnlyMounts`; quiet, unlike the start of a container, which logs why not).
    pub fn pod_supports_recursive_read_only(&self, pod: &Pod) -> bool {
        let Ok(handler) = self.pod_runtime_handler(pod) else { return false };
        self.handlers.borrow().handler(&handler).is_some_and(|h| h.recursive_read_only_mounts)
    }

    /// Where the OOM watcher records the containers the kernel killed at their memory limit.
    pub fn oom_kills(&self) -> Arc<crate::oom_kills::OomKills> {
        self.oom_kills.clone()
    }

    /// Records events to `recorder` (default: the log).
    pub fn with_recorder(mut self, recorder: Arc<dyn Recorder>) -> Self {
        self.recorder = recorder;
        self
    }

    /// Reads liveness and startup results from `health` (default: no probes).
    pub fn with_probe_results(mut self, health: Arc<dyn ContainerHealth>) -> Self {
        self.health = health;
        self
    }

    /// Reads ConfigMaps, Secrets and Services for container environments from `objects` (default: none, as a
    /// node without an apiserver).
    pub fn with_objects(mut self, objects: Arc<dyn crate::env::ObjectSource>) -> Self {
        self.objects = objects;
        self
    }

    /// Pulls with the credentials `lookup` finds (default: anonymous pulls only).
    pub fn with_credentials(mut self, lookup: std::sync::Arc<kubelet_credentialprovider::CredentialLookup>) -> Self {
        self.credentials = Some(lookup);
        self
    }

    /// Reads the pods' mounted volumes from `volumes` (default: none).
    pub fn with_volumes(mut self, volumes: Arc<dyn kubelet_types::objects::PodVolumes>) -> Self {
        self.volumes = volumes;
        self
    }

    /// What containers learn of the node (host IPs, allocatable resources).
    pub fn with_node_facts(mut self, node: crate::env::NodeFacts) -> Self {
        self.node = node;
        self
    }

    /// How many image pulls may run at once: one with `serializeImagePulls` (the default), else
    /// `maxParallelImagePulls` (None: unlimited).
    pub fn with_pull_limit(mut self, serialize: bool, max_parallel: Option<usize>) -> Self {
        let n = if serialize { 1 } else { max_parallel.unwrap_or(tokio::sync::Semaphore::MAX_PERMITS) };
        self.pulls = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        self
    }

    /// Where events go.
    pub fn recorder(&self) -> &Arc<dyn Recorder> {
        &self.recorder
    }

    /// The wall clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The runtime service.
    pub fn runtime(&self) -> &Arc<dyn RuntimeService> {
        &self.runtime
    }

    /// The start failures of containers, for status.
    pub fn reasons(&self) -> &Arc<ReasonCache> {
        &self.reasons
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeManagerConfig {
        &self.cfg
    }

    /// How long the pod's image pulls took, from the first start to the last end (what
    /// `kubelet_pod_start_sli_duration_seconds` leaves out), and forgets it; zero when nothing was pulled.
    pub fn take_pull_window(&self, uid: &PodUid) -> Duration {
        self.pull_windows.lock().unwrap().remove(uid).map(|(a, b)| b.saturating_duration_since(a)).unwrap_or_default()
    }

    /// The runtime's name for container IDs (`containerd://...`), asked once.
    pub async fn runtime_name(&self) -> CriResult<String> {
        if let Some(n) = self.runtime_name.get() {
            return Ok(n.clone());
        }
        let v = self.runtime.version().await?;
        Ok(self.runtime_name.get_or_init(|| v.runtime_name).clone())
    }

    /// Forgets back-off entries that expired (housekeeping).
    pub fn gc_backoff(&self) {
        self.crash_backoff.gc();
        self.image_backoff.gc();
    }

    /// Every pod the runtime has (`GetPods`); with `all == false` only running containers and ready sandboxes.
    pub async fn get_pods(&self, all: bool) -> CriResult<Vec<RuntimePod>> {
        // Brief lists: the relist runs every second over every object of the node and reads only identities and
        // states (see kubelet_cri::brief).
        let (mut sandboxes, mut containers) =
            tokio::try_join!(self.runtime.list_pod_sandbox_brief(), self.runtime.list_containers_brief())?;
        if !all {
            sandboxes.retain(|s| s.state == api::PodSandboxState::SandboxReady as i32);
            containers.retain(|c| c.state == api::ContainerState::ContainerRunning as i32);
        }
        let mut pods: HashMap<String, RuntimePod> = HashMap::new();
        let mut sb_times: HashMap<String, Vec<i64>> = HashMap::new();
        for s in sandboxes {
            // As upstream's GetPods: a sandbox's pod is its metadata (one without a pod UID is not a pod's).
            let Some(m) = s.metadata.as_ref().filter(|m| !m.uid.is_empty()) else { continue };
            let uid = m.uid.clone();
            let p = pods.entry(uid.clone()).or_insert_with(|| RuntimePod {
                id: PodUid(uid.clone()),
                name: m.name.clone(),
                namespace: m.namespace.clone(),
                ..Default::default()
            });
            p.sandboxes.push((s.id.clone(), sandbox_state(s.state)));
            sb_times.entry(uid).or_default().push(s.created_at);
        }
        for mut c in containers {
            let Some(uid) = c.labels.remove(keys::POD_UID).filter(|u| !u.is_empty()) else { continue };
            let mut take = |k: &str| c.labels.remove(k).unwrap_or_default();
            let (name, pod_name, pod_namespace) =
                (take(keys::CONTAINER_NAME), take(keys::POD_NAME), take(keys::POD_NAMESPACE));
            let p = pods.entry(uid).or_insert_with_key(|uid| RuntimePod {
                id: PodUid(uid.clone()),
                name: pod_name,
                namespace: pod_namespace,
                ..Default::default()
            });
            p.containers.push(RuntimeContainer {
                id: c.id,
                name,
                state: container_state(c.state),
                created_at: c.created_at,
            });
        }
        let mut out: Vec<RuntimePod> = pods.into_values().collect();
        for p in &mut out {
            p.containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
            if let Some(times) = sb_times.get(&p.id.0) {
                let mut z: Vec<_> = times.iter().copied().zip(p.sandboxes.drain(..)).collect();
                z.sort_by_key(|s| std::cmp::Reverse(s.0));
                p.sandboxes = z.into_iter().map(|(_, s)| s).collect();
            }
        }
        Ok(out)
    }

    /// Full status of one pod (`GetPodStatus`), containers and sandboxes newest first.
    pub async fn get_pod_status(&self, uid: &PodUid, name: &str, namespace: &str) -> CriResult<PodStatus> {
        let (mut sandboxes, mut containers) = tokio::try_join!(
            self.runtime.list_pod_sandbox(Some(uid_filter_sandbox(uid))),
            self.runtime.list_containers(Some(uid_filter_container(uid)))
        )?;
        sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        let sandboxes: Vec<String> = sandboxes.into_iter().map(|s| s.id).collect();
        let containers: Vec<String> = containers.into_iter().map(|c| c.id).collect();
        self.status_of(uid, name, namespace, &sandboxes, &containers).await
    }

    /// The status of a pod whose sandboxes and containers are all in `known` (a pod that stopped: nothing of it is
    /// created any more), asked of the runtime without listing them again.
    pub async fn refresh_pod_status(&self, known: &PodStatus) -> CriResult<PodStatus> {
        let sandboxes: Vec<String> = known.sandbox_statuses.iter().map(|s| s.id.clone()).collect();
        let containers: Vec<String> = known.container_statuses.iter().map(|c| c.id.clone()).collect();
        self.status_of(&known.id, &known.name, &known.namespace, &sandboxes, &containers).await
    }

    /// `PodSandboxStatus` and `ContainerStatus` of the given objects (newest first); gone ones are left out.
    async fn status_of(
        &self,
        uid: &PodUid,
        name: &str,
        namespace: &str,
        sandboxes: &[String],
        containers: &[String],
    ) -> CriResult<PodStatus> {
        let mut status = PodStatus {
            id: uid.clone(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..Default::default()
        };
        for (i, id) in sandboxes.iter().enumerate() {
            let st = match self.runtime.pod_sandbox_status(id).await {
                Ok(st) => st,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let mut ips = vec![];
            if let Some(n) = st.network.as_ref() {
                if !n.ip.is_empty() {
                    ips.push(n.ip.clone());
                }
                ips.extend(n.additional_ips.iter().map(|p| p.ip.clone()));
            }
            let host_network = st
                .linux
                .as_ref()
                .and_then(|l| l.namespaces.as_ref())
                .and_then(|n| n.options.as_ref())
                .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
            if i == 0 && st.state == api::PodSandboxState::SandboxReady as i32 {
                status.ips = ips.clone();
            }
            status.sandbox_statuses.push(SandboxStatus {
                id: st.id,
                state: sandbox_state(st.state),
                created_at: st.created_at,
                attempt: st.metadata.map(|m| m.attempt).unwrap_or(0),
                ips,
                host_network,
            });
        }
        for id in containers {
            let st = match self.runtime.container_status(id).await {
                Ok(st) => st,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let info = container_info(&st.labels, &st.annotations);
            let mut message = st.message.clone();
            if st.state == api::ContainerState::ContainerExited as i32 {
                let fallback = info.termination_message_policy == "FallbackToLogsOnError"
                    && st.exit_code != 0
                    && st.reason != "ContainerCannotRun";
                let t = termination_message(&st, &info.termination_message_path, fallback);
                if !t.is_empty() {
                    if !message.is_empty() {
                        message.push_str(": ");
                    }
                    message.push_str(&t);
                }
            }
            // An OOM kill the runtime missed (containerd 1.6 under load) is still an OOM kill.
            let reason = if st.state == api::ContainerState::ContainerExited as i32
                && st.exit_code == 137
                && st.reason != "OOMKilled"
                && self.oom_kills.contains(&st.id)
            {
                "OOMKilled".to_string()
            } else {
                st.reason.clone()
            };
            let actuated = self.actuated.container(uid.as_str(), &info.name);
            status.container_statuses.push(ContainerStatus {
                id: st.id,
                name: info.name,
                state: container_state(st.state),
                created_at: st.created_at,
                started_at: st.started_at,
                finished_at: st.finished_at,
                exit_code: st.exit_code,
                image: st.image.map(|i| i.image).unwrap_or_default(),
                image_ref: st.image_ref,
                hash: info.hash,
                restart_count: info.restart_count,
                reason,
                message,
                log_path: st.log_path,
                resources: crate::resize::fill_from_actuated(
                    crate::resize::from_runtime(st.resources.as_ref()),
                    actuated.as_ref(),
                ),
            });
        }
        Ok(status)
    }

    /// Brings the pod to its spec (`SyncPod`): kill what must go, create the sandbox, start the ephemeral
    /// containers that never ran, then the next init container or the app containers.
    pub async fn sync_pod(&self, pod: &Pod, status: &PodStatus) -> SyncResult {
        let mut result = self.sync_pod_inner(pod, status).await;
        // A sync that made the sandbox of a `hostUsers: false` pod counts as its start; any failed step of that
        // sync as an error of it (upstream's deferred check of the sync results).
        if result.sandbox_attempted && pod.spec.as_ref().and_then(|s| s.host_users) == Some(false) {
            kubelet_metrics::kubelet::STARTED_USER_NAMESPACED_PODS.inc(&[]);
            if !result.ok() {
                kubelet_metrics::kubelet::STARTED_USER_NAMESPACED_PODS_ERRORS.inc(&[]);
            }
        }
        // Anything but a back-off may have changed the runtime (a failed create can leave a container behind).
        result.changed |= !result.started.is_empty() || !result.only_backoff();
        result
    }

    async fn sync_pod_inner(&self, pod: &Pod, status: &PodStatus) -> SyncResult {
        let mut actions = compute_pod_actions(pod, status, self.health.as_ref());
        let uid_str = pod.metadata.uid.clone().unwrap_or_default();
        crate::resize::compute_resize_actions(pod, status, &|c| self.actuated.container(&uid_str, c), &mut actions);
        debug!(pod = %pod_ref(pod), ?actions, "computed pod actions");
        let mut result = SyncResult {
            changed: actions.kill_pod || actions.create_sandbox || !actions.containers_to_kill.is_empty(),
            ..Default::default()
        };
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());

        if actions.kill_pod {
            if actions.create_sandbox && !status.sandbox_statuses.is_empty() {
                info!(pod = %pod_ref(pod), podUID = %uid, "pod sandbox changed, it will be killed and re-created");
                self.recorder.event(
                    &pod_reference(pod),
                    NORMAL,
                    reason::SANDBOX_CHANGED,
                    "Pod sandbox changed, it will be killed and re-created.".into(),
                );
            }
            if let Err(e) = self.kill_pod(Some(pod), status, None).await {
                result.errors.push(e);
                return result;
            }
            if actions.create_sandbox {
                // Init containers of the old sandbox are history: the new sandbox runs them all again.
                result.changed |= self.remove_init_containers(pod, status, false).await;
            }
        } else {
            for (id, info) in &actions.containers_to_kill {
                info!(pod = %pod_ref(pod), containerName = %info.name, containerID = %id, message = %info.message, "killing container");
                let kill = KillRequest { message: Some(&info.message), reason: info.reason, ..Default::default() };
                if let Err(e) = self.kill_container(Some(pod), id, &info.name, kill).await {
                    result.errors.push(e);
                    return result;
                }
            }
        }
        // Keep only the latest instance of each init container.
        result.changed |= self.remove_init_containers(pod, status, true).await;

        let mut sandbox_id = actions.sandbox_id.clone();
        let mut pod_ips = status.ips.clone();
        if actions.create_sandbox {
            // The pod's ResourceClaims are prepared through their DRA drivers before every sandbox it gets
            // (upstream's `PrepareDynamicResources` in `SyncPod`); until they are, nothing of the pod is made.
            if let Err(e) = self.devices.prepare(pod).await {
                let message = format!("Failed to prepare dynamic resources: {e}");
                self.recorder.event(
                    &pod_reference(pod),
                    WARNING,
                    reason::FAILED_PREPARE_DYNAMIC_RESOURCES,
                    message.clone(),
                );
                warn!(pod = %pod_ref(pod), podUID = %uid, error = %e, "Failed to prepare dynamic resources");
                result.errors.push(SyncError {
                    action: "PrepareDynamicResources",
                    target: pod_ref(pod),
                    reason: reason::FAILED_PREPARE_DYNAMIC_RESOURCES.into(),
                    message,
                });
                return result;
            }
            result.sandbox_attempted = true;
            match self.create_sandbox(pod, actions.attempt).await {
                Ok((id, ips)) => {
                    sandbox_id = id;
                    pod_ips = ips;
                }
                Err(e) => {
                    result.errors.push(e);
                    return result;
                }
            }
        }
        let mut sandbox_config = config_gen::sandbox_config(&self.cfg, pod, actions.attempt);
        if self.cfg.cpu_cfs_quota && self.cfg.quota_lift.pod(pod) {
            let linux = sandbox_config.linux.get_or_insert_with(Default::default);
            linux.resources.get_or_insert_with(Default::default).cpu_quota = -1;
        }
        match self.user_namespace(pod) {
            Ok(ns) => config_gen::set_sandbox_user_namespace(&mut sandbox_config, ns),
            Err(m) => {
                result.errors.push(SyncError {
                    action: "ConfigPodSandbox",
                    target: pod_ref(pod),
                    reason: "ConfigPodSandbox".into(),
                    message: format!("GeneratePodSandboxConfig for pod {:?} failed: {m}", pod_ref(pod)),
                });
                return result;
            }
        }
        // The pull secrets, read once per sync (`getPullSecretsForPod`).
        let pull_secrets = self.pull_secrets_of(pod).await;
        // The images of its image volumes, once per sync now that the sandbox exists (`getImageVolumes`).
        let has_image_volumes =
            pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|v| v.iter().any(|v| v.image.is_some()));
        let image_volumes = if has_image_volumes {
            self.image_volumes(pod, &sandbox_config, &pull_secrets).await
        } else {
            Default::default()
        };
        let inputs =
            crate::pull::PodInputs { pod_ips: &pod_ips, pull_secrets: &pull_secrets, image_volumes: &image_volumes };
        self.start_containers(pod, status, &actions, &sandbox_id, &sandbox_config, &inputs, &mut result).await;
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_containers(
        &self,
        pod: &Pod,
        status: &PodStatus,
        actions: &PodActions,
        sandbox_id: &str,
        sandbox_config: &api::PodSandboxConfig,
        inputs: &crate::pull::PodInputs<'_>,
        result: &mut SyncResult,
    ) {
        let spec = pod.spec.clone().unwrap_or_default();
        // Ephemeral containers first (SyncPod step 5), so a debugger starts even when an init container cannot;
        // a failure does not hold back anything else.
        let ephemerals = spec.ephemeral_containers.as_deref().unwrap_or(&[]);
        for &i in &actions.ephemeral_containers_to_start {
            let ec = &ephemerals[i];
            let common = ephemeral_container_common(ec);
            // Added to a running pod, it was never admitted: a field rkubelet does not apply keeps it from starting.
            let prefix = format!("spec.ephemeralContainers[{i}]");
            let kind = kubelet_types::pod_fields::ContainerKind::Ephemeral;
            if let Some(m) = kubelet_types::pod_fields::refusal_for_container(&prefix, &common, kind) {
                warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), containerName = %ec.name, error = %m, "refusing to start ephemeral container");
                let cref = kubelet_types::events::container_reference(pod, &ec.name);
                self.recorder.event(&cref, WARNING, reason::FAILED, format!("Error: {m}"));
                let (target, reason) = (ec.name.clone(), "CreateContainerConfigError".to_string());
                result.errors.push(SyncError { action: "StartContainer", target, reason, message: m });
                continue;
            }
            let start = StartSpec::ephemeral(&common, ec.target_container_name.as_deref());
            debug!(pod = %pod_ref(pod), podUID = %pod_uid(pod), containerName = %ec.name, targetContainerName = ?start.target, "creating ephemeral container");
            match self.start_container(pod, start, status, sandbox_id, sandbox_config, inputs).await {
                Ok(()) => result.started.push(ec.name.clone()),
                Err(e) => result.errors.push(e),
            }
        }
        for &i in &actions.init_containers_to_start {
            let c = &spec.init_containers.as_deref().unwrap_or(&[])[i];
            match self.start_container(pod, StartSpec::container(c), status, sandbox_id, sandbox_config, inputs).await {
                Ok(()) => result.started.push(c.name.clone()),
                Err(e) => {
                    result.errors.push(e);
                    // A sidecar that fails to start does not hold back the others; a regular init container does.
                    if !crate::actions::is_restartable(c) {
                        return;
                    }
                }
            }
        }
        // SyncPod step 7: containers resized in place, with the pod cgroup.
        if !actions.memory_updates.is_empty() || !actions.cpu_updates.is_empty() || actions.update_pod_resources {
            result.changed = true;
            if let Err(e) = self.do_pod_resize(pod, actions).await {
                result.errors.push(e);
            }
        }
        for &i in &actions.containers_to_start {
            let c = &spec.containers[i];
            match self.start_container(pod, StartSpec::container(c), status, sandbox_id, sandbox_config, inputs).await {
                Ok(()) => result.started.push(c.name.clone()),
                Err(e) => result.errors.push(e),
            }
        }
    }

    async fn create_sandbox(&self, pod: &Pod, attempt: u32) -> Result<(String, Vec<String>), SyncError> {
        let err = |reason: &str, message: String| SyncError {
            action: "CreatePodSandbox",
            target: pod_ref(pod),
            reason: reason.into(),
            message,
        };
        let (mut config, dns_warnings) = config_gen::sandbox_config_with_warnings(&self.cfg, pod, attempt);
        for (r, message) in dns_warnings {
            warn!(pod = %pod_ref(pod), reason = r, message = %message, "pod DNS");
            self.recorder.event(&pod_reference(pod), WARNING, r, message);
        }
        crate::logs::ensure_dir(std::path::Path::new(&config.log_directory)).map_err(|e| {
            err("CreatePodSandboxConfigError", format!("create log directory {}: {e}", config.log_directory))
        })?;
        kubelet_metrics::kubelet::STARTED_PODS.inc(&[]);
        let failed = |text: &str| {
            kubelet_metrics::kubelet::STARTED_PODS_ERRORS.inc(&[]);
            let m = format!("Failed to create pod sandbox: {text}");
            self.recorder.event(&pod_reference(pod), WARNING, reason::FAILED_CREATE_POD_SANDBOX, m.clone());
            err("CreatePodSandboxError", m)
        };
        // The RuntimeClass's handler (`LookupRuntimeHandler`); a class that cannot be resolved fails the sandbox,
        // never falls back to the default handler.
        if let Some(e) = config_gen::fqdn_error(&self.cfg, pod) {
            return Err(failed(&e));
        }
        let handler = self.pod_runtime_handler(pod).map_err(|e| failed(&e))?;
        // The pod's own user namespace (`hostUsers: false`) where its handler supports them; upstream's refusal
        // fails the sandbox, and is retried at every sync.
        let userns = self.user_namespace(pod).map_err(|e| failed(&e))?;
        config_gen::set_sandbox_user_namespace(&mut config, userns);
        if !handler.is_empty() {
            info!(pod = %pod_ref(pod), runtimeHandler = %handler, "running pod with runtime handler");
        }
        let id = self.runtime.run_pod_sandbox(config, &handler).await.map_err(|e| failed(&e.grpc_text()))?;
        info!(pod = %pod_ref(pod), podSandboxID = %id, attempt, "created pod sandbox");
        let ips = match self.runtime.pod_sandbox_status(&id).await {
            Ok(st) => {
                st.network.map(|n| vec![n.ip]).unwrap_or_default().into_iter().filter(|i| !i.is_empty()).collect()
            }
            Err(e) => {
                // Upstream's SyncPod: an event, and the sync fails (the next one finds the sandbox).
                let m = format!("Unable to get pod sandbox status: {}", e.grpc_text());
                self.recorder.event(&pod_reference(pod), WARNING, "FailedStatusPodSandBox", m.clone());
                return Err(err("CreatePodSandboxError", m));
            }
        };
        Ok((id, ips))
    }

    /// Removes init containers of the pod: every instance (`purgeInitContainers`, after the sandbox was killed
    /// for re-creation), or (`keep_latest`) all but the newest exited or unknown instance of each, never a running
    /// one (`pruneInitContainersBeforeStart`).
    /// Returns whether it asked the runtime to remove any.
    async fn remove_init_containers(&self, pod: &Pod, status: &PodStatus, keep_latest: bool) -> bool {
        let Some(inits) = pod.spec.as_ref().and_then(|s| s.init_containers.as_ref()) else { return false };
        let mut removed = false;
        for ic in inits {
            let mut kept = false;
            for s in status.container_statuses.iter().filter(|s| s.name == ic.name) {
                if keep_latest {
                    if s.state == ContainerState::Running || s.state == ContainerState::Created {
                        continue;
                    }
                    if !kept {
                        kept = true;
                        continue;
                    }
                }
                removed = true;
                if let Err(e) = self.remove_container(&s.id).await {
                    warn!(pod = %pod_ref(pod), containerName = %ic.name, error = %e, "failed to remove init container");
                }
            }
        }
        removed
    }

    /// Removes a container and its `/var/log/containers` link (`removeContainer`, `removeContainerLog`).
    pub async fn remove_container(&self, id: &str) -> CriResult<()> {
        let (link, log) = match self.runtime.container_status(id).await {
            Ok(st) => (Some(self.log_link(id, &st.labels, &st.annotations)), Some(st.log_path)),
            Err(e) if e.is_not_found() => (None, None),
            Err(e) => return Err(e),
        };
        // Its log and rotated logs go with it (`ContainerLogManager.Clean`).
        if let Some(log) = log.filter(|l| !l.is_empty()) {
            crate::log_rotation::remove_logs(std::path::Path::new(&log));
        }
        self.remove_container_and_link(id, link).await
    }

    /// The `/var/log/containers` link of a container, from its labels.
    pub(crate) fn log_link(
        &self,
        id: &str,
        labels: &HashMap<String, String>,
        annotations: &HashMap<String, String>,
    ) -> std::path::PathBuf {
        let info = container_info(labels, annotations);
        self.cfg.container_logs_dir.join(format!("{}_{}_{}-{}.log", info.pod_name, info.pod_namespace, info.name, id))
    }

    async fn remove_container_and_link(&self, id: &str, link: Option<std::path::PathBuf>) -> CriResult<()> {
        self.runtime.remove_container(id).await.or_else(ignore_not_found)?;
        if let Some(l) = link {
            let _ = std::fs::remove_file(l);
        }
        Ok(())
    }

    /// Removes every container and sandbox of a pod that no longer runs (`removeContainer`, sandbox GC): those of
    /// `known` (the pod's status as the cache holds it), else those two list calls find; one removal per object; a
    /// sandbox this manager already stopped is not stopped again.
    pub async fn remove_pod(&self, uid: &PodUid, known: Option<&PodStatus>) -> CriResult<()> {
        let (containers, sandboxes) = match known {
            Some(st) => (
                st.container_statuses
                    .iter()
                    .map(|c| {
                        let link = format!("{}_{}_{}-{}.log", st.name, st.namespace, c.name, c.id);
                        (c.id.clone(), self.cfg.container_logs_dir.join(link))
                    })
                    .collect::<Vec<_>>(),
                st.sandbox_statuses.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
            ),
            None => {
                let (containers, sandboxes) = tokio::try_join!(
                    self.runtime.list_containers(Some(uid_filter_container(uid))),
                    self.runtime.list_pod_sandbox(Some(uid_filter_sandbox(uid)))
                )?;
                (
                    containers
                        .iter()
                        .map(|c| (c.id.clone(), self.log_link(&c.id, &c.labels, &c.annotations)))
                        .collect(),
                    sandboxes.into_iter().map(|s| s.id).collect(),
                )
            }
        };
        for (id, link) in containers {
            self.remove_container_and_link(&id, Some(link)).await?;
        }
        for id in sandboxes {
            if !self.stopped_sandboxes.lock().unwrap().contains(&id) {
                self.runtime.stop_pod_sandbox(&id).await.or_else(ignore_not_found)?;
            }
            self.runtime.remove_pod_sandbox(&id).await.or_else(ignore_not_found)?;
            self.stopped_sandboxes.lock().unwrap().remove(&id);
        }
        self.reasons.forget_pod(uid);
        Ok(())
    }
}

fn ignore_not_found(e: CriError) -> CriResult<()> {
    if e.is_not_found() { Ok(()) } else { Err(e) }
}
