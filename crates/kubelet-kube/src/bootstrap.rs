//! TLS bootstrap of the kubelet's client certificate (`pkg/kubelet/certificate/bootstrap/bootstrap.go`
//! LoadClientCert, `client-go/util/certificate/csr`).
//!
//! Called once at start by the binary when `--kubeconfig` does not exist and `--bootstrap-kubeconfig` is given:
//! generates an ECDSA P-256 key, submits a `certificates.k8s.io/v1` CSR (signer
//! `kubernetes.io/kube-apiserver-client-kubelet`, CN `system:node:<node>`, O `system:nodes`, usages digital
//! signature and client auth) with the bootstrap credentials, logs how to approve it, waits for the certificate
//! (a denied or failed request is an error), stores certificate and key as upstream does
//! (`<cert-dir>/kubelet-client-<timestamp>.pem` and the `kubelet-client-current.pem` link) and writes the
//! kubeconfig that uses them. A kubeconfig whose certificate is still valid is kept: no second bootstrap.

use std::path::Path;

use tracing::info;

use crate::KubeError;
use crate::certificate::FileStore;
use crate::certificate::csr::{CsrClient, CsrError, CsrRequest, KubeCsr, csr_name};
use crate::certificate::manager::CLIENT_USAGES;

pub use crate::certificate::manager::KUBELET_CLIENT_SIGNER;

/// Why the bootstrap failed.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// The bootstrap kubeconfig is unusable.
    #[error(transparent)]
    Kubeconfig(#[from] KubeError),
    /// The key or the request could not be generated.
    #[error("generate the key and certificate request: {0}")]
    Crypto(String),
    /// The apiserver refused or failed.
    #[error("certificate signing request {name}: {message}")]
    Csr {
        /// The CSR's name.
        name: String,
        /// What happened.
        message: String,
    },
    /// Files could not be written.
    #[error("{0}")]
    Store(String),
    /// A folder could not be made.
    #[error("{path}: {source}")]
    Io {
        /// The folder.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BootstrapError + '_ {
    move |source| BootstrapError::Io { path: path.display().to_string(), source }
}

/// Whether the kubeconfig exists and its client certificate (if a file) is still valid for a while.
pub fn kubeconfig_is_valid(kubeconfig: &Path) -> bool {
    let Ok(kc) = kube::config::Kubeconfig::read_from(kubeconfig) else { return false };
    let Some(user) = kc.auth_infos.first().and_then(|a| a.auth_info.as_ref()) else { return false };
    let Some(cert_path) = user.client_certificate.as_ref() else { return true };
    let Ok(pem) = std::fs::read(cert_path) else { return false };
    cert_not_after(&pem).is_some_and(|not_after| {
        #[allow(clippy::disallowed_methods)] // certificate validity is wall-clock time by nature
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
        not_after > now
    })
}

fn cert_not_after(pem: &[u8]) -> Option<i64> {
    for p in x509_parser::pem::Pem::iter_from_buffer(pem).flatten() {
        if p.label == "CERTIFICATE" {
            let (_, cert) = x509_parser::parse_x509_certificate(&p.contents).ok()?;
            return Some(cert.validity().not_after.timestamp());
        }
    }
    None
}

/// The server and CA of the bootstrap kubeconfig's current context, as kubeconfig YAML lines.
fn cluster_entry(bootstrap: &Path) -> Result<String, BootstrapError> {
    let kc = kube::config::Kubeconfig::read_from(bootstrap)
        .map_err(|e| KubeError::Kubeconfig { path: bootstrap.display().to_string(), message: e.to_string() })?;
    let ctx_name = kc.current_context.clone().unwrap_or_default();
    let cluster_name = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .or_else(|| kc.clusters.first().map(|c| c.name.clone()))
        .unwrap_or_default();
    let cluster =
        kc.clusters.iter().find(|c| c.name == cluster_name).and_then(|c| c.cluster.clone()).ok_or_else(|| {
            KubeError::Kubeconfig {
                path: bootstrap.display().to_string(),
                message: "no cluster in the current context".into(),
            }
        })?;
    let mut s = format!("    server: {}\n", cluster.server.unwrap_or_default());
    if let Some(ca) = cluster.certificate_authority_data {
        s.push_str(&format!("    certificate-authority-data: {ca}\n"));
    } else if let Some(file) = cluster.certificate_authority {
        s.push_str(&format!("    certificate-authority: {file}\n"));
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        s.push_str("    insecure-skip-tls-verify: true\n");
    }
    Ok(s)
}

/// Runs the TLS bootstrap: returns when `kubeconfig` has been written with a signed client certificate.
pub async fn bootstrap(
    bootstrap_kubeconfig: &Path,
    kubeconfig: &Path,
    cert_dir: &Path,
    node: &str,
) -> Result<(), BootstrapError> {
    if kubeconfig.exists() && kubeconfig_is_valid(kubeconfig) {
        info!(kubeconfig = %kubeconfig.display(), "kubeconfig has a valid client certificate; no bootstrap needed");
        return Ok(());
    }
    let api = crate::KubeApi::from_kubeconfig(bootstrap_kubeconfig).await?;
    let key = rcgen::KeyPair::generate().map_err(|e| BootstrapError::Crypto(e.to_string()))?;
    let mut params =
        rcgen::CertificateParams::new(Vec::<String>::new()).map_err(|e| BootstrapError::Crypto(e.to_string()))?;
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    let request = params.serialize_request(&key).map_err(|e| BootstrapError::Crypto(e.to_string()))?;
    let request_pem = request.pem().map_err(|e| BootstrapError::Crypto(e.to_string()))?;
    let name = csr_name(key.public_key_raw(), node, &CLIENT_USAGES);
    let csrs = KubeCsr::new(api.client.clone());
    let req = CsrRequest {
        name: name.clone(),
        request_pem,
        signer: KUBELET_CLIENT_SIGNER.into(),
        usages: CLIENT_USAGES.iter().map(|u| u.to_string()).collect(),
    };
    let csr_err = |e: CsrError| BootstrapError::Csr { name: name.clone(), message: e.to_string() };
    let (_, uid) = csrs.create(&req).await.map_err(csr_err)?;
    info!(csr = %name, node, "waiting for the client certificate to be issued; approve it with: kubectl certificate approve {name}");
    let cert = csrs.wait(&name, &uid).await.map_err(csr_err)?;

    #[allow(clippy::disallowed_methods)] // the file name carries the wall-clock time, as upstream's
    let now = std::time::SystemTime::now();
    let store = FileStore::new(cert_dir, "kubelet-client", None, None);
    let (_, pem_path) =
        store.update(&cert, key.serialize_pem().as_bytes(), now).map_err(|e| BootstrapError::Store(e.to_string()))?;
    let current = store.current_path();

    let kc = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n{}  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\ncurrent-context: default-context\npreferences: {{}}\nusers:\n- name: default-auth\n  user:\n    client-certificate: {cur}\n    client-key: {cur}\n",
        cluster_entry(bootstrap_kubeconfig)?,
        cur = current.display()
    );
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    write_private(kubeconfig, kc.as_bytes())?;
    info!(kubeconfig = %kubeconfig.display(), certificate = %pem_path.display(), "client certificate issued; kubeconfig written");
    Ok(())
}

fn write_private(path: &Path, data: &[u8]) -> Result<(), BootstrapError> {
    crate::certificate::store::write_private(path, data).map_err(|e| BootstrapError::Store(e.to_string()))
}
