//! The status manager (`pkg/kubelet/status/status_manager.go`): the latest API status of every pod, as the
//! pod workers computed it.
//!
//! Pod workers call [`StatusManager::set_pod_status`] after every sync; a readiness or startup probe's new verdict
//! is applied at once by the sync loop ([`StatusManager::set_container_readiness`]), as upstream, so it shows even
//! while the pod's sync is held up (a runtime that does not answer for the pod). The manager keeps `startTime` and
//! the `lastTransitionTime` of unchanged conditions from the previous status, never moves a pod out of a terminal
//! phase, and bumps a version that watchers (tests, benchmarks, the apiserver sync of a later issue) follow.
//! Cheap to read from any task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ContainerStatus as ApiContainerStatus, PodStatus as ApiPodStatus};
use kubelet_types::clock::api_time;
use kubelet_types::{Clock, Pod, PodUid};
use tokio::sync::watch;
use tracing::{debug, warn};

use super::generate::{is_terminal_phase, ready_condition};

/// What the apiserver sync needs to know of a pod besides its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEntry {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// A static pod (its status goes to the mirror pod).
    pub static_pod: bool,
    /// The pod's deletion was requested.
    pub deleting: bool,
    /// Bumped at every status change.
    pub version: u64,
    /// Every container stopped and the pod was cleaned up (it may be deleted from the apiserver).
    pub terminated: bool,
}

/// Statuses of all pods.
pub struct StatusManager {
    statuses: Mutex<HashMap<PodUid, Arc<ApiPodStatus>>>,
    entries: Mutex<HashMap<PodUid, PodEntry>>,
    /// Pods whose entry changed since the apiserver sync last took them.
    dirty: Mutex<std::collections::HashSet<PodUid>>,
    version: watch::Sender<u64>,
    clock: Arc<dyn Clock>,
    /// Mirror pods the pod source has seen (`namespace/name` → UID): where static pods' statuses go.
    mirrors: Mutex<HashMap<String, String>>,
    /// The pods' resize conditions.
    resize: super::resize::ResizeConditions,
}

impl std::fmt::Debug for StatusManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusManager").field("pods", &self.statuses.lock().unwrap().len()).finish()
    }
}

