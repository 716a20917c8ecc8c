//! Swap for containers (`kuberuntime_container_linux.go` configureContainerSwapResources, GetContainerSwapBehavior,
//! swapConfigurationHelper, calcSwapForBurstablePods, checkSwapControllerAvailability; `pkg/kubelet/util/swap`
//! IsSwapOn for `failSwapOn`).
//!
//! `memorySwap.swapBehavior: NoSwap` (the default) keeps every container out of swap where the kernel can tell:
//! on cgroup v1 with the swap controller (`memory.memsw.*`) its memory+swap limit is its memory limit, on cgroup v2
//! `memory.swap.max` is 0. `LimitedSwap` gives a Burstable pod's container that requests memory below its limit a
//! share of the node's swap proportional to its request (`request / node memory * node swap`), on cgroup v2 only;
//! critical pods, other QoS classes and cgroup v1 get NoSwap, as upstream. Pure but for [`SwapSettings::detect`],
//! called once at start.

use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_cri::api;
use kubelet_types::qos::{QosClass, int_value, pod_qos};

/// `cm.Cgroup2MaxSwapFilename`.
pub const CGROUP2_MAX_SWAP: &str = "memory.swap.max";

/// What the node's swap configuration allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwapSettings {
    /// `memorySwap.swapBehavior: LimitedSwap`.
    pub limited: bool,
    /// The unified hierarchy (cgroup v2).
    pub cgroup_v2: bool,
    /// The swap controller is there (v1 `memory.memsw.limit_in_bytes`, v2 `memory.swap.max` in the kubelet's own
    /// cgroup).
    pub controller: bool,
    /// The node's memory in bytes.
    pub memory_capacity: i64,
    /// The node's swap in bytes.
    pub swap_capacity: i64,
}

/// `SwapBehavior`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapBehavior {
    /// No swap.
    NoSwap,
    /// A share of the node's swap.
    LimitedSwap,
}

impl SwapSettings {
    /// The machine's settings under `cgroup_mount` (`/sys/fs/cgroup`), `proc` (`/proc`) and `behavior`.
    pub fn detect(cgroup_mount: &Path, proc: &Path, behavior: &str, memory_capacity: i64) -> Self {
        let cgroup_v2 = cgroup_mount.join("cgroup.controllers").exists();
        let controller = if cgroup_v2 {
            let own = std::fs::read_to_string(proc.join("self/cgroup")).unwrap_or_default();
            let path =
                own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").trim_start_matches('/').to_string();
            cgroup_mount.join(path).join(CGROUP2_MAX_SWAP).exists()
        } else {
            cgroup_mount.join("memory/memory.memsw.limit_in_bytes").exists()
        };
        Self {
            limited: behavior == "LimitedSwap",
            cgroup_v2,
            controller,
            memory_capacity,
            swap_capacity: swap_capacity(proc),
        }
    }

    /// The swap behaviour of container `c` of `pod` (`GetContainerSwapBehavior`).
    pub fn behavior(&self, pod: &Pod, c: &Container) -> SwapBehavior {
        if !self.limited || !self.controller || !self.cgroup_v2 || kubelet_types::qos::is_critical_pod(pod) {
            return SwapBehavior::NoSwap;
        }
        let r = c.resources.as_ref();
        let memory = |l: Option<
            &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            l.and_then(|l| l.get("memory")).and_then(|q| kubelet_types::quantity::parse_quantity(&q.0)).unwrap_or(0.0)
        };
        let (request, limit) = (memory(r.and_then(|r| r.requests.as_ref())), memory(r.and_then(|r| r.limits.as_ref())));
        if pod_qos(pod) != QosClass::Burstable || (request == 0.0 && limit == 0.0) || request == limit {
            return SwapBehavior::NoSwap;
        }
        SwapBehavior::LimitedSwap
    }

    /// Sets the container's swap in `lcr` (`configureContainerSwapResources`); `lcr` holds its memory limit already.
    pub fn configure(&self, lcr: &mut api::LinuxContainerResources, pod: &Pod, c: &Container) {
        if !self.controller {
            return;
        }
        match self.behavior(pod, c) {
            SwapBehavior::NoSwap => self.no_swap(lcr),
            SwapBehavior::LimitedSwap => {
                let request = c
                    .resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|l| l.get("memory"))
                    .and_then(|q| kubelet_types::quantity::parse_quantity(&q.0))
                    .map(int_value)
                    .unwrap_or(0);
                match calc_swap_for_burstable_pods(request, self.memory_capacity, self.swap_capacity) {
                    Ok(limit) => {
                        lcr.unified.insert(CGROUP2_MAX_SWAP.into(), limit.to_string());
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "Cannot calculate swap allocation amount; disallowing swap");
                        self.no_swap(lcr);
                    }
                }
            }
        }
    }

    /// `ConfigureNoSwap`.
    fn no_swap(&self, lcr: &mut api::LinuxContainerResources) {
        if self.cgroup_v2 {
            lcr.unified.insert(CGROUP2_MAX_SWAP.into(), "0".into());
        } else {
            // Memory plus swap no more than memory: no swap beyond the limit (a limit of 0 ignores it).
            lcr.memory_swap_limit_in_bytes = lcr.memory_limit_in_bytes;
        }
    }
}

