//! What cAdvisor reads of a cgroup's processes and of the machine (`container/libcontainer/handler.go`
//! processStatsFromProcs, processRootProcUlimits, the network stats of a process's namespace; `machine/info.go`
//! and `utils/sysfs` for the machine's cores, sockets, memory and identity).

use std::collections::BTreeSet;
use std::path::Path;

use crate::stats::host::{self, HostPaths, num, read};

/// Processes of a cgroup: its own `cgroup.procs` (not its children's), their open files and sockets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessFigures {
    pub processes: u64,
    pub fds: u64,
    pub sockets: u64,
}

/// The folder whose `cgroup.procs` cAdvisor reads: the cpu controller's (v1) or the unified one.
fn procs_dir(paths: &HostPaths, cgroup: &str) -> Option<std::path::PathBuf> {
    if host::unified(paths) {
        Some(paths.cgroup.join(cgroup.trim_start_matches('/')))
    } else {
        host::v1_dir(paths, "cpu", cgroup)
    }
}

/// The pids of `cgroup`'s own `cgroup.procs`.
pub fn pids(paths: &HostPaths, cgroup: &str) -> Vec<String> {
    let Some(d) = procs_dir(paths, cgroup) else { return vec![] };
    read(&d.join("cgroup.procs"))
        .map(|s| s.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect())
        .unwrap_or_default()
}

/// `processStatsFromProcs`: the processes of `pids`, with their file descriptors and sockets.
pub fn processes(paths: &HostPaths, pids: &[String]) -> ProcessFigures {
    let mut f = ProcessFigures { processes: pids.len() as u64, ..Default::default() };
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(paths.proc.join(pid).join("fd")) else { continue };
        for fd in fds.flatten() {
            f.fds += 1;
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket")) {
                f.sockets += 1;
            }
        }
    }
    f
}

/// `processRootProcUlimits`: the soft `Max open files` of process `pid` (`-1` when unlimited).
pub fn max_open_files(paths: &HostPaths, pid: &str) -> Option<i64> {
    let s = read(&paths.proc.join(pid).join("limits"))?;
    let line = s.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.strip_prefix("Max open files")?.split_whitespace().next()?;
    if soft == "unlimited" { Some(-1) } else { soft.parse().ok() }
}

