//! TLS of the kubelet's secure port (`cmd/kubelet/app/server.go` InitializeTLS, `client-go/util/cert`
//! GenerateSelfSignedCertKey, `component-base/cli/flag` TLS names).
//!
//! - `tlsCertFile`/`tlsPrivateKeyFile` when given; otherwise `<cert-dir>/kubelet.crt` and `kubelet.key`, made
//!   once as upstream does: a throw-away CA `<node>-ca@<unix time>` signing a serving certificate
//!   `<node>@<unix time>` for the node name, valid one year from an hour ago. (Keys are ECDSA P-256 where
//!   upstream makes RSA 2048.)
//! - `tlsMinVersion` and `tlsCipherSuites` in Go's spelling. rustls offers TLS 1.2 and 1.3 with AEAD suites
//!   only: older versions are raised to 1.2 and CBC/RC4/3DES suites are left out, each with a warning; an
//!   unknown name is an error naming the field.
//! - Client certificates are *requested*, never required, and not checked during the handshake: the x509
//!   authenticator checks them against `authentication.x509.clientCAFile` per connection
//!   ([`ClientCa::user_of`]), so a certificate from another CA gets 401 as with upstream rather than a failed
//!   handshake.
//!
//! Called once at start-up; errors stop start-up.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme, SupportedCipherSuite};
use thiserror::Error;
use tracing::{info, warn};

use crate::auth::{AuthnError, UserInfo};

/// Why the TLS set-up failed.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file holds no usable certificate or key.
    #[error("{what} {path}: {message}")]
    Pem {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A configuration field has a value rustls cannot honour.
    #[error("invalid configuration: {field}: {message}")]
    Field {
        /// The field, such as `tlsMinVersion`.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate or key.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The self-signed certificate could not be made.
    #[error("generate the self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// What the secure port's TLS is built from.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// `tlsCertFile` (may hold the chain).
    pub cert_file: PathBuf,
    /// `tlsPrivateKeyFile`.
    pub key_file: PathBuf,
    /// `authentication.x509.clientCAFile`, when set.
    pub client_ca_file: Option<PathBuf>,
    /// `tlsMinVersion`.
    pub min_version: String,
    /// `tlsCipherSuites`.
    pub cipher_suites: Vec<String>,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + use<> {
    let path = path.to_path_buf();
    move |source| TlsError::Io { what, path, source }
}

/// The serving certificate and key files to use: the configured ones, or `<cert_dir>/kubelet.crt` and
/// `kubelet.key`, generated for `node_name` when missing (upstream keeps existing files as they are).
pub fn serving_files(
    cert_file: &str,
    key_file: &str,
    cert_dir: &Path,
    node_name: &str,
    now: SystemTime,
) -> Result<(PathBuf, PathBuf), TlsError> {
    if !cert_file.is_empty() || !key_file.is_empty() {
        return Ok((cert_file.into(), key_file.into()));
    }
    let crt = cert_dir.join("kubelet.crt");
    let key = cert_dir.join("kubelet.key");
    if crt.exists() && key.exists() {
        return Ok((crt, key));
    }
    std::fs::create_dir_all(cert_dir).map_err(io("create the certificate directory", cert_dir))?;
    let (cert_pem, key_pem) = self_signed(node_name, &[], now)?;
    write_private(&key, key_pem.as_bytes()).map_err(io("write", &key))?;
    std::fs::write(&crt, cert_pem).map_err(io("write", &crt))?;
    info!(cert = %crt.display(), key = %key.display(), "generated a self-signed serving certificate");
    Ok((crt, key))
}

fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(path)?;
    f.write_all(data)
}

/// A serving certificate for `host` (and `alt_names`) signed by a fresh CA: (certificate chain PEM, key PEM).
pub fn self_signed(host: &str, alt_names: &[String], now: SystemTime) -> Result<(String, String), TlsError> {
    let now = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let from = rcgen::date_time_ymd(1970, 1, 1) + now - Duration::from_secs(3600);
    let to = from + Duration::from_secs(365 * 24 * 3600);
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = rcgen::DistinguishedName::new();
    ca.distinguished_name.push(DnType::CommonName, format!("{host}-ca@{}", now.as_secs()));
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    (ca.not_before, ca.not_after) = (from, to);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut names = vec![host.to_string()];
    names.extend(alt_names.iter().cloned());
    let mut p = CertificateParams::new(names)?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, format!("{host}@{}", now.as_secs()));
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyEncipherment, rcgen::KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    (p.not_before, p.not_after) = (from, to);
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &issuer)?;
    Ok((format!("{}{}", cert.pem(), ca_cert.pem()), key.serialize_pem()))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// `tlsMinVersion` → the protocol versions offered.
