//! Pod QoS class and the pod's cgroup parent (`pkg/apis/core/v1/helper/qos/qos.go`,
//! `pkg/kubelet/cm/pod_container_manager_linux.go`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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

fn non_zero(m: Option<&BTreeMap<String, Quantity>>, key: &str) -> Option<String> {
    m.and_then(|m| m.get(key)).map(|q| q.0.clone()).filter(|v| parse_quantity(v).is_some_and(|n| n > 0.0))
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
}

/// The QoS class of a pod, as upstream's `GetPodQOS` (a `status.qosClass` already set wins).
pub fn pod_qos(pod: &Pod) -> QosClass {
    if let Some(q) = pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        match q {
            "Guaranteed" => return QosClass::Guaranteed,
            "Burstable" => return QosClass::Burstable,
            "BestEffort" => return QosClass::BestEffort,
            _ => {}
        }
    }
    let mut any = false;
    let mut guaranteed = true;
    let mut has_limits_for = (false, false);
    for c in all_containers(pod) {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let lim = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        for res in ["cpu", "memory"] {
            let r = non_zero(req, res);
            let l = non_zero(lim, res);
            if r.is_some() || l.is_some() {
                any = true;
            }
            // A request defaults to the limit when unset.
            let r_eff = r.clone().or_else(|| l.clone());
            match (&r_eff, &l) {
                (Some(a), Some(b)) if parse_quantity(a) == parse_quantity(b) => {}
                _ => guaranteed = false,
            }
            if l.is_some() {
                if res == "cpu" {
                    has_limits_for.0 = true;
                } else {
                    has_limits_for.1 = true;
                }
            }
        }
    }
    if !any {
        QosClass::BestEffort
    } else if guaranteed && has_limits_for.0 && has_limits_for.1 {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The cgroupfs path of the pod's cgroup relative to the cgroup root: `/kubepods/burstable/pod<uid>`,
/// `/kubepods/besteffort/pod<uid>` or `/kubepods/pod<uid>` (Guaranteed).
pub fn pod_cgroup_parent(qos: QosClass, uid: &str) -> String {
    match qos {
        QosClass::Guaranteed => format!("/kubepods/pod{uid}"),
        QosClass::Burstable => format!("/kubepods/burstable/pod{uid}"),
        QosClass::BestEffort => format!("/kubepods/besteffort/pod{uid}"),
    }
}

/// The pod's slice with the systemd driver: its unit name (`kubepods-burstable-pod<uid>.slice`, dashes of the
/// UID written `_`); the cgroup is at [`crate::systemd_names::expand_slice`] of it.
pub fn pod_slice(qos: QosClass, uid: &str) -> String {
    let pod = format!("pod{uid}");
    match qos {
        QosClass::Guaranteed => crate::systemd_names::slice_name(&["kubepods", &pod]),
        QosClass::Burstable => crate::systemd_names::slice_name(&["kubepods", "burstable", &pod]),
        QosClass::BestEffort => crate::systemd_names::slice_name(&["kubepods", "besteffort", &pod]),
    }
}

pub use crate::quantity::parse_quantity;

/// A container's request of `res`, defaulting to its limit (as API defaulting does), in base units.
fn request(c: &Container, res: &str) -> f64 {
    let r = c.resources.as_ref();
    let get = |m: Option<&BTreeMap<String, Quantity>>| m.and_then(|m| m.get(res)).and_then(|q| parse_quantity(&q.0));
    get(r.and_then(|r| r.requests.as_ref())).or_else(|| get(r.and_then(|r| r.limits.as_ref()))).unwrap_or(0.0)
}

fn limit(c: &Container, res: &str) -> Option<f64> {
    let m = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    m.and_then(|m| m.get(res)).and_then(|q| parse_quantity(&q.0)).filter(|v| *v > 0.0)
}

/// The pod's effective request or limit of `res` (`resource.PodRequests`/`PodLimits`): app containers and
/// sidecars add up; a regular init container needs its own amount plus the sidecars started before it; the
/// larger of the two. `value` gives a container's amount.
fn pod_total(pod: &Pod, value: &dyn Fn(&Container) -> f64) -> f64 {
    let Some(spec) = pod.spec.as_ref() else { return 0.0 };
    let mut sidecars = 0.0;
    let mut init_max: f64 = 0.0;
    for c in spec.init_containers.iter().flatten() {
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += value(c);
            init_max = init_max.max(sidecars);
        } else {
            init_max = init_max.max(sidecars + value(c));
        }
    }
    let apps: f64 = spec.containers.iter().map(value).sum::<f64>() + sidecars;
    apps.max(init_max)
}

