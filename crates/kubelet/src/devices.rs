//! The device manager ([`kubelet_cm::devicemanager`]) seen by admission and by the runtime manager: the wiring of
//! upstream's `GetAllocateResourcesPodAdmitHandler` and `GetResources` (`pkg/kubelet/cm/container_manager_linux.go`).
//!
//! Admission allocates a new pod's devices after the other checks passed; an error refuses the pod with
//! `UnexpectedAdmissionError` and upstream's `Allocate failed due to ..., which is unexpected`. Before each container
//! is created the runtime manager asks for its devices, which become its CRI config.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cm::devicemanager::DeviceManager;
use kubelet_config::podconfig::SourcesReady;
use kubelet_runtime::devices::{ContainerDevices, DeviceRunOptions};

use crate::admission::{AdmitResult, ResourceAllocator};

/// The device manager behind admission and container creation.
pub struct Devices {
    manager: Arc<DeviceManager>,
    /// Whether every pod source was seen (until then a restarted kubelet keeps the devices it checkpointed).
    sources_ready: std::sync::OnceLock<Arc<SourcesReady>>,
}

impl Devices {
    /// The manager's admission and container side; the pod sources are told once they exist.
    pub fn new(manager: Arc<DeviceManager>) -> Self {
        Self { manager, sources_ready: std::sync::OnceLock::new() }
    }

    /// The pod sources whose readiness decides when devices of pods not seen again may be freed.
    pub fn set_sources_ready(&self, sources: Arc<SourcesReady>) {
        let _ = self.sources_ready.set(sources);
    }
}

#[async_trait::async_trait]
impl ResourceAllocator for Devices {
    async fn allocate(&self, pod: &Pod, others: &[Arc<Pod>]) -> Option<AdmitResult> {
        let active: BTreeSet<String> = others.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let ready = self.sources_ready.get().is_some_and(|s| s.all_ready());
        let e = self.manager.allocate(pod, &active, ready).await.err()?;
        Some(AdmitResult {
            reason: "UnexpectedAdmissionError".into(),
            message: format!("Allocate failed due to {e}, which is unexpected"),
        })
    }
}

#[async_trait::async_trait]
impl ContainerDevices for Devices {
    async fn run_options(&self, pod: &Pod, c: &Container) -> Result<DeviceRunOptions, String> {
        self.manager.run_options(pod, c).await
    }

    fn release(&self, pod_uid: &str) {
        self.manager.release(pod_uid);
    }
}
