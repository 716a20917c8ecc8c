//! One plugin's credentials for one image: upstream's `pluginProvider.provide`, `isImageAllowed`,
//! `getCachedCredentials`, `lookupCredentialsInCache` and `parseRegistry` (`pkg/credentialprovider/plugin/plugin.go`).
//!
//! Contract of [`PluginProvider::provide`], in upstream's order:
//! 1. an image that matches none of `matchImages` gets nothing, and the plugin is not run;
//! 2. in service account token mode, a pod without a service account gets nothing when the plugin requires one;
//!    otherwise the account's UID and annotations are fetched (a missing required annotation: nothing) and a
//!    pod-bound token requested, and the service account part of the cache key is built (namespace, name, UID,
//!    annotations, and the token's hash for `cacheType: Token`);
//! 3. the cache is read under the image, then its registry (`host[:port]`), then `<global>`;
//! 4. otherwise the plugin runs, once for concurrent requests of one image (and, in token mode, one token and
//!    one set of annotations);
//! 5. a response echoing the token as a password is refused unless `cacheType` is `Token`; one with a
//!    `cacheKeyType` other than `Image`, `Registry` or `Global` is refused;
//! 6. the credentials are cached under the key type's base key for `cacheDuration`, or the provider's
//!    `defaultCacheDuration` when the response has none; a zero (or negative) duration is not cached.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;

use super::cache::{
    CredentialCache, GLOBAL_CACHE_KEY, KeyTooLong, ServiceAccountKeyParams, Singleflight, cache_key, hash_if_not_empty,
    service_account_cache_key, single_flight_key,
};
use super::exec::{CredentialProviderResponse, ExecError, Plugin, PluginRequest};
use super::service_account::{
    SaDataError, ServiceAccountProvider, ServiceAccountSource, ServiceAccountSourceError, ServiceAccountToken,
};
use crate::PodContext;
use crate::auth::ServiceAccountCoordinates;
use crate::docker_config::{DockerConfig, DockerConfigEntry};
use crate::url_match::urls_match_str;

type ExecResult = Result<Arc<CredentialProviderResponse>, ExecError>;

/// Why a plugin gave no credentials for an image. Logged by the caller; never carries a credential or token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProvideError {
    /// The service account could not be fetched.
    #[error("failed to get service account: {0}")]
    ServiceAccount(ServiceAccountSourceError),
    /// The token could not be had.
    #[error("failed to get service account token: {0}")]
    Token(ServiceAccountSourceError),
    /// The plugin is in token mode but the kubelet has no apiserver access for service accounts.
    #[error("failed to get service account: no service account source is configured")]
    NoServiceAccountSource,
    /// A cache or dedup key part is longer than 65535 bytes.
    #[error("error generating cache key: {0}")]
    Key(#[from] KeyTooLong),
    /// The plugin run failed.
    #[error("failed to get credential from external registry credential provider: {0}")]
    Exec(ExecError),
    /// The plugin returned the token as a password while credentials are cached per service account.
    #[error(
        "credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'"
    )]
    TokenEchoed,
    /// The response's `cacheKeyType` is not one of the three.
    #[error("credential provider plugin did not return a valid cacheKeyType: {0}")]
    CacheKeyType(String),
}

/// What one plugin provides for one image (`provideWithCoordinates`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Provided {
    /// The plugin's credentials, keyed by image pattern.
    pub config: DockerConfig,
    /// The service account whose token was used, in token mode.
    pub coordinates: Option<ServiceAccountCoordinates>,
}

/// The service account part of a request in token mode.
struct TokenContext {
    token: ServiceAccountToken,
    token_hash: String,
    annotations: BTreeMap<String, String>,
    cache_key: Vec<u8>,
    coordinates: ServiceAccountCoordinates,
}

/// One configured plugin with its cache (upstream's `pluginProvider`).
pub(crate) struct PluginProvider {
    pub(crate) name: String,
    pub(crate) match_images: Vec<String>,
    pub(crate) default_cache_duration: Duration,
    pub(crate) plugin: Arc<dyn Plugin>,
    pub(crate) service_account: Option<ServiceAccountProvider>,
    pub(crate) source: Option<Arc<dyn ServiceAccountSource>>,
    cache: Mutex<CredentialCache>,
    group: Singleflight<ExecResult>,
}

