//! CSI registration against the in-memory apiserver and a driver answering `NodeGetInfo` from a table, on the paused
//! clock: what the Node and the CSINode show after a driver registers and after it goes, and upstream's refusals.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_apiclient::fake::FakeApi;
use kubelet_apiclient::{CsiNodeApi, NodeApi};
use kubelet_pluginmanager::PluginHandler;

use super::nodeinfo::{self, NODE_ID_ANNOTATION, NodeInfoManager};
use super::registration::{CsiDrivers, NodeGetInfo, NodeInfoSource, RegistrationHandler};

const DRIVER: &str = "hostpath.csi.k8s.io";
const TOPOLOGY: &str = "topology.hostpath.csi/node";

/// A driver: its answer, or an error.
struct Driver(Mutex<Result<NodeGetInfo, String>>);

#[async_trait]
impl NodeInfoSource for Driver {
    async fn node_get_info(&self, _: &str, _: &str) -> Result<NodeGetInfo, String> {
        self.0.lock().unwrap().clone()
    }
}

async fn setup(
    answer: Result<NodeGetInfo, String>,
) -> (Arc<FakeApi>, Arc<CsiDrivers>, RegistrationHandler, Arc<Driver>) {
    let api = Arc::new(FakeApi::new());
    let node =
        Node { metadata: ObjectMeta { name: Some("node-a".into()), ..Default::default() }, ..Default::default() };
    api.create_node(&node).await.unwrap();
    let nim =
        Arc::new(NodeInfoManager::new("node-a", api.clone() as Arc<dyn NodeApi>, api.clone() as Arc<dyn CsiNodeApi>));
    let drivers = Arc::new(CsiDrivers::default());
    let driver = Arc::new(Driver(Mutex::new(answer)));
    let h = RegistrationHandler::new(drivers.clone(), Arc::new(std::sync::OnceLock::from(nim)), driver.clone());
    (api, drivers, h, driver)
}

fn topology(node: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(TOPOLOGY.to_string(), node.to_string())])
}

