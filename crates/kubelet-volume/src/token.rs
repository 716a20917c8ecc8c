//! Service account tokens for projected volumes (`pkg/kubelet/token/token_manager.go`).
//!
//! Contract: the volume manager asks [`TokenManager::service_account_token`] at every set-up of a projected volume
//! with a `serviceAccountToken` source (every sync of the pod). A cached token is returned until it needs a refresh:
//! after 80 % of its lifetime, or 24 h after it was issued, each minus a jitter of up to 10 s. A refresh that fails
//! returns the cached token while it has not expired (the failure is logged); once expired, or when there was none,
//! the error goes to the caller (a `FailedMount` and a retry at the next sync). Tokens of a pod are dropped when its
//! volumes are torn down ([`TokenManager::delete_pod_tokens`]) and expired ones at every request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::Pod;
use kubelet_types::clock::Clock;
use tracing::{debug, warn};

/// The longest a token is used before a refresh, whatever its lifetime (`maxTTL`).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The jitter subtracted from the refresh time (`maxJitter`).
pub const MAX_JITTER: Duration = Duration::from_secs(10);

/// Where tokens come from: the apiserver's TokenRequest (`serviceaccounts/<name>/token`).
#[async_trait]
pub trait TokenFetcher: Send + Sync + 'static {
    /// Requests a token for the service account `name` in `namespace`; the answer carries the token, its
    /// expiration and the spec the server granted.
    async fn request_token(&self, namespace: &str, name: &str, request: &TokenRequest) -> Result<TokenRequest, String>;
}

/// A node without an apiserver: no tokens.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTokens;

#[async_trait]
impl TokenFetcher for NoTokens {
    async fn request_token(&self, namespace: &str, name: &str, _req: &TokenRequest) -> Result<TokenRequest, String> {
        Err(format!(
            "cannot request a token for serviceaccount {namespace}/{name}: this node has no apiserver (no --kubeconfig)"
        ))
    }
}

/// What identifies a cached token (`keyFunc`): service account, namespace, audiences, lifetime and bound object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    name: String,
    namespace: String,
    audiences: Vec<String>,
    expiration_seconds: Option<i64>,
    bound: Option<(String, String, String)>,
}

fn key(namespace: &str, name: &str, tr: &TokenRequest) -> Key {
    Key {
        name: name.into(),
        namespace: namespace.into(),
        audiences: tr.spec.audiences.clone(),
        expiration_seconds: tr.spec.expiration_seconds,
        bound: tr.spec.bound_object_ref.as_ref().map(|r: &BoundObjectReference| {
            (r.kind.clone().unwrap_or_default(), r.name.clone().unwrap_or_default(), r.uid.clone().unwrap_or_default())
        }),
    }
}

fn expiration(tr: &TokenRequest) -> SystemTime {
    let exp = &tr.status.as_ref().map(|s| s.expiration_timestamp.0).unwrap_or_default();
    SystemTime::UNIX_EPOCH + Duration::from_secs(exp.as_second().max(0) as u64)
}

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No token was cached and the request failed.
    #[error("failed to fetch token: {0}")]
    Fetch(String),
    /// The cached token expired and its refresh failed.
    #[error("token {key} expired and refresh failed: {message}")]
    Expired {
        /// The service account, `namespace/name`.
        key: String,
        /// The request's error.
        message: String,
    },
}

type Jitter = Box<dyn Fn() -> Duration + Send + Sync>;

/// The cache of service account tokens.
pub struct TokenManager {
    fetcher: Arc<dyn TokenFetcher>,
    clock: Arc<dyn Clock>,
    cache: Mutex<HashMap<Key, TokenRequest>>,
    jitter: Jitter,
}

impl std::fmt::Debug for TokenManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenManager").field("tokens", &self.cache.lock().unwrap().len()).finish()
    }
}

impl TokenManager {
    /// A manager requesting tokens from `fetcher`, with wall time from `clock`.
    pub fn new(fetcher: Arc<dyn TokenFetcher>, clock: Arc<dyn Clock>) -> Self {
        let jitter: Jitter =
            Box::new(|| Duration::from_secs((rand::random::<f64>() * MAX_JITTER.as_secs_f64()) as u64));
        Self { fetcher, clock, cache: Mutex::default(), jitter }
    }

