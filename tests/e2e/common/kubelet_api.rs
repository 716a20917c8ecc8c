//! A client of the kubelet API on the secure port, for the tests: HTTPS requests (optionally with a client
//! certificate or a bearer token) and a minimal WebSocket client speaking the `channel.k8s.io` framing that
//! `kubectl exec` and `port-forward` use. The kubelet's serving certificate is not verified, as the apiserver
//! does not verify it by default either (the TLS set-up is the test apiserver's own towards kubelets).

use http_body_util::BodyExt;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Who calls the kubelet API.
#[derive(Clone, Default)]
pub struct KubeletApi {
    /// The secure port on 127.0.0.1.
    pub port: u16,
    /// A client certificate and key (PEM).
    pub cert: Option<(String, String)>,
    /// A bearer token.
    pub token: Option<String>,
}

impl KubeletApi {
    /// An anonymous client of `port`.
    pub fn new(port: u16) -> Self {
        KubeletApi { port, ..Default::default() }
    }

    /// The same client with a client certificate.
    pub fn with_cert(&self, cert: (String, String)) -> Self {
        KubeletApi { cert: Some(cert), ..self.clone() }
    }

    /// The same client with a bearer token.
    pub fn with_token(&self, token: &str) -> Self {
        KubeletApi { token: Some(token.into()), ..self.clone() }
    }

    async fn connect(&self) -> TlsStream<TcpStream> {
        let cfg = test_apiserver::proxy::kubelet_client_config(self.cert.clone());
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await.expect("connect to the kubelet API");
        tokio_rustls::TlsConnector::from(cfg)
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .expect("TLS handshake with the kubelet")
    }

    /// Sends a request and returns the response with its body still streaming.
    pub async fn send(&self, method: &str, path: &str) -> hyper::Response<hyper::body::Incoming> {
        self.send_body(method, path, "").await
    }

    /// A request with `body`: status and the whole response body.
    pub async fn request_body(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let resp = self.send_body(method, path, body).await;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    async fn send_body(&self, method: &str, path: &str, body: &str) -> hyper::Response<hyper::body::Incoming> {
        let io = hyper_util::rt::TokioIo::new(self.connect().await);
        let (mut tx, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let mut req = hyper::Request::builder().method(method).uri(path).header("host", "127.0.0.1");
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let body = http_body_util::Full::new(bytes::Bytes::from(body.to_string()));
        tx.send_request(req.body(body).unwrap()).await.unwrap()
    }

    /// GET `path`: status and body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path).await
    }

    /// A request without a body: status and the whole response body.
    pub async fn request(&self, method: &str, path: &str) -> (u16, String) {
        let resp = self.send(method, path).await;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    /// Opens a WebSocket on `path` offering `protocol`; the status and body of a refusal otherwise.
    pub async fn websocket(&self, path: &str, protocol: &str) -> Result<WebSocket, (u16, String)> {
        let mut s = self.connect().await;
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: {protocol}\r\n"
        );
        if let Some(t) = &self.token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let mut b = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).await.unwrap() == 0 {
                break;
            }
            buf.push(b[0]);
        }
        let head = String::from_utf8_lossy(&buf).into_owned();
        let code: u16 = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        if code != 101 {
            let mut body = vec![];
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), s.read_to_end(&mut body)).await;
            return Err((code, String::from_utf8_lossy(&body).into_owned()));
        }
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains(&format!("sec-websocket-protocol: {protocol}")), "{head}");
        Ok(WebSocket { s })
    }
}

/// A WebSocket in the `channel.k8s.io` framing: every binary message starts with its channel.
pub struct WebSocket {
    s: TlsStream<TcpStream>,
}

impl WebSocket {
    /// Sends `data` on `channel` (a masked binary frame, as a client must).
    pub async fn send(&mut self, channel: u8, data: &[u8]) {
        let mut payload = vec![channel];
        payload.extend_from_slice(data);
        let mut f = vec![0x82u8];
        let n = payload.len();
        if n < 126 {
            f.push(0x80 | n as u8);
        } else {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.s.write_all(&f).await.unwrap();
    }

    /// The next data message as (channel, bytes); `None` once the server closes.
    pub async fn recv(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            let p = self.recv_message().await?;
            if !p.is_empty() {
                return Some((p[0], p[1..].to_vec()));
            }
        }
    }

    /// The next text or binary message, whole (for protocols without channels, e.g. `binary.k8s.io` logs);
    /// `None` once the server closes.
    pub async fn recv_message(&mut self) -> Option<Vec<u8>> {
        loop {
            let mut h = [0u8; 2];
            self.s.read_exact(&mut h).await.ok()?;
            let opcode = h[0] & 0x0f;
            let mut len = u64::from(h[1] & 0x7f);
            if len == 126 {
                let mut b = [0u8; 2];
                self.s.read_exact(&mut b).await.ok()?;
                len = u64::from(u16::from_be_bytes(b));
            } else if len == 127 {
                let mut b = [0u8; 8];
                self.s.read_exact(&mut b).await.ok()?;
                len = u64::from_be_bytes(b);
            }
            let mut p = vec![0u8; len as usize];
            self.s.read_exact(&mut p).await.ok()?;
            match opcode {
                0x8 => return None,
                0x1 | 0x2 => return Some(p),
                _ => continue,
            }
        }
    }

    /// Every message until the server closes, gathered per channel.
    pub async fn drain(&mut self) -> std::collections::BTreeMap<u8, Vec<u8>> {
        let mut out: std::collections::BTreeMap<u8, Vec<u8>> = Default::default();
        while let Some((ch, data)) = self.recv().await {
            out.entry(ch).or_default().extend_from_slice(&data);
        }
        out
    }
}

/// The leaf certificate (DER) the kubelet API on `port` serves now, or why the handshake failed.
pub async fn served_certificate(port: u16) -> Result<Vec<u8>, String> {
    let cfg = test_apiserver::proxy::kubelet_client_config(None);
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| e.to_string())?;
    let leaf = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).ok_or("no certificate")?;
    Ok(leaf.to_vec())
}

/// The first certificate (DER) of a PEM file.
pub fn pem_leaf(path: &std::path::Path) -> Option<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    let data = std::fs::read(path).ok()?;
    rustls::pki_types::CertificateDer::pem_slice_iter(&data).next()?.ok().map(|c| c.to_vec())
}
