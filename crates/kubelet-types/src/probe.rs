//! Probe vocabulary (`pkg/kubelet/prober/results`): probe types, results, the updates the probe manager sends the
//! sync loop, and the small traits through which the runtime manager and the status computation read probe
//! results without depending on the prober.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus as ApiContainerStatus, PodStatus as ApiPodStatus};

use crate::{Pod, PodUid};

/// The three kinds of probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeType {
    /// `livenessProbe`: a failure restarts the container.
    Liveness,
    /// `readinessProbe`: drives `ready` and the Ready condition.
    Readiness,
    /// `startupProbe`: gates the other two; a failure restarts the container.
    Startup,
}

impl ProbeType {
    /// Upstream's name in events and logs (`Liveness`, `Readiness`, `Startup`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeType::Liveness => "Liveness",
            ProbeType::Readiness => "Readiness",
            ProbeType::Startup => "Startup",
        }
    }
}

impl std::fmt::Display for ProbeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cached result of a probe for one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Not probed yet (the initial value of a startup probe).
    Unknown,
    /// Passed (success threshold reached).
    Success,
    /// Failed (failure threshold reached).
    Failure,
}

/// A changed probe result, sent by the probe manager to the sync loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// The pod.
    pub pod_uid: PodUid,
    /// The container's runtime ID (without the `containerd://` prefix).
    pub container_id: String,
    /// Which probe.
    pub probe: ProbeType,
    /// The new result.
    pub result: ProbeResult,
}

/// Liveness and startup results, as the runtime manager reads them to decide whether to restart a container
/// (`computePodActions`).
pub trait ContainerHealth: Send + Sync + 'static {
    /// The result of `probe` for the container, if it has one.
    fn result(&self, probe: ProbeType, container_id: &str) -> Option<ProbeResult>;
}

/// No probes at all.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProbes;

impl ContainerHealth for NoProbes {
    fn result(&self, _probe: ProbeType, _container_id: &str) -> Option<ProbeResult> {
        None
    }
}

/// Sets `started` and `ready` of container statuses from probe results (`prober.Manager.UpdatePodStatus`); called
/// while the API status of a pod is computed.
pub trait PodProbeStatus: Send + Sync + 'static {
    /// Updates the statuses of `pod`'s init and app containers in place.
    fn update_pod_status(&self, pod: &Pod, init: &mut [ApiContainerStatus], apps: &mut [ApiContainerStatus]);
}

/// Without probes: a running container is started and ready; an init container is ready once it succeeded
/// (a restartable one while it runs).
impl PodProbeStatus for NoProbes {
    fn update_pod_status(&self, pod: &Pod, init: &mut [ApiContainerStatus], apps: &mut [ApiContainerStatus]) {
        let restartable = |name: &str| crate::pod_update::is_restartable_init_container(pod, name);
        for s in init.iter_mut() {
            let running = s.state.as_ref().is_some_and(|st| st.running.is_some());
            s.started = Some(running);
            if restartable(&s.name) {
                s.ready = running;
            }
        }
        for s in apps.iter_mut() {
            let running = s.state.as_ref().is_some_and(|st| st.running.is_some());
            s.started = Some(running);
            s.ready = running;
        }
    }
}

/// The latest API status of pods, as the probe workers read it (the status manager implements it).
pub trait PodStatusSource: Send + Sync + 'static {
    /// The status of the pod, if the kubelet computed one.
    fn pod_status(&self, uid: &PodUid) -> Option<Arc<ApiPodStatus>>;
}
