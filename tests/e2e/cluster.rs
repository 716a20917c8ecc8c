//! End to end: rkubelet as a node of a real cluster — the real binary and the real containerd against the real
//! kube-apiserver and kube-controller-manager (`test-cluster`: Node and RBAC authorization, NodeRestriction),
//! driven with the real `kubectl` as an operator would. Each test has its own node name and namespace.

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, condition};
use common::*;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

/// A container that runs until SIGTERM.
const SERVE_SH: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_turns_ready_and_renews_its_lease() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let t0 = Instant::now();
    let mut node = env.start_node(&[]);
    let n = env.wait_node_ready(&mut node).await;
    eprintln!("FIGURE start to Node Ready: {:?}", t0.elapsed());
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], env.node.as_str());
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert_eq!(n["status"]["capacity"]["pods"], "110");
    assert!(n["status"]["nodeInfo"]["containerRuntimeVersion"].as_str().unwrap().starts_with("containerd://"));
    assert_eq!(n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], secure_port());
    let addresses = n["status"]["addresses"].as_array().unwrap();
    assert!(addresses.iter().any(|a| a["type"] == "Hostname" && a["address"] == env.node.as_str()), "{addresses:?}");
    for kind in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(condition(&n, kind).as_deref(), Some("False"), "{kind}");
    }
    let ready = n["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(ready["reason"], "KubeletReady");
    assert_eq!(ready["message"], "kubelet is posting ready status");
    let table = kubectl(&env.admin, &["get", "nodes"]).await;
    assert!(table.lines().any(|l| l.starts_with(&format!("{} ", env.node)) && l.contains(" Ready ")), "{table}");

    // The lease: held by the node, owned by it, renewed every 10 s.
    let lease = node
        .wait_for("node lease owned by the Node", Duration::from_secs(30), || async {
            get_json(&env.admin, &["lease", "-n", "kube-node-lease", &env.node])
                .await
                .filter(|l| l["metadata"]["ownerReferences"][0]["kind"] == "Node")
        })
        .await;
    assert_eq!(lease["spec"]["holderIdentity"], env.node.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(lease["metadata"]["ownerReferences"][0]["uid"], n["metadata"]["uid"]);
    let first = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    node.wait_for("the lease renewed", Duration::from_secs(25), || async {
        get_json(&env.admin, &["lease", "-n", "kube-node-lease", &env.node])
            .await
            .filter(|l| l["spec"]["renewTime"].as_str() != Some(first.as_str()))
    })
    .await;
    let selector = format!("involvedObject.name={}", env.node);
    let events = kubectl(&env.admin, &["get", "events", "-n", "default", "--field-selector", &selector]).await;
    assert!(events.contains("Starting kubelet.") && events.contains("NodeReady"), "{events}");
    // Nothing the node asked for was refused by the Node authorizer or NodeRestriction.
    let refused: Vec<_> = env
        .node_requests()
        .into_iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["responseStatus"]["code"] == 403)
        .collect();
    assert!(refused.is_empty(), "requests refused: {refused:#?}");

    // What the runtime says of itself: containerd 2.3 answers RuntimeConfig (the cgroup driver is its own) and
    // reports its handlers' features; 1.6 does neither, and the configuration's driver stays.
    let n = get_json(&env.admin, &["node", &env.node]).await.unwrap();
    let log = node.log();
    if containerd_version() == "1.6" {
        assert!(n["status"].get("runtimeHandlers").is_none() && n["status"].get("features").is_none(), "{n}");
        assert!(log.contains("CRI implementation should be updated to support RuntimeConfig. Falling back to using cgroupDriver from kubelet config."));
    } else {
        let both = serde_json::json!({"recursiveReadOnlyMounts": true, "userNamespaces": true});
        let mut handlers: Vec<_> = n["status"]["runtimeHandlers"].as_array().cloned().unwrap_or_default();
        handlers.sort_by_key(|h| h["name"].as_str().unwrap_or_default().to_string());
        assert_eq!(
            handlers,
            ["", "runc", "runc-alt"].map(|name| serde_json::json!({"name": name, "features": both})).to_vec(),
            "{n}"
        );
        assert_eq!(n["status"]["features"], serde_json::json!({"supplementalGroupsPolicy": true}));
        assert!(log.contains("Using cgroup driver setting received from the CRI runtime cgroupDriver=\"cgroupfs\""));
    }
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_created_with_kubectl_runs_and_kubectl_delete_removes_it() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    env.wait_node_ready(&mut node).await;
    let manifest = env.write("web.yaml", &env.pod_yaml("web", &[("app", SERVE_SH)], ""));

    let (mut runs, mut deletes) = (vec![], vec![]);
    for _ in 0..3 {
        // Create, then watch as an operator does: kubectl lists the pod and watches from the list's version, so
        // no change after the create can be missed.
        let t0 = Instant::now();
        env.kubectl(&["create", "-f", manifest.to_str().unwrap()]).await;
        let mut watch = env.spawn_kubectl(&["get", "pod", "web", "-w", "--request-timeout=0"], false);
        let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
        let seen = tokio::time::timeout(Duration::from_secs(60), async {
            let mut seen = vec![];
            while let Ok(Some(l)) = lines.next_line().await {
                if l.starts_with("web ") && l.contains("Running") && l.contains("1/1") {
                    return seen;
                }
                seen.push(l);
            }
            panic!("kubectl get -w ended before the pod ran: {seen:?}");
        })
        .await;
        if seen.is_err() {
            panic!(
                "pod Running within 60 s, seen by kubectl get -w: not seen; the pod: {}\nrkubelet log:\n{}",
                env.pod("web").await.map(|p| p["status"].to_string()).unwrap_or_default(),
                excerpt(&node.log())
            );
        }
        runs.push(t0.elapsed());
        let _ = watch.kill().await;

        let p = env.pod("web").await.unwrap();
        assert_eq!(p["status"]["phase"], "Running");
        let cs = &p["status"]["containerStatuses"][0];
        assert!(cs["containerID"].as_str().unwrap().starts_with("containerd://"), "{cs}");
        assert_eq!(cs["ready"], true);
        assert!(cs["state"]["running"]["startedAt"].is_string());
        assert!(in_pod_cidr(p["status"]["podIP"].as_str().unwrap()));
        assert!(p["status"]["hostIP"].is_string());
        let conds = p["status"]["conditions"].as_array().unwrap();
        assert!(conds.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));

        // kubectl delete waits until the object is gone: the kubelet stops the containers, then deletes it.
        let t1 = Instant::now();
        env.kubectl(&["delete", "pod", "web"]).await;
        deletes.push(t1.elapsed());
        assert!(env.pod("web").await.is_none());
        node.wait_for("the pod's containers removed", Duration::from_secs(30), || async {
            containers_of(&rt, "web").await.is_empty().then_some(())
        })
        .await;
    }
    runs.sort();
    deletes.sort();
    eprintln!("FIGURE kubectl create to Running seen by kubectl get -w: {runs:?} median {:?}", runs[runs.len() / 2]);
    eprintln!("FIGURE kubectl delete to object gone: {deletes:?} median {:?}", deletes[deletes.len() / 2]);
    let events = env.kubectl(&["get", "events"]).await;
    for want in ["Created container: app", "Started container app", "Stopping container app"] {
        assert!(events.contains(want), "missing event {want:?} in:\n{events}");
    }
    assert!(env.apiserver_panics().is_empty(), "{:?}", env.apiserver_panics());
    node.stop_and_clean(&rt).await;
}

