//! End to end: service environment variables come from the watched Service cache, rkubelet a node of the real
//! cluster (the real kube-apiserver and controller-manager, the real containerd, the real `kubectl`).
//!
//! Upstream's conformance spec "Pods should contain environment variables for services" creates a Service and
//! right after it a pod in the same namespace, and expects `<NAME>_SERVICE_HOST` in the pod's environment. Here
//! that happens 100 times at once (one `kubectl create` of Service, pod, Service, pod, ... in that order), each
//! pod printing its environment and exiting; every pod must have the variables of its own Service and of every
//! Service created before it (and the master service's). A pod with `enableServiceLinks: false` in the same
//! namespace gets only `KUBERNETES_*`. The node lists and watches Services across all namespaces, never per
//! namespace (the apiserver's audit log).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::cluster::TestEnv;
use common::*;
use serde_json::Value;
use tokio::time::Instant;

const PAIRS: usize = 100;

fn service_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  ports:\n  - name: http\n    port: 80\n")
}

/// The `NAME=value` lines of a CRI log (`<time> stdout F NAME=value`).
fn env_lines(log: &str) -> BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_created_just_before_a_pod_is_in_its_environment_every_time() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    env.wait_node_ready(&mut node).await;

    let started = Instant::now();
    let never = "  restartPolicy: Never\n";
    let mut yaml = String::new();
    for i in 0..PAIRS {
        yaml += &service_yaml(&format!("svc-{i}"));
        yaml += "---\n";
        yaml += &env.pod_yaml(&format!("env-{i}"), &[("app", "env")], never);
        yaml += "---\n";
    }
    yaml += &env.pod_yaml("no-links", &[("app", "env")], &format!("{never}  enableServiceLinks: false\n"));
    // kubectl's client-side schema validation costs some 50 ms of CPU per object; the apiserver validates anyway.
    let file = env.write("pairs.yaml", &yaml);
    env.kubectl(&["create", "--validate=false", "-f", file.to_str().unwrap()]).await;
    let created = started.elapsed();

    let pods = node
        .wait_for("every pod Succeeded", Duration::from_secs(120), || async {
            // Once a second: each kubectl costs a core for a moment, which the 101 pods need more.
            tokio::time::sleep(Duration::from_millis(900)).await;
            let list = env.get(&["pods"]).await?;
            let items = list["items"].as_array()?.clone();
            let done = items.iter().filter(|p| p["status"]["phase"] == "Succeeded").count();
            let failed: Vec<&Value> = items.iter().filter(|p| p["status"]["phase"] == "Failed").collect();
            assert!(failed.is_empty(), "pods failed: {failed:?}");
            (done == PAIRS + 1).then_some(items)
        })
        .await;
    let ran = started.elapsed();

    let services = env.get(&["services"]).await.unwrap();
    let ips: BTreeMap<String, String> = services["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["metadata"]["name"].as_str().unwrap().to_string(), s["spec"]["clusterIP"].as_str().unwrap().into()))
        .collect();
    assert_eq!(ips.len(), PAIRS);
    let mut missing = vec![];
    for p in &pods {
        let name = p["metadata"]["name"].as_str().unwrap();
        let vars = env_lines(&node.container_log(p, "app"));
        assert_eq!(vars.get("KUBERNETES_SERVICE_HOST").map(String::as_str), Some("10.96.0.1"), "{name}: {vars:?}");
        let hosts: Vec<&String> = vars.keys().filter(|k| k.ends_with("_SERVICE_HOST")).collect();
        if name == "no-links" {
            assert_eq!(hosts, ["KUBERNETES_SERVICE_HOST"], "enableServiceLinks: false: only the master service");
            assert!(vars.keys().all(|k| !k.starts_with("SVC_")), "no link of the namespace's services: {vars:?}");
            continue;
        }
        // Every Service created before the pod is in its environment; its own is the one created just before it.
        let i: usize = name.trim_start_matches("env-").parse().unwrap();
        for j in 0..=i {
            let var = format!("SVC_{j}_SERVICE_HOST");
            if vars.get(&var) != Some(&ips[&format!("svc-{j}")]) {
                missing.push(format!("{name}: {var}={:?}", vars.get(&var)));
            }
        }
        assert_eq!(vars.get(&format!("SVC_{i}_SERVICE_PORT_HTTP")).map(String::as_str), Some("80"), "{name}");
    }
    assert!(missing.is_empty(), "pods lack variables of Services created before them: {missing:?}");
    assert!(!node.log().contains("services have not yet been read"), "the node had synced its services");
    // The node read the Services as upstream's informer does: listed and watched across all namespaces (which the
    // Node authorizer allows), never listed per namespace.
    let services: Vec<Value> = env
        .node_requests()
        .into_iter()
        .filter(|e| e["objectRef"]["resource"] == "services")
        .filter(|e| e["stage"] == if e["verb"] == "watch" { "ResponseStarted" } else { "ResponseComplete" })
        .collect();
    let cluster_wide =
        |verb: &str| services.iter().filter(|e| e["verb"] == verb && e["objectRef"]["namespace"].is_null()).count();
    assert!(cluster_wide("list") >= 1 && cluster_wide("watch") >= 1, "{services:?}");
    assert!(services.iter().all(|e| e["responseStatus"]["code"] == 200), "{services:?}");
    assert!(services.iter().all(|e| e["objectRef"]["namespace"].is_null()), "a per-namespace read: {services:?}");
    eprintln!(
        "{PAIRS} service+pod pairs created in {:.1}s, every pod Succeeded after {:.1}s, checked after {:.1}s",
        created.as_secs_f64(),
        ran.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    node.stop_and_clean(&rt).await;
}
