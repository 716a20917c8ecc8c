//! Cgroup names as upstream's `pkg/kubelet/cm/cgroup_manager_linux.go` has them (`CgroupName`,
//! `ParseCgroupfsToCgroupName`, `ToCgroupfs`, `ToSystemd`), and the names of the kubelet's own cgroups:
//! the pods cgroup `<cgroupRoot>/kubepods` (`container_manager_linux.go`, `defaultNodeAllocatableCgroupName`), the
//! QoS cgroups `burstable` and `besteffort` in it (`qos_container_manager_linux.go`) and `pod<uid>` in the pod's
//! QoS cgroup (`pod_container_manager_linux.go`; Guaranteed pods sit in the pods cgroup itself).
//!
//! A name is its list of components, whatever the driver: `cgroupRoot: /kubeadm-node` is `[kubeadm-node]` and its
//! pods cgroup `[kubeadm-node, kubepods]`, which the cgroupfs driver writes `/kubeadm-node/kubepods` and the systemd
//! driver `/kubeadm_node.slice/kubeadm_node-kubepods.slice` (the unit `kubeadm_node-kubepods.slice`: each `-` of a
//! component becomes `_`, and the components are joined with `-`). The default root `/` has no component: the pods
//! cgroup is `/kubepods` or `/kubepods.slice`. Pure functions.

use crate::qos::QosClass;
use crate::systemd_names::{expand_slice, slice_name};

/// The kubelet's name of a cgroup: its path components below the hierarchy root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CgroupName(Vec<String>);

/// The cgroup of every pod, under `cgroupRoot` (upstream's `defaultNodeAllocatableCgroupName`).
pub const NODE_ALLOCATABLE_CGROUP: &str = "kubepods";

impl CgroupName {
    /// The root of the hierarchy (`/`).
    pub fn root() -> Self {
        Self(vec![])
    }

    /// A cgroupfs path as a name (`ParseCgroupfsToCgroupName`): `/a/b` is `[a, b]`, `/` and the empty string the
    /// root. Empty components (`/a//b/`) are dropped: upstream keeps them, and its systemd driver then panics.
    pub fn parse_cgroupfs(path: &str) -> Self {
        Self(path.split('/').filter(|c| !c.is_empty()).map(str::to_string).collect())
    }

    /// The child cgroup `component` (`NewCgroupName`).
    pub fn child(&self, component: &str) -> Self {
        let mut parts = self.0.clone();
        parts.push(component.to_string());
        Self(parts)
    }

    /// The components, outermost first.
    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// The cgroupfs form (`ToCgroupfs`): `/a/b`, `/` for the root.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The systemd slice unit of the cgroup (`a-b.slice`; `-.slice` for the root).
    pub fn unit(&self) -> String {
        let parts: Vec<&str> = self.0.iter().map(String::as_str).collect();
        slice_name(&parts)
    }

    /// The systemd form in the hierarchy (`ToSystemd`): `/a.slice/a-b.slice`, `/` for the root.
    pub fn to_systemd(&self) -> String {
        expand_slice(&self.unit()).unwrap_or_else(|| "/".into())
    }

    /// The path in the hierarchy the driver gives the cgroup (upstream's `cgroupManager.Name`).
    pub fn literal(&self, systemd: bool) -> String {
        if systemd { self.to_systemd() } else { self.to_cgroupfs() }
    }
}

/// As Go's `%q` prints a `CgroupName` in upstream's messages: `["kubeadm-node"]`, `["a" "b"]`, `[]`.
impl std::fmt::Display for CgroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let quoted: Vec<String> = self.0.iter().map(|c| format!("{c:?}")).collect();
        write!(f, "[{}]", quoted.join(" "))
    }
}

