//! The kubelet's small HTTP endpoints (`pkg/kubelet/server/server.go`): `/healthz` on
//! `healthzBindAddress:healthzPort` with the `syncloop` and `pleg` checks, and, when `readOnlyPort` is set, the
//! unauthenticated read-only API with `/healthz` and `/pods` (the desired pods with their current status).
//!
//! [`serve`] runs until its cancellation token fires; a port that cannot be bound is an error at start.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod as ApiPod;
use kubelet_runtime::PlegHealth;
use kubelet_types::Pod;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::status::StatusManager;

/// Whether the sync loop turns (`syncLoopHealthCheck`): unhealthy when an iteration has not started for
/// twice the resync interval, at least 5 minutes.
#[derive(Debug)]
pub struct SyncLoopHealth {
    last: Mutex<Instant>,
    threshold: Duration,
}

impl SyncLoopHealth {
    /// Health for a loop with this `syncFrequency`.
    pub fn new(sync_frequency: Duration) -> Self {
        Self { last: Mutex::new(Instant::now()), threshold: (sync_frequency * 2).max(Duration::from_secs(300)) }
    }

    /// Marks an iteration.
    pub fn mark(&self) {
        *self.last.lock().unwrap() = Instant::now();
    }

    /// `Ok` while the loop turns.
    pub fn healthy(&self) -> Result<(), String> {
        let since = self.last.lock().unwrap().elapsed();
        if since > self.threshold {
            return Err(format!("sync Loop took longer than expected: last iteration {since:?} ago"));
        }
        Ok(())
    }
}

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    /// Sync loop health.
    pub syncloop: Arc<SyncLoopHealth>,
    /// PLEG health.
    pub pleg: Arc<PlegHealth>,
    /// The desired pods, as the sync loop publishes them.
    pub pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    /// Their statuses.
    pub status: Arc<StatusManager>,
}

async fn healthz(State(s): State<ServerState>) -> Response {
    let checks = [("syncloop", s.syncloop.healthy()), ("pleg", s.pleg.healthy())];
    if checks.iter().all(|(_, r)| r.is_ok()) {
        return (StatusCode::OK, "ok").into_response();
    }
    let mut body = String::from("[+]ping ok\n[+]log ok\n");
    for (name, r) in &checks {
        match r {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                tracing::warn!(check = name, error = %e, "healthz check failed");
                body.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    body.push_str("healthz check failed\n");
    (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
}

async fn pods(State(s): State<ServerState>) -> Response {
    let pods = s.pods.borrow().clone();
    let items: Vec<ApiPod> = pods
        .iter()
        .map(|p| {
            let mut p = (**p).clone();
            if let Some(st) = s.status.get(&kubelet_types::pod_update::pod_uid(&p)) {
                p.status = Some((*st).clone());
            }
            p
        })
        .collect();
    let list = serde_json::json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items });
    ([("content-type", "application/json")], list.to_string()).into_response()
}

/// The `/healthz` router.
pub fn healthz_router(state: ServerState) -> Router {
    Router::new().route("/healthz", get(healthz)).with_state(state)
}

/// The read-only API router.
pub fn read_only_router(state: ServerState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/pods", get(pods)).with_state(state)
}

/// Serves `router` on `addr` until cancelled.
pub async fn serve(addr: SocketAddr, router: Router, cancel: CancellationToken) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, router).with_graceful_shutdown(async move { cancel.cancelled().await }).await
}