impl StatusManager {
    /// An empty manager.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            statuses: Mutex::new(HashMap::new()),
            entries: Mutex::new(HashMap::new()),
            dirty: Mutex::new(Default::default()),
            version: watch::channel(0).0,
            resize: super::resize::ResizeConditions::new(clock.clone()),
            clock,
            mirrors: Mutex::new(HashMap::new()),
        }
    }

    /// The pods' resize conditions.
    pub fn resize(&self) -> &super::resize::ResizeConditions {
        &self.resize
    }

    /// Stores the status of `pod`; returns whether it changed.
    pub fn set_pod_status(&self, pod: &Pod, status: ApiPodStatus) -> bool {
        let mut map = self.statuses.lock().unwrap();
        self.store(&mut map, pod, status)
    }

    /// A readiness probe's new verdict on a container, applied to the pod's status at once
    /// (`SetContainerReadiness`): the container's `ready` and the pod's `ContainersReady` and `Ready` conditions
    /// follow without waiting for the pod's next sync, which may be held up (a runtime that does not answer for the
    /// pod). Nothing changes for a pod without a status yet or a container its status does not report.
    pub fn set_container_readiness(&self, pod: &Pod, container_id: &str, ready: bool) {
        self.update_container(pod, container_id, true, |c| std::mem::replace(&mut c.ready, ready) != ready);
    }

    /// A startup probe's new verdict on a container, applied to its `started` at once (`SetContainerStartup`).
    pub fn set_container_startup(&self, pod: &Pod, container_id: &str, started: bool) {
        self.update_container(pod, container_id, false, |c| c.started.replace(started) != Some(started));
    }

    /// Applies `change` (which says whether it changed anything) to the status of the container `container_id`
    /// (a runtime ID, without the `containerd://` prefix) and, with `readiness`, regenerates the readiness
    /// conditions; under the lock, so a sync's write in between is not undone.
    fn update_container(
        &self,
        pod: &Pod,
        container_id: &str,
        readiness: bool,
        change: impl FnOnce(&mut ApiContainerStatus) -> bool,
    ) {
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let mut map = self.statuses.lock().unwrap();
        let Some(old) = map.get(&uid) else {
            debug!(pod = %kubelet_types::pod_update::pod_ref(pod), containerID = %container_id, "container probe result changed before the pod has synced");
            return;
        };
        let mut status = (**old).clone();
        let is_it = |c: &&mut ApiContainerStatus| {
            c.container_id.as_deref().is_some_and(|id| id.rsplit("://").next() == Some(container_id))
        };
        let Some(c) = status
            .init_container_statuses
            .iter_mut()
            .flatten()
            .chain(status.container_statuses.iter_mut().flatten())
            .find(is_it)
        else {
            debug!(pod = %kubelet_types::pod_update::pod_ref(pod), containerID = %container_id, "container probe result changed for unknown container");
            return;
        };
        if !change(c) {
            return;
        }
        if readiness {
            let init = status.init_container_statuses.clone().unwrap_or_default();
            let apps = status.container_statuses.clone().unwrap_or_default();
            let phase = status.phase.clone().unwrap_or_default();
            let conditions = status.conditions.get_or_insert_with(Vec::new);
            for kind in ["Ready", "ContainersReady"] {
                let mut new = ready_condition(pod, &init, &apps, &phase, kind);
                new.observed_generation = pod.metadata.generation.filter(|g| *g != 0);
                match conditions.iter_mut().find(|c| c.type_ == kind) {
                    Some(c) => *c = new,
                    None => conditions.push(new),
                }
            }
        }
        self.store(&mut map, pod, status);
    }

    /// `set_pod_status` with the statuses locked by the caller.
    fn store(&self, map: &mut HashMap<PodUid, Arc<ApiPodStatus>>, pod: &Pod, mut status: ApiPodStatus) -> bool {
        let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
        let old = map.get(&uid).cloned().or_else(|| pod.status.clone().map(Arc::new));
        let now = api_time(self.clock.now());
        if let Some(old) = old.as_ref() {
            if is_terminal_phase(old.phase.as_deref()) && !is_terminal_phase(status.phase.as_deref()) {
                warn!(pod = %kubelet_types::pod_update::pod_ref(pod), podUID = %uid, phase = ?old.phase, "refusing to move a terminal pod back to a non-terminal phase");
                status.phase = old.phase.clone();
            }
            status.start_time = old.start_time.clone();
        }
        if status.start_time.is_none() {
            status.start_time = Some(now.clone());
        }
        // A resize condition carries its own transition time (it changes with its reason, not its status).
        let own_time = |c: &k8s_openapi::api::core::v1::PodCondition| {
            c.last_transition_time.is_some()
                && [super::resize::PENDING, super::resize::IN_PROGRESS].contains(&c.type_.as_str())
        };
        for c in status.conditions.iter_mut().flatten().filter(|c| !own_time(c)) {
            let prev =
                old.as_ref().and_then(|o| o.conditions.as_ref()).and_then(|cs| cs.iter().find(|p| p.type_ == c.type_));
            c.last_transition_time = match prev {
                Some(p) if p.status == c.status => p.last_transition_time.clone().or(Some(now.clone())),
                _ => Some(now.clone()),
            };
        }
        // Never report an older generation than was reported (upstream's "prevent sending unnecessary patches").
        if let Some(o) = old.as_ref().and_then(|o| o.observed_generation)
            && status.observed_generation.is_none_or(|g| g < o)
        {
            status.observed_generation = Some(o);
        }
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let unchanged = old.as_deref() == Some(&status) && map.contains_key(&uid);
        {
            let mut entries = self.entries.lock().unwrap();
            let version = *self.version.borrow() + 1;
            let e = entries.entry(uid.clone()).or_insert_with(|| PodEntry {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                static_pod: kubelet_types::pod_update::is_static_pod(pod),
                deleting,
                version,
                terminated: false,
            });
            if !unchanged || e.deleting != deleting {
                e.version = version;
                self.dirty.lock().unwrap().insert(uid.clone());
            }
            e.deleting = deleting;
        }
        if unchanged {
            return false;
        }
        debug!(podUID = %uid, phase = ?status.phase, "pod status changed");
        map.insert(uid, Arc::new(status));
        self.version.send_modify(|v| *v += 1);
        true
    }

    /// The status of a pod.
    pub fn get(&self, uid: &PodUid) -> Option<Arc<ApiPodStatus>> {
        self.statuses.lock().unwrap().get(uid).cloned()
    }

    /// Marks a pod whose containers all stopped and whose resources were cleaned up.
    pub fn set_terminated(&self, uid: &PodUid) {
        if let Some(e) = self.entries.lock().unwrap().get_mut(uid) {
            e.terminated = true;
        }
        self.dirty.lock().unwrap().insert(uid.clone());
        self.version.send_modify(|v| *v += 1);
    }

    /// Every pod's entry with its status.
    pub fn entries(&self) -> Vec<(PodUid, PodEntry, Arc<ApiPodStatus>)> {
        let statuses = self.statuses.lock().unwrap();
        let entries = self.entries.lock().unwrap();
        entries.iter().filter_map(|(u, e)| statuses.get(u).map(|s| (u.clone(), e.clone(), s.clone()))).collect()
    }

    /// The pods whose entry changed since the last call, with their entry and status (the apiserver sync's work
    /// between two full passes; it costs what changed, not the number of pods).
    pub fn take_dirty(&self) -> Vec<(PodUid, PodEntry, Arc<ApiPodStatus>)> {
        let dirty = std::mem::take(&mut *self.dirty.lock().unwrap());
        let statuses = self.statuses.lock().unwrap();
        let entries = self.entries.lock().unwrap();
        dirty
            .into_iter()
            .filter_map(|u| {
                let (e, s) = (entries.get(&u)?, statuses.get(&u)?);
                Some((u, e.clone(), s.clone()))
            })
            .collect()
    }

    /// Asks the apiserver sync to look at a pod again at its next wake.
    pub fn mark_dirty(&self, uid: &PodUid) {
        self.dirty.lock().unwrap().insert(uid.clone());
    }

    /// Forgets a pod.
    pub fn remove(&self, uid: &PodUid) {
        self.entries.lock().unwrap().remove(uid);
        if self.statuses.lock().unwrap().remove(uid).is_some() {
            self.version.send_modify(|v| *v += 1);
        }
    }

    /// Records that the mirror pod `namespace/name` exists with `uid` (or, with `None`, no longer exists), as the
    /// pod source saw it. A static pod's status is written only once its mirror pod exists (upstream's status
    /// manager looks the mirror up in the pod manager; asking the apiserver for a pod that does not exist is
    /// refused by the Node authorizer). A mirror that appears marks its static pod for writing.
    pub fn set_mirror(&self, namespace: &str, name: &str, uid: Option<String>) {
        let key = format!("{namespace}/{name}");
        let appeared = {
            let mut m = self.mirrors.lock().unwrap();
            match uid {
                Some(u) => m.insert(key, u.clone()).as_ref() != Some(&u),
                None => {
                    m.remove(&key);
                    false
                }
            }
        };
        if appeared {
            // A new mirror (also one recreated after a delete, with a new UID) has none of the static pod's status:
            // a new version makes the apiserver sync write it again.
            let version = *self.version.borrow() + 1;
            let mut entries = self.entries.lock().unwrap();
            let mut dirty = self.dirty.lock().unwrap();
            for (uid, e) in
                entries.iter_mut().filter(|(_, e)| e.static_pod && e.namespace == namespace && e.name == name)
            {
                e.version = version;
                dirty.insert(uid.clone());
            }
            drop(dirty);
            drop(entries);
            self.version.send_modify(|v| *v += 1);
        }
    }

    /// The UID of the mirror pod `namespace/name`, if the pod source has seen one.
    pub fn mirror_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.mirrors.lock().unwrap().get(&format!("{namespace}/{name}")).cloned()
    }

    /// Every status.
    pub fn snapshot(&self) -> HashMap<PodUid, Arc<ApiPodStatus>> {
        self.statuses.lock().unwrap().clone()
    }

    /// A receiver that changes whenever any status changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