/// The regression of issue 14: every status change after the first one reaches the real apiserver (the status
/// patch replaces the atomic container status lists whole), so restarts, last states and readiness show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_status_follows_every_change_of_a_crashing_container() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    env.wait_node_ready(&mut node).await;
    // `app` runs; `flaky` exits 3 after a moment, is restarted (10 s back-off after the second exit).
    let yaml = env.pod_yaml("crashy", &[("app", SERVE_SH), ("flaky", "sleep 1; exit 3")], "");
    env.create(&yaml).await;
    let p = node
        .wait_for("flaky restarted twice, seen in the apiserver", Duration::from_secs(90), || async {
            env.pod("crashy").await.filter(|p| {
                p["status"]["containerStatuses"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["name"] == "flaky"))
                    .is_some_and(|c| c["restartCount"].as_i64() >= Some(2))
            })
        })
        .await;
    let cs = p["status"]["containerStatuses"].as_array().unwrap();
    let flaky = cs.iter().find(|c| c["name"] == "flaky").unwrap();
    assert_eq!(flaky["lastState"]["terminated"]["exitCode"], 3, "{flaky}");
    assert_eq!(flaky["lastState"]["terminated"]["reason"], "Error");
    let app = cs.iter().find(|c| c["name"] == "app").unwrap();
    assert!(app["state"]["running"].is_object() && app["ready"] == true, "{app}");
    assert_eq!(p["status"]["phase"], "Running");
    let flaky_ready = if flaky["state"]["running"].is_object() { "True" } else { "False" };
    assert_eq!(condition(&p, "Ready").as_deref(), Some(flaky_ready), "Ready follows flaky: {flaky}");
    let patches: Vec<_> = env
        .node_requests()
        .into_iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "patch"
                && e["objectRef"]["subresource"] == "status"
                && e["objectRef"]["name"] == "crashy"
        })
        .collect();
    assert!(patches.len() >= 4, "several status patches: {}", patches.len());
    let failed: Vec<_> = patches.iter().filter(|e| e["responseStatus"]["code"] != 200).collect();
    assert!(failed.is_empty(), "every status patch accepted: {failed:#?}");
    assert!(env.apiserver_panics().is_empty(), "{:?}", env.apiserver_panics());
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pod_is_mirrored_and_the_mirror_comes_back() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let m = manifest("static", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n")
        .replace("metadata:\n", &format!("metadata:\n  namespace: {}\n", env.ns));
    let mut node = env.start_node(&[("static.yaml", &m)]);
    let name = format!("static-{}", env.node);
    let mirror = node
        .wait_for("mirror pod Running", Duration::from_secs(60), || async {
            env.pod(&name).await.filter(|p| p["status"]["phase"] == "Running")
        })
        .await;
    let ann = &mirror["metadata"]["annotations"];
    assert!(ann["kubernetes.io/config.mirror"].is_string());
    assert_eq!(ann["kubernetes.io/config.mirror"], ann["kubernetes.io/config.hash"]);
    let owner = &mirror["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["name"].as_str()), (Some("Node"), Some(env.node.as_str())));
    assert_eq!(owner["controller"], true);
    let static_uid = ann["kubernetes.io/config.hash"].as_str().unwrap().to_string();
    assert_ne!(mirror["metadata"]["uid"].as_str().unwrap(), static_uid, "the mirror has its own UID");
    let container = containers_of(&rt, &name).await[0].id.clone();

    env.kubectl(&["delete", "pod", &name, "--wait=false"]).await;
    let old_uid = mirror["metadata"]["uid"].as_str().unwrap().to_string();
    // The new mirror shows the static pod's status too, although that status did not change.
    node.wait_for("the mirror pod recreated, Running", Duration::from_secs(30), || async {
        env.pod(&name).await.filter(|p| {
            p["metadata"]["uid"].as_str() != Some(old_uid.as_str())
                && p["metadata"]["deletionTimestamp"].is_null()
                && all_running(p)
        })
    })
    .await;
    assert_eq!(containers_of(&rt, &name).await[0].id, container, "deleting the mirror does not touch the static pod");

    // Removing the manifest removes the mirror pod too.
    node.remove_manifest("static.yaml");
    node.wait_for("the mirror pod removed", Duration::from_secs(30), || async {
        env.pod(&name).await.is_none().then_some(())
    })
    .await;
    assert!(env.apiserver_panics().is_empty(), "{:?}", env.apiserver_panics());
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_outage_under_running_pods_is_survived() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let ns_line = format!("metadata:\n  namespace: {}\n", env.ns);
    let m = manifest("steady", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n")
        .replace("metadata:\n", &ns_line);
    let mut node = env.start_node(&[("steady.yaml", &m)]);
    env.wait_node_ready(&mut node).await;
    env.create(&env.pod_yaml("web", &[("app", SERVE_SH)], "")).await;
    let web = node.wait_running("web").await;
    node.wait_running(&format!("steady-{}", env.node)).await;

    let cp = env.cp.clone();
    let outage = tokio::task::spawn_blocking(move || cp.outage()).await.unwrap().expect("stop the apiserver");
    // While the apiserver is away, pods keep running and static pods can still be added.
    let late = manifest("late", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n")
        .replace("metadata:\n", &ns_line);
    node.write_manifest("late.yaml", &late);
    node.wait_running(&format!("late-{}", env.node)).await;
    node.assert_alive();
    tokio::task::spawn_blocking(move || outage.end()).await.unwrap().expect("restart the apiserver");

    // When it returns, the mirror pod of the new static pod, the lease and the node status catch up, and the pod
    // watch is established again.
    let late_name = format!("late-{}", env.node);
    node.wait_for("mirror of the static pod added during the outage", Duration::from_secs(90), || async {
        env.pod(&late_name).await.filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
    env.create(&env.pod_yaml("after", &[("app", SERVE_SH)], "")).await;
    env.wait_pod_running(&mut node, "after").await;
    let now = node.wait_running("web").await;
    assert_eq!(
        container_status(&now, "app").unwrap()["containerID"],
        container_status(&web, "app").unwrap()["containerID"],
        "the apiserver pod kept running through the outage"
    );
    assert_eq!(env.pod("web").await.unwrap()["status"]["phase"], "Running");
    env.wait_node_ready(&mut node).await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_bootstrap_with_a_bootstrap_token_is_approved_and_signed_by_the_controller_manager() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let cp = env.cp.clone();
    let token = tokio::task::spawn_blocking(move || cp.create_bootstrap_token()).await.unwrap().unwrap();
    let token_id = token.split('.').next().unwrap().to_string();
    let bootstrap = env.path("bootstrap-kubelet.conf");
    env.cp.write_token_kubeconfig(&bootstrap, "kubelet-bootstrap", &token).unwrap();
    let kubelet_kc = env.path("kubelet-bootstrapped.conf");
    let cert_dir = env.path("pki");
    let t0 = Instant::now();
    // Joined as kubeadm does: the bootstrap kubeconfig only; no human approves anything.
    let mut node = Node::start_named(
        &env.node,
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap(),
        vec![
            format!("--bootstrap-kubeconfig={}", bootstrap.display()),
            format!("--kubeconfig={}", kubelet_kc.display()),
            format!("--cert-dir={}", cert_dir.display()),
        ],
    );
    let n = env.wait_node_ready(&mut node).await;
    eprintln!("FIGURE TLS bootstrap to Node Ready: {:?}", t0.elapsed());
    assert_eq!(n["metadata"]["name"], env.node.as_str());
    let csrs = get_json(&env.admin, &["csr"]).await.unwrap();
    let csr = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["spec"]["username"] == format!("system:bootstrap:{token_id}"))
        .expect("the node's CSR")
        .clone();
    assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    let usages: Vec<&str> = csr["spec"]["usages"].as_array().unwrap().iter().filter_map(|u| u.as_str()).collect();
    assert_eq!(usages, ["digital signature", "client auth"]);
    let approved = csr["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Approved").cloned();
    assert_eq!(approved.unwrap()["reason"], "AutoApproved", "csrapproving approved it: {csr}");
    assert!(csr["status"]["certificate"].is_string(), "csrsigning signed it");
    let current = cert_dir.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a link");
    assert!(target.file_name().unwrap().to_string_lossy().starts_with("kubelet-client-20"));
    let kc = std::fs::read_to_string(&kubelet_kc).unwrap();
    assert!(kc.contains(&format!("client-certificate: {}", current.display())), "{kc}");
    assert!(!env.node_requests().is_empty(), "the kubelet authenticates as system:node:{} now", env.node);

    // A restart with a valid certificate does not bootstrap again.
    let count = || async {
        get_json(&env.admin, &["csr"]).await.unwrap()["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["spec"]["username"] == format!("system:bootstrap:{token_id}"))
            .count()
    };
    let before = count().await;
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    env.wait_node_ready(&mut node).await;
    assert_eq!(count().await, before);
    assert!(node.log().contains("no bootstrap needed"));
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_labels_and_kubectl_describe() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node_with(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap(),
        vec!["--node-labels=role=edge,zone=lab,node.kubernetes.io/pool=a".into()],
    );
    let n = env.wait_node_ready(&mut node).await;
    assert_eq!(n["metadata"]["labels"]["role"], "edge", "--node-labels are applied at registration");
    assert_eq!(n["metadata"]["labels"]["zone"], "lab");
    assert_eq!(n["metadata"]["labels"]["node.kubernetes.io/pool"], "a", "a prefix NodeRestriction allows");
    env.create(&env.pod_yaml("web", &[("app", SERVE_SH)], "")).await;
    env.wait_pod_running(&mut node, "web").await;
    let described = env.kubectl(&["describe", "pod", "web"]).await;
    assert!(
        described.contains("Started container app") && described.contains("Status:") && described.contains("Running"),
        "{described}"
    );
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_period_shortened_during_termination_takes_effect() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    // `sleep` as PID 1 ignores SIGTERM: only the end of the grace period stops it.
    let yaml = env
        .pod_yaml("stubborn", &[("app", "exec sleep 3600")], "")
        .replace("terminationGracePeriodSeconds: 2", "terminationGracePeriodSeconds: 120");
    env.create(&yaml).await;
    env.wait_pod_running(&mut node, "stubborn").await;
    env.kubectl(&["delete", "pod", "stubborn", "--wait=false"]).await;
    let log = node.log_path();
    node.wait_for("the kubelet stopping the pod", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("killing container with a grace period").then_some(())
    })
    .await;
    // 120 s are granted; a second delete asks for 2.
    let t0 = Instant::now();
    env.kubectl(&["delete", "pod", "stubborn", "--grace-period=2", "--wait=false"]).await;
    node.wait_for("stubborn gone", Duration::from_secs(60), || async {
        env.pod("stubborn").await.is_none().then_some(())
    })
    .await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(20), "the shortened grace period was used: {took:?}");
    assert!(node.log().contains("grace period shortened during termination"));
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_gates_set_by_another_client_survive_and_drive_ready() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    let gates =
        "  readinessGates:\n  - conditionType: k8s.io/test-condition1\n  - conditionType: k8s.io/test-condition2\n";
    env.create(&env.pod_yaml("gated", &[("app", SERVE_SH)], gates)).await;
    let ready = |want: &'static str| {
        let env = &env;
        move || async move { env.pod("gated").await.filter(|p| condition(p, "Ready").as_deref() == Some(want)) }
    };
    let p = node
        .wait_for("gated Running, not Ready", Duration::from_secs(60), || async {
            env.pod("gated").await.filter(|p| {
                p["status"]["phase"] == "Running" && condition(p, "ContainersReady").as_deref() == Some("True")
            })
        })
        .await;
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"), "the gates are not set yet");
    let set = |cond: &str, status: &str| {
        format!(
            r#"{{"status":{{"conditions":[{{"type":"{cond}","status":"{status}","lastTransitionTime":"2026-01-01T00:00:00Z"}}]}}}}"#
        )
    };
    env.kubectl(&[
        "patch",
        "pod",
        "gated",
        "--subresource=status",
        "--type=strategic",
        "-p",
        &set("k8s.io/test-condition1", "True"),
    ])
    .await;
    // One gate is not enough; rkubelet's next status patches keep the condition it did not set.
    node.wait_for("a kubelet status patch after the gate", Duration::from_secs(30), || async {
        env.pod("gated").await.filter(|p| {
            p["status"]["conditions"].as_array().is_some_and(|c| {
                // The Ready message names only the gate still missing: rkubelet synced the pod after the change.
                c.iter().any(|c| {
                    c["type"] == "Ready"
                        && c["message"].as_str().is_some_and(|m| {
                            m.contains("k8s.io/test-condition2") && !m.contains("k8s.io/test-condition1")
                        })
                })
            })
        })
    })
    .await;
    let p = env.pod("gated").await.unwrap();
    assert_eq!(condition(&p, "k8s.io/test-condition1").as_deref(), Some("True"), "the gate's condition survived");
    assert_eq!(condition(&p, "Ready").as_deref(), Some("False"));
    env.kubectl(&[
        "patch",
        "pod",
        "gated",
        "--subresource=status",
        "--type=strategic",
        "-p",
        &set("k8s.io/test-condition2", "True"),
    ])
    .await;
    node.wait_for("Ready with both gates", Duration::from_secs(30), ready("True")).await;
    env.kubectl(&[
        "patch",
        "pod",
        "gated",
        "--subresource=status",
        "--type=strategic",
        "-p",
        &set("k8s.io/test-condition1", "False"),
    ])
    .await;
    let p = node.wait_for("not Ready once a gate is False", Duration::from_secs(30), ready("False")).await;
    assert_eq!(condition(&p, "k8s.io/test-condition2").as_deref(), Some("True"));
    assert!(env.apiserver_panics().is_empty(), "{:?}", env.apiserver_panics());
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_for_another_os_is_refused_at_admission() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    env.create(&env.pod_yaml("win", &[("app", SERVE_SH)], "  os:\n    name: windows\n")).await;
    let p = node
        .wait_for("the pod Failed", Duration::from_secs(60), || async {
            env.pod("win").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(p["status"]["reason"], "PodOSNotSupported");
    assert_eq!(p["status"]["message"], "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS");
    assert!(containers_of(&rt, "win").await.is_empty(), "nothing started");
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_host_users_false_runs_in_its_own_user_namespace_or_its_sandbox_fails() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_node(&[]);
    // The apiserver takes `procMount: Unmasked` only with `hostUsers: false`: the pod's root is not the host's.
    let yaml = env.pod_yaml("unmasked", &[("app", SERVE_SH)], "  hostUsers: false\n")
        + "    securityContext:\n      procMount: Unmasked\n";
    env.create(&yaml).await;
    if containerd_version() == "1.6" {
        // Containerd 1.6 reports no runtime handlers, so none supports user namespaces: upstream's text fails the
        // sandbox (retried at each sync), and nothing runs in the host's user namespace.
        let events = env
            .wait("the sandbox failure event", Duration::from_secs(60), || async {
                let e = env.get(&["events", "--field-selector", "reason=FailedCreatePodSandBox"]).await?;
                e["items"].as_array().filter(|i| !i.is_empty()).cloned()
            })
            .await;
        assert_eq!(
            events[0]["message"],
            "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        assert!(sandboxes_of(&rt, "unmasked").await.is_empty() && containers_of(&rt, "unmasked").await.is_empty());
        let (started, failed) = (
            node_metric("kubelet_started_user_namespaced_pods_total").await,
            node_metric("kubelet_started_user_namespaced_pods_errors_total").await,
        );
        assert!(started >= 1.0 && failed == started, "every start failed: {started} started, {failed} errors");
        node.stop_and_clean(&rt).await;
        return;
    }
    let p = env.wait_pod_running(&mut node, "unmasked").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    // The range the kubelet allocated and checkpointed, in upstream's format, is what runc mapped.
    let file = node.root.join("pods").join(&uid).join("userns");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let host_id = saved["uidMappings"][0]["hostId"].as_u64().unwrap();
    assert!(host_id >= 65536 && host_id.is_multiple_of(65536), "{saved}");
    assert_eq!(saved["uidMappings"], saved["gidMappings"]);
    assert_eq!(saved["uidMappings"][0]["length"], 65536);
    let c = &containers_of(&rt, "unmasked").await[0];
    let info = crictl("inspect", &c.id);
    let linux = &info["info"]["runtimeSpec"]["linux"];
    assert_eq!(
        linux["uidMappings"],
        serde_json::json!([{"containerID": 0, "hostID": host_id, "size": 65536}]),
        "{linux}"
    );
    assert!(linux["namespaces"].as_array().unwrap().iter().any(|n| n["type"] == "user"), "{linux}");
    assert!(linux["maskedPaths"].as_array().is_none_or(|m| m.is_empty()), "Unmasked: {linux}");
    // Inside, root is the pod's own: the host sees the container's processes under the allocated IDs.
    let pid = info["info"]["pid"].as_u64().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid_line.split_whitespace().nth(1) == Some(host_id.to_string().as_str()), "{uid_line}");
    assert_eq!(node_metric("kubelet_started_user_namespaced_pods_total").await, 1.0);
    assert_eq!(node_metric("kubelet_started_user_namespaced_pods_errors_total").await, 0.0);

    // A pod that ran to completion keeps its folder, not its range: freed once nothing of it runs.
    let done = env.pod_yaml("done", &[("app", "true")], "  hostUsers: false\n  restartPolicy: Never\n");
    env.create(&done).await;
    let p = node
        .wait_for("done Succeeded", Duration::from_secs(60), || async {
            env.pod("done").await.filter(|p| p["status"]["phase"] == "Succeeded")
        })
        .await;
    let dir = node.root.join("pods").join(p["metadata"]["uid"].as_str().unwrap());
    node.wait_for("the finished pod's range released", Duration::from_secs(60), || {
        let released = dir.is_dir() && !dir.join("userns").exists();
        async move { released.then_some(()) }
    })
    .await;
    // Deleted, the running pod's range goes with its folder.
    env.kubectl(&["delete", "pod", "unmasked", "--grace-period=1", "--wait=false"]).await;
    node.wait_for("the range released", Duration::from_secs(60), || {
        let gone = !file.exists();
        async move { gone.then_some(()) }
    })
    .await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pod_the_apiserver_would_refuse_is_refused_with_an_event_naming_file_and_field() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let ns_line = format!("metadata:\n  namespace: {}\n", env.ns);
    let good = manifest("good", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n")
        .replace("metadata:\n", &ns_line);
    let bad = good.replace("name: good", "name: bad").replace(
        "    image: localhost/busybox:1\n",
        "    image: localhost/busybox:1\n    resources:\n      limits:\n        memory: lots\n",
    );
    let mut node = env.start_node(&[("good.yaml", &good), ("bad.yaml", &bad)]);
    env.wait_pod_running(&mut node, &format!("good-{}", env.node)).await;
    let bad_file = node.manifests.join("bad.yaml").display().to_string();
    let event = node
        .wait_for("a FailedValidation event", Duration::from_secs(60), || async {
            let events = env.get(&["events", "--field-selector", "reason=FailedValidation"]).await?;
            events["items"].as_array()?.first().cloned()
        })
        .await;
    let message = event["message"].as_str().unwrap();
    assert!(message.contains(&bad_file), "{message}");
    assert!(message.contains("spec.containers[0].resources.limits[memory]: Invalid value: \"lots\""), "{message}");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["name"], format!("bad-{}", env.node));
    assert!(node.log().lines().any(|l| l.contains(&bad_file) && l.contains("resources.limits[memory]")));
    assert!(containers_of(&rt, &format!("bad-{}", env.node)).await.is_empty(), "the refused pod never ran");
    assert!(env.pod(&format!("bad-{}", env.node)).await.is_none(), "and has no mirror pod");
    node.stop_and_clean(&rt).await;
}
