//! `/exec`, `/attach`, `/portForward` and `/run` (`server.go` getExec, getAttach, getPortForward, getRun,
//! proxyStream).
//!
//! The kubelet asks the runtime for a streaming URL (CRI Exec / Attach / PortForward) and proxies the client's
//! upgrade request to it, as upstream's `UpgradeAwareHandler` does: the request goes to the runtime's streaming
//! server with the client's headers (its `Authorization` excepted), the runtime's answer comes back as it is,
//! and after `101 Switching Protocols` bytes are copied both ways until either side closes. So every protocol
//! the runtime speaks passes through unchanged: SPDY/3.1 (`v4.channel.k8s.io` … `channel.k8s.io`,
//! `portforward.k8s.io`) and WebSocket (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, `channel.k8s.io`,
//! `base64.channel.k8s.io`). As with upstream 1.34, `v5.channel.k8s.io` is the apiserver's to translate.
//!
//! Bounds: at most `max_streams` streams at once (more get 429 with `Retry-After`), a stream idle in both
//! directions for `streamingConnectionIdleTimeout` is closed, and when either side goes away both connections
//! are closed, so the runtime ends the session.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Handlers, text};
use crate::host::{HostError, StreamOpts};

/// How long the runtime's streaming server gets to answer the upgrade.
const BACKEND_TIMEOUT: Duration = Duration::from_secs(30);

type Params = Query<Vec<(String, String)>>;

/// The path segments after the route's prefix.
fn segments(p: &str) -> Vec<String> {
    p.split('/').map(String::from).collect()
}

fn flag(q: &[(String, String)], name: &str) -> bool {
    q.iter().any(|(k, v)| k == name && v == "1")
}

fn values<'a>(q: &'a [(String, String)], name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    q.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// `remotecommand.NewOptions`: the streams asked for, or the 400 text.
fn stream_opts(q: &[(String, String)]) -> Result<StreamOpts, &'static str> {
    let tty = flag(q, "tty");
    let o = StreamOpts { stdin: flag(q, "input"), stdout: flag(q, "output"), stderr: flag(q, "error") && !tty, tty };
    if !o.stdin && !o.stdout && !flag(q, "error") {
        return Err("you must specify at least 1 of stdin, stdout, stderr\n");
    }
    Ok(o)
}

fn host_error(e: HostError) -> Response {
    let code = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (code, e.to_string()).into_response();
    if code == StatusCode::TOO_MANY_REQUESTS {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
    }
    r
}

/// The pod the path names; with a UID in the path, it must match.
fn find_pod(h: &Handlers, ns: &str, name: &str, uid: Option<&str>) -> Result<Pod, HostError> {
    let pod = h.pods.pod(ns, name).ok_or_else(|| HostError::NotFound("pod does not exist".into()))?;
    match uid {
        Some(u) if pod.metadata.uid.as_deref() != Some(u) => Err(HostError::NotFound("pod not found".into())),
        _ => Ok(pod),
    }
}

fn is_upgrade(req: &Request) -> bool {
    let has = |n: header::HeaderName, v: &str| {
        req.headers().get_all(n).iter().any(|h| h.to_str().is_ok_and(|s| s.to_ascii_lowercase().contains(v)))
    };
    has(header::CONNECTION, "upgrade") && req.headers().contains_key(header::UPGRADE)
}

fn upgrade_required() -> Response {
    text(StatusCode::INTERNAL_SERVER_ERROR, "Upgrade request required\n")
}

