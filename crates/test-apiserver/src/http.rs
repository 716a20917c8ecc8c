//! HTTP routing and content negotiation, as `apiserver/pkg/endpoints` installs them: the REST paths
//! `/api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]` (and `/apis/<g>/<v>/...`, and the
//! legacy `/watch/` prefix), GET/LIST/WATCH/POST/PUT/PATCH/DELETE, `Accept` negotiation of JSON, Table
//! and PartialObjectMetadata, discovery and OpenAPI paths, `/healthz`, `/livez`, `/readyz`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::api::{self, PatchType};
use crate::discovery;
use crate::error::ApiError;
use crate::resources::{self, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector, Selectors};
use crate::server::Shared;
use crate::strategy::{DeleteOptions, Part, User};
use crate::table::{IncludeObject, partial_metadata, table};
use crate::util::parse_query;
use crate::watch::{self, Format, WatchRequest};

type Body = BoxBody<Bytes, Infallible>;

fn full(b: impl Into<Bytes>) -> Body {
    BoxBody::new(Full::new(b.into()))
}

fn respond(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).unwrap_or_default()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error(e: &ApiError) -> Response<Body> {
    respond(e.code, &e.status())
}

/// What a client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wants {
    Json,
    Table,
    Metadata,
}

fn negotiate(accept: &str) -> Result<Wants, ApiError> {
    if accept.trim().is_empty() {
        return Ok(Wants::Json);
    }
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let typ = parts.next().unwrap_or("");
        let params: HashMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
        if !matches!(typ, "application/json" | "application/*" | "*/*") {
            continue;
        }
        match (params.get("as").copied(), params.get("g").copied()) {
            (None, _) => return Ok(Wants::Json),
            (Some("Table"), Some("meta.k8s.io")) => return Ok(Wants::Table),
            (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some("meta.k8s.io")) => {
                return Ok(Wants::Metadata);
            }
            _ => continue,
        }
    }
    Err(ApiError::not_acceptable(accept))
}

/// A parsed resource path.
struct Target {
    def: &'static ResourceDef,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
    legacy_watch: bool,
}

fn parse_target(path: &str) -> Result<Option<Target>, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, mut rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Ok(None),
    };
    if rest.is_empty() {
        return Ok(None);
    }
    let mut legacy_watch = false;
    if rest[0] == "watch" {
        legacy_watch = true;
        rest = &rest[1..];
    }
    let nf = ApiError::path_not_found;
    let (namespace, rest) = match rest {
        ["namespaces", ns, r, tail @ ..] if resources::find(group, version, r).is_some_and(|d| d.namespaced) => {
            (Some(ns.to_string()), std::iter::once(*r).chain(tail.iter().copied()).collect::<Vec<_>>())
        }
        other => (None, other.to_vec()),
    };
    let def = resources::find(group, version, rest[0]).ok_or_else(nf)?;
    if rest.len() > 3 {
        return Err(nf());
    }
    let sub = rest.get(2).map(|s| s.to_string());
    if let Some(s) = &sub
        && !def.subresources.contains(&s.as_str())
    {
        return Err(nf());
    }
    Ok(Some(Target { def, namespace, name: rest.get(1).map(|s| s.to_string()), sub, legacy_watch }))
}

fn selectors(q: &HashMap<String, String>, def: &ResourceDef) -> Result<Selectors, ApiError> {
    Ok(Selectors {
        labels: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        fields: FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), def)?,
    })
}

fn parse_json_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

/// The entry point of every request.
pub async fn handle(
    shared: Arc<Shared>,
    cert_user: Option<User>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let header = |h| parts.headers.get(h).and_then(|v: &HeaderValue| v.to_str().ok()).map(String::from);
    let ua = header(USER_AGENT).unwrap_or_default();
    let uri = parts.uri.to_string();
    let user = match shared.authenticate(cert_user.as_ref(), header(AUTHORIZATION).as_deref()) {
        Ok(u) => u,
        Err(e) => {
            shared.log(parts.method.as_str(), &uri, "", &ua);
            return Ok(error(&e));
        }
    };
    shared.log(parts.method.as_str(), &uri, &user.name, &ua);
    if let Some((ns, name, sub)) = pod_stream(parts.uri.path()) {
        let req = Request::from_parts(parts, body);
        let resp = crate::proxy::handle(shared, req, &ns, &name, &sub).await.unwrap_or_else(|e| error(&e));
        return Ok(resp);
    }
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(error(&ApiError::bad_request(format!("reading the body: {e}")))),
    };
    let ctx = Ctx {
        shared,
        method: parts.method.clone(),
        path: parts.uri.path().to_string(),
        query: parse_query(parts.uri.query()),
        accept: header(ACCEPT).unwrap_or_default(),
        content_type: header(CONTENT_TYPE).unwrap_or_default(),
        user,
        body,
    };
    let resp = route(&ctx).unwrap_or_else(|e| error(&e));
    tracing::debug!(method = %parts.method, %uri, status = resp.status().as_u16(), "request");
    Ok(resp)
}

