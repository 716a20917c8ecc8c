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

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams, WatchParams};
use sha2::Digest;
use tracing::{info, warn};

use crate::{KubeError, map_err};

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

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
    #[error("{path}: {source}")]
    Io {
        /// The file.
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

/// `node-csr-<digest>` as upstream's `digestedName`: a stable name for the same key, subject and usages.
fn csr_name(public_key_der: &[u8], node: &str, usages: &[&str]) -> String {
    let mut h = sha2::Sha512_256::new();
    h.update(public_key_der);
    h.update(format!("CN=system:node:{node},O=system:nodes").as_bytes());
    for u in usages {
        h.update(u.as_bytes());
    }
    format!("node-csr-{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finalize()))
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
    let usages = ["digital signature", "client auth"];
    let name = csr_name(key.public_key_raw(), node, &usages);
    let csrs: Api<CertificateSigningRequest> = Api::all(api.client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.into_bytes()),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let csr_err = |message: String| BootstrapError::Csr { name: name.clone(), message };
    match csrs.create(&PostParams::default(), &csr).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(csr_err(map_err(e).to_string())),
    }
    info!(csr = %name, node, "waiting for the client certificate to be issued; approve it with: kubectl certificate approve {name}");
    let cert = wait_for_certificate(&csrs, &name).await.map_err(csr_err)?;

    std::fs::create_dir_all(cert_dir).map_err(io(cert_dir))?;
    #[allow(clippy::disallowed_methods)] // the file name carries the wall-clock time, as upstream's
    let ts = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d-%H-%M-%S").to_string();
    let pem_path = cert_dir.join(format!("kubelet-client-{ts}.pem"));
    let mut pem = String::from_utf8_lossy(&cert).into_owned();
    if !pem.ends_with('\n') {
        pem.push('\n');
    }
    pem.push_str(&key.serialize_pem());
    write_private(&pem_path, pem.as_bytes())?;
    let current = cert_dir.join("kubelet-client-current.pem");
    let tmp_link = cert_dir.join(".kubelet-client-current.pem.tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&pem_path, &tmp_link).map_err(io(&tmp_link))?;
    std::fs::rename(&tmp_link, &current).map_err(io(&current))?;

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
    use std::os::unix::fs::OpenOptionsExt;
    let tmp: PathBuf = path.with_extension("tmp");
    let mut f =
        std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&tmp).map_err(io(&tmp))?;
    std::io::Write::write_all(&mut f, data).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Waits until the CSR carries a certificate; a Denied or Failed condition ends the wait with an error.
async fn wait_for_certificate(csrs: &Api<CertificateSigningRequest>, name: &str) -> Result<Vec<u8>, String> {
    let check = |c: &CertificateSigningRequest| -> Option<Result<Vec<u8>, String>> {
        let st = c.status.as_ref()?;
        for cond in st.conditions.iter().flatten() {
            if (cond.type_ == "Denied" || cond.type_ == "Failed") && cond.status == "True" {
                return Some(Err(format!(
                    "{}: {}",
                    cond.type_.to_lowercase(),
                    cond.message.clone().unwrap_or_default()
                )));
            }
        }
        st.certificate.as_ref().filter(|c| !c.0.is_empty()).map(|c| Ok(c.0.clone()))
    };
    let mut delay = Duration::from_millis(500);
    loop {
        match csrs.get_opt(name).await {
            Ok(Some(c)) => {
                if let Some(r) = check(&c) {
                    return r;
                }
                let rv = c.metadata.resource_version.clone().unwrap_or_default();
                let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(60);
                if let Ok(stream) = csrs.watch(&wp, &rv).await {
                    let mut stream = std::pin::pin!(stream);
                    while let Ok(Some(ev)) = stream.try_next().await {
                        if let kube::core::WatchEvent::Added(c) | kube::core::WatchEvent::Modified(c) = ev
                            && let Some(r) = check(&c)
                        {
                            return r;
                        }
                    }
                }
                delay = Duration::from_millis(500);
            }
            Ok(None) => return Err("deleted before a certificate was issued".into()),
            Err(e) => {
                warn!(csr = %name, error = %map_err(e), retryIn = ?delay, "cannot read the certificate signing request");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_names_are_stable_per_key() {
        let a = csr_name(b"key1", "n1", &["client auth"]);
        assert_eq!(a, csr_name(b"key1", "n1", &["client auth"]));
        assert_ne!(a, csr_name(b"key2", "n1", &["client auth"]));
        assert!(a.starts_with("node-csr-") && a.len() == 9 + 43);
    }
}
