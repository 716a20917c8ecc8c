//! Test doubles shared by the crate's tests: a scripted in-process plugin and shell-script plugins on disk.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::plugin::config::GoDuration;
use crate::plugin::exec::{CredentialProviderResponse, ExecError, Plugin, PluginAuthConfig, PluginRequest};

/// Serialises the tests that write and run executables: a script written while another test forks could be
/// held open by that child and fail to exec with ETXTBSY.
pub(crate) static PROCESS_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes an executable `#!/bin/sh` script `dir/name` with `body`.
pub(crate) fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A response with `(pattern, username, password)` credentials.
pub(crate) fn response(
    key_type: &str,
    duration: Option<&str>,
    auth: &[(&str, &str, &str)],
) -> CredentialProviderResponse {
    CredentialProviderResponse {
        cache_key_type: key_type.to_string(),
        cache_duration: duration.map(|d| GoDuration::parse(d).unwrap()),
        auth: auth
            .iter()
            .map(|(pattern, u, p)| {
                (pattern.to_string(), PluginAuthConfig { username: Some(u.to_string()), password: Some(p.to_string()) })
            })
            .collect(),
    }
}

/// One call of a [`FakePlugin`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FakeCall {
    pub(crate) image: String,
    pub(crate) token: Option<String>,
    pub(crate) annotations: BTreeMap<String, String>,
}

/// A plugin answering with a set response, recording its calls; optionally each call waits for a release.
pub(crate) struct FakePlugin {
    response: Mutex<Result<CredentialProviderResponse, ExecError>>,
    calls: Mutex<Vec<FakeCall>>,
    release: Option<tokio::sync::watch::Receiver<bool>>,
}

impl FakePlugin {
    pub(crate) fn new(response: CredentialProviderResponse) -> Self {
        Self { response: Mutex::new(Ok(response)), calls: Mutex::new(Vec::new()), release: None }
    }

    /// Calls wait until `release` holds `true`.
    pub(crate) fn gated(response: CredentialProviderResponse, release: tokio::sync::watch::Receiver<bool>) -> Self {
        Self { release: Some(release), ..Self::new(response) }
    }

    pub(crate) fn set_response(&self, response: Result<CredentialProviderResponse, ExecError>) {
        *self.response.lock().unwrap() = response;
    }

    pub(crate) fn calls(&self) -> Vec<FakeCall> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl Plugin for FakePlugin {
    async fn exec(&self, request: PluginRequest<'_>) -> Result<CredentialProviderResponse, ExecError> {
        self.calls.lock().unwrap().push(FakeCall {
            image: request.image.to_string(),
            token: request.token.map(|t| t.expose().to_string()),
            annotations: request.annotations.clone(),
        });
        if let Some(release) = &self.release {
            let _ = release.clone().wait_for(|r| *r).await;
        }
        self.response.lock().unwrap().clone()
    }
}