#[test]
fn the_node_id_annotation_is_compact_sorted_json_and_goes_with_its_last_driver() {
    let set = nodeinfo::node_id_annotation(None, "b.csi", Some("n1")).unwrap();
    assert_eq!(set, Some(Some(r#"{"b.csi":"n1"}"#.to_string())));
    let two = nodeinfo::node_id_annotation(Some(r#"{"b.csi":"n1"}"#), "a.csi", Some("<n>")).unwrap();
    assert_eq!(two, Some(Some(r#"{"a.csi":"\u003cn\u003e","b.csi":"n1"}"#.to_string())), "Go's escapes");
    assert_eq!(nodeinfo::node_id_annotation(Some(r#"{"b.csi":"n1"}"#), "b.csi", Some("n1")).unwrap(), None);
    assert_eq!(nodeinfo::node_id_annotation(Some(r#"{"b.csi":"n1"}"#), "b.csi", None).unwrap(), Some(None));
    assert_eq!(
        nodeinfo::node_id_annotation(Some("nope"), "b.csi", None).unwrap_err().split(" err=").next().unwrap(),
        "failed to parse node's \"csi.volume.kubernetes.io/nodeid\" annotation value (\"nope\")"
    );
    assert!(nodeinfo::is_attach_limit_key("attachable-volumes-csi-b.csi", "b.csi"));
    let long = "a-very-long-driver-name-that-is-longer.example.com";
    assert!(nodeinfo::is_attach_limit_key(&format!("attachable-volumes-csi-{}0123456789abcdef", &long[..23]), long));
}

#[tokio::test(start_paused = true)]
async fn a_registered_driver_is_on_the_node_and_its_csinode_and_leaves_them_when_it_goes() {
    let (api, drivers, h, _) = setup(Ok(("node-a-id".into(), 10, topology("node-a")))).await;
    let v = vec!["1.0.0".to_string()];
    h.validate(DRIVER, "/p/csi.sock", &v).unwrap();
    h.register(DRIVER, "/p/csi.sock", &v).await.unwrap();
    assert_eq!(drivers.endpoint(DRIVER).as_deref(), Some("/p/csi.sock"));
    let node = api.node("node-a").unwrap();
    let annotations = node.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[NODE_ID_ANNOTATION], r#"{"hostpath.csi.k8s.io":"node-a-id"}"#);
    assert_eq!(node.metadata.labels.clone().unwrap()[TOPOLOGY], "node-a");
    let csi = api.csi_node("node-a").expect("the CSINode made");
    let owner = &csi.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Node", "node-a", "node-uid-node-a"));
    assert_eq!(
        csi.metadata.annotations.as_ref().unwrap()[nodeinfo::MIGRATED_PLUGINS_ANNOTATION],
        nodeinfo::MIGRATED_PLUGINS
    );
    let entry = &csi.spec.drivers[0];
    assert_eq!((entry.name.as_str(), entry.node_id.as_str()), (DRIVER, "node-a-id"));
    assert_eq!(entry.topology_keys.as_deref(), Some(&[TOPOLOGY.to_string()][..]));
    assert_eq!(entry.allocatable.as_ref().and_then(|a| a.count), Some(10));

    // The same driver again without going first: refused as upstream.
    assert_eq!(
        h.register(DRIVER, "/p/csi.sock", &v).await.unwrap_err(),
        "kubernetes.io/csi: RegisterPlugin for CSI driver \"hostpath.csi.k8s.io\" failed. Another driver with the \
         same name is already registered with a higher supported version: \"1.0.0\""
    );

    // It goes: its entry and node id go, its topology label and the CSINode stay.
    h.deregister(DRIVER, "/p/csi.sock").await;
    assert_eq!(drivers.endpoint(DRIVER), None);
    let node = api.node("node-a").unwrap();
    assert!(!node.metadata.annotations.unwrap_or_default().contains_key(NODE_ID_ANNOTATION));
    assert_eq!(node.metadata.labels.unwrap()[TOPOLOGY], "node-a");
    assert!(api.csi_node("node-a").unwrap().spec.drivers.is_empty());
}

#[tokio::test(start_paused = true)]
async fn failures_leave_the_driver_unregistered_with_upstreams_texts() {
    let (api, drivers, h, driver) = setup(Err("rpc error: code = Unavailable desc = connection refused".into())).await;
    let v = vec!["1.0.0".to_string()];
    assert_eq!(
        h.register(DRIVER, "/p/csi.sock", &v).await.unwrap_err(),
        "rpc error: code = Unavailable desc = connection refused"
    );
    assert_eq!(drivers.endpoint(DRIVER), None, "unregistered after the failure");
    assert_eq!(
        h.validate(DRIVER, "/p/csi.sock", &["2.0.0".to_string()]).unwrap_err(),
        "validation failed for CSI Driver hostpath.csi.k8s.io at endpoint /p/csi.sock: kubernetes.io/csi: \
         ValidatePlugin for CSI driver \"hostpath.csi.k8s.io\" failed. None of the versions specified [\"2.0.0\"] are \
         supported. err=could not find a highest supported version from versions ([2.0.0]) reported: <nil>"
    );
    assert_eq!(
        h.validate(DRIVER, "/p/csi.sock", &[]).unwrap_err(),
        "validation failed for CSI Driver hostpath.csi.k8s.io at endpoint /p/csi.sock: kubernetes.io/csi: \
         ValidatePlugin for CSI driver \"hostpath.csi.k8s.io\" failed. Plugin returned an empty list for supported versions"
    );
    *driver.0.lock().unwrap() = Ok((String::new(), 0, BTreeMap::new()));
    assert_eq!(
        h.register(DRIVER, "/p/csi.sock", &v).await.unwrap_err(),
        "error adding CSI driver node info: driverNodeID must not be empty"
    );
    // A topology label the node has with another value: refused after upstream's four tries.
    api.patch_node_status("node-a", &serde_json::json!({"metadata": {"labels": {TOPOLOGY: "elsewhere"}}}))
        .await
        .unwrap();
    *driver.0.lock().unwrap() = Ok(("id".into(), 0, topology("node-a")));
    assert_eq!(
        h.register(DRIVER, "/p/csi.sock", &v).await.unwrap_err(),
        "error updating Node object with CSI driver node info: error updating node: timed out waiting for the \
         condition; caused by: detected topology value collision: driver reported \"topology.hostpath.csi/node\":\
         \"node-a\" but existing label is \"topology.hostpath.csi/node\":\"elsewhere\""
    );
    assert!(api.csi_node("node-a").is_none(), "nothing written to the CSINode");
}
