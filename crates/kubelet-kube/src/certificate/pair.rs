//! A certificate and its key as the certificate managers hold them: the PEM texts, the parsed facts the rotation
//! deadline and the template check need, and the rustls forms both TLS sides use.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Why a certificate/key pair is unusable.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// No certificate in the PEM text.
    #[error("no PEM certificate found")]
    NoCertificate,
    /// No private key in the PEM text.
    #[error("no usable private key: {0}")]
    NoKey(String),
    /// The certificate could not be parsed.
    #[error("parse the certificate: {0}")]
    Parse(String),
    /// rustls cannot sign with the key.
    #[error("the private key cannot be used: {0}")]
    Key(String),
}

/// A parsed certificate chain and private key.
#[derive(Clone)]
pub struct Pair {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Vec<u8>,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// Subject common name.
    pub common_name: String,
    /// Subject organizations.
    pub organizations: Vec<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
    /// Serial number, hex (for logs and tests).
    pub serial: String,
    /// The chain and signing key for rustls.
    pub certified: Arc<CertifiedKey>,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("commonName", &self.common_name)
            .field("serial", &self.serial)
            .field("notAfter", &self.not_after)
            .finish()
    }
}

fn to_system_time(t: x509_parser::time::ASN1Time) -> SystemTime {
    let secs = t.timestamp();
    if secs >= 0 { UNIX_EPOCH + Duration::from_secs(secs as u64) } else { UNIX_EPOCH }
}

impl Pair {
    /// Parses a certificate chain and a key (both may be in one text).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Pair, PairError> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem).filter_map(Result::ok).collect();
        let leaf = chain.first().ok_or(PairError::NoCertificate)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| PairError::NoKey(e.to_string()))?;
        let signing =
            rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| PairError::Key(e.to_string()))?;
        let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| PairError::Parse(e.to_string()))?;
        let subject = cert.subject();
        let common_name =
            subject.iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or_default().to_string();
        let organizations = subject.iter_organization().filter_map(|a| a.as_str().ok()).map(String::from).collect();
        let (mut dns_names, mut ips) = (vec![], vec![]);
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for n in &san.value.general_names {
                match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                    x509_parser::extensions::GeneralName::IPAddress(b) => match b.len() {
                        4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default())),
                        16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default())),
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        let validity = cert.validity();
        Ok(Pair {
            not_before: to_system_time(validity.not_before),
            not_after: to_system_time(validity.not_after),
            common_name,
            organizations,
            dns_names,
            ips,
            serial: cert.raw_serial_as_string(),
            certified: Arc::new(CertifiedKey::new(chain, signing)),
            cert_pem: cert_pem.to_vec(),
            key_pem: key_pem.to_vec(),
        })
    }

    /// Whether the certificate is still valid at `now`.
    pub fn valid_at(&self, now: SystemTime) -> bool {
        now < self.not_after
    }

    /// Seconds until expiry (negative once expired), truncated as upstream's TTL gauges.
    pub fn ttl_seconds(&self, now: SystemTime) -> f64 {
        match self.not_after.duration_since(now) {
            Ok(d) => d.as_secs() as f64,
            Err(e) => -(e.duration().as_secs() as f64),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A certificate for `cn` valid from `from` for `lifetime`, signed by a throwaway CA: (cert PEM, key PEM).
    pub(crate) fn issue(cn: &str, from: SystemTime, lifetime: Duration, dns: &[&str]) -> (String, String) {
        let since = from.duration_since(UNIX_EPOCH).unwrap();
        let start = rcgen::date_time_ymd(1970, 1, 1) + since;
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "test-ca");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut p = rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
        p.not_before = start;
        p.not_after = start + lifetime;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_pair_reads_subject_names_and_validity() {
        let from = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let (c, k) = issue("system:node:n1", from, Duration::from_secs(3600), &["n1", "10.0.0.7"]);
        let p = Pair::from_pem(c.as_bytes(), k.as_bytes()).unwrap();
        assert_eq!(p.common_name, "system:node:n1");
        assert_eq!(p.organizations, ["system:nodes"]);
        assert_eq!(p.dns_names, ["n1"]);
        assert_eq!(p.ips, ["10.0.0.7".parse::<IpAddr>().unwrap()]);
        assert_eq!(p.not_before, from);
        assert_eq!(p.not_after, from + Duration::from_secs(3600));
        assert_eq!(p.ttl_seconds(from + Duration::from_millis(1500)), 3598.0);
        assert_eq!(p.ttl_seconds(from + Duration::from_secs(3610)), -10.0);
        let both = format!("{c}{k}");
        assert!(Pair::from_pem(both.as_bytes(), both.as_bytes()).is_ok(), "one file with both, as the store writes");
        assert!(matches!(Pair::from_pem(k.as_bytes(), k.as_bytes()), Err(PairError::NoCertificate)));
        assert!(matches!(Pair::from_pem(c.as_bytes(), c.as_bytes()), Err(PairError::NoKey(_))));
    }
}
