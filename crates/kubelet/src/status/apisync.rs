//! Pod status to the apiserver (`pkg/kubelet/status/status_manager.go` syncBatch, syncPod, canBeDeleted).
//!
//! [`StatusSync::run`] wakes on every status change (and then looks only at the pods that changed) and every 10 s
//! (`syncPeriod`, a full pass that also retries what failed). For each pod whose status changed since it was last
//! written, it patches `pods/status` with a strategic-merge patch carrying the pod's UID
//! as precondition — for a static pod, the mirror pod's status, once the pod source has seen the mirror. The
//! status is first merged with the apiserver's ([`super::merge`]: conditions of other owners, such as readiness
//! gates, are kept). A pod whose deletion was requested and that has terminated is then deleted for good (grace 0,
//! UID precondition), as upstream's final delete. An unreachable apiserver is retried at the next round (every
//! 10 s); a patch the apiserver answers with an error is logged with its code and message and retried with a
//! per-pod back-off (10 s doubling to 5 minutes) rather than at every round. Never fatal. Ends when cancelled.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kubelet_apiclient::patch::pod_status_patch;
use kubelet_apiclient::{ApiError, PodApi};
use kubelet_types::PodUid;
use kubelet_types::labels::CONFIG_MIRROR;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use k8s_openapi::api::core::v1::PodStatus as ApiPodStatus;

use super::StatusManager;
use super::manager::PodEntry;
use super::merge::merge_pod_status;

/// Full resync period (`syncPeriod` of the status manager).
pub const STATUS_SYNC_PERIOD: Duration = Duration::from_secs(10);
/// The first wait after the apiserver refused a pod's status patch.
pub const REFUSED_BACKOFF_START: Duration = Duration::from_secs(10);
/// The longest wait between attempts at a refused patch.
pub const REFUSED_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The status writer.
pub struct StatusSync {
    status: Arc<StatusManager>,
    api: Arc<dyn PodApi>,
    synced: HashMap<PodUid, u64>,
    deleted: std::collections::HashSet<PodUid>,
    /// Pods whose last patch the apiserver refused: the wait before the next try, when it may happen, and the
    /// status version that was refused (a newer status is tried at once).
    refused: HashMap<PodUid, (Duration, tokio::time::Instant, u64)>,
}

impl StatusSync {
    /// A writer of `status` to `api`.
    pub fn new(status: Arc<StatusManager>, api: Arc<dyn PodApi>) -> Self {
        Self { status, api, synced: HashMap::new(), deleted: Default::default(), refused: HashMap::new() }
    }

    /// Records that the patch of status `version` was refused and returns the wait before the next try.
    fn back_off(&mut self, uid: &PodUid, version: u64) -> Duration {
        let wait = match self.refused.get(uid) {
            Some((w, _, _)) => (*w * 2).min(REFUSED_BACKOFF_MAX),
            None => REFUSED_BACKOFF_START,
        };
        self.refused.insert(uid.clone(), (wait, tokio::time::Instant::now() + wait, version));
        wait
    }

    /// One full round (every `syncPeriod`): write what changed, delete what may go, retry what failed.
    pub async fn sync_batch(&mut self) {
        let entries = self.status.entries();
        let live: std::collections::HashSet<PodUid> = entries.iter().map(|(u, _, _)| u.clone()).collect();
        self.synced.retain(|u, _| live.contains(u));
        self.deleted.retain(|u| live.contains(u));
        self.refused.retain(|u, _| live.contains(u));
        self.sync_entries(entries).await;
    }

    /// The pods whose status changed since the last round (on every change).
    pub async fn sync_changed(&mut self) {
        let entries = self.status.take_dirty();
        self.sync_entries(entries).await;
    }

