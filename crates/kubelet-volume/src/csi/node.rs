//! The kubelet's calls of a CSI driver's Node service (`pkg/volume/csi/csi_client.go`): `NodeGetInfo` at
//! registration, and publishing and unpublishing a volume for a pod with upstream's request shape and error classes
//! (called by [`super::plugin`]).
//!
//! Contract: each call dials the driver's socket anew (as upstream, which closes its connection after each call)
//! and runs within upstream's 2 minutes, the capability queries included. An error is [`CallError::Final`] when the
//! driver answered with a code that says the operation did not happen, and [`CallError::Uncertain`] when it may
//! have (Canceled, DeadlineExceeded, Unavailable, ResourceExhausted, Aborted, or no answer): the caller then keeps
//! the target and unpublishes it before giving up on the volume, as upstream marks it uncertain.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use kubelet_pluginmanager::client::{status_text, uds_channel};
use kubelet_proto::csi::v1 as csi;
use tonic::transport::Channel;

use super::registration::CSI_TIMEOUT;

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The driver did not do it.
    #[error("{0}")]
    Final(String),
    /// It may have happened.
    #[error("{0}")]
    Uncertain(String),
}

/// Runs `call` within upstream's 2 minutes; past them the call counts as uncertain.
async fn within_timeout<T>(call: impl std::future::Future<Output = Result<T, CallError>>) -> Result<T, CallError> {
    tokio::time::timeout(CSI_TIMEOUT, call).await.unwrap_or_else(|_| {
        Err(CallError::Uncertain("rpc error: code = DeadlineExceeded desc = context deadline exceeded".into()))
    })
}

fn classify(s: tonic::Status) -> CallError {
    use tonic::Code::*;
    let text = status_text(&s);
    match s.code() {
        Cancelled | DeadlineExceeded | Unavailable | ResourceExhausted | Aborted => CallError::Uncertain(text),
        _ => CallError::Final(text),
    }
}

/// A `NodePublishVolume` request, as the kubelet fills it.
#[derive(Clone, Debug, Default)]
pub struct Publish {
    /// The volume's handle.
    pub volume_id: String,
    /// Where the driver publishes it.
    pub target_path: String,
    /// Where it was staged (empty: the driver has no staging, or the volume is ephemeral).
    pub staging_target_path: String,
    /// What the controller's publish answered.
    pub publish_context: HashMap<String, String>,
    /// The volume's attributes, with the pod's information where the CSIDriver asks for it.
    pub volume_context: HashMap<String, String>,
    /// The node publish secret's data.
    pub secrets: HashMap<String, String>,
    /// Read-only.
    pub readonly: bool,
    /// The filesystem type (empty: the driver's default; `block`: a raw block volume).
    pub fs_type: String,
    /// Mount options.
    pub mount_flags: Vec<String>,
    /// The pod's fsGroup, passed where the driver applies it itself (`VOLUME_MOUNT_GROUP`).
    pub fs_group: Option<i64>,
    /// The PersistentVolume's first access mode (None: `ReadWriteOnce`, as for an inline volume).
    pub access_mode: Option<String>,
}

/// The CSI access mode of a Kubernetes one (`asCSIAccessModeV1`, or `asSingleNodeMultiWriterCapableCSIAccessModeV1`
/// where the driver has `SINGLE_NODE_MULTI_WRITER`).
fn access_mode(mode: Option<&str>, multi_writer: bool) -> csi::volume_capability::access_mode::Mode {
    use csi::volume_capability::access_mode::Mode;
    match (mode.unwrap_or("ReadWriteOnce"), multi_writer) {
        ("ReadWriteOnce", false) | ("ReadWriteOncePod", false) => Mode::SingleNodeWriter,
        ("ReadWriteOnce", true) => Mode::SingleNodeMultiWriter,
        ("ReadWriteOncePod", true) => Mode::SingleNodeSingleWriter,
        ("ReadOnlyMany", _) => Mode::MultiNodeReaderOnly,
        ("ReadWriteMany", _) => Mode::MultiNodeMultiWriter,
        _ => Mode::Unknown,
    }
}

/// A `NodeStageVolume` request, as the kubelet fills it.
#[derive(Clone, Debug, Default)]
pub struct Stage {
    /// The volume's handle.
    pub volume_id: String,
    /// The global mount path (`plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount`).
    pub staging_target_path: String,
    /// What the controller's publish answered.
    pub publish_context: HashMap<String, String>,
    /// The PersistentVolume's attributes.
    pub volume_context: HashMap<String, String>,
    /// The node stage secret's data.
    pub secrets: HashMap<String, String>,
    /// The filesystem type.
    pub fs_type: String,
    /// The PersistentVolume's mount options.
    pub mount_flags: Vec<String>,
    /// The pod's fsGroup, passed where the driver has `VOLUME_MOUNT_GROUP`.
    pub fs_group: Option<i64>,
    /// The PersistentVolume's first access mode.
    pub access_mode: Option<String>,
}

