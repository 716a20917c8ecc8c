use std::sync::OnceLock;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, SamplingDecision, SdkTracerProvider, ShouldSample as _, SpanData,
};

use super::*;

/// One process-wide provider (tracing's provider is global), recording every span in memory; tests tell theirs
/// apart by trace id.
fn spans() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_sampler(export::sampler(Some(1_000_000)))
            .with_simple_exporter(exporter.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider);
        ENABLED.store(true, std::sync::atomic::Ordering::Relaxed);
        exporter
    })
}

fn of_trace(trace_id: opentelemetry::trace::TraceId) -> Vec<SpanData> {
    spans().get_finished_spans().unwrap().into_iter().filter(|s| s.span_context.trace_id() == trace_id).collect()
}

fn attr<'a>(s: &'a SpanData, key: &str) -> Option<&'a Value> {
    s.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

#[tokio::test(start_paused = true)]
async fn a_cri_call_inside_a_pod_sync_is_its_child_and_carries_its_traceparent() {
    spans();
    let pod = pod_span("syncPod", "default", "web-0", "uid-1", Some("create"));
    let trace_id = pod.context().unwrap().span().span_context().trace_id();
    let seen = within(&pod, async {
        let call = GrpcCall::start("runtime.v1.RuntimeService", "RunPodSandbox");
        let req = within(call.span(), async {
            tonic::service::Interceptor::call(&mut GrpcInjector, tonic::Request::new(())).unwrap()
        })
        .await;
        let span_id = call.span().context().unwrap().span().span_context().span_id();
        call.finish(0, "");
        (req.metadata().get("traceparent").unwrap().to_str().unwrap().to_string(), span_id)
    })
    .await;
    pod.end();

    let got = of_trace(trace_id);
    assert_eq!(got.len(), 2, "{got:?}");
    let root = got.iter().find(|s| s.name == "syncPod").unwrap();
    let cri = got.iter().find(|s| s.name == "runtime.v1.RuntimeService/RunPodSandbox").unwrap();
    assert_eq!(root.parent_span_id, opentelemetry::trace::SpanId::INVALID, "a pod sync is a trace of its own");
    assert_eq!(cri.parent_span_id, root.span_context.span_id());
    assert_eq!(cri.span_kind, SpanKind::Client);
    assert_eq!(root.instrumentation_scope.name(), KUBELET_SCOPE);
    for (k, v) in [
        ("k8s.pod.uid", "uid-1"),
        ("k8s.pod", "default/web-0"),
        ("k8s.pod.name", "web-0"),
        ("k8s.pod.update_type", "create"),
        ("k8s.namespace.name", "default"),
    ] {
        assert_eq!(attr(root, k), Some(&Value::from(v.to_string())), "{k}");
    }
    assert_eq!(attr(cri, "rpc.system"), Some(&Value::from("grpc")));
    assert_eq!(attr(cri, "rpc.service"), Some(&Value::from("runtime.v1.RuntimeService")));
    assert_eq!(attr(cri, "rpc.method"), Some(&Value::from("RunPodSandbox")));
    assert_eq!(attr(cri, "rpc.grpc.status_code"), Some(&Value::I64(0)));
    assert_eq!(cri.status, Status::Unset);
    let (traceparent, span_id) = seen;
    assert_eq!(traceparent, format!("00-{trace_id}-{span_id}-01"), "W3C traceparent of the CRI span, sampled");
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_and_a_failed_sync_carry_an_error_status() {
    spans();
    let pod = pod_span("syncTerminatingPod", "ns", "p", "uid-2", None);
    let trace_id = pod.context().unwrap().span().span_context().trace_id();
    within(&pod, async {
        GrpcCall::start("runtime.v1.RuntimeService", "StopPodSandbox").finish(14, "connection refused");
    })
    .await;
    pod.fail("stop pod sandbox: unavailable");
    pod.end();
    let got = of_trace(trace_id);
    let root = got.iter().find(|s| s.name == "syncTerminatingPod").unwrap();
    assert_eq!(attr(root, "k8s.pod.update_type"), None, "only syncPod has an update type");
    assert_eq!(root.status, Status::error("stop pod sandbox: unavailable"));
    let cri = got.iter().find(|s| s.name == "runtime.v1.RuntimeService/StopPodSandbox").unwrap();
    assert_eq!(cri.status, Status::error("connection refused"));
    assert_eq!(attr(cri, "rpc.grpc.status_code"), Some(&Value::I64(14)));
}

#[tokio::test(start_paused = true)]
async fn apiserver_requests_get_http_client_spans_and_the_header() {
    use tower::{Layer as _, Service as _, ServiceExt as _};
    spans();
    let inner = tower::service_fn(|req: ::http::Request<()>| async move {
        let tp = req.headers().get("traceparent").map(|v| v.to_str().unwrap().to_string());
        Ok::<_, std::convert::Infallible>(::http::Response::builder().status(404).body(tp).unwrap())
    });
    let mut svc = HttpTraceLayer::default().layer(inner);
    let pod = pod_span("syncPod", "default", "web-0", "uid-3", Some("update"));
    let trace_id = pod.context().unwrap().span().span_context().trace_id();
    let req = ::http::Request::get("https://10.0.0.1:6443/api/v1/namespaces/default/pods/web-0").body(()).unwrap();
    let resp = within(&pod, async { svc.ready().await.unwrap().call(req).await.unwrap() }).await;
    pod.end();
    let got = of_trace(trace_id);
    let span = got.iter().find(|s| s.name == "HTTP GET").unwrap();
    let traceparent = resp.into_body().expect("the request carried a traceparent");
    assert!(traceparent.contains(&span.span_context.span_id().to_string()), "{traceparent}");
    assert_eq!(span.span_kind, SpanKind::Client);
    assert_eq!(attr(span, "http.method"), Some(&Value::from("GET".to_string())));
    assert_eq!(
        attr(span, "http.url"),
        Some(&Value::from("https://10.0.0.1:6443/api/v1/namespaces/default/pods/web-0".to_string()))
    );
    assert_eq!(attr(span, "net.peer.name"), Some(&Value::from("10.0.0.1".to_string())));
    assert_eq!(attr(span, "net.peer.port"), Some(&Value::I64(6443)));
    assert_eq!(attr(span, "http.status_code"), Some(&Value::I64(404)));
    assert!(matches!(span.status, Status::Error { .. }));
}

#[test]
fn sampling_follows_the_parent_and_the_rate_for_roots() {
    let root = |rate: Option<i32>| {
        let r = export::sampler(rate).should_sample(
            None,
            opentelemetry::trace::TraceId::from(u128::MAX / 3),
            "syncPod",
            &SpanKind::Internal,
            &[],
            &[],
        );
        r.decision
    };
    assert_eq!(root(None), SamplingDecision::Drop, "unset samples nothing");
    assert_eq!(root(Some(0)), SamplingDecision::Drop);
    assert_eq!(root(Some(1_000_000)), SamplingDecision::RecordAndSample);
    // A sampled parent is followed whatever the rate.
    let parent = opentelemetry::trace::SpanContext::new(
        opentelemetry::trace::TraceId::from(7u128),
        opentelemetry::trace::SpanId::from(9u64),
        opentelemetry::trace::TraceFlags::SAMPLED,
        true,
        Default::default(),
    );
    let cx = Context::new().with_remote_span_context(parent);
    let r = export::sampler(None).should_sample(
        Some(&cx),
        opentelemetry::trace::TraceId::from(7u128),
        "x",
        &SpanKind::Client,
        &[KeyValue::new("a", 1)],
        &[],
    );
    assert_eq!(r.decision, SamplingDecision::RecordAndSample);
}

#[test]
fn endpoints_parse_as_grpc_targets() {
    assert_eq!(Endpoint::parse("localhost:4317"), Ok(Endpoint::Tcp("localhost:4317".into())));
    assert_eq!(Endpoint::parse("dns:///collector:4317"), Ok(Endpoint::Tcp("collector:4317".into())));
    assert_eq!(Endpoint::parse("unix:///run/otel.sock"), Ok(Endpoint::Unix("/run/otel.sock".into())));
    assert_eq!(Endpoint::parse("unix:otel.sock"), Ok(Endpoint::Unix("otel.sock".into())));
    assert_eq!(Endpoint::parse("unix-abstract:otel"), Ok(Endpoint::Abstract("otel".into())));
    assert_eq!(Endpoint::parse("collector"), Ok(Endpoint::Tcp("collector:443".into())), "grpc-go's default port");
    assert!(Endpoint::parse("localhost:99999").is_err());
}

#[tokio::test(start_paused = true)]
async fn a_bad_endpoint_stops_start_up_naming_the_field() {
    let e = init(Some("collector:http"), Some(1), "node-a").unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid configuration: tracing.endpoint: \"collector:http\": use host:port with a port from 1 to 65535"
    );
}
