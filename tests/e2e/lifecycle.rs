//! End to end: the pod lifecycle's fine print on the real containerd through the real rkubelet binary — probes,
//! lifecycle hooks, native sidecars, active deadlines and OOM kills (issue: pod lifecycle as upstream).

mod common;

use std::time::Duration;

use common::*;
use kubelet_cri::RuntimeService;
use serde_json::Value;

const START: Duration = Duration::from_secs(60);

fn condition(p: &Value, t: &str) -> (String, String) {
    let c = p["status"]["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == t).cloned());
    let c = c.unwrap_or(Value::Null);
    (c["status"].as_str().unwrap_or("").to_string(), c["message"].as_str().unwrap_or("").to_string())
}

/// The lines of a CRI log file as (timestamp in seconds of the day, text).
fn log_lines(text: &str) -> Vec<(f64, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, ' ');
            let ts = f.next()?;
            let (_, time) = ts.split_once('T')?;
            let time = time.trim_end_matches('Z');
            let mut hms = time.split(':');
            let h: f64 = hms.next()?.parse().ok()?;
            let m: f64 = hms.next()?.parse().ok()?;
            let s: f64 = hms.next()?.parse().ok()?;
            let _stream = f.next()?;
            let _tag = f.next()?;
            Some((h * 3600.0 + m * 60.0 + s, f.next().unwrap_or("").to_string()))
        })
        .collect()
}

fn when(lines: &[(f64, String)], text: &str) -> f64 {
    lines.iter().find(|(_, l)| l == text).map(|(t, _)| *t).unwrap_or_else(|| panic!("no line {text:?} in {lines:?}"))
}

async fn exec(rt: &kubelet_cri::RemoteRuntime, pod: &str, container: &str, cmd: &[&str]) {
    let c = containers_of(rt, pod)
        .await
        .into_iter()
        .find(|c| c.labels["io.kubernetes.container.name"] == container && c.state == 1)
        .expect("running container");
    let out = rt.exec_sync(&c.id, cmd.iter().map(|s| s.to_string()).collect(), Duration::from_secs(10)).await;
    assert_eq!(out.unwrap().exit_code, 0, "{cmd:?}");
}

