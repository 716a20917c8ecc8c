//! The kubelet's configuration file: `KubeletConfiguration` of
//! `kubelet.config.k8s.io/v1beta1`, its loading, defaulting and validation.
//!
//! Mirrors, as of Kubernetes 1.36:
//! - `staging/src/k8s.io/kubelet/config/v1beta1/types.go` — [`KubeletConfiguration`] and
//!   its nested types, with upstream's JSON field names;
//! - `pkg/kubelet/apis/config/v1beta1/defaults.go` —
//!   [`KubeletConfiguration::set_defaults`];
//! - `pkg/kubelet/apis/config/validation/validation.go` —
//!   [`KubeletConfiguration::validate`];
//! - `cmd/kubelet/app/server.go` (`loadConfigFile`) and
//!   `pkg/kubelet/kubeletconfig/configfiles/configfiles.go` — [`load_file`];
//! - `k8s.io/apimachinery/pkg/apis/meta/v1.Duration` — [`Duration`].
//!
//! ```
//! use kubelet_config::kubelet_config::{from_yaml_str, Duration};
//!
//! let yaml = "apiVersion: kubelet.config.k8s.io/v1beta1\n\
//!             kind: KubeletConfiguration\n\
//!             syncFrequency: 30s\n";
//! let mut config = from_yaml_str(yaml, "example.yaml")?;
//! config.set_defaults();
//! config.validate()?;
//! assert_eq!(config.sync_frequency, Duration::from_secs(30));
//! assert_eq!(config.max_pods, 110);
//! # Ok::<(), kubelet_config::kubelet_config::ConfigError>(())
//! ```

mod checks;
mod decode;
mod defaults;
mod duration;
mod gates;
mod gates_table;
mod nested;
mod quantity;
mod types;
mod validation;
mod validation_components;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// `cpuset.Parse` of `reservedSystemCPUs`, for the fuzz targets (crates/kubelet-fuzz).
#[doc(hidden)]
pub use checks::parse_cpu_set;
pub use defaults::{
    DEFAULT_CONTAINER_RUNTIME_ENDPOINT, DEFAULT_EVICTION_HARD, DEFAULT_HEALTHZ_PORT, DEFAULT_IPTABLES_DROP_BIT,
    DEFAULT_IPTABLES_MASQUERADE_BIT, DEFAULT_LOG_FLUSH_FREQUENCY, DEFAULT_MEMORY_THROTTLING_FACTOR,
    DEFAULT_OOM_SCORE_ADJ, DEFAULT_POD_LOGS_DIR, DEFAULT_PORT, DEFAULT_RESOLV_CONF, DEFAULT_VOLUME_PLUGIN_DIR,
    MAX_CONTAINER_BACK_OFF,
};
pub use duration::{Duration, DurationParseError};
pub use gates::{GateSpec, Stage, gate_errors, gate_spec, gate_warnings, known_gates};
pub use nested::*;
pub use types::KubeletConfiguration;
pub use validation::ValidationError;

/// The `apiVersion` of the configuration file.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The `kind` of the configuration file.
pub const KIND: &str = "KubeletConfiguration";

/// Why a configuration could not be loaded, or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The document holds nothing (upstream: "kubelet config file was empty").
    #[error("config file {origin}: file is empty")]
    Empty {
        /// Where the document came from.
        origin: String,
    },
    /// The document is not well-formed YAML or JSON.
    #[error("config file {origin}: {message}")]
    Syntax {
        /// Where the document came from.
        origin: String,
        /// The parser's message, with the location.
        message: String,
    },
    /// A field has a bad value, is unknown, or is missing.
    #[error("config file {origin}: field {field}: {message}")]
    Field {
        /// Where the document came from.
        origin: String,
        /// The path of the field, such as `authentication.webhook.cacheTTL`.
        field: String,
        /// What is wrong, such as `invalid duration "abc"` or `unknown field`.
        message: String,
    },
    /// The document as a whole does not decode (for example, it is a list).
    #[error("config file {origin}: {message}")]
    Decode {
        /// Where the document came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// Validation failed; every failed check is listed.
    #[error("{}", join_messages(errors))]
    Invalid {
        /// The failed checks, in upstream's order.
        errors: Vec<ValidationError>,
    },
}

fn join_messages(errors: &[ValidationError]) -> String {
    errors.iter().map(|e| e.message.as_str()).collect::<Vec<_>>().join("; ")
}

impl KubeletConfiguration {
    /// An empty configuration with `apiVersion` and `kind` set; every other field unset.
    pub fn new() -> Self {
        KubeletConfiguration { api_version: API_VERSION.to_string(), kind: KIND.to_string(), ..Default::default() }
    }

