//! Huge page limits of the kubelet's cgroups (`pkg/kubelet/cm/cgroup_manager_linux.go` maybeSetHugetlb,
//! `qos_container_manager_linux.go` setHugePagesUnbounded, `opencontainers/cgroups` fs/hugetlb.go and
//! fs2/hugetlb.go), and the refusal of pods with huge pages where the node cannot limit them.
//!
//! Contract: a pod cgroup gets a limit for every huge page size of the node (its huge page requests, 0 for the
//! other sizes), the QoS cgroups an unbounded one (2^62 bytes); v1 writes `hugetlb.<size>.limit_in_bytes`, v2
//! `hugetlb.<size>.max`, and the `.rsvd` variants where the kernel has them. Upstream skips all of it, silently,
//! when the hugetlb controller is not in the hierarchy its driver uses (as on a v1/v2 hybrid host whose hugetlb is
//! bound to the v2 mount); rkubelet refuses a pod asking for huge pages on such a node at admission instead
//! ([`HugePagesAdmit`]), with the systemd driver too (rkubelet does not give its slices hugetlb limits).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubelet_types::Pod;
use kubelet_types::resources::{hugepage_resources, hugepage_unit_size};

use crate::admission::{AdmitResult, PodAdmitHandler};

/// The limit of the QoS cgroups (`setHugePagesUnbounded`).
pub const UNBOUNDED: u64 = 1 << 62;

/// The limits to write (`maybeSetHugetlb`): `limits` (bytes by page size in bytes) for the node's page sizes
/// (`2MB`, ...), 0 for the sizes it does not name; sizes the node does not have are left out.
pub fn limits_for(node_sizes: &[String], limits: &BTreeMap<u64, u64>) -> Vec<(String, u64)> {
    let named: BTreeMap<String, u64> =
        limits.iter().filter_map(|(size, l)| Some((hugepage_unit_size(*size).ok()?, *l))).collect();
    node_sizes.iter().map(|s| (s.clone(), named.get(s).copied().unwrap_or(0))).collect()
}

/// Writes `limits` into the cgroup folder `dir` (v2 `.max` files, v1 `.limit_in_bytes`), each also to its
/// `.rsvd` file until the kernel shows it has none. The first refused write is returned.
pub fn write_limits(dir: &Path, v2: bool, limits: &[(String, u64)]) -> std::io::Result<()> {
    let suffix = if v2 { "max" } else { "limit_in_bytes" };
    let mut rsvd = true;
    for (size, limit) in limits {
        std::fs::write(dir.join(format!("hugetlb.{size}.{suffix}")), limit.to_string())?;
        if !rsvd {
            continue;
        }
        // Never created: a kernel without reservation accounting has no such file (runc's WriteFile).
        let reserved = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(dir.join(format!("hugetlb.{size}.rsvd.{suffix}")))
            .and_then(|mut f| std::io::Write::write_all(&mut f, limit.to_string().as_bytes()));
        if let Err(e) = reserved {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(e);
            }
            rsvd = false;
        }
    }
    Ok(())
}

/// Whether the node can limit huge pages for rkubelet's pods, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HugetlbSupport {
    /// The controller is in the hierarchy the pod cgroups live in.
    Available,
    /// It is not: the reason, for the refusal's message.
    Missing(String),
}

/// What the cgroupfs or systemd driver can do with the cgroup mount `root` (`/sys/fs/cgroup`): on v2 the root
/// must list `hugetlb` in `cgroup.controllers`; on v1 a `hugetlb` hierarchy must be mounted at `root/hugetlb`.
pub fn support(root: &Path, systemd: bool) -> HugetlbSupport {
    if systemd {
        return HugetlbSupport::Missing(
            "rkubelet does not set hugetlb limits on the systemd driver's slices (cgroupDriver: systemd); \
             use cgroupDriver: cgroupfs to run pods with huge pages"
                .into(),
        );
    }
    let controllers = root.join("cgroup.controllers");
    if let Ok(list) = std::fs::read_to_string(&controllers) {
        if list.split_whitespace().any(|c| c == "hugetlb") {
            return HugetlbSupport::Available;
        }
        return HugetlbSupport::Missing(format!(
            "the hugetlb controller is not available in the cgroup v2 hierarchy ({} does not list it)",
            controllers.display()
        ));
    }
    if root.join("hugetlb").is_dir() {
        return HugetlbSupport::Available;
    }
    HugetlbSupport::Missing(format!(
        "no cgroup v1 hugetlb hierarchy is mounted at {} (on this node the controller is bound elsewhere, or \
         not at all); mount one there, or run the node on cgroup v2",
        root.join("hugetlb").display()
    ))
}

