//! Handler tests: the routers driven in-process, the streaming proxy over loopback sockets.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::Request as HttpRequest;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use tower::ServiceExt;

use super::*;
use crate::auth::{AccessWebhook, PeerCert, TokenWebhook, UserInfo};
use crate::host::{HealthResult, HostError, StreamOpts};
use crate::listen::ConnInfo;

pub(crate) struct FakeHost {
    pub pods: Vec<Pod>,
    pub syncloop_ok: AtomicBool,
    pub stream_url: Mutex<String>,
    pub calls: Mutex<Vec<String>>,
    pub log_path: Mutex<PathBuf>,
    pub running: AtomicBool,
}

pub(crate) fn pod(ns: &str, name: &str, uid: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"namespace": ns, "name": name, "uid": uid},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "app", "image": "busybox", "imageID": "",
            "ready": true, "restartCount": 1, "containerID": "containerd://c2", "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "containerID": "containerd://c1"}}}]}
    }))
    .unwrap()
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost {
            pods: vec![pod("default", "web", "uid-1")],
            syncloop_ok: AtomicBool::new(true),
            stream_url: Mutex::new(String::new()),
            calls: Mutex::new(vec![]),
            log_path: Mutex::new(PathBuf::new()),
            running: AtomicBool::new(false),
        }
    }
}

#[async_trait]
impl PodsView for FakeHost {
    fn health_checks(&self) -> Vec<HealthResult> {
        let sl = if self.syncloop_ok.load(Ordering::SeqCst) { Ok(()) } else { Err("sync loop stuck".into()) };
        vec![("syncloop", sl), ("pleg", Ok(()))]
    }
    fn pods(&self) -> Vec<Pod> {
        self.pods.clone()
    }
    fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.pods
            .iter()
            .find(|p| p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name))
            .cloned()
    }
    async fn running_pods(&self) -> Result<Vec<Pod>, HostError> {
        Ok(vec![])
    }
}

#[async_trait]
impl ContainerAccess for FakeHost {
    async fn exec(&self, _: &Pod, c: &str, cmd: Vec<String>, o: StreamOpts) -> Result<String, HostError> {
        self.calls.lock().unwrap().push(format!("exec {c} {cmd:?} {o:?}"));
        if c != "app" {
            return Err(HostError::Other(format!("container not found ({c:?})")));
        }
        Ok(self.stream_url.lock().unwrap().clone())
    }
    async fn attach(&self, _: &Pod, c: &str, o: StreamOpts) -> Result<String, HostError> {
        self.calls.lock().unwrap().push(format!("attach {c} {o:?}"));
        Ok(self.stream_url.lock().unwrap().clone())
    }
    async fn port_forward(&self, _: &Pod, ports: Vec<i32>) -> Result<String, HostError> {
        self.calls.lock().unwrap().push(format!("portforward {ports:?}"));
        Ok(self.stream_url.lock().unwrap().clone())
    }
    async fn run(&self, _: &Pod, c: &str, cmd: Vec<String>) -> Result<Vec<u8>, HostError> {
        Ok(format!("{c}: {}", cmd.join(",")).into_bytes())
    }
    async fn log_file(&self, id: &str) -> Result<PathBuf, HostError> {
        self.calls.lock().unwrap().push(format!("log {id}"));
        Ok(self.log_path.lock().unwrap().clone())
    }
    async fn is_running(&self, _: &str) -> bool {
        self.running.load(Ordering::SeqCst)
    }
}

pub(crate) fn handlers(host: Arc<FakeHost>, debugging: bool) -> Handlers {
    Handlers {
        options: Arc::new(Options {
            node_name: "node-a".into(),
            enable_debugging_handlers: debugging,
            enable_system_log_handler: true,
            enable_debug_flags_handler: true,
            enable_profiling_handler: true,
            container_checkpoint: true,
            system_log_dir: PathBuf::from("/nonexistent"),
            pod_logs_dir: PathBuf::from("/"),
            streaming_idle_timeout: Duration::from_secs(3600),
            max_streams: 2,
        }),
        pods: host.clone(),
        containers: host,
        configz: Arc::new(std::sync::RwLock::new(serde_json::json!({"kubeletconfig": {"port": 10250}}))),
        clock: Arc::new(kubelet_types::SystemClock),
        streams: Arc::new(tokio::sync::Semaphore::new(2)),
        probe_metrics: Arc::new(kubelet_metrics::Registry::new()),
        stats: Arc::new(crate::stats::tests::FixedStats(crate::stats::tests::sample())),
        verbosity: Arc::new(FixedVerbosity),
        profiler: Arc::new(NoProfiler),
    }
}

