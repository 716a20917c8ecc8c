//! End to end: the kubelet API on the secure port (issue 7) — the real binary on the real containerd, called
//! as the apiserver, metrics-server and Prometheus call it: container logs with every option, exec and
//! port-forward over WebSocket through the runtime's streaming server, `/metrics` in the text format, and
//! `/debug/flags/v` changing the log verbosity of the running kubelet. The same API
//! reached through the real apiserver, with its authentication and authorization, is in `cluster_kubelet_api.rs`.

mod common;

use std::time::Duration;

use common::kubelet_api::KubeletApi;
use common::prometheus::parse_prometheus;
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
                "trap 'exit 0' TERM; while [ ! -f /tmp/go ]; do sleep 0.2; done; x=$(head -c 67108864 /dev/zero | tr '\\0' a); touch /tmp/allocated; while true; do sleep 0.2; done",
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
    let api = KubeletApi::new(secure_port());
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

    // /metrics/slis: each check of a /healthz request, as component-base's SLI metrics.
    assert_eq!(api.get("/healthz").await, (200, "ok".into()));
    let (code, text) = api.get("/metrics/slis").await;
    assert_eq!(code, 200);
    let fams = parse_prometheus(&text);
    for check in ["ping", "log", "syncloop", "pleg"] {
        let labels = format!("name=\"{check}\",type=\"healthz\"");
        assert_eq!(
            fams["kubernetes_healthcheck"].1.iter().find(|(l, _)| *l == labels).map(|(_, v)| *v),
            Some(1.0),
            "{text}"
        );
    }

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
    // The writable layers' usage comes from containerd's snapshot accounting, every 10 s; the logs from the walks
    // every volumeStatsAggPeriod.
    node.wait_for("the pod's ephemeral storage measured", Duration::from_secs(40), || async {
        let s = summary().await;
        let pod = s["pods"].as_array()?.iter().find(|p| p["podRef"]["name"] == POD)?.clone();
        pod["ephemeral-storage"]["usedBytes"].as_u64().is_some_and(|b| b > 0).then_some(())
    })
    .await;
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
    // The hog's string may still grow past the threshold: it says when it is done.
    node.wait_for("the hog done allocating", Duration::from_secs(30), || async {
        let path = format!("/exec/default/{POD}/hog?command=ls&command=/tmp/allocated&output=1");
        let out = api.websocket(&path, "v4.channel.k8s.io").await.ok()?.drain().await;
        out.get(&1).is_some_and(|o| o.starts_with(b"/tmp/allocated")).then_some(())
    })
    .await;
    // The figures are the cgroup files' (cgroup v1, the cgroupfs layout): CPU between two readings around the
    // request, memory within 2 MiB of the file's working set (the hog is idle now), the pod's process count.
    let pod_json = node.wait_running(POD).await;
    let uid = pod_json["metadata"]["uid"].as_str().unwrap().to_string();
    let hog_id = pod_json["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "hog")
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("containerd://"))
        .unwrap()
        .to_string();
    let cg = |controller: &str, rel: &str| -> std::path::PathBuf {
        ["", "burstable/", "besteffort/"]
            .iter()
            .map(|q| std::path::PathBuf::from(format!("/sys/fs/cgroup/{controller}/kubepods/{q}pod{uid}")))
            .find(|d| d.is_dir())
            .expect("the pod's cgroup")
            .join(rel)
    };
    let read_num = |p: std::path::PathBuf| -> u64 { std::fs::read_to_string(&p).unwrap().trim().parse().unwrap() };
    let inactive = |p: std::path::PathBuf| -> u64 {
        let stat = std::fs::read_to_string(p).unwrap();
        stat.lines().find_map(|l| l.strip_prefix("total_inactive_file ")).unwrap().trim().parse().unwrap()
    };
    let cpu_before = read_num(cg("cpuacct", &format!("{hog_id}/cpuacct.usage")));
    let s = summary().await;
    let cpu_after = read_num(cg("cpuacct", &format!("{hog_id}/cpuacct.usage")));
    let file_ws = read_num(cg("memory", &format!("{hog_id}/memory.usage_in_bytes")))
        - inactive(cg("memory", &format!("{hog_id}/memory.stat")));
    let pod_stats = s["pods"].as_array().unwrap().iter().find(|p| p["podRef"]["name"] == POD).unwrap();
    let hog_stats = pod_stats["containers"].as_array().unwrap().iter().find(|c| c["name"] == "hog").unwrap();
    let cpu = hog_stats["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap();
    assert!(cpu_before <= cpu && cpu <= cpu_after, "{cpu_before} <= {cpu} <= {cpu_after}");
    let ws = hog_stats["memory"]["workingSetBytes"].as_u64().unwrap();
    assert!(ws.abs_diff(file_ws) < 2 << 20, "summary {ws} against the cgroup's {file_ws}");
    // The pod's shells start a short-lived `sleep` every 200 ms, so the count may differ by the ones coming and
    // going between the reading and the request.
    let pids = read_num(cg("pids", "pids.current"));
    let count = pod_stats["process_stats"]["process_count"].as_u64().unwrap();
    assert!(count.abs_diff(pids) <= 2, "process_count {count} against pids.current {pids}: {pod_stats}");

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

    // /checkpoint (ContainerCheckpoint, on): through the runtime's CheckpointContainer, which this machine's containerd
    // cannot carry out (no working CRIU): refused with upstream's message carrying the runtime's error.
    let (code, body) = api.request("POST", &format!("/checkpoint/default/{POD}/app")).await;
    assert_eq!(code, 500, "{body}");
    assert!(body.starts_with(&format!("checkpointing of default/{POD}/app failed (rpc error: code = ")), "{body}");
    assert_eq!(
        api.request("POST", &format!("/checkpoint/default/{POD}/nope")).await,
        (404, "container nope does not exist".into())
    );
    assert_eq!(api.request("POST", "/checkpoint/default/nope/app").await, (404, "pod does not exist".into()));
    assert_eq!(
        api.request("POST", &format!("/checkpoint/default/{POD}/app?timeout=soon")).await,
        (404, "cannot parse value of timeout parameter".into())
    );

    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn debug_flags_v_changes_the_log_verbosity_of_the_running_kubelet() {
    let (_g, rt) = fresh_runtime().await;
    let sleeper =
        |name: &str| manifest(name, &[], &[("app", "exec sleep 3600")], "  terminationGracePeriodSeconds: 1\n");
    // Started at the default verbosity (info), without the tests' usual debug filter.
    let env = vec![("RKUBELET_LOG".to_string(), "info".to_string())];
    let mut node = Node::start_named_env(NODE, &[("a.yaml", &sleeper("a"))], anonymous_allowed, vec![], env);
    node.wait_running("a-e2e-node").await;
    let log_path = node.log_path();
    assert!(!node.log().contains(" DEBUG "), "no debug lines at verbosity 0");

    let api = KubeletApi::new(secure_port());
    let set = |v: &'static str| {
        let api = api.clone();
        async move { api.request_body("PUT", "/debug/flags/v", v).await }
    };
    assert_eq!(set("4").await, (200, "successfully set klog.logging.verbosity to 4\n".into()));
    node.write_manifest("b.yaml", &sleeper("b"));
    node.wait_for("debug lines once the verbosity is 4", Duration::from_secs(30), || async {
        std::fs::read_to_string(&log_path).unwrap_or_default().contains(" DEBUG ").then_some(())
    })
    .await;
    node.wait_running("b-e2e-node").await;

    assert_eq!(set("x").await, (400, "strconv.ParseUint: parsing \"x\": invalid syntax\n".into()));
    assert_eq!(api.get("/debug/flags/v").await, (406, "unsupported http method\n".into()));
    assert_eq!(set("2").await.0, 200);
    let offset = node.log().len();
    node.write_manifest("c.yaml", &sleeper("c"));
    node.wait_running("c-e2e-node").await;
    let after = node.log()[offset..].to_string();
    assert!(after.contains("SyncLoop op=ADD"), "the new pod was logged at info: {after}");
    assert!(!after.contains(" DEBUG "), "no debug lines once the verbosity is 2 again: {after}");
    node.stop_and_clean(&rt).await;
}

