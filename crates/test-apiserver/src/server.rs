//! The server and its handle: an HTTP/1.1 listener on 127.0.0.1 (what kube-apiserver's secure port
//! serves, without TLS), authentication of bearer tokens (bootstrap tokens as
//! `system:bootstrap:<id>`, static tokens), a kubeconfig for clients, and test controls: stop/restart
//! on the same port keeping the store (an apiserver outage), expiring the watch window (410 on
//! resume), closing every open watch, and the log of requests.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::api;
use crate::error::{ApiError, ServerError};
use crate::resources;
use crate::store::Store;
use crate::strategy::{DeleteOptions, Part, User};

/// Options of a test apiserver.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// How many past events watches can resume from.
    pub watch_history: usize,
    /// Lifetime of a watch without `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// Interval of bookmarks on watches that allow them.
    pub bookmark_interval: Duration,
    /// Bootstrap tokens `<id>.<secret>` accepted as `system:bootstrap:<id>` in `system:bootstrappers`.
    pub bootstrap_tokens: Vec<String>,
    /// Static bearer tokens and their users.
    pub tokens: Vec<(String, User)>,
    /// The user of requests without credentials; `None` answers them 401.
    pub anonymous: Option<User>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            port: 0,
            watch_history: 1000,
            default_watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(60),
            bootstrap_tokens: Vec::new(),
            tokens: Vec::new(),
            anonymous: Some(User::admin()),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The authenticated user (empty if refused).
    pub user: String,
    /// `User-Agent`.
    pub user_agent: String,
}

/// State shared by the listener, the handlers and the handle.
pub struct Shared {
    /// The objects.
    pub store: Store,
    /// The options.
    pub opts: Options,
    /// Bumped to end every open watch.
    pub close_watches: watch::Sender<u64>,
    /// Requests received.
    pub requests: Mutex<Vec<RequestRecord>>,
    /// `host:port` the server listens on.
    pub addr: Mutex<String>,
    /// Bumped after every request is logged.
    pub request_seq: watch::Sender<u64>,
}

impl Shared {
    /// Authenticates a request by its `Authorization` header.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<User, ApiError> {
        let Some(h) = authorization else {
            return self.opts.anonymous.clone().ok_or_else(ApiError::unauthorized);
        };
        let token = h.strip_prefix("Bearer ").map(str::trim).ok_or_else(ApiError::unauthorized)?;
        if let Some((_, u)) = self.opts.tokens.iter().find(|(t, _)| t == token) {
            return Ok(u.clone());
        }
        if self.opts.bootstrap_tokens.iter().any(|t| t == token) {
            let id = token.split('.').next().unwrap_or("");
            return Ok(User {
                name: format!("system:bootstrap:{id}"),
                groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
            });
        }
        Err(ApiError::unauthorized())
    }

    fn record(&self, r: RequestRecord) {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        self.request_seq.send_modify(|v| *v += 1);
    }

    pub(crate) fn log(&self, method: &str, uri: &str, user: &str, ua: &str) {
        self.record(RequestRecord { method: method.into(), uri: uri.into(), user: user.into(), user_agent: ua.into() });
    }
}

