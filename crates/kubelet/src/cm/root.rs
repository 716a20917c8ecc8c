//! The check of `cgroupRoot` at start (`pkg/kubelet/cm/container_manager_linux.go` NewContainerManager, with
//! `cgroup_v1_manager_linux.go` and `cgroup_v2_manager_linux.go` Validate).
//!
//! With `cgroupsPerQOS` the cgroup root must already exist: the kubelet makes `<cgroupRoot>/kubepods` and what is
//! below it, never the root itself (`/`, the default, always exists). Its folder is the driver's form of the root
//! (`/kubeadm-node`, or `/kubeadm_node.slice` with the systemd driver). On cgroup v1 it must be in each mounted
//! hierarchy of those upstream checks (cpu, cpuacct, cpuset, memory, pids, name=systemd, hugetlb; a hierarchy is
//! mounted when its folder has `cgroup.procs`, not when the folder merely exists); on v2 its
//! `cgroup.controllers` must list every controller the kubelet uses (cpu, cpuset, memory, hugetlb, pids) that the
//! mount's root has. Otherwise start-up stops with upstream's `invalid configuration` message.

use std::path::Path;

use kubelet_types::cgroup_name::CgroupName;

/// The v1 hierarchies whose cgroup root folder must exist (upstream's allowlist in `cgroupV1impl.Validate`).
const V1_CHECKED: [&str; 7] = ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd", "hugetlb"];

/// The v2 controllers the kubelet uses (`getSupportedUnifiedControllers`).
const V2_USED: [&str; 5] = ["cpu", "cpuset", "hugetlb", "memory", "pids"];

/// Why the cgroup root cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CgroupRootError {
    /// v1: the root's folder is missing in some hierarchies.
    #[error("invalid configuration: cgroup {name} has some missing paths: {}", paths.join(", "))]
    MissingPaths {
        /// The root.
        name: CgroupName,
        /// The missing folders.
        paths: Vec<String>,
    },
    /// v2: the root's `cgroup.controllers` cannot be read (the root does not exist).
    #[error("invalid configuration: could not read controllers for cgroup {name}: open {path}: {source}")]
    Unreadable {
        /// The root.
        name: CgroupName,
        /// Its `cgroup.controllers`.
        path: String,
        /// What the read said.
        source: std::io::Error,
    },
    /// v2: the root lacks controllers the kubelet uses (its parent does not pass them on).
    #[error("invalid configuration: cgroup {name} has some missing controllers: {}", missing.join(", "))]
    MissingControllers {
        /// The root.
        name: CgroupName,
        /// The controllers missing, sorted.
        missing: Vec<String>,
    },
}

