//! Docker config documents: upstream's `DockerConfig`, `DockerConfigJSON`, `DockerConfigEntry.UnmarshalJSON`
//! and `decodeDockerConfigFieldAuth` (`pkg/credentialprovider/config.go`).
//!
//! Two shapes exist: the legacy `.dockercfg` (a `kubernetes.io/dockercfg` secret's `.dockercfg` key, the
//! `~/.dockercfg` file) is the bare map `{"registry": {entry}}`; `config.json` (a
//! `kubernetes.io/dockerconfigjson` secret's `.dockerconfigjson` key, `~/.docker/config.json`) wraps it as
//! `{"auths": {...}}`. An entry has `username`, `password`, `email` and `auth`; a non-empty `auth` is
//! `base64(username:password)` (padded or not) and replaces the username and password.
//!
//! Decoding follows Go's `encoding/json` as upstream uses it: field names match case-insensitively, unknown
//! fields are ignored, `null` leaves a field empty, and any other type mismatch or a bad `auth` fails the whole
//! document (upstream's `json.Unmarshal` returns the error). Contract: a [`DockerConfigError`] never carries
//! a credential: it names the place (`["registry.io"].auth`) and the kind of fault, never a value.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::Value;

use crate::auth::redacted;

/// One registry's entry of a docker config (upstream's `DockerConfigEntry`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DockerConfigEntry {
    /// The user name (from `auth` when that is set).
    pub username: String,
    /// The password (from `auth` when that is set). Secret.
    pub password: String,
    /// The email.
    pub email: String,
}

impl fmt::Debug for DockerConfigEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DockerConfigEntry")
            .field("username", &self.username)
            .field("password", &redacted(&self.password))
            .field("email", &self.email)
            .finish()
    }
}

/// Registry pattern (as written: `https://index.docker.io/v1/`, `*.registry.io`, `registry.io:5000/team`) to
/// credentials (upstream's `DockerConfig` map). Kept in key order so that lookups are deterministic where
/// upstream iterates a Go map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerConfig(pub BTreeMap<String, DockerConfigEntry>);

/// Why `auth` could not be decoded (`decodeDockerConfigFieldAuth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFieldError {
    /// Not base64 (Go's `base64.CorruptInputError`).
    #[error("illegal base64 data at input byte {0}")]
    Base64(usize),
    /// The decoded text has no `:`.
    #[error("unable to parse auth field, must be formatted as base64(username:password)")]
    NoColon,
}

/// Why a docker config document could not be decoded. Never carries a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerConfigError {
    /// Not JSON (serde_json's syntax message: position and kind of fault only).
    #[error("invalid json: {0}")]
    Syntax(String),
    /// A value of the wrong JSON type.
    #[error("{path}: expected {expected}, found {found}")]
    Type {
        /// Where, e.g. `auths["registry.io"].password`.
        path: String,
        /// What Go's decoder expected.
        expected: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// An `auth` field that does not decode.
    #[error("{path}: {reason}")]
    Auth {
        /// Where, e.g. `["registry.io"].auth`.
        path: String,
        /// Why.
        reason: AuthFieldError,
    },
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_value(bytes: &[u8]) -> Result<Value, DockerConfigError> {
    // Parsing into a `Value` can only fail on syntax, whose messages never quote the input.
    serde_json::from_slice(bytes).map_err(|e| DockerConfigError::Syntax(e.to_string()))
}

fn type_error(path: String, expected: &'static str, found: &Value) -> DockerConfigError {
    DockerConfigError::Type { path, expected, found: json_type(found) }
}

/// A string field as Go decodes it: `null` leaves it unchanged (`None`), another type is an error.
fn string_field(path: impl FnOnce() -> String, v: &Value) -> Result<Option<String>, DockerConfigError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(type_error(path(), "a string", other)),
    }
}

impl DockerConfig {
    /// Decodes a legacy `.dockercfg` document (upstream's `ReadDockerConfigFileFromBytes`).
    pub fn from_dockercfg_bytes(bytes: &[u8]) -> Result<Self, DockerConfigError> {
        Self::from_value(String::new(), &parse_value(bytes)?)
    }

