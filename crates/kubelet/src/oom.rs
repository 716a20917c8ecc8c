//! The OOM watcher (`pkg/kubelet/oom/oom_watcher_linux.go` with cAdvisor's `utils/oomparser`).
//!
//! [`OomWatcher::run`] follows the kernel log (`/dev/kmsg`) and recognises OOM kills as cAdvisor does: an
//! `invoked oom-killer:` record starts one, ended by the kernel's `oom-kill:constraint=...,oom_memcg=...,
//! task_memcg=...,task=...,pid=...` record (kernels from 5.0) or by `Killed process <pid> (<name>)`; older
//! kernels name the memcg in `Task in <A> killed as a result of limit of <B>`. A kill whose victim memcg is the
//! root (`/`, the whole machine ran out) becomes a Warning event `SystemOOM` on the node: "System OOM encountered,
//! victim process: <name>, pid: <pid>". A kill inside a container's memory limit is the container's own
//! (`OOMKilled` in its status, from the runtime) and makes no node event. Unlike cAdvisor, the watcher starts at the
//! end of the log, so a restarted kubelet does not report old kills again. If the log cannot be read the watcher
//! logs why and ends; the kubelet goes on. Ends when cancelled.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::ObjectReference;
use kubelet_types::events::{Recorder, WARNING};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// One OOM kill (`OomInstance`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OomInstance {
    /// The killed process's pid.
    pub pid: u32,
    /// The killed process's name.
    pub process_name: String,
    /// When it died (from the record's timestamp).
    pub time_of_death: Option<SystemTime>,
    /// The memcg of the killed task.
    pub container_name: String,
    /// The memcg that ran out (`/` for the whole machine).
    pub victim_container_name: String,
    /// The kernel's constraint.
    pub constraint: String,
}

/// One kernel log record: its time since boot and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KmsgRecord {
    /// Microseconds since boot.
    pub ts_us: u64,
    /// The message (first line).
    pub message: String,
}

/// Parses a `/dev/kmsg` record (`PRIO,SEQ,TS_US[,...];MESSAGE`); None for a malformed one.
pub fn parse_record(raw: &str) -> Option<KmsgRecord> {
    let (meta, message) = raw.split_once(';')?;
    let mut f = meta.split(',');
    f.next()?.parse::<u32>().ok()?;
    f.next()?.parse::<u64>().ok()?;
    let ts_us = f.next()?.parse::<u64>().ok()?;
    Some(KmsgRecord { ts_us, message: message.lines().next().unwrap_or("").to_string() })
}

/// The fields of a `oom-kill:` record, when it names the memcg that ran out (`containerRegexp`).
fn oom_kill_line(m: &str) -> Option<(String, String, String, String, u32)> {
    let rest = &m[m.find("oom-kill:constraint=")? + "oom-kill:constraint=".len()..];
    let at = |key: &str| rest.rfind(key).map(|i| (i, i + key.len()));
    let (oom_i, oom_v) = at(",oom_memcg=")?;
    let (task_memcg_i, task_memcg_v) = at(",task_memcg=")?;
    let (task_i, task_v) = at(",task=")?;
    let (pid_i, pid_v) = at(",pid=")?;
    let (uid_i, _) = at(",uid=")?;
    if !(oom_i < task_memcg_i && task_memcg_i < task_i && task_i < pid_i && pid_i < uid_i) {
        return None;
    }
    let constraint = rest[..rest.find(",nodemask=")?].to_string();
    let pid = rest[pid_v..uid_i].parse().ok()?;
    Some((
        constraint,
        rest[oom_v..task_memcg_i].to_string(),
        rest[task_memcg_v..task_i].to_string(),
        rest[task_v..pid_i].to_string(),
        pid,
    ))
}

/// `Killed process <pid> (<name>)` (`lastLineRegexp`).
fn killed_process(m: &str) -> Option<(u32, String)> {
    let rest = &m[m.find("Killed process ")? + "Killed process ".len()..];
    let (pid, rest) = rest.split_once(" (")?;
    let name = &rest[..rest.rfind(')')?];
    Some((pid.parse().ok()?, name.to_string())).filter(|(_, n)| !n.is_empty())
}

