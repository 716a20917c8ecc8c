//! The server and its handle: an HTTP/1.1 listener on 127.0.0.1, plain or (with `Options::tls`) HTTPS
//! with a generated test CA as kube-apiserver's secure port serves it; authentication of client
//! certificates (CN/O), bearer tokens (bootstrap tokens as `system:bootstrap:<id>`, static tokens);
//! kubeconfigs for clients, and test controls: stop/restart on the same port keeping the store (an
//! apiserver outage), expiring the watch window (410 on resume), closing every open watch, and the
//! log of requests.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::api;
use crate::error::{ApiError, ServerError};
use crate::resources;
use crate::store::Store;
use crate::strategy::{DeleteOptions, Part, User};
use crate::tls::{Pki, TlsError, TlsOptions};

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
    /// Serve HTTPS with a generated test CA, authenticate client certificates and sign approved
    /// CSRs; `None` (the default) serves plain HTTP.
    pub tls: Option<TlsOptions>,
    /// Approve kubelet client CSRs of bootstrappers and of nodes renewing their own certificate, as
    /// kube-controller-manager's `csrapproving` controller (only with `tls`).
    pub auto_approve_node_csrs: bool,
    /// The longest lifetime of a service account token (`--service-account-max-token-expiration`); longer
    /// requests are granted this one. `None`: as asked.
    pub max_token_expiration: Option<Duration>,
    /// Who may do what, for SubjectAccessReviews (`system:masters` may do everything besides).
    pub access_rules: Vec<crate::review::AccessRule>,
    /// Where every kubelet is reached for `pods/log`, `exec`, `attach` and `portforward` instead of its node's
    /// address (tests run kubelets on loopback); the port is still the node's.
    pub kubelet_address: Option<String>,
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
            tls: None,
            auto_approve_node_csrs: false,
            max_token_expiration: None,
            access_rules: Vec::new(),
            kubelet_address: None,
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
    /// The test CA and the HTTPS configuration, with `Options::tls`.
    pub pki: Option<Arc<Pki>>,
    /// The service account token signer and the published root CA.
    pub signer: crate::serviceaccount::Signer,
    /// TLS towards kubelets (with the `kube-apiserver-kubelet-client` certificate when serving TLS).
    pub kubelet_client: Arc<rustls::ClientConfig>,
}

impl Shared {
    /// Creates an object as `user` would through the API, with what the controllers do after (a namespace gets
    /// its `default` ServiceAccount and `kube-root-ca.crt`).
    pub fn create(
        &self,
        def: &resources::ResourceDef,
        ns: Option<&str>,
        obj: Value,
        user: &User,
    ) -> Result<Value, ApiError> {
        let out = api::create(&self.store, def, ns, obj, user)?;
        if def.group.is_empty() && def.resource == "namespaces" {
            let name = out.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            crate::serviceaccount::publish(&self.store, name, &self.signer.root_ca_pem)?;
        }
        Ok(out)
    }

    /// Authenticates a request by its verified client certificate's user (which wins, as the x509
    /// authenticator comes first) or its `Authorization` header.
    pub fn authenticate(&self, cert_user: Option<&User>, authorization: Option<&str>) -> Result<User, ApiError> {
        if let Some(u) = cert_user {
            return Ok(u.clone());
        }
        let Some(h) = authorization else {
            return self.opts.anonymous.clone().ok_or_else(ApiError::unauthorized);
        };
        let token = h.strip_prefix("Bearer ").map(str::trim).ok_or_else(ApiError::unauthorized)?;
        crate::review::user_of_token(self, token).ok_or_else(ApiError::unauthorized)
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
    controllers: Option<JoinHandle<()>>,
}

/// A running (or stopped) test apiserver. Dropping it stops it.
pub struct TestApiServer {
    shared: Arc<Shared>,
    port: u16,
    running: Option<Running>,
}

async fn serve_conn<S>(io: S, shared: Arc<Shared>, cert_user: Option<User>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| crate::http::handle(shared.clone(), cert_user.clone(), req));
    if let Err(e) = http1::Builder::new().serve_connection(TokioIo::new(io), svc).with_upgrades().await {
        tracing::debug!(error = %e, "connection ended");
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let acceptor = shared.pki.as_ref().map(|p| tokio_rustls::TlsAcceptor::from(p.server_config()));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            r = listener.accept() => {
                let Ok((stream, _peer)) = r else { continue };
                let shared = shared.clone();
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    let Some(acceptor) = acceptor else {
                        return serve_conn(stream, shared, None).await;
                    };
                    let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => return tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => return tracing::debug!("TLS handshake timed out"),
                    };
                    let user = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| crate::tls::user_of_cert(c));
                    serve_conn(tls, shared, user).await;
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
        let pki = opts.tls.as_ref().map(Pki::new).transpose()?.map(Arc::new);
        let store = Store::new(opts.watch_history);
        api::seed(&store)?;
        let root_ca_pem = match &pki {
            Some(p) => p.ca_pem().to_string(),
            None => crate::tls::self_signed_ca_pem()?,
        };
        let max = opts.max_token_expiration.map(|d| d.as_secs() as i64);
        let signer = crate::serviceaccount::Signer::new(root_ca_pem, max);
        for ns in api::SEEDED_NAMESPACES {
            crate::serviceaccount::publish(&store, ns, &signer.root_ca_pem)?;
        }
        let (close_watches, _) = watch::channel(0);
        let identity = match &pki {
            Some(p) => Some(p.issue_client_cert("kube-apiserver-kubelet-client", &["system:masters"])?),
            None => None,
        };
        let kubelet_client = crate::proxy::kubelet_client_config(identity);
        let shared = Arc::new(Shared {
            store,
            opts: opts.clone(),
            close_watches,
            requests: Mutex::new(Vec::new()),
            addr: Mutex::new(String::new()),
            request_seq: watch::channel(0).0,
            pki,
            signer,
            kubelet_client,
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
        let controllers = self.shared.pki.clone().map(|pki| tokio::spawn(crate::signer::run(self.shared.clone(), pki)));
        self.running = Some(Running { shutdown, task, controllers });
        Ok(())
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`, or `https://...` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.shared.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Whether the server is listening.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Stops listening and drops every connection (watches end abruptly); the store is kept.
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            let _ = r.shutdown.send(true);
            if let Some(c) = r.controllers {
                c.abort();
            }
            let _ = r.task.await;
        }
    }

