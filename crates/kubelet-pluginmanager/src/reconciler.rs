//! The desired and actual state of the plugin sockets and the operations that bring one to the other
//! (`pkg/kubelet/pluginmanager/cache`, `reconciler/reconciler.go` and the back-off of `pkg/util/goroutinemap`).
//!
//! Pure bookkeeping, owned by the manager's task: the watcher's changes go into the desired state
//! ([`Reconciler::add`], [`Reconciler::remove`]); [`Reconciler::plan`] says which registrations and deregistrations
//! to start now; the manager runs them and reports each end to [`Reconciler::finished`]. As upstream:
//! deregistrations first; one operation per socket at a time; a socket whose registration failed waits 500 ms, then
//! twice as long after each further failure, up to 2 min 2 s, and a success forgets its failures. A socket seen
//! again (a plugin restarted on the same path) gets a new identity, so what is registered for it is deregistered
//! before it registers again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

/// The wait after a socket's first failed registration (`initialDurationBeforeRetry`).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between registrations of one socket (`maxDurationBeforeRetry`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(122);

/// A plugin registered with its handler (an actual state entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// The identity of the socket's sighting it was registered for.
    pub uuid: u64,
    /// Its type (`DevicePlugin`, `DRAPlugin`, `CSIPlugin`): which handler has it.
    pub plugin_type: String,
    /// Its name (a resource name, a driver name).
    pub name: String,
    /// Where its service is (its socket when it names none).
    pub endpoint: String,
}

/// An operation to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Register the plugin of `socket` (sighting `uuid`).
    Register {
        /// The socket.
        socket: PathBuf,
        /// The sighting.
        uuid: u64,
    },
    /// Deregister what was registered for `socket`.
    Unregister {
        /// The socket.
        socket: PathBuf,
        /// What its handler has.
        registered: Registered,
    },
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Registered.
    Registered(Registered),
    /// The handler has the plugin but its registration failed: it stays in the actual state (as upstream, so it is
    /// deregistered when its socket goes and not registered again meanwhile); counts as a failure.
    HandlerFailed(Registered),
    /// Refused or unreachable: nothing registered, retried after the back-off while the socket stays.
    Failed,
    /// Deregistered.
    Unregistered,
}

#[derive(Debug, Default)]
struct OpState {
    pending: bool,
    failures: u32,
    not_before: Option<Instant>,
}

/// The two states of the world and the operations between them.
#[derive(Debug, Default)]
pub struct Reconciler {
    next_uuid: u64,
    desired: BTreeMap<PathBuf, u64>,
    actual: BTreeMap<PathBuf, Registered>,
    ops: BTreeMap<PathBuf, OpState>,
}

impl Reconciler {
    /// A socket appeared (or was seen again): a new sighting (`AddOrUpdatePlugin`).
    pub fn add(&mut self, socket: &Path) {
        self.next_uuid += 1;
        self.desired.insert(socket.to_path_buf(), self.next_uuid);
    }

    /// A socket went (`RemovePlugin`).
    pub fn remove(&mut self, socket: &Path) {
        self.desired.remove(socket);
    }

    /// The operations to start now, marked as running: deregistrations of what is registered for a socket gone or
    /// seen again, then registrations of the sockets not registered for their current sighting.
    pub fn plan(&mut self, now: Instant) -> Vec<Op> {
        let mut out = vec![];
        let stale: Vec<PathBuf> =
            self.actual.iter().filter(|(s, r)| self.desired.get(*s) != Some(&r.uuid)).map(|(s, _)| s.clone()).collect();
        for socket in stale {
            if self.start(&socket, now) {
                let registered = self.actual.remove(&socket).expect("an actual entry");
                out.push(Op::Unregister { socket, registered });
            }
        }
        let wanted: Vec<(PathBuf, u64)> = self
            .desired
            .iter()
            .filter(|(s, u)| self.actual.get(*s).is_none_or(|r| r.uuid != **u))
            .map(|(s, u)| (s.clone(), *u))
            .collect();
        for (socket, uuid) in wanted {
            if self.start(&socket, now) {
                out.push(Op::Register { socket, uuid });
            }
        }
        out
    }

    /// Whether an operation on `socket` may start now; if so it is marked running.
    fn start(&mut self, socket: &Path, now: Instant) -> bool {
        let op = self.ops.entry(socket.to_path_buf()).or_default();
        if op.pending || op.not_before.is_some_and(|t| now < t) {
            return false;
        }
        op.pending = true;
        true
    }

    /// An operation on `socket` ended.
    pub fn finished(&mut self, socket: &Path, outcome: Outcome, now: Instant) {
        let failed = match outcome {
            Outcome::Registered(r) => {
                self.actual.insert(socket.to_path_buf(), r);
                false
            }
            Outcome::HandlerFailed(r) => {
                self.actual.insert(socket.to_path_buf(), r);
                true
            }
            Outcome::Failed => true,
            Outcome::Unregistered => false,
        };
        if !failed {
            self.ops.remove(socket);
            return;
        }
        let op = self.ops.entry(socket.to_path_buf()).or_default();
        op.pending = false;
        op.failures += 1;
        op.not_before = Some(now + backoff(op.failures));
    }

