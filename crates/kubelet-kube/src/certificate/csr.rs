//! Certificate signing requests (client-go `util/certificate/csr/csr.go`): submit one and wait for its
//! certificate. [`CsrClient`] is what the certificate manager needs; [`KubeCsr`] is it over kube-rs.
//!
//! Waiting watches the one request by name; a Denied or Failed condition ends the wait with an error, as does
//! the caller's timeout (the manager's 15 minutes) or the request being deleted.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams, WatchParams};
use sha2::Digest;
use tracing::warn;

use crate::map_err;

/// A request to submit.
#[derive(Debug, Clone)]
pub struct CsrRequest {
    /// `metadata.name`, or empty for `generateName: csr-` (as the rotation does).
    pub name: String,
    /// The PKCS#10 request, PEM.
    pub request_pem: String,
    /// `spec.signerName`.
    pub signer: String,
    /// `spec.usages`.
    pub usages: Vec<String>,
}

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CsrError {
    /// The apiserver refused or could not be reached.
    #[error("{0}")]
    Api(kubelet_apiclient::ApiError),
    /// The request was denied or failed, or deleted before it was signed.
    #[error("certificate signing request {name}: {message}")]
    NotIssued {
        /// The request's name.
        name: String,
        /// What happened.
        message: String,
    },
}

/// What the certificate managers need of the CSR API.
#[async_trait]
pub trait CsrClient: Send + Sync + 'static {
    /// Creates the request (an existing one of the same name is reused); returns its name and UID.
    async fn create(&self, req: &CsrRequest) -> Result<(String, String), CsrError>;
    /// Waits until the request carries a certificate (PEM).
    async fn wait(&self, name: &str, uid: &str) -> Result<Vec<u8>, CsrError>;
}

/// The CSR API over kube-rs.
#[derive(Clone)]
pub struct KubeCsr {
    csrs: Api<CertificateSigningRequest>,
}

impl KubeCsr {
    /// Over a kube client.
    pub fn new(client: kube::Client) -> Self {
        Self { csrs: Api::all(client) }
    }
}

/// `node-csr-<digest>` as upstream's `digestedName`: a stable name for the same key, subject and usages.
pub fn csr_name(public_key_der: &[u8], node: &str, usages: &[&str]) -> String {
    let mut h = sha2::Sha512_256::new();
    h.update(public_key_der);
    h.update(format!("CN=system:node:{node},O=system:nodes").as_bytes());
    for u in usages {
        h.update(u.as_bytes());
    }
    format!("node-csr-{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.finalize()))
}

#[async_trait]
impl CsrClient for KubeCsr {
    async fn create(&self, req: &CsrRequest) -> Result<(String, String), CsrError> {
        let mut metadata = ObjectMeta::default();
        if req.name.is_empty() {
            metadata.generate_name = Some("csr-".into());
        } else {
            metadata.name = Some(req.name.clone());
        }
        let csr = CertificateSigningRequest {
            metadata,
            spec: CertificateSigningRequestSpec {
                request: ByteString(req.request_pem.clone().into_bytes()),
                signer_name: req.signer.clone(),
                usages: Some(req.usages.clone()),
                ..Default::default()
            },
            status: None,
        };
        let made = match self.csrs.create(&PostParams::default(), &csr).await {
            Ok(c) => c,
            Err(kube::Error::Api(s)) if s.code == 409 && !req.name.is_empty() => {
                self.csrs.get(&req.name).await.map_err(|e| CsrError::Api(map_err(e)))?
            }
            Err(e) => return Err(CsrError::Api(map_err(e))),
        };
        Ok((made.metadata.name.unwrap_or_default(), made.metadata.uid.unwrap_or_default()))
    }

    async fn wait(&self, name: &str, uid: &str) -> Result<Vec<u8>, CsrError> {
        let not_issued = |message: String| CsrError::NotIssued { name: name.to_string(), message };
        let check = |c: &CertificateSigningRequest| -> Option<Result<Vec<u8>, CsrError>> {
            if !uid.is_empty() && c.metadata.uid.as_deref().is_some_and(|u| u != uid) {
                return Some(Err(not_issued("replaced by another request of the same name".into())));
            }
            let st = c.status.as_ref()?;
            for cond in st.conditions.iter().flatten() {
                if (cond.type_ == "Denied" || cond.type_ == "Failed") && cond.status == "True" {
                    let msg = format!("{}: {}", cond.type_.to_lowercase(), cond.message.clone().unwrap_or_default());
                    return Some(Err(not_issued(msg)));
                }
            }
            st.certificate.as_ref().filter(|c| !c.0.is_empty()).map(|c| Ok(c.0.clone()))
        };
        let mut delay = Duration::from_millis(500);
        loop {
            match self.csrs.get_opt(name).await {
                Ok(Some(c)) => {
                    if let Some(r) = check(&c) {
                        return r;
                    }
                    let rv = c.metadata.resource_version.clone().unwrap_or_default();
                    let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(60);
                    if let Ok(stream) = self.csrs.watch(&wp, &rv).await {
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
                Ok(None) => return Err(not_issued("deleted before a certificate was issued".into())),
                Err(e) => {
                    warn!(csr = %name, error = %map_err(e), retryIn = ?delay, "cannot read the certificate signing request");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
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