/// Records the verbosities set; refuses 99.
#[derive(Default)]
struct RecordedVerbosity(Mutex<Vec<u32>>);

impl Verbosity for RecordedVerbosity {
    fn set(&self, v: u32) -> Result<(), String> {
        if v == 99 {
            return Err("verbosity 99 refused".into());
        }
        self.0.lock().unwrap().push(v);
        Ok(())
    }
}

async fn put(r: &Router, uri: &str, body: &str) -> (u16, String) {
    let mut req = HttpRequest::builder().method("PUT").uri(uri).body(Body::from(body.to_string())).unwrap();
    req.extensions_mut().insert(ConnInfo { remote: None, peer: PeerCert::None });
    let resp = r.clone().oneshot(req).await.unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn debug_flags_v_sets_the_verbosity_as_upstream_and_answers_disabled_when_turned_off() {
    let recorded = Arc::new(RecordedVerbosity::default());
    let mut h = handlers(Arc::new(FakeHost::default()), true);
    h.verbosity = recorded.clone();
    let r = secure_router(h.clone(), allow_all());
    assert_eq!(put(&r, "/debug/flags/v", "4").await, (200, "successfully set klog.logging.verbosity to 4\n".into()));
    assert_eq!(
        put(&r, "/debug/flags/v", "four").await,
        (400, "strconv.ParseUint: parsing \"four\": invalid syntax\n".into())
    );
    assert_eq!(put(&r, "/debug/flags/v", "99").await, (400, "verbosity 99 refused\n".into()));
    assert_eq!(call(&r, "GET", "/debug/flags/v", PeerCert::None, &[]).await, (406, "unsupported http method\n".into()));
    assert_eq!(*recorded.0.lock().unwrap(), [4], "only the valid value was applied");

    let mut off = h.clone();
    off.options = Arc::new(Options { enable_debug_flags_handler: false, ..(*h.options).clone() });
    let r = secure_router(off, allow_all());
    assert_eq!(put(&r, "/debug/flags/v", "2").await, (405, "flags endpoint is disabled.\n".into()));
    let mut no_debugging = h.clone();
    no_debugging.options = Arc::new(Options { enable_debugging_handlers: false, ..(*h.options).clone() });
    let r = secure_router(no_debugging, allow_all());
    assert_eq!(put(&r, "/debug/flags/v", "2").await.0, 404, "upstream installs it only with the debugging handlers");
    assert_eq!(*recorded.0.lock().unwrap(), [4]);
}

pub(crate) async fn call(
    r: &Router,
    method: &str,
    uri: &str,
    peer: PeerCert,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut b = HttpRequest::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut req = b.body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnInfo { remote: None, peer });
    let resp = r.clone().oneshot(req).await.unwrap();
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// Held by the tests that run `/healthz`: they share `/metrics/slis`'s process-wide figures.
static HEALTHZ: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn healthz_reports_each_check_as_the_apiserver_library_does() {
    let _healthz = HEALTHZ.lock().await;
    let host = Arc::new(FakeHost::default());
    let r = healthz_router(handlers(host.clone(), true));
    assert_eq!(call(&r, "GET", "/healthz", PeerCert::None, &[]).await, (200, "ok".into()));
    assert_eq!(
        call(&r, "GET", "/healthz?verbose", PeerCert::None, &[]).await.1,
        "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[+]pleg ok\nhealthz check passed\n"
    );
    host.syncloop_ok.store(false, Ordering::SeqCst);
    assert_eq!(
        call(&r, "GET", "/healthz", PeerCert::None, &[]).await,
        (500, "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]pleg ok\nhealthz check failed\n".into())
    );
    assert_eq!(
        call(&r, "GET", "/healthz?exclude=syncloop", PeerCert::None, &[]).await,
        (200, "ok".into()),
        "an excluded check does not count"
    );
    assert_eq!(
        call(&r, "GET", "/healthz/syncloop", PeerCert::None, &[]).await,
        (500, "internal server error: sync loop stuck\n".into())
    );
    assert_eq!(call(&r, "GET", "/healthz/ping", PeerCert::None, &[]).await, (200, "ok".into()));
    assert_eq!(call(&r, "GET", "/pods", PeerCert::None, &[]).await.0, 404, "only healthz on this port");
}

#[tokio::test]
async fn read_only_port_serves_pods_and_refuses_debugging() {
    let r = read_only_router(handlers(Arc::new(FakeHost::default()), true));
    let (code, body) = call(&r, "GET", "/pods", PeerCert::None, &[]).await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((v["kind"].as_str(), v["apiVersion"].as_str()), (Some("PodList"), Some("v1")));
    assert_eq!(v["items"][0]["metadata"]["name"], "web");
    for p in ["/exec/default/web/app", "/containerLogs/default/web/app", "/runningpods/", "/logs/", "/portForward/a/b"]
    {
        assert_eq!(
            call(&r, "GET", p, PeerCert::None, &[]).await,
            (405, "Debug endpoints are disabled.\n".into()),
            "{p}"
        );
    }
    assert_eq!(call(&r, "GET", "/nope", PeerCert::None, &[]).await, (404, "404: Page Not Found".into()));
    assert_eq!(call(&r, "DELETE", "/pods", PeerCert::None, &[]).await, (405, "405: Method Not Allowed".into()));
}

#[tokio::test]
async fn configz_and_runningpods_need_debugging_handlers() {
    let on = secure_router(handlers(Arc::new(FakeHost::default()), true), allow_all());
    let (code, body) = call(&on, "GET", "/configz", PeerCert::None, &[]).await;
    assert_eq!((code, body.as_str()), (200, r#"{"kubeletconfig":{"port":10250}}"#));
    let (code, body) = call(&on, "GET", "/runningpods/", PeerCert::None, &[]).await;
    assert_eq!((code, body.as_str()), (200, r#"{"apiVersion":"v1","items":null,"kind":"PodList","metadata":{}}"#));
    let off = secure_router(handlers(Arc::new(FakeHost::default()), false), allow_all());
    assert_eq!(call(&off, "GET", "/runningpods/", PeerCert::None, &[]).await.0, 405);
    assert_eq!(call(&off, "GET", "/configz", PeerCert::None, &[]).await.0, 404);
}

fn allow_all() -> Arc<Auth> {
    Arc::new(Auth {
        authenticator: Authenticator { anonymous: true, webhook: None },
        authorizer: Authorizer::AlwaysAllow,
        node_name: "node-a".into(),
    })
}

/// An apiserver that knows the token "admin-token" (user "admin") and allows "admin" everything and "viewer"
/// only `nodes/stats`.
struct Reviews;

#[async_trait]
impl kubelet_apiclient::ReviewApi for Reviews {
    async fn create_token_review(
        &self,
        r: &k8s_openapi::api::authentication::v1::TokenReview,
    ) -> kubelet_apiclient::ApiResult<k8s_openapi::api::authentication::v1::TokenReview> {
        let mut r = r.clone();
        let ok = r.spec.token.as_deref() == Some("admin-token");
        r.status = Some(k8s_openapi::api::authentication::v1::TokenReviewStatus {
            authenticated: Some(ok),
            user: ok.then(|| k8s_openapi::api::authentication::v1::UserInfo {
                username: Some("admin".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        Ok(r)
    }
    async fn create_subject_access_review(
        &self,
        r: &k8s_openapi::api::authorization::v1::SubjectAccessReview,
    ) -> kubelet_apiclient::ApiResult<k8s_openapi::api::authorization::v1::SubjectAccessReview> {
        let mut r = r.clone();
        let sub = r.spec.resource_attributes.as_ref().and_then(|a| a.subresource.clone()).unwrap_or_default();
        let allowed = match r.spec.user.as_deref() {
            Some("admin") => true,
            Some("viewer") => sub == "stats",
            _ => false,
        };
        r.status =
            Some(k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus { allowed, ..Default::default() });
        Ok(r)
    }
}

#[tokio::test]
async fn secure_port_authenticates_then_authorizes_every_request() {
    let api = Arc::new(Reviews);
    let auth = Arc::new(Auth {
        authenticator: Authenticator {
            anonymous: false,
            webhook: Some(TokenWebhook::new(api.clone(), Duration::from_secs(120))),
        },
        authorizer: Authorizer::Webhook(AccessWebhook::new(api, Duration::from_secs(300), Duration::from_secs(30))),
        node_name: "node-a".into(),
    });
    let r = secure_router(handlers(Arc::new(FakeHost::default()), true), auth);
    assert_eq!(call(&r, "GET", "/pods", PeerCert::None, &[]).await, (401, "Unauthorized".into()));
    assert_eq!(call(&r, "GET", "/nope", PeerCert::None, &[]).await.0, 401, "before routing, as go-restful's filter");
    let bad = [("authorization", "Bearer nope")];
    assert_eq!(call(&r, "GET", "/pods", PeerCert::None, &bad).await.0, 401);
    let invalid = PeerCert::Invalid(crate::auth::AuthnError::Certificate("signed by an unknown authority".into()));
    assert_eq!(call(&r, "GET", "/pods", invalid, &[]).await.0, 401);
    let good = [("authorization", "Bearer admin-token")];
    assert_eq!(call(&r, "GET", "/pods", PeerCert::None, &good).await.0, 200);
    let viewer =
        || PeerCert::User(UserInfo { name: "viewer".into(), groups: vec!["ops".into()], ..Default::default() });
    assert_eq!(
        call(&r, "GET", "/pods", viewer(), &[]).await,
        (403, "Forbidden (user=viewer, verb=get, resource=nodes, subresource(s)=[pods proxy])\n".into())
    );
    assert_eq!(
        call(&r, "POST", "/exec/default/web/app?command=ls&output=1", viewer(), &[]).await,
        (403, "Forbidden (user=viewer, verb=create, resource=nodes, subresource(s)=[proxy])\n".into())
    );
    assert_eq!(call(&r, "GET", "/healthz", viewer(), &[]).await.0, 403);
    assert_eq!(call(&r, "GET", "/stats/summary", viewer(), &[]).await.0, 200, "nodes/stats is allowed");
}

/// A stand-in for the runtime's streaming server: records each request head; answers 403 to
/// `v5.channel.k8s.io`, else 101 and echoes.
async fn streaming_backend() -> (String, Arc<Mutex<Vec<String>>>, tokio::sync::mpsc::Receiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/exec/tok123", l.local_addr().unwrap());
    let heads = Arc::new(Mutex::new(vec![]));
    let (closed_tx, closed_rx) = tokio::sync::mpsc::channel(4);
    let h = heads.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let (h, closed_tx) = (h.clone(), closed_tx.clone());
            tokio::spawn(async move {
                let mut head = vec![];
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).await.unwrap() == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let head = String::from_utf8(head).unwrap();
                h.lock().unwrap().push(head.clone());
                if head.contains("v5.channel.k8s.io") {
                    s.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n\r\nnope\n").await.unwrap();
                    return;
                }
                s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n").await.unwrap();
                let mut buf = [0u8; 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => s.write_all(&buf[..n]).await.unwrap(),
                    }
                }
                let _ = closed_tx.send(()).await;
            });
        }
    });
    (url, heads, closed_rx)
}

async fn read_head(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = vec![];
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).await.unwrap(),
            1,
            "connection closed in the head: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

#[tokio::test]
async fn exec_is_proxied_to_the_runtime_streaming_server_and_torn_down_with_the_client() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (url, heads, mut closed) = streaming_backend().await;
    let host = Arc::new(FakeHost::default());
    *host.stream_url.lock().unwrap() = url;
    let router = secure_router(handlers(host.clone(), true), allow_all());
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::listen::serve(l, None, router, crate::listen::Limits::default(), cancel.clone()));

    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(b"POST /exec/default/web/app?command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=0 HTTP/1.1\r\nHost: node-a:10250\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io\r\nAuthorization: Bearer secret\r\nSec-WebSocket-Protocol: v4.channel.k8s.io, base64url.bearer.authorization.k8s.io.c2VjcmV0\r\n\r\n").await.unwrap();
    let head = read_head(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.to_ascii_lowercase().contains("x-stream-protocol-version: v4.channel.k8s.io"), "{head}");
    c.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping", "bytes flow both ways after the upgrade");
    let seen = heads.lock().unwrap()[0].clone();
    assert!(seen.starts_with("POST /exec/tok123 HTTP/1.1\r\n"), "{seen}");
    assert_eq!(
        seen.matches("x-stream-protocol-version").count() + seen.matches("X-Stream-Protocol-Version").count(),
        2,
        "{seen}"
    );
    assert!(!seen.to_ascii_lowercase().contains("authorization"), "the client's credentials stay here: {seen}");
    assert!(seen.to_ascii_lowercase().contains("sec-websocket-protocol: v4.channel.k8s.io\r\n"), "{seen}");
    assert_eq!(
        host.calls.lock().unwrap()[0],
        r#"exec app ["sh", "-c", "echo hi"] StreamOpts { stdin: true, stdout: true, stderr: false, tty: false }"#
    );
    drop(c);
    tokio::time::timeout(Duration::from_secs(5), closed.recv()).await.expect("the runtime side is closed too");

    // The runtime's refusal reaches the client as it is (kubectl then falls back to SPDY).
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /exec/default/web/app?command=ls&output=1 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n").await.unwrap();
    let head = read_head(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    cancel.cancel();
}

#[tokio::test]
async fn stream_requests_are_checked_before_the_runtime_is_asked() {
    let host = Arc::new(FakeHost::default());
    let r = secure_router(handlers(host.clone(), true), allow_all());
    let up = [("connection", "Upgrade"), ("upgrade", "SPDY/3.1")];
    assert_eq!(
        call(&r, "POST", "/exec/default/web/app?command=ls", PeerCert::None, &up).await,
        (400, "you must specify at least 1 of stdin, stdout, stderr\n".into())
    );
    assert_eq!(
        call(&r, "POST", "/exec/default/web/app?command=ls&output=1", PeerCert::None, &[]).await,
        (500, "Upgrade request required\n".into())
    );
    assert_eq!(
        call(&r, "POST", "/exec/default/nope/app?command=ls&output=1", PeerCert::None, &[]).await,
        (404, "pod does not exist".into()),
        "a missing pod is 404 before the upgrade is checked, as upstream"
    );
    assert_eq!(
        call(&r, "POST", "/exec/default/web/side?command=ls&output=1", PeerCert::None, &up).await,
        (500, "container not found (\"side\")".into())
    );
    assert_eq!(
        call(&r, "POST", "/exec/default/web/uid-other/app?command=ls&output=1", PeerCert::None, &up).await.0,
        500
    );
    assert_eq!(
        call(&r, "POST", "/portForward/default/web/uid-other", PeerCert::None, &up).await,
        (404, "pod not found".into())
    );
    let ws = [("connection", "Upgrade"), ("upgrade", "websocket")];
    assert_eq!(
        call(&r, "GET", "/portForward/default/web", PeerCert::None, &ws).await,
        (400, "query parameter \"port\" is required\n".into())
    );
    assert_eq!(
        call(&r, "GET", "/portForward/default/web?port=80,x", PeerCert::None, &ws).await,
        (400, "unable to parse \"x\" as a port: invalid digit found in string\n".into())
    );
    assert_eq!(
        call(&r, "POST", "/run/default/web/app?cmd=echo%20a%20b", PeerCert::None, &[]).await,
        (200, "app: echo,a,b".into())
    );
    assert_eq!(host.calls.lock().unwrap().len(), 1, "only the unknown container reached the runtime: {:?}", host.calls);
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_is_closed_after_the_idle_timeout() {
    use tokio::io::AsyncReadExt;
    let (a, mut a_peer) = tokio::io::duplex(64);
    let (b, mut b_peer) = tokio::io::duplex(64);
    let t0 = tokio::time::Instant::now();
    let pump = tokio::spawn(super::streaming::pump(a, b, Duration::from_secs(600)));
    pump.await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(600));
    let mut buf = [0u8; 1];
    assert_eq!(a_peer.read(&mut buf).await.unwrap(), 0, "the client side is closed");
    assert_eq!(b_peer.read(&mut buf).await.unwrap(), 0, "the runtime side is closed");
}

#[tokio::test]
async fn node_logs_are_served_from_the_log_folder_and_cannot_leave_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pods")).unwrap();
    std::fs::write(dir.path().join("syslog"), "boot\n").unwrap();
    std::fs::write(dir.path().join("a&b.log"), "x").unwrap();
    let mut h = handlers(Arc::new(FakeHost::default()), true);
    let mut o = (*h.options).clone();
    o.system_log_dir = dir.path().to_path_buf();
    h.options = Arc::new(o.clone());
    let r = secure_router(h.clone(), allow_all());
    let (code, body) = call(&r, "GET", "/logs/", PeerCert::None, &[]).await;
    assert_eq!(code, 200);
    assert_eq!(
        body,
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n<a href=\"a%26b.log\">a&amp;b.log</a>\n<a href=\"pods/\">pods/</a>\n<a href=\"syslog\">syslog</a>\n</pre>\n"
    );
    assert_eq!(call(&r, "GET", "/logs/syslog", PeerCert::None, &[]).await, (200, "boot\n".into()));
    assert_eq!(call(&r, "GET", "/logs/pods", PeerCert::None, &[]).await.0, 301, "a folder gets its slash");
    assert_eq!(
        call(&r, "GET", "/logs/../../etc/passwd", PeerCert::None, &[]).await.0,
        301,
        "redirected to the clean path before any handler"
    );
    assert_eq!(call(&r, "GET", "/logs/nope", PeerCert::None, &[]).await, (404, "404 page not found\n".into()));
    o.enable_system_log_handler = false;
    h.options = Arc::new(o);
    let r = secure_router(h, allow_all());
    assert_eq!(
        call(&r, "GET", "/logs/syslog", PeerCert::None, &[]).await,
        (405, "logs endpoint is disabled.\n".into())
    );
}

#[tokio::test]
async fn encoded_dots_slashes_and_links_cannot_leave_the_log_folder() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("log");
    std::fs::create_dir_all(root.join("pods")).unwrap();
    std::fs::create_dir(tmp.path().join("private")).unwrap();
    std::fs::write(tmp.path().join("private/MARKER.log"), "MARKER\n").unwrap();
    std::fs::write(root.join("pods/ok.log"), "inside\n").unwrap();
    symlink(root.join("pods/ok.log"), root.join("inside.log")).unwrap();
    symlink(tmp.path().join("private/MARKER.log"), root.join("escape.log")).unwrap();
    symlink(tmp.path().join("private"), root.join("escape-dir")).unwrap();
    let mut h = handlers(Arc::new(FakeHost::default()), true);
    let mut o = (*h.options).clone();
    o.system_log_dir = root.clone();
    h.options = Arc::new(o);
    let r = secure_router(h, allow_all());
    let get = |p: &'static str| {
        let r = r.clone();
        async move {
            let mut req = HttpRequest::builder().uri(p).body(Body::empty()).unwrap();
            req.extensions_mut().insert(ConnInfo::default());
            let resp = r.oneshot(req).await.unwrap();
            let code = resp.status().as_u16();
            let location = resp.headers().get("location").map(|l| l.to_str().unwrap().to_string());
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (code, location, String::from_utf8_lossy(&body).into_owned())
        }
    };
    assert_eq!(get("/logs/inside.log").await.2, "inside\n", "a link within the folder is followed");
    // Go's ServeMux cleans the decoded path: encoded dots and slashes are redirected as plain ones.
    for (p, to) in [
        ("/logs/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd"),
        ("/logs/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", "/etc/passwd"),
        ("/logs/..%2f..%2fetc%2fpasswd?x=1", "/etc/passwd?x=1"),
        ("/logs/pods/%2e%2e/%2e%2e/%2e%2e/private/MARKER.log", "/private/MARKER.log"),
        ("/logs/%2fetc%2fpasswd", "/logs/etc/passwd"),
        ("/logs//escape.log", "/logs/escape.log"),
        ("/logs/./pods/ok.log", "/logs/pods/ok.log"),
    ] {
        let (code, location, _) = get(p).await;
        assert_eq!((code, location.as_deref()), (301, Some(to)), "{p}");
    }
    // Links that lead out are not followed.
    for p in ["/logs/escape.log", "/logs/escape-dir/MARKER.log", "/logs/escape-dir/", "/logs/escape-dir"] {
        let (code, _, body) = get(p).await;
        assert_eq!((code, body.as_str()), (404, "404 page not found\n"), "{p}");
    }
    assert_eq!(get("/logs/pods%2fok.log").await.2, "inside\n", "an encoded slash inside the folder is a slash");
}

#[tokio::test]
async fn request_metrics_label_only_the_kubelets_own_paths() {
    use kubelet_metrics::kubelet::HTTP_REQUESTS;
    let r = read_only_router(handlers(Arc::new(FakeHost::default()), true));
    let other = ["false", "GET", "other", "readonly"];
    let before = HTTP_REQUESTS.get(&other);
    for i in 0..3 {
        call(&r, "GET", &format!("/made-up-{i}/x"), PeerCert::None, &[]).await;
    }
    call(&r, "GET", "/pods", PeerCert::None, &[]).await;
    assert!(HTTP_REQUESTS.get(&other) >= before + 3.0, "other tests may add their own");
    assert!(HTTP_REQUESTS.get(&["false", "GET", "pods", "readonly"]) >= 1.0);
    assert_eq!(HTTP_REQUESTS.get(&["false", "GET", "made-up-0", "readonly"]), 0.0);
}

#[tokio::test]
async fn unclean_paths_are_redirected_before_authorization() {
    // The webhook allows "viewer" only nodes/stats: a dotted path must not reach another handler with it.
    let api = Arc::new(Reviews);
    let auth = Arc::new(Auth {
        authenticator: Authenticator { anonymous: false, webhook: None },
        authorizer: Authorizer::Webhook(AccessWebhook::new(api, Duration::from_secs(300), Duration::from_secs(30))),
        node_name: "node-a".into(),
    });
    let r = secure_router(handlers(Arc::new(FakeHost::default()), true), auth);
    let viewer = || PeerCert::User(UserInfo { name: "viewer".into(), ..Default::default() });
    let mut req = HttpRequest::builder().uri("/stats/../logs/syslog?x=1").body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnInfo { remote: None, peer: viewer() });
    let resp = r.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 301);
    assert_eq!(resp.headers()["location"], "/logs/syslog?x=1");
    assert_eq!(call(&r, "GET", "/logs/syslog", viewer(), &[]).await.0, 403, "the clean path is judged on its own");
    assert_eq!(call(&r, "GET", "/stats//summary", viewer(), &[]).await.0, 301);
    assert_eq!(
        call(&r, "GET", "/runningpods/", viewer(), &[]).await.0,
        403,
        "a trailing slash is kept, not redirected"
    );
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_cannot_hold_a_stream() {
    use tokio::io::AsyncWriteExt;
    let (a, mut a_peer) = tokio::io::duplex(64);
    let (b, _b_peer) = tokio::io::duplex(64); // the runtime side never reads
    let writer = tokio::spawn(async move {
        let _ = a_peer.write_all(&[1u8; 4096]).await;
    });
    let t0 = tokio::time::Instant::now();
    super::streaming::pump(a, b, Duration::from_secs(600)).await;
    assert_eq!(t0.elapsed(), Duration::from_secs(600), "the idle timer ends it although a write is stuck");
    writer.abort();
}

