//! Kubeconfig files for the test apiserver: one cluster, context and user named `test-apiserver`,
//! with the CA inline (`certificate-authority-data`) for HTTPS and the user's credentials inline.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::error::ServerError;

/// The credentials of the kubeconfig's user.
pub(crate) enum Credentials<'a> {
    /// None: the anonymous user.
    None,
    /// A bearer token.
    Token(&'a str),
    /// A client certificate and its key (PEM).
    ClientCert { cert_pem: &'a str, key_pem: &'a str },
}

/// The kubeconfig YAML for `server`.
pub(crate) fn yaml(server: &str, ca_pem: Option<&str>, creds: &Credentials<'_>) -> String {
    let ca = ca_pem.map(|p| format!("    certificate-authority-data: {}\n", STANDARD.encode(p))).unwrap_or_default();
    let user = match creds {
        Credentials::None => "  user: {}\n".to_string(),
        Credentials::Token(t) => format!("  user:\n    token: {t}\n"),
        Credentials::ClientCert { cert_pem, key_pem } => format!(
            "  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(cert_pem),
            STANDARD.encode(key_pem)
        ),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test-apiserver\n  cluster:\n    server: {server}\n{ca}contexts:\n- name: test-apiserver\n  context:\n    cluster: test-apiserver\n    user: test-apiserver\n    namespace: default\ncurrent-context: test-apiserver\nusers:\n- name: test-apiserver\n{user}preferences: {{}}\n"
    )
}

/// Writes a kubeconfig (owner-only permissions, as it may hold a key).
pub(crate) fn write(path: &Path, content: &str) -> Result<(), ServerError> {
    let err = |source| ServerError::Write { path: path.display().to_string(), source };
    std::fs::write(path, content).map_err(err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    }
    Ok(())
}
