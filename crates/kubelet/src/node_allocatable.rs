//! Node allocatable enforcement (`pkg/kubelet/cm/node_container_manager_linux.go`
//! enforceNodeAllocatableCgroups, enforceExistingCgroup) on the cgroupfs driver, cgroup v1 or v2.
//!
//! Called once at start by the binary, after the QoS cgroups exist and before any pod starts:
//! - the pods cgroup (`<cgroupRoot>/kubepods`) always gets CPU shares, a memory limit and a pids limit: the node's
//!   capacity, or its allocatable (capacity − systemReserved − kubeReserved; the eviction reservation is not
//!   subtracted, as upstream) when `enforceNodeAllocatable` has `pods`;
//! - with `system-reserved` / `kube-reserved`, the existing `systemReservedCgroup` / `kubeReservedCgroup` gets the
//!   reservation as its limits (the `-compressible` variants: CPU only). A missing cgroup is an error naming it.
//!
//! On cgroup v1 the CPU goes to `cpu.shares`, memory to `memory.limit_in_bytes`, pids to `pids.max`; on v2 to
//! `cpu.weight` (from the shares, as upstream's CpuSharesToCpuWeight), `memory.max` and `pids.max`. Any write the
//! kernel refuses is an error: upstream's kubelet does not start with limits it could not apply.

use std::path::{Path, PathBuf};

use kubelet_runtime::config_gen::milli_cpu_to_shares;

/// Amounts of the enforced resources; `None` leaves a limit alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    /// CPU in millicores.
    pub cpu_milli: Option<i64>,
    /// Memory in bytes.
    pub memory: Option<i64>,
    /// Process IDs.
    pub pids: Option<i64>,
}

impl Amounts {
    fn minus(self, a: Amounts, b: Amounts) -> Amounts {
        let sub =
            |x: Option<i64>, y: Option<i64>, z: Option<i64>| x.map(|x| (x - y.unwrap_or(0) - z.unwrap_or(0)).max(0));
        Amounts {
            cpu_milli: sub(self.cpu_milli, a.cpu_milli, b.cpu_milli),
            memory: sub(self.memory, a.memory, b.memory),
            pids: sub(self.pids, a.pids, b.pids),
        }
    }

    fn cpu_only(self) -> Amounts {
        Amounts { cpu_milli: self.cpu_milli, ..Default::default() }
    }
}

/// What to enforce.
#[derive(Debug, Clone, Default)]
pub struct EnforceConfig {
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub mount: PathBuf,
    /// The pods cgroup relative to the hierarchy roots (`kubepods`).
    pub pods_cgroup: String,
    /// The node's capacity (cpu, memory, pid_max).
    pub capacity: Amounts,
    /// `systemReserved`.
    pub system_reserved: Amounts,
    /// `kubeReserved`.
    pub kube_reserved: Amounts,
    /// `enforceNodeAllocatable`.
    pub enforce: Vec<String>,
    /// `systemReservedCgroup`.
    pub system_reserved_cgroup: String,
    /// `kubeReservedCgroup`.
    pub kube_reserved_cgroup: String,
}

/// What was applied, as upstream's events say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The event message (`Updated Node Allocatable limit across pods`).
    pub message: String,
}

/// Why enforcement failed (upstream's `FailedNodeAllocatableEnforcement` message).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct EnforceError(pub String);

fn v2(mount: &Path) -> bool {
    mount.join("cgroup.controllers").exists()
}

/// Where each controller's file of `cgroup` is: (controller, folder).
fn folders(mount: &Path, cgroup: &str) -> Vec<(&'static str, PathBuf)> {
    let rel = cgroup.trim_start_matches('/');
    if v2(mount) {
        let d = mount.join(rel);
        return vec![("cpu", d.clone()), ("memory", d.clone()), ("pids", d)];
    }
    ["cpu", "memory", "pids"].iter().map(|c| (*c, mount.join(c).join(rel))).collect()
}

fn write(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| format!("write {value} to {}: {e}", dir.join(file).display()))
}

