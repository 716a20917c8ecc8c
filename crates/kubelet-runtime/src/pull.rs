//! Pulling an image with the pod's credentials (`pkg/kubelet/kubelet_pods.go` getPullSecretsForPod,
//! `pkg/kubelet/images/image_manager.go` the keyring of EnsureImageExists, `pkg/kubelet/kuberuntime/kuberuntime_image.go`
//! PullImage).
//!
//! Contract: called by the container start path for each pull it makes (never for an image already present and
//! not to be pulled again). The pod's `imagePullSecrets` are read through the object source (the Node
//! authorizer lets the node read the secrets of its pods); one that cannot be read is left out with upstream's
//! `FailedToRetrieveImagePullSecret` event and the pull goes on. The credentials for the image's repository come
//! from the [`CredentialLookup`]: the pull secrets first, then the node's docker config files, then the credential
//! provider plugins, each most specific first. Each is tried in order until one pull succeeds; with none the pull
//! is anonymous. The errors of all attempts make the pull's error, as upstream's aggregate. No credential is
//! logged, put in an event or in an error: only the registry answers are.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kubelet_credentialprovider::{CredentialLookup, PodContext, TrackedAuthConfig, pull_secrets, repository_to_pull};
use kubelet_cri::{CriError, api};
use kubelet_types::events::{WARNING, pod_reference};
use kubelet_types::pod_update::pod_ref;
use tracing::{debug, info};

use crate::manager::RuntimeManager;

/// Why a pull failed.
#[derive(Debug)]
pub(crate) enum PullFailure {
    /// The credentials could not be had (a pull secret that does not decode, an image name that does not parse).
    Credentials(String),
    /// The runtime's answers, one per credential tried (one for an anonymous pull).
    Runtime(Vec<CriError>),
}

impl PullFailure {
    /// The message upstream shows: the runtime's error, or `[e1, e2]` when several credentials failed
    /// (`utilerrors.NewAggregate`).
    pub(crate) fn text(&self) -> String {
        match self {
            PullFailure::Credentials(m) => m.clone(),
            PullFailure::Runtime(errs) if errs.len() == 1 => errs[0].grpc_text(),
            PullFailure::Runtime(errs) => {
                format!("[{}]", errs.iter().map(CriError::grpc_text).collect::<Vec<_>>().join(", "))
            }
        }
    }
}

impl RuntimeManager {
    /// The pod's pull secrets that could be read (`getPullSecretsForPod`).
    async fn pull_secrets_of(&self, pod: &Pod) -> Vec<Secret> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let refs = pod.spec.as_ref().and_then(|s| s.image_pull_secrets.as_ref());
        let (mut found, mut failed) = (vec![], vec![]);
        for name in refs.into_iter().flatten().map(|r| r.name.as_str()).filter(|n| !n.is_empty()) {
            match self.objects.secret(ns, name).await {
                Ok(Some(s)) => found.push(s),
                Ok(None) => {
                    info!(pod = %pod_ref(pod), secret = %format!("{ns}/{name}"), err = "not found", "unable to retrieve pull secret, the image pull may not succeed");
                    failed.push(name.to_string());
                }
                Err(e) => {
                    info!(pod = %pod_ref(pod), secret = %format!("{ns}/{name}"), err = %e, "unable to retrieve pull secret, the image pull may not succeed");
                    failed.push(name.to_string());
                }
            }
        }
        if !failed.is_empty() {
            self.recorder.event(
                &pod_reference(pod),
                WARNING,
                "FailedToRetrieveImagePullSecret",
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    failed.join(", ")
                ),
            );
        }
        found
    }

    /// The credentials to try for `image`, in order; empty for an anonymous pull.
    async fn credentials_for(
        &self,
        lookup: &CredentialLookup,
        pod: &Pod,
        image: &str,
    ) -> Result<Vec<TrackedAuthConfig>, PullFailure> {
        let secrets =
            pull_secrets(&self.pull_secrets_of(pod).await).map_err(|e| PullFailure::Credentials(e.to_string()))?;
        let repo = repository_to_pull(image).map_err(|e| PullFailure::Credentials(e.to_string()))?;
        let spec = pod.spec.as_ref();
        let ctx = PodContext::new(
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
            pod.metadata.uid.clone().unwrap_or_default(),
            spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        );
        Ok(lookup.lookup(&repo, &ctx, &secrets).await)
    }

    /// Pulls `spec` for `pod` (`PullImage` with the keyring's credentials): each credential in turn until one
    /// pulls, or anonymously without any.
    pub(crate) async fn pull_with_credentials(
        &self,
        pod: &Pod,
        spec: &api::ImageSpec,
        sandbox_config: &api::PodSandboxConfig,
    ) -> Result<String, PullFailure> {
        let credentials = match &self.credentials {
            Some(lookup) => self.credentials_for(lookup, pod, &spec.image).await?,
            None => vec![],
        };
        if credentials.is_empty() {
            let pulled = self.images.pull_image(spec.clone(), None, Some(sandbox_config.clone())).await;
            return pulled.map_err(|e| PullFailure::Runtime(vec![e]));
        }
        let mut errors = vec![];
        for (i, c) in credentials.iter().enumerate() {
            let auth = api::AuthConfig {
                username: c.auth.username.clone(),
                password: c.auth.password.clone(),
                auth: c.auth.auth.clone(),
                server_address: c.auth.server_address.clone(),
                identity_token: c.auth.identity_token.clone(),
                registry_token: c.auth.registry_token.clone(),
            };
            match self.images.pull_image(spec.clone(), Some(auth), Some(sandbox_config.clone())).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    // Its place in the order only, never any part of it.
                    debug!(pod = %pod_ref(pod), image = %spec.image, credential = i, error = %e.grpc_text(), "pull with a credential failed");
                    errors.push(e);
                }
            }
        }
        Err(PullFailure::Runtime(errors))
    }
}

/// The credential lookup of a runtime manager (`None`: anonymous pulls only).
pub type Credentials = Option<Arc<CredentialLookup>>;
