//! An OTLP/gRPC trace receiver for the tracing tests: the OpenTelemetry Collector's `TraceService/Export` from the
//! OpenTelemetry project's own protocol bindings (`opentelemetry-proto`), on a loopback port, keeping every span it
//! is sent. No collector is packaged in this machine's registries (Debian, crates.io, PyPI, npm), so the test runs
//! the protocol's reference service definition rather than a collector binary.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<ResourceSpans>>>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().extend(req.into_inner().resource_spans);
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// A span as received, with its resource's attributes and its instrumentation scope.
#[derive(Clone, Debug)]
pub struct Received {
    pub resource: HashMap<String, String>,
    pub scope: String,
    pub span: Span,
}

impl Received {
    /// A string or integer attribute of the span, as text.
    pub fn attr(&self, key: &str) -> Option<String> {
        value(&self.span.attributes, key)
    }

    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }
}

fn value(attrs: &[KeyValue], key: &str) -> Option<String> {
    let v = attrs.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match v {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The running receiver; stops when dropped.
pub struct OtlpReceiver {
    pub addr: SocketAddr,
    sink: Sink,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let incoming = tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = incoming.local_addr().unwrap();
        let sink = Sink::default();
        let svc = TraceServiceServer::new(sink.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder().add_service(svc).serve_with_incoming(incoming).await;
        });
        Self { addr, sink, task }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        let mut out = vec![];
        for rs in self.sink.0.lock().unwrap().iter() {
            let resource: HashMap<String, String> = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .filter_map(|kv| Some((kv.key.clone(), value(std::slice::from_ref(kv), &kv.key)?)))
                .collect();
            for ss in &rs.scope_spans {
                let scope = ss.scope.as_ref().map(|s| s.name.clone()).unwrap_or_default();
                for span in &ss.spans {
                    out.push(Received { resource: resource.clone(), scope: scope.clone(), span: span.clone() });
                }
            }
        }
        out
    }
}
