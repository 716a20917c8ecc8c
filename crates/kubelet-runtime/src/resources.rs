//! The CRI resources of containers and sandboxes (`pkg/kubelet/kuberuntime/kuberuntime_container_linux.go`
//! generateLinuxContainerResources, calculateLinuxResources, GetHugepageLimitsFromResources;
//! `kuberuntime_sandbox_linux.go` calculateSandboxResources, convertOverheadToLinuxResources;
//! `pkg/kubelet/qos/policy.go` GetContainerOOMScoreAdjust; `opencontainers/cgroups` HugePageSizes).
//!
//! Contract: pure functions of the pod, read as the API defaults it ([`kubelet_types::resources`]). A container
//! without a cpu or memory limit of its own takes the pod-level one; every huge page size of the node gets a
//! limit (0 unless the container, or else the pod level, limits it); the sandbox carries the pod's requests and
//! limits without the overhead, and the overhead apart, as upstream sends them for runtimes that size a VM.

use std::path::Path;

use k8s_openapi::api::core::v1::Container;
use kubelet_cri::api;
use kubelet_types::Pod;
use kubelet_types::qos::{self, QosClass, int_value, milli_value};
use kubelet_types::resources::{self as res, PodResourcesOptions};

use crate::config_gen::{is_node_critical_pod, milli_cpu_to_quota, milli_cpu_to_shares};
use crate::manager::RuntimeManagerConfig;

/// Where the kernel lists its huge page sizes.
pub const HUGEPAGES_SYSFS: &str = "/sys/kernel/mm/hugepages";

/// The node's huge page sizes as cgroups name them (`HugePageSizes`: `hugepages-2048kB` → `2MB`), smallest
/// first; none when `dir` cannot be read.
pub fn node_hugepage_sizes(dir: &Path) -> Vec<String> {
    let mut sizes: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse::<u64>().ok().map(|kb| kb * 1024)
        })
        .collect();
    sizes.sort_unstable();
    sizes.into_iter().filter_map(|s| res::hugepage_unit_size(s).ok()).collect()
}

/// `calculateLinuxResources`: shares from the cpu request (from the limit when there is no request), the memory
/// limit when set, and with `cpuCFSQuota` the period and the quota of the cpu limit.
fn calculate(
    cfg: &RuntimeManagerConfig,
    cpu_request: Option<f64>,
    cpu_limit: f64,
    memory_limit: f64,
) -> api::LinuxContainerResources {
    let cpu_shares = milli_cpu_to_shares(milli_value(cpu_request.unwrap_or(cpu_limit)));
    let (cpu_period, cpu_quota) = if cfg.cpu_cfs_quota {
        let period = cfg.cpu_cfs_quota_period_us;
        (period, milli_cpu_to_quota(milli_value(cpu_limit), period))
    } else {
        (0, 0)
    };
    api::LinuxContainerResources {
        cpu_shares,
        cpu_quota,
        cpu_period,
        memory_limit_in_bytes: int_value(memory_limit),
        ..Default::default()
    }
}

/// A container's limit of `name`, the pod-level one when the container has none (`getCPULimit`, `getMemoryLimit`).
fn effective_limit(pod: &Pod, c: &Container, name: &str) -> f64 {
    let own = res::container_limits(c).get(name).copied().unwrap_or(0.0);
    if own == 0.0 && res::is_pod_level_resources_set(pod) {
        return res::pod_level_limits(pod).get(name).copied().unwrap_or(0.0);
    }
    own
}

/// The `LinuxContainerResources` of container `c` (`generateLinuxContainerResources`).
pub fn container_resources(cfg: &RuntimeManagerConfig, pod: &Pod, c: &Container) -> api::LinuxContainerResources {
    let cpu_request = res::container_requests(c).get("cpu").copied();
    let mut r = calculate(cfg, cpu_request, effective_limit(pod, c, "cpu"), effective_limit(pod, c, "memory"));
    r.oom_score_adj = oom_score_adj(cfg, pod, c);
    r.hugepage_limits = hugepage_limits(cfg, pod, c);
    cfg.swap.configure(&mut r, pod, c);
    r
}

