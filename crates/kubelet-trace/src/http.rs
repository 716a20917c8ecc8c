//! Spans of the apiserver requests, as `component-base/tracing.WrapperFor` (otelhttp's client transport)
//! makes them: `HTTP <METHOD>`, kind client, `http.method`, `http.url`, `net.peer.name`, `net.peer.port` and
//! `http.status_code`, an error status for a failed request or a status of 400 and up; the request carries the
//! span's `traceparent`.
//!
//! The layer goes into the apiserver client's service stack. kube's client queues requests to a worker task, so
//! the span is started when the response future is first polled: that is on the caller's task, where the caller's
//! span is current. A span ends with the response's headers (a watch's span does not last as long as its stream).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _};
use opentelemetry::{Context, KeyValue};

/// otelhttp's instrumentation scope.
const HTTP_SCOPE: &str = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp";

/// Adds [`HttpTrace`] to a client's stack.
#[derive(Clone, Debug, Default)]
pub struct HttpTraceLayer {
    base: Option<http::Uri>,
}

impl HttpTraceLayer {
    /// For a stack whose requests have only a path here: the server's URL completes the span's `http.url`.
    pub fn with_base(base: http::Uri) -> Self {
        Self { base: Some(base) }
    }
}

impl<S> tower::Layer<S> for HttpTraceLayer {
    type Service = HttpTrace<S>;
    fn layer(&self, inner: S) -> HttpTrace<S> {
        HttpTrace { inner, base: self.base.clone() }
    }
}

/// A client service whose requests are traced when tracing is on.
#[derive(Clone, Debug)]
pub struct HttpTrace<S> {
    inner: S,
    base: Option<http::Uri>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower::Service<http::Request<B>> for HttpTrace<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if !crate::enabled() {
            return Box::pin(self.inner.call(req));
        }
        // The service that was made ready serves this request; its clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let base = self.base.clone();
        Box::pin(async move {
            let cx = request_span(&req, base.as_ref());
            crate::inject(&cx, |k, v| {
                if let (Ok(k), Ok(v)) = (http::HeaderName::try_from(k), http::HeaderValue::try_from(v)) {
                    req.headers_mut().insert(k, v);
                }
            });
            let res = inner.call(req).await;
            let span = cx.span();
            match &res {
                Ok(resp) => {
                    let code = resp.status().as_u16();
                    span.set_attribute(KeyValue::new("http.status_code", i64::from(code)));
                    if code >= 400 {
                        span.set_status(Status::error(""));
                    }
                }
                Err(e) => {
                    span.add_event("exception", vec![KeyValue::new("exception.message", e.to_string())]);
                    span.set_status(Status::error(e.to_string()));
                }
            }
            span.end();
            res
        })
    }
}

fn request_span<B>(req: &http::Request<B>, base: Option<&http::Uri>) -> Context {
    let uri = match (req.uri().host(), base) {
        (None, Some(base)) => {
            let mut parts = base.clone().into_parts();
            let prefix = parts.path_and_query.as_ref().map_or("", |p| p.path().trim_end_matches('/'));
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            parts.path_and_query = format!("{prefix}{path}").parse().ok();
            http::Uri::from_parts(parts).unwrap_or_else(|_| req.uri().clone())
        }
        _ => req.uri().clone(),
    };
    let uri = &uri;
    let mut attrs = vec![KeyValue::new("http.method", req.method().as_str().to_string())];
    // The URL without credentials (a kubeconfig's user info never reaches a span).
    let url = match (uri.scheme_str(), uri.host()) {
        (Some(scheme), Some(host)) => {
            let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{scheme}://{host}{port}{}", path_and_query(uri))
        }
        _ => path_and_query(uri).to_string(),
    };
    attrs.push(KeyValue::new("http.url", url));
    if let Some(host) = uri.host() {
        attrs.push(KeyValue::new("net.peer.name", host.to_string()));
    }
    if let Some(port) = uri.port_u16() {
        attrs.push(KeyValue::new("net.peer.port", i64::from(port)));
    }
    crate::start(HTTP_SCOPE, format!("HTTP {}", req.method()), SpanKind::Client, attrs)
}

/// The path and query as Go's `url.String` writes them: no `?` for an empty query.
fn path_and_query(uri: &http::Uri) -> &str {
    uri.path_and_query().map_or("/", |p| p.as_str().strip_suffix('?').unwrap_or(p.as_str()))
}