#[tokio::test]
async fn http_readiness_flips_ready_and_a_failing_liveness_probe_restarts_the_container() {
    let (_g, rt) = fresh_runtime().await;
    let m = r#"apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: localhost/busybox:1
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/ready && touch /tmp/alive && exec httpd -f -p 8080 -h /www"]
    ports:
    - name: http
      containerPort: 8080
    startupProbe:
      tcpSocket:
        port: 8080
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      httpGet:
        path: /ready
        port: http
      periodSeconds: 1
      failureThreshold: 1
    livenessProbe:
      exec:
        command: ["test", "-f", "/tmp/alive"]
      periodSeconds: 1
      failureThreshold: 2
"#;
    let mut node = Node::start(&[("probed.yaml", m)]);
    let name = "probed-e2e-node";
    node.wait_running(name).await;
    let p = pod(name).await.unwrap();
    assert_eq!(condition(&p, "Ready").0, "True");
    assert_eq!(container_status(&p, "web").unwrap()["started"], true, "the TCP startup probe passed");

    // Readiness fails (404): the container keeps running but is not ready, and neither is the pod.
    exec(&rt, name, "web", &["rm", "/www/ready"]).await;
    let p = node
        .wait_for("pod not ready", START, || async { pod(name).await.filter(|p| condition(p, "Ready").0 == "False") })
        .await;
    assert_eq!(condition(&p, "Ready").1, "containers with unready status: [web]");
    assert_eq!(condition(&p, "ContainersReady").0, "False");
    let web = container_status(&p, "web").unwrap();
    assert!(web["state"]["running"].is_object() && web["ready"] == false && web["restartCount"] == 0);
    assert!(node.log().contains("Readiness probe failed: HTTP probe failed with statuscode: 404"), "Unhealthy event");

    // Liveness fails twice: the container is killed and started again, ready once its readiness probe passes.
    exec(&rt, name, "web", &["rm", "/tmp/alive"]).await;
    let p = node
        .wait_for("restart after the liveness failure", START, || async {
            pod(name)
                .await
                .filter(|p| container_status(p, "web").is_some_and(|c| c["restartCount"] == 1) && all_running(p))
        })
        .await;
    assert_eq!(condition(&p, "Ready").0, "True");
    let log = node.log();
    assert!(log.contains("Liveness probe failed: "), "Unhealthy event in the log");
    assert!(log.contains("Container web failed liveness probe, will be restarted"), "Killing event message");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn prestop_runs_before_sigterm_and_sidecars_stop_after_the_app_when_the_deadline_passes() {
    let (_g, rt) = fresh_runtime().await;
    let m = r#"apiVersion: v1
kind: Pod
metadata:
  name: life
spec:
  terminationGracePeriodSeconds: 10
  activeDeadlineSeconds: 4
  initContainers:
  - name: side
    image: localhost/busybox:1
    restartPolicy: Always
    command: ["sh", "-c", "trap 'echo side-term; exit 0' TERM; echo side-up; while true; do sleep 0.1; done"]
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "trap 'echo app-term; sleep 1; echo app-exit; exit 0' TERM; echo app-up; while true; do sleep 0.1; done"]
    lifecycle:
      preStop:
        exec:
          command: ["sh", "-c", "echo prestop > /proc/1/fd/1; sleep 1"]
"#;
    let mut node = Node::start(&[("life.yaml", m)]);
    let name = "life-e2e-node";
    let p = node.wait_running(name).await;
    let side = &p["status"]["initContainerStatuses"][0];
    assert!(side["state"]["running"].is_object() && side["started"] == true, "the sidecar keeps running: {side}");

    // After 4 s the deadline kills the pod: Failed with upstream's reason, logs kept.
    let p = node
        .wait_for("pod failed by its deadline", START, || async {
            pod(name).await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
    assert_eq!(p["status"]["message"], "Pod was active on the node longer than the specified deadline");
    node.wait_for("every container stopped", START, || async {
        let cs = containers_of(&rt, name).await;
        cs.iter().all(|c| c.state == 2).then_some(())
    })
    .await;
    let app = log_lines(&node.container_log(&p, "app"));
    let side = log_lines(&node.container_log(&p, "side"));
    // preStop ran (and took its second) before the app got SIGTERM; the sidecar got its SIGTERM only after
    // the app had exited.
    assert!(when(&app, "prestop") + 0.9 <= when(&app, "app-term"), "app log: {app:?}");
    assert!(when(&app, "app-exit") <= when(&side, "side-term"), "app {app:?} side {side:?}");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn a_job_with_a_sidecar_succeeds_and_an_oom_killed_container_reports_oomkilled() {
    let (_g, rt) = fresh_runtime().await;
    let job = r#"apiVersion: v1
kind: Pod
metadata:
  name: job
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  initContainers:
  - name: side
    image: localhost/busybox:1
    restartPolicy: Always
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
  containers:
  - name: work
    image: localhost/busybox:1
    command: ["sh", "-c", "sleep 1; echo done"]
"#;
    let hog = r#"apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  restartPolicy: Never
  containers:
  - name: hog
    image: localhost/busybox:1
    command: ["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]
    resources:
      limits:
        memory: 16Mi
"#;
    let fallback = r#"apiVersion: v1
kind: Pod
metadata:
  name: fallback
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "echo first; echo 'last words'; exit 4"]
    terminationMessagePolicy: FallbackToLogsOnError
"#;
    let mut node = Node::start(&[("job.yaml", job), ("hog.yaml", hog), ("fallback.yaml", fallback)]);
    let p = node.wait_phase("job-e2e-node", "Succeeded").await;
    let side = &p["status"]["initContainerStatuses"][0];
    assert!(side["state"]["terminated"].is_object(), "the sidecar was stopped: {side}");
    assert_eq!(container_status(&p, "work").unwrap()["state"]["terminated"]["exitCode"], 0);

    let p = node.wait_phase("hog-e2e-node", "Failed").await;
    let t = &container_status(&p, "hog").unwrap()["state"]["terminated"];
    assert_eq!((t["reason"].as_str(), t["exitCode"].as_i64()), (Some("OOMKilled"), Some(137)), "{t}");
    assert_eq!(p["status"]["qosClass"], "Burstable");

    let p = node.wait_phase("fallback-e2e-node", "Failed").await;
    let t = &container_status(&p, "app").unwrap()["state"]["terminated"];
    assert_eq!(t["exitCode"], 4);
    assert_eq!(t["message"], "first\nlast words\n", "FallbackToLogsOnError: the log's tail is the message");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn a_failing_poststart_hook_kills_the_container_with_upstreams_event() {
    let (_g, rt) = fresh_runtime().await;
    let m = r#"apiVersion: v1
kind: Pod
metadata:
  name: hooked
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo nope >&2; exit 3"]
"#;
    let mut node = Node::start(&[("hooked.yaml", m)]);
    node.wait_for("the container stopped", START, || async {
        pod("hooked-e2e-node")
            .await
            .filter(|p| container_status(p, "app").is_some_and(|c| c["state"]["terminated"].is_object()))
    })
    .await;
    let log = node.log();
    assert!(log.contains(r#"reason="FailedPostStartHook""#), "event reason");
    assert!(log.contains(r#"reason="Killing" FailedPostStartHook"#), "the container is killed with upstream's message");
    assert!(
        log.contains(r#"Exec lifecycle hook ([sh -c echo nope >&2; exit 3]) for Container "app" in Pod "hooked-e2e-node_default("#),
        "upstream's message: {}",
        tail(&log, 30)
    );
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn an_exec_hook_runs_its_command_as_written_without_expansion() {
    let (_g, rt) = fresh_runtime().await;
    // `$(FOO)` reaches the hook as written (upstream's handlers.go runs hook commands unexpanded); sh's `$1` keeps
    // the argument as it came.
    let m = r#"apiVersion: v1
kind: Pod
metadata:
  name: literal
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "while [ ! -f /tmp/hook ]; do sleep 0.1; done; cat /tmp/hook"]
    env:
    - name: FOO
      value: expanded
    lifecycle:
      postStart:
        exec:
          command: ["sh", "-c", "echo \"hook=$1\" > /tmp/hook.new && mv /tmp/hook.new /tmp/hook", "hook", "$(FOO)"]
"#;
    let mut node = Node::start(&[("literal.yaml", m)]);
    let p = node.wait_phase("literal-e2e-node", "Succeeded").await;
    assert_eq!(texts(&node.container_log(&p, "app")), vec!["hook=$(FOO)".to_string()]);
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn env_references_and_expansion_are_seen_inside_the_container() {
    let (_g, rt) = fresh_runtime().await;
    let m = r#"apiVersion: v1
kind: Pod
metadata:
  name: envy
  labels:
    app: web
  annotations:
    note: hello
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "echo 'arg=$(GREETING) $$(GREETING) $(NOPE)'; env | sort"]
    env:
    - name: NAME
      value: world
    - name: GREETING
      value: hello-$(NAME)-$$(NAME)
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: NODE
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: APP
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['app']
    - name: NOTE
      valueFrom:
        fieldRef:
          fieldPath: metadata.annotations['note']
    - name: MEM_MI
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
          divisor: 1Mi
    - name: CPU_M
      valueFrom:
        resourceFieldRef:
          resource: requests.cpu
          divisor: 1m
    resources:
      requests:
        cpu: 250m
      limits:
        memory: 64Mi
"#;
    let mut node = Node::start_named_env(
        NODE,
        &[("envy.yaml", m)],
        |n| std::fs::read_to_string(&n.config).unwrap(),
        vec![],
        loudest_log(),
    );
    let p = node.wait_phase("envy-e2e-node", "Succeeded").await;
    let ip = p["status"]["podIP"].as_str().unwrap().to_string();
    let lines = texts(&node.container_log(&p, "app"));
    for want in [
        "arg=hello-world-$(NAME) $(GREETING) $(NOPE)".to_string(),
        "GREETING=hello-world-$(NAME)".to_string(),
        "POD_NAME=envy-e2e-node".to_string(),
        "POD_NAMESPACE=default".to_string(),
        format!("POD_IP={ip}"),
        format!("NODE={NODE}"),
        "APP=web".to_string(),
        "NOTE=hello".to_string(),
        "MEM_MI=64".to_string(),
        "CPU_M=250".to_string(),
    ] {
        assert!(lines.contains(&want), "missing {want:?} in {lines:?}");
    }
    // The environment as resolved for the runtime (where a secret's value would be) is never logged: this expanded
    // value exists nowhere else.
    assert_secrets_not_logged(&node.log(), &["hello-world-$(NAME)"]);
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn security_context_and_sysctls_reach_the_container_and_forbidden_ones_are_rejected() {
    let (_g, rt) = fresh_runtime().await;
    let secure = r#"apiVersion: v1
kind: Pod
metadata:
  name: secure
spec:
  restartPolicy: Never
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    supplementalGroups: [4000]
    sysctls:
    - name: net.ipv4.ip_local_port_range
      value: "20000 30000"
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); echo ports=$(cat /proc/sys/net/ipv4/ip_local_port_range); echo masked=$(grep -c ' /proc/timer_list ' /proc/self/mountinfo) rosys=$(grep ' /proc/sys ' /proc/self/mountinfo | grep -c ' ro,'); touch /rootfs-write && echo rootfs=rw || echo rootfs=ro"]
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
"#;
    let nonroot = r#"apiVersion: v1
kind: Pod
metadata:
  name: nonroot
spec:
  securityContext:
    runAsNonRoot: true
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
"#;
    let forbidden = r#"apiVersion: v1
kind: Pod
metadata:
  name: tuned
spec:
  securityContext:
    sysctls:
    - name: kernel.sched_latency_ns
      value: "1"
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
"#;
    let mut node = Node::start(&[("secure.yaml", secure), ("nonroot.yaml", nonroot), ("tuned.yaml", forbidden)]);
    let p = node.wait_phase("secure-e2e-node", "Succeeded").await;
    let lines = texts(&node.container_log(&p, "app"));
    let line = |prefix: &str| lines.iter().find(|l| l.starts_with(prefix)).cloned().unwrap_or_default();
    assert!(line("uid=").starts_with("uid=1000 gid=3000 groups=3000"), "{lines:?}");
    assert!(
        line("uid=").contains(" 2000") && line("uid=").contains(" 4000"),
        "fsGroup and supplemental groups: {lines:?}"
    );
    assert_eq!(line("ports="), "ports=20000 30000", "a safe sysctl is applied");
    assert_eq!(
        line("masked="),
        "masked=1 rosys=1",
        "/proc/timer_list is masked, /proc/sys read-only (mounts of their own)"
    );
    assert_eq!(line("rootfs="), "rootfs=ro");

    let p = node
        .wait_for("nonroot refused", START, || async {
            pod("nonroot-e2e-node").await.filter(|p| {
                container_status(p, "app")
                    .is_some_and(|c| c["state"]["waiting"]["reason"] == "CreateContainerConfigError")
            })
        })
        .await;
    let msg = container_status(&p, "app").unwrap()["state"]["waiting"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("container has runAsNonRoot and image will run as root (pod: \"nonroot-e2e-node_default("),
        "{msg}"
    );

    let p = node.wait_phase("tuned-e2e-node", "Failed").await;
    assert_eq!(p["status"]["reason"], "SysctlForbidden");
    assert_eq!(
        p["status"]["message"],
        "Pod was rejected: forbidden sysctl: \"kernel.sched_latency_ns\" not allowlisted"
    );
    assert!(containers_of(&rt, "tuned-e2e-node").await.is_empty(), "a rejected pod never runs");
    assert!(sandboxes_of(&rt, "tuned-e2e-node").await.is_empty());
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn hosts_dns_hostname_and_namespaces_as_configured() {
    let (_g, rt) = fresh_runtime().await;
    let named = r#"apiVersion: v1
kind: Pod
metadata:
  name: named
spec:
  restartPolicy: Never
  hostname: web-0
  subdomain: backends
  shareProcessNamespace: true
  hostAliases:
  - ip: 192.0.2.7
    hostnames: [alias-a, alias-b]
  dnsPolicy: None
  dnsConfig:
    nameservers: [192.0.2.53]
    searches: [example.test]
    options:
    - name: ndots
      value: "3"
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "echo host=$(hostname); cat /etc/hosts /etc/resolv.conf; echo pid1=$(cat /proc/1/cmdline | tr '\\0' ' ')"]
"#;
    let hostnet = r#"apiVersion: v1
kind: Pod
metadata:
  name: hostnet
spec:
  restartPolicy: Never
  hostNetwork: true
  hostAliases:
  - ip: 192.0.2.8
    hostnames: [alias-c]
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "head -1 /etc/hosts; tail -1 /etc/hosts; echo host=$(hostname)"]
"#;
    let mut node = Node::start_with(&[("named.yaml", named), ("hostnet.yaml", hostnet)], |n| {
        std::fs::read_to_string(&n.config).unwrap() + "clusterDomain: cluster.local\n"
    });
    let p = node.wait_phase("named-e2e-node", "Succeeded").await;
    let lines = texts(&node.container_log(&p, "app"));
    // The pod's own entry carries its IP on the project's bridge (the status of a finished pod may no longer show
    // it: upstream reports IPs only while the sandbox is ready).
    let own = lines.iter().find(|l| l.ends_with("\tweb-0.backends.default.svc.cluster.local\tweb-0"));
    assert!(own.is_some_and(|l| in_pod_cidr(l)), "the pod's hosts entry in {lines:?}");
    let want = [
        "host=web-0".to_string(),
        "# Kubernetes-managed hosts file.".to_string(),
        "# Entries added by HostAliases.".to_string(),
        "192.0.2.7\talias-a\talias-b".to_string(),
        "nameserver 192.0.2.53".to_string(),
        "search example.test".to_string(),
        "options ndots:3".to_string(),
    ];
    for w in want {
        assert!(lines.contains(&w), "missing {w:?} in {lines:?}");
    }
    let pid1 = lines.iter().find(|l| l.starts_with("pid1=")).unwrap();
    assert!(pid1.contains("pause"), "a shared process namespace shows the sandbox as PID 1: {pid1}");

    let p = node.wait_phase("hostnet-e2e-node", "Succeeded").await;
    let lines = texts(&node.container_log(&p, "app"));
    assert_eq!(lines[0], "# Kubernetes-managed hosts file (host network).");
    assert_eq!(lines[1], "192.0.2.8\talias-c");
    let host = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
    assert_eq!(lines[2], format!("host={host}"), "the node's hostname");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn resources_reach_the_pod_and_container_cgroups_by_qos() {
    let (_g, rt) = fresh_runtime().await;
    let guaranteed = r#"apiVersion: v1
kind: Pod
metadata:
  name: gold
spec:
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sh", "-c", "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/memory/memory.limit_in_bytes; exec sleep 3600"]
    resources:
      limits:
        cpu: 500m
        memory: 128Mi
"#;
    let burstable = r#"apiVersion: v1
kind: Pod
metadata:
  name: silver
spec:
  containers:
  - name: app
    image: localhost/busybox:1
    command: ["sleep", "3600"]
    resources:
      requests:
        cpu: 250m
      limits:
        memory: 64Mi
"#;
    let mut node = Node::start(&[("gold.yaml", guaranteed), ("silver.yaml", burstable)]);
    let gold = node.wait_running("gold-e2e-node").await;
    let silver = node.wait_running("silver-e2e-node").await;
    assert_eq!(gold["status"]["qosClass"], "Guaranteed");
    assert_eq!(silver["status"]["qosClass"], "Burstable");
    let read =
        |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("{p}: {e}"));
    let g = format!("pod{}", gold["metadata"]["uid"].as_str().unwrap());
    assert_eq!(read(&format!("/sys/fs/cgroup/cpu/kubepods/{g}/cpu.shares")), "512");
    assert_eq!(read(&format!("/sys/fs/cgroup/cpu/kubepods/{g}/cpu.cfs_quota_us")), "50000");
    assert_eq!(read(&format!("/sys/fs/cgroup/memory/kubepods/{g}/memory.limit_in_bytes")), (128u64 << 20).to_string());
    let s = format!("pod{}", silver["metadata"]["uid"].as_str().unwrap());
    assert_eq!(read(&format!("/sys/fs/cgroup/cpu/kubepods/burstable/{s}/cpu.shares")), "256");
    assert_eq!(
        read(&format!("/sys/fs/cgroup/cpu/kubepods/burstable/{s}/cpu.cfs_quota_us")),
        "-1",
        "no CPU limit declared"
    );
    assert_eq!(
        read(&format!("/sys/fs/cgroup/memory/kubepods/burstable/{s}/memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );
    // The container's own cgroup, as the container sees it.
    let lines = texts(&node.container_log(&gold, "app"));
    assert_eq!(lines, vec!["50000".to_string(), "512".to_string(), (128u64 << 20).to_string()]);
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn image_pull_policies_against_a_local_registry_with_pull_back_off() {
    let (_g, rt) = fresh_runtime().await;
    let layout = std::path::PathBuf::from(
        std::env::var("RKUBELET_IMAGES_DIR").unwrap_or_else(|_| "/var/lib/rkubelet-dev/images".into()),
    )
    .join("busybox.layout");
    assert!(
        layout.join("index.json").exists(),
        "{} is missing: run RKUBELET_REBUILD_IMAGES=1 scripts/node-setup.sh",
        layout.display()
    );
    let reg = test_registry::Registry::start(&layout).await.unwrap();
    let image = reg.add("e2e/pulled", "1");
    let spec = |name: &str, image: &str, policy: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {image}\n    imagePullPolicy: {policy}\n    command: [\"sleep\", \"3600\"]\n"
        )
    };
    // IfNotPresent with the image absent: pulled from the registry.
    let mut node = Node::start(&[("first.yaml", &spec("first", &image, "IfNotPresent"))]);
    node.wait_running("first-e2e-node").await;
    let after_first = reg.pulls("e2e/pulled");
    assert!(after_first > 0, "the registry served the pull");
    let log = node.log();
    assert!(log.contains(&format!("Successfully pulled image \"{image}\" in ")), "Pulled event");
    assert!(log.contains("Image size: "), "with the image size");

    // IfNotPresent with the image present: no request to the registry. Always: pulled again.
    node.write_manifest("again.yaml", &spec("again", &image, "IfNotPresent"));
    node.wait_running("again-e2e-node").await;
    assert_eq!(reg.pulls("e2e/pulled"), after_first, "IfNotPresent does not pull a present image");
    node.write_manifest("always.yaml", &spec("always", &image, "Always"));
    node.wait_running("always-e2e-node").await;
    assert!(reg.pulls("e2e/pulled") > after_first, "Always pulls even when present");

    // An image the registry does not have: ErrImagePull with the runtime's error, then ImagePullBackOff naming
    // it; once the registry has it, the pod starts after its back-off.
    let missing = format!("{}/e2e/later:1", reg.host());
    node.write_manifest("later.yaml", &spec("later", &missing, "IfNotPresent"));
    let waiting = |p: &Value| container_status(p, "app").map(|s| s["state"]["waiting"].clone()).unwrap_or(Value::Null);
    let w = node
        .wait_for("ErrImagePull", START, || async {
            pod("later-e2e-node").await.map(|p| waiting(&p)).filter(|w| w["reason"] == "ErrImagePull")
        })
        .await;
    assert!(w["message"].as_str().unwrap().starts_with("rpc error: code = NotFound desc = "), "{w}");
    let w = node
        .wait_for("ImagePullBackOff", START, || async {
            pod("later-e2e-node").await.map(|p| waiting(&p)).filter(|w| w["reason"] == "ImagePullBackOff")
        })
        .await;
    let m = w["message"].as_str().unwrap();
    assert!(
        m.starts_with(&format!("Back-off pulling image \"{missing}\": ErrImagePull: rpc error: code = NotFound")),
        "{m}"
    );
    reg.add("e2e/later", "1");
    node.wait_running("later-e2e-node").await;
    node.stop_and_clean(&rt).await;
    let ours = remove_image_names(&reg.host());
    assert!(ours.contains(&image) && ours.contains(&missing), "{ours:?}");
}
