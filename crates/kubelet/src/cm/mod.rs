//! Pod and QoS cgroups with the cgroupfs driver (`pkg/kubelet/cm/qos_container_manager_linux.go`,
//! `pod_container_manager_linux.go`, `cgroup_manager_linux.go`).
//!
//! The pods cgroup is `<cgroupRoot>/kubepods` ([`kubelet_types::cgroup_name`]; `cgroupRoot` of any depth, `/` by
//! default, must exist: [`root::validate_cgroup_root`] checks it at start as upstream's container manager does).
//! At start the sync loop's owner calls [`PodCgroups::setup_qos`] (creates `kubepods`, `kubepods/burstable`,
//! `kubepods/besteffort` under the root); pod workers call [`PodCgroups::ensure_pod`] before a pod's sandbox is
//! created and [`PodCgroups::destroy_pod`] once nothing of the pod runs; housekeeping lists pod cgroups to remove
//! orphans.
//! Works on cgroup v1 (one folder per controller hierarchy) and v2 (one unified tree). Writing a limit that
//! the kernel refuses is a warning, not an error. Huge page limits: [`hugetlb`].

pub mod dbus;
pub mod hugetlb;
pub mod resize;
pub mod root;
pub mod systemd;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use kubelet_runtime::qos::{pod_qos, pod_resources};
use kubelet_types::cgroup_name::{CgroupName, pod_cgroup, pods_cgroup, qos_cgroups};
use kubelet_types::qos::QosClass;
use kubelet_types::{Pod, PodUid};
use tracing::{debug, warn};

/// What the pod workers and housekeeping need of cgroups.
pub trait PodCgroups: Send + Sync + 'static {
    /// Creates the QoS-level cgroups.
    fn setup_qos(&self) -> std::io::Result<()>;
    /// Creates the pod's cgroup with its limits.
    fn ensure_pod(&self, pod: &Pod) -> std::io::Result<()>;
    /// Removes the pod's cgroup in every hierarchy (its containers must be gone).
    fn destroy_pod(&self, uid: &PodUid) -> std::io::Result<()>;
    /// UIDs of every pod cgroup present.
    fn list_pods(&self) -> Vec<PodUid>;
}

/// The cgroupfs driver over a cgroup mount root (`/sys/fs/cgroup`).
#[derive(Debug, Clone)]
pub struct CgroupfsManager {
    root: PathBuf,
    /// `<cgroupRoot>/kubepods`.
    pods: CgroupName,
    v2: bool,
    /// `cpuCFSQuota`.
    cfs_quota: bool,
    /// Pods whose cgroup gets no CFS quota (`DisableCPUQuotaWithExclusiveCPUs`).
    quota_lift: kubelet_runtime::cpus::QuotaLift,
    /// `podPidsLimit` (-1: none).
    pids_limit: i64,
    /// The node's huge page sizes (`2MB`, ...).
    hugepage_sizes: Vec<String>,
}

/// v1 hierarchies where the kubelet creates the pod cgroup and writes limits; runc creates the others.
const V1_MANAGED: [&str; 4] = ["cpu", "memory", "pids", "hugetlb"];

