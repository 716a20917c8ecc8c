//! End to end: rkubelet as a node of a cluster — the real binary and the real containerd against the project's
//! in-process test apiserver, driven with the real `kubectl` as an operator would.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::Value;
use test_apiserver::TestApiServer;
use tokio::io::AsyncBufReadExt;
use tokio::time::Instant;

struct Cluster {
    server: TestApiServer,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

async fn cluster() -> Cluster {
    let server = TestApiServer::start(Default::default()).await.expect("start the test apiserver");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("admin.conf");
    server.kubeconfig(&kubeconfig).unwrap();
    Cluster { server, kubeconfig, _dir: dir }
}

fn condition(node: &Value, kind: &str) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str().map(String::from))
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  nodeName: e2e-node\n  terminationGracePeriodSeconds: 5\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", \"trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_turns_ready_and_renews_its_lease() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let t0 = Instant::now();
    let mut node = Node::start_in_cluster(&[], &c.kubeconfig);
    let kc = c.kubeconfig.clone();
    let n = node
        .wait_for("Node e2e-node Ready", Duration::from_secs(60), || async {
            get_json(&kc, &["node", NODE]).await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
        })
        .await;
    let to_ready = t0.elapsed();
    eprintln!("FIGURE start to Node Ready: {to_ready:?}");
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    assert_eq!(n["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert_eq!(n["status"]["capacity"]["pods"], "110");
    assert!(n["status"]["nodeInfo"]["containerRuntimeVersion"].as_str().unwrap().starts_with("containerd://"));
    assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "v1.34.0");
    assert_eq!(n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], SECURE_PORT);
    for kind in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        assert_eq!(condition(&n, kind).as_deref(), Some("False"), "{kind}");
    }
    let ready = n["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap().clone();
    assert_eq!(ready["reason"], "KubeletReady");
    assert_eq!(ready["message"], "kubelet is posting ready status");
    let table = kubectl(&kc, &["get", "nodes"]).await;
    assert!(table.lines().any(|l| l.starts_with(NODE) && l.contains(" Ready ")), "{table}");

    // The lease: held by the node, owned by it, renewed every 10 s.
    // The lease may be created before the Node exists; a renewal then sets the Node as its owner, as upstream.
    let lease = node
        .wait_for("node lease owned by the Node", Duration::from_secs(30), || async {
            get_json(&kc, &["lease", "-n", "kube-node-lease", NODE])
                .await
                .filter(|l| l["metadata"]["ownerReferences"][0]["kind"] == "Node")
        })
        .await;
    assert_eq!(lease["spec"]["holderIdentity"], NODE);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Node");
    let first = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    node.wait_for("the lease renewed", Duration::from_secs(25), || async {
        get_json(&kc, &["lease", "-n", "kube-node-lease", NODE])
            .await
            .filter(|l| l["spec"]["renewTime"].as_str() != Some(first.as_str()))
    })
    .await;
    let events = kubectl(&kc, &["get", "events", "-A"]).await;
    assert!(events.contains("Starting kubelet.") && events.contains("NodeReady"), "{events}");
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_created_with_kubectl_runs_and_kubectl_delete_removes_it() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let mut node = Node::start_in_cluster(&[], &c.kubeconfig);
    let kc = c.kubeconfig.clone();
    node.wait_for("Node Ready", Duration::from_secs(60), || async {
        get_json(&kc, &["node", NODE]).await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
    })
    .await;

    let mut runs = vec![];
    for i in 0..3 {
        let manifest = c.kubeconfig.with_file_name(format!("pod{i}.yaml"));
        std::fs::write(&manifest, POD).unwrap();
        // Watch as an operator does, then create.
        let mut watch = tokio::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", kc.display()))
            .args(["get", "pods", "-w", "--request-timeout=0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
        // kubectl watches once the apiserver has seen its watch request (kubectl's own, by user agent).
        let watches = |s: &TestApiServer| {
            s.requests()
                .iter()
                .filter(|r| r.uri.contains("/pods") && r.uri.contains("watch=") && r.user_agent.starts_with("kubectl"))
                .count()
        };
        let before = watches(&c.server);
        c.server
            .wait_for_request(Duration::from_secs(10), |_| watches(&c.server) > before)
            .await
            .expect("kubectl get -w watching");
        let t0 = Instant::now();
        kubectl(&kc, &["create", "-f", manifest.to_str().unwrap()]).await;
        tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(l)) = lines.next_line().await {
                if l.starts_with("web ") && l.contains("Running") && l.contains("1/1") {
                    return;
                }
            }
            panic!("kubectl get -w ended before the pod ran");
        })
        .await
        .expect("pod Running within 60 s, seen by kubectl get -w");
        runs.push(t0.elapsed());
        let _ = watch.kill().await;

        let p = get_json(&kc, &["pod", "web"]).await.unwrap();
        assert_eq!(p["status"]["phase"], "Running");
        let cs = &p["status"]["containerStatuses"][0];
        assert!(cs["containerID"].as_str().unwrap().starts_with("containerd://"), "{cs}");
        assert_eq!(cs["ready"], true);
        assert!(cs["state"]["running"]["startedAt"].is_string());
        assert!(p["status"]["podIP"].as_str().unwrap().starts_with("10.88."));
        assert!(p["status"]["hostIP"].is_string());
        let conds = p["status"]["conditions"].as_array().unwrap();
        assert!(conds.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));

        // kubectl delete waits until the object is gone: the kubelet stops the containers, then deletes it.
        let t1 = Instant::now();
        kubectl(&kc, &["delete", "pod", "web"]).await;
        eprintln!("FIGURE delete to object gone: {:?}", t1.elapsed());
        assert!(get_json(&kc, &["pod", "web"]).await.is_none());
        node.wait_for("the pod's containers removed", Duration::from_secs(30), || async {
            containers_of(&rt, "web").await.is_empty().then_some(())
        })
        .await;
    }
    runs.sort();
    eprintln!("FIGURE kubectl create to Running seen by kubectl get -w: {runs:?} median {:?}", runs[runs.len() / 2]);
    let events = kubectl(&kc, &["get", "events"]).await;
    for want in ["Created container: app", "Started container app", "Stopping container app"] {
        assert!(events.contains(want), "missing event {want:?} in:\n{events}");
    }
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pod_is_mirrored_and_the_mirror_comes_back() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let m = manifest("static", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n");
    let mut node = Node::start_in_cluster(&[("static.yaml", &m)], &c.kubeconfig);
    let kc = c.kubeconfig.clone();
    let name = format!("static-{NODE}");
    let mirror = node
        .wait_for("mirror pod Running", Duration::from_secs(60), || async {
            get_json(&kc, &["pod", &name]).await.filter(|p| p["status"]["phase"] == "Running")
        })
        .await;
    let ann = &mirror["metadata"]["annotations"];
    assert!(ann["kubernetes.io/config.mirror"].is_string());
    assert_eq!(ann["kubernetes.io/config.mirror"], ann["kubernetes.io/config.hash"]);
    assert_eq!(mirror["metadata"]["ownerReferences"][0]["kind"], "Node");
    let static_uid = ann["kubernetes.io/config.hash"].as_str().unwrap().to_string();
    assert_ne!(mirror["metadata"]["uid"].as_str().unwrap(), static_uid, "the mirror has its own UID");
    let container = containers_of(&rt, &name).await[0].id.clone();

    kubectl(&kc, &["delete", "pod", &name, "--wait=false"]).await;
    let old_uid = mirror["metadata"]["uid"].as_str().unwrap().to_string();
    node.wait_for("the mirror pod recreated", Duration::from_secs(30), || async {
        get_json(&kc, &["pod", &name]).await.filter(|p| {
            p["metadata"]["uid"].as_str() != Some(old_uid.as_str()) && p["metadata"]["deletionTimestamp"].is_null()
        })
    })
    .await;
    assert_eq!(containers_of(&rt, &name).await[0].id, container, "deleting the mirror does not touch the static pod");

    // Removing the manifest removes the mirror pod too.
    node.remove_manifest("static.yaml");
    node.wait_for("the mirror pod removed", Duration::from_secs(30), || async {
        get_json(&kc, &["pod", &name]).await.is_none().then_some(())
    })
    .await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_outage_under_running_pods_is_survived() {
    let (_g, rt) = fresh_runtime().await;
    let mut c = cluster().await;
    let m = manifest("steady", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n");
    let mut node = Node::start_in_cluster(&[("steady.yaml", &m)], &c.kubeconfig);
    let kc = c.kubeconfig.clone();
    let manifest_path = c.kubeconfig.with_file_name("web.yaml");
    std::fs::write(&manifest_path, POD).unwrap();
    node.wait_for("Node Ready", Duration::from_secs(60), || async {
        get_json(&kc, &["node", NODE]).await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
    })
    .await;
    kubectl(&kc, &["create", "-f", manifest_path.to_str().unwrap()]).await;
    let web = node.wait_running("web").await;
    node.wait_running(&format!("steady-{NODE}")).await;

    c.server.stop().await;
    // While the apiserver is away, pods keep running and static pods can still be added.
    let late = manifest("late", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n");
    node.write_manifest("late.yaml", &late);
    node.wait_running(&format!("late-{NODE}")).await;
    node.assert_alive();
    c.server.restart().await.expect("restart the test apiserver");

    // When it returns, the mirror pod of the new static pod, the lease and the node status catch up.
    let late_name = format!("late-{NODE}");
    node.wait_for("mirror of the static pod added during the outage", Duration::from_secs(60), || async {
        get_json(&kc, &["pod", &late_name]).await.filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
    let after = node.wait_running("web").await;
    assert_eq!(
        container_status(&after, "app").unwrap()["containerID"],
        container_status(&web, "app").unwrap()["containerID"],
        "the apiserver pod kept running through the outage"
    );
    let p = get_json(&kc, &["pod", "web"]).await.unwrap();
    assert_eq!(p["status"]["phase"], "Running");
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_bootstrap_through_an_approved_csr() {
    use test_apiserver::{Options, TlsOptions};
    let (_g, rt) = fresh_runtime().await;
    let token = "abcdef.0123456789abcdef";
    let server = TestApiServer::start(Options {
        tls: Some(TlsOptions::default()),
        anonymous: None,
        bootstrap_tokens: vec![token.into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bootstrap = dir.path().join("bootstrap-kubelet.conf");
    let admin = dir.path().join("admin.conf");
    let kubelet_kc = dir.path().join("kubelet.conf");
    let cert_dir = dir.path().join("pki");
    server.bootstrap_kubeconfig(&bootstrap, token).unwrap();
    server.admin_kubeconfig(&admin).unwrap();

    let mut node = Node::start_full(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap(),
        vec![
            format!("--bootstrap-kubeconfig={}", bootstrap.display()),
            format!("--kubeconfig={}", kubelet_kc.display()),
            format!("--cert-dir={}", cert_dir.display()),
        ],
    );
    // The kubelet submits its CSR and says how to approve it.
    let log = node.log_path();
    let line = node
        .wait_for("the CSR submitted and logged", Duration::from_secs(60), || async {
            std::fs::read_to_string(&log)
                .ok()?
                .lines()
                .find(|l| l.contains("kubectl certificate approve"))
                .map(String::from)
        })
        .await;
    let name =
        line.rsplit("kubectl certificate approve ").next().unwrap().split_whitespace().next().unwrap().to_string();
    let csr = get_json(&admin, &["csr", &name]).await.expect("the CSR exists");
    assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kube-apiserver-client-kubelet");
    assert_eq!(csr["spec"]["username"], "system:bootstrap:abcdef");
    let usages: Vec<&str> = csr["spec"]["usages"].as_array().unwrap().iter().filter_map(|u| u.as_str()).collect();
    assert_eq!(usages, ["digital signature", "client auth"]);
    kubectl(&admin, &["certificate", "approve", &name]).await;

    let n = node
        .wait_for("Node Ready with the issued certificate", Duration::from_secs(60), || async {
            get_json(&admin, &["node", NODE]).await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
        })
        .await;
    assert_eq!(n["metadata"]["name"], NODE);
    let current = cert_dir.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a link");
    assert!(target.file_name().unwrap().to_string_lossy().starts_with("kubelet-client-20"));
    let kc = std::fs::read_to_string(&kubelet_kc).unwrap();
    assert!(kc.contains(&format!("client-certificate: {}", current.display())), "{kc}");
    assert!(
        server.requests().iter().any(|r| r.user == format!("system:node:{NODE}")),
        "the kubelet authenticates with its new certificate"
    );

    // A restart with a valid certificate does not bootstrap again.
    let csrs_before = server.list("certificates.k8s.io/v1", "certificatesigningrequests", None).unwrap().len();
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    node.wait_for("Node still Ready after restart", Duration::from_secs(30), || async {
        get_json(&admin, &["node", NODE]).await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
    })
    .await;
    assert_eq!(server.list("certificates.k8s.io/v1", "certificatesigningrequests", None).unwrap().len(), csrs_before);
    assert!(node.log().contains("no bootstrap needed"));
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_labels_and_kubectl_describe() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let mut node = Node::start_full(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap(),
        vec![format!("--kubeconfig={}", c.kubeconfig.display()), "--node-labels=role=edge,zone=lab".into()],
    );
    let kc = c.kubeconfig.clone();
    let n = node
        .wait_for("Node Ready", Duration::from_secs(60), || async {
            get_json(&kc, &["node", NODE]).await.filter(|n| condition(n, "Ready").as_deref() == Some("True"))
        })
        .await;
    assert_eq!(n["metadata"]["labels"]["role"], "edge", "--node-labels are applied at registration");
    let manifest = c.kubeconfig.with_file_name("web.yaml");
    std::fs::write(&manifest, POD).unwrap();
    kubectl(&kc, &["create", "-f", manifest.to_str().unwrap()]).await;
    let before = node.wait_running("web").await;

    // The apiserver ends the watch (as its timeout does): the kubelet watches again and sees new pods.
    c.server.close_watches();
    let second = POD.replace("name: web", "name: web2");
    std::fs::write(&manifest, second).unwrap();
    kubectl(&kc, &["create", "-f", manifest.to_str().unwrap()]).await;
    node.wait_running("web2").await;
    let after = node.wait_running("web").await;
    assert_eq!(
        container_status(&after, "app").unwrap()["containerID"],
        container_status(&before, "app").unwrap()["containerID"],
        "the relist did not disturb the running pod"
    );
    let described = kubectl(&kc, &["describe", "pod", "web"]).await;
    assert!(
        described.contains("Started container app") && described.contains("Status:") && described.contains("Running"),
        "{described}"
    );
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_period_shortened_during_termination_takes_effect() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let mut node = Node::start_in_cluster(&[], &c.kubeconfig);
    let kc = c.kubeconfig.clone();
    // `sleep` as PID 1 ignores SIGTERM: only the end of the grace period stops it.
    let stubborn = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stubborn\nspec:\n  nodeName: e2e-node\n  terminationGracePeriodSeconds: 120\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    command: [\"sleep\", \"3600\"]\n";
    let manifest = c.kubeconfig.with_file_name("stubborn.yaml");
    std::fs::write(&manifest, stubborn).unwrap();
    kubectl(&kc, &["create", "-f", manifest.to_str().unwrap()]).await;
    node.wait_for("stubborn Running", Duration::from_secs(60), || async {
        get_json(&kc, &["pod", "stubborn"]).await.filter(|p| p["status"]["phase"] == "Running")
    })
    .await;
    kubectl(&kc, &["delete", "pod", "stubborn", "--wait=false"]).await;
    let log = node.log_path();
    node.wait_for("the kubelet stopping the pod", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("killing container with a grace period").then_some(())
    })
    .await;
    // 120 s are granted; a second delete asks for 2.
    let t0 = Instant::now();
    kubectl(&kc, &["delete", "pod", "stubborn", "--grace-period=2", "--wait=false"]).await;
    node.wait_for("stubborn gone", Duration::from_secs(60), || async {
        get_json(&kc, &["pod", "stubborn"]).await.is_none().then_some(())
    })
    .await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(20), "the shortened grace period was used: {took:?}");
    assert!(node.log().contains("grace period shortened during termination"));
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_and_secret_references_and_service_links_reach_the_environment() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let mut node = Node::start_in_cluster(&[], &c.kubeconfig);
    let kc = c.kubeconfig.clone();
    let objects = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\nstringData:\n  password: s3cr3t\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: my-db\nspec:\n  clusterIP: 10.96.0.50\n  ports:\n  - name: pg\n    port: 5432\n";
    let pod = r#"apiVersion: v1
kind: Pod
metadata:
  name: consumer
spec:
  nodeName: e2e-node
  restartPolicy: Never
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "env | sort"]
    envFrom:
    - prefix: CFG_
      configMapRef:
        name: settings
    env:
    - name: MODE
      valueFrom:
        configMapKeyRef:
          name: settings
          key: mode
    - name: PASSWORD
      valueFrom:
        secretKeyRef:
          name: creds
          key: password
    - name: MAYBE
      valueFrom:
        configMapKeyRef:
          name: absent
          key: x
          optional: true
"#;
    let dir = c.kubeconfig.parent().unwrap().to_path_buf();
    std::fs::write(dir.join("objects.yaml"), objects).unwrap();
    std::fs::write(dir.join("pod.yaml"), pod).unwrap();
    kubectl(&kc, &["create", "-f", dir.join("objects.yaml").to_str().unwrap()]).await;
    kubectl(&kc, &["create", "-f", dir.join("pod.yaml").to_str().unwrap()]).await;
    // The ConfigMap does not exist yet: upstream's reason and message, and the pod keeps being retried.
    let p = node
        .wait_for("CreateContainerConfigError", Duration::from_secs(60), || async {
            get_json(&kc, &["pod", "consumer"]).await.filter(|p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
            })
        })
        .await;
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["waiting"]["message"], "configmap \"settings\" not found");
    kubectl(&kc, &["create", "configmap", "settings", "--from-literal=mode=fast", "--from-literal=level=3"]).await;
    let p = node
        .wait_for("consumer Succeeded", Duration::from_secs(60), || async {
            get_json(&kc, &["pod", "consumer"]).await.filter(|p| p["status"]["phase"] == "Succeeded")
        })
        .await;
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let log = std::fs::read_to_string(node.logs.join(format!("default_consumer_{uid}/app/0.log"))).unwrap();
    for want in [
        "MODE=fast",
        "PASSWORD=s3cr3t",
        "CFG_mode=fast",
        "CFG_level=3",
        "MY_DB_SERVICE_HOST=10.96.0.50",
        "MY_DB_SERVICE_PORT=5432",
        "MY_DB_SERVICE_PORT_PG=5432",
        "MY_DB_PORT=tcp://10.96.0.50:5432",
        "MY_DB_PORT_5432_TCP_ADDR=10.96.0.50",
    ] {
        assert!(log.contains(&format!(" {want}\n")), "missing {want} in\n{log}");
    }
    assert!(!log.contains("MAYBE="), "an optional reference to a missing ConfigMap is skipped");
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_secret_and_projected_volumes_are_mounted_and_configmap_updates_reach_the_pod() {
    let (_g, rt) = fresh_runtime().await;
    let c = cluster().await;
    let mut node = Node::start_full(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap() + "syncFrequency: 5s\n",
        vec![format!("--kubeconfig={}", c.kubeconfig.display())],
    );
    let kc = c.kubeconfig.clone();
    kubectl(&kc, &["create", "configmap", "app-config", "--from-literal=mode=fast", "--from-literal=level=3"]).await;
    kubectl(&kc, &["create", "secret", "generic", "app-secret", "--from-literal=password=s3cr3t"]).await;
    let pod = r#"apiVersion: v1
kind: Pod
metadata:
  name: mounted
  labels:
    tier: db
spec:
  nodeName: e2e-node
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    volumeMounts:
    - name: cfg
      mountPath: /cfg
    - name: sec
      mountPath: /sec
    - name: all
      mountPath: /all
  volumes:
  - name: cfg
    configMap:
      name: app-config
  - name: sec
    secret:
      secretName: app-secret
      defaultMode: 256
  - name: all
    projected:
      sources:
      - configMap:
          name: app-config
          items:
          - key: level
            path: conf/level
      - secret:
          name: app-secret
      - downwardAPI:
          items:
          - path: labels
            fieldRef:
              fieldPath: metadata.labels
"#;
    let dir = c.kubeconfig.parent().unwrap().to_path_buf();
    std::fs::write(dir.join("mounted.yaml"), pod).unwrap();
    kubectl(&kc, &["create", "-f", dir.join("mounted.yaml").to_str().unwrap()]).await;
    node.wait_running("mounted").await;
    let id = containers_of(&rt, "mounted").await.into_iter().find(|c| c.state == 1).expect("running").id;
    let sh = |cmd: &str| {
        let rt = &rt;
        let id = id.clone();
        let cmd = cmd.to_string();
        async move {
            let out = kubelet_cri::RuntimeService::exec_sync(
                rt,
                &id,
                vec!["sh".into(), "-c".into(), cmd],
                Duration::from_secs(10),
            )
            .await
            .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
    };
    assert_eq!(sh("cat /cfg/mode; echo; cat /cfg/level").await, "fast\n3");
    assert_eq!(sh("cat /sec/password; echo; stat -L -c %a /sec/password").await, "s3cr3t\n400");
    assert_eq!(sh("grep -c ' /sec tmpfs ' /proc/mounts").await, "1", "secrets live on tmpfs");
    assert_eq!(sh("cat /all/conf/level /all/password; echo; cat /all/labels").await, "3s3cr3t\ntier=\"db\"");
    assert_eq!(sh("touch /cfg/new 2>/dev/null && echo rw || echo ro").await, "ro");

    // An update of the ConfigMap reaches the running container, in one atomic step.
    let updated =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-config\ndata:\n  mode: slow\n  level: \"3\"\n";
    std::fs::write(dir.join("cm.yaml"), updated).unwrap();
    kubectl(&kc, &["replace", "-f", dir.join("cm.yaml").to_str().unwrap()]).await;
    let t0 = tokio::time::Instant::now();
    loop {
        if sh("cat /cfg/mode").await == "slow" {
            break;
        }
        node.assert_alive();
        assert!(t0.elapsed() < Duration::from_secs(30), "the update did not reach the pod within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("FIGURE configmap update reached the container after {:?}", t0.elapsed());
    // It came through a watch of that one object (the default Watch strategy), not a GET at every sync.
    let kubelet: Vec<_> =
        c.server.requests().into_iter().filter(|r| !r.user_agent.starts_with("kubectl")).map(|r| r.uri).collect();
    assert!(
        kubelet.iter().any(|u| u.starts_with("/api/v1/namespaces/default/configmaps?")
            && u.contains("watch=true")
            && u.contains("metadata.name%3Dapp-config")),
        "a watch of the ConfigMap: {kubelet:#?}"
    );
    assert!(!kubelet.iter().any(|u| u.starts_with("/api/v1/namespaces/default/configmaps/app-config")), "no GET");

    // A label change reaches the downward API file.
    kubectl(&kc, &["label", "pod", "mounted", "tier=cache", "--overwrite"]).await;
    let t0 = tokio::time::Instant::now();
    while sh("cat /all/labels").await != "tier=\"cache\"" {
        node.assert_alive();
        assert!(t0.elapsed() < Duration::from_secs(30), "the label change did not reach the pod within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_are_projected_bound_and_refreshed() {
    let (_g, rt) = fresh_runtime().await;
    // Tokens live 20 s at most here, so the kubelet refreshes them within the test (after 80 % of 20 s, minus up
    // to 10 s of jitter), at a sync every 5 s.
    let server = TestApiServer::start(test_apiserver::Options {
        max_token_expiration: Some(Duration::from_secs(20)),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("admin.conf");
    server.kubeconfig(&kc).unwrap();
    let mut node = Node::start_full(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap() + "syncFrequency: 5s\n",
        vec![format!("--kubeconfig={}", kc.display())],
    );
    // An ordinary pod: the apiserver's ServiceAccount admission adds the kube-api-access volume. A second volume
    // asks for a token for another audience, read by a non-root user.
    let pod = r#"apiVersion: v1
kind: Pod
metadata:
  name: sa
spec:
  nodeName: e2e-node
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1234
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    volumeMounts:
    - name: vault
      mountPath: /vault
  volumes:
  - name: vault
    projected:
      sources:
      - serviceAccountToken:
          audience: vault
          expirationSeconds: 600
          path: vault-token
"#;
    std::fs::write(dir.path().join("sa.yaml"), pod).unwrap();
    kubectl(&kc, &["create", "-f", dir.path().join("sa.yaml").to_str().unwrap()]).await;
    let running = node.wait_running("sa").await;
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let vol = running["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| v["name"].as_str().filter(|n| n.starts_with("kube-api-access-")))
        .expect("the admission plugin added the volume")
        .to_string();
    let id = containers_of(&rt, "sa").await.into_iter().find(|c| c.state == 1).expect("running").id;
    let sh = |cmd: String| {
        let (rt, id) = (&rt, id.clone());
        async move {
            let argv = vec!["sh".into(), "-c".into(), cmd];
            let out = kubelet_cri::RuntimeService::exec_sync(rt, &id, argv, Duration::from_secs(10)).await.unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        }
    };
    let sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(sh(format!("cat {sa_dir}/namespace")).await, "default");
    assert_eq!(sh(format!("cat {sa_dir}/ca.crt")).await, server.root_ca_pem().trim());
    let token = sh(format!("cat {sa_dir}/token")).await;
    let claims = server.verify_token(&token).expect("the token is a JWT signed by the apiserver");
    assert_eq!(claims["aud"], serde_json::json!(["https://kubernetes.default.svc.cluster.local"]));
    assert_eq!(claims["sub"], "system:serviceaccount:default:default");
    assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str(), "bound to the pod");
    let vault = sh("cat /vault/vault-token".into()).await;
    assert_eq!(server.verify_token(&vault).expect("signed")["aud"], serde_json::json!(["vault"]));
    // With a pod-level runAsUser, the token is the user's own, 0600.
    assert_eq!(sh("stat -L -c '%u %a' /vault/vault-token".into()).await, "1234 600");
    assert_eq!(sh(format!("touch {sa_dir}/x 2>/dev/null && echo rw || echo ro")).await, "ro");

    // The token is refreshed before it expires, and the new one is valid.
    let t0 = Instant::now();
    let fresh = loop {
        let now = sh(format!("cat {sa_dir}/token")).await;
        if now != token {
            break now;
        }
        node.assert_alive();
        assert!(t0.elapsed() < Duration::from_secs(40), "the token was not refreshed within 40 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("FIGURE token refreshed {:?} after the first check", t0.elapsed());
    let claims2 = server.verify_token(&fresh).expect("the refreshed token is signed");
    assert!(claims2["exp"].as_i64() > claims["exp"].as_i64());
    assert!(claims2["exp"].as_i64().unwrap() > test_apiserver::util::now_secs(), "not expired");

    // After deletion the volumes, their tmpfs mounts and the pod directory are gone.
    kubectl(&kc, &["delete", "pod", "sa", "--wait=false"]).await;
    let pod_dir = node.root.join("pods").join(&uid);
    node.wait_for("the pod's directory removed", Duration::from_secs(60), || async {
        (!pod_dir.exists()).then_some(())
    })
    .await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&uid), "no mount of the pod remains");
    assert!(!mounts.contains(&vol));
    node.stop_and_clean(&rt).await;
}
