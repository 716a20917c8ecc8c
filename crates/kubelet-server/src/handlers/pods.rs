//! `/pods`, `/runningpods/` and `/configz`, and the assembly of the debugging routes.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;

use super::{Handlers, json, text};

/// A v1 PodList as the kubelet encodes it (`items` is `null` when there is no pod, as Go writes a nil slice).
pub(crate) fn pod_list(pods: Vec<Pod>) -> serde_json::Value {
    let items = if pods.is_empty() { serde_json::Value::Null } else { serde_json::to_value(pods).unwrap_or_default() };
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

async fn pods(State(h): State<Handlers>) -> Response {
    json(StatusCode::OK, &pod_list(h.pods.pods()))
}

async fn running_pods(State(h): State<Handlers>) -> Response {
    match h.pods.running_pods().await {
        Ok(p) => json(StatusCode::OK, &pod_list(p)),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

async fn configz(State(h): State<Handlers>) -> Response {
    let configz = h.configz.read().unwrap_or_else(|e| e.into_inner()).clone();
    json(StatusCode::OK, &configz)
}

pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/pods", get(pods)).route("/pods/", get(pods))
}

/// The handlers behind `enableDebuggingHandlers` (`InstallAuthRequiredHandlers`).
pub(super) fn debug_routes(r: Router<Handlers>) -> Router<Handlers> {
    let r = r.route("/runningpods/", get(running_pods)).route("/configz", get(configz));
    super::streaming::routes(super::nodelogs::routes(crate::logs::routes(r)))
}
