//! Node registration and status updates (`kubelet_node_status.go` registerWithAPIServer, updateNodeStatus,
//! `kubelet.go` syncNodeStatus).
//!
//! [`NodeStatusManager::run`] registers the Node (retrying with back-off from 100 ms to 7 s, as upstream), then
//! every `nodeStatusUpdateFrequency` reads the Node, sets the kubelet's fields on a copy and patches `nodes/status`
//! when that changed the status (heartbeats aside) or when `nodeStatusReportFrequency` has passed since the last
//! report, as upstream's `tryUpdateNodeStatus`. The patch is upstream's `PatchNodeStatus`: the diff between the Node
//! as read and that copy, so a condition another component changed (the node lifecycle controller's `Unknown`
//! after a partition) is set right at once, and conditions of other owners, capacity keys others added and fields
//! the kubelet does not set are left alone. A failed update is retried at the next period; an outage of the
//! apiserver is logged, never fatal. Ends when cancelled.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, NodeStatus, Taint};
use kubelet_apiclient::patch::node_status_patch;
use kubelet_apiclient::{ApiError, NodeApi};
use kubelet_types::Clock;
use kubelet_types::clock::api_time;
use kubelet_types::events::Recorder;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::setters::{NodeHealth, NodeImage, NodeInputs, default_labels, initial_node, node_status};

/// Registration back-off bounds (`registerWithAPIServer`).
const REGISTER_BACKOFF_START: Duration = Duration::from_millis(100);
const REGISTER_BACKOFF_MAX: Duration = Duration::from_secs(7);

/// What the node status needs from the rest of the kubelet, owned here and implemented by the wiring.
#[async_trait]
pub trait NodeSignals: Send + Sync + 'static {
    /// Runtime, PLEG and pressure health.
    async fn health(&self) -> NodeHealth;
    /// Images present on the node.
    async fn images(&self) -> Vec<NodeImage>;
    /// The device plugins' resources (`GetCapacity`); none by default.
    fn devices(&self) -> kubelet_cm::devicemanager::Capacity {
        Default::default()
    }
    /// The unique names of the attachable and device-mountable volumes the node's pods use (`GetVolumesInUse`);
    /// none by default.
    fn volumes_in_use(&self) -> Vec<String> {
        vec![]
    }
}

/// Settings of the node status loop.
#[derive(Debug, Clone)]
pub struct NodeStatusConfig {
    /// `nodeStatusUpdateFrequency`.
    pub update_frequency: Duration,
    /// `nodeStatusReportFrequency`.
    pub report_frequency: Duration,
    /// `--node-labels`.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// `registerWithTaints`.
    pub register_with_taints: Vec<Taint>,
    /// `registerSchedulable`.
    pub register_schedulable: bool,
}

/// The node status loop.
pub struct NodeStatusManager {
    api: Arc<dyn NodeApi>,
    signals: Arc<dyn NodeSignals>,
    inputs: NodeInputs,
    cfg: NodeStatusConfig,
    clock: Arc<dyn Clock>,
    registered: tokio::sync::watch::Sender<Option<Node>>,
    recorder: Arc<dyn Recorder>,
    /// Changes that update the status at once (see [`NodeStatusManager::with_wake`]).
    wake: Vec<tokio::sync::watch::Receiver<u64>>,
}

/// Waits until one of `wakes` changes (those whose sender went are dropped; none left: forever).
async fn any_change(wakes: &mut Vec<tokio::sync::watch::Receiver<u64>>) {
    loop {
        if wakes.is_empty() {
            return std::future::pending().await;
        }
        let (changed, i, _) = futures::future::select_all(wakes.iter_mut().map(|w| Box::pin(w.changed()))).await;
        if changed.is_ok() {
            return;
        }
        wakes.remove(i);
    }
}

/// A reference to the node for its events (upstream uses the node name as UID).
pub fn node_reference(name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: Some(name.into()),
        ..Default::default()
    }
}