    async fn sync_entries(&mut self, entries: Vec<(PodUid, PodEntry, Arc<ApiPodStatus>)>) {
        for (uid, e, status) in entries {
            if self.synced.get(&uid).is_some_and(|v| *v >= e.version) && !(e.deleting && e.terminated) {
                continue;
            }
            if self.synced.get(&uid).is_none_or(|v| *v < e.version) {
                let pod = format!("{}/{}", e.namespace, e.name);
                let waiting = |(_, next, v): &(Duration, tokio::time::Instant, u64)| {
                    *v == e.version && tokio::time::Instant::now() < *next
                };
                if self.refused.get(&uid).is_some_and(waiting) {
                    self.status.mark_dirty(&uid);
                    continue;
                }
                // A static pod's status lives on its mirror pod, once the pod source has seen it.
                let mirror = e.static_pod.then(|| self.status.mirror_uid(&e.namespace, &e.name));
                if mirror == Some(None) {
                    self.status.mark_dirty(&uid);
                    continue;
                }
                // The patch is computed against what the apiserver has, as upstream's syncPod does.
                let current = match self.api.get_pod(&e.namespace, &e.name).await {
                    Ok(p) => p,
                    Err(err) => {
                        debug!(pod = %pod, podUID = %uid, error = %err, "cannot read pod, will retry");
                        self.status.mark_dirty(&uid);
                        continue;
                    }
                };
                // An apiserver pod must still be the same pod; a static pod's mirror must be a mirror.
                let target = current.filter(|p| {
                    if e.static_pod {
                        p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CONFIG_MIRROR))
                    } else {
                        p.metadata.uid.as_deref() == Some(uid.as_str())
                    }
                });
                let Some(target) = target else {
                    if e.static_pod {
                        // The mirror is being replaced: try again at the next change (or the next full pass).
                        self.status.mark_dirty(&uid);
                    } else {
                        // Gone, or another pod with that name: nothing to write.
                        self.synced.insert(uid.clone(), e.version);
                    }
                    continue;
                };
                // `statusutil.PatchPodStatus`: the merged status diffed against what the apiserver has, the pod's
                // UID as precondition.
                let old = target.status.clone().unwrap_or_default();
                let merged = merge_pod_status(&old, &status);
                let target_uid = target.metadata.uid.clone().unwrap_or_default();
                let patch = match pod_status_patch(&old, &merged, &target_uid) {
                    Ok(p) => p,
                    Err(err) => {
                        let retry = self.back_off(&uid, e.version);
                        warn!(pod = %pod, podUID = %uid, error = %err, retryIn = ?retry, "failed to compute the pod status patch");
                        self.status.mark_dirty(&uid);
                        continue;
                    }
                };
                if !patch.unchanged {
                    match self.api.patch_pod_status(&e.namespace, &e.name, &patch.patch).await {
                        Ok(_) => {
                            debug!(pod = %pod, podUID = %uid, phase = ?status.phase, "status patched");
                        }
                        // The mirror pod was replaced between the read and the patch: write the new one.
                        Err(ApiError::NotFound(_)) | Err(ApiError::Conflict(_)) if e.static_pod => {
                            self.status.mark_dirty(&uid);
                            continue;
                        }
                        Err(ApiError::NotFound(_)) | Err(ApiError::Conflict(_)) => {}
                        Err(err @ ApiError::Unavailable(_)) => {
                            warn!(pod = %pod, podUID = %uid, error = %err, "failed to update pod status, will retry");
                            self.status.mark_dirty(&uid);
                            continue;
                        }
                        Err(err) => {
                            // The apiserver answered: the same patch would most likely be refused again.
                            let retry = self.back_off(&uid, e.version);
                            warn!(pod = %pod, podUID = %uid, error = %err, patch = %patch.patch, retryIn = ?retry, "the apiserver refused the pod status patch");
                            self.status.mark_dirty(&uid);
                            continue;
                        }
                    }
                }
                self.refused.remove(&uid);
                self.synced.insert(uid.clone(), e.version);
            }
            if e.deleting && e.terminated && !e.static_pod && !self.deleted.contains(&uid) {
                match self.api.delete_pod(&e.namespace, &e.name, Some(0), Some(&uid.0)).await {
                    Ok(()) | Err(ApiError::NotFound(_)) | Err(ApiError::Conflict(_)) => {
                        info!(pod = %format!("{}/{}", e.namespace, e.name), podUID = %uid, "pod fully terminated and removed from the apiserver");
                        self.deleted.insert(uid);
                    }
                    Err(err) => {
                        warn!(pod = %format!("{}/{}", e.namespace, e.name), error = %err, "failed to delete pod, will retry");
                        self.status.mark_dirty(&uid);
                    }
                }
            }
        }
    }

    /// Writes until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut changes = self.status.subscribe();
        let mut tick = tokio::time::interval(STATUS_SYNC_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = changes.changed() => {
                    if r.is_err() {
                        return;
                    }
                    self.sync_changed().await;
                }
                _ = tick.tick() => self.sync_batch().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
    use kubelet_apiclient::fake::FakeApi;
    use kubelet_types::TestClock;

    #[tokio::test(start_paused = true)]
    async fn patches_changes_and_deletes_terminated_pods() {
        let api = Arc::new(FakeApi::new());
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("default".into());
        p.spec = Some(PodSpec { node_name: Some("n1".into()), ..Default::default() });
        let p = api.put_pod(p);
        let sm = Arc::new(StatusManager::new(Arc::new(TestClock::fixed())));
        let mut sync = StatusSync::new(sm.clone(), api.clone());
        sm.set_pod_status(&p, PodStatus { phase: Some("Running".into()), ..Default::default() });
        sync.sync_batch().await;
        assert_eq!(api.pod("default", "web").unwrap().status.unwrap().phase.as_deref(), Some("Running"));
        api.clear_calls();
        sync.sync_batch().await;
        assert!(api.calls().is_empty(), "nothing changed, nothing written");

        // Graceful deletion: the pod is deleted for good once terminated.
        api.delete_pod("default", "web", Some(30), None).await.unwrap();
        let deleting = api.pod("default", "web").unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        sm.set_pod_status(&deleting, PodStatus { phase: Some("Running".into()), ..Default::default() });
        sync.sync_batch().await;
        assert!(api.pod("default", "web").is_some(), "not before it terminated");
        sm.set_terminated(&PodUid(deleting.metadata.uid.clone().unwrap()));
        sync.sync_batch().await;
        assert!(api.pod("default", "web").is_none());
        assert!(api.calls().iter().any(|c| c.contains("grace=Some(0)")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_writes_only_the_pods_that_changed() {
        let api = Arc::new(FakeApi::new());
        let sm = Arc::new(StatusManager::new(Arc::new(TestClock::fixed())));
        let mut sync = StatusSync::new(sm.clone(), api.clone());
        let mut pods = vec![];
        for name in ["a", "b", "c"] {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("default".into());
            p.spec = Some(PodSpec { node_name: Some("n1".into()), ..Default::default() });
            let p = api.put_pod(p);
            sm.set_pod_status(&p, PodStatus { phase: Some("Pending".into()), ..Default::default() });
            pods.push(p);
        }
        sync.sync_changed().await;
        assert!(["a", "b", "c"].iter().all(|n| api.pod("default", n).unwrap().status.is_some()));
        api.clear_calls();
        sm.set_pod_status(&pods[1], PodStatus { phase: Some("Running".into()), ..Default::default() });
        sync.sync_changed().await;
        assert_eq!(api.pod("default", "b").unwrap().status.unwrap().phase.as_deref(), Some("Running"));
        let calls = api.calls();
        assert!(
            !calls.is_empty() && calls.iter().all(|c| c.contains("default/b")),
            "only b is read and patched: {calls:?}"
        );
        api.clear_calls();
        sync.sync_changed().await;
        assert!(api.calls().is_empty(), "nothing changed since: {:?}", api.calls());
    }

    fn api_pod(api: &FakeApi, name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p.spec = Some(PodSpec { node_name: Some("n1".into()), ..Default::default() });
        api.put_pod(p)
    }

    fn cond(kind: &str, status: &str) -> k8s_openapi::api::core::v1::PodCondition {
        k8s_openapi::api::core::v1::PodCondition { type_: kind.into(), status: status.into(), ..Default::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn conditions_other_clients_set_survive_the_kubelets_patches() {
        let api = Arc::new(FakeApi::new());
        let p = api_pod(&api, "gated");
        let sm = Arc::new(StatusManager::new(Arc::new(TestClock::fixed())));
        let mut sync = StatusSync::new(sm.clone(), api.clone());
        sm.set_pod_status(&p, PodStatus { conditions: Some(vec![cond("Ready", "False")]), ..Default::default() });
        sync.sync_batch().await;
        // A controller sets a readiness gate's condition through the status subresource.
        let patch = serde_json::json!({"status": {"conditions": [{"type": "example.com/gate", "status": "True"}]}});
        api.patch_pod_status("default", "gated", &patch).await.unwrap();
        sm.set_pod_status(&p, PodStatus { conditions: Some(vec![cond("Ready", "True")]), ..Default::default() });
        sync.sync_batch().await;
        let conds = api.pod("default", "gated").unwrap().status.unwrap().conditions.unwrap();
        let kinds: Vec<_> = conds.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(kinds, [("example.com/gate", "True"), ("Ready", "True")]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_static_pods_status_waits_for_its_mirror_without_asking_the_apiserver() {
        use std::collections::BTreeMap;
        let api = Arc::new(FakeApi::new());
        let sm = Arc::new(StatusManager::new(Arc::new(TestClock::fixed())));
        let mut sync = StatusSync::new(sm.clone(), api.clone());
        let mut st = Pod::default();
        st.metadata.name = Some("etcd-n1".into());
        st.metadata.namespace = Some("kube-system".into());
        st.metadata.uid = Some("static-uid".into());
        st.metadata.annotations = Some(BTreeMap::from([
            ("kubernetes.io/config.source".to_string(), "file".to_string()),
            ("kubernetes.io/config.hash".to_string(), "static-uid".to_string()),
        ]));
        sm.set_pod_status(&st, PodStatus { phase: Some("Running".into()), ..Default::default() });
        sync.sync_batch().await;
        assert!(api.calls().is_empty(), "no GET of a mirror pod that is not there: {:?}", api.calls());
        // The mirror appears (created by the mirror reconciler, seen by the pod source).
        let mut m = st.clone();
        m.metadata.uid = None;
        m.metadata.annotations.as_mut().unwrap().insert(CONFIG_MIRROR.into(), "static-uid".into());
        let m = api.put_pod(m);
        sm.set_mirror("kube-system", "etcd-n1", m.metadata.uid.clone());
        sync.sync_changed().await;
        let phase = api.pod("kube-system", "etcd-n1").unwrap().status.and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Running"), "written as soon as the mirror is seen");
        // Someone deletes the mirror; the mirror reconciler creates a new one (a new UID, no status): the unchanged
        // status of the static pod is written to it.
        api.remove_pod("kube-system", "etcd-n1");
        let mut again = m.clone();
        again.metadata.uid = None;
        again.status = None;
        let again = api.put_pod(again);
        assert_ne!(again.metadata.uid, m.metadata.uid);
        sm.set_mirror("kube-system", "etcd-n1", again.metadata.uid.clone());
        sync.sync_changed().await;
        let phase = api.pod("kube-system", "etcd-n1").unwrap().status.and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Running"), "the recreated mirror shows the status too");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_patch_is_retried_with_back_off_not_at_every_round() {
        let api = Arc::new(FakeApi::new());
        let p = api_pod(&api, "web");
        let sm = Arc::new(StatusManager::new(Arc::new(TestClock::fixed())));
        let mut sync = StatusSync::new(sm.clone(), api.clone());
        api.refuse_pod_status_patches(Some(ApiError::Other { code: 422, message: "invalid".into() }));
        sm.set_pod_status(&p, PodStatus { phase: Some("Running".into()), ..Default::default() });
        let patches = |api: &FakeApi| api.calls().iter().filter(|c| c.starts_with("patch_pod_status")).count();
        let mut attempts = vec![];
        // Rounds every 10 s for 10 minutes: attempts after 0, 10, 30, 70, 150, 310 s and then every 300 s.
        for round in 0..=60u64 {
            let before = patches(&api);
            sync.sync_batch().await;
            if patches(&api) > before {
                attempts.push(round * 10);
            }
            tokio::time::advance(STATUS_SYNC_PERIOD).await;
        }
        assert_eq!(attempts, [0, 10, 30, 70, 150, 310]);
        // A newer status is tried at once, not after the back-off of the refused one.
        let newer = PodStatus { phase: Some("Running".into()), message: Some("newer".into()), ..Default::default() };
        sm.set_pod_status(&p, newer);
        let before = patches(&api);
        sync.sync_batch().await;
        assert_eq!(patches(&api), before + 1);
        // Once the apiserver accepts it, the status is written at the next allowed attempt and the back-off ends.
        api.refuse_pod_status_patches(None);
        tokio::time::advance(REFUSED_BACKOFF_MAX).await;
        sync.sync_batch().await;
        assert_eq!(api.pod("default", "web").unwrap().status.unwrap().phase.as_deref(), Some("Running"));
        assert!(sync.refused.is_empty());
        // An unreachable apiserver is retried at every round, without back-off.
        api.set_down(true);
        sm.set_pod_status(&p, PodStatus { phase: Some("Failed".into()), ..Default::default() });
        sync.sync_batch().await;
        assert!(sync.refused.is_empty());
    }
}
