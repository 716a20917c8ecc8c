//! End to end: device plugins (issue 28's device manager) with upstream's e2e device plugin
//! (`localhost/sample-device-plugin:1`, built by `scripts/build-images.sh` from `../shared/k8s/bin`), run as a pod
//! with upstream's manifest's host paths, and the CDI proof of containerd 2 (issue 27): the plugin answers CDI
//! names and writes their spec into `/var/run/cdi`, and the container sees the variable and the device node the
//! spec gives. Through the real apiserver: the resource in node allocatable, a pod given a device, a pod asking for
//! more than exists refused, and an rkubelet restart that changes nothing for the running pod.

mod common;

use std::time::Duration;

use common::cluster::TestEnv;
use common::*;
use tokio::time::Instant;

const R: &str = "example.com/resource";

/// The plugin pod: upstream's `sample-device-plugin.yaml` on this node (CDI on where the runtime has it).
fn plugin_pod(env: &TestEnv, cdi: bool) -> String {
    let cdi_env = if cdi { "    - name: CDI_ENABLED\n      value: \"1\"\n" } else { "" };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sample-device-plugin\nspec:\n  nodeName: {node}\n  \
         terminationGracePeriodSeconds: 2\n  volumes:\n  - name: device-plugin\n    hostPath:\n      \
         path: /var/lib/kubelet/device-plugins\n  - name: plugins-registry-probe-mode\n    hostPath:\n      \
         path: /var/lib/kubelet/plugins_registry\n  - name: dev\n    hostPath:\n      path: /dev\n  \
         - name: cdi-dir\n    hostPath:\n      path: /var/run/cdi\n  containers:\n  - name: sample-device-plugin\n    \
         image: localhost/sample-device-plugin:1\n    imagePullPolicy: Never\n    env:\n    - name: PLUGIN_SOCK_DIR\n      \
         value: /var/lib/kubelet/device-plugins\n{cdi_env}    securityContext:\n      privileged: true\n    \
         volumeMounts:\n    - name: device-plugin\n      mountPath: /var/lib/kubelet/device-plugins\n    \
         - name: plugins-registry-probe-mode\n      mountPath: /var/lib/kubelet/plugins_registry\n    \
         - name: dev\n      mountPath: /dev\n    - name: cdi-dir\n      mountPath: /var/run/cdi\n",
        node = env.node
    )
}

/// A pod whose container asks for `n` devices and prints what it got.
fn consumer(env: &TestEnv, name: &str, n: u32) -> String {
    let script = "echo CDI_DEVICE=$CDI_DEVICE; for f in /tmp/*Dev-*; do [ -b $f ] && echo block $f; [ -e $f ] && echo mounted $f; done; echo END; exec sleep 3600";
    env.pod_yaml(name, &[("app", script)], "") + &format!("    resources:\n      limits:\n        {R}: \"{n}\"\n")
}

fn allocatable(node: &serde_json::Value) -> Option<String> {
    node["status"]["allocatable"][R].as_str().map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_plugins_devices_reach_pods_with_their_cdi_edits_and_survive_an_rkubelet_restart() {
    let (_g, rt) = fresh_runtime().await;
    // The image node-setup built (an earlier test's image GC may have collected it).
    restore_node_images();
    let cdi = containerd_version() != "1.6";
    let _ = std::fs::remove_file("/var/run/cdi/example.com.json");
    let env = TestEnv::new().await;
    // As kubeadm configures a node, so `kubectl logs` reaches it.
    let mut node = env.start_kubeadm_node().await;
    env.wait_node_ready(&mut node).await;

    env.create(&plugin_pod(&env, cdi)).await;
    let started = Instant::now();
    env.wait_pod_running(&mut node, "sample-device-plugin").await;
    let running = started.elapsed();
    env.wait("example.com/resource: 2 in allocatable", Duration::from_secs(60), || async {
        env.node_object().await.filter(|n| allocatable(n).as_deref() == Some("2"))
    })
    .await;
    let n = env.node_object().await.unwrap();
    assert_eq!(n["status"]["capacity"][R], "2");
    println!(
        "FIGURE device plugin pod Running → example.com/resource in node allocatable: {:.1} s",
        (started.elapsed() - running).as_secs_f64()
    );
    assert_eq!(node_metric(&format!("kubelet_device_plugin_registration_total{{resource_name=\"{R}\"}}")).await, 1.0);

    // A pod asking for one device gets it: the plugin's mount, and on containerd 2 the CDI spec's variable and
    // block device node.
    env.create(&consumer(&env, "gpu", 1)).await;
    let p = env.wait_pod_running(&mut node, "gpu").await;
    let out = env
        .wait("the consumer's report", Duration::from_secs(30), || async {
            let (_, log, _) = env.kubectl_output(&["logs", "gpu"]).await;
            log.contains("END").then_some(log)
        })
        .await;
    println!("FIGURE the container with a device saw: {}", out.trim().replace('\n', "; "));
    assert!(out.contains("mounted /tmp/Dev-"), "the plugin's mount: {out}");
    if cdi {
        let dev = out.lines().find_map(|l| l.strip_prefix("CDI_DEVICE=")).unwrap_or_default().to_string();
        assert!(dev.starts_with("CDI-Dev-"), "the CDI spec's variable: {out}");
        assert!(out.contains(&format!("block /tmp/{dev}")), "the CDI spec's device node: {out}");
        let c = containers_of(&rt, "gpu").await.remove(0);
        let info = crictl("inspect", &c.id);
        let names: Vec<&str> = info["info"]["config"]["CDI_devices"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["name"].as_str())
            .collect();
        assert_eq!(names, [format!("{R}={dev}")], "CDI names in the CRI request: {}", info["info"]["config"]);
    } else {
        assert!(out.contains("CDI_DEVICE=\n") || out.contains("CDI_DEVICE=\r"), "no CDI on 1.6: {out}");
    }
    let checkpoint = std::fs::read_to_string("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").unwrap();
    assert!(checkpoint.contains(p["metadata"]["uid"].as_str().unwrap()), "{checkpoint}");

    // More than is free: refused as upstream's resource fit says.
    env.create(&consumer(&env, "greedy", 2)).await;
    let g = env
        .wait("greedy refused", Duration::from_secs(30), || async {
            env.pod("greedy").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(g["status"]["reason"], format!("OutOf{R}"), "{}", g["status"]);

    // rkubelet restarts: the running pod keeps its container and device, the plugin registers again.
    let before = containers_of(&rt, "gpu").await.into_iter().map(|c| c.id).collect::<Vec<_>>();
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    env.wait("the plugin registered again", Duration::from_secs(60), || async {
        (node_metric(&format!("kubelet_device_plugin_registration_total{{resource_name=\"{R}\"}}")).await >= 1.0)
            .then_some(())
    })
    .await;
    env.wait("allocatable back to 2", Duration::from_secs(60), || async {
        env.node_object().await.filter(|n| allocatable(n).as_deref() == Some("2"))
    })
    .await;
    let after = env.wait_pod_running(&mut node, "gpu").await;
    assert_eq!(container_status(&after, "app").unwrap()["restartCount"], 0);
    assert_eq!(containers_of(&rt, "gpu").await.into_iter().map(|c| c.id).collect::<Vec<_>>(), before);
    node.stop_and_clean(&rt).await;
    // The device plugin folder is the machine's (upstream's fixed path): the next test's node starts without
    // this one's resources.
    let _ = std::fs::remove_file("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
}
