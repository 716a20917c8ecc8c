//! Pod and QoS cgroups with the systemd driver (`cgroupDriver: systemd`: upstream's `cgroup_manager_linux.go`
//! with useSystemd, runc's `libcontainer/cgroups/systemd`).
//!
//! Every kubelet cgroup is a transient slice that systemd owns: `kubepods.slice`, `kubepods-burstable.slice`,
//! `kubepods-besteffort.slice` at start ([`PodCgroups::setup_qos`]) and `kubepods-<qos>-pod<uid>.slice` per pod
//! (under a `cgroupRoot` of `/kubeadm-node` their names start with `kubeadm_node-`, as upstream's `ToSystemd`
//! names them, and the root's slice must already exist: [`super::root`]), made with `StartTransientUnit` (an
//! existing unit gets `SetUnitProperties`) and removed with `StopUnit`, so `systemctl status` shows them and
//! systemd never moves or prunes them. Limits are unit properties (`CPUShares`/`CPUWeight`, `CPUQuotaPerSecUSec`,
//! `MemoryLimit`/`MemoryMax`, `TasksMax`), which systemd writes to the cgroup files. Calls go over systemd's
//! private socket (`/run/systemd/private`), one at a time; a broken connection is made again on the next call. A
//! refused call is an error of the pod's sync, retried with it.
//! [`SystemdCgroups::check`] refuses a node whose PID 1 is not systemd, as upstream's kubelet does.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use kubelet_runtime::qos::{pod_qos, pod_resources};
use kubelet_types::qos::QosClass;
use kubelet_types::{Pod, PodUid};
use tracing::{debug, warn};

use super::PodCgroups;
use super::dbus::{Arg, Connection, DbusError, Value};
use kubelet_types::cgroup_name::{CgroupName, pod_cgroup, pods_cgroup, qos_cgroups};
use kubelet_types::systemd_names::{expand_slice, parent_slice, pod_uid_of};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// The systemd driver over a cgroup mount (`/sys/fs/cgroup`) and systemd's private socket.
pub struct SystemdCgroups {
    socket: PathBuf,
    mount: PathBuf,
    /// `<cgroupRoot>/kubepods`.
    pods: CgroupName,
    v2: bool,
    cfs_quota: bool,
    /// Pods whose cgroup gets no CFS quota (`DisableCPUQuotaWithExclusiveCPUs`).
    quota_lift: kubelet_runtime::cpus::QuotaLift,
    pids_limit: i64,
    pods_limits: Vec<(String, Value)>,
    conn: Mutex<Option<Connection>>,
}

impl std::fmt::Debug for SystemdCgroups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemdCgroups").field("socket", &self.socket).field("v2", &self.v2).finish()
    }
}

