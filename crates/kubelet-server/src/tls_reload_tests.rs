use std::time::SystemTime;

use rustls::pki_types::{CertificateDer, ServerName};

use super::*;
use crate::tls::self_signed;

/// The leaf a handshake with the current setup serves, or the handshake's error.
async fn served(rx: &watch::Receiver<TlsSetup>) -> Result<Vec<u8>, String> {
    let setup = rx.borrow().clone();
    let (a, b) = tokio::io::duplex(64 * 1024);
    let acceptor = tokio_rustls::TlsAcceptor::from(setup.config);
    let server = tokio::spawn(async move { acceptor.accept(b).await.map(|_| ()) });
    // A client that accepts any server certificate: the tests look at which one is served.
    let conn = tokio_rustls::TlsConnector::from(test_apiserver::proxy::kubelet_client_config(None));
    let r = conn.connect(ServerName::try_from("node").unwrap(), a).await.map_err(|e| e.to_string());
    let _ = server.await;
    let tls = r?;
    Ok(tls.get_ref().1.peer_certificates().unwrap()[0].to_vec())
}

fn write_pair(dir: &std::path::Path, host: &str) -> (PathBuf, PathBuf, Vec<u8>) {
    let (c, k) = self_signed(host, &[], SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)).unwrap();
    let (cf, kf) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    // Replaced as operators and cert-manager do: a new file renamed over the old.
    for (path, text) in [(&kf, &k), (&cf, &c)] {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    let leaf = CertificateDer::pem_slice_iter(c.as_bytes()).next().unwrap().unwrap().to_vec();
    (cf, kf, leaf)
}

use rustls::pki_types::pem::PemObject;

async fn next(rx: &mut watch::Receiver<TlsSetup>) {
    tokio::time::timeout(Duration::from_secs(10), rx.changed()).await.expect("a new TLS setup").unwrap();
}

#[tokio::test]
async fn replaced_certificate_files_are_served_to_new_connections_and_a_broken_one_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file, first) = write_pair(dir.path(), "one");
    let settings = TlsSettings { cert_file: cert_file.clone(), key_file, ..Default::default() };
    let (r, mut rx) = TlsReloader::new(settings, Serving::Files).unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(r.run(cancel.clone()));
    assert_eq!(served(&rx).await.unwrap(), first);

    let (_, _, second) = write_pair(dir.path(), "two");
    next(&mut rx).await;
    assert_eq!(served(&rx).await.unwrap(), second, "the replaced file is served without a restart");

    // A certificate that does not match the key is refused; the working one stays.
    let (other, _) = self_signed("three", &[], SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)).unwrap();
    std::fs::write(&cert_file, other).unwrap();
    tokio::time::sleep(FILE_CHECK_PERIOD * 3).await;
    assert!(!rx.has_changed().unwrap(), "a mismatched pair is not published");
    assert_eq!(served(&rx).await.unwrap(), second);
    let (_, _, fourth) = write_pair(dir.path(), "four");
    next(&mut rx).await;
    assert_eq!(served(&rx).await.unwrap(), fourth);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_managed_certificate_is_refused_until_issued_then_served_as_it_rotates() {
    let (tx, certs) = watch::channel(None);
    let settings = TlsSettings::default();
    let (r, mut rx) = TlsReloader::new(settings, Serving::Managed(certs)).unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(r.run(cancel.clone()));
    let e = served(&rx).await.unwrap_err();
    assert!(!e.is_empty(), "no certificate: the handshake fails");

    for host in ["n1", "n1-rotated"] {
        let (c, k) = self_signed(host, &[], SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)).unwrap();
        let chain: Vec<_> = CertificateDer::pem_slice_iter(c.as_bytes()).map(Result::unwrap).collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap();
        let signer = rustls::crypto::ring::sign::any_supported_type(&key).unwrap();
        let leaf = chain[0].to_vec();
        tx.send_replace(Some(Arc::new(CertifiedKey::new(chain, signer))));
        next(&mut rx).await;
        assert_eq!(served(&rx).await.unwrap(), leaf);
    }
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn a_replaced_client_ca_file_authenticates_certificates_of_the_new_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file, _) = write_pair(dir.path(), "node");
    let ca_file = dir.path().join("ca.crt");
    let issue = |cn: &str| {
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, format!("{cn}-ca"));
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let user = p.signed_by(&rcgen::KeyPair::generate().unwrap(), &issuer).unwrap();
        (ca_cert.pem(), CertificateDer::from(user.der().to_vec()))
    };
    let (old_ca, old_user) = issue("old-user");
    let (new_ca, new_user) = issue("new-user");
    std::fs::write(&ca_file, &old_ca).unwrap();
    let settings = TlsSettings { cert_file, key_file, client_ca_file: Some(ca_file.clone()), ..Default::default() };
    let (r, mut rx) = TlsReloader::new(settings, Serving::Files).unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(r.run(cancel.clone()));
    let user = |rx: &watch::Receiver<TlsSetup>, c: &CertificateDer<'static>| {
        rx.borrow().client_ca.as_ref().unwrap().user_of(std::slice::from_ref(c)).map(|u| u.map(|u| u.name))
    };
    assert_eq!(user(&rx, &old_user).unwrap().as_deref(), Some("old-user"));
    assert!(user(&rx, &new_user).is_err());
    std::fs::write(&ca_file, &new_ca).unwrap();
    next(&mut rx).await;
    assert_eq!(user(&rx, &new_user).unwrap().as_deref(), Some("new-user"), "the new CA is used without a restart");
    assert!(user(&rx, &old_user).is_err(), "the old CA is no longer trusted");
    cancel.cancel();
    task.await.unwrap();
}
