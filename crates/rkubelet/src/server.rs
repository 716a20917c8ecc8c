//! Starting the kubelet's HTTP ports (`cmd/kubelet/app/server.go` startKubelet / RunKubelet, `kubelet.go`
//! ListenAndServe, ListenAndServeReadOnly, and `auth.go` BuildAuth): healthz on
//! `healthzBindAddress:healthzPort`; with `enableServer`, the secure port on `address:port` (TLS from
//! `tlsCertFile`/`tlsPrivateKeyFile` or a self-signed pair in `--cert-dir`, authentication and authorization as
//! configured) and, when `readOnlyPort` is not zero, the read-only port.
//!
//! Every port is bound before [`start_secure`]/[`start_local`] return, so a taken port or a bad certificate
//! stops start-up with a message naming the field; the servers then run until the cancellation token fires.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use kubelet_apiclient::ReviewApi;
use kubelet_config::kubelet_config::KubeletConfiguration;
use kubelet_server::auth::{AccessWebhook, Authenticator, Authorizer, TokenWebhook};
use kubelet_server::handlers::{Auth, Handlers, Options, healthz_router, read_only_router, secure_router};
use kubelet_server::listen::{Limits, serve};
use kubelet_server::tls::{TlsSettings, serving_files};
use kubelet_server::tls_reload::{Serving, TlsReloader};
use kubelet_types::Clock;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

/// Upstream's bound on streaming requests in flight (`maxInFlight` of the streaming server's request cache).
const MAX_STREAMS: usize = 1000;

/// The handlers' options from the configuration.
pub fn options(cfg: &KubeletConfiguration, node_name: &str) -> Options {
    Options {
        node_name: node_name.to_string(),
        enable_debugging_handlers: cfg.enable_debugging_handlers.unwrap_or(true),
        enable_system_log_handler: cfg.enable_system_log_handler.unwrap_or(true),
        enable_debug_flags_handler: cfg.enable_debug_flags_handler.unwrap_or(true),
        enable_profiling_handler: cfg.enable_profiling_handler.unwrap_or(true),
        container_checkpoint: cfg.gate("ContainerCheckpoint"),
        system_log_dir: "/var/log".into(),
        pod_logs_dir: cfg.pod_logs_dir.clone().into(),
        streaming_idle_timeout: cfg.streaming_connection_idle_timeout.0,
        max_streams: MAX_STREAMS,
    }
}

/// `/configz`: `{"kubeletconfig": <the effective v1beta1 configuration without kind and apiVersion>}`.
pub fn configz(cfg: &KubeletConfiguration) -> serde_json::Value {
    let mut v = serde_json::to_value(cfg).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    serde_json::json!({ "kubeletconfig": v })
}

async fn bind(addr: SocketAddr, what: &str, field: &str) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listen for the {what} on {addr} ({field})"))
}

fn addr(host: &str, port: i32, field: &str) -> anyhow::Result<SocketAddr> {
    let ip: std::net::IpAddr = host.parse().with_context(|| format!("{field} {host:?} is not an IP address"))?;
    Ok(SocketAddr::new(ip, port as u16))
}

/// Starts the healthz port and, with `enableServer`, the read-only port (neither needs the apiserver).
pub async fn start_local(
    cfg: &KubeletConfiguration,
    h: &Handlers,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let healthz_port = cfg.healthz_port.unwrap_or(10248);
    if healthz_port > 0 {
        let a = addr(&cfg.healthz_bind_address, healthz_port, "healthzBindAddress")?;
        let l = bind(a, "healthz endpoint", "healthzBindAddress:healthzPort").await?;
        tracker.spawn(serve(l, None, healthz_router(h.clone()), Limits::default(), cancel.clone()));
        info!(address = %a, "healthz server listening");
    }
    if cfg.enable_server.unwrap_or(true) && cfg.read_only_port > 0 {
        let a = addr(&cfg.address, cfg.read_only_port, "address")?;
        let l = bind(a, "read-only API", "address:readOnlyPort").await?;
        tracker.spawn(serve(l, None, read_only_router(h.clone()), Limits::default(), cancel.clone()));
        info!(address = %a, "read-only server listening");
    }
    Ok(())
}

