//! The device manager against an in-process device plugin served over a unix socket, as upstream's
//! `plugin/v1beta1/stub.go`: registration, device lists into capacity, allocation with its checkpoint, restart,
//! and a plugin that goes away. No sleeps: each step awaits the manager's change counter or the stub's calls.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kubelet_proto::deviceplugin::v1beta1 as pb;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::*;

/// A device plugin: its devices (changed through `devices`), what it asks for, and the calls it got.
struct Stub {
    devices: watch::Sender<Vec<pb::Device>>,
    /// Fired when the plugin "dies": its stream ends and it serves no more.
    gone: CancellationToken,
    options: pb::DevicePluginOptions,
    allocs: Mutex<Vec<Vec<String>>>,
    pre_starts: Mutex<Vec<Vec<String>>>,
    preferred: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct StubServer(Arc<Stub>);

#[tonic::async_trait]
impl pb::device_plugin_server::DevicePlugin for StubServer {
    async fn get_device_plugin_options(
        &self,
        _: tonic::Request<pb::Empty>,
    ) -> Result<tonic::Response<pb::DevicePluginOptions>, tonic::Status> {
        Ok(tonic::Response::new(self.0.options))
    }

    async fn list_and_watch(
        &self,
        _: tonic::Request<pb::Empty>,
    ) -> Result<tonic::Response<tonic::codegen::BoxStream<pb::ListAndWatchResponse>>, tonic::Status> {
        // The current list, then each new one.
        let rx = self.0.devices.subscribe();
        let gone = self.0.gone.clone();
        let s = futures::stream::unfold((rx, true), move |(mut rx, first)| {
            let gone = gone.clone();
            async move {
                if !first {
                    tokio::select! {
                        changed = rx.changed() => changed.ok()?,
                        _ = gone.cancelled() => return None,
                    }
                }
                let devices = rx.borrow_and_update().clone();
                Some((Ok(pb::ListAndWatchResponse { devices }), (rx, false)))
            }
        });
        Ok(tonic::Response::new(Box::pin(s)))
    }

    async fn get_preferred_allocation(
        &self,
        _: tonic::Request<pb::PreferredAllocationRequest>,
    ) -> Result<tonic::Response<pb::PreferredAllocationResponse>, tonic::Status> {
        let ids = self.0.preferred.lock().unwrap().clone();
        Ok(tonic::Response::new(pb::PreferredAllocationResponse {
            container_responses: vec![pb::ContainerPreferredAllocationResponse { device_i_ds: ids }],
        }))
    }