/// `/api/v1/namespaces/<ns>/pods/<name>/<log|exec|attach|portforward>`.
fn pod_stream(path: &str) -> Option<(String, String, String)> {
    match path.trim_matches('/').split('/').collect::<Vec<_>>().as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name, sub] if crate::proxy::is_proxied(sub) => {
            Some((ns.to_string(), name.to_string(), sub.to_string()))
        }
        _ => None,
    }
}

impl Ctx {
    /// The body as JSON, decoding protobuf bodies of the kinds kubectl's typed commands send.
    fn json(&self) -> Result<Value, ApiError> {
        if self.content_type.starts_with("application/vnd.kubernetes.protobuf") {
            return crate::protobuf::decode(&self.body).map_err(|e| {
                let mut err = ApiError::unsupported_media_type(&self.content_type);
                err.message = e.to_string();
                err
            });
        }
        parse_json_body(&self.body)
    }
}

struct Ctx {
    shared: Arc<Shared>,
    method: Method,
    path: String,
    query: HashMap<String, String>,
    accept: String,
    content_type: String,
    user: User,
    body: Bytes,
}

fn route(c: &Ctx) -> Result<Response<Body>, ApiError> {
    let path = c.path.trim_end_matches('/');
    let ok = |v: Value| Ok(respond(200, &v));
    match path {
        "/healthz" | "/livez" | "/readyz" => {
            let mut r = Response::new(full("ok"));
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
            return Ok(r);
        }
        "/version" => return ok(discovery::version()),
        "/api" => {
            let addr = c.shared.addr.lock().map(|a| a.clone()).unwrap_or_default();
            return ok(discovery::api_versions(&addr));
        }
        "/apis" => return ok(discovery::api_group_list()),
        "/openapi/v3" => return ok(discovery::openapi_v3_index()),
        _ => {}
    }
    if let Some(p) = path.strip_prefix("/openapi/v3/") {
        return discovery::openapi_v3_doc(p).map(|d| respond(200, &d)).ok_or_else(ApiError::path_not_found);
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", v] => {
            return discovery::api_resource_list("", v).map(|d| respond(200, &d)).ok_or_else(ApiError::path_not_found);
        }
        ["apis", g] => return discovery::api_group(g).map(|d| respond(200, &d)).ok_or_else(ApiError::path_not_found),
        ["apis", g, v] => {
            return discovery::api_resource_list(g, v).map(|d| respond(200, &d)).ok_or_else(ApiError::path_not_found);
        }
        _ => {}
    }
    let t = parse_target(path)?.ok_or_else(ApiError::path_not_found)?;
    if c.query.get("dryRun").is_some_and(|d| !d.is_empty()) {
        return Err(ApiError::bad_request("dryRun is not supported by the test apiserver"));
    }
    resource(c, &t)
}

fn watch_requested(c: &Ctx, t: &Target) -> bool {
    t.legacy_watch || matches!(c.query.get("watch").map(String::as_str), Some("true" | "1"))
}

fn part(t: &Target) -> Result<Part, ApiError> {
    match t.sub.as_deref() {
        None => Ok(Part::Main),
        Some("status") => Ok(Part::Status),
        Some("approval") => Ok(Part::Approval),
        Some(s) => Err(ApiError::method_not_allowed(format!("the subresource {s} does not support this verb"))),
    }
}

