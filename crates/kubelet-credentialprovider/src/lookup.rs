//! The credentials of one image pull: upstream's image manager building
//! `MakeDockerKeyring(pullSecrets, UnionDockerKeyring{nodeKeyring, externalCredentialProviderKeyring})`
//! (`pkg/kubelet/images/image_manager.go`, `pkg/credentialprovider/secrets/secrets.go`) and the kubelet's
//! set-up of those keyrings (`pkg/kubelet/kuberuntime/kuberuntime_manager.go`, `cmd/kubelet/app/server.go`).
//!
//! Contract: see the crate documentation; [`CredentialLookup::lookup`] returns the pull secrets' credentials,
//! then the node's, then the plugins', each group most specific pattern first.

use std::fmt;
use std::path::Path;

use crate::auth::{CredentialSource, TrackedAuthConfig};
use crate::keyring::BasicDockerKeyring;
use crate::node_config::{DockerConfigSearchPaths, NodeKeyring};
use crate::plugin::{PluginKeyring, PluginOptions, PluginRegistrationError};
use crate::secrets::PullSecret;

/// The pod an image is pulled for: what service account token mode needs (upstream takes the sandbox's
/// metadata and `pod.spec.serviceAccountName`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodContext {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's UID.
    pub uid: String,
    /// `spec.serviceAccountName`; empty when none.
    pub service_account_name: String,
}

impl PodContext {
    /// A pod context.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        uid: impl Into<String>,
        service_account_name: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
            service_account_name: service_account_name.into(),
        }
    }
}

/// `namespace/name`, as `klog.KRef`.
impl fmt::Display for PodContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The node's credential sources: its docker config files and its plugins.
#[derive(Debug)]
pub struct CredentialLookup {
    node: NodeKeyring,
    plugins: Option<PluginKeyring>,
}

impl CredentialLookup {
    /// Credentials from `node` and, when configured, `plugins`.
    pub fn new(node: NodeKeyring, plugins: Option<PluginKeyring>) -> Self {
        Self { node, plugins }
    }

    /// As the kubelet sets up its keyrings: the node's docker config files searched from `root_dir` (the
    /// preferred path) and, when `provider_config` or `provider_bin_dir` is non-empty, the plugins (both are then
    /// required: an empty one fails as upstream's does).
    pub fn for_kubelet(
        root_dir: &Path,
        provider_config: &Path,
        provider_bin_dir: &Path,
        options: PluginOptions,
    ) -> Result<Self, PluginRegistrationError> {
        let node = NodeKeyring::new(DockerConfigSearchPaths::for_root_dir(root_dir));
        let plugins_configured = !provider_config.as_os_str().is_empty() || !provider_bin_dir.as_os_str().is_empty();
        let plugins = if plugins_configured {
            Some(PluginKeyring::load(provider_config, provider_bin_dir, options)?)
        } else {
            None
        };
        Ok(Self { node, plugins })
    }

    /// The node keyring.
    pub fn node(&self) -> &NodeKeyring {
        &self.node
    }

    /// The plugins, when configured.
    pub fn plugins(&self) -> Option<&PluginKeyring> {
        self.plugins.as_ref()
    }

    /// Every credential for pulling `image` (the repository, see [`repository_to_pull`](crate::repository_to_pull))
    /// for `pod`, in the order to try them. Empty means pull anonymously.
    pub async fn lookup(&self, image: &str, pod: &PodContext, pull_secrets: &[PullSecret]) -> Vec<TrackedAuthConfig> {
        let mut secrets = BasicDockerKeyring::default();
        for secret in pull_secrets {
            secrets.add(Some(&CredentialSource::Secret(secret.coordinates.clone())), &secret.config);
        }
        let mut found = secrets.lookup(image);
        found.extend(self.node.lookup(image));
        if let Some(plugins) = &self.plugins {
            found.extend(plugins.lookup(image, pod).await);
        }
        found
    }
}

#[cfg(test)]
#[path = "lookup_tests.rs"]
mod tests;
