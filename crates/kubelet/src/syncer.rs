//! What a pod worker does at each step of a pod's life (`kubelet.go` SyncPod, SyncTerminatingPod,
//! SyncTerminatedPod): read the runtime's view, publish the API status, and drive the runtime manager, cgroups
//! and pod directories. Called by the pod worker of the pod only, one step at a time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PodStatus as ApiPodStatus;
use kubelet_eviction::EvictionStatus;
use kubelet_runtime::config_gen::pod_log_dir;
use kubelet_runtime::{Cached, PodCache, RuntimeManager};
use kubelet_types::pod_update::pod_ref;
use kubelet_types::{Pod, PodStatus, PodUid};
use tracing::{info, warn};

use crate::cm::PodCgroups;
use crate::probes::PodProbes;
use crate::status::generate::{DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE, is_terminal_phase};
use crate::status::{StatusInputs, StatusManager, generate_api_pod_status};
use crate::volumes::Volumes;

/// Retry delay after a failed step (`workerBackOffPeriod`).
pub const WORKER_BACKOFF: Duration = Duration::from_secs(10);

/// Identity of a pod, also for pods known only from the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodKey {
    /// UID.
    pub uid: PodUid,
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
}

impl PodKey {
    /// The key of a pod.
    pub fn of(pod: &Pod) -> Self {
        Self {
            uid: PodUid(pod.metadata.uid.clone().unwrap_or_default()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Outcome of SyncPod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The pod runs as it should; resync later.
    Synced,
    /// The pod reached a terminal phase: terminate it.
    Terminal,
    /// Something failed; retry after the delay.
    Retry(Duration),
    /// The pod runs as it should; sync again after the delay if that comes before the periodic resync.
    Requeue(Duration),
}

/// The three steps of a pod's life, as the pod workers call them.
#[async_trait]
pub trait PodSyncer: Send + Sync + 'static {
    /// Brings a running pod to its spec.
    async fn sync_pod(&self, pod: &Arc<Pod>) -> SyncOutcome;
    /// Stops everything of the pod; `status` (an eviction's) overrides the phase, reason and message it ends with.
    /// `Err` is retried.
    async fn sync_terminating_pod(
        &self,
        key: &PodKey,
        pod: Option<&Arc<Pod>>,
        grace: Option<i64>,
        status: Option<&EvictionStatus>,
    ) -> Result<(), String>;
    /// Cleans up after a stopped pod; `removed` pods lose their containers, sandbox, directories and status.
    async fn sync_terminated_pod(&self, key: &PodKey, pod: Option<&Arc<Pod>>, removed: bool) -> Result<(), String>;
}

/// The real syncer.
pub struct KubeletSyncer {
    /// The runtime manager.
    pub runtime: Arc<RuntimeManager>,
    /// Runtime pod cache.
    pub cache: Arc<PodCache>,
    /// API statuses.
    pub status: Arc<StatusManager>,
    /// Pod cgroups.
    pub cgroups: Arc<dyn PodCgroups>,
    /// The node's IPs.
    pub host_ips: Vec<String>,
    /// The probe manager.
    pub probes: Arc<dyn PodProbes>,
    /// The volume manager.
    pub volumes: Arc<dyn Volumes>,
}

impl KubeletSyncer {
    fn pod_dir(&self, uid: &PodUid) -> PathBuf {
        self.runtime.config().root_dir.join("pods").join(uid.as_str())
    }

    /// Asks the runtime for the pod's status (`GetPodStatus`) and caches it.
    async fn inspect(&self, key: &PodKey) -> Result<Arc<PodStatus>, String> {
        let observed = tokio::time::Instant::now();
        let st = self.runtime.get_pod_status(&key.uid, &key.name, &key.namespace).await.map_err(|e| e.to_string())?;
        Ok(self.cache.set(st, observed))
    }

    /// The pod's status asked of the objects of `known` only, and cached.
    async fn refresh(&self, known: &PodStatus) -> Result<Arc<PodStatus>, String> {
        let observed = tokio::time::Instant::now();
        let st = self.runtime.refresh_pod_status(known).await.map_err(|e| e.to_string())?;
        Ok(self.cache.set(st, observed))
    }

    /// The pod's status from the PLEG cache while it holds (`GetNewerThan`), else from the runtime.
    async fn current(&self, key: &PodKey) -> Result<Arc<PodStatus>, String> {
        match self.cache.lookup(&key.uid, &key.name, &key.namespace) {
            Cached::Fresh(st) => Ok(st),
            Cached::Unknown => self.inspect(key).await,
        }
    }

    /// How long until the pod's `activeDeadlineSeconds` runs out, counted from its start time (zero once it
    /// has; None without a deadline). `activeDeadlineHandler.pastActiveDeadline`.
    fn deadline_left(&self, pod: &Pod) -> Option<Duration> {
        let deadline = pod.spec.as_ref()?.active_deadline_seconds?;
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let start = self
            .status
            .get(&uid)
            .and_then(|s| s.start_time.clone())
            .or_else(|| pod.status.as_ref().and_then(|s| s.start_time.clone()))?;
        let now = self.runtime.clock().now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let end = Duration::from_secs((start.0.as_second() + deadline).max(0) as u64);
        Some(end.saturating_sub(now))
    }

    /// `kubelet_pod_start_duration_seconds`: from the kubelet first seeing the pod (`kubernetes.io/config.seen`)
    /// to its first Running status (`SyncPod`).
    fn observe_start(&self, pod: &Pod, phase: Option<&str>) {
        if phase != Some("Running") {
            return;
        }
        let before = self.status.get(&kubelet_types::pod_update::pod_uid(pod));
        if before.as_ref().is_some_and(|s| s.phase.as_deref() != Some("Pending")) {
            return;
        }
        let seen = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(kubelet_types::labels::CONFIG_SEEN))
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok());
        let now = chrono::DateTime::<chrono::Utc>::from(self.runtime.clock().now());
        let since = |t: chrono::DateTime<chrono::Utc>| ((now - t).num_milliseconds() as f64 / 1000.0).max(0.0);
        if let Some(seen) = seen {
            kubelet_metrics::kubelet::POD_START_DURATION.observe(&[], since(seen.with_timezone(&chrono::Utc)));
        }
        // The SLI and the total, from the pod's creation (apiserver pods; `pod_startup_latency_tracker`): the SLI
        // leaves out the time the pod's images took to pull.
        if let Some(created) = pod.metadata.creation_timestamp.as_ref() {
            let created = chrono::DateTime::<chrono::Utc>::from_timestamp(
                created.0.as_second(),
                created.0.subsec_nanosecond().max(0) as u32,
            );
            if let Some(created) = created {
                let total = since(created);
                let pulling = self.runtime.take_pull_window(&kubelet_types::pod_update::pod_uid(pod)).as_secs_f64();
                kubelet_metrics::kubelet::POD_START_TOTAL_DURATION.observe(&[], total);
                kubelet_metrics::kubelet::POD_START_SLI_DURATION.observe(&[], (total - pulling).max(0.0));
            }
        }
    }