impl CgroupfsManager {
    /// A manager of the cgroups under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let v2 = root.join("cgroup.controllers").exists();
        Self {
            root,
            pods: pods_cgroup("/"),
            v2,
            cfs_quota: true,
            quota_lift: Default::default(),
            pids_limit: -1,
            hugepage_sizes: vec![],
        }
    }

    /// With `cgroupRoot` (`/kubeadm-node`): the pods cgroup is `<cgroupRoot>/kubepods` instead of `/kubepods`.
    pub fn with_cgroup_root(mut self, cgroup_root: &str) -> Self {
        self.pods = pods_cgroup(cgroup_root);
        self
    }

    /// With the node's huge page sizes (`2MB`, `1GB`), each of which gets a limit where hugetlb is available.
    pub fn with_hugepage_sizes(mut self, sizes: Vec<String>) -> Self {
        self.hugepage_sizes = sizes;
        self
    }

    /// Writes huge page limits into `dir` when its hierarchy has the hugetlb controller (v1: the `hugetlb`
    /// hierarchy; v2: the root lists it), as upstream's maybeSetHugetlb.
    fn write_hugetlb(&self, hierarchy: &Path, dir: &Path, limits: &std::collections::BTreeMap<u64, u64>) {
        let has = if self.v2 {
            hugetlb::support(&self.root, false) == hugetlb::HugetlbSupport::Available
        } else {
            hierarchy.file_name().is_some_and(|n| n == "hugetlb")
        };
        let limits = hugetlb::limits_for(&self.hugepage_sizes, limits);
        if has
            && !limits.is_empty()
            && let Err(e) = hugetlb::write_limits(dir, self.v2, &limits)
        {
            warn!(cgroup = %dir.display(), error = %e, "failed to set hugetlb limits");
        }
    }

    /// With `cpuCFSQuota` and `podPidsLimit`.
    pub fn with_limits(mut self, cfs_quota: bool, pids_limit: i64) -> Self {
        self.cfs_quota = cfs_quota;
        self.pids_limit = pids_limit;
        self
    }

    /// Pods holding exclusive CPUs get no CFS quota on their cgroup (`DisableCPUQuotaWithExclusiveCPUs`).
    pub fn with_quota_lift(mut self, lift: kubelet_runtime::cpus::QuotaLift) -> Self {
        self.quota_lift = lift;
        self
    }

    /// The folders of a pod's cgroup (one per managed hierarchy on v1).
    fn pod_dirs(&self, pod: &Pod) -> Vec<PathBuf> {
        let path = pod_cgroup(&self.pods, pod_qos(pod), pod.metadata.uid.as_deref().unwrap_or("")).to_cgroupfs();
        self.managed().iter().map(|h| h.join(rel(&path))).filter(|d| d.is_dir()).collect()
    }

    /// Every hierarchy root (deduplicated: `cpu` and `cpuacct` are often links to `cpu,cpuacct`).
    fn hierarchies(&self) -> Vec<PathBuf> {
        if self.v2 {
            return vec![self.root.clone()];
        }
        let mut seen = HashSet::new();
        let mut out = vec![];
        if let Ok(rd) = std::fs::read_dir(&self.root) {
            for e in rd.flatten() {
                let p = e.path();
                let canon = std::fs::canonicalize(&p).unwrap_or(p.clone());
                if canon.is_dir() && seen.insert(canon.clone()) {
                    out.push(canon);
                }
            }
        }
        out.sort();
        out
    }

    fn managed(&self) -> Vec<PathBuf> {
        if self.v2 {
            return vec![self.root.clone()];
        }
        V1_MANAGED
            .iter()
            .map(|c| self.root.join(c))
            .filter(|p| p.exists())
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
            .collect()
    }

    fn write(dir: &Path, file: &str, value: &str) {
        if let Err(e) = std::fs::write(dir.join(file), value) {
            debug!(cgroup = %dir.display(), file, value, error = %e, "cgroup write refused");
        }
    }

    /// On v2, turns on every available controller for the children of `dir` (`cgroup.subtree_control`), as
    /// runc's fs2 does along a new cgroup's path: without it the children have no `cpu.weight`, `memory.max` or
    /// `pids.max`.
    fn enable_controllers(dir: &Path) {
        let Ok(available) = std::fs::read_to_string(dir.join("cgroup.controllers")) else { return };
        let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        for c in available.split_whitespace().filter(|c| !enabled.split_whitespace().any(|e| e == *c)) {
            Self::write(dir, "cgroup.subtree_control", &format!("+{c}"));
        }
    }

    /// The pods cgroup and the QoS cgroups in it, relative to a hierarchy root.
    fn qos_parents(&self) -> [String; 3] {
        qos_cgroups(&self.pods).map(|c| rel(&c.to_cgroupfs()).to_string())
    }
}

