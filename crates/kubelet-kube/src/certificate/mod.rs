//! The kubelet's certificate managers (`pkg/kubelet/certificate`, client-go `util/certificate`): the client
//! certificate that authenticates to the apiserver (`rotateCertificates`) and the serving certificate of the
//! kubelet API (`serverTLSBootstrap`), each renewed through the CSR API before it expires.
//!
//! - [`pair`]: a parsed certificate and key.
//! - [`store`]: the `<prefix>-<timestamp>.pem` files and the `<prefix>-current.pem` link.
//! - [`csr`]: submitting a request and waiting for its certificate.
//! - [`manager`]: the rotation loop.
//! - [`transport`]: the apiserver client that presents the current client certificate and reconnects when it
//!   changes.

pub mod csr;
pub mod manager;
pub mod pair;
pub mod store;
pub mod transport;

pub use manager::{CertMetrics, Manager, ManagerConfig, Template};
pub use pair::Pair;
pub use store::FileStore;

use std::path::{Path, PathBuf};

/// A client certificate as a kubeconfig's current user names it.
pub type KubeconfigCert = (Option<(PathBuf, PathBuf)>, Option<(Vec<u8>, Vec<u8>)>);

/// The client certificate and key files the kubeconfig's current user names (kubeadm's point at
/// `kubelet-client-current.pem`), and its embedded PEM when it carries the data instead.
pub fn kubeconfig_client_cert(kubeconfig: &Path) -> Result<KubeconfigCert, crate::KubeError> {
    use base64::Engine;
    use secrecy::ExposeSecret;
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| crate::KubeError::Kubeconfig { path: kubeconfig.display().to_string(), message: e.to_string() })?;
    let ctx = kc.current_context.clone().unwrap_or_default();
    let user = kc.contexts.iter().find(|c| c.name == ctx).and_then(|c| c.context.as_ref()).and_then(|c| c.user.clone());
    let auth =
        kc.auth_infos.iter().find(|a| user.as_deref().is_none_or(|u| u == a.name)).and_then(|a| a.auth_info.clone());
    let Some(auth) = auth else { return Ok((None, None)) };
    let files = auth.client_certificate.clone().map(PathBuf::from).zip(auth.client_key.clone().map(PathBuf::from));
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.decode(s.trim()).ok();
    let data = auth
        .client_certificate_data
        .as_deref()
        .and_then(b64)
        .zip(auth.client_key_data.as_ref().and_then(|k| b64(k.expose_secret())));
    Ok((files, data))
}
