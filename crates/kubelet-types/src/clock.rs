//! Wall time written into API objects (`startedAt`, `lastTransitionTime`, `kubernetes.io/config.seen`).
//!
//! Monotonic time goes through `tokio::time` everywhere; only wall time goes through [`Clock`], so unit tests on
//! tokio's paused clock see wall time move with the paused clock ([`TestClock`]).

use std::time::{Duration, SystemTime};

/// Source of wall time.
pub trait Clock: Send + Sync + 'static {
    /// The current wall time.
    fn now(&self) -> SystemTime;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A wall clock that starts at a fixed time and advances with `tokio::time` (so with the paused clock in tests).
#[derive(Debug, Clone)]
pub struct TestClock {
    base: SystemTime,
    start: tokio::time::Instant,
}

impl TestClock {
    /// A clock reading `base` now.
    pub fn new(base: SystemTime) -> Self {
        Self { base, start: tokio::time::Instant::now() }
    }

    /// A clock starting at 2026-01-01T00:00:00Z.
    pub fn fixed() -> Self {
        Self::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600))
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        self.base + self.start.elapsed()
    }
}

/// Wall time as an API `Time` (seconds precision on the wire, as the API serialises it).
pub fn api_time(t: SystemTime) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let ns = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos() as i128;
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_nanosecond(ns).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// Wall time as RFC 3339 with nanoseconds in UTC, as Go's `time.RFC3339Nano` (trailing zeros trimmed).
pub fn rfc3339_nano(t: SystemTime) -> String {
    api_time(t).0.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn test_clock_moves_with_paused_time() {
        let c = TestClock::fixed();
        let t0 = c.now();
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(c.now().duration_since(t0).unwrap(), Duration::from_secs(90));
    }
}
