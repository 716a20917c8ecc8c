//! End to end: feature gates. `featureGates` is resolved against upstream's v1.35 registry: an unknown gate stops
//! start-up with upstream's message, and a gate turned off turns its behaviour off (`PodLevelResources`: a pod with
//! pod-level resources is refused at admission, as upstream's kubelet refuses it with the gate off).
//!
//! Projected volume sources behind feature gates (`clusterTrustBundle`, `podCertificate`) are never
//! skipped. With the kubelet's gates off (the default) the mount fails with upstream's text, the pod waits in
//! `ContainerCreating` with `FailedMount` events and nothing of it runs; with a gate on, rkubelet (which does not
//! serve them yet) fails the mount saying so.
//!
//! `clusterTrustBundle` goes through the real apiserver (the test control plane runs with
//! `ClusterTrustBundleProjection` on, so it keeps the field; it drops it otherwise). `podCertificate` needs the
//! alpha `PodCertificateRequest` gate and API on the apiserver, which the shared control plane does not enable: it
//! reaches rkubelet through the in-process test apiserver, which stores pods as given.

mod common;

use std::time::Duration;

use common::cluster::TestEnv;
use common::*;
use serde_json::{Value, json};

const STATIC_MODE: &str = "ClusterTrustBundle projection is not supported in static kubelet mode";

