//! The kubelet API in process: the read-only and the secure routers (debugging handlers on, anonymous
//! allowed) over a fake host, driven with hostile paths, query strings, methods and headers; and
//! `/containerLogs` over a CRI log file whose content and query are both fuzzed.
//!
//! Besides no panic and no hang (the response body must end), `/logs/` must never serve a file outside its
//! folder, and a log read with `limitBytes` must not answer more bytes than that.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use kubelet_server::auth::{Authenticator, Authorizer, PeerCert};
use kubelet_server::handlers::{Auth, Handlers, Options as ServerOptions, read_only_router, secure_router};
use kubelet_server::host::{ContainerAccess, HealthResult, HostError, PodsView, StreamOpts};
use kubelet_server::listen::ConnInfo;
use kubelet_server::stats::{StatsProvider, Summary};
use kubelet_types::Pod;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use tower::ServiceExt;

use super::values::{LogLineParts, log_line, query_pairs};
use crate::engine::run;
use crate::strategies::{any_text, text_from};
use crate::{Options, Report};

/// What a file outside `/logs/`'s folder holds; no answer may contain it.
const SECRET: &str = "KUBELET-FUZZ-SECRET-OUTSIDE-THE-LOG-FOLDER";
/// A response body must end within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(3);

struct FakeHost {
    pod: Pod,
    log: PathBuf,
}

#[async_trait]
impl PodsView for FakeHost {
    fn health_checks(&self) -> Vec<HealthResult> {
        vec![("syncloop", Ok(())), ("pleg", Err("pleg was last seen active 5m ago".into()))]
    }
    fn pods(&self) -> Vec<Pod> {
        vec![self.pod.clone()]
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        (namespace == "default" && name == "web").then(|| self.pod.clone())
    }
    async fn running_pods(&self) -> Result<Vec<Pod>, HostError> {
        Ok(vec![self.pod.clone()])
    }
}

#[async_trait]
impl ContainerAccess for FakeHost {
    async fn exec(&self, _: &Pod, c: &str, _: Vec<String>, _: StreamOpts) -> Result<String, HostError> {
        Err(HostError::NotFound(format!("container {c:?} not found")))
    }
    async fn attach(&self, _: &Pod, _: &str, _: StreamOpts) -> Result<String, HostError> {
        Err(HostError::Exhausted("too many streams".into()))
    }
    async fn port_forward(&self, _: &Pod, _: Vec<i32>) -> Result<String, HostError> {
        Ok("not a URL".into())
    }
    async fn run(&self, _: &Pod, c: &str, cmd: Vec<String>) -> Result<Vec<u8>, HostError> {
        Ok(format!("{c}: {}", cmd.join(",")).into_bytes())
    }
    async fn log_file(&self, id: &str) -> Result<PathBuf, HostError> {
        if id == "c2" { Ok(self.log.clone()) } else { Err(HostError::NotFound(format!("container {id:?} not found"))) }
    }
    async fn is_running(&self, _: &str) -> bool {
        false
    }
}

struct NoStats;

#[async_trait]
impl StatsProvider for NoStats {
    async fn summary(&self, only: bool) -> Result<Summary, HostError> {
        if only { Err(HostError::Other("no stats".into())) } else { Ok(Summary::default()) }
    }
}

fn pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": "default", "name": "web", "uid": "uid-1"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}],
            "initContainers": [{"name": "init", "image": "busybox"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "image": "busybox", "imageID": "",
            "ready": true, "restartCount": 1, "containerID": "containerd://c2", "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://c1"}}}],
            "initContainerStatuses": [{"name": "init", "image": "busybox", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}
    }))
    .unwrap_or_default()
}

/// The routers, their runtime and the scratch folder.
struct Api {
    _dir: tempfile::TempDir,
    log: PathBuf,
    rt: tokio::runtime::Runtime,
    read_only: Router,
    secure: Router,
}