pub fn versions(min: &str) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    match min {
        "" | "VersionTLS12" => Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]),
        "VersionTLS10" | "VersionTLS11" => {
            warn!(tlsMinVersion = min, "TLS 1.0 and 1.1 are not offered; the minimum is TLS 1.2");
            Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12])
        }
        "VersionTLS13" => Ok(vec![&rustls::version::TLS13]),
        other => Err(TlsError::Field {
            field: "tlsMinVersion",
            message: format!(
                "unknown tls version {other:?}; allowed values: VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13"
            ),
        }),
    }
}

/// Go's names of suites that rustls does not implement (CBC, RC4, 3DES, static RSA key exchange).
const GO_ONLY_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// `tlsCipherSuites` → the suites offered (every TLS 1.3 suite is always offered, as Go does).
pub fn cipher_suites(names: &[String]) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    use rustls::crypto::ring::cipher_suite as cs;
    let all = rustls::crypto::ring::default_provider().cipher_suites;
    if names.is_empty() {
        return Ok(all);
    }
    let mut out: Vec<SupportedCipherSuite> =
        all.iter().filter(|s| matches!(s, SupportedCipherSuite::Tls13(_))).copied().collect();
    let mut tls12 = 0;
    for n in names {
        let suite = match n.as_str() {
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" => {
                cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            }
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" => {
                cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            }
            "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => continue,
            n if GO_ONLY_SUITES.contains(&n) => {
                warn!(suite = n, "tlsCipherSuites: suite not implemented by rustls; left out");
                continue;
            }
            other => {
                return Err(TlsError::Field {
                    field: "tlsCipherSuites",
                    message: format!("unsupported cipher suite {other:?}"),
                });
            }
        };
        if !out.contains(&suite) {
            out.push(suite);
            tls12 += 1;
        }
    }
    if tls12 == 0 {
        warn!("tlsCipherSuites names no TLS 1.2 suite rustls implements; only TLS 1.3 is offered");
    }
    Ok(out)
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let data = std::fs::read(path).map_err(io(what, path))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&data).filter_map(Result::ok).collect();
    if certs.is_empty() {
        return Err(TlsError::Pem { what, path: path.into(), message: "no PEM certificate found".into() });
    }
    Ok(certs)
}

/// Where the serving certificate comes from.
#[derive(Clone)]
pub enum Identity {
    /// `TlsSettings::cert_file` and `key_file`.
    Files,
    /// A certificate manager's pair.
    Certified(Arc<rustls::sign::CertifiedKey>),
    /// None yet (a requested certificate not issued): every handshake fails, as upstream's
    /// "no serving certificate available for the kubelet".
    Pending,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Identity::Files => "Files",
            Identity::Certified(_) => "Certified",
            Identity::Pending => "Pending",
        })
    }
}

/// Answers no handshake: there is no serving certificate yet.
#[derive(Debug)]
struct NoCertificate;

impl rustls::server::ResolvesServerCert for NoCertificate {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }
}

/// The certificate chain and key of `tlsCertFile`/`tlsPrivateKeyFile`.
pub fn read_pair(s: &TlsSettings) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = read_certs("tlsCertFile", &s.cert_file)?;
    let key_data = std::fs::read(&s.key_file).map_err(io("tlsPrivateKeyFile", &s.key_file))?;
    let key = PrivateKeyDer::from_pem_slice(&key_data).map_err(|e| TlsError::Pem {
        what: "tlsPrivateKeyFile",
        path: s.key_file.clone(),
        message: format!("no usable private key: {e}"),
    })?;
    Ok((chain, key))
}

