//! Exec credential provider plugins (`--image-credential-provider-config`, `--image-credential-provider-bin-dir`):
//! upstream's `RegisterCredentialProviderPlugins`, `newPluginProvider` (`pkg/credentialprovider/plugin/plugin.go`)
//! and `NewExternalCredentialProviderDockerKeyring` with its `Lookup` (`plugins.go`).
//!
//! Contract of [`PluginKeyring::load`], in upstream's order: the bin directory must exist; the configuration is
//! read ([`config::read_credential_provider_config`]) and validated; each provider's executable
//! `<bin dir>/<name>` must exist and be executable. Any failure is an error (upstream's kubelet exits).
//!
//! Contract of [`PluginKeyring::lookup`]: every provider, in configuration order, is asked for the image
//! ([`provider`]'s contract); a provider that fails is logged and contributes nothing. All the credentials go
//! into one keyring (tagged with the service account in token mode) and the image is looked up in it, so that
//! the most specific pattern comes first whichever plugin returned it.

mod cache;
pub mod config;
pub mod exec;
mod provider;
pub mod service_account;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use self::config::{aggregate, read_credential_provider_config, validate_credential_provider_config};
use self::exec::{EXEC_TIMEOUT, ExecPlugin};
use self::provider::PluginProvider;
use self::service_account::{ServiceAccountProvider, ServiceAccountSource};
use crate::PodContext;
use crate::auth::{CredentialSource, TrackedAuthConfig};
use crate::keyring::BasicDockerKeyring;

/// How plugins are set up.
#[derive(Clone)]
pub struct PluginOptions {
    /// The `KubeletServiceAccountTokenForCredentialProviders` feature gate (beta, on by default in v1.35).
    pub service_account_tokens: bool,
    /// Access to service accounts and their tokens, for plugins in token mode. Without it such plugins fail for
    /// pods with a service account.
    pub service_accounts: Option<Arc<dyn ServiceAccountSource>>,
}

impl Default for PluginOptions {
    fn default() -> Self {
        Self { service_account_tokens: true, service_accounts: None }
    }
}

impl std::fmt::Debug for PluginOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginOptions")
            .field("service_account_tokens", &self.service_account_tokens)
            .field("service_accounts", &self.service_accounts.is_some())
            .finish()
    }
}

/// Why the plugins could not be registered (upstream's kubelet exits on it).
#[derive(Debug, thiserror::Error)]
pub enum PluginRegistrationError {
    /// The bin directory does not exist.
    #[error("plugin binary directory {} did not exist", .0.display())]
    BinDirMissing(PathBuf),
    /// The bin directory cannot be inspected.
    #[error("error inspecting binary directory {}: {source}", .path.display())]
    BinDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The configuration cannot be read.
    #[error(transparent)]
    Config(#[from] config::ConfigReadError),
    /// The configuration is invalid.
    #[error("failed to validate credential provider config: {0}")]
    Validation(String),
    /// A provider's executable does not exist.
    #[error("plugin binary executable {} did not exist", .0.display())]
    BinaryMissing(PathBuf),
    /// A provider's executable cannot be run.
    #[error("error inspecting binary executable {}: {source}", .path.display())]
    Binary {
        /// The executable.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// `exec.LookPath` of a path with a `/`: an existing file, not a directory, with an execute bit.
fn check_executable(path: &Path) -> Result<(), PluginRegistrationError> {
    let binary_error = |source| PluginRegistrationError::Binary { path: path.to_path_buf(), source };
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(PluginRegistrationError::BinaryMissing(path.to_path_buf()));
        }
        Err(err) => return Err(binary_error(err)),
    };
    if metadata.is_dir() {
        return Err(binary_error(std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory")));
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err(binary_error(std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied")));
    }
    Ok(())
}

/// The registered plugins, each with its cache.
pub struct PluginKeyring {
    providers: Vec<PluginProvider>,
    config_hash: String,
    service_account_tokens: bool,
}

impl std::fmt::Debug for PluginKeyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginKeyring")
            .field("providers", &self.provider_names())
            .field("config_hash", &self.config_hash)
            .finish_non_exhaustive()
    }
}

impl PluginKeyring {
    /// upstream's `RegisterCredentialProviderPlugins`.
    pub fn load(config_path: &Path, bin_dir: &Path, options: PluginOptions) -> Result<Self, PluginRegistrationError> {
        match std::fs::metadata(bin_dir) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(PluginRegistrationError::BinDirMissing(bin_dir.to_path_buf()));
            }
            Err(source) => return Err(PluginRegistrationError::BinDir { path: bin_dir.to_path_buf(), source }),
        }
        let loaded = read_credential_provider_config(config_path)?;
        let errs = validate_credential_provider_config(&loaded.config, options.service_account_tokens);
        if !errs.is_empty() {
            return Err(PluginRegistrationError::Validation(aggregate(&errs)));
        }
        let mut providers = Vec::with_capacity(loaded.config.providers.len());
        for provider in loaded.config.providers {
            check_executable(&bin_dir.join(&provider.name))?;
            let plugin = ExecPlugin {
                name: provider.name.clone(),
                api_version: provider.api_version.clone(),
                bin_dir: bin_dir.to_path_buf(),
                args: provider.args.clone(),
                env: provider.env.clone(),
                timeout: EXEC_TIMEOUT,
            };
            let service_account = ServiceAccountProvider::new(&provider, options.service_account_tokens);
            tracing::debug!(provider = %provider.name, "registered credential provider");
            providers.push(PluginProvider::new(
                provider.name,
                provider.match_images,
                provider.default_cache_duration.and_then(|d| d.as_std()).unwrap_or_default(),
                Arc::new(plugin),
                service_account,
                options.service_accounts.clone(),
            ));
        }
        Ok(Self { providers, config_hash: loaded.hash, service_account_tokens: options.service_account_tokens })
    }

    /// The providers' names, in configuration order.
    pub fn provider_names(&self) -> Vec<&str> {
        self.providers.iter().map(|p| p.name.as_str()).collect()
    }

    /// upstream's hash of the configuration files (`sha256:<hex>`), for the config-info metric.
    pub fn config_hash(&self) -> &str {
        &self.config_hash
    }

    /// The plugins' credentials for `image` pulled for `pod` (the per-pod external keyring's `Lookup`). With the
    /// service account token feature off, the pod is not passed to the plugins, as upstream.
    pub async fn lookup(&self, image: &str, pod: &PodContext) -> Vec<TrackedAuthConfig> {
        let unknown_pod = PodContext::default();
        let pod = if self.service_account_tokens { pod } else { &unknown_pod };
        let mut keyring = BasicDockerKeyring::default();
        for provider in &self.providers {
            match provider.provide(image, pod).await {
                Ok(provided) => {
                    let source = provided.coordinates.map(CredentialSource::ServiceAccount);
                    keyring.add(source.as_ref(), &provided.config);
                }
                Err(err) if provider.token_mode() => tracing::error!(
                    provider = %provider.name, image, pod = %pod, pod_uid = %pod.uid,
                    service_account = %pod.service_account_name, error = %err,
                    "failed to provide credentials for image"
                ),
                Err(err) => {
                    tracing::error!(provider = %provider.name, image, error = %err, "failed to provide credentials for image")
                }
            }
        }
        keyring.lookup(image)
    }
}
