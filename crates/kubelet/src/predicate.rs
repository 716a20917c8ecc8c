//! The predicate admit handler (`pkg/kubelet/lifecycle/predicate.go` with the scheduler plugins it runs:
//! `noderesources` fit, `nodeaffinity`, `nodename`, `nodeports`, and `tainttoleration` for `NoExecute` taints).
//!
//! Called by the sync loop for each new pod with the pods already admitted (those earlier in the same batch
//! included); reads the Node as last seen (the registered Node, refreshed at every status update; the initial
//! Node when standalone). Every check runs and the first failure, in upstream's order (pods, cpu, memory,
//! ephemeral-storage, extended resources, NodeAffinity, NodeName, NodePorts, TaintToleration), is reported with
//! upstream's reason and message. Critical pods (static, mirror, system-critical priority) are refused here only for
//! non-resource reasons (`HandleAdmissionFailure`); their resource failures are left to [`crate::preemption`],
//! which the sync loop asks once every handler admitted the pod, and which stops other pods to make room or
//! refuses the critical pod.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm};
use kubelet_types::Pod;
use kubelet_types::qos::is_critical_pod;
use kubelet_types::quantity::parse_quantity;
use tokio::sync::watch;

use crate::admission::{AdmitResult, PodAdmitHandler};

/// The predicate handler.
pub struct PredicateAdmit {
    /// The Node as last seen.
    pub node: watch::Receiver<Option<Node>>,
    /// The device manager's allocations, which raise the Node's allocatable for a pod that has devices already
    /// (`pluginResourceUpdateFunc`); None: no device manager.
    pub plugin_resources: Option<Arc<dyn PluginResources>>,
}

/// Devices allocated before the Node shows them (`UpdatePluginResources`).
pub trait PluginResources: Send + Sync + 'static {
    /// The devices allocated per resource over every pod, when `pod_uid` has devices allocated (a pod admitted again
    /// after a restart, before its plugin registered again); None otherwise.
    fn allocated_if_pod_has_devices(&self, pod_uid: &str) -> Option<std::collections::BTreeMap<String, usize>>;
}

/// Raises the Node's allocatable of each resource to at least what is allocated (`sanitizeNodeAllocatable`).
pub fn sanitize_node_allocatable(node: &mut Node, allocated: &std::collections::BTreeMap<String, usize>) {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let status = node.status.get_or_insert_with(Default::default);
    let alloc = status.allocatable.get_or_insert_with(Default::default);
    for (resource, n) in allocated {
        let have = alloc.get(resource).and_then(|q| parse_quantity(&q.0)).unwrap_or(0.0);
        if have < *n as f64 {
            alloc.insert(resource.clone(), Quantity(n.to_string()));
        }
    }
}

/// A failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// `InsufficientResourceError`.
    Resource { name: String, requested: i64, used: i64, capacity: i64 },
    /// `PredicateFailureError`.
    Predicate { name: &'static str, desc: &'static str },
}

fn is_scalar(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native
        || name.starts_with("hugepages-")
        || name.contains("kubernetes.io/")
        || name.starts_with("attachable-volumes-")
}

fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// A quantity in the fit's unit: millicores for cpu, the integer value (rounded up) otherwise.
fn amount(name: &str, v: f64) -> i64 {
    if name == "cpu" { (v * 1000.0 - 1e-9).ceil() as i64 } else { (v - 1e-9).ceil() as i64 }
}

/// The pod's requests (`resource.PodRequests`, [`kubelet_types::resources::pod_requests`]): containers and
/// sidecars add up, init containers as they run, pod-level requests (as the API defaults them) override, plus
/// overhead; `skip` drops resources (extended ones the node lacks).
fn pod_requests(pod: &Pod, skip: &dyn Fn(&str) -> bool) -> HashMap<String, i64> {
    kubelet_types::resources::pod_requests(pod, Default::default())
        .into_iter()
        .filter(|(k, _)| !skip(k))
        .filter(|(k, _)| k == "cpu" || k == "memory" || k == "ephemeral-storage" || is_scalar(k))
        .map(|(k, v)| (k.clone(), amount(&k, v)))
        .collect()
}

