//! `/healthz` as `k8s.io/apiserver/pkg/server/healthz` installs it with the kubelet's checks: `ping`, `log`,
//! then the host's (`syncloop`, `pleg`). `?verbose` lists every check, `?exclude=<name>` skips one, and
//! `/healthz/<name>` runs a single check. A failure answers 500 with the reason withheld (it is logged). Each check
//! `/healthz` runs is recorded for `/metrics/slis` (`slis.ObserveHealthcheck`, type `healthz`).

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;

use super::{Handlers, text};
use crate::host::HealthResult;

fn checks(h: &Handlers) -> Vec<HealthResult> {
    let mut v: Vec<HealthResult> = vec![("ping", Ok(())), ("log", Ok(()))];
    v.extend(h.pods.health_checks());
    v
}

async fn all(State(h): State<Handlers>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let verbose = q.iter().any(|(k, _)| k == "verbose");
    let excluded: Vec<&str> = q.iter().filter(|(k, _)| k == "exclude").map(|(_, v)| v.as_str()).collect();
    let results: Vec<HealthResult> = checks(&h).into_iter().filter(|(n, _)| !excluded.contains(n)).collect();
    for (name, r) in &results {
        kubelet_metrics::slis::observe(name, "healthz", r.is_ok());
    }
    let failed = results.iter().any(|(_, r)| r.is_err());
    if !failed && !verbose {
        return text(StatusCode::OK, "ok");
    }
    let mut body = String::new();
    for (name, r) in &results {
        match r {
            Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
            Err(e) => {
                tracing::warn!(check = name, error = %e, "healthz check failed");
                body.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    for e in excluded {
        body.push_str(&format!("[+]{e} excluded: ok\n"));
    }
    if failed {
        body.push_str("healthz check failed\n");
        text(StatusCode::INTERNAL_SERVER_ERROR, body)
    } else {
        body.push_str("healthz check passed\n");
        text(StatusCode::OK, body)
    }
}

async fn one(State(h): State<Handlers>, Path(name): Path<String>) -> Response {
    let all: HashMap<&str, Result<(), String>> = checks(&h).into_iter().collect();
    match all.get(name.as_str()) {
        Some(Ok(())) => text(StatusCode::OK, "ok"),
        Some(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal server error: {e}\n")),
        None => super::not_found().await,
    }
}

pub(super) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/healthz", get(all)).route("/healthz/{name}", get(one))
}
