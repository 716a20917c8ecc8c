//! CPU and memory of a process, read from `/proc` (another process: the rkubelet binary) or from `getrusage`
//! (this process or this thread: the in-process scenarios).

use std::time::Duration;

/// CPU time (user + system) of process `pid` from `/proc/<pid>/stat`, including its exited threads. The kernel
/// reports it in clock ticks (10 ms at USER_HZ 100), so windows are kept at several seconds or more.
pub fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the whole line are utime and stime; `rest` starts at field 3.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// Resident set size of process `pid` in bytes (`VmRSS`).
pub fn rss_of(pid: u32) -> Option<u64> {
    status_kib(&format!("/proc/{pid}/status"), "VmRSS:").map(|k| k * 1024)
}

/// Resident set size of this process in bytes.
pub fn rss() -> u64 {
    status_kib("/proc/self/status", "VmRSS:").unwrap_or(0) * 1024
}

fn status_kib(path: &str, key: &str) -> Option<u64> {
    let t = std::fs::read_to_string(path).ok()?;
    t.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU time of this process (every thread).
pub fn cpu_time() -> Duration {
    rusage(libc::RUSAGE_SELF)
}

/// CPU time of the calling thread only.
pub fn thread_cpu_time() -> Duration {
    rusage(libc::RUSAGE_THREAD)
}

/// Total memory of the machine in bytes.
pub fn total_memory() -> u64 {
    kubelet::nodestatus::machine::memory_capacity()
}

/// The value at quantile `q` (0..=1) of sorted `v`, nearest rank.
pub fn quantile(v: &[Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}
