//! What the node's own files say (cAdvisor's raw handler, `pkg/kubelet/stats/pidlimit`, `fs.Info`): cgroup CPU
//! and memory (v1 and v2), `/proc/net/dev`, `statfs`, the process limits and the boot time. Paths are relative
//! to a [`HostPaths`] so tests can point them at a folder of their own. Every reader returns `None` (the field
//! is then left out of the summary) rather than failing the request.

use std::path::{Path, PathBuf};

/// Where the host's files are.
#[derive(Clone, Debug)]
pub struct HostPaths {
    /// `/proc`.
    pub proc: PathBuf,
    /// `/sys/fs/cgroup`.
    pub cgroup: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths { proc: "/proc".into(), cgroup: "/sys/fs/cgroup".into() }
    }
}

/// Cumulative CPU of a cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpu {
    /// Core-nanoseconds.
    pub usage_ns: u64,
}

/// Memory of a cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Usage including page cache.
    pub usage: u64,
    /// Usage minus inactive file pages.
    pub working_set: u64,
    /// Anonymous memory.
    pub rss: u64,
    /// Page faults.
    pub pgfault: u64,
    /// Major page faults.
    pub pgmajfault: u64,
    /// The limit (`None` when unlimited).
    pub limit: Option<u64>,
    /// Swap in use (v2 `memory.swap.current`; v1 memory+swap less memory usage).
    pub swap_usage: u64,
    /// The swap limit (v2 `memory.swap.max`; v1 `memory.memsw.limit_in_bytes`, as cAdvisor reads it), when limited.
    pub swap_limit: Option<u64>,
}

/// A small file's text (no `stat` for a size hint: cgroup and proc files report 0 or 4096 anyway).
pub(crate) fn read(p: &Path) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(p).ok()?;
    // `read` until the end rather than `read_to_string`, which asks for the size (`statx`, `lseek`) first.
    let (mut buf, mut chunk) = (Vec::with_capacity(1024), [0u8; 4096]);
    loop {
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    String::from_utf8(buf).ok()
}

pub(crate) fn num(s: &str) -> Option<u64> {
    s.trim().parse().ok()
}

/// `key value` lines (memory.stat, cpu.stat).
pub(crate) fn keyed(s: &str, key: &str) -> Option<u64> {
    s.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')).and_then(num))
}

/// The pressure stall figures of `cgroup` for cpu, memory and io (`*.pressure` of the unified hierarchy; for the
/// root, `/proc/pressure/*` where the root cgroup has none). Zero where the kernel reports none: on cgroup v1,
/// where cAdvisor (libcontainer's v1 reader) reports zeros as well.
pub fn cgroup_pressure(paths: &HostPaths, cgroup: &str) -> [kubelet_server::stats::PsiStats; 3] {
    let mut out = [kubelet_server::stats::PsiStats::default(); 3];
    if !unified(paths) {
        return out;
    }
    let dir = paths.cgroup.join(cgroup.trim_start_matches('/'));
    let root = cgroup.trim_start_matches('/').is_empty();
    for (i, resource) in ["cpu", "memory", "io"].into_iter().enumerate() {
        let text = read(&dir.join(format!("{resource}.pressure")))
            .or_else(|| if root { read(&paths.proc.join("pressure").join(resource)) } else { None });
        if let Some(text) = text {
            out[i] = parse_pressure(&text);
        }
    }
    out
}

/// A `*.pressure` file: `some avg10=0.12 avg60=0.05 avg300=0.01 total=123456` and the `full` line.
pub fn parse_pressure(text: &str) -> kubelet_server::stats::PsiStats {
    let line = |kind: &str| {
        let mut d = kubelet_server::stats::PsiData::default();
        for field in text.lines().find(|l| l.starts_with(kind)).unwrap_or("").split_whitespace().skip(1) {
            let Some((k, v)) = field.split_once('=') else { continue };
            match k {
                "avg10" => d.avg10 = v.parse().unwrap_or(0.0),
                "avg60" => d.avg60 = v.parse().unwrap_or(0.0),
                "avg300" => d.avg300 = v.parse().unwrap_or(0.0),
                "total" => d.total = v.parse().unwrap_or(0),
                _ => {}
            }
        }
        d
    };
    kubelet_server::stats::PsiStats { some: line("some"), full: line("full") }
}

