//! The Node object the kubelet registers and the status it reports (`pkg/kubelet/kubelet_node_status.go`
//! initialNode, `pkg/kubelet/nodestatus/setters.go`: NodeAddress, MachineInfo, VersionInfo, DaemonEndpoints,
//! Images, ReadyCondition, MemoryPressureCondition, DiskPressureCondition, PIDPressureCondition, RuntimeHandlers,
//! NodeFeatures). Pure functions of their inputs; condition transition times carry over from the previous status.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeFeatures,
    NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

pub use kubelet_runtime::runtime_handlers::{RuntimeHandlerInfo, RuntimeInfo};

use super::machine::{MachineInfo, go_arch};
use super::quantity::{self, binary_si};

/// Names kept per image in the node status (`maxNamesPerImageInNodeStatus`).
const MAX_NAMES_PER_IMAGE: usize = 5;

/// An image as the node status lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImage {
    /// Repo digests, then repo tags.
    pub names: Vec<String>,
    /// Size in bytes.
    pub size: i64,
}

/// Everything the status depends on.
#[derive(Debug, Clone)]
pub struct NodeInputs {
    /// The node's name.
    pub node_name: String,
    /// The host name (Hostname address).
    pub hostname: String,
    /// Node IPs (InternalIP addresses).
    pub node_ips: Vec<String>,
    /// Machine facts.
    pub machine: MachineInfo,
    /// `maxPods`.
    pub max_pods: i64,
    /// `kubeReserved`.
    pub kube_reserved: BTreeMap<String, String>,
    /// `systemReserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// `evictionHard`.
    pub eviction_hard: BTreeMap<String, String>,
    /// `<runtime>://<version>`.
    pub runtime_version: String,
    /// The kubelet version (`v1.35.0`).
    pub kubelet_version: String,
    /// The kubelet's port (`port`, 10250).
    pub port: i32,
    /// `nodeStatusMaxImages` (-1: no limit).
    pub max_images: i32,
}

/// Health signals for the conditions.
#[derive(Debug, Clone, Default)]
pub struct NodeHealth {
    /// Why the node is not ready (runtime down, PLEG unhealthy, network not ready); empty when ready.
    pub not_ready: Vec<String>,
    /// Memory pressure.
    pub memory_pressure: bool,
    /// Disk pressure.
    pub disk_pressure: bool,
    /// PID pressure.
    pub pid_pressure: bool,
    /// The runtime's handlers and features, as its last ready `Status` gave them.
    pub runtime: RuntimeInfo,
}

/// `status.runtimeHandlers` (`nodestatus.RuntimeHandlers`): every handler with both features, always present.
pub fn runtime_handlers(r: &RuntimeInfo) -> Vec<NodeRuntimeHandler> {
    r.handlers
        .iter()
        .map(|h| NodeRuntimeHandler {
            name: Some(h.name.clone()),
            features: Some(NodeRuntimeHandlerFeatures {
                recursive_read_only_mounts: Some(h.recursive_read_only_mounts),
                user_namespaces: Some(h.user_namespaces),
            }),
        })
        .collect()
}

fn q(s: String) -> Quantity {
    Quantity(s)
}

/// Capacity of the node (`MachineInfo` setter).
pub fn capacity(i: &NodeInputs) -> BTreeMap<String, Quantity> {
    let mut c = BTreeMap::new();
    c.insert("cpu".to_string(), q(i.machine.num_cores.to_string()));
    c.insert("memory".to_string(), q(binary_si(i.machine.memory_capacity as i64)));
    c.insert("pods".to_string(), q(i.max_pods.to_string()));
    c.insert("ephemeral-storage".to_string(), q(binary_si(i.machine.rootfs_capacity as i64)));
    for (size, pages) in &i.machine.hugepages {
        c.insert(format!("hugepages-{}", binary_si(*size as i64)), q(binary_si((size * pages) as i64)));
    }
    c
}

