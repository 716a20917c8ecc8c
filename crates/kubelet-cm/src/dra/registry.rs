//! The DRA drivers registered on this node (`pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go`,
//! `dra_plugin.go`): the plugin manager's `DRAPlugin` handler, the gRPC client of each driver endpoint, and the
//! clean-up of a driver's ResourceSlices when no endpoint of it is left.
//!
//! Contract:
//! - The plugin manager calls [`DraPlugins`] as the `DRAPlugin` handler, one call per socket at a time. A driver
//!   may register several endpoints (a rolling update of its DaemonSet); calls go to the newest one. The channel to
//!   an endpoint is made lazily, as upstream's `grpc.NewClient`: registration never waits for the driver.
//! - [`DraPlugins::start`] deletes every ResourceSlice of this node once (a driver that is not running must not
//!   advertise devices), retried with upstream's back-off (1 s doubling to 5 min) until the apiserver takes it.
//!   When the last endpoint of a driver goes, its slices are deleted 30 s later unless it registers again meanwhile
//!   (upstream's `wipingDelay`). Upstream also counts a registered endpoint whose connection dropped as gone;
//!   here a registered endpoint counts as usable until its socket is removed (drivers remove it when they stop).
//! - Calls carry upstream's 45 s deadline and are observed in `dra_grpc_operations_duration_seconds`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use kubelet_apiclient::DraApi;
use kubelet_pluginmanager::PluginHandler;
use kubelet_pluginmanager::client::code_name;
use kubelet_proto::dra::{v1, v1beta1};
use prost::Message;
use tokio::task::AbortHandle;
use tonic::transport::Channel;
use tracing::{debug, info};

use super::plugin::choose_service;

/// A call's deadline (`defaultClientCallTimeout`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// How long the slices of a driver without endpoints stay (`defaultWipingDelay`).
pub const WIPING_DELAY: Duration = Duration::from_secs(30);

/// One endpoint of a driver.
#[derive(Clone, Debug)]
pub struct DraPlugin {
    driver: String,
    endpoint: String,
    service: &'static str,
    channel: Channel,
}

/// Re-encodes a message of one API version as the other (their wire forms are identical).
pub(crate) fn convert<A: Message, B: Message + Default>(a: &A) -> B {
    B::decode(a.encode_to_vec().as_slice()).unwrap_or_default()
}

impl DraPlugin {
    /// The endpoint.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn observe<T>(
        &self,
        method: &str,
        call: impl std::future::Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        let start = tokio::time::Instant::now();
        let out = match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(tonic::Status::deadline_exceeded("context deadline exceeded")),
        };
        let code = out.as_ref().map(|_| tonic::Code::Ok).unwrap_or_else(|s| s.code());
        let full = format!("/{}/{method}", self.package_service());
        kubelet_metrics::kubelet::DRA_GRPC_OPERATIONS_DURATION
            .observe(&[&self.driver, &code_name(code), &full], start.elapsed().as_secs_f64());
        out
    }

    fn package_service(&self) -> &'static str {
        match self.service {
            "v1beta1.DRAPlugin" => "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
            _ => "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
        }
    }

    /// `NodePrepareResources` through the chosen service.
    pub async fn prepare(
        &self,
        req: v1::NodePrepareResourcesRequest,
    ) -> Result<v1::NodePrepareResourcesResponse, tonic::Status> {
        debug!(driverName = %self.driver, endpoint = %self.endpoint, claims = req.claims.len(), "Calling NodePrepareResources rpc");
        let ch = self.channel.clone();
        if self.service == "v1beta1.DRAPlugin" {
            let mut c = v1beta1::dra_plugin_client::DraPluginClient::new(ch);
            let r: v1beta1::NodePrepareResourcesRequest = convert(&req);
            let resp = self.observe("NodePrepareResources", async move { c.node_prepare_resources(r).await }).await?;
            return Ok(convert(&resp.into_inner()));
        }
        let mut c = v1::dra_plugin_client::DraPluginClient::new(ch);
        Ok(self.observe("NodePrepareResources", async move { c.node_prepare_resources(req).await }).await?.into_inner())
    }

    /// `NodeUnprepareResources` through the chosen service.
    pub async fn unprepare(
        &self,
        req: v1::NodeUnprepareResourcesRequest,
    ) -> Result<v1::NodeUnprepareResourcesResponse, tonic::Status> {
        debug!(driverName = %self.driver, endpoint = %self.endpoint, claims = req.claims.len(), "Calling NodeUnprepareResources rpc");
        let ch = self.channel.clone();
        if self.service == "v1beta1.DRAPlugin" {
            let mut c = v1beta1::dra_plugin_client::DraPluginClient::new(ch);
            let r: v1beta1::NodeUnprepareResourcesRequest = convert(&req);
            let resp =
                self.observe("NodeUnprepareResources", async move { c.node_unprepare_resources(r).await }).await?;
            return Ok(convert(&resp.into_inner()));
        }
        let mut c = v1::dra_plugin_client::DraPluginClient::new(ch);
        Ok(self
            .observe("NodeUnprepareResources", async move { c.node_unprepare_resources(req).await })
            .await?
            .into_inner())
    }
}

