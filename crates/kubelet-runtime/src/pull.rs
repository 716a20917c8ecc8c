//! Pulling an image with the pod's credentials (`pkg/kubelet/kubelet_pods.go` getPullSecretsForPod,
//! `pkg/kubelet/images/image_manager.go` the keyring of EnsureImageExists, `pkg/kubelet/kuberuntime/kuberuntime_image.go`
//! PullImage).
//!
//! Contract: the pod's `imagePullSecrets` are read once per sync that starts containers, through the object source
//! (the Node authorizer lets the node read the secrets of its pods); one that cannot be read is left out with
//! upstream's `FailedToRetrieveImagePullSecret` event and the pull goes on. The credentials are looked up by the
//! container start path for each pull it makes (never for an image already present and not to be pulled again),
//! before the pull waits for its turn. The credentials for the image's repository come
//! from the [`CredentialLookup`]: the pull secrets first, then the node's docker config files, then the credential
//! provider plugins, each most specific first. Each is tried in order until one pull succeeds; with none the pull
//! is anonymous. The errors of all attempts make the pull's error, as upstream's aggregate. No credential is
//! logged, put in an event or in an error: only the registry answers are.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kubelet_credentialprovider::{
    CredentialLookup, PodContext, TrackedAuthConfig, pull_secrets as decode_pull_secrets,
};
use kubelet_cri::{CriError, api};
use kubelet_types::events::{WARNING, pod_reference};
use kubelet_types::pod_update::pod_ref;
use tracing::{debug, info};

use crate::manager::RuntimeManager;

/// What a sync hands to each container start: the pod's IPs, its pull secrets as read for this sync and the
/// images of its image volumes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PodInputs<'a> {
    /// The sandbox's IPs.
    pub pod_ips: &'a [String],
    /// The pod's `imagePullSecrets` that could be read.
    pub pull_secrets: &'a [Secret],
    /// Per image volume, its image or why it could not be had.
    pub image_volumes: &'a crate::images::ImageVolumes,
}

/// The text of one runtime error as upstream's CRI client returns it: an `Unknown` status is reduced to its message
/// (`remote_image.go` pullImageV1), any other keeps Go's `rpc error: code = ... desc = ...`.
fn error_text(e: &CriError) -> String {
    if e.code() == "Unknown" { e.message() } else { e.grpc_text() }
}

/// The message and reason of a failed pull (`utilerrors.NewAggregate` of the attempts, then `evalCRIPullErr`): one
/// distinct error is shown alone, several as `[e1, e2]`; a runtime's `RegistryUnavailable` or
/// `SignatureValidationFailed` error gets its own reason and upstream's sentence.
pub(crate) fn pull_failure(image: &str, errors: &[CriError]) -> (String, &'static str) {
    let mut distinct: Vec<String> = vec![];
    for t in errors.iter().map(error_text) {
        if !distinct.contains(&t) {
            distinct.push(t);
        }
    }
    let text = match distinct.len() {
        1 => distinct.remove(0),
        _ => format!("[{}]", distinct.join(", ")),
    };
    if let Some(rest) = text.strip_prefix("RegistryUnavailable") {
        return (
            format!("image pull failed for {image} because the registry is unavailable{rest}"),
            "RegistryUnavailable",
        );
    }
    if let Some(rest) = text.strip_prefix("SignatureValidationFailed") {
        let m = format!("image pull failed for {image} because the signature validation failed{rest}");
        return (m, "SignatureValidationFailed");
    }
    (text, "ErrImagePull")
}

impl RuntimeManager {
    /// The pod's pull secrets that could be read (`getPullSecretsForPod`), once per sync.
    pub(crate) async fn pull_secrets_of(&self, pod: &Pod) -> Vec<Secret> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let refs = pod.spec.as_ref().and_then(|s| s.image_pull_secrets.as_ref());
        let (mut found, mut failed) = (vec![], vec![]);
        for name in refs.into_iter().flatten().map(|r| r.name.as_str()).filter(|n| !n.is_empty()) {
            let err = match self.objects.secret(ns, name).await {
                Ok(Some(s)) => {
                    found.push(s);
                    continue;
                }
                Ok(None) => "not found".to_string(),
                Err(e) => e,
            };
            info!(pod = %pod_ref(pod), secret = %format!("{ns}/{name}"), err = %err, "unable to retrieve pull secret, the image pull may not succeed");
            failed.push(name.to_string());
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

    /// The credentials to try for repository `repo` (the image without tag or digest, [`repository_to_pull`]), in
    /// order (empty: an anonymous pull), looked up before the pull is queued as upstream's EnsureImageExists does. A
    /// pull secret that does not decode is an error, as upstream's `MakeDockerKeyring`; it names the secret and the
    /// fault, never a credential.
    ///
    /// [`repository_to_pull`]: kubelet_credentialprovider::repository_to_pull
    pub(crate) async fn credentials_for(
        &self,
        pod: &Pod,
        repo: &str,
        pull_secrets: &[Secret],
    ) -> Result<Vec<TrackedAuthConfig>, String> {
        let Some(lookup) = &self.credentials else { return Ok(vec![]) };
        let secrets = decode_pull_secrets(pull_secrets).map_err(|e| e.to_string())?;
        let spec = pod.spec.as_ref();
        let ctx = PodContext::new(
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
            pod.metadata.uid.clone().unwrap_or_default(),
            spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        );
        Ok(lookup.lookup(repo, &ctx, &secrets).await)
    }

    /// Pulls `spec` (`PullImage` with the keyring's credentials): each credential in turn until one pulls, or
    /// anonymously without any. The errors of every attempt on failure.
    pub(crate) async fn pull_with_credentials(
        &self,
        pod: &Pod,
        spec: &api::ImageSpec,
        credentials: &[TrackedAuthConfig],
        sandbox_config: &api::PodSandboxConfig,
    ) -> Result<String, Vec<CriError>> {
        if credentials.is_empty() {
            let pulled = self.images.pull_image(spec.clone(), None, Some(sandbox_config.clone())).await;
            return pulled.map_err(|e| vec![e]);
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
        Err(errors)
    }
}

/// The credential lookup of a runtime manager (`None`: anonymous pulls only).
pub type Credentials = Option<Arc<CredentialLookup>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(m: &str) -> CriError {
        CriError::Other { op: "PullImage", code: "Unknown".into(), message: m.into() }
    }

    #[test]
    fn failures_read_as_upstreams_aggregate_and_evalcripullerr() {
        let not_found = CriError::NotFound { op: "PullImage", message: "no such image".into() };
        assert_eq!(pull_failure("i", &[unknown("a")]), ("a".into(), "ErrImagePull"));
        assert_eq!(pull_failure("i", &[unknown("a"), unknown("a")]), ("a".into(), "ErrImagePull"));
        assert_eq!(
            pull_failure("i", &[unknown("a"), not_found.clone()]),
            (format!("[a, {}]", not_found.grpc_text()), "ErrImagePull")
        );
        assert!(not_found.grpc_text().starts_with("rpc error: code = NotFound desc = "));
        assert_eq!(
            pull_failure("x:1", &[unknown("RegistryUnavailable: mirror down")]),
            (
                "image pull failed for x:1 because the registry is unavailable: mirror down".into(),
                "RegistryUnavailable"
            )
        );
        assert_eq!(
            pull_failure("x:1", &[unknown("SignatureValidationFailed: bad sig")]),
            (
                "image pull failed for x:1 because the signature validation failed: bad sig".into(),
                "SignatureValidationFailed"
            )
        );
    }
}
