//! The predicate handler against upstream's reasons and messages.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    NodeSpec, NodeStatus, PodSpec, ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_types::Pod;

use super::*;

fn qmap(v: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect()
}

fn node(alloc: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some("node-1".into());
    n.metadata.labels = Some([("disk".to_string(), "ssd".to_string()), ("gen".to_string(), "5".to_string())].into());
    n.status = Some(NodeStatus { allocatable: Some(qmap(alloc)), ..Default::default() });
    n
}

fn container(name: &str, requests: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        resources: Some(ResourceRequirements { requests: Some(qmap(requests)), ..Default::default() }),
        ..Default::default()
    }
}

fn pod(name: &str, requests: &[(&str, &str)]) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec = Some(PodSpec { containers: vec![container("app", requests)], ..Default::default() });
    p
}

const ALLOC: &[(&str, &str)] = &[("cpu", "1"), ("memory", "1Gi"), ("pods", "3"), ("ephemeral-storage", "10Gi")];

#[test]
fn resources_are_checked_against_allocatable_minus_the_admitted_pods() {
    let n = node(ALLOC);
    let others = vec![Arc::new(pod("a", &[("cpu", "500m"), ("memory", "256Mi")]))];
    assert_eq!(admit_on(&pod("b", &[("cpu", "500m")]), &others, &n), None, "exactly fits");
    let r = admit_on(&pod("c", &[("cpu", "600m")]), &others, &n).unwrap();
    assert_eq!(r.reason, "OutOfcpu");
    assert_eq!(r.message, "Node didn't have enough resource: cpu, requested: 600, used: 500, capacity: 1000");
    let r = admit_on(&pod("d", &[("memory", "800Mi")]), &others, &n).unwrap();
    assert_eq!(r.reason, "OutOfmemory");
    assert_eq!(
        r.message,
        format!(
            "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
            800 << 20,
            256 << 20,
            1 << 30
        )
    );
    let r = admit_on(&pod("e", &[("ephemeral-storage", "11Gi")]), &[], &n).unwrap();
    assert_eq!(r.reason, "OutOfephemeral-storage");
    // The pod count comes first.
    let three: Vec<Arc<Pod>> = (0..3).map(|i| Arc::new(pod(&format!("p{i}"), &[]))).collect();
    let r = admit_on(&pod("f", &[("cpu", "2")]), &three, &n).unwrap();
    assert_eq!(r.reason, "OutOfpods");
    assert_eq!(r.message, "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3");
}

#[test]
fn extended_resources_the_node_lacks_are_ignored_those_it_has_are_counted() {
    let mut alloc = ALLOC.to_vec();
    alloc.push(("example.com/gpu", "1"));
    let n = node(&alloc);
    assert_eq!(admit_on(&pod("a", &[("vendor.io/fpga", "4")]), &[], &n), None, "not on the node: not checked");
    let r = admit_on(&pod("b", &[("example.com/gpu", "2")]), &[], &n).unwrap();
    assert_eq!(r.reason, "OutOfexample.com/gpu");
    let r = admit_on(&pod("c", &[("hugepages-2Mi", "2Mi")]), &[], &n).unwrap();
    assert_eq!(r.reason, "OutOfhugepages-2Mi", "hugepages the node lacks have capacity 0");
}

#[test]
fn init_containers_and_sidecars_count_as_upstream() {
    let n = node(ALLOC);
    let mut p = pod("a", &[("cpu", "300m")]);
    let mut sidecar = container("side", &[("cpu", "200m")]);
    sidecar.restart_policy = Some("Always".into());
    p.spec.as_mut().unwrap().init_containers = Some(vec![sidecar, container("init", &[("cpu", "900m")])]);
    // max(300 + 200, 200 + 900) = 1100m.
    let r = admit_on(&p, &[], &n).unwrap();
    assert_eq!(r.message, "Node didn't have enough resource: cpu, requested: 1100, used: 0, capacity: 1000");
}

#[test]
fn pod_level_requests_defaulted_from_pod_level_limits_and_overhead_count() {
    let n = node(ALLOC);
    let others = vec![Arc::new(pod("a", &[("memory", "256Mi")]))];
    // Only pod-level limits: the API defaults the pod-level requests to them, and so does the fit.
    let mut p = pod("b", &[]);
    p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
        limits: Some(qmap(&[("cpu", "500m"), ("memory", "800Mi")])),
        ..Default::default()
    });
    let r = admit_on(&p, &others, &n).unwrap();
    assert_eq!(r.reason, "OutOfmemory");
    assert!(r.message.contains(&format!("requested: {}", 800 << 20)), "{}", r.message);
    // The overhead adds to the requests.
    let mut q = pod("c", &[("cpu", "900m")]);
    q.spec.as_mut().unwrap().overhead = Some(qmap(&[("cpu", "200m")]));
    let r = admit_on(&q, &[], &n).unwrap();
    assert_eq!(r.message, "Node didn't have enough resource: cpu, requested: 1100, used: 0, capacity: 1000");
}

