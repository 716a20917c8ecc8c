//! client_golang's process collector (`process_*`), read from `/proc/self` at each scrape.

use std::fmt::Write as _;

use crate::{Collector, Opts, Stability, format_float};

const NAMES: [&str; 7] = [
    "process_cpu_seconds_total",
    "process_max_fds",
    "process_open_fds",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes",
];

/// `process_start_time_seconds` alone, as component-base registers it beside the probe and SLI metrics.
pub(crate) fn start_time_gauge() -> std::sync::Arc<dyn Collector> {
    let start = crate::GaugeVec::new(Opts::alpha(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        &[],
    ));
    start.set(&[], read().start_time);
    std::sync::Arc::new(start)
}

/// The `process_*` families of the running process.
#[derive(Default)]
pub struct ProcessCollector;

/// What `/proc/self` says.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Resident set in bytes.
    pub resident_bytes: f64,
    /// Virtual size in bytes.
    pub virtual_bytes: f64,
    /// Start time, seconds since the epoch.
    pub start_time: f64,
    /// Open descriptors.
    pub open_fds: f64,
    /// The soft limit of descriptors.
    pub max_fds: f64,
    /// The soft limit of the address space (`-1` when unlimited, as client_golang).
    pub max_virtual_bytes: f64,
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn boot_time() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    s.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

fn limit(limits: &str, name: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with(name))?;
    let soft = line[name.len()..].split_whitespace().next()?;
    Some(if soft == "unlimited" { -1.0 } else { soft.parse().ok()? })
}

/// Parses `/proc/self/stat` (fields after the command name) into CPU, sizes and start time.
pub fn parse_stat(stat: &str, ticks: f64, page: f64, btime: f64) -> Option<(f64, f64, f64, f64)> {
    // `.get`: the name may end the text, or a multibyte character may follow it (a torn or foreign file).
    let rest = stat.get(stat.rfind(')')? + 1..)?.trim_start();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ... utime(11) stime(12) ... starttime(19) vsize(20) rss(21).
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let cpu = (num(11)? + num(12)?) / ticks;
    let start = btime + num(19)? / ticks;
    Some((cpu, num(21)? * page, num(20)?, start))
}

/// Reads the process's figures.
pub fn read() -> ProcessStats {
    let mut st = ProcessStats::default();
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as f64,
        _ => 4096.0,
    };
    if let Ok(s) = std::fs::read_to_string("/proc/self/stat")
        && let Some((cpu, rss, vsize, start)) = parse_stat(&s, clock_ticks(), page, boot_time().unwrap_or(0.0))
    {
        st.cpu_seconds = cpu;
        st.resident_bytes = rss;
        st.virtual_bytes = vsize;
        st.start_time = start;
    }
    st.open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as f64).unwrap_or(0.0);
    if let Ok(l) = std::fs::read_to_string("/proc/self/limits") {
        st.max_fds = limit(&l, "Max open files").unwrap_or(0.0);
        st.max_virtual_bytes = limit(&l, "Max address space").unwrap_or(-1.0);
    }
    st
}

impl Collector for ProcessCollector {
    fn names(&self) -> Vec<&'static str> {
        NAMES.to_vec()
    }

    fn collect(&self, out: &mut String) {
        let st = read();
        let rows: [(&'static str, &'static str, &str, f64); 7] = [
            (NAMES[0], "Total user and system CPU time spent in seconds.", "counter", st.cpu_seconds),
            (NAMES[1], "Maximum number of open file descriptors.", "gauge", st.max_fds),
            (NAMES[2], "Number of open file descriptors.", "gauge", st.open_fds),
            (NAMES[3], "Resident memory size in bytes.", "gauge", st.resident_bytes),
            (NAMES[4], "Start time of the process since unix epoch in seconds.", "gauge", st.start_time),
            (NAMES[5], "Virtual memory size in bytes.", "gauge", st.virtual_bytes),
            (NAMES[6], "Maximum amount of virtual memory available in bytes.", "gauge", st.max_virtual_bytes),
        ];
        for (name, help, kind, v) in rows {
            Opts { name, help, stability: Stability::Raw, labels: &[], show_empty: true }.header(out, kind);
            let _ = writeln!(out, "{name} {}", format_float(v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        // A command name with spaces and a parenthesis, as the kernel writes it.
        let stat = "1234 (rk (x) y) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 150 0 0 20 0 3 0 1000 104857600 2560 18446744073709551615";
        let (cpu, rss, vsize, start) = parse_stat(stat, 100.0, 4096.0, 1_700_000_000.0).unwrap();
        assert_eq!(cpu, 4.0);
        assert_eq!(rss, 2560.0 * 4096.0);
        assert_eq!(vsize, 104857600.0);
        assert_eq!(start, 1_700_000_010.0);
    }

    #[test]
    fn a_truncated_or_odd_stat_is_refused_without_panicking() {
        // Found by the fuzz target proc-files (crates/kubelet-fuzz): slicing two bytes past the `)` panicked.
        assert_eq!(parse_stat("1 (x)", 100.0, 4096.0, 0.0), None);
        assert_eq!(parse_stat("  )\u{a1}: ", 100.0, 4096.0, 0.0), None);
    }

    #[test]
    fn own_process_is_measured() {
        let st = read();
        assert!(st.resident_bytes > 0.0 && st.virtual_bytes >= st.resident_bytes, "{st:?}");
        assert!(st.open_fds >= 3.0 && st.max_fds >= st.open_fds, "{st:?}");
        assert!(st.start_time > 1.5e9, "{st:?}");
        let mut out = String::new();
        ProcessCollector.collect(&mut out);
        assert!(out.contains("# HELP process_resident_memory_bytes Resident memory size in bytes.\n"), "{out}");
        assert!(out.contains("# TYPE process_cpu_seconds_total counter\n"), "{out}");
    }
}
