//! `/debug/flags/v` (`InstallDebugFlagsHandler` with component-base's `GlogSetter`): a `PUT` of a number sets the
//! running kubelet's log verbosity. Installed with the debugging handlers when `enableDebugFlagsHandler` (default
//! true); otherwise it answers 405 `flags endpoint is disabled.`. Authorized like every other path of the secure port
//! (`nodes/proxy`). The verbosity is applied by the binary's [`Verbosity`]; a value that does not parse, or that it
//! refuses, answers 400 with the reason and changes nothing. `/debug/explain` (rkubelet's own) answers where each
//! pod stands and why, for `rkubelet explain`; it is authorized as `nodes/proxy`, as every `/debug/` path.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use axum::routing::{any, get};

use super::{Handlers, text};

/// The path upstream serves the verbosity flag on.
pub const DEBUG_FLAG_PATH: &str = "/debug/flags/v";

/// Sets the log verbosity of the running process (`klog -v`).
pub trait Verbosity: Send + Sync {
    /// Applies verbosity `v`; an error says why it was not.
    fn set(&self, v: u32) -> Result<(), String>;
}

/// No log to adjust (tests and tools): every change is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct FixedVerbosity;

impl Verbosity for FixedVerbosity {
    fn set(&self, _: u32) -> Result<(), String> {
        Err("the log verbosity of this process cannot be changed".into())
    }
}

/// `writePlainText`: the text and a newline.
fn plain(code: StatusCode, body: &str) -> Response {
    text(code, format!("{body}\n"))
}

/// Go's `strconv.ParseUint(s, 10, 32)` error for `s`.
fn parse_uint(s: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseUint: parsing {s:?}: invalid syntax"));
    }
    s.parse::<u32>().map_err(|_| format!("strconv.ParseUint: parsing {s:?}: value out of range"))
}

async fn flag_v(State(h): State<Handlers>, method: Method, body: Bytes) -> Response {
    if method != Method::PUT {
        return plain(StatusCode::NOT_ACCEPTABLE, "unsupported http method");
    }
    let value = String::from_utf8_lossy(&body).into_owned();
    let v = match parse_uint(&value) {
        Ok(v) => v,
        Err(e) => return plain(StatusCode::BAD_REQUEST, &e),
    };
    match h.verbosity.set(v) {
        Ok(()) => {
            tracing::info!(verbosity = v, "log verbosity changed through {DEBUG_FLAG_PATH}");
            plain(StatusCode::OK, &format!("successfully set klog.logging.verbosity to {value}"))
        }
        Err(e) => plain(StatusCode::BAD_REQUEST, &e),
    }
}

async fn flags_disabled() -> Response {
    plain(StatusCode::METHOD_NOT_ALLOWED, "flags endpoint is disabled.")
}

/// `GET /debug/explain`: where every pod of the node stands and why (rkubelet's own, beyond upstream), as
/// `{"items": [...]}`, each as `kubelet::explain` says it.
async fn explain_all(State(h): State<Handlers>) -> Response {
    let mut items: Vec<serde_json::Value> = h.pods.pods().iter().map(|p| h.pods.explain(p)).collect();
    items.retain(|v| !v.is_null());
    super::json(axum::http::StatusCode::OK, &serde_json::json!({ "items": items }))
}

/// `GET /debug/explain/{namespace}/{name}`: one pod; 404 `pod does not exist`.
async fn explain_one(
    State(h): State<Handlers>,
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
) -> Response {
    match h.pods.pod(&namespace, &name) {
        Some(p) => super::json(axum::http::StatusCode::OK, &h.pods.explain(&p)),
        None => text(axum::http::StatusCode::NOT_FOUND, "pod does not exist"),
    }
}

/// The routes, `/debug/flags/v` enabled or answering that it is disabled.
pub(super) fn routes(r: Router<Handlers>, enabled: bool) -> Router<Handlers> {
    let r = r.route("/debug/explain", get(explain_all)).route("/debug/explain/{namespace}/{name}", get(explain_one));
    if enabled { r.route(DEBUG_FLAG_PATH, any(flag_v)) } else { r.route(DEBUG_FLAG_PATH, any(flags_disabled)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_gos_parse_uint() {
        assert_eq!(parse_uint("4"), Ok(4));
        assert_eq!(parse_uint("x").unwrap_err(), "strconv.ParseUint: parsing \"x\": invalid syntax");
        assert_eq!(parse_uint("-1").unwrap_err(), "strconv.ParseUint: parsing \"-1\": invalid syntax");
        assert_eq!(parse_uint("").unwrap_err(), "strconv.ParseUint: parsing \"\": invalid syntax");
        assert_eq!(
            parse_uint("4294967296").unwrap_err(),
            "strconv.ParseUint: parsing \"4294967296\": value out of range"
        );
    }
}
