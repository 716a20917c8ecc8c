//! The DRA manager against an in-process driver served over a unix socket (as upstream's `manager_test.go` fake
//! driver) and an in-memory apiserver: preparation before the sandbox, the CDI devices of each container, the
//! checkpoint, shared claims, unpreparation, the reconcile pass, upstream's errors, and the registry's ResourceSlice
//! clean-up on the paused clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kubelet_apiclient::{ApiError, ApiResult, DraApi};
use kubelet_pluginmanager::PluginHandler;
use kubelet_proto::dra::{v1, v1beta1};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::manager::DraManager;
use super::registry::{DraPlugins, Handler};

const DRIVER: &str = "test-driver.cdi.k8s.io";

/// The apiserver: claims by `namespace/name`, and the slice deletions asked for.
#[derive(Default)]
struct Api {
    claims: Mutex<BTreeMap<String, ResourceClaim>>,
    deleted: Mutex<Vec<String>>,
    refuse_deletes: Mutex<usize>,
}

#[async_trait]
impl DraApi for Api {
    async fn get_resource_claim(&self, namespace: &str, name: &str) -> ApiResult<Option<ResourceClaim>> {
        Ok(self.claims.lock().unwrap().get(&format!("{namespace}/{name}")).cloned())
    }

    async fn delete_resource_slices(&self, field_selector: &str) -> ApiResult<()> {
        let mut refuse = self.refuse_deletes.lock().unwrap();
        if *refuse > 0 {
            *refuse -= 1;
            return Err(ApiError::Unavailable("connection refused".into()));
        }
        self.deleted.lock().unwrap().push(field_selector.into());
        Ok(())
    }
}

/// The driver: the claims it was asked to prepare and unprepare, and an error to answer for a claim.
#[derive(Default)]
struct Driver {
    prepared: Mutex<Vec<Vec<String>>>,
    unprepared: Mutex<Vec<Vec<String>>>,
    fail: Mutex<Option<String>>,
}

#[derive(Clone)]
struct DriverServer(Arc<Driver>);

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for DriverServer {
    async fn node_prepare_resources(
        &self,
        req: tonic::Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<tonic::Response<v1::NodePrepareResourcesResponse>, tonic::Status> {
        let claims = req.into_inner().claims;
        self.0.prepared.lock().unwrap().push(claims.iter().map(|c| c.name.clone()).collect());
        let fail = self.0.fail.lock().unwrap().clone();
        let answer = |c: &v1::Claim| v1::NodePrepareResourceResponse {
            devices: vec![
                v1::Device {
                    request_names: vec!["gpu".into()],
                    pool_name: "node-a".into(),
                    device_name: format!("{}-0", c.name),
                    cdi_device_ids: vec![format!("{DRIVER}/test=claim-{}-gpu", c.uid)],
                },
                v1::Device {
                    request_names: vec!["nic".into()],
                    pool_name: "node-a".into(),
                    device_name: format!("{}-1", c.name),
                    cdi_device_ids: vec![format!("{DRIVER}/test=claim-{}-nic", c.uid)],
                },
            ],
            error: fail.clone().unwrap_or_default(),
        };
        let claims = claims.iter().map(|c| (c.uid.clone(), answer(c))).collect();
        Ok(tonic::Response::new(v1::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: tonic::Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<tonic::Response<v1::NodeUnprepareResourcesResponse>, tonic::Status> {
        let claims = req.into_inner().claims;
        self.0.unprepared.lock().unwrap().push(claims.iter().map(|c| c.name.clone()).collect());
        let claims = claims.iter().map(|c| (c.uid.clone(), Default::default())).collect();
        Ok(tonic::Response::new(v1::NodeUnprepareResourcesResponse { claims }))
    }
}

/// The same driver speaking only `v1beta1`.
#[derive(Clone)]
struct BetaServer(Arc<Driver>);

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for BetaServer {
    async fn node_prepare_resources(
        &self,
        req: tonic::Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<tonic::Response<v1beta1::NodePrepareResourcesResponse>, tonic::Status> {
        use v1::dra_plugin_server::DraPlugin;
        let r = super::registry::convert(&req.into_inner());
        let resp = DriverServer(self.0.clone()).node_prepare_resources(tonic::Request::new(r)).await?;
        Ok(tonic::Response::new(super::registry::convert(&resp.into_inner())))
    }

    async fn node_unprepare_resources(
        &self,
        req: tonic::Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<tonic::Response<v1beta1::NodeUnprepareResourcesResponse>, tonic::Status> {
        use v1::dra_plugin_server::DraPlugin;
        let r = super::registry::convert(&req.into_inner());
        let resp = DriverServer(self.0.clone()).node_unprepare_resources(tonic::Request::new(r)).await?;
        Ok(tonic::Response::new(super::registry::convert(&resp.into_inner())))
    }
}

/// Serves a driver on `dir/dra.sock`.
fn serve(dir: &std::path::Path, beta: bool) -> (Arc<Driver>, String, CancellationToken) {
    let path = dir.join(if beta { "beta.sock" } else { "dra.sock" });
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let driver = Arc::new(Driver::default());
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let d = driver.clone();
    tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let mut b = tonic::transport::Server::builder();
        let r = if beta {
            b.add_service(v1beta1::dra_plugin_server::DraPluginServer::new(BetaServer(d)))
        } else {
            b.add_service(v1::dra_plugin_server::DraPluginServer::new(DriverServer(d)))
        };
        let _ = r.serve_with_incoming_shutdown(incoming, stop.cancelled_owned()).await;
    });
    (driver, path.to_string_lossy().into_owned(), cancel)
}

fn pod(name: &str, uid: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {
            "containers": [
                {"name": "gpu-user", "resources": {"claims": [{"name": "res", "request": "gpu"}]}},
                {"name": "all", "resources": {"claims": [{"name": "res"}]}},
                {"name": "none"}],
            "resourceClaims": [{"name": "res", "resourceClaimName": claim}]}
    }))
    .unwrap()
}

fn claim(name: &str, uid: &str, reserved_for: &[&str]) -> ResourceClaim {
    let reserved: Vec<_> = reserved_for.iter().map(|u| json!({"resource": "pods", "name": "p", "uid": u})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {},
        "status": {"reservedFor": reserved, "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "d0"},
            {"request": "nic", "driver": DRIVER, "pool": "node-a", "device": "d1"}]}}}
    }))
    .unwrap()
}

