//! The cluster's PKI, as `kubeadm init` lays it out under `/etc/kubernetes/pki`: one CA (`ca.crt`/`ca.key`) that
//! signs the apiserver's serving certificate, the client certificates of the admin, the controller-manager, the
//! scheduler and the
//! apiserver towards kubelets, and, through the controller-manager's `csrsigning` controller, the kubelets' own
//! certificates; and the service-account signing key (`sa.key`/`sa.pub`).
//!
//! Keys are ECDSA P-256 (rcgen with ring cannot make RSA keys; kube-apiserver accepts ECDSA for serving, client
//! and service-account keys alike). Made once per state directory and kept (until a month before it expires), so a
//! reused control plane keeps trusting the kubeconfigs written before.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType, SerialNumber,
};

use crate::Error;

/// The files of the PKI.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The folder (`<state>/pki`).
    pub dir: PathBuf,
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct CertPair {
    /// The certificate.
    pub cert: String,
    /// The private key (PKCS#8).
    pub key: String,
}

fn wall_secs() -> u64 {
    chrono::Utc::now().timestamp().max(0) as u64
}

fn validity(p: &mut CertificateParams, lifetime: Duration) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    let now = wall_secs();
    // An hour back, so clocks a little behind still accept it.
    p.not_before = epoch + Duration::from_secs(now.saturating_sub(3600));
    p.not_after = epoch + Duration::from_secs(now) + lifetime;
}

fn serial() -> SerialNumber {
    static N: AtomicU64 = AtomicU64::new(1);
    let mut b = Vec::with_capacity(16);
    b.extend_from_slice(&(rand::random::<u64>() & 0x7fff_ffff_ffff_ffff).to_be_bytes());
    b.extend_from_slice(&N.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    SerialNumber::from_slice(&b)
}

const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

impl Pki {
    /// The PKI in `dir`, made when it is missing or its certificates expire within 30 days (`valid-until` holds
    /// the end of the shortest lifetime, in seconds since the epoch).
    pub fn ensure(dir: &Path) -> Result<Pki, Error> {
        let pki = Pki { dir: dir.to_path_buf() };
        let valid_until: u64 =
            std::fs::read_to_string(pki.path("valid-until")).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let complete = pki.path("sa.key").exists() && pki.path("scheduler.crt").exists();
        if complete && valid_until > wall_secs() + 30 * 24 * 3600 {
            return Ok(pki);
        }
        // Written last below: a PKI without it is incomplete.
        let _ = std::fs::remove_file(pki.path("sa.key"));
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::CrlSign];
        ca.serial_number = Some(serial());
        validity(&mut ca, 10 * YEAR);
        let ca_cert = ca.self_signed(&ca_key)?;
        pki.write("ca.crt", &ca_cert.pem())?;
        pki.write("ca.key", &ca_key.serialize_pem())?;

        let sans =
            ["127.0.0.1", "10.96.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"];
        let serving = pki.issue("kube-apiserver", &[], &sans, ExtendedKeyUsagePurpose::ServerAuth, YEAR)?;
        pki.write_pair("apiserver", &serving)?;
        let admin =
            pki.issue("kubernetes-admin", &["system:masters"], &[], ExtendedKeyUsagePurpose::ClientAuth, YEAR)?;
        pki.write_pair("admin", &admin)?;
        let kcm = pki.issue("system:kube-controller-manager", &[], &[], ExtendedKeyUsagePurpose::ClientAuth, YEAR)?;
        pki.write_pair("controller-manager", &kcm)?;
        let scheduler = pki.issue("system:kube-scheduler", &[], &[], ExtendedKeyUsagePurpose::ClientAuth, YEAR)?;
        pki.write_pair("scheduler", &scheduler)?;
        let kubelet_client = pki.issue(
            "kube-apiserver-kubelet-client",
            &["system:masters"],
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
            YEAR,
        )?;
        pki.write_pair("apiserver-kubelet-client", &kubelet_client)?;
        let sa = KeyPair::generate()?;
        pki.write("sa.pub", &sa.public_key_pem())?;
        pki.write("sa.key", &sa.serialize_pem())?;
        // Written last: its presence says the PKI is complete, and until when.
        pki.write("valid-until", &(wall_secs() + YEAR.as_secs()).to_string())?;
        Ok(pki)
    }

    /// A file of the PKI.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> Result<String, Error> {
        read(&self.path("ca.crt"))
    }

    fn write(&self, name: &str, text: &str) -> Result<(), Error> {
        let p = self.path(name);
        std::fs::write(&p, text).map_err(|e| Error::io(&p, e))
    }

    fn write_pair(&self, base: &str, pair: &CertPair) -> Result<(), Error> {
        self.write(&format!("{base}.crt"), &pair.cert)?;
        self.write(&format!("{base}.key"), &pair.key)
    }

    /// A certificate signed by the cluster CA: subject `CN=cn, O=orgs...`, the given SANs (IP addresses or DNS
    /// names) and extended key usage.
    pub fn issue(
        &self,
        cn: &str,
        orgs: &[&str],
        sans: &[&str],
        usage: ExtendedKeyUsagePurpose,
        lifetime: Duration,
    ) -> Result<CertPair, Error> {
        let ca_key = KeyPair::from_pem(&read(&self.path("ca.key"))?)?;
        let issuer = Issuer::from_ca_cert_pem(&read(&self.path("ca.crt"))?, ca_key)?;
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.distinguished_name.push(DnType::CommonName, cn);
        // rcgen keeps one value per attribute type: certificates with several O values cannot be made here.
        if let Some(o) = orgs.first() {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        for s in sans {
            p.subject_alt_names.push(match s.parse::<std::net::IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*s).try_into()?),
            });
        }
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = vec![usage];
        p.serial_number = Some(serial());
        validity(&mut p, lifetime);
        let cert = p.signed_by(&key, &issuer)?;
        Ok(CertPair { cert: cert.pem(), key: key.serialize_pem() })
    }

    /// A client certificate of the cluster (user `cn` in group `org`), valid a year.
    pub fn client(&self, cn: &str, org: Option<&str>) -> Result<CertPair, Error> {
        let orgs: Vec<&str> = org.into_iter().collect();
        self.issue(cn, &orgs, &[], ExtendedKeyUsagePurpose::ClientAuth, YEAR)
    }

    /// A serving certificate of the cluster CA for `sans` (IP addresses or DNS names), valid a day: for the servers
    /// a test starts (a registry behind TLS).
    pub fn serving(&self, cn: &str, sans: &[&str]) -> Result<CertPair, Error> {
        self.issue(cn, &[], sans, ExtendedKeyUsagePurpose::ServerAuth, Duration::from_secs(24 * 3600))
    }
}

/// Reads a text file, naming it on error.
pub(crate) fn read(p: &Path) -> Result<String, Error> {
    std::fs::read_to_string(p).map_err(|e| Error::io(p, e))
}
