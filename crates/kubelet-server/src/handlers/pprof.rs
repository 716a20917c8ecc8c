//! `/debug/pprof/` (`InstallProfilingHandler` over Go's `net/http/pprof`): installed with the debugging handlers
//! when `enableProfilingHandler` (default true), else answering 405 `profiling endpoint is disabled.`; `GET` only,
//! authorized as every other path of the secure port (`nodes/proxy`).
//!
//! - `profile?seconds=N` (default 30; beyond the server's 4 h write timeout 400): a CPU profile of the process,
//!   gzip-compressed pprof; another one running answers 500 `Could not enable CPU profiling: cpu profiling already
//!   in use`, as Go.
//! - `heap`, `allocs`: the sampled heap (in-use first, or allocations first).
//! - `cmdline`: the command line, NUL-separated. `symbol`: `num_symbols: 1` (the profiles come symbolized).
//! - the index (`/debug/pprof/`) lists them; any other name (Go's `goroutine`, `threadcreate`, `block`,
//!   `mutex`, `trace` have no equivalent in a process without Go's runtime) answers 404 `Unknown profile`.
//!
//! The profiles are taken by the binary's [`Profiler`].

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};

use super::{Handlers, text};

/// Takes profiles of the running process.
#[async_trait::async_trait]
pub trait Profiler: Send + Sync {
    /// A CPU profile over `duration`, gzip-compressed pprof.
    async fn cpu(&self, duration: Duration) -> Result<Vec<u8>, String>;
    /// The heap profile; `allocs` puts allocations first.
    fn heap(&self, allocs: bool) -> Result<Vec<u8>, String>;
}

/// No profiler (tests and tools): every profile is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProfiler;

#[async_trait::async_trait]
impl Profiler for NoProfiler {
    async fn cpu(&self, _: Duration) -> Result<Vec<u8>, String> {
        Err("profiling is not available in this process".into())
    }
    fn heap(&self, _: bool) -> Result<Vec<u8>, String> {
        Err("profiling is not available in this process".into())
    }
}

/// The kubelet server's `WriteTimeout`: a longer CPU profile could not be written.
const WRITE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// Go's `serveError`: plain text with `X-Go-Pprof: 1`.
fn serve_error(code: StatusCode, msg: &str) -> Response {
    let mut r = text(code, format!("{msg}\n"));
    r.headers_mut().insert("x-go-pprof", HeaderValue::from_static("1"));
    r
}

/// A profile as Go sends one: an attachment of octet-stream.
fn attachment(name: &'static str, body: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"{name}\"")),
        ],
        body,
    )
        .into_response()
}

const INDEX: &str = "<html>\n<head>\n<title>/debug/pprof/</title>\n</head>\n<body>\n/debug/pprof/\n<br>\n<p>Set debug=1 \
                     as a query parameter to export in legacy text format</p>\n<br>\nTypes of profiles available:\n\
                     <table>\n<thead><td>Count</td><td>Profile</td></thead>\n\
                     <tr><td>0</td><td><a href='allocs?debug=1'>allocs</a></td></tr>\n\
                     <tr><td>0</td><td><a href='heap?debug=1'>heap</a></td></tr>\n\
                     </table>\n<a href=\"profile\">CPU</a>\n<br>\n<p>\n<ul>\n\
                     <li><div class=profile-name>allocs: </div> A sampling of all past memory allocations</li>\n\
                     <li><div class=profile-name>heap: </div> A sampling of memory allocations of live objects.</li>\n\
                     <li><div class=profile-name>profile: </div> CPU profile. You can specify the duration in the \
                     seconds GET parameter. After you get the profile file, use the go tool pprof command to \
                     investigate the profile.</li>\n</ul>\n</p>\n</body>\n</html>\n";

async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response()
}

async fn named(
    State(h): State<Handlers>,
    Path(name): Path<String>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    match name.as_str() {
        "" => index().await,
        "profile" => {
            // Go: a seconds value that does not parse, or is not positive, is 30.
            let secs = q.get("seconds").and_then(|s| s.parse::<i64>().ok()).filter(|s| *s > 0).unwrap_or(30);
            let d = Duration::from_secs(secs as u64);
            if d > WRITE_TIMEOUT {
                return serve_error(StatusCode::BAD_REQUEST, "profile duration exceeds server's WriteTimeout");
            }
            match h.profiler.cpu(d).await {
                Ok(p) => attachment("profile", p),
                Err(e) => {
                    serve_error(StatusCode::INTERNAL_SERVER_ERROR, &format!("Could not enable CPU profiling: {e}"))
                }
            }
        }
        "heap" | "allocs" => match h.profiler.heap(name == "allocs") {
            Ok(p) => attachment(if name == "heap" { "heap" } else { "allocs" }, p),
            Err(e) => serve_error(StatusCode::INTERNAL_SERVER_ERROR, &e),
        },
        "cmdline" => {
            let args: Vec<String> = std::env::args().collect();
            text(StatusCode::OK, args.join("\0"))
        }
        "symbol" => text(StatusCode::OK, "num_symbols: 1\n"),
        _ => serve_error(StatusCode::NOT_FOUND, "Unknown profile"),
    }
}

async fn disabled() -> Response {
    text(StatusCode::METHOD_NOT_ALLOWED, "profiling endpoint is disabled.\n")
}

/// The routes, enabled or answering that they are disabled.
pub(super) fn routes(r: Router<Handlers>, enabled: bool) -> Router<Handlers> {
    if enabled {
        r.route("/debug/pprof/", get(index)).route("/debug/pprof/{name}", get(named))
    } else {
        r.route("/debug/pprof/", any(disabled)).route("/debug/pprof/{*rest}", any(disabled))
    }
}
