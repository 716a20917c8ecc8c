//! End to end: the kubelet API as the real cluster uses it — authentication by the apiserver's TokenReviews and
//! client certificates of the cluster CA, authorization by SubjectAccessReviews answered from RBAC, and
//! `kubectl logs`, `exec`, `attach` and `port-forward` through the real kube-apiserver, which dials the node by its
//! Hostname address (resolved to 127.0.0.1 for it) with its kubelet-client certificate.

mod common;
#[path = "common/cri_proxy.rs"]
#[allow(dead_code)]
mod cri_proxy;
#[path = "common/otlp.rs"]
mod otlp;

use std::time::Duration;

use common::cluster::TestEnv;
use common::kubelet_api::KubeletApi;
use common::prometheus::{PrometheusServer, parse_prometheus};
use common::*;
use test_cluster::CertPair;
use tokio::io::AsyncBufReadExt;

fn pair(p: CertPair) -> (String, String) {
    (p.cert, p.key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_and_authorization_are_decided_by_the_apiserver() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_kubeadm_node().await;
    env.wait_node_ready(&mut node).await;
    let ns = env.ns.clone();
    // A service account without rights, one bound to cluster-admin, and a user with a client certificate who may
    // read metrics and stats (cluster-scoped RBAC objects named after the test).
    let rbac = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: viewer\n---\napiVersion: v1\nkind: ServiceAccount\n\
         metadata:\n  name: ops\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
         name: {ns}-ops\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n\
         subjects:\n- kind: ServiceAccount\n  name: ops\n  namespace: {ns}\n---\napiVersion: rbac.authorization.k8s.io/v1\n\
         kind: ClusterRole\nmetadata:\n  name: {ns}-metrics\nrules:\n- apiGroups: [\"\"]\n  resources: [nodes/metrics, \
         nodes/stats]\n  verbs: [get]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata:\n  name: {ns}-metrics\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  \
         name: {ns}-metrics\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: User\n  name: metrics-reader-{ns}\n"
    );
    env.create(&rbac).await;
    let viewer_token = env.kubectl(&["create", "token", "viewer"]).await.trim().to_string();
    let ops_token = env.kubectl(&["create", "token", "ops"]).await.trim().to_string();
    let api = KubeletApi::new(secure_port());

    // Authentication.
    assert_eq!(api.get("/pods").await, (401, "Unauthorized".into()), "no credentials");
    assert_eq!(api.with_token("nope.nope").get("/pods").await.0, 401, "a token the apiserver refuses");
    let foreign_dir = tempfile::tempdir().unwrap();
    let foreign =
        test_cluster::Pki::ensure(foreign_dir.path()).unwrap().client("admin", Some("system:masters")).unwrap();
    assert_eq!(api.with_cert(pair(foreign)).get("/pods").await.0, 401, "a certificate from another CA");

    // Authorization, per subresource and verb, from RBAC.
    let viewer = api.with_token(&viewer_token);
    assert_eq!(
        viewer.get("/pods").await,
        (
            403,
            format!(
                "Forbidden (user=system:serviceaccount:{ns}:viewer, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
            )
        )
    );
    let reader_cert = env.cp.pki.client(&format!("metrics-reader-{ns}"), None).unwrap();
    let reader = api.with_cert(pair(reader_cert));
    let (code, text) = reader.get("/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains(&format!("kubelet_node_name{{node=\"{}\"}} 1", env.node)));
    assert_eq!(reader.get("/stats/summary").await.0, 200);
    assert_eq!(
        reader.request("POST", "/exec/default/x/y?command=id&output=1").await,
        (403, format!("Forbidden (user=metrics-reader-{ns}, verb=create, resource=nodes, subresource(s)=[proxy])\n"))
    );
    assert_eq!(reader.get("/configz").await.0, 403);
    let admin = api.with_cert(pair(env.cp.pki.client("admin", Some("system:masters")).unwrap()));
    let (code, body) = admin.get("/configz").await;
    assert_eq!(code, 200);
    let cfg: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cfg["kubeletconfig"]["authorization"]["mode"], "Webhook");
    assert_eq!(cfg["kubeletconfig"]["port"], secure_port());
    assert!(cfg["kubeletconfig"].get("kind").is_none(), "no TypeMeta, as upstream");
    assert_eq!(api.with_token(&ops_token).get("/runningpods/").await.0, 200);

    // The decisions came from TokenReviews and SubjectAccessReviews the node made, and are cached.
    let reviews = |kind: &str| {
        env.node_requests()
            .iter()
            .filter(|e| e["stage"] == "ResponseComplete" && e["verb"] == "create" && e["objectRef"]["resource"] == kind)
            .count()
    };
    assert!(reviews("tokenreviews") >= 3, "viewer, ops and the refused token were reviewed");
    let sars = reviews("subjectaccessreviews");
    assert!(sars >= 4, "{sars}");
    viewer.get("/pods").await;
    reader.get("/metrics").await;
    assert_eq!(reviews("subjectaccessreviews"), sars, "answers are cached (5m allowed, 30s denied)");
    kubectl(&env.admin, &["delete", "clusterrolebinding", &format!("{ns}-ops"), &format!("{ns}-metrics")]).await;
    kubectl(&env.admin, &["delete", "clusterrole", &format!("{ns}-metrics")]).await;
    node.stop_and_clean(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_attach_and_port_forward_through_the_apiserver() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_kubeadm_node().await;
    let yaml = env.pod_yaml(
        "web",
        &[
            ("app", "echo line-1; echo line-2; echo line-3; trap 'exit 0' TERM; while true; do sleep 0.2; done"),
            ("http", "mkdir -p /www && echo served-by-httpd > /www/index.html && exec httpd -f -p 8080 -h /www"),
            ("ticker", "i=0; trap 'exit 0' TERM; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done"),
        ],
        "  automountServiceAccountToken: false\n",
    );
    env.create(&yaml).await;
    env.wait_pod_running(&mut node, "web").await;

    // kubectl logs: the apiserver calls /containerLogs with the options.
    node.wait_for("three log lines", Duration::from_secs(20), || async {
        let (_, out, _) = env.kubectl_output(&["logs", "web", "-c", "app"]).await;
        (out == "line-1\nline-2\nline-3\n").then_some(())
    })
    .await;
    assert_eq!(env.kubectl(&["logs", "web", "-c", "app", "--tail=1"]).await, "line-3\n");
    assert_eq!(env.kubectl(&["logs", "web", "-c", "app", "--limit-bytes=9"]).await, "line-1\nli");
    let stamped = env.kubectl(&["logs", "web", "-c", "app", "--timestamps", "--tail=1"]).await;
    assert!(stamped.ends_with("Z line-3\n"), "{stamped}");
    // Without -c kubectl picks the first container itself.
    let (_, out, err) = env.kubectl_output(&["logs", "web"]).await;
    assert_eq!(out, "line-1\nline-2\nline-3\n");
    assert!(err.contains("Defaulted container \"app\" out of: app, http, ticker"), "{err}");
    let (ok, _, err) = env.kubectl_output(&["logs", "web", "-c", "app", "--previous"]).await;
    assert!(!ok && err.contains("previous terminated container \"app\" in pod \"web\" not found"), "{err}");

    // The log over a WebSocket (`binary.k8s.io`), as the conformance test reads it: the apiserver wraps the
    // kubelet's plain answer.
    let admin_api = KubeletApi::new(test_cluster::APISERVER_PORT)
        .with_cert(pair(env.cp.pki.client("ws-admin", Some("system:masters")).unwrap()));
    let path = format!("/api/v1/namespaces/{}/pods/web/log?container=app", env.ns);
    let mut ws = admin_api.websocket(&path, "binary.k8s.io").await.expect("a WebSocket to the log");
    let mut got = Vec::new();
    while let Some(m) = tokio::time::timeout(Duration::from_secs(20), ws.recv_message()).await.expect("the log ends") {
        got.extend_from_slice(&m);
    }
    assert_eq!(String::from_utf8_lossy(&got), "line-1\nline-2\nline-3\n");

    // kubectl exec (WebSocket to the apiserver, which speaks SPDY to the kubelet).
    let (ok, out, err) = env
        .kubectl_output(&["exec", "web", "-c", "app", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"])
        .await;
    assert!(!ok);
    assert_eq!(out, "to-out\n");
    assert!(err.contains("to-err") && err.contains("exit code 3"), "{err}");
    let mut cat = env.spawn_kubectl(&["exec", "-i", "web", "-c", "app", "--", "cat"], true);
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = cat.stdin.take().unwrap();
        stdin.write_all(b"through stdin\n").await.unwrap();
    }
    let out =
        tokio::time::timeout(Duration::from_secs(20), cat.wait_with_output()).await.expect("cat ends at EOF").unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through stdin\n");
    assert!(out.status.success());

    // kubectl attach to the ticker's output.
    let mut attach = env.spawn_kubectl(&["attach", "web", "-c", "ticker"], false);
    let mut lines = tokio::io::BufReader::new(attach.stdout.take().unwrap()).lines();
    let tick = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match lines.next_line().await {
                Ok(Some(l)) if l.starts_with("tick-") => return l,
                Ok(Some(_)) => continue,
                other => panic!("attach ended: {other:?}"),
            }
        }
    })
    .await
    .expect("a tick through attach");
    assert!(tick["tick-".len()..].parse::<u32>().is_ok(), "{tick}");
    let _ = attach.kill().await;

    // kubectl port-forward to busybox httpd.
    let mut pf = env.spawn_kubectl(&["port-forward", "pod/web", ":8080", "--address=127.0.0.1"], false);
    let mut lines = tokio::io::BufReader::new(pf.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(20), lines.read_line(&mut first))
        .await
        .expect("kubectl port-forward reports its port")
        .unwrap();
    // "Forwarding from 127.0.0.1:PORT -> 8080"
    let port: u16 = first
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    let reply = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut buf = String::new();
        tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut buf))
            .await
            .expect("a reply in time")
            .unwrap();
        buf
    };
    assert!(reply.contains("200 OK") && reply.contains("served-by-httpd"), "{reply}");
    let _ = pf.kill().await;

    // The apiserver called the kubelet as kube-apiserver-kubelet-client, which the kubelet had authorized.
    assert!(env.node_requests().iter().any(|e| e["objectRef"]["resource"] == "subjectaccessreviews"));

    // The pod-start SLI of an apiserver pod, from its creation.
    let api =
        KubeletApi::new(secure_port()).with_cert(pair(env.cp.pki.client("admin", Some("system:masters")).unwrap()));
    let fams = parse_prometheus(&api.get("/metrics").await.1);
    for name in ["kubelet_pod_start_sli_duration_seconds_count", "kubelet_pod_start_total_duration_seconds_count"] {
        let n = fams.get(name).and_then(|f| f.1.first()).map(|s| s.1);
        assert!(n.is_some_and(|n| n >= 1.0), "{name}: {n:?}");
    }
    node.stop_and_clean(&rt).await;
}

