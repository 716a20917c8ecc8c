//! HTTPS, client-certificate authentication and the CSR controllers: a rustls client with a client
//! certificate or a bearer token, the real kubectl (`/usr/bin/kubectl` or `$KUBECTL`; those parts are
//! skipped when it is not installed) with an admin kubeconfig, and a kubelet's TLS bootstrap: a CSR
//! created as a bootstrap-token user, approved with `kubectl certificate approve`, signed by the test
//! CA, and the signed certificate authenticating as the node.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use test_apiserver::{Options, TestApiServer, TlsOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "abcdef.0123456789abcdef";
const CSRS: (&str, &str) = ("certificates.k8s.io/v1", "certificatesigningrequests");

async fn start(auto_approve: bool) -> TestApiServer {
    TestApiServer::start(Options {
        tls: Some(TlsOptions::default()),
        anonymous: None,
        bootstrap_tokens: vec![TOKEN.into()],
        auto_approve_node_csrs: auto_approve,
        ..Default::default()
    })
    .await
    .expect("start")
}

enum Auth<'a> {
    None,
    Token(&'a str),
    Cert(&'a str, &'a str),
}

/// One HTTPS request with `Connection: close`: status code and JSON body.
async fn https(s: &TestApiServer, auth: Auth<'_>, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    try_https(s, auth, method, path, body).await.expect("HTTPS exchange")
}

/// [`https`], with TLS and I/O errors returned.
async fn try_https(
    s: &TestApiServer,
    auth: Auth<'_>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, Value)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(s.ca_pem().expect("CA").as_bytes()).expect("CA PEM")).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    let config = match auth {
        Auth::Cert(cert, key) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key"),
            )
            .expect("client auth"),
        _ => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.port())).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Auth::Token(t) = auth {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    tls.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut buf)).await.expect("in time");
    if buf.is_empty() {
        read?;
    }
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").expect("headers");
    let code = head.split(' ').nth(1).expect("status").parse().expect("code");
    Ok((code, serde_json::from_str(body).unwrap_or(Value::String(body.to_string()))))
}

fn last_user(s: &TestApiServer) -> String {
    s.requests().last().map(|r| r.user.clone()).unwrap_or_default()
}

/// A kubelet's key and CSR (PEM) for node `node`, as `certutil.MakeCSR` makes it.
fn node_csr(node: &str, org: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(rcgen::DnType::OrganizationName, org);
    p.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let csr = p.serialize_request(&key).expect("csr").pem().expect("pem");
    (key.serialize_pem(), csr)
}

fn csr_object(name: &str, csr_pem: &str) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": { "name": name },
        "spec": {
            "request": STANDARD.encode(csr_pem),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": 86400,
        },
    })
}

/// Waits for `status.certificate` and returns it as PEM.
async fn signed_cert(s: &TestApiServer, name: &str) -> String {
    let csr = s
        .wait_for(CSRS.0, CSRS.1, None, name, Duration::from_secs(10), |c| {
            c.and_then(|c| c.pointer("/status/certificate")).is_some()
        })
        .await
        .expect("signed")
        .expect("exists");
    let b64 = csr["status"]["certificate"].as_str().expect("certificate");
    String::from_utf8(STANDARD.decode(b64).expect("base64")).expect("PEM")
}

fn verify_against_ca(s: &TestApiServer, cert_pem: &str) -> (String, Vec<String>, i64) {
    let (_, ca) = x509_parser::pem::parse_x509_pem(s.ca_pem().expect("CA").as_bytes()).expect("CA PEM");
    let ca = ca.parse_x509().expect("CA");
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).expect("PEM");
    let cert = pem.parse_x509().expect("cert");
    cert.verify_signature(Some(ca.public_key())).expect("signed by the CA");
    assert_eq!(cert.issuer(), ca.subject());
    let cn = cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).unwrap_or("").to_string();
    let orgs = cert.subject().iter_organization().filter_map(|a| a.as_str().ok()).map(String::from).collect();
    let life = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    (cn, orgs, life)
}

