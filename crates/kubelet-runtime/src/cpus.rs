//! What the CPU and memory managers give a container at its creation (`internal_container_lifecycle_linux.go`
//! PreCreateContainer): its cpuset (`LinuxContainerResources.cpuset_cpus`), its exclusive CPUs or the shared pool
//! under the static policy, nothing (the runtime's default) under the none policy; and its memory's NUMA nodes
//! (`cpuset_mems`) under the memory manager's static policy. With `DisableCPUQuotaWithExclusiveCPUs` (beta, on) a
//! container holding exclusive CPUs gets no CFS quota, nor do its pod's cgroup and sandbox
//! (`ContainerHasExclusiveCPUs`, `PodHasExclusiveCPUs`; [`QuotaLift`]).

use std::sync::Arc;

/// The CPU manager as the runtime manager sees it.
pub trait ContainerCpus: Send + Sync {
    /// The cpuset of container `container` of pod `pod_uid`, if the manager sets one.
    fn cpuset(&self, pod_uid: &str, container: &str) -> Option<String>;

    /// Whether the container holds exclusive CPUs (`ContainerHasExclusiveCPUs`).
    fn exclusive(&self, _pod_uid: &str, _container: &str) -> bool {
        false
    }
}

/// `PodHasExclusiveCPUs`: whether an init or app container of `pod` holds exclusive CPUs.
pub fn pod_has_exclusive(cpus: &dyn ContainerCpus, pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let Some(spec) = pod.spec.as_ref() else { return false };
    spec.init_containers.iter().flatten().chain(&spec.containers).any(|c| cpus.exclusive(uid, &c.name))
}

/// Whose CFS quota is lifted (`DisableCPUQuotaWithExclusiveCPUs`): nobody's when the gate is off.
#[derive(Clone, Default)]
pub struct QuotaLift(Option<Arc<dyn ContainerCpus>>);

impl QuotaLift {
    /// Lifted for the containers (and their pods) that hold exclusive CPUs in `cpus`.
    pub fn new(cpus: Arc<dyn ContainerCpus>) -> Self {
        QuotaLift(Some(cpus))
    }

    /// Whether container `name` of pod `pod_uid` runs without a CFS quota.
    pub fn container(&self, pod_uid: &str, name: &str) -> bool {
        self.0.as_ref().is_some_and(|c| c.exclusive(pod_uid, name))
    }

    /// Whether the pod's cgroup and sandbox run without a CFS quota.
    pub fn pod(&self, pod: &k8s_openapi::api::core::v1::Pod) -> bool {
        self.0.as_ref().is_some_and(|c| pod_has_exclusive(c.as_ref(), pod))
    }
}

impl std::fmt::Debug for QuotaLift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "QuotaLift(exclusive CPUs)" } else { "QuotaLift(none)" })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Pinned;

    impl ContainerCpus for Pinned {
        fn cpuset(&self, _: &str, _: &str) -> Option<String> {
            None
        }

        fn exclusive(&self, pod_uid: &str, container: &str) -> bool {
            (pod_uid, container) == ("u1", "init")
        }
    }

    #[test]
    fn the_quota_is_lifted_for_containers_with_exclusive_cpus_and_their_pods_only_with_the_gate() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u1"},
            "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "app"}]},
        }))
        .unwrap();
        let lift = QuotaLift::new(Arc::new(Pinned));
        assert!(lift.container("u1", "init") && !lift.container("u1", "app"));
        assert!(lift.pod(&pod), "an init container's exclusive CPUs count for the pod, as PodHasExclusiveCPUs");
        let mut other = pod.clone();
        other.metadata.uid = Some("u2".into());
        assert!(!lift.pod(&other));
        assert!(!QuotaLift::default().pod(&pod) && !QuotaLift::default().container("u1", "init"), "gate off");
    }
}
