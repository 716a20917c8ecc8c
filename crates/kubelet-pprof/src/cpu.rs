//! The CPU profile (Go's `pprof.StartCPUProfile` at its 100 Hz): `ITIMER_PROF` sends `SIGPROF` for every 10 ms of
//! CPU the process uses; the handler walks the interrupted thread's stack into a fixed ring of slots, which the
//! profile drains every 100 ms into counts per stack. Written as Go writes it: sample types `samples/count` and
//! `cpu/nanoseconds`, period 10 ms of `cpu/nanoseconds`.
//!
//! Contract: one profile at a time ([`ProfileError::CpuInUse`]). The ring (4096 slots of 64 frames, 2 MiB) exists
//! only while a profile is taken; a sample that finds the ring full is dropped. The handler allocates nothing and
//! takes no lock; finishing waits for a handler still running before the ring is freed. Symbolizing at the end
//! fills the symbol cache, which is cleared again afterwards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ProfileError;
use crate::proto::{Builder, Frame};

/// Go's CPU profiling rate.
const HZ: i64 = 100;
const DEPTH: usize = 64;
const SLOTS: usize = 4096;
const DRAIN_EVERY: Duration = Duration::from_millis(100);

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

struct Slot {
    state: AtomicU8,
    len: usize,
    ips: [usize; DEPTH],
}

/// The ring while a profile is taken (null otherwise).
static RING: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
/// Where the next sample tries first.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Handlers running now.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Samples dropped for a full ring.
static DROPPED: AtomicUsize = AtomicUsize::new(0);
/// A profile is being taken.
static TAKEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigprof(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let ring = RING.load(Ordering::SeqCst);
    if !ring.is_null() {
        let i = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
        // SAFETY: the ring lives until no handler is in flight (see `CpuProfile::finish`); a slot is written only
        // by the handler that moved it from EMPTY to WRITING.
        let slot = unsafe { &mut *ring.add(i) };
        if slot.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            let mut n = 0;
            // SAFETY: walking this thread's own stack; nothing is allocated or locked by us here.
            unsafe {
                backtrace::trace_unsynchronized(|f| {
                    slot.ips[n] = f.ip() as usize;
                    n += 1;
                    n < DEPTH
                });
            }
            slot.len = n;
            slot.state.store(READY, Ordering::Release);
        } else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
}

/// Samples the process for `duration`; one profile at a time, as Go's.
pub async fn profile(duration: Duration) -> Result<Vec<u8>, ProfileError> {
    let mut p = CpuProfile::start()?;
    tracing::info!(seconds = duration.as_secs(), "cpu profile started");
    let end = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep_until(end.min(tokio::time::Instant::now() + DRAIN_EVERY)).await;
        p.drain();
    }
    let profile = p.finish();
    tracing::info!(bytes = profile.len(), droppedSamples = dropped(), "cpu profile taken");
    Ok(profile)
}

/// A CPU profile being taken: sampling stops when it is finished or dropped.
pub struct CpuProfile {
    ring: Vec<Slot>,
    counts: HashMap<Vec<usize>, i64>,
    old_action: libc::sigaction,
    started: tokio::time::Instant,
    start_nanos: i64,
    stopped: bool,
}

impl std::fmt::Debug for CpuProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuProfile").field("stacks", &self.counts.len()).finish()
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot")
    }
}

fn set_timer(interval: Duration) {
    let tv = libc::timeval { tv_sec: 0, tv_usec: interval.as_micros() as libc::suseconds_t };
    let it = libc::itimerval { it_interval: tv, it_value: tv };
    // SAFETY: a valid itimerval; a null old value.
    unsafe { libc::setitimer(libc::ITIMER_PROF, &it, std::ptr::null_mut()) };
}

