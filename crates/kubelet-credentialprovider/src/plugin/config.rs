//! The `--image-credential-provider-config` file: upstream's `CredentialProviderConfig` types
//! (`pkg/kubelet/apis/config/types.go`, `staging/src/k8s.io/kubelet/config/{v1,v1beta1,v1alpha1}/types.go`),
//! `readCredentialProviderConfig`, `decode` and `validateCredentialProviderConfig`
//! (`pkg/credentialprovider/plugin/config.go`).
//!
//! Contract: the path is a file, or a directory whose `*.json`, `*.yaml` and `*.yml` files are read in
//! lexicographic order and whose providers are concatenated (a provider name seen twice is an error). Each file
//! is YAML or JSON of kind `CredentialProviderConfig` in `kubelet.config.k8s.io/v1`, `v1beta1` or `v1alpha1`,
//! decoded strictly: an unknown field is an error, and `tokenAttributes` exists only in `v1`. The config hash is
//! upstream's (`sha256:` over each file's big-endian 64-bit length and bytes), for the config-info metric.
//! Validation returns every error in upstream's order and words (`providers.name: Invalid value: "a/b":
//! provider name cannot contain '/'`); note upstream's paths carry no list index.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet_config::kubelet_config::{Duration as ConfigDuration, DurationParseError};
use kubelet_config::validation::field::{self, BadValue, ErrorList, Path as FieldPath};
use kubelet_config::validation::names::is_qualified_name;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::url_match::parse_schemeless_url;

/// The config's API group.
pub const CONFIG_GROUP: &str = "kubelet.config.k8s.io";
/// The config's kind.
pub const CONFIG_KIND: &str = "CredentialProviderConfig";
/// `credentialprovider.kubelet.k8s.io/v1`: the only plugin API version with `tokenAttributes`.
pub const PLUGIN_API_V1: &str = "credentialprovider.kubelet.k8s.io/v1";
/// The plugin API versions a provider may name, sorted as upstream lists them.
pub const PLUGIN_API_VERSIONS: [&str; 3] =
    [PLUGIN_API_V1, "credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1"];
/// `tokenAttributes.cacheType` values, sorted.
pub const CACHE_TYPES: [&str; 2] = [CACHE_TYPE_SERVICE_ACCOUNT, CACHE_TYPE_TOKEN];
/// `ServiceAccountServiceAccountTokenCacheType`.
pub const CACHE_TYPE_SERVICE_ACCOUNT: &str = "ServiceAccount";
/// `TokenServiceAccountTokenCacheType`.
pub const CACHE_TYPE_TOKEN: &str = "Token";

/// A Go `metav1.Duration`, which may be negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration {
    /// Whether it is below zero.
    pub negative: bool,
    /// Its absolute value.
    pub magnitude: Duration,
}

impl GoDuration {
    /// A non-negative duration.
    pub const fn from_std(d: Duration) -> Self {
        Self { negative: false, magnitude: d }
    }

    /// Parses a Go duration string (`time.ParseDuration`).
    pub fn parse(s: &str) -> Result<Self, DurationParseError> {
        match ConfigDuration::parse(s) {
            Ok(d) => Ok(Self::from_std(d.0)),
            Err(DurationParseError::Negative(_)) => {
                Ok(Self { negative: true, magnitude: ConfigDuration::parse(&s[1..])?.0 })
            }
            Err(e) => Err(e),
        }
    }

    /// The duration when it is not negative.
    pub fn as_std(&self) -> Option<Duration> {
        (!self.negative || self.magnitude.is_zero()).then_some(self.magnitude)
    }
}

impl fmt::Display for GoDuration {
    /// As Go's `time.Duration.String`: `-1m0s`, `10m0s`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative && !self.magnitude.is_zero() {
            f.write_str("-")?;
        }
        write!(f, "{}", ConfigDuration(self.magnitude))
    }
}

/// The whole plugin configuration (the internal `CredentialProviderConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialProviderConfig {
    /// The plugins, in the order their credentials are tried.
    pub providers: Vec<CredentialProvider>,
}

/// One exec plugin (`CredentialProvider`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialProvider {
    /// The executable's name in the plugin bin directory; unique.
    pub name: String,
    /// Patterns of the images the plugin is asked about.
    pub match_images: Vec<String>,
    /// How long credentials are cached when the response sets no duration (required).
    pub default_cache_duration: Option<GoDuration>,
    /// The `CredentialProviderRequest` / `Response` API version.
    pub api_version: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment added to the kubelet's.
    pub env: Vec<ExecEnvVar>,
    /// Service account token mode (`v1` only).
    pub token_attributes: Option<ServiceAccountTokenAttributes>,
}