/// The status without heartbeat times, to tell a real change from a heartbeat.
fn without_heartbeats(s: &NodeStatus) -> NodeStatus {
    let mut s = s.clone();
    for c in s.conditions.iter_mut().flatten() {
        c.last_heartbeat_time = None;
    }
    s
}

impl NodeStatusManager {
    /// A manager for the node described by `inputs`.
    pub fn new(
        api: Arc<dyn NodeApi>,
        signals: Arc<dyn NodeSignals>,
        inputs: NodeInputs,
        cfg: NodeStatusConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            api,
            signals,
            inputs,
            cfg,
            clock,
            registered: tokio::sync::watch::channel(None).0,
            recorder: Arc::new(kubelet_types::events::LogRecorder),
            wake: vec![],
        }
    }

    /// Updates the status at once when `wake` changes (a device plugin's devices, the CSINode's initialization),
    /// not only every `nodeStatusUpdateFrequency`; may be given several.
    pub fn with_wake(mut self, wake: tokio::sync::watch::Receiver<u64>) -> Self {
        self.wake.push(wake);
        self
    }

    /// Records node events (NodeReady, NodeNotReady) to `recorder`.
    pub fn with_recorder(mut self, recorder: Arc<dyn Recorder>) -> Self {
        self.recorder = recorder;
        self
    }

    /// Publishes the Node into `tx` (registered, then as read and updated at every status update) instead of an
    /// own channel: admission reads the Node's labels, taints and allocatable from it.
    pub fn with_node_watch(mut self, tx: tokio::sync::watch::Sender<Option<Node>>) -> Self {
        self.registered = tx;
        self
    }

    /// Receives the registered Node (None until registration succeeded).
    pub fn registered(&self) -> tokio::sync::watch::Receiver<Option<Node>> {
        self.registered.subscribe()
    }

    /// One registration attempt (`tryRegisterWithAPIServer`): create, or reconcile the existing node's labels.
    pub async fn try_register(&self) -> Result<Node, ApiError> {
        let node = initial_node(
            &self.inputs,
            &self.cfg.node_labels,
            &self.cfg.register_with_taints,
            self.cfg.register_schedulable,
        );
        match self.api.create_node(&node).await {
            Ok(n) => {
                info!(node = %self.inputs.node_name, "successfully registered node");
                Ok(n)
            }
            Err(ApiError::AlreadyExists(_)) => {
                let existing = self
                    .api
                    .get_node(&self.inputs.node_name)
                    .await?
                    .ok_or_else(|| ApiError::NotFound(format!("node {:?}", self.inputs.node_name)))?;
                // The kubelet owns its default labels: reconcile them on the existing node.
                let want = default_labels(&self.inputs);
                let have = existing.metadata.labels.clone().unwrap_or_default();
                let missing: std::collections::BTreeMap<_, _> =
                    want.into_iter().filter(|(k, v)| have.get(k) != Some(v)).collect();
                if missing.is_empty() {
                    info!(node = %self.inputs.node_name, "node was previously registered");
                    return Ok(existing);
                }
                let patch = serde_json::json!({ "metadata": { "labels": missing } });
                let n = self.api.patch_node(&self.inputs.node_name, &patch).await?;
                info!(node = %self.inputs.node_name, "node was previously registered; default labels reconciled");
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }

    async fn register(&self, cancel: &CancellationToken) -> Option<Node> {
        let mut delay = REGISTER_BACKOFF_START;
        loop {
            match self.try_register().await {
                Ok(n) => return Some(n),
                Err(e) => {
                    warn!(node = %self.inputs.node_name, error = %e, retryIn = ?delay, "unable to register node with the apiserver")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return None,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(REGISTER_BACKOFF_MAX);
        }
    }

    /// One update (`tryUpdateNodeStatus`): reads the Node, sets the kubelet's fields on a copy and patches the
    /// difference when the status changed (heartbeats aside) or `nodeStatusReportFrequency` has passed since the
    /// last report (`last_report`); returns whether a patch was sent.
    pub async fn sync_status(&self, last_report: &mut Option<Instant>) -> Result<bool, ApiError> {
        let current = self
            .api
            .get_node(&self.inputs.node_name)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("node {:?}", self.inputs.node_name)))?;
        let health = self.signals.health().await;
        let images = self.signals.images().await;
        let now = api_time(self.clock.now());
        let old = current.status.as_ref();
        let devices = self.signals.devices();
        let mut status = node_status(&self.inputs, &health, &images, &now, old);
        super::setters::set_device_resources(&mut status, &devices);
        let in_use = self.signals.volumes_in_use();
        status.volumes_in_use = (!in_use.is_empty()).then_some(in_use);
        let desired = with_kubelet_status(&current, &status);
        let changed = old.map(without_heartbeats) != desired.status.as_ref().map(without_heartbeats);
        let due = last_report.is_none_or(|at| at.elapsed() >= self.cfg.report_frequency);
        if !changed && !due {
            self.registered.send_replace(Some(current));
            return Ok(false);
        }
        let patch = node_status_patch(&current, &desired)
            .map_err(|e| ApiError::Other { code: 0, message: format!("node status patch: {e}") })?;
        self.api.patch_node_status(&self.inputs.node_name, &patch).await?;
        self.registered.send_replace(Some(desired.clone()));
        // Pressure transitions, as upstream's condition setters record them (also when first set).
        for (kind, yes, no) in [
            ("MemoryPressure", "NodeHasInsufficientMemory", "NodeHasSufficientMemory"),
            ("DiskPressure", "NodeHasDiskPressure", "NodeHasNoDiskPressure"),
            ("PIDPressure", "NodeHasInsufficientPID", "NodeHasSufficientPID"),
        ] {
            let new = condition_of(&status, kind);
            if old.and_then(|o| condition_of(o, kind)) != new {
                let word = if new.as_deref() == Some("True") { yes } else { no };
                self.recorder.event(
                    &node_reference(&self.inputs.node_name),
                    kubelet_types::events::NORMAL,
                    word,
                    format!("Node {} status is now: {word}", self.inputs.node_name),
                );
            }
        }
        if old.and_then(ready_of) != ready_of(&status) {
            info!(node = %self.inputs.node_name, ready = ?ready_of(&status), "node Ready condition changed");
            let (reason, word) = if ready_of(&status).as_deref() == Some("True") {
                (kubelet_types::events::reason::NODE_READY, "NodeReady")
            } else {
                (kubelet_types::events::reason::NODE_NOT_READY, "NodeNotReady")
            };
            self.recorder.event(
                &node_reference(&self.inputs.node_name),
                kubelet_types::events::NORMAL,
                reason,
                format!("Node {} status is now: {word}", self.inputs.node_name),
            );
        }
        *last_report = Some(Instant::now());
        Ok(true)
    }

    /// The registered Node as admission is to read it until the first status update: the Node the apiserver
    /// returned, with the capacity and allocatable the kubelet computed when it has none (upstream registers the
    /// Node with its status, and `getNodeAnyWay` falls back to the initial Node), so a pod admitted meanwhile is not
    /// refused for a node of no capacity (`OutOfpods`, `capacity: 0`).
    fn with_initial_status(&self, mut node: Node) -> Node {
        if node.status.as_ref().is_none_or(|s| s.allocatable.is_none()) {
            node.status = super::setters::initial_node_with_status(&self.inputs, &Default::default(), &[]).status;
        }
        node
    }

    /// Registers, then keeps the status fresh until cancelled.
    pub async fn run(self, cancel: CancellationToken) {
        let Some(node) = self.register(&cancel).await else { return };
        self.registered.send_replace(Some(self.with_initial_status(node)));
        let mut tick = tokio::time::interval(self.cfg.update_frequency);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_report = None;
        let mut wake = self.wake.clone();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
                _ = any_change(&mut wake) => {}
            }
            if let Err(e) = self.sync_status(&mut last_report).await {
                warn!(node = %self.inputs.node_name, error = %e, "error updating node status, will retry");
                if e.is_not_found() {
                    // Someone deleted the Node: register it again, as upstream does after a restart.
                    if let Some(n) = self.register(&cancel).await {
                        self.registered.send_replace(Some(self.with_initial_status(n)));
                        last_report = None;
                    }
                }
            }
        }
    }
}

