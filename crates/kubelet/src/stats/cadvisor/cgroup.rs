//! One cgroup's figures as cAdvisor's libcontainer handler reads them for `/metrics/cadvisor`
//! (`container/libcontainer/handler.go` setCPUStats, setMemoryStats, the pids and PSI stats;
//! `container/common/helpers.go` getSpecInternal for the spec and the creation time), from the cgroup v1 controller
//! folders or the unified hierarchy. The CPU usage and the memory usage and working set are [`host`]'s readers,
//! the ones `/stats/summary` uses. A missing file leaves its figure at zero, as libcontainer's readers do.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::stats::host::{self, HostPaths, keyed, num, read};

/// The clock ticks of `cpuacct.stat` (`USER_HZ`).
const USER_HZ: u64 = 100;

/// Cumulative CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuFigures {
    pub usage_ns: u64,
    pub user_ns: u64,
    pub system_ns: u64,
    /// CFS: periods, throttled periods, throttled time in ns.
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_ns: u64,
}

/// Memory, as `info.MemoryStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryFigures {
    pub usage: u64,
    pub max_usage: u64,
    pub working_set: u64,
    pub cache: u64,
    pub rss: u64,
    pub swap: u64,
    pub mapped_file: u64,
    pub kernel: u64,
    pub failcnt: u64,
    pub pgfault: u64,
    pub pgmajfault: u64,
    pub active_file: u64,
    pub inactive_file: u64,
}

/// The cgroup's limits (`info.ContainerSpec`): shares (v2: from the weight), period, quota (0: none), memory
/// limit, swap limit and reservation (`u64::MAX`: unlimited).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecFigures {
    pub cpu_shares: u64,
    pub cpu_period: u64,
    pub cpu_quota: u64,
    pub memory_limit: u64,
    pub swap_limit: u64,
    pub reservation: u64,
}

/// Pressure stall totals in µs: (some, full) of cpu, memory and io.
pub type Pressure = [(u64, u64); 3];

/// Everything `/metrics/cadvisor` reports of one cgroup from its own files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CgroupFigures {
    pub cpu: CpuFigures,
    pub memory: MemoryFigures,
    pub spec: SpecFigures,
    /// `pids.current` and `pids.max` (0: no limit).
    pub threads: u64,
    pub threads_max: u64,
    pub pressure: Pressure,
    /// OOM kills in the cgroup (`memory.oom_control`/`memory.events` `oom_kill`).
    pub oom_kills: u64,
    /// The creation time: the oldest modification time of the cgroup's folders (and of `cgroup.clone_children`,
    /// v2 `cgroup.events`), not before boot; seconds since the epoch.
    pub created: Option<i64>,
}

fn file_num(dir: &Path, name: &str) -> u64 {
    read(&dir.join(name)).and_then(|s| num(&s)).unwrap_or(0)
}

/// A limit file: a number, or `max` (unlimited).
fn limit(dir: &Path, name: &str) -> u64 {
    match read(&dir.join(name)) {
        Some(s) if s.trim() == "max" => u64::MAX,
        Some(s) => num(&s).unwrap_or(0),
        None => 0,
    }
}

/// `cpu.weight` as shares (`convertCPUWeightToCPULimit`).
fn weight_to_shares(weight: u64) -> u64 {
    if (1..=10_000).contains(&weight) { 2 + ((weight - 1) * 262_142) / 9_999 } else { 0 }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).ok()?.modified().ok()
}

/// The creation time as `getSpecInternal` finds it over `dirs`.
fn creation_time(dirs: &[PathBuf], v2: bool, boot: Option<i64>) -> Option<i64> {
    let marker = if v2 { "cgroup.events" } else { "cgroup.clone_children" };
    let oldest = dirs.iter().flat_map(|d| [modified(d), modified(&d.join(marker))]).flatten().min()?;
    let secs = oldest.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
    Some(boot.map_or(secs, |b| secs.max(b)))
}