/// One interface of a network namespace as `info.InterfaceStats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterfaceFigures {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// The interfaces of `/proc/<pid>/net/dev` but those cAdvisor ignores (`lo`, `veth*`, `docker*`, `nerdctl*`),
/// sorted by name.
pub fn interfaces(paths: &HostPaths, pid: &str) -> Vec<InterfaceFigures> {
    let Some(s) = read(&paths.proc.join(pid).join("net/dev")) else { return vec![] };
    let mut out: Vec<InterfaceFigures> = s
        .lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if ["lo", "veth", "docker", "nerdctl"].iter().any(|p| name.starts_with(p)) {
                return None;
            }
            let f: Vec<u64> = rest.split_whitespace().filter_map(num).collect();
            (f.len() >= 12).then(|| InterfaceFigures {
                name: name.to_string(),
                rx_bytes: f[0],
                rx_packets: f[1],
                rx_errors: f[2],
                rx_dropped: f[3],
                tx_bytes: f[8],
                tx_packets: f[9],
                tx_errors: f[10],
                tx_dropped: f[11],
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The machine as `machine_*` and `cadvisor_version_info` report it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    pub cores: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub memory: u64,
    pub swap: u64,
    pub boot_id: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub kernel_version: String,
    pub os_version: String,
}

fn trimmed(p: &Path) -> String {
    read(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Reads the machine: logical CPUs online, distinct (package, core) pairs and packages from sysfs, memory and swap
/// from `/proc/meminfo`, the boot ID, `/etc/machine-id` (else the D-Bus one), the DMI product UUID (else the
/// machine ID, as cAdvisor falls back), `uname -r` and the OS's `PRETTY_NAME`.
pub fn machine(paths: &HostPaths, sys: &Path, etc: &Path) -> Machine {
    let cpus = sys.join("devices/system/cpu");
    let online: Vec<u32> = read(&cpus.join("online"))
        .and_then(|s| kubelet_types::cpuset::CpuSet::parse(s.trim()).ok())
        .map(|set| set.iter().collect())
        .unwrap_or_default();
    let (mut cores, mut packages) = (BTreeSet::new(), BTreeSet::new());
    for cpu in &online {
        let topo = cpus.join(format!("cpu{cpu}/topology"));
        let package = trimmed(&topo.join("physical_package_id"));
        cores.insert((package.clone(), trimmed(&topo.join("core_id"))));
        packages.insert(package);
    }
    let machine_id = [etc.join("machine-id"), Path::new("/var/lib/dbus/machine-id").to_path_buf()]
        .iter()
        .map(|p| trimmed(p))
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let uuid = trimmed(&sys.join("class/dmi/id/product_uuid"));
    let os = read(&etc.join("os-release"))
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string())))
        .unwrap_or_else(|| "Linux".into());
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    Machine {
        cores: online.len() as u64,
        physical_cores: cores.len() as u64,
        sockets: packages.len() as u64,
        memory: host::meminfo(paths, "MemTotal").unwrap_or(0),
        swap: host::meminfo(paths, "SwapTotal").unwrap_or(0),
        boot_id: trimmed(&paths.proc.join("sys/kernel/random/boot_id")),
        system_uuid: if uuid.is_empty() { machine_id.clone() } else { uuid },
        machine_id,
        kernel_version: kernel,
        os_version: os,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_limits_and_the_machine_read_as_cadvisor_reads_them() {
        let t = tempfile::tempdir().unwrap();
        let proc = t.path().join("proc");
        std::fs::create_dir_all(proc.join("42/net")).unwrap();
        std::fs::write(
            proc.join("42/net/dev"),
            "Inter-|   Receive                                                |  Transmit\n \
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
             lo:  100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  \
             eth0: 1376 16 1 2 0 0 0 0 906 9 3 4 0 0 0 0\nveth12: 5 5 5 5 0 0 0 0 5 5 5 5 0 0 0 0\n",
        )
        .unwrap();
        std::fs::write(proc.join("42/limits"), "Limit Soft Limit Hard Limit Units\nMax open files            20000                20000                files\n").unwrap();
        let paths = HostPaths { proc: proc.clone(), cgroup: t.path().join("cgroup") };
        let ifs = interfaces(&paths, "42");
        assert_eq!(ifs.len(), 1, "lo and veth are left out");
        assert_eq!((ifs[0].rx_bytes, ifs[0].rx_packets, ifs[0].rx_errors, ifs[0].rx_dropped), (1376, 16, 1, 2));
        assert_eq!((ifs[0].tx_bytes, ifs[0].tx_packets, ifs[0].tx_errors, ifs[0].tx_dropped), (906, 9, 3, 4));
        assert_eq!(max_open_files(&paths, "42"), Some(20000));

        let sys = t.path().join("sys");
        std::fs::create_dir_all(sys.join("devices/system/cpu")).unwrap();
        std::fs::write(sys.join("devices/system/cpu/online"), "0-3\n").unwrap();
        for (cpu, package, core) in [(0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 1, 1)] {
            let topo = sys.join(format!("devices/system/cpu/cpu{cpu}/topology"));
            std::fs::create_dir_all(&topo).unwrap();
            std::fs::write(topo.join("physical_package_id"), format!("{package}\n")).unwrap();
            std::fs::write(topo.join("core_id"), format!("{core}\n")).unwrap();
        }
        let etc = t.path().join("etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("machine-id"), "abc\n").unwrap();
        std::fs::write(etc.join("os-release"), "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
            .unwrap();
        std::fs::write(proc.join("meminfo"), "MemTotal:       1024 kB\nSwapTotal:         0 kB\n").unwrap();
        let m = machine(&paths, &sys, &etc);
        assert_eq!((m.cores, m.physical_cores, m.sockets), (4, 3, 2));
        assert_eq!((m.memory, m.swap), (1024 * 1024, 0));
        assert_eq!((m.machine_id.as_str(), m.system_uuid.as_str()), ("abc", "abc"), "no DMI UUID: the machine ID");
        assert_eq!(m.os_version, "Debian GNU/Linux 12 (bookworm)");
    }
}