/// A container's working set as its cgroup files say it (v1 `memory.usage_in_bytes` less `total_inactive_file`, v2
/// `memory.current` less `inactive_file`), and its CPU time in seconds, `id` being the cgroup.
fn cgroup_figures(id: &str) -> (f64, f64) {
    let read = |p: String| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
    let keyed = |text: &str, key: &str| {
        text.lines().find_map(|l| l.strip_prefix(&format!("{key} "))).unwrap().trim().parse::<f64>().unwrap()
    };
    if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let d = format!("/sys/fs/cgroup{id}");
        let usage: f64 = read(format!("{d}/memory.current")).trim().parse().unwrap();
        let ws = usage - keyed(&read(format!("{d}/memory.stat")), "inactive_file");
        (ws, keyed(&read(format!("{d}/cpu.stat")), "usage_usec") / 1e6)
    } else {
        let m = format!("/sys/fs/cgroup/memory{id}");
        let usage: f64 = read(format!("{m}/memory.usage_in_bytes")).trim().parse().unwrap();
        let ws = usage - keyed(&read(format!("{m}/memory.stat")), "total_inactive_file");
        let cpu: f64 = read(format!("/sys/fs/cgroup/cpuacct{id}/cpuacct.usage")).trim().parse().unwrap();
        (ws, cpu / 1e9)
    }
}