#[tokio::test]
async fn metrics_slis_records_each_healthz_check_and_resets_on_delete() {
    let _healthz = HEALTHZ.lock().await;
    let host = Arc::new(FakeHost::default());
    let r = secure_router(handlers(host.clone(), true), allow_all());
    host.syncloop_ok.store(false, Ordering::SeqCst);
    assert_eq!(call(&r, "GET", "/healthz", PeerCert::None, &[]).await.0, 500);
    let (code, text) = call(&r, "GET", "/metrics/slis", PeerCert::None, &[]).await;
    assert_eq!(code, 200);
    assert!(
        text.contains(
            "# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.\n"
        ),
        "{text}"
    );
    assert!(text.contains("kubernetes_healthcheck{name=\"ping\",type=\"healthz\"} 1\n"), "{text}");
    assert!(text.contains("kubernetes_healthcheck{name=\"syncloop\",type=\"healthz\"} 0\n"), "{text}");
    assert!(
        text.contains("kubernetes_healthchecks_total{name=\"syncloop\",status=\"error\",type=\"healthz\"}"),
        "{text}"
    );
    assert!(text.contains("# TYPE process_start_time_seconds gauge\n"), "{text}");
    assert_eq!(call(&r, "DELETE", "/metrics/slis", PeerCert::None, &[]).await, (200, "metrics reset\n".into()));
    let (_, text) = call(&r, "GET", "/metrics/slis", PeerCert::None, &[]).await;
    assert!(!text.contains("kubernetes_healthcheck{"), "{text}");
    assert!(text.contains("process_start_time_seconds "), "the start time is not reset: {text}");
}

