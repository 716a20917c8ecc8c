//! The probe handlers (`pkg/probe/exec`, `pkg/probe/http`, `pkg/probe/tcp`, `pkg/probe/grpc`, and
//! `pkg/kubelet/prober/prober.go` runProbe): one check of a container, with upstream's outcome and output text.
//! Pure of state; the lifecycle hooks of the runtime manager use the same exec and HTTP paths.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, GRPCAction, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubelet_cri::{CriError, RuntimeService};

use crate::http::{self, HttpTarget};

/// At most this much output of an exec probe is kept (`maxReadLength`).
const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// The outcome of one check (`probe.Result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Passed.
    Success,
    /// Passed, with something worth an event (a redirect not followed).
    Warning,
    /// Failed.
    Failure,
    /// Could not tell.
    Unknown,
}

/// One check's outcome and its output (the text of the `Unhealthy` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeOutput {
    /// Outcome.
    pub outcome: Outcome,
    /// Output or failure message.
    pub output: String,
}

impl ProbeOutput {
    fn new(outcome: Outcome, output: impl Into<String>) -> Self {
        Self { outcome, output: output.into() }
    }
}

/// A probe that could not be run at all (the runtime failed): the result is thrown away and the probe retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeError(pub String);

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Resolves a probe or hook port, by number or by the name of a container port (`ResolveContainerPort`).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let n: i64 = match port {
        IntOrString::Int(n) => *n as i64,
        IntOrString::String(name) => {
            let by_name = container.ports.iter().flatten().find(|p| p.name.as_deref() == Some(name.as_str()));
            match by_name {
                Some(p) => p.container_port as i64,
                None => name.parse::<i64>().map_err(|_| format!("port {name} not found"))?,
            }
        }
    };
    if n > 0 && n < 65536 { Ok(n as u16) } else { Err(format!("invalid port number: {n}")) }
}

/// `$(VAR)` in an exec command expanded with the container's literal env values only
/// (`ExpandContainerCommandOnlyStatic`): probes and hooks do not see references resolved at container creation.
pub fn expand_static(cmd: &[String], container: &Container) -> Vec<String> {
    let vars: HashMap<&str, &str> = container
        .env
        .iter()
        .flatten()
        .filter(|e| e.value_from.is_none())
        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap_or("")))
        .collect();
    cmd.iter().map(|c| expand(c, &|name| vars.get(name).map(|v| v.to_string()))).collect()
}

/// `$(VAR)` expansion with `$$` escaping (`third_party/forked/golang/expansion`): an unknown name stays as written.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            out.push_str(&input[last..i]);
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                }
                b'(' => match input[i + 2..].find(')') {
                    Some(end) => {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                    }
                    None => {
                        // An incomplete reference is kept as written; scanning goes on after `$(`.
                        out.push_str("$(");
                        i += 2;
                    }
                },
                _ => {
                    // Not an expression: the `$` stays, and what follows is scanned as usual.
                    out.push('$');
                    i += 1;
                }
            }
            last = i;
        } else {
            i += 1;
        }
    }
    if last < b.len() {
        out.push_str(&input[last..]);
    }
    out
}

/// Runs `cmd` in the container (`ExecSync`): exit 0 succeeds; another exit code fails with the combined output;
/// a command that outlives `timeout` fails with `command "..." timed out`. A runtime error is a [`ProbeError`].
pub async fn exec(
    runtime: &dyn RuntimeService,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> Result<ProbeOutput, ProbeError> {
    let joined = cmd.join(" ");
    match runtime.exec_sync(container_id, cmd, timeout).await {
        Ok(o) => {
            let mut data = o.stdout;
            data.extend_from_slice(&o.stderr);
            data.truncate(MAX_EXEC_OUTPUT);
            let text = String::from_utf8_lossy(&data).into_owned();
            Ok(ProbeOutput::new(if o.exit_code == 0 { Outcome::Success } else { Outcome::Failure }, text))
        }
        Err(CriError::DeadlineExceeded { .. }) => {
            Ok(ProbeOutput::new(Outcome::Failure, format!("command {joined:?} timed out")))
        }
        Err(e) if e.message().contains("timeout") && e.message().contains("exceeded") => {
            Ok(ProbeOutput::new(Outcome::Failure, format!("command {joined:?} timed out")))
        }
        Err(e) => Err(ProbeError(e.to_string())),
    }
}

/// The target of an `httpGet` for a pod at `pod_ip`.
pub fn http_target(action: &HTTPGetAction, pod_ip: &str, container: &Container) -> Result<HttpTarget, String> {
    let port = resolve_port(&action.port, container)?;
    let host = action.host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
    Ok(HttpTarget {
        https: action.scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS")),
        host,
        port,
        path: http::normalize_path(action.path.as_deref().unwrap_or("")),
        headers: action.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
    })
}

/// An HTTP probe (`DoHTTPProbe`): 2xx succeeds, a 3xx it did not follow succeeds with a warning, anything else
/// fails with `HTTP probe failed with statuscode: N` (never the body, as upstream).
pub async fn http_probe(target: &HttpTarget, timeout: Duration) -> ProbeOutput {
    match http::get(target, crate::USER_AGENT, timeout).await {
        Err(e) => ProbeOutput::new(Outcome::Failure, e),
        Ok(r) if (200..300).contains(&r.status) => ProbeOutput::new(Outcome::Success, r.body),
        Ok(r) if (300..400).contains(&r.status) => {
            ProbeOutput::new(Outcome::Warning, format!("Probe terminated redirects, Response body: {}", r.body))
        }
        Ok(r) => ProbeOutput::new(Outcome::Failure, format!("HTTP probe failed with statuscode: {}", r.status)),
    }
}

/// A TCP probe: the connection opens within the timeout.
pub async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> ProbeOutput {
    let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr.as_str())).await {
        Ok(Ok(_)) => ProbeOutput::new(Outcome::Success, ""),
        Ok(Err(e)) => ProbeOutput::new(Outcome::Failure, format!("dial tcp {addr}: {e}")),
        Err(_) => ProbeOutput::new(Outcome::Failure, format!("dial tcp {addr}: i/o timeout")),
    }
}

