//! `/metrics` (the kubelet's own families and the process collector, `legacyregistry`), `/metrics/probes`
//! (`prober_probe_*`), and the HTTP request metrics of both API ports (`pkg/kubelet/server/metrics`).

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::Handlers;

fn exposition(text: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, kubelet_metrics::TEXT_CONTENT_TYPE)], text).into_response()
}

async fn metrics() -> Response {
    exposition(kubelet_metrics::global().gather())
}

async fn probes(State(h): State<Handlers>) -> Response {
    exposition(h.probe_metrics.gather())
}

pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/metrics", get(metrics)).route("/metrics/probes", get(probes))
}

/// The first path segments the kubelet serves (`getURLRootPath` values).
const KNOWN_ROOTS: [&str; 15] = [
    "",
    "attach",
    "checkpoint",
    "configz",
    "containerLogs",
    "debug",
    "exec",
    "healthz",
    "logs",
    "metrics",
    "pods",
    "portForward",
    "run",
    "runningpods",
    "stats",
];

/// `readonly` or `readwrite`.
#[derive(Clone, Copy)]
pub(crate) struct ServerType(pub &'static str);

/// Counts, times and tracks in-flight requests by their first path segment (`getURLRootPath`).
pub(crate) async fn record(State(kind): State<ServerType>, req: Request, next: Next) -> Response {
    use kubelet_metrics::kubelet as m;
    let first = req.uri().path().trim_start_matches('/').split('/').next().unwrap_or("");
    // Only the kubelet's own roots become label values: a client's made-up paths must not grow the series.
    let root = if KNOWN_ROOTS.contains(&first) { first } else { "other" }.to_string();
    let long_running =
        if ["exec", "attach", "portforward", "debug"].contains(&root.as_str()) { "true" } else { "false" };
    let method = req.method().as_str().to_string();
    let labels = [long_running, method.as_str(), root.as_str(), kind.0];
    m::HTTP_REQUESTS.inc(&labels);
    m::HTTP_INFLIGHT.add(&labels, 1.0);
    let start = tokio::time::Instant::now();
    let resp = next.run(req).await;
    m::HTTP_REQUESTS_DURATION.observe(&labels, start.elapsed().as_secs_f64());
    m::HTTP_INFLIGHT.add(&labels, -1.0);
    resp
}

/// Wraps a port's router with [`record`].
pub(crate) fn recorded(r: Router, kind: &'static str) -> Router {
    r.layer(axum::middleware::from_fn_with_state(ServerType(kind), record))
}