/// Writes `amounts` as the limits of `cgroup`.
fn apply(mount: &Path, cgroup: &str, amounts: Amounts) -> Result<(), String> {
    let v2 = v2(mount);
    for (controller, dir) in folders(mount, cgroup) {
        match controller {
            "cpu" => {
                if let Some(m) = amounts.cpu_milli {
                    let shares = milli_cpu_to_shares(m);
                    if v2 {
                        write(&dir, "cpu.weight", &(1 + ((shares - 2) * 9999) / 262142).to_string())?;
                    } else {
                        write(&dir, "cpu.shares", &shares.to_string())?;
                    }
                }
            }
            "memory" => {
                if let Some(b) = amounts.memory {
                    write(&dir, if v2 { "memory.max" } else { "memory.limit_in_bytes" }, &b.to_string())?;
                }
            }
            _ => {
                if let Some(p) = amounts.pids {
                    write(&dir, "pids.max", &p.to_string())?;
                }
            }
        }
    }
    Ok(())
}

fn enforce_existing(mount: &Path, cgroup: &str, amounts: Amounts) -> Result<(), String> {
    if let Some((_, d)) = folders(mount, cgroup).into_iter().find(|(_, d)| !d.is_dir()) {
        return Err(format!("{cgroup:?} cgroup does not exist ({} is missing)", d.display()));
    }
    apply(mount, cgroup, amounts)
}

/// Capacity less the kube and system reservations, whatever is enforced (`GetNodeAllocatableAbsolute`): what a pod's
/// resize is checked against.
pub fn allocatable_absolute(c: &EnforceConfig) -> Amounts {
    c.capacity.minus(c.system_reserved, c.kube_reserved)
}

/// The pods cgroup's amounts: allocatable with `pods` enforced, else the capacity.
pub fn pods_amounts(c: &EnforceConfig) -> Amounts {
    if c.enforce.iter().any(|e| e == "pods") {
        c.capacity.minus(c.system_reserved, c.kube_reserved)
    } else {
        c.capacity
    }
}

/// Applies the configuration; returns the events to record.
pub fn enforce(c: &EnforceConfig) -> Result<Vec<Applied>, EnforceError> {
    let has = |k: &str| c.enforce.iter().any(|e| e == k);
    let mut out = vec![];
    let pods = pods_amounts(c);
    apply(&c.mount, &c.pods_cgroup, pods)
        .map_err(|e| EnforceError(format!("failed to update node allocatable limits on {:?}: {e}", c.pods_cgroup)))?;
    if has("pods") {
        out.push(Applied { message: "Updated Node Allocatable limit across pods".into() });
    }
    for t in reserved_targets(c) {
        enforce_existing(&c.mount, &t.cgroup, t.amounts).map_err(|e| t.failed(&e))?;
        out.push(t.applied());
    }
    Ok(out)
}

/// A reserved cgroup to limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedTarget {
    /// `System` or `Kube`.
    pub name: &'static str,
    /// `systemReservedCgroup` / `kubeReservedCgroup`.
    pub cgroup: String,
    /// The reservation (CPU only for `-compressible`).
    pub amounts: Amounts,
}

impl ReservedTarget {
    /// Upstream's `FailedNodeAllocatableEnforcement` message.
    pub fn failed(&self, why: &str) -> EnforceError {
        EnforceError(format!("Failed to enforce {} Reserved Cgroup Limits on {:?}: {why}", self.name, self.cgroup))
    }

    /// Upstream's `SuccessfulNodeAllocatableEnforcement` message.
    pub fn applied(&self) -> Applied {
        Applied { message: format!("Updated limits on {} reserved cgroup {}", self.name.to_lowercase(), self.cgroup) }
    }
}

