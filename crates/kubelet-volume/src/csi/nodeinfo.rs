//! What the node tells the cluster of its CSI drivers (`pkg/volume/csi/nodeinfomanager/nodeinfomanager.go`): the
//! Node's `csi.volume.kubernetes.io/nodeid` annotation (driver → the driver's id of this node, compact JSON with
//! sorted keys) and the driver's topology labels, and the node's CSINode object (owned by the Node, one entry per
//! driver: its node id, topology keys and volume limit; the `storage.alpha.kubernetes.io/migrated-plugins`
//! annotation naming the in-tree plugins migrated to CSI).
//!
//! Contract: the CSI registration handler calls [`NodeInfoManager::install_driver`] after a driver's `NodeGetInfo`
//! and [`NodeInfoManager::uninstall_driver`] when it goes; the binary calls [`NodeInfoManager::initialize`] once at
//! start. Calls are serialised. Each write is retried as upstream's (`updateBackoff`: 4 tries, 10, 50 and 250 ms
//! apart) and then fails with upstream's texts. The Node is written first (its status subresource, whose patch
//! keeps metadata changes), then the CSINode. Topology labels are never removed, and the CSINode object never
//! deleted, as upstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kubelet_apiclient::{CsiNodeApi, NodeApi};
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// The Node annotation of the drivers' node ids (`annotationKeyNodeID`).
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// The CSINode annotation of the migrated in-tree plugins.
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// The in-tree plugins migrated to CSI in v1.35 (every migration is GA and locked on), sorted.
pub const MIGRATED_PLUGINS: &str = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,\
kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume";
/// The sleeps between the tries of a write (`updateBackoff`).
const BACKOFF: [Duration; 3] = [Duration::from_millis(10), Duration::from_millis(50), Duration::from_millis(250)];

/// Whether `key` is the legacy capacity key of a driver's volume limit (`GetCSIAttachLimitKey`), which upstream
/// removes from the Node: `attachable-volumes-csi-<driver>`, or for a long name its first 23 characters and 16 hex
/// digits of its SHA-1 (matched here by the prefix and length).
pub fn is_attach_limit_key(key: &str, driver: &str) -> bool {
    const PREFIX: &str = "attachable-volumes-csi-";
    let full = format!("{PREFIX}{driver}");
    if full.len() <= 63 {
        return key == full;
    }
    let short = format!("{PREFIX}{}", &driver[..23.min(driver.len())]);
    key.len() == short.len() + 16 && key.starts_with(&short)
}

/// The node id annotation with `driver` set to `id` (None: removed): the new value (None: no annotation left), or
/// `Ok(None)` when nothing changes.
pub fn node_id_annotation(
    current: Option<&str>,
    driver: &str,
    id: Option<&str>,
) -> Result<Option<Option<String>>, String> {
    let mut map: BTreeMap<String, String> = match current {
        None | Some("") => BTreeMap::new(),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            format!("failed to parse node's {NODE_ID_ANNOTATION:?} annotation value ({text:?}) err={e}")
        })?,
    };
    match id {
        Some(id) if map.get(driver).map(String::as_str) == Some(id) => return Ok(None),
        Some(id) => {
            map.insert(driver.into(), id.into());
        }
        None if !map.contains_key(driver) => return Ok(None),
        None => {
            map.remove(driver);
        }
    }
    if map.is_empty() {
        return Ok(Some(None));
    }
    let text = serde_json::to_string(&map).map_err(|e| e.to_string())?;
    Ok(Some(Some(kubelet_types::go_json::escape(&text))))
}

/// Upstream's collision error when the Node has one of a driver's topology labels with another value.
pub fn check_topology(node: &Node, topology: &BTreeMap<String, String>) -> Result<(), String> {
    let labels = node.metadata.labels.as_ref();
    for (k, v) in topology {
        if let Some(cur) = labels.and_then(|l| l.get(k)).filter(|cur| *cur != v) {
            return Err(format!(
                "detected topology value collision: driver reported {k:?}:{v:?} but existing label is {k:?}:{cur:?}"
            ));
        }
    }
    Ok(())
}

