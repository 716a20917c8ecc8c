//! `POST /checkpoint/{podNamespace}/{podID}/{containerName}` (`ContainerCheckpoint`, beta and on; server.go
//! `checkpoint`): checkpoints a container of a pod on this node through the runtime's `CheckpointContainer` into
//! `<root-dir>/checkpoints`, answering `{"items":["<archive>"]}`. An unknown pod or container, or a timeout that
//! is not a number, answers 404 with upstream's text; a runtime that cannot (no CRIU, not implemented) 500 with
//! `checkpointing of <ns>/<pod>/<container> failed (<the runtime's error>)`. Installed with the debugging handlers
//! when the gate is on; authorized as `nodes/checkpoint`.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;

use super::{Handlers, json, text};

async fn checkpoint(
    State(h): State<Handlers>,
    Path((namespace, pod_name, container)): Path<(String, String, String)>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let Some(pod) = h.pods.pod(&namespace, &pod_name) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let names = spec
        .containers
        .iter()
        .map(|c| c.name.clone())
        .chain(spec.init_containers.iter().flatten().map(|c| c.name.clone()))
        .chain(spec.ephemeral_containers.iter().flatten().map(|c| c.name.clone()));
    if !names.into_iter().any(|n| n == container) {
        return text(StatusCode::NOT_FOUND, format!("container {container} does not exist"));
    }
    // The last `timeout` given wins, as upstream reads it.
    let timeout = match q.iter().rev().find(|(k, _)| k == "timeout") {
        None => None,
        Some((_, v)) => match v.parse::<i64>() {
            Ok(t) => Some(t),
            Err(_) => return text(StatusCode::NOT_FOUND, "cannot parse value of timeout parameter"),
        },
    };
    match h.containers.checkpoint(&pod, &container, timeout).await {
        Ok(location) => json(StatusCode::OK, &serde_json::json!({ "items": [location] })),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("checkpointing of {namespace}/{pod_name}/{container} failed ({e})"),
        ),
    }
}

/// The route (with `ContainerCheckpoint` on).
pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/checkpoint/{namespace}/{pod}/{container}", post(checkpoint))
}