    /// A pod never leaves a terminal phase (`generateAPIPodStatus`'s three-way merge): when the status manager's
    /// or the apiserver's phase is terminal and the new one is not, the old one stays; a phase that stays keeps
    /// its reason and message. The runtime reports IPs only for a ready sandbox; without one the old IPs stay.
    fn keep_terminal_phase(&self, pod: &Pod, status: &mut ApiPodStatus) {
        let api = pod.status.clone().unwrap_or_default();
        let old = self
            .status
            .get(&kubelet_types::pod_update::pod_uid(pod))
            .map(|s| (*s).clone())
            .unwrap_or_else(|| api.clone());
        if !is_terminal_phase(status.phase.as_deref()) {
            if is_terminal_phase(old.phase.as_deref()) {
                status.phase = old.phase.clone();
            } else if is_terminal_phase(api.phase.as_deref()) {
                status.phase = api.phase.clone();
            }
        }
        if status.phase == old.phase {
            status.reason = old.reason.clone().filter(|r| !r.is_empty()).or(api.reason);
            status.message = old.message.clone().filter(|m| !m.is_empty()).or(api.message);
        }
        // A pod without a ready sandbox (an exited pod) keeps the IPs it had (`GenericPLEG.getPodIPs`).
        if status.pod_ips.is_none() && old.pod_ips.is_some() {
            status.pod_ip = old.pod_ip.clone();
            status.pod_ips = old.pod_ips.clone();
        }
    }

