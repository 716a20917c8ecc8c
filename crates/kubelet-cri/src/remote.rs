//! The CRI gRPC client over a unix socket (`pkg/kubelet/cri/remote/remote_runtime.go`,
//! `remote_image.go`).
//!
//! The channel connects lazily and reconnects after any transport failure, so a runtime that is down or
//! restarting makes calls fail with [`CriError::Unavailable`] until it is back; nothing here panics or gives up.
//! Every call carries `runtimeRequestTimeout`, except `PullImage` (bounded by the caller), `StopContainer`
//! (its own grace period plus the timeout) and the long-lived `GetContainerEvents` stream (none), as upstream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use kubelet_trace::{GrpcCall, GrpcInjector};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::api;
use crate::api::image_service_client::ImageServiceClient;
use crate::api::runtime_service_client::RuntimeServiceClient;
use crate::{CriError, CriResult, ImageService, RuntimeService};

/// Largest gRPC message accepted, as upstream's `maxMsgSize` (16 MiB).
const MAX_MSG_SIZE: usize = 16 * 1024 * 1024;

/// How long opening `GetContainerEvents` waits for an answer. A Go gRPC server sends a stream's headers with its
/// first message, so a runtime with nothing to report answers nothing: an error that comes at once (Unimplemented,
/// no socket) is returned by the open, a later one is the stream's first item.
const EVENTS_OPEN_WAIT: Duration = Duration::from_millis(500);

/// Events received and not yet taken by the stream's reader (upstream's channel holds 1000).
const EVENTS_BUFFER: usize = 1000;

/// The channel every call goes through: it carries the current span's trace context (see `kubelet_trace`).
type Traced = InterceptedService<Channel, GrpcInjector>;

/// The CRI service a method belongs to, for its span's name (`runtime.v1.ImageService/PullImage`).
fn service_of(op: &str) -> &'static str {
    match op {
        "ListImages" | "ImageStatus" | "PullImage" | "RemoveImage" | "ImageFsInfo" => "runtime.v1.ImageService",
        _ => "runtime.v1.RuntimeService",
    }
}

/// A CRI runtime reached over gRPC.
#[derive(Clone)]
pub struct RemoteRuntime {
    runtime: RuntimeServiceClient<Traced>,
    channel: Traced,
    images: ImageServiceClient<Traced>,
    timeout: Duration,
    socket: PathBuf,
}

impl std::fmt::Debug for RemoteRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRuntime").field("socket", &self.socket).finish()
    }
}

/// The socket path of an endpoint such as `unix:///run/containerd/containerd.sock` (or a bare path).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, String> {
    if let Some(p) = endpoint.strip_prefix("unix://") {
        Ok(PathBuf::from(p))
    } else if endpoint.starts_with('/') {
        Ok(PathBuf::from(endpoint))
    } else {
        Err(format!("container runtime endpoint {endpoint:?}: only unix sockets are supported (unix:///path)"))
    }
}