/// The reserved cgroups `enforceNodeAllocatable` asks to limit, with what.
pub fn reserved_targets(c: &EnforceConfig) -> Vec<ReservedTarget> {
    let has = |k: &str| c.enforce.iter().any(|e| e == k);
    let mut out = vec![];
    for (name, cgroup, amounts, key) in [
        ("System", &c.system_reserved_cgroup, c.system_reserved, "system-reserved"),
        ("Kube", &c.kube_reserved_cgroup, c.kube_reserved, "kube-reserved"),
    ] {
        let full = has(key);
        if !full && !has(&format!("{key}-compressible")) {
            continue;
        }
        let amounts = if full { amounts } else { amounts.cpu_only() };
        out.push(ReservedTarget { name, cgroup: cgroup.clone(), amounts });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: PathBuf) -> String {
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn config(mount: &Path, enforce: &[&str]) -> EnforceConfig {
        EnforceConfig {
            mount: mount.into(),
            pods_cgroup: "kubepods".into(),
            capacity: Amounts { cpu_milli: Some(4000), memory: Some(8 << 30), pids: Some(4_194_304) },
            system_reserved: Amounts { cpu_milli: Some(500), memory: Some(512 << 20), pids: Some(1000) },
            kube_reserved: Amounts { cpu_milli: Some(250), memory: Some(256 << 20), pids: None },
            enforce: enforce.iter().map(|s| s.to_string()).collect(),
            system_reserved_cgroup: "/system.slice".into(),
            kube_reserved_cgroup: "/kube.slice".into(),
        }
    }

    #[test]
    fn v1_pods_get_allocatable_and_reserved_cgroups_their_reservations() {
        let m = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory", "pids"] {
            for g in ["kubepods", "system.slice", "kube.slice"] {
                std::fs::create_dir_all(m.path().join(c).join(g)).unwrap();
            }
        }
        let applied = enforce(&config(m.path(), &["pods", "system-reserved", "kube-reserved"])).unwrap();
        assert_eq!(applied.len(), 3);
        assert_eq!(applied[1].message, "Updated limits on system reserved cgroup /system.slice");
        let p = m.path();
        assert_eq!(read(p.join("cpu/kubepods/cpu.shares")), "3328", "(4000 - 750) m");
        assert_eq!(read(p.join("memory/kubepods/memory.limit_in_bytes")), ((8u64 << 30) - (768 << 20)).to_string());
        assert_eq!(read(p.join("pids/kubepods/pids.max")), "4193304");
        assert_eq!(read(p.join("cpu/system.slice/cpu.shares")), "512");
        assert_eq!(read(p.join("memory/system.slice/memory.limit_in_bytes")), (512u64 << 20).to_string());
        assert_eq!(read(p.join("pids/system.slice/pids.max")), "1000");
        assert_eq!(read(p.join("cpu/kube.slice/cpu.shares")), "256");
        assert!(!p.join("pids/kube.slice/pids.max").exists(), "no pid reservation, no limit");
    }

    #[test]
    fn without_pods_enforcement_the_pods_cgroup_gets_the_capacity_and_compressible_only_cpu() {
        let m = tempfile::tempdir().unwrap();
        std::fs::write(m.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        for g in ["kubepods", "system.slice"] {
            std::fs::create_dir_all(m.path().join(g)).unwrap();
        }
        let applied = enforce(&config(m.path(), &["system-reserved-compressible"])).unwrap();
        assert_eq!(applied.len(), 1);
        let p = m.path();
        // 4000 m = 4096 shares → weight 1 + (4094 × 9999) / 262142 = 157 (v2).
        assert_eq!(read(p.join("kubepods/cpu.weight")), "157");
        assert_eq!(read(p.join("kubepods/memory.max")), (8u64 << 30).to_string());
        assert_eq!(read(p.join("kubepods/pids.max")), "4194304");
        assert_eq!(read(p.join("system.slice/cpu.weight")), "20", "512 shares");
        assert!(!p.join("system.slice/memory.max").exists(), "compressible: CPU only");
    }

    #[test]
    fn a_missing_reserved_cgroup_is_an_error_naming_it() {
        let m = tempfile::tempdir().unwrap();
        for c in ["cpu", "memory", "pids"] {
            std::fs::create_dir_all(m.path().join(c).join("kubepods")).unwrap();
        }
        let e = enforce(&config(m.path(), &["pods", "kube-reserved"])).unwrap_err().to_string();
        assert!(e.starts_with("Failed to enforce Kube Reserved Cgroup Limits on \"/kube.slice\""), "{e}");
        assert!(e.contains("cgroup does not exist"), "{e}");
    }
}
