//! A CSI driver's Node service for the unit tests, over a unix socket: it answers its capabilities, makes the
//! target of a publish and removes it at the unpublish as a driver does (without mounting), records the requests
//! (stage and unstage too), and fails a publish with a chosen code.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kubelet_proto::csi::v1 as csi;

/// A driver's Node service: its capabilities, the requests it got, and an error to answer.
#[derive(Default)]
pub(crate) struct Driver {
    pub(crate) caps: Vec<csi::node_service_capability::rpc::Type>,
    pub(crate) published: Mutex<Vec<csi::NodePublishVolumeRequest>>,
    pub(crate) unpublished: Mutex<Vec<(String, String)>>,
    pub(crate) staged: Mutex<Vec<csi::NodeStageVolumeRequest>>,
    pub(crate) unstaged: Mutex<Vec<(String, String)>>,
    pub(crate) fail: Mutex<Option<tonic::Code>>,
    /// An error for the next unstage.
    pub(crate) fail_unstage: Mutex<Option<tonic::Code>>,
}

#[derive(Clone)]
struct Server(Arc<Driver>);

#[tonic::async_trait]
impl csi::node_server::Node for Server {
    async fn node_get_capabilities(
        &self,
        _: tonic::Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<tonic::Response<csi::NodeGetCapabilitiesResponse>, tonic::Status> {
        let capabilities = self
            .0
            .caps
            .iter()
            .map(|t| csi::NodeServiceCapability {
                r#type: Some(csi::node_service_capability::Type::Rpc(csi::node_service_capability::Rpc {
                    r#type: *t as i32,
                })),
            })
            .collect();
        Ok(tonic::Response::new(csi::NodeGetCapabilitiesResponse { capabilities }))
    }

    async fn node_stage_volume(
        &self,
        req: tonic::Request<csi::NodeStageVolumeRequest>,
    ) -> Result<tonic::Response<csi::NodeStageVolumeResponse>, tonic::Status> {
        self.0.staged.lock().unwrap().push(req.into_inner());
        Ok(tonic::Response::new(csi::NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        req: tonic::Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<tonic::Response<csi::NodeUnstageVolumeResponse>, tonic::Status> {
        if let Some(code) = self.0.fail_unstage.lock().unwrap().take() {
            return Err(tonic::Status::new(code, "busy"));
        }
        let r = req.into_inner();
        self.0.unstaged.lock().unwrap().push((r.volume_id, r.staging_target_path));
        Ok(tonic::Response::new(csi::NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        req: tonic::Request<csi::NodePublishVolumeRequest>,
    ) -> Result<tonic::Response<csi::NodePublishVolumeResponse>, tonic::Status> {
        if let Some(code) = *self.0.fail.lock().unwrap() {
            return Err(tonic::Status::new(code, "no"));
        }
        let req = req.into_inner();
        // A driver makes the target (the kubelet makes only its parent).
        std::fs::create_dir_all(&req.target_path).map_err(|e| tonic::Status::internal(e.to_string()))?;
        self.0.published.lock().unwrap().push(req);
        Ok(tonic::Response::new(csi::NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        req: tonic::Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<tonic::Response<csi::NodeUnpublishVolumeResponse>, tonic::Status> {
        let r = req.into_inner();
        // ... and removes it.
        let _ = std::fs::remove_dir(&r.target_path);
        self.0.unpublished.lock().unwrap().push((r.volume_id, r.target_path));
        Ok(tonic::Response::new(csi::NodeUnpublishVolumeResponse {}))
    }
}

pub(crate) fn serve(dir: &Path, caps: Vec<csi::node_service_capability::rpc::Type>) -> (Arc<Driver>, String) {
    let path = dir.join("csi.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let driver = Arc::new(Driver { caps, ..Default::default() });
    let svc = csi::node_server::NodeServer::new(Server(driver.clone()));
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder().add_service(svc).serve_with_incoming(incoming).await;
    });
    (driver, format!("unix://{}", path.display()))
}

/// Mounts the driver made, as the mount table would show them: every `mount` folder at or below a path.
pub(crate) struct DriverMounts;

fn targets(path: &Path, out: &mut Vec<PathBuf>) {
    if path.file_name().is_some_and(|n| n == "mount") && path.is_dir() {
        out.push(path.to_path_buf());
    }
    for e in std::fs::read_dir(path).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            targets(&e.path(), out);
        }
    }
}

impl crate::Mounter for DriverMounts {
    fn mount_tmpfs(&self, _: &Path, _: Option<u64>) -> Result<(), String> {
        Err("no tmpfs here".into())
    }
    fn unmount(&self, _: &Path) -> Result<(), String> {
        Err("the kubelet must not unmount a CSI target itself".into())
    }
    fn mounts_under(&self, path: &Path) -> Vec<PathBuf> {
        let mut out = vec![];
        targets(path, &mut out);
        out
    }
}