fn mount_capability(
    fs_type: &str,
    mount_flags: &[String],
    group: Option<i64>,
    mode: csi::volume_capability::access_mode::Mode,
) -> csi::VolumeCapability {
    let access_type = if fs_type == "block" {
        csi::volume_capability::AccessType::Block(csi::volume_capability::BlockVolume {})
    } else {
        csi::volume_capability::AccessType::Mount(csi::volume_capability::MountVolume {
            fs_type: fs_type.to_string(),
            mount_flags: mount_flags.to_vec(),
            volume_mount_group: group.map(|g| g.to_string()).unwrap_or_default(),
        })
    };
    csi::VolumeCapability {
        access_mode: Some(csi::volume_capability::AccessMode { mode: mode as i32 }),
        access_type: Some(access_type),
    }
}

/// A client of one driver's Node service.
#[derive(Clone, Debug)]
pub struct NodeClient {
    endpoint: String,
    /// The driver's name, for `csi_operations_seconds`.
    driver: String,
}

impl NodeClient {
    /// The client of the driver serving `endpoint` (a socket path, `unix://` optional).
    pub fn new(endpoint: &str) -> Self {
        Self { endpoint: endpoint.strip_prefix("unix://").unwrap_or(endpoint).to_string(), driver: String::new() }
    }

    /// The client of the driver `driver` serving `endpoint`.
    pub fn of(driver: &str, endpoint: &str) -> Self {
        Self { driver: driver.to_string(), ..Self::new(endpoint) }
    }

    /// Runs one RPC and records it in `csi_operations_seconds{driver_name, grpc_status_code, method_name,
    /// migrated}` (upstream's metrics interceptor; `migrated` is always false: rkubelet migrates no in-tree
    /// plugin).
    async fn timed<T>(
        &self,
        method: &str,
        call: impl std::future::Future<Output = Result<T, tonic::Status>>,
    ) -> Result<T, tonic::Status> {
        let start = tokio::time::Instant::now();
        let r = call.await;
        let code = match &r {
            Ok(_) => "OK".to_string(),
            Err(s) => kubelet_pluginmanager::client::code_name(s.code()),
        };
        let labels = [self.driver.as_str(), code.as_str(), &format!("/csi.v1.Node/{method}"), "false"];
        kubelet_metrics::kubelet::CSI_OPERATIONS_SECONDS.observe(&labels, start.elapsed().as_secs_f64());
        r
    }

    async fn client(&self, timeout: Duration) -> Result<csi::node_client::NodeClient<Channel>, CallError> {
        let channel = uds_channel(Path::new(&self.endpoint), timeout).await.map_err(|e| {
            CallError::Uncertain(match e {
                Some(e) => format!("dial {}: {e}", self.endpoint),
                None => format!("dial {}: timed out", self.endpoint),
            })
        })?;
        Ok(csi::node_client::NodeClient::new(channel))
    }

    /// The driver's Node service capabilities (`NodeGetCapabilities`).
    pub async fn capabilities(&self) -> Result<Vec<csi::node_service_capability::rpc::Type>, CallError> {
        let mut c = self.client(CSI_TIMEOUT).await?;
        let resp = self
            .timed("NodeGetCapabilities", c.node_get_capabilities(csi::NodeGetCapabilitiesRequest {}))
            .await
            .map_err(classify)?;
        Ok(resp
            .into_inner()
            .capabilities
            .into_iter()
            .filter_map(|cap| match cap.r#type {
                Some(csi::node_service_capability::Type::Rpc(rpc)) => {
                    csi::node_service_capability::rpc::Type::try_from(rpc.r#type).ok()
                }
                None => None,
            })
            .collect())
    }

