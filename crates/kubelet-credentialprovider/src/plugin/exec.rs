//! Running a credential provider plugin: upstream's `execPlugin` (`ExecPlugin`, `runPlugin`, `encodeRequest`,
//! `decodeResponse`, `mergeEnvVars` in `pkg/credentialprovider/plugin/plugin.go`) and the
//! `CredentialProviderRequest` / `CredentialProviderResponse` API
//! (`staging/src/k8s.io/kubelet/pkg/apis/credentialprovider/v1/types.go`).
//!
//! Contract: `<bin dir>/<name> <args…>` runs with the kubelet's environment plus the configured `env` (which
//! wins on a clash), gets the request as one JSON line on stdin (`kind`, `apiVersion`, `image`, and in `v1` the
//! `serviceAccountToken` and `serviceAccountAnnotations` when set), and must print a response of the same
//! `apiVersion` on stdout within [`EXEC_TIMEOUT`] (then it is killed). A failed run's error carries the plugin's
//! stderr, as upstream's; a response that does not decode is reported without its contents, since it may hold
//! credentials.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::config::{ExecEnvVar, GoDuration, PLUGIN_API_V1, PLUGIN_API_VERSIONS};
use super::service_account::ServiceAccountToken;
use crate::auth::{go_json_escape, redacted};

/// upstream's catch-all timeout of one plugin run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this much of a failed plugin's stderr is kept in its error.
const MAX_STDERR: usize = 4096;

/// One credential of a response (`AuthConfig` of the plugin API).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginAuthConfig {
    /// The user name.
    #[serde(default)]
    pub username: Option<String>,
    /// The password. Secret.
    #[serde(default)]
    pub password: Option<String>,
}

impl fmt::Debug for PluginAuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginAuthConfig")
            .field("username", &self.username)
            .field("password", &redacted(self.password.as_deref().unwrap_or_default()))
            .finish()
    }
}

/// A plugin's answer (`CredentialProviderResponse`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialProviderResponse {
    /// `Image`, `Registry` or `Global`; anything else makes the response unusable.
    pub cache_key_type: String,
    /// How long to cache; `None` means the provider's default, zero means not at all.
    pub cache_duration: Option<GoDuration>,
    /// Image pattern to credential.
    pub auth: BTreeMap<String, PluginAuthConfig>,
}

/// Why a plugin run gave no response. `Clone`, since one run may answer several waiting lookups.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The plugin could not be started, failed or timed out (upstream's `runPlugin` error, with stderr).
    #[error("error execing credential provider plugin {plugin} for image {image}: {reason}: {stderr}")]
    Run {
        /// The plugin's name.
        plugin: String,
        /// The image asked about.
        image: String,
        /// `exit status 1`, `context deadline exceeded`, a spawn error.
        reason: String,
        /// What the plugin wrote on stderr (at most 4 KiB).
        stderr: String,
    },
    /// stdout is not a JSON object.
    #[error("error reading GVK from response: {0}")]
    Gvk(String),
    /// The response's apiVersion differs from the request's.
    #[error(
        "apiVersion from credential plugin response did not match expected apiVersion:{expected}, actual apiVersion:{actual}"
    )]
    ApiVersion {
        /// The configured version.
        expected: String,
        /// The response's.
        actual: String,
    },
    /// The response does not decode (contents not reported: they may hold credentials).
    #[error("error decoding credential provider plugin response from stdout")]
    Decode,
}

/// What a plugin is asked: the inputs of a `CredentialProviderRequest`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PluginRequest<'a> {
    /// The image (repository) credentials are wanted for.
    pub(crate) image: &'a str,
    /// The pod's service account token, in token mode.
    pub(crate) token: Option<&'a ServiceAccountToken>,
    /// The service account annotations the plugin asked for.
    pub(crate) annotations: &'a BTreeMap<String, String>,
}

static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

#[cfg(test)]
impl<'a> PluginRequest<'a> {
    /// A request without service account data.
    pub(crate) fn image_only(image: &'a str) -> Self {
        Self { image, token: None, annotations: &NO_ANNOTATIONS }
    }
}

