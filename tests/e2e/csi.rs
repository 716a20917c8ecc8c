//! End to end: CSI drivers registering with rkubelet (issue 29's first part) with the real CSI components from
//! `../shared/csi` (`localhost/hostpathplugin:1` and `localhost/csi-node-driver-registrar:1`, built by
//! `scripts/build-images.sh`), deployed as an operator deploys a CSI node plugin: the driver and its registrar side
//! by side in a DaemonSet's pod, the driver's socket in `<root-dir>/plugins/csi-hostpath`, the registrar's in
//! `<root-dir>/plugins_registry`. Through the real apiserver: the node's CSINode made at start (owned by the Node,
//! with the migrated plugins annotation), the driver's entry (node id, topology keys), the Node's
//! `csi.volume.kubernetes.io/nodeid` annotation and topology label once it registers, and the entry and annotation
//! gone once its pod is deleted (the label stays, as upstream).

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, daemon_pod, daemonset, plugin_node};
use common::*;
use serde_json::Value;
use tokio::time::Instant;

const DRIVER: &str = "hostpath.csi.k8s.io";
const TOPOLOGY: &str = "topology.hostpath.csi/node";

/// The driver and its registrar (upstream's `csi-hostpath-plugin.yaml`, node side) for the test's node.
fn plugin_pod(env: &TestEnv, node: &Node) -> String {
    let dir = node.root.join("plugins/csi-hostpath");
    let registry = node.root.join("plugins_registry");
    let sock = dir.join("csi.sock");
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: csi-hostpath\nspec:\n  nodeName: {n}\n  \
         terminationGracePeriodSeconds: 2\n  volumes:\n  - name: socket-dir\n    hostPath:\n      path: {d}\n      \
         type: DirectoryOrCreate\n  - name: registration-dir\n    hostPath:\n      path: {r}\n      type: Directory\n  \
         containers:\n  - name: hostpath\n    image: localhost/hostpathplugin:1\n    imagePullPolicy: Never\n    \
         args: [\"--drivername={DRIVER}\", \"--v=5\", \"--endpoint=unix://{s}\", \"--nodeid={n}\", \
         \"--statedir=/csi-data-dir\"]\n    securityContext:\n      privileged: true\n    volumeMounts:\n    \
         - name: socket-dir\n      mountPath: {d}\n  - name: node-driver-registrar\n    \
         image: localhost/csi-node-driver-registrar:1\n    imagePullPolicy: Never\n    \
         args: [\"--v=5\", \"--csi-address={s}\", \"--kubelet-registration-path={s}\", \
         \"--plugin-registration-path={r}\"]\n    volumeMounts:\n    - name: socket-dir\n      mountPath: {d}\n    \
         - name: registration-dir\n      mountPath: {r}\n",
        n = env.node,
        d = dir.display(),
        r = registry.display(),
        s = sock.display(),
    )
}

async fn csi_node(env: &TestEnv) -> Option<Value> {
    env.get(&["csinode", &env.node]).await
}

fn driver_entry(csi: &Value) -> Option<Value> {
    csi["spec"]["drivers"].as_array()?.iter().find(|d| d["name"] == DRIVER).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_driver_registers_on_the_csinode_and_the_node_and_leaves_when_its_pod_goes() {
    let Some((_g, rt, env, node)) =
        plugin_node("e2e_csi skipped: it runs on containerd 2.3 only (the suite's feature tests)").await
    else {
        return;
    };

    // The CSINode, made at start with no driver.
    let csi = env.wait("the node's CSINode", Duration::from_secs(30), || csi_node(&env)).await;
    let owner = &csi["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["name"].as_str()), (Some("Node"), Some(env.node.as_str())), "{csi}");
    let migrated = csi["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"].as_str();
    assert_eq!(
        migrated,
        Some(
            "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder,\
             kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
        )
    );

    // The driver's pod: registered through plugins_registry, recorded on the CSINode and the Node.
    env.create(&daemonset(&env, &plugin_pod(&env, &node))).await;
    env.wait("the CSI DaemonSet pod Running", Duration::from_secs(90), || daemon_pod(&env, "csi-hostpath")).await;
    let running = Instant::now();
    let entry = env
        .wait("the driver's entry on the CSINode", Duration::from_secs(60), || async {
            csi_node(&env).await.and_then(|c| driver_entry(&c))
        })
        .await;
    println!("FIGURE CSI pod Running → the driver on the CSINode: {:.2} s", running.elapsed().as_secs_f64());
    assert_eq!(entry["nodeID"], env.node.as_str(), "{entry}");
    assert_eq!(entry["topologyKeys"], serde_json::json!([TOPOLOGY]), "{entry}");
    let n = env.node_object().await.unwrap();
    let ids: Value =
        serde_json::from_str(n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"].as_str().unwrap())
            .unwrap();
    assert_eq!(ids, serde_json::json!({DRIVER: env.node}));
    assert_eq!(n["metadata"]["labels"][TOPOLOGY], env.node.as_str());
    assert!(node.log().contains("CSI driver registered"), "rkubelet's log names the registration");

    // The pod goes: the registrar removes its socket, the driver's entry and node id go, the label stays.
    env.kubectl(&["delete", "daemonset", "csi-hostpath", "--wait=false"]).await;
    env.wait("the driver gone from the CSINode and the Node", Duration::from_secs(60), || async {
        let c = csi_node(&env).await?;
        let n = env.node_object().await?;
        let annotated = n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"].is_string();
        (driver_entry(&c).is_none() && !annotated).then_some(())
    })
    .await;
    let n = env.node_object().await.unwrap();
    assert_eq!(n["metadata"]["labels"][TOPOLOGY], env.node.as_str(), "topology labels stay, as upstream's");
    node.stop_and_clean(&rt).await;
}
