//! In-place pod resize in the runtime manager (`kuberuntime_manager.go` computePodResizeAction, doPodResizeAction,
//! validateMemoryResizeAction, updatePodContainerResources, IsPodResizeInProgress; `kuberuntime_container.go`
//! updateContainerResources; `kuberuntime_container_linux.go` toKubeContainerResources).
//!
//! The pod workers hand the runtime manager the *allocated* pod (its spec carries the resources the kubelet admitted);
//! the manager compares each running resizable container (app containers and native sidecars) with what the runtime
//! was last told (`actuated_pods_state`, [`kubelet_cm::allocation_state`]) and brings it there: containers whose
//! `resizePolicy` asks for it are restarted, the others are updated with `UpdateContainerResources`, memory before
//! CPU, decreases before increases, the pod cgroup grown before its containers and shrunk after them. A memory limit
//! below what the pod or a container uses is refused before anything changes (the kernel would OOM-kill it). An
//! error stops the resize where it is; the next sync retries the rest. Static pods are never resized.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_types::qos::{int_value, milli_value};
use kubelet_types::quantity::parse_quantity;
use kubelet_types::{ContainerResources, ContainerState, PodStatus};

use crate::actions::{KillInfo, KillReason, PodActions, is_restartable};

/// `cm.MinShares`.
pub const MIN_SHARES: i64 = 2;
/// `cm.MinMilliCPULimit`.
pub const MIN_MILLI_CPU_LIMIT: i64 = 10;

/// A pod cgroup's CPU and memory settings (`cm.ResourceConfig`): None leaves one as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodCgroupConfig {
    /// `cpu.shares` (v2: converted from `cpu.weight`).
    pub cpu_shares: Option<i64>,
    /// CFS quota in microseconds (-1: unlimited).
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds.
    pub cpu_period: Option<i64>,
    /// Memory limit in bytes (`i64::MAX`: unlimited).
    pub memory: Option<i64>,
}

/// What a resize needs of the pod cgroups (`PodContainerManager` GetPodCgroupConfig, SetPodCgroupConfig, and the
/// pod's memory usage of `PodCPUAndMemoryStats`); owned by the runtime manager, implemented by the kubelet's cgroup
/// managers.
pub trait PodCgroupResizer: Send + Sync {
    /// The pod cgroup's current settings.
    fn pod_config(&self, pod: &Pod) -> std::io::Result<PodCgroupConfig>;
    /// Writes the settings that are `Some`.
    fn set_pod_config(&self, pod: &Pod, config: &PodCgroupConfig) -> std::io::Result<()>;
    /// The pod cgroup's memory usage in bytes (None: the pod has no cgroup of its own).
    fn pod_memory_usage(&self, pod: &Pod) -> std::io::Result<Option<u64>>;
}

/// Pods without cgroups of their own (`cgroupsPerQOS: false`, tests): the runtime's containers alone are resized.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPodCgroups;

impl PodCgroupResizer for NoPodCgroups {
    fn pod_config(&self, _: &Pod) -> std::io::Result<PodCgroupConfig> {
        Ok(PodCgroupConfig::default())
    }
    fn set_pod_config(&self, _: &Pod, _: &PodCgroupConfig) -> std::io::Result<()> {
        Ok(())
    }
    fn pod_memory_usage(&self, _: &Pod) -> std::io::Result<Option<u64>> {
        Ok(None)
    }
}

/// A container's CPU and memory as one sync compares them (`containerResources`): millicores and bytes, 0 unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    /// Memory limit.
    pub memory_limit: i64,
    /// Memory request.
    pub memory_request: i64,
    /// CPU limit.
    pub cpu_limit: i64,
    /// CPU request.
    pub cpu_request: i64,
}

fn amount(list: Option<&BTreeMap<String, Quantity>>, name: &str) -> f64 {
    list.and_then(|l| l.get(name)).and_then(|q| parse_quantity(&q.0)).unwrap_or(0.0)
}

impl Amounts {
    /// `containerResourcesFromRequirements` (requests as written, not defaulted from limits).
    pub fn of(r: Option<&ResourceRequirements>) -> Self {
        let (lim, req) = (r.and_then(|r| r.limits.as_ref()), r.and_then(|r| r.requests.as_ref()));
        Self {
            memory_limit: int_value(amount(lim, "memory")),
            memory_request: int_value(amount(req, "memory")),
            cpu_limit: milli_value(amount(lim, "cpu")),
            cpu_request: milli_value(amount(req, "cpu")),
        }
    }