/// Prometheus (Debian's, as kube-prometheus configures its kubelet job) scrapes `/metrics/cadvisor` through the
/// authenticated port with a service account token allowed `nodes/metrics`, and the PromQL of the
/// kubernetes-mixin "Kubernetes / Compute Resources / Pod" dashboard (CPU usage, throttling, memory, network)
/// returns the pod's figures, equal to its cgroup files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_cadvisor_with_a_token_and_the_pod_dashboard_queries_match_the_cgroup_files() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_kubeadm_node().await;
    env.wait_node_ready(&mut node).await;
    let ns = env.ns.clone();
    let rbac = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: prometheus\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {ns}-prometheus\nrules:\n\
         - apiGroups: [\"\"]\n  resources: [nodes/metrics]\n  verbs: [get]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {ns}-prometheus\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {ns}-prometheus\nsubjects:\n\
         - kind: ServiceAccount\n  name: prometheus\n  namespace: {ns}\n"
    );
    env.create(&rbac).await;
    let token = env.kubectl(&["create", "token", "prometheus"]).await.trim().to_string();
    // A container spinning under a 100m limit: CPU used, throttled in most periods.
    let busy = env
        .pod_yaml("busy", &[("spin", "while :; do :; done")], "")
        .replace("    command:", "    resources:\n      limits: {cpu: 100m, memory: 64Mi}\n    command:");
    env.create(&busy).await;
    env.wait_pod_running(&mut node, "busy").await;

    let job = format!(
        "- job_name: kubelet\n  scheme: https\n  metrics_path: /metrics/cadvisor\n  bearer_token_file: {{dir}}/token\n  \
         tls_config:\n    insecure_skip_verify: true\n  static_configs:\n  - targets: ['127.0.0.1:{}']\n  \
         relabel_configs:\n  - source_labels: [__metrics_path__]\n    target_label: metrics_path\n",
        secure_port()
    );
    let prom = PrometheusServer::start(&job, &[("token", &token)]).await;
    let sel = format!("job=\"kubelet\", metrics_path=\"/metrics/cadvisor\", cluster=\"\", namespace=\"{ns}\"");
    // The recording rule behind the dashboard's CPU panels (node_namespace_pod_container:...:sum_rate5m), without
    // its join on kube-state-metrics' kube_pod_info, over a window that fits the test.
    let cpu = format!(
        "sum by (cluster, namespace, pod, container) (rate(container_cpu_usage_seconds_total{{{sel}, pod=\"busy\", image!=\"\"}}[10s]))"
    );
    let rows = node
        .wait_for("a CPU rate over Prometheus's scrapes", Duration::from_secs(90), || async {
            let up = prom.query("up{job=\"kubelet\"}").await;
            assert!(up.iter().all(|(_, v)| *v == 1.0) || up.is_empty(), "the scrape failed: {up:?}\n{}", prom.log());
            // rate() spreads what it sees over the whole window: wait until the window is full of scrapes.
            let n = format!(
                "count_over_time(container_cpu_usage_seconds_total{{{sel}, pod=\"busy\", container=\"spin\"}}[10s])"
            );
            if prom.query(&n).await.first().is_none_or(|(_, n)| *n < 9.0) {
                return None;
            }
            let rows = prom.query(&cpu).await;
            rows.iter().any(|(l, _)| l["container"] == "spin").then_some(rows)
        })
        .await;
    let spin_cpu = rows.iter().find(|(l, _)| l["container"] == "spin").unwrap().1;
    let samples = format!("container_cpu_usage_seconds_total{{{sel}, pod=\"busy\", container=\"spin\"}}[10s]");
    assert!(
        (0.03..=0.12).contains(&spin_cpu),
        "a container spinning under 100m uses about 0.1 CPU: {spin_cpu}; samples: {}",
        prom.query_text(&samples).await
    );

    let throttling = format!(
        "sum(increase(container_cpu_cfs_throttled_periods_total{{{sel}, pod=\"busy\", container!=\"\"}}[10s])) by (container) \
         /sum(increase(container_cpu_cfs_periods_total{{{sel}, pod=\"busy\", container!=\"\"}}[10s])) by (container)"
    );
    let t = prom.query(&throttling).await;
    assert_eq!(t.len(), 1, "{t:?}");
    assert!(t[0].1 > 0.3, "a spinning container is throttled in most periods: {t:?}");

    // Memory: the dashboard's panels, and the working set equal to the cgroup files.
    for (family, extra) in [
        ("container_memory_working_set_bytes", "container!=\"\", image!=\"\""),
        ("container_memory_rss", "container != \"\", container != \"POD\""),
        ("container_memory_cache", "container != \"\", container != \"POD\""),
        ("container_memory_swap", "container != \"\", container != \"POD\""),
    ] {
        let q = format!(
            "sum(max by (cluster, namespace, pod, container)({family}{{{sel}, pod=\"busy\", {extra}}})) by (container)"
        );
        let r = prom.query(&q).await;
        assert_eq!(r.len(), 1, "{family}: {r:?}");
        assert_eq!(r[0].0["container"], "spin");
    }
    let raw =
        prom.query(&format!("container_memory_working_set_bytes{{{sel}, pod=\"busy\", container=\"spin\"}}")).await;
    let id = raw[0].0["id"].as_str().unwrap().to_string();
    let (ws_file, _) = cgroup_figures(&id);
    assert!((raw[0].1 - ws_file).abs() <= 512.0 * 1024.0, "working set {} vs the cgroup's {ws_file}", raw[0].1);
    let usage =
        prom.query(&format!("container_cpu_usage_seconds_total{{{sel}, pod=\"busy\", container=\"spin\"}}")).await;
    let (_, cpu_file) = cgroup_figures(&id);
    // Read after the sample: ahead of it by what the container used since (at most 0.1 CPU for a few seconds).
    assert!(cpu_file >= usage[0].1 && cpu_file - usage[0].1 < 1.0, "cpu {} vs the cgroup's {cpu_file}", usage[0].1);

    // Network: the pod's sandbox carries the pod's interface.
    for family in [
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
        "container_network_receive_packets_total",
        "container_network_transmit_packets_total",
        "container_network_receive_packets_dropped_total",
        "container_network_transmit_packets_dropped_total",
    ] {
        let q = format!("sum(rate({family}{{{sel}, pod=~\"busy\"}}[10s])) by (pod)");
        let r = prom.query(&q).await;
        assert_eq!(r.len(), 1, "{family}: {r:?}");
        assert_eq!(r[0].0["pod"], "busy");
    }
    node.stop_and_clean(&rt).await;
}