/// A slot for one more stream, or 429.
fn permit(streams: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, HostError> {
    streams.clone().try_acquire_owned().map_err(|_| HostError::Exhausted("too many streams".into()))
}

/// The pod and container of a `{namespace}/{pod}[/{uid}]/{container}` path: `None` for another shape, else the
/// pod (404 when missing) and the container (a UID that is not the pod's is `container not found`, as
/// `findContainer` answers).
fn container_target(h: &Handlers, path: &str) -> Option<Result<(Pod, String), HostError>> {
    let p = segments(path);
    let (ns, name, uid, container) = match p.as_slice() {
        [ns, name, container] => (ns, name, None, container),
        [ns, name, uid, container] => (ns, name, Some(uid.as_str()), container),
        _ => return None,
    };
    Some(find_pod(h, ns, name, None).and_then(|pod| {
        if uid.is_some_and(|u| pod.metadata.uid.as_deref() != Some(u)) {
            return Err(HostError::Other(format!("container not found ({container:?})")));
        }
        Ok((pod, container.clone()))
    }))
}

async fn exec_like(h: Handlers, req: Request, path: &str, q: Vec<(String, String)>, attach: bool) -> Response {
    let Some(target) = container_target(&h, path) else { return super::not_found().await };
    let opts = match stream_opts(&q) {
        Ok(o) => o,
        Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
    };
    let (pod, container) = match target {
        Ok(t) => t,
        Err(e) => return host_error(e),
    };
    // Upstream asks the runtime first; checking here leaves no unused streaming token behind.
    if !is_upgrade(&req) {
        return upgrade_required();
    }
    let permit = match permit(&h.streams) {
        Ok(p) => p,
        Err(e) => return host_error(e),
    };
    let url = if attach {
        h.containers.attach(&pod, &container, opts).await
    } else {
        let cmd: Vec<String> = values(&q, "command").map(String::from).collect();
        h.containers.exec(&pod, &container, cmd, opts).await
    };
    match url {
        Ok(url) => proxy(req, &url, h.options.streaming_idle_timeout, permit).await,
        Err(e) => host_error(e),
    }
}

async fn exec(State(h): State<Handlers>, Path(p): Path<String>, Query(q): Params, req: Request) -> Response {
    exec_like(h, req, &p, q, false).await
}

async fn attach(State(h): State<Handlers>, Path(p): Path<String>, Query(q): Params, req: Request) -> Response {
    exec_like(h, req, &p, q, true).await
}

/// `port` values, repeated or comma-separated (`portforward.NewV4Options`, WebSocket requests only).
fn ports(q: &[(String, String)]) -> Result<Vec<i32>, String> {
    let raw: Vec<&str> = values(q, "port").collect();
    if raw.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut out = vec![];
    for v in raw.iter().flat_map(|v| v.split(',')) {
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        let n: u16 = v.parse().map_err(|e| format!("unable to parse {v:?} as a port: {e}"))?;
        if n == 0 {
            return Err(format!("port {v:?} must be > 0"));
        }
        out.push(i32::from(n));
    }
    Ok(out)
}

fn is_websocket(req: &Request) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

async fn port_forward(State(h): State<Handlers>, Path(p): Path<String>, Query(q): Params, req: Request) -> Response {
    let p = segments(&p);
    let (ns, name, uid) = match p.as_slice() {
        [ns, name] => (ns, name, None),
        [ns, name, uid] => (ns, name, Some(uid.as_str())),
        _ => return super::not_found().await,
    };
    let ports = if is_websocket(&req) {
        match ports(&q) {
            Ok(p) => p,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
        }
    } else {
        vec![]
    };
    let pod = match find_pod(&h, ns, name, uid) {
        Ok(p) => p,
        Err(e) => return host_error(e),
    };
    if !is_upgrade(&req) {
        return upgrade_required();
    }
    let permit = match permit(&h.streams) {
        Ok(p) => p,
        Err(e) => return host_error(e),
    };
    match h.containers.port_forward(&pod, ports).await {
        Ok(url) => proxy(req, &url, h.options.streaming_idle_timeout, permit).await,
        Err(e) => host_error(e),
    }
}

async fn run(State(h): State<Handlers>, Path(p): Path<String>, Query(q): Params) -> Response {
    let (pod, container) = match container_target(&h, &p) {
        None => return super::not_found().await,
        Some(Err(e)) => return host_error(e),
        Some(Ok(t)) => t,
    };
    let cmd: Vec<String> = values(&q, "cmd").next().unwrap_or("").split(' ').map(String::from).collect();
    match h.containers.run(&pod, &container, cmd).await {
        Ok(out) => ([(header::CONTENT_TYPE, "application/json")], out).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Proxies an upgrade request to the runtime's streaming `url` and, after 101, copies bytes both ways.
async fn proxy(mut req: Request, url: &str, idle: Duration, permit: OwnedSemaphorePermit) -> Response {
    let failed = |e: String| {
        tracing::warn!(url = %url, error = %e, "error while proxying request");
        text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
    };
    let Ok(uri) = url.parse::<axum::http::Uri>() else { return failed(format!("invalid streaming URL {url:?}")) };
    let Some(authority) = uri.authority().cloned() else { return failed(format!("invalid streaming URL {url:?}")) };
    if uri.scheme_str() != Some("http") {
        return failed(format!("streaming URL {url:?}: only http is supported"));
    }
    let port = authority.port_u16().unwrap_or(80);
    let connect = tokio::net::TcpStream::connect((authority.host().trim_matches(['[', ']']), port));
    let stream = match tokio::time::timeout(BACKEND_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return failed(format!("dial {authority}: {e}")),
        Err(_) => return failed(format!("dial {authority}: timed out")),
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
        Ok(x) => x,
        Err(e) => return failed(e.to_string()),
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming backend connection ended");
        }
    });
    let mut out = hyper::Request::builder()
        .method(req.method().clone())
        .uri(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
        .body(Body::empty())
        .expect("a request from valid parts");
    for (k, v) in req.headers() {
        if k == header::AUTHORIZATION || k == header::HOST {
            continue;
        }
        if k == header::SEC_WEBSOCKET_PROTOCOL {
            // The bearer token a WebSocket client may carry as a sub-protocol stays here, as upstream removes it.
            let kept: Vec<&str> = v
                .to_str()
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty() && !p.starts_with(crate::auth::WEBSOCKET_TOKEN_PROTOCOL))
                .collect();
            if let Ok(v) = HeaderValue::from_str(&kept.join(", "))
                && !kept.is_empty()
            {
                out.headers_mut().append(k.clone(), v);
            }
            continue;
        }
        out.headers_mut().append(k.clone(), v.clone());
    }
    out.headers_mut()
        .insert(header::HOST, HeaderValue::from_str(authority.as_str()).expect("an authority is a header"));
    let client_upgrade = hyper::upgrade::on(&mut req);
    let mut resp = match tokio::time::timeout(BACKEND_TIMEOUT, sender.send_request(out)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return failed(e.to_string()),
        Err(_) => return failed("the streaming server did not answer in time".into()),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return resp.map(Body::new).into_response();
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    let mut answer = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
    for (k, v) in resp.headers() {
        answer = answer.header(k, v);
    }
    tokio::spawn(async move {
        let _permit = permit;
        match (client_upgrade.await, backend_upgrade.await) {
            (Ok(c), Ok(b)) => pump(TokioIo::new(c), TokioIo::new(b), idle).await,
            (c, b) => tracing::debug!(client = ?c.err(), backend = ?b.err(), "stream upgrade failed"),
        }
    });
    answer.body(Body::empty()).expect("a 101 from valid parts")
}

/// Copies both ways until either side closes or fails, or nothing moves for `idle`; then both are closed. Each
/// direction runs on its own, so a peer that stops reading stalls only its own direction, and the idle timer still
/// ends the stream.
pub(crate) async fn pump<A, B>(a: A, b: B, idle: Duration)
where
    A: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let start = tokio::time::Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let mut up = tokio::spawn(copy_half(ar, bw, start, last.clone()));
    let mut down = tokio::spawn(copy_half(br, aw, start, last.clone()));
    loop {
        let quiet = start.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
        if quiet >= idle {
            tracing::debug!(idle = ?idle, "stream idle; closing");
            break;
        }
        tokio::select! {
            _ = &mut up => break,
            _ = &mut down => break,
            _ = tokio::time::sleep(idle - quiet) => {}
        }
    }
    // Dropping both halves of each side closes the connections.
    up.abort();
    down.abort();
}

/// One direction of [`pump`]: reads, writes, and notes the time of the last traffic.
async fn copy_half<R, W>(mut r: R, mut w: W, start: tokio::time::Instant, last: Arc<AtomicU64>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        if w.write_all(&buf[..n]).await.is_err() || w.flush().await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/exec/{*p}", get(exec).post(exec))
        .route("/attach/{*p}", get(attach).post(attach))
        .route("/portForward/{*p}", get(port_forward).post(port_forward))
        .route("/run/{*p}", post(run))
}