impl RemoteRuntime {
    /// A client of the runtime at `endpoint` (`unix:///path`); connects on first use.
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Self, CriError> {
        let socket = socket_path(endpoint).map_err(|message| CriError::Unavailable { op: "Connect", message })?;
        let path = socket.clone();
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(&path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }));
        let channel = InterceptedService::new(channel, GrpcInjector);
        let raw = channel.clone();
        let runtime = RuntimeServiceClient::new(channel.clone())
            .max_decoding_message_size(MAX_MSG_SIZE)
            .max_encoding_message_size(MAX_MSG_SIZE);
        let images = ImageServiceClient::new(channel)
            .max_decoding_message_size(MAX_MSG_SIZE)
            .max_encoding_message_size(MAX_MSG_SIZE);
        Ok(Self { runtime, channel: raw, images, timeout, socket })
    }

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn req<T>(&self, msg: T, timeout: Option<Duration>) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(t) = timeout {
            r.set_timeout(t);
        }
        r
    }

    /// A unary call of `path` whose response is decoded as `Resp` (a brief view of the CRI's response message).
    async fn brief_call<Req, Resp>(&self, op: &'static str, path: &'static str, msg: Req) -> CriResult<Resp>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(MAX_MSG_SIZE)
            .max_encoding_message_size(MAX_MSG_SIZE);
        let fut = async move {
            grpc.ready().await.map_err(|e| tonic::Status::unavailable(format!("service was not ready: {e}")))?;
            let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
            grpc.unary(
                self.req(msg, Some(self.timeout)),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                codec,
            )
            .await
        };
        self.call(op, Some(self.timeout), fut).await
    }

    async fn call<T, F>(&self, op: &'static str, timeout: Option<Duration>, fut: F) -> CriResult<T>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let start = tokio::time::Instant::now();
        let span = GrpcCall::start(service_of(op), op);
        let fut = kubelet_trace::within(span.span(), fut);
        let res = match timeout {
            // The deadline is also enforced locally: a hung connection attempt must not outlive it.
            Some(t) => match tokio::time::timeout(t + Duration::from_millis(100), fut).await {
                Ok(r) => r,
                Err(_) => {
                    kubelet_metrics::kubelet::record_runtime_operation(op, start.elapsed().as_secs_f64(), false);
                    span.finish(tonic::Code::DeadlineExceeded as i32, "context deadline exceeded");
                    return Err(CriError::DeadlineExceeded { op, seconds: t.as_secs() });
                }
            },
            None => fut.await,
        };
        match &res {
            Ok(_) => span.finish(0, ""),
            Err(s) => span.finish(s.code() as i32, s.message()),
        }
        tracing::debug!(op, elapsed_us = start.elapsed().as_micros() as u64, ok = res.is_ok(), "cri call");
        kubelet_metrics::kubelet::record_runtime_operation(op, start.elapsed().as_secs_f64(), res.is_ok());
        match res {
            Ok(r) => Ok(r.into_inner()),
            Err(s) if s.code() == tonic::Code::DeadlineExceeded || s.code() == tonic::Code::Cancelled => {
                Err(CriError::DeadlineExceeded { op, seconds: timeout.unwrap_or_default().as_secs() })
            }
            Err(s) => Err(CriError::from_status(op, s)),
        }
    }
}

#[async_trait]
impl RuntimeService for RemoteRuntime {
    async fn version(&self) -> CriResult<api::VersionResponse> {
        let mut c = self.runtime.clone();
        let r = self.req(api::VersionRequest { version: "v1".into() }, Some(self.timeout));
        self.call("Version", Some(self.timeout), c.version(r)).await
    }

    async fn status(&self) -> CriResult<api::StatusResponse> {
        let mut c = self.runtime.clone();
        let r = self.req(api::StatusRequest { verbose: false }, Some(self.timeout));
        let resp = self.call("Status", Some(self.timeout), c.status(r)).await?;
        if resp.status.is_none() {
            return Err(CriError::Other {
                op: "Status",
                code: "Internal".into(),
                message: "runtime status is nil".into(),
            });
        }
        Ok(resp)
    }

    async fn runtime_config(&self) -> CriResult<api::RuntimeConfigResponse> {
        let mut c = self.runtime.clone();
        let r = self.req(api::RuntimeConfigRequest {}, Some(self.timeout));
        self.call("RuntimeConfig", Some(self.timeout), c.runtime_config(r)).await
    }

    async fn sandbox_image(&self) -> CriResult<Option<String>> {
        let mut c = self.runtime.clone();
        let r = self.req(api::StatusRequest { verbose: true }, Some(self.timeout));
        let resp = self.call("Status", Some(self.timeout), c.status(r)).await?;
        let config: Option<serde_json::Value> = resp.info.get("config").and_then(|c| serde_json::from_str(c).ok());
        Ok(config.and_then(|c| c["sandboxImage"].as_str().map(str::to_string)).filter(|s| !s.is_empty()))
    }