/// The pod's request of `res` in base units (`resource.PodRequests`, `GetResourceRequestQuantity`): app containers
/// and sidecars add up, init containers as they run, plus the pod overhead. A request defaults to the limit.
pub fn pod_request(pod: &Pod, res: &str) -> f64 {
    let overhead = pod
        .spec
        .as_ref()
        .and_then(|s| s.overhead.as_ref())
        .and_then(|o| o.get(res))
        .and_then(|q| parse_quantity(&q.0))
        .unwrap_or(0.0);
    pod_total(pod, &|c| request(c, res)) + overhead
}

/// The pod's limit of `res` in base units (`resource.PodLimits`), None when no container sets one.
pub fn pod_limit(pod: &Pod, res: &str) -> Option<f64> {
    let spec = pod.spec.as_ref()?;
    let any = spec.init_containers.iter().flatten().chain(spec.containers.iter()).any(|c| limit(c, res).is_some());
    any.then(|| pod_total(pod, &|c| limit(c, res).unwrap_or(0.0)))
}

/// A container's limit of `res` in base units, when set and not zero.
pub fn container_limit(c: &Container, res: &str) -> Option<f64> {
    limit(c, res)
}

/// A container's request of `res` in base units (0 when unset), defaulting to its limit.
pub fn container_request(c: &Container, res: &str) -> f64 {
    request(c, res)
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

/// The limits of the pod's cgroup (`ResourceConfigForPod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodResources {
    /// `cpu.shares`.
    pub cpu_shares: i64,
    /// `cpu.cfs_quota_us` (-1: unlimited), when set.
    pub cpu_quota: Option<i64>,
    /// `cpu.cfs_period_us`, when set.
    pub cpu_period: Option<i64>,
    /// Memory limit in bytes, when set.
    pub memory: Option<i64>,
}

/// What the pod cgroup gets: shares from the summed CPU requests for every class but BestEffort (2 shares); quota
/// and memory limit for Guaranteed pods, and for Burstable pods whose every container declares that limit.
pub fn pod_resources(pod: &Pod, cfs_quota: bool, period: i64) -> PodResources {
    let qos = pod_qos(pod);
    if qos == QosClass::BestEffort {
        return PodResources { cpu_shares: 2, cpu_quota: None, cpu_period: None, memory: None };
    }
    let containers = || {
        let spec = pod.spec.as_ref();
        spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
    };
    let cpu_declared = containers().all(|c| limit(c, "cpu").is_some());
    let mem_declared = containers().all(|c| limit(c, "memory").is_some());
    let milli = |v: f64| (v * 1000.0).round() as i64;
    let cpu_req = milli(pod_total(pod, &|c| request(c, "cpu")));
    let cpu_lim = milli(pod_total(pod, &|c| limit(c, "cpu").unwrap_or(0.0)));
    let mem_lim = pod_total(pod, &|c| limit(c, "memory").unwrap_or(0.0)) as i64;
    let shares = if cpu_req <= 0 { 2 } else { (cpu_req * 1024 / 1000).clamp(2, 262_144) };
    let quota = if !cfs_quota {
        -1
    } else if cpu_lim == 0 {
        0
    } else {
        (cpu_lim * period / 1000).max(1000)
    };
    let guaranteed = qos == QosClass::Guaranteed;
    PodResources {
        cpu_shares: shares,
        cpu_quota: (guaranteed || cpu_declared).then_some(quota),
        cpu_period: (guaranteed || cpu_declared).then_some(period),
        memory: (guaranteed || mem_declared).then_some(mem_lim),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

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
        assert_eq!(pod_cgroup_parent(QosClass::BestEffort, "u1"), "/kubepods/besteffort/podu1");
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
                memory: Some(128 << 20)
            }
        );
        let burstable_mem = pod_with(&[("cpu", "250m")], &[("memory", "64Mi")]);
        assert_eq!(
            pod_resources(&burstable_mem, true, 100_000),
            PodResources { cpu_shares: 256, cpu_quota: None, cpu_period: None, memory: Some(64 << 20) }
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
