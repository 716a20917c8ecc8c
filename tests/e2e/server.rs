//! End to end: the kubelet API on the secure port (issue 7) — the real binary on the real containerd, called
//! as the apiserver, metrics-server and Prometheus call it: container logs with every option, exec and
//! port-forward over WebSocket through the runtime's streaming server, `/metrics` in the text format, and the
//! authentication/authorization matrix decided by the test apiserver's TokenReviews and SubjectAccessReviews.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kubelet_api::KubeletApi;
use common::*;

const POD: &str = "talk-e2e-node";

fn anonymous_allowed(n: &Node) -> String {
    std::fs::read_to_string(&n.config)
        .unwrap()
        .replace("anonymous:\n    enabled: false", "anonymous:\n    enabled: true")
}

fn talk_manifest() -> String {
    let m = manifest(
        "talk",
        &[],
        &[
            ("app", "echo out-1; sleep 0.3; echo err-1 >&2; sleep 0.3; echo out-2; exec sleep 3600"),
            ("ticker", "i=0; trap 'exit 0' TERM; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done"),
            ("http", "mkdir -p /www && echo served-by-httpd > /www/index.html && exec httpd -f -p 8080 -h /www"),
            (
                "hog",
                "trap 'exit 0' TERM; while [ ! -f /tmp/go ]; do sleep 0.2; done; x=$(head -c 67108864 /dev/zero | tr '\\0' a); while true; do sleep 0.2; done",
            ),
        ],
        "  terminationGracePeriodSeconds: 1\n",
    );
    // A readiness probe on the web server, for /metrics/probes.
    let (head, tail) = m.split_once("  - name: hog").unwrap();
    format!(
        "{head}    readinessProbe:\n      httpGet:\n        port: 8080\n      periodSeconds: 1\n  - name: hog{tail}"
    )
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test]
async fn logs_exec_and_port_forward_through_the_kubelet_api() {
    let (_g, rt) = fresh_runtime().await;
    let mut node = Node::start_with(&[("talk.yaml", &talk_manifest())], anonymous_allowed);
    node.wait_running(POD).await;
    let api = KubeletApi::new(SECURE_PORT);
    let app = format!("/containerLogs/default/{POD}/app");

    // Logs: the whole log, then each query option.
    node.wait_for("the app's three lines", Duration::from_secs(20), || async {
        (api.get(&app).await == (200, "out-1\nerr-1\nout-2\n".to_string())).then_some(())
    })
    .await;
    assert_eq!(api.get(&format!("{app}?tailLines=1")).await, (200, "out-2\n".into()));
    assert_eq!(api.get(&format!("{app}?tail=2")).await.1, "err-1\nout-2\n", "the legacy parameter");
    assert_eq!(api.get(&format!("{app}?limitBytes=8")).await.1, "out-1\ner");
    let (_, stamped) = api.get(&format!("{app}?timestamps=true")).await;
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 3, "{stamped}");
    for (l, text) in lines.iter().zip(["out-1", "err-1", "out-2"]) {
        let (ts, rest) = l.split_once(' ').unwrap();
        assert_eq!(rest, text);
        assert_eq!(ts.len(), "2026-01-02T03:04:05.123456789Z".len(), "nine fractional digits: {ts}");
        assert!(ts.ends_with('Z'));
    }
    let second = lines[1].split_once(' ').unwrap().0;
    assert_eq!(api.get(&format!("{app}?sinceTime={second}")).await.1, "err-1\nout-2\n");
    assert_eq!(api.get(&format!("{app}?sinceSeconds=3600")).await.1, "out-1\nerr-1\nout-2\n");
    assert_eq!(
        api.get(&format!("{app}?sinceSeconds=1&sinceTime={second}")).await,
        (422, r#"{"message": "Invalid request."}"#.into())
    );
    assert_eq!(api.get(&format!("{app}?tailLines=x")).await, (400, r#"{"message": "Unable to decode query."}"#.into()));
    assert_eq!(
        api.get(&format!("{app}?previous=true")).await,
        (400, format!("previous terminated container \"app\" in pod \"{POD}\" not found"))
    );
    assert_eq!(
        api.get(&format!("/containerLogs/default/{POD}/nope")).await,
        (404, format!("container \"nope\" not found in pod \"{POD}\"\n"))
    );
    assert_eq!(api.get("/containerLogs/default/nope/app").await, (404, "pod \"nope\" does not exist\n".into()));

    // follow: new lines arrive as the container writes them; clients that leave leave nothing behind.
    let pid = node.pid();
    let fds_before = open_fds(pid);
    for _ in 0..10 {
        let resp = api.send("GET", &format!("/containerLogs/default/{POD}/ticker?follow=true&tailLines=0")).await;
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut seen = String::new();
        while seen.matches("tick-").count() < 2 {
            use http_body_util::BodyExt;
            let f = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.expect("a followed line in time");
            seen.push_str(&String::from_utf8_lossy(&f.unwrap().unwrap().into_data().unwrap()));
        }
        assert!(seen.starts_with("tick-") && seen.ends_with('\n'), "{seen}");
    }
    node.wait_for("the followers' files and watches closed", Duration::from_secs(10), || async {
        (open_fds(pid) <= fds_before + 2).then_some(())
    })
    .await;

    // exec over WebSocket (v4.channel.k8s.io): stdout, stderr and the exit status.
    let cmd = "command=sh&command=-c&command=echo%20out;%20echo%20err%20%3E%262;%20exit%203";
    let mut ws =
        api.websocket(&format!("/exec/default/{POD}/app?{cmd}&output=1&error=1"), "v4.channel.k8s.io").await.unwrap();
    let got = ws.drain().await;
    assert_eq!(got.get(&1).map(|b| String::from_utf8_lossy(b).into_owned()).as_deref(), Some("out\n"));
    assert_eq!(got.get(&2).map(|b| String::from_utf8_lossy(b).into_owned()).as_deref(), Some("err\n"));
    let status: serde_json::Value = serde_json::from_slice(&got[&3]).unwrap();
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "3");
    // stdin reaches the command.
    let mut ws = api
        .websocket(&format!("/exec/default/{POD}/app?command=head&command=-n1&input=1&output=1"), "v4.channel.k8s.io")
        .await
        .unwrap();
    ws.send(0, b"hello from stdin\n").await;
    let got = ws.drain().await;
    assert_eq!(String::from_utf8_lossy(&got[&1]), "hello from stdin\n");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&got[&3]).unwrap()["status"], "Success");
    // What the runtime refuses reaches the client unchanged (kubectl falls back to SPDY on it).
    let refused = api.websocket(&format!("/exec/default/{POD}/app?command=true&output=1"), "v5.channel.k8s.io").await;
    assert_eq!(refused.err().map(|e| e.0), Some(403));
    assert_eq!(
        api.request("POST", &format!("/exec/default/{POD}/app?command=true&output=1")).await,
        (500, "Upgrade request required\n".into())
    );

    // port-forward over WebSocket to busybox httpd in the pod.
    let mut ws = api.websocket(&format!("/portForward/default/{POD}?port=8080"), "v4.channel.k8s.io").await.unwrap();
    let mut port_prefixes = 0;
    let mut data = Vec::new();
    ws.send(0, b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n").await;
    while let Some((ch, bytes)) =
        tokio::time::timeout(Duration::from_secs(10), ws.recv()).await.expect("a reply in time")
    {
        if bytes == 8080u16.to_le_bytes() && port_prefixes < 2 {
            port_prefixes += 1;
            continue;
        }
        if ch == 0 {
            data.extend_from_slice(&bytes);
        }
        if String::from_utf8_lossy(&data).contains("served-by-httpd") {
            break;
        }
    }
    let reply = String::from_utf8_lossy(&data);
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(reply.contains("served-by-httpd"), "{reply}");

    // /run: the command's output.
    assert_eq!(api.request("POST", &format!("/run/default/{POD}/app?cmd=echo%20ran")).await, (200, "ran\n".into()));

    // /metrics: the text format with upstream's families.
    let (code, text) = api.get("/metrics").await;
    assert_eq!(code, 200);
    let fams = parse_prometheus(&text);
    for (name, kind) in [
        ("kubelet_pod_start_duration_seconds", "histogram"),
        ("kubelet_pod_worker_duration_seconds", "histogram"),
        ("kubelet_pleg_relist_duration_seconds", "histogram"),
        ("kubelet_pleg_relist_interval_seconds", "histogram"),
        ("kubelet_pleg_last_seen_seconds", "gauge"),
        ("kubelet_running_pods", "gauge"),
        ("kubelet_running_containers", "gauge"),
        ("kubelet_runtime_operations_total", "counter"),
        ("kubelet_runtime_operations_duration_seconds", "histogram"),
        ("kubelet_started_pods_total", "counter"),
        ("kubelet_node_name", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds_total", "counter"),
    ] {
        assert_eq!(fams.get(name).map(|f| f.0.as_str()), Some(kind), "{name} in /metrics");
    }
    let sample = |name: &str, labels: &str| fams[name].1.iter().find(|(l, _)| l == labels).map(|(_, v)| *v);
    assert_eq!(sample("kubelet_node_name", "node=\"e2e-node\""), Some(1.0));
    assert_eq!(sample("kubelet_running_pods", ""), Some(1.0));
    assert_eq!(sample("kubelet_running_containers", "container_state=\"running\""), Some(4.0));
    assert!(sample("kubelet_runtime_operations_total", "operation_type=\"exec\"").unwrap() >= 3.0);
    assert!(sample("kubelet_started_pods_total", "").unwrap() >= 1.0);
    assert!(sample("kubelet_pod_start_duration_seconds_count", "").unwrap() >= 1.0);

    // /metrics/probes: the readiness probe's results, labelled as upstream.
    let (code, text) = api.get("/metrics/probes").await;
    assert_eq!(code, 200);
    let fams = parse_prometheus(&text);
    let uid = node.wait_running(POD).await["metadata"]["uid"].as_str().unwrap().to_string();
    let labels = format!(
        "container=\"http\",namespace=\"default\",pod=\"{POD}\",pod_uid=\"{uid}\",probe_type=\"Readiness\",result=\"successful\""
    );
    let ok = fams["prober_probe_total"].1.iter().find(|(l, _)| *l == labels).map(|(_, v)| *v);
    assert!(ok.is_some_and(|n| n >= 1.0), "{labels} in {text}");
    assert!(
        text.contains("# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe")
    );
    assert!(fams.contains_key("prober_probe_duration_seconds") && fams.contains_key("process_start_time_seconds"));

    // /stats/summary and /metrics/resource: the numbers move when a container allocates 64 MiB.
    let working_set = |s: &serde_json::Value, container: Option<&str>| -> Option<u64> {
        let pod = s["pods"].as_array()?.iter().find(|p| p["podRef"]["name"] == POD)?;
        let m = match container {
            Some(c) => &pod["containers"].as_array()?.iter().find(|x| x["name"] == c)?["memory"],
            None => &pod["memory"],
        };
        m["workingSetBytes"].as_u64()
    };
    let summary = || async { serde_json::from_str::<serde_json::Value>(&api.get("/stats/summary").await.1).unwrap() };
    let s = summary().await;
    assert_eq!(s["node"]["nodeName"], NODE);
    for path in [
        "/node/cpu/usageCoreNanoSeconds",
        "/node/memory/workingSetBytes",
        "/node/fs/capacityBytes",
        "/node/rlimit/maxpid",
    ] {
        assert!(s.pointer(path).and_then(|v| v.as_u64()).is_some_and(|v| v > 0), "{path} in {s}");
    }
    let (pod_before, hog_before) = (working_set(&s, None).unwrap(), working_set(&s, Some("hog")).unwrap());
    let pod = s["pods"].as_array().unwrap().iter().find(|p| p["podRef"]["name"] == POD).unwrap();
    assert_eq!(pod["containers"].as_array().unwrap().len(), 4);
    assert!(pod["network"]["rxBytes"].as_u64().is_some(), "the pod's network namespace: {pod}");
    assert!(pod["ephemeral-storage"]["usedBytes"].as_u64().is_some_and(|b| b > 0), "{pod}");
    let mut ws = api
        .websocket(&format!("/exec/default/{POD}/hog?command=touch&command=/tmp/go&output=1"), "v4.channel.k8s.io")
        .await
        .unwrap();
    ws.drain().await;
    const GROWTH: u64 = 50 << 20;
    node.wait_for("the hog's 64 MiB in the summary", Duration::from_secs(30), || async {
        let s = summary().await;
        (working_set(&s, Some("hog"))? > hog_before + GROWTH && working_set(&s, None)? > pod_before + GROWTH)
            .then_some(())
    })
    .await;
    let (_, text) = api.get("/metrics/resource").await;
    let fams = parse_prometheus(&text);
    let hog = fams["container_memory_working_set_bytes"]
        .1
        .iter()
        .find(|(l, _)| l == &format!("container=\"hog\",namespace=\"default\",pod=\"{POD}\""))
        .map(|(_, v)| *v)
        .expect("the hog's working set in /metrics/resource");
    assert!(hog > GROWTH as f64, "{hog}");
    assert_eq!(fams["resource_scrape_error"].1, vec![(String::new(), 0.0)]);
    assert!(
        text.lines().any(|l| l.starts_with("node_cpu_usage_seconds_total ") && l.split(' ').count() == 3),
        "with a timestamp"
    );

    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn authentication_and_authorization_are_decided_by_the_apiserver() {
    use test_apiserver::review::AccessRule;
    use test_apiserver::{Options, TestApiServer, TlsOptions, User};
    let (_g, rt) = fresh_runtime().await;
    let user =
        |n: &str, groups: &[&str]| User { name: n.into(), groups: groups.iter().map(|g| g.to_string()).collect() };
    let tokens = vec![
        ("viewer-token".into(), user("viewer", &["system:authenticated"])),
        ("ops-token".into(), user("ops", &["system:masters", "system:authenticated"])),
    ];
    let rules = vec![AccessRule::new("user:metrics-reader", &["get"], &["nodes/metrics", "nodes/stats"])];
    let (server, _dir, node) = kubeadm_like_cluster(rules, tokens).await;
    let api = KubeletApi::new(SECURE_PORT);

    // Authentication.
    assert_eq!(api.get("/pods").await, (401, "Unauthorized".into()), "no credentials");
    assert_eq!(api.with_token("nope").get("/pods").await.0, 401, "a token the apiserver refuses");
    let other = TestApiServer::start(Options { tls: Some(TlsOptions::default()), ..Default::default() }).await.unwrap();
    let foreign = other.issue_client_cert("admin", &["system:masters"]).unwrap();
    assert_eq!(api.with_cert(foreign).get("/pods").await.0, 401, "a certificate from another CA");

    // Authorization, per subresource and verb.
    let viewer = api.with_token("viewer-token");
    assert_eq!(
        viewer.get("/pods").await,
        (403, "Forbidden (user=viewer, verb=get, resource=nodes, subresource(s)=[pods proxy])\n".into())
    );
    let reader = api.with_cert(server.issue_client_cert("metrics-reader", &[]).unwrap());
    let (code, text) = reader.get("/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("kubelet_node_name{node=\"e2e-node\"} 1"));
    assert_eq!(
        reader.request("POST", "/exec/default/x/y?command=id&output=1").await,
        (403, "Forbidden (user=metrics-reader, verb=create, resource=nodes, subresource(s)=[proxy])\n".into())
    );
    assert_eq!(reader.get("/configz").await.0, 403);
    let admin = api.with_cert(server.issue_client_cert("admin", &["system:masters"]).unwrap());
    let (code, body) = admin.get("/configz").await;
    assert_eq!(code, 200);
    let cfg: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(cfg["kubeletconfig"]["authorization"]["mode"], "Webhook");
    assert_eq!(cfg["kubeletconfig"]["port"], SECURE_PORT);
    assert!(cfg["kubeletconfig"].get("kind").is_none(), "no TypeMeta, as upstream");
    assert_eq!(api.with_token("ops-token").get("/runningpods/").await.0, 200);

    // The decisions came from TokenReviews and SubjectAccessReviews, and are cached.
    let reviews = |kind: &str| server.requests().iter().filter(|r| r.method == "POST" && r.uri.contains(kind)).count();
    assert!(reviews("/tokenreviews") >= 3, "viewer, ops and the refused token were reviewed");
    let sars = reviews("/subjectaccessreviews");
    viewer.get("/pods").await;
    reader.get("/metrics").await;
    assert_eq!(reviews("/subjectaccessreviews"), sars, "answers are cached (5m allowed, 30s denied)");
    let node_user = server.requests().iter().find(|r| r.uri.contains("/subjectaccessreviews")).unwrap().user.clone();
    assert_eq!(node_user, "system:node:e2e-node", "the kubelet asks with its own credentials");

    node.stop_and_clean(&rt).await;
}

/// A TLS test apiserver that reaches kubelets on loopback, and a node joined to it with webhook authentication
/// and authorization as kubeadm configures them.
async fn kubeadm_like_cluster(
    access_rules: Vec<test_apiserver::review::AccessRule>,
    tokens: Vec<(String, test_apiserver::User)>,
) -> (test_apiserver::TestApiServer, tempfile::TempDir, Node) {
    use test_apiserver::{Options, TestApiServer, TlsOptions};
    let server = TestApiServer::start(Options {
        tls: Some(TlsOptions::default()),
        anonymous: None,
        tokens,
        access_rules,
        kubelet_address: Some("127.0.0.1".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubelet.conf");
    let (cert, key) = server.issue_client_cert("system:node:e2e-node", &["system:nodes"]).unwrap();
    server.kubeconfig_for(&kubeconfig, &cert, &key).unwrap();
    server.admin_kubeconfig(dir.path().join("admin.conf")).unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, server.ca_pem().unwrap()).unwrap();
    let config = |n: &Node| {
        std::fs::read_to_string(&n.config)
            .unwrap()
            .replace(
                "  webhook:\n    enabled: false\n",
                &format!(
                    "  webhook:\n    enabled: true\n    cacheTTL: 2m\n  x509:\n    clientCAFile: {}\n",
                    ca.display()
                ),
            )
            .replace("mode: AlwaysAllow", "mode: Webhook")
    };
    let mut node = Node::start_full(&[], config, vec![format!("--kubeconfig={}", kubeconfig.display())]);
    node.wait_for("the secure port", Duration::from_secs(30), || async {
        std::net::TcpStream::connect(("127.0.0.1", SECURE_PORT)).is_ok().then_some(())
    })
    .await;
    (server, dir, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_exec_and_port_forward_through_the_apiserver() {
    let (_g, rt) = fresh_runtime().await;
    let (server, dir, mut node) = kubeadm_like_cluster(vec![], vec![]).await;
    let admin = dir.path().join("admin.conf");
    let manifest = dir.path().join("web.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  nodeName: e2e-node\n  terminationGracePeriodSeconds: 1\n  automountServiceAccountToken: false\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", \"echo line-1; echo line-2; echo line-3; trap 'exit 0' TERM; while true; do sleep 0.2; done\"]\n  - name: http\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", \"mkdir -p /www && echo served-by-httpd > /www/index.html && exec httpd -f -p 8080 -h /www\"]\n",
    )
    .unwrap();
    kubectl(&admin, &["create", "-f", manifest.to_str().unwrap()]).await;
    node.wait_for("pod web Running", Duration::from_secs(60), || async {
        get_json(&admin, &["pod", "web"]).await.filter(|p| p["status"]["phase"] == "Running")
    })
    .await;

    // kubectl logs: the apiserver calls /containerLogs with the options.
    node.wait_for("three log lines", Duration::from_secs(20), || async {
        let out = tokio::process::Command::new("kubectl")
            .arg(format!("--kubeconfig={}", admin.display()))
            .args(["logs", "web", "-c", "app"])
            .output()
            .await
            .ok()?;
        (String::from_utf8_lossy(&out.stdout) == "line-1\nline-2\nline-3\n").then_some(())
    })
    .await;
    assert_eq!(kubectl(&admin, &["logs", "web", "-c", "app", "--tail=1"]).await, "line-3\n");
    assert_eq!(kubectl(&admin, &["logs", "web", "-c", "app", "--limit-bytes=9"]).await, "line-1\nli");
    let stamped = kubectl(&admin, &["logs", "web", "-c", "app", "--timestamps", "--tail=1"]).await;
    assert!(stamped.ends_with("Z line-3\n"), "{stamped}");
    // Without -c kubectl picks the first container itself.
    let out = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", admin.display()))
        .args(["logs", "web"])
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "line-1\nline-2\nline-3\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Defaulted container \"app\" out of: app, http"));
    let prev = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", admin.display()))
        .args(["logs", "web", "-c", "app", "--previous"])
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&prev.stderr)
            .contains("previous terminated container \"app\" in pod \"web\" not found"),
        "{}",
        String::from_utf8_lossy(&prev.stderr)
    );

    // kubectl exec: WebSocket v5 is refused by the runtime, kubectl falls back to SPDY through both proxies.
    let out = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", admin.display()))
        .args(["exec", "web", "-c", "app", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"])
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "to-out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("to-err"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "the command's exit status");
    let mut cat = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", admin.display()))
        .args(["exec", "-i", "web", "-c", "app", "--", "cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = cat.stdin.take().unwrap();
        stdin.write_all(b"through stdin\n").await.unwrap();
    }
    let out =
        tokio::time::timeout(Duration::from_secs(20), cat.wait_with_output()).await.expect("cat ends at EOF").unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through stdin\n");
    assert!(out.status.success());

    // kubectl port-forward to busybox httpd.
    let mut pf = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", admin.display()))
        .args(["port-forward", "pod/web", ":8080", "--address=127.0.0.1"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(pf.stdout.take().unwrap());
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(20), tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut first))
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
    assert!(server.requests().iter().any(|r| r.uri.contains("/subjectaccessreviews")));

    // The pod-start SLI of an apiserver pod, from its creation.
    let api = KubeletApi::new(SECURE_PORT).with_cert(server.issue_client_cert("admin", &["system:masters"]).unwrap());
    let fams = parse_prometheus(&api.get("/metrics").await.1);
    for name in ["kubelet_pod_start_sli_duration_seconds_count", "kubelet_pod_start_total_duration_seconds_count"] {
        let n = fams.get(name).and_then(|f| f.1.first()).map(|s| s.1);
        assert!(n.is_some_and(|n| n >= 1.0), "{name}: {n:?}");
    }
    node.stop_and_clean(&rt).await;
}

/// Parses the Prometheus text format strictly: every sample belongs to a family declared before it with
/// `# TYPE`, names and label pairs are well formed, values are floats, histogram buckets grow and end at
/// `+Inf` equal to `_count`. Returns family → (type, [(labels, value)]) with samples under their own names.
fn parse_prometheus(text: &str) -> BTreeMap<String, (String, Vec<(String, f64)>)> {
    let mut fams: BTreeMap<String, (String, Vec<(String, f64)>)> = BTreeMap::new();
    let mut current = String::new();
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name), "HELP name {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(fams.insert(name.to_string(), (kind.to_string(), vec![])).is_none(), "family twice: {line}");
            current = name.to_string();
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        // `series value [timestamp]`; the series ends at its closing brace when it has labels.
        let split_at = line.rfind('}').map(|i| i + 1).unwrap_or_else(|| line.find(' ').unwrap());
        let (series, rest) = line.split_at(split_at);
        let mut fields = rest.split_whitespace();
        let value = fields.next().unwrap_or_else(|| panic!("no value in {line}"));
        if let Some(ts) = fields.next() {
            assert!(ts.parse::<i64>().is_ok(), "timestamp of {line}");
        }
        assert!(fields.next().is_none(), "trailing fields in {line}");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap_or_else(|| panic!("labels of {line}")).to_string()),
            None => (series, String::new()),
        };
        assert!(valid_name(name), "sample name {line}");
        if !labels.is_empty() {
            for pair in labels.split("\",") {
                let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("label pair of {line}"));
                assert!(valid_name(k), "label name of {line}");
                assert!(!v.trim_end_matches('"').contains('\n'));
            }
        }
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).filter(|b| *b == current);
        assert!(name == current || base.is_some(), "sample {name} outside its family {current}");
        fams.get_mut(&current).unwrap().1.push((labels.clone(), value));
        // Also under the sample's own name, for lookups of _count and _sum.
        if name != current {
            fams.entry(name.to_string()).or_insert_with(|| ("sample".into(), vec![])).1.push((labels, value));
        }
    }
    for (name, (kind, _)) in &fams {
        if kind != "histogram" {
            continue;
        }
        let mut series: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
        for (l, v) in &fams[&format!("{name}_bucket")].1 {
            let (others, le) = l.rsplit_once("le=\"").unwrap_or_else(|| panic!("{name}: bucket without le"));
            series
                .entry(others.trim_end_matches(',').to_string())
                .or_default()
                .push((le.trim_end_matches('"').into(), *v));
        }
        for (others, buckets) in series {
            assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{name}{{{others}}}: buckets grow: {buckets:?}");
            let (le, inf) = buckets.last().unwrap();
            assert_eq!(le, "+Inf", "{name}{{{others}}}: the last bucket is +Inf");
            let count = fams[&format!("{name}_count")].1.iter().find(|(l, _)| *l == others).map(|(_, v)| *v);
            assert_eq!(count, Some(*inf), "{name}{{{others}}}: +Inf equals _count");
        }
    }
    fams
}