/// The rustls configuration of the secure port and the client CA for the x509 authenticator, with the serving
/// certificate from the files.
pub fn server_config(s: &TlsSettings) -> Result<(Arc<ServerConfig>, Option<Arc<ClientCa>>), TlsError> {
    server_config_with(s, &Identity::Files)
}

/// The rustls configuration of the secure port with the given serving identity.
pub fn server_config_with(
    s: &TlsSettings,
    identity: &Identity,
) -> Result<(Arc<ServerConfig>, Option<Arc<ClientCa>>), TlsError> {
    let mut provider = (*provider()).clone();
    provider.cipher_suites = cipher_suites(&s.cipher_suites)?;
    if s.min_version == "VersionTLS13" && !s.cipher_suites.is_empty() {
        warn!("TLS 1.3 cipher suites are not configurable; tlsCipherSuites is ignored");
    }
    let provider = Arc::new(provider);
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions(&s.min_version)?)?;
    let ca = match &s.client_ca_file {
        Some(ca_file) => Some(Arc::new(ClientCa::from_file(ca_file, provider)?)),
        None => None,
    };
    let builder = match &ca {
        Some(ca) => builder.with_client_cert_verifier(ca.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut config = match identity {
        Identity::Files => {
            let (chain, key) = read_pair(s)?;
            builder.with_single_cert(chain, key)?
        }
        Identity::Certified(ck) => {
            builder.with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(ck.clone())))
        }
        Identity::Pending => builder.with_cert_resolver(Arc::new(NoCertificate)),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), ca))
}

/// The client CA bundle: asks for client certificates during the handshake and checks them afterwards.
pub struct ClientCa {
    inner: Arc<dyn ClientCertVerifier>,
    subjects: Vec<DistinguishedName>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa").field("subjects", &self.subjects.len()).finish()
    }
}