    /// Decodes a `config.json` document and returns its `auths` (upstream's
    /// `readDockerConfigJSONFileFromBytes`); `HttpHeaders` is checked for type and dropped.
    pub fn from_config_json_bytes(bytes: &[u8]) -> Result<Self, DockerConfigError> {
        let value = parse_value(bytes)?;
        let object = match &value {
            Value::Null => return Ok(Self::default()),
            Value::Object(object) => object,
            other => return Err(type_error(String::new(), "an object", other)),
        };
        let mut auths = Self::default();
        for (key, v) in object {
            if key.eq_ignore_ascii_case("auths") {
                auths = Self::from_value(key.clone(), v)?;
            } else if key.eq_ignore_ascii_case("httpheaders") {
                check_http_headers(key, v)?;
            }
        }
        Ok(auths)
    }

    fn from_value(path: String, value: &Value) -> Result<Self, DockerConfigError> {
        match value {
            Value::Null => Ok(Self::default()),
            Value::Object(object) => {
                let mut config = BTreeMap::new();
                for (registry, entry) in object {
                    let entry_path = format!("{path}[{registry:?}]");
                    config.insert(registry.clone(), DockerConfigEntry::from_value(entry_path, entry)?);
                }
                Ok(Self(config))
            }
            other => Err(type_error(path, "an object", other)),
        }
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn check_http_headers(key: &str, v: &Value) -> Result<(), DockerConfigError> {
    match v {
        Value::Null => Ok(()),
        Value::Object(headers) => {
            for (name, value) in headers {
                string_field(|| format!("{key}[{name:?}]"), value)?;
            }
            Ok(())
        }
        other => Err(type_error(key.to_string(), "an object", other)),
    }
}

impl DockerConfigEntry {
    /// upstream's `DockerConfigEntry.UnmarshalJSON`.
    fn from_value(path: String, value: &Value) -> Result<Self, DockerConfigError> {
        let object = match value {
            Value::Null => return Ok(Self::default()),
            Value::Object(object) => object,
            other => return Err(type_error(path, "an object", other)),
        };
        let mut entry = Self::default();
        let mut auth = String::new();
        for (key, v) in object {
            let field = match key.to_ascii_lowercase().as_str() {
                "username" => &mut entry.username,
                "password" => &mut entry.password,
                "email" => &mut entry.email,
                "auth" => &mut auth,
                _ => continue,
            };
            if let Some(s) = string_field(|| format!("{path}.{key}"), v)? {
                *field = s;
            }
        }
        if !auth.is_empty() {
            let (username, password) = decode_auth_field(&auth)
                .map_err(|reason| DockerConfigError::Auth { path: format!("{path}.auth"), reason })?;
            entry.username = username;
            entry.password = password;
        }
        Ok(entry)
    }
}

fn go_base64(padding: DecodePaddingMode) -> GeneralPurpose {
    let config = GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true).with_decode_padding_mode(padding);
    GeneralPurpose::new(&STANDARD, config)
}

/// upstream's `decodeDockerConfigFieldAuth`: padded base64 when the trimmed field ends with `=`, unpadded
/// otherwise (Go's `StdEncoding` / `RawStdEncoding`, which skip `\r` and `\n`), then split at the first `:`.
pub fn decode_auth_field(field: &str) -> Result<(String, String), AuthFieldError> {
    let padded = field.trim().ends_with('=');
    let engine = go_base64(if padded { DecodePaddingMode::RequireCanonical } else { DecodePaddingMode::RequireNone });
    let stripped: String = field.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    let decoded = engine.decode(stripped.as_bytes()).map_err(|e| {
        AuthFieldError::Base64(match e {
            base64::DecodeError::InvalidByte(offset, _) | base64::DecodeError::InvalidLastSymbol(offset, _) => offset,
            base64::DecodeError::InvalidLength(len) => len,
            base64::DecodeError::InvalidPadding => stripped.len(),
        })
    })?;
    let decoded = String::from_utf8_lossy(&decoded);
    let (username, password) = decoded.split_once(':').ok_or(AuthFieldError::NoColon)?;
    Ok((username.to_string(), password.to_string()))
}

/// upstream's `encodeDockerConfigFieldAuth`: padded base64 of `username:password`.
pub fn encode_auth_field(username: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(username: &str, password: &str, email: &str) -> DockerConfigEntry {
        DockerConfigEntry { username: username.into(), password: password.into(), email: email.into() }
    }

    #[test]
    fn auth_field_padded_and_unpadded() {
        assert_eq!(decode_auth_field("Zm9vOmJhcg=="), Ok(("foo".into(), "bar".into())));
        assert_eq!(decode_auth_field("Zm9vOmJhcg"), Ok(("foo".into(), "bar".into())));
        // Go's decoder skips line breaks.
        assert_eq!(decode_auth_field("Zm9vO\nmJhcg==\n"), Ok(("foo".into(), "bar".into())));
        // The password keeps every colon after the first.
        let field = encode_auth_field("user", "pa:ss:word");
        assert_eq!(decode_auth_field(&field), Ok(("user".into(), "pa:ss:word".into())));
        assert_eq!(decode_auth_field(&encode_auth_field("", "")), Ok((String::new(), String::new())));
    }

    #[test]
    fn bad_auth_fields() {
        assert_eq!(decode_auth_field("Zm9vYmFy"), Err(AuthFieldError::NoColon));
        assert_eq!(decode_auth_field("Zm9v!mJhcg=="), Err(AuthFieldError::Base64(4)));
        // Padded text without the canonical padding, and unpadded text with a stray '='.
        assert!(matches!(decode_auth_field("Zm9vOmJhcg="), Err(AuthFieldError::Base64(_))));
    }

    #[test]
    fn dockercfg_entries_with_auth_or_fields() {
        let doc = br#"{
            "registry.io": {"auth": "Zm9vOmJhcg==", "email": "foo@example.com", "username": "ignored"},
            "other.io:5000": {"Username": "u", "PASSWORD": "p", "unknown": [1, 2]},
            "empty.io": null,
            "blank-auth.io": {"auth": "", "username": "kept", "password": null}
        }"#;
        let config = DockerConfig::from_dockercfg_bytes(doc).unwrap();
        assert_eq!(config.0["registry.io"], entry("foo", "bar", "foo@example.com"));
        assert_eq!(config.0["other.io:5000"], entry("u", "p", ""));
        assert_eq!(config.0["empty.io"], DockerConfigEntry::default());
        assert_eq!(config.0["blank-auth.io"], entry("kept", "", ""));
        assert_eq!(DockerConfig::from_dockercfg_bytes(b"null").unwrap(), DockerConfig::default());
    }