fn io_err(e: DbusError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl SystemdCgroups {
    /// A driver talking to the systemd of `socket` about the cgroups under `mount`.
    pub fn new(socket: impl Into<PathBuf>, mount: impl Into<PathBuf>) -> Self {
        let mount = mount.into();
        let v2 = mount.join("cgroup.controllers").exists();
        Self {
            socket: socket.into(),
            mount,
            pods: pods_cgroup("/"),
            v2,
            cfs_quota: true,
            quota_lift: Default::default(),
            pids_limit: -1,
            pods_limits: vec![],
            conn: Mutex::new(None),
        }
    }

    /// With `cgroupRoot` (`/kubeadm-node`): the pods slice is `kubeadm_node-kubepods.slice` instead of
    /// `kubepods.slice`.
    pub fn with_cgroup_root(mut self, cgroup_root: &str) -> Self {
        self.pods = pods_cgroup(cgroup_root);
        self
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

    /// The limits of the pods slice (`kubepods.slice`; node allocatable enforcement,
    /// `enforceNodeAllocatableCgroups`): CPU in millicores, memory and pids.
    pub fn with_pods_allocatable(mut self, cpu_milli: Option<i64>, memory: Option<i64>, pids: Option<i64>) -> Self {
        self.pods_limits = self.limit_props(cpu_milli, memory, pids);
        self
    }

    fn limit_props(&self, cpu_milli: Option<i64>, memory: Option<i64>, pids: Option<i64>) -> Vec<(String, Value)> {
        let shares = cpu_milli.map(kubelet_runtime::config_gen::milli_cpu_to_shares);
        let mut p = self.resource_props(shares, None, memory);
        p.retain(|(k, _)| k != "TasksMax");
        if let Some(n) = pids {
            p.push(("TasksMax".into(), Value::U64(n as u64)));
        }
        p
    }

    /// Limits an existing slice (`systemReservedCgroup: /system.slice` is the unit `system.slice`) with
    /// `SetUnitProperties`, as upstream's enforceExistingCgroup does through the systemd cgroup manager.
    pub fn enforce_existing(
        &self,
        cgroup: &str,
        cpu_milli: Option<i64>,
        memory: Option<i64>,
        pids: Option<i64>,
    ) -> Result<(), String> {
        let unit = cgroup.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
        if !unit.ends_with(".slice") || expand_slice(unit).is_none() {
            return Err(format!("{cgroup:?} is not a systemd slice (e.g. /system.slice)"));
        }
        if !self.tracking_dir(unit).is_dir() {
            return Err(format!("{cgroup:?} cgroup does not exist"));
        }
        let props = self.limit_props(cpu_milli, memory, pids);
        self.call("SetUnitProperties", &[Arg::Str(unit.into()), Arg::Bool(true), Arg::Props(props)])
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Whether systemd runs this node (`/run/systemd/system` exists, as sd_booted and runc's IsRunningSystemd).
    pub fn check(run: &Path) -> Result<(), String> {
        if run.join("systemd/system").is_dir() {
            Ok(())
        } else {
            Err(format!(
                "cgroupDriver (--cgroup-driver) \"systemd\" needs systemd as the node's init, but {} does not exist; \
                 use cgroupDriver: cgroupfs (and SystemdCgroup = false for runc in containerd)",
                run.join("systemd/system").display()
            ))
        }
    }

    fn call(&self, member: &str, args: &[Arg]) -> Result<Option<String>, DbusError> {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(Connection::connect(&self.socket, false)?);
            }
            let c = guard.as_mut().expect("connected above");
            match c.call(Some(DEST), PATH, MANAGER, member, args) {
                Err(DbusError::Io { .. } | DbusError::Protocol(_)) if attempt == 0 => *guard = None,
                r => return r,
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Where a slice's folder is in the hierarchy systemd always makes (name=systemd on v1, the tree on v2).
    fn tracking_dir(&self, unit: &str) -> PathBuf {
        let rel = expand_slice(unit).unwrap_or_default();
        let rel = rel.trim_start_matches('/');
        if self.v2 { self.mount.join(rel) } else { self.mount.join("systemd").join(rel) }
    }

    /// Every folder of a slice (v1: one per hierarchy).
    fn dirs(&self, unit: &str) -> Vec<PathBuf> {
        let rel = expand_slice(unit).unwrap_or_default();
        let rel = rel.trim_start_matches('/').to_string();
        if self.v2 {
            return vec![self.mount.join(rel)];
        }
        let mut v = vec![];
        if let Ok(rd) = std::fs::read_dir(&self.mount) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    v.push(e.path().join(&rel));
                }
            }
        }
        v
    }

    /// The unit properties of limits (runc's genV1/genV2ResourcesProperties).
    fn resource_props(
        &self,
        cpu_shares: Option<i64>,
        quota: Option<(i64, i64)>,
        memory: Option<i64>,
    ) -> Vec<(String, Value)> {
        let mut p = vec![];
        if let Some(shares) = cpu_shares {
            if self.v2 {
                p.push(("CPUWeight".into(), Value::U64((1 + ((shares - 2) * 9999) / 262142) as u64)));
            } else {
                p.push(("CPUShares".into(), Value::U64(shares as u64)));
            }
        }
        if let Some((q, period)) = quota
            && q > 0
            && period > 0
        {
            // systemd takes quota per second, in steps of 10 ms: rounded up as runc does.
            let mut per_sec = (q as u64) * 1_000_000 / (period as u64);
            if !per_sec.is_multiple_of(10_000) {
                per_sec = (per_sec / 10_000 + 1) * 10_000;
            }
            p.push(("CPUQuotaPerSecUSec".into(), Value::U64(per_sec)));
            p.push(("CPUQuotaPeriodUSec".into(), Value::U64(period as u64)));
        }
        if let Some(m) = memory {
            let name = if self.v2 { "MemoryMax" } else { "MemoryLimit" };
            p.push((name.into(), Value::U64(m as u64)));
        }
        if self.pids_limit > 0 {
            p.push(("TasksMax".into(), Value::U64(self.pids_limit as u64)));
        }
        p
    }

    /// Makes (or updates) a slice and waits until its cgroup exists.
    fn start_slice(&self, unit: &str, resources: Vec<(String, Value)>) -> std::io::Result<()> {
        let mut props = vec![
            ("Description".to_string(), Value::Str(format!("libcontainer container {unit}"))),
            ("Wants".to_string(), Value::Strs(vec![parent_slice(unit)])),
            ("DefaultDependencies".to_string(), Value::Bool(false)),
            ("MemoryAccounting".to_string(), Value::Bool(true)),
            ("CPUAccounting".to_string(), Value::Bool(true)),
            ((if self.v2 { "IOAccounting" } else { "BlockIOAccounting" }).to_string(), Value::Bool(true)),
            ("TasksAccounting".to_string(), Value::Bool(true)),
        ];
        props.extend(resources.iter().cloned());
        let args = [Arg::Str(unit.into()), Arg::Str("replace".into()), Arg::Props(props), Arg::NoAux];
        match self.call("StartTransientUnit", &args) {
            Ok(job) => debug!(unit, job = job.as_deref().unwrap_or(""), "transient slice started"),
            Err(DbusError::Remote { name, .. }) if name.ends_with(".UnitExists") => {
                if !resources.is_empty() {
                    let args = [Arg::Str(unit.into()), Arg::Bool(true), Arg::Props(resources)];
                    self.call("SetUnitProperties", &args).map_err(io_err)?;
                }
            }
            Err(e) => return Err(io_err(e)),
        }
        // The job runs after the reply; the folder says it is done (runc waits for the job the same way).
        let dir = self.tracking_dir(unit);
        for _ in 0..500 {
            if dir.is_dir() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(std::io::Error::other(format!("slice {unit}: {} did not appear within 5s", dir.display())))
    }

    fn pod_unit(&self, qos: QosClass, uid: &str) -> String {
        pod_cgroup(&self.pods, qos, uid).unit()
    }
}

impl kubelet_runtime::resize::PodCgroupResizer for SystemdCgroups {
    fn pod_config(&self, pod: &Pod) -> std::io::Result<kubelet_runtime::resize::PodCgroupConfig> {
        let unit = self.pod_unit(pod_qos(pod), pod.metadata.uid.as_deref().unwrap_or(""));
        super::resize::read_config(&self.dirs(&unit), self.v2)
    }

    /// Through systemd first (`SetUnitProperties`, so it keeps them), then in the files, as runc's systemd manager.
    fn set_pod_config(&self, pod: &Pod, config: &kubelet_runtime::resize::PodCgroupConfig) -> std::io::Result<()> {
        let unit = self.pod_unit(pod_qos(pod), pod.metadata.uid.as_deref().unwrap_or(""));
        let quota = config.cpu_quota.map(|q| (q, config.cpu_period.unwrap_or(100_000)));
        let mut props = self.resource_props(config.cpu_shares, quota, config.memory.filter(|m| *m != i64::MAX));
        props.retain(|(k, _)| k != "TasksMax");
        if config.cpu_quota.is_some_and(|q| q <= 0) {
            props.push(("CPUQuotaPerSecUSec".into(), Value::U64(u64::MAX)));
        }
        if config.memory == Some(i64::MAX) {
            props.push(((if self.v2 { "MemoryMax" } else { "MemoryLimit" }).into(), Value::U64(u64::MAX)));
        }
        if !props.is_empty() {
            let args = [Arg::Str(unit.clone()), Arg::Bool(true), Arg::Props(props)];
            self.call("SetUnitProperties", &args).map_err(io_err)?;
        }
        super::resize::write_config(&self.dirs(&unit), self.v2, config)
    }

    fn pod_memory_usage(&self, pod: &Pod) -> std::io::Result<Option<u64>> {
        let unit = self.pod_unit(pod_qos(pod), pod.metadata.uid.as_deref().unwrap_or(""));
        super::resize::memory_usage(&self.dirs(&unit), self.v2).map(Some)
    }
}

impl PodCgroups for SystemdCgroups {
    fn setup_qos(&self) -> std::io::Result<()> {
        let [pods, burstable, besteffort] = qos_cgroups(&self.pods).map(|c| c.unit());
        self.start_slice(&pods, self.pods_limits.clone())?;
        self.start_slice(&burstable, vec![])?;
        self.start_slice(&besteffort, self.resource_props(Some(2), None, None))
    }

    fn ensure_pod(&self, pod: &Pod) -> std::io::Result<()> {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let unit = self.pod_unit(pod_qos(pod), uid);
        // Every sync comes here: the slice is made once (limits change only with the pod, as upstream's
        // EnsureExists).
        if self.tracking_dir(&unit).is_dir() {
            return Ok(());
        }
        let r = pod_resources(pod, self.cfs_quota && !self.quota_lift.pod(pod), 100_000);
        let quota = r.cpu_quota.zip(r.cpu_period);
        self.start_slice(&unit, self.resource_props(Some(r.cpu_shares), quota, r.memory))
    }

    fn destroy_pod(&self, uid: &PodUid) -> std::io::Result<()> {
        let mut last = None;
        for qos in [QosClass::Guaranteed, QosClass::Burstable, QosClass::BestEffort] {
            let unit = self.pod_unit(qos, uid.as_str());
            if !self.tracking_dir(&unit).is_dir() {
                continue;
            }
            let killed: usize = self.dirs(&unit).iter().map(|d| kubelet_runtime::container::kill_cgroup_tree(d)).sum();
            if killed > 0 {
                warn!(podUID = %uid.as_str(), killed, "killed processes left in the cgroups of a terminated pod");
            }
            if let Err(e) = self.call("StopUnit", &[Arg::Str(unit.clone()), Arg::Str("replace".into())])
                && !matches!(&e, DbusError::Remote { name, .. } if name.ends_with(".NoSuchUnit"))
            {
                warn!(unit, error = %e, "failed to stop pod slice");
                last = Some(io_err(e));
            }
        }
        last.map_or(Ok(()), Err)
    }

    fn list_pods(&self) -> Vec<PodUid> {
        let mut out = vec![];
        for parent in qos_cgroups(&self.pods).map(|c| c.unit()) {
            if let Ok(rd) = std::fs::read_dir(self.tracking_dir(&parent)) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if let Some(uid) = pod_uid_of(&name)
                        && e.file_type().is_ok_and(|t| t.is_dir())
                    {
                        out.push(PodUid(uid));
                    }
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_become_upstream_s_unit_properties() {
        let v1 = SystemdCgroups::new("/nonexistent", "/nonexistent").with_limits(true, 512);
        let p = v1.resource_props(Some(512), Some((150_000, 100_000)), Some(128 << 20));
        assert_eq!(
            p,
            vec![
                ("CPUShares".to_string(), Value::U64(512)),
                ("CPUQuotaPerSecUSec".to_string(), Value::U64(1_500_000)),
                ("CPUQuotaPeriodUSec".to_string(), Value::U64(100_000)),
                ("MemoryLimit".to_string(), Value::U64(128 << 20)),
                ("TasksMax".to_string(), Value::U64(512)),
            ]
        );
        // 1 ms of a 100 ms period is 10 ms per second, already a step; 1.5 ms is rounded up to 20 ms.
        let q = |quota| v1.resource_props(None, Some((quota, 100_000)), None)[0].1.clone();
        assert_eq!(q(1_000), Value::U64(10_000));
        assert_eq!(q(1_500), Value::U64(20_000));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        let v2 = SystemdCgroups::new("/nonexistent", dir.path());
        let p = v2.resource_props(Some(2), None, Some(1 << 30));
        assert_eq!(p, vec![("CPUWeight".to_string(), Value::U64(1)), ("MemoryMax".to_string(), Value::U64(1 << 30))]);
        assert_eq!(v2.pod_unit(QosClass::Guaranteed, "a-b"), "kubepods-poda_b.slice");
        assert_eq!(
            v2.tracking_dir("kubepods-besteffort.slice"),
            dir.path().join("kubepods.slice/kubepods-besteffort.slice")
        );
    }

    #[test]
    fn under_a_cgroup_root_the_slices_are_named_as_upstream_s_to_systemd_and_pods_are_found_there() {
        for (root, prefix, path) in [
            ("/", "kubepods", "kubepods.slice"),
            ("/kubeadm-node", "kubeadm_node-kubepods", "kubeadm_node.slice/kubeadm_node-kubepods.slice"),
            ("/a/b", "a-b-kubepods", "a.slice/a-b.slice/a-b-kubepods.slice"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("systemd")).unwrap();
            let v1 = SystemdCgroups::new("/nonexistent", dir.path()).with_cgroup_root(root);
            let [pods, burstable, besteffort] = qos_cgroups(&v1.pods).map(|c| c.unit());
            assert_eq!(
                [pods.as_str(), &burstable, &besteffort],
                [format!("{prefix}.slice"), format!("{prefix}-burstable.slice"), format!("{prefix}-besteffort.slice")]
            );
            let unit = v1.pod_unit(QosClass::BestEffort, "u-1");
            assert_eq!(unit, format!("{prefix}-besteffort-podu_1.slice"));
            let tracking = dir.path().join("systemd").join(path);
            assert_eq!(v1.tracking_dir(&unit), tracking.join(format!("{prefix}-besteffort.slice")).join(&unit));
            // The pods systemd made in the slices of this root are the ones listed.
            std::fs::create_dir_all(v1.tracking_dir(&unit)).unwrap();
            std::fs::create_dir_all(v1.tracking_dir(&v1.pod_unit(QosClass::Guaranteed, "u-2"))).unwrap();
            // Another root's pod (the default root's, or one under `/other`) is not.
            let foreign = if root == "/" { "other.slice/other-kubepods.slice" } else { "kubepods.slice" };
            let foreign_prefix = foreign.rsplit('/').next().unwrap().trim_end_matches(".slice");
            std::fs::create_dir_all(
                dir.path().join("systemd").join(foreign).join(format!("{foreign_prefix}-pod9.slice")),
            )
            .unwrap();
            assert_eq!(v1.list_pods(), vec![PodUid::from("u-1"), PodUid::from("u-2")], "{root}");
        }
    }

    #[test]
    fn a_node_without_systemd_is_refused_with_what_to_do() {
        let run = tempfile::tempdir().unwrap();
        let e = SystemdCgroups::check(run.path()).unwrap_err();
        assert!(e.contains("needs systemd as the node's init") && e.contains("cgroupDriver: cgroupfs"), "{e}");
        std::fs::create_dir_all(run.path().join("systemd/system")).unwrap();
        assert!(SystemdCgroups::check(run.path()).is_ok());
    }
}
