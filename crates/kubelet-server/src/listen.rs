//! Accepting connections for the kubelet's ports (`ListenAndServeKubeletServer`,
//! `ListenAndServeKubeletReadOnlyServer`, `ListenAndServePodResources` of `pkg/kubelet/server/server.go`).
//!
//! Upstream's Go server has a 4 h read timeout and no header timeout; here slow or hostile clients are held to
//! tighter bounds ([`Limits`]): a TLS handshake must finish in 10 s, request headers in 30 s (which also closes
//! idle keep-alive connections), headers are limited to 1 MiB, and at most `max_connections` connections are
//! served at once, `max_connections_per_ip` of them from one address (more are closed at accept, with a warning at
//! most once a minute). Upgraded streams are bounded separately by the streaming proxy.
//!
//! [`serve`] runs until their cancellation token fires; then connections get a graceful
//! shutdown (in-flight requests finish, up to the caller's own deadline).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::PeerCert;
use crate::tls::ClientCa;

/// Bounds on connections.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one client address, so one client cannot lock the apiserver and
    /// metrics-server out.
    pub max_connections_per_ip: usize,
    /// Time for the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time for a request's headers, and for an idle keep-alive connection.
    pub header_timeout: Duration,
    /// Largest header block.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            max_connections_per_ip: 1024,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            max_header_bytes: 1 << 20,
        }
    }
}

/// Facts about the connection a request came on, as a request extension.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The client's address.
    pub remote: Option<SocketAddr>,
    /// Its client certificate.
    pub peer: PeerCert,
}

async fn serve_conn<S>(io: S, router: Router, info: ConnInfo, limits: Limits, cancel: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(info.clone());
        let router = router.clone();
        async move {
            let Ok(resp) = router.oneshot(req.map(axum::body::Body::new)).await;
            Ok::<_, Infallible>(resp)
        }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    let conn = b.serve_connection(TokioIo::new(io), svc).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r { tracing::debug!(error = %e, "connection ended") },
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

struct Admission {
    slots: Arc<Semaphore>,
    per_ip: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    per_ip_max: usize,
    last_warning: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// A served connection's place, given back when it ends.
struct Admitted {
    _slot: tokio::sync::OwnedSemaphorePermit,
    ip: std::net::IpAddr,
    admission: Arc<Admission>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut m = self.admission.per_ip.lock().unwrap();
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

impl Admission {
    fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(Admission {
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            per_ip: Default::default(),
            per_ip_max: limits.max_connections_per_ip,
            last_warning: std::sync::Mutex::new(None),
        })
    }

    fn admit(self: &Arc<Self>, addr: &SocketAddr, remote: &SocketAddr) -> Option<Admitted> {
        let admitted = (|| {
            let slot = self.slots.clone().try_acquire_owned().ok()?;
            let mut m = self.per_ip.lock().unwrap();
            let n = m.entry(remote.ip()).or_insert(0);
            if *n >= self.per_ip_max {
                return None;
            }
            *n += 1;
            Some(Admitted { _slot: slot, ip: remote.ip(), admission: self.clone() })
        })();
        if admitted.is_none() {
            let mut last = self.last_warning.lock().unwrap();
            if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                tracing::warn!(address = %addr, remote = %remote, "too many connections; closing new ones");
                *last = Some(tokio::time::Instant::now());
            }
        }
        admitted
    }
}

/// The TLS of a port: the rustls configuration and the CA client certificates are checked against.
#[derive(Clone)]
pub struct TlsSetup {
    /// rustls configuration.
    pub config: Arc<rustls::ServerConfig>,
    /// `authentication.x509.clientCAFile`.
    pub client_ca: Option<Arc<ClientCa>>,
}

/// Serves `router` on `listener`, over TLS when `tls` is given (client certificates are classified with its
/// client CA), else plain HTTP (the read-only and healthz ports).
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsSetup>,
    router: Router,
    limits: Limits,
    cancel: CancellationToken,
) {
    let addr = listener.local_addr().ok();
    let acceptor = tls.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
    let client_ca = tls.and_then(|t| t.client_ca);
    let admission = Admission::new(&limits);
    let tracker = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, remote) = tokio::select! {
            _ = cancel.cancelled() => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(permit) = admission.admit(&addr.unwrap_or(remote), &remote) else { continue };
        let (acceptor, router, limits, cancel, ca) =
            (acceptor.clone(), router.clone(), limits.clone(), cancel.clone(), client_ca.clone());
        tracker.spawn(async move {
            let _permit = permit;
            let Some(acceptor) = acceptor else {
                let info = ConnInfo { remote: Some(remote), peer: PeerCert::None };
                return serve_conn(stream, router, info, limits, cancel).await;
            };
            let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(remote = %remote, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(remote = %remote, "TLS handshake timed out"),
            };
            let peer = PeerCert::from_chain(ca.as_deref(), tls.get_ref().1.peer_certificates());
            serve_conn(tls, router, ConnInfo { remote: Some(remote), peer }, limits, cancel).await;
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// A request's connection facts (absent in handler unit tests: then no certificate).
pub fn conn_info(req: &Request) -> ConnInfo {
    req.extensions().get::<ConnInfo>().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn start(limits: Limits) -> (SocketAddr, CancellationToken) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let router = Router::new().route("/x", axum::routing::get(|| async { "ok" }));
        tokio::spawn(serve(l, None, router, limits, cancel.clone()));
        (addr, cancel)
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_after_the_header_timeout() {
        let (addr, cancel) = start(Limits { header_timeout: Duration::from_millis(300), ..Default::default() }).await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n").await.unwrap(); // never finishes its headers
        let mut buf = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut buf)).await;
        assert!(n.is_ok(), "the server closed the connection");
        // A well-behaved client is still served.
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut buf = String::new();
        c.read_to_string(&mut buf).await.unwrap();
        assert!(buf.starts_with("HTTP/1.1 200") && buf.ends_with("ok"), "{buf}");
        cancel.cancel();
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_are_closed_at_once() {
        let (addr, cancel) = start(Limits { max_connections_per_ip: 2, ..Default::default() }).await;
        let held =
            [tokio::net::TcpStream::connect(addr).await.unwrap(), tokio::net::TcpStream::connect(addr).await.unwrap()];
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = third.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let mut buf = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(10), third.read_to_end(&mut buf)).await.unwrap();
        assert!(r.is_err() || buf.is_empty(), "closed without an answer: {:?}", String::from_utf8_lossy(&buf));
        drop(held);
        // Slots come back once the held connections go.
        let mut ok = false;
        for _ in 0..100 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").await.unwrap();
            let mut buf = String::new();
            let _ = c.read_to_string(&mut buf).await;
            if buf.ends_with("ok") {
                ok = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(ok, "served again after the slots were freed");
        cancel.cancel();
    }
}