/// The status patch installing (`id` Some) or removing a driver's node information, or None when the Node has it.
pub fn node_patch(
    node: &Node,
    driver: &str,
    id: Option<&str>,
    topology: &BTreeMap<String, String>,
) -> Result<Option<Value>, String> {
    let current = node.metadata.annotations.as_ref().and_then(|a| a.get(NODE_ID_ANNOTATION)).map(String::as_str);
    let mut patch = json!({});
    if let Some(value) = node_id_annotation(current, driver, id)? {
        patch["metadata"]["annotations"][NODE_ID_ANNOTATION] = value.map_or(Value::Null, Value::String);
    }
    // Upstream writes the labels at every installation, changed or not.
    if id.is_some() {
        check_topology(node, topology)?;
        for (k, v) in topology {
            patch["metadata"]["labels"][k] = Value::String(v.clone());
        }
    }
    let status = node.status.as_ref();
    for field in ["capacity", "allocatable"] {
        let present =
            status.and_then(|s| if field == "capacity" { s.capacity.as_ref() } else { s.allocatable.as_ref() });
        for key in present.into_iter().flat_map(|m| m.keys()).filter(|k| is_attach_limit_key(k, driver)) {
            patch["status"][field][key] = Value::Null;
        }
    }
    Ok((patch != json!({})).then_some(patch))
}

/// The CSINode with `driver`'s entry installed (Some) or removed (None); whether anything changed.
pub fn set_driver(csi_node: &mut CSINode, driver: &str, entry: Option<CSINodeDriver>) -> bool {
    let drivers = &mut csi_node.spec.drivers;
    let sorted = |d: &CSINodeDriver| {
        let mut keys = d.topology_keys.clone().unwrap_or_default();
        keys.sort();
        keys
    };
    let count = |d: &CSINodeDriver| d.allocatable.as_ref().and_then(|a| a.count);
    if let Some(e) = &entry
        && let Some(cur) = drivers.iter().find(|d| d.name == driver)
        && cur.node_id == e.node_id
        && sorted(cur) == sorted(e)
        && count(cur) == count(e)
    {
        return set_migration_annotation(csi_node);
    }
    let before = drivers.len();
    drivers.retain(|d| d.name != driver);
    let mut changed = drivers.len() != before;
    if let Some(e) = entry {
        drivers.push(e);
        changed = true;
    }
    set_migration_annotation(csi_node) || changed
}

/// Sets the migrated plugins annotation; whether it changed (`setMigrationAnnotation`).
fn set_migration_annotation(csi_node: &mut CSINode) -> bool {
    let annotations = csi_node.metadata.annotations.get_or_insert_with(Default::default);
    if annotations.get(MIGRATED_PLUGINS_ANNOTATION).map(String::as_str) == Some(MIGRATED_PLUGINS) {
        return false;
    }
    annotations.insert(MIGRATED_PLUGINS_ANNOTATION.into(), MIGRATED_PLUGINS.into());
    true
}

/// A driver's CSINode entry (`installDriverToCSINode`): topology keys sorted, the volume limit where the driver has
/// one (capped to an int32).
pub fn driver_entry(driver: &str, id: &str, max_volumes: i64, topology: &BTreeMap<String, String>) -> CSINodeDriver {
    CSINodeDriver {
        name: driver.into(),
        node_id: id.into(),
        topology_keys: Some(topology.keys().cloned().collect()),
        allocatable: (max_volumes > 0)
            .then(|| VolumeNodeResources { count: Some(max_volumes.min(i32::MAX as i64) as i32) }),
    }
}

/// The node's information manager.
pub struct NodeInfoManager {
    node: String,
    nodes: Arc<dyn NodeApi>,
    csi_nodes: Arc<dyn CsiNodeApi>,
    lock: Mutex<()>,
}

