//! Serves a [`FakeRuntime`] over the real CRI wire protocol (gRPC on a unix socket), so the real client
//! ([`crate::RemoteRuntime`]) is tested in-process: error codes, connection loss and reconnection. Methods the fake
//! does not implement answer UNIMPLEMENTED, as an older runtime does.

use std::path::Path;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use crate::api::image_service_server::{ImageService as ImageServer, ImageServiceServer};
use crate::api::runtime_service_server::{RuntimeService as RuntimeServer, RuntimeServiceServer};
use crate::{CriError, FakeRuntime, ImageService, RuntimeService, api};

/// A one-shot shutdown signal for the server task.
type Shutdown = tokio::sync::oneshot::Sender<()>;

/// The fake behind tonic's generated server traits.
#[derive(Debug, Clone)]
pub struct FakeCriServer(pub Arc<FakeRuntime>);

fn st(e: CriError) -> Status {
    e.to_status()
}

#[tonic::async_trait]
impl RuntimeServer for FakeCriServer {
    async fn version(&self, _r: Request<api::VersionRequest>) -> Result<Response<api::VersionResponse>, Status> {
        self.0.version().await.map(Response::new).map_err(st)
    }

    async fn status(&self, _r: Request<api::StatusRequest>) -> Result<Response<api::StatusResponse>, Status> {
        self.0.status().await.map(Response::new).map_err(st)
    }

    async fn runtime_config(
        &self,
        _r: Request<api::RuntimeConfigRequest>,
    ) -> Result<Response<api::RuntimeConfigResponse>, Status> {
        self.0.runtime_config().await.map(Response::new).map_err(st)
    }