fn api() -> std::io::Result<Api> {
    let dir = tempfile::tempdir()?;
    let logs = dir.path().join("var-log");
    std::fs::create_dir_all(logs.join("sub"))?;
    std::fs::write(logs.join("syslog"), "a line of the system log\n")?;
    std::fs::write(logs.join("sub/x.log"), "x\n")?;
    std::fs::write(dir.path().join("secret"), SECRET)?;
    std::fs::create_dir_all(dir.path().join("containers"))?;
    let log = dir.path().join("containers/app.log");
    std::fs::write(&log, "2024-01-02T03:04:05Z stdout F hello\n")?;
    let host = Arc::new(FakeHost { pod: pod(), log: log.clone() });
    let h = Handlers {
        options: Arc::new(ServerOptions {
            node_name: "node-a".into(),
            enable_debugging_handlers: true,
            enable_system_log_handler: true,
            enable_debug_flags_handler: true,
            enable_profiling_handler: true,
            container_checkpoint: true,
            system_log_dir: logs,
            pod_logs_dir: dir.path().join("containers"),
            streaming_idle_timeout: Duration::from_secs(1),
            max_streams: 2,
        }),
        pods: host.clone(),
        containers: host,
        configz: Arc::new(std::sync::RwLock::new(serde_json::json!({"kubeletconfig": {"port": 10250}}))),
        clock: Arc::new(kubelet_types::clock::SystemClock),
        streams: Arc::new(tokio::sync::Semaphore::new(2)),
        stats: Arc::new(NoStats),
        probe_metrics: Arc::new(kubelet_metrics::Registry::new()),
        verbosity: Arc::new(kubelet_server::handlers::FixedVerbosity),
        profiler: Arc::new(kubelet_server::handlers::NoProfiler),
    };
    let auth = Arc::new(Auth {
        authenticator: Authenticator { anonymous: true, webhook: None },
        authorizer: Authorizer::AlwaysAllow,
        node_name: "node-a".into(),
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    Ok(Api { _dir: dir, log, rt, read_only: read_only_router(h.clone()), secure: secure_router(h, auth) })
}

/// One request.
#[derive(Clone, Debug)]
pub(crate) struct ApiRequest {
    secure: bool,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Api {
    /// Status and body, or `None` when the request cannot even be built (hyper would refuse it on the wire).
    fn call(&self, r: &ApiRequest) -> Result<Option<(u16, Vec<u8>)>, String> {
        let mut b = axum::http::Request::builder().method(r.method.as_str()).uri(r.target.as_str());
        for (k, v) in &r.headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let Ok(mut req) = b.body(Body::empty()) else { return Ok(None) };
        req.extensions_mut().insert(ConnInfo { remote: None, peer: PeerCert::None });
        let router = if r.secure { &self.secure } else { &self.read_only };
        self.rt.block_on(async {
            let resp = router.clone().oneshot(req).await.map_err(|e| format!("the router failed: {e}"))?;
            let code = resp.status().as_u16();
            let body = tokio::time::timeout(BODY_TIMEOUT, resp.into_body().collect())
                .await
                .map_err(|_| format!("the response body did not end within {BODY_TIMEOUT:?}"))?
                .map_err(|e| format!("the response body failed: {e}"))?
                .to_bytes();
            Ok(Some((code, body.to_vec())))
        })
    }
}

const SEGMENTS: &[&str] = &[
    "pods",
    "stats",
    "summary",
    "metrics",
    "resource",
    "probes",
    "cadvisor",
    "healthz",
    "ping",
    "syncloop",
    "configz",
    "logs",
    "containerLogs",
    "exec",
    "attach",
    "portForward",
    "run",
    "runningpods",
    "debug",
    "pprof",
    "checkpoint",
    "default",
    "web",
    "app",
    "init",
    "uid-1",
    "syslog",
    "sub",
    "x.log",
    "secret",
    "..",
    ".",
    "",
    "%2f",
    "%2e%2e",
    "%2E%2E",
    "..%2f",
    "%00",
    "%ff",
    "%",
    "a%20b",
    "~",
    ";",
    "*",
    "@",
    "%252e%252e",
    "...",
];
const QUERY_KEYS: &[&str] = &[
    "follow",
    "previous",
    "timestamps",
    "sinceSeconds",
    "sinceTime",
    "tailLines",
    "limitBytes",
    "stream",
    "tail",
    "command",
    "cmd",
    "port",
    "input",
    "output",
    "error",
    "tty",
    "only_cpu_and_memory",
    "verbose",
    "exclude",
    "x",
    "",
];
const QUERY_VALUES: &[&str] = &[
    "1",
    "0",
    "true",
    "false",
    "-1",
    "%",
    "%zz",
    "%2",
    "%00",
    "+",
    "=",
    "&&",
    ";",
    "ls",
    "ls%20-l",
    "80",
    "80,81",
    "65536",
    "0",
    "Stdout",
    "2024-01-02T03:04:05Z",
    "9223372036854775807",
    "all",
    "syncloop",
    "%E2%82%AC",
    "%C3",
];

fn request() -> BoxedStrategy<ApiRequest> {
    let path = proptest::collection::vec(select(SEGMENTS), 0..7)
        .prop_flat_map(|segs| (Just(segs), any::<bool>()))
        .prop_map(|(segs, trailing)| format!("/{}{}", segs.join("/"), if trailing { "/" } else { "" }));
    let path = prop_oneof![6 => path, 1 => text_from(&["/", "..", "%2f", "//", "pods", "logs", "é", " ", "?", "#"])];
    let pair = (select(QUERY_KEYS), text_from(QUERY_VALUES)).prop_map(|(k, v)| format!("{k}={v}"));
    let query = option::of(prop_oneof![
        5 => proptest::collection::vec(pair, 0..6).prop_map(|p| p.join("&")),
        1 => text_from(&["&", "=", "%", "a", ";", "?", "#", "+"]),
    ]);
    let header = prop_oneof![
        (Just("authorization"), text_from(&["Bearer ", "bearer", " ", "x", "Basic "])),
        (Just("connection"), text_from(&["Upgrade", "upgrade", ",", "keep-alive"])),
        (Just("upgrade"), text_from(&["websocket", "SPDY/3.1", ""])),
        (
            Just("sec-websocket-protocol"),
            text_from(&["base64url.bearer.authorization.k8s.io.", "dG9rZW4", ",", "v4.channel.k8s.io"])
        ),
        (Just("range"), text_from(&["bytes=", "0", "-", "1", ","])),
        (Just("x-stream-protocol-version"), text_from(&["v4.channel.k8s.io", "portforward.k8s.io"])),
        (Just("content-type"), any_text()),
    ]
    .prop_map(|(k, v)| (k.to_string(), v));
    let method = prop_oneof![
        8 => select(&["GET", "POST", "PUT", "HEAD", "OPTIONS", "DELETE", "PATCH"][..]).prop_map(str::to_string),
        1 => text_from(&["GET", "PROPFIND", "X", "-"]),
    ];
    (any::<bool>(), method, path, query, proptest::collection::vec(header, 0..4))
        .prop_map(|(secure, method, path, query, headers)| ApiRequest {
            secure,
            method,
            target: match query {
                Some(q) => format!("{path}?{q}"),
                None => path,
            },
            headers,
        })
        .boxed()
}

fn setup_failed(name: &'static str, e: std::io::Error) -> Report {
    crate::engine::setup_failure(name, format!("setting up: {e}"))
}

/// The routers with hostile requests: no panic, bodies end, `/logs/` stays in its folder.
pub(crate) fn kubelet_api(o: &Options) -> Report {
    let api = match api() {
        Ok(a) => Arc::new(a),
        Err(e) => return setup_failed("kubelet-api", e),
    };
    run(
        "kubelet-api",
        o,
        request(),
        Arc::new(move |r: &ApiRequest| {
            let Some((code, body)) = api.call(r)? else { return Ok(()) };
            if body.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()) {
                return Err(format!("answered {code} with the content of a file outside the log folder"));
            }
            Ok(())
        }),
    )
}

/// A log file and a query of it.
#[derive(Clone, Debug)]
pub(crate) struct LogRequest {
    lines: Vec<LogLineParts>,
    container: &'static str,
    query: Vec<(String, String)>,
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `/containerLogs` over a fuzzed CRI log file with a fuzzed query: no panic, the body ends, and a valid
/// `limitBytes` bounds the answer.
pub(crate) fn container_logs(o: &Options) -> Report {
    let api = match api() {
        Ok(a) => Arc::new(a),
        Err(e) => return setup_failed("container-logs", e),
    };
    let input = (proptest::collection::vec(log_line(), 0..6), select(&["app", "init", "nope"][..]), query_pairs())
        .prop_map(|(lines, container, query)| LogRequest { lines, container, query });
    run(
        "container-logs",
        o,
        input,
        Arc::new(move |r: &LogRequest| {
            let content: Vec<u8> = r.lines.iter().flat_map(LogLineParts::bytes).collect();
            std::fs::write(&api.log, &content).map_err(|e| format!("writing the log: {e}"))?;
            let q: Vec<String> =
                r.query.iter().map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v))).collect();
            let target = format!("/containerLogs/default/web/{}?{}", r.container, q.join("&"));
            let req = ApiRequest { secure: true, method: "GET".into(), target, headers: vec![] };
            let Some((code, body)) = api.call(&req)? else { return Ok(()) };
            // Only the log's own bytes count: an error found after the 200 (the previous instance's log is gone)
            // is written whole, as upstream writes it.
            let limit = kubelet_server::logs::decode(&r.query)
                .filter(|d| kubelet_server::logs::validate(d).is_ok() && !d.previous && r.container == "app")
                .and_then(|d| d.limit_bytes);
            if code == 200
                && let Some(l) = limit
                && body.len() as i64 > l
            {
                return Err(format!("answered {} bytes with limitBytes={l}", body.len()));
            }
            Ok(())
        }),
    )
}
