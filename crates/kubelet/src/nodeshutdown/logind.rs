//! logind over the system bus (`pkg/kubelet/nodeshutdown/systemd/inhibit_linux.go`): the inhibitor delay logind
//! allows (`InhibitDelayMaxUSec`), a `delay` inhibitor lock on `shutdown` (a unix fd: closing it lets the shutdown
//! go on), logind's configuration raised through a drop-in and reloaded with SIGHUP (systemd's `KillUnit`), and
//! `PrepareForShutdown` signals. Every call is blocking D-Bus I/O with [`crate::cm::dbus::CALL_TIMEOUT`]; the
//! manager runs them off the async threads. The signal connection is read on a thread of its own until it breaks,
//! which closes the channel.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::warn;

use crate::cm::dbus::{Arg, Connection, system_bus_socket};

const LOGIND_SERVICE: &str = "org.freedesktop.login1";
const LOGIND_OBJECT: &str = "/org/freedesktop/login1";
const LOGIND_INTERFACE: &str = "org.freedesktop.login1.Manager";

/// logind's drop-in folder (`logindConfigDirectory`).
pub const LOGIND_CONFIG_DIRECTORY: &str = "/etc/systemd/logind.conf.d/";
/// The kubelet's drop-in (`kubeletLogindConf`).
pub const KUBELET_LOGIND_CONF: &str = "99-kubelet.conf";

/// A held inhibitor lock; dropping it releases the lock (`ReleaseInhibitLock`).
#[derive(Debug)]
pub struct InhibitLock(pub Option<OwnedFd>);

/// What the shutdown manager asks of logind (`dbusInhibiter`).
pub trait Logind: Send + Sync + 'static {
    /// `InhibitDelayMaxUSec`.
    fn current_inhibit_delay(&self) -> Result<Duration, String>;
    /// A delay lock on shutdown.
    fn inhibit_shutdown(&self) -> Result<InhibitLock, String>;
    /// Writes logind's drop-in raising `InhibitDelayMaxSec`.
    fn override_inhibit_delay(&self, delay: Duration) -> Result<(), String>;
    /// Makes logind read its configuration again.
    fn reload_logind_conf(&self) -> Result<(), String>;
    /// `PrepareForShutdown` signals: true when a shutdown starts, false when it was cancelled.
    fn monitor_shutdown(&self) -> Result<mpsc::Receiver<bool>, String>;
}

/// logind on the system bus.
#[derive(Debug, Clone)]
pub struct SystemLogind {
    /// The bus socket.
    pub socket: PathBuf,
    /// Where the drop-in goes.
    pub config_dir: PathBuf,
}

impl Default for SystemLogind {
    fn default() -> Self {
        Self { socket: system_bus_socket(), config_dir: LOGIND_CONFIG_DIRECTORY.into() }
    }
}

impl SystemLogind {
    fn connect(&self) -> Result<Connection, String> {
        Connection::connect_bus(&self.socket).map_err(|e| e.to_string())
    }
}

impl Logind for SystemLogind {
    fn current_inhibit_delay(&self) -> Result<Duration, String> {
        let fail = |e: String| format!("failed reading InhibitDelayMaxUSec property from logind: {e}");
        let mut c = self.connect().map_err(fail)?;
        let args = [Arg::Str(LOGIND_INTERFACE.into()), Arg::Str("InhibitDelayMaxUSec".into())];
        let (m, _) = c
            .call_message(Some(LOGIND_SERVICE), LOGIND_OBJECT, "org.freedesktop.DBus.Properties", "Get", &args)
            .map_err(|e| fail(e.to_string()))?;
        let usec = m.variant_u64().ok_or("InhibitDelayMaxUSec from logind is not a uint64 as expected")?;
        Ok(Duration::from_micros(usec))
    }

    fn inhibit_shutdown(&self) -> Result<InhibitLock, String> {
        let fail = |e: String| format!("failed creating systemd inhibitor: {e}");
        let mut c = self.connect().map_err(fail)?;
        let args =
            ["shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay"].map(|s| Arg::Str(s.into()));
        let (m, mut fds) = c
            .call_message(Some(LOGIND_SERVICE), LOGIND_OBJECT, LOGIND_INTERFACE, "Inhibit", &args)
            .map_err(|e| fail(e.to_string()))?;
        let i = m
            .fd_index()
            .ok_or_else(|| "failed storing inhibit lock file descriptor: no fd in the reply".to_string())?;
        if (i as usize) >= fds.len() {
            return Err("failed storing inhibit lock file descriptor: the fd did not arrive".into());
        }
        Ok(InhibitLock(Some(fds.swap_remove(i as usize))))
    }

    fn override_inhibit_delay(&self, delay: Duration) -> Result<(), String> {
        std::fs::create_dir_all(&self.config_dir)
            .map_err(|e| format!("failed creating {} directory: {e}", self.config_dir.display()))?;
        let text = format!("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={:.0}\n", delay.as_secs_f64());
        let path = self.config_dir.join(KUBELET_LOGIND_CONF);
        std::fs::write(&path, text)
            .map_err(|e| format!("failed writing logind shutdown inhibit override file {}: {e}", path.display()))
    }

    fn reload_logind_conf(&self) -> Result<(), String> {
        let fail = |e: String| format!("unable to reload logind conf: {e}");
        let mut c = self.connect().map_err(fail)?;
        let args = [Arg::Str("systemd-logind.service".into()), Arg::Str("all".into()), Arg::I32(1)];
        c.call(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            "org.freedesktop.systemd1.Manager",
            "KillUnit",
            &args,
        )
        .map_err(|e| fail(e.to_string()))?;
        Ok(())
    }

    fn monitor_shutdown(&self) -> Result<mpsc::Receiver<bool>, String> {
        let mut c = self.connect()?;
        let rule =
            format!("type='signal',path='{LOGIND_OBJECT}',interface='{LOGIND_INTERFACE}',member='PrepareForShutdown'");
        c.call(
            Some("org.freedesktop.DBus"),
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "AddMatch",
            &[Arg::Str(rule)],
        )
        .map_err(|e| e.to_string())?;
        let mut c = c.without_timeout().map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel(1);
        std::thread::Builder::new()
            .name("logind-signals".into())
            .spawn(move || {
                loop {
                    let s = match c.next_signal() {
                        Ok(s) => s,
                        Err(e) => {
                            warn!(error = %e, "the watch of logind's shutdown signals ended");
                            return;
                        }
                    };
                    if s.interface != LOGIND_INTERFACE || s.member != "PrepareForShutdown" {
                        continue;
                    }
                    let Some(active) = s.first_bool() else {
                        warn!(
                            "Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected"
                        );
                        continue;
                    };
                    if tx.blocking_send(active).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(rx)
    }
}