struct Setup {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    api: Arc<Api>,
    driver: Arc<Driver>,
    handler: Handler,
    manager: Arc<DraManager>,
    _stop: CancellationToken,
}

async fn setup(beta: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let api = Arc::new(Api::default());
    let (driver, endpoint, stop) = serve(&root, beta);
    let plugins = DraPlugins::new("node-a");
    let handler = Handler(plugins.clone());
    let versions = vec![if beta { "v1beta1.DRAPlugin" } else { "v1.DRAPlugin" }.to_string()];
    handler.validate(DRIVER, &endpoint, &versions).unwrap();
    handler.register(DRIVER, &endpoint, &versions).await.unwrap();
    let manager = DraManager::new(&root, plugins).unwrap();
    manager.bind(api.clone());
    Setup { _dir: dir, root, api, driver, handler, manager, _stop: stop }
}

fn containers(p: &Pod) -> Vec<k8s_openapi::api::core::v1::Container> {
    p.spec.as_ref().unwrap().containers.clone()
}

#[tokio::test]
async fn a_claim_is_prepared_once_its_cdi_devices_go_to_the_containers_naming_it_and_unprepare_forgets_it() {
    for beta in [false, true] {
        let s = setup(beta).await;
        s.api.claims.lock().unwrap().insert("ns/shared".into(), claim("shared", "c-uid", &["p1", "p2"]));
        let p1 = pod("p1", "p1", "shared");
        s.manager.prepare(&p1).await.unwrap();
        assert_eq!(*s.driver.prepared.lock().unwrap(), vec![vec!["shared".to_string()]], "one call (beta {beta})");
        let cs = containers(&p1);
        let gpu = format!("{DRIVER}/test=claim-c-uid-gpu");
        let nic = format!("{DRIVER}/test=claim-c-uid-nic");
        assert_eq!(s.manager.cdi_devices(&p1, &cs[0]).unwrap(), vec![gpu.clone()], "the request it names");
        assert_eq!(s.manager.cdi_devices(&p1, &cs[1]).unwrap(), vec![gpu.clone(), nic.clone()], "the whole claim");
        assert!(s.manager.cdi_devices(&p1, &cs[2]).unwrap().is_empty(), "a container naming no claim");
        let state = std::fs::read_to_string(s.root.join("dra_manager_state")).unwrap();
        assert!(state.contains("c-uid") && state.contains("p1"), "{state}");

        // A second pod sharing the claim: no second call; the first pod going only drops its reference.
        let p2 = pod("p2", "p2", "shared");
        s.manager.prepare(&p2).await.unwrap();
        assert_eq!(s.driver.prepared.lock().unwrap().len(), 1, "already prepared");
        s.manager.unprepare(&p1).await.unwrap();
        assert!(s.driver.unprepared.lock().unwrap().is_empty(), "still used by p2");
        assert!(!s.manager.might_need_unprepare("p1") && s.manager.might_need_unprepare("p2"));
        // The last user goes: the driver unprepares, the checkpoint forgets.
        s.manager.unprepare(&p2).await.unwrap();
        assert_eq!(*s.driver.unprepared.lock().unwrap(), vec![vec!["shared".to_string()]]);
        assert!(!s.manager.might_need_unprepare("p2"));
        let state = std::fs::read_to_string(s.root.join("dra_manager_state")).unwrap();
        assert!(!state.contains("c-uid"), "{state}");
        // A restarted manager reads the same (empty) state.
        drop(s.handler);
    }
}