fn kubectl() -> Option<PathBuf> {
    let bin = PathBuf::from(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()));
    if bin.exists() {
        Some(bin)
    } else {
        eprintln!("skipping the kubectl part: {} is not installed", bin.display());
        None
    }
}

async fn run_kubectl(bin: &Path, dir: &Path, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(args)
        .env("HOME", dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out).await.expect("in time").expect("kubectl runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test]
async fn https_client_certificates_and_tokens() {
    let s = start(false).await;
    assert!(s.url().starts_with("https://127.0.0.1:"));
    let (cert, key) = s.issue_client_cert("admin", &["system:masters"]).expect("issue");

    let (code, v) = https(&s, Auth::Cert(&cert, &key), "GET", "/api/v1/namespaces/default", None).await;
    assert_eq!((code, v["metadata"]["name"].as_str()), (200, Some("default")));
    assert_eq!(last_user(&s), "admin");

    let (code, _) = https(&s, Auth::Token(TOKEN), "GET", "/api/v1/namespaces", None).await;
    assert_eq!((code, last_user(&s)), (200, "system:bootstrap:abcdef".to_string()));

    let (code, v) = https(&s, Auth::None, "GET", "/api/v1/namespaces", None).await;
    assert_eq!((code, v["reason"].as_str()), (401, Some("Unauthorized")));
    let (code, _) = https(&s, Auth::Token("abcdef.wrongwrongwrongw"), "GET", "/api/v1/namespaces", None).await;
    assert_eq!(code, 401);

    // A certificate from another CA fails the handshake.
    let other = start(false).await;
    let (cert2, key2) = other.issue_client_cert("mallory", &["system:masters"]).expect("issue");
    let r = try_https(&s, Auth::Cert(&cert2, &key2), "GET", "/api/v1/namespaces", None).await;
    assert!(r.is_err(), "{r:?}");

    // The real kubectl with an admin kubeconfig (certificate-authority-data + client certificate).
    let Some(bin) = kubectl() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.kubeconfig");
    other.admin_kubeconfig(&admin).expect("admin kubeconfig");
    let (ok, out) = run_kubectl(&bin, dir.path(), &admin, &["get", "namespaces", "-o", "name"]).await;
    assert!(ok && out.contains("namespace/kube-system"), "{out}");
    assert!(other.requests().iter().any(|r| r.user == "admin" && r.user_agent.starts_with("kubectl")));
    let bad = dir.path().join("bad.kubeconfig");
    other.bootstrap_kubeconfig(&bad, "abcdef.wrongwrongwrongw").expect("kubeconfig");
    let (ok, out) = run_kubectl(&bin, dir.path(), &bad, &["get", "namespaces"]).await;
    assert!(!ok && out.contains("Unauthorized"), "{out}");
}

#[tokio::test]
async fn tls_bootstrap_with_kubectl_approval() {
    let s = start(false).await;
    let (node_key, csr_pem) = node_csr("n1", "system:nodes");
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let obj = csr_object("node-csr-n1", &csr_pem);
    let (code, created) = https(&s, Auth::Token(TOKEN), "POST", path, Some(&obj)).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["username"], "system:bootstrap:abcdef");
    assert_eq!(created["spec"]["groups"], json!(["system:bootstrappers", "system:authenticated"]));

    let Some(bin) = kubectl() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let admin = dir.path().join("admin.kubeconfig");
    s.admin_kubeconfig(&admin).expect("admin kubeconfig");
    let (ok, out) = run_kubectl(&bin, dir.path(), &admin, &["certificate", "approve", "node-csr-n1"]).await;
    assert!(ok, "{out}");
    let cert = signed_cert(&s, "node-csr-n1").await;
    let (cn, orgs, life) = verify_against_ca(&s, &cert);
    assert_eq!((cn.as_str(), orgs), ("system:node:n1", vec!["system:nodes".to_string()]));
    assert_eq!(life, 86400 + 300, "expirationSeconds, backdated 5 minutes");
    let (ok, out) = run_kubectl(&bin, dir.path(), &admin, &["get", "csr", "node-csr-n1"]).await;
    assert!(ok && out.contains("Approved,Issued"), "{out}");

    // The signed certificate authenticates as the node, with a Rust client and with kubectl.
    let (code, _) = https(&s, Auth::Cert(&cert, &node_key), "GET", "/api/v1/nodes", None).await;
    assert_eq!((code, last_user(&s)), (200, "system:node:n1".to_string()));
    let node = dir.path().join("kubelet.kubeconfig");
    s.kubeconfig_for(&node, &cert, &node_key).expect("kubeconfig");
    let (ok, out) = run_kubectl(&bin, dir.path(), &node, &["get", "nodes"]).await;
    assert!(ok, "{out}");
    assert!(s.requests().iter().any(|r| r.user == "system:node:n1" && r.user_agent.starts_with("kubectl")));

    // kubectl with the bootstrap kubeconfig is the bootstrap user.
    let boot = dir.path().join("bootstrap.kubeconfig");
    s.bootstrap_kubeconfig(&boot, TOKEN).expect("bootstrap kubeconfig");
    let (ok, out) = run_kubectl(&bin, dir.path(), &boot, &["get", "csr", "-o", "name"]).await;
    assert!(ok && out.contains("node-csr-n1"), "{out}");
    assert!(s.requests().iter().any(|r| r.user == "system:bootstrap:abcdef" && r.user_agent.starts_with("kubectl")));
}

#[tokio::test]
async fn auto_approval_renewal_and_signer_failures() {
    let s = start(true).await;
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let (key, csr) = node_csr("n2", "system:nodes");
    let (code, _) = https(&s, Auth::Token(TOKEN), "POST", path, Some(&csr_object("boot", &csr))).await;
    assert_eq!(code, 201);
    let cert = signed_cert(&s, "boot").await;
    let c = s.get(CSRS.0, CSRS.1, None, "boot").expect("csr");
    assert_eq!(c["status"]["conditions"][0]["reason"], "AutoApproved");
    assert_eq!(verify_against_ca(&s, &cert).0, "system:node:n2");

    // Renewal: the node asks for a new certificate for itself (selfnodeclient).
    let (_, csr2) = node_csr("n2", "system:nodes");
    let (code, v) = https(&s, Auth::Cert(&cert, &key), "POST", path, Some(&csr_object("renew", &csr2))).await;
    assert_eq!((code, v["spec"]["username"].as_str()), (201, Some("system:node:n2")));
    verify_against_ca(&s, &signed_cert(&s, "renew").await);

    // Another node's name is not auto-approved for a node; a wrong O fails signing once approved.
    let (_, other) = node_csr("n3", "system:nodes");
    https(&s, Auth::Cert(&cert, &key), "POST", path, Some(&csr_object("steal", &other))).await;
    let (_, bad) = node_csr("n4", "system:masters");
    s.create(CSRS.0, CSRS.1, None, csr_object("bad", &bad)).expect("create");
    let approve = json!({ "status": { "conditions": [{ "type": "Approved", "status": "True", "reason": "Test" }] } });
    let cur = s.get(CSRS.0, CSRS.1, None, "bad").expect("get");
    let mut upd = cur.clone();
    upd["status"] = approve["status"].clone();
    s.update(CSRS.0, CSRS.1, None, "bad", upd, true).expect("approve");
    let failed = s
        .wait_for(CSRS.0, CSRS.1, None, "bad", Duration::from_secs(10), |c| {
            c.and_then(|c| c.pointer("/status/conditions/1/type")).and_then(Value::as_str) == Some("Failed")
        })
        .await
        .expect("failed")
        .expect("exists");
    assert_eq!(failed["status"]["conditions"][1]["reason"], "SignerValidationFailure");
    assert!(failed["status"].get("certificate").is_none());
    let steal = s.get(CSRS.0, CSRS.1, None, "steal").expect("get");
    assert!(steal["status"].get("conditions").is_none(), "{steal}");
}