    /// The same manager with a fixed jitter (tests).
    pub fn with_jitter(mut self, jitter: Duration) -> Self {
        self.jitter = Box::new(move || jitter);
        self
    }

    /// A token of the service account `name` as `request` asks (`GetServiceAccountToken`).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        request: &TokenRequest,
    ) -> Result<TokenRequest, TokenError> {
        let k = key(namespace, name, request);
        let now = self.clock.now();
        let cached = {
            let mut cache = self.cache.lock().unwrap();
            let cached = cache.get(&k).cloned();
            cache.retain(|key, tr| key == &k || expiration(tr) > now);
            cached
        };
        if let Some(tr) = &cached
            && !self.requires_refresh(tr, now)
        {
            return Ok(tr.clone());
        }
        match self.fetcher.request_token(namespace, name, request).await {
            Ok(tr) => {
                debug!(serviceAccount = %format!("{namespace}/{name}"), "service account token requested");
                self.cache.lock().unwrap().insert(k, tr.clone());
                Ok(tr)
            }
            Err(message) => match cached {
                None => Err(TokenError::Fetch(message)),
                Some(tr) if expiration(&tr) <= self.clock.now() => {
                    self.cache.lock().unwrap().remove(&k);
                    Err(TokenError::Expired { key: format!("{namespace}/{name}"), message })
                }
                Some(tr) => {
                    warn!(serviceAccount = %format!("{namespace}/{name}"), error = %message, "couldn't update token");
                    Ok(tr)
                }
            },
        }
    }

    /// Whether a token is due for a refresh (`requiresRefresh`): 24 h after it was issued or within 20 % of its
    /// lifetime of the expiration, each brought forward by the jitter, or when the clock reads before it was
    /// issued. A token whose lifetime is unknown is kept.
    fn requires_refresh(&self, tr: &TokenRequest, now: SystemTime) -> bool {
        let Some(secs) = tr.spec.expiration_seconds else {
            warn!("expiration seconds was nil for token request");
            return false;
        };
        let ttl = Duration::from_secs(secs.max(0) as u64);
        let exp = expiration(tr);
        let issued = exp.checked_sub(ttl).unwrap_or(SystemTime::UNIX_EPOCH);
        if now < issued {
            // The clock went back: a token from the future is not to be trusted.
            return true;
        }
        let jitter = (self.jitter)();
        if now > issued + MAX_TTL.saturating_sub(jitter) {
            return true;
        }
        // Whole seconds, as upstream's integer arithmetic.
        let fifth = Duration::from_secs((secs.max(0) * 20 / 100) as u64);
        let refresh_at = exp.checked_sub(fifth + jitter).unwrap_or(SystemTime::UNIX_EPOCH);
        now > refresh_at
    }

    /// Forgets the tokens bound to the pod `uid` (`DeleteServiceAccountToken`).
    pub fn delete_pod_tokens(&self, uid: &str) {
        self.cache.lock().unwrap().retain(|k, _| k.bound.as_ref().is_none_or(|(_, _, u)| u != uid));
    }

    /// How many tokens are cached.
    pub fn len(&self) -> usize {
        self.cache.lock().unwrap().len()
    }

    /// Whether no token is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A request for a token of the pod's service account bound to the pod (the projected volume's and the CSI