/// `Task in <A> killed as a result of limit of <B>` (`legacyContainerRegexp`).
fn legacy_task(m: &str) -> Option<(String, String)> {
    let rest = &m[m.find("Task in ")? + "Task in ".len()..];
    let (a, b) = rest.split_once(" killed as a result of limit of ")?;
    let join = |s: &str| if s.starts_with('/') { s.to_string() } else { format!("/{s}") };
    Some((join(a), join(b)))
}

/// Turns kernel log records into OOM kills (`StreamOoms`); feed records in order.
#[derive(Debug, Default)]
pub struct OomParser {
    current: Option<OomInstance>,
}

impl OomParser {
    /// Feeds one record; returns a finished OOM kill.
    pub fn feed(&mut self, r: &KmsgRecord, time: Option<SystemTime>) -> Option<OomInstance> {
        let Some(cur) = self.current.as_mut() else {
            if r.message.contains("invoked oom-killer:") {
                self.current = Some(OomInstance {
                    container_name: "/".into(),
                    victim_container_name: "/".into(),
                    time_of_death: time,
                    ..Default::default()
                });
            }
            return None;
        };
        let mut finished = false;
        if let Some((constraint, oom_memcg, task_memcg, task, pid)) = oom_kill_line(&r.message) {
            cur.constraint = constraint;
            cur.victim_container_name = oom_memcg;
            cur.container_name = task_memcg;
            cur.process_name = task;
            cur.pid = pid;
            finished = true;
        } else if let Some((a, b)) = legacy_task(&r.message) {
            cur.container_name = a;
            cur.victim_container_name = b;
        }
        if !finished && let Some((pid, name)) = killed_process(&r.message) {
            cur.pid = pid;
            cur.process_name = name;
            finished = true;
        }
        if !finished {
            return None;
        }
        cur.time_of_death = time;
        self.current.take()
    }
}

/// The event of a system OOM, or None for a container's own.
pub fn system_oom_message(o: &OomInstance) -> Option<String> {
    if o.victim_container_name != "/" {
        return None;
    }
    let mut m = "System OOM encountered".to_string();
    if !o.process_name.is_empty() && o.pid != 0 {
        m += &format!(", victim process: {}, pid: {}", o.process_name, o.pid);
    }
    Some(m)
}

/// The watcher.
pub struct OomWatcher {
    /// The kernel log (`/dev/kmsg`).
    pub kmsg: PathBuf,
    /// Where events go.
    pub recorder: Arc<dyn Recorder>,
    /// The node.
    pub node_ref: ObjectReference,
    /// Where kills inside a container's memory limit are recorded (for the container's `OOMKilled` reason).
    pub kills: Arc<kubelet_runtime::oom_kills::OomKills>,
}

fn boot_time() -> SystemTime {
    let uptime = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    #[allow(clippy::disallowed_methods)] // kernel timestamps are relative to boot, a wall-clock fact
    let now = SystemTime::now();
    now - Duration::from_secs_f64(uptime)
}