    /// Publishes a volume (`NodePublishVolume`), after asking which access mode and fsGroup passing the driver
    /// takes, all within 2 minutes. Answers whether the driver has `VOLUME_MOUNT_GROUP`, so applies the fsGroup
    /// itself (the kubelet then changes no ownership).
    pub async fn publish(&self, p: Publish) -> Result<bool, CallError> {
        if p.volume_id.is_empty() {
            return Err(CallError::Final("missing volume id".into()));
        }
        if p.target_path.is_empty() {
            return Err(CallError::Final("missing target path".into()));
        }
        let call = async {
            use csi::node_service_capability::rpc::Type;
            let caps = self.capabilities().await?;
            let mode = access_mode(p.access_mode.as_deref(), caps.contains(&Type::SingleNodeMultiWriter));
            let group = p.fs_group.filter(|_| caps.contains(&Type::VolumeMountGroup));
            let req = csi::NodePublishVolumeRequest {
                volume_id: p.volume_id.clone(),
                publish_context: p.publish_context.clone(),
                staging_target_path: p.staging_target_path.clone(),
                target_path: p.target_path.clone(),
                volume_capability: Some(mount_capability(&p.fs_type, &p.mount_flags, group, mode)),
                readonly: p.readonly,
                secrets: p.secrets.clone(),
                volume_context: p.volume_context.clone(),
            };
            let mut c = self.client(CSI_TIMEOUT).await?;
            self.timed("NodePublishVolume", c.node_publish_volume(req))
                .await
                .map(|_| caps.contains(&Type::VolumeMountGroup))
                .map_err(classify)
        };
        within_timeout(call).await
    }

    /// Stages a volume (`NodeStageVolume`) after asking which access mode and fsGroup passing the driver takes, all
    /// within 2 minutes. The caller asked [`NodeClient::capabilities`] for `STAGE_UNSTAGE_VOLUME` first.
    pub async fn stage(&self, p: Stage) -> Result<(), CallError> {
        if p.volume_id.is_empty() {
            return Err(CallError::Final("missing volume id".into()));
        }
        if p.staging_target_path.is_empty() {
            return Err(CallError::Final("missing staging target path".into()));
        }
        let call = async {
            use csi::node_service_capability::rpc::Type;
            let caps = self.capabilities().await?;
            let mode = access_mode(p.access_mode.as_deref(), caps.contains(&Type::SingleNodeMultiWriter));
            let group = p.fs_group.filter(|_| caps.contains(&Type::VolumeMountGroup));
            let req = csi::NodeStageVolumeRequest {
                volume_id: p.volume_id.clone(),
                publish_context: p.publish_context.clone(),
                staging_target_path: p.staging_target_path.clone(),
                volume_capability: Some(mount_capability(&p.fs_type, &p.mount_flags, group, mode)),
                secrets: p.secrets.clone(),
                volume_context: p.volume_context.clone(),
            };
            let mut c = self.client(CSI_TIMEOUT).await?;
            self.timed("NodeStageVolume", c.node_stage_volume(req)).await.map(|_| ()).map_err(classify)
        };
        within_timeout(call).await
    }

    /// Unstages a volume (`NodeUnstageVolume`).
    pub async fn unstage(&self, volume_id: &str, staging_target_path: &str) -> Result<(), CallError> {
        if volume_id.is_empty() {
            return Err(CallError::Final("missing volume id".into()));
        }
        if staging_target_path.is_empty() {
            return Err(CallError::Final("missing staging target path".into()));
        }
        let call = async {
            let mut c = self.client(CSI_TIMEOUT).await?;
            let req = csi::NodeUnstageVolumeRequest {
                volume_id: volume_id.into(),
                staging_target_path: staging_target_path.into(),
            };
            self.timed("NodeUnstageVolume", c.node_unstage_volume(req)).await.map(|_| ()).map_err(classify)
        };
        within_timeout(call).await
    }

    /// Unpublishes a volume (`NodeUnpublishVolume`).
    pub async fn unpublish(&self, volume_id: &str, target_path: &str) -> Result<(), CallError> {
        if volume_id.is_empty() {
            return Err(CallError::Final("missing volume id".into()));
        }
        if target_path.is_empty() {
            return Err(CallError::Final("missing target path".into()));
        }
        let call = async {
            let mut c = self.client(CSI_TIMEOUT).await?;
            let req = csi::NodeUnpublishVolumeRequest { volume_id: volume_id.into(), target_path: target_path.into() };
            self.timed("NodeUnpublishVolume", c.node_unpublish_volume(req)).await.map(|_| ()).map_err(classify)
        };
        within_timeout(call).await
    }

    /// A published volume's usage (`NodeGetVolumeStats` of the target `path`), within 2 minutes.
    pub async fn volume_stats(
        &self,
        volume_id: &str,
        path: &str,
    ) -> Result<csi::NodeGetVolumeStatsResponse, CallError> {
        let call = async {
            let mut c = self.client(CSI_TIMEOUT).await?;
            let req = csi::NodeGetVolumeStatsRequest {
                volume_id: volume_id.into(),
                volume_path: path.into(),
                staging_target_path: String::new(),
            };
            self.timed("NodeGetVolumeStats", c.node_get_volume_stats(req))
                .await
                .map(|r| r.into_inner())
                .map_err(classify)
        };
        within_timeout(call).await
    }

