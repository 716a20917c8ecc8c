//! A CRI proxy for fault drills: listens on its own unix socket and forwards every gRPC call (HTTP/2, unary and
//! server-streaming, with trailers) to the real runtime's socket. On demand it holds back the calls of chosen
//! methods whose request names one of chosen strings (a pod's sandbox and container IDs, its UID): such a call is
//! not forwarded, and so not answered, until the hang is switched off (the runtime then answers it, minutes late,
//! if the client still waits). Everything else passes untouched. It also records the W3C `traceparent` each call
//! carried, as a runtime that traces would read it.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

/// The methods a hang holds back (`/runtime.v1.RuntimeService/<method>`).
pub const STATUS_METHODS: &[&str] =
    &["ContainerStatus", "PodSandboxStatus", "ContainerStats", "PodSandboxStats", "ListContainers", "ListPodSandbox"];

#[derive(Default)]
struct Hang {
    /// Byte strings that select a request (empty: no hang).
    needles: BTreeSet<String>,
    methods: BTreeSet<String>,
}

struct Shared {
    upstream: PathBuf,
    hang: Mutex<Hang>,
    /// Bumped whenever the hang changes: held calls look again.
    changed: watch::Sender<u64>,
    /// Calls held back so far, and calls held now.
    held_total: AtomicUsize,
    held_now: AtomicUsize,
    /// Calls forwarded.
    forwarded: AtomicUsize,
    /// Held calls per method.
    held_by_method: Mutex<std::collections::BTreeMap<String, usize>>,
    /// The W3C `traceparent` metadata of each forwarded call that had one, with its method.
    traceparents: Mutex<Vec<(String, String)>>,
}

/// A running proxy; stops accepting when dropped.
pub struct CriProxy {
    shared: Arc<Shared>,
    /// The proxy's socket.
    pub socket: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CriProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CriProxy {
    /// A proxy listening on `socket` (created) in front of the runtime socket `upstream`.
    pub fn start(socket: &Path, upstream: &Path) -> CriProxy {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).unwrap_or_else(|e| panic!("bind {}: {e}", socket.display()));
        let shared = Arc::new(Shared {
            upstream: upstream.to_path_buf(),
            hang: Mutex::new(Hang::default()),
            changed: watch::channel(0).0,
            held_total: AtomicUsize::new(0),
            held_now: AtomicUsize::new(0),
            forwarded: AtomicUsize::new(0),
            held_by_method: Mutex::default(),
            traceparents: Mutex::default(),
        });
        let s = shared.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else { continue };
                tokio::spawn(serve(conn, s.clone()));
            }
        });
        CriProxy { shared, socket: socket.to_path_buf(), task }
    }

    /// The endpoint to give a kubelet (`unix://...`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// From now on, calls of `methods` whose request contains any of `needles` are held back.
    pub fn hang(&self, methods: &[&str], needles: impl IntoIterator<Item = String>) {
        let mut h = self.shared.hang.lock().unwrap();
        h.methods = methods.iter().map(|m| m.to_string()).collect();
        h.needles = needles.into_iter().filter(|n| !n.is_empty()).collect();
        drop(h);
        self.shared.changed.send_modify(|v| *v += 1);
    }

    /// Switches the hang off: held calls are forwarded now.
    pub fn release(&self) {
        *self.shared.hang.lock().unwrap() = Hang::default();
        self.shared.changed.send_modify(|v| *v += 1);
    }

    /// Calls held back so far (each counted once).
    pub fn held_total(&self) -> usize {
        self.shared.held_total.load(Ordering::Relaxed)
    }

    /// Calls held back right now (their client still waiting).
    pub fn held_now(&self) -> usize {
        self.shared.held_now.load(Ordering::Relaxed)
    }

    /// Calls forwarded so far.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::Relaxed)
    }

    /// `(method, traceparent)` of every call forwarded with trace context so far.
    #[allow(dead_code)] // not every test that proxies reads it
    pub fn traceparents(&self) -> Vec<(String, String)> {
        self.shared.traceparents.lock().unwrap().clone()
    }

    /// Held calls per method so far.
    pub fn held_by_method(&self) -> std::collections::BTreeMap<String, usize> {
        self.shared.held_by_method.lock().unwrap().clone()
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

/// One client connection: one upstream connection, every stream forwarded on it.
async fn serve(conn: UnixStream, shared: Arc<Shared>) {
    let Ok(up) = UnixStream::connect(&shared.upstream).await else { return };
    let Ok((sender, up_conn)) =
        hyper::client::conn::http2::Builder::new(TokioExecutor::new()).handshake(TokioIo::new(up)).await
    else {
        return;
    };
    let upstream = tokio::spawn(up_conn);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (sender, shared) = (sender.clone(), shared.clone());
        async move { Ok::<_, Infallible>(forward(req, sender, shared).await) }
    });
    let down = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .max_concurrent_streams(4096)
        .serve_connection(TokioIo::new(conn), svc);
    tokio::select! {
        _ = down => {}
        _ = upstream => {}
    }
}

/// A gRPC error answered by the proxy itself (trailers-only response).
fn grpc_error(code: u32, message: &str) -> Response<Body> {
    Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", code.to_string())
        .header("grpc-message", message.replace(|c: char| !c.is_ascii_graphic() && c != ' ', "_"))
        .body(Empty::new().map_err(|never| match never {}).boxed())
        .unwrap()
}

/// Counts a held call while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Whether the call must be held back now.
fn held(shared: &Shared, method: &str, body: &[u8]) -> bool {
    let h = shared.hang.lock().unwrap();
    h.methods.contains(method) && h.needles.iter().any(|n| contains(body, n.as_bytes()))
}

async fn forward(
    req: Request<Incoming>,
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    shared: Arc<Shared>,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    // CRI has no client-streaming method: every request body ends.
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return grpc_error(14, &format!("proxy: read request: {e}")),
    };
    let method = parts.uri.path().rsplit('/').next().unwrap_or("").to_string();
    let mut changes = shared.changed.subscribe();
    if held(&shared, &method, &body) {
        shared.held_total.fetch_add(1, Ordering::Relaxed);
        *shared.held_by_method.lock().unwrap().entry(method.clone()).or_default() += 1;
        // Counted while waiting; the wait ends when the hang is off or the client gives up (the call is dropped).
        let _waiting = Waiting::new(&shared.held_now);
        while held(&shared, &method, &body) {
            if changes.changed().await.is_err() {
                break;
            }
        }
    }
    let path = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    parts.uri = format!("http://localhost{path}").parse().unwrap();
    if sender.ready().await.is_err() {
        return grpc_error(14, "proxy: upstream connection closed");
    }
    shared.forwarded.fetch_add(1, Ordering::Relaxed);
    if let Some(tp) = parts.headers.get("traceparent").and_then(|v| v.to_str().ok()) {
        shared.traceparents.lock().unwrap().push((method.clone(), tp.to_string()));
    }
    match sender.send_request(Request::from_parts(parts, Full::new(body))).await {
        Ok(resp) => resp.map(|b| b.boxed()),
        Err(e) => grpc_error(14, &format!("proxy: forward: {e}")),
    }
}