    /// Marks the pod's resize in progress while a running container lacks its allocated resources, and clears it
    /// with a `ResizeCompleted` event once none does (SyncPod's IsPodResizeInProgress check).
    fn track_resize(&self, pod: &Pod, rt: &PodStatus) {
        let uid = kubelet_types::pod_update::pod_uid(pod);
        if self.runtime.is_pod_resize_in_progress(pod, rt) {
            self.status.resize().set_in_progress(&uid, "", "", pod.metadata.generation.unwrap_or(0));
        } else if self.status.resize().clear_in_progress(&uid) {
            let message = crate::allocation::resize_completed_message(pod);
            info!(pod = %kubelet_types::pod_update::pod_ref(pod), podUID = %uid, "pod resize completed");
            let reference = kubelet_types::events::pod_reference(pod);
            self.runtime.recorder().event(&reference, kubelet_types::events::NORMAL, "ResizeCompleted", message);
        }
    }

    async fn publish(&self, pod: &Pod, rt: &PodStatus, terminal: bool) -> Option<String> {
        self.publish_with(pod, rt, terminal, None).await
    }

    /// As `publish`, with a kill's status applied (`podStatusFn` of `killPodNow`): phase `Failed`, its reason and
    /// message, and the `DisruptionTarget` condition when it has one.
    async fn publish_with(
        &self,
        pod: &Pod,
        rt: &PodStatus,
        terminal: bool,
        kill: Option<&EvictionStatus>,
    ) -> Option<String> {
        let name = self.runtime.runtime_name().await.unwrap_or_else(|_| "containerd".into());
        let deadline_exceeded = self.deadline_left(pod).is_some_and(|d| d.is_zero());
        if deadline_exceeded && !terminal {
            self.runtime.recorder().event(
                &kubelet_types::events::pod_reference(pod),
                kubelet_types::events::NORMAL,
                DEADLINE_EXCEEDED,
                DEADLINE_EXCEEDED_MESSAGE.into(),
            );
        }
        let uid = kubelet_types::pod_update::pod_uid(pod);
        let resize_conditions = if terminal {
            // A terminal pod's resize is over (determinePodResizeStatus).
            self.status.resize().clear_in_progress(&uid);
            self.status.resize().clear_pending(&uid);
            vec![]
        } else {
            self.status.resize().get(&uid)
        };
        let inputs = StatusInputs {
            resize_conditions: &resize_conditions,
            runtime: rt,
            reasons: self.runtime.reasons(),
            runtime_name: &name,
            host_ips: &self.host_ips,
            pod_is_terminal: terminal,
            probes: self.probes.as_ref(),
            deadline_exceeded,
            supports_recursive_read_only: self.runtime.pod_supports_recursive_read_only(pod),
        };
        let mut status = generate_api_pod_status(pod, &inputs);
        self.keep_terminal_phase(pod, &mut status);
        if let Some(k) = kill {
            apply_kill_status(&mut status, k, self.runtime.clock().now());
        }
        let phase = status.phase.clone();
        self.observe_start(pod, phase.as_deref());
        self.status.set_pod_status(pod, status);
        phase
    }
}