#[derive(Default)]
struct State {
    /// Endpoints by driver, oldest first.
    drivers: HashMap<String, Vec<DraPlugin>>,
    /// Wipes waiting for their delay, by driver.
    pending: HashMap<String, AbortHandle>,
}

/// The registered drivers (`DRAPluginManager`).
pub struct DraPlugins {
    node: String,
    api: OnceLock<Arc<dyn DraApi>>,
    state: Mutex<State>,
}

impl DraPlugins {
    /// The registry of node `node`; until [`DraPlugins::bind`] (never on a standalone node) no slices are deleted.
    pub fn new(node: &str) -> Arc<Self> {
        Arc::new(Self { node: node.into(), api: OnceLock::new(), state: Mutex::default() })
    }

    /// Gives the registry the apiserver and deletes every slice of this node once, in the background (the start
    /// of `NewDRAPluginManager`). A second call changes nothing.
    pub fn bind(self: &Arc<Self>, api: Arc<dyn DraApi>) {
        if self.api.set(api).is_ok() {
            let me = self.clone();
            tokio::spawn(async move { me.wipe("").await });
        }
    }

    /// The endpoint to call for `driver` (`GetPlugin`): the newest one.
    pub fn get(&self, driver: &str) -> Result<DraPlugin, String> {
        if driver.is_empty() {
            return Err("DRA driver name is empty".into());
        }
        let st = self.state.lock().unwrap();
        st.drivers.get(driver).and_then(|l| l.last()).cloned().ok_or(format!("DRA driver {driver} is not registered"))
    }

    fn selector(&self, driver: &str) -> String {
        match driver {
            "" => format!("spec.nodeName={}", self.node),
            d => format!("spec.nodeName={},spec.driver={d}", self.node),
        }
    }

    /// Deletes the slices of this node (of `driver`, or all), retried with upstream's back-off until it worked.
    async fn wipe(&self, driver: &str) {
        let Some(api) = self.api.get() else { return };
        let selector = self.selector(driver);
        let mut delay = Duration::from_secs(1);
        loop {
            match api.delete_resource_slices(&selector).await {
                Ok(()) | Err(kubelet_apiclient::ApiError::NotFound(_)) => {
                    info!(fieldSelector = %selector, "Deleted ResourceSlices");
                    return;
                }
                Err(e) => debug!(fieldSelector = %selector, err = %e, "Deleting ResourceSlice failed, retrying"),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(300));
        }
    }

    /// Cancels or schedules the wipe of `driver` after a change of its endpoints (`sync`).
    fn sync(self: &Arc<Self>, st: &mut State, driver: &str) {
        if st.drivers.get(driver).is_some_and(|l| !l.is_empty()) {
            if let Some(h) = st.pending.remove(driver) {
                h.abort();
            }
            return;
        }
        if self.api.get().is_none() || st.pending.get(driver).is_some_and(|h| !h.is_finished()) {
            return;
        }
        let (me, d) = (self.clone(), driver.to_string());
        let h = tokio::spawn(async move {
            tokio::time::sleep(WIPING_DELAY).await;
            me.wipe(&d).await;
            me.state.lock().unwrap().pending.remove(&d);
        });
        st.pending.insert(driver.into(), h.abort_handle());
    }
}

/// The registry as the plugin manager's `DRAPlugin` handler.
pub struct Handler(pub Arc<DraPlugins>);

#[async_trait]
impl PluginHandler for Handler {
    fn validate(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        choose_service(name, endpoint, versions).map(|_| ())
    }

    async fn register(&self, name: &str, endpoint: &str, versions: &[String]) -> Result<(), String> {
        let service = choose_service(name, endpoint, versions)?;
        let reg = &self.0;
        let mut st = reg.state.lock().unwrap();
        let list = st.drivers.entry(name.into()).or_default();
        if list.iter().any(|p| p.endpoint == endpoint) {
            return Err(format!("endpoint {endpoint} already registered for DRA driver plugin {name}"));
        }
        list.push(DraPlugin {
            driver: name.into(),
            endpoint: endpoint.into(),
            service,
            channel: kubelet_pluginmanager::client::uds_channel_lazy(std::path::Path::new(endpoint)),
        });
        info!(driverName = name, endpoint, chosenService = service, numPlugins = list.len(), "Registered DRA plugin");
        reg.sync(&mut st, name);
        Ok(())
    }

    async fn deregister(&self, name: &str, endpoint: &str) {
        let reg = &self.0;
        let mut st = reg.state.lock().unwrap();
        let Some(list) = st.drivers.get_mut(name) else { return };
        let Some(i) = list.iter().position(|p| p.endpoint == endpoint) else { return };
        list.remove(i);
        let left = list.len();
        if left == 0 {
            st.drivers.remove(name);
        }
        info!(driverName = name, endpoint, numPlugins = left, "Unregistered DRA plugin");
        reg.sync(&mut st, name);
    }
}