/// Reads `cgroup` (`/` for the root); `None` when it does not exist (any more).
pub fn read_cgroup(paths: &HostPaths, cgroup: &str, boot: Option<i64>) -> Option<CgroupFigures> {
    let root = cgroup.trim_start_matches('/').is_empty();
    let cpu_usage = host::cgroup_cpu(paths, cgroup)?;
    let mem = host::cgroup_memory(paths, cgroup);
    let mut f = CgroupFigures::default();
    f.cpu.usage_ns = cpu_usage.usage_ns;
    if let Some(m) = mem {
        f.memory.usage = m.usage;
        f.memory.working_set = m.working_set;
        f.memory.rss = m.rss;
        f.memory.pgfault = m.pgfault;
        f.memory.pgmajfault = m.pgmajfault;
    }
    if host::unified(paths) {
        read_v2(paths, cgroup, root, &mut f, boot);
    } else {
        read_v1(paths, cgroup, root, &mut f, boot);
    }
    if root {
        // The root's memory limit is the machine's (cAdvisor's machine info), its swap limit the machine's swap.
        f.spec.memory_limit = host::meminfo(paths, "MemTotal").unwrap_or(0);
        f.spec.swap_limit = host::meminfo(paths, "SwapTotal").unwrap_or(0);
    }
    Some(f)
}

fn read_v2(paths: &HostPaths, cgroup: &str, root: bool, f: &mut CgroupFigures, boot: Option<i64>) {
    let d = paths.cgroup.join(cgroup.trim_start_matches('/'));
    if let Some(stat) = read(&d.join("cpu.stat")) {
        let k = |key| keyed(&stat, key).unwrap_or(0);
        f.cpu.user_ns = k("user_usec").saturating_mul(1000);
        f.cpu.system_ns = k("system_usec").saturating_mul(1000);
        f.cpu.periods = k("nr_periods");
        f.cpu.throttled_periods = k("nr_throttled");
        f.cpu.throttled_ns = k("throttled_usec").saturating_mul(1000);
    }
    if let Some(stat) = read(&d.join("memory.stat")) {
        let k = |key| keyed(&stat, key).unwrap_or(0);
        f.memory.cache = k("file");
        f.memory.mapped_file = k("file_mapped");
        f.memory.active_file = k("active_file");
        f.memory.inactive_file = k("inactive_file");
    }
    f.memory.swap = file_num(&d, "memory.swap.current");
    f.memory.max_usage = file_num(&d, "memory.peak");
    f.memory.failcnt = read(&d.join("memory.events")).and_then(|s| keyed(&s, "max")).unwrap_or(0);
    f.oom_kills = read(&d.join("memory.events")).and_then(|s| keyed(&s, "oom_kill")).unwrap_or(0);
    f.spec.cpu_shares = weight_to_shares(file_num(&d, "cpu.weight"));
    if let Some(max) = read(&d.join("cpu.max")) {
        let mut it = max.split_whitespace();
        let quota = it.next().unwrap_or("max");
        f.spec.cpu_quota = if quota == "max" { 0 } else { num(quota).unwrap_or(0) };
        f.spec.cpu_period = it.next().and_then(num).unwrap_or(0);
    }
    if !root {
        f.spec.memory_limit = limit(&d, "memory.max");
        f.spec.swap_limit = limit(&d, "memory.swap.max");
        f.spec.reservation = limit(&d, "memory.min");
    }
    f.threads = file_num(&d, "pids.current");
    let max = limit(&d, "pids.max");
    f.threads_max = if max == u64::MAX { 0 } else { max };
    f.pressure = host::cgroup_pressure(paths, cgroup).map(|p| (p.some.total, p.full.total));
    f.created = creation_time(&[d], true, boot);
}

