//! Per-key exponential back-off (`k8s.io/client-go/util/flowcontrol/backoff.go`), used for crash-loop
//! back-off of containers (10 s doubling to 300 s) and for image pull back-off.
//!
//! Event times are the runtime's wall-clock times (a container's `finishedAt`); "now" comes from the
//! [`Clock`]. An entry whose last update is older than twice the maximum is forgotten, which resets the back-off
//! of a container that ran for 10 minutes, as upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kubelet_types::Clock;

#[derive(Debug, Clone, Copy)]
struct Entry {
    backoff: Duration,
    last_update: SystemTime,
}

/// A keyed back-off.
pub struct Backoff {
    initial: Duration,
    max: Duration,
    clock: Arc<dyn Clock>,
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff").field("initial", &self.initial).field("max", &self.max).finish()
    }
}

impl Backoff {
    /// A back-off starting at `initial`, doubling up to `max`.
    pub fn new(initial: Duration, max: Duration, clock: Arc<dyn Clock>) -> Self {
        Self { initial, max, clock, entries: Mutex::new(HashMap::new()) }
    }

    fn expired(&self, event: SystemTime, last: SystemTime) -> bool {
        event.duration_since(last).unwrap_or_default() > self.max * 2
    }

    /// The current back-off of `key` (zero if none).
    pub fn get(&self, key: &str) -> Duration {
        self.entries.lock().unwrap().get(key).map(|e| e.backoff).unwrap_or_default()
    }

    /// Records a failure of `key` at `event`: starts or doubles its back-off.
    pub fn next(&self, key: &str, event: SystemTime) {
        let now = self.clock.now();
        let mut m = self.entries.lock().unwrap();
        let entry = match m.get(key) {
            Some(e) if !self.expired(event, e.last_update) => {
                Entry { backoff: (e.backoff * 2).min(self.max), last_update: now }
            }
            _ => Entry { backoff: self.initial, last_update: now },
        };
        m.insert(key.to_string(), entry);
    }

    /// Whether `key` is still backing off from a failure at `event`.
    pub fn is_in_backoff_since(&self, key: &str, event: SystemTime) -> bool {
        let m = self.entries.lock().unwrap();
        let Some(e) = m.get(key) else { return false };
        if self.expired(event, e.last_update) {
            return false;
        }
        self.clock.now().duration_since(event).unwrap_or_default() < e.backoff
    }

    /// Whether `key` is still backing off, counted from its last failure (`IsInBackOffSinceUpdate`, used for
    /// image pulls, whose failures have no runtime event time).
    pub fn is_in_backoff_since_update(&self, key: &str) -> bool {
        let m = self.entries.lock().unwrap();
        let Some(e) = m.get(key) else { return false };
        self.clock.now().duration_since(e.last_update).unwrap_or_default() < e.backoff
    }

    /// Forgets `key`.
    pub fn reset(&self, key: &str) {
        self.entries.lock().unwrap().remove(key);
    }

    /// Forgets entries not updated for twice the maximum (housekeeping).
    pub fn gc(&self) {
        let now = self.clock.now();
        let max2 = self.max * 2;
        self.entries.lock().unwrap().retain(|_, e| now.duration_since(e.last_update).unwrap_or_default() <= max2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_types::TestClock;

    #[tokio::test(start_paused = true)]
    async fn doubles_to_max_and_resets_after_long_run() {
        let clock = Arc::new(TestClock::fixed());
        let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300), clock.clone());
        let mut seen = vec![];
        for _ in 0..7 {
            let t = clock.now();
            b.next("k", t);
            seen.push(b.get("k").as_secs());
            assert!(b.is_in_backoff_since("k", t));
            tokio::time::sleep(b.get("k")).await;
            assert!(!b.is_in_backoff_since("k", t));
        }
        assert_eq!(seen, vec![10, 20, 40, 80, 160, 300, 300]);
        // A container that then runs for more than 10 minutes starts over at 10 s.
        tokio::time::sleep(Duration::from_secs(601)).await;
        b.next("k", clock.now());
        assert_eq!(b.get("k"), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn image_backoff_counts_from_the_last_failure() {
        let clock = Arc::new(TestClock::fixed());
        let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300), clock.clone());
        assert!(!b.is_in_backoff_since_update("img"));
        b.next("img", clock.now());
        assert!(b.is_in_backoff_since_update("img"));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!b.is_in_backoff_since_update("img"), "a pull is retried after 10 s, not 10 minutes");
        b.next("img", clock.now());
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(b.is_in_backoff_since_update("img"), "then after 20 s");
    }
}
