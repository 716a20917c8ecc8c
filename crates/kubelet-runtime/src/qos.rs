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

/// Parses a Kubernetes quantity (`100m`, `1`, `64Mi`, `1G`, `1e3`) into a number of base units.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 16] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("", 1.0),
    ];
    for (suf, mult) in suffixes {
        if let Some(num) = s.strip_suffix(suf)
            && (suf.is_empty() || !num.is_empty())
        {
            if let Ok(v) = num.parse::<f64>() {
                return Some(v * mult);
            }
            if !suf.is_empty() {
                continue;
            }
        }
    }
    None
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
}
