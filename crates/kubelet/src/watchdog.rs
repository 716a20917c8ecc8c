//! The systemd watchdog and readiness notification (`pkg/kubelet/watchdog/watchdog_linux.go` with go-systemd's
//! `daemon.SdWatchdogEnabled` and `SdNotify`; `cmd/kubelet/app/server.go` sends `READY=1`).
//!
//! Contract: the binary calls [`interval_from_env`] once at start with `SystemdWatchdog` on; an invalid
//! `WATCHDOG_USEC`, or a timeout of 1 s or less, stops start-up with upstream's message. [`Watchdog::run`] then checks
//! the kubelet's health every half timeout and, only when every check passes, sends `WATCHDOG=1` to
//! `$NOTIFY_SOCKET` (retried once after about a second); a stuck sync loop therefore lets systemd's timeout expire and
//! restart the service, as upstream's. [`notify`] sends `READY=1` once the health server listens. Without
//! `$NOTIFY_SOCKET` nothing is sent. The task ends when cancelled.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Below or at this timeout the watchdog is refused (`minimalNotifyInterval`).
const MINIMAL_NOTIFY_INTERVAL: Duration = Duration::from_secs(1);

/// `SdWatchdogEnabled` with `configure watchdog` checks: the watchdog timeout systemd set for this process, `None`
/// when it set none (or set it for another pid).
pub fn interval_from_env(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Result<Option<Duration>, String> {
    let Some(usec) = usec.filter(|s| !s.is_empty()) else { return Ok(None) };
    let n: i64 = usec.parse().map_err(|_| {
        format!("configure watchdog: error converting WATCHDOG_USEC: strconv.Atoi: parsing {usec:?}: invalid syntax")
    })?;
    if n <= 0 {
        return Err("configure watchdog: error WATCHDOG_USEC must be a positive number".into());
    }
    let timeout = Duration::from_micros(n as u64);
    if let Some(pid) = pid.filter(|s| !s.is_empty()) {
        let p: u32 = pid.parse().map_err(|_| {
            format!("configure watchdog: error converting WATCHDOG_PID: strconv.Atoi: parsing {pid:?}: invalid syntax")
        })?;
        if p != own_pid {
            return Ok(None);
        }
    }
    if timeout <= MINIMAL_NOTIFY_INTERVAL {
        return Err(format!("configure watchdog timeout too small: {}", go_duration(timeout)));
    }
    Ok(Some(timeout))
}

/// Go's `time.Duration` text for whole and fractional seconds (`1s`, `500ms`).
fn go_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

/// Where notifications go.
pub trait Notifier: Send + Sync {
    /// Sends `state`; `Ok(false)` when there is nowhere to send it (no `$NOTIFY_SOCKET`).
    fn notify(&self, state: &str) -> std::io::Result<bool>;
}

/// `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).
#[derive(Clone, Debug, Default)]
pub struct NotifySocket(pub Option<String>);

impl NotifySocket {
    /// From the environment.
    pub fn from_env() -> Self {
        NotifySocket(std::env::var("NOTIFY_SOCKET").ok().filter(|s| !s.is_empty()))
    }
}

impl Notifier for NotifySocket {
    fn notify(&self, state: &str) -> std::io::Result<bool> {
        let Some(path) = &self.0 else { return Ok(false) };
        let sock = std::os::unix::net::UnixDatagram::unbound()?;
        match path.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                sock.send_to_addr(state.as_bytes(), &addr)?;
            }
            None => {
                sock.send_to(state.as_bytes(), path)?;
            }
        }
        Ok(true)
    }
}

/// `SdNotify(false, "READY=1")`: logged at debug when it cannot be sent (upstream ignores the result).
pub fn notify(n: &dyn Notifier, state: &str) {
    match n.notify(state) {
        Ok(sent) => tracing::debug!(state, sent, "systemd notification"),
        Err(e) => tracing::debug!(state, error = %e, "systemd notification failed"),
    }
}

