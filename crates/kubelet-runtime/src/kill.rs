//! Stopping containers and pods (`kuberuntime_container.go` killContainer, killContainersWithSyncResult,
//! executePreStopHook, restoreSpecsFromContainerLabels, setTerminationGracePeriod; `kuberuntime_manager.go`
//! KillPod).
//!
//! Called by [`RuntimeManager::sync_pod`] for single containers (probe failures, changed definitions) and by the
//! pod workers through [`RuntimeManager::kill_pod`] when a pod terminates. The preStop hook counts against the
//! grace period; sidecars wait for the app containers (see [`TerminationOrdering`]); a failure is returned for the
//! caller to retry.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_types::events::{NORMAL, WARNING, container_reference, reason};
use kubelet_types::labels as keys;
use kubelet_types::pod_update::pod_ref;
use kubelet_types::{ContainerState, ContainerStatus, PodStatus};
use tracing::{debug, info, warn};

use crate::actions::KillReason;
use crate::labels::container_info;
use crate::lifecycle::{TerminationOrdering, run_handler};
use crate::manager::{MIN_GRACE_PERIOD_SECONDS, RuntimeManager, SyncError};

impl RuntimeManager {
    /// Stops one container (`killContainer`): the `Killing` event, the preStop hook within the grace period, the
    /// wait for its turn (sidecars), then StopContainer with what is left of the grace period (at least 2 s).
    pub async fn kill_container(
        &self,
        pod: Option<&Pod>,
        id: &str,
        name: &str,
        req: KillRequest<'_>,
    ) -> Result<(), SyncError> {
        let restored;
        let pod = match pod {
            Some(p) => p,
            None => {
                // A pod known only from the runtime: what killing needs was written on the container.
                restored = self.restore_spec(id).await;
                &restored
            }
        };
        // App, init or ephemeral container (`GetContainerSpec`); an ephemeral one has no hook nor probe.
        let container = kubelet_types::pod_update::container_spec(pod, name);
        let container = container.as_ref();
        let mut grace = termination_grace_period(pod, container, req.reason);
        let message = req.message.map(str::to_string).unwrap_or_else(|| format!("Stopping container {name}"));
        self.recorder.event(&container_reference(pod, name), NORMAL, reason::KILLING, message);
        if let Some(g) = req.grace_override {
            grace = g;
        }
        if let Some(c) = container
            && let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
            && grace > 0
        {
            grace -= self.run_pre_stop(pod, c, id, h, grace).await;
        }
        if let Some(o) = req.ordering
            && grace > 0
        {
            grace -= o.wait_for_turn(name, grace).await;
        }
        let grace = grace.max(MIN_GRACE_PERIOD_SECONDS);
        debug!(pod = %pod_ref(pod), containerName = %name, containerID = %id, gracePeriod = grace, "killing container with a grace period");
        let res = match self.runtime.stop_container(id, grace).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(SyncError {
                action: "KillContainer",
                target: name.to_string(),
                reason: "KillContainerError".into(),
                message: e.message(),
            }),
        };
        if let Some(o) = req.ordering {
            o.container_terminated(name);
        }
        res
    }

    /// Runs a preStop hook for at most `grace` seconds (`executePreStopHook`); returns the whole seconds it took.
    /// A hook still running at the deadline is left behind: the container is stopped anyway.
    async fn run_pre_stop(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        id: &str,
        h: &k8s_openapi::api::core::v1::LifecycleHandler,
        grace: i64,
    ) -> i64 {
        let start = tokio::time::Instant::now();
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
        let hook = run_handler(self.runtime.as_ref(), pod, c, id, h, &ip);
        match tokio::time::timeout(Duration::from_secs(grace as u64), hook).await {
            Ok(Ok(())) => debug!(pod = %pod_ref(pod), containerName = %c.name, "preStop hook completed"),
            Ok(Err(msg)) => {
                warn!(pod = %pod_ref(pod), containerName = %c.name, message = %msg, "preStop hook failed");
                self.recorder.event(&container_reference(pod, &c.name), WARNING, reason::FAILED_PRE_STOP_HOOK, msg);
            }
            Err(_) => {
                info!(pod = %pod_ref(pod), containerName = %c.name, gracePeriod = grace, "preStop hook not completed in grace period")
            }
        }
        start.elapsed().as_secs() as i64
    }

    /// A pod and container rebuilt from a container's labels and annotations (`restoreSpecsFromContainerLabels`):
    /// identity, grace periods and the preStop hook.
    async fn restore_spec(&self, id: &str) -> Pod {
        let Ok(st) = self.runtime.container_status(id).await else { return Pod::default() };
        let info = container_info(&st.labels, &st.annotations);
        let pre_stop = st
            .annotations
            .get(keys::CONTAINER_PRESTOP_HANDLER)
            .and_then(|j| serde_json::from_str::<k8s_openapi::api::core::v1::LifecycleHandler>(j).ok());
        let num = |k: &str| st.annotations.get(k).and_then(|v| v.parse::<i64>().ok());
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(info.pod_name),
                namespace: Some(info.pod_namespace),
                uid: st.labels.get(keys::POD_UID).cloned(),
                deletion_grace_period_seconds: num(keys::POD_DELETION_GRACE_PERIOD),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                termination_grace_period_seconds: num(keys::POD_TERMINATION_GRACE_PERIOD),
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: info.name,
                    lifecycle: pre_stop
                        .map(|h| k8s_openapi::api::core::v1::Lifecycle { pre_stop: Some(h), ..Default::default() }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Stops every running container of the pod in parallel, then its sandboxes (`KillPod`). `pod` is None for a
    /// pod the kubelet only knows from the runtime; the grace period then comes from the container annotations.
    /// Returns whether it asked the runtime to stop anything (else the pod's status is unchanged).
    pub async fn kill_pod(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        grace_override: Option<i64>,
    ) -> Result<bool, SyncError> {
        let running: Vec<&ContainerStatus> = status
            .container_statuses
            .iter()
            .filter(|c| matches!(c.state, ContainerState::Running | ContainerState::Unknown | ContainerState::Created))
            .collect();
        let has_sidecar = pod
            .and_then(|p| p.spec.as_ref())
            .is_some_and(|s| s.init_containers.iter().flatten().any(crate::actions::is_restartable));
        let ordering = match pod {
            Some(p) if has_sidecar => {
                let names: Vec<&str> = running.iter().map(|c| c.name.as_str()).collect();
                Some(TerminationOrdering::new(p, &names))
            }
            _ => None,
        };
        let ordering = ordering.as_ref();
        let kills = running.iter().map(|c| async move {
            // A pod only the runtime knows is stopped quickly, as upstream stops orphans (grace 1).
            let over = if pod.is_none() && grace_override.is_none() { Some(1) } else { grace_override };
            let kill = KillRequest { grace_override: over, ordering, ..Default::default() };
            self.kill_container(pod, &c.id, &c.name, kill).await
        });
        let results = futures::future::join_all(kills).await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            return Err(e);
        }
        let mut changed = !running.is_empty();
        // Every sandbox is stopped, ready or not, so the network of a dead sandbox is released too; one this
        // manager already stopped is not asked again.
        for s in &status.sandbox_statuses {
            if self.stopped_sandboxes.lock().unwrap().contains(&s.id) {
                continue;
            }
            changed = true;
            match self.runtime.stop_pod_sandbox(&s.id).await {
                Ok(()) => {
                    self.stopped_sandboxes.lock().unwrap().insert(s.id.clone());
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => {
                    return Err(SyncError {
                        action: "KillPodSandbox",
                        target: format!("{}/{}", status.namespace, status.name),
                        reason: "KillPodSandboxError".into(),
                        message: e.message(),
                    });
                }
            }
        }
        Ok(changed)
    }
}

/// How to kill one container.
#[derive(Debug, Default, Clone, Copy)]
pub struct KillRequest<'a> {
    /// The `Killing` event's message (default `Stopping container <name>`).
    pub message: Option<&'a str>,
    /// Why (a probe kill uses the probe's grace period).
    pub reason: KillReason,
    /// The grace period decided by the pod worker (deletion, eviction), replacing the pod's.
    pub grace_override: Option<i64>,
    /// The stop order of a pod with sidecars.
    pub ordering: Option<&'a TerminationOrdering>,
}

/// The grace period of a container kill (`setTerminationGracePeriod`): the pod's deletion grace period, else the
/// failed probe's own, else the pod's `terminationGracePeriodSeconds`, else 2 s.
pub fn termination_grace_period(
    pod: &Pod,
    c: Option<&k8s_openapi::api::core::v1::Container>,
    reason: KillReason,
) -> i64 {
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        return g;
    }
    let Some(pod_grace) = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds) else {
        return MIN_GRACE_PERIOD_SECONDS;
    };
    let probe = match reason {
        KillReason::LivenessProbe => c.and_then(|c| c.liveness_probe.as_ref()),
        KillReason::StartupProbe => c.and_then(|c| c.startup_probe.as_ref()),
        KillReason::Unknown => None,
    };
    probe.and_then(|p| p.termination_grace_period_seconds).unwrap_or(pod_grace)
}
