//! Accepting connections for the kubelet's ports (`ListenAndServeKubeletServer`,
//! `ListenAndServeKubeletReadOnlyServer` of `pkg/kubelet/server/server.go`).
//!
//! Upstream's Go server takes request headers of up to `MaxHeaderBytes` (1 MiB, plus Go's 4 KiB of slack; more is
//! `431 Request Header Fields Too Large`), closes idle keep-alive connections after 90 s, and otherwise has a 4 h
//! read timeout, no TLS handshake or header deadline and no bound on connections. Here the same header limit
//! holds, and slow or hostile clients are held to tighter bounds ([`Limits`]):
//!
//! - a TLS handshake must finish in 10 s, and a request's headers in 30 s from when the server starts waiting for
//!   them (which also closes idle keep-alive connections);
//! - at most `max_connections` connections are served at once, `max_connections_per_ip` of them from one address.
//!   When a new connection finds either bound reached, the connection that has been idle the longest (still in
//!   its TLS handshake, waiting for its first request's headers, or idle between requests; never one serving a
//!   request) is closed to make room, so clients that hold connections without using them cannot lock others out;
//!   only when every connection is busy is the new one closed at accept (with a warning at most once a minute);
//! - the request headers held by all connections together are bounded by `max_header_memory`: past it, the idle
//!   connection holding the most is closed. So 4096 clients sending nearly 1 MiB of headers each cannot make the
//!   kubelet hold 4 GiB.
//!
//! No handler reads a request body, so a body that never ends is not buffered: after the answer, hyper reads at
//! most what is already there and closes the connection. Upgraded streams (exec, attach, port-forward) leave these
//! bounds once switched and are bounded by the streaming proxy.
//!
//! [`serve`] runs until its cancellation token fires; then connections get a graceful shutdown (in-flight requests
//! finish, up to the caller's own deadline).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::PeerCert;
use crate::tls::ClientCa;

/// Bounds on connections.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections served at once from one client address.
    pub max_connections_per_ip: usize,
    /// Time for the TLS handshake.
    pub handshake_timeout: Duration,
    /// Time for a request's headers, and for an idle keep-alive connection.
    pub header_timeout: Duration,
    /// Largest header block (upstream's `MaxHeaderBytes`; Go allows 4 KiB more, and so does this).
    pub max_header_bytes: usize,
    /// Request-header bytes all connections may hold at once.
    pub max_header_memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 4096,
            max_connections_per_ip: 1024,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(30),
            max_header_bytes: 1 << 20,
            max_header_memory: 64 << 20,
        }
    }
}

/// Go's slack over `MaxHeaderBytes` (`http.Server.initialReadLimitSize`).
const HEADER_SLACK: usize = 4096;

/// Facts about the connection a request came on, as a request extension.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The client's address.
    pub remote: Option<SocketAddr>,
    /// Its client certificate.
    pub peer: PeerCert,
}

/// What the admission knows of one served connection.
struct ConnState {
    id: u64,
    ip: IpAddr,
    /// Requests being served: from their headers until their response body is done.
    in_flight: AtomicUsize,
    /// When it last became idle, in milliseconds since the admission's epoch.
    idle_since: AtomicU64,
    /// Header bytes read since its last request started.
    head: AtomicUsize,
    /// The most header bytes it has held at once (what its read buffer may still hold): its share of the
    /// header memory.
    charge: AtomicUsize,
    /// Fired to close it.
    evict: CancellationToken,
    /// No longer counted (closed to make room, or upgraded).
    gone: AtomicBool,
}

impl ConnState {
    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }
}

#[derive(Default)]
struct Registry {
    conns: HashMap<u64, Arc<ConnState>>,
    per_ip: HashMap<IpAddr, usize>,
    next_id: u64,
    /// The most connections served at once since memory was last given back.
    high_water: usize,
}

/// Connections that, once gone, are worth giving their memory back to the system for.
const TRIM_AFTER: usize = 256;

impl Registry {
    fn remove(&mut self, c: &ConnState) -> bool {
        if self.conns.remove(&c.id).is_none() {
            return false;
        }
        if let Some(n) = self.per_ip.get_mut(&c.ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&c.ip);
            }
        }
        if self.high_water >= TRIM_AFTER && self.conns.len() <= self.high_water / 4 {
            self.high_water = self.conns.len();
            give_memory_back();
        }
        true
    }

    /// The connection idle the longest among those `pick` accepts.
    fn longest_idle(&self, pick: impl Fn(&ConnState) -> bool) -> Option<Arc<ConnState>> {
        self.conns
            .values()
            .filter(|c| c.idle() && pick(c))
            .min_by_key(|c| (c.idle_since.load(Ordering::Relaxed), c.id))
            .cloned()
    }
}

