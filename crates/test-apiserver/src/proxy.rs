//! The pod subresources the apiserver serves by calling the pod's kubelet (`pkg/registry/core/pod/rest`
//! `LogREST`, `ExecREST`, `AttachREST`, `PortForwardREST`, with `strategy.go` LogLocation, ExecLocation,
//! AttachLocation, PortForwardLocation): `pods/log` is a GET to `/containerLogs/...` streamed back;
//! `pods/exec`, `pods/attach` and `pods/portforward` are upgrade requests proxied to `/exec/...`, `/attach/...`
//! and `/portForward/...` and spliced after `101 Switching Protocols` (no WebSocket v5 translation: a v5
//! client is refused by the runtime and falls back to SPDY, as `kubectl` does).
//!
//! The kubelet is reached over HTTPS at the node's first `InternalIP`, `ExternalIP` or `Hostname` address (the
//! order kubeadm gives `--kubelet-preferred-address-types`), or at [`crate::Options::kubelet_address`], on its
//! `status.daemonEndpoints.kubeletEndpoint.Port`. With TLS the server presents a client certificate of its own CA
//! for `kube-apiserver-kubelet-client` in `system:masters` (kubeadm's `apiserver-kubelet-client.crt`); the
//! kubelet's serving certificate is not verified, as without `--kubelet-certificate-authority`.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONNECTION, HOST, HeaderValue, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::resources;
use crate::server::Shared;

type Body = BoxBody<Bytes, Infallible>;

/// `pods/<sub>` served by the kubelet.
pub fn is_proxied(sub: &str) -> bool {
    matches!(sub, "log" | "exec" | "attach" | "portforward")
}