use kubelet_proto::health::v1::health_check_response::ServingStatus;
use kubelet_proto::health::v1::{HealthCheckRequest, health_client::HealthClient};

fn health_status_name(s: i32) -> &'static str {
    ServingStatus::try_from(s).map(|s| s.as_str_name()).unwrap_or("UNKNOWN")
}

/// A gRPC probe: `grpc.health.v1.Health/Check` answers SERVING (`pkg/probe/grpc`).
pub async fn grpc_probe(host: &str, port: u16, service: &str, timeout: Duration) -> ProbeOutput {
    let addr = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => {
            return ProbeOutput::new(Outcome::Failure, format!("error: failed to connect service at {addr:?}: {e}"));
        }
    };
    let endpoint = match endpoint.user_agent(crate::USER_AGENT) {
        Ok(e) => e,
        Err(e) => return ProbeOutput::new(Outcome::Failure, format!("error: {e}")),
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return ProbeOutput::new(Outcome::Failure, format!("error: failed to connect service at {addr:?}: {e}"));
        }
        Err(_) => {
            return ProbeOutput::new(
                Outcome::Failure,
                format!("timeout: failed to connect service {addr:?} within {}s", timeout.as_secs()),
            );
        }
    };
    let mut client = HealthClient::new(channel);
    let call = client.check(HealthCheckRequest { service: service.to_string() });
    match tokio::time::timeout(timeout, call).await {
        Err(_) => ProbeOutput::new(
            Outcome::Failure,
            format!("timeout: health rpc did not complete within {}s", timeout.as_secs()),
        ),
        Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => ProbeOutput::new(
            Outcome::Failure,
            format!("this server does not implement the grpc health protocol (grpc.health.v1.Health): {}", s.message()),
        ),
        Ok(Err(s)) if s.code() == tonic::Code::DeadlineExceeded => ProbeOutput::new(
            Outcome::Failure,
            format!("timeout: health rpc did not complete within {}s", timeout.as_secs()),
        ),
        Ok(Err(s)) => ProbeOutput::new(Outcome::Failure, format!("error: health rpc probe failed: {s}")),
        Ok(Ok(r)) if r.get_ref().status == ServingStatus::Serving as i32 => {
            ProbeOutput::new(Outcome::Success, "service is serving")
        }
        Ok(Ok(r)) => ProbeOutput::new(
            Outcome::Failure,
            format!("service unhealthy (responded with {:?})", health_status_name(r.get_ref().status)),
        ),
    }
}

