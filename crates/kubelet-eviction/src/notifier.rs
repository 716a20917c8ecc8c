//! Memory pressure seen within a second (beyond upstream; upstream's `threshold_notifier_linux.go` and
//! `memory_threshold_notifier.go` exist but are off by default, and its manager otherwise polls every 10 s).
//!
//! [`spawn`] starts, for the memory thresholds, the fastest source the host has, each waking the eviction manager
//! through one coalescing channel (capacity 1; a wake-up while one is pending is dropped):
//! - **memcg thresholds** (cgroup v1): an eventfd registered in `cgroup.event_control` on `memory.usage_in_bytes`
//!   of the root cgroup (`memory.available`) and of the pods cgroup (`allocatableMemory.available`), at the usage
//!   where the working set leaves less than the threshold (`capacity - threshold + inactive_file`). The kernel
//!   signals the crossing itself; the registration is renewed every 10 s (`notifierRefreshInterval`) as the
//!   inactive file pages change.
//! - **PSI** (`/proc/pressure/memory`, kernels with pressure stall information): a trigger on 100 ms of stall in a
//!   2 s window, so memory that is short for reclaim reasons wakes the manager too.
//! - **polling**, always, as the safety net: the root's working set read every 500 ms (cgroup v1 or v2), since a
//!   memcg level set from the page cache of up to 10 s before can fire before the real crossing or after it.
//!
//! Each source runs until cancelled; a source that fails to set up logs why and leaves the others (and the
//! manager's own 10 s period) in place.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::threshold::{Signal, Threshold};

/// Set to `1` to turn the notifiers off (the manager then polls every 10 s, as upstream by default): for
/// measuring the difference.
pub const DISABLE_ENV: &str = "RKUBELET_EVICTION_NOTIFIER_OFF";
/// How often a memcg threshold is recomputed (`notifierRefreshInterval`).
pub const REFRESH: Duration = Duration::from_secs(10);
/// The polling safety net's period.
pub const POLL: Duration = Duration::from_millis(500);
/// The PSI trigger: 100 ms of stall of some task within 2 s (a window of a multiple of 2 s is what the kernel
/// allows without `CAP_SYS_RESOURCE`).
pub const PSI_TRIGGER: &str = "some 100000 2000000";