fn read_v1(paths: &HostPaths, cgroup: &str, root: bool, f: &mut CgroupFigures, boot: Option<i64>) {
    let dir = |c| host::v1_dir(paths, c, cgroup).filter(|d| d.is_dir());
    let mut dirs = vec![];
    if let Some(d) = dir("cpuacct") {
        if let Some(stat) = read(&d.join("cpuacct.stat")) {
            let ticks = |key| keyed(&stat, key).unwrap_or(0).saturating_mul(1_000_000_000) / USER_HZ;
            f.cpu.user_ns = ticks("user");
            f.cpu.system_ns = ticks("system");
        }
        dirs.push(d);
    }
    if let Some(d) = dir("cpu") {
        if let Some(stat) = read(&d.join("cpu.stat")) {
            let k = |key| keyed(&stat, key).unwrap_or(0);
            f.cpu.periods = k("nr_periods");
            f.cpu.throttled_periods = k("nr_throttled");
            f.cpu.throttled_ns = k("throttled_time");
        }
        f.spec.cpu_shares = file_num(&d, "cpu.shares");
        f.spec.cpu_period = file_num(&d, "cpu.cfs_period_us");
        let quota = read(&d.join("cpu.cfs_quota_us")).unwrap_or_default();
        f.spec.cpu_quota = if quota.trim() == "-1" { 0 } else { num(&quota).unwrap_or(0) };
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    if let Some(d) = dir("memory") {
        if let Some(stat) = read(&d.join("memory.stat")) {
            let k = |key| keyed(&stat, key).unwrap_or(0);
            f.memory.cache = k("total_cache");
            f.memory.swap = k("total_swap");
            f.memory.mapped_file = k("total_mapped_file");
            f.memory.active_file = k("total_active_file");
            f.memory.inactive_file = k("total_inactive_file");
            // libcontainer reports the cgroup's own page faults for both scopes.
            f.memory.pgfault = k("pgfault");
            f.memory.pgmajfault = k("pgmajfault");
        }
        f.memory.max_usage = file_num(&d, "memory.max_usage_in_bytes");
        f.memory.failcnt = file_num(&d, "memory.failcnt");
        f.memory.kernel = file_num(&d, "memory.kmem.usage_in_bytes");
        f.oom_kills = read(&d.join("memory.oom_control")).and_then(|s| keyed(&s, "oom_kill")).unwrap_or(0);
        if !root {
            f.spec.memory_limit = file_num(&d, "memory.limit_in_bytes");
            f.spec.swap_limit = file_num(&d, "memory.memsw.limit_in_bytes");
            f.spec.reservation = file_num(&d, "memory.soft_limit_in_bytes");
        }
        dirs.push(d);
    }
    if let Some(d) = dir("pids") {
        f.threads = file_num(&d, "pids.current");
        let max = limit(&d, "pids.max");
        f.threads_max = if max == u64::MAX { 0 } else { max };
        dirs.push(d);
    }
    f.created = creation_time(&dirs, false, boot);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        std::fs::create_dir_all(dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    #[test]
    fn a_v1_cgroup_reads_as_libcontainer_reads_it() {
        let t = tempfile::tempdir().unwrap();
        let cg = t.path().join("cgroup");
        let pod = "kubepods/burstable/podu1";
        write(
            &cg.join("cpu,cpuacct").join(pod),
            &[
                ("cpuacct.usage", "5000000000\n"),
                ("cpuacct.stat", "user 300\nsystem 150\n"),
                ("cpu.stat", "nr_periods 40\nnr_throttled 3\nthrottled_time 2500000\n"),
                ("cpu.shares", "102\n"),
                ("cpu.cfs_period_us", "100000\n"),
                ("cpu.cfs_quota_us", "20000\n"),
            ],
        );
        std::os::unix::fs::symlink("cpu,cpuacct", cg.join("cpu")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", cg.join("cpuacct")).unwrap();
        write(
            &cg.join("memory").join(pod),
            &[
                ("memory.usage_in_bytes", "1000000\n"),
                ("memory.max_usage_in_bytes", "2000000\n"),
                ("memory.failcnt", "2\n"),
                ("memory.kmem.usage_in_bytes", "4096\n"),
                ("memory.limit_in_bytes", "67108864\n"),
                ("memory.memsw.limit_in_bytes", "67108864\n"),
                ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"),
                (
                    "memory.stat",
                    "cache 1\nrss 2\npgfault 10\npgmajfault 1\ntotal_cache 4096\ntotal_rss 8192\ntotal_swap 0\n\
                 total_mapped_file 512\ntotal_pgfault 20\ntotal_pgmajfault 2\ntotal_inactive_file 1000\n\
                 total_active_file 3000\n",
                ),
            ],
        );
        write(&cg.join("pids").join(pod), &[("pids.current", "3\n"), ("pids.max", "max\n")]);
        let paths = HostPaths { proc: t.path().join("proc"), cgroup: cg };
        let f = read_cgroup(&paths, &format!("/{pod}"), Some(0)).unwrap();
        assert_eq!(
            f.cpu,
            CpuFigures {
                usage_ns: 5_000_000_000,
                user_ns: 3_000_000_000,
                system_ns: 1_500_000_000,
                periods: 40,
                throttled_periods: 3,
                throttled_ns: 2_500_000,
            }
        );
        assert_eq!((f.memory.usage, f.memory.working_set, f.memory.max_usage), (1_000_000, 999_000, 2_000_000));
        assert_eq!((f.memory.cache, f.memory.rss, f.memory.mapped_file, f.memory.kernel), (4096, 8192, 512, 4096));
        assert_eq!((f.memory.pgfault, f.memory.pgmajfault), (10, 1), "the cgroup's own faults, as libcontainer's");
        assert_eq!((f.memory.active_file, f.memory.inactive_file, f.memory.failcnt), (3000, 1000, 2));
        assert_eq!(
            f.spec,
            SpecFigures {
                cpu_shares: 102,
                cpu_period: 100_000,
                cpu_quota: 20_000,
                memory_limit: 67_108_864,
                swap_limit: 67_108_864,
                reservation: 9_223_372_036_854_771_712,
            }
        );
        assert_eq!((f.threads, f.threads_max, f.oom_kills), (3, 0, 1));
        assert!(f.created.is_some());
        assert_eq!(read_cgroup(&paths, "/kubepods/gone", None), None);
    }

    #[test]
    fn a_v2_cgroup_reads_as_libcontainer_reads_it() {
        let t = tempfile::tempdir().unwrap();
        let cg = t.path().join("cgroup");
        write(&cg, &[("cgroup.controllers", "cpu memory pids\n")]);
        let pod = "kubepods.slice/kubepods-podu1.slice";
        write(
            &cg.join(pod),
            &[
                (
                    "cpu.stat",
                    "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnr_periods 7\nnr_throttled 1\nthrottled_usec 40\n",
                ),
                ("cpu.weight", "4\n"),
                ("cpu.max", "max 100000\n"),
                ("memory.current", "1000000\n"),
                ("memory.peak", "3000000\n"),
                ("memory.max", "max\n"),
                ("memory.swap.max", "0\n"),
                ("memory.min", "0\n"),
                ("memory.swap.current", "4096\n"),
                ("memory.events", "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n"),
                (
                    "memory.stat",
                    "anon 8192\nfile 4096\nfile_mapped 512\nactive_file 3000\ninactive_file 1000\npgfault 9\npgmajfault 2\n",
                ),
                ("pids.current", "2\n"),
                ("pids.max", "100\n"),
                (
                    "cpu.pressure",
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=500000\n",
                ),
                (
                    "memory.pressure",
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n",
                ),
            ],
        );
        let paths = HostPaths { proc: t.path().join("proc"), cgroup: cg };
        let f = read_cgroup(&paths, &format!("/{pod}"), None).unwrap();
        assert_eq!((f.cpu.usage_ns, f.cpu.user_ns, f.cpu.system_ns), (5_000_000, 3_000_000, 2_000_000));
        assert_eq!((f.cpu.periods, f.cpu.throttled_periods, f.cpu.throttled_ns), (7, 1, 40_000));
        assert_eq!((f.memory.cache, f.memory.rss, f.memory.swap, f.memory.max_usage), (4096, 8192, 4096, 3_000_000));
        assert_eq!((f.memory.failcnt, f.oom_kills, f.memory.working_set), (5, 1, 999_000));
        assert_eq!(f.spec.cpu_shares, 2 + 3 * 262_142 / 9_999, "cpu.weight converted to shares");
        assert_eq!((f.spec.cpu_quota, f.spec.cpu_period, f.spec.memory_limit), (0, 100_000, u64::MAX));
        assert_eq!((f.threads, f.threads_max), (2, 100));
        assert_eq!(f.pressure, [(1_500_000, 500_000), (7, 3), (0, 0)]);
    }
}
