//! What the kubelet's HTTP API (`kubelet-server`, upstream `pkg/kubelet/server`) reads of the core: upstream's
//! `HostInterface` as [`KubeletHost`], and the sync loop's health (`syncLoopHealthCheck`).
//!
//! The handlers call these from the server's tasks at any time; nothing here blocks the sync loop (the pod list
//! is a watch channel's latest value, statuses and the runtime cache are read under short locks, and runtime
//! calls go to the CRI with its own timeouts).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kubelet_cri::{CriError, RuntimeService, api as cri};
use kubelet_runtime::{PlegHealth, PodCache};
use kubelet_server::host::{ContainerAccess, HealthResult, HostError, PodsView, StreamOpts};
use kubelet_types::Pod;
use kubelet_types::runtime::ContainerState;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::status::StatusManager;

/// Whether the sync loop turns (`syncLoopHealthCheck`): unhealthy when an iteration has not started for
/// twice the resync interval, at least 5 minutes.
#[derive(Debug)]
pub struct SyncLoopHealth {
    last: Mutex<Instant>,
    threshold: Duration,
}

impl SyncLoopHealth {
    /// Health for a loop with this `syncFrequency`.
    pub fn new(sync_frequency: Duration) -> Self {
        Self { last: Mutex::new(Instant::now()), threshold: (sync_frequency * 2).max(Duration::from_secs(300)) }
    }

    /// Marks an iteration.
    pub fn mark(&self) {
        *self.last.lock().unwrap() = Instant::now();
    }

    /// `Ok` while the loop turns.
    pub fn healthy(&self) -> Result<(), String> {
        let since = self.last.lock().unwrap().elapsed();
        if since > self.threshold {
            return Err(format!("sync Loop took longer than expected: last iteration {since:?} ago"));
        }
        Ok(())
    }
}

/// What the kubelet's HTTP handlers read of the core: the pods and their statuses, the runtime and its pod
/// cache, and the health of the loops. Implements the traits of `kubelet-server`.
#[derive(Clone)]
pub struct KubeletHost {
    /// Sync loop health.
    pub syncloop: Arc<SyncLoopHealth>,
    /// PLEG health.
    pub pleg: Arc<PlegHealth>,
    /// The desired pods, as the sync loop publishes them.
    pub pods: watch::Receiver<Arc<Vec<Arc<Pod>>>>,
    /// Their statuses.
    pub status: Arc<StatusManager>,
    /// The CRI runtime (streaming URLs, container status).
    pub runtime: Arc<dyn RuntimeService>,
    /// The runtime's view of the pods, as the PLEG keeps it.
    pub cache: Arc<PodCache>,
    /// `<root-dir>/checkpoints`, where container checkpoints go.
    pub checkpoints_dir: PathBuf,
    /// Wall clock (checkpoint names).
    pub clock: Arc<dyn kubelet_types::Clock>,
    /// The pods' recent events (`/debug/explain`).
    pub events: Arc<crate::explain::EventLog>,
}

/// A runtime error as `streaming.WriteError` answers it: NotFound 404, ResourceExhausted 429, else 500.
fn host_error(e: CriError) -> HostError {
    match e.code() {
        "NotFound" => HostError::NotFound(e.to_string()),
        "ResourceExhausted" => HostError::Exhausted(e.to_string()),
        _ => HostError::Other(e.to_string()),
    }
}

impl KubeletHost {
    /// The pod with the status the kubelet has for it; the ResourceClaim statuses stay the apiserver's (others own
    /// them, and the pod's claims are found through them).
    fn with_status(&self, p: &Pod) -> Pod {
        let mut p = p.clone();
        if let Some(st) = self.status.get(&kubelet_types::pod_update::pod_uid(&p)) {
            let mut st = (*st).clone();
            if let Some(api) = &p.status {
                st.resource_claim_statuses = api.resource_claim_statuses.clone();
                st.extended_resource_claim_status = api.extended_resource_claim_status.clone();
            }
            p.status = Some(st);
        }
        p
    }

    /// The running container `name` of `pod` (`findContainer`).
    fn running_container(&self, pod: &Pod, name: &str) -> Result<String, HostError> {
        let uid = kubelet_types::pod_update::pod_uid(pod);
        self.cache
            .get(&uid)
            .and_then(|st| {
                st.container_statuses
                    .iter()
                    .find(|c| c.name == name && c.state == ContainerState::Running)
                    .map(|c| c.id.clone())
            })
            .ok_or_else(|| HostError::Other(format!("container not found ({name:?})")))
    }
}

#[async_trait]
impl PodsView for KubeletHost {
    fn health_checks(&self) -> Vec<HealthResult> {
        vec![("syncloop", self.syncloop.healthy()), ("pleg", self.pleg.healthy())]
    }

    fn pods(&self) -> Vec<Pod> {
        let pods = self.pods.borrow().clone();
        pods.iter().map(|p| self.with_status(p)).collect()
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        let pods = self.pods.borrow().clone();
        pods.iter()
            .find(|p| {
                p.metadata.namespace.as_deref().unwrap_or("default") == namespace
                    && p.metadata.name.as_deref() == Some(name)
            })
            .map(|p| self.with_status(p))
    }