/// Allocatable: capacity minus kubeReserved, systemReserved and the hard eviction thresholds
/// (`GetNodeAllocatableAbsolute`, `hardEvictionReservation`).
pub fn allocatable(i: &NodeInputs) -> BTreeMap<String, Quantity> {
    let mut a = capacity(i);
    let reserved = |res: &str| -> f64 {
        [&i.kube_reserved, &i.system_reserved]
            .iter()
            .filter_map(|m| m.get(res))
            .filter_map(|v| quantity::parse(v))
            .sum()
    };
    let cpu_milli = (i.machine.num_cores as f64 * 1000.0 - reserved("cpu") * 1000.0).max(0.0) as i64;
    a.insert("cpu".into(), q(quantity::cpu(cpu_milli)));
    let mem_evict = i
        .eviction_hard
        .get("memory.available")
        .and_then(|v| quantity::threshold(v, i.machine.memory_capacity as f64))
        .unwrap_or(0.0);
    // Memory held as huge pages is not allocatable as memory (the MachineInfo setter).
    let hugepages: f64 = i.machine.hugepages.iter().map(|(size, pages)| (size * pages) as f64).sum();
    let mem = (i.machine.memory_capacity as f64 - reserved("memory") - mem_evict - hugepages).max(0.0) as i64;
    a.insert("memory".into(), q(binary_si(mem)));
    let fs_evict = i
        .eviction_hard
        .get("nodefs.available")
        .and_then(|v| quantity::threshold(v, i.machine.rootfs_capacity as f64))
        .unwrap_or(0.0);
    let fs = (i.machine.rootfs_capacity as f64 - reserved("ephemeral-storage") - fs_evict).max(0.0) as i64;
    a.insert("ephemeral-storage".into(), q(binary_si(fs)));
    a
}

/// The node allocatable reservation of memory types (`GetNodeAllocatableReservation`'s memory and huge pages): kube-
/// and system-reserved plus, for memory, the hard eviction threshold; in bytes. What the memory manager's
/// `reservedMemory` must add up to.
pub fn memory_reservation(i: &NodeInputs) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for m in [&i.kube_reserved, &i.system_reserved] {
        for (k, v) in m.iter().filter(|(k, _)| k.as_str() == "memory" || k.starts_with("hugepages-")) {
            *out.entry(k.clone()).or_default() += quantity::parse(v).unwrap_or(0.0) as u64;
        }
    }
    let mem_evict = i
        .eviction_hard
        .get("memory.available")
        .and_then(|v| quantity::threshold(v, i.machine.memory_capacity as f64))
        .unwrap_or(0.0);
    if mem_evict > 0.0 || out.contains_key("memory") {
        *out.entry("memory".into()).or_default() += mem_evict as u64;
    }
    out
}

fn addresses(i: &NodeInputs) -> Vec<NodeAddress> {
    let mut v: Vec<NodeAddress> =
        i.node_ips.iter().map(|ip| NodeAddress { type_: "InternalIP".into(), address: ip.clone() }).collect();
    v.push(NodeAddress { type_: "Hostname".into(), address: i.hostname.clone() });
    v
}

fn node_info(i: &NodeInputs) -> NodeSystemInfo {
    NodeSystemInfo {
        machine_id: i.machine.machine_id.clone(),
        system_uuid: i.machine.system_uuid.clone(),
        boot_id: i.machine.boot_id.clone(),
        kernel_version: i.machine.kernel_version.clone(),
        os_image: i.machine.os_image.clone(),
        container_runtime_version: i.runtime_version.clone(),
        kubelet_version: i.kubelet_version.clone(),
        kube_proxy_version: String::new(),
        operating_system: "linux".into(),
        architecture: go_arch().into(),
        // NodeSwap (GA): the machine's swap, when it has any.
        swap: (i.machine.swap_capacity > 0)
            .then_some(k8s_openapi::api::core::v1::NodeSwapStatus { capacity: Some(i.machine.swap_capacity as i64) }),
    }
}

/// The images list: largest first, at most `max_images`, at most 5 names each (`Images` setter).
pub fn images(list: &[NodeImage], max_images: i32) -> Vec<ContainerImage> {
    let mut v: Vec<&NodeImage> = list.iter().filter(|i| !i.names.is_empty()).collect();
    v.sort_by_key(|i| std::cmp::Reverse(i.size));
    if max_images >= 0 {
        v.truncate(max_images as usize);
    }
    v.iter()
        .map(|i| ContainerImage {
            names: Some(i.names.iter().take(MAX_NAMES_PER_IMAGE).cloned().collect()),
            size_bytes: Some(i.size),
        })
        .collect()
}

fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: String,
    now: &Time,
    old: Option<&NodeStatus>,
) -> NodeCondition {
    let s = if status { "True" } else { "False" };
    let prev = old.and_then(|o| o.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == kind));
    let transition = match prev {
        Some(p) if p.status == s => p.last_transition_time.clone().unwrap_or_else(|| now.clone()),
        _ => now.clone(),
    };
    NodeCondition {
        type_: kind.into(),
        status: s.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(transition),
    }
}

/// The conditions, in upstream's order: MemoryPressure, DiskPressure, PIDPressure, Ready.
pub fn conditions(h: &NodeHealth, now: &Time, old: Option<&NodeStatus>) -> Vec<NodeCondition> {
    let mem = if h.memory_pressure {
        condition(
            "MemoryPressure",
            true,
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available".into(),
            now,
            old,
        )
    } else {
        condition(
            "MemoryPressure",
            false,
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available".into(),
            now,
            old,
        )
    };
    let disk = if h.disk_pressure {
        condition("DiskPressure", true, "KubeletHasDiskPressure", "kubelet has disk pressure".into(), now, old)
    } else {
        condition("DiskPressure", false, "KubeletHasNoDiskPressure", "kubelet has no disk pressure".into(), now, old)
    };
    let pid = if h.pid_pressure {
        condition(
            "PIDPressure",
            true,
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available".into(),
            now,
            old,
        )
    } else {
        condition(
            "PIDPressure",
            false,
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available".into(),
            now,
            old,
        )
    };
    let ready = if h.not_ready.is_empty() {
        condition("Ready", true, "KubeletReady", "kubelet is posting ready status".into(), now, old)
    } else {
        condition("Ready", false, "KubeletNotReady", h.not_ready.join(", "), now, old)
    };
    vec![mem, disk, pid, ready]
}

/// The full node status.
pub fn node_status(
    i: &NodeInputs,
    h: &NodeHealth,
    imgs: &[NodeImage],
    now: &Time,
    old: Option<&NodeStatus>,
) -> NodeStatus {
    NodeStatus {
        capacity: Some(capacity(i)),
        allocatable: Some(allocatable(i)),
        conditions: Some(conditions(h, now, old)),
        addresses: Some(addresses(i)),
        daemon_endpoints: Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: i.port }) }),
        node_info: Some(node_info(i)),
        images: Some(images(imgs, i.max_images)),
        runtime_handlers: runtime_handlers_field(&h.runtime),
        features: features_field(&h.runtime),
        ..Default::default()
    }
}

/// The device plugins' resources in the status (the `MachineInfo` setter's device part): each resource's devices
/// in capacity, its healthy ones in allocatable (capacity where the plugin reported none yet), a removed resource
/// at 0 in both (kept, as upstream keeps it, to mark it as a device plugin's).
pub fn set_device_resources(st: &mut NodeStatus, d: &kubelet_cm::devicemanager::Capacity) {
    let cap = st.capacity.get_or_insert_default();
    for (k, v) in &d.capacity {
        cap.insert(k.clone(), q(v.to_string()));
    }
    for k in &d.removed {
        cap.insert(k.clone(), q("0".into()));
    }
    let alloc = st.allocatable.get_or_insert_default();
    for (k, v) in &d.capacity {
        alloc.insert(k.clone(), q(d.allocatable.get(k).unwrap_or(v).to_string()));
    }
    for k in &d.removed {
        alloc.insert(k.clone(), q("0".into()));
    }
}

/// The default labels the kubelet owns (`updateDefaultLabels`).
pub fn default_labels(i: &NodeInputs) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("kubernetes.io/hostname".to_string(), i.hostname.clone());
    l.insert("kubernetes.io/os".to_string(), "linux".to_string());
    l.insert("kubernetes.io/arch".to_string(), go_arch().to_string());
    l.insert("beta.kubernetes.io/os".to_string(), "linux".to_string());
    l.insert("beta.kubernetes.io/arch".to_string(), go_arch().to_string());
    l
}