impl ClientCa {
    /// Reads `authentication.x509.clientCAFile`.
    pub fn from_file(path: &Path, provider: Arc<rustls::crypto::CryptoProvider>) -> Result<Self, TlsError> {
        let mut roots = RootCertStore::empty();
        for c in read_certs("authentication.x509.clientCAFile", path)? {
            roots.add(c).map_err(|e| TlsError::Pem {
                what: "authentication.x509.clientCAFile",
                path: path.into(),
                message: e.to_string(),
            })?;
        }
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::Field { field: "authentication.x509.clientCAFile", message: e.to_string() })?;
        let subjects = inner.root_hint_subjects().to_vec();
        Ok(ClientCa { inner, subjects })
    }

    /// The user of a client certificate chain (`x509.CommonNameUserConversion`: user = CN, groups = O), or
    /// why it is not accepted.
    pub fn user_of(&self, chain: &[CertificateDer<'static>]) -> Result<Option<UserInfo>, AuthnError> {
        let bad = AuthnError::Certificate;
        let Some((end, intermediates)) = chain.split_first() else { return Ok(None) };
        self.inner
            .verify_client_cert(end, intermediates, UnixTime::now())
            .map_err(|e| bad(format!("verifying certificate: {e}")))?;
        let (_, cert) = x509_parser::parse_x509_certificate(end).map_err(|e| bad(format!("parse certificate: {e}")))?;
        let subject = cert.subject();
        let name = subject.iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or("").to_string();
        if name.is_empty() {
            return Err(bad("common name of user not found in certificate".into()));
        }
        let groups = subject.iter_organization().filter_map(|a| a.as_str().ok()).map(String::from).collect();
        Ok(Some(UserInfo { name, uid: String::new(), groups, extra: Default::default() }))
    }
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.subjects
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Checked by the authenticator after the handshake ([`ClientCa::user_of`]), as Go's RequestClientCert.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    #[test]
    fn self_signed_pair_is_made_once_in_the_cert_dir_and_loads() {
        let d = tempfile::tempdir().unwrap();
        let (crt, key) = serving_files("", "", d.path(), "node-a", now()).unwrap();
        assert_eq!(
            (crt.file_name().unwrap(), key.file_name().unwrap()),
            ("kubelet.crt".as_ref(), "kubelet.key".as_ref())
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        let pem = std::fs::read_to_string(&crt).unwrap();
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 2, "the leaf, then its CA");
        let first = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1;
        let cert = first.parse_x509().unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap().as_str().unwrap().to_string();
        assert_eq!(cn, "node-a@1800000000");
        let issuer = cert.issuer().iter_common_name().next().unwrap().as_str().unwrap().to_string();
        assert_eq!(issuer, "node-a-ca@1800000000");
        assert_eq!(cert.validity().not_before.timestamp(), 1_800_000_000 - 3600);
        assert_eq!(cert.validity().not_after.timestamp(), 1_800_000_000 - 3600 + 365 * 24 * 3600);
        // Kept as they are at the next start.
        let again = serving_files("", "", d.path(), "node-b", now()).unwrap();
        assert_eq!(std::fs::read_to_string(&again.0).unwrap(), pem);
        let settings = TlsSettings { cert_file: crt, key_file: key, ..Default::default() };
        assert!(server_config(&settings).is_ok());
        // Configured files win.
        assert_eq!(serving_files("/x.crt", "/x.key", d.path(), "n", now()).unwrap().0, PathBuf::from("/x.crt"));
    }

    #[test]
    fn tls_names_follow_go_and_bad_ones_name_the_field() {
        assert_eq!(versions("VersionTLS13").unwrap().len(), 1);
        assert_eq!(versions("").unwrap().len(), 2);
        assert_eq!(versions("VersionTLS10").unwrap().len(), 2, "raised to 1.2");
        let e = versions("TLS1.2").unwrap_err().to_string();
        assert!(e.starts_with("invalid configuration: tlsMinVersion: unknown tls version \"TLS1.2\""), "{e}");
        let suites =
            cipher_suites(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(), "TLS_RSA_WITH_AES_128_CBC_SHA".into()])
                .unwrap();
        let tls12: Vec<_> = suites.iter().filter(|s| matches!(s, SupportedCipherSuite::Tls12(_))).collect();
        assert_eq!(tls12.len(), 1, "the CBC suite is left out");
        let e = cipher_suites(&["TLS_NOPE".into()]).unwrap_err().to_string();
        assert_eq!(e, "invalid configuration: tlsCipherSuites: unsupported cipher suite \"TLS_NOPE\"");
        let missing = TlsSettings {
            cert_file: "/nonexistent.crt".into(),
            key_file: "/nonexistent.key".into(),
            ..Default::default()
        };
        let e = server_config(&missing).unwrap_err().to_string();
        assert!(e.starts_with("tlsCertFile /nonexistent.crt: "), "{e}");
    }

    #[test]
    fn client_certificates_of_the_ca_name_the_user_and_others_are_refused() {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.distinguished_name.push(DnType::CommonName, "test-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let d = tempfile::tempdir().unwrap();
        let ca_file = d.path().join("ca.crt");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        let client = |iss: &Issuer<'_, KeyPair>| {
            let mut p = CertificateParams::default();
            p.distinguished_name.push(DnType::CommonName, "alice");
            p.distinguished_name.push(DnType::OrganizationName, "devs");
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            p.signed_by(&KeyPair::generate().unwrap(), iss).unwrap().der().clone()
        };
        let ca = ClientCa::from_file(&ca_file, provider()).unwrap();
        let u = ca.user_of(&[client(&issuer)]).unwrap().unwrap();
        assert_eq!((u.name.as_str(), u.groups.clone()), ("alice", vec!["devs".to_string()]));
        let other_key = KeyPair::generate().unwrap();
        let mut other = CertificateParams::default();
        other.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let other = Issuer::new(other, other_key);
        assert!(ca.user_of(&[client(&other)]).is_err());
        assert_eq!(ca.user_of(&[]).unwrap(), None);
    }
}