/// Whether the unified hierarchy holds the controllers (cgroup v2).
/// How the cgroup mount at a root is laid out, found once per root: whether it is the unified hierarchy, and
/// the folder of each v1 controller found so far (`cpuacct`, `cpu,cpuacct`, ...). A request then reads files
/// without probing for them.
#[derive(Default)]
struct Layout {
    unified: Option<bool>,
    v1: std::collections::HashMap<String, String>,
}

static LAYOUTS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<PathBuf, Layout>>> =
    std::sync::LazyLock::new(Default::default);

pub(crate) fn unified(paths: &HostPaths) -> bool {
    let mut l = LAYOUTS.lock().unwrap_or_else(|p| p.into_inner());
    let layout = l.entry(paths.cgroup.clone()).or_default();
    *layout.unified.get_or_insert_with(|| paths.cgroup.join("cgroup.controllers").exists())
}

/// The folder of `cgroup` in a v1 controller's hierarchy (not checked to exist: reading its files tells).
pub(crate) fn v1_dir(paths: &HostPaths, controller: &str, cgroup: &str) -> Option<PathBuf> {
    let rel = cgroup.trim_start_matches('/');
    let mut l = LAYOUTS.lock().unwrap_or_else(|p| p.into_inner());
    let layout = l.entry(paths.cgroup.clone()).or_default();
    if let Some(dir) = layout.v1.get(controller) {
        return Some(paths.cgroup.join(dir).join(rel));
    }
    // A controller not found is looked for again next time (its hierarchy may be mounted later).
    let dir = [controller.to_string(), format!("cpu,{controller}"), format!("{controller},cpu")]
        .into_iter()
        .find(|c| paths.cgroup.join(c).is_dir())?;
    let path = paths.cgroup.join(&dir).join(rel);
    layout.v1.insert(controller.to_string(), dir);
    Some(path)
}

/// CPU of `cgroup` (`/` for the root).
pub fn cgroup_cpu(paths: &HostPaths, cgroup: &str) -> Option<Cpu> {
    if unified(paths) {
        let s = read(&paths.cgroup.join(cgroup.trim_start_matches('/')).join("cpu.stat"))?;
        return Some(Cpu { usage_ns: keyed(&s, "usage_usec")?.saturating_mul(1000) });
    }
    let d = v1_dir(paths, "cpuacct", cgroup)?;
    Some(Cpu { usage_ns: num(&read(&d.join("cpuacct.usage"))?)? })
}

/// Processes and threads in `cgroup` (`pids.current`), as cAdvisor's process count of a cgroup.
pub fn cgroup_pids(paths: &HostPaths, cgroup: &str) -> Option<u64> {
    let d =
        if unified(paths) { paths.cgroup.join(cgroup.trim_start_matches('/')) } else { v1_dir(paths, "pids", cgroup)? };
    num(&read(&d.join("pids.current"))?)
}

/// The first process of `cgroup` (`cgroup.procs`): a sandbox's pause process, whose network namespace is the
/// pod's.
pub fn cgroup_first_pid(paths: &HostPaths, cgroup: &str) -> Option<u32> {
    let d = cgroup_dir(paths, cgroup)?;
    read(&d.join("cgroup.procs"))?.lines().find_map(|l| l.trim().parse().ok())
}

/// The folder of `cgroup` in the CPU accounting hierarchy (v1) or the unified one (v2), if it exists.
fn cgroup_dir(paths: &HostPaths, cgroup: &str) -> Option<PathBuf> {
    let d = if unified(paths) {
        paths.cgroup.join(cgroup.trim_start_matches('/'))
    } else {
        v1_dir(paths, "cpuacct", cgroup)?
    };
    d.is_dir().then_some(d)
}

/// Whether `cgroup` exists.
pub fn cgroup_exists(paths: &HostPaths, cgroup: &str) -> bool {
    cgroup_dir(paths, cgroup).is_some()
}