/// The Node to register (`initialNode`): default labels plus `node_labels`, `registerWithTaints`, and the
/// unschedulable taint when `register_schedulable` is false.
pub fn initial_node(
    i: &NodeInputs,
    node_labels: &BTreeMap<String, String>,
    taints: &[Taint],
    register_schedulable: bool,
) -> Node {
    let mut labels = default_labels(i);
    labels.extend(node_labels.clone());
    let mut taints = taints.to_vec();
    if !register_schedulable {
        taints.push(Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    }
    Node {
        metadata: ObjectMeta {
            name: Some(i.node_name.clone()),
            labels: Some(labels),
            annotations: Some(
                [("volumes.kubernetes.io/controller-managed-attach-detach".to_string(), "true".to_string())].into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            unschedulable: (!register_schedulable).then_some(true),
            ..Default::default()
        }),
        status: None,
    }
}

/// The Node as admission sees it before (or without) an apiserver (`getNodeAnyWay` → `initialNode` with
/// `setNodeStatus`): the initial Node with its capacity and allocatable.
pub fn initial_node_with_status(i: &NodeInputs, node_labels: &BTreeMap<String, String>, taints: &[Taint]) -> Node {
    let mut n = initial_node(i, node_labels, taints, true);
    n.status =
        Some(NodeStatus { capacity: Some(capacity(i)), allocatable: Some(allocatable(i)), ..Default::default() });
    n
}

/// Sets the runtime's handlers and features on a Node (the initial Node that admission reads until the apiserver's
/// is known, and a standalone node's for good): `supplementalGroupsPolicy: Strict` pods are judged by them.
pub fn set_runtime_status(node: &mut Node, info: &RuntimeInfo) {
    let st = node.status.get_or_insert_default();
    st.runtime_handlers = runtime_handlers_field(info);
    st.features = features_field(info);
}

/// `status.runtimeHandlers` as the Node carries it: absent when the runtime reports none.
fn runtime_handlers_field(info: &RuntimeInfo) -> Option<Vec<NodeRuntimeHandler>> {
    Some(runtime_handlers(info)).filter(|l| !l.is_empty())
}

/// `status.features` (`nodestatus.NodeFeatures`): absent when the runtime reports no features.
fn features_field(info: &RuntimeInfo) -> Option<NodeFeatures> {
    info.supplemental_groups_policy.map(|s| NodeFeatures { supplemental_groups_policy: Some(s) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_handlers_and_features_are_reported_as_the_runtime_gives_them() {
        use kubelet_cri::api;
        let features = |rro, userns| {
            Some(api::RuntimeHandlerFeatures { recursive_read_only_mounts: rro, user_namespaces: userns })
        };
        let resp = api::StatusResponse {
            runtime_handlers: vec![
                api::RuntimeHandler { name: "runc".into(), features: features(true, true) },
                api::RuntimeHandler { name: "kata".into(), features: None },
                api::RuntimeHandler { name: "".into(), features: features(true, false) },
            ],
            features: Some(api::RuntimeFeatures { supplemental_groups_policy: true }),
            ..Default::default()
        };
        let h = NodeHealth { runtime: RuntimeInfo::from_cri(&resp), ..Default::default() };
        let st = node_status(&inputs(), &h, &[], &Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap()), None);
        let json = serde_json::to_value(&st).unwrap();
        assert_eq!(
            json["runtimeHandlers"],
            serde_json::json!([
                {"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": true}},
                {"name": "kata", "features": {"recursiveReadOnlyMounts": false, "userNamespaces": false}},
                {"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}},
            ]),
            "in the runtime's order, both features always present"
        );
        assert_eq!(json["features"], serde_json::json!({"supplementalGroupsPolicy": true}));

        // containerd 1.6 reports neither: the fields are left out.
        let st = node_status(
            &inputs(),
            &NodeHealth::default(),
            &[],
            &Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap()),
            None,
        );
        let json = serde_json::to_value(&st).unwrap();
        assert!(json.get("runtimeHandlers").is_none() && json.get("features").is_none(), "{json}");
    }

    fn inputs() -> NodeInputs {
        NodeInputs {
            node_name: "n1".into(),
            hostname: "n1".into(),
            node_ips: vec!["192.0.2.10".into()],
            machine: MachineInfo {
                swap_capacity: 0,
                num_cores: 2,
                memory_capacity: 16_786_669_568,
                rootfs_capacity: 10 * 1024 * 1024 * 1024,
                hugepages: vec![(2 * 1024 * 1024, 0), (1024 * 1024 * 1024, 0)],
                machine_id: "m".into(),
                system_uuid: "u".into(),
                boot_id: "b".into(),
                kernel_version: "6.1.0".into(),
                os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            },
            max_pods: 110,
            kube_reserved: [("cpu".to_string(), "100m".to_string())].into(),
            system_reserved: BTreeMap::new(),
            eviction_hard: [
                ("memory.available".to_string(), "100Mi".to_string()),
                ("nodefs.available".to_string(), "10%".to_string()),
            ]
            .into(),
            runtime_version: "containerd://1.6.20".into(),
            kubelet_version: "v1.34.0".into(),
            port: 10250,
            max_images: 1,
        }
    }

    #[test]
    fn capacity_and_allocatable_as_upstream() {
        let i = inputs();
        let c = capacity(&i);
        assert_eq!(c["cpu"].0, "2");
        assert_eq!(c["memory"].0, "16393232Ki");
        assert_eq!(c["pods"].0, "110");
        assert_eq!(c["ephemeral-storage"].0, "10Gi");
        assert_eq!(c["hugepages-2Mi"].0, "0");
        assert_eq!(c["hugepages-1Gi"].0, "0");
        let a = allocatable(&i);
        assert_eq!(a["cpu"].0, "1900m");
        assert_eq!(a["memory"].0, "16290832Ki", "capacity minus 100Mi");
        assert_eq!(a["ephemeral-storage"].0, "9Gi", "capacity minus 10%");
        // Huge pages the kernel holds are allocatable as such, and no longer as memory.
        let mut i = inputs();
        i.machine.hugepages[0].1 = 4;
        assert_eq!(capacity(&i)["hugepages-2Mi"].0, "8Mi");
        let a = allocatable(&i);
        assert_eq!(a["hugepages-2Mi"].0, "8Mi");
        assert_eq!(a["memory"].0, "16282640Ki", "capacity minus 100Mi and 8Mi of huge pages");
    }

    #[test]
    fn conditions_keep_transition_times_and_say_why() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2000).unwrap());
        let i = inputs();
        let s0 = node_status(&i, &NodeHealth::default(), &[], &t0, None);
        let bad = NodeHealth { not_ready: vec!["container runtime is down".into()], ..Default::default() };
        let s1 = node_status(&i, &bad, &[], &t1, Some(&s0));
        let c = s1.conditions.as_ref().unwrap();
        assert_eq!(
            c.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let ready = &c[3];
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("KubeletNotReady")));
        assert_eq!(ready.message.as_deref(), Some("container runtime is down"));
        assert_eq!(ready.last_transition_time, Some(t1.clone()));
        assert_eq!(c[0].last_transition_time, Some(t0), "unchanged condition keeps its transition time");
        assert_eq!(c[0].last_heartbeat_time, Some(t1));
        let n = initial_node(&i, &BTreeMap::new(), &[], true);
        assert_eq!(n.metadata.labels.as_ref().unwrap()["kubernetes.io/arch"], go_arch());
        let imgs = images(
            &[NodeImage { names: vec!["a".into()], size: 1 }, NodeImage { names: vec!["b".into()], size: 9 }],
            1,
        );
        assert_eq!(imgs[0].names.as_ref().unwrap()[0], "b");
        assert_eq!(s1.node_info.as_ref().unwrap().container_runtime_version, "containerd://1.6.20");
        assert_eq!(s1.addresses.as_ref().unwrap()[0].type_, "InternalIP");
    }
}
