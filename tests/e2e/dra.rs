//! End to end: dynamic resource allocation (issue 28) with upstream's e2e DRA driver (`localhost/dra-test-driver:1`,
//! built by `scripts/build-images.sh` from `../shared/k8s/bin`), deployed as an operator deploys a DRA driver: a
//! DaemonSet on the node with its service account and RBAC (upstream's `plugin-permissions.yaml`), registering
//! through `plugins_registry`, publishing a ResourceSlice for the node. A DeviceClass and a ResourceClaimTemplate;
//! the real controller-manager makes the pod's claim, the real scheduler allocates it and binds the pod, and rkubelet
//! prepares it through the driver before the sandbox: the container naming the claim gets the CDI device (the
//! driver's environment variables), its sibling does not. Deleting the pod unprepares the claim (the driver removes
//! its CDI file, the checkpoint forgets it). A claim the pod may not use is a `FailedPrepareDynamicResources` event,
//! and a driver that goes loses its ResourceSlices 30 s later.

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, daemon_pod, daemonset, plugin_node};
use common::*;
use kubelet_proto::podresources::v1 as pr;
use serde_json::Value;
use tokio::time::Instant;

const DRIVER: &str = "test-driver.cdi.k8s.io";

/// Upstream's `plugin-permissions.yaml` (service account, role, binding) for this test's namespace; its
/// ValidatingAdmissionPolicy, which needs the alpha `ServiceAccountTokenPodNodeInfo`, is left out.
fn permissions(env: &TestEnv) -> String {
    let ns = &env.ns;
    format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: dra-kubelet-plugin\n  namespace: {ns}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: dra-kubelet-plugin-{ns}\nrules:\n\
         - apiGroups: [\"resource.k8s.io\"]\n  resources: [\"resourceclaims\"]\n  verbs: [\"get\"]\n\
         - apiGroups: [\"resource.k8s.io\"]\n  resources: [\"resourceclaims/status\"]\n  verbs: [\"update\"]\n\
         - apiGroups: [\"\"]\n  resources: [\"nodes\"]\n  verbs: [\"get\"]\n\
         - apiGroups: [\"resource.k8s.io\"]\n  resources: [\"resourceslices\"]\n  \
         verbs: [\"get\", \"list\", \"watch\", \"create\", \"update\", \"patch\", \"delete\"]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: dra-kubelet-plugin-{ns}\n\
         subjects:\n- kind: ServiceAccount\n  name: dra-kubelet-plugin\n  namespace: {ns}\nroleRef:\n  kind: ClusterRole\n  \
         name: dra-kubelet-plugin-{ns}\n  apiGroup: rbac.authorization.k8s.io\n"
    )
}

/// The driver's pod: `kubelet-plugin` mode for this node, its registration socket in the node's `plugins_registry`
/// and its own in `plugins/<driver>` (host paths at the same paths inside, as upstream's manifests mount
/// `/var/lib/kubelet/...`), CDI files in `/var/run/cdi` where containerd 2 reads them. It reaches the
/// apiserver on the host network with its service account token (the in-cluster configuration).
fn driver_pod(env: &TestEnv, node: &Node) -> String {
    let registry = node.root.join("plugins_registry");
    let plugins = node.root.join("plugins");
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: dra-test-driver\nspec:\n  nodeName: {n}\n  \
         serviceAccountName: dra-kubelet-plugin\n  hostNetwork: true\n  terminationGracePeriodSeconds: 5\n  \
         volumes:\n  - name: registry\n    hostPath:\n      path: {r}\n  - name: plugins\n    hostPath:\n      \
         path: {p}/{DRIVER}\n      type: DirectoryOrCreate\n  - name: cdi\n    hostPath:\n      path: /var/run/cdi\n  containers:\n  - name: driver\n    \
         image: localhost/dra-test-driver:1\n    imagePullPolicy: Never\n    \
         args: [\"kubelet-plugin\", \"--node-name={n}\", \"--drivername={DRIVER}\", \"--plugin-registration-path={r}\", \
         \"--datadir={p}\", \"--cdi-dir=/var/run/cdi\", \"-v=3\"]\n    env:\n    \
         - name: KUBERNETES_SERVICE_HOST\n      value: 127.0.0.1\n    - name: KUBERNETES_SERVICE_PORT\n      \
         value: \"{port}\"\n    securityContext:\n      privileged: true\n    volumeMounts:\n    \
         - name: registry\n      mountPath: {r}\n    - name: plugins\n      mountPath: {p}/{DRIVER}\n    \
         - name: cdi\n      mountPath: /var/run/cdi\n",
        n = env.node,
        r = registry.display(),
        p = plugins.display(),
        port = test_cluster::APISERVER_PORT,
    )
}