/// Where the notifiers read.
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    /// The cgroup mount (`/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// `/proc`.
    pub proc: PathBuf,
    /// The pods cgroup (`<cgroupRoot>/kubepods` in the driver's form: `/kubepods`, `/kubepods.slice`), when pods
    /// have one.
    pub pods_cgroup: Option<String>,
    /// The memory thresholds (others are ignored).
    pub thresholds: Vec<Threshold>,
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn stat_key(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

fn mem_total(proc: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(proc.join("meminfo")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|k| k * 1024)
}

/// The cgroup of a memory signal, and its v1 memory controller directory.
fn v1_dir(cfg: &NotifierConfig, signal: Signal) -> Option<PathBuf> {
    let mem = cfg.cgroup_root.join("memory");
    match signal {
        Signal::MemoryAvailable => Some(mem),
        Signal::AllocatableMemoryAvailable => Some(mem.join(cfg.pods_cgroup.as_deref()?.trim_start_matches('/'))),
        _ => None,
    }
}

/// The usage (`memory.usage_in_bytes`) at which `t` is crossed in v1 cgroup `dir`: capacity minus the threshold
/// plus the inactive file pages (the working set is usage minus those).
pub fn usage_threshold(dir: &Path, proc: &Path, t: &Threshold) -> Option<u64> {
    let stat = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
    let inactive = stat_key(&stat, "total_inactive_file").unwrap_or(0);
    let capacity = match t.signal {
        Signal::MemoryAvailable => mem_total(proc)?,
        _ => read_u64(&dir.join("memory.limit_in_bytes")).filter(|l| *l < 1 << 62).or_else(|| mem_total(proc))?,
    };
    let q = t.value.quantity(capacity as i64).max(0) as u64;
    Some(capacity.saturating_sub(q) + inactive)
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd has no memory preconditions; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn wake(tx: &mpsc::Sender<()>) {
    // A full channel already holds a wake-up.
    let _ = tx.try_send(());
}

/// One memcg threshold: registered, waited on, renewed every [`REFRESH`].
async fn memcg(cfg: NotifierConfig, t: Threshold, tx: mpsc::Sender<()>, cancel: CancellationToken) {
    let Some(dir) = v1_dir(&cfg, t.signal) else { return };
    loop {
        let Some(at) = usage_threshold(&dir, &cfg.proc, &t) else {
            warn!(signal = %t.signal, cgroup = %dir.display(), "eviction notifier: unable to read the cgroup's memory figures");
            return;
        };
        let registered = (|| -> std::io::Result<(AsyncFd<OwnedFd>, std::fs::File)> {
            let efd = eventfd()?;
            let usage = std::fs::File::open(dir.join("memory.usage_in_bytes"))?;
            let mut control = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.event_control"))?;
            control.write_all(format!("{} {} {at}", efd.as_raw_fd(), usage.as_raw_fd()).as_bytes())?;
            // SAFETY: the AsyncFd owns `efd` (an OwnedFd), so the descriptor stays open and the same while registered.
            let efd =
                unsafe { AsyncFd::register_with_interest(efd, Interest::READABLE) }.map_err(std::io::Error::from)?;
            Ok((efd, usage))
        })();
        let (efd, _usage) = match registered {
            Ok(r) => r,
            Err(e) => {
                warn!(signal = %t.signal, cgroup = %dir.display(), error = %e, "eviction notifier: unable to register a memcg threshold");
                return;
            }
        };
        debug!(signal = %t.signal, usageThreshold = at, "eviction notifier: memcg threshold registered");
        // Until the refresh, or an event: then registered again at once with the inactive file pages of now (the
        // crossing the event saw may have come before the working set's, as the page cache moved since, and the
        // kernel signals a level once per crossing).
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(REFRESH) => {}
            r = efd.readable() => {
                let Ok(mut guard) = r else { return };
                let mut buf = [0u8; 8];
                // SAFETY: reads 8 bytes into a local buffer from an eventfd we own.
                let _ = unsafe { libc::read(efd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
                guard.clear_ready();
                debug!(signal = %t.signal, "eviction notifier: memcg threshold crossed");
                wake(&tx);
            }
        }
    }
}

/// The PSI trigger on `/proc/pressure/memory`.
async fn psi(proc: PathBuf, tx: mpsc::Sender<()>, cancel: CancellationToken) {
    let path = proc.join("pressure/memory");
    let opened = (|| -> std::io::Result<AsyncFd<std::fs::File>> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open(&path)?;
        // One write with the terminating NUL: the kernel overwrites the last byte written with one.
        let mut trigger = PSI_TRIGGER.as_bytes().to_vec();
        trigger.push(0);
        f.write_all(&trigger)?;
        // SAFETY: the AsyncFd owns the File, so the descriptor stays open and the same while registered.
        unsafe { AsyncFd::register_with_interest(f, Interest::PRIORITY) }.map_err(std::io::Error::from)
    })();
    let fd = match opened {
        Ok(f) => f,
        Err(e) => {
            info!(path = %path.display(), error = %e, "eviction notifier: no PSI memory trigger");
            return;
        }
    };
    info!(path = %path.display(), trigger = PSI_TRIGGER, "eviction notifier: PSI memory trigger registered");
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = fd.ready(Interest::PRIORITY) => {
                let Ok(mut guard) = r else { return };
                guard.clear_ready();
                debug!("eviction notifier: memory pressure stall");
                wake(&tx);
                // At most one wake-up per trigger window.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// The polling safety net: the root's working set (v1: `memory.usage_in_bytes` − `total_inactive_file`; v2:
/// `memory.stat` anon + file − inactive_file) every [`POLL`]; wakes the manager when a `memory.available`
/// threshold is crossed or left.
async fn poll(cfg: NotifierConfig, tx: mpsc::Sender<()>, cancel: CancellationToken) {
    let thresholds: Vec<Threshold> =
        cfg.thresholds.iter().filter(|t| t.signal == Signal::MemoryAvailable).cloned().collect();
    if thresholds.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut crossed = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(total) = mem_total(&cfg.proc) else { continue };
        let v1 = cfg.cgroup_root.join("memory");
        let ws = if v1.join("memory.usage_in_bytes").exists() {
            let (Some(usage), Ok(stat)) =
                (read_u64(&v1.join("memory.usage_in_bytes")), std::fs::read_to_string(v1.join("memory.stat")))
            else {
                continue;
            };
            usage.saturating_sub(stat_key(&stat, "total_inactive_file").unwrap_or(0))
        } else {
            let Ok(stat) = std::fs::read_to_string(cfg.cgroup_root.join("memory.stat")) else { continue };
            (stat_key(&stat, "anon").unwrap_or(0) + stat_key(&stat, "file").unwrap_or(0))
                .saturating_sub(stat_key(&stat, "inactive_file").unwrap_or(0))
        };
        let available = total.saturating_sub(ws) as i64;
        let now = thresholds.iter().any(|t| t.value.quantity(total as i64) > available);
        if now != crossed {
            crossed = now;
            wake(&tx);
        }
    }
}

/// Starts the notifiers for `cfg`'s memory thresholds; the receiver wakes the eviction manager. None when there is
/// no memory threshold.
pub fn spawn(cfg: NotifierConfig, tracker: &TaskTracker, cancel: &CancellationToken) -> Option<mpsc::Receiver<()>> {
    let memory: Vec<Threshold> = cfg.thresholds.iter().filter(|t| t.signal.is_memory()).cloned().collect();
    if memory.is_empty() {
        return None;
    }
    let (tx, rx) = mpsc::channel(1);
    if std::env::var(DISABLE_ENV).is_ok_and(|v| v == "1") {
        info!("eviction notifier: off ({DISABLE_ENV}=1); the manager polls every 10 s as upstream");
        return None;
    }
    let v1 = cfg.cgroup_root.join("memory/cgroup.event_control").exists();
    if v1 {
        for t in memory {
            info!(signal = %t.signal, "eviction notifier: using memcg threshold notifications");
            tracker.spawn(memcg(cfg.clone(), t, tx.clone(), cancel.clone()));
        }
    } else {
        info!("eviction notifier: no memcg threshold notifications (cgroup v2)");
    }
    // The safety net of both: the working set read twice a second (two small files), so a crossing the memcg
    // level missed (it is set from the page cache of up to 10 s before) is still seen within half a second.
    tracker.spawn(poll(cfg.clone(), tx.clone(), cancel.clone()));
    tracker.spawn(psi(cfg.proc.clone(), tx, cancel.clone()));
    Some(rx)
}
