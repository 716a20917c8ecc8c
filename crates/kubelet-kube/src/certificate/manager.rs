//! The certificate manager (client-go `util/certificate/certificate_manager.go`, `pkg/kubelet/certificate`).
//!
//! One manager per certificate (the client's, the serving one's) owns the pair in use. The binary builds it at
//! start from the [`FileStore`] and spawns [`Manager::run`]; TLS users read [`Manager::current`] or follow
//! [`Manager::subscribe`]. The loop sleeps until the rotation deadline (70–90 % of the certificate's lifetime,
//! jittered, as upstream) or until the certificate no longer matches the template (the serving certificate's
//! names follow the node's addresses; checked every second), then requests a new one: a fresh ECDSA P-256 key,
//! a CSR with the template's subject and names, a wait of up to 15 minutes for the certificate, the store
//! updated and the new pair published. Failures are counted ([`CertMetrics::renew_failed`]) and retried after
//! 2, 4, 8 and 16 s (±10 %), then every 32 s, as upstream. Cancellation ends the loop between steps; a request
//! already submitted is left to the apiserver's garbage collection, as upstream.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kubelet_types::Clock;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::csr::{CsrClient, CsrError, CsrRequest};
use super::pair::Pair;
use super::store::{FileStore, StoreError};

/// How long an issued request is waited for (`certificateWaitTimeout`).
pub const CERTIFICATE_WAIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelet serving certificates.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// Usages of an ECDSA client certificate (`kubeletClientUsagesNoEncipherment`).
pub const CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];
/// Usages of an ECDSA serving certificate (`kubeletServingUsagesNoEncipherment`).
pub const SERVING_USAGES: [&str; 2] = ["digital signature", "server auth"];

/// What a certificate must say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template {
    /// Subject CN (`system:node:<node>`).
    pub common_name: String,
    /// Subject O (`system:nodes`).
    pub organization: String,
    /// DNS names (the serving certificate's hostnames).
    pub dns_names: Vec<String>,
    /// IP addresses (the serving certificate's node IPs).
    pub ips: Vec<IpAddr>,
}

impl Template {
    /// Whether `pair` carries everything asked (extra names do not matter, as upstream).
    pub fn satisfied_by(&self, pair: &Pair) -> bool {
        pair.common_name == self.common_name
            && pair.organizations.contains(&self.organization)
            && self.dns_names.iter().all(|d| pair.dns_names.contains(d))
            && self.ips.iter().all(|ip| pair.ips.contains(ip))
    }
}

/// Where a manager reports (the binary maps these to upstream's metrics).
pub trait CertMetrics: Send + Sync + 'static {
    /// A renewal attempt failed (`..._expiration_renew_errors`).
    fn renew_failed(&self);
    /// A certificate was replaced after living `lived` (`..._rotation_seconds`).
    fn rotated(&self, lived: Duration);
    /// The certificate in use changed (the TTL gauge's input).
    fn current(&self, not_after: Option<SystemTime>);
}

/// A manager's settings.
pub struct ManagerConfig {
    /// `client` or `serving`, for logs.
    pub kind: &'static str,
    /// `spec.signerName`.
    pub signer: &'static str,
    /// `spec.usages`.
    pub usages: &'static [&'static str],
    /// The store.
    pub store: FileStore,
    /// What the certificate must say; `None` while it cannot be known (no node address yet).
    pub template: Arc<dyn Fn() -> Option<Template> + Send + Sync>,
    /// The CSR API with bootstrap credentials, for when the current certificate is missing or expired.
    pub bootstrap_csr: Option<Arc<dyn CsrClient>>,
    /// Metrics.
    pub metrics: Arc<dyn CertMetrics>,
    /// Wall clock (certificate validity is wall time).
    pub clock: Arc<dyn Clock>,
    /// A number in [0, 1) for the deadline's jitter.
    pub jitter: fn() -> f64,
}

/// The owner of one rotating certificate.
pub struct Manager {
    cfg: ManagerConfig,
    current: watch::Sender<Option<Arc<Pair>>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").field("kind", &self.cfg.kind).field("current", &*self.current.borrow()).finish()
    }
}

