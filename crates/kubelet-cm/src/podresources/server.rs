//! The two services' answers (`server_v1.go`, `server_v1alpha1.go`) and their shared rate limit
//! (`pkg/kubelet/apis/grpc/ratelimit.go`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kubelet_metrics::kubelet as metrics;
use kubelet_proto::podresources::{v1 as pb, v1alpha1 as alpha};
use tokio::time::Instant;

use super::{BURST, DevicesProvider, PodsProvider, QPS};

/// A token bucket (`rate.NewLimiter(qps, burst)`): full at first, refilled at `qps` tokens a second up to `burst`.
#[derive(Debug)]
pub struct Limiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Limiter {
    /// A full bucket.
    pub fn new(qps: f64, burst: f64) -> Self {
        Self { qps, burst, state: Mutex::new((burst, Instant::now())) }
    }

    /// Takes a token if there is one (`Allow`).
    pub fn allow(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        let tokens = (s.0 + now.saturating_duration_since(s.1).as_secs_f64() * self.qps).min(self.burst);
        *s = (tokens, now);
        if tokens >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Both services, over the same providers and one limiter.
#[derive(Clone)]
pub struct Lister {
    pods: Arc<dyn PodsProvider>,
    devices: Arc<dyn DevicesProvider>,
    limiter: Arc<Limiter>,
}

impl Lister {
    /// The services over `pods` and `devices`, with upstream's limit.
    pub fn new(pods: Arc<dyn PodsProvider>, devices: Arc<dyn DevicesProvider>) -> Self {
        Self { pods, devices, limiter: Arc::new(Limiter::new(QPS, BURST)) }
    }

    fn limit(&self) -> Result<(), tonic::Status> {
        if self.limiter.allow() { Ok(()) } else { Err(tonic::Status::resource_exhausted("rejected by rate limit")) }
    }

    /// The active pods, after freeing the devices of the others (once every source was seen).
    fn active(&self) -> Vec<Arc<Pod>> {
        let pods = self.pods.active_pods();
        if self.pods.sources_ready() {
            let uids: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
            self.devices.update_allocated_devices(&uids);
        }
        pods
    }

    /// Every pod the kubelet has, after freeing the devices of the inactive ones.
    fn all(&self) -> Vec<Arc<Pod>> {
        self.active();
        self.pods.pods()
    }

    /// One pod's answer (`getContainerResources` for each container upstream lists).
    fn pod_resources(&self, pod: &Pod) -> pb::PodResources {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let containers = listed_containers(pod)
            .into_iter()
            .map(|name| pb::ContainerResources {
                devices: self.devices.devices(uid, &name),
                dynamic_resources: self.devices.dynamic_resources(pod, &name),
                name,
                cpu_ids: vec![],
                memory: vec![],
            })
            .collect();
        pb::PodResources {
            name: pod.metadata.name.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            containers,
        }
    }
}

/// The containers upstream answers for: the sidecars (init containers with `restartPolicy: Always`), then every
/// container, in spec order.
fn listed_containers(pod: &Pod) -> Vec<String> {
    let Some(spec) = &pod.spec else { return vec![] };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.clone());
    sidecars.chain(spec.containers.iter().map(|c| c.name.clone())).collect()
}

const V1: &str = "v1";

#[tonic::async_trait]
impl pb::pod_resources_lister_server::PodResourcesLister for Lister {
    async fn list(
        &self,
        _: tonic::Request<pb::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<pb::ListPodResourcesResponse>, tonic::Status> {
        self.limit()?;
        metrics::POD_RESOURCES_REQUESTS.inc(&[V1]);
        metrics::POD_RESOURCES_REQUESTS_LIST.inc(&[V1]);
        let pod_resources = self.active().iter().map(|p| self.pod_resources(p)).collect();
        Ok(tonic::Response::new(pb::ListPodResourcesResponse { pod_resources }))
    }

    async fn get_allocatable_resources(
        &self,
        _: tonic::Request<pb::AllocatableResourcesRequest>,
    ) -> Result<tonic::Response<pb::AllocatableResourcesResponse>, tonic::Status> {
        self.limit()?;
        metrics::POD_RESOURCES_REQUESTS.inc(&[V1]);
        metrics::POD_RESOURCES_REQUESTS_GET_ALLOCATABLE.inc(&[V1]);
        Ok(tonic::Response::new(pb::AllocatableResourcesResponse {
            devices: self.devices.allocatable_devices(),
            cpu_ids: vec![],
            memory: vec![],
        }))
    }

    async fn get(
        &self,
        req: tonic::Request<pb::GetPodResourcesRequest>,
    ) -> Result<tonic::Response<pb::GetPodResourcesResponse>, tonic::Status> {
        self.limit()?;
        metrics::POD_RESOURCES_REQUESTS.inc(&[V1]);
        metrics::POD_RESOURCES_REQUESTS_GET.inc(&[V1]);
        let req = req.into_inner();
        let Some(pod) = self.pods.pod(&req.pod_namespace, &req.pod_name) else {
            metrics::POD_RESOURCES_ERRORS_GET.inc(&[V1]);
            return Err(tonic::Status::unknown(format!(
                "pod {} in namespace {} not found",
                req.pod_name, req.pod_namespace
            )));
        };
        Ok(tonic::Response::new(pb::GetPodResourcesResponse { pod_resources: Some(self.pod_resources(&pod)) }))
    }
}

#[tonic::async_trait]
impl alpha::pod_resources_lister_server::PodResourcesLister for Lister {
    async fn list(
        &self,
        _: tonic::Request<alpha::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<alpha::ListPodResourcesResponse>, tonic::Status> {
        self.limit()?;
        metrics::POD_RESOURCES_REQUESTS.inc(&["v1alpha1"]);
        // Upstream's v1alpha1 answers every pod it has, regular containers only, devices without topology.
        let pod_resources = self
            .all()
            .iter()
            .map(|p| {
                let uid = p.metadata.uid.as_deref().unwrap_or_default();
                let containers = p
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .map(|c| alpha::ContainerResources {
                        name: c.name.clone(),
                        devices: self
                            .devices
                            .devices(uid, &c.name)
                            .into_iter()
                            .map(|d| alpha::ContainerDevices {
                                resource_name: d.resource_name,
                                device_ids: d.device_ids,
                            })
                            .collect(),
                    })
                    .collect();
                alpha::PodResources {
                    name: p.metadata.name.clone().unwrap_or_default(),
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    containers,
                }
            })
            .collect();
        Ok(tonic::Response::new(alpha::ListPodResourcesResponse { pod_resources }))
    }
}
