//! The memory manager in the kubelet ([`kubelet_cm::memorymanager`] as the container manager wires it): a hint
//! provider of the topology manager (its allocation refusals are upstream's `UnexpectedAdmissionError`), and each
//! container's `cpuset.mems` at its creation ([`kubelet_runtime::cpus::ContainerMems`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cm::memorymanager::MemoryManager;
use kubelet_cm::topologymanager::{ProviderHints, TopologyHint};

use crate::admission::AdmitResult;

/// The memory manager behind admission and container creation.
pub struct Memory(pub Arc<MemoryManager>);

fn hints(h: Option<std::collections::BTreeMap<String, Vec<TopologyHint>>>) -> ProviderHints {
    h.map(|m| m.into_iter().map(|(k, v)| (k, Some(v))).collect()).unwrap_or_default()
}

#[async_trait::async_trait]
impl crate::topology::HintProvider for Memory {
    async fn prepare(&self, pod: &Pod, others: &[Arc<Pod>]) {
        let active: BTreeSet<(String, String)> = others
            .iter()
            .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            .flat_map(|p| {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                let spec = p.spec.as_ref();
                spec.into_iter()
                    .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                    .map(move |c| (uid.clone(), c.name.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        self.0.prepare(pod, &active);
    }

    fn hints(&self, pod: &Pod, c: &Container) -> ProviderHints {
        hints(self.0.topology_hints(pod, c))
    }

    fn pod_hints(&self, pod: &Pod) -> ProviderHints {
        hints(self.0.pod_topology_hints(pod))
    }

    async fn allocate(&self, pod: &Pod, c: &Container, hint: TopologyHint) -> Result<(), AdmitResult> {
        self.0.allocate_container(pod, c, hint).map_err(|e| AdmitResult {
            reason: "UnexpectedAdmissionError".into(),
            message: format!("Allocate failed due to {e}, which is unexpected"),
        })
    }
}

impl kubelet_runtime::cpus::ContainerMems for Memory {
    fn container_created(&self, pod: &Pod, c: &Container) -> Option<String> {
        self.0.container_created(pod, c)
    }
}