    /// The requirements a container is updated with (upstream's copy in updatePodContainerResources).
    fn requirements(&self) -> ResourceRequirements {
        let cpu = |m: i64| Quantity(kubelet_types::quantity::milli_string(m));
        let mem = |b: i64| Quantity(kubelet_types::quantity::binary_si(b));
        let pair = |c: i64, m: i64| Some([("cpu".to_string(), cpu(c)), ("memory".to_string(), mem(m))].into());
        ResourceRequirements {
            limits: pair(self.cpu_limit, self.memory_limit),
            requests: pair(self.cpu_request, self.memory_request),
            claims: None,
        }
    }
}

/// A resource that is resized in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Resource {
    /// `memory`.
    Memory,
    /// `cpu`.
    Cpu,
}

impl Resource {
    /// The resource's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::Cpu => "cpu",
        }
    }
}

/// A running container to update in place (`containerToUpdateInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerToUpdate {
    /// Its name.
    pub name: String,
    /// Its runtime ID.
    pub id: String,
    /// What it is to get.
    pub desired: Amounts,
}

/// Whether the pod may be resized in place (`IsInPlacePodVerticalScalingAllowed`), with upstream's message and
/// metric label when not.
pub fn resize_allowed(pod: &Pod) -> Result<(), (&'static str, &'static str)> {
    if kubelet_types::pod_update::is_static_pod(pod) {
        return Err(("In-place resize of static-pods is not supported", "static_pod"));
    }
    Ok(())
}

/// The containers a resize applies to (`IsResizableContainer`): app containers and native sidecars.
pub fn resizable_containers(pod: &Pod) -> impl Iterator<Item = (usize, bool, &Container)> {
    let spec = pod.spec.as_ref();
    let inits = spec.into_iter().flat_map(|s| s.init_containers.iter().flatten()).enumerate();
    let sidecars = inits.filter(|(_, c)| is_restartable(c)).map(|(i, c)| (i, true, c));
    sidecars.chain(spec.into_iter().flat_map(|s| s.containers.iter()).enumerate().map(|(i, c)| (i, false, c)))
}

/// Whether the container's `resizePolicy` restarts it for `resource`.
fn restarts_for(c: &Container, resource: Resource) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource.as_str() && p.restart_policy == "RestartContainer")
}

/// Adds the resize of the pod's running containers to `a` (`computePodResizeAction` for each container a sync keeps
/// running). `actuated` gives what the runtime was last told of a container.
pub fn compute_resize_actions(
    pod: &Pod,
    status: &PodStatus,
    actuated: &dyn Fn(&str) -> Option<ResourceRequirements>,
    a: &mut PodActions,
) {
    if a.kill_pod || a.create_sandbox || resize_allowed(pod).is_err() {
        return;
    }
    for (idx, sidecar, c) in resizable_containers(pod) {
        let Some(s) = status.find_container(&c.name) else { continue };
        if s.state != ContainerState::Running || a.containers_to_kill.contains_key(&s.id) {
            continue;
        }
        let actuated = actuated(&c.name);
        if actuated.is_none() {
            tracing::error!(pod = %kubelet_types::pod_update::pod_ref(pod), containerName = %c.name, "missing actuated resource record");
        }
        let desired = Amounts::of(c.resources.as_ref());
        let current = Amounts::of(actuated.as_ref());
        if desired == current {
            continue;
        }
        let mem_changed =
            desired.memory_limit != current.memory_limit || desired.memory_request != current.memory_request;
        let cpu_changed = desired.cpu_limit != current.cpu_limit || desired.cpu_request != current.cpu_request;
        if (mem_changed && restarts_for(c, Resource::Memory)) || (cpu_changed && restarts_for(c, Resource::Cpu)) {
            let message = format!("Container {} resize requires restart", c.name);
            a.containers_to_kill
                .insert(s.id.clone(), KillInfo { name: c.name.clone(), message, reason: KillReason::Unknown });
            if sidecar {
                a.init_containers_to_start.push(idx);
                a.init_containers_to_start.sort_unstable();
                a.init_containers_to_start.dedup();
            } else {
                a.containers_to_start.push(idx);
            }
            a.update_pod_resources = true;
            continue;
        }
        let update = ContainerToUpdate { name: c.name.clone(), id: s.id.clone(), desired };
        // Decreases first, then increases; a limit's change orders by the limit, else by the request.
        let mark = |list: &mut Vec<ContainerToUpdate>, want: i64, have: i64| {
            if want < have {
                list.insert(0, update.clone());
            } else if want > have {
                list.push(update.clone());
            }
        };
        if desired.memory_limit != current.memory_limit {
            mark(&mut a.memory_updates, desired.memory_limit, current.memory_limit);
        } else if desired.memory_request != current.memory_request {
            mark(&mut a.memory_updates, desired.memory_request, current.memory_request);
        }
        if desired.cpu_limit != current.cpu_limit {
            mark(&mut a.cpu_updates, desired.cpu_limit, current.cpu_limit);
        } else if desired.cpu_request != current.cpu_request {
            mark(&mut a.cpu_updates, desired.cpu_request, current.cpu_request);
        }
        a.current.insert(c.name.clone(), current);
    }
}

