//! Container, sandbox and pod log garbage collection (`pkg/kubelet/kuberuntime/kuberuntime_gc.go`,
//! `pkg/kubelet/container/container_gc.go`).
//!
//! [`RuntimeManager::garbage_collect`] is called by the sync loop's housekeeping every minute
//! (`ContainerGCPeriod`, with `evict_non_deleted` false) and by the eviction manager's node-level reclaim (true).
//! One pass: dead containers (every state but running, older than `MinAge`) grouped by pod and container name;
//! those of pods whose content may go are all removed, the others keep their newest `MaxPerPodContainer` per
//! name, and `MaxContainers` caps the total (each group first cut to an equal share, then the oldest overall).
//! Sandboxes neither ready nor holding a container are removed, but the newest of a pod whose content stays.
//! Pod log directories of pods whose content may go are removed, and `/var/log/containers` links whose target is
//! gone and whose container is gone or exited. Every step runs even if an earlier one failed; the errors are
//! returned together.

use std::collections::HashMap;
use std::time::Duration;

use kubelet_cri::{CriError, api};
use kubelet_types::PodUid;
use tracing::{debug, info, warn};

use crate::manager::RuntimeManager;
use kubelet_types::labels::POD_UID as POD_UID_LABEL;

/// The policy (`GCPolicy`); negative counts mean no limit.
#[derive(Debug, Clone, Copy)]
pub struct GcPolicy {
    /// `--minimum-container-ttl-duration` (0).
    pub min_age: Duration,
    /// `--maximum-dead-containers-per-container` (1).
    pub max_per_pod_container: i32,
    /// `--maximum-dead-containers` (-1).
    pub max_containers: i32,
}

impl Default for GcPolicy {
    fn default() -> Self {
        Self { min_age: Duration::ZERO, max_per_pod_container: 1, max_containers: -1 }
    }
}

/// What the collector needs to know of pods (the pod workers' `ShouldPodContentBeRemoved`,
/// `ShouldPodRuntimeBeRemoved`).
pub trait PodRemoval: Send + Sync {
    /// The pod's containers, sandboxes and logs may all go: evicted, or deleted and terminated, or unknown once
    /// the pods are synced.
    fn content_removable(&self, uid: &PodUid) -> bool;
    /// The pod's runtime objects may go: terminated, or unknown once the pods are synced.
    fn runtime_removable(&self, uid: &PodUid) -> bool;
}

struct Dead {
    id: String,
    created_at: i64,
}

fn uid_of(labels: &HashMap<String, String>) -> PodUid {
    PodUid(labels.get(POD_UID_LABEL).cloned().unwrap_or_default())
}

impl RuntimeManager {
    /// One pass (`GarbageCollect`), traced as upstream's `Containers/GarbageCollect`; returns how many containers
    /// it removed.
    pub async fn garbage_collect(
        &self,
        policy: GcPolicy,
        all_sources_ready: bool,
        evict_non_deleted: bool,
        pods: &dyn PodRemoval,
    ) -> Result<usize, Vec<String>> {
        let span = kubelet_trace::internal_span(kubelet_trace::KUBERUNTIME_SCOPE, "Containers/GarbageCollect");
        let res =
            kubelet_trace::within(&span, self.collect_pass(policy, all_sources_ready, evict_non_deleted, pods)).await;
        if let Err(e) = &res {
            span.fail(&e.join("; "));
        }
        res
    }

    async fn collect_pass(
        &self,
        policy: GcPolicy,
        all_sources_ready: bool,
        evict_non_deleted: bool,
        pods: &dyn PodRemoval,
    ) -> Result<usize, Vec<String>> {
        let mut errors = vec![];
        let removed = match self.evict_containers(policy, all_sources_ready, evict_non_deleted, pods).await {
            Ok(n) => n,
            Err(e) => {
                errors.push(format!("failed to evict containers: {e}"));
                0
            }
        };
        if let Err(e) = self.evict_sandboxes(evict_non_deleted, pods).await {
            errors.push(format!("failed to evict sandboxes: {e}"));
        }
        if let Err(e) = self.evict_pod_log_dirs(all_sources_ready, pods).await {
            errors.push(e);
        }
        if errors.is_empty() { Ok(removed) } else { Err(errors) }
    }

