//! The secure port's TLS, kept current without a restart (upstream's `dynamiccertificates`
//! DynamicServingContentFromFiles and DynamicCAContentFromFile, and the serving certificate manager's
//! `GetCertificate`).
//!
//! The binary builds a [`TlsReloader`] at start (a bad file then stops start-up) and spawns [`TlsReloader::run`].
//! It publishes a new [`TlsSetup`] on its channel whenever the serving identity changes: the files
//! `tlsCertFile`/`tlsPrivateKeyFile` and `authentication.x509.clientCAFile` (looked at every second by size,
//! modification time and inode, so a rename over the file counts), or the certificate manager's pair. The
//! listener takes the newest setup for each connection it accepts; open connections keep theirs. A file that
//! cannot be used (half written, key not matching) is a warning and the previous setup stays.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::listen::TlsSetup;
use crate::tls::{Identity, TlsError, TlsSettings, server_config_with};

/// How often the files are looked at.
pub const FILE_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// Where the serving certificate comes from.
pub enum Serving {
    /// The certificate and key files of the settings.
    Files,
    /// A certificate manager (`serverTLSBootstrap`): none until one is issued.
    Managed(watch::Receiver<Option<Arc<CertifiedKey>>>),
}

/// Rebuilds the TLS setup when its inputs change.
pub struct TlsReloader {
    settings: TlsSettings,
    serving: Serving,
    tx: watch::Sender<TlsSetup>,
    seen: Vec<Option<(u64, i64, i64, u64)>>,
}

fn fingerprint(p: &PathBuf) -> Option<(u64, i64, i64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

impl TlsReloader {
    /// Builds the first setup (errors are start-up errors) and the channel the listener follows.
    pub fn new(settings: TlsSettings, serving: Serving) -> Result<(Self, watch::Receiver<TlsSetup>), TlsError> {
        let identity = identity(&serving);
        let (config, client_ca) = server_config_with(&settings, &identity)?;
        let (tx, rx) = watch::channel(TlsSetup { config, client_ca });
        let mut r = Self { settings, serving, tx, seen: vec![] };
        r.seen = r.fingerprints();
        Ok((r, rx))
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut f = vec![];
        if matches!(self.serving, Serving::Files) {
            f.push(self.settings.cert_file.clone());
            f.push(self.settings.key_file.clone());
        }
        f.extend(self.settings.client_ca_file.clone());
        f
    }

    fn fingerprints(&self) -> Vec<Option<(u64, i64, i64, u64)>> {
        self.files().iter().map(fingerprint).collect()
    }

    fn rebuild(&self, why: &str) {
        match server_config_with(&self.settings, &identity(&self.serving)) {
            Ok((config, client_ca)) => {
                self.tx.send_replace(TlsSetup { config, client_ca });
                info!(reason = why, cert = %self.settings.cert_file.display(), "kubelet API serving TLS reloaded");
            }
            Err(e) => warn!(reason = why, error = %e, "kubelet API TLS not reloaded; the previous certificate stays"),
        }
    }

    /// Follows the inputs until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut managed = match &self.serving {
            Serving::Managed(rx) => Some(rx.clone()),
            Serving::Files => None,
        };
        let mut tick = tokio::time::interval(FILE_CHECK_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let changed = async {
                match managed.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                ok = changed => {
                    if ok {
                        self.rebuild("a new serving certificate was issued");
                    } else {
                        managed = None;
                    }
                }
                _ = tick.tick() => {
                    let now = self.fingerprints();
                    if now != self.seen {
                        self.seen = now;
                        self.rebuild("a certificate file changed");
                    }
                }
            }
        }
    }
}

fn identity(serving: &Serving) -> Identity {
    match serving {
        Serving::Files => Identity::Files,
        Serving::Managed(rx) => match rx.borrow().clone() {
            Some(ck) => Identity::Certified(ck),
            None => Identity::Pending,
        },
    }
}

#[cfg(test)]
#[path = "tls_reload_tests.rs"]
mod tests;