/// Refuses pods that ask for huge pages where the node cannot limit them (see the module's contract): the
/// reason `HugePagesNotSupported`, a message naming the resources and why.
#[derive(Debug, Clone)]
pub struct HugePagesAdmit {
    /// What the node can do.
    pub support: HugetlbSupport,
}

/// The reason of [`HugePagesAdmit`]'s refusals.
pub const HUGEPAGES_NOT_SUPPORTED: &str = "HugePagesNotSupported";

impl HugePagesAdmit {
    /// The handler for the cgroup mount `root` and driver.
    pub fn new(root: impl Into<PathBuf>, systemd: bool) -> Self {
        Self { support: support(&root.into(), systemd) }
    }
}

impl PodAdmitHandler for HugePagesAdmit {
    fn admit(&self, pod: &Pod, _others: &[std::sync::Arc<Pod>]) -> Option<AdmitResult> {
        let HugetlbSupport::Missing(why) = &self.support else { return None };
        let names = hugepage_resources(pod);
        if names.is_empty() {
            return None;
        }
        Some(AdmitResult {
            reason: HUGEPAGES_NOT_SUPPORTED.into(),
            message: format!("pod asks for {}, but this node cannot limit huge pages: {why}", names.join(", ")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn hugepage_pod() -> Pod {
        let lim = [("hugepages-2Mi".to_string(), Quantity("4Mi".into())), ("memory".into(), Quantity("64Mi".into()))];
        let c = Container {
            name: "a".into(),
            resources: Some(ResourceRequirements { limits: Some(lim.into()), ..Default::default() }),
            ..Default::default()
        };
        Pod { spec: Some(PodSpec { containers: vec![c], ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn pods_with_huge_pages_are_refused_where_no_hierarchy_has_hugetlb() {
        let root = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory", "pids"] {
            std::fs::create_dir(root.path().join(c)).unwrap();
        }
        let h = HugePagesAdmit::new(root.path(), false);
        let r = h.admit(&hugepage_pod(), &[]).expect("refused");
        assert_eq!(r.reason, "HugePagesNotSupported");
        assert!(
            r.message.starts_with("pod asks for hugepages-2Mi, but this node cannot limit huge pages: no cgroup v1"),
            "{}",
            r.message
        );
        assert_eq!(h.admit(&Pod { spec: Some(PodSpec::default()), ..Default::default() }, &[]), None);
        // With a hugetlb hierarchy the pod is admitted.
        std::fs::create_dir(root.path().join("hugetlb")).unwrap();
        assert_eq!(HugePagesAdmit::new(root.path(), false).admit(&hugepage_pod(), &[]), None);
        // The systemd driver does not limit huge pages: refused.
        let r = HugePagesAdmit::new(root.path(), true).admit(&hugepage_pod(), &[]).unwrap();
        assert!(r.message.contains("cgroupDriver: systemd"), "{}", r.message);
    }

    #[test]
    fn on_cgroup_v2_the_root_must_list_hugetlb() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        assert!(matches!(support(root.path(), false), HugetlbSupport::Missing(m) if m.contains("cgroup v2")));
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory hugetlb pids\n").unwrap();
        assert_eq!(support(root.path(), false), HugetlbSupport::Available);
    }

    #[test]
    fn limits_cover_every_size_of_the_node_and_reserved_files_when_present() {
        let sizes = vec!["2MB".to_string(), "1GB".to_string()];
        let l = limits_for(&sizes, &[(2 << 20, 4 << 20), (64 << 10, 1 << 20)].into());
        assert_eq!(l, vec![("2MB".to_string(), 4 << 20), ("1GB".to_string(), 0)]);
        let dir = tempfile::tempdir().unwrap();
        // v2 with reserved files (the fake tree has them only where they are made).
        std::fs::write(dir.path().join("hugetlb.2MB.rsvd.max"), "").unwrap();
        write_limits(dir.path(), true, &l).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("hugetlb.2MB.max"), "4194304");
        assert_eq!(read("hugetlb.2MB.rsvd.max"), "4194304");
        assert_eq!(read("hugetlb.1GB.max"), "0");
        assert!(!dir.path().join("hugetlb.1GB.rsvd.max").exists(), "a missing reserved file is not made");
    }
}
