//! The image pull credentials of the node (`cmd/kubelet/app/server.go` and `kuberuntime_manager.go`: the node's
//! docker config keyring and `plugin.RegisterCredentialProviderPlugins` from `--image-credential-provider-config`
//! and `--image-credential-provider-bin-dir`), and the apiserver access of plugins in service account token mode
//! (upstream's `GetServiceAccountFunc` and the token manager).
//!
//! Built once at start-up: a provider configuration that does not read or validate, or a plugin that is missing
//! or not executable, stops start-up naming it, as upstream's kubelet exits. Service accounts and tokens are
//! reachable once the node joined its cluster ([`ApiServiceAccounts::bind`]); before that, and on a standalone
//! node, a plugin in token mode fails for pods with a service account and contributes no credential.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use kubelet_apiclient::ServiceAccountApi;
use kubelet_credentialprovider::{
    BoundTokenRequest, CredentialLookup, PluginOptions, ServiceAccountInfo, ServiceAccountSource,
    ServiceAccountSourceError, ServiceAccountToken,
};
use kubelet_volume::TokenManager;

/// Service accounts from the apiserver, tokens through the kubelet's token manager (which caches them).
pub struct ApiServiceAccounts {
    api: OnceLock<Arc<dyn ServiceAccountApi>>,
    tokens: Arc<TokenManager>,
}

impl ApiServiceAccounts {
    /// Tokens from `tokens`; service accounts once bound.
    pub fn new(tokens: Arc<TokenManager>) -> Self {
        Self { api: OnceLock::new(), tokens }
    }

    /// Reads service accounts from `api` from now on.
    pub fn bind(&self, api: Arc<dyn ServiceAccountApi>) {
        let _ = self.api.set(api);
    }
}

#[async_trait]
impl ServiceAccountSource for ApiServiceAccounts {
    async fn get_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<ServiceAccountInfo, ServiceAccountSourceError> {
        let Some(api) = self.api.get() else {
            return Err(ServiceAccountSourceError(format!(
                "cannot get serviceaccount {namespace}/{name}: this node has not joined a cluster"
            )));
        };
        match api.get_service_account(namespace, name).await {
            Ok(Some(sa)) => Ok(ServiceAccountInfo {
                uid: sa.metadata.uid.unwrap_or_default(),
                annotations: sa.metadata.annotations.unwrap_or_default(),
            }),
            Ok(None) => Err(ServiceAccountSourceError(format!("serviceaccount {namespace}/{name} not found"))),
            Err(e) => Err(ServiceAccountSourceError(format!("cannot get serviceaccount {namespace}/{name}: {e}"))),
        }
    }

    async fn get_service_account_token(
        &self,
        request: &BoundTokenRequest,
    ) -> Result<ServiceAccountToken, ServiceAccountSourceError> {
        let tr = TokenRequest {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some(request.service_account_uid.clone()),
                ..Default::default()
            },
            spec: TokenRequestSpec {
                audiences: request.audiences.clone(),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(request.pod_name.clone()),
                    uid: Some(request.pod_uid.clone()),
                }),
                expiration_seconds: None,
            },
            ..Default::default()
        };
        let who = format!("{}/{}", request.namespace, request.service_account_name);
        let answer = self
            .tokens
            .service_account_token(&request.namespace, &request.service_account_name, &tr)
            .await
            .map_err(|e| ServiceAccountSourceError(format!("cannot get a token of serviceaccount {who}: {e}")))?;
        // Passed on as the apiserver gave it, as upstream's getServiceAccountToken does.
        Ok(ServiceAccountToken::new(answer.status.map(|s| s.token).unwrap_or_default()))
    }
}

/// The node's credential lookup: its docker config files (searched from `root_dir`) and, when configured, the
/// credential provider plugins with `gate` (`KubeletServiceAccountTokenForCredentialProviders`).
pub fn lookup(
    root_dir: &Path,
    provider_config: Option<&PathBuf>,
    provider_bin_dir: Option<&PathBuf>,
    gate: bool,
    accounts: Arc<ApiServiceAccounts>,
) -> anyhow::Result<CredentialLookup> {
    let empty = PathBuf::new();
    let options = PluginOptions { service_account_tokens: gate, service_accounts: Some(accounts) };
    CredentialLookup::for_kubelet(
        root_dir,
        provider_config.unwrap_or(&empty),
        provider_bin_dir.unwrap_or(&empty),
        options,
    )
    .map_err(|e| anyhow::anyhow!("failed to register the image credential provider plugins: {e}"))
}
