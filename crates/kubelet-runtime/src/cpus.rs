//! What the CPU manager gives a container at its creation (`internal_container_lifecycle_linux.go`
//! PreCreateContainer): its cpuset (`LinuxContainerResources.cpuset_cpus`), its exclusive CPUs or the shared pool
//! under the static policy, nothing (the runtime's default) under the none policy.

/// The CPU manager as the runtime manager sees it.
pub trait ContainerCpus: Send + Sync {
    /// The cpuset of container `container` of pod `pod_uid`, if the manager sets one.
    fn cpuset(&self, pod_uid: &str, container: &str) -> Option<String>;
}

/// No CPU manager: the runtime's default.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCpus;

impl ContainerCpus for NoCpus {
    fn cpuset(&self, _: &str, _: &str) -> Option<String> {
        None
    }
}
