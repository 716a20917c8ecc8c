//! The apiserver client on a rotating client certificate (`pkg/kubelet/certificate/transport.go`,
//! client-go `util/connrotation`).
//!
//! [`rotating_client`] builds the kube client the whole kubelet shares from `--kubeconfig`, but its TLS client
//! certificate is read from the client certificate manager at every handshake, and every TCP connection it
//! opens is tracked. [`close_on_rotation`] (spawned by the binary beside the manager) shuts every tracked
//! connection down when the manager publishes a new certificate, so the next request reconnects with it:
//! requests in flight fail as on a dropped connection and watches resume, as upstream's `CloseAll`. Upstream
//! notices the new certificate within 10 s; this follows the manager's channel, so at once. TLS sessions are
//! not resumed: a resumed session carries the identity of its first handshake, the old certificate.

use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt;
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::pair::Pair;
use crate::KubeError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The open connections of a client.
#[derive(Clone, Default, Debug)]
pub struct ConnTracker {
    conns: Arc<Mutex<Vec<Weak<OwnedFd>>>>,
}

impl ConnTracker {
    fn add(&self, fd: &Arc<OwnedFd>) {
        let mut c = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|w| w.strong_count() > 0);
        c.push(Arc::downgrade(fd));
    }

    /// Shuts every open connection down; returns how many there were.
    pub fn close_all(&self) -> usize {
        let mut c = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        let open: Vec<Arc<OwnedFd>> = c.drain(..).filter_map(|w| w.upgrade()).collect();
        for fd in &open {
            // SAFETY: the descriptor is owned and open (held by `fd`); shutdown only changes the socket's state.
            unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
        open.len()
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.conns.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|w| w.strong_count() > 0).count()
    }
}

/// A TCP connection the tracker can shut down (through a duplicate of its descriptor, closed with it).
#[derive(Debug)]
pub struct Tracked {
    io: TokioIo<TcpStream>,
    _fd: Arc<OwnedFd>,
}

impl hyper::rt::Read for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Tracked {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

impl Connection for Tracked {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

/// An HTTP connector whose connections a [`ConnTracker`] records.
#[derive(Clone, Debug)]
pub struct TrackingConnector {
    inner: HttpConnector,
    conns: ConnTracker,
}

impl tower::Service<Uri> for TrackingConnector {
    type Response = Tracked;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Tracked, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let fut = self.inner.call(uri);
        let conns = self.conns.clone();
        Box::pin(async move {
            let io = fut.await?;
            let fd = Arc::new(io.inner().as_fd().try_clone_to_owned()?);
            conns.add(&fd);
            Ok(Tracked { io, _fd: fd })
        })
    }
}

/// Presents the client certificate manager's current pair at every handshake (`GetClientCertificate`).
#[derive(Debug)]
struct CurrentClientCert(watch::Receiver<Option<Arc<Pair>>>);

impl ResolvesClientCert for CurrentClientCert {
    fn resolve(&self, _root_hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.0.borrow().as_ref().map(|p| p.certified.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A kube client for the kubeconfig's server and CA whose client certificate follows `certs`, and the tracker
/// of its connections.
pub async fn rotating_client(
    kubeconfig: &Path,
    certs: watch::Receiver<Option<Arc<Pair>>>,
) -> Result<(kube::Client, ConnTracker), KubeError> {
    let p = kubeconfig.display().to_string();
    let bad = |message: String| KubeError::Kubeconfig { path: p.clone(), message };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| bad(e.to_string()))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    // The certificate comes from the manager, not from the files the kubeconfig names.
    cfg.auth_info.client_certificate = None;
    cfg.auth_info.client_certificate_data = None;
    cfg.auth_info.client_key = None;
    cfg.auth_info.client_key_data = None;
    let client_err = |message: String| KubeError::Client { path: p.clone(), message };
    let mut tls = cfg.rustls_client_config().map_err(|e| client_err(e.to_string()))?;
    tls.client_auth_cert_resolver = Arc::new(CurrentClientCert(certs));
    // A resumed TLS session keeps the identity of the handshake that made it: the apiserver would go on
    // seeing the old certificate (and refuse it once expired). Go's client keeps no session cache either.
    tls.resumption = rustls::client::Resumption::disabled();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(cfg.connect_timeout.or(Some(Duration::from_secs(30))));
    http.set_keepalive(Some(Duration::from_secs(30)));
    let conns = ConnTracker::default();
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    if let Some(name) = cfg.tls_server_name.clone() {
        let name = name.try_into().map_err(|e: rustls::pki_types::InvalidDnsNameError| client_err(e.to_string()))?;
        builder = builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = builder.enable_http1().wrap_connector(TrackingConnector { inner: http, conns: conns.clone() });
    let hyper_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let service = tower::ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(kubelet_trace::enabled().then(kubelet_trace::HttpTraceLayer::default))
        .option_layer(cfg.auth_layer().map_err(|e| client_err(e.to_string()))?)
        .layer(cfg.extra_headers_layer().map_err(|e| client_err(e.to_string()))?)
        .map_err(BoxError::from)
        .service(hyper_client);
    Ok((kube::Client::new(service, cfg.default_namespace), conns))
}

/// Shuts the client's connections down whenever the certificate changes, until cancelled.
pub async fn close_on_rotation(
    mut certs: watch::Receiver<Option<Arc<Pair>>>,
    conns: ConnTracker,
    cancel: CancellationToken,
) {
    certs.mark_unchanged();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            r = certs.changed() => if r.is_err() { return },
        }
        let closed = conns.close_all();
        info!(
            connections = closed,
            "certificate rotation detected, shutting down client connections to start using new credentials"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn close_all_ends_every_open_connection_and_forgets_dropped_ones() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut c = TrackingConnector { inner: HttpConnector::new(), conns: ConnTracker::default() };
        let uri: Uri = format!("http://{addr}/").parse().unwrap();
        let a = tower::Service::call(&mut c, uri.clone()).await.unwrap();
        let (mut server_a, _) = l.accept().await.unwrap();
        let b = tower::Service::call(&mut c, uri).await.unwrap();
        let _server_b = l.accept().await.unwrap();
        assert_eq!(c.conns.open(), 2);
        drop(b);
        assert_eq!(c.conns.open(), 1, "a dropped connection is not kept open by the tracker");
        assert_eq!(c.conns.close_all(), 1);
        // The peer sees the connection end.
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read(&mut server_a, &mut buf))
            .await
            .expect("the peer sees the close")
            .unwrap();
        assert_eq!(n, 0);
        drop(a);
        assert_eq!(c.conns.open(), 0);
    }
}