/// `calcSwapForBurstablePods`: `request / node memory * node swap`.
pub fn calc_swap_for_burstable_pods(request: i64, node_memory: i64, node_swap: i64) -> Result<i64, String> {
    if node_memory <= 0 {
        return Err("total node memory is 0".into());
    }
    if request > node_memory {
        return Err(format!("container request {request} is larger than total node memory {node_memory}"));
    }
    Ok((request as f64 / node_memory as f64 * node_swap as f64) as i64)
}

/// The swap the kernel has, in bytes (`/proc/meminfo` `SwapTotal`).
pub fn swap_capacity(proc: &Path) -> i64 {
    let meminfo = std::fs::read_to_string(proc.join("meminfo")).unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("SwapTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// Whether swap is on (`swap.IsSwapOn`: `/proc/swaps` lists a device besides its header).
pub fn is_swap_on(proc: &Path) -> Result<bool, String> {
    let swaps =
        std::fs::read_to_string(proc.join("swaps")).map_err(|e| format!("{}: {e}", proc.join("swaps").display()))?;
    Ok(swaps.lines().skip(1).any(|l| !l.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(req: &str, lim: &str) -> (Pod, Container) {
        let list = |v: &str| (!v.is_empty()).then(|| [("memory".to_string(), Quantity(v.into()))].into());
        let c = Container {
            name: "app".into(),
            resources: Some(ResourceRequirements { requests: list(req), limits: list(lim), claims: None }),
            ..Default::default()
        };
        let p = Pod { spec: Some(PodSpec { containers: vec![c.clone()], ..Default::default() }), ..Default::default() };
        (p, c)
    }

    #[test]
    fn limited_swap_goes_to_burstable_containers_on_v2_and_no_swap_is_set_everywhere_else() {
        let v2 = SwapSettings {
            limited: true,
            cgroup_v2: true,
            controller: true,
            memory_capacity: 8 << 30,
            swap_capacity: 4 << 30,
        };
        let (p, c) = pod("1Gi", "2Gi");
        assert_eq!(v2.behavior(&p, &c), SwapBehavior::LimitedSwap);
        let mut lcr = api::LinuxContainerResources { memory_limit_in_bytes: 2 << 30, ..Default::default() };
        v2.configure(&mut lcr, &p, &c);
        assert_eq!(
            lcr.unified[CGROUP2_MAX_SWAP],
            (512i64 << 20).to_string(),
            "1/8 of the node's memory: 1/8 of its swap"
        );
        let (g, gc) = pod("1Gi", "1Gi");
        assert_eq!(v2.behavior(&g, &gc), SwapBehavior::NoSwap, "request equal to limit");
        let mut lcr = api::LinuxContainerResources::default();
        v2.configure(&mut lcr, &g, &gc);
        assert_eq!(lcr.unified[CGROUP2_MAX_SWAP], "0");
        let v1 = SwapSettings { cgroup_v2: false, ..v2.clone() };
        assert_eq!(v1.behavior(&p, &c), SwapBehavior::NoSwap, "no LimitedSwap on cgroup v1");
        let mut lcr = api::LinuxContainerResources { memory_limit_in_bytes: 2 << 30, ..Default::default() };
        v1.configure(&mut lcr, &p, &c);
        assert_eq!((lcr.memory_swap_limit_in_bytes, lcr.unified.len()), (2 << 30, 0));
        let none = SwapSettings { controller: false, ..v1 };
        let mut lcr = api::LinuxContainerResources { memory_limit_in_bytes: 2 << 30, ..Default::default() };
        none.configure(&mut lcr, &p, &c);
        assert_eq!(lcr.memory_swap_limit_in_bytes, 0, "nothing without the swap controller");
        assert_eq!(
            calc_swap_for_burstable_pods(9 << 30, 8 << 30, 1).unwrap_err(),
            "container request 9663676416 is larger than total node memory 8589934592"
        );
    }

    #[test]
    fn swap_is_read_from_proc() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("swaps"), "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").unwrap();
        std::fs::write(d.path().join("meminfo"), "MemTotal:  100 kB\nSwapTotal:       2048 kB\n").unwrap();
        assert_eq!(is_swap_on(d.path()), Ok(false));
        assert_eq!(swap_capacity(d.path()), 2 << 20);
        std::fs::write(d.path().join("swaps"), "Filename Type Size Used Priority\n/swapfile file 2048 0 -2\n").unwrap();
        assert_eq!(is_swap_on(d.path()), Ok(true));
    }
}