/// Runs one check of `probe` for `container` (`runProbe`): which handler the probe names decides.
pub async fn run_probe(
    probe: &Probe,
    runtime: &dyn RuntimeService,
    container: &Container,
    container_id: &str,
    pod_ip: &str,
) -> Result<ProbeOutput, ProbeError> {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(e) = &probe.exec {
        let cmd = expand_static(e.command.as_deref().unwrap_or(&[]), container);
        return exec(runtime, container_id, cmd, timeout).await;
    }
    if let Some(h) = &probe.http_get {
        return Ok(match http_target(h, pod_ip, container) {
            Ok(t) => http_probe(&t, timeout).await,
            Err(e) => ProbeOutput::new(Outcome::Unknown, e),
        });
    }
    if let Some(TCPSocketAction { host, port }) = &probe.tcp_socket {
        let host = host.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod_ip.to_string());
        return Ok(match resolve_port(port, container) {
            Ok(p) => tcp_probe(&host, p, timeout).await,
            Err(e) => ProbeOutput::new(Outcome::Unknown, e),
        });
    }
    if let Some(GRPCAction { port, service }) = &probe.grpc {
        let Ok(port) = u16::try_from(*port) else {
            return Ok(ProbeOutput::new(Outcome::Unknown, format!("invalid port number: {port}")));
        };
        return Ok(grpc_probe(pod_ip, port, service.as_deref().unwrap_or(""), timeout).await);
    }
    Err(ProbeError(format!("missing probe handler for container {}", container.name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, EnvVar};

    #[test]
    fn ports_resolve_by_number_or_name() {
        let c = Container {
            name: "app".into(),
            ports: Some(vec![ContainerPort { name: Some("http".into()), container_port: 8080, ..Default::default() }]),
            ..Default::default()
        };
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(resolve_port(&IntOrString::String("http".into()), &c), Ok(8080));
        assert_eq!(resolve_port(&IntOrString::String("9090".into()), &c), Ok(9090));
        assert_eq!(resolve_port(&IntOrString::String("nope".into()), &c), Err("port nope not found".into()));
        assert_eq!(resolve_port(&IntOrString::Int(0), &c), Err("invalid port number: 0".into()));
    }

    #[test]
    fn exec_commands_expand_only_literal_env() {
        let c = Container {
            name: "app".into(),
            env: Some(vec![
                EnvVar { name: "A".into(), value: Some("x".into()), ..Default::default() },
                EnvVar { name: "B".into(), value_from: Some(Default::default()), ..Default::default() },
            ]),
            ..Default::default()
        };
        let cmd = vec!["echo $(A) $(B) $$(A)".to_string()];
        assert_eq!(expand_static(&cmd, &c), vec!["echo x $(B) $(A)".to_string()]);
    }

    #[tokio::test]
    async fn http_probe_outcomes_and_same_host_redirects() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                let agent_ok = req.contains("user-agent: kube-probe/1.35") && req.contains("x-probe: 1");
                let resp = match path.as_str() {
                    "/ok" if agent_ok => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_string(),
                    "/moved" => "HTTP/1.1 302 Found\r\nlocation: /ok\r\ncontent-length: 0\r\n\r\n".to_string(),
                    "/away" => "HTTP/1.1 301 Moved\r\nlocation: http://example.invalid/\r\ncontent-length: 1\r\n\r\nb"
                        .to_string(),
                    _ => "HTTP/1.1 503 Unavailable\r\ncontent-length: 4\r\n\r\nbusy".to_string(),
                };
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        let t = |path: &str| HttpTarget {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![("X-Probe".into(), "1".into())],
        };
        let d = Duration::from_secs(2);
        assert_eq!(http_probe(&t("/ok"), d).await, ProbeOutput::new(Outcome::Success, "ok"));
        assert_eq!(http_probe(&t("/moved"), d).await.outcome, Outcome::Success);
        let away = http_probe(&t("/away"), d).await;
        assert_eq!(away, ProbeOutput::new(Outcome::Warning, "Probe terminated redirects, Response body: b"));
        let bad = http_probe(&t("/bad"), d).await;
        assert_eq!(bad, ProbeOutput::new(Outcome::Failure, "HTTP probe failed with statuscode: 503"));
        // Nothing listens on port 1.
        let refused = HttpTarget { port: 1, ..t("/") };
        let r = http_probe(&refused, d).await;
        assert_eq!(r.outcome, Outcome::Failure);
        assert_eq!(r.output, "Get \"http://127.0.0.1:1/\": dial tcp 127.0.0.1:1: connect: connection refused");
        assert_eq!(tcp_probe("127.0.0.1", port, d).await.outcome, Outcome::Success);
        assert_eq!(tcp_probe("127.0.0.1", 1, d).await.outcome, Outcome::Failure);
    }

    /// A health service answering with a settable status.
    struct Health(std::sync::Arc<std::sync::atomic::AtomicI32>);

    #[tonic::async_trait]
    impl kubelet_proto::health::v1::health_server::Health for Health {
        async fn check(
            &self,
            r: tonic::Request<HealthCheckRequest>,
        ) -> Result<tonic::Response<kubelet_proto::health::v1::HealthCheckResponse>, tonic::Status> {
            if r.get_ref().service == "absent" {
                return Err(tonic::Status::not_found("unknown service"));
            }
            let status = self.0.load(std::sync::atomic::Ordering::SeqCst);
            Ok(tonic::Response::new(kubelet_proto::health::v1::HealthCheckResponse { status }))
        }
    }

    #[tokio::test]
    async fn grpc_probe_outcomes_as_upstream() {
        use kubelet_proto::health::v1::health_server::HealthServer;
        let status = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(ServingStatus::Serving as i32));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tonic::transport::Server::builder().add_service(HealthServer::new(Health(status.clone())));
        let task = tokio::spawn(server.serve_with_incoming(incoming));
        let d = Duration::from_secs(2);
        assert_eq!(
            grpc_probe("127.0.0.1", port, "", d).await,
            ProbeOutput::new(Outcome::Success, "service is serving")
        );
        status.store(ServingStatus::NotServing as i32, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(
            grpc_probe("127.0.0.1", port, "", d).await,
            ProbeOutput::new(Outcome::Failure, "service unhealthy (responded with \"NOT_SERVING\")")
        );
        let r = grpc_probe("127.0.0.1", port, "absent", d).await;
        assert!(r.outcome == Outcome::Failure && r.output.starts_with("error: health rpc probe failed: "), "{r:?}");
        task.abort();
        let r = grpc_probe("127.0.0.1", 1, "", d).await;
        assert!(r.outcome == Outcome::Failure && r.output.starts_with("error: failed to connect service at"), "{r:?}");
    }
}
