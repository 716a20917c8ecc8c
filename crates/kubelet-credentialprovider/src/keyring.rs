//! The docker keyring: upstream's `BasicDockerKeyring` (`Add`, `Lookup`) and `isDefaultRegistryMatch`
//! (`pkg/credentialprovider/keyring.go`).
//!
//! Contract of [`BasicDockerKeyring::add`]: each registry of a docker config is normalised to a key: `https://`
//! is added when neither `http://` nor `https://` is there, the URL is parsed, a leading `/v1/` or `/v2/` path
//! is dropped (docker's `ResolveAuthConfig` treats them as the bare host), and the key is the host plus the
//! remaining path (just the host when the path is empty or `/`). An entry that does not parse is skipped with a
//! log line. Several entries may share a key: all are kept, in insertion order.
//!
//! Contract of [`BasicDockerKeyring::lookup`]: the keys are walked in reverse byte order, so that longer paths
//! come before their prefixes and plain labels before globs with the same prefix, and every key that matches
//! the image ([`urls_match`](crate::url_match::urls_match)) contributes all its credentials. When none does and
//! the image pulls from Docker Hub (no registry host, `docker.io/…` or `index.docker.io/…`), the credentials of
//! the key `index.docker.io` are returned. The image is the repository without tag or digest, as the image
//! manager passes it (`docker.io/library/nginx`, see [`repository_to_pull`](crate::repository_to_pull)).

use std::collections::HashMap;

use crate::auth::{AuthConfig, CredentialSource, TrackedAuthConfig};
use crate::docker_config::DockerConfig;
use crate::url_match::{parse_schemeless_url, parse_url, urls_match};

/// `defaultRegistryHost`: the key of Docker Hub's credentials.
pub const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// A set of registry credentials indexed for lookups by image (upstream's `BasicDockerKeyring`).
#[derive(Debug, Clone, Default)]
pub struct BasicDockerKeyring {
    /// The distinct keys, reverse-sorted.
    index: Vec<String>,
    creds: HashMap<String, Vec<TrackedAuthConfig>>,
}

impl BasicDockerKeyring {
    /// A keyring holding `config`'s credentials, all from `source`.
    pub fn from_config(source: Option<&CredentialSource>, config: &DockerConfig) -> Self {
        let mut keyring = Self::default();
        keyring.add(source, config);
        keyring
    }

    /// Adds every entry of `config`, tagged with `source` (`None` for node-wide credentials).
    pub fn add(&mut self, source: Option<&CredentialSource>, config: &DockerConfig) {
        for (location, entry) in &config.0 {
            let Some(key) = keyring_key(location) else { continue };
            let auth = AuthConfig {
                username: entry.username.clone(),
                password: entry.password.clone(),
                email: entry.email.clone(),
                ..Default::default()
            };
            self.creds.entry(key.clone()).or_default().push(TrackedAuthConfig::new(auth, source.cloned()));
            self.index.push(key);
        }
        self.index.sort_unstable_by(|a, b| b.cmp(a));
        self.index.dedup();
    }

    /// Every credential whose key matches `image`, most specific key first; empty when none does.
    pub fn lookup(&self, image: &str) -> Vec<TrackedAuthConfig> {
        let mut found = Vec::new();
        if let Ok(target) = parse_schemeless_url(image) {
            for key in &self.index {
                let matched = parse_schemeless_url(key).is_ok_and(|glob| urls_match(&glob, &target).unwrap_or(false));
                if matched {
                    found.extend(self.creds[key].iter().cloned());
                }
            }
        }
        if found.is_empty()
            && is_default_registry_match(image)
            && let Some(hub) = self.creds.get(DEFAULT_REGISTRY_HOST)
        {
            return hub.clone();
        }
        found
    }