fn fits(pod: &Pod, others: &[Arc<Pod>], node: &Node) -> Vec<Failure> {
    let alloc: HashMap<String, i64> = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| a.iter().filter_map(|(k, q)| Some((k.clone(), amount(k, parse_quantity(&q.0)?)))).collect())
        .unwrap_or_default();
    let mut out = vec![];
    let pods_cap = alloc.get("pods").copied().unwrap_or(0);
    if others.len() as i64 + 1 > pods_cap {
        out.push(Failure::Resource {
            name: "pods".into(),
            requested: 1,
            used: others.len() as i64,
            capacity: pods_cap,
        });
    }
    // Extended resources the node does not have are not checked (`removeMissingExtendedResources`).
    let req = pod_requests(pod, &|k| is_extended(k) && !alloc.contains_key(k));
    let mut used: HashMap<String, i64> = HashMap::new();
    for o in others {
        for (k, v) in pod_requests(o, &|_| false) {
            let e = used.entry(k).or_default();
            *e = e.saturating_add(v);
        }
    }
    let get = |m: &HashMap<String, i64>, k: &str| m.get(k).copied().unwrap_or(0);
    let mut check = |name: &str| {
        let r = get(&req, name);
        if r > 0 && r > get(&alloc, name).saturating_sub(get(&used, name)) {
            out.push(Failure::Resource {
                name: name.into(),
                requested: r,
                used: get(&used, name),
                capacity: get(&alloc, name),
            });
        }
    };
    for name in ["cpu", "memory", "ephemeral-storage"] {
        check(name);
    }
    let mut scalars: Vec<&String> = req.keys().filter(|k| is_scalar(k)).collect();
    scalars.sort();
    for name in scalars {
        check(name);
    }
    out
}

/// The resources `pod` lacks on `node` with `others` admitted, in upstream's order, each with the amount missing
/// (`InsufficientResourceError.GetInsufficientAmount`: requested minus what is free); empty when it fits.
pub(crate) fn insufficient_resources(pod: &Pod, others: &[Arc<Pod>], node: &Node) -> Vec<(String, i64)> {
    fits(pod, others, node)
        .into_iter()
        .filter_map(|f| match f {
            Failure::Resource { name, requested, used, capacity } => Some((name, requested - (capacity - used))),
            Failure::Predicate { .. } => None,
        })
        .collect()
}

fn label_ok(s: &str) -> bool {
    s.len() <= 63 && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn requirement_matches(r: &NodeSelectorRequirement, get: &dyn Fn(&str) -> Option<String>) -> Option<bool> {
    let values = r.values.clone().unwrap_or_default();
    let v = get(&r.key);
    Some(match r.operator.as_str() {
        "In" if !values.is_empty() => v.is_some_and(|v| values.contains(&v)),
        "NotIn" if !values.is_empty() => v.is_none_or(|v| !values.contains(&v)),
        "Exists" if values.is_empty() => v.is_some(),
        "DoesNotExist" if values.is_empty() => v.is_none(),
        "Gt" | "Lt" if values.len() == 1 => {
            let want: i64 = values[0].parse().ok()?;
            let Some(have) = v.and_then(|v| v.parse::<i64>().ok()) else { return Some(false) };
            if r.operator == "Gt" { have > want } else { have < want }
        }
        _ => return None,
    })
}

fn term_matches(t: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let by_label = |k: &str| labels.get(k).cloned();
    for r in t.match_expressions.iter().flatten() {
        if r.values.iter().flatten().any(|v| !label_ok(v)) {
            return false;
        }
        if requirement_matches(r, &by_label) != Some(true) {
            return false;
        }
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    if !name.is_empty() {
        for r in t.match_fields.iter().flatten() {
            let values = r.values.clone().unwrap_or_default();
            let field = if r.key == "metadata.name" { name.clone() } else { String::new() };
            let ok = match r.operator.as_str() {
                "In" if values.len() == 1 => field == values[0],
                "NotIn" if values.len() == 1 => field != values[0],
                _ => false,
            };
            if !ok {
                return false;
            }
        }
    }
    true
}

/// `GetRequiredNodeAffinity(pod).Match(node)`: the node selector and the required node affinity terms (ORed).
fn node_affinity_matches(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if spec.node_selector.iter().flatten().any(|(k, v)| labels.get(k) != Some(v)) {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
    let Some(required) = required else { return true };
    let terms: Vec<&NodeSelectorTerm> = required
        .node_selector_terms
        .iter()
        .filter(|t| {
            t.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
                || t.match_fields.as_ref().is_some_and(|f| !f.is_empty())
        })
        .collect();
    terms.iter().any(|t| term_matches(t, node))
}

/// `(hostIP, protocol, hostPort)` of the pod's host ports: containers and sidecars.
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    let Some(spec) = pod.spec.as_ref() else { return vec![] };
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| {
            let ip = p.host_ip.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "0.0.0.0".into());
            let proto = p.protocol.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "TCP".into());
            (ip, proto, p.host_port.unwrap_or(0))
        })
        .collect()
}

