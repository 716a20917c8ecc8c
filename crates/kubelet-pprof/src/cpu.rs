//! The CPU profile (Go's `pprof.StartCPUProfile` at its 100 Hz): every thread of the process is sampled on
//! `SIGPROF` (pprof-rs) for the asked duration, and the stacks are written as Go writes them: sample types
//! `samples/count` and `cpu/nanoseconds`, period 10 ms of `cpu/nanoseconds`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ProfileError;
use crate::proto::{Builder, Frame};

/// Go's CPU profiling rate.
const HZ: i32 = 100;

/// Samples the process for `duration`; one profile at a time, as Go's.
pub async fn profile(duration: Duration) -> Result<Vec<u8>, ProfileError> {
    let p = CpuProfile::start()?;
    tokio::time::sleep(duration).await;
    p.finish()
}

/// A CPU profile being taken: sampling stops when it is finished or dropped.
pub struct CpuProfile(pprof::ProfilerGuard<'static>);

impl std::fmt::Debug for CpuProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CpuProfile")
    }
}

impl CpuProfile {
    /// Starts sampling every thread of the process.
    pub fn start() -> Result<Self, ProfileError> {
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(HZ)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .map_err(|e| match e {
                pprof::Error::Running => ProfileError::CpuInUse,
                other => ProfileError::Cpu(other.to_string()),
            })?;
        Ok(Self(guard))
    }

    /// Stops sampling; the profile, symbolized.
    pub fn finish(self) -> Result<Vec<u8>, ProfileError> {
        let report = self.0.report().build().map_err(|e| ProfileError::Cpu(e.to_string()))?;
        drop(self);
        let period = 1_000_000_000 / i64::from(HZ);
        let mut b = Builder::new(&[("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), period);
        for (frames, count) in &report.data {
            let mut stack = Vec::with_capacity(frames.frames.len());
            for symbols in &frames.frames {
                let inlined: Vec<Frame> = symbols
                    .iter()
                    .map(|s| Frame { name: s.name(), file: s.filename().into_owned(), line: i64::from(s.lineno()) })
                    .collect();
                let address = symbols.first().and_then(|s| s.addr).map_or(0, |a| a as u64);
                stack.push(b.location(address, &inlined));
            }
            let n = *count as i64;
            b.sample(stack, vec![n, n * period]);
        }
        let start = report.timing.start_time.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(b.finish(start.as_nanos() as i64, report.timing.duration.as_nanos() as i64))
    }
}

/// Now, for profiles' `time_nanos`.
pub(crate) fn now_nanos() -> i64 {
    #[allow(clippy::disallowed_methods)] // a profile's wall-clock stamp
    let now = SystemTime::now();
    now.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as i64
}
