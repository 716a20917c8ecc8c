//! Joining a cluster (`cmd/kubelet/app/server.go` with a kubeconfig): the apiserver client, node registration and
//! status, the node lease and the apiserver pod source, started beside the standalone machinery.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use kubelet::events::{EventMsg, EventSink, EventWriter};
use kubelet::nodestatus::manager::NodeStatusConfig;
use kubelet::nodestatus::manager::node_reference;
use kubelet::nodestatus::setters::{NodeHealth, NodeImage, NodeInputs};
use kubelet::nodestatus::{LeaseController, NodeSignals, NodeStatusManager};
use kubelet::runtime_state::RuntimeState;
use kubelet_apiclient::PodWatchApi;
use kubelet_config::kubelet_config::KubeletConfiguration;
use kubelet_config::sources::SourceUpdate;
use kubelet_config::sources::apiserver::ApiSource;
use kubelet_cri::ImageService;
use kubelet_kube::KubeApi;
use kubelet_runtime::PlegHealth;
use kubelet_types::Clock;
use kubelet_types::events::{NORMAL, Recorder, reason};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

/// The node's health and images, from the runtime state, the PLEG and the image service.
struct Signals {
    runtime: Arc<RuntimeState>,
    pleg: Arc<PlegHealth>,
    images: Arc<dyn ImageService>,
    pressure: Arc<kubelet_eviction::PressureState>,
    devices: Arc<kubelet_cm::devicemanager::DeviceManager>,
    volumes: Arc<kubelet_volume::VolumeManager>,
    storage: Arc<crate::node::StorageState>,
    shutdown: Arc<kubelet::nodeshutdown::NodeShutdown>,
}

#[async_trait]
impl NodeSignals for Signals {
    async fn health(&self) -> NodeHealth {
        let mut not_ready = vec![];
        if let Err(e) = self.runtime.runtime_errors() {
            not_ready.push(format!("container runtime is down: {e}"));
        }
        if let Err(e) = self.pleg.healthy() {
            not_ready.push(format!("PLEG is not healthy: {e}"));
        }
        not_ready.extend(self.storage.error());
        not_ready.extend(self.shutdown.error());
        use kubelet_eviction::NodeCondition;
        NodeHealth {
            not_ready,
            memory_pressure: self.pressure.has(NodeCondition::MemoryPressure),
            disk_pressure: self.pressure.has(NodeCondition::DiskPressure),
            pid_pressure: self.pressure.has(NodeCondition::PidPressure),
            runtime: self.runtime.runtime_info(),
        }
    }

    fn devices(&self) -> kubelet_cm::devicemanager::Capacity {
        self.devices.capacity()
    }

    fn volumes_in_use(&self) -> Vec<String> {
        self.volumes.volumes_in_use()
    }

    async fn images(&self) -> Vec<NodeImage> {
        self.images
            .list_images(None)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|i| NodeImage { names: i.repo_digests.into_iter().chain(i.repo_tags).collect(), size: i.size as i64 })
            .collect()
    }
}

/// What the cluster side needs from the wiring.
pub struct ClusterDeps<'a> {
    /// The configuration.
    pub cfg: &'a KubeletConfiguration,
    /// The eviction manager's pressure conditions.
    pub pressure: Arc<kubelet_eviction::PressureState>,
    /// `--kubeconfig`.
    pub kubeconfig: &'a Path,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: Option<&'a Path>,
    /// `--cert-dir`.
    pub cert_dir: &'a Path,
    /// The node's name.
    pub node_name: &'a str,
    /// What the node status is made of.
    pub inputs: NodeInputs,
    /// Where the Node is published for admission.
    pub node_watch: tokio::sync::watch::Sender<Option<k8s_openapi::api::core::v1::Node>>,
    /// Runtime health.
    pub runtime_state: Arc<RuntimeState>,
    /// PLEG health.
    pub pleg: Arc<PlegHealth>,
    /// The image service.
    pub images: Arc<dyn ImageService>,
    /// The device manager (its resources in the node status, which updates as soon as they change).
    pub devices: Arc<kubelet_cm::devicemanager::DeviceManager>,
    /// The volume manager (the CSI PersistentVolumes in use, for `volumesInUse`).
    pub volumes: Arc<kubelet_volume::VolumeManager>,
    /// The storage error of the Ready condition (the CSINode's initialization).
    pub storage: Arc<crate::node::StorageState>,
    /// The node's shutdown (the Ready condition's "node is shutting down").
    pub shutdown: Arc<kubelet::nodeshutdown::NodeShutdown>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// Where the apiserver source sends its pods.
    pub sources: mpsc::Sender<SourceUpdate>,
    /// `--node-labels`.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// The event sink the components record to, and its queue.
    pub events: (EventSink, mpsc::Receiver<EventMsg>),
}