#[async_trait]
impl PodSyncer for KubeletSyncer {
    async fn sync_pod(&self, pod: &Arc<Pod>) -> SyncOutcome {
        let key = PodKey::of(pod);
        let _syncing = self.cache.syncing(&key.uid);
        let rt = match self.current(&key).await {
            Ok(rt) => rt,
            Err(e) => {
                warn!(pod = %key, podUID = %key.uid, error = %e, "unable to get pod status from the runtime; will retry");
                return SyncOutcome::Retry(WORKER_BACKOFF);
            }
        };
        self.track_resize(pod, &rt);
        let phase = self.publish(pod, &rt, false).await;
        if is_terminal_phase(phase.as_deref()) {
            info!(pod = %key, podUID = %key.uid, phase = ?phase, "pod is terminal");
            return SyncOutcome::Terminal;
        }
        // Volumes before containers (`WaitForAttachAndMount`).
        let reference = kubelet_types::events::pod_reference(pod);
        for sub in ["volumes", "plugins", "containers"] {
            let dir = self.pod_dir(&key.uid).join(sub);
            if let Err(e) = kubelet_runtime::logs::ensure_dir(&dir) {
                warn!(pod = %key, podUID = %key.uid, path = %dir.display(), error = %e, "unable to make pod data directories; will retry");
                let message = format!("error making pod data directories: mkdir {}: {e}", dir.display());
                let recorder = self.runtime.recorder();
                recorder.event(&reference, kubelet_types::events::WARNING, "FailedToMakePodDataDirectories", message);
                return SyncOutcome::Retry(WORKER_BACKOFF);
            }
        }
        let failed_mount = |f: &kubelet_volume::MountFailure| {
            warn!(pod = %key, podUID = %key.uid, volume = %f.volume, error = %f.error, "unable to mount volume; will retry");
            if let Some(message) = f.event() {
                self.runtime.recorder().event(&reference, kubelet_types::events::WARNING, "FailedMount", message);
            }
        };
        match self.volumes.mount_pod(pod).await {
            Ok(refresh) => refresh.iter().for_each(failed_mount),
            Err(fs) => {
                fs.failures.iter().for_each(failed_mount);
                if let Some(t) = fs.unable {
                    let message = format!("Unable to attach or mount volumes: {t}");
                    self.runtime.recorder().event(&reference, kubelet_types::events::WARNING, "FailedMount", message);
                }
                return SyncOutcome::Retry(WORKER_BACKOFF);
            }
        }
        // Ensure the pod is being probed.
        self.probes.add_pod(pod);
        if let Err(e) = self.cgroups.ensure_pod(pod) {
            warn!(pod = %key, podUID = %key.uid, error = %e, "unable to ensure the pod cgroup");
        }
        let result = self.runtime.sync_pod(pod, &rt).await;
        for e in &result.errors {
            if result.only_backoff() {
                info!(pod = %key, podUID = %key.uid, containerName = %e.target, reason = %e.reason, message = %e.message, "back-off");
            } else {
                warn!(pod = %key, podUID = %key.uid, action = e.action, target = %e.target, reason = %e.reason, message = %e.message, "error syncing pod");
            }
        }
        // Publish what the sync did right away rather than at the next sync (upstream shows a step's reason only
        // then, so `ImagePullBackOff` after `ErrImagePull` could wait for minutes); a sync that changed nothing in
        // the runtime but failed (a back-off) publishes its reasons over the status it started from.
        let generation = pod.metadata.generation.unwrap_or(0);
        for e in result.errors.iter().filter(|e| e.action == kubelet_runtime::resize_run::RESIZE_ACTION) {
            self.status.resize().set_in_progress(&key.uid, crate::status::resize::ERROR, &e.message, generation);
        }
        if result.changed {
            if let Ok(rt) = self.inspect(&key).await {
                self.track_resize(pod, &rt);
                let phase = self.publish(pod, &rt, false).await;
                if is_terminal_phase(phase.as_deref()) {
                    return SyncOutcome::Terminal;
                }
            }
        } else if !result.ok() {
            self.publish(pod, &rt, false).await;
        }
        if !result.ok() {
            return SyncOutcome::Retry(WORKER_BACKOFF);
        }
        // A pod with an active deadline is synced again when it runs out.
        match self.deadline_left(pod) {
            Some(left) => SyncOutcome::Requeue(left + Duration::from_millis(100)),
            None => SyncOutcome::Synced,
        }
    }

