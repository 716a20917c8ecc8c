//! Removes a pod's dead containers as soon as one dies (`pkg/kubelet/pod_container_deletor.go`, and
//! `kubelet.go` cleanUpContainersInPod).
//!
//! The sync loop calls [`ContainerDeletor::container_died`] for every PLEG `ContainerDied` event with the pod's
//! cached runtime status. Of the pod's exited containers with the dead one's name, all but the newest `keep`
//! (`max(MaxPerPodContainer, 1)`) go; when the pod's content may go (evicted — from the moment the kill was asked
//! for — or deleted and stopped), every exited container of the pod goes, so an evicted pod's writable layers and
//! logs are freed without waiting for the periodic garbage collection. Removals run on one task fed by a bounded
//! channel ([`BUFFER`], upstream's `containerDeletorBufferLimit`); a full channel drops the request with a log
//! line (the periodic collection removes the container later) and a failed removal is logged, never retried here.
//! The task ends when cancelled.

use std::sync::Arc;

use kubelet_runtime::RuntimeManager;
use kubelet_types::{ContainerState, PodStatus};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Requests queued at most.
pub const BUFFER: usize = 50;

/// The exited containers to remove when `died` (None: any) died: of its name (of every name without one), all
/// but the newest `keep` (`getContainersToDeleteInPod`). Nothing when `died` is not one of the pod's.
pub fn to_delete(died: Option<&str>, status: &PodStatus, keep: usize) -> Vec<String> {
    let matched = match died {
        Some(id) => match status.container_statuses.iter().find(|c| c.id == id) {
            Some(c) => Some(c.name.as_str()),
            None => return vec![],
        },
        None => None,
    };
    let mut exited: Vec<_> = status
        .container_statuses
        .iter()
        .filter(|c| c.state == ContainerState::Exited && matched.is_none_or(|n| n == c.name))
        .collect();
    if exited.len() <= keep {
        return vec![];
    }
    exited.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    exited[keep..].iter().map(|c| c.id.clone()).collect()
}

/// The deleter; cheap to clone.
#[derive(Debug, Clone)]
pub struct ContainerDeletor {
    tx: mpsc::Sender<String>,
    keep: usize,
}

impl ContainerDeletor {
    /// A deleter removing through `runtime`, keeping `max(max_per_pod_container, 1)` dead containers per name of
    /// a running pod; its task runs until `cancel`.
    pub fn spawn(runtime: Arc<RuntimeManager>, max_per_pod_container: i32, cancel: CancellationToken) -> Self {
        let (tx, mut rx) = mpsc::channel::<String>(BUFFER);
        tokio::spawn(async move {
            loop {
                let id = tokio::select! {
                    _ = cancel.cancelled() => return,
                    id = rx.recv() => match id { Some(id) => id, None => return },
                };
                debug!(containerID = %id, "removing dead container");
                if let Err(e) = runtime.remove_container(&id).await {
                    warn!(containerID = %id, error = %e, "failed to remove container");
                }
            }
        });
        Self { tx, keep: max_per_pod_container.max(1) as usize }
    }

    /// Container `died` of the pod whose runtime status is `status` died: queue the removals
    /// (`deleteContainersInPod`); all exited containers when `remove_all`.
    pub fn container_died(&self, died: &str, status: &PodStatus, remove_all: bool) {
        let ids = if remove_all { to_delete(None, status, 0) } else { to_delete(Some(died), status, self.keep) };
        if remove_all && !ids.is_empty() {
            info!(pod = %format!("{}/{}", status.namespace, status.name), podUID = %status.id, count = ids.len(), "removing every dead container of a pod whose content may go");
        }
        for id in ids {
            if self.tx.try_send(id.clone()).is_err() {
                info!(containerID = %id, "failed to issue the request to remove container");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_types::{ContainerStatus, PodUid};

    fn status(cs: &[(&str, &str, ContainerState, i64)]) -> PodStatus {
        PodStatus {
            id: PodUid("u".into()),
            container_statuses: cs
                .iter()
                .map(|(id, name, state, created_at)| ContainerStatus {
                    id: id.to_string(),
                    name: name.to_string(),
                    state: *state,
                    created_at: *created_at,
                    started_at: 0,
                    finished_at: 0,
                    exit_code: 0,
                    image: String::new(),
                    image_ref: String::new(),
                    hash: 0,
                    restart_count: 0,
                    reason: String::new(),
                    message: String::new(),
                    log_path: String::new(),
                    resources: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_running_pod_keeps_its_newest_dead_instance_per_name_an_evicted_one_nothing() {
        use ContainerState::*;
        let st = status(&[
            ("a3", "app", Running, 3),
            ("a2", "app", Exited, 2),
            ("a1", "app", Exited, 1),
            ("s1", "side", Exited, 1),
            ("s0", "side", Exited, 0),
        ]);
        // app died: its older dead instance goes, side's are not looked at.
        assert_eq!(to_delete(Some("a2"), &st, 1), vec!["a1".to_string()]);
        assert_eq!(to_delete(Some("a2"), &st, 2), Vec::<String>::new());
        // A container the status does not know: nothing.
        assert!(to_delete(Some("zz"), &st, 0).is_empty());
        // Everything exited, newest first, never the running one.
        assert_eq!(to_delete(None, &st, 0), vec!["a2", "a1", "s1", "s0"]);
    }

    #[tokio::test(start_paused = true)]
    async fn removals_reach_the_runtime() {
        use kubelet_cri::{FakeRuntime, RuntimeService, api};
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let rm = Arc::new(RuntimeManager::new(
            fake.clone(),
            fake.clone(),
            Default::default(),
            Arc::new(kubelet_types::TestClock::fixed()),
        ));
        let sandbox = fake.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let mut ids = vec![];
        for n in 0..2 {
            let config = api::ContainerConfig {
                metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: n }),
                image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
                ..Default::default()
            };
            let id = fake.create_container(&sandbox, config, api::PodSandboxConfig::default()).await.unwrap();
            fake.start_container(&id).await.unwrap();
            fake.exit_container(&id, 0);
            ids.push(id);
        }
        let cancel = CancellationToken::new();
        let d = ContainerDeletor::spawn(rm, 1, cancel.clone());
        let st = status(&[(&ids[1], "app", ContainerState::Exited, 2), (&ids[0], "app", ContainerState::Exited, 1)]);
        d.container_died(&ids[1], &st, false);
        let left = || async { fake.list_containers(None).await.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>() };
        let settle = || async {
            for _ in 0..50 {
                tokio::task::yield_now().await;
            }
        };
        settle().await;
        assert_eq!(left().await, vec![ids[1].clone()], "the older dead instance went, the newest stays");
        d.container_died(&ids[1], &st, true);
        settle().await;
        assert!(left().await.is_empty(), "an evicted pod loses every dead container");
        cancel.cancel();
    }
}