fn ports_conflict(pod: &Pod, others: &[Arc<Pod>]) -> bool {
    let used: Vec<(String, String, i32)> = others.iter().flat_map(|o| host_ports(o)).collect();
    host_ports(pod).iter().any(|(ip, proto, port)| {
        used.iter().any(|(uip, uproto, uport)| {
            uproto == proto && uport == port && (ip == "0.0.0.0" || uip == "0.0.0.0" || uip == ip)
        })
    })
}

fn untolerated_no_execute(pod: &Pod, node: &Node) -> bool {
    if kubelet_types::pod_update::is_static_pod(pod) {
        return false;
    }
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .filter(|t| t.effect == "NoExecute")
        .any(|t| !kubelet_types::scheduling::tolerations_tolerate(tolerations, t))
}

/// Every failed check of `pod` on `node` with `others` admitted, in upstream's order.
fn general_filter(pod: &Pod, others: &[Arc<Pod>], node: &Node) -> Vec<Failure> {
    let mut out = fits(pod, others, node);
    if !node_affinity_matches(pod, node) {
        out.push(Failure::Predicate {
            name: "NodeAffinity",
            desc: "node(s) didn't match Pod's node affinity/selector",
        });
    }
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    if !node_name.is_empty() && Some(&node_name) != node.metadata.name.as_ref() {
        out.push(Failure::Predicate { name: "NodeName", desc: "node(s) didn't match the requested node name" });
    }
    if ports_conflict(pod, others) {
        out.push(Failure::Predicate {
            name: "NodePorts",
            desc: "node(s) didn't have free ports for the requested pod ports",
        });
    }
    if untolerated_no_execute(pod, node) {
        out.push(Failure::Predicate {
            name: "TaintToleration",
            desc: "node(s) had taints that the pod didn't tolerate",
        });
    }
    out
}

/// The verdict on `pod` given `others` and `node` (`predicateAdmitHandler.Admit` after the OS checks).
pub fn admit_on(pod: &Pod, others: &[Arc<Pod>], node: &Node) -> Option<AdmitResult> {
    let spec = pod.spec.as_ref();
    let strict = spec.and_then(|s| s.security_context.as_ref()).and_then(|c| c.supplemental_groups_policy.as_deref())
        == Some("Strict");
    let supported = node.status.as_ref().and_then(|s| s.features.as_ref()).and_then(|f| f.supplemental_groups_policy);
    if strict && supported != Some(true) {
        return Some(AdmitResult {
            reason: "SupplementalGroupsPolicyNotSupported".into(),
            message: "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
        });
    }
    let mut failures = general_filter(pod, others, node);
    if is_critical_pod(pod) {
        failures.retain(|f| !matches!(f, Failure::Resource { .. }));
    }
    failures.into_iter().next().map(|f| match f {
        Failure::Resource { name, requested, used, capacity } => AdmitResult {
            reason: format!("OutOf{name}"),
            message: format!(
                "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        },
        Failure::Predicate { name, desc } => {
            AdmitResult { reason: name.into(), message: format!("Predicate {name} failed: {desc}") }
        }
    })
}

impl PodAdmitHandler for PredicateAdmit {
    fn admit(&self, pod: &Pod, others: &[Arc<Pod>]) -> Option<AdmitResult> {
        let node = self.node.borrow().clone();
        let Some(node) = node else {
            return Some(AdmitResult {
                reason: "InvalidNodeInfo".into(),
                message: "Kubelet cannot get node info.".into(),
            });
        };
        let mut node = node;
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if let Some(allocated) = self.plugin_resources.as_ref().and_then(|p| p.allocated_if_pod_has_devices(uid)) {
            sanitize_node_allocatable(&mut node, &allocated);
        }
        admit_on(pod, others, &node)
    }
}

#[cfg(test)]
#[path = "predicate_tests.rs"]
mod tests;