    async fn sync_terminating_pod(
        &self,
        key: &PodKey,
        pod: Option<&Arc<Pod>>,
        grace: Option<i64>,
        status: Option<&EvictionStatus>,
    ) -> Result<(), String> {
        let _syncing = self.cache.syncing(&key.uid);
        // Probes must not restart containers of a pod that stops.
        self.probes.stop_liveness_and_startup(&key.uid);
        let rt = self.current(key).await?;
        info!(pod = %key, podUID = %key.uid, gracePeriod = ?grace, "killing pod");
        let changed = self.runtime.kill_pod(pod.map(|p| p.as_ref()), &rt, grace).await.map_err(|e| e.to_string())?;
        // What the kill changed, asked of the objects the pod has (nothing of it is created any more).
        let rt = if changed { self.refresh(&rt).await? } else { rt };
        if rt.container_statuses.iter().any(|c| c.state == kubelet_types::ContainerState::Running) {
            return Err(format!("pod {key} still has running containers"));
        }
        // Its ResourceClaims are unprepared once nothing of it runs and before its final status, so the claims are
        // free before the pod is reported stopped (upstream's order). A failure fails this sync, which is retried.
        if let Some(pod) = pod {
            self.runtime.unprepare_dynamic_resources(pod).await?;
            self.publish_with(pod, &rt, true, status).await;
        }
        Ok(())
    }

    async fn sync_terminated_pod(&self, key: &PodKey, pod: Option<&Arc<Pod>>, removed: bool) -> Result<(), String> {
        self.probes.remove_pod(&key.uid);
        // A pod that never ran leaves its image pull times behind otherwise.
        self.runtime.take_pull_window(&key.uid);
        // Volumes go once nothing of the pod runs (`WaitForUnmount`).
        self.volumes.unmount_pod(&key.uid).await.map_err(|e| format!("unmount volumes of pod {key}: {e}"))?;
        // A pod whose deletion was requested loses its containers and sandboxes as soon as it stopped, before its
        // object may go from the apiserver: nothing of a deleted pod outlives it in the runtime (upstream leaves
        // them to the garbage collector). An evicted pod too, once its final status is out (upstream's container
        // deleter removes them as they die): the eviction manager's next pass must see its writable layers and
        // logs freed, not rank another pod for the space they hold.
        let evicted = self
            .status
            .get(&key.uid)
            .is_some_and(|s| s.phase.as_deref() == Some("Failed") && s.reason.as_deref() == Some("Evicted"));
        let deleting = evicted || pod.is_some_and(|p| p.metadata.deletion_timestamp.is_some());
        let known = match self.cache.lookup(&key.uid, &key.name, &key.namespace) {
            Cached::Fresh(st) => Some(st),
            Cached::Unknown => None,
        };
        let nothing_left =
            known.as_ref().is_some_and(|st| st.sandbox_statuses.is_empty() && st.container_statuses.is_empty());
        if (removed || deleting) && !nothing_left {
            let observed = tokio::time::Instant::now();
            self.runtime.remove_pod(&key.uid, known.as_deref()).await.map_err(|e| e.to_string())?;
            self.cache.set_gone(&key.uid, observed);
            if evicted {
                info!(pod = %key, podUID = %key.uid, "removed the containers of an evicted pod: their writable layers and logs are freed");
            }
        }
        if removed {
            let log_dir = match pod {
                Some(p) => pod_log_dir(&self.runtime.config().pod_logs_dir, p),
                None => self.runtime.config().pod_logs_dir.join(format!("{}_{}_{}", key.namespace, key.name, key.uid)),
            };
            remove_dir(&log_dir);
            remove_dir(&self.pod_dir(&key.uid));
        }
        if let Err(e) = self.cgroups.destroy_pod(&key.uid) {
            return Err(format!("remove cgroup of pod {key}: {e}"));
        }
        // Its user namespace range and image volumes go once nothing of it runs (`SyncTerminatedPod`).
        self.runtime.forget_terminated_pod(&key.uid);
        if removed {
            // Forgetting the status comes last: once the pod is gone from the status, nothing of it is left.
            self.cache.delete(&key.uid);
            self.status.remove(&key.uid);
            info!(pod = %key, podUID = %key.uid, "pod removed: containers, sandbox, cgroup and directories cleaned up");
        } else {
            self.status.set_terminated(&key.uid);
        }
        if let Some(p) = pod {
            tracing::debug!(pod = %pod_ref(p), "pod terminated");
        }
        Ok(())
    }
}