    /// The sockets of the desired state.
    pub fn desired(&self) -> impl Iterator<Item = &Path> {
        self.desired.keys().map(PathBuf::as_path)
    }

    /// The sockets registered, with what their handlers have.
    pub fn actual(&self) -> impl Iterator<Item = (&Path, &Registered)> {
        self.actual.iter().map(|(s, r)| (s.as_path(), r))
    }

    /// When the next operation held back by a back-off may start.
    pub fn next_retry(&self) -> Option<Instant> {
        self.ops.values().filter(|o| !o.pending).filter_map(|o| o.not_before).min()
    }
}

/// The wait after `failures` consecutive failures: 500 ms doubled each time, at most [`MAX_BACKOFF`].
pub fn backoff(failures: u32) -> Duration {
    let d = INITIAL_BACKOFF.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    d.min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(uuid: u64) -> Registered {
        Registered { uuid, plugin_type: "DevicePlugin".into(), name: "example.com/r".into(), endpoint: "/s".into() }
    }

    fn register_op(ops: &[Op]) -> u64 {
        match ops {
            [Op::Register { uuid, .. }] => *uuid,
            other => panic!("one registration expected, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_socket_registers_once_and_a_gone_one_deregisters() {
        let s = Path::new("/r/a.sock");
        let mut r = Reconciler::default();
        r.add(s);
        let uuid = register_op(&r.plan(Instant::now()));
        assert!(r.plan(Instant::now()).is_empty(), "one operation per socket at a time");
        r.finished(s, Outcome::Registered(reg(uuid)), Instant::now());
        assert!(r.plan(Instant::now()).is_empty(), "registered: nothing to do");
        r.remove(s);
        assert_eq!(r.plan(Instant::now()), vec![Op::Unregister { socket: s.into(), registered: reg(uuid) }]);
        assert_eq!(r.actual().count(), 0, "out of the actual state as the deregistration starts");
        r.finished(s, Outcome::Unregistered, Instant::now());
        assert!(r.plan(Instant::now()).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_plugin_restarted_on_the_same_path_is_deregistered_then_registered_again() {
        let s = Path::new("/r/a.sock");
        let mut r = Reconciler::default();
        r.add(s);
        let first = register_op(&r.plan(Instant::now()));
        r.finished(s, Outcome::Registered(reg(first)), Instant::now());
        // Removed and created again before the reconciler looked: only the new sighting is seen.
        r.remove(s);
        r.add(s);
        let ops = r.plan(Instant::now());
        assert_eq!(ops, vec![Op::Unregister { socket: s.into(), registered: reg(first) }], "deregistration first");
        r.finished(s, Outcome::Unregistered, Instant::now());
        let second = register_op(&r.plan(Instant::now()));
        assert_ne!(first, second);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_from_half_a_second_doubling_to_two_minutes_and_a_success_resets() {
        assert_eq!(
            (1..=10).map(backoff).collect::<Vec<_>>(),
            [500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 122000, 122000].map(Duration::from_millis)
        );
        let s = Path::new("/r/a.sock");
        let mut r = Reconciler::default();
        r.add(s);
        register_op(&r.plan(Instant::now()));
        r.finished(s, Outcome::Failed, Instant::now());
        assert!(r.plan(Instant::now()).is_empty(), "held back");
        assert_eq!(r.next_retry(), Some(Instant::now() + Duration::from_millis(500)));
        tokio::time::advance(Duration::from_millis(500)).await;
        let uuid = register_op(&r.plan(Instant::now()));
        r.finished(s, Outcome::Failed, Instant::now());
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(r.plan(Instant::now()).is_empty(), "the second wait is a second");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(register_op(&r.plan(Instant::now())), uuid);
        r.finished(s, Outcome::Registered(reg(uuid)), Instant::now());
        assert_eq!(r.next_retry(), None, "a success forgets the failures");
    }

    #[tokio::test(start_paused = true)]
    async fn a_plugin_its_handler_failed_to_register_is_not_retried_until_its_socket_changes() {
        let s = Path::new("/r/a.sock");
        let mut r = Reconciler::default();
        r.add(s);
        let uuid = register_op(&r.plan(Instant::now()));
        r.finished(s, Outcome::HandlerFailed(reg(uuid)), Instant::now());
        tokio::time::advance(MAX_BACKOFF).await;
        assert!(r.plan(Instant::now()).is_empty(), "upstream keeps it in the actual state");
        r.remove(s);
        assert!(matches!(r.plan(Instant::now()).as_slice(), [Op::Unregister { .. }]));
    }
}
