//! The API objects pods refer to (`configMapManager`, `secretManager`, `serviceLister`): ConfigMaps and Secrets for
//! environment variables and volumes, Services for service links. The binary implements it over the apiserver;
//! a standalone node has none.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};

/// ConfigMaps, Secrets and Services, as pods need them (`configMapManager`, `secretManager`,
/// `serviceLister`). `Ok(None)` is "not found".
#[async_trait]
pub trait ObjectSource: Send + Sync + 'static {
    /// A ConfigMap.
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String>;
    /// A Secret.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String>;
    /// The Services of a namespace.
    async fn services(&self, namespace: &str) -> Result<Vec<Service>, String>;
    /// Whether the Services have been read at least once (`serviceHasSynced`); until then only static pods get an
    /// environment. A node without an apiserver has nothing to wait for (upstream's `func() bool { return true }`).
    fn services_synced(&self) -> bool {
        true
    }
    /// The CRI runtime handler of the RuntimeClass `name` (`runtimeclass.Manager.LookupRuntimeHandler`); an error
    /// text when it cannot be resolved (upstream's `runtimeclass.node.k8s.io "x" not found`). A node without an
    /// apiserver cannot resolve any: rather than run the pod on the default handler as if it had asked for none, it
    /// fails the sandbox with this error.
    fn runtime_handler(&self, name: &str) -> Result<String, String> {
        Err(format!(
            "runtimeclass.node.k8s.io {name:?} cannot be resolved: this node has no apiserver (no --kubeconfig); \
             remove runtimeClassName from the pod or join the node to a cluster"
        ))
    }
}

/// A node without an apiserver: no services, and references to ConfigMaps or Secrets cannot be resolved.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObjects;

#[async_trait]
impl ObjectSource for NoObjects {
    async fn config_map(&self, namespace: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        Err(format!("cannot get configmap {namespace}/{name}: this node has no apiserver (no --kubeconfig)"))
    }
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, String> {
        Err(format!("cannot get secret {namespace}/{name}: this node has no apiserver (no --kubeconfig)"))
    }
    async fn services(&self, _namespace: &str) -> Result<Vec<Service>, String> {
        Ok(vec![])
    }
}

/// A volume of a pod as its containers mount it: the host path and whether it is read-only for every mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedVolume {
    /// The path on the host.
    pub host_path: std::path::PathBuf,
    /// Mounted read-only whatever the volumeMount says (configMap, secret, downwardAPI, projected).
    pub read_only: bool,
    /// A raw block volume: `host_path` is the pod's link to its device, for the containers' `volumeDevices`.
    pub block: bool,
}

/// The mounted volumes of pods (`volumeManager.GetMountedVolumesForPod`), as the runtime manager reads them when
/// it creates containers.
pub trait PodVolumes: Send + Sync + 'static {
    /// Volume name -> mounted volume, for the pod.
    fn volumes(&self, uid: &crate::PodUid) -> std::collections::HashMap<String, MountedVolume>;
}

/// No volume manager: no volumes.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoVolumes;

impl PodVolumes for NoVolumes {
    fn volumes(&self, _uid: &crate::PodUid) -> std::collections::HashMap<String, MountedVolume> {
        Default::default()
    }
}
