//! What the pod workers and housekeeping ask of the volume manager (`volumemanager.VolumeManager`): set up a
//! pod's volumes before its containers start, tear them down after they stopped. Implemented by
//! [`kubelet_volume::VolumeManager`]; the downward API values it needs come from [`PodDownward`].

use std::sync::Arc;

use async_trait::async_trait;
use kubelet_runtime::env::{NodeFacts, field_value, resource_value};
use kubelet_types::{Pod, PodUid};
use kubelet_volume::{DownwardValues, MountFailure, MountFailures, VolumeError, VolumeManager};

/// The volume manager as the core uses it.
#[async_trait]
pub trait Volumes: Send + Sync + 'static {
    /// Sets up every volume of a running pod (every sync; idempotent). `Err` blocks the pod (volumes never set
    /// up); `Ok` carries refresh failures of volumes already set up, to report while the pod goes on.
    async fn mount_pod(&self, pod: &Pod) -> Result<Vec<MountFailure>, MountFailures>;
    /// Tears down the volumes of a pod whose containers are gone (CSI drivers unpublish theirs: up to 2 minutes
    /// each).
    async fn unmount_pod(&self, uid: &PodUid) -> Result<(), VolumeError>;
}

#[async_trait]
impl Volumes for VolumeManager {
    async fn mount_pod(&self, pod: &Pod) -> Result<Vec<MountFailure>, MountFailures> {
        VolumeManager::mount_pod(self, pod).await
    }
    async fn unmount_pod(&self, uid: &PodUid) -> Result<(), VolumeError> {
        VolumeManager::unmount_pod(self, uid).await
    }
}

/// Downward API values of the pod, as the environment computes them.
#[derive(Debug, Clone, Default)]
pub struct PodDownward(pub Arc<NodeFacts>);

impl DownwardValues for PodDownward {
    fn field(&self, pod: &Pod, path: &str) -> Result<String, String> {
        let ips: Vec<String> =
            pod.status.iter().flat_map(|s| s.pod_ips.iter().flatten()).map(|p| p.ip.clone()).collect();
        field_value(pod, path, &ips, &self.0.host_ips)
    }

    fn resource(&self, pod: &Pod, container: &str, resource: &str, divisor: Option<&str>) -> Result<String, String> {
        let spec = pod.spec.as_ref().ok_or("pod has no spec")?;
        let c = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == container)
            .ok_or_else(|| format!("container {container} not found"))?;
        resource_value(pod, c, resource, divisor, &self.0)
    }
}
