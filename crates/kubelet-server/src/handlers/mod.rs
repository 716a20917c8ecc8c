//! The routes of the kubelet's ports (`pkg/kubelet/server/server.go` NewServer).
//!
//! - [`healthz_router`] — `healthzBindAddress:healthzPort`.
//! - [`read_only_router`] — `readOnlyPort`, plain HTTP without authentication: the handlers that need no
//!   authorization, and the debugging endpoints answering 405.
//! - [`secure_router`] — `address:port` over TLS, every request through the authentication and authorization
//!   filter; the debugging handlers (`/exec`, `/attach`, `/portForward`, `/run`, `/containerLogs`, `/logs/`,
//!   `/configz`, `/runningpods/`, `/debug/flags/v`, and `/checkpoint/` with `ContainerCheckpoint`) when
//!   `enableDebuggingHandlers`, else 405 `Debug endpoints are disabled.`.
//!
//! Unknown paths answer go-restful's `404: Page Not Found`, a known path with another method
//! `405: Method Not Allowed`.

mod checkpoint;
mod debug;
mod health;
mod metrics;
mod nodelogs;
mod pods;
mod pprof;
mod streaming;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use crate::auth::{Authenticator, Authorizer, Decision, attributes, bearer_token};
use crate::host::{ContainerAccess, PodsView};
use crate::listen::conn_info;

/// Options of the handlers.
#[derive(Clone, Debug)]
pub struct Options {
    /// The node's name (authorization attributes).
    pub node_name: String,
    /// `enableDebuggingHandlers`.
    pub enable_debugging_handlers: bool,
    /// `enableSystemLogHandler`.
    pub enable_system_log_handler: bool,
    /// `enableDebugFlagsHandler`: `/debug/flags/v`.
    pub enable_debug_flags_handler: bool,
    /// `enableProfilingHandler`: `/debug/pprof/`.
    pub enable_profiling_handler: bool,
    /// `ContainerCheckpoint`: `/checkpoint/...`.
    pub container_checkpoint: bool,
    /// The folder `/logs/` serves (`/var/log`).
    pub system_log_dir: std::path::PathBuf,
    /// `podLogsDir`: the folder container logs must lie in.
    pub pod_logs_dir: std::path::PathBuf,
    /// `streamingConnectionIdleTimeout`: an exec, attach or port-forward stream with no traffic either way for
    /// this long is closed.
    pub streaming_idle_timeout: Duration,
    /// Streams proxied at once (upstream's streaming server allows 1000 pending requests).
    pub max_streams: usize,
}

/// What the handlers share.
#[derive(Clone)]
pub struct Handlers {
    /// Options.
    pub options: Arc<Options>,
    /// The pods.
    pub pods: Arc<dyn PodsView>,
    /// Container access.
    pub containers: Arc<dyn ContainerAccess>,
    /// `/configz`: the effective configuration as `{"kubeletconfig": {...}}`.
    pub configz: Arc<std::sync::RwLock<serde_json::Value>>,
    /// Wall clock (`sinceSeconds`).
    pub clock: Arc<dyn kubelet_types::Clock>,
    /// Stream slots (`Options::max_streams`).
    pub streams: Arc<tokio::sync::Semaphore>,
    /// `/stats/summary` and `/metrics/resource`.
    pub stats: Arc<dyn crate::stats::StatsProvider>,
    /// What `/metrics/probes` serves.
    pub probe_metrics: Arc<kubelet_metrics::Registry>,
    /// What `/debug/flags/v` changes.
    pub verbosity: Arc<dyn Verbosity>,
    /// What takes `/debug/pprof/` profiles.
    pub profiler: Arc<dyn Profiler>,
}

pub use debug::{DEBUG_FLAG_PATH, FixedVerbosity, Verbosity};
pub use pprof::{NoProfiler, Profiler};

/// A plain-text answer as Go's `http.Error` writes it.
pub(crate) fn text(code: StatusCode, body: impl Into<String>) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8"), (header::X_CONTENT_TYPE_OPTIONS, "nosniff")],
        body.into(),
    )
        .into_response()
}

/// A JSON answer.
pub(crate) fn json(code: StatusCode, v: &impl serde::Serialize) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(v).unwrap_or_default()).into_response()
}

async fn not_found() -> Response {
    text(StatusCode::NOT_FOUND, "404: Page Not Found")
}

async fn method_not_allowed() -> Response {
    text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
}