impl kubelet_types::probe::PodStatusSource for StatusManager {
    fn pod_status(&self, uid: &PodUid) -> Option<Arc<ApiPodStatus>> {
        self.get(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kubelet_types::TestClock;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn keeps_times_and_terminal_phase() {
        let m = StatusManager::new(Arc::new(TestClock::fixed()));
        let pod = Pod { metadata: ObjectMeta { uid: Some("u".into()), ..Default::default() }, ..Default::default() };
        let st = |phase: &str, ready: &str| ApiPodStatus {
            phase: Some(phase.into()),
            conditions: Some(vec![PodCondition { type_: "Ready".into(), status: ready.into(), ..Default::default() }]),
            ..Default::default()
        };
        let rx = m.subscribe();
        assert!(m.set_pod_status(&pod, st("Running", "False")));
        assert!(rx.has_changed().unwrap());
        let t0 = m.get(&"u".into()).unwrap().start_time.clone();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!m.set_pod_status(&pod, st("Running", "False")), "same status is no change");
        assert!(m.set_pod_status(&pod, st("Running", "True")));
        let s = m.get(&"u".into()).unwrap();
        assert_eq!(s.start_time, t0);
        let ltt = s.conditions.as_ref().unwrap()[0].last_transition_time.clone().unwrap();
        assert_eq!(ltt.0.as_second(), t0.unwrap().0.as_second() + 5);
        m.set_pod_status(&pod, st("Succeeded", "False"));
        m.set_pod_status(&pod, st("Running", "False"));
        assert_eq!(m.get(&"u".into()).unwrap().phase.as_deref(), Some("Succeeded"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_readiness_verdict_shows_at_once_without_a_sync() {
        use k8s_openapi::api::core::v1::{Container, PodSpec};
        let m = StatusManager::new(Arc::new(TestClock::fixed()));
        let spec =
            PodSpec { containers: vec![Container { name: "web".into(), ..Default::default() }], ..Default::default() };
        let pod = Pod {
            metadata: ObjectMeta { uid: Some("u".into()), ..Default::default() },
            spec: Some(spec),
            ..Default::default()
        };
        let web = |ready: bool| ApiContainerStatus {
            name: "web".into(),
            container_id: Some("containerd://c1".into()),
            ready,
            started: Some(true),
            ..Default::default()
        };
        let cond = |kind: &str, ok: &str| PodCondition { type_: kind.into(), status: ok.into(), ..Default::default() };
        m.set_container_readiness(&pod, "c1", false);
        assert!(m.get(&"u".into()).is_none(), "nothing before the pod's first sync");
        m.set_pod_status(
            &pod,
            ApiPodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![cond("Ready", "True"), cond("ContainersReady", "True")]),
                container_statuses: Some(vec![web(true)]),
                ..Default::default()
            },
        );
        let rx = m.subscribe();
        m.set_container_readiness(&pod, "other", false);
        assert!(!rx.has_changed().unwrap(), "an unknown container changes nothing");
        tokio::time::sleep(Duration::from_secs(3)).await;
        m.set_container_readiness(&pod, "c1", false);
        let s = m.get(&"u".into()).unwrap();
        assert!(!s.container_statuses.as_ref().unwrap()[0].ready);
        for kind in ["Ready", "ContainersReady"] {
            let c = s.conditions.iter().flatten().find(|c| c.type_ == kind).unwrap();
            assert_eq!((c.status.as_str(), c.reason.as_deref()), ("False", Some("ContainersNotReady")), "{kind}");
            assert_eq!(c.message.as_deref(), Some("containers with unready status: [web]"));
            assert_eq!(
                c.last_transition_time.as_ref().unwrap().0.as_second(),
                s.start_time.as_ref().unwrap().0.as_second() + 3
            );
        }
        assert_eq!(s.phase.as_deref(), Some("Running"), "nothing else changes");
        let version = *m.subscribe().borrow();
        m.set_container_readiness(&pod, "c1", false);
        assert_eq!(*m.subscribe().borrow(), version, "the same verdict again is no change");
        m.set_container_startup(&pod, "c1", false);
        assert_eq!(m.get(&"u".into()).unwrap().container_statuses.as_ref().unwrap()[0].started, Some(false));
        m.set_container_readiness(&pod, "c1", true);
        let s = m.get(&"u".into()).unwrap();
        assert!(s.conditions.iter().flatten().all(|c| c.status == "True"), "{:?}", s.conditions);
    }
}
