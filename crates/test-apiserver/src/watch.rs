//! Watches as `apiserver/pkg/endpoints/handlers/watch.go` and the cacher serve them: a chunked
//! stream of newline-delimited `{"type":..,"object":..}` events for one resource (optionally one
//! namespace) honouring label and field selectors (an object that stops matching is sent as DELETED,
//! one that starts matching as ADDED), resumed from a resourceVersion out of the event window (older
//! ones end with an ERROR event carrying a 410 `Expired` Status), `resourceVersion` "" / "0" starting
//! with the current state as ADDED events, `sendInitialEvents` with the `k8s.io/initial-events-end`
//! bookmark, periodic bookmarks, `timeoutSeconds`, and Table-formatted events for kubectl.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Bytes, Frame};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::resources::ResourceDef;
use crate::selector::Selectors;
use crate::server::Shared;
use crate::store::{Event, EventType};
use crate::table::{IncludeObject, partial_metadata, table};

/// How watch event objects are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The objects themselves.
    Object,
    /// One-row Tables.
    Table(IncludeObject),
    /// `PartialObjectMetadata`.
    Metadata,
}

/// The parameters of a watch request.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The resource.
    pub def: &'static ResourceDef,
    /// The namespace, or all.
    pub namespace: Option<String>,
    /// Selectors.
    pub selectors: Selectors,
    /// `resourceVersion`; `None` for "" and "0".
    pub resource_version: Option<u64>,
    /// `sendInitialEvents=true`.
    pub send_initial_events: bool,
    /// `allowWatchBookmarks=true`.
    pub bookmarks: bool,
    /// How long the stream lasts.
    pub timeout: Duration,
    /// Encoding.
    pub format: Format,
}

/// A response body fed by a channel (sent with chunked transfer encoding).
pub struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    /// A body of what `rx` receives, ending when its senders are gone.
    pub fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        ChannelBody { rx }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({ "type": kind, "object": object })).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

fn encode(req: &WatchRequest, obj: &Value) -> Value {
    match req.format {
        Format::Object => obj.clone(),
        Format::Metadata => partial_metadata(obj),
        Format::Table(include) => table(req.def, std::slice::from_ref(obj), None, include, true),
    }
}

fn bookmark(req: &WatchRequest, rv: u64, initial_end: bool) -> Value {
    let mut meta = json!({ "resourceVersion": rv.to_string() });
    if initial_end {
        meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    json!({ "kind": req.def.kind, "apiVersion": req.def.api_version(), "metadata": meta })
}

fn in_scope(req: &WatchRequest, obj: &Value) -> bool {
    match &req.namespace {
        Some(ns) => obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns.as_str()),
        None => true,
    }
}

/// The event a watcher sees for a store event, after selectors.
fn translate(req: &WatchRequest, ev: &Event) -> Option<(&'static str, Value)> {
    if ev.resource != req.def.key() || !in_scope(req, &ev.object) {
        return None;
    }
    let now = req.selectors.matches(&ev.object);
    let before = ev.prev.as_ref().is_some_and(|p| req.selectors.matches(p));
    let kind = match ev.kind {
        EventType::Added if now => EventType::Added,
        EventType::Modified if now && before => EventType::Modified,
        EventType::Modified if now => EventType::Added,
        EventType::Modified if before => EventType::Deleted,
        EventType::Deleted if before || now => EventType::Deleted,
        _ => return None,
    };
    Some((kind.as_str(), encode(req, &ev.object)))
}

/// Starts the stream of a watch; the body ends at the timeout, when the client goes away, or when the
/// server closes watches.
pub fn start(shared: Arc<Shared>, req: WatchRequest) -> BoxBody<Bytes, Infallible> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    tokio::spawn(run(shared, req, tx));
    BoxBody::new(ChannelBody { rx })
}

async fn run(shared: Arc<Shared>, req: WatchRequest, tx: mpsc::Sender<Bytes>) {
    let store = &shared.store;
    let mut changed = store.subscribe();
    let mut closing = shared.close_watches.subscribe();
    changed.borrow_and_update();
    closing.borrow_and_update();
    let initial = req.send_initial_events || req.resource_version.is_none();
    let mut last = match req.resource_version {
        Some(rv) if !req.send_initial_events => rv,
        _ => 0,
    };
    if initial {
        let ns = req.namespace.as_deref();
        let (items, rv) = store.list(req.def, if req.def.namespaced { ns } else { None }, &req.selectors);
        for o in &items {
            if tx.send(line("ADDED", encode(&req, o))).await.is_err() {
                return;
            }
        }
        last = rv;
        if req.send_initial_events && req.bookmarks {
            let _ = tx.send(line("BOOKMARK", bookmark(&req, rv, true))).await;
        }
    }
    let deadline = tokio::time::sleep(req.timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(shared.opts.bookmark_interval);
    tick.tick().await;
    loop {
        changed.borrow_and_update();
        match store.events_since(last) {
            Err(e) => {
                let _ = tx.send(line("ERROR", e.status())).await;
                return;
            }
            Ok(evs) => {
                for ev in evs {
                    last = ev.rv;
                    if let Some((kind, obj)) = translate(&req, &ev)
                        && tx.send(line(kind, obj)).await.is_err()
                    {
                        return;
                    }
                }
            }
        }
        tokio::select! {
            r = changed.changed() => if r.is_err() { return },
            _ = &mut deadline => return,
            _ = closing.changed() => return,
            _ = tx.closed() => return,
            _ = tick.tick(), if req.bookmarks && req.format == Format::Object => {
                if tx.send(line("BOOKMARK", bookmark(&req, last, false))).await.is_err() {
                    return;
                }
            }
        }
    }
}