    async fn run_pod_sandbox(&self, config: api::PodSandboxConfig, runtime_handler: &str) -> CriResult<String> {
        let mut c = self.runtime.clone();
        // Upstream gives RunPodSandbox twice the usual timeout: sandbox creation includes network setup.
        let t = self.timeout * 2;
        let r = self.req(
            api::RunPodSandboxRequest { config: Some(config), runtime_handler: runtime_handler.to_string() },
            Some(t),
        );
        let resp = self.call("RunPodSandbox", Some(t), c.run_pod_sandbox(r)).await?;
        Ok(resp.pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let r = self.req(api::StopPodSandboxRequest { pod_sandbox_id: id.to_string() }, Some(self.timeout));
        self.call("StopPodSandbox", Some(self.timeout), c.stop_pod_sandbox(r)).await.map(|_| ())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let r = self.req(api::RemovePodSandboxRequest { pod_sandbox_id: id.to_string() }, Some(self.timeout));
        self.call("RemovePodSandbox", Some(self.timeout), c.remove_pod_sandbox(r)).await.map(|_| ())
    }

    async fn pod_sandbox_status(&self, id: &str) -> CriResult<api::PodSandboxStatus> {
        let mut c = self.runtime.clone();
        let r = self
            .req(api::PodSandboxStatusRequest { pod_sandbox_id: id.to_string(), verbose: false }, Some(self.timeout));
        let resp = self.call("PodSandboxStatus", Some(self.timeout), c.pod_sandbox_status(r)).await?;
        resp.status.ok_or(CriError::NotFound { op: "PodSandboxStatus", message: format!("sandbox {id}") })
    }

    async fn list_pod_sandbox(&self, filter: Option<api::PodSandboxFilter>) -> CriResult<Vec<api::PodSandbox>> {
        let mut c = self.runtime.clone();
        let r = self.req(api::ListPodSandboxRequest { filter }, Some(self.timeout));
        Ok(self.call("ListPodSandbox", Some(self.timeout), c.list_pod_sandbox(r)).await?.items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> CriResult<String> {
        let mut c = self.runtime.clone();
        let r = self.req(
            api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            },
            Some(self.timeout),
        );
        Ok(self.call("CreateContainer", Some(self.timeout), c.create_container(r)).await?.container_id)
    }

    async fn start_container(&self, id: &str) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let r = self.req(api::StartContainerRequest { container_id: id.to_string() }, Some(self.timeout));
        self.call("StartContainer", Some(self.timeout), c.start_container(r)).await.map(|_| ())
    }

    async fn stop_container(&self, id: &str, timeout: i64) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let t = self.timeout + Duration::from_secs(timeout.max(0) as u64);
        let r = self.req(api::StopContainerRequest { container_id: id.to_string(), timeout }, Some(t));
        self.call("StopContainer", Some(t), c.stop_container(r)).await.map(|_| ())
    }

    async fn exec_sync(&self, id: &str, cmd: Vec<String>, timeout: Duration) -> CriResult<crate::ExecOutput> {
        let mut c = self.runtime.clone();
        // As upstream: no deadline for timeout zero, else the command's timeout plus the request timeout, so the
        // runtime has time to report the command's own timeout.
        let t = (!timeout.is_zero()).then(|| self.timeout + timeout);
        let r =
            self.req(api::ExecSyncRequest { container_id: id.to_string(), cmd, timeout: timeout.as_secs() as i64 }, t);
        let resp = self.call("ExecSync", t, c.exec_sync(r)).await?;
        Ok(crate::ExecOutput { stdout: resp.stdout, stderr: resp.stderr, exit_code: resp.exit_code })
    }