/// The plugin interface (upstream's `Plugin`), so that the provider can be tested without processes.
#[async_trait]
pub(crate) trait Plugin: Send + Sync {
    /// Asks the plugin for the request's credentials.
    async fn exec(&self, request: PluginRequest<'_>) -> Result<CredentialProviderResponse, ExecError>;
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestWire<'a> {
    kind: &'static str,
    api_version: &'a str,
    image: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    service_account_token: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    service_account_annotations: &'a BTreeMap<String, String>,
}

/// `encodeRequest`: the request as upstream's JSON encoder writes it, newline-terminated. Versions before `v1`
/// have no token fields.
pub(crate) fn encode_request(api_version: &str, request: PluginRequest<'_>) -> Vec<u8> {
    let v1 = api_version == PLUGIN_API_V1;
    let request = RequestWire {
        kind: "CredentialProviderRequest",
        api_version,
        image: request.image,
        service_account_token: request.token.filter(|_| v1).map(ServiceAccountToken::expose).unwrap_or_default(),
        service_account_annotations: if v1 { request.annotations } else { &NO_ANNOTATIONS },
    };
    let mut json = go_json_escape(&serde_json::to_string(&request).unwrap_or_default());
    json.push('\n');
    json.into_bytes()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResponseWire {
    kind: Option<String>,
    api_version: Option<String>,
    #[serde(default)]
    cache_key_type: Option<String>,
    #[serde(default)]
    cache_duration: Option<String>,
    #[serde(default)]
    auth: Option<BTreeMap<String, PluginAuthConfig>>,
}

/// The response's `apiVersion` as `json.DefaultMetaFactory.Interpret` reads it (Go's case-insensitive fields).
fn interpret_api_version(data: &[u8]) -> Result<String, ExecError> {
    let value: Value = serde_json::from_slice(data).map_err(|e| ExecError::Gvk(e.to_string()))?;
    let object = match &value {
        Value::Null => return Ok(String::new()),
        Value::Object(object) => object,
        _ => return Err(ExecError::Gvk("the response is not a JSON object".to_string())),
    };
    let mut api_version = String::new();
    for (key, v) in object {
        if key.eq_ignore_ascii_case("apiVersion") {
            match v {
                Value::String(s) => api_version = s.clone(),
                Value::Null => {}
                _ => return Err(ExecError::Gvk("apiVersion is not a string".to_string())),
            }
        }
    }
    Ok(api_version)
}

/// `ExecPlugin`'s checks and `decodeResponse`: the apiVersion must be the request's, then a strict decode.
pub(crate) fn decode_response(
    data: &[u8],
    expected_api_version: &str,
) -> Result<CredentialProviderResponse, ExecError> {
    let actual = interpret_api_version(data)?;
    if actual != expected_api_version {
        return Err(ExecError::ApiVersion { expected: expected_api_version.to_string(), actual });
    }
    let wire: ResponseWire = serde_json::from_slice(data).map_err(|_| ExecError::Decode)?;
    let known_version = wire.api_version.as_deref().is_some_and(|v| PLUGIN_API_VERSIONS.contains(&v));
    if wire.kind.as_deref() != Some("CredentialProviderResponse") || !known_version {
        return Err(ExecError::Decode);
    }
    let cache_duration = match wire.cache_duration {
        None => None,
        Some(s) => Some(GoDuration::parse(&s).map_err(|_| ExecError::Decode)?),
    };
    Ok(CredentialProviderResponse {
        cache_key_type: wire.cache_key_type.unwrap_or_default(),
        cache_duration,
        auth: wire.auth.unwrap_or_default(),
    })
}

/// A plugin executable (upstream's `execPlugin`).
#[derive(Debug, Clone)]
pub(crate) struct ExecPlugin {
    pub(crate) name: String,
    pub(crate) api_version: String,
    pub(crate) bin_dir: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<ExecEnvVar>,
    pub(crate) timeout: Duration,
}

fn exit_reason(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("signal: {signal}"),
        (None, None) => status.to_string(),
    }
}

fn truncated(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(&stderr[..stderr.len().min(MAX_STDERR)]);
    text.trim_end().to_string()
}

#[async_trait]
impl Plugin for ExecPlugin {
    async fn exec(&self, request: PluginRequest<'_>) -> Result<CredentialProviderResponse, ExecError> {
        let image = request.image;
        tracing::trace!(plugin = %self.name, image, "getting image credentials from external exec plugin");
        let request = encode_request(&self.api_version, request);
        let run_error = |reason: String, stderr: &[u8]| ExecError::Run {
            plugin: self.name.clone(),
            image: image.to_string(),
            reason,
            stderr: truncated(stderr),
        };
        let mut command = tokio::process::Command::new(self.bin_dir.join(&self.name));
        command
            .args(&self.args)
            .envs(self.env.iter().map(|e| (&e.name, &e.value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| run_error(e.to_string(), b""))?;
        let stdin = child.stdin.take();
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A plugin that exits without reading its input is judged by its exit status, as Go ignores EPIPE.
                let _ = stdin.write_all(&request).await;
            }
        };
        let run = async { tokio::join!(write, child.wait_with_output()).1 };
        let output = match tokio::time::timeout(self.timeout, run).await {
            Err(_) => return Err(run_error("context deadline exceeded".to_string(), b"")),
            Ok(Err(e)) => return Err(run_error(e.to_string(), b"")),
            Ok(Ok(output)) => output,
        };
        if !output.status.success() {
            return Err(run_error(exit_reason(output.status), &output.stderr));
        }
        decode_response(&output.stdout, &self.api_version)
    }
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
