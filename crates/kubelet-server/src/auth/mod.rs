//! Authentication and authorization of the secure port (`pkg/kubelet/server/auth.go`, `server.go`
//! InstallAuthFilter, `cmd/kubelet/app/auth.go`, and the delegating authenticator and authorizer of
//! `k8s.io/apiserver`).
//!
//! - **Authentication**, in upstream's order: the client certificate (checked against
//!   `authentication.x509.clientCAFile`: user = CN, groups = O), then a bearer token (`Authorization: Bearer`, or
//!   the WebSocket sub-protocol `base64url.bearer.authorization.k8s.io.<token>`) sent to the apiserver as a
//!   TokenReview, answers cached for `authentication.webhook.cacheTTL` (accepted and refused alike; errors are
//!   not cached). Every authenticated user gets `system:authenticated`. When nothing authenticates the request,
//!   it is `system:anonymous` in `system:unauthenticated` if `authentication.anonymous.enabled`, else 401. A
//!   credential that fails (a refused token, a certificate from another CA) is a 401 even with anonymous on.
//! - **Authorization**: the request becomes attributes on the node object (resource `nodes`, the node's name,
//!   a subresource from the path, a verb from the method, [`attributes`]); `AlwaysAllow`, or `Webhook`: one
//!   SubjectAccessReview per attribute set until one is allowed, answers cached `cacheAuthorizedTTL` /
//!   `cacheUnauthorizedTTL`. Denied: 403 with upstream's text; an apiserver error: 500.
//!
//! Called by the secure port's filter for every request; apiserver calls are retried briefly with back-off
//! (upstream's `DefaultAuthWebhookRetryBackoff`) and then fail the request, never the server.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kubelet_apiclient::{ApiError, ReviewApi};
use sha2::Digest;
use tokio::time::Instant;

use crate::tls::ClientCa;

/// Who made a request (`user.Info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub name: String,
    /// UID, often empty.
    pub uid: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// `system:anonymous`.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// `system:unauthenticated`.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// `system:authenticated`.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The WebSocket sub-protocol prefix that carries a bearer token.
pub const WEBSOCKET_TOKEN_PROTOCOL: &str = "base64url.bearer.authorization.k8s.io.";

/// Why a request is not authenticated (answered 401 `Unauthorized`; the reason is only logged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthnError {
    /// No certificate, no token, and anonymous requests are off.
    #[error("no credentials")]
    NoCredentials,
    /// The apiserver refused the bearer token.
    #[error("invalid bearer token")]
    InvalidToken,
    /// The TokenReview failed (apiserver unreachable, or an error in its answer).
    #[error("token review: {0}")]
    Review(String),
    /// The client certificate does not verify against the client CA.
    #[error("client certificate: {0}")]
    Certificate(String),
}

/// How the peer's client certificate fared, computed once per connection by the listener.
#[derive(Clone, Debug, Default)]
pub enum PeerCert {
    /// No certificate, or no client CA configured.
    #[default]
    None,
    /// A certificate signed by the client CA.
    User(UserInfo),
    /// A certificate that does not verify.
    Invalid(AuthnError),
}

impl PeerCert {
    /// Classifies a connection's peer certificates.
    pub fn from_chain(ca: Option<&ClientCa>, chain: Option<&[rustls::pki_types::CertificateDer<'static>]>) -> Self {
        match (ca, chain) {
            (Some(ca), Some(chain)) => match ca.user_of(chain) {
                Ok(Some(u)) => PeerCert::User(u),
                Ok(None) => PeerCert::None,
                Err(e) => PeerCert::Invalid(e),
            },
            _ => PeerCert::None,
        }
    }
}

/// Retries of a webhook call: 500 ms growing 1.5 times, five tries in all (`DefaultAuthWebhookRetryBackoff`,
/// without its jitter).
async fn with_retries<T, F, Fut>(mut call: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut delay = Duration::from_millis(500);
    let mut tries = 1;
    loop {
        match call().await {
            Err(e) if tries < 5 && retriable(&e) => {
                tokio::time::sleep(delay).await;
                delay = delay.mul_f64(1.5);
                tries += 1;
            }
            r => return r,
        }
    }
}

fn retriable(e: &ApiError) -> bool {
    match e {
        ApiError::Unavailable(_) => true,
        ApiError::Other { code, .. } => *code == 429 || *code >= 500,
        _ => false,
    }
}

struct Expiring<V> {
    value: V,
    until: Instant,
}

/// A small TTL cache; expired entries are dropped when the cache grows past its bound.
struct TtlCache<V> {
    entries: Mutex<HashMap<String, Expiring<V>>>,
    bound: usize,
}

impl<V: Clone> TtlCache<V> {
    fn new(bound: usize) -> Self {
        TtlCache { entries: Mutex::new(HashMap::new()), bound }
    }