/// Checks that `cgroupRoot` exists under the cgroup mount `mount` (`/sys/fs/cgroup`) in the form of the driver
/// (`systemd`: `cgroupDriver: systemd`).
pub fn validate_cgroup_root(mount: &Path, cgroup_root: &str, systemd: bool) -> Result<(), CgroupRootError> {
    let name = CgroupName::parse_cgroupfs(cgroup_root);
    let literal = name.literal(systemd);
    let rel = literal.trim_start_matches('/');
    if !mount.join("cgroup.controllers").exists() {
        // A mounted hierarchy has `cgroup.procs` at its root (a folder without it is only a mount point).
        let paths: Vec<String> = V1_CHECKED
            .iter()
            .map(|c| mount.join(c))
            .filter(|h| h.join("cgroup.procs").exists())
            .map(|h| h.join(rel))
            .filter(|d| !d.is_dir())
            .map(|d| d.display().to_string())
            .collect();
        return if paths.is_empty() { Ok(()) } else { Err(CgroupRootError::MissingPaths { name, paths }) };
    }
    let controllers = |dir: &Path| std::fs::read_to_string(dir.join("cgroup.controllers"));
    let available = controllers(mount).unwrap_or_default();
    let file = mount.join(rel).join("cgroup.controllers");
    let enabled = controllers(&mount.join(rel)).map_err(|source| CgroupRootError::Unreadable {
        name: name.clone(),
        path: file.display().to_string(),
        source,
    })?;
    let missing: Vec<String> = V2_USED
        .iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| c.to_string())
        .collect();
    if missing.is_empty() { Ok(()) } else { Err(CgroupRootError::MissingControllers { name, missing }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkdirs(base: &Path, dirs: &[&str]) {
        for d in dirs {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
    }

    #[test]
    fn v1_the_root_must_be_in_every_checked_hierarchy_in_the_driver_s_form() {
        let m = tempfile::tempdir().unwrap();
        mkdirs(m.path(), &["cpu,cpuacct", "memory", "pids", "systemd", "freezer", "unified", "hugetlb"]);
        // hugetlb is only a folder where nothing is mounted.
        for h in ["cpu,cpuacct", "memory", "pids", "systemd", "freezer"] {
            std::fs::write(m.path().join(h).join("cgroup.procs"), "").unwrap();
        }
        std::os::unix::fs::symlink(m.path().join("cpu,cpuacct"), m.path().join("cpu")).unwrap();
        std::os::unix::fs::symlink(m.path().join("cpu,cpuacct"), m.path().join("cpuacct")).unwrap();
        for root in ["/", ""] {
            validate_cgroup_root(m.path(), root, false).unwrap();
            validate_cgroup_root(m.path(), root, true).unwrap();
        }
        let e = validate_cgroup_root(m.path(), "/kubeadm-node", false).unwrap_err();
        let p = |h: &str, r: &str| m.path().join(h).join(r).display().to_string();
        assert_eq!(
            e.to_string(),
            format!(
                "invalid configuration: cgroup [\"kubeadm-node\"] has some missing paths: {}, {}, {}, {}, {}",
                p("cpu", "kubeadm-node"),
                p("cpuacct", "kubeadm-node"),
                p("memory", "kubeadm-node"),
                p("pids", "kubeadm-node"),
                p("systemd", "kubeadm-node")
            )
        );
        // Made in some hierarchies only (freezer is not checked): the others are named.
        mkdirs(m.path(), &["cpu,cpuacct/kubeadm-node", "memory/kubeadm-node", "freezer/kubeadm-node"]);
        let e = validate_cgroup_root(m.path(), "/kubeadm-node", false).unwrap_err();
        assert!(
            e.to_string().ends_with(&format!(
                "missing paths: {}, {}",
                p("pids", "kubeadm-node"),
                p("systemd", "kubeadm-node")
            )),
            "{e}"
        );
        mkdirs(m.path(), &["pids/kubeadm-node", "systemd/kubeadm-node"]);
        validate_cgroup_root(m.path(), "/kubeadm-node", false).unwrap();
        // The systemd driver looks for the slice.
        let e = validate_cgroup_root(m.path(), "/kubeadm-node", true).unwrap_err();
        assert!(e.to_string().contains(&p("memory", "kubeadm_node.slice")), "{e}");
        for h in ["cpu,cpuacct", "memory", "pids", "systemd"] {
            mkdirs(m.path(), &[&format!("{h}/a.slice/a-b.slice"), &format!("{h}/a/b")]);
        }
        validate_cgroup_root(m.path(), "/a/b", true).unwrap();
        validate_cgroup_root(m.path(), "/a/b", false).unwrap();
        let e = validate_cgroup_root(m.path(), "/a/c", false).unwrap_err();
        assert!(e.to_string().starts_with("invalid configuration: cgroup [\"a\" \"c\"] has some missing paths"), "{e}");
    }

    #[test]
    fn v2_the_root_must_have_the_controllers_the_kubelet_uses() {
        let m = tempfile::tempdir().unwrap();
        std::fs::write(m.path().join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        validate_cgroup_root(m.path(), "/", false).unwrap();
        validate_cgroup_root(m.path(), "/", true).unwrap();
        let e = validate_cgroup_root(m.path(), "/a/b", false).unwrap_err();
        let file = m.path().join("a/b/cgroup.controllers").display().to_string();
        assert!(
            e.to_string().starts_with(&format!(
                "invalid configuration: could not read controllers for cgroup [\"a\" \"b\"]: open {file}: "
            )),
            "{e}"
        );
        mkdirs(m.path(), &["a/b", "a.slice/a-b.slice"]);
        // The parent passes only cpu and io on; hugetlb is not on this machine, so it is not missed.
        std::fs::write(m.path().join("a/b/cgroup.controllers"), "cpu io\n").unwrap();
        let e = validate_cgroup_root(m.path(), "/a/b", false).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid configuration: cgroup [\"a\" \"b\"] has some missing controllers: cpuset, memory, pids"
        );
        std::fs::write(m.path().join("a/b/cgroup.controllers"), "cpuset cpu memory pids\n").unwrap();
        validate_cgroup_root(m.path(), "/a/b", false).unwrap();
        assert!(validate_cgroup_root(m.path(), "/a/b", true).is_err(), "the slice is another folder");
        std::fs::write(m.path().join("a.slice/a-b.slice/cgroup.controllers"), "cpuset cpu memory pids\n").unwrap();
        validate_cgroup_root(m.path(), "/a/b", true).unwrap();
    }
}