    async fn allocate(
        &self,
        req: tonic::Request<pb::AllocateRequest>,
    ) -> Result<tonic::Response<pb::AllocateResponse>, tonic::Status> {
        let mut out = vec![];
        for c in req.into_inner().container_requests {
            let mut ids = c.devices_ids.clone();
            ids.sort();
            self.0.allocs.lock().unwrap().push(ids.clone());
            out.push(pb::ContainerAllocateResponse {
                envs: [("DEVICES".to_string(), ids.join(","))].into(),
                mounts: ids
                    .iter()
                    .map(|d| pb::Mount {
                        container_path: format!("/tmp/{d}"),
                        host_path: format!("/tmp/{d}"),
                        read_only: false,
                    })
                    .collect(),
                devices: vec![pb::DeviceSpec {
                    container_path: "/dev/fake".into(),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                annotations: [("example.com/devices".to_string(), ids.join(","))].into(),
                cdi_devices: ids
                    .iter()
                    .map(|d| pb::CdiDevice { name: format!("example.com/resource=CDI-{d}") })
                    .collect(),
            });
        }
        Ok(tonic::Response::new(pb::AllocateResponse { container_responses: out }))
    }

    async fn pre_start_container(
        &self,
        req: tonic::Request<pb::PreStartContainerRequest>,
    ) -> Result<tonic::Response<pb::PreStartContainerResponse>, tonic::Status> {
        let mut ids = req.into_inner().devices_ids;
        ids.sort();
        self.0.pre_starts.lock().unwrap().push(ids);
        Ok(tonic::Response::new(pb::PreStartContainerResponse {}))
    }
}

fn dev(id: &str, healthy: bool) -> pb::Device {
    pb::Device { id: id.into(), health: if healthy { "Healthy" } else { "Unhealthy" }.into(), topology: None }
}

/// Serves a stub on `<dir>/<name>`; dropping the token stops it (its stream ends).
fn serve(
    dir: &Path,
    name: &str,
    devices: Vec<pb::Device>,
    options: pb::DevicePluginOptions,
) -> (Arc<Stub>, CancellationToken) {
    let cancel = CancellationToken::new();
    let stub = Arc::new(Stub {
        devices: watch::channel(devices).0,
        gone: cancel.clone(),
        options,
        allocs: Mutex::default(),
        pre_starts: Mutex::default(),
        preferred: Mutex::default(),
    });
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let svc = pb::device_plugin_server::DevicePluginServer::new(StubServer(stub.clone()));
    let stop = cancel.clone();
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await;
    });
    (stub, cancel)
}

/// Registers `name` for `example.com/resource` through `kubelet.sock`, as a plugin does.
async fn register(dir: &Path, name: &str, resource: &str) -> Result<(), tonic::Status> {
    let path = dir.join(KUBELET_SOCKET);
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(&path).await?))
            }
        }))
        .await
        .unwrap();
    let mut c = pb::registration_client::RegistrationClient::new(channel);
    c.register(pb::RegisterRequest {
        version: "v1beta1".into(),
        endpoint: name.into(),
        resource_name: resource.into(),
        options: None,
    })
    .await
    .map(drop)
}

const R: &str = "example.com/resource";

/// Waits until `f` holds of the manager's capacity.
async fn until(m: &DeviceManager, f: impl Fn(&Capacity) -> bool) -> Capacity {
    let mut rx = m.changes();
    loop {
        let c = m.capacity();
        if f(&c) {
            return c;
        }
        tokio::time::timeout(Duration::from_secs(30), rx.changed()).await.expect("a device change").unwrap();
    }
}

/// A manager serving in `dir`, with its registration socket up.
async fn started(dir: &Path) -> (Arc<DeviceManager>, CancellationToken) {
    let m = DeviceManager::new(dir);
    let cancel = CancellationToken::new();
    tokio::spawn(m.clone().run(cancel.clone()));
    let sock = dir.join(KUBELET_SOCKET);
    let up = async {
        while tokio::net::UnixStream::connect(&sock).await.is_err() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), up).await.expect("the registration socket is served");
    (m, cancel)
}

fn pod(uid: &str, init: Option<u32>, apps: &[u32]) -> Pod {
    let c = |name: String, n: u32| serde_json::json!({"name": name, "image": "x", "resources": {"limits": {R: n.to_string()}}});
    let mut spec = serde_json::json!({"containers": apps.iter().enumerate().map(|(i, n)| c(format!("app{i}"), *n)).collect::<Vec<_>>()});
    if let Some(n) = init {
        spec["initContainers"] = serde_json::json!([c("init".into(), n)]);
    }
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": uid, "namespace": "default", "uid": uid}, "spec": spec}),
    )
    .unwrap()
}

fn container<'a>(p: &'a Pod, name: &str) -> &'a Container {
    let s = p.spec.as_ref().unwrap();
    s.containers.iter().chain(s.init_containers.iter().flatten()).find(|c| c.name == name).unwrap()
}

#[tokio::test]
async fn a_registered_plugins_devices_become_capacity_and_unhealthy_ones_leave_allocatable() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _stop) = started(dir.path()).await;
    // A resource of its own: the registration counter is the process's.
    const R: &str = "counted.example.com/resource";
    let (stub, _plugin) = serve(dir.path(), "p.sock", vec![dev("d1", true), dev("d2", true)], Default::default());
    register(dir.path(), "p.sock", R).await.unwrap();
    let c = until(&m, |c| c.capacity.get(R) == Some(&2)).await;
    assert_eq!(c.allocatable[R], 2);
    stub.devices.send_replace(vec![dev("d1", true), dev("d2", false)]);
    let c = until(&m, |c| c.allocatable.get(R) == Some(&1)).await;
    assert_eq!(c.capacity[R], 2, "an unhealthy device stays in capacity");
    assert_eq!(kubelet_metrics::kubelet::DEVICE_PLUGIN_REGISTRATION.get(&[R]), 1.0);
}