/// `current` with the kubelet's status fields set from `ours` (upstream's setters on a copy of the original
/// Node): its conditions replaced by type in place, others kept; its capacity and allocatable keys set, keys
/// others added kept; addresses, daemon endpoints, node info and images replaced, and the runtime handlers and
/// features where the runtime reports them.
pub fn with_kubelet_status(current: &Node, ours: &NodeStatus) -> Node {
    let mut node = current.clone();
    let st = node.status.get_or_insert_default();
    let mut conditions = st.conditions.take().unwrap_or_default();
    for c in ours.conditions.iter().flatten() {
        match conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => *o = c.clone(),
            None => conditions.push(c.clone()),
        }
    }
    st.conditions = Some(conditions);
    for (mine, theirs) in [(&ours.capacity, &mut st.capacity), (&ours.allocatable, &mut st.allocatable)] {
        if let Some(m) = mine {
            theirs.get_or_insert_default().extend(m.clone());
        }
    }
    st.addresses = ours.addresses.clone();
    st.daemon_endpoints = ours.daemon_endpoints.clone();
    st.node_info = ours.node_info.clone();
    st.images = ours.images.clone();
    st.volumes_in_use = ours.volumes_in_use.clone();
    // The RuntimeHandlers setter always sets the list (none: removed, as a runtime that stopped reporting them
    // supports none); NodeFeatures only when the runtime reports features.
    st.runtime_handlers = ours.runtime_handlers.clone();
    if ours.features.is_some() {
        st.features = ours.features.clone();
    }
    node
}