/// Applies a kill's status: `Failed`, its reason and message, and its `DisruptionTarget` condition
/// (`TerminationByKubelet`) replacing any earlier one.
pub fn apply_kill_status(status: &mut ApiPodStatus, k: &EvictionStatus, now: std::time::SystemTime) {
    status.phase = Some("Failed".into());
    status.reason = Some(k.reason.clone());
    status.message = Some(k.message.clone());
    if let Some(m) = &k.disruption_message {
        let c = k8s_openapi::api::core::v1::PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("TerminationByKubelet".into()),
            message: Some(m.clone()),
            last_transition_time: Some(kubelet_types::clock::api_time(now)),
            ..Default::default()
        };
        let conditions = status.conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != "DisruptionTarget");
        conditions.push(c);
    }
}

fn remove_dir(p: &std::path::Path) {
    match std::fs::remove_dir_all(p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(path = %p.display(), error = %e, "unable to remove directory"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[derive(Default)]
    struct Events(std::sync::Mutex<Vec<(String, String)>>);

    impl kubelet_types::events::Recorder for Events {
        fn event(&self, _: &k8s_openapi::api::core::v1::ObjectReference, _: &str, reason: &str, message: String) {
            self.0.lock().unwrap().push((reason.into(), message));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pod_data_directories_that_cannot_be_made_are_an_event_and_a_retry_with_nothing_created() {
        let dir = tempfile::tempdir().unwrap();
        let (fake, clock) = crate::fake_node::fake_runtime_on_test_clock(&["busybox:1"]);
        let events = Arc::new(Events::default());
        let cfg = kubelet_runtime::RuntimeManagerConfig {
            pod_logs_dir: dir.path().join("logs"),
            container_logs_dir: dir.path().join("containers"),
            root_dir: dir.path().join("root"),
            resolv_conf: None,
            ..Default::default()
        };
        let volumes = Arc::new(kubelet_volume::VolumeManager::new(
            dir.path().join("root/pods"),
            Arc::new(kubelet_types::objects::NoObjects),
            Arc::new(crate::volumes::PodDownward::default()),
            Arc::new(kubelet_volume::SystemMounter),
        ));
        let runtime = RuntimeManager::new(fake.clone(), fake.clone(), cfg, clock.clone())
            .with_recorder(events.clone())
            .with_volumes(volumes.clone());
        let syncer = KubeletSyncer {
            runtime: Arc::new(runtime),
            cache: Arc::new(PodCache::default()),
            status: Arc::new(StatusManager::new(clock)),
            cgroups: Arc::new(crate::cm::NoCgroups),
            host_ips: vec![],
            probes: Arc::new(kubelet_types::probe::NoProbes),
            volumes,
        };
        let pod = Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container { name: "a".into(), image: Some("busybox:1".into()), ..Default::default() }],
                ..Default::default()
            }),
            ..Default::default()
        });
        // The pod's directory cannot be made (as on a filesystem without a free inode).
        let pod_dir = dir.path().join("root/pods/u1");
        std::fs::create_dir_all(pod_dir.parent().unwrap()).unwrap();
        std::fs::write(&pod_dir, "").unwrap();
        assert_eq!(syncer.sync_pod(&pod).await, SyncOutcome::Retry(WORKER_BACKOFF));
        assert_eq!(fake.object_counts(), (0, 0), "no sandbox for a pod without its directories");
        let seen = events.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].0, "FailedToMakePodDataDirectories");
        let prefix = format!("error making pod data directories: mkdir {}: ", pod_dir.join("volumes").display());
        assert!(seen[0].1.starts_with(&prefix), "{seen:?}");
        std::fs::remove_file(&pod_dir).unwrap();
        assert_eq!(syncer.sync_pod(&pod).await, SyncOutcome::Synced);
        assert_eq!(fake.object_counts(), (1, 1), "made once the directories can be");
    }
}
