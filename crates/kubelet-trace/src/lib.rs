//! The kubelet's OpenTelemetry tracing, as component-base `tracing` and the kubelet's uses of it:
//! `cmd/kubelet/app/server.go` (`newTracerProvider`), `staging/src/k8s.io/component-base/tracing/utils.go`
//! (`NewProvider`, `WrapperFor`), the `syncPod`/`syncTerminatingPod`/`syncTerminatedPod` spans of
//! `pkg/kubelet/kubelet.go`, the garbage collectors' spans, and the otelgrpc client handler of
//! `staging/src/k8s.io/cri-client/pkg/remote_runtime.go`.
//!
//! Contract: `main` calls [`init`] once, inside the tokio runtime and before any CRI or apiserver client is made,
//! when the configuration has a `tracing` block; without it every helper here is a no-op that allocates nothing
//! (upstream's no-op provider). Spans are sampled as upstream: a span with a parent follows the parent's decision,
//! a root span is sampled at `samplingRatePerMillion` / 1e6 (none when 0 or unset). Sampled spans go through a
//! batch processor to an OTLP/gRPC collector without TLS (upstream's `WithInsecure`); an unreachable collector
//! costs retries and dropped batches, never an error to the caller. The W3C `traceparent` of the current span goes
//! with every CRI call and apiserver request, sampled or not, so a runtime that traces sees its parent.
//!
//! The current span travels with a future: the caller wraps the work it traces in [`within`], and calls made
//! while that future is polled (on the same task) are its children.

mod export;
mod http;

use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

pub use export::{DEFAULT_ENDPOINT, Endpoint, Provider, TraceError, init};
pub use http::{HttpTrace, HttpTraceLayer};

/// The kubelet's own instrumentation scope (`pkg/kubelet/kubelet.go`'s `instrumentationScope`).
pub const KUBELET_SCOPE: &str = "k8s.io/kubernetes/pkg/kubelet";
/// The container runtime manager's scope (`Containers/GarbageCollect`).
pub const KUBERUNTIME_SCOPE: &str = "k8s.io/kubernetes/pkg/kubelet/kuberuntime";
/// The image manager's scope (`Images/GarbageCollect`).
pub const IMAGES_SCOPE: &str = "k8s.io/kubernetes/pkg/kubelet/images";
/// The scope of the CRI client's spans (upstream's otelgrpc client handler).
const GRPC_SCOPE: &str = "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether a `tracing` block configured a provider.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A span in progress. Its children start under [`Self::context`] (or inside [`within`]); it ends on
/// [`Self::end`] or when dropped.
#[derive(Debug, Default)]
pub struct SpanGuard(Option<Context>);

impl SpanGuard {
    /// The context that makes this span the parent; `None` when tracing is off.
    pub fn context(&self) -> Option<&Context> {
        self.0.as_ref()
    }

    /// Records `error` as upstream's `RecordError` and `SetStatus(codes.Error, ...)` do.
    pub fn fail(&self, error: &str) {
        if let Some(cx) = &self.0 {
            let span = cx.span();
            span.add_event("exception", vec![KeyValue::new("exception.message", error.to_string())]);
            span.set_status(Status::error(error.to_string()));
        }
    }

    /// Ends the span now.
    pub fn end(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        if let Some(cx) = self.0.take() {
            cx.span().end();
        }
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        self.finish();
    }
}

fn start(scope: &'static str, name: impl Into<Cow<'static, str>>, kind: SpanKind, attrs: Vec<KeyValue>) -> Context {
    let tracer = opentelemetry::global::tracer(scope);
    let parent = Context::current();
    let span = tracer.span_builder(name).with_kind(kind).with_attributes(attrs).start_with_context(&tracer, &parent);
    parent.with_span(span)
}