    fn explain(&self, pod: &Pod) -> serde_json::Value {
        let (ns, name) = (pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""));
        let e = crate::explain::explain(pod, &self.events.of(ns, name), self.clock.now());
        serde_json::to_value(e).unwrap_or_default()
    }

    async fn running_pods(&self) -> Result<Vec<Pod>, HostError> {
        let mut out = vec![];
        for st in self.cache.statuses() {
            if !st.sandbox_statuses.iter().any(|s| s.state == kubelet_types::runtime::SandboxState::Ready) {
                continue;
            }
            let containers: Vec<serde_json::Value> = st
                .container_statuses
                .iter()
                .filter(|c| c.state == ContainerState::Running)
                .map(|c| serde_json::json!({"name": c.name, "image": c.image}))
                .collect();
            let v = serde_json::json!({
                "metadata": {"name": st.name, "namespace": st.namespace, "uid": st.id.to_string(), "creationTimestamp": null},
                "spec": {"containers": containers},
                "status": {},
            });
            out.push(serde_json::from_value(v).map_err(|e| HostError::Other(e.to_string()))?);
        }
        out.sort_by(|a: &Pod, b: &Pod| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(out)
    }
}

#[async_trait]
impl ContainerAccess for KubeletHost {
    async fn exec(&self, pod: &Pod, container: &str, cmd: Vec<String>, o: StreamOpts) -> Result<String, HostError> {
        let id = self.running_container(pod, container)?;
        let req =
            cri::ExecRequest { container_id: id, cmd, tty: o.tty, stdin: o.stdin, stdout: o.stdout, stderr: o.stderr };
        self.runtime.exec(req).await.map_err(host_error)
    }

    async fn attach(&self, pod: &Pod, container: &str, o: StreamOpts) -> Result<String, HostError> {
        let id = self.running_container(pod, container)?;
        let req =
            cri::AttachRequest { container_id: id, stdin: o.stdin, tty: o.tty, stdout: o.stdout, stderr: o.stderr };
        self.runtime.attach(req).await.map_err(host_error)
    }

    async fn port_forward(&self, pod: &Pod, ports: Vec<i32>) -> Result<String, HostError> {
        let uid = kubelet_types::pod_update::pod_uid(pod);
        let sandbox =
            self.cache.get(&uid).and_then(|st| st.sandbox_statuses.first().map(|s| s.id.clone())).ok_or_else(|| {
                HostError::NotFound(format!("pod not found ({:?})", kubelet_types::pod_update::pod_ref(pod)))
            })?;
        self.runtime.port_forward(&sandbox, ports).await.map_err(host_error)
    }

    async fn run(&self, pod: &Pod, container: &str, cmd: Vec<String>) -> Result<Vec<u8>, HostError> {
        let id = self.running_container(pod, container)?;
        let out = self.runtime.exec_sync(&id, cmd.clone(), Duration::ZERO).await.map_err(host_error)?;
        if out.exit_code != 0 {
            return Err(HostError::Other(format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                out.exit_code,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let mut all = out.stdout;
        all.extend_from_slice(&out.stderr);
        Ok(all)
    }

    async fn log_file(&self, container_id: &str) -> Result<PathBuf, HostError> {
        let st = self
            .runtime
            .container_status(container_id)
            .await
            .map_err(|e| HostError::Other(format!("unable to retrieve container logs for {container_id}: {e}")))?;
        Ok(PathBuf::from(st.log_path))
    }

    async fn checkpoint(&self, pod: &Pod, container: &str, timeout: Option<i64>) -> Result<String, HostError> {
        let id = self
            .running_container(pod, container)
            .map_err(|_| HostError::Other(format!("container {container} not found")))?;
        // `checkpoint-<pod full name>-<container>-<RFC 3339 time>.tar` in `<root-dir>/checkpoints`.
        let full_name = format!(
            "{}_{}",
            pod.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.namespace.as_deref().unwrap_or("default")
        );
        let now = chrono::DateTime::<chrono::Utc>::from(self.clock.now()).format("%Y-%m-%dT%H:%M:%SZ");
        let location = self.checkpoints_dir.join(format!("checkpoint-{full_name}-{container}-{now}.tar"));
        std::fs::create_dir_all(&self.checkpoints_dir)
            .map_err(|e| HostError::Other(format!("create {}: {e}", self.checkpoints_dir.display())))?;
        let location = location.display().to_string();
        // The runtime's error as Go's gRPC client prints it, as upstream's message carries it.
        self.runtime
            .checkpoint_container(&id, &location, timeout.unwrap_or(0))
            .await
            .map_err(|e| HostError::Other(e.grpc_text()))?;
        Ok(location)
    }

    async fn is_running(&self, container_id: &str) -> bool {
        self.runtime
            .container_status(container_id)
            .await
            .is_ok_and(|st| st.state == cri::ContainerState::ContainerRunning as i32)
    }
}

/// The pods as the pod resources API sees them (`kubelet_cm::podresources::PodsProvider`): the published pods with
/// their statuses; the active ones are those not in a terminal phase.
pub struct PodResourcesPods {
    /// The pods and their statuses.
    pub host: Arc<KubeletHost>,
    /// Which pod sources have been seen.
    pub sources_ready: Arc<kubelet_config::podconfig::SourcesReady>,
}

impl kubelet_cm::podresources::PodsProvider for PodResourcesPods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        PodsView::pods(&*self.host)
            .into_iter()
            .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            .map(Arc::new)
            .collect()
    }

    fn pods(&self) -> Vec<Arc<Pod>> {
        PodsView::pods(&*self.host).into_iter().map(Arc::new).collect()
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        PodsView::pod(&*self.host, namespace, name).map(Arc::new)
    }

    fn sources_ready(&self) -> bool {
        self.sources_ready.all_ready()
    }
}