/// The container a request names, or the pod's only one (`podutil`'s defaulting and its messages).
fn container(pod: &Value, name: &str, asked: Option<&str>) -> Result<String, ApiError> {
    let names = |key: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|c| c["name"].as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let (apps, inits, eph) = (names("containers"), names("initContainers"), names("ephemeralContainers"));
    match asked.filter(|a| !a.is_empty()) {
        Some(c) if apps.iter().chain(&inits).chain(&eph).any(|x| x == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None if apps.len() == 1 => Ok(apps[0].clone()),
        None => {
            let mut m =
                format!("a container name must be specified for pod {name}, choose one of: [{}]", apps.join(" "));
            if !inits.is_empty() {
                m.push_str(&format!(" or one of the init containers: [{}]", inits.join(" ")));
            }
            Err(ApiError::bad_request(m))
        }
    }
}

/// `host:port` of the kubelet running `pod`.
fn kubelet_of(shared: &Shared, pod: &Value, name: &str) -> Result<String, ApiError> {
    let node_name = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty());
    let node_name =
        node_name.ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
    let node = shared.store.get(resources::nodes(), "", node_name)?;
    let port = node.pointer("/status/daemonEndpoints/kubeletEndpoint/Port").and_then(Value::as_i64).unwrap_or(10250);
    if let Some(a) = &shared.opts.kubelet_address {
        return Ok(format!("{a}:{port}"));
    }
    let addrs = node.pointer("/status/addresses").and_then(Value::as_array).cloned().unwrap_or_default();
    let host = ["InternalIP", "ExternalIP", "Hostname"]
        .iter()
        .find_map(|t| addrs.iter().find(|a| a["type"] == *t).and_then(|a| a["address"].as_str().map(String::from)))
        .ok_or_else(|| ApiError::bad_request(format!("node {node_name} has no address")))?;
    Ok(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") })
}

fn truthy(q: &[(String, String)], key: &str) -> bool {
    q.iter().any(|(k, v)| k == key && matches!(v.as_str(), "true" | "1" | "True" | "TRUE"))
}

/// The kubelet path and query for a subresource request (`LogLocation`, `ExecLocation`, ...).
fn location(sub: &str, ns: &str, name: &str, c: Option<&str>, q: &[(String, String)]) -> String {
    let mut params: Vec<(String, String)> = vec![];
    let get = |k: &str| q.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
    let base = match sub {
        "log" => {
            for (k, on) in [("follow", "follow"), ("previous", "previous"), ("timestamps", "timestamps")] {
                if truthy(q, k) {
                    params.push((on.into(), "true".into()));
                }
            }
            for k in ["sinceSeconds", "sinceTime", "tailLines", "limitBytes", "stream"] {
                if let Some(v) = get(k) {
                    params.push((k.into(), v));
                }
            }
            format!("/containerLogs/{ns}/{name}/{}", c.unwrap_or(""))
        }
        "exec" | "attach" => {
            for (k, kubelet) in [("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty")] {
                if truthy(q, k) {
                    params.push((kubelet.into(), "1".into()));
                }
            }
            if sub == "exec" {
                params.extend(q.iter().filter(|(k, _)| k == "command").cloned());
            }
            format!("/{sub}/{ns}/{name}/{}", c.unwrap_or(""))
        }
        _ => {
            params.extend(q.iter().filter(|(k, _)| k == "ports").map(|(_, v)| ("port".to_string(), v.clone())));
            format!("/portForward/{ns}/{name}")
        }
    };
    if params.is_empty() {
        return base;
    }
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", crate::util::percent_encode(v))).collect();
    format!("{base}?{}", query.join("&"))
}

#[derive(Debug)]
struct AnyServer;

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let p = rustls::crypto::ring::default_provider();
        rustls::crypto::verify_tls12_signature(m, c, d, &p.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let p = rustls::crypto::ring::default_provider();
        rustls::crypto::verify_tls13_signature(m, c, d, &p.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider().signature_verification_algorithms.supported_schemes()
    }
}

/// A TLS client configuration that does not verify the server's certificate (as kube-apiserver towards kubelets
/// without `--kubelet-certificate-authority`), presenting `identity` (certificate and key PEM) when given. Tests and
/// the benchmark call kubelets with it too.
pub fn kubelet_client_config(identity: Option<(String, String)>) -> Arc<rustls::ClientConfig> {
    let builder = || {
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer))
    };
    let identity = identity.and_then(|(c, k)| {
        let certs: Vec<_> = CertificateDer::pem_slice_iter(c.as_bytes()).filter_map(Result::ok).collect();
        Some((certs, PrivateKeyDer::from_pem_slice(k.as_bytes()).ok()?))
    });
    let mut cfg = match identity {
        Some((certs, key)) => builder().with_client_auth_cert(certs, key).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "unusable kubelet client certificate; calling kubelets without one");
            builder().with_no_client_auth()
        }),
        None => builder().with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Empty<Bytes>>;