/// Runs `f` with upstream's retries; the last error, as upstream wraps it.
async fn retried<F, Fut>(what: &str, mut f: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut last = String::new();
    for i in 0..=BACKOFF.len() {
        match f().await {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        if let Some(d) = BACKOFF.get(i) {
            tokio::time::sleep(*d).await;
        }
    }
    Err(format!("error updating {what}: timed out waiting for the condition; caused by: {last}"))
}

impl NodeInfoManager {
    /// The manager of node `node`.
    pub fn new(node: &str, nodes: Arc<dyn NodeApi>, csi_nodes: Arc<dyn CsiNodeApi>) -> Self {
        Self { node: node.into(), nodes, csi_nodes, lock: Mutex::new(()) }
    }

    async fn update_node(
        &self,
        driver: &str,
        id: Option<&str>,
        topology: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        retried("node", || async {
            let node = self.nodes.get_node(&self.node).await.map_err(|e| e.to_string())?;
            let node = node.ok_or(format!("nodes {:?} not found", self.node))?;
            if let Some(patch) = node_patch(&node, driver, id, topology)? {
                self.nodes
                    .patch_node_status(&self.node, &patch)
                    .await
                    .map_err(|e| format!("failed to patch status {patch:?} for node {:?}: {e}", self.node))?;
            }
            Ok(())
        })
        .await
    }

    /// A new CSINode for this node, owned by its Node (`CreateCSINode`).
    async fn create(&self) -> Result<CSINode, String> {
        let node = self.nodes.get_node(&self.node).await.map_err(|e| e.to_string())?;
        let node = node.ok_or(format!("nodes {:?} not found", self.node))?;
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node.clone(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            ..Default::default()
        };
        let annotations = BTreeMap::from([(MIGRATED_PLUGINS_ANNOTATION.to_string(), MIGRATED_PLUGINS.to_string())]);
        let csi_node = CSINode {
            metadata: ObjectMeta {
                name: Some(self.node.clone()),
                owner_references: Some(vec![owner]),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: CSINodeSpec { drivers: vec![] },
        };
        self.csi_nodes.create_csi_node(&csi_node).await.map_err(|e| e.to_string())
    }

    async fn update_csi_node(&self, driver: &str, entry: Option<&CSINodeDriver>, create: bool) -> Result<(), String> {
        retried("CSINode", || async {
            let mut csi_node = match self.csi_nodes.get_csi_node(&self.node).await.map_err(|e| e.to_string())? {
                Some(n) => n,
                None if create => self.create().await?,
                None => return Ok(()),
            };
            if set_driver(&mut csi_node, driver, entry.cloned()) {
                self.csi_nodes.update_csi_node(&csi_node).await.map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .await
    }

    /// Records a registered driver (`InstallCSIDriver`).
    pub async fn install_driver(
        &self,
        driver: &str,
        id: &str,
        max_volumes: i64,
        topology: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        if id.is_empty() {
            return Err("error adding CSI driver node info: driverNodeID must not be empty".into());
        }
        let _serial = self.lock.lock().await;
        self.update_node(driver, Some(id), topology)
            .await
            .map_err(|e| format!("error updating Node object with CSI driver node info: {e}"))?;
        let entry = driver_entry(driver, id, max_volumes, topology);
        self.update_csi_node(driver, Some(&entry), true)
            .await
            .map_err(|e| format!("error updating CSINode object with CSI driver node info: {e}"))
    }

    /// Forgets a driver that went (`UninstallCSIDriver`): its CSINode entry, then its node id.
    pub async fn uninstall_driver(&self, driver: &str) -> Result<(), String> {
        let _serial = self.lock.lock().await;
        self.update_csi_node(driver, None, false)
            .await
            .map_err(|e| format!("error uninstalling CSI driver from CSINode object {e}"))?;
        self.update_node(driver, None, &BTreeMap::new())
            .await
            .map_err(|e| format!("error removing CSI driver node info from Node object {e}"))
    }

    /// Makes sure the node's CSINode exists with the migrated plugins annotation
    /// (`InitializeCSINodeWithAnnotation`).
    pub async fn initialize(&self) -> Result<(), String> {
        let _serial = self.lock.lock().await;
        retried("CSINode annotation", || async {
            match self.csi_nodes.get_csi_node(&self.node).await.map_err(|e| e.to_string())? {
                None => self.create().await.map(|_| ()),
                Some(mut n) => {
                    if set_migration_annotation(&mut n) {
                        self.csi_nodes.update_csi_node(&n).await.map_err(|e| e.to_string())?;
                    }
                    Ok(())
                }
            }
        })
        .await
    }
}