    fn get(&self, key: &str) -> Option<V> {
        let m = self.entries.lock().unwrap();
        m.get(key).filter(|e| e.until > Instant::now()).map(|e| e.value.clone())
    }

    fn put(&self, key: String, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut m = self.entries.lock().unwrap();
        let now = Instant::now();
        if m.len() >= self.bound {
            m.retain(|_, e| e.until > now);
            if m.len() >= self.bound {
                m.clear();
            }
        }
        m.insert(key, Expiring { value, until: now + ttl });
    }
}

/// The bound of each cache (upstream's LRU caches hold 8192 / 4096 entries).
const CACHE_BOUND: usize = 8192;

/// Checks bearer tokens with TokenReviews.
pub struct TokenWebhook {
    api: Arc<dyn ReviewApi>,
    ttl: Duration,
    cache: TtlCache<Option<UserInfo>>,
}

impl TokenWebhook {
    /// Reviews through `api`, caching answers for `ttl` (`authentication.webhook.cacheTTL`).
    pub fn new(api: Arc<dyn ReviewApi>, ttl: Duration) -> Self {
        TokenWebhook { api, ttl, cache: TtlCache::new(CACHE_BOUND) }
    }

    /// `Ok(Some(user))` when the apiserver accepts the token, `Ok(None)` when it refuses it.
    pub async fn review(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        let key = hex::encode(sha2::Sha256::digest(token.as_bytes()));
        if let Some(v) = self.cache.get(&key) {
            return Ok(v);
        }
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), audiences: None },
            ..Default::default()
        };
        let answer = with_retries(|| self.api.create_token_review(&review))
            .await
            .map_err(|e| AuthnError::Review(e.to_string()))?;
        let status = answer.status.unwrap_or_default();
        if let Some(err) = status.error.filter(|e| !e.is_empty()) {
            // Refused with an error: not cached, as upstream.
            return Err(AuthnError::Review(err));
        }
        let user = if status.authenticated == Some(true) {
            let u = status.user.unwrap_or_default();
            Some(UserInfo {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default().into_iter().collect(),
            })
        } else {
            None
        };
        self.cache.put(key, user.clone(), self.ttl);
        Ok(user)
    }
}

/// The authenticators of the secure port.
pub struct Authenticator {
    /// `authentication.anonymous.enabled`.
    pub anonymous: bool,
    /// `authentication.webhook.enabled` (with an apiserver).
    pub webhook: Option<TokenWebhook>,
}

/// The bearer token of a request: the `Authorization` header, or the WebSocket sub-protocol.
pub fn bearer_token(authorization: Option<&str>, websocket_protocols: Option<&str>) -> Option<String> {
    if let Some(h) = authorization {
        let mut parts = h.split_whitespace();
        if let (Some(kind), Some(token)) = (parts.next(), parts.next())
            && kind.eq_ignore_ascii_case("bearer")
        {
            return Some(token.to_string());
        }
    }
    let protos = websocket_protocols?;
    for p in protos.split(',').map(str::trim) {
        if let Some(enc) = p.strip_prefix(WEBSOCKET_TOKEN_PROTOCOL) {
            use base64::Engine;
            // A token that does not decode is still a credential, and a refused one (never anonymous).
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(enc).unwrap_or_default();
            return Some(String::from_utf8(raw).unwrap_or_default());
        }
    }
    None
}

impl Authenticator {
    /// Authenticates a request from its peer certificate and bearer token.
    pub async fn authenticate(&self, peer: &PeerCert, token: Option<&str>) -> Result<UserInfo, AuthnError> {
        let mut failure = None;
        let user = match peer {
            PeerCert::User(u) => Some(u.clone()),
            PeerCert::Invalid(e) => {
                failure = Some(e.clone());
                None
            }
            PeerCert::None => None,
        };
        let user = match (user, token, &self.webhook) {
            (Some(u), _, _) => Some(u),
            (None, Some(""), Some(_)) => {
                failure = Some(AuthnError::InvalidToken);
                None
            }
            (None, Some(t), Some(w)) => match w.review(t).await {
                Ok(Some(u)) => Some(u),
                Ok(None) => {
                    failure = Some(AuthnError::InvalidToken);
                    None
                }
                Err(e) => {
                    failure = Some(e);
                    None
                }
            },
            _ => None,
        };
        if let Some(mut u) = user {
            if !u.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
                u.groups.push(AUTHENTICATED_GROUP.into());
            }
            return Ok(u);
        }
        if let Some(f) = failure {
            return Err(f);
        }
        if self.anonymous {
            return Ok(UserInfo {
                name: ANONYMOUS_USER.into(),
                groups: vec![UNAUTHENTICATED_GROUP.into()],
                ..Default::default()
            });
        }
        Err(AuthnError::NoCredentials)
    }
}