struct Running {
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// A running (or stopped) test apiserver. Dropping it stops it.
pub struct TestApiServer {
    shared: Arc<Shared>,
    port: u16,
    running: Option<Running>,
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            r = listener.accept() => {
                let Ok((stream, _peer)) = r else { continue };
                let shared = shared.clone();
                conns.spawn(async move {
                    let svc = service_fn(move |req| crate::http::handle(shared.clone(), req));
                    if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await {
                        tracing::debug!(error = %e, "connection ended");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

impl TestApiServer {
    /// Starts a server on 127.0.0.1 (`opts.port`, 0 for any), with the namespaces `default`,
    /// `kube-system`, `kube-public` and `kube-node-lease`.
    pub async fn start(opts: Options) -> Result<Self, ServerError> {
        let store = Store::new(opts.watch_history);
        api::seed(&store)?;
        let (close_watches, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            store,
            opts: opts.clone(),
            close_watches,
            requests: Mutex::new(Vec::new()),
            addr: Mutex::new(String::new()),
            request_seq: watch::channel(0).0,
        });
        let mut s = TestApiServer { shared, port: opts.port, running: None };
        s.listen().await?;
        Ok(s)
    }

    async fn listen(&mut self) -> Result<(), ServerError> {
        if self.running.is_some() {
            return Err(ServerError::State("the server is already running"));
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let listener =
            TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { addr: addr.to_string(), source })?;
        let local = listener.local_addr().map_err(|source| ServerError::Bind { addr: addr.to_string(), source })?;
        self.port = local.port();
        *self.shared.addr.lock().unwrap_or_else(|e| e.into_inner()) = local.to_string();
        let (shutdown, rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, self.shared.clone(), rx));
        self.running = Some(Running { shutdown, task });
        Ok(())
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether the server is listening.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Stops listening and drops every connection (watches end abruptly); the store is kept.
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.shutdown.send(true);
            let _ = r.task.await;
        }
    }

    /// Starts listening again on the same port, with the same store.
    pub async fn restart(&mut self) -> Result<(), ServerError> {
        self.listen().await
    }

    /// A kubeconfig for this server (cluster, user and context `test-apiserver`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test-apiserver\n  cluster:\n    server: {}\ncontexts:\n- name: test-apiserver\n  context:\n    cluster: test-apiserver\n    user: test-apiserver\n    namespace: default\ncurrent-context: test-apiserver\nusers:\n- name: test-apiserver\n  user: {{}}\npreferences: {{}}\n",
            self.url()
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`.
    pub fn kubeconfig(&self, path: impl AsRef<std::path::Path>) -> Result<(), ServerError> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig_yaml())
            .map_err(|source| ServerError::Write { path: path.display().to_string(), source })
    }

    /// Forgets the watch event window: a watch resuming from any earlier resourceVersion gets
    /// `ERROR` 410 Expired.
    pub fn expire_watch_history(&self) {
        self.shared.store.expire_history();
    }

    /// Ends every open watch stream cleanly (as a watch timeout does).
    pub fn close_watches(&self) {
        self.shared.close_watches.send_modify(|v| *v += 1);
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until a request matching `f` has been received (including earlier ones).
    pub async fn wait_for_request<F>(&self, timeout: Duration, mut f: F) -> Result<RequestRecord, ServerError>
    where
        F: FnMut(&RequestRecord) -> bool,
    {
        let mut rx = self.shared.request_seq.subscribe();
        let wait = async {
            loop {
                rx.borrow_and_update();
                if let Some(r) = self.requests().into_iter().find(|r| f(r)) {
                    return Ok(r);
                }
                if rx.changed().await.is_err() {
                    return Err(ServerError::State("the server is gone"));
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| ServerError::State("timed out waiting for the request"))?
    }

    fn def(api_version: &str, resource: &str) -> Result<&'static resources::ResourceDef, ServerError> {
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        resources::find(g, v, resource).ok_or_else(|| ServerError::Api(ApiError::path_not_found()))
    }

    /// Creates an object as `system:admin` (e.g. `create("v1", "pods", Some("default"), pod)`).
    pub fn create(
        &self,
        api_version: &str,
        resource: &str,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ServerError> {
        Ok(api::create(&self.shared.store, Self::def(api_version, resource)?, ns, obj, &User::admin())?)
    }

    /// Reads an object.
    pub fn get(&self, api_version: &str, resource: &str, ns: Option<&str>, name: &str) -> Result<Value, ServerError> {
        Ok(api::get(&self.shared.store, Self::def(api_version, resource)?, ns, name)?)
    }

    /// Lists objects (all namespaces with `None`).
    pub fn list(&self, api_version: &str, resource: &str, ns: Option<&str>) -> Result<Vec<Value>, ServerError> {
        let l = api::list(&self.shared.store, Self::def(api_version, resource)?, ns, &Default::default());
        Ok(l["items"].as_array().cloned().unwrap_or_default())
    }

    /// Replaces an object (`status = true`: through `/status`).
    pub fn update(
        &self,
        api_version: &str,
        resource: &str,
        ns: Option<&str>,
        name: &str,
        obj: Value,
        status: bool,
    ) -> Result<Value, ServerError> {
        let part = if status { Part::Status } else { Part::Main };
        Ok(api::update(&self.shared.store, Self::def(api_version, resource)?, part, ns, name, obj)?)
    }

    /// Deletes an object; `grace` is `DeleteOptions.gracePeriodSeconds`. Returns whether it is gone.
    pub fn delete(
        &self,
        api_version: &str,
        resource: &str,
        ns: Option<&str>,
        name: &str,
        grace: Option<i64>,
    ) -> Result<bool, ServerError> {
        let opts = DeleteOptions { grace_period_seconds: grace, ..Default::default() };
        Ok(api::delete(&self.shared.store, Self::def(api_version, resource)?, ns, name, &opts)?.removed)
    }

    /// Waits until `f` holds for the object (or its absence, `None`), re-checking on every write.
    pub async fn wait_for<F>(
        &self,
        api_version: &str,
        resource: &str,
        ns: Option<&str>,
        name: &str,
        timeout: Duration,
        mut f: F,
    ) -> Result<Option<Value>, ServerError>
    where
        F: FnMut(Option<&Value>) -> bool,
    {
        let mut rx = self.shared.store.subscribe();
        let wait = async {
            loop {
                rx.borrow_and_update();
                let cur = self.get(api_version, resource, ns, name).ok();
                if f(cur.as_ref()) {
                    return Ok(cur);
                }
                if rx.changed().await.is_err() {
                    return Err(ServerError::State("the store is gone"));
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| ServerError::State("timed out waiting for the condition"))?
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.shutdown.send(true);
            r.task.abort();
        }
    }
}