/// Whether a running resizable container has not been given its allocated resources yet (`IsPodResizeInProgress`):
/// `allocated` is the allocated pod.
pub fn is_pod_resize_in_progress(
    allocated: &Pod,
    status: &PodStatus,
    actuated: &dyn Fn(&str) -> Option<ResourceRequirements>,
) -> bool {
    resizable_containers(allocated).any(|(_, _, c)| {
        let running = status.find_container(&c.name).is_some_and(|s| s.state == ContainerState::Running);
        running && !same_cpu_and_memory(c.resources.as_ref(), actuated(&c.name).as_ref())
    })
}

/// Whether two requirements give the same CPU and memory requests and limits (an unset one is zero).
pub fn same_cpu_and_memory(a: Option<&ResourceRequirements>, b: Option<&ResourceRequirements>) -> bool {
    let get = |r: Option<&ResourceRequirements>, limits: bool, name: &str| {
        let list = r.and_then(|r| if limits { r.limits.as_ref() } else { r.requests.as_ref() });
        list.and_then(|l| l.get(name)).and_then(|q| kubelet_types::quantity::ParsedQuantity::parse(&q.0).ok())
    };
    [(true, "cpu"), (false, "cpu"), (true, "memory"), (false, "memory")].iter().all(|(limits, name)| {
        match (get(a, *limits, name), get(b, *limits, name)) {
            (Some(x), Some(y)) => x.cmp_value(&y).is_eq(),
            (Some(x), None) | (None, Some(x)) => x.is_zero(),
            (None, None) => true,
        }
    })
}

/// `sharesToMilliCPU`.
pub fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    (shares * 1000 + 1023) / 1024
}

/// `quotaToMilliCPU`.
pub fn quota_to_milli_cpu(quota: i64, period: i64) -> i64 {
    if quota == -1 || period <= 0 {
        return 0;
    }
    quota * 1000 / period
}

/// The resources a runtime reports in a container's status (`toKubeContainerResources`).
pub fn from_runtime(r: Option<&kubelet_cri::api::ContainerResources>) -> Option<ContainerResources> {
    let l = r?.linux.as_ref()?;
    let cpu_limit = (l.cpu_period > 0).then(|| quota_to_milli_cpu(l.cpu_quota, l.cpu_period)).filter(|m| *m > 0);
    let cpu_request = (l.cpu_shares > 0).then(|| shares_to_milli_cpu(l.cpu_shares)).filter(|m| *m > 0);
    let memory_limit = (l.memory_limit_in_bytes > 0).then_some(l.memory_limit_in_bytes);
    if cpu_limit.is_none() && cpu_request.is_none() && memory_limit.is_none() {
        return None;
    }
    Some(ContainerResources {
        cpu_request_milli: cpu_request,
        cpu_limit_milli: cpu_limit,
        memory_request: None,
        memory_limit,
    })
}

/// Fills what the runtime did not report from the actuated resources (toKubeContainerStatus).
pub fn fill_from_actuated(
    reported: Option<ContainerResources>,
    actuated: Option<&ResourceRequirements>,
) -> Option<ContainerResources> {
    let Some(act) = actuated else { return reported };
    let amounts = Amounts::of(Some(act));
    match reported {
        None => Some(ContainerResources {
            cpu_request_milli: Some(amounts.cpu_request),
            cpu_limit_milli: Some(amounts.cpu_limit),
            memory_request: Some(amounts.memory_request),
            memory_limit: Some(amounts.memory_limit),
        }),
        Some(mut r) => {
            if r.memory_request.is_none() && amounts.memory_request != 0 {
                r.memory_request = Some(amounts.memory_request);
            }
            Some(r)
        }
    }
}

/// A container with its CPU or memory replaced by `desired`'s and the rest from `current` (the copy
/// updatePodContainerResources sends).
pub fn container_for_update(c: &Container, resource: Resource, desired: Amounts, current: Amounts) -> Container {
    let mut amounts = current;
    match resource {
        Resource::Memory => {
            amounts.memory_limit = desired.memory_limit;
            amounts.memory_request = desired.memory_request;
        }
        Resource::Cpu => {
            amounts.cpu_limit = desired.cpu_limit;
            amounts.cpu_request = desired.cpu_request;
        }
    }
    let mut c = c.clone();
    c.resources = Some(amounts.requirements());
    c
}

/// Go's `utilerrors.NewAggregate(errs).Error()`.
pub fn aggregate(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;