/// What a request asks of the node object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `create`, `update`, `patch`, `delete`.
    pub verb: String,
    /// The node's name.
    pub name: String,
    /// The subresources to try, in order: one is enough.
    pub subresources: Vec<&'static str>,
}

fn is_subpath(p: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    p == prefix || (p.starts_with(prefix) && p.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// Cleans a URL path as Go's `path.Clean`: no `.`/`..` segments, no doubled or trailing slashes.
pub fn clean_path(p: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

/// The attributes of a request (`GetRequestAttributes`, with `KubeletFineGrainedAuthz` on as in 1.33+).
pub fn attributes(method: &str, path: &str, node_name: &str) -> Attributes {
    let verb = match method {
        "POST" => "create",
        "GET" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    let p = clean_path(path);
    let mut subresources = Vec::with_capacity(2);
    if is_subpath(&p, "/pods") || is_subpath(&p, "/runningpods/") {
        subresources.push("pods");
    } else if is_subpath(&p, "/healthz") {
        subresources.push("healthz");
    } else if is_subpath(&p, "/configz") {
        subresources.push("configz");
    }
    subresources.push(if is_subpath(&p, "/stats/") {
        "stats"
    } else if is_subpath(&p, "/metrics") {
        "metrics"
    } else if is_subpath(&p, "/logs/") {
        "log"
    } else if is_subpath(&p, "/checkpoint/") {
        "checkpoint"
    } else {
        "proxy"
    });
    Attributes { verb: verb.into(), name: node_name.into(), subresources }
}

/// How requests are authorized (`authorization.mode`).
pub enum Authorizer {
    /// `AlwaysAllow`.
    AlwaysAllow,
    /// `Webhook`.
    Webhook(AccessWebhook),
}

/// SubjectAccessReviews with cached answers.
pub struct AccessWebhook {
    api: Arc<dyn ReviewApi>,
    allowed_ttl: Duration,
    denied_ttl: Duration,
    cache: TtlCache<bool>,
}

impl AccessWebhook {
    /// Reviews through `api`; `cacheAuthorizedTTL` and `cacheUnauthorizedTTL`.
    pub fn new(api: Arc<dyn ReviewApi>, allowed_ttl: Duration, denied_ttl: Duration) -> Self {
        AccessWebhook { api, allowed_ttl, denied_ttl, cache: TtlCache::new(CACHE_BOUND) }
    }

    async fn allowed(&self, user: &UserInfo, verb: &str, name: &str, sub: &str) -> Result<bool, String> {
        let spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone().into_iter().collect()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                subresource: Some(sub.into()),
                name: Some(name.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let key = serde_json::to_string(&spec).unwrap_or_default();
        if let Some(v) = self.cache.get(&key) {
            return Ok(v);
        }
        let review = SubjectAccessReview { spec, ..Default::default() };
        let answer =
            with_retries(|| self.api.create_subject_access_review(&review)).await.map_err(|e| e.to_string())?;
        let st = answer.status.unwrap_or_default();
        let allowed = st.allowed && st.denied != Some(true);
        self.cache.put(key, allowed, if allowed { self.allowed_ttl } else { self.denied_ttl });
        Ok(allowed)
    }
}

/// The verdict on a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go on.
    Allow,
    /// 403 with this text.
    Forbidden(String),
    /// 500 with this text.
    Error(String),
}

impl Authorizer {
    /// Decides on `attrs` for `user`.
    pub async fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        let Authorizer::Webhook(w) = self else { return Decision::Allow };
        for sub in &attrs.subresources {
            match w.allowed(user, &attrs.verb, &attrs.name, sub).await {
                Ok(true) => return Decision::Allow,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %e, user = %user.name, verb = %attrs.verb, resource = "nodes", subresource = sub, "authorization error");
                    return Decision::Error(format!(
                        "Authorization error (user={}, verb={}, resource=nodes, subresource={sub})",
                        user.name, attrs.verb
                    ));
                }
            }
        }
        tracing::debug!(user = %user.name, verb = %attrs.verb, subresources = ?attrs.subresources, "forbidden");
        Decision::Forbidden(format!(
            "Forbidden (user={}, verb={}, resource=nodes, subresource(s)=[{}])\n",
            user.name,
            attrs.verb,
            attrs.subresources.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests;