/// Authentication and authorization as configured; the webhooks need an apiserver client.
pub fn auth(cfg: &KubeletConfiguration, node_name: &str, api: Option<Arc<dyn ReviewApi>>) -> anyhow::Result<Auth> {
    let authn = &cfg.authentication;
    let webhook = match (authn.webhook.enabled.unwrap_or(false), &api) {
        (false, _) => None,
        (true, Some(api)) => Some(TokenWebhook::new(api.clone(), authn.webhook.cache_ttl.0)),
        (true, None) => anyhow::bail!(
            "invalid configuration: authentication.webhook.enabled: no client provided, cannot use webhook \
             authentication (give --kubeconfig, or set it to false)"
        ),
    };
    let authorizer = match (cfg.authorization.mode.as_str(), &api) {
        ("AlwaysAllow", _) => Authorizer::AlwaysAllow,
        ("Webhook", Some(api)) => Authorizer::Webhook(AccessWebhook::new(
            api.clone(),
            cfg.authorization.webhook.cache_authorized_ttl.0,
            cfg.authorization.webhook.cache_unauthorized_ttl.0,
        )),
        ("Webhook", None) => anyhow::bail!(
            "invalid configuration: authorization.mode: Webhook needs an apiserver client (give --kubeconfig, or use \
             AlwaysAllow)"
        ),
        ("", _) => anyhow::bail!("invalid configuration: authorization.mode: no authorization mode specified"),
        (m, _) => anyhow::bail!("invalid configuration: authorization.mode: unknown authorization mode {m}"),
    };
    Ok(Auth {
        authenticator: Authenticator { anonymous: authn.anonymous.enabled.unwrap_or(false), webhook },
        authorizer,
        node_name: node_name.to_string(),
    })
}

/// Starts the secure port (with `enableServer`).
#[allow(clippy::too_many_arguments)]
pub async fn start_secure(
    cfg: &KubeletConfiguration,
    cert_dir: &Path,
    node_name: &str,
    clock: &dyn Clock,
    h: &Handlers,
    api: Option<Arc<dyn ReviewApi>>,
    serving: Option<tokio::sync::watch::Receiver<Option<Arc<rustls::sign::CertifiedKey>>>>,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    if !cfg.enable_server.unwrap_or(true) {
        info!("enableServer is false: the kubelet API is not served");
        return Ok(());
    }
    let auth = Arc::new(auth(cfg, node_name, api)?);
    let (cert_file, key_file) = match &serving {
        Some(_) => (cert_dir.join("kubelet-server-current.pem"), cert_dir.join("kubelet-server-current.pem")),
        None => serving_files(&cfg.tls_cert_file, &cfg.tls_private_key_file, cert_dir, node_name, clock.now())?,
    };
    let settings = TlsSettings {
        cert_file,
        key_file,
        client_ca_file: Some(cfg.authentication.x509.client_ca_file.clone()).filter(|f| !f.is_empty()).map(Into::into),
        min_version: cfg.tls_min_version.clone(),
        cipher_suites: cfg.tls_cipher_suites.clone(),
    };
    let source = match serving {
        Some(rx) => Serving::Managed(rx),
        None => Serving::Files,
    };
    let (reloader, tls) = TlsReloader::new(settings.clone(), source)?;
    tracker.spawn(reloader.run(cancel.clone()));
    let a = addr(&cfg.address, cfg.port, "address")?;
    let l = bind(a, "kubelet API", "address:port").await?;
    let router = secure_router(h.clone(), auth);
    tracker.spawn(serve(l, Some(tls), router, Limits::default(), cancel.clone()));
    info!(address = %a, cert = %settings.cert_file.display(), "kubelet API listening (HTTPS)");
    Ok(())
}

/// `/debug/pprof/` profiles of this process (`kubelet_pprof`).
pub struct ProcessProfiler;

#[async_trait::async_trait]
impl kubelet_server::handlers::Profiler for ProcessProfiler {
    async fn cpu(&self, duration: std::time::Duration) -> Result<Vec<u8>, String> {
        kubelet_pprof::cpu::profile(duration).await.map_err(|e| e.to_string())
    }

    fn heap(&self, allocs: bool) -> Result<Vec<u8>, String> {
        Ok(kubelet_pprof::heap::profile(allocs))
    }
}
