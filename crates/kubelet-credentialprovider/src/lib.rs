//! Image pull credentials of the kubelet: upstream's `pkg/credentialprovider` (`keyring.go`, `config.go`,
//! `provider.go`), `pkg/credentialprovider/secrets/secrets.go` and `pkg/credentialprovider/plugin`
//! (`plugin.go`, `plugins.go`, `config.go`) as of v1.35.
//!
//! Contract: [`CredentialLookup::lookup`] returns every credential that may pull an image for a pod, in the
//! order the image manager tries them (upstream's `MakeDockerKeyring(pullSecrets, UnionDockerKeyring{nodeKeyring,
//! externalCredentialProviderKeyring})`):
//! 1. the pod's `imagePullSecrets` ([`PullSecret`]), all in one keyring: the most specific registry pattern
//!    first, secrets in pod order for the same pattern;
//! 2. the node's docker config files ([`NodeKeyring`]);
//! 3. the exec credential provider plugins ([`PluginKeyring`]), all in one keyring.
//!
//! Within each keyring, patterns match as upstream's `URLsMatch` ([`url_match`]) and Docker Hub's credentials
//! (`index.docker.io`) serve images without a registry host. The image is the repository to pull
//! ([`repository_to_pull`]). No credential, token or auth string is ever logged, put in an error or printed by
//! `Debug` ([`AuthConfig`]'s `Debug` redacts).
//!
//! Left out: the cloud providers' in-tree keyrings (gone upstream), the plugin metrics
//! (`kubelet_credential_provider_plugin_errors`, `_duration`; [`PluginKeyring::config_hash`] is there for the
//! config-info metric), and the `KubeletEnsureSecretPulledImages` records, whose inputs
//! ([`TrackedAuthConfig::source`], [`TrackedAuthConfig::auth_config_hash`]) every credential carries.

pub mod auth;
pub mod docker_config;
pub mod glob;
pub mod image;
pub mod keyring;
mod lookup;
pub mod node_config;
pub mod plugin;
pub mod secrets;
pub mod url_match;

#[cfg(test)]
mod test_support;

pub use auth::{AuthConfig, CredentialSource, SecretCoordinates, ServiceAccountCoordinates, TrackedAuthConfig};
pub use docker_config::{DockerConfig, DockerConfigEntry, DockerConfigError};
pub use image::{ImageNameError, repository_to_pull};
pub use keyring::BasicDockerKeyring;
pub use lookup::{CredentialLookup, PodContext};
pub use node_config::{DockerConfigSearchPaths, NodeKeyring};
pub use plugin::service_account::{
    BoundTokenRequest, FakeServiceAccounts, ServiceAccountInfo, ServiceAccountSource, ServiceAccountSourceError,
    ServiceAccountToken,
};
pub use plugin::{PluginKeyring, PluginOptions, PluginRegistrationError};
pub use secrets::{PullSecret, PullSecretError, pull_secrets};
