//! Node allocatable enforcement on the real cgroup hierarchy (`enforceNodeAllocatable: pods, system-reserved,
//! kube-reserved`), with the real rkubelet and containerd.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

const CGROUPS: &str = "/sys/fs/cgroup";
const SYSTEM: &str = "rk-e2e-system.slice";
const KUBE: &str = "rk-e2e-kube.slice";

fn read(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", p.as_ref().display())).trim().to_string()
}

/// The reserved cgroups the operator made (systemd would, for `system.slice`), removed at the end.
struct Reserved(Vec<PathBuf>);

impl Reserved {
    fn make() -> Reserved {
        let mut v = vec![];
        for c in ["cpu", "memory", "pids"] {
            for g in [SYSTEM, KUBE] {
                let d = Path::new(CGROUPS).join(c).join(g);
                let _ = std::fs::create_dir(&d);
                v.push(d);
            }
        }
        Reserved(v)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn mem_total() -> u64 {
    read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_allocatable_is_enforced_on_the_pods_and_reserved_cgroups() {
    let (_g, rt) = fresh_runtime().await;
    if Path::new(CGROUPS).join("cgroup.controllers").exists() {
        panic!("this test reads cgroup v1 files; the machine mounts cgroup v2 only");
    }
    let _reserved = Reserved::make();
    let config = |n: &Node| {
        std::fs::read_to_string(&n.config).unwrap()
            + &format!(
                "systemReserved:\n  cpu: 500m\n  memory: 256Mi\n  pid: \"1000\"\nkubeReserved:\n  cpu: 250m\n  memory: \
                 128Mi\nenforceNodeAllocatable: [pods, system-reserved, kube-reserved]\nsystemReservedCgroup: \
                 /{SYSTEM}\nkubeReservedCgroup: /{KUBE}\n"
            )
    };
    let web = manifest("web", &[], &[("app", "exec sleep 3600")], "");
    let mut node = Node::start_with(&[("web.yaml", &web)], config);
    let pod = node.wait_running("web-e2e-node").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();

    let cores = std::thread::available_parallelism().unwrap().get() as i64;
    let pid_max: i64 = read("/proc/sys/kernel/pid_max").parse().unwrap();
    let kubepods = |c: &str, f: &str| read(Path::new(CGROUPS).join(c).join("kubepods").join(f));
    // Allocatable = capacity − 750m CPU, − 384Mi memory, − 1000 pids.
    assert_eq!(kubepods("cpu", "cpu.shares"), ((cores * 1000 - 750) * 1024 / 1000).to_string());
    assert_eq!(kubepods("memory", "memory.limit_in_bytes"), (mem_total() - (384 << 20)).to_string());
    assert_eq!(kubepods("pids", "pids.max"), (pid_max - 1000).to_string());
    let reserved = |c: &str, g: &str, f: &str| read(Path::new(CGROUPS).join(c).join(g).join(f));
    assert_eq!(reserved("cpu", SYSTEM, "cpu.shares"), "512");
    assert_eq!(reserved("memory", SYSTEM, "memory.limit_in_bytes"), (256u64 << 20).to_string());
    assert_eq!(reserved("pids", SYSTEM, "pids.max"), "1000");
    assert_eq!(reserved("cpu", KUBE, "cpu.shares"), "256");
    assert_eq!(reserved("memory", KUBE, "memory.limit_in_bytes"), (128u64 << 20).to_string());
    assert_eq!(reserved("pids", KUBE, "pids.max"), "max", "no pid reservation: no limit");
    // The pod runs under the limited pods cgroup.
    assert!(Path::new(CGROUPS).join("memory/kubepods/besteffort").join(format!("pod{uid}")).is_dir());
    let log = node.log();
    assert!(log.contains("Updated Node Allocatable limit across pods"), "{}", tail(&log, 20));
    assert!(log.contains(&format!("Updated limits on system reserved cgroup /{SYSTEM}")));
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_reserved_cgroup_stops_start_up_with_its_name() {
    let (_g, rt) = fresh_runtime().await;
    let config = |n: &Node| {
        std::fs::read_to_string(&n.config).unwrap()
            + "kubeReserved:\n  cpu: 250m\nenforceNodeAllocatable: [pods, kube-reserved]\nkubeReservedCgroup: /rk-e2e-absent.slice\n"
    };
    let mut node = Node::start_with(&[], config);
    let status = node.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = node.log();
    assert!(
        log.contains("Failed to enforce Kube Reserved Cgroup Limits on \"/rk-e2e-absent.slice\"")
            && log.contains("cgroup does not exist"),
        "{}",
        tail(&log, 10)
    );
    node.stop_and_clean(&rt).await;
}