/// After a burst of connections (thousands of slow clients, say) has gone, gives the memory the allocator keeps
/// for reuse back to the system: glibc's malloc keeps freed memory of its per-thread arenas mapped, so without this
/// the kubelet's resident memory would stay at the burst's peak.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn_blocking(|| {
            // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the system.
            unsafe { libc::malloc_trim(0) };
        });
    }
}

/// The connections of one port and their bounds.
struct Admission {
    max: usize,
    per_ip_max: usize,
    header_budget: i64,
    registry: Mutex<Registry>,
    /// The sum of the connections' charges (signed: an eviction may briefly run ahead of a charge).
    held: std::sync::atomic::AtomicI64,
    epoch: Instant,
    last_warning: Mutex<Option<Instant>>,
}

/// A served connection's place, given back when the last of its users (the connection, its requests) goes.
struct Admitted {
    state: Arc<ConnState>,
    admission: Arc<Admission>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.registry().remove(&self.state);
        self.admission.uncharge(&self.state);
    }
}

impl Admitted {
    /// Takes an upgraded connection out of the bounds (the streaming proxy bounds it from now on).
    fn detach(&self) {
        self.admission.registry().remove(&self.state);
        self.state.gone.store(true, Ordering::Release);
        self.admission.uncharge(&self.state);
    }
}

impl Admission {
    fn new(limits: &Limits) -> Arc<Self> {
        Arc::new(Admission {
            max: limits.max_connections,
            per_ip_max: limits.max_connections_per_ip,
            header_budget: i64::try_from(limits.max_header_memory).unwrap_or(i64::MAX),
            registry: Mutex::default(),
            held: Default::default(),
            epoch: Instant::now(),
            last_warning: Mutex::new(None),
        })
    }

    /// The registry (a panic elsewhere while it was held leaves it usable).
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn warn(&self, addr: &SocketAddr, remote: &SocketAddr, msg: &str) {
        let mut last = self.last_warning.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
            tracing::warn!(address = %addr, remote = %remote, "{msg}");
            *last = Some(Instant::now());
        }
    }

    fn uncharge(&self, c: &ConnState) {
        self.held.fetch_sub(c.charge.swap(0, Ordering::AcqRel) as i64, Ordering::AcqRel);
    }

    /// Closes `c`, giving its place and its header memory back at once.
    fn evict(&self, r: &mut Registry, c: &ConnState) {
        if r.remove(c) {
            c.gone.store(true, Ordering::Release);
            self.uncharge(c);
            c.evict.cancel();
        }
    }

    /// A place for a new connection from `remote` on `addr`: made by closing the connection idle the longest when
    /// the bounds are reached, or none when every connection is busy.
    fn admit(self: &Arc<Self>, addr: &SocketAddr, remote: &SocketAddr) -> Option<Arc<Admitted>> {
        let ip = remote.ip();
        let mut r = self.registry();
        let mut evicted = false;
        if r.per_ip.get(&ip).copied().unwrap_or(0) >= self.per_ip_max {
            let Some(v) = r.longest_idle(|c| c.ip == ip) else {
                drop(r);
                self.warn(addr, remote, "too many busy connections from one address; closing new ones");
                return None;
            };
            self.evict(&mut r, &v);
            evicted = true;
        }
        if r.conns.len() >= self.max {
            let Some(v) = r.longest_idle(|_| true) else {
                drop(r);
                self.warn(addr, remote, "too many busy connections; closing new ones");
                return None;
            };
            self.evict(&mut r, &v);
            evicted = true;
        }
        r.next_id += 1;
        let state = Arc::new(ConnState {
            id: r.next_id,
            ip,
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(self.now_ms()),
            head: AtomicUsize::new(0),
            charge: AtomicUsize::new(0),
            evict: CancellationToken::new(),
            gone: AtomicBool::new(false),
        });
        r.conns.insert(state.id, state.clone());
        r.high_water = r.high_water.max(r.conns.len());
        *r.per_ip.entry(ip).or_insert(0) += 1;
        drop(r);
        if evicted {
            self.warn(addr, remote, "too many connections; closing those idle the longest");
        }
        Some(Arc::new(Admitted { state, admission: self.clone() }))
    }

    /// Counts `n` bytes read by `c`; false when `c` must close because the header memory is exhausted and it
    /// holds the most of it.
    fn charge(&self, c: &ConnState, n: usize) -> bool {
        if c.gone.load(Ordering::Acquire) || !c.idle() {
            return true; // upgraded, or a request body (which a handler reads as it goes)
        }
        let head = c.head.fetch_add(n, Ordering::AcqRel) + n;
        let prev = c.charge.fetch_max(head, Ordering::AcqRel);
        if head > prev {
            self.held.fetch_add((head - prev) as i64, Ordering::AcqRel);
        }
        if self.held.load(Ordering::Acquire) <= self.header_budget {
            return true;
        }
        let mut r = self.registry();
        while self.held.load(Ordering::Acquire) > self.header_budget {
            let victim = r
                .conns
                .values()
                .filter(|v| v.idle() && v.charge.load(Ordering::Acquire) > 0)
                .max_by_key(|v| (v.charge.load(Ordering::Acquire), std::cmp::Reverse(v.id)))
                .cloned();
            match victim {
                None => break,
                Some(v) if v.id == c.id => {
                    tracing::debug!("request headers take too much memory; closing the connection holding the most");
                    return false;
                }
                Some(v) => self.evict(&mut r, &v),
            }
        }
        true
    }
}

