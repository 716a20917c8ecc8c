//! Certificate rotation wiring (`cmd/kubelet/app/server.go` buildKubeletClientConfig, `pkg/kubelet/kubelet.go`
//! serverCertificateManager): with `rotateCertificates` the apiserver client presents the client certificate
//! manager's pair and reconnects when it changes; with `serverTLSBootstrap` the kubelet API serves the serving
//! certificate manager's pair, asked for with the node's addresses. Called once at start by the cluster wiring;
//! the managers then run until cancelled.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use kubelet_kube::KubeApi;
use kubelet_kube::certificate::csr::CsrClient;
use kubelet_kube::certificate::manager::{
    CLIENT_USAGES, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, SERVING_USAGES,
};
use kubelet_kube::certificate::{CertMetrics, FileStore, Manager, ManagerConfig, Template, transport};
use kubelet_metrics::certs;
use kubelet_types::Clock;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

struct ClientMetrics;

impl CertMetrics for ClientMetrics {
    fn renew_failed(&self) {
        certs::CLIENT_RENEW_ERRORS.inc(&[]);
    }
    fn rotated(&self, _lived: Duration) {}
    fn current(&self, not_after: Option<SystemTime>) {
        certs::CLIENT_TTL.set(not_after);
    }
}

struct ServerMetrics;

impl CertMetrics for ServerMetrics {
    fn renew_failed(&self) {
        certs::SERVER_RENEW_ERRORS.inc(&[]);
    }
    fn rotated(&self, lived: Duration) {
        certs::SERVER_ROTATION_SECONDS.observe(&[], lived.as_secs_f64());
    }
    fn current(&self, not_after: Option<SystemTime>) {
        certs::SERVER_TTL.set(not_after);
    }
}

fn jitter() -> f64 {
    rand::random::<f64>()
}