/// `rkubelet explain` names the step each of five broken pods is blocked at, from a running rkubelet joined to the
/// real cluster: an image that does not exist, a configMap volume whose configMap does not exist, a readiness probe
/// that fails, a container that crashes, and a static pod asking for more CPU than the node has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rkubelet_explain_names_where_five_broken_pods_are_blocked() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let greedy = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: greedy\n  namespace: default\nspec:\n  containers:\n  \
                  - name: app\n    image: localhost/busybox:1\n    command: [\"sleep\", \"3600\"]\n    resources:\n      \
                  requests: {cpu: \"100\"}\n";
    let anonymous = |n: &Node| {
        std::fs::read_to_string(&n.config)
            .unwrap()
            .replace("anonymous:\n    enabled: false", "anonymous:\n    enabled: true")
    };
    let mut node = env.start_node_with(&[("greedy.yaml", greedy)], anonymous, vec![]);
    env.wait_node_ready(&mut node).await;
    let ns = env.ns.clone();
    let bad_image = env
        .pod_yaml("badimage", &[("app", "sleep 3600")], "")
        .replace("localhost/busybox:1", "localhost/nonexistent:1");
    let no_cm = env.pod_yaml(
        "nocm",
        &[("app", "sleep 3600")],
        "  volumes:\n  - name: cfg\n    configMap:\n      name: missing\n",
    ) + "    volumeMounts:\n    - name: cfg\n      mountPath: /cfg\n";
    let unready = env.pod_yaml("unready", &[("app", "sleep 3600")], "")
        + "    readinessProbe:\n      exec:\n        command: [\"cat\", \"/nonexistent\"]\n      periodSeconds: 1\n";
    let crashy = env.pod_yaml("crashy", &[("app", "echo bye; exit 3")], "");
    for pod in [bad_image, no_cm, unready, crashy] {
        env.create(&pod).await;
    }
    // `rkubelet explain [NAMESPACE/NAME]` against this node's port.
    let explain = |pod: Option<String>| async move {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .arg("explain")
            .args(pod)
            .arg(format!("--server=https://127.0.0.1:{}", secure_port()))
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let expect = [
        (format!("{ns}/badimage"), "image pull back-off", "localhost/nonexistent:1"),
        (format!("{ns}/nocm"), "volume not mounted", "configmap \"missing\" not found"),
        (format!("{ns}/unready"), "readiness probe failing", "Readiness probe failed"),
        (format!("{ns}/crashy"), "crash loop back-off", "exited with code 3"),
        // A static pod is critical: upstream's admission tries to preempt for it, and says it found nothing.
        (
            format!("default/greedy-{}", env.node),
            "refused at admission",
            "no set of running pods found to reclaim resources: [(res: cpu",
        ),
    ];
    for (pod, step, detail) in &expect {
        let text = node
            .wait_for(&format!("{pod}: {step}"), Duration::from_secs(90), || {
                let pod = pod.clone();
                async move {
                    let t = explain(Some(pod)).await;
                    (t.starts_with("BLOCKED ") && t.contains(&format!("): {step}\n")) && t.contains(detail))
                        .then_some(t)
                }
            })
            .await;
        println!("{text}");
    }
    let crash = explain(Some(format!("{ns}/crashy"))).await;
    assert!(crash.contains("; next try at "), "the crash loop's next try: {crash}");
    // Without a pod: every pod of the node, the five among them.
    let all = explain(None).await;
    assert_eq!(all.matches("BLOCKED ").count(), 5, "{all}");
    node.stop_and_clean(&rt).await;
}

/// `tracing:` as upstream: a pod's start reaches a real OTLP/gRPC receiver as a `syncPod` trace whose CRI calls are
/// its child spans, the runtime receives each call's W3C `traceparent` (read at a CRI proxy in front of containerd),
/// and the apiserver requests are `HTTP <METHOD>` client spans; the resource names the kubelet and its host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_start_is_traced_to_an_otlp_receiver_with_cri_child_spans() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let receiver = otlp::OtlpReceiver::start();
    let proxy = cri_proxy::CriProxy::start(&env.path("cri.sock"), &kubelet_cri::socket_path(&endpoint()).unwrap());
    let proxied = proxy.endpoint();
    let tracing = format!("tracing:\n  endpoint: {}\n  samplingRatePerMillion: 1000000\n", receiver.addr);
    let mut node = env.start_node_with(
        &[],
        |n| {
            std::fs::read_to_string(&n.config).unwrap().replace(
                &format!("containerRuntimeEndpoint: {}", endpoint()),
                &format!("containerRuntimeEndpoint: {proxied}"),
            ) + &tracing
        },
        vec![],
    );
    env.wait_node_ready(&mut node).await;
    env.create(&env.pod_yaml("traced", &[("app", "sleep 3600")], "")).await;
    let pod = env.wait_pod_running(&mut node, "traced").await;
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();

    // The batch processor sends every 5 s: wait for the pod's first sync and its StartContainer.
    let spans = node
        .wait_for("the pod's syncPod trace at the receiver", Duration::from_secs(30), || async {
            let spans = receiver.spans();
            let root = spans.iter().find(|s| {
                s.span.name == "syncPod"
                    && s.attr("k8s.pod.uid").as_deref() == Some(uid.as_str())
                    && s.attr("k8s.pod.update_type").as_deref() == Some("create")
            })?;
            let start = spans
                .iter()
                .any(|s| s.span.name == "runtime.v1.RuntimeService/StartContainer" && s.parent_id() == root.span_id());
            start.then_some(spans)
        })
        .await;
    let root = spans
        .iter()
        .find(|s| s.span.name == "syncPod" && s.attr("k8s.pod.update_type").as_deref() == Some("create"))
        .filter(|s| s.attr("k8s.pod.uid").as_deref() == Some(uid.as_str()))
        .unwrap();
    assert_eq!(root.scope, "k8s.io/kubernetes/pkg/kubelet");
    assert!(root.span.parent_span_id.is_empty(), "a pod sync is a trace of its own");
    assert_eq!(root.attr("k8s.pod"), Some(format!("{}/traced", env.ns)));
    assert_eq!(root.attr("k8s.pod.name").as_deref(), Some("traced"));
    assert_eq!(root.attr("k8s.namespace.name"), Some(env.ns.clone()));
    assert_eq!(root.resource.get("service.name").map(String::as_str), Some("kubelet"));
    assert_eq!(root.resource.get("host.name"), Some(&env.node));
    let children: Vec<&otlp::Received> = spans.iter().filter(|s| s.parent_id() == root.span_id()).collect();
    let names: Vec<&str> = children.iter().map(|s| s.span.name.as_str()).collect();
    for want in [
        "runtime.v1.RuntimeService/RunPodSandbox",
        "runtime.v1.RuntimeService/CreateContainer",
        "runtime.v1.RuntimeService/StartContainer",
    ] {
        assert!(names.contains(&want), "{want} is a child of syncPod: {names:?}");
    }
    println!("syncPod {} ({} spans received): children {names:?}", root.trace_id(), spans.len());
    let run = children.iter().find(|s| s.span.name == "runtime.v1.RuntimeService/RunPodSandbox").unwrap();
    assert_eq!(run.trace_id(), root.trace_id());
    assert_eq!(run.span.kind, 3, "SPAN_KIND_CLIENT");
    assert_eq!(run.attr("rpc.system").as_deref(), Some("grpc"));
    assert_eq!(run.attr("rpc.service").as_deref(), Some("runtime.v1.RuntimeService"));
    assert_eq!(run.attr("rpc.method").as_deref(), Some("RunPodSandbox"));
    assert_eq!(run.attr("rpc.grpc.status_code").as_deref(), Some("0"));
    // The runtime saw the call's own span as its parent: trace context over gRPC metadata.
    let sent = format!("00-{}-{}-01", run.trace_id(), run.span_id());
    assert!(
        proxy.traceparents().contains(&("RunPodSandbox".to_string(), sent.clone())),
        "RunPodSandbox reached the runtime with traceparent {sent}: {:?}",
        proxy.traceparents().iter().filter(|(m, _)| m == "RunPodSandbox").collect::<Vec<_>>()
    );
    // The apiserver requests: the pod's status patch among them.
    let patch = node
        .wait_for("the pod's status patch as an HTTP PATCH span", Duration::from_secs(30), || async {
            receiver.spans().into_iter().find(|s| {
                s.span.name == "HTTP PATCH"
                    && s.attr("http.url")
                        .is_some_and(|u| u.contains(&format!("/namespaces/{}/pods/traced/status", env.ns)))
            })
        })
        .await;
    println!("{} {:?} parent {:?}", patch.span.name, patch.attr("http.url"), patch.parent_id());
    assert_eq!(patch.span.kind, 3, "SPAN_KIND_CLIENT");
    assert_eq!(patch.attr("http.method").as_deref(), Some("PATCH"));
    assert_eq!(patch.attr("http.status_code").as_deref(), Some("200"));
    assert_eq!(patch.attr("net.peer.name").as_deref(), Some("127.0.0.1"));
    node.stop_and_clean(&rt).await;
}