/// driver's `tokenRequests`): `audiences` (empty: the apiserver's), `expiration_seconds` (None: the default).
pub fn pod_bound_request(pod: &Pod, audiences: Vec<String>, expiration_seconds: Option<i64>) -> TokenRequest {
    TokenRequest {
        spec: TokenRequestSpec {
            audiences,
            expiration_seconds,
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenRequestSpec, TokenRequestStatus};
    use kubelet_types::clock::TestClock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Issues `tok-<n>` valid for the requested lifetime (or `ttl`), failing while `down`.
    struct Issuer {
        clock: TestClock,
        n: AtomicUsize,
        ttl: i64,
        down: std::sync::atomic::AtomicBool,
    }

    #[async_trait]
    impl TokenFetcher for Issuer {
        async fn request_token(&self, _ns: &str, _name: &str, req: &TokenRequest) -> Result<TokenRequest, String> {
            if self.down.load(Ordering::SeqCst) {
                return Err("apiserver unavailable".into());
            }
            let n = self.n.fetch_add(1, Ordering::SeqCst);
            let secs = req.spec.expiration_seconds.unwrap_or(self.ttl).min(self.ttl);
            let exp = self.clock.now() + Duration::from_secs(secs as u64);
            let mut out = req.clone();
            out.spec.expiration_seconds = Some(secs);
            out.status = Some(TokenRequestStatus {
                token: format!("tok-{n}"),
                expiration_timestamp: kubelet_types::clock::api_time(exp),
            });
            Ok(out)
        }
    }

    fn request(uid: &str, secs: i64) -> TokenRequest {
        TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec!["api".into()],
                expiration_seconds: Some(secs),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some("web".into()),
                    uid: Some(uid.into()),
                }),
            },
            ..Default::default()
        }
    }

    fn setup(ttl: i64) -> (Arc<Issuer>, TokenManager) {
        let clock = TestClock::fixed();
        let issuer = Arc::new(Issuer { clock: clock.clone(), n: AtomicUsize::new(0), ttl, down: Default::default() });
        let m = TokenManager::new(issuer.clone(), Arc::new(clock)).with_jitter(Duration::ZERO);
        (issuer, m)
    }

    async fn token(m: &TokenManager, req: &TokenRequest) -> String {
        m.service_account_token("ns", "default", req).await.unwrap().status.unwrap().token
    }

    #[tokio::test(start_paused = true)]
    async fn refreshed_after_eighty_percent_of_the_lifetime() {
        let (_, m) = setup(3600);
        let req = request("u1", 1000);
        assert_eq!(token(&m, &req).await, "tok-0");
        tokio::time::advance(Duration::from_secs(799)).await;
        assert_eq!(token(&m, &req).await, "tok-0", "reused before 80 %");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(token(&m, &req).await, "tok-1", "refreshed after 80 %");
        let other = request("u2", 1000);
        assert_eq!(token(&m, &other).await, "tok-2", "another pod has its own token");
        m.delete_pod_tokens("u1");
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn a_token_from_the_future_is_refreshed() {
        let (_, m) = setup(3600);
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut tr = request("u1", 1000);
        tr.status = Some(k8s_openapi::api::authentication::v1::TokenRequestStatus {
            token: "t".into(),
            expiration_timestamp: kubelet_types::clock::api_time(now + Duration::from_secs(1000)),
        });
        assert!(!m.requires_refresh(&tr, now));
        assert!(m.requires_refresh(&tr, now - Duration::from_secs(60)), "the clock went back");
    }

    #[tokio::test(start_paused = true)]
    async fn long_lived_tokens_are_refreshed_after_a_day() {
        let (_, m) = setup(i64::MAX);
        let req = request("u1", 30 * 24 * 3600);
        assert_eq!(token(&m, &req).await, "tok-0");
        tokio::time::advance(MAX_TTL - Duration::from_secs(1)).await;
        assert_eq!(token(&m, &req).await, "tok-0");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(token(&m, &req).await, "tok-1");
    }

    #[tokio::test(start_paused = true)]
    async fn the_server_granted_lifetime_counts_and_jitter_brings_refresh_forward() {
        // The server caps the lifetime at 20 s: refresh after 16 s, and 10 s earlier with the full jitter.
        let (issuer, m) = setup(20);
        let m = m.with_jitter(MAX_JITTER);
        let req = request("u1", 3607);
        assert_eq!(token(&m, &req).await, "tok-0");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(token(&m, &req).await, "tok-0");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(token(&m, &req).await, "tok-1");
        assert_eq!(issuer.n.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn failed_refresh_keeps_the_token_until_it_expires() {
        let (issuer, m) = setup(100);
        let req = request("u1", 100);
        let e = {
            issuer.down.store(true, Ordering::SeqCst);
            m.service_account_token("ns", "default", &req).await.unwrap_err()
        };
        assert_eq!(e.to_string(), "failed to fetch token: apiserver unavailable");
        issuer.down.store(false, Ordering::SeqCst);
        assert_eq!(token(&m, &req).await, "tok-0");
        issuer.down.store(true, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(token(&m, &req).await, "tok-0", "due for refresh, the refresh fails, the valid token is used");
        tokio::time::advance(Duration::from_secs(11)).await;
        let e = m.service_account_token("ns", "default", &req).await.unwrap_err();
        assert_eq!(e.to_string(), "token ns/default expired and refresh failed: apiserver unavailable");
        assert!(m.is_empty(), "the expired token is dropped");
    }
}