    /// Makes the relative file paths of the configuration relative to `base_dir` (the
    /// directory of the configuration file), like upstream's `resolveRelativePaths` over
    /// `KubeletConfigurationPathRefs`: `staticPodPath`,
    /// `authentication.x509.clientCAFile`, `tlsCertFile`, `tlsPrivateKeyFile`, `resolvConf`
    /// and `volumePluginDir`. Empty paths stay empty.
    pub fn resolve_relative_paths(&mut self, base_dir: &Path) {
        let base = base_dir.to_string_lossy();
        let resolve = |path: &mut String| {
            if !path.is_empty() && !path.starts_with('/') {
                *path = checks::clean_path(&format!("{base}/{path}"));
            }
        };
        resolve(&mut self.static_pod_path);
        resolve(&mut self.authentication.x509.client_ca_file);
        resolve(&mut self.tls_cert_file);
        resolve(&mut self.tls_private_key_file);
        if let Some(resolv_conf) = &mut self.resolver_config {
            resolve(resolv_conf);
        }
        resolve(&mut self.volume_plugin_dir);
    }
}

/// Parses a configuration from YAML or JSON text, checking `apiVersion` and `kind` and
/// rejecting unknown fields. No defaults are applied.
///
/// `origin` names the document in errors, usually the file's path:
/// `config file /etc/x.yaml: field syncFrequency: invalid duration "abc"`.
pub fn from_yaml_str(s: &str, origin: &str) -> Result<KubeletConfiguration, ConfigError> {
    let value = parse_document(s, origin)?;
    check_type_meta(&value, origin)?;
    decode::decode(&value).map_err(|err| {
        if err.path.is_empty() {
            ConfigError::Decode { origin: origin.to_string(), message: err.message }
        } else {
            ConfigError::Field { origin: origin.to_string(), field: err.path_string(), message: err.message }
        }
    })
}

/// Loads a configuration file like upstream's `loadConfigFile`: parses it
/// ([`from_yaml_str`]), applies [`set_defaults`](KubeletConfiguration::set_defaults),
/// resolves relative paths against the file's directory and applies the `evictionHard`
/// defaults ([`apply_default_eviction_hard`](KubeletConfiguration::apply_default_eviction_hard)).
///
/// The result is not validated: upstream validates only after merging command-line flags,
/// so call [`validate`](KubeletConfiguration::validate) once the configuration is final.
pub fn load_file(path: &Path) -> Result<KubeletConfiguration, ConfigError> {
    let read_error = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let content = std::fs::read_to_string(path).map_err(read_error)?;
    let mut config = from_yaml_str(&content, &path.display().to_string())?;
    config.set_defaults();
    let absolute = std::path::absolute(path).map_err(read_error)?;
    if let Some(dir) = absolute.parent() {
        config.resolve_relative_paths(dir);
    }
    config.apply_default_eviction_hard();
    Ok(config)
}

/// Parses YAML (or JSON, when the document starts with `{`) into a generic value.
fn parse_document(s: &str, origin: &str) -> Result<Value, ConfigError> {
    let syntax = |message: String| ConfigError::Syntax { origin: origin.to_string(), message };
    let value = if s.trim_start().starts_with('{') {
        serde_json::from_str::<Value>(s).map_err(|e| syntax(format!("json: {e}")))?
    } else {
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        serde_saphyr::from_str_with_options::<Value>(s, options).map_err(|e| syntax(format!("yaml: {e}")))?
    };
    if value.is_null() {
        return Err(ConfigError::Empty { origin: origin.to_string() });
    }
    Ok(value)
}

fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Checks `apiVersion` and `kind`, as upstream's decoder does before decoding the object.
fn check_type_meta(value: &Value, origin: &str) -> Result<(), ConfigError> {
    let Some(object) = value.as_object() else {
        return Err(ConfigError::Decode {
            origin: origin.to_string(),
            message: format!("expected a mapping of configuration fields, found {}", value_kind(value)),
        });
    };
    for (field, expected) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        let message = match object.get(field) {
            Some(Value::String(found)) if found == expected => continue,
            None | Some(Value::Null) => format!("missing, expected {expected:?}"),
            Some(Value::String(found)) if found.is_empty() => {
                format!("missing, expected {expected:?}")
            }
            Some(found) => format!("unsupported value {found}, expected {expected:?}"),
        };
        return Err(ConfigError::Field { origin: origin.to_string(), field: field.to_string(), message });
    }
    Ok(())
}
