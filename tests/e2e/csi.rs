//! End to end: CSI drivers registering with rkubelet (issue 29's first part) with the real CSI components from
//! `../shared/csi` (`localhost/hostpathplugin:3` and `localhost/csi-node-driver-registrar:1`, built by
//! `scripts/build-images.sh`), deployed as an operator deploys a CSI node plugin: the driver and its registrar side
//! by side in a DaemonSet's pod, the driver's socket in `<root-dir>/plugins/csi-hostpath`, the registrar's in
//! `<root-dir>/plugins_registry`. Through the real apiserver: the node's CSINode made at start (owned by the Node,
//! with the migrated plugins annotation), the driver's entry (node id, topology keys), the Node's
//! `csi.volume.kubernetes.io/nodeid` annotation and topology label once it registers, and the entry and annotation
//! gone once its pod is deleted (the label stays, as upstream).

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, daemon_pod, daemonset, plugin_node, plugin_node_with};
use common::*;
use serde_json::Value;
use tokio::time::Instant;

const DRIVER: &str = "hostpath.csi.k8s.io";
const TOPOLOGY: &str = "topology.hostpath.csi/node";

/// The driver and its registrar (upstream's `csi-hostpath-plugin.yaml`, node side) for the test's node: the pods'
/// and plugins' folders with Bidirectional propagation (the driver's mounts reach the node), its state in the
/// node's folder, the node's `/dev` (its block volumes are loop devices).
fn plugin_pod(env: &TestEnv, node: &Node) -> String {
    let dir = node.root.join("plugins/csi-hostpath");
    let registry = node.root.join("plugins_registry");
    let pods = node.root.join("pods");
    let state = node.dir.join("csi-data-dir");
    let sock = dir.join("csi.sock");
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: csi-hostpath\nspec:\n  nodeName: {n}\n  \
         terminationGracePeriodSeconds: 2\n  volumes:\n  - name: socket-dir\n    hostPath:\n      path: {d}\n      \
         type: DirectoryOrCreate\n  - name: registration-dir\n    hostPath:\n      path: {r}\n      type: Directory\n  \
         - name: mountpoint-dir\n    hostPath:\n      path: {p}\n      type: DirectoryOrCreate\n  \
         - name: plugins-dir\n    hostPath:\n      path: {g}\n      type: DirectoryOrCreate\n  \
         - name: csi-data-dir\n    hostPath:\n      path: {t}\n      type: DirectoryOrCreate\n  \
         - name: dev-dir\n    hostPath:\n      path: /dev\n      type: Directory\n  \
         containers:\n  - name: hostpath\n    image: localhost/hostpathplugin:3\n    imagePullPolicy: Never\n    \
         args: [\"--drivername={DRIVER}\", \"--v=5\", \"--endpoint=unix://{s}\", \"--nodeid={n}\", \
         \"--statedir=/csi-data-dir\"]\n    securityContext:\n      privileged: true\n    volumeMounts:\n    \
         - name: socket-dir\n      mountPath: {d}\n    - name: mountpoint-dir\n      mountPath: {p}\n      \
         mountPropagation: Bidirectional\n    - name: plugins-dir\n      mountPath: {g}\n      \
         mountPropagation: Bidirectional\n    - name: csi-data-dir\n      mountPath: /csi-data-dir\n    \
         - name: dev-dir\n      mountPath: /dev\n  \
         - name: node-driver-registrar\n    \
         image: localhost/csi-node-driver-registrar:1\n    imagePullPolicy: Never\n    \
         args: [\"--v=5\", \"--csi-address={s}\", \"--kubelet-registration-path={s}\", \
         \"--plugin-registration-path={r}\"]\n    volumeMounts:\n    - name: socket-dir\n      mountPath: {d}\n    \
         - name: registration-dir\n      mountPath: {r}\n",
        n = env.node,
        d = dir.display(),
        r = registry.display(),
        s = sock.display(),
        p = pods.display(),
        t = state.display(),
        g = node.root.join("plugins/kubernetes.io/csi").display(),
    )
}