/// A request in flight on a connection: from its headers until its response body is done.
struct Busy(Arc<Admitted>);

impl Busy {
    fn start(a: Arc<Admitted>) -> Busy {
        a.state.in_flight.fetch_add(1, Ordering::AcqRel);
        a.state.head.store(0, Ordering::Release);
        Busy(a)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let s = &self.0.state;
        s.idle_since.store(self.0.admission.now_ms(), Ordering::Relaxed);
        s.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as in flight until it is done or dropped.
struct Tracked {
    inner: axum::body::Body,
    _busy: Busy,
}

impl hyper::body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's byte stream, counting what it reads against the header memory, and failing once the
/// connection was closed to make room.
struct Metered<S> {
    inner: S,
    conn: Arc<Admitted>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let state = &self.conn.state;
        if state.evict.is_cancelled() {
            return Poll::Ready(Err(std::io::ErrorKind::ConnectionAborted.into()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
        if n > 0 && !self.conn.admission.charge(&self.conn.state, n) {
            return Poll::Ready(Err(std::io::Error::other("request headers take too much memory")));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn serve_conn<S>(
    io: S,
    router: Router,
    info: ConnInfo,
    limits: Limits,
    shutdown: CancellationToken,
    admitted: Arc<Admitted>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let evict = admitted.state.evict.clone();
    let io = Metered { inner: io, conn: admitted.clone() };
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(info.clone());
        let router = router.clone();
        let busy = Busy::start(admitted.clone());
        async move {
            let Ok(resp) = router.oneshot(req.map(axum::body::Body::new)).await;
            if resp.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
                busy.0.detach();
            }
            Ok::<_, Infallible>(resp.map(|inner| axum::body::Body::new(Tracked { inner, _busy: busy })))
        }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size((limits.max_header_bytes + HEADER_SLACK).max(8192));
    let conn = b.serve_connection(TokioIo::new(io), svc).with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => if let Err(e) = r { tracing::debug!(error = %e, "connection ended") },
        _ = evict.cancelled() => tracing::debug!("idle connection closed to make room"),
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
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

/// Serves `router` on `listener`, over TLS when `tls` is given (each connection takes the newest setup; client
/// certificates are classified with its client CA), else plain HTTP (the read-only and healthz ports).
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio::sync::watch::Receiver<TlsSetup>>,
    router: Router,
    limits: Limits,
    cancel: CancellationToken,
) {
    let addr = listener.local_addr().ok();
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
        let Some(admitted) = admission.admit(&addr.unwrap_or(remote), &remote) else { continue };
        let setup = tls.as_ref().map(|t| t.borrow().clone());
        let acceptor = setup.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(t.config.clone()));
        let ca = setup.and_then(|t| t.client_ca);
        let (router, limits, cancel) = (router.clone(), limits.clone(), cancel.clone());
        tracker.spawn(async move {
            let Some(acceptor) = acceptor else {
                let info = ConnInfo { remote: Some(remote), peer: PeerCert::None };
                return serve_conn(stream, router, info, limits, cancel, admitted).await;
            };
            let evict = admitted.state.evict.clone();
            let handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream));
            let tls = tokio::select! {
                r = handshake => match r {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => return tracing::debug!(remote = %remote, error = %e, "TLS handshake failed"),
                    Err(_) => return tracing::debug!(remote = %remote, "TLS handshake timed out"),
                },
                _ = evict.cancelled() => return tracing::debug!(remote = %remote, "closed in its TLS handshake to make room"),
            };
            let peer = PeerCert::from_chain(ca.as_deref(), tls.get_ref().1.peer_certificates());
            serve_conn(tls, router, ConnInfo { remote: Some(remote), peer }, limits, cancel, admitted).await;
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
mod tests;
