//! The credentials a lookup returns: upstream's `AuthConfig`, `TrackedAuthConfig`, `CredentialSource` and
//! `hashAuthConfig` (`pkg/credentialprovider/keyring.go`).
//!
//! Contract: nothing here prints a credential. [`AuthConfig`]'s and [`TrackedAuthConfig`]'s `Debug` show the
//! username, the email and the server address, and only whether each secret field (password, auth, identity
//! token, registry token) is set.

use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Authorization for one registry, as the CRI's `AuthConfig` takes it (upstream mirrors docker's
/// `types.AuthConfig`). The keyrings fill `username`, `password` and `email`; the other fields exist for the
/// CRI and stay empty, as upstream's.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuthConfig {
    /// The registry user name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// The password. Secret.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub password: String,
    /// `base64(username:password)`. Secret.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub auth: String,
    /// Deprecated by docker; kept because upstream carries it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub email: String,
    /// The registry's address.
    #[serde(rename = "serveraddress", skip_serializing_if = "String::is_empty")]
    pub server_address: String,
    /// A token to obtain an access token from the registry. Secret.
    #[serde(rename = "identitytoken", skip_serializing_if = "String::is_empty")]
    pub identity_token: String,
    /// A bearer token for the registry. Secret.
    #[serde(rename = "registrytoken", skip_serializing_if = "String::is_empty")]
    pub registry_token: String,
}

/// How a secret field shows in `Debug`: whether it is set, never its value.
pub(crate) fn redacted(value: &str) -> &'static str {
    if value.is_empty() { "" } else { "<redacted>" }
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("username", &self.username)
            .field("password", &redacted(&self.password))
            .field("auth", &redacted(&self.auth))
            .field("email", &self.email)
            .field("server_address", &self.server_address)
            .field("identity_token", &redacted(&self.identity_token))
            .field("registry_token", &redacted(&self.registry_token))
            .finish()
    }
}

/// The pull secret a credential came from (upstream's `SecretCoordinates`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SecretCoordinates {
    /// The secret's UID.
    pub uid: String,
    /// The secret's namespace.
    pub namespace: String,
    /// The secret's name.
    pub name: String,
}

/// The service account whose token a plugin exchanged for a credential (upstream's
/// `ServiceAccountCoordinates`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ServiceAccountCoordinates {
    /// The service account's UID.
    pub uid: String,
    /// Its namespace (the pod's).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Where a credential came from. Node-wide credentials (the node's docker config files, plugins not in
/// service-account mode) have none (`Option::None` in [`TrackedAuthConfig::source`]), as upstream's nil source.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialSource {
    /// One of the pod's `imagePullSecrets`.
    Secret(SecretCoordinates),
    /// A credential provider plugin given the pod's service account token.
    ServiceAccount(ServiceAccountCoordinates),
}

/// A credential with its origin and upstream's hash of it (`TrackedAuthConfig`), which the
/// `KubeletEnsureSecretPulledImages` records store.
#[derive(Clone, PartialEq, Eq)]
pub struct TrackedAuthConfig {
    /// The credential.
    pub auth: AuthConfig,
    /// Its origin; `None` for credentials every pod of the node may use.
    pub source: Option<CredentialSource>,
    /// `hashAuthConfig`: hex SHA-256 of the credential's JSON as Go marshals it.
    pub auth_config_hash: String,
}

impl TrackedAuthConfig {
    /// Wraps `auth` with its source and hash (upstream's `NewTrackedAuthConfig` with the feature on).
    pub fn new(auth: AuthConfig, source: Option<CredentialSource>) -> Self {
        let auth_config_hash = hash_auth_config(&auth);
        Self { auth, source, auth_config_hash }
    }
}

impl fmt::Debug for TrackedAuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackedAuthConfig")
            .field("auth", &self.auth)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// upstream's `hashAuthConfig`: SHA-256 of `json.Marshal(creds)`, hex encoded.
pub fn hash_auth_config(auth: &AuthConfig) -> String {
    let json = serde_json::to_string(auth).unwrap_or_default();
    hex::encode(Sha256::digest(go_json_escape(&json).as_bytes()))
}

pub(crate) use kubelet_types::go_json::escape as go_json_escape;

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(username: &str, password: &str, email: &str) -> AuthConfig {
        AuthConfig { username: username.into(), password: password.into(), email: email.into(), ..Default::default() }
    }

    /// The hashes of upstream's TestDockerKeyringLookup and TestIssue3797.
    #[test]
    fn hash_matches_upstream() {
        assert_eq!(
            hash_auth_config(&auth("ada", "smash", "ada@example.com")),
            "353258b53f5e9a57b059eab3f05312fc35bbeb874f08ce101e7bf0bf46977423"
        );
        assert_eq!(
            hash_auth_config(&auth("grace", "squash", "grace@example.com")),
            "f949b3837a1eb733a951b6aeda0b3327c09ec50c917de9ca35818e8fbf567e29"
        );
        assert_eq!(
            hash_auth_config(&auth("rex", "tiny arms", "rex@example.com")),
            "899748fec74c8dd761845fca727f4249b05be275ff24026676fcd4351f656363"
        );
    }

    #[test]
    fn go_escapes_html_characters() {
        assert_eq!(go_json_escape(r#"{"password":"a<b>&c"}"#), r#"{"password":"a\u003cb\u003e\u0026c"}"#);
    }

    #[test]
    fn debug_never_prints_secrets() {
        let a = AuthConfig {
            username: "robot".into(),
            password: "hunter2-password".into(),
            auth: "cm9ib3Q6aHVudGVyMg==".into(),
            identity_token: "identity-secret".into(),
            registry_token: "registry-secret".into(),
            ..Default::default()
        };
        let tracked = TrackedAuthConfig::new(a.clone(), None);
        for text in [format!("{a:?}"), format!("{tracked:?}"), format!("{tracked:#?}")] {
            assert!(text.contains("robot"), "{text}");
            for secret in ["hunter2-password", "cm9ib3Q6aHVudGVyMg==", "identity-secret", "registry-secret"] {
                assert!(!text.contains(secret), "{text} shows {secret}");
            }
            assert!(!text.contains(&tracked.auth_config_hash), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
    }
}
