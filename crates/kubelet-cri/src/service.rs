//! The CRI service traits (`k8s.io/cri-api/pkg/apis/services.go`), with prost types as arguments.

use async_trait::async_trait;

use crate::CriResult;
use crate::api;
use crate::brief::{BriefContainer, BriefSandbox};

/// The container events a runtime streams (`GetContainerEvents`): one item per event, an error item when the
/// stream fails; the stream ends (or fails) when the runtime closes it.
pub type ContainerEventStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = CriResult<api::ContainerEventResponse>> + Send>>;

/// Pod sandbox and container lifecycle (`RuntimeService`).
#[async_trait]
pub trait RuntimeService: Send + Sync + 'static {
    /// Runtime name and versions.
    async fn version(&self) -> CriResult<api::VersionResponse>;
    /// Runtime conditions (RuntimeReady, NetworkReady), the runtime handlers with their features and the runtime's
    /// features (`Status` without verbose, as upstream's `updateRuntimeUp`); `status` is always set.
    async fn status(&self) -> CriResult<api::StatusResponse>;
    /// The runtime's configuration for the kubelet (`RuntimeConfig`: the cgroup driver). Runtimes before the call
    /// existed (containerd 1.6) answer Unimplemented.
    async fn runtime_config(&self) -> CriResult<api::RuntimeConfigResponse> {
        Err(crate::CriError::Unimplemented { op: "RuntimeConfig" })
    }
    /// The image the runtime runs sandboxes from, from its verbose status (containerd's `config.sandboxImage`);
    /// None when the runtime does not tell.
    async fn sandbox_image(&self) -> CriResult<Option<String>> {
        Ok(None)
    }
    /// Creates and starts a sandbox; returns its ID.
    async fn run_pod_sandbox(&self, config: api::PodSandboxConfig, runtime_handler: &str) -> CriResult<String>;
    /// Stops a sandbox (its containers are stopped with it); idempotent.
    async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()>;
    /// Removes a stopped sandbox and its containers; idempotent.
    async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()>;
    /// Status of a sandbox.
    async fn pod_sandbox_status(&self, id: &str) -> CriResult<api::PodSandboxStatus>;
    /// Sandboxes matching the filter.
    async fn list_pod_sandbox(&self, filter: Option<api::PodSandboxFilter>) -> CriResult<Vec<api::PodSandbox>>;
    /// Creates a container in a sandbox; returns its ID.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> CriResult<String>;
    /// Starts a created container.
    async fn start_container(&self, id: &str) -> CriResult<()>;
    /// Stops a container: stop signal, then SIGKILL after `timeout` seconds; idempotent.
    async fn stop_container(&self, id: &str, timeout: i64) -> CriResult<()>;
    /// Removes a container; idempotent.
    async fn remove_container(&self, id: &str) -> CriResult<()>;
    /// Asks the runtime to reopen the container's log file at its path (`ReopenContainerLog`, after a rotation).
    async fn reopen_container_log(&self, id: &str) -> CriResult<()> {
        let _ = id;
        Err(crate::CriError::Unimplemented { op: "ReopenContainerLog" })
    }
    /// Changes a running container's Linux resources (`UpdateContainerResources`; the CPU manager sends only
    /// `cpuset_cpus`).
    async fn update_container_resources(&self, id: &str, resources: api::LinuxContainerResources) -> CriResult<()> {
        let _ = (id, resources);
        Err(crate::CriError::Unimplemented { op: "UpdateContainerResources" })
    }
    /// Checkpoints a running container to the archive `location` (`CheckpointContainer`); `timeout` in seconds, as the
    /// kubelet passes it (raised to the request timeout when below it). Runtimes without it answer Unimplemented.
    async fn checkpoint_container(&self, id: &str, location: &str, timeout: i64) -> CriResult<()> {
        let _ = (id, location, timeout);
        Err(crate::CriError::Unimplemented { op: "CheckpointContainer" })
    }
    /// The runtime's stream of container and sandbox lifecycle events (`GetContainerEvents`), open until the
    /// runtime ends it or the stream is dropped. Runtimes without it (containerd 1.6) answer Unimplemented.
    async fn container_events(&self) -> CriResult<ContainerEventStream> {
        Err(crate::CriError::Unimplemented { op: "GetContainerEvents" })
    }
    /// Containers matching the filter.
    async fn list_containers(&self, filter: Option<api::ContainerFilter>) -> CriResult<Vec<api::Container>>;
    /// Status of a container.
    async fn container_status(&self, id: &str) -> CriResult<api::ContainerStatus>;
    /// Runs `cmd` in a running container and waits for it (`ExecSync`): probes and lifecycle hooks. `timeout`
    /// zero means no timeout; a command still running at the timeout fails with [`crate::CriError::DeadlineExceeded`].
    async fn exec_sync(&self, id: &str, cmd: Vec<String>, timeout: std::time::Duration) -> CriResult<ExecOutput> {
        let _ = (id, cmd, timeout);
        Err(crate::CriError::Unimplemented { op: "ExecSync" })
    }
    /// The streaming URL of an interactive command (`Exec`); the runtime's streaming server serves it once.
    async fn exec(&self, req: api::ExecRequest) -> CriResult<String> {
        let _ = req;
        Err(crate::CriError::Unimplemented { op: "Exec" })
    }
    /// The streaming URL to attach to a running container (`Attach`).
    async fn attach(&self, req: api::AttachRequest) -> CriResult<String> {
        let _ = req;
        Err(crate::CriError::Unimplemented { op: "Attach" })
    }
    /// The streaming URL to forward ports of a sandbox (`PortForward`); `ports` may be empty (SPDY clients name
    /// them per stream).
    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> CriResult<String> {
        let _ = (sandbox_id, ports);
        Err(crate::CriError::Unimplemented { op: "PortForward" })
    }
    /// Resource usage of the containers matching the filter (`ListContainerStats`).
    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> CriResult<Vec<api::ContainerStats>> {
        let _ = filter;
        Err(crate::CriError::Unimplemented { op: "ListContainerStats" })
    }
    /// Resource usage of the sandboxes matching the filter, with their containers (`ListPodSandboxStats`).
    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> CriResult<Vec<api::PodSandboxStats>> {
        let _ = filter;
        Err(crate::CriError::Unimplemented { op: "ListPodSandboxStats" })
    }
    /// Every sandbox, brief (the PLEG relist). The default converts the full list.
    async fn list_pod_sandbox_brief(&self) -> CriResult<Vec<BriefSandbox>> {
        Ok(self.list_pod_sandbox(None).await?.into_iter().map(BriefSandbox::from).collect())
    }
    /// Every container, brief (the PLEG relist). The default converts the full list.
    async fn list_containers_brief(&self) -> CriResult<Vec<BriefContainer>> {
        Ok(self.list_containers(None).await?.into_iter().map(BriefContainer::from).collect())
    }
}

/// What a command run by [`RuntimeService::exec_sync`] printed and how it exited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit code.
    pub exit_code: i32,
}

/// Image management (`ImageManagerService`).
#[async_trait]
pub trait ImageService: Send + Sync + 'static {
    /// Images matching the filter.
    async fn list_images(&self, filter: Option<api::ImageFilter>) -> CriResult<Vec<api::Image>>;
    /// Usage of the filesystems holding images and container layers (`ImageFsInfo`).
    async fn image_fs_info(&self) -> CriResult<api::ImageFsInfoResponse> {
        Err(crate::CriError::Unimplemented { op: "ImageFsInfo" })
    }
    /// The image, or `None` if it is not present.
    async fn image_status(&self, image: api::ImageSpec) -> CriResult<Option<api::Image>>;
    /// Pulls an image; returns its reference (image ID or digest).
    async fn pull_image(
        &self,
        image: api::ImageSpec,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> CriResult<String>;
    /// Removes an image; idempotent.
    async fn remove_image(&self, image: api::ImageSpec) -> CriResult<()>;
}
