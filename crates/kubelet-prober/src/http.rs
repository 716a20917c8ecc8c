//! The HTTP GET of probes and lifecycle hooks (`pkg/probe/http/http.go`, `request.go`): one request per
//! connection (keep-alives off, as upstream), HTTPS without certificate verification, redirects followed only to the
//! same host and at most 10 times (`RedirectChecker(false)`), at most 10 KiB of the body read.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// At most this much of a response body is read (`maxRespBodyLength`).
pub const MAX_BODY: usize = 10 * 1024;
/// Redirects followed before giving up.
const MAX_REDIRECTS: usize = 10;

/// Where an HTTP GET goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// `https` or not.
    pub https: bool,
    /// Host (an IP or a name).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path with query, starting with `/`.
    pub path: String,
    /// Extra request headers, in order (a `Host` header replaces the host of the request).
    pub headers: Vec<(String, String)>,
}

impl HttpTarget {
    /// The URL as Go prints it (`http://10.88.0.5:8080/healthz`).
    pub fn url(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("{}://{host}:{}{}", if self.https { "https" } else { "http" }, self.port, self.path)
    }
}

/// A response: status code, at most [`MAX_BODY`] bytes of the body, and the `Location` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// The body, cut at [`MAX_BODY`].
    pub body: String,
    /// Where a redirect points.
    pub location: Option<String>,
}

/// Joins a probe path as upstream: a missing leading `/` is added.
pub fn normalize_path(path: &str) -> String {
    if path.starts_with('/') { path.to_string() } else { format!("/{path}") }
}

/// GETs `target` following same-host redirects, all within `timeout`. The error text is Go's
/// (`Get "http://...": dial tcp ...: connect: connection refused`).
pub async fn get(target: &HttpTarget, user_agent: &str, timeout: Duration) -> Result<HttpResponse, String> {
    let url = target.url();
    match tokio::time::timeout(timeout, get_following(target.clone(), user_agent)).await {
        Ok(r) => r,
        Err(_) => {
            Err(format!("Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"))
        }
    }
}

async fn get_following(mut target: HttpTarget, user_agent: &str) -> Result<HttpResponse, String> {
    let first_host = target.host.clone();
    for _ in 0..=MAX_REDIRECTS {
        let resp = request(&target, user_agent).await.map_err(|e| format!("Get {:?}: {e}", target.url()))?;
        let Some(loc) = resp.location.as_deref().filter(|_| (300..400).contains(&resp.status)) else {
            return Ok(resp);
        };
        let Some(next) = resolve(&target, loc) else { return Ok(resp) };
        // A redirect to another host is not followed: the 3xx is the answer.
        if next.host != first_host {
            return Ok(resp);
        }
        target = next;
    }
    Err(format!("Get {:?}: stopped after {MAX_REDIRECTS} redirects", target.url()))
}

/// Where a `Location` points, relative to `base`; None if it cannot be understood.
pub fn resolve(base: &HttpTarget, location: &str) -> Option<HttpTarget> {
    let mut next = base.clone();
    let rest = if let Some(r) = location.strip_prefix("http://") {
        next.https = false;
        Some(r)
    } else if let Some(r) = location.strip_prefix("https://") {
        next.https = true;
        Some(r)
    } else {
        None
    };
    match rest {
        Some(r) => {
            let (authority, path) = match r.find('/') {
                Some(i) => (&r[..i], &r[i..]),
                None => (r, "/"),
            };
            let default_port = if next.https { 443 } else { 80 };
            let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
                let (h, p) = v6.split_once(']')?;
                (h.to_string(), p.strip_prefix(':').map(str::parse).transpose().ok()?.unwrap_or(default_port))
            } else {
                match authority.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), p.parse().ok()?),
                    None => (authority.to_string(), default_port),
                }
            };
            next.host = host;
            next.port = port;
            next.path = path.to_string();
        }
        None if location.starts_with('/') => next.path = location.to_string(),
        None => {
            let dir = base.path.split('?').next().unwrap_or("/");
            let dir = &dir[..dir.rfind('/').map(|i| i + 1).unwrap_or(0)];
            next.path = format!("{dir}{location}");
        }
    }
    Some(next)
}

