//! `/metrics` (the kubelet's own families and the process collector, `legacyregistry`), `/metrics/probes`
//! (`prober_probe_*`), `/metrics/slis` (the health checks, component-base `slis`), and the HTTP request metrics of both API ports (`pkg/kubelet/server/metrics`).

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

/// `/metrics/slis` with reset (`SLIMetricsWithReset`): a `DELETE` forgets the health check figures.
async fn slis(method: axum::http::Method) -> Response {
    if method == axum::http::Method::DELETE {
        kubelet_metrics::slis::reset();
        return (StatusCode::OK, "metrics reset\n").into_response();
    }
    exposition(kubelet_metrics::slis::registry().gather())
}

pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/metrics", get(metrics))
        .route("/metrics/probes", get(probes))
        .route("/metrics/slis", get(slis).delete(slis))
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

/// The methods that are label values (`getMetricMethodBucket`); any other is `other`.
const KNOWN_METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"];

/// Ends an in-flight request's record when the request is done or dropped (a client that went away).
struct InFlight {
    labels: [String; 4],
    start: tokio::time::Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        use kubelet_metrics::kubelet as m;
        let l: [&str; 4] = [&self.labels[0], &self.labels[1], &self.labels[2], &self.labels[3]];
        m::HTTP_REQUESTS_DURATION.observe(&l, self.start.elapsed().as_secs_f64());
        m::HTTP_INFLIGHT.add(&l, -1.0);
    }
}

/// Counts, times and tracks in-flight requests by their first path segment (`getURLRootPath`).
pub(crate) async fn record(State(kind): State<ServerType>, req: Request, next: Next) -> Response {
    use kubelet_metrics::kubelet as m;
    let first = req.uri().path().trim_start_matches('/').split('/').next().unwrap_or("");
    // Only the kubelet's own roots and methods become label values: a client's made-up ones must not grow the
    // series.
    let root = if KNOWN_ROOTS.contains(&first) { first } else { "other" };
    let method = req.method().as_str();
    let method = if KNOWN_METHODS.contains(&method) { method } else { "other" };
    let long_running = if ["exec", "attach", "portforward", "debug"].contains(&root) { "true" } else { "false" };
    let labels = [long_running, method, root, kind.0];
    m::HTTP_REQUESTS.inc(&labels);
    m::HTTP_INFLIGHT.add(&labels, 1.0);
    let _guard = InFlight { labels: labels.map(String::from), start: tokio::time::Instant::now() };
    next.run(req).await
}

/// Wraps a port's router with [`record`].
pub(crate) fn recorded(r: Router, kind: &'static str) -> Router {
    r.layer(axum::middleware::from_fn_with_state(ServerType(kind), record))
}