    async fn run_pod_sandbox(
        &self,
        r: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        let r = r.into_inner();
        let id = self.0.run_pod_sandbox(r.config.unwrap_or_default(), &r.runtime_handler).await.map_err(st)?;
        Ok(Response::new(api::RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        r: Request<api::StopPodSandboxRequest>,
    ) -> Result<Response<api::StopPodSandboxResponse>, Status> {
        self.0.stop_pod_sandbox(&r.into_inner().pod_sandbox_id).await.map_err(st)?;
        Ok(Response::new(api::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        r: Request<api::RemovePodSandboxRequest>,
    ) -> Result<Response<api::RemovePodSandboxResponse>, Status> {
        self.0.remove_pod_sandbox(&r.into_inner().pod_sandbox_id).await.map_err(st)?;
        Ok(Response::new(api::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        r: Request<api::PodSandboxStatusRequest>,
    ) -> Result<Response<api::PodSandboxStatusResponse>, Status> {
        let status = self.0.pod_sandbox_status(&r.into_inner().pod_sandbox_id).await.map_err(st)?;
        Ok(Response::new(api::PodSandboxStatusResponse { status: Some(status), ..Default::default() }))
    }

    async fn list_pod_sandbox(
        &self,
        r: Request<api::ListPodSandboxRequest>,
    ) -> Result<Response<api::ListPodSandboxResponse>, Status> {
        let items = self.0.list_pod_sandbox(r.into_inner().filter).await.map_err(st)?;
        Ok(Response::new(api::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        r: Request<api::CreateContainerRequest>,
    ) -> Result<Response<api::CreateContainerResponse>, Status> {
        let r = r.into_inner();
        let id = self
            .0
            .create_container(&r.pod_sandbox_id, r.config.unwrap_or_default(), r.sandbox_config.unwrap_or_default())
            .await
            .map_err(st)?;
        Ok(Response::new(api::CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        r: Request<api::StartContainerRequest>,
    ) -> Result<Response<api::StartContainerResponse>, Status> {
        self.0.start_container(&r.into_inner().container_id).await.map_err(st)?;
        Ok(Response::new(api::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        r: Request<api::StopContainerRequest>,
    ) -> Result<Response<api::StopContainerResponse>, Status> {
        let r = r.into_inner();
        self.0.stop_container(&r.container_id, r.timeout).await.map_err(st)?;
        Ok(Response::new(api::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        r: Request<api::RemoveContainerRequest>,
    ) -> Result<Response<api::RemoveContainerResponse>, Status> {
        self.0.remove_container(&r.into_inner().container_id).await.map_err(st)?;
        Ok(Response::new(api::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        r: Request<api::ListContainersRequest>,
    ) -> Result<Response<api::ListContainersResponse>, Status> {
        let containers = self.0.list_containers(r.into_inner().filter).await.map_err(st)?;
        Ok(Response::new(api::ListContainersResponse { containers }))
    }

    async fn exec_sync(&self, r: Request<api::ExecSyncRequest>) -> Result<Response<api::ExecSyncResponse>, Status> {
        let r = r.into_inner();
        let t = std::time::Duration::from_secs(r.timeout.max(0) as u64);
        let o = self.0.exec_sync(&r.container_id, r.cmd, t).await.map_err(st)?;
        Ok(Response::new(api::ExecSyncResponse { stdout: o.stdout, stderr: o.stderr, exit_code: o.exit_code }))
    }

    async fn get_container_events(
        &self,
        _r: Request<api::GetEventsRequest>,
    ) -> Result<Response<tonic::codegen::BoxStream<api::ContainerEventResponse>>, Status> {
        use tokio_stream::StreamExt;
        let events = self.0.container_events().await.map_err(st)?;
        Ok(Response::new(Box::pin(events.map(|r| r.map_err(st)))))
    }

    async fn container_status(
        &self,
        r: Request<api::ContainerStatusRequest>,
    ) -> Result<Response<api::ContainerStatusResponse>, Status> {
        let status = self.0.container_status(&r.into_inner().container_id).await.map_err(st)?;
        Ok(Response::new(api::ContainerStatusResponse { status: Some(status), ..Default::default() }))
    }
}

#[tonic::async_trait]
impl ImageServer for FakeCriServer {
    async fn list_images(
        &self,
        r: Request<api::ListImagesRequest>,
    ) -> Result<Response<api::ListImagesResponse>, Status> {
        let images = self.0.list_images(r.into_inner().filter).await.map_err(st)?;
        Ok(Response::new(api::ListImagesResponse { images }))
    }

    async fn image_status(
        &self,
        r: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        let image = self.0.image_status(r.into_inner().image.unwrap_or_default()).await.map_err(st)?;
        Ok(Response::new(api::ImageStatusResponse { image, ..Default::default() }))
    }

    async fn pull_image(&self, r: Request<api::PullImageRequest>) -> Result<Response<api::PullImageResponse>, Status> {
        let r = r.into_inner();
        let image_ref = self.0.pull_image(r.image.unwrap_or_default(), r.auth, r.sandbox_config).await.map_err(st)?;
        Ok(Response::new(api::PullImageResponse { image_ref }))
    }

    async fn remove_image(
        &self,
        r: Request<api::RemoveImageRequest>,
    ) -> Result<Response<api::RemoveImageResponse>, Status> {
        self.0.remove_image(r.into_inner().image.unwrap_or_default()).await.map_err(st)?;
        Ok(Response::new(api::RemoveImageResponse {}))
    }
}

/// A fake runtime served on a unix socket until [`ServedFake::stop`] (or drop).
#[derive(Debug)]
pub struct ServedFake {
    shutdown: Option<Shutdown>,
    task: Option<JoinHandle<()>>,
}

impl ServedFake {
    /// Serves `fake` on the socket at `path` (removed first if it exists).
    pub fn start(fake: Arc<FakeRuntime>, path: &Path) -> std::io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server = FakeCriServer(fake);
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(RuntimeServiceServer::new(server.clone()))
                .add_service(ImageServiceServer::new(server))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self { shutdown: Some(tx), task: Some(task) })
    }

    /// Stops serving and waits for the server task.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for ServedFake {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::RemoteRuntime;

    #[tokio::test]
    async fn real_client_against_the_fake_over_grpc() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("cri.sock");
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let served = ServedFake::start(fake.clone(), &sock).unwrap();
        let client = RemoteRuntime::new(&format!("unix://{}", sock.display()), Duration::from_secs(5)).unwrap();

        assert_eq!(client.version().await.unwrap().runtime_name, "fake");
        let sid = client.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let cfg = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
            image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
            ..Default::default()
        };
        let cid = client.create_container(&sid, cfg, Default::default()).await.unwrap();
        client.start_container(&cid).await.unwrap();
        let st = client.container_status(&cid).await.unwrap();
        assert_eq!(st.state, api::ContainerState::ContainerRunning as i32);
        assert_eq!(client.list_containers(None).await.unwrap().len(), 1);
        // The brief lists of the relist: the same RPCs, decoded into fewer fields.
        let brief = client.list_containers_brief().await.unwrap();
        assert_eq!((brief.len(), brief[0].id.as_str()), (1, cid.as_str()));
        assert_eq!(brief[0].state, api::ContainerState::ContainerRunning as i32);
        let brief = client.list_pod_sandbox_brief().await.unwrap();
        assert_eq!((brief.len(), brief[0].id.as_str()), (1, sid.as_str()));
        assert!(
            client.image_status(api::ImageSpec { image: "nope".into(), ..Default::default() }).await.unwrap().is_none()
        );

        // Error codes come back typed.
        assert!(client.container_status("missing").await.unwrap_err().is_not_found());
        fake.inject_error("StartContainer", CriError::Unavailable { op: "StartContainer", message: "busy".into() });
        assert!(client.start_container(&cid).await.unwrap_err().is_unavailable());

        // The runtime goes away: calls fail as unavailable, never hang; once it is back, the same client works.
        served.stop().await;
        let e = client.list_pod_sandbox(None).await.unwrap_err();
        assert!(e.is_unavailable(), "{e:?}");
        let _served = ServedFake::start(fake.clone(), &sock).unwrap();
        let mut ok = false;
        for _ in 0..100 {
            if client.list_pod_sandbox(None).await.is_ok() {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(ok, "the client reconnects to the restarted runtime");
    }

    #[tokio::test]
    async fn container_events_stream_over_grpc_and_end_with_the_runtimes_error() {
        use tokio_stream::StreamExt;
        async fn next(s: &mut crate::ContainerEventStream) -> Option<crate::CriResult<api::ContainerEventResponse>> {
            tokio::time::timeout(Duration::from_secs(5), s.next()).await.expect("an event or the end")
        }
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("cri.sock");
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let _served = ServedFake::start(fake.clone(), &sock).unwrap();
        let client = RemoteRuntime::new(&format!("unix://{}", sock.display()), Duration::from_secs(5)).unwrap();

        // A runtime without events (containerd 1.6) answers Unimplemented at once.
        let e = client.container_events().await.err().expect("unimplemented");
        assert!(matches!(e, CriError::Unimplemented { op: "GetContainerEvents" }), "{e:?}");

        fake.enable_events();
        let mut events = client.container_events().await.unwrap();
        // The server subscribes when the call arrives; wait for it before changing anything.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while fake.count("GetContainerEvents") < 2 {
            assert!(tokio::time::Instant::now() < deadline, "the server never subscribed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let meta = api::PodSandboxMetadata { uid: "u1".into(), name: "web".into(), ..Default::default() };
        let sid = fake
            .run_pod_sandbox(api::PodSandboxConfig { metadata: Some(meta), ..Default::default() }, "")
            .await
            .unwrap();
        let ev = next(&mut events).await.unwrap().unwrap();
        let created = api::ContainerEventType::ContainerCreatedEvent as i32;
        assert_eq!((ev.container_id.as_str(), ev.container_event_type), (sid.as_str(), created));
        assert_eq!(ev.pod_sandbox_status.unwrap().metadata.unwrap().uid, "u1");
        let ev = next(&mut events).await.unwrap().unwrap();
        assert_eq!(ev.container_event_type, api::ContainerEventType::ContainerStartedEvent as i32);

        // The runtime fails the stream: the client's stream gives the error, then ends.
        fake.break_event_streams();
        let e = next(&mut events).await.unwrap().unwrap_err();
        assert_eq!(e.message(), "error reading from server: EOF", "{e:?}");
        assert!(next(&mut events).await.is_none());
    }

    #[tokio::test]
    async fn a_call_the_runtime_never_answers_ends_at_its_deadline_and_holds_back_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("cri.sock");
        let fake = Arc::new(FakeRuntime::new(&["busybox"]));
        let _served = ServedFake::start(fake.clone(), &sock).unwrap();
        let client = RemoteRuntime::new(&format!("unix://{}", sock.display()), Duration::from_millis(500)).unwrap();
        let hung = client.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        let other = client.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
        fake.hang(&hung);
        let start = tokio::time::Instant::now();
        let (stuck, answered) = tokio::join!(client.pod_sandbox_status(&hung), async {
            // On the same connection, while the other call waits.
            let st = client.pod_sandbox_status(&other).await;
            (st, start.elapsed())
        });
        let e = stuck.unwrap_err();
        assert!(matches!(e, CriError::DeadlineExceeded { op: "PodSandboxStatus", .. }), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(2), "ended at its deadline: {:?}", start.elapsed());
        assert_eq!(answered.0.unwrap().id, other);
        assert!(answered.1 < Duration::from_millis(400), "not held back: {:?}", answered.1);
        fake.release(&hung);
        assert_eq!(client.pod_sandbox_status(&hung).await.unwrap().id, hung);
    }
}
