//! Service account token mode of a plugin: upstream's `serviceAccountProvider`, `getServiceAccountData` and
//! `getServiceAccountToken` (`pkg/credentialprovider/plugin/plugin.go`), and the seam through which the kubelet
//! reaches the apiserver for them ([`ServiceAccountSource`], which the kubelet implements; upstream passes
//! `GetServiceAccountFunc` and the token manager's `GetServiceAccountToken`).
//!
//! Contract: for a pod with a service account, the account is fetched; every `requiredServiceAccountAnnotationKeys`
//! key must be among its annotations (else the plugin is skipped for this pull, see
//! [`SaDataError::RequiredAnnotationNotFound`]), the `optionalServiceAccountAnnotationKeys` present are added;
//! then a token for the configured audience, bound to the pod (`boundObjectRef` kind `Pod`, name and UID), is
//! requested for the account's UID. The token is a secret: [`ServiceAccountToken`] does not print it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;

use super::config::{CACHE_TYPE_TOKEN, CredentialProvider};

/// The parts of a ServiceAccount a plugin needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAccountInfo {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
}

/// A TokenRequest for a pod-bound service account token (`authenticationv1.TokenRequest` as upstream fills it:
/// `metadata.uid` is the account's UID, `spec.audiences` the plugin's audience, `spec.boundObjectRef` the pod;
/// `expirationSeconds` is left to the apiserver's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundTokenRequest {
    /// The pod's (and the account's) namespace.
    pub namespace: String,
    /// The service account's name.
    pub service_account_name: String,
    /// The service account's UID (`metadata.uid` of the TokenRequest).
    pub service_account_uid: String,
    /// `spec.audiences`.
    pub audiences: Vec<String>,
    /// `spec.boundObjectRef.name` (kind `Pod`, apiVersion `v1`).
    pub pod_name: String,
    /// `spec.boundObjectRef.uid`.
    pub pod_uid: String,
}

/// A service account token. Secret: `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountToken(String);

impl ServiceAccountToken {
    /// Wraps a token (`TokenRequest.status.token`).
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ServiceAccountToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServiceAccountToken(<redacted>)")
    }
}

/// Why the kubelet could not get a service account or its token. The message must not contain the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ServiceAccountSourceError(pub String);

/// How plugins in service account token mode reach the apiserver. The kubelet implements it (a lister or a
/// GET for the account, the token manager for the TokenRequest); [`FakeServiceAccounts`] is the test double.
#[async_trait]
pub trait ServiceAccountSource: Send + Sync {
    /// The service account `namespace/name` (upstream's `GetServiceAccountFunc`).
    async fn get_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ServiceAccountInfo, ServiceAccountSourceError>;

    /// A token for `request` (upstream's `getServiceAccountTokenFunc`, the token manager, which may serve a
    /// cached token).
    async fn get_service_account_token(
        &self,
        request: &BoundTokenRequest,
    ) -> Result<ServiceAccountToken, ServiceAccountSourceError>;
}

/// The service account token settings of one plugin (`serviceAccountProvider`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceAccountProvider {
    pub(crate) audience: String,
    pub(crate) require_service_account: bool,
    pub(crate) required_annotation_keys: Vec<String>,
    pub(crate) optional_annotation_keys: Vec<String>,
    /// Whether the cache key includes the token (`cacheType: Token`).
    pub(crate) cache_by_token: bool,
}

/// Why the service account data could not be had (`getServiceAccountData`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SaDataError {
    /// upstream's `requiredAnnotationNotFoundError`: the plugin is skipped, not failed.
    #[error("required annotation {0} not found")]
    RequiredAnnotationNotFound(String),
    /// The account could not be fetched.
    #[error(transparent)]
    Source(#[from] ServiceAccountSourceError),
}