#[tokio::test]
async fn registration_is_refused_with_upstreams_texts() {
    let dir = tempfile::tempdir().unwrap();
    let (_m, _stop) = started(dir.path()).await;
    let e = register(dir.path(), "p.sock", "resource").await.unwrap_err();
    assert_eq!(e.message(), r#"the ResourceName "resource" is invalid"#);
    let e = register(dir.path(), "absent.sock", R).await.unwrap_err();
    assert!(e.message().starts_with("failed to dial device plugin: "), "{}", e.message());
}

#[tokio::test]
async fn containers_get_their_devices_answers_merged_and_the_allocation_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (m, stop) = started(dir.path()).await;
    let opts = pb::DevicePluginOptions { pre_start_required: true, get_preferred_allocation_available: false };
    let (stub, plugin) = serve(dir.path(), "p.sock", vec![dev("d1", true), dev("d2", true), dev("d3", true)], opts);
    register(dir.path(), "p.sock", R).await.unwrap();
    until(&m, |c| c.allocatable.get(R) == Some(&3)).await;

    let p = pod("u1", None, &[2]);
    m.allocate(&p, &BTreeSet::new(), true).await.unwrap();
    assert_eq!(*stub.allocs.lock().unwrap(), vec![vec!["d1".to_string(), "d2".to_string()]]);
    let o = m.run_options(&p, container(&p, "app0")).await.unwrap();
    assert_eq!(o.envs, vec![("DEVICES".to_string(), "d1,d2".to_string())]);
    assert_eq!(o.cdi_devices, vec!["example.com/resource=CDI-d1", "example.com/resource=CDI-d2"]);
    assert_eq!(o.devices.len(), 1);
    assert_eq!(o.mounts.iter().map(|m| m.container_path.as_str()).collect::<Vec<_>>(), ["/tmp/d1", "/tmp/d2"]);
    assert_eq!(*stub.pre_starts.lock().unwrap(), vec![vec!["d1".to_string(), "d2".to_string()]]);

    // Short: one device is left, the next pod asks for two.
    let e = m.allocate(&pod("u2", None, &[2]), &BTreeSet::from(["u1".to_string()]), true).await.unwrap_err();
    assert_eq!(e, "requested number of devices unavailable for example.com/resource. Requested: 2, Available: 1");

    // rkubelet restarts: the checkpoint keeps the allocation; re-admission of the running container keeps it
    // without a call to the plugin, which is not back yet.
    stop.cancel();
    plugin.cancel();
    let m = DeviceManager::new(dir.path());
    assert_eq!(m.capacity().capacity.get(R), Some(&0), "registered, no device until the plugin is back");
    let e = m.allocate(&p, &BTreeSet::new(), false).await.unwrap_err();
    assert_eq!(e, "no healthy devices present; cannot allocate unhealthy devices example.com/resource", "not running");
    m.set_running_at_start([("u1".to_string(), "app0".to_string())].into());
    // Every source seen, another pod of the same batch admitted first: the running pod's devices are kept.
    m.allocate(&pod("other", None, &[]), &BTreeSet::new(), true).await.unwrap();
    m.allocate(&p, &BTreeSet::new(), true).await.unwrap();
    // Until the plugin registers again its options are unknown: no PreStart, the checkpointed answer (upstream).
    let o = m.run_options(&p, container(&p, "app0")).await.unwrap();
    assert_eq!(o.envs, vec![("DEVICES".to_string(), "d1,d2".to_string())]);
    assert_eq!(stub.allocs.lock().unwrap().len(), 1, "no new Allocate");
    assert_eq!(stub.pre_starts.lock().unwrap().len(), 1, "no PreStart");
    // Terminated, the pod's devices are free again.
    m.release("u1");
    assert!(m.allocations().is_empty());
}

