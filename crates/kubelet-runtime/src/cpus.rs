//! What the CPU and memory managers give a container at its creation (`internal_container_lifecycle_linux.go`
//! PreCreateContainer): its cpuset (`LinuxContainerResources.cpuset_cpus`), its exclusive CPUs or the shared pool
//! under the static policy, nothing (the runtime's default) under the none policy; and its memory's NUMA nodes
//! (`cpuset_mems`) under the memory manager's static policy.

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

/// The memory manager as the runtime manager sees it (`PreCreateContainer`'s `GetMemoryNUMANodes` and the container
/// manager's `AddContainer`).
pub trait ContainerMems: Send + Sync {
    /// Called when container `c` of `pod` is created: its NUMA nodes for `cpuset.mems` (`0,1`), if the manager
    /// pins it.
    fn container_created(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
        c: &k8s_openapi::api::core::v1::Container,
    ) -> Option<String>;
}

/// No memory manager.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMems;

impl ContainerMems for NoMems {
    fn container_created(
        &self,
        _: &k8s_openapi::api::core::v1::Pod,
        _: &k8s_openapi::api::core::v1::Container,
    ) -> Option<String> {
        None
    }
}
