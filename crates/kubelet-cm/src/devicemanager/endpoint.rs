//! The kubelet's client of one device plugin (`pkg/kubelet/cm/devicemanager/endpoint.go` and
//! `plugin/v1beta1/client.go`): the plugin's socket in the device plugin folder, dialled when the plugin registers.
//!
//! The device manager owns one per registered resource. `ListAndWatch` is one long stream the manager reads until
//! it ends (the plugin stopped or restarted); `Allocate`, `GetPreferredAllocation` and `PreStartContainer` are
//! single calls with upstream's deadlines. Every error names the resource and the socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet_proto::deviceplugin::v1beta1 as pb;
use pb::device_plugin_client::DevicePluginClient;
use tonic::transport::Channel;

/// How long dialling a plugin's socket may take (`dial`'s 10 s context).
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// `PreStartContainer`'s deadline (`KubeletPreStartContainerRPCTimeoutInSecs`).
pub const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);
/// The deadline of `Allocate` and `GetPreferredAllocation`. Upstream sets none; they run in admission, which holds
/// the sync loop, so a plugin that never answers refuses the pod instead of stopping every pod's admission.
pub const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A failed call to a device plugin.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The plugin's socket cannot be reached.
    #[error("device plugin {resource} at {}: cannot connect: {message}", socket.display())]
    Connect {
        /// The resource.
        resource: String,
        /// The socket.
        socket: PathBuf,
        /// Why.
        message: String,
    },
    /// A call failed.
    #[error("device plugin {resource}: {call} failed: {message}")]
    Call {
        /// The resource.
        resource: String,
        /// The rpc.
        call: &'static str,
        /// The plugin's status message.
        message: String,
    },
}

/// A connection to one device plugin.
#[derive(Clone, Debug)]
pub struct Endpoint {
    resource: String,
    socket: PathBuf,
    client: DevicePluginClient<Channel>,
}

impl Endpoint {
    /// Dials the plugin serving `resource` on `socket` (within [`DIAL_TIMEOUT`]).
    pub async fn connect(resource: &str, socket: &Path) -> Result<Self, EndpointError> {
        let channel = kubelet_pluginmanager::client::uds_channel(socket, DIAL_TIMEOUT)
            .await
            .map_err(|e| e.map_or_else(|| "timed out".to_string(), |e| e.to_string()))
            .map_err(|message| EndpointError::Connect {
                resource: resource.to_string(),
                socket: socket.to_path_buf(),
                message,
            })?;
        Ok(Self {
            resource: resource.to_string(),
            socket: socket.to_path_buf(),
            client: DevicePluginClient::new(channel),
        })
    }

    /// The resource it serves.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn failed(&self, call: &'static str, s: tonic::Status) -> EndpointError {
        EndpointError::Call { resource: self.resource.clone(), call, message: s.message().to_string() }
    }

    /// `GetDevicePluginOptions`.
    pub async fn options(&self) -> Result<pb::DevicePluginOptions, EndpointError> {
        let mut c = self.client.clone();
        c.get_device_plugin_options(pb::Empty {})
            .await
            .map(|r| r.into_inner())
            .map_err(|s| self.failed("GetDevicePluginOptions", s))
    }

    /// `ListAndWatch`: the stream of device lists.
    pub async fn list_and_watch(&self) -> Result<tonic::Streaming<pb::ListAndWatchResponse>, EndpointError> {
        let mut c = self.client.clone();
        c.list_and_watch(pb::Empty {}).await.map(|r| r.into_inner()).map_err(|s| self.failed("ListAndWatch", s))
    }

    /// `Allocate` of `ids` for one container.
    pub async fn allocate(&self, ids: Vec<String>) -> Result<pb::AllocateResponse, EndpointError> {
        let mut c = self.client.clone();
        let mut req = tonic::Request::new(pb::AllocateRequest {
            container_requests: vec![pb::ContainerAllocateRequest { devices_ids: ids }],
        });
        req.set_timeout(ALLOCATE_TIMEOUT);
        c.allocate(req).await.map(|r| r.into_inner()).map_err(|s| self.failed("Allocate", s))
    }

    /// `GetPreferredAllocation` of `size` devices among `available`, `must_include` among them.
    pub async fn preferred(
        &self,
        available: Vec<String>,
        must_include: Vec<String>,
        size: i32,
    ) -> Result<pb::PreferredAllocationResponse, EndpointError> {
        let mut c = self.client.clone();
        let mut req = tonic::Request::new(pb::PreferredAllocationRequest {
            container_requests: vec![pb::ContainerPreferredAllocationRequest {
                available_device_i_ds: available,
                must_include_device_i_ds: must_include,
                allocation_size: size,
            }],
        });
        req.set_timeout(ALLOCATE_TIMEOUT);
        c.get_preferred_allocation(req)
            .await
            .map(|r| r.into_inner())
            .map_err(|s| self.failed("GetPreferredAllocation", s))
    }

    /// `PreStartContainer` of `ids`, within [`PRE_START_TIMEOUT`].
    pub async fn pre_start(&self, ids: Vec<String>) -> Result<(), EndpointError> {
        let mut c = self.client.clone();
        let mut req = tonic::Request::new(pb::PreStartContainerRequest { devices_ids: ids });
        req.set_timeout(PRE_START_TIMEOUT);
        c.pre_start_container(req).await.map(drop).map_err(|s| self.failed("PreStartContainer", s))
    }
}