#[tokio::test]
async fn init_container_devices_are_reused_by_the_app_containers() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _stop) = started(dir.path()).await;
    let (stub, _plugin) = serve(dir.path(), "p.sock", vec![dev("d1", true), dev("d2", true)], Default::default());
    register(dir.path(), "p.sock", R).await.unwrap();
    until(&m, |c| c.allocatable.get(R) == Some(&2)).await;
    // The init container's two devices go to the app container after it: the pod needs two, not four.
    let p = pod("u1", Some(2), &[2]);
    m.allocate(&p, &BTreeSet::new(), true).await.unwrap();
    let allocs = stub.allocs.lock().unwrap().clone();
    assert_eq!(allocs, vec![vec!["d1".to_string(), "d2".to_string()]; 2]);
}

#[tokio::test]
async fn the_plugins_preferred_devices_are_taken() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _stop) = started(dir.path()).await;
    let opts = pb::DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true };
    let (stub, _plugin) = serve(dir.path(), "p.sock", vec![dev("d1", true), dev("d2", true), dev("d3", true)], opts);
    *stub.preferred.lock().unwrap() = vec!["d3".into()];
    register(dir.path(), "p.sock", R).await.unwrap();
    until(&m, |c| c.allocatable.get(R) == Some(&3)).await;
    m.allocate(&pod("u1", None, &[1]), &BTreeSet::new(), true).await.unwrap();
    assert_eq!(*stub.allocs.lock().unwrap(), vec![vec!["d3".to_string()]]);
}

#[tokio::test]
async fn a_plugin_that_goes_away_leaves_its_devices_unhealthy_and_a_new_registration_brings_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _stop) = started(dir.path()).await;
    let (_stub, plugin) = serve(dir.path(), "p1.sock", vec![dev("d1", true), dev("d2", true)], Default::default());
    register(dir.path(), "p1.sock", R).await.unwrap();
    until(&m, |c| c.allocatable.get(R) == Some(&2)).await;
    let p = pod("u1", None, &[1]);
    m.allocate(&p, &BTreeSet::new(), true).await.unwrap();
    plugin.cancel();
    let c = until(&m, |c| c.allocatable.get(R) == Some(&0)).await;
    assert_eq!(c.capacity[R], 2, "capacity stays through the grace period");
    let (_stub, _plugin) = serve(dir.path(), "p2.sock", vec![dev("d1", true), dev("d2", true)], Default::default());
    register(dir.path(), "p2.sock", R).await.unwrap();
    until(&m, |c| c.allocatable.get(R) == Some(&2)).await;
    // The running pod kept its device: the next pod gets the other one.
    m.allocate(&pod("u2", None, &[1]), &BTreeSet::from(["u1".to_string()]), true).await.unwrap();
    let o = m.run_options(&p, container(&p, "app0")).await.unwrap();
    assert_eq!(o.envs[0].1, "d1");
}

#[test]
fn a_resource_whose_plugin_stays_away_is_removed_after_the_grace_period_once() {
    let mut s = State::default();
    s.devices(R, &[dev("d1", true)]);
    s.endpoints
        .insert(R.into(), state::EndpointState { endpoint: None, options: None, stopped_at: None, generation: 1 });
    let t0 = Instant::now();
    assert!(s.disconnected(R, 1, t0));
    assert!(!s.disconnected(R, 0, t0), "an older registration's stream changes nothing");
    let c = s.capacity(t0 + state::STOP_GRACE_PERIOD);
    assert_eq!((c.capacity[R], c.allocatable[R]), (1, 0));
    let c = s.capacity(t0 + state::STOP_GRACE_PERIOD + Duration::from_millis(1));
    assert_eq!(c.removed, vec![R.to_string()]);
    assert!(c.capacity.is_empty());
    assert!(s.capacity(t0 + state::STOP_GRACE_PERIOD * 2).removed.is_empty(), "reported once");
}