/// A pod worker's root span (`syncPod`, `syncTerminatingPod`, `syncTerminatedPod`) with upstream's attributes;
/// `update_type` (`create`, `update`, `sync`, `kill`) only for `syncPod`.
pub fn pod_span(name: &'static str, namespace: &str, pod: &str, uid: &str, update_type: Option<&str>) -> SpanGuard {
    if !enabled() {
        return SpanGuard(None);
    }
    let mut attrs = vec![
        KeyValue::new("k8s.pod.uid", uid.to_string()),
        KeyValue::new("k8s.pod", format!("{namespace}/{pod}")),
        KeyValue::new("k8s.pod.name", pod.to_string()),
    ];
    if let Some(t) = update_type {
        attrs.push(KeyValue::new("k8s.pod.update_type", t.to_string()));
    }
    attrs.push(KeyValue::new("k8s.namespace.name", namespace.to_string()));
    // Upstream starts these from a context without a span: each pod sync is a trace of its own.
    let tracer = opentelemetry::global::tracer(KUBELET_SCOPE);
    let span = tracer.span_builder(name).with_kind(SpanKind::Internal).with_attributes(attrs).start(&tracer);
    SpanGuard(Some(Context::new().with_span(span)))
}

/// An internal span of `scope` under the current one (the garbage collectors' `Containers/GarbageCollect`,
/// `Images/GarbageCollect`).
pub fn internal_span(scope: &'static str, name: &'static str) -> SpanGuard {
    if !enabled() {
        return SpanGuard(None);
    }
    SpanGuard(Some(start(scope, name, SpanKind::Internal, Vec::new())))
}

/// Runs `fut` with `span` as the current span, so that the calls it makes are its children.
pub fn within<F: Future>(span: &SpanGuard, fut: F) -> impl Future<Output = F::Output> {
    use futures::FutureExt as _;
    use opentelemetry::context::FutureExt as _;
    match span.context() {
        Some(cx) => fut.with_context(cx.clone()).left_future(),
        None => fut.right_future(),
    }
}

/// A gRPC client call's span, as otelgrpc's client handler makes it: `<service>/<method>`, kind client,
/// `rpc.system`, `rpc.service`, `rpc.method`, the message events, and `rpc.grpc.status_code` at the end.
#[derive(Debug, Default)]
pub struct GrpcCall(SpanGuard);

impl GrpcCall {
    /// A call of `service` (`runtime.v1.RuntimeService`) `method` under the current span.
    pub fn start(service: &'static str, method: &'static str) -> Self {
        if !enabled() {
            return Self::default();
        }
        let attrs = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", service),
            KeyValue::new("rpc.method", method),
        ];
        let cx = start(GRPC_SCOPE, format!("{service}/{method}"), SpanKind::Client, attrs);
        cx.span().add_event("message", vec![KeyValue::new("message.type", "SENT"), KeyValue::new("message.id", 1)]);
        Self(SpanGuard(Some(cx)))
    }

    /// The span to make current while the call is in flight (its `traceparent` goes with the request).
    pub fn span(&self) -> &SpanGuard {
        &self.0
    }

    /// Ends the call with its gRPC status code (0 is OK) and message.
    pub fn finish(self, code: i32, message: &str) {
        if let Some(cx) = self.0.context() {
            let span = cx.span();
            if code == 0 {
                span.add_event(
                    "message",
                    vec![KeyValue::new("message.type", "RECEIVED"), KeyValue::new("message.id", 1)],
                );
            } else {
                span.set_status(Status::error(message.to_string()));
            }
            span.set_attribute(KeyValue::new("rpc.grpc.status_code", i64::from(code)));
        }
        self.0.end();
    }
}

/// A tonic interceptor that puts the current span's W3C trace context into each request's metadata, as
/// otelgrpc's propagator does (nothing when there is no span, or tracing is off).
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcInjector;

impl tonic::service::Interceptor for GrpcInjector {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if enabled() {
            let cx = Context::current();
            inject(&cx, |k, v| {
                if let (Ok(k), Ok(v)) = (
                    tonic::metadata::MetadataKey::from_bytes(k.as_bytes()),
                    tonic::metadata::MetadataValue::try_from(v.as_str()),
                ) {
                    req.metadata_mut().insert(k, v);
                }
            });
        }
        Ok(req)
    }
}

/// Writes `cx`'s `traceparent` (and `tracestate`) with `set`, when its span context is valid.
fn inject(cx: &Context, mut set: impl FnMut(&str, String)) {
    struct Setter<'a>(&'a mut dyn FnMut(&str, String));
    impl opentelemetry::propagation::Injector for Setter<'_> {
        fn set(&mut self, key: &str, value: String) {
            (self.0)(key, value)
        }
    }
    use opentelemetry::propagation::TextMapPropagator as _;
    opentelemetry_sdk::propagation::TraceContextPropagator::new().inject_context(cx, &mut Setter(&mut set));
}

#[cfg(test)]
mod tests;