/// [`plugin_pod`] with upstream's external provisioner beside the driver, on the node's network (the test's
/// apiserver listens on the node's loopback), with a kubeconfig from the node's folder.
fn plugin_pod_with_provisioner(env: &TestEnv, node: &Node) -> String {
    let dir = node.dir.join("provisioner");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&env.admin, dir.join("kubeconfig")).unwrap();
    let sock = node.root.join("plugins/csi-hostpath/csi.sock");
    let socket_dir = sock.parent().unwrap().display().to_string();
    plugin_pod(env, node).replace("spec:\n", "spec:\n  hostNetwork: true\n").replace(
        "  containers:\n",
        &format!(
            "  - name: provisioner-config\n    hostPath:\n      path: {d}\n  containers:\n  - name: csi-provisioner\n    \
             image: localhost/csi-provisioner:1\n    imagePullPolicy: Never\n    args: [\"--v=5\", \
             \"--csi-address={s}\", \"--kubeconfig=/etc/provisioner/kubeconfig\", \"--feature-gates=Topology=true\"]\n    \
             volumeMounts:\n    - name: socket-dir\n      mountPath: {socket_dir}\n    - name: provisioner-config\n      \
             mountPath: /etc/provisioner\n",
            d = dir.display(),
            s = sock.display(),
        ),
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

/// The driver's CSIDriver object as its deployment has it (`csi-hostpath-driverinfo.yaml`).
const CSI_DRIVER: &str = "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: hostpath.csi.k8s.io\n\
                          spec:\n  attachRequired: false\n  podInfoOnMount: true\n  fsGroupPolicy: File\n  \
                          volumeLifecycleModes: [Persistent, Ephemeral]\n";

/// A pod with an inline volume of the driver at `/data`, its fsGroup 2345; it writes `/data/hello`.
fn inline_pod(env: &TestEnv, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {n}\n  \
         terminationGracePeriodSeconds: 2\n  securityContext:\n    fsGroup: 2345\n  volumes:\n  - name: data\n    \
         csi:\n      driver: {DRIVER}\n      volumeAttributes:\n        size: 1Mi\n  containers:\n  - name: app\n    \
         image: localhost/busybox:1\n    command: [\"sh\", \"-c\", \"echo hello > /data/hello && sleep 3600\"]\n    \
         volumeMounts:\n    - name: data\n      mountPath: /data\n",
        n = env.node
    )
}

/// The publish target of a pod's volume `data` on the node.
fn target(node: &Node, pod: &Value) -> std::path::PathBuf {
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    node.root.join("pods").join(uid).join("volumes/kubernetes.io~csi/data/mount")
}

fn mounted(path: &std::path::Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap()))
}

/// The driver with its provisioner, its CSIDriver object and the StorageClass `class`, as an operator deploys them;
/// once the driver registered.
async fn provisioning(env: &TestEnv, node: &Node, class: &str) {
    env.kubectl(&["delete", "csidriver", DRIVER, "--ignore-not-found"]).await;
    env.create(CSI_DRIVER).await;
    env.create(&format!(
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata:\n  name: {class}\nprovisioner: {DRIVER}\n\
         reclaimPolicy: Delete\nvolumeBindingMode: Immediate\n"
    ))
    .await;
    env.create(&daemonset(env, &plugin_pod_with_provisioner(env, node))).await;
    env.wait("the driver on the CSINode", Duration::from_secs(90), || async {
        csi_node(env).await.and_then(|c| driver_entry(&c))
    })
    .await;
}

/// Kills and restarts rkubelet, until it has found a CSI volume published by its earlier run.
async fn restart_until_reconstructed(env: &TestEnv, node: &mut Node) {
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    env.wait("the volume reconstructed", Duration::from_secs(60), || async {
        node.log().contains("CSI volume reconstructed from vol_data.json and the mount table").then_some(())
    })
    .await;
}

