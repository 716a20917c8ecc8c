//! The runtime's view of pods and containers (`pkg/kubelet/container/runtime.go`): what the CRI reports,
//! reduced to what the kubelet decides on. Times are Unix nanoseconds, as CRI reports them.

use std::collections::HashMap;
use std::fmt;

/// A pod UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PodUid(pub String);

impl PodUid {
    /// The UID as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for PodUid {
    fn from(s: String) -> Self {
        PodUid(s)
    }
}

impl From<&str> for PodUid {
    fn from(s: &str) -> Self {
        PodUid(s.to_string())
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// State of a container, as upstream's `kubecontainer.State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerState {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited.
    Exited,
    /// Unknown (the runtime could not tell).
    Unknown,
}

/// State of a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxState {
    /// Ready: its network and namespaces are up.
    Ready,
    /// Not ready: stopped or failed.
    NotReady,
}

/// A container as listed by the runtime (cheap, from a brief ListContainers: what the PLEG relist needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// CRI container ID.
    pub id: String,
    /// Container name (from its labels).
    pub name: String,
    /// State.
    pub state: ContainerState,
    /// Creation time, Unix nanoseconds.
    pub created_at: i64,
}

/// A pod as listed by the runtime: its sandboxes and containers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimePod {
    /// Pod UID (from the labels).
    pub id: PodUid,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Containers of the pod, newest first.
    pub containers: Vec<RuntimeContainer>,
    /// Sandbox IDs with their states, newest first.
    pub sandboxes: Vec<(String, SandboxState)>,
}

/// Full status of one container (from ContainerStatus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    /// CRI container ID.
    pub id: String,
    /// Container name.
    pub name: String,
    /// State.
    pub state: ContainerState,
    /// Creation time, Unix nanoseconds.
    pub created_at: i64,
    /// Start time, Unix nanoseconds (0 if never started).
    pub started_at: i64,
    /// Finish time, Unix nanoseconds (0 if not finished).
    pub finished_at: i64,
    /// Exit code (meaningful once exited).
    pub exit_code: i32,
    /// Image as requested.
    pub image: String,
    /// Image ID the runtime resolved.
    pub image_ref: String,
    /// Spec hash from the annotation.
    pub hash: u64,
    /// Restart count from the annotation.
    pub restart_count: i32,
    /// Brief reason from the runtime (`Completed`, `Error`, `OOMKilled`).
    pub reason: String,
    /// Message from the runtime (or the termination message).
    pub message: String,
    /// Log path.
    pub log_path: String,
    /// The CPU and memory the runtime says the container has (None: it reports none).
    pub resources: Option<ContainerResources>,
}

/// A container's CPU and memory as the runtime reports them (`kubecontainer.ContainerResources`, from CRI's
/// `ContainerStatus.resources.linux` as upstream's `toKubeContainerResources` reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContainerResources {
    /// From the CPU shares, in millicores.
    pub cpu_request_milli: Option<i64>,
    /// From the CFS quota and period, in millicores.
    pub cpu_limit_milli: Option<i64>,
    /// Memory request in bytes (runtimes do not report it: upstream fills it from the actuated resources).
    pub memory_request: Option<i64>,
    /// Memory limit in bytes.
    pub memory_limit: Option<i64>,
}

/// Full status of one sandbox (from PodSandboxStatus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    /// CRI sandbox ID.
    pub id: String,
    /// State.
    pub state: SandboxState,
    /// Creation time, Unix nanoseconds.
    pub created_at: i64,
    /// Attempt from its metadata.
    pub attempt: u32,
    /// Pod IPs, primary first.
    pub ips: Vec<String>,
    /// Whether the sandbox uses the host network namespace.
    pub host_network: bool,
}

/// Everything the runtime knows of one pod (`kubecontainer.PodStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodStatus {
    /// Pod UID.
    pub id: PodUid,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod IPs of the newest sandbox.
    pub ips: Vec<String>,
    /// Every container of the pod, newest first.
    pub container_statuses: Vec<ContainerStatus>,
    /// Sandboxes, newest first.
    pub sandbox_statuses: Vec<SandboxStatus>,
}

impl PodStatus {
    /// The newest status of the named container.
    pub fn find_container(&self, name: &str) -> Option<&ContainerStatus> {
        self.container_statuses.iter().find(|c| c.name == name)
    }

    /// Running containers by name (newest per name).
    pub fn running_by_name(&self) -> HashMap<&str, &ContainerStatus> {
        let mut out = HashMap::new();
        for c in &self.container_statuses {
            if c.state == ContainerState::Running {
                out.entry(c.name.as_str()).or_insert(c);
            }
        }
        out
    }

    /// Whether anything of the pod still runs: a running container or a ready sandbox.
    pub fn is_running(&self) -> bool {
        self.container_statuses.iter().any(|c| c.state == ContainerState::Running)
            || self.sandbox_statuses.iter().any(|s| s.state == SandboxState::Ready)
    }
}
