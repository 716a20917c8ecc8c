//! CSI drivers registering with the node (`pkg/volume/csi/csi_plugin.go` RegistrationHandler): the plugin manager's
//! `CSIPlugin` handler. A driver's registrar (csi-node-driver-registrar) announces the driver's name, its socket and
//! the CSI versions it speaks; the handler keeps the highest `1.x`, asks the driver `NodeGetInfo` and records the
//! answer on the Node and the CSINode ([`super::nodeinfo`]). When the registrar's socket goes, the driver's
//! information goes too.
//!
//! Contract: the plugin manager calls the handler one call per socket at a time. `NodeGetInfo` has upstream's 2
//! minute deadline; a failure leaves the driver unregistered and is the registration's error (the registrar then
//! restarts, upstream's only retry). Errors carry upstream's `kubernetes.io/csi: ` prefix. Other parts of the
//! kubelet find a registered driver's endpoint through [`CsiDrivers::endpoint`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use kubelet_pluginmanager::PluginHandler;
use tracing::{error, info};

use super::nodeinfo::NodeInfoManager;
use super::versions::{Version, highest_supported};

/// `NodeGetInfo`'s deadline (`csiTimeout`).
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);

fn log(text: String) -> String {
    format!("kubernetes.io/csi: {text}")
}

/// The registered drivers: endpoint and highest version by name (`csiDrivers`).
#[derive(Default)]
pub struct CsiDrivers(Mutex<HashMap<String, (String, Version)>>);

impl CsiDrivers {
    /// The socket of a registered driver.
    pub fn endpoint(&self, driver: &str) -> Option<String> {
        self.0.lock().unwrap().get(driver).map(|(e, _)| e.clone())
    }

    /// Records a driver's endpoint and version.
    pub(crate) fn add(&self, driver: &str, endpoint: &str, version: Version) {
        self.0.lock().unwrap().insert(driver.into(), (endpoint.into(), version));
    }
}

/// A driver's `NodeGetInfo` answer: its id of this node, its volume limit (0: none), its topology.
pub type NodeGetInfo = (String, i64, BTreeMap<String, String>);

/// What the handler asks of a driver.
#[async_trait]
pub trait NodeInfoSource: Send + Sync + 'static {
    /// The driver's id of this node, its volume limit (0: none) and its topology (`NodeGetInfo`).
    async fn node_get_info(&self, driver: &str, endpoint: &str) -> Result<NodeGetInfo, String>;
}

/// `NodeGetInfo` over the driver's socket.
pub struct GrpcNodeInfo;

#[async_trait]
impl NodeInfoSource for GrpcNodeInfo {
    async fn node_get_info(&self, driver: &str, endpoint: &str) -> Result<NodeGetInfo, String> {
        super::node::NodeClient::of(driver, endpoint).node_get_info().await.map_err(|e| e.to_string())
    }
}

/// The node's information manager, once the apiserver is known (never on a standalone node).
pub type NodeInfo = Arc<OnceLock<Arc<NodeInfoManager>>>;

/// The `CSIPlugin` handler.
pub struct RegistrationHandler {
    drivers: Arc<CsiDrivers>,
    nodes: NodeInfo,
    info: Arc<dyn NodeInfoSource>,
}

impl RegistrationHandler {
    /// The handler recording drivers through `nodes`, asking them through `info`.
    pub fn new(drivers: Arc<CsiDrivers>, nodes: NodeInfo, info: Arc<dyn NodeInfoSource>) -> Self {
        Self { drivers, nodes, info }
    }

    fn nodes(&self) -> Result<&Arc<NodeInfoManager>, String> {
        self.nodes.get().ok_or_else(|| {
            log("error getting kube client: rkubelet runs without an apiserver, where CSI drivers cannot register"
                .into())
        })
    }

    fn validate_versions(&self, caller: &str, name: &str, versions: &[String]) -> Result<Version, String> {
        if versions.is_empty() {
            return Err(log(format!(
                "{caller} for CSI driver {name:?} failed. Plugin returned an empty list for supported versions"
            )));
        }
        let highest = highest_supported(versions).map_err(|e| {
            log(format!(
                "{caller} for CSI driver {name:?} failed. None of the versions specified {versions:?} are supported. err={e}"
            ))
        })?;
        if let Some((_, existing)) = self.drivers.0.lock().unwrap().get(name)
            && !existing.less_than(&highest)
        {
            return Err(log(format!(
                "{caller} for CSI driver {name:?} failed. Another driver with the same name is already registered \
                 with a higher supported version: \"{existing}\""
            )));
        }
        Ok(highest)
    }

    /// Forgets a driver (`unregisterDriver`).
    async fn unregister(&self, name: &str) -> Result<(), String> {
        self.drivers.0.lock().unwrap().remove(name);
        self.nodes()?.uninstall_driver(name).await.map_err(|e| log(format!("Error uninstalling CSI driver: {e}")))
    }
}

#[async_trait]
impl PluginHandler for RegistrationHandler {
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        info!(driverName = name, endpoint, versions = %versions.join(","), "Trying to validate a new CSI Driver");
        self.validate_versions("ValidatePlugin", name, versions)
            .map(|_| ())
            .map_err(|e| format!("validation failed for CSI Driver {name} at endpoint {endpoint}: {e}"))
    }

    async fn register(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        info!(driverName = name, endpoint, "Register new plugin");
        let highest = self.validate_versions("RegisterPlugin", name, versions)?;
        self.drivers.add(name, endpoint, highest);
        let installed = match self.info.node_get_info(name, endpoint).await {
            Ok((id, max, topology)) => match self.nodes() {
                Ok(n) => n.install_driver(name, &id, max, &topology).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        if let Err(e) = installed {
            if let Err(u) = self.unregister(name).await {
                error!(driverName = name, error = %u, "registrationHandler.RegisterPlugin failed to unregister plugin due to previous error");
            }
            return Err(e);
        }
        info!(driverName = name, endpoint, "CSI driver registered: its node id is on the Node and the CSINode");
        Ok(())
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        info!(driverName = name, endpoint, "registrationHandler.DeRegisterPlugin request for plugin");
        if let Err(e) = self.unregister(name).await {
            error!(driverName = name, error = %e, "registrationHandler.DeRegisterPlugin failed");
        }
    }
}