/// An environment variable for a plugin (`ExecEnvVar`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ExecEnvVar {
    /// Name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// Value.
    #[serde(default, deserialize_with = "null_as_default")]
    pub value: String,
}

/// Service account token mode of a plugin (`ServiceAccountTokenAttributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccountTokenAttributes {
    /// The audience of the pod-bound token the plugin receives.
    #[serde(default, deserialize_with = "null_as_default")]
    pub service_account_token_audience: String,
    /// `Token` or `ServiceAccount`: what the cache key of the returned credentials includes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub cache_type: String,
    /// Whether the plugin is only run for pods with a service account (required).
    #[serde(default)]
    pub require_service_account: Option<bool>,
    /// Annotations of the service account that must exist; they are passed to the plugin.
    #[serde(default, deserialize_with = "null_as_default")]
    pub required_service_account_annotation_keys: Vec<String>,
    /// Annotations passed to the plugin when they exist.
    #[serde(default, deserialize_with = "null_as_default")]
    pub optional_service_account_annotation_keys: Vec<String>,
}

fn null_as_default<'de, D: serde::Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderWire {
    #[serde(default, deserialize_with = "null_as_default")]
    name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    match_images: Vec<String>,
    #[serde(default)]
    default_cache_duration: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    api_version: String,
    #[serde(default, deserialize_with = "null_as_default")]
    args: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    env: Vec<ExecEnvVar>,
    #[serde(default)]
    token_attributes: Option<ServiceAccountTokenAttributes>,
}

#[derive(Deserialize)]
struct ConfigWire {
    #[serde(default, deserialize_with = "null_as_default")]
    providers: Vec<ProviderWire>,
}

const TOKEN_ATTRIBUTE_FIELDS: [&str; 5] = [
    "serviceAccountTokenAudience",
    "cacheType",
    "requireServiceAccount",
    "requiredServiceAccountAnnotationKeys",
    "optionalServiceAccountAnnotationKeys",
];

/// Paths of the fields the version's schema does not have (the strict decoder's "unknown field" errors).
fn unknown_fields(value: &Value, with_token_attributes: bool) -> Vec<String> {
    fn check(out: &mut Vec<String>, path: &str, value: &Value, known: &[&str]) {
        if let Value::Object(object) = value {
            let prefix = if path.is_empty() { String::new() } else { format!("{path}.") };
            out.extend(object.keys().filter(|k| !known.contains(&k.as_str())).map(|k| format!("{prefix}{k}")));
        }
    }
    fn items(value: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
        value.and_then(Value::as_array).into_iter().flatten().enumerate()
    }
    let mut out = Vec::new();
    check(&mut out, "", value, &["kind", "apiVersion", "providers"]);
    let mut provider_fields =
        vec!["name", "matchImages", "defaultCacheDuration", "apiVersion", "args", "env", "tokenAttributes"];
    if !with_token_attributes {
        provider_fields.pop();
    }
    for (i, provider) in items(value.get("providers")) {
        let path = format!("providers[{i}]");
        check(&mut out, &path, provider, &provider_fields);
        for (j, env) in items(provider.get("env")) {
            check(&mut out, &format!("{path}.env[{j}]"), env, &["name", "value"]);
        }
        if let Some(attributes) = provider.get("tokenAttributes").filter(|_| with_token_attributes) {
            check(&mut out, &format!("{path}.tokenAttributes"), attributes, &TOKEN_ATTRIBUTE_FIELDS);
        }
    }
    out
}

/// Parses YAML, or JSON when the document starts with `{`.
fn parse_document(data: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("invalid utf-8: {e}"))?;
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| e.to_string())
    } else {
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        serde_saphyr::from_str_with_options::<Value>(text, options).map_err(|e| e.to_string())
    }
}