/// How often the driver was called for `method` (`NodePublishVolume`, ...), from its log.
async fn driver_calls(env: &TestEnv, node: &Node, method: &str) -> usize {
    let pod = daemon_pod(env, "csi-hostpath").await.expect("the driver's pod");
    let log = node.container_log(&pod, "hostpath");
    log.matches(&format!("GRPC call: /csi.v1.Node/{method}")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_csi_volume_is_published_for_its_pod_kept_across_a_restart_and_unpublished_when_the_pod_goes() {
    let Some((_g, rt, env, mut node)) =
        plugin_node("e2e_csi skipped: it runs on containerd 2.3 only (the suite's feature tests)").await
    else {
        return;
    };
    env.kubectl(&["delete", "csidriver", DRIVER, "--ignore-not-found"]).await;
    env.create(&daemonset(&env, &plugin_pod(&env, &node))).await;
    env.wait("the driver on the CSINode", Duration::from_secs(90), || async {
        csi_node(&env).await.and_then(|c| driver_entry(&c))
    })
    .await;

    // No CSIDriver object: the pod waits with upstream's event, then starts once the object exists.
    env.create(&inline_pod(&env, "inline")).await;
    let refused = "MountVolume.SetUp failed for volume \"data\" : kubernetes.io/csi: mounter.SetupAt failed to check \
                   volume lifecycle mode: volume mode \"Ephemeral\" not supported by driver hostpath.csi.k8s.io (no \
                   CSIDriver object)";
    env.wait("FailedMount without a CSIDriver", Duration::from_secs(60), || async {
        env.events().await.into_iter().find(|e| e.0 == "inline" && e.1 == "FailedMount" && e.2 == refused)
    })
    .await;
    assert_eq!(env.pod("inline").await.unwrap()["status"]["phase"], "Pending");
    env.create(CSI_DRIVER).await;
    let inline = env.wait_pod_running(&mut node, "inline").await;
    let created = Instant::now();
    env.create(&inline_pod(&env, "second")).await;
    let second = env.wait_pod_running(&mut node, "second").await;
    println!("FIGURE pod with an inline CSI volume, create → Running: {:.2} s", created.elapsed().as_secs_f64());

    // The driver's mount, on the node and in the container, with the fsGroup and upstream's vol_data.json.
    let mount = target(&node, &inline);
    assert!(mounted(&mount), "{} is a mount point on the node", mount.display());
    assert_eq!(std::fs::read_to_string(mount.join("hello")).unwrap(), "hello\n", "the container wrote through it");
    let group = env.kubectl(&["exec", "inline", "--", "stat", "-c", "%g", "/data"]).await;
    assert_eq!(group.trim(), "2345", "fsGroupPolicy File: the volume's group is the pod's fsGroup");
    let data: Value =
        serde_json::from_str(&std::fs::read_to_string(mount.parent().unwrap().join("vol_data.json")).unwrap()).unwrap();
    let handle = data["volumeHandle"].as_str().unwrap().to_string();
    assert!(handle.starts_with("csi-") && handle.len() == 68, "{data}");
    assert_eq!(data["driverName"], DRIVER);
    assert_eq!(data["nodeName"], env.node.as_str());
    assert_eq!(data["specVolID"], "data");
    assert_eq!(data["volumeLifecycleMode"], "Ephemeral");
    let pod = daemon_pod(&env, "csi-hostpath").await.unwrap();
    let log = node.container_log(&pod, "hostpath");
    assert!(log.contains(&handle), "the driver was asked for the volume {handle}");
    assert!(log.contains("\"csi.storage.k8s.io/ephemeral\":\"true\""), "the pod's information reached the driver");
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 2);

    // A normal deletion: unpublished before the pod object goes.
    let second_mount = target(&node, &second);
    env.kubectl(&["delete", "pod", "second", "--wait=true", "--timeout=60s"]).await;
    assert!(!mounted(&second_mount), "unmounted before the pod was removed");
    assert!(!second_mount.parent().unwrap().exists(), "its folder and vol_data.json gone");
    assert_eq!(driver_calls(&env, &node, "NodeUnpublishVolume").await, 1);

    // rkubelet restarts: the volume is found published and not published again; the container keeps running.
    let before: Vec<String> = containers_of(&rt, "inline").await.into_iter().map(|c| c.id).collect();
    restart_until_reconstructed(&env, &mut node).await;
    env.wait_pod_running(&mut node, "inline").await;
    assert_eq!(containers_of(&rt, "inline").await.into_iter().map(|c| c.id).collect::<Vec<_>>(), before);
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 2, "no second publish");
    assert!(mounted(&mount));

    // The pod is deleted while rkubelet is down: at its return the container goes and the volume is unpublished.
    node.kill9();
    env.kubectl(&["delete", "pod", "inline", "--grace-period=0", "--force"]).await;
    node.spawn();
    node.wait_healthy().await;
    node.wait_for("the orphaned pod's volume unpublished", Duration::from_secs(90), || async {
        (!mounted(&mount) && !mount.parent().unwrap().exists()).then_some(())
    })
    .await;
    assert_eq!(driver_calls(&env, &node, "NodeUnpublishVolume").await, 2);
    assert!(containers_of(&rt, "inline").await.is_empty(), "its container is gone");
    env.kubectl(&["delete", "csidriver", DRIVER]).await;
    node.stop_and_clean(&rt).await;
}

