//! The device manager's handler of the plugin manager (`pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go`):
//! device plugins that put their socket into `<root-dir>/plugins_registry` instead of calling `Register` on
//! `kubelet.sock`.
//!
//! The plugin manager calls it for each `DevicePlugin` socket, one call per socket at a time: [`PluginHandler::validate`]
//! checks the versions and the resource name with upstream's texts, [`PluginHandler::register`] dials the plugin's
//! endpoint (its socket in the registration folder) as a `Register` call would, and [`PluginHandler::deregister`]
//! stops the resource as a plugin whose stream ended (its devices unhealthy, gone after the grace period unless it
//! comes back). Upstream's `GetPluginHandler`, which would write a `DEPRECATION` file into the device plugin folder
//! (plugins that find it skip `kubelet.sock`), is not called by its kubelet; nor is it here.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use kubelet_pluginmanager::PluginHandler;
use tracing::{debug, info};

use super::DeviceManager;
use super::registration::{SUPPORTED_VERSIONS, is_extended_resource_name};

/// The device manager as the plugin manager's `DevicePlugin` handler.
pub struct WatcherHandler(Arc<DeviceManager>);

impl WatcherHandler {
    /// The handler of `manager` (`GetWatcherHandler`).
    pub fn new(manager: Arc<DeviceManager>) -> Self {
        Self(manager)
    }
}

#[async_trait]
impl PluginHandler for WatcherHandler {
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        debug!(plugin = name, endpoint, ?versions, "Got plugin at endpoint with versions");
        if !versions.iter().any(|v| SUPPORTED_VERSIONS.contains(&v.as_str())) {
            return Err(format!(
                "manager version, {}, is not among plugin supported versions [{}]",
                SUPPORTED_VERSIONS[0],
                versions.join(" ")
            ));
        }
        if !is_extended_resource_name(name) {
            return Err(format!("invalid name of device plugin socket: the ResourceName {name:?} is invalid"));
        }
        Ok(())
    }

    async fn register(&self, name: &str, endpoint: &str, _versions: &[String]) -> Result<(), String> {
        info!(plugin = name, endpoint, "Registering plugin at endpoint");
        self.0.connect(name, Path::new(endpoint)).await
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        info!(plugin = name, endpoint, "Deregistering plugin");
        self.0.disconnect(name);
    }
}