/// The DeviceClass of the driver's devices and a template of one device with opaque parameters `a: b` (upstream's
/// `deviceclass.yaml` and `pod-inline.yaml`), and a pod of two containers, only the first naming the claim, each
/// printing the variables the driver's CDI spec may have set. No `nodeName`: the scheduler allocates and binds.
fn claim_and_pod(env: &TestEnv, class: &str) -> String {
    let script = "env | grep -E '^(user_|claim_)' | sort; echo END; exec sleep 3600";
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: {class}\nspec:\n  selectors:\n  \
         - cel:\n      expression: device.driver == \"{DRIVER}\"\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata:\n  name: one-device\nspec:\n  spec:\n    \
         devices:\n      requests:\n      - name: my-device\n        exactly:\n          deviceClassName: {class}\n      \
         config:\n      - opaque:\n          driver: {DRIVER}\n          parameters:\n            a: b\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata:\n  name: with-claim\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         nodeSelector:\n    kubernetes.io/hostname: {node}\n  containers:\n  - name: with-resource\n    \
         image: localhost/busybox:1\n    imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {s}]\n    resources:\n      \
         claims:\n      - name: resource\n  - name: without-resource\n    image: localhost/busybox:1\n    \
         imagePullPolicy: Never\n    command: [\"sh\", \"-c\", {s}]\n  resourceClaims:\n  - name: resource\n    \
         resourceClaimTemplateName: one-device\n",
        node = env.node,
        s = serde_json::to_string(script).unwrap()
    )
}

/// The node's ResourceSlices of the driver.
async fn slices(env: &TestEnv) -> Vec<Value> {
    let list = env.get(&["resourceslices", "--field-selector", &format!("spec.nodeName={}", env.node)]).await;
    let items = list.and_then(|l| l["items"].as_array().cloned()).unwrap_or_default();
    items.into_iter().filter(|s| s["spec"]["driver"] == DRIVER).collect()
}

/// Whether rkubelet logged the deletion of the ResourceSlices `selector` (a `fieldSelector=...` field) selects.
fn deleted_slices(node: &Node, selector: &str) -> bool {
    node.log().lines().any(|l| l.contains("Deleted ResourceSlices") && l.split_whitespace().any(|w| w == selector))
}

/// Whether rkubelet logged `message` for the driver.
fn logged(node: &Node, message: &str) -> bool {
    node.log().lines().any(|l| l.contains(message) && l.contains(DRIVER))
}

