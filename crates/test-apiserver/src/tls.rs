//! The test PKI and HTTPS: a CA generated per server (what `kubeadm init` makes as `ca.crt`), a serving
//! certificate for 127.0.0.1/localhost signed by it, the rustls configuration of the secure port
//! (client certificates requested, verified against the CA, not required), the x509 authenticator
//! (`apiserver/pkg/authentication/request/x509`: user = CN, groups = O), and issuing certificates: to
//! test clients and for approved CSRs (kube-controller-manager's `csrsigning` controller).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ServerConfig, WebPkiClientVerifier};

use crate::strategy::User;

/// Errors of the test PKI.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating or signing a certificate failed.
    #[error("certificate generation: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// Building the rustls configuration failed.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// Building the client certificate verifier failed.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The server was started without TLS.
    #[error("the server was started without TLS (Options::tls is None)")]
    NotEnabled,
    /// A certificate request cannot be signed.
    #[error("{0}")]
    Request(String),
}

/// TLS options of a test apiserver.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// Subject alternative names of the serving certificate besides `127.0.0.1`, `::1`, `localhost`,
    /// `kubernetes`, `kubernetes.default` and `kubernetes.default.svc` (IP addresses or DNS names).
    pub extra_sans: Vec<String>,
}

/// The default duration of signed certificates (`--cluster-signing-duration`, 1 year).
pub const DEFAULT_SIGNING_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// The CA, its serving certificate and the rustls configuration of the secure port.
pub struct Pki {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    ca_not_after: u64,
    issuer: Issuer<'static, KeyPair>,
    server_config: Arc<ServerConfig>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").field("ca_pem", &self.ca_pem).finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    crate::util::wall_clock().as_secs()
}

/// Sets the validity of `p` to `[from, to)` in seconds since the epoch.
fn validity(p: &mut CertificateParams, from: u64, to: u64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    p.not_before = epoch + Duration::from_secs(from);
    p.not_after = epoch + Duration::from_secs(to);
}

/// A serial number unique within the process (RFC 5280: positive, at most 20 bytes).
fn serial() -> SerialNumber {
    static N: AtomicU64 = AtomicU64::new(1);
    let nanos = crate::util::wall_clock().as_nanos() as u64;
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&(nanos & 0x7fff_ffff_ffff_ffff).to_be_bytes());
    b.extend_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    SerialNumber::from_slice(&b)
}

