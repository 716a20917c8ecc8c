//! The CPU manager in the kubelet (`pkg/kubelet/cm/cpumanager` as the container manager wires it): the admission
//! step that gives a Guaranteed pod's containers their exclusive CPUs ([`ResourceAllocator`]; refusals are
//! upstream's `UnexpectedAdmissionError`), the cpuset of each container at its creation
//! ([`kubelet_runtime::cpus::ContainerCpus`]) and the reconcile loop ([`run_reconcile`]): every
//! `cpuManagerReconcilePeriod` the containers of the desired pods that run get `UpdateContainerResources` with their
//! cpuset when it changed (the shared pool shrinks and grows as exclusive CPUs are given and returned), and the
//! exclusive CPUs of pods no longer desired return to the pool. A failed update is logged and tried at the next
//! pass; the loop ends with `cancel`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_cm::cpumanager::manager::CpuManager;
use kubelet_cri::{RuntimeService, api};
use kubelet_runtime::cache::PodCache;
use kubelet_types::ContainerState;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admission::{AdmitResult, ResourceAllocator};

/// The containers (pod UID, name) of pods not in a terminal phase (`activePods`).
fn active_containers(pods: &[Arc<Pod>]) -> BTreeSet<(String, String)> {
    pods.iter()
        .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
        .flat_map(|p| {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let spec = p.spec.as_ref();
            spec.into_iter()
                .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                .map(move |c| (uid.clone(), c.name.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The CPU manager behind admission and container creation.
pub struct Cpus(pub Arc<CpuManager>);

#[async_trait::async_trait]
impl ResourceAllocator for Cpus {
    async fn allocate(&self, pod: &Pod, others: &[Arc<Pod>]) -> Option<AdmitResult> {
        let e = self.0.allocate(pod, &active_containers(others)).err()?;
        Some(unexpected(e))
    }
}

/// An allocation error as admission reports it (`admission.GetPodAdmitResult`): `SMTAlignmentError` with its text,
/// anything else as unexpected.
fn unexpected(e: kubelet_cm::cpumanager::policy::AllocateError) -> AdmitResult {
    use kubelet_cm::cpumanager::policy::AllocateError;
    match e {
        AllocateError::SmtAlignment(m) => AdmitResult { reason: "SMTAlignmentError".into(), message: m },
        AllocateError::Other(e) => AdmitResult {
            reason: "UnexpectedAdmissionError".into(),
            message: format!("Allocate failed due to {e}, which is unexpected"),
        },
    }
}

#[async_trait::async_trait]
impl crate::topology::HintProvider for Cpus {
    async fn prepare(&self, pod: &Pod, others: &[Arc<Pod>]) {
        self.0.prepare(pod, &active_containers(others));
    }

    fn hints(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
    ) -> kubelet_cm::topologymanager::ProviderHints {
        self.0.topology_hints(pod, c).map(|h| [("cpu".to_string(), Some(h))].into()).unwrap_or_default()
    }

    fn pod_hints(&self, pod: &Pod) -> kubelet_cm::topologymanager::ProviderHints {
        self.0.pod_topology_hints(pod).map(|h| [("cpu".to_string(), Some(h))].into()).unwrap_or_default()
    }

    async fn allocate(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        hint: kubelet_cm::topologymanager::TopologyHint,
    ) -> Result<(), AdmitResult> {
        self.0.allocate_container(pod, c, hint.affinity).map_err(unexpected)
    }
}

impl kubelet_runtime::cpus::ContainerCpus for Cpus {
    fn cpuset(&self, pod_uid: &str, container: &str) -> Option<String> {
        self.0.cpuset(pod_uid, container)
    }

    fn exclusive(&self, pod_uid: &str, container: &str) -> bool {
        self.0.has_exclusive(pod_uid, container)
    }
}

/// The reconcile loop (`reconcileState`), every `period` until `cancel`.
pub async fn run_reconcile(
    cpus: Arc<CpuManager>,
    pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    cache: Arc<PodCache>,
    runtime: Arc<dyn RuntimeService>,
    period: Duration,
    cancel: CancellationToken,
) {
    if !cpus.is_static() {
        return;
    }
    let mut tick = tokio::time::interval(period.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let desired = pods.borrow().clone();
        // Before the first pods arrive nothing is known to be stale.
        if !desired.is_empty() {
            cpus.remove_stale(&active_containers(&desired));
        }
        let wanted = active_containers(&desired);
        let running: Vec<_> = cache
            .statuses()
            .iter()
            .flat_map(|st| {
                let uid = st.id.as_str().to_string();
                st.container_statuses
                    .iter()
                    .filter(|c| c.state == ContainerState::Running)
                    .map(move |c| (uid.clone(), c.name.clone(), c.id.clone()))
                    .collect::<Vec<_>>()
            })
            .filter(|(uid, name, _)| wanted.contains(&(uid.clone(), name.clone())))
            .collect();
        for (id, set) in cpus.reconcile(&running) {
            let resources = api::LinuxContainerResources { cpuset_cpus: set.to_string(), ..Default::default() };
            match runtime.update_container_resources(&id, resources).await {
                Ok(()) => {
                    info!(containerID = %id, cpuset = %set, "updated the container's cpuset");
                    cpus.updated(&id, set);
                }
                Err(e) => {
                    warn!(containerID = %id, cpuset = %set, error = %e, "failed to update the container's cpuset; will retry")
                }
            }
        }
    }
}