impl OomWatcher {
    /// Follows the kernel log until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        use std::os::unix::fs::OpenOptionsExt;
        let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&self.kmsg) {
            Ok(f) => f,
            Err(e) => {
                warn!(path = %self.kmsg.display(), error = %e, "unable to read the kernel log; system OOMs will not be reported");
                return;
            }
        };
        // SAFETY: seeking an fd we own; /dev/kmsg takes SEEK_END to skip the records already there.
        unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
        // SAFETY: the AsyncFd owns the File, so the descriptor stays open and the same while registered.
        let fd = match unsafe { AsyncFd::register_with_interest(file, Interest::READABLE) } {
            Ok(fd) => fd,
            Err(e) => {
                warn!(path = %self.kmsg.display(), error = %std::io::Error::from(e), "unable to watch the kernel log");
                return;
            }
        };
        info!(path = %self.kmsg.display(), "watching the kernel log for OOM kills");
        let boot = boot_time();
        let mut parser = OomParser::default();
        let mut buf = vec![0u8; 8192];
        loop {
            let mut guard = tokio::select! {
                _ = cancel.cancelled() => return,
                g = fd.readable() => match g { Ok(g) => g, Err(_) => return },
            };
            loop {
                // SAFETY: reads into our buffer from an fd we own; one record per read.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    match std::io::Error::last_os_error().raw_os_error() {
                        Some(libc::EAGAIN) => {
                            guard.clear_ready();
                            break;
                        }
                        // Records overwritten before we read them.
                        Some(libc::EPIPE) => continue,
                        _ => {
                            warn!(error = %std::io::Error::last_os_error(), "error reading the kernel log; system OOMs will not be reported");
                            return;
                        }
                    }
                }
                if n == 0 {
                    guard.clear_ready();
                    break;
                }
                let raw = String::from_utf8_lossy(&buf[..n as usize]);
                let Some(rec) = parse_record(&raw) else { continue };
                let at = boot + Duration::from_micros(rec.ts_us);
                if let Some(oom) = parser.feed(&rec, Some(at)) {
                    match system_oom_message(&oom) {
                        Some(msg) => {
                            info!(pid = oom.pid, process = %oom.process_name, "got system OOM event");
                            self.recorder.event(&self.node_ref, WARNING, "SystemOOM", msg);
                        }
                        None => {
                            debug!(pid = oom.pid, process = %oom.process_name, memcg = %oom.victim_container_name, "OOM kill within a container's memory limit");
                            self.kills.record_memcg(&oom.container_name);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ts: u64, m: &str) -> KmsgRecord {
        parse_record(&format!("4,{ts},{ts};{m}\n")).unwrap()
    }

    #[test]
    fn a_global_oom_of_a_recent_kernel_is_a_system_oom() {
        let mut p = OomParser::default();
        assert_eq!(p.feed(&rec(1, "stress invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"), None), None);
        assert_eq!(p.feed(&rec(2, "Mem-Info:"), None), None);
        let line = "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/kubepods/besteffort/pod1/abc,task=stress,pid=4242,uid=0";
        assert_eq!(p.feed(&rec(3, line), None), None, "no oom_memcg: a global OOM goes on to the last line");
        let o = p
            .feed(&rec(4, "Out of memory: Killed process 4242 (stress) total-vm:2000000kB, anon-rss:1900000kB"), None)
            .unwrap();
        assert_eq!((o.pid, o.process_name.as_str(), o.victim_container_name.as_str()), (4242, "stress", "/"));
        assert_eq!(system_oom_message(&o).unwrap(), "System OOM encountered, victim process: stress, pid: 4242");
    }

    #[test]
    fn a_kill_inside_a_containers_limit_is_no_system_oom() {
        let mut p = OomParser::default();
        p.feed(&rec(1, "dd invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=1000"), None);
        let line = "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0,oom_memcg=/kubepods/burstable/pod9/c1,task_memcg=/kubepods/burstable/pod9/c1,task=dd,pid=77,uid=0";
        let o = p.feed(&rec(2, line), None).unwrap();
        assert_eq!(o.victim_container_name, "/kubepods/burstable/pod9/c1");
        assert_eq!((o.pid, o.constraint.as_str()), (77, "CONSTRAINT_MEMCG"));
        assert_eq!(system_oom_message(&o), None);
        // Older kernels: the memcg from the "Task in" line.
        p.feed(&rec(3, "x invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0"), None);
        p.feed(&rec(4, "Task in /kubepods/pod1/c killed as a result of limit of /kubepods/pod1"), None);
        let o = p.feed(&rec(5, "Memory cgroup out of memory: Killed process 12 (x) total-vm:1kB"), None).unwrap();
        assert_eq!((o.victim_container_name.as_str(), o.process_name.as_str()), ("/kubepods/pod1", "x"));
        assert_eq!(parse_record("garbage"), None);
    }
}
