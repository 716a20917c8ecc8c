//! Pod QoS class and its limits (`pkg/apis/core/v1/helper/qos/qos.go`, `pkg/kubelet/cm/helpers_linux.go`
//! ResourceConfigForPod). Requests and limits are added up by [`crate::resources`], pod-level resources and
//! overhead included; the pod's cgroup is named by [`crate::cgroup_name`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::resources::{self, PodResourcesOptions, ResourceList};

/// The three QoS classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QosClass {
    /// Every container has equal cpu and memory requests and limits.
    Guaranteed,
    /// Some requests or limits, not guaranteed.
    Burstable,
    /// No requests or limits at all.
    BestEffort,
}

impl QosClass {
    /// The API string.
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// The QoS class of a pod, as upstream's `GetPodQOS` (a `status.qosClass` already set wins, else
/// `ComputePodQOS`).
pub fn pod_qos(pod: &Pod) -> QosClass {
    if let Some(q) = pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        match q {
            "Guaranteed" => return QosClass::Guaranteed,
            "Burstable" => return QosClass::Burstable,
            "BestEffort" => return QosClass::BestEffort,
            _ => {}
        }
    }
    compute_pod_qos(pod)
}

/// Adds the positive cpu and memory amounts of `from` (`processResourceList`); the names of those it had.
fn add_qos_resources(to: &mut ResourceList, from: &ResourceList) -> (bool, bool) {
    let mut seen = (false, false);
    for (k, v) in from.iter().filter(|(k, v)| (*k == "cpu" || *k == "memory") && **v > 0.0) {
        *to.entry(k.clone()).or_default() += v;
        if k == "cpu" {
            seen.0 = true;
        } else {
            seen.1 = true;
        }
    }
    seen
}

/// `ComputePodQOS`: from the pod-level resources when the pod has `spec.resources` (its containers' are then not
/// looked at), else from every container's. BestEffort without any cpu or memory request or limit; Guaranteed
/// when cpu and memory limits are set (at pod level, or by every container) and the summed requests equal them.
pub fn compute_pod_qos(pod: &Pod) -> QosClass {
    let (mut requests, mut limits) = (ResourceList::new(), ResourceList::new());
    let mut guaranteed = true;
    if resources::has_pod_level_field(pod) {
        add_qos_resources(&mut requests, &resources::pod_level_requests(pod));
        let pod_limits = resources::pod_level_limits(pod);
        if !pod_limits.is_empty() && add_qos_resources(&mut limits, &pod_limits) != (true, true) {
            guaranteed = false;
        }
    } else {
        let spec = pod.spec.as_ref();
        for c in spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())) {
            add_qos_resources(&mut requests, &resources::container_requests(c));
            if add_qos_resources(&mut limits, &resources::container_limits(c)) != (true, true) {
                guaranteed = false;
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    guaranteed = guaranteed && requests.iter().all(|(k, r)| limits.get(k).is_some_and(|l| l == r));
    if guaranteed && requests.len() == limits.len() { QosClass::Guaranteed } else { QosClass::Burstable }
}

pub use crate::quantity::parse_quantity;

/// The pod's request of `res` in base units as eviction ranks pods (`GetResourceRequestQuantity`): the pod-level
/// request when the pod has pod-level resources, else its containers' (app containers and sidecars add up, init
/// containers as they run, a request defaulting to the limit), plus the overhead when not zero.
pub fn pod_request(pod: &Pod, res: &str) -> f64 {
    resources::resource_request(pod, res)
}

/// The pod's limit of `res` in base units (`resource.PodLimits`, with pod-level limits and overhead), None when
/// neither a container nor the pod level lists one.
pub fn pod_limit(pod: &Pod, res: &str) -> Option<f64> {
    resources::pod_limits(pod, PodResourcesOptions::default(), &mut |_| {}).get(res).copied()
}

/// A container's limit of `res` in base units, when set and not zero.
pub fn container_limit(c: &Container, res: &str) -> Option<f64> {
    resources::container_limits(c).get(res).copied().filter(|v| *v > 0.0)
}

/// A container's request of `res` in base units (0 when unset), defaulting to its limit.
pub fn container_request(c: &Container, res: &str) -> f64 {
    resources::container_requests(c).get(res).copied().unwrap_or(0.0)
}

/// `scheduling.SystemCriticalPriority`: pods at or above it are critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// The pod's priority (`corev1helpers.PodPriority`), 0 when unset.
pub fn pod_priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// `kubelettypes.IsCriticalPod`: a static pod, a mirror pod, or a pod of system-critical priority. Such pods are
/// never evicted and always admitted under pressure.
pub fn is_critical_pod(pod: &Pod) -> bool {
    crate::pod_update::is_static_pod(pod)
        || pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(crate::labels::CONFIG_MIRROR))
        || pod_priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

/// The limits of the pod's cgroup (`ResourceConfigForPod`'s `ResourceConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResources {
    /// `cpu.shares`.
    pub cpu_shares: i64,
    /// `cpu.cfs_quota_us` (-1: unlimited), when set.
    pub cpu_quota: Option<i64>,
    /// `cpu.cfs_period_us`, when set.
    pub cpu_period: Option<i64>,
    /// Memory limit in bytes, when set.
    pub memory: Option<i64>,
    /// Huge page limits in bytes by page size in bytes, from the pod's huge page requests.
    pub hugepage_limits: BTreeMap<u64, u64>,
}