#[tokio::test]
async fn checkpoint_is_served_only_with_its_gate_and_the_debugging_handlers() {
    let h = handlers(Arc::new(FakeHost::default()), true);
    let r = secure_router(h.clone(), allow_all());
    let (code, body) = call(&r, "POST", "/checkpoint/default/web/app", PeerCert::None, &[]).await;
    assert_eq!(
        (code, body.as_str()),
        (500, "checkpointing of default/web/app failed (checkpointing is not supported)")
    );
    assert_eq!(call(&r, "POST", "/checkpoint/default/web/nope", PeerCert::None, &[]).await.0, 404);
    let mut off = h.clone();
    off.options = Arc::new(Options { container_checkpoint: false, ..(*h.options).clone() });
    let r = secure_router(off, allow_all());
    assert_eq!(
        call(&r, "POST", "/checkpoint/default/web/app", PeerCert::None, &[]).await,
        (404, "404: Page Not Found".into()),
        "ContainerCheckpoint off: no such path, as upstream"
    );
}

/// Answers profiles with their kind; the CPU profiler is busy for 7 s.
#[derive(Default)]
struct FakeProfiler(Mutex<Vec<String>>);

#[async_trait::async_trait]
impl Profiler for FakeProfiler {
    async fn cpu(&self, d: Duration) -> Result<Vec<u8>, String> {
        self.0.lock().unwrap().push(format!("cpu {}s", d.as_secs()));
        if d.as_secs() == 7 { Err("cpu profiling already in use".into()) } else { Ok(b"cpu".to_vec()) }
    }
    fn heap(&self, allocs: bool) -> Result<Vec<u8>, String> {
        self.0.lock().unwrap().push(format!("heap allocs={allocs}"));
        Ok(b"heap".to_vec())
    }
}