/// The names of the child cgroups of `cgroup`.
pub fn child_cgroups(paths: &HostPaths, cgroup: &str) -> Vec<String> {
    let Some(d) = cgroup_dir(paths, cgroup) else { return vec![] };
    let Ok(rd) = std::fs::read_dir(d) else { return vec![] };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The cgroup of pod `uid` under the pods cgroup (`<cgroupRoot>/kubepods`), as the cgroupfs driver lays it out:
/// `<pods>/pod<uid>` (Guaranteed), `<pods>/burstable/pod<uid>`, `<pods>/besteffort/pod<uid>`. A container's
/// cgroup is `<pod cgroup>/<container id>` (containerd with `cgroup_parent` set to the pod's cgroup).
///
/// With the systemd driver (`pods` is `/kubepods.slice`, or `/a.slice/a-kubepods.slice` under `cgroupRoot: /a`)
/// the pod cgroup is a slice named after the pods slice
/// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`) and a container's is the scope
/// `cri-containerd-<id>.scope` in it ([`container_cgroup`]).
pub fn pod_cgroup(paths: &HostPaths, pods: &str, uid: &str) -> Option<String> {
    let pods = pods.trim_end_matches('/');
    if let Some(p) = slice_prefix(pods) {
        let u = uid.replace('-', "_");
        return [
            format!("{pods}/{p}-pod{u}.slice"),
            format!("{pods}/{p}-burstable.slice/{p}-burstable-pod{u}.slice"),
            format!("{pods}/{p}-besteffort.slice/{p}-besteffort-pod{u}.slice"),
        ]
        .into_iter()
        .find(|cg| cgroup_exists(paths, cg));
    }
    ["", "/burstable", "/besteffort"].iter().map(|q| format!("{pods}{q}/pod{uid}")).find(|cg| cgroup_exists(paths, cg))
}

/// The unit name without `.slice` of the last slice of a systemd cgroup path (`/a.slice/a-kubepods.slice` →
/// `a-kubepods`); `None` for a cgroupfs path.
fn slice_prefix(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').next()?.strip_suffix(".slice")
}

/// The cgroup of container `id` in the pod cgroup `pod`.
pub fn container_cgroup(pod: &str, id: &str) -> String {
    if pod.ends_with(".slice") { format!("{pod}/cri-containerd-{id}.scope") } else { format!("{pod}/{id}") }
}

/// The pod UID of a pod cgroup path (`…/pod<uid>` or `…/kubepods-burstable-pod<uid>.slice`).
pub fn pod_uid_of_cgroup(cg: &str) -> Option<String> {
    let last = cg.rsplit('/').next()?;
    if last.ends_with(".slice") {
        return kubelet_types::systemd_names::pod_uid_of(last);
    }
    last.strip_prefix("pod").map(String::from)
}

/// Every pod cgroup under the pods cgroup, with its containers: (pod cgroup, container IDs; with the systemd
/// driver the IDs of the `cri-containerd-<id>.scope` children).
pub fn pod_cgroups(paths: &HostPaths, pods: &str) -> Vec<(String, Vec<String>)> {
    let pods = pods.trim_end_matches('/');
    let mut out = vec![];
    let qos: Vec<String> = match slice_prefix(pods) {
        Some(p) => vec![String::new(), format!("/{p}-burstable.slice"), format!("/{p}-besteffort.slice")],
        None => vec![String::new(), "/burstable".into(), "/besteffort".into()],
    };
    for q in qos {
        let parent = format!("{pods}{q}");
        // A pod slice is named after its QoS slice: `<qos slice>-pod<uid>.slice`.
        let pod_prefix = slice_prefix(&parent).map(|p| format!("{p}-pod"));
        for name in child_cgroups(paths, &parent) {
            let is_pod = match &pod_prefix {
                Some(p) => name.ends_with(".slice") && name.starts_with(p.as_str()),
                None => name.starts_with("pod"),
            };
            if !is_pod {
                continue;
            }
            let cg = format!("{parent}/{name}");
            let children = child_cgroups(paths, &cg)
                .into_iter()
                .map(|c| {
                    c.strip_prefix("cri-containerd-")
                        .and_then(|c| c.strip_suffix(".scope"))
                        .map(String::from)
                        .unwrap_or(c)
                })
                .collect();
            out.push((cg, children));
        }
    }
    out
}

/// CPU of the whole node: the root cgroup, else `/proc/stat` (user, nice, system, irq, softirq, steal).
pub fn node_cpu(paths: &HostPaths) -> Option<Cpu> {
    if let Some(c) = cgroup_cpu(paths, "/") {
        return Some(c);
    }
    let s = read(&paths.proc.join("stat"))?;
    let f: Vec<u64> = s.lines().next()?.split_whitespace().skip(1).filter_map(num).collect();
    // Saturating: a number out of range is a broken file, not a reason to panic (a debug build checks overflow).
    let jiffies = [0usize, 1, 2, 5, 6, 7].iter().filter_map(|i| f.get(*i)).fold(0u64, |a, b| a.saturating_add(*b));
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Cpu { usage_ns: (u128::from(jiffies) * 1_000_000_000 / u128::from(hz)) as u64 })
}