#[test]
fn allocation_errors_are_upstreams() {
    let mut s = State::default();
    let key: Key = ("u".into(), "c".into(), R.into());
    assert_eq!(
        s.plan(&key, 1, &BTreeSet::new(), false).unwrap_err(),
        "cannot allocate unregistered device example.com/resource"
    );
    s.devices(R, &[dev("d1", false)]);
    assert_eq!(
        s.plan(&key, 1, &BTreeSet::new(), false).unwrap_err(),
        "no healthy devices present; cannot allocate unhealthy devices example.com/resource"
    );
    s.devices(R, &[dev("d1", true), dev("d2", true)]);
    s.choose(&key, 1, &[], &["d1".into()], &[], None);
    assert_eq!(
        s.plan(&key, 2, &BTreeSet::new(), false).unwrap_err(),
        r#"pod "u" container "c" changed request for resource "example.com/resource" from 1 to 2"#
    );
    assert_eq!(s.plan(&key, 1, &BTreeSet::new(), false).unwrap(), Plan::Done);
    s.devices(R, &[dev("d1", false), dev("d2", true)]);
    assert_eq!(
        s.plan(&key, 1, &BTreeSet::new(), false).unwrap_err(),
        "previously allocated devices are no longer healthy; cannot allocate unhealthy devices example.com/resource"
    );
    assert_eq!(s.plan(&key, 1, &BTreeSet::new(), true).unwrap(), Plan::Done, "kept across a restart");
}

#[tokio::test]
async fn a_container_admitted_before_its_plugin_registered_gets_its_devices_when_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _stop) = started(dir.path()).await;
    let p = pod("u1", None, &[1]);
    // Unknown resource at admission: nothing to allocate (upstream's resource fit ignores it too).
    m.allocate(&p, &BTreeSet::new(), true).await.unwrap();
    let (stub, _plugin) = serve(dir.path(), "p.sock", vec![dev("d1", true)], Default::default());
    register(dir.path(), "p.sock", R).await.unwrap();
    until(&m, |c| c.allocatable.get(R) == Some(&1)).await;
    let o = m.run_options(&p, container(&p, "app0")).await.unwrap();
    assert_eq!(o.envs, vec![("DEVICES".to_string(), "d1".to_string())]);
    assert_eq!(stub.allocs.lock().unwrap().len(), 1);
}

#[test]
fn device_hints_and_the_aligned_choice_follow_the_devices_numa_nodes() {
    use crate::topologymanager::TopologyHint;
    use std::collections::BTreeSet;
    let mut s = State::default();
    let r = "example.com/gpu".to_string();
    s.healthy.insert(r.clone(), ["a", "b", "c"].iter().map(|d| d.to_string()).collect());
    s.topology
        .insert(r.clone(), [("a".to_string(), vec![0]), ("b".to_string(), vec![1]), ("c".to_string(), vec![1])].into());
    let h = |m: u64, preferred| TopologyHint { affinity: Some(m), preferred };
    let none = BTreeSet::new();
    assert_eq!(s.device_hints(&r, 1, &none, &none, &[0, 1]), Some(vec![h(0b01, true), h(0b10, true), h(0b11, false)]));
    assert_eq!(s.device_hints(&r, 2, &none, &none, &[0, 1]), Some(vec![h(0b10, true), h(0b11, false)]));
    assert_eq!(s.device_hints(&r, 4, &none, &none, &[0, 1]), Some(vec![]), "too few devices: no placement");
    assert_eq!(s.device_hints("other", 1, &none, &none, &[0, 1]), None, "no topology: no preference");
    let key = ("u".to_string(), "app".to_string(), r.clone());
    let picked = s.choose(&key, 1, &[], &["a".into(), "b".into(), "c".into()], &[], Some(0b10));
    assert_eq!(picked, ["b"], "the device of the chosen NUMA node");
    let mine: BTreeSet<String> = ["b".to_string()].into();
    assert_eq!(
        s.device_hints(&r, 1, &mine, &none, &[0, 1]),
        Some(vec![h(0b10, true), h(0b11, false)]),
        "its own device's"
    );
}
