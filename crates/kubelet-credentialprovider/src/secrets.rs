//! The pod's `imagePullSecrets` as docker configs: upstream's `secretsToTrackedDockerConfigs`
//! (`pkg/credentialprovider/secrets/secrets.go`).
//!
//! A secret counts when its type is `kubernetes.io/dockerconfigjson` and its `.dockerconfigjson` key is
//! non-empty, or its type is `kubernetes.io/dockercfg` and its `.dockercfg` key is non-empty; any other secret is
//! skipped. A counted secret that does not decode fails the whole pull, as upstream's `MakeDockerKeyring`
//! returns the error and the image manager fails the pull with it. The error names the secret and the fault,
//! never a credential.

use k8s_openapi::api::core::v1::Secret;

use crate::auth::SecretCoordinates;
use crate::docker_config::{DockerConfig, DockerConfigError};

/// `v1.SecretTypeDockerConfigJson`.
pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// `v1.DockerConfigJsonKey`.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// `v1.SecretTypeDockercfg`.
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
/// `v1.DockerConfigKey`.
pub const DOCKERCFG_KEY: &str = ".dockercfg";

/// One decoded pull secret: where it came from and its registries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSecret {
    /// The secret's UID, namespace and name (the [`CredentialSource`](crate::CredentialSource) of its
    /// credentials).
    pub coordinates: SecretCoordinates,
    /// Its registries and credentials.
    pub config: DockerConfig,
}

/// A pull secret whose docker config does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("secret {namespace}/{name}: invalid {key}: {source}")]
pub struct PullSecretError {
    /// The secret's namespace.
    pub namespace: String,
    /// The secret's name.
    pub name: String,
    /// The data key that does not decode (`.dockerconfigjson` or `.dockercfg`).
    pub key: &'static str,
    /// Why.
    #[source]
    pub source: DockerConfigError,
}

impl PullSecret {
    /// Decodes one secret; `Ok(None)` when it is not a docker config secret or its key is missing or empty.
    pub fn from_secret(secret: &Secret) -> Result<Option<Self>, PullSecretError> {
        let secret_type = secret.type_.as_deref().unwrap_or_default();
        let data =
            |key: &str| secret.data.as_ref().and_then(|d| d.get(key)).map(|b| b.0.as_slice()).filter(|b| !b.is_empty());
        let coordinates = SecretCoordinates {
            uid: secret.metadata.uid.clone().unwrap_or_default(),
            namespace: secret.metadata.namespace.clone().unwrap_or_default(),
            name: secret.metadata.name.clone().unwrap_or_default(),
        };
        let (key, decoded) = match (secret_type, data(DOCKER_CONFIG_JSON_KEY), data(DOCKERCFG_KEY)) {
            (SECRET_TYPE_DOCKER_CONFIG_JSON, Some(bytes), _) => {
                (DOCKER_CONFIG_JSON_KEY, DockerConfig::from_config_json_bytes(bytes))
            }
            (SECRET_TYPE_DOCKERCFG, _, Some(bytes)) => (DOCKERCFG_KEY, DockerConfig::from_dockercfg_bytes(bytes)),
            _ => return Ok(None),
        };
        match decoded {
            Ok(config) => Ok(Some(Self { coordinates, config })),
            Err(source) => {
                Err(PullSecretError { namespace: coordinates.namespace, name: coordinates.name, key, source })
            }
        }
    }
}

/// Decodes the pod's pull secrets in order, skipping those that are not docker config secrets; the first one
/// that does not decode is the error (upstream's `secretsToTrackedDockerConfigs`).
pub fn pull_secrets(secrets: &[Secret]) -> Result<Vec<PullSecret>, PullSecretError> {
    secrets.iter().filter_map(|s| PullSecret::from_secret(s).transpose()).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn secret(name: &str, secret_type: &str, key: &str, value: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            type_: Some(secret_type.into()),
            data: Some(BTreeMap::from([(key.to_string(), ByteString(value.as_bytes().to_vec()))])),
            ..Default::default()
        }
    }

    #[test]
    fn decodes_both_secret_types_and_skips_others() {
        let secrets = [
            secret(
                "json",
                SECRET_TYPE_DOCKER_CONFIG_JSON,
                DOCKER_CONFIG_JSON_KEY,
                r#"{"auths":{"a.io":{"auth":"dTpw"}}}"#,
            ),
            secret("cfg", SECRET_TYPE_DOCKERCFG, DOCKERCFG_KEY, r#"{"b.io":{"username":"u2","password":"p2"}}"#),
            // Wrong key for the type, empty data, an opaque secret: all skipped.
            secret("mismatch", SECRET_TYPE_DOCKERCFG, DOCKER_CONFIG_JSON_KEY, r#"{"auths":{}}"#),
            secret("empty", SECRET_TYPE_DOCKER_CONFIG_JSON, DOCKER_CONFIG_JSON_KEY, ""),
            secret("opaque", "Opaque", DOCKERCFG_KEY, "not json at all"),
        ];
        let decoded = pull_secrets(&secrets).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(
            decoded[0].coordinates,
            SecretCoordinates { uid: "uid-json".into(), namespace: "default".into(), name: "json".into() }
        );
        assert_eq!(decoded[0].config.0["a.io"].username, "u");
        assert_eq!(decoded[0].config.0["a.io"].password, "p");
        assert_eq!(decoded[1].config.0["b.io"].password, "p2");
    }

    #[test]
    fn a_bad_secret_fails_with_its_name_and_no_credential() {
        let secrets = [
            secret("good", SECRET_TYPE_DOCKERCFG, DOCKERCFG_KEY, r#"{"b.io":{}}"#),
            secret(
                "bad",
                SECRET_TYPE_DOCKER_CONFIG_JSON,
                DOCKER_CONFIG_JSON_KEY,
                r#"{"auths":{"a.io":{"auth":"c2VjcmV0"}}}"#,
            ),
        ];
        let err = pull_secrets(&secrets).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"secret default/bad: invalid .dockerconfigjson: auths["a.io"].auth: unable to parse auth field, must be formatted as base64(username:password)"#
        );
        assert!(!err.to_string().contains("c2VjcmV0") && !err.to_string().contains("secret\""));
    }
}