async fn connect(shared: &Shared, addr: &str) -> Result<Sender, ApiError> {
    let unavailable = |e: String| ApiError::service_unavailable(format!("error dialing backend: {e}"));
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| unavailable(format!("dial tcp {addr}: {e}")))?;
    let host = addr.rsplit_once(':').map(|(h, _)| h.trim_matches(['[', ']'])).unwrap_or(addr).to_string();
    let name = ServerName::try_from(host).map_err(|e| unavailable(e.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(shared.kubelet_client.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| unavailable(format!("remote error: {e}")))?;
    let (tx, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.map_err(|e| unavailable(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(tx)
}

/// An error answer from the kubelet as the apiserver reports it (`genericResponseChecker`).
fn backend_error(code: u16, body: &[u8]) -> ApiError {
    let text = String::from_utf8_lossy(&body[..body.len().min(50_000)]).into_owned();
    match code {
        400 => ApiError::bad_request(text),
        500 => ApiError::internal(text),
        _ => ApiError::generic(code, text),
    }
}

/// Serves `pods/<sub>` of `ns/name`.
pub async fn handle(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
    ns: &str,
    name: &str,
    sub: &str,
) -> Result<Response<Body>, ApiError> {
    let q = crate::util::parse_query_pairs(req.uri().query());
    let pod = shared.store.get(resources::pods(), ns, name)?;
    let c = match sub {
        "portforward" => None,
        _ => Some(container(&pod, name, q.iter().find(|(k, _)| k == "container").map(|(_, v)| v.as_str()))?),
    };
    let addr = kubelet_of(&shared, &pod, name)?;
    let path = location(sub, ns, name, c.as_deref(), &q);
    let mut sender = connect(&shared, &addr).await?;
    let mut out =
        Request::builder().method(if sub == "log" { hyper::Method::GET } else { req.method().clone() }).uri(&path);
    if sub != "log" {
        let upgrade = req
            .headers()
            .get(CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("upgrade"));
        if !upgrade {
            return Err(ApiError::bad_request("Upgrade request required"));
        }
        for (k, v) in req.headers() {
            if k != AUTHORIZATION && k != HOST {
                out = out.header(k, v);
            }
        }
    }
    let out = out.header(HOST, HeaderValue::from_str(&addr).map_err(|e| ApiError::bad_request(e.to_string()))?);
    let out = out.body(http_body_util::Empty::new()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let client_upgrade = (sub != "log").then(|| hyper::upgrade::on(&mut req));
    let mut resp = sender.send_request(out).await.map_err(|e| ApiError::service_unavailable(e.to_string()))?;
    let code = resp.status().as_u16();
    if sub == "log" {
        if !(200..300).contains(&code) {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            return Err(backend_error(code, &body));
        }
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        let mut body = resp.into_body();
        tokio::spawn(async move {
            while let Some(Ok(f)) = body.frame().await {
                if let Ok(d) = f.into_data()
                    && tx.send(d).await.is_err()
                {
                    return;
                }
            }
        });
        let mut r = Response::new(BoxBody::new(crate::watch::ChannelBody::new(rx)));
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        return Ok(r);
    }
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let mut r = Response::new(BoxBody::new(http_body_util::Full::new(body)));
        *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
        *r.headers_mut() = headers;
        return Ok(r);
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    let mut r = Response::new(BoxBody::new(http_body_util::Empty::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *r.headers_mut() = resp.headers().clone();
    if !r.headers().contains_key(UPGRADE) {
        return Err(ApiError::internal("the kubelet answered 101 without Upgrade"));
    }
    let client_upgrade = client_upgrade.expect("set for upgrade requests");
    tokio::spawn(async move {
        if let (Ok(a), Ok(b)) = (client_upgrade.await, backend_upgrade.await) {
            let (mut a, mut b) = (TokioIo::new(a), TokioIo::new(b));
            let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
        }
    });
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Vec<(String, String)> {
        crate::util::parse_query_pairs(Some(s))
    }

    #[test]
    fn locations_are_the_kubelets_paths_and_parameters() {
        assert_eq!(
            location(
                "log",
                "ns",
                "p",
                Some("c"),
                &q("container=c&follow=true&tailLines=5&sinceTime=2026-01-02T03:04:05Z")
            ),
            "/containerLogs/ns/p/c?follow=true&sinceTime=2026-01-02T03%3A04%3A05Z&tailLines=5"
        );
        assert_eq!(
            location(
                "exec",
                "ns",
                "p",
                Some("c"),
                &q("command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&tty=false")
            ),
            "/exec/ns/p/c?input=1&output=1&command=sh&command=-c&command=echo%20hi"
        );
        assert_eq!(location("portforward", "ns", "p", None, &q("ports=8080")), "/portForward/ns/p?port=8080");
        assert_eq!(location("attach", "ns", "p", Some("c"), &q("")), "/attach/ns/p/c");
    }

    #[test]
    fn the_container_defaults_to_the_only_one() {
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(container(&one, "p", None).unwrap(), "a");
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(
            container(&two, "p", None).unwrap_err().message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [i]"
        );
        assert_eq!(container(&two, "p", Some("i")).unwrap(), "i");
        assert_eq!(container(&two, "p", Some("x")).unwrap_err().message, "container x is not valid for pod p");
    }
}