/// `/proc/meminfo` field in bytes.
pub fn meminfo(paths: &HostPaths, key: &str) -> Option<u64> {
    let s = read(&paths.proc.join("meminfo"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB").and_then(num))
        .map(|k| k.saturating_mul(1024))
}

/// Memory of `cgroup`; for the root, limited by the machine's memory.
pub fn cgroup_memory(paths: &HostPaths, cgroup: &str) -> Option<Memory> {
    let root = cgroup.trim_start_matches('/').is_empty();
    let mut m = Memory::default();
    if unified(paths) {
        let d = paths.cgroup.join(cgroup.trim_start_matches('/'));
        let stat = read(&d.join("memory.stat"))?;
        let (anon, file) = (keyed(&stat, "anon").unwrap_or(0), keyed(&stat, "file").unwrap_or(0));
        m.usage = if root { anon.saturating_add(file) } else { num(&read(&d.join("memory.current"))?)? };
        m.working_set = m.usage.saturating_sub(keyed(&stat, "inactive_file").unwrap_or(0));
        m.rss = anon;
        m.pgfault = keyed(&stat, "pgfault").unwrap_or(0);
        m.pgmajfault = keyed(&stat, "pgmajfault").unwrap_or(0);
        m.limit = read(&d.join("memory.max")).and_then(|s| num(&s));
        m.swap_usage = read(&d.join("memory.swap.current")).and_then(|s| num(&s)).unwrap_or(0);
        m.swap_limit = read(&d.join("memory.swap.max")).and_then(|s| num(&s));
    } else {
        let d = v1_dir(paths, "memory", cgroup)?;
        let stat = read(&d.join("memory.stat"))?;
        m.usage = num(&read(&d.join("memory.usage_in_bytes"))?)?;
        m.working_set = m.usage.saturating_sub(keyed(&stat, "total_inactive_file").unwrap_or(0));
        m.rss = keyed(&stat, "total_rss").unwrap_or(0);
        m.pgfault = keyed(&stat, "total_pgfault").unwrap_or(0);
        m.pgmajfault = keyed(&stat, "total_pgmajfault").unwrap_or(0);
        m.limit = read(&d.join("memory.limit_in_bytes")).and_then(|s| num(&s)).filter(|l| *l <= 1 << 62);
        if let Some(memsw) = read(&d.join("memory.memsw.usage_in_bytes")).and_then(|s| num(&s)) {
            m.swap_usage = memsw.saturating_sub(m.usage);
        }
        m.swap_limit = read(&d.join("memory.memsw.limit_in_bytes")).and_then(|s| num(&s)).filter(|l| *l <= 1 << 62);
    }
    if root {
        m.limit = meminfo(paths, "MemTotal");
        // The machine's swap (cAdvisor's root container: its swap capacity).
        let total = meminfo(paths, "SwapTotal").unwrap_or(0);
        m.swap_usage = total.saturating_sub(meminfo(paths, "SwapFree").unwrap_or(0));
        m.swap_limit = Some(total);
    }
    Some(m)
}

/// One interface of `/proc/<pid>/net/dev`: (name, rx bytes, rx errors, tx bytes, tx errors).
pub type Interface = (String, u64, u64, u64, u64);

/// The interfaces of a network namespace (`/proc/<pid>/net/dev`), without `lo`, `veth*` and `docker*` as
/// cAdvisor leaves them out.
pub fn net_dev(paths: &HostPaths, pid: &str) -> Option<Vec<Interface>> {
    let s = read(&paths.proc.join(pid).join("net/dev"))?;
    Some(parse_net_dev(&s))
}

/// Parses `/proc/net/dev`.
pub fn parse_net_dev(s: &str) -> Vec<Interface> {
    let mut out = vec![];
    for l in s.lines().skip(2) {
        let Some((name, rest)) = l.split_once(':') else { continue };
        let name = name.trim();
        if name == "lo" || name.starts_with("veth") || name.starts_with("docker") {
            continue;
        }
        let f: Vec<u64> = rest.split_whitespace().filter_map(num).collect();
        if f.len() >= 11 {
            out.push((name.to_string(), f[0], f[2], f[8], f[10]));
        }
    }
    out.sort();
    out
}

/// A filesystem's size: (capacity, available, used, inodes, inodes free), in bytes and inodes.
pub fn statfs(p: &Path) -> Option<(u64, u64, u64, u64, u64)> {
    let s = nix::sys::statvfs::statvfs(p).ok()?;
    let frsize = s.fragment_size();
    let cap = s.blocks() * frsize;
    let free = s.blocks_free() * frsize;
    Some((cap, s.blocks_available() * frsize, cap.saturating_sub(free), s.files(), s.files_free()))
}

/// `maxpid` (min of `pid_max` and `threads-max`) and `curproc` (tasks, from `/proc/loadavg`).
pub fn rlimit(paths: &HostPaths) -> (Option<i64>, Option<i64>) {
    let val = |f: &str| read(&paths.proc.join("sys/kernel").join(f)).and_then(|s| s.trim().parse::<i64>().ok());
    let max = match (val("pid_max"), val("threads-max")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let cur =
        read(&paths.proc.join("loadavg")).and_then(|s| s.split_whitespace().nth(3)?.split_once('/')?.1.parse().ok());
    (max, cur)
}

/// Boot time, seconds since the epoch.
pub fn boot_time(paths: &HostPaths) -> Option<i64> {
    read(&paths.proc.join("stat"))?.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// Whether `dir` is the root of a filesystem (its device differs from its parent's).
pub fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(d), Some(Ok(p))) = (std::fs::metadata(dir), dir.parent().map(std::fs::metadata)) else { return false };
    d.dev() != p.dev()
}

/// Bytes and inodes used under `dir` as `du` counts them (`fs.DiskUsage`): blocks × 512, one inode per entry,
/// hard links once, without crossing into other filesystems.
pub fn disk_usage(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let top = std::fs::symlink_metadata(dir).ok()?;
    let dev = top.dev();
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if m.dev() != dev {
            continue;
        }
        if m.nlink() > 1 && !m.is_dir() && !seen.insert(m.ino()) {
            continue;
        }
        bytes += m.blocks() * 512;
        inodes += 1;
        if m.is_dir()
            && let Ok(rd) = std::fs::read_dir(&p)
        {
            stack.extend(rd.flatten().map(|e| e.path()));
        }
    }
    Some((bytes, inodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(v2: bool) -> (tempfile::TempDir, HostPaths) {
        let d = tempfile::tempdir().unwrap();
        let p = HostPaths { proc: d.path().join("proc"), cgroup: d.path().join("cg") };
        let w = |rel: &str, s: &str| {
            let f = d.path().join(rel);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        w(
            "proc/meminfo",
            "MemTotal:        2048000 kB\nMemFree:          100 kB\nSwapTotal:  1000 kB\nSwapFree:  400 kB\n",
        );
        w("proc/stat", "cpu  100 0 50 1000 0 0 0 0 0 0\nbtime 1700000000\n");
        w("proc/loadavg", "0.10 0.20 0.30 2/3518 12345\n");
        w("proc/sys/kernel/pid_max", "4194304\n");
        w("proc/sys/kernel/threads-max", "63403\n");
        w(
            "proc/77/net/dev",
            "Inter-|   Receive\n face |bytes\n    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n  eth0: 1000 10 2 0 0 0 0 0 500 5 1 0 0 0 0 0\n vethab: 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n",
        );
        if v2 {
            w("cg/cgroup.controllers", "cpu memory\n");
            w("cg/cpu.stat", "usage_usec 2500\nuser_usec 2000\n");
            w("cg/memory.stat", "anon 1000\nfile 3000\ninactive_file 500\npgfault 7\npgmajfault 1\n");
            w("cg/kubepods/cpu.stat", "usage_usec 1000\n");
            w("cg/kubepods/memory.current", "4096\n");
            w("cg/kubepods/memory.max", "max\n");
            w("cg/kubepods/memory.stat", "anon 3000\nfile 1096\ninactive_file 96\n");
            w("cg/kubepods/memory.swap.current", "512\n");
            w("cg/kubepods/memory.swap.max", "2048\n");
        } else {
            w("cg/cpuacct/cpuacct.usage", "123456789\n");
            w("cg/memory/memory.usage_in_bytes", "10000\n");
            w("cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
            w(
                "cg/memory/memory.stat",
                "cache 1\ntotal_inactive_file 2500\ntotal_rss 6000\ntotal_pgfault 40\ntotal_pgmajfault 3\n",
            );
            w("cg/memory/kubepods/memory.usage_in_bytes", "8000\n");
            w("cg/memory/kubepods/memory.limit_in_bytes", "1048576\n");
            w("cg/memory/kubepods/memory.stat", "total_inactive_file 1000\ntotal_rss 5000\n");
            w("cg/memory/kubepods/memory.memsw.usage_in_bytes", "8300\n");
            w("cg/memory/kubepods/memory.memsw.limit_in_bytes", "2097152\n");
        }
        (d, p)
    }

    #[test]
    fn cgroup_v1_figures_are_read_as_cadvisor_reads_them() {
        let (_d, p) = fake(false);
        assert_eq!(node_cpu(&p), Some(Cpu { usage_ns: 123456789 }));
        let m = cgroup_memory(&p, "/").unwrap();
        assert_eq!((m.usage, m.working_set, m.rss, m.pgfault, m.pgmajfault), (10000, 7500, 6000, 40, 3));
        assert_eq!(m.limit, Some(2048000 * 1024), "the root is limited by the machine's memory");
        let k = cgroup_memory(&p, "/kubepods").unwrap();
        assert_eq!((k.working_set, k.limit), (7000, Some(1048576)));
        assert_eq!((k.swap_usage, k.swap_limit), (300, Some(2097152)), "memory+swap less memory");
        assert_eq!((m.swap_usage, m.swap_limit), (600 * 1024, Some(1000 * 1024)), "the machine's swap");
    }

    #[test]
    fn cgroup_v2_figures_are_read_as_cadvisor_reads_them() {
        let (_d, p) = fake(true);
        assert_eq!(node_cpu(&p), Some(Cpu { usage_ns: 2_500_000 }));
        let m = cgroup_memory(&p, "/").unwrap();
        assert_eq!((m.usage, m.working_set, m.rss), (4000, 3500, 1000), "root usage is anon + file");
        let k = cgroup_memory(&p, "/kubepods").unwrap();
        assert_eq!((k.usage, k.working_set, k.limit), (4096, 4000, None));
        assert_eq!((k.swap_usage, k.swap_limit), (512, Some(2048)));
        assert_eq!(cgroup_cpu(&p, "/kubepods"), Some(Cpu { usage_ns: 1_000_000 }));
    }

    #[test]
    fn numbers_out_of_range_saturate_instead_of_panicking() {
        // Found by the fuzz target proc-files (crates/kubelet-fuzz): the sum of /proc/stat's jiffies overflowed.
        let d = tempfile::tempdir().unwrap();
        let p = HostPaths { proc: d.path().join("proc"), cgroup: d.path().join("none") };
        let v2 = HostPaths { proc: d.path().join("proc"), cgroup: d.path().join("cg") };
        std::fs::create_dir_all(&p.proc).unwrap();
        std::fs::create_dir_all(&v2.cgroup).unwrap();
        let big = u64::MAX;
        std::fs::write(p.proc.join("stat"), format!("cpu  {big} {big} 1 0 0 0 0 0\n")).unwrap();
        std::fs::write(p.proc.join("meminfo"), format!("MemTotal: {big} kB\n")).unwrap();
        std::fs::write(v2.cgroup.join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(v2.cgroup.join("cpu.stat"), format!("usage_usec {big}\n")).unwrap();
        std::fs::write(v2.cgroup.join("memory.stat"), format!("anon {big}\nfile {big}\n")).unwrap();
        assert!(node_cpu(&p).is_some());
        assert_eq!(meminfo(&p, "MemTotal"), Some(u64::MAX));
        assert_eq!(cgroup_cpu(&v2, "/"), Some(Cpu { usage_ns: u64::MAX }));
        assert_eq!(cgroup_memory(&v2, "/").map(|m| m.usage), Some(u64::MAX));
    }

    #[test]
    fn proc_files_give_network_limits_and_boot_time() {
        let (_d, p) = fake(false);
        assert_eq!(net_dev(&p, "77"), Some(vec![("eth0".to_string(), 1000, 2, 500, 1)]));
        assert_eq!(rlimit(&p), (Some(63403), Some(3518)));
        assert_eq!(boot_time(&p), Some(1_700_000_000));
        let (cap, avail, used, inodes, _) = statfs(Path::new("/")).unwrap();
        assert!(cap > 0 && avail <= cap && used <= cap && inodes > 0);
    }

    #[test]
    fn pod_and_container_cgroups_are_found_as_the_cgroupfs_driver_lays_them_out() {
        for v2 in [false, true] {
            let (d, p) = fake(v2);
            let w = |rel: &str, s: &str| {
                let f = d.path().join("cg").join(rel);
                std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                std::fs::write(f, s).unwrap();
            };
            let (cpu, pids) = if v2 { ("", "") } else { ("cpuacct/", "pids/") };
            w(&format!("{cpu}kubepods/besteffort/podu1/sb1/cgroup.procs"), "4242\n4243\n");
            w(&format!("{cpu}kubepods/besteffort/podu1/c1/cgroup.procs"), "");
            w(&format!("{cpu}kubepods/podu2/cgroup.procs"), "");
            w(&format!("{pids}kubepods/besteffort/podu1/pids.current"), "3\n");
            assert_eq!(pod_cgroup(&p, "/kubepods", "u1").as_deref(), Some("/kubepods/besteffort/podu1"), "v2 {v2}");
            assert_eq!(pod_cgroup(&p, "/kubepods", "u2").as_deref(), Some("/kubepods/podu2"));
            assert_eq!(pod_cgroup(&p, "/kubepods", "u3"), None);
            assert_eq!(cgroup_first_pid(&p, "/kubepods/besteffort/podu1/sb1"), Some(4242));
            assert_eq!(cgroup_pids(&p, "/kubepods/besteffort/podu1"), Some(3));
            let mut all = pod_cgroups(&p, "/kubepods");
            all.iter_mut().for_each(|(_, c)| c.sort());
            all.sort();
            assert_eq!(
                all,
                [
                    ("/kubepods/besteffort/podu1".to_string(), vec!["c1".to_string(), "sb1".to_string()]),
                    ("/kubepods/podu2".to_string(), vec![]),
                ]
            );
        }
    }

    #[test]
    fn pod_cgroups_are_found_under_a_cgroup_root_with_either_driver() {
        use kubelet_types::cgroup_name::{pod_cgroup as name_of, pods_cgroup};
        use kubelet_types::qos::QosClass;
        for (root, systemd) in [("/", true), ("/kubeadm-node", false), ("/kubeadm-node", true), ("/a/b", true)] {
            let (d, p) = fake(true);
            let pods = pods_cgroup(root);
            let (be, g) = (name_of(&pods, QosClass::BestEffort, "u-1"), name_of(&pods, QosClass::Guaranteed, "u-2"));
            let (be, g) = (be.literal(systemd), g.literal(systemd));
            let ctr = if systemd { "cri-containerd-c1.scope" } else { "c1" };
            for dir in [format!("{be}/{ctr}"), g.clone()] {
                std::fs::create_dir_all(d.path().join("cg").join(dir.trim_start_matches('/'))).unwrap();
            }
            // Another root's pod is not this kubelet's.
            let other = name_of(&pods_cgroup(if root == "/" { "/x" } else { "/" }), QosClass::Guaranteed, "9");
            std::fs::create_dir_all(d.path().join("cg").join(&other.literal(systemd)[1..])).unwrap();
            let pods = pods.literal(systemd);
            assert_eq!(pod_cgroup(&p, &pods, "u-1").as_deref(), Some(be.as_str()), "{root} systemd {systemd}");
            assert_eq!(pod_cgroup(&p, &pods, "u-2").as_deref(), Some(g.as_str()), "{root} systemd {systemd}");
            let mut all = pod_cgroups(&p, &pods);
            all.sort();
            assert_eq!(all, [(be, vec!["c1".to_string()]), (g, vec![])], "{root} systemd {systemd}");
        }
    }

    #[test]
    fn disk_usage_counts_blocks_and_entries_once() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/a"), vec![1u8; 10_000]).unwrap();
        std::fs::hard_link(d.path().join("sub/a"), d.path().join("b")).unwrap();
        let (bytes, inodes) = disk_usage(d.path()).unwrap();
        assert_eq!(inodes, 3, "the folder, sub and one of the two links");
        assert!(bytes >= 10_000, "{bytes}");
    }
}