/// Connects to the apiserver and starts the node status loop, the lease and the pod source.
pub async fn start(
    d: ClusterDeps<'_>,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) -> anyhow::Result<Arc<KubeApi>> {
    let cfg = d.cfg;
    let api = crate::certs::client_api(
        cfg.rotate_certificates,
        d.kubeconfig,
        d.bootstrap_kubeconfig,
        d.cert_dir,
        d.node_name,
        d.clock.clone(),
        tracker,
        cancel,
    )
    .await?;
    // Three clients over one connection pool, as upstream's three clientsets: the node status and the lease go
    // unthrottled (its HeartbeatClient, QPS -1), events are paced by the event writer at eventRecordQPS and
    // eventBurst (its EventClient), and everything else by kubeAPIQPS and kubeAPIBurst. Sharing one limiter would
    // let a burst of pod events hold up the pods' status patches and the node's heartbeat.
    let heartbeat = Arc::new(api.clone());
    let events_api = Arc::new(api.clone());
    let api =
        Arc::new(api.with_rate_limit(f64::from(cfg.kube_api_qps.unwrap_or(50)), cfg.kube_api_burst.max(1) as u32));
    let inputs = d.inputs;
    let wake = d.devices.changes();
    let storage_wake = d.storage.changes();
    let shutdown_wake = d.shutdown.subscribe();
    let volumes_wake = d.volumes.in_use_changes();
    let signals = Arc::new(Signals {
        runtime: d.runtime_state,
        pleg: d.pleg,
        images: d.images,
        pressure: d.pressure,
        devices: d.devices,
        volumes: d.volumes,
        storage: d.storage,
        shutdown: d.shutdown,
    });
    if cfg.register_node.unwrap_or(true) {
        let ns_cfg = NodeStatusConfig {
            update_frequency: cfg.node_status_update_frequency.0,
            report_frequency: cfg.node_status_report_frequency.0,
            node_labels: d.node_labels.clone(),
            register_with_taints: cfg.register_with_taints.clone(),
            register_schedulable: true,
        };
        let m = NodeStatusManager::new(heartbeat.clone(), signals, inputs, ns_cfg, d.clock.clone())
            .with_recorder(Arc::new(d.events.0.clone()))
            .with_node_watch(d.node_watch)
            .with_wake(wake)
            .with_wake(storage_wake)
            .with_wake(shutdown_wake)
            .with_wake(volumes_wake);
        tracker.spawn(m.run(cancel.clone()));
    }
    let (sink, rx) = d.events;
    let writer = EventWriter::new(
        events_api,
        rx,
        d.node_name.to_string(),
        d.clock.clone(),
        cfg.event_record_qps.unwrap_or(50),
        cfg.event_burst,
    );
    tracker.spawn(writer.run(cancel.clone()));
    sink.event(&node_reference(d.node_name), NORMAL, reason::STARTING, "Starting kubelet.".into());
    let lease = LeaseController::new(
        heartbeat.clone(),
        heartbeat,
        d.node_name.to_string(),
        cfg.node_lease_duration_seconds,
        d.clock,
    );
    tracker.spawn(lease.run(cancel.clone()));
    let source = ApiSource::new(api.clone() as Arc<dyn PodWatchApi>, d.node_name.to_string(), d.sources);
    tracker.spawn(source.run(cancel.clone()));
    info!(kubeconfig = %d.kubeconfig.display(), "joining the cluster: node status, lease and apiserver pod source started");
    Ok(api)
}