/// Why a rotation attempt failed.
#[derive(Debug, thiserror::Error)]
enum RotateError {
    #[error("generate the key and certificate request: {0}")]
    Crypto(String),
    #[error(transparent)]
    Csr(#[from] CsrError),
    #[error("the certificate request was not signed within {0:?}")]
    Timeout(Duration),
    #[error("store the new certificate: {0}")]
    Store(#[from] StoreError),
}

impl Manager {
    /// A manager starting with the store's current pair (a broken store is an error; an empty one is not).
    pub fn new(cfg: ManagerConfig) -> Result<Self, StoreError> {
        let pair = cfg.store.current()?.map(Arc::new);
        cfg.metrics.current(pair.as_ref().map(|p| p.not_after));
        let (current, _) = watch::channel(pair);
        Ok(Self { cfg, current })
    }

    /// The pair in use, if any.
    pub fn current(&self) -> Option<Arc<Pair>> {
        self.current.borrow().clone()
    }

    /// Follows the pair in use.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Pair>>> {
        self.current.subscribe()
    }

    /// When the current pair should be replaced: now without one or when it misses the template, else
    /// `notBefore + (0.7..0.9) × lifetime`.
    pub fn deadline(&self) -> SystemTime {
        let now = self.cfg.clock.now();
        let Some(p) = self.current() else { return now };
        if (self.cfg.template)().is_some_and(|t| !t.satisfied_by(&p)) {
            return now;
        }
        let total = p.not_after.duration_since(p.not_before).unwrap_or_default();
        p.not_before + total.mul_f64(0.7 + 0.2 * (self.cfg.jitter)())
    }

    /// Rotates until cancelled, requesting through `csr` (the credentials in use; for the client certificate,
    /// the client built on this manager).
    pub async fn run(self: Arc<Self>, csr: Arc<dyn CsrClient>, cancel: CancellationToken) {
        info!(kind = self.cfg.kind, signer = self.cfg.signer, "certificate rotation is enabled");
        loop {
            let deadline = self.deadline();
            if let Some(p) = self.current() {
                info!(kind = self.cfg.kind, expiration = %fmt_time(p.not_after), deadline = %fmt_time(deadline),
                    "certificate rotation deadline determined");
            }
            if !self.wait_for(deadline, &cancel).await {
                return;
            }
            let Some(template) = (self.cfg.template)() else {
                // No address to ask for yet: look again in a second.
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            };
            let mut attempt = 0u32;
            loop {
                match self.rotate(&csr, &template, deadline).await {
                    Ok(()) => break,
                    Err(e) => {
                        self.cfg.metrics.renew_failed();
                        let retry = if attempt < 4 {
                            Duration::from_secs(2 << attempt).mul_f64(1.0 + 0.1 * (self.cfg.jitter)())
                        } else {
                            Duration::from_secs(32)
                        };
                        warn!(kind = self.cfg.kind, error = %e, retryIn = ?retry, "certificate rotation failed");
                        attempt += 1;
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(retry) => {}
                        }
                    }
                }
            }
        }
    }

    /// Sleeps until `deadline` (wall time) or until the certificate stops matching the template; false when
    /// cancelled.
    async fn wait_for(&self, deadline: SystemTime, cancel: &CancellationToken) -> bool {
        loop {
            let now = self.cfg.clock.now();
            let Ok(left) = deadline.duration_since(now) else { return true };
            if left.is_zero() {
                return true;
            }
            // Wall time may jump; look again at least every second, and check the template then.
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(left.min(Duration::from_secs(1))) => {}
            }
            if let (Some(t), Some(p)) = ((self.cfg.template)(), self.current())
                && !t.satisfied_by(&p)
            {
                info!(kind = self.cfg.kind, "certificate template changed, rotating");
                return true;
            }
        }
    }

    async fn rotate(
        &self,
        csr: &Arc<dyn CsrClient>,
        template: &Template,
        deadline: SystemTime,
    ) -> Result<(), RotateError> {
        let crypto = |e: rcgen::Error| RotateError::Crypto(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(crypto)?;
        let names: Vec<String> =
            template.dns_names.iter().cloned().chain(template.ips.iter().map(|i| i.to_string())).collect();
        let mut params = rcgen::CertificateParams::new(names).map_err(crypto)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(rcgen::DnType::CommonName, template.common_name.clone());
        params.distinguished_name.push(rcgen::DnType::OrganizationName, template.organization.clone());
        let request_pem = params.serialize_request(&key).map_err(crypto)?.pem().map_err(crypto)?;
        let now = self.cfg.clock.now();
        let csr = match (self.current().filter(|p| p.valid_at(now)), &self.cfg.bootstrap_csr) {
            (None, Some(b)) => b.clone(),
            _ => csr.clone(),
        };
        let req = CsrRequest {
            name: String::new(),
            request_pem,
            signer: self.cfg.signer.to_string(),
            usages: self.cfg.usages.iter().map(|u| u.to_string()).collect(),
        };
        let (name, uid) = csr.create(&req).await?;
        info!(kind = self.cfg.kind, csr = %name, signer = self.cfg.signer, "certificate signing request submitted");
        let cert = tokio::time::timeout(CERTIFICATE_WAIT_TIMEOUT, csr.wait(&name, &uid))
            .await
            .map_err(|_| RotateError::Timeout(CERTIFICATE_WAIT_TIMEOUT))??;
        let now = self.cfg.clock.now();
        let (pair, file) = self.cfg.store.update(&cert, key.serialize_pem().as_bytes(), now)?;
        let pair = Arc::new(pair);
        let late = now.duration_since(deadline).unwrap_or_default();
        info!(kind = self.cfg.kind, csr = %name, file = %file.display(), serial = %pair.serial,
            expiration = %fmt_time(pair.not_after), sinceDeadlineMs = late.as_millis() as u64,
            "certificate rotated; the new one is in use");
        let old = self.current.send_replace(Some(pair.clone()));
        self.cfg.metrics.current(Some(pair.not_after));
        if let Some(old) = old {
            self.cfg.metrics.rotated(now.duration_since(old.not_before).unwrap_or_default());
        }
        Ok(())
    }
}

fn fmt_time(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