    /// Removes the oldest `n` of `list`; returns the rest and how many went.
    async fn remove_oldest(&self, mut list: Vec<Dead>, n: usize) -> (Vec<Dead>, usize) {
        let keep = list.len().saturating_sub(n);
        list.sort_by_key(|d| std::cmp::Reverse(d.created_at));
        let mut removed = 0;
        for d in list.drain(keep..) {
            match self.remove_container(&d.id).await {
                Ok(()) => removed += 1,
                Err(e) => warn!(containerID = %d.id, error = %e, "failed to remove container"),
            }
        }
        (list, removed)
    }

    async fn evict_containers(
        &self,
        policy: GcPolicy,
        all_sources_ready: bool,
        evict_non_deleted: bool,
        pods: &dyn PodRemoval,
    ) -> Result<usize, CriError> {
        let mut removed = 0;
        let now = self.clock().now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as i64;
        let newest = now - policy.min_age.as_nanos() as i64;
        let mut units: HashMap<(PodUid, String), Vec<Dead>> = HashMap::new();
        for c in self.runtime().list_containers(None).await? {
            if c.state == api::ContainerState::ContainerRunning as i32 || c.created_at > newest {
                continue;
            }
            let name = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
            units.entry((uid_of(&c.labels), name)).or_default().push(Dead { id: c.id, created_at: c.created_at });
        }
        if all_sources_ready {
            let gone: Vec<(PodUid, String)> = units
                .keys()
                .filter(|(uid, _)| pods.content_removable(uid) || (evict_non_deleted && pods.runtime_removable(uid)))
                .cloned()
                .collect();
            for k in gone {
                let list = units.remove(&k).unwrap_or_default();
                let n = list.len();
                debug!(podUID = %k.0, containerName = %k.1, count = n, "removing every dead container of a pod whose content may go");
                removed += self.remove_oldest(list, n).await.1;
            }
        }
        let cap = |units: &mut HashMap<(PodUid, String), Vec<Dead>>, max: usize| {
            let over: Vec<(PodUid, String)> =
                units.iter().filter(|(_, v)| v.len() > max).map(|(k, _)| k.clone()).collect();
            over.into_iter().map(|k| (units.remove(&k).unwrap_or_default(), k)).collect::<Vec<_>>()
        };
        if policy.max_per_pod_container >= 0 {
            let max = policy.max_per_pod_container as usize;
            for (list, k) in cap(&mut units, max) {
                let n = list.len() - max;
                let (kept, r) = self.remove_oldest(list, n).await;
                removed += r;
                units.insert(k, kept);
            }
        }
        let total: usize = units.values().map(Vec::len).sum();
        if policy.max_containers >= 0 && total > policy.max_containers as usize && !units.is_empty() {
            let per_unit = (policy.max_containers as usize / units.len()).max(1);
            for (list, k) in cap(&mut units, per_unit) {
                let n = list.len() - per_unit;
                let (kept, r) = self.remove_oldest(list, n).await;
                removed += r;
                units.insert(k, kept);
            }
            let total: usize = units.values().map(Vec::len).sum();
            if total > policy.max_containers as usize {
                let flat: Vec<Dead> = units.drain().flat_map(|(_, v)| v).collect();
                removed += self.remove_oldest(flat, total - policy.max_containers as usize).await.1;
            }
        }
        Ok(removed)
    }

