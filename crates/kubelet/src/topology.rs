//! The topology manager in the kubelet (`pkg/kubelet/cm/topologymanager`: topology_manager.go Admit, scope.go,
//! scope_container.go, scope_pod.go, scope_none.go): the admission step that allocates a pod's resources through the
//! hint providers (the CPU manager, the device manager), aligned on NUMA nodes as `topologyManagerPolicy` asks.
//!
//! Contract: the sync loop's allocator ([`ResourceAllocator`]), called for each pod it admits and for each resize it
//! checks. With the `none` policy every provider allocates each init and app container as it would alone. Otherwise,
//! at `container` scope each container's hints are merged ([`kubelet_cm::topologymanager::Policy::merge`]), at `pod`
//! scope the pod's; a merge the policy does not admit refuses the pod with `TopologyAffinityError` and upstream's
//! message, else each container's providers allocate along the chosen NUMA nodes (an allocation error refuses the pod
//! with the provider's reason).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cm::topologymanager::{
    Policy, PolicyKind, ProviderHints, TOPOLOGY_AFFINITY_ERROR, TOPOLOGY_AFFINITY_MESSAGE, TopologyHint,
};
use tracing::info;

use crate::admission::{AdmitResult, ResourceAllocator};

/// `topologyManagerScope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `container`.
    Container,
    /// `pod`.
    Pod,
}

impl Scope {
    /// Parses `topologyManagerScope`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "container" => Ok(Scope::Container),
            "pod" => Ok(Scope::Pod),
            other => Err(format!("unknown scope: \"{other}\"")),
        }
    }
}

/// A resource manager that allocates along NUMA nodes (`HintProvider`).
#[async_trait]
pub trait HintProvider: Send + Sync + 'static {
    /// Before the pod's containers: what pods no longer active held is freed.
    async fn prepare(&self, pod: &Pod, others: &[Arc<Pod>]);
    /// The placements of container `c`'s resources (`GetTopologyHints`).
    fn hints(&self, pod: &Pod, c: &Container) -> ProviderHints;
    /// The placements of the pod's resources (`GetPodTopologyHints`).
    fn pod_hints(&self, pod: &Pod) -> ProviderHints;
    /// Allocates container `c`'s resources along `hint` (`Allocate` with the store's `GetAffinity`).
    async fn allocate(&self, pod: &Pod, c: &Container, hint: TopologyHint) -> Result<(), AdmitResult>;
}

/// The topology manager.
pub struct TopologyManager {
    policy: Policy,
    scope: Scope,
    providers: Vec<Arc<dyn HintProvider>>,
    /// The hint each container was admitted with (`podTopologyHints`), by pod UID and container name.
    affinity: Mutex<HashMap<(String, String), TopologyHint>>,
}

impl TopologyManager {
    /// A manager with `policy` at `scope` over `providers`, asked in this order.
    pub fn new(policy: Policy, scope: Scope, providers: Vec<Arc<dyn HintProvider>>) -> Self {
        Self { policy, scope, providers, affinity: Mutex::default() }
    }

    /// The hint a container was admitted with (`GetAffinity`).
    pub fn affinity(&self, pod_uid: &str, container: &str) -> Option<TopologyHint> {
        self.affinity.lock().unwrap().get(&(pod_uid.to_string(), container.to_string())).copied()
    }

    fn refuse() -> AdmitResult {
        kubelet_metrics::kubelet::TOPOLOGY_ADMISSION_ERRORS.inc(&[]);
        AdmitResult { reason: TOPOLOGY_AFFINITY_ERROR.into(), message: TOPOLOGY_AFFINITY_MESSAGE.into() }
    }

    async fn allocate_aligned(&self, pod: &Pod, c: &Container, hint: TopologyHint) -> Result<(), AdmitResult> {
        for p in &self.providers {
            p.allocate(pod, c, hint).await?;
        }
        Ok(())
    }

    fn remember(&self, pod: &Pod, c: &Container, hint: TopologyHint) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.affinity.lock().unwrap().insert((uid, c.name.clone()), hint);
    }

    async fn admit(&self, pod: &Pod) -> Result<(), AdmitResult> {
        let spec = pod.spec.clone().unwrap_or_default();
        let containers: Vec<&Container> = spec.init_containers.iter().flatten().chain(&spec.containers).collect();
        let name = kubelet_types::pod_update::pod_ref(pod);
        if self.policy.kind == PolicyKind::None {
            for c in containers {
                self.allocate_aligned(pod, c, TopologyHint::default()).await?;
            }
            return Ok(());
        }
        match self.scope {
            Scope::Container => {
                for c in containers {
                    let hints: Vec<ProviderHints> = self.providers.iter().map(|p| p.hints(pod, c)).collect();
                    let (best, admit) = self.policy.merge(&hints);
                    info!(pod = %name, containerName = %c.name, bestHint = %best, "Best TopologyHint");
                    if !admit {
                        return Err(Self::refuse());
                    }
                    self.remember(pod, c, best);
                    self.allocate_aligned(pod, c, best).await.inspect_err(|_| {
                        kubelet_metrics::kubelet::TOPOLOGY_ADMISSION_ERRORS.inc(&[]);
                    })?;
                }
            }
            Scope::Pod => {
                let hints: Vec<ProviderHints> = self.providers.iter().map(|p| p.pod_hints(pod)).collect();
                let (best, admit) = self.policy.merge(&hints);
                info!(pod = %name, bestHint = %best, "Best TopologyHint");
                if !admit {
                    return Err(Self::refuse());
                }
                for c in containers {
                    self.remember(pod, c, best);
                    self.allocate_aligned(pod, c, best).await.inspect_err(|_| {
                        kubelet_metrics::kubelet::TOPOLOGY_ADMISSION_ERRORS.inc(&[]);
                    })?;
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ResourceAllocator for TopologyManager {
    async fn allocate(&self, pod: &Pod, others: &[Arc<Pod>]) -> Option<AdmitResult> {
        kubelet_metrics::kubelet::TOPOLOGY_ADMISSION_REQUESTS.inc(&[]);
        let started = tokio::time::Instant::now();
        // The affinities of pods no longer active go (upstream forgets them with their containers).
        let mut keep: std::collections::HashSet<String> =
            others.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        keep.extend(pod.metadata.uid.clone());
        self.affinity.lock().unwrap().retain(|(u, _), _| keep.contains(u));
        for p in &self.providers {
            p.prepare(pod, others).await;
        }
        let result = self.admit(pod).await;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        kubelet_metrics::kubelet::TOPOLOGY_ADMISSION_DURATION.observe(&[], ms);
        result.err()
    }
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