/// `rkubelet check` with a node's configuration: the runtime answers, and the API port is named as taken while that
/// node runs (exit status 1), free once it stopped (exit status 0).
#[tokio::test]
async fn rkubelet_check_reports_the_runtime_and_a_taken_port_with_what_to_do() {
    let (_g, rt) = fresh_runtime().await;
    let mut node = Node::start_with(&[], anonymous_allowed);
    node.wait_healthy().await;
    let check = |config: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkubelet"))
            .arg("check")
            .arg(format!("--config={}", config.display()))
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, text) = check(&node.config);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("[ok  ] configuration: loaded and valid"), "{text}");
    assert!(text.contains("[ok  ] container runtime: containerd "), "{text}");
    let port = format!("[FAIL] kubelet API port: 127.0.0.1:{} cannot be bound", secure_port());
    assert!(text.contains(&port), "{text}");
    assert!(text.contains("or change port (--port)"), "{text}");
    assert!(text.ends_with("rkubelet check: FAILED\n"), "{text}");
    node.kill9();
    let (code, text) = check(&node.config);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("[ok  ] kubelet API port: 127.0.0.1:{} free", secure_port())), "{text}");
    // A runtime that is not there is named, with what to do.
    let config = node.config.with_extension("bad.yaml");
    let yaml = std::fs::read_to_string(&node.config).unwrap();
    let start = yaml.find("containerRuntimeEndpoint: ").unwrap();
    let end = start + yaml[start..].find('\n').unwrap();
    std::fs::write(
        &config,
        format!("{}containerRuntimeEndpoint: unix:///nonexistent.sock{}", &yaml[..start], &yaml[end..]),
    )
    .unwrap();
    let (code, text) = check(&config);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("[FAIL] container runtime: unix:///nonexistent.sock"), "{text}");
    assert!(text.contains("fix: start the container runtime"), "{text}");
    node.stop_and_clean(&rt).await;
}