    async fn evict_sandboxes(&self, evict_non_deleted: bool, pods: &dyn PodRemoval) -> Result<(), CriError> {
        let (containers, sandboxes) =
            tokio::try_join!(self.runtime().list_containers(None), self.runtime().list_pod_sandbox(None))?;
        let mut by_pod: HashMap<PodUid, Vec<(&api::PodSandbox, bool)>> = HashMap::new();
        for s in &sandboxes {
            let active = s.state == api::PodSandboxState::SandboxReady as i32
                || containers.iter().any(|c| c.pod_sandbox_id == s.id);
            let uid = PodUid(s.metadata.as_ref().map(|m| m.uid.clone()).unwrap_or_default());
            by_pod.entry(uid).or_default().push((s, active));
        }
        for (uid, mut list) in by_pod {
            let all = pods.content_removable(&uid) || (evict_non_deleted && pods.runtime_removable(&uid));
            list.sort_by_key(|(s, _)| std::cmp::Reverse(s.created_at));
            let keep = if all { 0 } else { 1 };
            for (s, active) in list.into_iter().skip(keep) {
                if active {
                    continue;
                }
                debug!(podUID = %uid, podSandboxID = %s.id, "removing dead sandbox");
                if let Err(e) = self.runtime().stop_pod_sandbox(&s.id).await {
                    warn!(podSandboxID = %s.id, error = %e, "failed to stop sandbox before removing");
                    continue;
                }
                if let Err(e) = self.runtime().remove_pod_sandbox(&s.id).await {
                    warn!(podSandboxID = %s.id, error = %e, "failed to remove sandbox");
                }
                self.stopped_sandboxes.lock().unwrap().remove(&s.id);
            }
        }
        Ok(())
    }

    async fn evict_pod_log_dirs(&self, all_sources_ready: bool, pods: &dyn PodRemoval) -> Result<(), String> {
        let dir = &self.config().pod_logs_dir;
        if all_sources_ready {
            let rd = std::fs::read_dir(dir).map_err(|e| format!("failed to read podLogsDirectory {:?}: {e}", dir))?;
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let uid = PodUid(name.rsplit('_').next().unwrap_or_default().to_string());
                if pods.content_removable(&uid) {
                    info!(path = %e.path().display(), "removing pod log directory of a pod that is gone");
                    if let Err(err) = std::fs::remove_dir_all(e.path()) {
                        warn!(path = %e.path().display(), error = %err, "failed to remove pod logs directory");
                    }
                }
            }
        }
        // Links whose log is gone: their container is gone or exited (a running one's may dangle while rotated).
        let links = std::fs::read_dir(&self.config().container_logs_dir).map(|rd| rd.flatten().collect::<Vec<_>>());
        for e in links.unwrap_or_default() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "log") || std::fs::metadata(&p).is_ok() {
                continue;
            }
            let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let id = stem.rsplit('-').next().unwrap_or_default().to_string();
            let remove = if id.len() < 6 {
                true
            } else {
                match self.runtime().container_status(&id).await {
                    Err(_) => true,
                    Ok(st) => st.state == api::ContainerState::ContainerExited as i32,
                }
            };
            if remove {
                debug!(path = %p.display(), "removing dangling container log link");
                let _ = std::fs::remove_file(&p);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use kubelet_cri::{FakeRuntime, RuntimeService};
    use kubelet_types::TestClock;

    use super::*;

    struct Removable(HashSet<String>);
    impl PodRemoval for Removable {
        fn content_removable(&self, uid: &PodUid) -> bool {
            self.0.contains(&uid.0)
        }
        fn runtime_removable(&self, uid: &PodUid) -> bool {
            self.0.contains(&uid.0)
        }
    }

    fn labels(uid: &str) -> HashMap<String, String> {
        [(POD_UID_LABEL.to_string(), uid.to_string())].into()
    }

    async fn sandbox(fake: &FakeRuntime, uid: &str) -> String {
        let config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata { name: uid.into(), uid: uid.into(), ..Default::default() }),
            labels: labels(uid),
            ..Default::default()
        };
        fake.run_pod_sandbox(config, "").await.unwrap()
    }

    async fn dead(fake: &FakeRuntime, sandbox: &str, uid: &str, name: &str) -> String {
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
            labels: labels(uid),
            ..Default::default()
        };
        let id = fake.create_container(sandbox, config, api::PodSandboxConfig::default()).await.unwrap();
        fake.start_container(&id).await.unwrap();
        fake.exit_container(&id, 1);
        id
    }

    #[tokio::test]
    async fn keeps_the_newest_dead_instance_per_container_and_nothing_of_pods_that_are_gone() {
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let tmp = tempfile::tempdir().unwrap();
        let cfg = crate::RuntimeManagerConfig {
            pod_logs_dir: tmp.path().join("pods"),
            container_logs_dir: tmp.path().join("containers"),
            ..Default::default()
        };
        for d in ["pods/ns_web_live/app", "pods/ns_old_gone/app", "containers"] {
            std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        }
        let rm = RuntimeManager::new(fake.clone(), fake.clone(), cfg, Arc::new(TestClock::fixed()));
        let live = sandbox(&fake, "live").await;
        let old_app = dead(&fake, &live, "live", "app").await;
        let new_app = dead(&fake, &live, "live", "app").await;
        let side = dead(&fake, &live, "live", "side").await;
        // An older, dead sandbox of the same pod holding nothing goes; the newest stays.
        let gone = sandbox(&fake, "gone").await;
        let gone_app = dead(&fake, &gone, "gone", "app").await;
        fake.stop_pod_sandbox(&gone).await.unwrap();
        let pods = Removable(["gone".to_string()].into());
        assert_eq!(rm.garbage_collect(GcPolicy::default(), true, false, &pods).await.unwrap(), 2);
        let left: HashSet<String> = fake.list_containers(None).await.unwrap().into_iter().map(|c| c.id).collect();
        assert!(!left.contains(&old_app), "the older dead instance of app goes");
        assert!(left.contains(&new_app) && left.contains(&side), "the newest per container stays");
        assert!(!left.contains(&gone_app), "a pod that is gone loses every container");
        let sandboxes: Vec<String> = fake.list_pod_sandbox(None).await.unwrap().into_iter().map(|s| s.id).collect();
        assert_eq!(sandboxes, vec![live], "the gone pod's dead sandbox went");
        assert!(tmp.path().join("pods/ns_web_live").exists());
        assert!(!tmp.path().join("pods/ns_old_gone").exists(), "the gone pod's log directory went");

        // Without the sources read, nothing of a pod is removed for being unknown.
        let other = sandbox(&fake, "other").await;
        let other_app = dead(&fake, &other, "other", "app").await;
        let pods = Removable(["other".to_string()].into());
        rm.garbage_collect(GcPolicy::default(), false, false, &pods).await.unwrap();
        assert!(fake.list_containers(None).await.unwrap().iter().any(|c| c.id == other_app));
        // A global cap removes the oldest beyond it.
        let policy = GcPolicy { max_containers: 1, ..Default::default() };
        rm.garbage_collect(policy, false, false, &Removable(HashSet::new())).await.unwrap();
        assert_eq!(fake.list_containers(None).await.unwrap().len(), 1);
    }
}