fn resource(c: &Ctx, t: &Target) -> Result<Response<Body>, ApiError> {
    let store = &c.shared.store;
    let def = t.def;
    let ns = t.namespace.as_deref();
    if def.namespaced && t.namespace.is_none() && (t.name.is_some() || c.method != Method::GET) {
        return Err(ApiError::path_not_found());
    }
    let wants = negotiate(&c.accept)?;
    let verb = match c.method {
        Method::GET if watch_requested(c, t) => "watch",
        Method::GET if t.name.is_none() => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    if t.sub.is_none() && !def.allows(verb) {
        return Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({verb} {})",
            def.resource
        )));
    }
    match (&c.method, &t.name) {
        (&Method::GET, None) | (&Method::GET, Some(_)) if watch_requested(c, t) => {
            let mut sel = selectors(&c.query, def)?;
            if let Some(n) = &t.name {
                sel.fields = FieldSelector::parse(&format!("metadata.name={n}"), def)?;
            }
            let rv = c.query.get("resourceVersion").map(String::as_str).unwrap_or("");
            let resource_version = match rv {
                "" | "0" => None,
                r => Some(
                    r.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resource version: {r}")))?,
                ),
            };
            let timeout = c
                .query
                .get("timeoutSeconds")
                .and_then(|s| s.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(c.shared.opts.default_watch_timeout);
            let format = match wants {
                Wants::Json => Format::Object,
                Wants::Table => Format::Table(IncludeObject::parse(c.query.get("includeObject").map(String::as_str))),
                Wants::Metadata => Format::Metadata,
            };
            let req = WatchRequest {
                def,
                namespace: t.namespace.clone(),
                selectors: sel,
                resource_version,
                send_initial_events: c.query.get("sendInitialEvents").map(String::as_str) == Some("true"),
                bookmarks: c.query.get("allowWatchBookmarks").map(String::as_str) == Some("true"),
                timeout,
                format,
            };
            let mut r = Response::new(watch::start(c.shared.clone(), req));
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(r)
        }
        (&Method::GET, None) => {
            let sel = selectors(&c.query, def)?;
            let list = api::list(store, def, ns, &sel);
            let rv = list.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(String::from);
            let items = list["items"].as_array().cloned().unwrap_or_default();
            Ok(respond(
                200,
                &match wants {
                    Wants::Json => list,
                    Wants::Table => table(
                        def,
                        &items,
                        rv.as_deref(),
                        IncludeObject::parse(c.query.get("includeObject").map(String::as_str)),
                        true,
                    ),
                    Wants::Metadata => json!({
                        "kind": "PartialObjectMetadataList",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": { "resourceVersion": rv },
                        "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
                    }),
                },
            ))
        }
        (&Method::GET, Some(name)) => {
            part(t)?;
            let obj = api::get(store, def, ns, name)?;
            Ok(respond(
                200,
                &match wants {
                    Wants::Json => obj,
                    Wants::Table => table(
                        def,
                        std::slice::from_ref(&obj),
                        None,
                        IncludeObject::parse(c.query.get("includeObject").map(String::as_str)),
                        true,
                    ),
                    Wants::Metadata => partial_metadata(&obj),
                },
            ))
        }
        (&Method::POST, None) if def.resource == "tokenreviews" => {
            Ok(respond(201, &crate::review::token_review(&c.shared, def, c.json()?)?))
        }
        (&Method::POST, None) if def.resource == "subjectaccessreviews" => {
            Ok(respond(201, &crate::review::access_review(&c.shared, def, c.json()?)?))
        }
        (&Method::POST, None) => {
            let obj = c.shared.create(def, ns, c.json()?, &c.user)?;
            Ok(respond(201, &obj))
        }
        (&Method::POST, Some(name)) if t.sub.as_deref() == Some("token") => {
            let ns = ns.ok_or_else(ApiError::path_not_found)?;
            let tr = crate::serviceaccount::create_token(store, &c.shared.signer, ns, name, &c.json()?)?;
            Ok(respond(201, &tr))
        }
        (&Method::POST, Some(name)) if t.sub.as_deref() == Some("eviction") => {
            let body = c.json()?;
            let opts = DeleteOptions::from_request(body.get("deleteOptions"), None)?;
            api::delete(store, def, ns, name, &opts)?;
            Ok(respond(
                201,
                &json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201 }),
            ))
        }
        (&Method::PUT, Some(name)) => {
            let p = part(t)?;
            Ok(respond(200, &api::update(store, def, p, ns, name, c.json()?)?))
        }
        (&Method::PATCH, Some(name)) => {
            let p = part(t)?;
            let kind = PatchType::from_content_type(&c.content_type)
                .ok_or_else(|| ApiError::unsupported_media_type(&c.content_type))?;
            Ok(respond(200, &api::patch(store, def, p, ns, name, kind, &c.json()?)?))
        }
        (&Method::DELETE, Some(name)) if t.sub.is_none() => {
            let body = if c.body.is_empty() { None } else { Some(c.json()?) };
            let opts =
                DeleteOptions::from_request(body.as_ref(), c.query.get("gracePeriodSeconds").map(String::as_str))?;
            let d = api::delete(store, def, ns, name, &opts)?;
            Ok(respond(200, &d.body))
        }
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({m})"
        ))),
    }
}