    async fn update_container_resources(&self, id: &str, resources: api::LinuxContainerResources) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let msg = api::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(resources),
            ..Default::default()
        };
        let r = self.req(msg, Some(self.timeout));
        self.call("UpdateContainerResources", Some(self.timeout), c.update_container_resources(r)).await.map(|_| ())
    }

    async fn checkpoint_container(&self, id: &str, location: &str, timeout: i64) -> CriResult<()> {
        let mut c = self.runtime.clone();
        // As upstream's client: a timeout above the request timeout is used as asked, else the request timeout.
        let default = self.timeout.as_secs() as i64;
        let (timeout, deadline) =
            if timeout > default { (timeout, Duration::from_secs(timeout as u64)) } else { (default, self.timeout) };
        let msg =
            api::CheckpointContainerRequest { container_id: id.to_string(), location: location.to_string(), timeout };
        let r = self.req(msg, Some(deadline));
        self.call("CheckpointContainer", Some(deadline), c.checkpoint_container(r)).await.map(|_| ())
    }

    async fn reopen_container_log(&self, id: &str) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let r = self.req(api::ReopenContainerLogRequest { container_id: id.to_string() }, Some(self.timeout));
        self.call("ReopenContainerLog", Some(self.timeout), c.reopen_container_log(r)).await?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> CriResult<()> {
        let mut c = self.runtime.clone();
        let r = self.req(api::RemoveContainerRequest { container_id: id.to_string() }, Some(self.timeout));
        self.call("RemoveContainer", Some(self.timeout), c.remove_container(r)).await.map(|_| ())
    }

    async fn container_events(&self) -> CriResult<crate::ContainerEventStream> {
        const OP: &str = "GetContainerEvents";
        let mut c = self.runtime.clone();
        // No deadline: the stream lives as long as its reader keeps it.
        let r = self.req(api::GetEventsRequest {}, None);
        let (tx, rx) = tokio::sync::mpsc::channel::<CriResult<api::ContainerEventResponse>>(EVENTS_BUFFER);
        let (opened_tx, opened_rx) = tokio::sync::oneshot::channel::<CriResult<()>>();
        // The stream is read on its own task, which ends (dropping the call) once the reader is gone.
        tokio::spawn(async move {
            let open = tokio::select! {
                r = c.get_container_events(r) => r,
                _ = tx.closed() => return,
            };
            let mut stream = match open {
                Ok(resp) => {
                    let _ = opened_tx.send(Ok(()));
                    resp.into_inner()
                }
                Err(s) => {
                    let e = CriError::from_status(OP, s);
                    tracing::debug!(error = %e, "GetContainerEvents failed to get streaming client");
                    if let Err(Err(e)) = opened_tx.send(Err(e)) {
                        let _ = tx.send(Err(e)).await;
                    }
                    return;
                }
            };
            loop {
                let msg = tokio::select! {
                    m = stream.message() => m,
                    _ = tx.closed() => return,
                };
                match msg {
                    Ok(Some(ev)) => {
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        tracing::debug!("container events stream is closed");
                        return;
                    }
                    Err(s) => {
                        let e = CriError::from_status(OP, s);
                        tracing::debug!(error = %e, "failed to receive streaming container event");
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        });
        if let Ok(Ok(Err(e))) = tokio::time::timeout(EVENTS_OPEN_WAIT, opened_rx).await {
            return Err(e);
        }
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn list_containers(&self, filter: Option<api::ContainerFilter>) -> CriResult<Vec<api::Container>> {
        let mut c = self.runtime.clone();
        let r = self.req(api::ListContainersRequest { filter }, Some(self.timeout));
        Ok(self.call("ListContainers", Some(self.timeout), c.list_containers(r)).await?.containers)
    }

    async fn exec(&self, req: api::ExecRequest) -> CriResult<String> {
        let mut c = self.runtime.clone();
        let r = self.req(req, Some(self.timeout));
        Ok(self.call("Exec", Some(self.timeout), c.exec(r)).await?.url)
    }

    async fn attach(&self, req: api::AttachRequest) -> CriResult<String> {
        let mut c = self.runtime.clone();
        let r = self.req(req, Some(self.timeout));
        Ok(self.call("Attach", Some(self.timeout), c.attach(r)).await?.url)
    }

    async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> CriResult<String> {
        let mut c = self.runtime.clone();
        let r = self
            .req(api::PortForwardRequest { pod_sandbox_id: sandbox_id.to_string(), port: ports }, Some(self.timeout));
        Ok(self.call("PortForward", Some(self.timeout), c.port_forward(r)).await?.url)
    }

    async fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> CriResult<Vec<api::ContainerStats>> {
        let mut c = self.runtime.clone();
        let r = self.req(api::ListContainerStatsRequest { filter }, Some(self.timeout));
        Ok(self.call("ListContainerStats", Some(self.timeout), c.list_container_stats(r)).await?.stats)
    }

    async fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> CriResult<Vec<api::PodSandboxStats>> {
        let mut c = self.runtime.clone();
        let r = self.req(api::ListPodSandboxStatsRequest { filter }, Some(self.timeout));
        Ok(self.call("ListPodSandboxStats", Some(self.timeout), c.list_pod_sandbox_stats(r)).await?.stats)
    }

    async fn list_pod_sandbox_brief(&self) -> CriResult<Vec<crate::BriefSandbox>> {
        let path = "/runtime.v1.RuntimeService/ListPodSandbox";
        let r: crate::brief::BriefListPodSandboxResponse =
            self.brief_call("ListPodSandbox", path, api::ListPodSandboxRequest { filter: None }).await?;
        Ok(r.items)
    }

    async fn list_containers_brief(&self) -> CriResult<Vec<crate::BriefContainer>> {
        let path = "/runtime.v1.RuntimeService/ListContainers";
        let r: crate::brief::BriefListContainersResponse =
            self.brief_call("ListContainers", path, api::ListContainersRequest { filter: None }).await?;
        Ok(r.containers)
    }

    async fn container_status(&self, id: &str) -> CriResult<api::ContainerStatus> {
        let mut c = self.runtime.clone();
        let r =
            self.req(api::ContainerStatusRequest { container_id: id.to_string(), verbose: false }, Some(self.timeout));
        let resp = self.call("ContainerStatus", Some(self.timeout), c.container_status(r)).await?;
        resp.status.ok_or(CriError::NotFound { op: "ContainerStatus", message: format!("container {id}") })
    }
}

#[async_trait]
impl ImageService for RemoteRuntime {
    async fn list_images(&self, filter: Option<api::ImageFilter>) -> CriResult<Vec<api::Image>> {
        let mut c = self.images.clone();
        let r = self.req(api::ListImagesRequest { filter }, Some(self.timeout));
        Ok(self.call("ListImages", Some(self.timeout), c.list_images(r)).await?.images)
    }

    async fn image_status(&self, image: api::ImageSpec) -> CriResult<Option<api::Image>> {
        let mut c = self.images.clone();
        let r = self.req(api::ImageStatusRequest { image: Some(image), verbose: false }, Some(self.timeout));
        Ok(self.call("ImageStatus", Some(self.timeout), c.image_status(r)).await?.image)
    }

    async fn pull_image(
        &self,
        image: api::ImageSpec,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> CriResult<String> {
        let mut c = self.images.clone();
        let r = self.req(api::PullImageRequest { image: Some(image), auth, sandbox_config }, None);
        Ok(self.call("PullImage", None, c.pull_image(r)).await?.image_ref)
    }

    async fn image_fs_info(&self) -> CriResult<api::ImageFsInfoResponse> {
        let mut c = self.images.clone();
        let r = self.req(api::ImageFsInfoRequest {}, Some(self.timeout));
        self.call("ImageFsInfo", Some(self.timeout), c.image_fs_info(r)).await
    }

    async fn remove_image(&self, image: api::ImageSpec) -> CriResult<()> {
        let mut c = self.images.clone();
        let r = self.req(api::RemoveImageRequest { image: Some(image) }, Some(self.timeout));
        self.call("RemoveImage", Some(self.timeout), c.remove_image(r)).await.map(|_| ())
    }
}