async fn debugging_disabled() -> Response {
    text(StatusCode::METHOD_NOT_ALLOWED, "Debug endpoints are disabled.\n")
}

fn finish(r: Router<Handlers>, h: Handlers) -> Router {
    r.fallback(not_found).method_not_allowed_fallback(method_not_allowed).with_state(h)
}

/// The healthz port.
pub fn healthz_router(h: Handlers) -> Router {
    finish(health::routes(Router::new()), h)
}

/// Handlers that need no debugging switch (`InstallAuthNotRequiredHandlers`).
fn default_routes(r: Router<Handlers>) -> Router<Handlers> {
    crate::stats::routes(metrics::routes(pods::routes(health::routes(r))))
}

fn disabled_routes(mut r: Router<Handlers>) -> Router<Handlers> {
    for p in ["/run", "/exec", "/attach", "/portForward", "/containerLogs", "/runningpods", "/debug/pprof", "/logs"] {
        r = r
            .route(&format!("{p}/"), any(debugging_disabled))
            .route(&format!("{p}/{{*rest}}"), any(debugging_disabled));
    }
    r
}

/// Go's `ServeMux`: a path that is not clean once decoded (`..`, `.`, doubled slashes, also when written `%2e%2e`
/// or `%2f`) is redirected to its clean form before anything else sees it, so authorization and routing always
/// judge the same path, and no handler sees a `..` however it was written.
async fn clean_redirect(req: Request, next: Next) -> Response {
    let path = percent_decode(req.uri().path());
    let mut clean = crate::auth::clean_path(&path);
    if path.ends_with('/') && clean != "/" {
        clean.push('/');
    }
    if clean == path {
        return next.run(req).await;
    }
    let location = match req.uri().query() {
        Some(q) => format!("{}?{q}", escape_path(&clean)),
        None => escape_path(&clean),
    };
    (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, location)]).into_response()
}

/// A URL path with its `%XX` escapes decoded (others left as they are), as Go's `URL.Path`.
pub(crate) fn percent_decode(p: &str) -> String {
    let b = p.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (b.get(i + 1).and_then(|c| hex(*c)), b.get(i + 2).and_then(|c| hex(*c)))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path escaped for a `Location` header as Go's `URL.EscapedPath` writes it.
fn escape_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for b in p.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn outer(r: Router, kind: &'static str) -> Router {
    metrics::recorded(r.layer(axum::middleware::from_fn(clean_redirect)), kind)
}

/// The read-only port.
pub fn read_only_router(h: Handlers) -> Router {
    outer(finish(disabled_routes(default_routes(Router::new())), h), "readonly")
}

/// Authentication and authorization of the secure port.
pub struct Auth {
    /// Authenticators.
    pub authenticator: Authenticator,
    /// Authorizer.
    pub authorizer: Authorizer,
    /// The node's name.
    pub node_name: String,
}

async fn filter(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let info = conn_info(&req);
    let token = {
        let hv = |n: header::HeaderName| req.headers().get(n).and_then(|v| v.to_str().ok());
        bearer_token(hv(header::AUTHORIZATION), hv(header::SEC_WEBSOCKET_PROTOCOL))
    };
    let user = match auth.authenticator.authenticate(&info.peer, token.as_deref()).await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(reason = %e, remote = ?info.remote, "unable to authenticate the request");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    };
    let attrs = attributes(req.method().as_str(), req.uri().path(), &auth.node_name);
    match auth.authorizer.authorize(&user, &attrs).await {
        Decision::Allow => next.run(req).await,
        Decision::Forbidden(msg) => (StatusCode::FORBIDDEN, msg).into_response(),
        Decision::Error(msg) => (StatusCode::INTERNAL_SERVER_ERROR, msg).into_response(),
    }
}

/// The secure port.
pub fn secure_router(h: Handlers, auth: Arc<Auth>) -> Router {
    let mut r = default_routes(Router::new());
    r = if h.options.enable_debugging_handlers {
        let r = debug::routes(pods::debug_routes(r), h.options.enable_debug_flags_handler);
        let r = pprof::routes(r, h.options.enable_profiling_handler);
        if h.options.container_checkpoint { checkpoint::routes(r) } else { r }
    } else {
        disabled_routes(r)
    };
    outer(finish(r, h).layer(axum::middleware::from_fn_with_state(auth, filter)), "readwrite")
}

#[cfg(test)]
pub(crate) mod tests;