#[tokio::test]
async fn failures_carry_upstreams_texts_and_change_nothing_at_the_driver() {
    let s = setup(false).await;
    let p = pod("p1", "p1", "c");
    let e = s.manager.prepare(&p).await.unwrap_err();
    assert_eq!(e, "prepare dynamic resources: fetch ResourceClaim c: resourceclaims.resource.k8s.io \"c\" not found");
    s.api.claims.lock().unwrap().insert("ns/c".into(), claim("c", "c-uid", &["someone-else"]));
    let e = s.manager.prepare(&p).await.unwrap_err();
    assert_eq!(e, "prepare dynamic resources: pod p1 (p1) is not allowed to use ResourceClaim c (c-uid)");
    let mut unallocated = claim("c", "c-uid", &["p1"]);
    unallocated.status.as_mut().unwrap().allocation = None;
    s.api.claims.lock().unwrap().insert("ns/c".into(), unallocated);
    let e = s.manager.prepare(&p).await.unwrap_err();
    assert_eq!(e, "prepare dynamic resources: ResourceClaim c: not allocated");
    let mut other = claim("c", "c-uid", &["p1"]);
    other.status.as_mut().unwrap().allocation.as_mut().unwrap().devices.as_mut().unwrap().results.as_mut().unwrap()
        [0]
    .driver = "gone.example.com".into();
    s.api.claims.lock().unwrap().insert("ns/c".into(), other);
    let e = s.manager.prepare(&p).await.unwrap_err();
    assert_eq!(e, "prepare dynamic resources: DRA driver gone.example.com is not registered");
    assert!(s.driver.prepared.lock().unwrap().is_empty());

    // The driver refuses the claim: an error, and the next sync asks again.
    s.api.claims.lock().unwrap().insert("ns/c".into(), claim("c", "c-uid", &["p1"]));
    *s.driver.fail.lock().unwrap() = Some("no such device".into());
    let e = s.manager.prepare(&p).await.unwrap_err();
    assert_eq!(e, "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: no such device");
    *s.driver.fail.lock().unwrap() = None;
    s.manager.prepare(&p).await.unwrap();
    assert_eq!(s.driver.prepared.lock().unwrap().len(), 2);
    let cs = containers(&p);
    assert_eq!(s.manager.cdi_devices(&p, &cs[0]).unwrap().len(), 1, "the retry's devices, not twice");

    // A claim of the same name with another UID while the old one is still prepared (a force-deleted pod).
    s.api.claims.lock().unwrap().insert("ns/c".into(), claim("c", "new-uid", &["p2"]));
    let e = s.manager.prepare(&pod("p2", "p2", "c")).await.unwrap_err();
    assert_eq!(
        e,
        "prepare dynamic resources: old ResourceClaim with same name c and different UID c-uid still exists \
         (previous pod force-deleted?!)"
    );
}