/// A pod bound to the node with the claim volume `data` (`source`: the volume's source as YAML) at `/data`,
/// running `script`.
fn claim_pod(env: &TestEnv, name: &str, source: &str, script: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeName: {n}\n  \
         terminationGracePeriodSeconds: 2\n  volumes:\n  - name: data\n{source}  containers:\n  - name: app\n    \
         image: localhost/busybox:1\n    command: [\"sh\", \"-c\", {script:?}]\n    volumeMounts:\n    - name: data\n      \
         mountPath: /data\n",
        n = env.node
    )
}

/// The staging folders of the driver's volumes (`plugins/kubernetes.io/csi/<driver>/<sha256(handle)>`).
fn staging_dirs(node: &Node) -> Vec<std::path::PathBuf> {
    let dir = node.root.join("plugins/kubernetes.io/csi").join(DRIVER);
    std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_provisioned_staged_published_kept_across_restarts_and_unstaged_after_its_last_pod() {
    let why = "e2e_csi skipped: it runs on containerd 2.3 only (the suite's feature tests)";
    // Volume usage every 2 s rather than every minute, for the stats' assertions.
    let Some((_g, rt, env, mut node)) = plugin_node_with(why, "volumeStatsAggPeriod: 2s\n").await else {
        return;
    };
    let class = format!("csi-hostpath-{}", env.ns);
    provisioning(&env, &node, &class).await;

    // The pod comes before its claim: upstream's event, then it starts once the claim is bound.
    let claim = "    persistentVolumeClaim:\n      claimName: data\n";
    env.create(&claim_pod(&env, "writer", claim, "echo kept > /data/note && sleep 3600")).await;
    let want = format!(
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process \
         volumes=[data]: error processing PVC {ns}/data: failed to fetch PVC from API server: \
         persistentvolumeclaims \"data\" not found",
        ns = env.ns
    );
    env.wait("FailedMount for the missing claim", Duration::from_secs(60), || async {
        env.events().await.into_iter().find(|e| e.0 == "writer" && e.1 == "FailedMount" && e.2 == want)
    })
    .await;
    env.create(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  accessModes: [ReadWriteOnce]\n  \
         storageClassName: {class}\n  resources:\n    requests:\n      storage: 1Mi\n"
    ))
    .await;
    let pvc = env
        .wait("the claim bound by the provisioner and the PV controller", Duration::from_secs(60), || async {
            env.get(&["pvc", "data"]).await.filter(|p| p["status"]["phase"] == "Bound")
        })
        .await;
    let pv_name = pvc["spec"]["volumeName"].as_str().unwrap().to_string();
    let writer = env.wait_pod_running(&mut node, "writer").await;
    let pv = env.get(&["pv", &pv_name]).await.unwrap();
    let handle = pv["spec"]["csi"]["volumeHandle"].as_str().unwrap().to_string();

    // Staged once under the plugin's folder, published under the pod's folder named after the PV.
    let staged = staging_dirs(&node);
    assert_eq!(staged.len(), 1, "{staged:?}");
    let data: Value = serde_json::from_str(&std::fs::read_to_string(staged[0].join("vol_data.json")).unwrap()).unwrap();
    assert_eq!(data, serde_json::json!({"driverName": DRIVER, "volumeHandle": handle}));
    let uid = writer["metadata"]["uid"].as_str().unwrap();
    let target = node.root.join("pods").join(uid).join("volumes/kubernetes.io~csi").join(&pv_name).join("mount");
    assert!(mounted(&target), "{} is a mount point", target.display());
    assert_eq!(std::fs::read_to_string(target.join("note")).unwrap(), "kept\n");
    let published: Value =
        serde_json::from_str(&std::fs::read_to_string(target.parent().unwrap().join("vol_data.json")).unwrap())
            .unwrap();
    assert_eq!(published["specVolID"], pv_name.as_str());
    assert_eq!(published["volumeLifecycleMode"], "Persistent");
    assert_eq!(driver_calls(&env, &node, "NodeStageVolume").await, 1);
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 1);
    let unique = format!("kubernetes.io/csi/{DRIVER}^{handle}");
    env.wait("the volume in the Node's volumesInUse", Duration::from_secs(30), || async {
        let n = env.node_object().await?;
        n["status"]["volumesInUse"].as_array()?.iter().any(|v| v == unique.as_str()).then_some(())
    })
    .await;

    // Its usage, from the driver's NodeGetVolumeStats: in the Summary API under the pod's volume name with the
    // claim, and as the claim's kubelet_volume_stats_* metrics.
    let summary = env
        .wait("the volume's usage in /stats/summary", Duration::from_secs(30), || async {
            let (_, raw) = http_get(read_only_port(), "/stats/summary").await?;
            let s: Value = serde_json::from_str(&raw).ok()?;
            let pod = s["pods"].as_array()?.iter().find(|p| p["podRef"]["name"] == "writer")?.clone();
            pod["volume"].as_array()?.iter().find(|v| v["name"] == "data").cloned()
        })
        .await;
    assert_eq!(summary["pvcRef"], serde_json::json!({"name": "data", "namespace": env.ns}), "{summary}");
    assert!(summary["capacityBytes"].as_u64().unwrap() > 0 && summary["inodes"].as_u64().unwrap() > 0, "{summary}");
    let (_, metrics) = http_get(read_only_port(), "/metrics").await.unwrap();
    let series =
        format!("kubelet_volume_stats_capacity_bytes{{namespace=\"{}\",persistentvolumeclaim=\"data\"}} ", env.ns);
    assert!(metrics.contains(&series), "{series} in /metrics");
    let staged = format!(
        "csi_operations_seconds_count{{driver_name=\"{DRIVER}\",grpc_status_code=\"OK\",\
         method_name=\"/csi.v1.Node/NodeStageVolume\",migrated=\"false\"}} 1"
    );
    assert!(metrics.contains(&staged), "{staged} in /metrics");
    assert!(driver_calls(&env, &node, "NodeGetVolumeStats").await >= 1);

    // The pod goes: unpublished and, as its last pod on the node, unstaged; the data stays in the volume.
    env.kubectl(&["delete", "pod", "writer", "--wait=true", "--timeout=60s"]).await;
    assert!(!mounted(&target) && !target.parent().unwrap().exists());
    assert!(staging_dirs(&node).is_empty(), "unstaged: the staging folder and its vol_data.json are gone");
    assert_eq!(driver_calls(&env, &node, "NodeUnstageVolume").await, 1);
    // The next pod of the claim, against a pod with an emptyDir: the start latency a claim adds.
    let started = Instant::now();
    env.create(&claim_pod(&env, "reader", claim, "sleep 3600")).await;
    env.wait_pod_running(&mut node, "reader").await;
    let with_claim = started.elapsed();
    let scratch = "    emptyDir: {}\n";
    let started = Instant::now();
    env.create(&claim_pod(&env, "plain", scratch, "sleep 3600")).await;
    env.wait_pod_running(&mut node, "plain").await;
    println!(
        "FIGURE pod start, create → Running: with the bound claim (stage, publish) {:.2} s, with an emptyDir {:.2} s",
        with_claim.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        env.kubectl(&["exec", "reader", "--", "cat", "/data/note"]).await,
        "kept\n",
        "the data outlived its pod"
    );

    // rkubelet restarts: nothing is staged or published again, the volume is mounted once, the container runs on.
    let before: Vec<String> = containers_of(&rt, "reader").await.into_iter().map(|c| c.id).collect();
    restart_until_reconstructed(&env, &mut node).await;
    let reader = env.wait_pod_running(&mut node, "reader").await;
    assert_eq!(driver_calls(&env, &node, "NodeStageVolume").await, 2);
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 2);
    assert_eq!(containers_of(&rt, "reader").await.into_iter().map(|c| c.id).collect::<Vec<_>>(), before);
    assert_eq!(reader["status"]["containerStatuses"][0]["restartCount"], 0);
    let reader_target = node
        .root
        .join("pods")
        .join(reader["metadata"]["uid"].as_str().unwrap())
        .join("volumes/kubernetes.io~csi")
        .join(&pv_name)
        .join("mount");
    assert_eq!(mounts_at(&reader_target), 1, "mounted once");

    // The pod is deleted while rkubelet is down: at its return the volume is unpublished and unstaged.
    node.kill9();
    env.kubectl(&["delete", "pod", "reader", "--grace-period=0", "--force"]).await;
    node.spawn();
    node.wait_healthy().await;
    env.wait("the orphaned pod's volume unpublished and unstaged", Duration::from_secs(90), || async {
        (!mounted(&reader_target) && staging_dirs(&node).is_empty()).then_some(())
    })
    .await;
    assert_eq!(driver_calls(&env, &node, "NodeUnstageVolume").await, 2);

    // A generic ephemeral volume: the controller-manager makes the claim `<pod>-data`, owned by the pod.
    let template = format!(
        "    ephemeral:\n      volumeClaimTemplate:\n        spec:\n          accessModes: [ReadWriteOnce]\n          \
         storageClassName: {class}\n          resources:\n            requests:\n              storage: 1Mi\n"
    );
    env.create(&claim_pod(&env, "scratch", &template, "echo ok > /data/ok && sleep 3600")).await;
    let scratch = env.wait_pod_running(&mut node, "scratch").await;
    let owner = env.get(&["pvc", "scratch-data"]).await.unwrap();
    assert_eq!(owner["metadata"]["ownerReferences"][0]["uid"], scratch["metadata"]["uid"]);
    assert_eq!(env.kubectl(&["exec", "scratch", "--", "cat", "/data/ok"]).await, "ok\n");
    env.kubectl(&["delete", "pod", "scratch", "--wait=true", "--timeout=60s"]).await;
    assert!(staging_dirs(&node).is_empty(), "the ephemeral volume unstaged");

    // A StatefulSet's pod writes to its claim, is deleted, and its successor reads the data back.
    env.create(&format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: web\nspec:\n  serviceName: web\n  replicas: 1\n  \
         selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    \
         spec:\n      nodeSelector:\n        kubernetes.io/hostname: {n}\n      terminationGracePeriodSeconds: 2\n      \
         containers:\n      - name: app\n        image: localhost/busybox:1\n        command: [\"sh\", \"-c\", \
         \"[ -f /data/first ] || hostname > /data/first; sleep 3600\"]\n        volumeMounts:\n        - name: data\n          \
         mountPath: /data\n  volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      \
         accessModes: [ReadWriteOnce]\n      storageClassName: {class}\n      resources:\n        requests:\n          \
         storage: 1Mi\n",
        n = env.node
    ))
    .await;
    let first = env.wait_pod_running(&mut node, "web-0").await;
    env.kubectl(&["delete", "pod", "web-0", "--wait=true", "--timeout=60s"]).await;
    let second = env
        .wait("web-0 made again", Duration::from_secs(60), || async {
            env.pod("web-0").await.filter(|p| p["metadata"]["uid"] != first["metadata"]["uid"] && all_running(p))
        })
        .await;
    assert_ne!(second["metadata"]["uid"], first["metadata"]["uid"]);
    assert_eq!(env.kubectl(&["exec", "web-0", "--", "cat", "/data/first"]).await, "web-0\n", "written by the first");
    env.kubectl(&["delete", "statefulset", "web", "--wait=false"]).await;
    env.kubectl(&["delete", "pod", "web-0", "--wait=true", "--timeout=60s"]).await;
    env.wait("web-0's volume unstaged", Duration::from_secs(60), || async {
        staging_dirs(&node).is_empty().then_some(())
    })
    .await;

    // Nothing of the volumes is left mounted on the node.
    let left = mounts_under(&node.root);
    println!("FIGURE CSI mounts left on the node (findmnt) after every pod went: {}", left.len());
    assert!(left.is_empty(), "{left:?}");

    env.kubectl(&["delete", "pvc", "data", "--wait=false"]).await;
    env.kubectl(&["delete", "storageclass", &class, "--wait=false"]).await;
    env.kubectl(&["delete", "csidriver", DRIVER]).await;
    node.stop_and_clean(&rt).await;
}