/// The key usages and extended key usages of `certificates.k8s.io/v1` usage names
/// (`pkg/apis/certificates/v1` `KeyUsage*`; unknown names are ignored).
pub fn usages(names: &[String]) -> (Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>) {
    let (mut ku, mut eku) = (Vec::new(), Vec::new());
    for n in names {
        match n.as_str() {
            "signing" | "digital signature" => ku.push(KeyUsagePurpose::DigitalSignature),
            "content commitment" => ku.push(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => ku.push(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => ku.push(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => ku.push(KeyUsagePurpose::DataEncipherment),
            "cert sign" => ku.push(KeyUsagePurpose::KeyCertSign),
            "crl sign" => ku.push(KeyUsagePurpose::CrlSign),
            "encipher only" => ku.push(KeyUsagePurpose::EncipherOnly),
            "decipher only" => ku.push(KeyUsagePurpose::DecipherOnly),
            "any" => eku.push(ExtendedKeyUsagePurpose::Any),
            "server auth" => eku.push(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => eku.push(ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => eku.push(ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" | "s/mime" => eku.push(ExtendedKeyUsagePurpose::EmailProtection),
            "timestamping" => eku.push(ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => eku.push(ExtendedKeyUsagePurpose::OcspSigning),
            _ => {}
        }
    }
    ku.dedup();
    eku.dedup();
    (ku, eku)
}

/// The subject of a PEM certificate request: CN and every O.
pub fn csr_subject(request_pem: &[u8]) -> Result<(String, Vec<String>), TlsError> {
    use x509_parser::prelude::FromDer;
    let bad = |what: &str| TlsError::Request(format!("{what}: the request is not a PEM certificate request"));
    let (_, pem) = x509_parser::pem::parse_x509_pem(request_pem).map_err(|_| bad("PEM"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err(bad(&pem.label));
    }
    let (_, csr) = x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
        .map_err(|_| bad("DER"))?;
    let subject = &csr.certification_request_info.subject;
    Ok(names(subject))
}

fn names(subject: &x509_parser::x509::X509Name<'_>) -> (String, Vec<String>) {
    let cn = subject.iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or("").to_string();
    let orgs = subject.iter_organization().filter_map(|a| a.as_str().ok()).map(String::from).collect();
    (cn, orgs)
}

/// The user of a verified client certificate (`x509.CommonNameUserConversion`), with
/// `system:authenticated` added as the apiserver's `AuthenticatedGroupAdder` does.
pub fn user_of_cert(der: &[u8]) -> Option<User> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let (name, mut groups) = names(cert.subject());
    if name.is_empty() {
        return None;
    }
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Some(User { name, groups })
}

/// A self-signed CA certificate (PEM) for a server without TLS, to publish as the cluster's root CA.
pub fn self_signed_ca_pem() -> Result<String, TlsError> {
    let key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name.push(DnType::CommonName, "test-apiserver-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let now = unix_now();
    validity(&mut ca, now.saturating_sub(3600), now + 10 * 365 * 24 * 3600);
    Ok(ca.self_signed(&key)?.pem())
}

impl Pki {
    /// A new CA (valid 10 years) and a serving certificate for the local addresses and `extra_sans`.
    pub fn new(opts: &TlsOptions) -> Result<Self, TlsError> {
        let now = unix_now();
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name = rcgen::DistinguishedName::new();
        ca.distinguished_name.push(DnType::CommonName, "test-apiserver-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.serial_number = Some(serial());
        let ca_not_after = now + 10 * 365 * 24 * 3600;
        validity(&mut ca, now.saturating_sub(3600), ca_not_after);
        let ca_cert = ca.self_signed(&ca_key)?;
        let ca_der = ca_cert.der().clone();
        let issuer = Issuer::new(ca, ca_key);

        let mut sans: Vec<String> =
            ["127.0.0.1", "::1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
                .into_iter()
                .map(String::from)
                .collect();
        sans.extend(opts.extra_sans.iter().cloned());
        let mut serving = CertificateParams::new(sans)?;
        serving.distinguished_name = rcgen::DistinguishedName::new();
        serving.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.use_authority_key_identifier_extension = true;
        serving.serial_number = Some(serial());
        validity(&mut serving, now.saturating_sub(3600), ca_not_after);
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &issuer)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(ca_der.clone())?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(serving_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![serving_cert.der().clone(), ca_der.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Pki { ca_pem: ca_cert.pem(), ca_der, ca_not_after, issuer, server_config: Arc::new(config) })
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate (DER).
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// The rustls configuration of the secure port.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server_config.clone()
    }

    /// A client certificate and its key (both PEM, the key PKCS#8) for `cn` in the groups `groups`
    /// (at most one: the certificate builder keeps one value per attribute type), valid one year.
    pub fn issue_client_cert(&self, cn: &str, groups: &[&str]) -> Result<(String, String), TlsError> {
        if groups.len() > 1 {
            return Err(TlsError::Request(format!(
                "at most one group (O) per test client certificate is supported, got {groups:?}"
            )));
        }
        let now = unix_now();
        let mut p = CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        for g in groups {
            p.distinguished_name.push(DnType::OrganizationName, *g);
        }
        p.distinguished_name.push(DnType::CommonName, cn);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.use_authority_key_identifier_extension = true;
        p.serial_number = Some(serial());
        validity(&mut p, now.saturating_sub(300), (now + DEFAULT_SIGNING_DURATION.as_secs()).min(self.ca_not_after));
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// Signs a PEM PKCS#10 request as kube-controller-manager's signer does: subject and subject
    /// alternative names from the request, usages from the CSR object, valid from 5 minutes ago
    /// (backdated) for `duration` (capped at the CA's expiry). Returns the PEM certificate.
    pub fn sign_request(
        &self,
        request_pem: &str,
        usage_names: &[String],
        duration: Duration,
    ) -> Result<String, TlsError> {
        let mut req = CertificateSigningRequestParams::from_pem(request_pem)
            .map_err(|e| TlsError::Request(format!("unable to parse csr: {e}")))?;
        let now = unix_now();
        let (ku, eku) = usages(usage_names);
        let p = &mut req.params;
        p.key_usages = ku;
        p.extended_key_usages = eku;
        p.is_ca = IsCa::ExplicitNoCa;
        p.use_authority_key_identifier_extension = true;
        p.serial_number = Some(serial());
        validity(p, now.saturating_sub(300), (now + duration.as_secs()).min(self.ca_not_after));
        Ok(req.signed_by(&self.issuer)?.pem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_cert_user_and_csr_signing() {
        let pki = Pki::new(&TlsOptions::default()).unwrap();
        let (cert, _key) = pki.issue_client_cert("admin", &["system:masters"]).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).unwrap();
        let u = user_of_cert(&pem.contents).unwrap();
        assert_eq!(u.name, "admin");
        assert_eq!(u.groups, ["system:masters", "system:authenticated"]);

        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::OrganizationName, "system:nodes");
        p.distinguished_name.push(DnType::CommonName, "system:node:n1");
        let csr = p.serialize_request(&key).unwrap().pem().unwrap();
        assert_eq!(csr_subject(csr.as_bytes()).unwrap(), ("system:node:n1".into(), vec!["system:nodes".into()]));
        let names = ["digital signature".to_string(), "client auth".to_string()];
        let signed = pki.sign_request(&csr, &names, Duration::from_secs(3600)).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(signed.as_bytes()).unwrap();
        assert_eq!(user_of_cert(&pem.contents).unwrap().name, "system:node:n1");
        let (_, c) = x509_parser::parse_x509_certificate(&pem.contents).unwrap();
        let life = c.validity().not_after.timestamp() - c.validity().not_before.timestamp();
        assert_eq!(life, 3600 + 300);
        assert!(pki.issue_client_cert("x", &["a", "b"]).is_err());
    }
}