#[test]
fn node_selector_affinity_name_ports_and_no_execute_taints() {
    let n = node(ALLOC);
    let mut p = pod("a", &[]);
    p.spec.as_mut().unwrap().node_selector = Some([("disk".to_string(), "hdd".to_string())].into());
    let r = admit_on(&p, &[], &n).unwrap();
    assert_eq!(r.reason, "NodeAffinity");
    assert_eq!(r.message, "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector");

    let affinity = |op: &str, values: &[&str]| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "gen".into(),
                        operator: op.into(),
                        values: Some(values.iter().map(|v| v.to_string()).collect()),
                    }]),
                    match_fields: None,
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let with = |a: Affinity| {
        let mut p = pod("b", &[]);
        p.spec.as_mut().unwrap().affinity = Some(a);
        p
    };
    assert_eq!(admit_on(&with(affinity("Gt", &["4"])), &[], &n), None);
    assert_eq!(admit_on(&with(affinity("In", &["4", "5"])), &[], &n), None);
    assert_eq!(admit_on(&with(affinity("Lt", &["5"])), &[], &n).unwrap().reason, "NodeAffinity");
    assert_eq!(admit_on(&with(affinity("NotIn", &["5"])), &[], &n).unwrap().reason, "NodeAffinity");

    let mut other_node = pod("c", &[]);
    other_node.spec.as_mut().unwrap().node_name = Some("node-2".into());
    let r = admit_on(&other_node, &[], &n).unwrap();
    assert_eq!(r.message, "Predicate NodeName failed: node(s) didn't match the requested node name");

    let with_port = |name: &str, ip: Option<&str>, port: i32| {
        let mut p = pod(name, &[]);
        p.spec.as_mut().unwrap().containers[0].ports = Some(vec![ContainerPort {
            container_port: 80,
            host_port: Some(port),
            host_ip: ip.map(Into::into),
            ..Default::default()
        }]);
        Arc::new(p)
    };
    let others = vec![with_port("web", Some("10.0.0.1"), 8080)];
    assert_eq!(admit_on(&with_port("x", Some("10.0.0.2"), 8080), &others, &n), None, "another IP");
    let r = admit_on(&with_port("y", None, 8080), &others, &n).unwrap();
    assert_eq!(r.message, "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports");

    let mut tainted = n.clone();
    tainted.spec = Some(NodeSpec {
        taints: Some(vec![
            Taint { key: "maintenance".into(), effect: "NoExecute".into(), ..Default::default() },
            Taint { key: "soft".into(), effect: "NoSchedule".into(), ..Default::default() },
        ]),
        ..Default::default()
    });
    let r = admit_on(&pod("d", &[]), &[], &tainted).unwrap();
    assert_eq!(r.reason, "TaintToleration");
    assert_eq!(r.message, "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate");
    let mut tolerant = pod("e", &[]);
    tolerant.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
        key: Some("maintenance".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    }]);
    assert_eq!(admit_on(&tolerant, &[], &tainted), None, "NoSchedule taints are not the kubelet's to enforce");
    let mut static_pod = pod("f", &[]);
    static_pod.metadata.annotations =
        Some([(kubelet_types::labels::CONFIG_SOURCE.to_string(), "file".to_string())].into());
    assert_eq!(admit_on(&static_pod, &[], &tainted), None, "static pods skip the taint check");
}

#[test]
fn critical_pods_are_refused_only_for_non_resource_reasons() {
    let n = node(ALLOC);
    let mut p = pod("kube-apiserver", &[("cpu", "4")]);
    p.spec.as_mut().unwrap().priority = Some(kubelet_types::qos::SYSTEM_CRITICAL_PRIORITY);
    assert_eq!(admit_on(&p, &[], &n), None);
    p.spec.as_mut().unwrap().node_selector = Some([("disk".to_string(), "hdd".to_string())].into());
    assert_eq!(admit_on(&p, &[], &n).unwrap().reason, "NodeAffinity");
}

#[test]
fn strict_supplemental_groups_need_the_nodes_feature() {
    let mut p = pod("a", &[]);
    p.spec.as_mut().unwrap().security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
        supplemental_groups_policy: Some("Strict".into()),
        ..Default::default()
    });
    let r = admit_on(&p, &[], &node(ALLOC)).unwrap();
    assert_eq!(r.reason, "SupplementalGroupsPolicyNotSupported");
    assert_eq!(r.message, "SupplementalGroupsPolicy=Strict is not supported in this node");
}

/// The device manager's allocations as a restarted kubelet has them from its checkpoint.
struct Allocated(BTreeMap<String, usize>, &'static str);

impl PluginResources for Allocated {
    fn allocated_if_pod_has_devices(&self, pod_uid: &str) -> Option<BTreeMap<String, usize>> {
        (pod_uid == self.1).then(|| self.0.clone())
    }
}

#[test]
fn a_pod_with_devices_already_allocated_is_admitted_again_before_its_plugin_registers() {
    // After a restart the plugin has not registered again: the Node shows 0 of the resource.
    let n = node(&[("cpu", "2"), ("memory", "1Gi"), ("pods", "10"), ("example.com/resource", "0")]);
    let (_tx, rx) = watch::channel(Some(n));
    let allocated = Allocated(BTreeMap::from([("example.com/resource".to_string(), 2)]), "uid-gpu");
    let h = PredicateAdmit { node: rx, plugin_resources: Some(Arc::new(allocated)) };
    let gpu = pod("gpu", &[("example.com/resource", "1")]);
    assert_eq!(h.admit(&gpu, &[]), None, "its devices count as allocatable (sanitizeNodeAllocatable)");
    let other = Arc::new(pod("other", &[("example.com/resource", "1")]));
    assert_eq!(h.admit(&gpu, &[other]), None, "both allocated devices");
    let new = pod("new", &[("example.com/resource", "1")]);
    let r = h.admit(&new, &[]).expect("a pod without devices is checked against the Node as it is");
    assert_eq!(r.reason, "OutOfexample.com/resource");
}
