//! The device manager ([`kubelet_cm::devicemanager`]) and the DRA manager ([`kubelet_cm::dra`]) seen by admission and
//! by the runtime manager: the wiring of upstream's `GetAllocateResourcesPodAdmitHandler`, `GetResources`,
//! `PrepareDynamicResources` and `UnprepareDynamicResources` (`pkg/kubelet/cm/container_manager_linux.go`).
//!
//! Admission allocates a new pod's devices after the other checks passed; an error refuses the pod with
//! `UnexpectedAdmissionError` and upstream's `Allocate failed due to ..., which is unexpected`. The pod's
//! ResourceClaims are prepared before its sandbox and unprepared once it stopped. Before each container is created
//! the runtime manager asks for its devices, which become its CRI config: the claims' CDI devices first, then the
//! device plugins' (upstream's order).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cm::devicemanager::DeviceManager;
use kubelet_cm::dra::manager::DraManager;
use kubelet_config::podconfig::SourcesReady;
use kubelet_proto::podresources::v1 as pr;
use kubelet_runtime::devices::{ContainerDevices, DeviceRunOptions};

use crate::admission::{AdmitResult, ResourceAllocator};

/// The device manager behind admission and container creation.
pub struct Devices {
    manager: Arc<DeviceManager>,
    dra: Option<Arc<DraManager>>,
    /// Whether every pod source was seen (until then a restarted kubelet keeps the devices it checkpointed).
    sources_ready: std::sync::OnceLock<Arc<SourcesReady>>,
    /// The machine's NUMA nodes (the topology hints of devices).
    numa_nodes: Vec<u32>,
}

impl Devices {
    /// The manager's admission and container side; the pod sources are told once they exist.
    pub fn new(manager: Arc<DeviceManager>) -> Self {
        Self { manager, dra: None, sources_ready: std::sync::OnceLock::new(), numa_nodes: vec![0] }
    }

    /// On a machine with these NUMA nodes.
    pub fn with_numa_nodes(mut self, nodes: Vec<u32>) -> Self {
        self.numa_nodes = nodes;
        self
    }

    /// With the DRA manager.
    pub fn with_dra(mut self, dra: Arc<DraManager>) -> Self {
        self.dra = Some(dra);
        self
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
impl crate::topology::HintProvider for Devices {
    async fn prepare(&self, pod: &Pod, others: &[Arc<Pod>]) {
        let active: BTreeSet<String> = others.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let ready = self.sources_ready.get().is_some_and(|s| s.all_ready());
        self.manager.prepare(pod, &active, ready);
    }

    fn hints(&self, pod: &Pod, c: &Container) -> kubelet_cm::topologymanager::ProviderHints {
        self.manager.topology_hints(pod, c, &self.numa_nodes)
    }

    fn pod_hints(&self, pod: &Pod) -> kubelet_cm::topologymanager::ProviderHints {
        self.manager.pod_topology_hints(pod, &self.numa_nodes)
    }

    async fn allocate(
        &self,
        pod: &Pod,
        c: &Container,
        hint: kubelet_cm::topologymanager::TopologyHint,
    ) -> Result<(), AdmitResult> {
        self.manager.allocate_for(pod, c, hint.affinity).await.map_err(|e| AdmitResult {
            reason: "UnexpectedAdmissionError".into(),
            message: format!("Allocate failed due to {e}, which is unexpected"),
        })
    }
}

#[async_trait::async_trait]
impl ContainerDevices for Devices {
    async fn run_options(&self, pod: &Pod, c: &Container) -> Result<DeviceRunOptions, String> {
        let claims = match &self.dra {
            Some(dra) => dra.cdi_devices(pod, c)?,
            None => vec![],
        };
        let mut opts = self.manager.run_options(pod, c).await?;
        if !claims.is_empty() {
            opts.cdi_devices = claims.into_iter().chain(opts.cdi_devices).collect();
        }
        Ok(opts)
    }

    fn release(&self, pod_uid: &str) {
        self.manager.release(pod_uid);
    }

    async fn prepare(&self, pod: &Pod) -> Result<(), String> {
        match &self.dra {
            Some(dra) => dra.prepare(pod).await,
            None => Ok(()),
        }
    }

    async fn unprepare(&self, pod: &Pod) -> Result<(), String> {
        match &self.dra {
            Some(dra) => dra.unprepare(pod).await,
            None => Ok(()),
        }
    }
}

/// The pod resources API's view: the device manager's devices and the DRA manager's claims.
impl kubelet_cm::podresources::DevicesProvider for Devices {
    fn update_allocated_devices(&self, active: &BTreeSet<String>) {
        kubelet_cm::podresources::DevicesProvider::update_allocated_devices(&*self.manager, active);
    }

    fn devices(&self, pod_uid: &str, container: &str) -> Vec<pr::ContainerDevices> {
        kubelet_cm::podresources::DevicesProvider::devices(&*self.manager, pod_uid, container)
    }

    fn allocatable_devices(&self) -> Vec<pr::ContainerDevices> {
        kubelet_cm::podresources::DevicesProvider::allocatable_devices(&*self.manager)
    }

    /// Each claim the container names, with one entry per prepared device (upstream lists with each device the CDI
    /// ids of the devices before it too; here each lists its own).
    fn dynamic_resources(&self, pod: &Pod, container: &str) -> Vec<pr::DynamicResource> {
        let Some(dra) = &self.dra else { return vec![] };
        let Some(spec) = &pod.spec else { return vec![] };
        let all = spec.init_containers.iter().flatten().chain(spec.containers.iter());
        let Some(c) = all.into_iter().find(|c| c.name == container) else { return vec![] };
        dra.container_claims(pod, c)
            .into_iter()
            .map(|info| pr::DynamicResource {
                claim_name: info.state.claim_name,
                claim_namespace: info.state.namespace,
                claim_resources: info
                    .state
                    .driver_state
                    .into_iter()
                    .flat_map(|(driver, ds)| {
                        ds.devices.unwrap_or_default().into_iter().map(move |d| pr::ClaimResource {
                            cdi_devices: d
                                .cdi_device_ids
                                .unwrap_or_default()
                                .into_iter()
                                .map(|name| pr::CdiDevice { name })
                                .collect(),
                            driver_name: driver.clone(),
                            pool_name: d.pool_name,
                            device_name: d.device_name,
                        })
                    })
                    .collect(),
            })
            .collect()
    }
}

/// The device manager's allocations for the resource fit (`UpdatePluginResources`).
pub struct PluginResources(pub Arc<DeviceManager>);

impl crate::predicate::PluginResources for PluginResources {
    fn allocated_if_pod_has_devices(&self, pod_uid: &str) -> Option<std::collections::BTreeMap<String, usize>> {
        self.0.allocated_if_pod_has_devices(pod_uid)
    }
}