/// upstream's `decode`: one document into a [`CredentialProviderConfig`].
pub fn decode_credential_provider_config(data: &[u8]) -> Result<CredentialProviderConfig, String> {
    let value = parse_document(data)?;
    let type_meta = |field: &str| value.get(field).and_then(Value::as_str).unwrap_or_default().to_string();
    let (api_version, kind) = (type_meta("apiVersion"), type_meta("kind"));
    if kind.is_empty() {
        return Err("Object 'Kind' is missing".to_string());
    }
    if api_version.is_empty() {
        return Err("Object 'apiVersion' is missing".to_string());
    }
    let version = api_version.strip_prefix(&format!("{CONFIG_GROUP}/")).unwrap_or_default();
    if kind != CONFIG_KIND || !["v1", "v1beta1", "v1alpha1"].contains(&version) {
        return Err(format!("no kind {kind:?} is registered for version {api_version:?}"));
    }
    let wire: ConfigWire =
        serde_path_to_error::deserialize(&value).map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
    let unknown = unknown_fields(&value, version == "v1");
    if !unknown.is_empty() {
        let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
        return Err(format!("strict decoding error: {}", fields.join(", ")));
    }
    let mut providers = Vec::with_capacity(wire.providers.len());
    for (i, p) in wire.providers.into_iter().enumerate() {
        let default_cache_duration = match p.default_cache_duration {
            None => None,
            Some(s) => Some(GoDuration::parse(&s).map_err(|e| format!("providers[{i}].defaultCacheDuration: {e}"))?),
        };
        providers.push(CredentialProvider {
            name: p.name,
            match_images: p.match_images,
            default_cache_duration,
            api_version: p.api_version,
            args: p.args,
            env: p.env,
            token_attributes: p.token_attributes,
        });
    }
    Ok(CredentialProviderConfig { providers })
}

/// Why the plugin configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigReadError {
    /// No path was given.
    #[error("credential provider config path is empty")]
    EmptyPath,
    /// The path cannot be inspected.
    #[error("unable to access path {path:?}: {source}")]
    Access {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory that cannot be listed.
    #[error("unable to read directory {path:?}: {source}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A directory without configuration files.
    #[error("no configuration files found in directory {0:?}")]
    NoFiles(PathBuf),
    /// A file that cannot be read.
    #[error("unable to read file {path:?}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file that does not decode.
    #[error("error decoding config {path:?}: {message}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// Two providers with one name across the files.
    #[error("duplicate provider name {0:?} found in configuration file(s)")]
    DuplicateProvider(String),
}

/// A configuration as read, with upstream's hash of the raw files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedConfig {
    /// The merged configuration.
    pub config: CredentialProviderConfig,
    /// `sha256:<hex>` of the files (for `kubelet_credential_provider_config_info`).
    pub hash: String,
}