    /// Starts listening again on the same port, with the same store.
    pub async fn restart(&mut self) -> Result<(), ServerError> {
        self.listen().await
    }

    /// A kubeconfig for this server (cluster, user and context `test-apiserver`) whose user has
    /// no credentials (the anonymous user; with TLS the cluster has `certificate-authority-data`).
    pub fn kubeconfig_yaml(&self) -> String {
        crate::kubeconfig::yaml(&self.url(), self.ca_pem(), &crate::kubeconfig::Credentials::None)
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`.
    pub fn kubeconfig(&self, path: impl AsRef<std::path::Path>) -> Result<(), ServerError> {
        crate::kubeconfig::write(path.as_ref(), &self.kubeconfig_yaml())
    }

    /// Writes a kubeconfig authenticating with a client certificate and key (PEM), e.g. from
    /// [`Self::issue_client_cert`] or a kubelet's signed CSR.
    pub fn kubeconfig_for(
        &self,
        path: impl AsRef<std::path::Path>,
        cert_pem: &str,
        key_pem: &str,
    ) -> Result<(), ServerError> {
        let creds = crate::kubeconfig::Credentials::ClientCert { cert_pem, key_pem };
        crate::kubeconfig::write(path.as_ref(), &crate::kubeconfig::yaml(&self.url(), self.ca_pem(), &creds))
    }

    /// Writes a kubeconfig authenticating with a bearer token (a kubelet's `--bootstrap-kubeconfig`
    /// with a bootstrap token `<id>.<secret>` from `Options::bootstrap_tokens`).
    pub fn bootstrap_kubeconfig(&self, path: impl AsRef<std::path::Path>, token: &str) -> Result<(), ServerError> {
        let creds = crate::kubeconfig::Credentials::Token(token);
        crate::kubeconfig::write(path.as_ref(), &crate::kubeconfig::yaml(&self.url(), self.ca_pem(), &creds))
    }

    /// Writes a kubeconfig of a cluster admin (a client certificate `CN=admin, O=system:masters`);
    /// needs TLS.
    pub fn admin_kubeconfig(&self, path: impl AsRef<std::path::Path>) -> Result<(), ServerError> {
        let (cert, key) = self.issue_client_cert("admin", &["system:masters"])?;
        self.kubeconfig_for(path, &cert, &key)
    }

    /// The test CA certificate (PEM), with TLS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.shared.pki.as_deref().map(Pki::ca_pem)
    }

    /// A client certificate and key (PEM, the key PKCS#8) signed by the test CA for user `cn` in
    /// `groups` (the O values; at most one), valid one year; needs TLS.
    pub fn issue_client_cert(&self, cn: &str, groups: &[&str]) -> Result<(String, String), ServerError> {
        let pki = self.shared.pki.as_deref().ok_or(TlsError::NotEnabled)?;
        Ok(pki.issue_client_cert(cn, groups)?)
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

    /// The claims of a service account token this server issued, when its signature checks.
    pub fn verify_token(&self, token: &str) -> Option<Value> {
        crate::serviceaccount::verify(&self.shared.signer, token)
    }

    /// The root CA published in every namespace's `kube-root-ca.crt`.
    pub fn root_ca_pem(&self) -> &str {
        &self.shared.signer.root_ca_pem
    }

    /// Creates an object as `system:admin` (e.g. `create("v1", "pods", Some("default"), pod)`).
    pub fn create(
        &self,
        api_version: &str,
        resource: &str,
        ns: Option<&str>,
        obj: Value,
    ) -> Result<Value, ServerError> {
        Ok(self.shared.create(Self::def(api_version, resource)?, ns, obj, &User::admin())?)
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

    /// A receiver told the latest resourceVersion after every write: with [`TestApiServer::events_since`], an
    /// in-process watch of every resource (no HTTP in between), for benchmarks that time what a watch sees.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.store.subscribe()
    }

    /// The changes after `rv`, oldest first; 410 Expired once the event window no longer reaches back to it.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<crate::store::Event>>, ServerError> {
        Ok(self.shared.store.events_since(rv)?)
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
            if let Some(c) = r.controllers {
                c.abort();
            }
            r.task.abort();
        }
    }
}