/// An amount in millis as `Quantity.MilliValue` gives it (rounded up).
pub fn milli_value(v: f64) -> i64 {
    (v * 1000.0 - 1e-6).ceil() as i64
}

/// An amount as `Quantity.Value` gives it (rounded up).
pub fn int_value(v: f64) -> i64 {
    (v - 1e-6).ceil() as i64
}

/// What the pod cgroup gets (`ResourceConfigForPod`), from the pod's requests and limits (pod-level ones in
/// place of the containers', the overhead added): shares from the cpu request for every class but BestEffort (2
/// shares); quota and memory limit for Guaranteed pods, and for Burstable pods whose every container (or the pod
/// level) declares that limit; huge page limits from the huge page requests.
pub fn pod_resources(pod: &Pod, cfs_quota: bool, period: i64) -> PodResources {
    let reqs = resources::pod_requests(pod, PodResourcesOptions::default());
    let (mut cpu_declared, mut mem_declared) = (true, true);
    let limits = resources::pod_limits(pod, PodResourcesOptions::default(), &mut |l| {
        cpu_declared &= l.get("cpu").is_some_and(|v| *v != 0.0);
        mem_declared &= l.get("memory").is_some_and(|v| *v != 0.0);
    });
    if resources::is_pod_level_resources_set(pod) {
        let pod_limits = resources::pod_level_limits(pod);
        cpu_declared |= pod_limits.get("cpu").is_some_and(|v| *v != 0.0);
        mem_declared |= pod_limits.get("memory").is_some_and(|v| *v != 0.0);
    }
    let hugepage_limits = resources::hugepage_limits(&reqs);
    let cpu_req = reqs.get("cpu").copied().map(milli_value).unwrap_or(0);
    let cpu_lim = limits.get("cpu").copied().map(milli_value).unwrap_or(0);
    let mem_lim = limits.get("memory").copied().map(int_value).unwrap_or(0);
    let shares = if cpu_req <= 0 { 2 } else { (cpu_req * 1024 / 1000).clamp(2, 262_144) };
    let quota = if !cfs_quota {
        -1
    } else if cpu_lim == 0 {
        0
    } else {
        (cpu_lim * period / 1000).max(1000)
    };
    let (cpu, mem) = match pod_qos(pod) {
        QosClass::BestEffort => {
            return PodResources { cpu_shares: 2, cpu_quota: None, cpu_period: None, memory: None, hugepage_limits };
        }
        QosClass::Guaranteed => (true, true),
        QosClass::Burstable => (cpu_declared, mem_declared),
    };
    PodResources {
        cpu_shares: shares,
        cpu_quota: cpu.then_some(quota),
        cpu_period: cpu.then_some(period),
        memory: mem.then_some(mem_lim),
        hugepage_limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod_with(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect())
        };
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    resources: Some(ResourceRequirements { requests: m(req), limits: m(lim), ..Default::default() }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn qos_classes_as_upstream() {
        assert_eq!(pod_qos(&pod_with(&[], &[])), QosClass::BestEffort);
        assert_eq!(pod_qos(&pod_with(&[("cpu", "100m")], &[])), QosClass::Burstable);
        assert_eq!(pod_qos(&pod_with(&[], &[("cpu", "1"), ("memory", "1Gi")])), QosClass::Guaranteed);
        assert_eq!(
            pod_qos(&pod_with(&[("cpu", "1000m"), ("memory", "1024Mi")], &[("cpu", "1"), ("memory", "1Gi")])),
            QosClass::Guaranteed
        );
        assert_eq!(pod_qos(&pod_with(&[("cpu", "500m")], &[("cpu", "1"), ("memory", "1Gi")])), QosClass::Burstable);
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("64Mi"), Some(64.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("abc"), None);
    }

    #[test]
    fn pod_cgroup_resources_as_upstream() {
        let guaranteed = pod_with(&[], &[("cpu", "500m"), ("memory", "128Mi")]);
        assert_eq!(
            pod_resources(&guaranteed, true, 100_000),
            PodResources {
                cpu_shares: 512,
                cpu_quota: Some(50_000),
                cpu_period: Some(100_000),
                memory: Some(128 << 20),
                hugepage_limits: BTreeMap::new(),
            }
        );
        let burstable_mem = pod_with(&[("cpu", "250m")], &[("memory", "64Mi")]);
        assert_eq!(
            pod_resources(&burstable_mem, true, 100_000),
            PodResources {
                cpu_shares: 256,
                cpu_quota: None,
                cpu_period: None,
                memory: Some(64 << 20),
                hugepage_limits: BTreeMap::new(),
            }
        );
        assert_eq!(pod_resources(&pod_with(&[], &[]), true, 100_000).cpu_shares, 2);
        assert_eq!(pod_resources(&guaranteed, false, 100_000).cpu_quota, Some(-1), "cpuCFSQuota off");
        // An init container larger than the apps sets the pod's request.
        let mut p = pod_with(&[("cpu", "100m")], &[]);
        let big = Container {
            name: "init".into(),
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity("2".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        p.spec.as_mut().unwrap().init_containers = Some(vec![big]);
        assert_eq!(pod_resources(&p, true, 100_000).cpu_shares, 2048);
    }
}
