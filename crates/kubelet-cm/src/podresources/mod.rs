//! The pod resources API (`pkg/kubelet/apis/podresources`, `pkg/kubelet/server/server.go`
//! `ListenAndServePodResources`): `v1.PodResourcesLister` (`List`, `GetAllocatableResources`, `Get`) and
//! `v1alpha1.PodResourcesLister` (`List`) on `<root-dir>/pod-resources/kubelet.sock`, which monitoring agents (GPU
//! exporters, topology-aware schedulers) read to learn which devices, CPUs and memory each container was given.
//!
//! Contract:
//! - The binary spawns [`serve`] with the providers: the pods ([`PodsProvider`]) and the device manager
//!   ([`DevicesProvider`]). It makes the folder, replaces an old socket (bound under a temporary name and renamed, as
//!   upstream's `CreateListener`) and serves until cancelled, removing the socket then.
//! - One token bucket (100 calls a second, burst 10, upstream's `DefaultQPS`/`DefaultBurstTokens`) limits every
//!   method of both services: a call beyond it is refused `ResourceExhausted` "rejected by rate limit" before it
//!   runs, and counted nowhere.
//! - Answers are upstream's: `List` gives the active pods (their sidecars, then their containers, in spec order;
//!   ephemeral and other init containers are left out) after freeing the devices of pods gone; `Get` gives any
//!   pod the kubelet has (not found: upstream's text, code Unknown); `GetAllocatableResources` gives every healthy
//!   device. rkubelet has no CPU or memory manager yet (`none` policies): CPU IDs and memory are empty, as
//!   upstream's answers under those policies; no DRA claim is prepared yet, so `dynamic_resources` is empty.
//! - Go clients send their socket path as `:authority`: each connection goes through [`crate::uds_authority`].

pub mod server;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kubelet_proto::podresources::v1 as pb;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// The folder under the root directory (`DefaultKubeletPodResourcesDirName`).
pub const POD_RESOURCES_DIR: &str = "pod-resources";
/// The socket's name (`podresources.Socket` + `.sock`).
pub const SOCKET: &str = "kubelet.sock";
/// Calls a second (`DefaultQPS`).
pub const QPS: f64 = 100.0;
/// The bucket's size (`DefaultBurstTokens`).
pub const BURST: f64 = 10.0;

/// The pods, as the kubelet has them.
pub trait PodsProvider: Send + Sync + 'static {
    /// The pods admitted and not terminated (`GetActivePods`).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Every pod the kubelet has (`GetPods`).
    fn pods(&self) -> Vec<Arc<Pod>>;
    /// The pod `namespace/name`, whatever its state (`GetPodByName`).
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;
    /// Whether every pod source has been seen since the start (before, a pod not seen yet keeps its devices).
    fn sources_ready(&self) -> bool;
}

/// The devices of the device manager.
pub trait DevicesProvider: Send + Sync + 'static {
    /// Frees the devices of pods not in `active` (`UpdateAllocatedDevices`).
    fn update_allocated_devices(&self, active: &BTreeSet<String>);
    /// The devices of a container (`GetDevices`): one entry per device and NUMA node.
    fn devices(&self, pod_uid: &str, container: &str) -> Vec<pb::ContainerDevices>;
    /// Every healthy device (`GetAllocatableDevices`).
    fn allocatable_devices(&self) -> Vec<pb::ContainerDevices>;
    /// The prepared ResourceClaims of a container (`GetDynamicResources`), none without a DRA manager.
    fn dynamic_resources(&self, _pod: &Pod, _container: &str) -> Vec<pb::DynamicResource> {
        vec![]
    }
}

/// Why the API cannot be served.
#[derive(Debug, thiserror::Error)]
#[error("pod resources socket {path}: {source}; monitoring agents cannot read the pods' resources")]
pub struct ServeError {
    /// The socket.
    pub path: String,
    /// Why.
    pub source: std::io::Error,
}

/// Serves the API on `<dir>/kubelet.sock` until `cancel` fires.
pub async fn serve(
    dir: &Path,
    pods: Arc<dyn PodsProvider>,
    devices: Arc<dyn DevicesProvider>,
    cancel: CancellationToken,
) -> Result<(), ServeError> {
    let socket = dir.join(SOCKET);
    let err = |source| ServeError { path: socket.display().to_string(), source };
    let listener = listen(dir, &socket).map_err(err)?;
    info!(endpoint = %format!("unix://{}", socket.display()), "Starting to serve the podresources API");
    info!(service = "podresources", qps = QPS, burstTokens = BURST, "Setting rate limiting for endpoint");
    let lister = server::Lister::new(pods, devices);
    let incoming =
        tokio_stream::wrappers::UnixListenerStream::new(listener).map(|c| c.map(crate::uds_authority::relay));
    let served = tonic::transport::Server::builder()
        .add_service(pb::pod_resources_lister_server::PodResourcesListerServer::new(lister.clone()))
        .add_service(kubelet_proto::podresources::v1alpha1::pod_resources_lister_server::PodResourcesListerServer::new(
            lister,
        ))
        .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
        .await;
    let _ = std::fs::remove_file(&socket);
    served.map_err(|e| err(std::io::Error::other(e)))
}

/// Binds `socket` as upstream's `CreateListener`: the folder made (0750), the socket bound under a temporary name in
/// it and renamed into place, so a client never finds a half-made socket.
fn listen(dir: &Path, socket: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir)?;
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let tmp: PathBuf = dir.join(format!(".{SOCKET}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio::net::UnixListener::bind(&tmp)?;
    std::fs::rename(&tmp, socket)?;
    Ok(listener)
}