/// The health checks the watchdog runs: (name, result).
pub type Checks = Arc<dyn Fn() -> Vec<(&'static str, Result<(), String>)> + Send + Sync>;

/// Keeps systemd's watchdog fed while the kubelet is healthy.
pub struct Watchdog {
    /// Half the watchdog timeout.
    pub interval: Duration,
    pub notifier: Arc<dyn Notifier>,
    pub checks: Checks,
}

impl Watchdog {
    /// For systemd's `timeout`.
    pub fn new(timeout: Duration, notifier: Arc<dyn Notifier>, checks: Checks) -> Self {
        Watchdog { interval: timeout / 2, notifier, checks }
    }

    /// Checks and notifies every interval, the first time at once, until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        tracing::info!(interval = ?self.interval, "Starting systemd watchdog with interval");
        loop {
            self.once(&cancel).await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    async fn once(&self, cancel: &CancellationToken) {
        if let Some((name, Err(e))) = (self.checks)().into_iter().find(|(_, r)| r.is_err()) {
            tracing::error!(
                error = %format!("checker {name} failed: {e}"),
                "Do not notify watchdog this iteration as the kubelet is reportedly not healthy"
            );
            return;
        }
        // Two tries, a second apart (upstream's backoff: 1 s, factor 2, 2 steps).
        for attempt in 0..2 {
            match self.notifier.notify("WATCHDOG=1") {
                Ok(true) => return,
                Ok(false) => {
                    tracing::error!(
                        "Failed to notify watchdog: failed to notify systemd watchdog, notification not supported - \
                         (i.e. NOTIFY_SOCKET is unset)"
                    );
                    return;
                }
                Err(e) => tracing::debug!(error = %e, attempt, "Failed to notify systemd watchdog, retrying"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
        tracing::error!("Failed to notify watchdog: timed out waiting for the condition");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[test]
    fn the_timeout_is_read_as_go_systemd_reads_it_and_refused_when_too_small() {
        assert_eq!(interval_from_env(None, None, 7), Ok(None));
        assert_eq!(interval_from_env(Some("8000000"), None, 7), Ok(Some(Duration::from_secs(8))));
        assert_eq!(interval_from_env(Some("8000000"), Some("7"), 7), Ok(Some(Duration::from_secs(8))));
        assert_eq!(interval_from_env(Some("8000000"), Some("8"), 7), Ok(None), "meant for another process");
        assert_eq!(
            interval_from_env(Some("1000000"), None, 7).unwrap_err(),
            "configure watchdog timeout too small: 1s"
        );
        assert_eq!(
            interval_from_env(Some("soon"), None, 7).unwrap_err(),
            "configure watchdog: error converting WATCHDOG_USEC: strconv.Atoi: parsing \"soon\": invalid syntax"
        );
        assert_eq!(
            interval_from_env(Some("0"), None, 7).unwrap_err(),
            "configure watchdog: error WATCHDOG_USEC must be a positive number"
        );
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(tokio::time::Instant, String)>>);

    impl Notifier for Recorded {
        fn notify(&self, state: &str) -> std::io::Result<bool> {
            self.0.lock().unwrap().push((tokio::time::Instant::now(), state.to_string()));
            Ok(true)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alives_go_every_half_timeout_and_stop_while_a_check_fails() {
        let sent = Arc::new(Recorded::default());
        let healthy = Arc::new(AtomicBool::new(true));
        let h = healthy.clone();
        let checks: Checks = Arc::new(move || {
            let r = if h.load(Ordering::SeqCst) { Ok(()) } else { Err("sync loop stuck".to_string()) };
            vec![("ping", Ok(())), ("syncloop", r)]
        });
        let w = Watchdog::new(Duration::from_secs(8), sent.clone(), checks);
        let cancel = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let task = tokio::spawn(w.run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(9)).await;
        let at = |r: &Recorded| r.0.lock().unwrap().iter().map(|(t, _)| (*t - start).as_secs()).collect::<Vec<_>>();
        assert_eq!(at(&sent), [0, 4, 8], "at once, then every 4 s");
        healthy.store(false, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert_eq!(at(&sent), [0, 4, 8], "nothing while unhealthy: systemd's timeout runs out");
        healthy.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(at(&sent).len(), 4, "fed again once healthy");
        assert!(sent.0.lock().unwrap().iter().all(|(_, s)| s == "WATCHDOG=1"));
        cancel.cancel();
        task.await.unwrap();
    }

    #[test]
    fn notifications_reach_the_socket_and_nothing_is_sent_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let n = NotifySocket(Some(path.display().to_string()));
        assert!(n.notify("READY=1").unwrap());
        let mut buf = [0u8; 64];
        let len = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"READY=1");
        assert!(!NotifySocket(None).notify("READY=1").unwrap());
    }
}