impl kubelet_runtime::resize::PodCgroupResizer for CgroupfsManager {
    fn pod_config(&self, pod: &Pod) -> std::io::Result<kubelet_runtime::resize::PodCgroupConfig> {
        resize::read_config(&self.pod_dirs(pod), self.v2)
    }
    fn set_pod_config(&self, pod: &Pod, config: &kubelet_runtime::resize::PodCgroupConfig) -> std::io::Result<()> {
        resize::write_config(&self.pod_dirs(pod), self.v2, config)
    }
    fn pod_memory_usage(&self, pod: &Pod) -> std::io::Result<Option<u64>> {
        resize::memory_usage(&self.pod_dirs(pod), self.v2).map(Some)
    }
}

/// The bytes of a page size as cgroups name it (`2MB` → 2 MiB).
fn size_bytes(unit: &str) -> Option<u64> {
    let units = [("KB", 1u64 << 10), ("MB", 1 << 20), ("GB", 1 << 30), ("TB", 1 << 40), ("PB", 1 << 50), ("B", 1)];
    let (n, mult) = units.iter().find_map(|(u, m)| Some((unit.strip_suffix(u)?, *m)))?;
    n.parse::<u64>().ok().map(|n| n * mult)
}

fn rel(path: &str) -> &str {
    path.trim_start_matches('/')
}

impl PodCgroups for CgroupfsManager {
    fn setup_qos(&self) -> std::io::Result<()> {
        let [_, burstable, besteffort] = self.qos_parents();
        for h in self.managed() {
            for q in self.qos_parents() {
                std::fs::create_dir_all(h.join(q))?;
            }
            if self.v2 {
                // As runc's fs2 along a new cgroup's path: every folder from the mount down to the QoS cgroups'
                // parent passes its controllers on (the cgroup root's own are checked at start).
                let mut dir = h.clone();
                Self::enable_controllers(&dir);
                for c in self.pods.components() {
                    dir.push(c);
                    Self::enable_controllers(&dir);
                }
                for q in [&burstable, &besteffort] {
                    Self::enable_controllers(&h.join(q));
                }
            }
            // The QoS tiers have unbounded huge pages (setHugePagesUnbounded).
            let unbounded =
                self.hugepage_sizes.iter().filter_map(|s| Some((size_bytes(s)?, hugetlb::UNBOUNDED))).collect();
            for q in [&burstable, &besteffort] {
                self.write_hugetlb(&h, &h.join(q), &unbounded);
            }
            // BestEffort pods share the minimum: 2 shares, weight 1 on v2 (upstream's QoS manager).
            if self.v2 {
                Self::write(&h.join(&besteffort), "cpu.weight", "1");
            } else {
                Self::write(&h.join(&besteffort), "cpu.shares", "2");
            }
        }
        Ok(())
    }

    fn ensure_pod(&self, pod: &Pod) -> std::io::Result<()> {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let qos = pod_qos(pod);
        let path = pod_cgroup(&self.pods, qos, uid).to_cgroupfs();
        let r = pod_resources(pod, self.cfs_quota && !self.quota_lift.pod(pod), 100_000);
        for h in self.managed() {
            let dir = h.join(rel(&path));
            // Every sync comes here: a stat is cheaper than a mkdir that fails with EEXIST.
            let made = !dir.is_dir();
            if made {
                std::fs::create_dir_all(&dir)?;
                if self.v2 {
                    // The containers' cgroups (made by runc) get the controllers too; once, at creation.
                    Self::enable_controllers(&dir);
                }
            }
            if self.v2 {
                // CPU and memory are written when the cgroup is made (upstream's EnsureExists); afterwards only an
                // in-place resize changes them, in its own order.
                if made {
                    // cpu.weight from shares, as upstream's CpuSharesToCpuWeight.
                    Self::write(&dir, "cpu.weight", &resize::shares_to_weight(r.cpu_shares).to_string());
                    if let (Some(q), Some(p)) = (r.cpu_quota, r.cpu_period) {
                        let max = if q <= 0 { "max".to_string() } else { q.to_string() };
                        Self::write(&dir, "cpu.max", &format!("{max} {p}"));
                    }
                    if let Some(mem) = r.memory {
                        Self::write(&dir, "memory.max", &mem.to_string());
                    }
                }
                if self.pids_limit > 0 {
                    Self::write(&dir, "pids.max", &self.pids_limit.to_string());
                }
                if made {
                    // Huge page requests never change: written once.
                    self.write_hugetlb(&h, &dir, &r.hugepage_limits);
                }
                continue;
            }
            let name = h.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.split(',').any(|c| c == "cpu") {
                if !made {
                    continue;
                }
                Self::write(&dir, "cpu.shares", &r.cpu_shares.to_string());
                if let (Some(q), Some(p)) = (r.cpu_quota, r.cpu_period) {
                    Self::write(&dir, "cpu.cfs_period_us", &p.to_string());
                    Self::write(&dir, "cpu.cfs_quota_us", &q.to_string());
                }
            } else if name == "memory" {
                if let Some(mem) = r.memory.filter(|_| made) {
                    Self::write(&dir, "memory.limit_in_bytes", &mem.to_string());
                }
            } else if name == "pids" && self.pids_limit > 0 {
                Self::write(&dir, "pids.max", &self.pids_limit.to_string());
            } else if name == "hugetlb" && made {
                self.write_hugetlb(&h, &dir, &r.hugepage_limits);
            }
        }
        Ok(())
    }