async fn container_log(env: &TestEnv, pod: &str, c: &str) -> Option<String> {
    let (_, log, _) = env.kubectl_output(&["logs", pod, "-c", c]).await;
    log.contains("END").then_some(log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dra_drivers_claim_is_prepared_for_the_pod_given_to_its_container_and_unprepared_when_it_goes() {
    let Some((_g, rt, env, mut node)) =
        plugin_node("e2e_dra skipped: containerd 1.6 has no CDI, through which DRA drivers hand devices to containers")
            .await
    else {
        return;
    };

    // At its start rkubelet deletes the node's slices (a driver not running must not advertise devices).
    let start_wipe = format!("fieldSelector=spec.nodeName={}", env.node);
    env.wait("rkubelet's start-up deletion of the node's ResourceSlices", Duration::from_secs(30), || async {
        deleted_slices(&node, &start_wipe).then_some(())
    })
    .await;

    // The driver as a DaemonSet: registered through plugins_registry, its ResourceSlice published for the node.
    env.create(&permissions(&env)).await;
    env.create(&daemonset(&env, &driver_pod(&env, &node))).await;
    env.wait("the driver's DaemonSet pod Running", Duration::from_secs(90), || daemon_pod(&env, "dra-test-driver"))
        .await;
    let published = env
        .wait("the driver's ResourceSlice for the node", Duration::from_secs(60), || async {
            let s = slices(&env).await;
            (!s.is_empty()).then_some(s)
        })
        .await;
    let devices = published[0]["spec"]["devices"].as_array().map(Vec::len).unwrap_or_default();
    assert_eq!(devices, 4, "the driver's four devices: {}", published[0]);
    env.wait("the driver registered with rkubelet", Duration::from_secs(30), || async {
        logged(&node, "Registered DRA plugin").then_some(())
    })
    .await;

    // A pod whose claim the controller-manager makes from the template and the scheduler allocates on this node.
    let class = format!("dra-{}", env.ns);
    let started = Instant::now();
    env.create(&claim_and_pod(&env, &class)).await;
    let p = env.wait_pod_running(&mut node, "with-claim").await;
    let with_claim = started.elapsed();
    // The same pod without the claim, through the same scheduler, for the figure.
    let plain = claim_and_pod(&env, &class);
    let plain = plain.rsplit("---\n").next().unwrap().replace("name: with-claim", "name: plain");
    let plain = plain
        .split("  resourceClaims:\n")
        .next()
        .unwrap()
        .replace("    resources:\n      claims:\n      - name: resource\n", "");
    let started = Instant::now();
    env.create(&plain).await;
    env.wait_pod_running(&mut node, "plain").await;
    println!(
        "FIGURE pod start, create → Running (scheduled): with a claim (made from its template, allocated, prepared, \
         its CDI device) {:.2} s, without {:.2} s",
        with_claim.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let claim = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"].as_str().unwrap().to_string();
    let with = env
        .wait("the first container's report", Duration::from_secs(30), || {
            container_log(&env, "with-claim", "with-resource")
        })
        .await;
    let without = env
        .wait("the second container's report", Duration::from_secs(30), || {
            container_log(&env, "with-claim", "without-resource")
        })
        .await;
    println!("FIGURE the container naming the claim saw: {}", with.trim().replace('\n', "; "));
    let claim_var = format!("claim_{}_my_device=true", claim.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    assert!(with.contains("user_a=b") && with.contains(&claim_var), "the driver's CDI edits: {with}");
    assert_eq!(without.trim(), "END", "the container not naming the claim gets none of it");
    let c = containers_of(&rt, "with-claim").await;
    let first = c.iter().find(|c| c.metadata.as_ref().is_some_and(|m| m.name == "with-resource")).unwrap();
    let cfg = crictl("inspect", &first.id);
    let cdi: Vec<&str> = cfg["info"]["config"]["CDI_devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(cdi.len(), 1, "one CDI device in the CRI request: {}", cfg["info"]["config"]);
    assert!(cdi[0].starts_with(&format!("{DRIVER}/test=claim-")), "{cdi:?}");

    // The pod resources API lists the claim with the container naming it: driver, pool, device, CDI id.
    let list = pod_resources(&node).await.list(pr::ListPodResourcesRequest {}).await.unwrap().into_inner();
    let listed = list.pod_resources.iter().find(|p| p.name == "with-claim" && p.namespace == env.ns).expect("listed");
    let dynamic = |c: &str| listed.containers.iter().find(|x| x.name == c).map(|x| x.dynamic_resources.clone());
    let d = dynamic("with-resource").expect("with-resource listed");
    assert_eq!(d.len(), 1, "{listed:?}");
    assert_eq!((d[0].claim_name.as_str(), d[0].claim_namespace.as_str()), (claim.as_str(), env.ns.as_str()));
    let r = &d[0].claim_resources;
    assert!(r.len() == 1 && r[0].driver_name == DRIVER && r[0].pool_name == env.node, "{r:?}");
    assert_eq!(r[0].cdi_devices.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), cdi, "{r:?}");
    assert_eq!(dynamic("without-resource"), Some(vec![]), "{listed:?}");

    // What the node keeps: the checkpoint names the claim and the pod, the metrics count it.
    let state = std::fs::read_to_string(node.root.join("dra_manager_state")).unwrap();
    assert!(state.contains(&claim) && state.contains(&uid), "dra_manager_state: {state}");
    assert_eq!(node_metric("dra_resource_claims_in_use{driver_name=\"<any>\"}").await, 1.0);
    assert_eq!(node_metric(&format!("dra_resource_claims_in_use{{driver_name=\"{DRIVER}\"}}")).await, 1.0);
    assert!(
        node_metric("dra_operations_duration_seconds_count{is_error=\"false\",operation_name=\"PrepareResources\"}")
            .await
            >= 1.0
    );

    // rkubelet restarts: the pod keeps its containers, the claim stays prepared (the checkpoint), the driver
    // registers again.
    let before: Vec<String> = containers_of(&rt, "with-claim").await.into_iter().map(|c| c.id).collect();
    let registered = node.log().lines().filter(|l| l.contains("Registered DRA plugin")).count();
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    env.wait("the driver registered again", Duration::from_secs(30), || async {
        (node.log().lines().filter(|l| l.contains("Registered DRA plugin")).count() > registered).then_some(())
    })
    .await;
    let after = env.wait_pod_running(&mut node, "with-claim").await;
    for c in ["with-resource", "without-resource"] {
        assert_eq!(container_status(&after, c).unwrap()["restartCount"], 0, "{c}");
    }
    let now: Vec<String> = containers_of(&rt, "with-claim").await.into_iter().map(|c| c.id).collect();
    assert_eq!(now, before, "the same containers after the restart");
    let state = std::fs::read_to_string(node.root.join("dra_manager_state")).unwrap();
    assert!(state.contains(&claim) && state.contains(&uid), "dra_manager_state after the restart: {state}");

    // The pod goes: its claim is unprepared before the pod leaves the apiserver.
    let claim_obj = env.get(&["resourceclaim", &claim]).await.expect("the pod's claim");
    let cdi_file = format!("/var/run/cdi/{DRIVER}-{}-my-device.json", claim_obj["metadata"]["uid"].as_str().unwrap());
    assert!(std::path::Path::new(&cdi_file).exists(), "the driver's CDI file {cdi_file}");
    env.kubectl(&["delete", "pod", "with-claim", "--wait=false"]).await;
    env.wait("the pod gone", Duration::from_secs(60), || async { env.pod("with-claim").await.is_none().then_some(()) })
        .await;
    let state = std::fs::read_to_string(node.root.join("dra_manager_state")).unwrap();
    assert!(!state.contains(&claim), "the claim is forgotten once unprepared: {state}");
    assert_eq!(node_metric("dra_resource_claims_in_use{driver_name=\"<any>\"}").await, 0.0);
    assert!(
        node_metric("dra_operations_duration_seconds_count{is_error=\"false\",operation_name=\"UnprepareResources\"}")
            .await
            >= 1.0
    );
    assert!(!std::path::Path::new(&cdi_file).exists(), "the driver removed its CDI file {cdi_file}");

    // A claim the pod may not use (never allocated nor reserved for it): an event, and the pod does not start.
    let claim_yaml = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: not-mine\nspec:\n  devices:\n    \
         requests:\n    - name: r\n      exactly:\n        deviceClassName: {class}\n"
    );
    env.create(&claim_yaml).await;
    let pod = env.pod_yaml(
        "refused",
        &[("app", "exec sleep 3600")],
        "  resourceClaims:\n  - name: c\n    resourceClaimName: not-mine\n",
    );
    env.create(&pod).await;
    let ev = env
        .wait("the FailedPrepareDynamicResources event", Duration::from_secs(60), || async {
            let list = env.get(&["events", "--field-selector", "involvedObject.name=refused"]).await?;
            list["items"].as_array()?.iter().find(|e| e["reason"] == "FailedPrepareDynamicResources").cloned()
        })
        .await;
    let msg = ev["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("Failed to prepare dynamic resources: prepare dynamic resources: pod refused (")
            && msg.contains("is not allowed to use ResourceClaim not-mine"),
        "{msg}"
    );
    assert!(sandboxes_of(&rt, "refused").await.is_empty(), "no sandbox before the claim is prepared");

    // The driver goes: its ResourceSlices are deleted once it has been gone for 30 s.
    env.kubectl(&["delete", "daemonset", "dra-test-driver", "--wait=false"]).await;
    env.wait("the driver deregistered", Duration::from_secs(60), || async {
        logged(&node, "Unregistered DRA plugin").then_some(())
    })
    .await;
    let gone = Instant::now();
    let wiped = format!("fieldSelector=spec.nodeName={},spec.driver={DRIVER}", env.node);
    env.wait("rkubelet deleting the driver's ResourceSlices", Duration::from_secs(60), || async {
        deleted_slices(&node, &wiped).then_some(())
    })
    .await;
    let after = gone.elapsed();
    assert!(after >= Duration::from_secs(29), "upstream's 30 s wiping delay, not {after:?}");
    assert!(slices(&env).await.is_empty(), "no slice of the driver left for the node");
    println!("FIGURE driver deregistered → its ResourceSlices deleted by rkubelet: {:.1} s", after.as_secs_f64());
    env.kubectl(&["delete", "deviceclass", &class, "--wait=false"]).await;
    env.kubectl(&["delete", "clusterrole,clusterrolebinding", &format!("dra-kubelet-plugin-{}", env.ns)]).await;
    node.stop_and_clean(&rt).await;
}