    #[test]
    fn config_json_takes_auths() {
        let doc = br#"{"auths": {"https://index.docker.io/v1/": {"auth": "Zm9vOmJhcg"}}, "HttpHeaders": {"A": "b"},
            "credsStore": "desktop"}"#;
        let config = DockerConfig::from_config_json_bytes(doc).unwrap();
        assert_eq!(config.0.len(), 1);
        assert_eq!(config.0["https://index.docker.io/v1/"], entry("foo", "bar", ""));
        // The bare map is not a config.json: it has no auths.
        assert!(DockerConfig::from_config_json_bytes(br#"{"registry.io": {}}"#).unwrap().is_empty());
        assert!(DockerConfig::from_config_json_bytes(b"{}").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_place_never_the_credential() {
        let secret_password = "s3cr3t-pa55";
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                format!(r#"{{"registry.io": {{"auth": "{}"}}}}"#, base64_no_colon(secret_password)).into_bytes(),
                r#"["registry.io"].auth: unable to parse auth field, must be formatted as base64(username:password)"#,
            ),
            (
                format!(r#"{{"registry.io": {{"username": "u", "password": ["{secret_password}"]}}}}"#).into_bytes(),
                r#"["registry.io"].password: expected a string, found an array"#,
            ),
            (
                format!(r#"{{"registry.io": "{secret_password}"}}"#).into_bytes(),
                r#"["registry.io"]: expected an object, found a string"#,
            ),
            (format!(r#"{{"registry.io": {{"password": "{secret_password}"}}"#).into_bytes(), "invalid json: "),
        ];
        for (doc, want) in cases {
            let err = DockerConfig::from_dockercfg_bytes(&doc).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err}");
            assert!(!err.contains(secret_password), "{err}");
        }
        let err = DockerConfig::from_config_json_bytes(br#"{"auths": {"r.io": {"auth": 12345}}}"#).unwrap_err();
        assert_eq!(err.to_string(), r#"auths["r.io"].auth: expected a string, found a number"#);
        assert!(!err.to_string().contains("12345"));
        let err = DockerConfig::from_config_json_bytes(br#"{"HttpHeaders": {"X": 1}}"#).unwrap_err();
        assert_eq!(err.to_string(), r#"HttpHeaders["X"]: expected a string, found a number"#);
        assert!(DockerConfig::from_config_json_bytes(b"[]").is_err());
    }

    fn base64_no_colon(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn entry_debug_redacts_password() {
        let text = format!("{:?}", entry("robot", "hunter2", "r@example.com"));
        assert!(text.contains("robot") && !text.contains("hunter2"), "{text}");
    }
}
