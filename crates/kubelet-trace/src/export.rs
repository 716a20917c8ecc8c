//! The tracer provider (`component-base/tracing.NewProvider`): an OTLP/gRPC exporter without TLS to the
//! configured collector, a batch span processor, the `ParentBased` sampler at the configured rate, and the
//! resource upstream's kubelet gives (`service.name` `kubelet`, `host.name`).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

/// Why tracing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The endpoint is not a target rkubelet can dial.
    #[error("invalid configuration: tracing.endpoint: {endpoint:?}: {message}")]
    Endpoint { endpoint: String, message: String },
    /// The exporter could not be built.
    #[error("could not configure tracer provider: {0}")]
    Exporter(String),
}

/// Where the collector listens, from a gRPC target as grpc-go parses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port` (or `dns:///host:port`).
    Tcp(String),
    /// `unix:///abs/path` or `unix:path`.
    Unix(PathBuf),
    /// `unix-abstract:name`.
    Abstract(String),
}

/// upstream's default (`otlptracegrpc`'s `localhost:4317`).
pub const DEFAULT_ENDPOINT: &str = "localhost:4317";

impl Endpoint {
    /// Parses a gRPC target; errors name what is wrong.
    pub fn parse(target: &str) -> Result<Self, String> {
        if let Some(rest) = target.strip_prefix("unix-abstract:") {
            let name = rest.strip_prefix("//").unwrap_or(rest);
            if name.is_empty() {
                return Err("an abstract socket needs a name (unix-abstract:NAME)".into());
            }
            return Ok(Self::Abstract(name.to_string()));
        }
        if let Some(rest) = target.strip_prefix("unix:") {
            // `unix:///abs` (an empty authority) or `unix:path`, as grpc-go's unix resolver.
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err("a unix socket target needs a path (unix:///path)".into());
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        let host_port = match target.strip_prefix("dns:") {
            // dns:///host:port or dns://authority/host:port
            Some(rest) => rest.strip_prefix("//").map_or(rest, |r| r.split_once('/').map_or(r, |(_, hp)| hp)),
            None => target,
        };
        // grpc-go's dns resolver dials port 443 when the target names none.
        let Some((host, port)) = host_port.rsplit_once(':') else {
            if host_port.is_empty() {
                return Err("no host: use host:port, unix:///path or unix-abstract:name".into());
            }
            return Ok(Self::Tcp(format!("{host_port}:443")));
        };
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err("use host:port with a port from 1 to 65535".into());
        }
        Ok(Self::Tcp(host_port.to_string()))
    }

    fn channel(&self) -> Result<tonic::transport::Channel, String> {
        match self {
            Self::Tcp(hp) => {
                let ep = tonic::transport::Endpoint::from_shared(format!("http://{hp}")).map_err(|e| e.to_string())?;
                Ok(ep.connect_timeout(Duration::from_secs(5)).connect_lazy())
            }
            Self::Unix(path) => {
                let path = path.clone();
                Ok(unix_endpoint().connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(&path).await?)) }
                })))
            }
            Self::Abstract(name) => {
                let name = name.clone();
                Ok(unix_endpoint().connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                    let name = name.clone();
                    async move {
                        use std::os::linux::net::SocketAddrExt as _;
                        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
                        // Connecting to an abstract socket does not block on the file system.
                        let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
                        s.set_nonblocking(true)?;
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::from_std(s)?))
                    }
                })))
            }
        }
    }
}

fn unix_endpoint() -> tonic::transport::Endpoint {
    tonic::transport::Endpoint::from_static("http://localhost").connect_timeout(Duration::from_secs(5))
}

/// The configured provider; spans still queued are exported by [`Provider::shutdown`].
#[derive(Debug)]
pub struct Provider(SdkTracerProvider);

impl Provider {
    /// Exports what is queued and stops the exporter (blocks up to the exporter's timeout).
    pub fn shutdown(&self) {
        let _ = self.0.shutdown();
    }
}

/// Sets the process's tracer provider from a `tracing` block: `endpoint` (default `localhost:4317`) and
/// `samplingRatePerMillion`. Must run inside the tokio runtime; the connection is made lazily, so a collector
/// that is not up yet is not an error.
pub fn init(
    endpoint: Option<&str>,
    sampling_rate_per_million: Option<i32>,
    host_name: &str,
) -> Result<Provider, TraceError> {
    let target = endpoint.unwrap_or(DEFAULT_ENDPOINT);
    let bad = |message: String| TraceError::Endpoint { endpoint: target.to_string(), message };
    let channel = Endpoint::parse(target).map_err(bad)?.channel().map_err(bad)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_channel(channel)
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_sampler(sampler(sampling_rate_per_million))
        .with_resource(
            opentelemetry_sdk::Resource::builder_empty()
                .with_attributes([
                    KeyValue::new("service.name", "kubelet"),
                    KeyValue::new("host.name", host_name.to_string()),
                ])
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    crate::ENABLED.store(true, Ordering::Relaxed);
    Ok(Provider(provider))
}

/// `ParentBased(TraceIDRatioBased(rate / 1e6))`, or `ParentBased(NeverSample)` when the rate is 0 or unset.
pub(crate) fn sampler(rate_per_million: Option<i32>) -> Sampler {
    let root = match rate_per_million {
        Some(r) if r > 0 => Sampler::TraceIdRatioBased(f64::from(r) / 1_000_000.0),
        _ => Sampler::AlwaysOff,
    };
    Sampler::ParentBased(Box::new(root))
}