    fn destroy_pod(&self, uid: &PodUid) -> std::io::Result<()> {
        let mut last_err = None;
        // As upstream's `tryKillingCgroupProcesses`: what is left in the pod's cgroups is killed first (the runtime
        // has stopped everything it knows of; a process it lost, such as a `runc init` of a sandbox half-made when
        // containerd was killed, would keep the folders busy for good).
        let mut killed = 0;
        let pod_dirs = [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort]
            .map(|q| rel(&pod_cgroup(&self.pods, q, uid.as_str()).to_cgroupfs()).to_string());
        for h in self.hierarchies() {
            for pod in &pod_dirs {
                killed += kubelet_runtime::container::kill_cgroup_tree(&h.join(pod));
            }
        }
        if killed > 0 {
            warn!(podUID = %uid.as_str(), killed, "killed processes left in the cgroups of a terminated pod");
        }
        for h in self.hierarchies() {
            for pod in &pod_dirs {
                let dir = h.join(pod);
                if dir.exists()
                    && let Err(e) = remove_tree(&dir)
                {
                    warn!(cgroup = %dir.display(), error = %e, "failed to remove pod cgroup");
                    last_err = Some(e);
                }
            }
        }
        last_err.map_or(Ok(()), Err)
    }

    fn list_pods(&self) -> Vec<PodUid> {
        let mut out = HashSet::new();
        for h in self.managed() {
            for parent in self.qos_parents() {
                if let Ok(rd) = std::fs::read_dir(h.join(parent)) {
                    for e in rd.flatten() {
                        let name = e.file_name().to_string_lossy().into_owned();
                        // The type comes with the directory entry (no stat per pod: this runs every 2 s).
                        if let Some(uid) = name.strip_prefix("pod")
                            && e.file_type().is_ok_and(|t| t.is_dir())
                        {
                            out.insert(PodUid(uid.to_string()));
                        }
                    }
                }
            }
        }
        out.into_iter().collect()
    }
}

/// Removes a cgroup folder and its child cgroups, depth first (cgroup folders are removed with rmdir).
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(&e.path())?;
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A plain folder (tests) holds files; a real cgroup folder only ever needs rmdir.
        Err(_) if !dir.join("cgroup.procs").exists() && !dir.join("tasks").exists() => std::fs::remove_dir_all(dir),
        Err(e) => Err(e),
    }
}

/// No cgroups at all (`cgroupsPerQOS: false`).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCgroups;