/// upstream's `readCredentialProviderConfig`.
pub fn read_credential_provider_config(path: &Path) -> Result<LoadedConfig, ConfigReadError> {
    if path.as_os_str().is_empty() {
        return Err(ConfigReadError::EmptyPath);
    }
    let metadata = std::fs::metadata(path).map_err(|source| ConfigReadError::Access { path: path.into(), source })?;
    let files = if metadata.is_dir() {
        let read_dir_error = |source| ConfigReadError::ReadDir { path: path.into(), source };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(read_dir_error)? {
            let entry = entry.map_err(read_dir_error)?;
            let is_dir = entry.file_type().map_err(read_dir_error)?.is_dir();
            let ext = entry.path().extension().map(|e| e.to_string_lossy().into_owned());
            if !is_dir && matches!(ext.as_deref(), Some("json" | "yaml" | "yml")) {
                files.push(entry.path());
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(ConfigReadError::NoFiles(path.into()));
        }
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut hasher = Sha256::new();
    let mut config = CredentialProviderConfig::default();
    let mut names = BTreeSet::new();
    for file in files {
        let data = std::fs::read(&file).map_err(|source| ConfigReadError::ReadFile { path: file.clone(), source })?;
        hasher.update((data.len() as u64).to_be_bytes());
        hasher.update(&data);
        let decoded = decode_credential_provider_config(&data)
            .map_err(|message| ConfigReadError::Decode { path: file.clone(), message })?;
        for provider in decoded.providers {
            if !names.insert(provider.name.clone()) {
                return Err(ConfigReadError::DuplicateProvider(provider.name));
            }
            config.providers.push(provider);
        }
    }
    Ok(LoadedConfig { config, hash: format!("sha256:{}", hex::encode(hasher.finalize())) })
}

/// upstream's `validateCredentialProviderConfig`; `service_account_tokens` is the
/// `KubeletServiceAccountTokenForCredentialProviders` feature gate.
pub fn validate_credential_provider_config(
    config: &CredentialProviderConfig,
    service_account_tokens: bool,
) -> ErrorList {
    let mut errs = ErrorList::default();
    let providers = FieldPath::new("providers");
    if config.providers.is_empty() {
        errs.push(field::required(&providers, "at least 1 item in plugins is required"));
    }
    let mut seen = BTreeSet::new();
    for provider in &config.providers {
        let name_path = providers.child("name");
        let name = provider.name.as_str();
        let name_rules = [
            (name.contains('/'), "provider name cannot contain '/'"),
            (name.contains(' '), "provider name cannot contain spaces"),
            (name == ".", "provider name cannot be '.'"),
            (name == "..", "provider name cannot be '..'"),
        ];
        errs.extend(name_rules.iter().filter(|(bad, _)| *bad).map(|(_, why)| field::invalid(&name_path, name, *why)));
        if !seen.insert(name) {
            errs.push(field::duplicate(&name_path, name));
        }
        let api_path = providers.child("apiVersion");
        if provider.api_version.is_empty() {
            errs.push(field::required(&api_path, ""));
        } else if !PLUGIN_API_VERSIONS.contains(&provider.api_version.as_str()) {
            errs.push(field::not_supported(&api_path, &provider.api_version, &PLUGIN_API_VERSIONS));
        }
        let match_path = providers.child("matchImages");
        if provider.match_images.is_empty() {
            errs.push(field::required(&match_path, "at least 1 item in matchImages is required"));
        }
        for image in &provider.match_images {
            if let Err(err) = parse_schemeless_url(image) {
                errs.push(field::invalid(&match_path, image, format!("match image is invalid: {err}")));
            }
        }
        let duration_path = providers.child("defaultCacheDuration");
        match provider.default_cache_duration {
            None => errs.push(field::required(&duration_path, "")),
            Some(d) if d.as_std().is_none() => {
                errs.push(field::invalid(&duration_path, d.to_string(), "must be greater than or equal to 0"));
            }
            Some(_) => {}
        }
        if let Some(attributes) = &provider.token_attributes {
            validate_token_attributes(&mut errs, &providers, provider, attributes, service_account_tokens);
        }
    }
    errs
}

fn validate_token_attributes(
    errs: &mut ErrorList,
    providers: &FieldPath,
    provider: &CredentialProvider,
    attributes: &ServiceAccountTokenAttributes,
    service_account_tokens: bool,
) {
    let path = providers.child("tokenAttributes");
    if !service_account_tokens {
        errs.push(field::forbidden(
            &path,
            "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled",
        ));
    }
    if attributes.service_account_token_audience.is_empty() {
        errs.push(field::required(&path.child("serviceAccountTokenAudience"), ""));
    }
    if attributes.require_service_account.is_none() {
        errs.push(field::required(&path.child("requireServiceAccount"), ""));
    }
    if provider.api_version != PLUGIN_API_V1 {
        errs.push(field::forbidden(
            &path,
            format!("tokenAttributes is only supported for {PLUGIN_API_V1} API version"),
        ));
    }
    let required_path = path.child("requiredServiceAccountAnnotationKeys");
    if attributes.require_service_account == Some(false)
        && !attributes.required_service_account_annotation_keys.is_empty()
    {
        errs.push(field::forbidden(
            &required_path,
            "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set",
        ));
    }
    validate_annotation_keys(errs, &required_path, &attributes.required_service_account_annotation_keys);
    let optional_path = path.child("optionalServiceAccountAnnotationKeys");
    validate_annotation_keys(errs, &optional_path, &attributes.optional_service_account_annotation_keys);
    let required: BTreeSet<&String> = attributes.required_service_account_annotation_keys.iter().collect();
    let both: Vec<&String> = attributes
        .optional_service_account_annotation_keys
        .iter()
        .collect::<BTreeSet<_>>()
        .intersection(&required)
        .copied()
        .collect();
    if !both.is_empty() {
        errs.push(field::invalid(&path, BadValue::json(&both), "annotation keys cannot be both required and optional"));
    }
    let cache_path = path.child("cacheType");
    match attributes.cache_type.as_str() {
        "" => errs.push(field::required(
            &cache_path,
            format!(
                "cacheType is required to be set when tokenAttributes is specified. Supported values are: {}",
                CACHE_TYPES.join(", ")
            ),
        )),
        t if CACHE_TYPES.contains(&t) => {}
        other => errs.push(field::not_supported(&cache_path, other, &CACHE_TYPES)),
    }
}

/// upstream's `validateServiceAccountAnnotationKeys`: qualified names (case-insensitive), no duplicates.
fn validate_annotation_keys(errs: &mut ErrorList, path: &FieldPath, keys: &[String]) {
    let mut seen = BTreeSet::new();
    for key in keys {
        for msg in is_qualified_name(&key.to_lowercase()) {
            errs.push(field::invalid(path, key, msg));
        }
        if !seen.insert(key) {
            errs.push(field::duplicate(path, key));
        }
    }
}

/// Go's `ErrorList.ToAggregate().Error()`: one message alone, several as `[a, b]`, repeats dropped.
pub fn aggregate(errs: &ErrorList) -> String {
    let mut seen = Vec::new();
    for e in errs.iter() {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