/// The whole body of a response, with its status and content type.
async fn fetch(api: &KubeletApi, path: &str) -> (u16, String, Vec<u8>) {
    use http_body_util::BodyExt;
    let resp = api.send("GET", path).await;
    let code = resp.status().as_u16();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (code, ct, resp.into_body().collect().await.unwrap().to_bytes().to_vec())
}

/// The samples of a profile whose stack passes through rkubelet's own code, and their total of sample type `i`.
fn own_samples(p: &kubelet_pprof::proto::Profile, i: usize) -> (usize, i64) {
    let own: Vec<_> = p
        .sample
        .iter()
        .filter(|s| p.stack(s).iter().any(|f| f.contains("kubelet_server::") || f.contains("rkubelet::")))
        .collect();
    (own.len(), own.iter().map(|s| s.value[i]).sum())
}

/// `/debug/pprof/` (`enableProfilingHandler`, on by default): a CPU profile of the running rkubelet taken while
/// it serves `/stats/summary` in a loop, and its heap, both pprof's gzip-compressed protobuf with rkubelet's own
/// functions in their stacks; a second CPU profile meanwhile is refused in Go's words; the index lists them.
#[tokio::test]
async fn debug_pprof_profiles_the_running_rkubelet() {
    let (_g, rt) = fresh_runtime().await;
    let sleeper = manifest("prof", &[], &[("app", "exec sleep 3600")], "  terminationGracePeriodSeconds: 1\n");
    let mut node = Node::start_named(NODE, &[("prof.yaml", &sleeper)], anonymous_allowed, vec![]);
    node.wait_running("prof-e2e-node").await;
    let log_path = node.log_path();
    let node_log = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    let api = KubeletApi::new(secure_port());
    let cpu = tokio::spawn({
        let api = api.clone();
        async move { fetch(&api, "/debug/pprof/profile?seconds=3").await }
    });
    // Once it runs, a second profile is refused; work for the profiler to see until it answers.
    node.wait_for("the CPU profile started", Duration::from_secs(10), || async {
        node_log(&log_path).contains("cpu profile started").then_some(())
    })
    .await;
    let second = api.get("/debug/pprof/profile?seconds=1").await;
    while !cpu.is_finished() {
        assert_eq!(api.get("/stats/summary").await.0, 200);
    }
    assert_eq!(
        second,
        (500, "Could not enable CPU profiling: cpu profiling already in use\n".into()),
        "one CPU profile at a time, as Go"
    );
    let (code, ct, body) = cpu.await.unwrap();
    assert_eq!((code, ct.as_str()), (200, "application/octet-stream"));
    let p = kubelet_pprof::proto::decode(&body).expect("a gzip-compressed pprof profile");
    let types: Vec<&str> = p.sample_type.iter().map(|t| p.str(t.r#type)).collect();
    assert_eq!(types, ["samples", "cpu"]);
    assert!(p.duration_nanos >= 3_000_000_000, "sampled for the 3 s asked: {}", p.duration_nanos);
    let (n, samples) = own_samples(&p, 0);
    assert!(n > 0 && samples > 0, "samples in rkubelet's own functions: {} in all", p.sample.len());
    println!(
        "cpu profile: {} samples, {samples} through rkubelet's code",
        p.sample.iter().map(|s| s.value[0]).sum::<i64>()
    );

    let (code, _, body) = fetch(&api, "/debug/pprof/heap").await;
    assert_eq!(code, 200);
    let p = kubelet_pprof::proto::decode(&body).expect("a gzip-compressed pprof profile");
    let types: Vec<&str> = p.sample_type.iter().map(|t| p.str(t.r#type)).collect();
    assert_eq!(types, ["alloc_objects", "alloc_space", "inuse_objects", "inuse_space"]);
    let inuse: i64 = p.sample.iter().map(|s| s.value[3]).sum();
    // Serving /stats/summary for 3 s allocated many times the 512 KiB sampling distance.
    let (_, own) = own_samples(&p, 1);
    assert!(own > 1 << 20, "allocations made by rkubelet's own code: {own} B in {} samples", p.sample.len());
    // The sampled heap in use is below the process's resident memory.
    let rss_kib: i64 = std::fs::read_to_string(format!("/proc/{}/status", node.pid()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").map(|v| v.trim().trim_end_matches(" kB").parse().unwrap()))
        .unwrap();
    assert!(inuse < rss_kib * 1024, "heap in use {inuse} B, resident {rss_kib} KiB");
    println!(
        "heap profile: {} KiB in use of {rss_kib} KiB resident; {} KiB allocated by rkubelet's code",
        inuse / 1024,
        own / 1024
    );
    let (code, index) = api.get("/debug/pprof/").await;
    assert!(code == 200 && index.contains("heap") && index.contains("profile"), "{index}");
    assert_eq!(api.get("/debug/pprof/goroutine").await, (404, "Unknown profile\n".into()));
    node.stop_and_clean(&rt).await;
}
