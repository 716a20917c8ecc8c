//! End to end: device plugins (issue 28's device manager) with upstream's e2e device plugin
//! (`localhost/sample-device-plugin:1`, built by `scripts/build-images.sh` from `../shared/k8s/bin`), run as a
//! DaemonSet with upstream's manifest's host paths, its consumer bound by the real kube-scheduler, and the CDI proof of containerd 2 (issue 27): the plugin answers CDI
//! names and writes their spec into `/var/run/cdi`, and the container sees the variable and the device node the
//! spec gives. Through the real apiserver: the resource in node allocatable, a pod given a device, a pod asking for
//! more than is free refused as upstream's device allocation refuses it, and an rkubelet restart that changes
//! nothing for the running pod; the pod resources API's answers. Then the same plugin registering through the plugin
//! manager (`plugins_registry`).

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, daemon_pod, daemonset};
use common::*;
use kubelet_proto::podresources::v1 as pr;
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

    // The plugin as a DaemonSet: the controller-manager makes its pod, the scheduler binds it to the node.
    env.create(&daemonset(&env, &plugin_pod(&env, cdi))).await;
    let started = Instant::now();
    env.wait("the plugin's DaemonSet pod Running", Duration::from_secs(90), || {
        daemon_pod(&env, "sample-device-plugin")
    })
    .await;
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

    // A pod asking for one device, bound by the scheduler to the only node that has the resource, gets it: the
    // plugin's mount, and on containerd 2 the CDI spec's variable and block device node.
    env.create(&consumer(&env, "gpu", 1).replace(&format!("  nodeName: {}\n", env.node), "")).await;
    let p = env.wait_pod_running(&mut node, "gpu").await;
    assert_eq!(p["spec"]["nodeName"], env.node.as_str(), "the scheduler bound it to the node with the device");
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
    // The pod resources API answers as upstream's: the container's device, every healthy device, a pod by name.
    let id = out.lines().find_map(|l| l.strip_prefix("mounted /tmp/Dev-")).map(|n| format!("Dev-{n}")).unwrap();
    let mut api = pod_resources(&node).await;
    let list = api.list(pr::ListPodResourcesRequest {}).await.unwrap().into_inner();
    let listed = list.pod_resources.iter().find(|p| p.name == "gpu" && p.namespace == env.ns).expect("gpu listed");
    let devices = |p: &pr::PodResources| -> Vec<(String, String, Vec<String>)> {
        p.containers
            .iter()
            .flat_map(|c| c.devices.iter().map(|d| (c.name.clone(), d.resource_name.clone(), d.device_ids.clone())))
            .collect()
    };
    assert_eq!(devices(listed), [("app".to_string(), R.to_string(), vec![id.clone()])], "{listed:?}");
    let all = api.get_allocatable_resources(pr::AllocatableResourcesRequest {}).await.unwrap().into_inner();
    let mut ids: Vec<String> = all.devices.iter().flat_map(|d| d.device_ids.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["Dev-1", "Dev-2"], "{all:?}");
    assert!(all.cpu_ids.is_empty() && all.memory.is_empty(), "no CPU or memory manager: {all:?}");
    let req = pr::GetPodResourcesRequest { pod_name: "gpu".into(), pod_namespace: env.ns.clone() };
    let got = api.get(req).await.unwrap().into_inner().pod_resources.unwrap();
    assert_eq!(devices(&got), devices(listed));
    let req = pr::GetPodResourcesRequest { pod_name: "nope".into(), pod_namespace: env.ns.clone() };
    let e = api.get(req).await.unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::Unknown, format!("pod nope in namespace {} not found", env.ns).as_str())
    );
    let v1 = |m: &str| format!("kubelet_pod_resources_endpoint_{m}{{server_api_version=\"v1\"}}");
    assert_eq!(node_metric(&v1("requests_total")).await, 4.0);
    assert_eq!(node_metric(&v1("errors_get")).await, 1.0);

    let checkpoint = std::fs::read_to_string("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint").unwrap();
    assert!(checkpoint.contains(p["metadata"]["uid"].as_str().unwrap()), "{checkpoint}");

    // More than is free: refused by the device allocation, which upstream runs before the resource fit.
    env.create(&consumer(&env, "greedy", 2)).await;
    let g = env
        .wait("greedy refused", Duration::from_secs(30), || async {
            env.pod("greedy").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(g["status"]["reason"], "UnexpectedAdmissionError", "{}", g["status"]);
    assert_eq!(
        g["status"]["message"],
        format!(
            "Pod was rejected: Allocate failed due to requested number of devices unavailable for {R}. Requested: 2, \
             Available: 1, which is unexpected"
        )
    );

    // Pod start with a device against without, on this node (create → Running on the apiserver's view).
    let started = Instant::now();
    env.create(&env.pod_yaml("plain", &[("app", "exec sleep 3600")], "")).await;
    env.wait_pod_running(&mut node, "plain").await;
    let plain = started.elapsed();
    let started = Instant::now();
    env.create(&consumer(&env, "second", 1)).await;
    env.wait_pod_running(&mut node, "second").await;
    println!(
        "FIGURE pod start, create → Running: without a device {:.2} s, with one (Allocate, its mount{}) {:.2} s",
        plain.as_secs_f64(),
        if cdi { ", its CDI device" } else { "" },
        started.elapsed().as_secs_f64()
    );

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

/// The plugin pod of upstream's `sample-device-plugin-control-registration.yaml`, with its socket in the node's
/// `plugins_registry` (the host path at the same path in the container): it registers through the plugin manager
/// only, never on `kubelet.sock` (its control file is never removed). Its main loop sleeps 5 s between signals: the
/// grace period lets it remove its socket on SIGTERM.
fn watcher_plugin_pod(env: &TestEnv, registry: &std::path::Path) -> String {
    let r = registry.display();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sample-device-plugin-beta\nspec:\n  nodeName: {node}\n  \
         terminationGracePeriodSeconds: 10\n  volumes:\n  - name: device-plugin\n    hostPath:\n      \
         path: /var/lib/kubelet/device-plugins\n  - name: plugins-registry\n    hostPath:\n      path: {r}\n  \
         - name: dev\n    hostPath:\n      path: /dev\n  containers:\n  - name: sample-device-plugin\n    \
         image: localhost/sample-device-plugin:1\n    imagePullPolicy: Never\n    env:\n    - name: PLUGIN_SOCK_DIR\n      \
         value: {r}\n    - name: REGISTER_CONTROL_FILE\n      value: {CONTROL_DIR}/registration\n    \
         securityContext:\n      privileged: true\n    volumeMounts:\n    - name: device-plugin\n      \
         mountPath: /var/lib/kubelet/device-plugins\n    - name: plugins-registry\n      mountPath: {r}\n    \
         - name: dev\n      mountPath: /dev\n",
        node = env.node
    )
}

/// The folder of the watcher plugin's control file (it watches the folder, which must exist).
const CONTROL_DIR: &str = "/var/lib/kubelet/device-plugins/sample";

/// The plugin's socket in `registry`, once there.
fn plugin_socket(registry: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    std::fs::read_dir(registry)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("dp.") && e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_plugin_in_plugins_registry_is_registered_deregistered_when_it_stops_and_registered_again() {
    let (_g, rt) = fresh_runtime().await;
    restore_node_images();
    std::fs::create_dir_all(CONTROL_DIR).unwrap();
    let env = TestEnv::new().await;
    let mut node = env.start_kubeadm_node().await;
    env.wait_node_ready(&mut node).await;
    let registry = node.root.join("plugins_registry");

    env.create(&watcher_plugin_pod(&env, &registry)).await;
    let socket = env.wait("the plugin's socket", Duration::from_secs(60), || async { plugin_socket(&registry) }).await;
    let made = Instant::now();
    env.wait("example.com/resource: 2 in allocatable", Duration::from_secs(30), || async {
        env.node_object().await.filter(|n| allocatable(n).as_deref() == Some("2"))
    })
    .await;
    println!(
        "FIGURE plugin socket in plugins_registry → example.com/resource in node allocatable: {:.2} s",
        made.elapsed().as_secs_f64()
    );
    let at = socket.display().to_string();
    let registered = |state: &str| format!("plugin_manager_total_plugins{{socket_path=\"{at}\",state=\"{state}\"}}");
    assert_eq!(node_metric(&registered("actual_state_of_world")).await, 1.0);
    assert_eq!(
        node_metric(&format!("kubelet_device_plugin_registration_total{{resource_name=\"{R}\"}}")).await,
        0.0,
        "nothing came through kubelet.sock"
    );

    env.create(&consumer(&env, "gpu", 1)).await;
    env.wait_pod_running(&mut node, "gpu").await;
    let out = env
        .wait("the consumer's report", Duration::from_secs(30), || async {
            let (_, log, _) = env.kubectl_output(&["logs", "gpu"]).await;
            log.contains("END").then_some(log)
        })
        .await;
    assert!(out.contains("mounted /tmp/Dev-"), "the plugin's mount: {out}");

    // The plugin stops (its socket goes): deregistered, its devices leave allocatable, not capacity.
    env.kubectl(&["delete", "pod", "sample-device-plugin-beta", "--wait=false"]).await;
    let n = env
        .wait("allocatable 0 once the plugin is gone", Duration::from_secs(60), || async {
            env.node_object().await.filter(|n| allocatable(n).as_deref() == Some("0"))
        })
        .await;
    assert_eq!(n["status"]["capacity"][R], "2", "capacity stays through the grace period");
    assert!(!socket.exists());
    assert_eq!(node_metric(&registered("actual_state_of_world")).await, 0.0);
    env.wait("the plugin pod gone", Duration::from_secs(60), || async {
        env.pod("sample-device-plugin-beta").await.is_none().then_some(())
    })
    .await;

    // It comes back (a new socket): registered again; the running pod kept its device and container.
    env.create(&watcher_plugin_pod(&env, &registry)).await;
    env.wait("allocatable back to 2", Duration::from_secs(60), || async {
        env.node_object().await.filter(|n| allocatable(n).as_deref() == Some("2"))
    })
    .await;
    // The new instance's socket (named by its start second: the same name when it restarts within that second).
    assert!(plugin_socket(&registry).is_some_and(|s| s.exists()), "the new socket");
    let p = env.wait_pod_running(&mut node, "gpu").await;
    assert_eq!(container_status(&p, "app").unwrap()["restartCount"], 0);
    node.stop_and_clean(&rt).await;
    let _ = std::fs::remove_file("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
    let _ = std::fs::remove_dir_all(CONTROL_DIR);
}