#[cfg(test)]
mod oom_tests {
    use std::sync::Arc;

    use kubelet_cri::{FakeRuntime, RuntimeService};
    use kubelet_types::TestClock;

    use super::*;

    /// containerd 1.6 can report a container the kernel OOM-killed as `Error`: the kernel log's word wins.
    #[tokio::test]
    async fn an_oom_kill_the_runtime_missed_is_reported_from_the_kernel_log() {
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let rm = RuntimeManager::new(fake.clone(), fake.clone(), Default::default(), Arc::new(TestClock::fixed()));
        let labels: HashMap<String, String> = [(POD_UID_LABEL.to_string(), "u".to_string())].into();
        let config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
                ..Default::default()
            }),
            labels: labels.clone(),
            ..Default::default()
        };
        let sandbox = fake.run_pod_sandbox(config, "").await.unwrap();
        let mut ids = vec![];
        for name in ["hog", "other"] {
            let c = api::ContainerConfig {
                metadata: Some(api::ContainerMetadata { name: name.into(), attempt: 0 }),
                image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
                labels: labels.clone(),
                ..Default::default()
            };
            let id = fake.create_container(&sandbox, c, api::PodSandboxConfig::default()).await.unwrap();
            fake.start_container(&id).await.unwrap();
            fake.exit_container(&id, 137);
            ids.push(id);
        }
        rm.oom_kills().record_memcg(&format!("/kubepods/burstable/podu/{}", ids[0]));
        let st = rm.get_pod_status(&PodUid("u".into()), "p", "ns").await.unwrap();
        let reason = |id: &str| st.container_statuses.iter().find(|c| c.id == id).unwrap().reason.clone();
        assert_eq!(reason(&ids[0]), "OOMKilled", "the kernel log named it");
        assert_eq!(reason(&ids[1]), "Error", "a SIGKILL the kernel log does not name stays an error");
    }
}