impl ServiceAccountProvider {
    /// `newServiceAccountProvider`: `None` unless the feature is on and the provider names an audience.
    pub(crate) fn new(provider: &CredentialProvider, feature_enabled: bool) -> Option<Self> {
        let attributes = provider.token_attributes.as_ref()?;
        if !feature_enabled || attributes.service_account_token_audience.is_empty() {
            return None;
        }
        Some(Self {
            audience: attributes.service_account_token_audience.clone(),
            require_service_account: attributes.require_service_account.unwrap_or_default(),
            required_annotation_keys: attributes.required_service_account_annotation_keys.clone(),
            optional_annotation_keys: attributes.optional_service_account_annotation_keys.clone(),
            cache_by_token: attributes.cache_type == CACHE_TYPE_TOKEN,
        })
    }

    /// `getServiceAccountData`: the account's UID and the annotations the plugin asked for.
    pub(crate) async fn service_account_data(
        &self,
        source: &dyn ServiceAccountSource,
        namespace: &str,
        name: &str,
    ) -> Result<(String, BTreeMap<String, String>), SaDataError> {
        let account = source.get_service_account(namespace, name).await?;
        let mut annotations = BTreeMap::new();
        for key in &self.required_annotation_keys {
            let value =
                account.annotations.get(key).ok_or_else(|| SaDataError::RequiredAnnotationNotFound(key.clone()))?;
            annotations.insert(key.clone(), value.clone());
        }
        for key in &self.optional_annotation_keys {
            if let Some(value) = account.annotations.get(key) {
                annotations.insert(key.clone(), value.clone());
            }
        }
        Ok((account.uid, annotations))
    }

    /// `getServiceAccountToken`: a token for the audience, bound to the pod.
    pub(crate) async fn token(
        &self,
        source: &dyn ServiceAccountSource,
        pod: &crate::PodContext,
        service_account_uid: &str,
    ) -> Result<ServiceAccountToken, ServiceAccountSourceError> {
        let request = BoundTokenRequest {
            namespace: pod.namespace.clone(),
            service_account_name: pod.service_account_name.clone(),
            service_account_uid: service_account_uid.to_string(),
            audiences: vec![self.audience.clone()],
            pod_name: pod.name.clone(),
            pod_uid: pod.uid.clone(),
        };
        source.get_service_account_token(&request).await
    }
}

#[derive(Debug, Default)]
struct FakeState {
    accounts: HashMap<(String, String), ServiceAccountInfo>,
    tokens: HashMap<(String, String, String, String), ServiceAccountToken>,
    issued: u64,
    token_requests: Vec<BoundTokenRequest>,
    account_gets: u64,
    token_error: Option<String>,
}

/// A stateful [`ServiceAccountSource`] for tests: service accounts are added with [`insert`](Self::insert);
/// tokens are issued as `token-<n>` and reused for the same account, pod and audience (as the token manager's
/// cache does) until [`rotate_tokens`](Self::rotate_tokens); every TokenRequest is recorded.
#[derive(Debug, Default)]
pub struct FakeServiceAccounts {
    state: Mutex<FakeState>,
}

impl FakeServiceAccounts {
    /// An empty fake.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds or replaces the service account `namespace/name`.
    pub fn insert(&self, namespace: &str, name: &str, uid: &str, annotations: &[(&str, &str)]) {
        let info = ServiceAccountInfo {
            uid: uid.to_string(),
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        self.state().accounts.insert((namespace.to_string(), name.to_string()), info);
    }

    /// Forgets every issued token: the next requests get new ones.
    pub fn rotate_tokens(&self) {
        self.state().tokens.clear();
    }

    /// Makes every TokenRequest fail with `message` (`None` to succeed again).
    pub fn fail_tokens(&self, message: Option<&str>) {
        self.state().token_error = message.map(str::to_string);
    }

    /// The TokenRequests made so far.
    pub fn token_requests(&self) -> Vec<BoundTokenRequest> {
        self.state().token_requests.clone()
    }

    /// How many service account GETs were made.
    pub fn account_gets(&self) -> u64 {
        self.state().account_gets
    }
}

#[async_trait]
impl ServiceAccountSource for FakeServiceAccounts {
    async fn get_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ServiceAccountInfo, ServiceAccountSourceError> {
        let mut state = self.state();
        state.account_gets += 1;
        state.accounts.get(&(namespace.to_string(), name.to_string())).cloned().ok_or_else(|| {
            ServiceAccountSourceError(format!("serviceaccounts \"{name}\" not found in namespace {namespace}"))
        })
    }