impl CpuProfile {
    /// Starts sampling every thread of the process.
    pub fn start() -> Result<Self, ProfileError> {
        if TAKEN.swap(true, Ordering::SeqCst) {
            return Err(ProfileError::CpuInUse);
        }
        // Load the unwinder's tables now, outside the handler.
        backtrace::trace(|_| false);
        let mut ring: Vec<Slot> =
            (0..SLOTS).map(|_| Slot { state: AtomicU8::new(EMPTY), len: 0, ips: [0; DEPTH] }).collect();
        RING.store(ring.as_mut_ptr(), Ordering::SeqCst);
        // SAFETY: installing a handler that only touches atomics and the ring; the old action is kept to restore.
        let old_action = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigprof as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGPROF, &act, &mut old) != 0 {
                RING.store(std::ptr::null_mut(), Ordering::SeqCst);
                TAKEN.store(false, Ordering::SeqCst);
                return Err(ProfileError::Cpu(format!(
                    "install the SIGPROF handler: {}",
                    std::io::Error::last_os_error()
                )));
            }
            old
        };
        set_timer(Duration::from_micros(1_000_000 / HZ as u64));
        Ok(Self {
            ring,
            counts: HashMap::new(),
            old_action,
            started: tokio::time::Instant::now(),
            start_nanos: now_nanos(),
            stopped: false,
        })
    }

    /// Moves the samples written so far into the counts.
    pub fn drain(&mut self) {
        for slot in &mut self.ring {
            if slot.state.load(Ordering::Acquire) == READY {
                let stack = slot.ips[..slot.len].to_vec();
                slot.state.store(EMPTY, Ordering::Release);
                *self.counts.entry(stack).or_default() += 1;
            }
        }
    }

    /// Stops the timer and the handler; waits for one still running.
    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        set_timer(Duration::ZERO);
        RING.store(std::ptr::null_mut(), Ordering::SeqCst);
        while IN_FLIGHT.load(Ordering::SeqCst) != 0 {
            std::hint::spin_loop();
        }
        // SAFETY: restoring the action saved at start.
        unsafe { libc::sigaction(libc::SIGPROF, &self.old_action, std::ptr::null_mut()) };
    }

    /// Stops sampling; the profile, symbolized.
    pub fn finish(mut self) -> Vec<u8> {
        self.stop();
        self.drain();
        let period = 1_000_000_000 / HZ;
        let mut b = Builder::new(&[("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), period);
        let mut symbols = crate::Symbols::default();
        for (ips, n) in std::mem::take(&mut self.counts) {
            // The first frames are the handler's own, then the signal trampoline's: the sample starts after them.
            let start = ips.iter().position(|ip| symbols.is_handler(*ip)).map_or(0, |i| i + 2).min(ips.len());
            let stack: Vec<u64> = ips[start..].iter().map(|ip| symbols.location(&mut b, *ip)).collect();
            b.sample(stack, vec![n, n * period]);
        }
        drop(symbols);
        crate::release_symbols();
        b.finish(self.start_nanos, self.started.elapsed().as_nanos() as i64)
    }
}

impl Drop for CpuProfile {
    fn drop(&mut self) {
        self.stop();
        TAKEN.store(false, Ordering::SeqCst);
    }
}

/// Samples dropped for a full ring since the process started.
fn dropped() -> usize {
    DROPPED.load(Ordering::Relaxed)
}

/// Now, for profiles' `time_nanos`.
pub(crate) fn now_nanos() -> i64 {
    #[allow(clippy::disallowed_methods)] // a profile's wall-clock stamp
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as i64
}

/// Symbolizes `ip` into `frames` (innermost inlined call first).
pub(crate) fn resolve(ip: usize) -> Vec<Frame> {
    let mut frames = vec![];
    // A return address points after the call: look the call itself up.
    backtrace::resolve(ip.saturating_sub(1) as *mut std::ffi::c_void, |sym| {
        frames.push(Frame {
            name: sym.name().map(|n| format!("{n:#}")).unwrap_or_else(|| format!("{ip:#x}")),
            file: sym.filename().map(|f| f.display().to_string()).unwrap_or_default(),
            line: i64::from(sym.lineno().unwrap_or(0)),
        });
    });
    if frames.is_empty() {
        frames.push(Frame { name: format!("{ip:#x}"), file: String::new(), line: 0 });
    }
    frames
}