/// The apiserver client: on a rotating client certificate with `rotateCertificates`, else as the kubeconfig says.
#[allow(clippy::too_many_arguments)]
pub async fn client_api(
    rotate: bool,
    kubeconfig: &Path,
    bootstrap_kubeconfig: Option<&Path>,
    cert_dir: &Path,
    node_name: &str,
    clock: Arc<dyn Clock>,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> anyhow::Result<KubeApi> {
    if !rotate {
        return KubeApi::from_kubeconfig(kubeconfig).await.context("connect to the apiserver");
    }
    let (files, data) = kubelet_kube::certificate::kubeconfig_client_cert(kubeconfig)?;
    if files.is_none() && data.is_none() {
        warn!(kubeconfig = %kubeconfig.display(), "rotateCertificates: the kubeconfig has no client certificate; client certificate rotation is off");
        return KubeApi::from_kubeconfig(kubeconfig).await.context("connect to the apiserver");
    }
    let (cert_file, key_file) = files.unzip();
    let store = FileStore::new(cert_dir, "kubelet-client", cert_file, key_file);
    if store.current().ok().flatten().is_none()
        && let Some((c, k)) = &data
    {
        // Embedded data seed the store, as upstream's bootstrap certificate PEM.
        store.update(c, k, clock.now()).context("store the kubeconfig's client certificate")?;
    }
    let node = node_name.to_string();
    let template: Arc<dyn Fn() -> Option<Template> + Send + Sync> = Arc::new(move || {
        Some(Template {
            common_name: format!("system:node:{node}"),
            organization: "system:nodes".into(),
            ..Default::default()
        })
    });
    // Read only when a certificate has to be had with it (none, or expired), as upstream: on a kubeadm control
    // plane node there is no bootstrap file at all.
    let bootstrap_csr = bootstrap_kubeconfig.map(|b| {
        Arc::new(LazyBootstrapCsr { path: b.to_path_buf(), client: Default::default() }) as Arc<dyn CsrClient>
    });
    std::sync::LazyLock::force(&certs::CLIENT_RENEW_ERRORS);
    let manager = Arc::new(
        Manager::new(ManagerConfig {
            kind: "client",
            signer: KUBELET_CLIENT_SIGNER,
            usages: &CLIENT_USAGES,
            store,
            template,
            bootstrap_csr,
            metrics: Arc::new(ClientMetrics),
            clock,
            jitter,
        })
        .context("client certificate")?,
    );
    let (api, conns) =
        KubeApi::from_kubeconfig_rotating(kubeconfig, manager.subscribe()).await.context("connect to the apiserver")?;
    let csr: Arc<dyn CsrClient> = Arc::new(api.csr_client());
    tracker.spawn(manager.clone().run(csr, cancel.clone()));
    tracker.spawn(transport::close_on_rotation(manager.subscribe(), conns, cancel.clone()));
    info!(certDir = %cert_dir.display(), "client certificate rotation is on");
    Ok(api)
}

/// The CSR API with the `--bootstrap-kubeconfig` credentials, read from the file at first use.
struct LazyBootstrapCsr {
    path: std::path::PathBuf,
    client: tokio::sync::OnceCell<kubelet_kube::certificate::csr::KubeCsr>,
}

impl LazyBootstrapCsr {
    async fn client(
        &self,
    ) -> Result<&kubelet_kube::certificate::csr::KubeCsr, kubelet_kube::certificate::csr::CsrError> {
        self.client
            .get_or_try_init(|| async {
                let api = KubeApi::from_kubeconfig(&self.path).await.map_err(|e| {
                    kubelet_kube::certificate::csr::CsrError::Api(kubelet_apiclient::ApiError::Other {
                        code: 0,
                        message: format!("bootstrap kubeconfig: {e}"),
                    })
                })?;
                Ok(api.csr_client())
            })
            .await
    }
}

#[async_trait::async_trait]
impl CsrClient for LazyBootstrapCsr {
    async fn create(
        &self,
        req: &kubelet_kube::certificate::csr::CsrRequest,
    ) -> Result<(String, String), kubelet_kube::certificate::csr::CsrError> {
        self.client().await?.create(req).await
    }

    async fn wait(&self, name: &str, uid: &str) -> Result<Vec<u8>, kubelet_kube::certificate::csr::CsrError> {
        self.client().await?.wait(name, uid).await
    }
}

/// The node's hostnames and IPs as upstream's `addressesToHostnamesAndIPs` (sorted, deduplicated).
fn serving_template(node_name: &str, node: Option<&Node>) -> Option<Template> {
    let mut dns = std::collections::BTreeSet::new();
    let mut ips = std::collections::BTreeSet::new();
    for a in node.and_then(|n| n.status.as_ref()).and_then(|s| s.addresses.as_ref()).into_iter().flatten() {
        if a.address.is_empty() {
            continue;
        }
        let ip = a.address.parse::<std::net::IpAddr>().ok();
        match (a.type_.as_str(), ip) {
            ("Hostname", Some(ip)) | ("InternalIP" | "ExternalIP", Some(ip)) => {
                ips.insert(ip);
            }
            ("Hostname" | "InternalDNS" | "ExternalDNS", None) => {
                dns.insert(a.address.clone());
            }
            _ => {}
        }
    }
    // Upstream asks for no certificate without an IP (AllowDNSOnlyNodeCSR off).
    if ips.is_empty() {
        return None;
    }
    let mut ips: Vec<_> = ips.into_iter().collect();
    ips.sort_by_key(|i| i.to_string());
    Some(Template {
        common_name: format!("system:node:{node_name}"),
        organization: "system:nodes".into(),
        dns_names: dns.into_iter().collect(),
        ips,
    })
}

/// Starts the serving certificate manager; returns the channel of its pair for the kubelet API.
#[allow(clippy::too_many_arguments)]
pub fn serving_certificates(
    api: &KubeApi,
    cfg_cert: (&str, &str),
    cert_dir: &Path,
    node_name: &str,
    node: watch::Receiver<Option<Node>>,
    clock: Arc<dyn Clock>,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> anyhow::Result<watch::Receiver<Option<Arc<CertifiedKey>>>> {
    let non_empty = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
    let store = FileStore::new(cert_dir, "kubelet-server", non_empty(cfg_cert.0), non_empty(cfg_cert.1));
    let name = node_name.to_string();
    let template: Arc<dyn Fn() -> Option<Template> + Send + Sync> =
        Arc::new(move || serving_template(&name, node.borrow().as_ref()));
    std::sync::LazyLock::force(&certs::SERVER_RENEW_ERRORS);
    std::sync::LazyLock::force(&certs::SERVER_ROTATION_SECONDS);
    let manager = Arc::new(
        Manager::new(ManagerConfig {
            kind: "serving",
            signer: KUBELET_SERVING_SIGNER,
            usages: &SERVING_USAGES,
            store,
            template,
            bootstrap_csr: None,
            metrics: Arc::new(ServerMetrics),
            clock,
            jitter,
        })
        .context("serving certificate")?,
    );
    let csr: Arc<dyn CsrClient> = Arc::new(api.csr_client());
    tracker.spawn(manager.clone().run(csr, cancel.clone()));
    let mut pairs = manager.subscribe();
    let (tx, rx) = watch::channel(pairs.borrow().as_ref().map(|p| p.certified.clone()));
    let cancel = cancel.clone();
    tracker.spawn(async move {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = pairs.changed() => if r.is_err() { return },
            }
            let ck = pairs.borrow().as_ref().map(|p| p.certified.clone());
            tx.send_replace(ck);
        }
    });
    info!(certDir = %cert_dir.display(), "serverTLSBootstrap: the kubelet API serves a certificate requested from the apiserver");
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    #[test]
    fn serving_names_come_from_the_node_addresses_and_need_an_ip() {
        let node = |addrs: &[(&str, &str)]| Node {
            status: Some(NodeStatus {
                addresses: Some(
                    addrs.iter().map(|(t, a)| NodeAddress { type_: t.to_string(), address: a.to_string() }).collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(serving_template("n1", Some(&node(&[("Hostname", "n1")]))), None, "no IP, no request");
        let t = serving_template(
            "n1",
            Some(&node(&[
                ("Hostname", "n1"),
                ("InternalIP", "10.0.0.9"),
                ("InternalIP", "10.0.0.10"),
                ("ExternalDNS", "n1.example"),
            ])),
        )
        .unwrap();
        assert_eq!(t.common_name, "system:node:n1");
        assert_eq!(t.organization, "system:nodes");
        assert_eq!(t.dns_names, ["n1", "n1.example"]);
        assert_eq!(t.ips, ["10.0.0.10".parse::<std::net::IpAddr>().unwrap(), "10.0.0.9".parse().unwrap()]);
    }
}