#[tokio::test]
async fn the_reconcile_pass_unprepares_the_claims_of_pods_no_longer_active() {
    let s = setup(false).await;
    s.api.claims.lock().unwrap().insert("ns/a".into(), claim("a", "a-uid", &["p1"]));
    s.api.claims.lock().unwrap().insert("ns/b".into(), claim("b", "b-uid", &["p2"]));
    s.manager.prepare(&pod("p1", "p1", "a")).await.unwrap();
    s.manager.prepare(&pod("p2", "p2", "b")).await.unwrap();
    s.manager.reconcile(&BTreeSet::from(["p2".to_string()])).await;
    assert_eq!(*s.driver.unprepared.lock().unwrap(), vec![vec!["a".to_string()]]);
    assert!(!s.manager.might_need_unprepare("p1") && s.manager.might_need_unprepare("p2"));
    // The claims survive a restart of the manager through the checkpoint, and are still unprepared.
    let again = DraManager::new(&s.root, s.manager.plugins().clone()).unwrap();
    assert!(again.might_need_unprepare("p2"));
    again.reconcile(&BTreeSet::new()).await;
    assert_eq!(s.driver.unprepared.lock().unwrap().len(), 2);
    assert!(!again.might_need_unprepare("p2"));
}

#[tokio::test(start_paused = true)]
async fn a_drivers_slices_go_30_s_after_its_last_endpoint_unless_it_comes_back() {
    let api = Arc::new(Api::default());
    *api.refuse_deletes.lock().unwrap() = 2;
    let plugins = DraPlugins::new("node-a");
    plugins.bind(api.clone());
    // The start's wipe of every slice of the node, retried after 1 s and 2 s while the apiserver refuses.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(*api.deleted.lock().unwrap(), vec!["spec.nodeName=node-a".to_string()]);
    let h = Handler(plugins.clone());
    let v = vec!["v1.DRAPlugin".to_string()];
    h.register(DRIVER, "/a.sock", &v).await.unwrap();
    assert_eq!(
        h.register(DRIVER, "/a.sock", &v).await.unwrap_err(),
        format!("endpoint /a.sock already registered for DRA driver plugin {DRIVER}")
    );
    h.register(DRIVER, "/b.sock", &v).await.unwrap();
    assert_eq!(plugins.get(DRIVER).unwrap().endpoint(), "/b.sock", "the newest endpoint");
    h.deregister(DRIVER, "/b.sock").await;
    assert_eq!(plugins.get(DRIVER).unwrap().endpoint(), "/a.sock");
    h.deregister(DRIVER, "/a.sock").await;
    assert_eq!(plugins.get(DRIVER).unwrap_err(), format!("DRA driver {DRIVER} is not registered"));
    // Back within 30 s: nothing deleted.
    tokio::time::sleep(Duration::from_secs(20)).await;
    h.register(DRIVER, "/a.sock", &v).await.unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(api.deleted.lock().unwrap().len(), 1);
    // Gone for good: its slices go 30 s later, not before.
    h.deregister(DRIVER, "/a.sock").await;
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(api.deleted.lock().unwrap().len(), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.deleted.lock().unwrap()[1], format!("spec.nodeName=node-a,spec.driver={DRIVER}"));
}

#[tokio::test]
async fn a_pod_without_known_claims_stops_without_touching_the_disk() {
    let s = setup(false).await;
    let state = s.root.join("dra_manager_state");
    std::fs::remove_file(&state).unwrap();
    let mut plain = pod("p1", "p1", "c");
    plain.spec.as_mut().unwrap().resource_claims = None;
    s.manager.prepare(&plain).await.unwrap();
    s.manager.unprepare(&plain).await.unwrap();
    s.manager.unprepare(&pod("p1", "p1", "never-prepared")).await.unwrap();
    s.manager.reconcile(&BTreeSet::new()).await;
    assert!(!state.exists(), "nothing written: a full disk cannot hold up these pods' stop");
    assert!(s.driver.prepared.lock().unwrap().is_empty() && s.driver.unprepared.lock().unwrap().is_empty());
}