impl PodCgroups for NoCgroups {
    fn setup_qos(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn ensure_pod(&self, _pod: &Pod) -> std::io::Result<()> {
        Ok(())
    }
    fn destroy_pod(&self, _uid: &PodUid) -> std::io::Result<()> {
        Ok(())
    }
    fn list_pods(&self) -> Vec<PodUid> {
        vec![]
    }
}

#[cfg(test)]
#[path = "pod_resources_tests.rs"]
mod pod_resources_tests;

#[cfg(test)]
#[path = "cgroup_root_tests.rs"]
mod cgroup_root_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn v1_pod_cgroup_lifecycle() {
        let root = tempfile::tempdir().unwrap();
        for c in ["cpu,cpuacct", "memory", "pids", "freezer"] {
            std::fs::create_dir_all(root.path().join(c)).unwrap();
        }
        std::os::unix::fs::symlink(root.path().join("cpu,cpuacct"), root.path().join("cpu")).unwrap();
        let m = CgroupfsManager::new(root.path());
        m.setup_qos().unwrap();
        assert!(root.path().join("memory/kubepods/besteffort").is_dir());
        let lim: std::collections::BTreeMap<String, Quantity> =
            [("cpu".to_string(), Quantity("500m".into())), ("memory".to_string(), Quantity("64Mi".into()))].into();
        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    resources: Some(ResourceRequirements { limits: Some(lim), ..Default::default() }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        m.ensure_pod(&pod).unwrap();
        let dir = root.path().join("cpu,cpuacct/kubepods/podu1");
        assert_eq!(std::fs::read_to_string(dir.join("cpu.shares")).unwrap(), "512");
        assert_eq!(std::fs::read_to_string(dir.join("cpu.cfs_quota_us")).unwrap(), "50000");
        assert_eq!(
            std::fs::read_to_string(root.path().join("memory/kubepods/podu1/memory.limit_in_bytes")).unwrap(),
            "67108864"
        );
        // runc made the pod's cgroup in another hierarchy too: destroy removes it everywhere.
        std::fs::create_dir_all(root.path().join("freezer/kubepods/podu1/c1")).unwrap();
        assert_eq!(m.list_pods(), vec![PodUid::from("u1")]);
        m.destroy_pod(&PodUid::from("u1")).unwrap();
        assert!(!dir.exists());
        assert!(!root.path().join("freezer/kubepods/podu1").exists());
        assert!(m.list_pods().is_empty());
    }
    #[test]
    fn v2_pod_cgroup_gets_weight_max_and_pids_files() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpuset cpu io memory hugetlb pids\n").unwrap();
        let m = CgroupfsManager::new(root.path()).with_limits(true, 1024);
        m.setup_qos().unwrap();
        assert!(root.path().join("kubepods/burstable").is_dir());
        // A real cgroup2 lists what the parent enabled; the fake tree: every level lists all of them.
        for d in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            std::fs::write(root.path().join(d).join("cgroup.controllers"), "cpu memory pids\n").unwrap();
        }
        m.setup_qos().unwrap();
        assert_eq!(
            std::fs::read_to_string(root.path().join("kubepods/burstable/cgroup.subtree_control")).unwrap(),
            "+pids",
            "each controller is turned on (the fake file keeps the last write)"
        );
        let res = |cpu: &str, mem: &str| -> std::collections::BTreeMap<String, Quantity> {
            [("cpu".to_string(), Quantity(cpu.into())), ("memory".to_string(), Quantity(mem.into()))].into()
        };
        let pod = Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some("u2".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(res("250m", "32Mi")),
                        limits: Some(res("1500m", "128Mi")),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(std::fs::read_to_string(root.path().join("kubepods/besteffort/cpu.weight")).unwrap(), "1");
        m.ensure_pod(&pod).unwrap();
        let dir = root.path().join("kubepods/burstable/podu2");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        // 250m = 256 shares → weight 1 + (254 × 9999) / 262142 = 10, as upstream's CpuSharesToCpuWeight.
        assert_eq!(read("cpu.weight"), "10");
        assert_eq!(read("cpu.max"), "150000 100000");
        assert_eq!(read("memory.max"), "134217728");
        assert_eq!(read("pids.max"), "1024");
        assert_eq!(m.list_pods(), vec![PodUid::from("u2")]);
        m.destroy_pod(&PodUid::from("u2")).unwrap();
        assert!(!dir.exists());
    }
}