/// The pod waits for its volumes: Pending, its container `ContainerCreating`, no sandbox in the runtime.
async fn assert_waiting_for_volumes(rt: &kubelet_cri::RemoteRuntime, p: &Value, name: &str) {
    assert_eq!(p["status"]["phase"], "Pending", "{p}");
    let waiting = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
    assert_eq!(waiting, "ContainerCreating", "{p}");
    assert!(sandboxes_of(rt, name).await.is_empty(), "no sandbox was made for a pod without its volumes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_gate_stops_the_start_and_a_gate_turned_off_turns_its_behaviour_off() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    // Anonymous requests allowed, to read /configz.
    let gates = |gates: &'static str| {
        move |n: &Node| {
            let config = std::fs::read_to_string(&n.config).unwrap();
            config.replace("anonymous:\n    enabled: false", "anonymous:\n    enabled: true") + gates
        }
    };
    let mut node = env.start_node_with(&[], gates("featureGates:\n  PodLevelResource: false\n"), vec![]);
    assert!(!node.wait_exit(Duration::from_secs(30)).await.success(), "an unknown gate must stop the start");
    let log = node.log();
    assert!(log.contains("unrecognized feature gate: PodLevelResource"), "{log}");

    let config = std::fs::read_to_string(&node.config).unwrap().replace("PodLevelResource:", "PodLevelResources:");
    std::fs::write(&node.config, config).unwrap();
    node.spawn();
    env.wait_node_ready(&mut node).await;
    // `/configz` shows the gates as set.
    let (code, configz) = common::kubelet_api::KubeletApi::new(secure_port()).get("/configz").await;
    assert_eq!(code, 200, "{configz}");
    let configz: Value = serde_json::from_str(&configz).unwrap();
    assert_eq!(configz["kubeletconfig"]["featureGates"], json!({"PodLevelResources": false}), "{configz}");
    let plr = env.pod_yaml("plr", &[("app", SERVE)], "  resources:\n    limits: {cpu: 100m, memory: 32Mi}\n");
    env.create(&plr).await;
    let refused = node
        .wait_for("pod plr Failed", Duration::from_secs(60), || async {
            env.pod("plr").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(refused["status"]["reason"], "PodLevelResourcesNotSupported", "{refused}");
    assert_eq!(refused["status"]["message"], "Pod was rejected: PodLevelResources feature gate is disabled");
    assert!(sandboxes_of(&rt, "plr").await.is_empty(), "nothing of a refused pod runs");
    // Without pod-level resources a pod runs as usual.
    env.create(&env.pod_yaml("plain", &[("app", SERVE)], "")).await;
    env.wait_pod_running(&mut node, "plain").await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_trust_bundle_projection_fails_the_mount_as_upstream_and_is_never_skipped() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    let pod = env.pod_yaml("bundle", &[("app", SERVE)], "")
        + "    volumeMounts:\n    - name: ca\n      mountPath: /ca\n  volumes:\n  - name: ca\n    projected:\n      \
           sources:\n      - clusterTrustBundle:\n          name: root-ca\n          path: ca.pem\n";
    env.create(&pod).await;
    let p = env.pod("bundle").await.unwrap();
    assert!(
        p["spec"]["volumes"][0]["projected"]["sources"][0]["clusterTrustBundle"].is_object(),
        "the apiserver dropped the clusterTrustBundle source (ClusterTrustBundleProjection off?): {p}"
    );
    let failed_mount = |want: String| {
        let env = &env;
        move || {
            let want = want.clone();
            async move {
                let events = env.get(&["events", "--field-selector", "involvedObject.name=bundle"]).await?;
                let items = events["items"].as_array()?.clone();
                items.into_iter().find(|e| e["reason"] == "FailedMount" && e["message"] == want.as_str())
            }
        }
    };
    let want = format!("MountVolume.SetUp failed for volume \"ca\" : {STATIC_MODE}");
    let e = node.wait_for("FailedMount with upstream's text", Duration::from_secs(60), failed_mount(want)).await;
    assert_eq!(e["type"], "Warning");
    // Retried, never run without the volume.
    node.wait_for("the mount retried", Duration::from_secs(60), || async {
        let events = env.get(&["events", "--field-selector", "involvedObject.name=bundle"]).await?;
        let failed = events["items"].as_array()?.iter().filter(|e| e["reason"] == "FailedMount");
        (failed.map(|e| e["count"].as_i64().unwrap_or(1)).sum::<i64>() > 1).then_some(())
    })
    .await;
    let p = env.pod("bundle").await.unwrap();
    assert_waiting_for_volumes(&rt, &p, "bundle").await;

    // With the kubelet's gate on, upstream would serve the bundle; rkubelet cannot yet and says so.
    node.kill9();
    let config = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, config + "featureGates:\n  ClusterTrustBundleProjection: true\n").unwrap();
    node.spawn();
    let want = "MountVolume.SetUp failed for volume \"ca\" : ClusterTrustBundle projection is not implemented by \
                rkubelet yet (the ClusterTrustBundleProjection feature gate is on): the volume cannot be set up";
    node.wait_for("FailedMount naming what rkubelet lacks", Duration::from_secs(60), failed_mount(want.into())).await;
    let p = env.pod("bundle").await.unwrap();
    assert_waiting_for_volumes(&rt, &p, "bundle").await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_certificate_projection_fails_the_mount_as_upstream_and_is_never_skipped() {
    let (_g, rt) = fresh_runtime().await;
    let server = test_apiserver::TestApiServer::start(Default::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.kubeconfig(&kubeconfig).unwrap();
    let mut node = Node::start_full(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap(),
        vec![format!("--kubeconfig={}", kubeconfig.display())],
    );
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cert", "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "app",
                "image": "localhost/busybox:1",
                "command": ["sh", "-c", SERVE],
                "volumeMounts": [{"name": "identity", "mountPath": "/identity"}],
            }],
            "volumes": [{"name": "identity", "projected": {"sources": [{"podCertificate": {
                "signerName": "example.com/identity",
                "keyType": "ED25519",
                "credentialBundlePath": "credentials.pem",
            }}]}}],
        },
    });
    server.create("v1", "pods", Some("default"), pod).unwrap();
    let failed_mounts = || {
        let events = server.list("v1", "events", Some("default")).unwrap_or_default();
        events
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == "cert" && e["reason"] == "FailedMount")
            .collect::<Vec<_>>()
    };
    let e =
        node.wait_for("FailedMount", Duration::from_secs(60), || async { failed_mounts().into_iter().next() }).await;
    assert_eq!(e["message"], "MountVolume.SetUp failed for volume \"identity\" : unimplemented");
    assert_eq!(e["type"], "Warning");
    let p = node
        .wait_for("the pod's status", Duration::from_secs(30), || async {
            server
                .get("v1", "pods", Some("default"), "cert")
                .ok()
                .filter(|p| p["status"]["containerStatuses"].is_array())
        })
        .await;
    assert_waiting_for_volumes(&rt, &p, "cert").await;
    node.stop_and_clean(&rt).await;
}