/// The pods cgroup of `cgroupRoot` with `cgroupsPerQOS`: `<cgroupRoot>/kubepods`. An empty `cgroupRoot` is `/`, as
/// upstream's `server.go` defaults it.
pub fn pods_cgroup(cgroup_root: &str) -> CgroupName {
    CgroupName::parse_cgroupfs(cgroup_root).child(NODE_ALLOCATABLE_CGROUP)
}

/// The QoS cgroup of `qos` in the pods cgroup `pods`: `pods` itself for Guaranteed, else its `burstable` or
/// `besteffort` child.
pub fn qos_cgroup(pods: &CgroupName, qos: QosClass) -> CgroupName {
    match qos {
        QosClass::Guaranteed => pods.clone(),
        QosClass::Burstable => pods.child("burstable"),
        QosClass::BestEffort => pods.child("besteffort"),
    }
}

/// The QoS cgroups that hold pods, the pods cgroup first.
pub fn qos_cgroups(pods: &CgroupName) -> [CgroupName; 3] {
    [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort].map(|q| qos_cgroup(pods, q))
}

/// The cgroup of pod `uid` of class `qos`: `pod<uid>` in its QoS cgroup.
pub fn pod_cgroup(pods: &CgroupName, qos: QosClass, uid: &str) -> CgroupName {
    qos_cgroup(pods, qos).child(&format!("pod{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_of_any_depth_in_both_forms_as_upstream() {
        let uid = "8dbc5a4c-6ef9-4e1f";
        for (root, cgroupfs, systemd) in [
            (
                "/",
                "/kubepods/burstable/pod8dbc5a4c-6ef9-4e1f",
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8dbc5a4c_6ef9_4e1f.slice",
            ),
            (
                "",
                "/kubepods/burstable/pod8dbc5a4c-6ef9-4e1f",
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8dbc5a4c_6ef9_4e1f.slice",
            ),
            (
                "/kubeadm-node",
                "/kubeadm-node/kubepods/burstable/pod8dbc5a4c-6ef9-4e1f",
                "/kubeadm_node.slice/kubeadm_node-kubepods.slice/kubeadm_node-kubepods-burstable.slice/\
                 kubeadm_node-kubepods-burstable-pod8dbc5a4c_6ef9_4e1f.slice",
            ),
            (
                "/a/b/",
                "/a/b/kubepods/burstable/pod8dbc5a4c-6ef9-4e1f",
                "/a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-burstable.slice/\
                 a-b-kubepods-burstable-pod8dbc5a4c_6ef9_4e1f.slice",
            ),
        ] {
            let pods = pods_cgroup(root);
            let pod = pod_cgroup(&pods, QosClass::Burstable, uid);
            assert_eq!(pod.literal(false), cgroupfs, "root {root:?}");
            assert_eq!(pod.literal(true), systemd, "root {root:?}");
        }
        let pods = pods_cgroup("/a/b");
        assert_eq!(pods.unit(), "a-b-kubepods.slice");
        assert_eq!(qos_cgroup(&pods, QosClass::BestEffort).unit(), "a-b-kubepods-besteffort.slice");
        assert_eq!(pod_cgroup(&pods, QosClass::Guaranteed, "u-1").unit(), "a-b-kubepods-podu_1.slice");
        assert_eq!(pod_cgroup(&pods, QosClass::Guaranteed, "u-1").to_cgroupfs(), "/a/b/kubepods/podu-1");
        assert_eq!(
            qos_cgroups(&pods_cgroup("/")).map(|c| c.to_cgroupfs()),
            ["/kubepods", "/kubepods/burstable", "/kubepods/besteffort"]
        );
        assert_eq!(CgroupName::root().to_cgroupfs(), "/");
        assert_eq!(CgroupName::root().to_systemd(), "/");
        assert_eq!(CgroupName::parse_cgroupfs("/kubeadm-node").to_string(), r#"["kubeadm-node"]"#);
        assert_eq!(CgroupName::parse_cgroupfs("/a/b").to_string(), r#"["a" "b"]"#);
        assert_eq!(CgroupName::root().to_string(), "[]");
    }
}
