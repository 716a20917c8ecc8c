//! What the server reads of the kubelet (upstream's `server.HostInterface`), split by concern. The kubelet core
//! implements these traits; handler tests use small fakes.

use std::path::PathBuf;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use thiserror::Error;

/// Why the kubelet could not serve a request; mapped to HTTP as upstream's `streaming.WriteError`.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum HostError {
    /// 404 (gRPC NotFound).
    #[error("{0}")]
    NotFound(String),
    /// 429 with `Retry-After` (gRPC ResourceExhausted).
    #[error("{0}")]
    Exhausted(String),
    /// 500.
    #[error("{0}")]
    Other(String),
}

impl HostError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            HostError::NotFound(_) => 404,
            HostError::Exhausted(_) => 429,
            HostError::Other(_) => 500,
        }
    }
}

/// A health check of `/healthz`.
pub type HealthResult = (&'static str, Result<(), String>);

/// The pods, as the kubelet and the runtime see them.
#[async_trait]
pub trait PodsView: Send + Sync + 'static {
    /// Health checks after `ping` and `log`, in order (`syncloop`, `pleg`).
    fn health_checks(&self) -> Vec<HealthResult>;
    /// The pods bound to this node with their latest status (`GetPods`).
    fn pods(&self) -> Vec<Pod>;
    /// The pod `namespace/name`, if the kubelet has it (`GetPodByName`).
    fn pod(&self, namespace: &str, name: &str) -> Option<Pod>;
    /// The pods the runtime reports: name, namespace, UID and containers (name, image) only (`GetRunningPods`).
    async fn running_pods(&self) -> Result<Vec<Pod>, HostError>;
    /// Where a pod of [`pods`](Self::pods) stands and why (`/debug/explain`), as JSON; none where unknown.
    fn explain(&self, pod: &Pod) -> serde_json::Value {
        let _ = pod;
        serde_json::Value::Null
    }
}

/// Which streams an exec or attach wants (`remotecommand.Options`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOpts {
    /// `input=1`.
    pub stdin: bool,
    /// `output=1`.
    pub stdout: bool,
    /// `error=1`.
    pub stderr: bool,
    /// `tty=1`.
    pub tty: bool,
}

/// Access to containers through the runtime: streaming URLs, synchronous runs and log files.
#[async_trait]
pub trait ContainerAccess: Send + Sync + 'static {
    /// The runtime's streaming URL for an exec (`GetExec`).
    async fn exec(&self, pod: &Pod, container: &str, cmd: Vec<String>, opts: StreamOpts) -> Result<String, HostError>;
    /// The runtime's streaming URL for an attach (`GetAttach`).
    async fn attach(&self, pod: &Pod, container: &str, opts: StreamOpts) -> Result<String, HostError>;
    /// The runtime's streaming URL for a port-forward (`GetPortForward`).
    async fn port_forward(&self, pod: &Pod, ports: Vec<i32>) -> Result<String, HostError>;
    /// Runs a command and returns its combined output (`RunInContainer`).
    async fn run(&self, pod: &Pod, container: &str, cmd: Vec<String>) -> Result<Vec<u8>, HostError>;
    /// The CRI log file of a container (its `log_path` in ContainerStatus).
    async fn log_file(&self, container_id: &str) -> Result<PathBuf, HostError>;
    /// Whether the container still runs (a followed log ends when it does not).
    async fn is_running(&self, container_id: &str) -> bool;
    /// Checkpoints container `container` of `pod` (`CheckpointContainer`) with the timeout asked for, if any; the
    /// archive's path.
    async fn checkpoint(&self, pod: &Pod, container: &str, timeout: Option<i64>) -> Result<String, HostError> {
        let _ = (pod, container, timeout);
        Err(HostError::Other("checkpointing is not supported".into()))
    }
}