async fn request(target: &HttpTarget, user_agent: &str) -> Result<HttpResponse, String> {
    let addr = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let tcp = TcpStream::connect(addr.as_str()).await.map_err(|e| format!("dial tcp {addr}: {}", dial_error(&e)))?;
    let _ = tcp.set_nodelay(true);
    let mut req = hyper::Request::get(target.path.as_str());
    let mut host = addr.clone();
    let mut has_accept = false;
    let mut has_agent = false;
    for (k, v) in &target.headers {
        if k.eq_ignore_ascii_case("host") {
            host = v.clone();
            continue;
        }
        has_accept |= k.eq_ignore_ascii_case("accept");
        has_agent |= k.eq_ignore_ascii_case("user-agent");
        req = req.header(k.as_str(), v.as_str());
    }
    if !has_agent {
        req = req.header(hyper::header::USER_AGENT, user_agent);
    }
    if !has_accept {
        req = req.header(hyper::header::ACCEPT, "*/*");
    }
    let req = req
        .header(hyper::header::HOST, host)
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("invalid request: {e}"))?;
    if target.https {
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .map_err(|e| format!("invalid host {:?}: {e}", target.host))?;
        let tls = tokio_rustls::TlsConnector::from(insecure_tls())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        send(TokioIo::new(tls), req).await
    } else {
        send(TokioIo::new(tcp), req).await
    }
}

async fn send<I>(io: I, req: hyper::Request<Empty<Bytes>>) -> Result<HttpResponse, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = async {
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let location = resp.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_string);
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        while buf.len() < MAX_BODY {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        buf.extend_from_slice(&d);
                    }
                }
                Some(Err(e)) => return Err(e.to_string()),
                None => break,
            }
        }
        buf.truncate(MAX_BODY);
        Ok(HttpResponse { status, body: String::from_utf8_lossy(&buf).into_owned(), location })
    }
    .await;
    driver.abort();
    result
}

/// Go's wording of a dial error (`connect: connection refused`).
fn dial_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        std::io::ErrorKind::HostUnreachable => "connect: no route to host".into(),
        std::io::ErrorKind::NetworkUnreachable => "connect: network is unreachable".into(),
        _ => e.to_string(),
    }
}

/// TLS without verification (`InsecureSkipVerify: true`), as upstream probes HTTPS endpoints.
fn insecure_tls() -> Arc<rustls::ClientConfig> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let cfg = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
                .with_no_client_auth();
            Arc::new(cfg)
        })
        .clone()
}

/// Accepts any server certificate, as Go's `InsecureSkipVerify` (HTTPS probes; `rkubelet explain` towards a
/// kubelet's usually self-signed serving certificate); handshake signatures are still checked with the provider's
/// algorithms.
#[derive(Debug)]
pub struct NoVerify(pub Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(path: &str) -> HttpTarget {
        HttpTarget { https: false, host: "10.0.0.1".into(), port: 8080, path: path.into(), headers: vec![] }
    }

    #[test]
    fn redirect_locations_resolve_as_a_browser_would() {
        assert_eq!(resolve(&t("/a/b"), "/c").unwrap().path, "/c");
        assert_eq!(resolve(&t("/a/b?x=1"), "c").unwrap().path, "/a/c");
        let abs = resolve(&t("/"), "https://other:8443/x").unwrap();
        assert_eq!((abs.https, abs.host.as_str(), abs.port, abs.path.as_str()), (true, "other", 8443, "/x"));
        let same = resolve(&t("/"), "http://10.0.0.1/y").unwrap();
        assert_eq!((same.port, same.path.as_str()), (80, "/y"));
        assert_eq!(t("/h").url(), "http://10.0.0.1:8080/h");
        assert_eq!(normalize_path("healthz"), "/healthz");
    }
}