    /// Who this node is to the driver (`NodeGetInfo`): its id of the node, its volume limit (0: none) and its
    /// topology.
    pub async fn node_get_info(&self) -> Result<super::registration::NodeGetInfo, CallError> {
        let call = async {
            let mut c = self.client(CSI_TIMEOUT).await?;
            self.timed("NodeGetInfo", c.node_get_info(csi::NodeGetInfoRequest {})).await.map_err(classify)
        };
        let resp = within_timeout(call).await?.into_inner();
        let topology = resp.accessible_topology.map(|t| t.segments.into_iter().collect()).unwrap_or_default();
        Ok((resp.node_id, resp.max_volumes_per_node, topology))
    }
}

#[cfg(test)]
mod tests {
    use super::super::stub::serve;
    use super::*;

    /// A request whose target is in `dir`.
    fn publish(dir: &Path) -> Publish {
        Publish {
            volume_id: "csi-abc".into(),
            target_path: dir.join("pods/u/volumes/kubernetes.io~csi/data/mount").display().to_string(),
            fs_type: "ext4".into(),
            fs_group: Some(2000),
            volume_context: HashMap::from([("csi.storage.k8s.io/ephemeral".into(), "true".into())]),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn publish_asks_the_capabilities_then_sends_upstreams_request() {
        use csi::node_service_capability::rpc::Type;
        let dir = tempfile::tempdir().unwrap();
        let (plain, ep) = serve(dir.path(), vec![]);
        assert!(!NodeClient::new(&ep).publish(publish(dir.path())).await.unwrap(), "the kubelet applies the fsGroup");
        let req = plain.published.lock().unwrap()[0].clone();
        let cap = req.volume_capability.unwrap();
        assert_eq!(cap.access_mode.unwrap().mode, csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32);
        let Some(csi::volume_capability::AccessType::Mount(m)) = cap.access_type else { panic!("a mount") };
        assert_eq!((m.fs_type.as_str(), m.volume_mount_group.as_str()), ("ext4", ""), "no fsGroup passing");
        assert_eq!(req.volume_context["csi.storage.k8s.io/ephemeral"], "true");
        assert!(req.staging_target_path.is_empty() && !req.readonly);

        let dir2 = tempfile::tempdir().unwrap();
        let (rich, ep2) = serve(dir2.path(), vec![Type::SingleNodeMultiWriter, Type::VolumeMountGroup]);
        assert!(NodeClient::new(&ep2).publish(publish(dir2.path())).await.unwrap(), "the driver applies the fsGroup");
        let cap = rich.published.lock().unwrap()[0].volume_capability.clone().unwrap();
        assert_eq!(
            cap.access_mode.unwrap().mode,
            csi::volume_capability::access_mode::Mode::SingleNodeMultiWriter as i32
        );
        let Some(csi::volume_capability::AccessType::Mount(m)) = cap.access_type else { panic!("a mount") };
        assert_eq!(m.volume_mount_group, "2000", "the driver applies the fsGroup");

        NodeClient::new(&ep2).unpublish("csi-abc", "/t").await.unwrap();
        assert_eq!(*rich.unpublished.lock().unwrap(), vec![("csi-abc".to_string(), "/t".to_string())]);
    }

    #[tokio::test]
    async fn errors_are_final_or_uncertain_as_upstream_classifies_them() {
        let dir = tempfile::tempdir().unwrap();
        let (driver, ep) = serve(dir.path(), vec![]);
        let c = NodeClient::of("errors.csi", &ep);
        *driver.fail.lock().unwrap() = Some(tonic::Code::InvalidArgument);
        assert_eq!(
            c.publish(publish(dir.path())).await,
            Err(CallError::Final("rpc error: code = InvalidArgument desc = no".into()))
        );
        let count = |code: &str, method: &str| {
            let m = format!("/csi.v1.Node/{method}");
            kubelet_metrics::kubelet::CSI_OPERATIONS_SECONDS.count(&["errors.csi", code, &m, "false"])
        };
        assert_eq!(count("InvalidArgument", "NodePublishVolume"), 1, "upstream's csi_operations_seconds");
        assert_eq!(count("OK", "NodeGetCapabilities"), 1);
        *driver.fail.lock().unwrap() = Some(tonic::Code::DeadlineExceeded);
        assert_eq!(
            c.publish(publish(dir.path())).await,
            Err(CallError::Uncertain("rpc error: code = DeadlineExceeded desc = no".into()))
        );
        assert_eq!(
            c.publish(Publish { volume_id: String::new(), ..publish(dir.path()) }).await,
            Err(CallError::Final("missing volume id".into()))
        );
        let gone = NodeClient::new(&dir.path().join("nobody.sock").display().to_string());
        assert!(matches!(gone.unpublish("v", "/t").await, Err(CallError::Uncertain(_))), "no answer: uncertain");
    }
}