/// `parseRegistry`: the part of the image before the first `/`.
fn parse_registry(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

impl PluginProvider {
    pub(crate) fn new(
        name: String,
        match_images: Vec<String>,
        default_cache_duration: Duration,
        plugin: Arc<dyn Plugin>,
        service_account: Option<ServiceAccountProvider>,
        source: Option<Arc<dyn ServiceAccountSource>>,
    ) -> Self {
        Self {
            name,
            match_images,
            default_cache_duration,
            plugin,
            service_account,
            source,
            cache: Mutex::new(CredentialCache::new()),
            group: Singleflight::new(),
        }
    }

    /// Whether the plugin runs in service account token mode.
    pub(crate) fn token_mode(&self) -> bool {
        self.service_account.is_some()
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, CredentialCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `isImageAllowed`.
    fn is_image_allowed(&self, image: &str) -> bool {
        self.match_images.iter().any(|pattern| urls_match_str(pattern, image).unwrap_or(false))
    }

    /// `getCachedCredentials`.
    fn cached(&self, image: &str, service_account_key: &[u8]) -> Result<Option<DockerConfig>, KeyTooLong> {
        let mut cache = self.cache();
        cache.purge_if_due();
        for base in [image, parse_registry(image), GLOBAL_CACHE_KEY] {
            if let Some(config) = cache.get(&cache_key(base, service_account_key)?) {
                return Ok(Some(config));
            }
        }
        Ok(None)
    }

    /// Step 2 of the contract: `Ok(None)` when the plugin must not run for this pod.
    async fn token_context(
        &self,
        sa: &ServiceAccountProvider,
        image: &str,
        pod: &PodContext,
    ) -> Result<Option<TokenContext>, ProvideError> {
        let source = self.source.as_deref().ok_or(ProvideError::NoServiceAccountSource)?;
        let (uid, annotations) = match sa.service_account_data(source, &pod.namespace, &pod.service_account_name).await
        {
            Ok(data) => data,
            Err(SaDataError::RequiredAnnotationNotFound(key)) => {
                // A workload may opt in through the annotation: not an error worth more than debug.
                tracing::debug!(provider = %self.name, image, pod = %pod, annotation = %key,
                        "required service account annotation not found, not running the credential provider");
                return Ok(None);
            }
            Err(SaDataError::Source(err)) => return Err(ProvideError::ServiceAccount(err)),
        };
        let token = sa.token(source, pod, &uid).await.map_err(ProvideError::Token)?;
        let token_hash = hash_if_not_empty(token.expose());
        let cache_key = service_account_cache_key(&ServiceAccountKeyParams {
            namespace: &pod.namespace,
            name: &pod.service_account_name,
            uid: &uid,
            annotations: &annotations,
            token_hash: sa.cache_by_token.then_some(token_hash.as_str()),
        })?;
        let coordinates =
            ServiceAccountCoordinates { uid, namespace: pod.namespace.clone(), name: pod.service_account_name.clone() };
        Ok(Some(TokenContext { token, token_hash, annotations, cache_key, coordinates }))
    }

    /// upstream's `provide`.
    pub(crate) async fn provide(&self, image: &str, pod: &PodContext) -> Result<Provided, ProvideError> {
        if !self.is_image_allowed(image) {
            return Ok(Provided::default());
        }
        let mut token_context = None;
        if let Some(sa) = &self.service_account {
            if pod.service_account_name.is_empty() && sa.require_service_account {
                tracing::debug!(provider = %self.name, image, pod = %pod, "service account name is empty");
                return Ok(Provided::default());
            }
            if !pod.service_account_name.is_empty() {
                match self.token_context(sa, image, pod).await? {
                    Some(context) => token_context = Some(context),
                    None => return Ok(Provided::default()),
                }
            }
        }
        let service_account_key = token_context.as_ref().map(|c| c.cache_key.as_slice()).unwrap_or_default();
        let coordinates = token_context.as_ref().map(|c| c.coordinates.clone());
        if let Some(config) = self.cached(image, service_account_key)? {
            return Ok(Provided { config, coordinates });
        }

        let flight_key = match &token_context {
            Some(c) => single_flight_key(image, &c.token_hash, &c.annotations)?,
            None => image.as_bytes().to_vec(),
        };
        let token = token_context.as_ref().map(|c| c.token.clone());
        let annotations = token_context.as_ref().map(|c| c.annotations.clone()).unwrap_or_default();
        let plugin = self.plugin.clone();
        let owned_image = image.to_string();
        let response = self
            .group
            .run(flight_key, move || {
                async move {
                    let request =
                        PluginRequest { image: &owned_image, token: token.as_ref(), annotations: &annotations };
                    plugin.exec(request).await.map(Arc::new)
                }
                .boxed()
            })
            .await
            .map_err(ProvideError::Exec)?;

        if let Some(context) = &token_context {
            let cache_by_token = self.service_account.as_ref().is_some_and(|sa| sa.cache_by_token);
            let echoed = response.auth.values().any(|a| a.password.as_deref() == Some(context.token.expose()));
            if !cache_by_token && echoed {
                return Err(ProvideError::TokenEchoed);
            }
        }
        let base_key = match response.cache_key_type.as_str() {
            "Image" => image,
            "Registry" => parse_registry(image),
            "Global" => GLOBAL_CACHE_KEY,
            other => return Err(ProvideError::CacheKeyType(other.to_string())),
        };
        let config = DockerConfig(
            response
                .auth
                .iter()
                .map(|(pattern, auth)| {
                    let entry = DockerConfigEntry {
                        username: auth.username.clone().unwrap_or_default(),
                        password: auth.password.clone().unwrap_or_default(),
                        email: String::new(),
                    };
                    (pattern.clone(), entry)
                })
                .collect(),
        );
        let ttl = match response.cache_duration {
            None => self.default_cache_duration,
            Some(d) => d.as_std().unwrap_or_default(),
        };
        if !ttl.is_zero() {
            let key = cache_key(base_key, service_account_key)?;
            self.cache().insert(key, config.clone(), ttl);
        }
        Ok(Provided { config, coordinates })
    }
}

#[cfg(test)]
#[path = "provider_tests.rs"]
mod tests;