/// How many mounts are at `path` (`findmnt`'s view: the mount table).
fn mounts_at(path: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().filter(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap())).count()
}

/// The CSI volumes' mount points under the node's `root` (pods' CSI volumes and devices, staging and block maps),
/// as `findmnt -rn -o TARGET` lists them.
fn mounts_under(root: &std::path::Path) -> Vec<String> {
    let out = std::process::Command::new("findmnt").args(["-rn", "-o", "TARGET"]).output().unwrap();
    let plugin = root.join("plugins/kubernetes.io/csi").display().to_string();
    let root = root.display().to_string();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&plugin) || (l.starts_with(&root) && l.contains("/kubernetes.io~csi/")))
        .map(str::to_string)
        .collect()
}

/// Whether a loop device is backed by `path` (`losetup -j`).
fn loop_over(path: &std::path::Path) -> bool {
    let out = std::process::Command::new("losetup").arg("-j").arg(path).output().unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_claim_is_staged_published_mapped_into_the_container_and_unmapped_after_its_last_pod() {
    let why = "e2e_csi skipped: it runs on containerd 2.3 only (the suite's feature tests)";
    let Some((_g, rt, env, mut node)) = plugin_node_with(why, "volumeStatsAggPeriod: 2s\n").await else {
        return;
    };
    let class = format!("csi-hostpath-block-{}", env.ns);
    provisioning(&env, &node, &class).await;
    env.create(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: disk\nspec:\n  accessModes: [ReadWriteOnce]\n  \
         volumeMode: Block\n  storageClassName: {class}\n  resources:\n    requests:\n      storage: 1Mi\n"
    ))
    .await;
    let pvc = env
        .wait("the Block claim bound", Duration::from_secs(60), || async {
            env.get(&["pvc", "disk"]).await.filter(|p| p["status"]["phase"] == "Bound")
        })
        .await;
    let pv = pvc["spec"]["volumeName"].as_str().unwrap().to_string();
    env.create(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: blk\nspec:\n  nodeName: {n}\n  terminationGracePeriodSeconds: 2\n  \
         volumes:\n  - name: disk\n    persistentVolumeClaim:\n      claimName: disk\n  containers:\n  - name: app\n    \
         image: localhost/busybox:1\n    command: [\"sh\", \"-c\", \"printf block-data | dd of=/dev/xvda conv=fsync && \
         sleep 3600\"]\n    volumeDevices:\n    - name: disk\n      devicePath: /dev/xvda\n",
        n = env.node
    ))
    .await;
    let blk = env.wait_pod_running(&mut node, "blk").await;
    let uid = blk["metadata"]["uid"].as_str().unwrap().to_string();

    // The container sees the device at its devicePath and what it wrote is on the volume.
    let read = env.kubectl(&["exec", "blk", "--", "sh", "-c", "dd if=/dev/xvda bs=10 count=1 2>/dev/null"]).await;
    assert_eq!(read, "block-data");
    // Upstream's paths: staged, published for the pod, bind-mounted in the global map folder with a loop device's
    // lock, and the pod's link.
    let devices = node.root.join("plugins/kubernetes.io/csi/volumeDevices");
    let publish = devices.join("publish").join(&pv).join(&uid);
    let bound = devices.join(&pv).join("dev").join(&uid);
    let link = node.root.join("pods").join(&uid).join("volumeDevices/kubernetes.io~csi").join(&pv);
    assert!(devices.join("staging").join(&pv).is_dir(), "staged");
    assert_eq!(std::fs::read_link(&link).unwrap(), publish, "the pod's link is the published device");
    assert!(mounted(&bound), "{} bind-mounted", bound.display());
    assert!(loop_over(&bound), "a loop device keeps the device open");
    let data: Value =
        serde_json::from_str(&std::fs::read_to_string(devices.join(&pv).join("data/vol_data.json")).unwrap()).unwrap();
    assert_eq!(data["specVolID"], pv.as_str());
    assert_eq!(driver_calls(&env, &node, "NodeStageVolume").await, 1);
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 1);
    // Its usage, asked of the driver for the pod's map, under the pod's volume name with its claim.
    let usage = env
        .wait("the block volume's usage in /stats/summary", Duration::from_secs(30), || async {
            let (_, raw) = http_get(read_only_port(), "/stats/summary").await?;
            let s: Value = serde_json::from_str(&raw).ok()?;
            let pod = s["pods"].as_array()?.iter().find(|p| p["podRef"]["name"] == "blk")?.clone();
            pod["volume"].as_array()?.iter().find(|v| v["name"] == "disk").cloned()
        })
        .await;
    assert_eq!(usage["pvcRef"]["name"], "disk", "{usage}");

    // The pod goes: everything is undone, the volume unstaged as its last pod.
    env.kubectl(&["delete", "pod", "blk", "--wait=true", "--timeout=60s"]).await;
    assert!(std::fs::symlink_metadata(&link).is_err(), "the link is gone");
    assert!(!mounted(&bound) && !loop_over(&bound), "unbound and unlocked");
    assert!(!devices.join("staging").join(&pv).exists() && !devices.join(&pv).exists(), "the volume's folders gone");
    assert_eq!(driver_calls(&env, &node, "NodeUnpublishVolume").await, 1);
    assert_eq!(driver_calls(&env, &node, "NodeUnstageVolume").await, 1);
    assert_eq!(mounts_under(&node.root), Vec::<String>::new(), "nothing left mounted");

    env.kubectl(&["delete", "pvc", "disk", "--wait=false"]).await;
    env.kubectl(&["delete", "storageclass", &class, "--wait=false"]).await;
    env.kubectl(&["delete", "csidriver", DRIVER]).await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claims_volume_staged_by_the_go_kubelet_is_kept_by_rkubelet_after_an_upgrade_and_cleaned_up_by_it() {
    let Some((_g, rt, env, mut node)) =
        plugin_node("e2e_csi skipped: it runs on containerd 2.3 only (the suite's feature tests)").await
    else {
        return;
    };
    let go = match test_cluster::unpacked_binary("KUBELET", "k8s/bin/kubelet") {
        Ok(p) => p,
        Err(e) => {
            println!("e2e_csi upgrade test skipped: no upstream kubelet ({e})");
            node.stop_and_clean(&rt).await;
            return;
        }
    };
    let class = format!("csi-hostpath-upgrade-{}", env.ns);
    provisioning(&env, &node, &class).await;
    env.create(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  accessModes: [ReadWriteOnce]\n  \
         storageClassName: {class}\n  resources:\n    requests:\n      storage: 1Mi\n"
    ))
    .await;
    env.wait("the claim bound", Duration::from_secs(60), || async {
        env.get(&["pvc", "data"]).await.filter(|p| p["status"]["phase"] == "Bound")
    })
    .await;

    // The Go kubelet v1.35 takes over the node (same root folder, config and runtime) and runs the claim's pod.
    node.sigterm();
    node.binary = Some(go);
    node.spawn();
    let claim = "    persistentVolumeClaim:\n      claimName: data\n";
    env.create(&claim_pod(&env, "app", claim, "echo from-go > /data/note && sleep 3600")).await;
    let app = env.wait_pod_running(&mut node, "app").await;
    assert!(node.log().contains("\"Kubelet version\" kubeletVersion=\"v1.35"), "the Go kubelet runs the node");
    assert_eq!(driver_calls(&env, &node, "NodeStageVolume").await, 1, "staged by the Go kubelet");
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 1, "published by the Go kubelet");
    let pv = env.get(&["pvc", "data"]).await.unwrap()["spec"]["volumeName"].as_str().unwrap().to_string();
    let uid = app["metadata"]["uid"].as_str().unwrap().to_string();
    let target = node.root.join("pods").join(&uid).join("volumes/kubernetes.io~csi").join(&pv).join("mount");
    assert!(mounted(&target));

    // rkubelet again (the upgrade): the volume is found from the Go kubelet's files, nothing is staged or published
    // again, the container runs on.
    let before: Vec<String> = containers_of(&rt, "app").await.into_iter().map(|c| c.id).collect();
    node.sigterm();
    node.binary = None;
    node.spawn();
    node.wait_healthy().await;
    env.wait("the volume reconstructed", Duration::from_secs(60), || async {
        node.log().contains("CSI volume reconstructed from vol_data.json and the mount table").then_some(())
    })
    .await;
    let app = env.wait_pod_running(&mut node, "app").await;
    assert_eq!(containers_of(&rt, "app").await.into_iter().map(|c| c.id).collect::<Vec<_>>(), before);
    assert_eq!(app["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(driver_calls(&env, &node, "NodeStageVolume").await, 1);
    assert_eq!(driver_calls(&env, &node, "NodePublishVolume").await, 1);
    assert_eq!(mounts_at(&target), 1);
    assert_eq!(env.kubectl(&["exec", "app", "--", "cat", "/data/note"]).await, "from-go\n");

    // The pod goes: rkubelet unpublishes and unstages what the Go kubelet set up; nothing is left mounted.
    env.kubectl(&["delete", "pod", "app", "--wait=true", "--timeout=60s"]).await;
    assert_eq!(driver_calls(&env, &node, "NodeUnpublishVolume").await, 1);
    assert_eq!(driver_calls(&env, &node, "NodeUnstageVolume").await, 1);
    assert!(staging_dirs(&node).is_empty());
    assert_eq!(mounts_under(&node.root), Vec::<String>::new());
    env.kubectl(&["delete", "pvc", "data", "--wait=false"]).await;
    env.kubectl(&["delete", "storageclass", &class, "--wait=false"]).await;
    env.kubectl(&["delete", "csidriver", DRIVER]).await;
    node.stop_and_clean(&rt).await;
}