    /// Whether the keyring holds no credential.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// The key a docker config location is stored under, or `None` (logged) when it does not parse.
fn keyring_key(location: &str) -> Option<String> {
    let value = if location.starts_with("https://") || location.starts_with("http://") {
        location.to_string()
    } else {
        format!("https://{location}")
    };
    let parsed = match parse_url(value) {
        Ok(parsed) => parsed,
        Err(err) => {
            tracing::error!(entry = location, error = %err, "entry in dockercfg invalid, ignoring");
            return None;
        }
    };
    let mut path = parsed.path.as_str();
    if path.starts_with("/v2/") || path.starts_with("/v1/") {
        path = &path[3..];
    }
    Some(if !path.is_empty() && path != "/" { format!("{}{path}", parsed.host) } else { parsed.host })
}

/// upstream's `isDefaultRegistryMatch`: whether `image` pulls from Docker Hub judging by its name.
pub fn is_default_registry_match(image: &str) -> bool {
    let Some((first, _)) = image.split_once('/') else {
        // e.g. "ubuntu"; an empty image is not a match.
        return !image.is_empty();
    };
    if first.is_empty() {
        return false;
    }
    if first == "docker.io" || first == DEFAULT_REGISTRY_HOST {
        return true;
    }
    // Docker takes the first part as a registry host when it has a '.' or a ':'.
    !first.contains(['.', ':'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker_config::{DockerConfigEntry, encode_auth_field};

    const USERNAME: &str = "foo";
    const PASSWORD: &str = "bar";
    const EMAIL: &str = "foo@bar.baz";

    /// upstream's sample: one entry with an email and `auth`.
    fn sample_keyring(location: &str) -> BasicDockerKeyring {
        let doc = serde_json::json!({ location: { "email": EMAIL, "auth": encode_auth_field(USERNAME, PASSWORD) } });
        let config = DockerConfig::from_dockercfg_bytes(doc.to_string().as_bytes()).unwrap();
        BasicDockerKeyring::from_config(None, &config)
    }

    fn assert_sample(found: &[TrackedAuthConfig], context: &str) {
        let first = found.first().unwrap_or_else(|| panic!("{context}: no credential"));
        assert_eq!(
            (first.auth.username.as_str(), first.auth.password.as_str(), first.auth.email.as_str()),
            (USERNAME, PASSWORD, EMAIL),
            "{context}"
        );
    }

    /// upstream's TestDockerKeyringForGlob.
    #[test]
    fn globs_match() {
        let cases = [
            ("https://hello.kubernetes.io", "hello.kubernetes.io"),
            ("https://*.docker.io", "prefix.docker.io"),
            ("https://prefix.*.io", "prefix.docker.io"),
            ("https://prefix.docker.*", "prefix.docker.io"),
            ("https://*.docker.io/path", "prefix.docker.io/path"),
            ("https://prefix.*.io/path", "prefix.docker.io/path/subpath"),
            ("https://prefix.docker.*/path", "prefix.docker.io/path"),
            ("https://*.docker.io:8888", "prefix.docker.io:8888"),
            ("https://prefix.*.io:8888", "prefix.docker.io:8888"),
            ("https://prefix.docker.*:8888", "prefix.docker.io:8888"),
            ("https://*.docker.io/path:1111", "prefix.docker.io/path:1111"),
            ("https://*.docker.io/v1/", "prefix.docker.io/path:1111"),
            ("https://*.docker.io/v2/", "prefix.docker.io/path:1111"),
            ("https://prefix.docker.*/path:1111", "prefix.docker.io/path:1111"),
            ("prefix.docker.io:1111", "prefix.docker.io:1111/path"),
            ("*.docker.io:1111", "prefix.docker.io:1111/path"),
        ];
        for (glob, target) in cases {
            let found = sample_keyring(glob).lookup(&format!("{target}/foo/bar"));
            assert_sample(&found, &format!("{glob} ~ {target}"));
        }
    }

    /// upstream's TestKeyringMiss.
    #[test]
    fn misses() {
        let cases = [
            ("https://hello.kubernetes.io", "world.mesos.org/foo/bar"),
            ("https://*.docker.com", "prefix.docker.io"),
            ("https://suffix.*.io", "prefix.docker.io"),
            ("https://prefix.docker.c*", "prefix.docker.io"),
            ("https://prefix.*.io/path:1111", "prefix.docker.io/path/subpath:1111"),
            ("suffix.*.io", "prefix.docker.io"),
        ];
        for (glob, lookup) in cases {
            let found = sample_keyring(glob).lookup(&format!("{lookup}/foo/bar"));
            assert!(found.is_empty(), "{glob} should not match {lookup}: {found:?}");
        }
    }

    /// upstream's TestKeyringMissWithDockerHubCredentials and the three TestKeyringHitWith*DockerHub tests.
    #[test]
    fn docker_hub_credentials() {
        let keyring = sample_keyring("https://index.docker.io/v1/");
        assert!(keyring.lookup("world.mesos.org/foo/bar").is_empty());
        for image in ["google/docker-registry", "jenkins", "index.docker.io/v1//google/docker-registry"] {
            let found = keyring.lookup(image);
            assert_eq!(found.len(), 1, "{image}: {found:?}");
            assert_sample(&found, image);
        }
        // The image manager passes normalised names.
        assert_sample(&keyring.lookup("docker.io/library/nginx"), "docker.io/library/nginx");
    }

    /// upstream's TestIsDefaultRegistryMatch.
    #[test]
    fn default_registry_match() {
        for (image, want) in [
            ("foo/bar", true),
            ("docker.io/foo/bar", true),
            ("index.docker.io/foo/bar", true),
            ("foo", true),
            ("", false),
            ("registry.tld/foo/bar", false),
            ("registry:5000/foo/bar", false),
            ("myhostdocker.io/foo/bar", false),
        ] {
            assert_eq!(is_default_registry_match(image), want, "{image:?}");
        }
    }

    fn tracked(username: &str, password: &str, email: &str, hash: &str) -> TrackedAuthConfig {
        let auth = AuthConfig {
            username: username.into(),
            password: password.into(),
            email: email.into(),
            ..Default::default()
        };
        TrackedAuthConfig { auth, source: None, auth_config_hash: hash.into() }
    }

    fn config(entries: &[(&str, &TrackedAuthConfig)]) -> DockerConfig {
        DockerConfig(
            entries
                .iter()
                .map(|(loc, t)| {
                    let entry = DockerConfigEntry {
                        username: t.auth.username.clone(),
                        password: t.auth.password.clone(),
                        email: t.auth.email.clone(),
                    };
                    (loc.to_string(), entry)
                })
                .collect(),
        )
    }

    /// upstream's TestDockerKeyringLookup.
    #[test]
    fn lookup_most_specific_first() {
        let ada = tracked(
            "ada",
            "smash",
            "ada@example.com",
            "353258b53f5e9a57b059eab3f05312fc35bbeb874f08ce101e7bf0bf46977423",
        );
        let grace = tracked(
            "grace",
            "squash",
            "grace@example.com",
            "f949b3837a1eb733a951b6aeda0b3327c09ec50c917de9ca35818e8fbf567e29",
        );
        let dk = BasicDockerKeyring::from_config(
            None,
            &config(&[("bar.example.com/pong", &grace), ("bar.example.com", &ada)]),
        );
        let both = vec![grace.clone(), ada.clone()];
        let cases: [(&str, Vec<TrackedAuthConfig>); 7] = [
            // direct match
            ("bar.example.com", vec![ada.clone()]),
            // direct match deeper than other possible matches
            ("bar.example.com/pong", both.clone()),
            // no direct match, deeper path ignored
            ("bar.example.com/ping", vec![ada.clone()]),
            // match first part of path token
            ("bar.example.com/pongz", both.clone()),
            // match regardless of sub-path
            ("bar.example.com/pong/pang", both.clone()),
            // no host match
            ("example.com", vec![]),
            ("foo.example.com", vec![]),
        ];
        for (image, want) in cases {
            assert_eq!(dk.lookup(image), want, "{image}");
        }
    }

    /// upstream's TestIssue3797: a key with a scheme and a /v1/ path matches by host.
    #[test]
    fn scheme_and_v1_path_match_the_host() {
        let rex = tracked(
            "rex",
            "tiny arms",
            "rex@example.com",
            "899748fec74c8dd761845fca727f4249b05be275ff24026676fcd4351f656363",
        );
        let dk = BasicDockerKeyring::from_config(None, &config(&[("https://quay.io/v1/", &rex)]));
        for image in ["quay.io", "quay.io/foo", "quay.io/foo/bar"] {
            assert_eq!(dk.lookup(image), vec![rex.clone()], "{image}");
        }
    }

    #[test]
    fn same_key_keeps_every_credential_and_source() {
        let a = tracked("a", "1", "", "");
        let b = tracked("b", "2", "", "");
        let source = CredentialSource::Secret(crate::SecretCoordinates {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "s".into(),
        });
        let mut dk = BasicDockerKeyring::from_config(None, &config(&[("registry.io", &a)]));
        dk.add(Some(&source), &config(&[("https://registry.io", &b), ("http://registry.io/v2/", &b)]));
        let found = dk.lookup("registry.io/app");
        let names: Vec<_> = found.iter().map(|t| (t.auth.username.as_str(), t.source.is_some())).collect();
        assert_eq!(names, [("a", false), ("b", true), ("b", true)]);
    }

    #[test]
    fn invalid_entries_are_skipped() {
        let a = tracked("a", "1", "", "");
        let dk =
            BasicDockerKeyring::from_config(None, &config(&[("%zz", &a), ("registry.io:port", &a), ("ok.io", &a)]));
        assert_eq!(dk.index, ["ok.io"]);
    }
}