#[tokio::test]
async fn debug_pprof_serves_profiles_as_go_and_answers_disabled_when_turned_off() {
    let profiler = Arc::new(FakeProfiler::default());
    let mut h = handlers(Arc::new(FakeHost::default()), true);
    h.profiler = profiler.clone();
    let r = secure_router(h.clone(), allow_all());
    let get = |uri: &'static str| call(&r, "GET", uri, PeerCert::None, &[]);
    assert_eq!(get("/debug/pprof/profile?seconds=2").await, (200, "cpu".into()));
    assert_eq!(get("/debug/pprof/profile?seconds=x").await, (200, "cpu".into()), "Go's default of 30 s");
    assert_eq!(
        get("/debug/pprof/profile?seconds=14401").await,
        (400, "profile duration exceeds server's WriteTimeout\n".into())
    );
    assert_eq!(
        get("/debug/pprof/profile?seconds=7").await,
        (500, "Could not enable CPU profiling: cpu profiling already in use\n".into())
    );
    assert_eq!(get("/debug/pprof/heap").await, (200, "heap".into()));
    assert_eq!(get("/debug/pprof/allocs").await, (200, "heap".into()));
    assert_eq!(*profiler.0.lock().unwrap(), ["cpu 2s", "cpu 30s", "cpu 7s", "heap allocs=false", "heap allocs=true"]);
    assert_eq!(get("/debug/pprof/goroutine").await, (404, "Unknown profile\n".into()));
    let (code, index) = get("/debug/pprof/").await;
    assert!(code == 200 && index.contains("Types of profiles available"), "{code} {index}");
    assert_eq!(get("/debug/pprof/cmdline").await, (200, std::env::args().collect::<Vec<_>>().join("\0")));
    assert_eq!(call(&r, "POST", "/debug/pprof/heap", PeerCert::None, &[]).await.0, 405);

    let mut off = h.clone();
    off.options = Arc::new(Options { enable_profiling_handler: false, ..(*h.options).clone() });
    let r = secure_router(off, allow_all());
    let get = |uri: &'static str| call(&r, "GET", uri, PeerCert::None, &[]);
    assert_eq!(get("/debug/pprof/heap").await, (405, "profiling endpoint is disabled.\n".into()));
    let mut no_debugging = h.clone();
    no_debugging.options = Arc::new(Options { enable_debugging_handlers: false, ..(*h.options).clone() });
    let r = secure_router(no_debugging, allow_all());
    let get = |uri: &'static str| call(&r, "GET", uri, PeerCert::None, &[]);
    assert_eq!(get("/debug/pprof/heap").await, (405, "Debug endpoints are disabled.\n".into()));
    assert_eq!(profiler.0.lock().unwrap().len(), 5, "nothing profiled while turned off");
}