fn ready_of(s: &NodeStatus) -> Option<String> {
    condition_of(s, "Ready")
}

fn condition_of(s: &NodeStatus, kind: &str) -> Option<String> {
    s.conditions.as_ref()?.iter().find(|c| c.type_ == kind).map(|c| c.status.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodestatus::machine::MachineInfo;
    use kubelet_apiclient::fake::FakeApi;
    use kubelet_types::TestClock;
    use std::sync::Mutex;

    struct Signals(Mutex<NodeHealth>);

    #[async_trait]
    impl NodeSignals for Signals {
        async fn health(&self) -> NodeHealth {
            self.0.lock().unwrap().clone()
        }
        async fn images(&self) -> Vec<NodeImage> {
            vec![NodeImage { names: vec!["localhost/busybox:1".into()], size: 1000 }]
        }
    }

    /// Updates every 10 s, reports every 5 minutes, no labels or taints.
    fn config() -> NodeStatusConfig {
        NodeStatusConfig {
            update_frequency: Duration::from_secs(10),
            report_frequency: Duration::from_secs(300),
            node_labels: Default::default(),
            register_with_taints: vec![],
            register_schedulable: true,
        }
    }

    fn inputs() -> NodeInputs {
        NodeInputs {
            node_name: "n1".into(),
            hostname: "n1".into(),
            node_ips: vec!["192.0.2.10".into()],
            machine: MachineInfo {
                swap_capacity: 0,
                num_cores: 2,
                memory_capacity: 1 << 30,
                rootfs_capacity: 1 << 34,
                ..Default::default()
            },
            max_pods: 110,
            kube_reserved: Default::default(),
            system_reserved: Default::default(),
            eviction_hard: Default::default(),
            runtime_version: "containerd://1.6.20".into(),
            kubelet_version: "v1.34.0".into(),
            port: 10250,
            max_images: 50,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn registers_then_reports_on_change_or_every_report_period() {
        let api = Arc::new(FakeApi::new());
        let signals = Arc::new(Signals(Mutex::new(NodeHealth::default())));
        let cfg = NodeStatusConfig { node_labels: [("role".to_string(), "edge".to_string())].into(), ..config() };
        let m = NodeStatusManager::new(api.clone(), signals.clone(), inputs(), cfg, Arc::new(TestClock::fixed()));
        let mut reg = m.registered();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.run(cancel.clone()));
        reg.wait_for(|n| n.is_some()).await.unwrap();
        let node = api.node("n1").unwrap();
        assert_eq!(node.metadata.labels.as_ref().unwrap()["role"], "edge");
        assert_eq!(node.metadata.labels.as_ref().unwrap()["kubernetes.io/hostname"], "n1");

        tokio::time::sleep(Duration::from_secs(1)).await;
        let ready = |api: &FakeApi| {
            api.node("n1")
                .and_then(|n| n.status)
                .and_then(|s| s.conditions)
                .and_then(|c| c.into_iter().find(|c| c.type_ == "Ready"))
        };
        assert_eq!(ready(&api).unwrap().status, "True");
        let patches = |api: &FakeApi| api.calls().iter().filter(|c| c.starts_with("patch_node_status")).count();
        assert_eq!(patches(&api), 1);
        // Nothing changes: no patch for the next 290 s, then the report period forces one.
        tokio::time::sleep(Duration::from_secs(290)).await;
        assert_eq!(patches(&api), 1);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(patches(&api), 2);
        // The runtime goes down: Ready turns False with the reason at the next update.
        signals.0.lock().unwrap().not_ready = vec!["container runtime is down".into()];
        tokio::time::sleep(Duration::from_secs(10)).await;
        let r = ready(&api).unwrap();
        assert_eq!((r.status.as_str(), r.message.as_deref()), ("False", Some("container runtime is down")));
        // An apiserver outage is survived; the status catches up when it returns.
        api.set_down(true);
        signals.0.lock().unwrap().not_ready.clear();
        tokio::time::sleep(Duration::from_secs(30)).await;
        api.set_down(false);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(ready(&api).unwrap().status, "True");
        // The node lifecycle controller marks the node Unknown (as after a partition): the next update sets it
        // right although the kubelet's own view did not change.
        let unknown = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
        api.patch_node_status("n1", &unknown).await.unwrap();
        assert_eq!(ready(&api).unwrap().status, "Unknown");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(ready(&api).unwrap().status, "True", "set right at the next update, not at the next report");
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn any_wake_updates_the_status_at_once_and_a_closed_one_is_dropped() {
        let api = Arc::new(FakeApi::new());
        let health = NodeHealth { not_ready: vec!["CSINode is not yet initialized".into()], ..Default::default() };
        let signals = Arc::new(Signals(Mutex::new(health)));
        let cfg = config();
        let (devices, devices_rx) = tokio::sync::watch::channel(0u64);
        let (storage, storage_rx) = tokio::sync::watch::channel(0u64);
        let m = NodeStatusManager::new(api.clone(), signals.clone(), inputs(), cfg, Arc::new(TestClock::fixed()))
            .with_wake(devices_rx)
            .with_wake(storage_rx);
        let mut reg = m.registered();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.run(cancel.clone()));
        reg.wait_for(|n| n.is_some()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ready = || {
            let st = api.node("n1").and_then(|n| n.status).unwrap();
            let c = st.conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap();
            (c.status, c.message.unwrap_or_default())
        };
        assert_eq!(ready(), ("False".into(), "CSINode is not yet initialized".into()));
        drop(devices);
        signals.0.lock().unwrap().not_ready.clear();
        storage.send_replace(1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(ready().0, "True", "updated at the wake, not 10 s later");
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn existing_node_gets_its_default_labels_back_and_admission_sees_its_allocatable_at_once() {
        let api = Arc::new(FakeApi::new());
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.labels = Some([("kubernetes.io/hostname".to_string(), "old".to_string())].into());
        api.create_node(&n).await.unwrap();
        let signals = Arc::new(Signals(Mutex::new(NodeHealth::default())));
        let cfg = config();
        let m = NodeStatusManager::new(api.clone(), signals, inputs(), cfg, Arc::new(TestClock::fixed()));
        let registered = m.try_register().await.unwrap();
        assert_eq!(api.node("n1").unwrap().metadata.labels.unwrap()["kubernetes.io/hostname"], "n1");
        // Until the first status update the Node has no status; admission reads the kubelet's allocatable.
        assert!(registered.status.is_none());
        let allocatable = m.with_initial_status(registered).status.and_then(|s| s.allocatable).unwrap_or_default();
        assert_eq!(allocatable.get("pods").map(|q| q.0.as_str()), Some("110"));
    }

    #[test]
    fn runtime_handlers_a_runtime_no_longer_reports_are_removed_from_the_node() {
        use k8s_openapi::api::core::v1::{NodeFeatures, NodeRuntimeHandler};
        let current = Node {
            status: Some(NodeStatus {
                runtime_handlers: Some(vec![NodeRuntimeHandler { name: Some("".into()), features: None }]),
                features: Some(NodeFeatures { supplemental_groups_policy: Some(true) }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let want = with_kubelet_status(&current, &NodeStatus::default());
        let patch = node_status_patch(&current, &want).unwrap();
        assert_eq!(patch["status"]["runtimeHandlers"], serde_json::Value::Null, "{patch}");
        assert!(patch["status"].get("runtimeHandlers").is_some(), "removed, not left alone: {patch}");
        assert!(patch["status"].get("features").is_none(), "features are left while the runtime reports none");
    }

    #[test]
    fn the_kubelets_fields_are_set_and_others_left_alone() {
        use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let cond = |t: &str, s: &str| NodeCondition { type_: t.into(), status: s.into(), ..Default::default() };
        let addr = |t: &str, a: &str| NodeAddress { type_: t.into(), address: a.into() };
        let current = Node {
            status: Some(NodeStatus {
                conditions: Some(vec![cond("NetworkUnavailable", "False"), cond("Ready", "False")]),
                capacity: Some([("example.com/dongle".to_string(), Quantity("2".into()))].into()),
                addresses: Some(vec![addr("InternalIP", "10.0.0.1")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let ours = NodeStatus {
            conditions: Some(vec![cond("Ready", "True"), cond("MemoryPressure", "False")]),
            capacity: Some([("cpu".to_string(), Quantity("2".into()))].into()),
            addresses: Some(vec![addr("InternalIP", "10.0.0.1"), addr("InternalIP", "fd00::1")]),
            ..Default::default()
        };
        let want = with_kubelet_status(&current, &ours);
        let st = want.status.as_ref().unwrap();
        let conds: Vec<_> = st.conditions.iter().flatten().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(conds, [("NetworkUnavailable", "False"), ("Ready", "True"), ("MemoryPressure", "False")]);
        assert_eq!(st.capacity.as_ref().unwrap().len(), 2, "the extended resource another client added stays");
        // Two addresses of one type: the patch replaces the list, as PatchNodeStatus does.
        let patch = node_status_patch(&current, &want).unwrap();
        let list = patch["status"]["addresses"].as_array().unwrap();
        assert_eq!(list.last().unwrap(), &serde_json::json!({"$patch": "replace"}));
        assert_eq!(list.len(), 3);
        assert!(patch["status"]["conditions"].as_array().unwrap().iter().all(|c| c["type"] != "NetworkUnavailable"));
    }
}