/// `GetHugepageLimitsFromResources`: a limit for every huge page size of the node, 0 unless the pod level or the
/// container (which wins) limits it.
fn hugepage_limits(cfg: &RuntimeManagerConfig, pod: &Pod, c: &Container) -> Vec<api::HugepageLimit> {
    let mut wanted = std::collections::BTreeMap::new();
    let pod_level = if res::is_pod_level_resources_set(pod) { res::pod_level_limits(pod) } else { Default::default() };
    for (name, amount) in pod_level.iter().chain(res::container_limits(c).iter()) {
        let size = res::is_hugepage_resource(name).then(|| res::hugepage_size_from_resource_name(name)).flatten();
        if let Some(unit) = size.and_then(|s| res::hugepage_unit_size(s).ok()) {
            wanted.insert(unit, *amount as u64);
        }
    }
    cfg.hugepage_sizes
        .iter()
        .map(|size| api::HugepageLimit { page_size: size.clone(), limit: wanted.get(size).copied().unwrap_or(0) })
        .collect()
}

/// The OOM score adjustment of container `c` (`GetContainerOOMScoreAdjust`): -997 for node-critical and
/// Guaranteed pods, 1000 for BestEffort ones; Burstable ones scaled by the memory request (plus an equal share of
/// the pod-level request the containers leave unrequested), a sidecar no higher than the smallest app container.
pub fn oom_score_adj(cfg: &RuntimeManagerConfig, pod: &Pod, c: &Container) -> i64 {
    if is_node_critical_pod(pod) {
        return -997;
    }
    match qos::pod_qos(pod) {
        QosClass::Guaranteed => return -997,
        QosClass::BestEffort => return 1000,
        QosClass::Burstable => {}
    }
    let capacity = (cfg.memory_capacity as i64).max(1);
    let mem = |c: &Container| int_value(res::container_requests(c).get("memory").copied().unwrap_or(0.0));
    let remaining = if res::is_pod_level_requests_set(pod) { remaining_pod_memory_per_container(pod) } else { 0 };
    let score = |req: i64| 1000 - (1000 * (req + remaining)) / capacity;
    let mut adj = score(mem(c));
    let spec = pod.spec.as_ref();
    let sidecar = c.restart_policy.as_deref() == Some("Always")
        && spec.into_iter().flat_map(|s| s.init_containers.iter().flatten()).any(|i| i.name == c.name);
    if sidecar && let Some(min) = spec.and_then(|s| s.containers.iter().map(mem).min()) {
        adj = adj.min(score(min));
    }
    if adj < 3 {
        3
    } else if adj == 1000 {
        999
    } else {
        adj
    }
}

/// `remainingPodMemReqPerContainer`: the pod-level memory request the containers do not request, shared equally.
fn remaining_pod_memory_per_container(pod: &Pod) -> i64 {
    let pod_mem = int_value(res::pod_level_requests(pod).get("memory").copied().unwrap_or(0.0));
    let Some(spec) = pod.spec.as_ref().filter(|_| pod_mem != 0) else { return 0 };
    let n = (spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len)).max(1) as i64;
    let containers = int_value(res::aggregate_container_requests(pod).get("memory").copied().unwrap_or(0.0));
    (pod_mem - containers) / n
}

/// The sandbox's `resources` and `overhead` (`applySandboxResources`): the pod's requests and limits without the
/// overhead, and the overhead taken as requests equal to limits (empty without one).
pub fn sandbox_resources(
    cfg: &RuntimeManagerConfig,
    pod: &Pod,
) -> (api::LinuxContainerResources, api::LinuxContainerResources) {
    let opts = PodResourcesOptions { exclude_overhead: true, ..Default::default() };
    let req = res::pod_requests(pod, opts);
    let lim = res::pod_limits(pod, opts, &mut |_| {});
    let get = |l: &res::ResourceList, k: &str| l.get(k).copied().unwrap_or(0.0);
    let resources = calculate(cfg, req.get("cpu").copied(), get(&lim, "cpu"), get(&lim, "memory"));
    let overhead = match pod.spec.as_ref().and_then(|s| s.overhead.as_ref()) {
        Some(_) => {
            let o = res::overhead(pod);
            let cpu = get(&o, "cpu");
            calculate(cfg, Some(cpu), cpu, get(&o, "memory"))
        }
        None => api::LinuxContainerResources::default(),
    };
    (resources, overhead)
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