    async fn get_service_account_token(
        &self,
        request: &BoundTokenRequest,
    ) -> Result<ServiceAccountToken, ServiceAccountSourceError> {
        let mut state = self.state();
        state.token_requests.push(request.clone());
        if let Some(message) = &state.token_error {
            return Err(ServiceAccountSourceError(message.clone()));
        }
        let key = (
            request.namespace.clone(),
            request.service_account_name.clone(),
            request.pod_uid.clone(),
            request.audiences.join(","),
        );
        if let Some(token) = state.tokens.get(&key) {
            return Ok(token.clone());
        }
        state.issued += 1;
        let token = ServiceAccountToken::new(format!("token-{}", state.issued));
        state.tokens.insert(key, token.clone());
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PodContext;
    use crate::plugin::config::ServiceAccountTokenAttributes;

    fn provider(required: &[&str], optional: &[&str]) -> ServiceAccountProvider {
        let attributes = ServiceAccountTokenAttributes {
            service_account_token_audience: "aud".into(),
            cache_type: "Token".into(),
            require_service_account: Some(true),
            required_service_account_annotation_keys: required.iter().map(|s| s.to_string()).collect(),
            optional_service_account_annotation_keys: optional.iter().map(|s| s.to_string()).collect(),
        };
        let p = CredentialProvider { token_attributes: Some(attributes), ..Default::default() };
        assert_eq!(ServiceAccountProvider::new(&p, false), None);
        ServiceAccountProvider::new(&p, true).unwrap()
    }

    #[tokio::test]
    async fn annotations_required_and_optional() {
        let fake = FakeServiceAccounts::new();
        fake.insert("ns", "sa", "sa-uid", &[("a.io/required", "r"), ("a.io/optional", "o"), ("a.io/other", "x")]);
        let p = provider(&["a.io/required"], &["a.io/optional", "a.io/absent"]);
        let (uid, annotations) = p.service_account_data(&fake, "ns", "sa").await.unwrap();
        assert_eq!(uid, "sa-uid");
        let want: BTreeMap<String, String> = [("a.io/optional", "o"), ("a.io/required", "r")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(annotations, want);

        let p = provider(&["a.io/missing"], &[]);
        assert_eq!(
            p.service_account_data(&fake, "ns", "sa").await.unwrap_err(),
            SaDataError::RequiredAnnotationNotFound("a.io/missing".into())
        );
        assert!(matches!(p.service_account_data(&fake, "ns", "nope").await, Err(SaDataError::Source(_))));
        assert_eq!(fake.account_gets(), 3);
    }

    #[tokio::test]
    async fn token_request_is_bound_to_the_pod() {
        let fake = FakeServiceAccounts::new();
        let pod = PodContext::new("ns", "web-0", "pod-uid", "sa");
        let p = provider(&[], &[]);
        let token = p.token(&fake, &pod, "sa-uid").await.unwrap();
        assert_eq!(token.expose(), "token-1");
        assert_eq!(format!("{token:?}"), "ServiceAccountToken(<redacted>)");
        assert_eq!(
            fake.token_requests(),
            [BoundTokenRequest {
                namespace: "ns".into(),
                service_account_name: "sa".into(),
                service_account_uid: "sa-uid".into(),
                audiences: vec!["aud".into()],
                pod_name: "web-0".into(),
                pod_uid: "pod-uid".into(),
            }]
        );
        // Reused until rotated.
        assert_eq!(p.token(&fake, &pod, "sa-uid").await.unwrap().expose(), "token-1");
        fake.rotate_tokens();
        assert_eq!(p.token(&fake, &pod, "sa-uid").await.unwrap().expose(), "token-2");
        fake.fail_tokens(Some("forbidden"));
        assert_eq!(p.token(&fake, &pod, "sa-uid").await.unwrap_err().to_string(), "forbidden");
    }
}
