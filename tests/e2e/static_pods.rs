//! End to end: static pods on the real containerd through the real rkubelet binary (issue: the foundation).
//! Needs the containerd of `scripts/node-setup.sh` (the test command starts it).

mod common;

use std::time::Duration;

use common::*;
use kubelet_cri::RuntimeService;

const START: Duration = Duration::from_secs(60);

#[tokio::test]
async fn init_container_and_two_containers_come_up_with_upstream_labels_and_logs() {
    let (_g, rt) = fresh_runtime().await;
    let m = manifest(
        "web",
        &[("init", "echo initialized")],
        &[("app", &format!("echo app-started; {SERVE}")), ("side", SERVE)],
        "  terminationGracePeriodSeconds: 5\n",
    );
    let mut node = Node::start(&[("web.yaml", &m)]);
    node.wait_healthy().await;
    let p = node.wait_running("web-e2e-node").await;

    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(uid.len(), 32, "static pod UID is an md5 hex");
    assert_eq!(p["metadata"]["annotations"]["kubernetes.io/config.source"], "file");
    assert_eq!(p["metadata"]["annotations"]["kubernetes.io/config.hash"], uid.as_str());
    assert_eq!(p["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
    let conds: Vec<(String, String)> = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
        .collect();
    for t in ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"] {
        assert!(conds.contains(&(t.to_string(), "True".to_string())), "condition {t} not True: {conds:?}");
    }
    let ip = p["status"]["podIP"].as_str().unwrap();
    assert!(in_pod_cidr(ip), "pod IP from the CNI bridge, got {ip}");

    // What crictl would see: upstream's labels and annotations.
    let cs = containers_of(&rt, "web-e2e-node").await;
    assert_eq!(cs.len(), 3, "init + two app containers");
    let app = cs.iter().find(|c| c.labels["io.kubernetes.container.name"] == "app").unwrap();
    assert_eq!(app.labels["io.kubernetes.pod.namespace"], "default");
    assert_eq!(app.labels["io.kubernetes.pod.uid"], uid);
    assert_eq!(app.annotations["io.kubernetes.container.restartCount"], "0");
    assert_eq!(app.annotations["io.kubernetes.container.terminationMessagePath"], "/dev/termination-log");
    assert_eq!(app.annotations["io.kubernetes.pod.terminationGracePeriod"], "5");
    assert!(u64::from_str_radix(&app.annotations["io.kubernetes.container.hash"], 16).is_ok());
    let sb = sandboxes_of(&rt, "web-e2e-node").await;
    assert_eq!(sb.len(), 1);
    assert_eq!(sb[0].labels["test"], "e2e", "pod labels are on the sandbox");
    assert_eq!(sb[0].metadata.as_ref().unwrap().uid, uid);

    // Logs at <podLogsDir>/<ns>_<name>_<uid>/<container>/<restart>.log in CRI format, linked from /var/log/containers.
    let log = node.logs.join(format!("default_web-e2e-node_{uid}/app/0.log"));
    let text = node
        .wait_for("app log line", Duration::from_secs(10), || async {
            std::fs::read_to_string(&log).ok().filter(|t| t.contains("app-started"))
        })
        .await;
    assert!(text.contains(" stdout F app-started"), "CRI log format: {text}");
    let link = std::path::PathBuf::from(format!("/var/log/containers/web-e2e-node_default_app-{}.log", app.id));
    assert_eq!(std::fs::read_link(&link).unwrap(), log);

    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn crashing_container_restarts_with_growing_backoff() {
    let (_g, rt) = fresh_runtime().await;
    let m = manifest("crash", &[], &[("boom", "echo dying; exit 3")], "");
    let mut node = Node::start(&[("crash.yaml", &m)]);
    // As upstream, the first crash is restarted at once and arms a 10 s back-off that doubles after each
    // further crash: four runs are spaced by ~0, >= 10 s and >= 20 s. The runtime keeps only the newest dead
    // instance (upstream's container deleter), so the starts are read from rkubelet's log.
    let log = node.log_path();
    let starts = node
        .wait_for("four runs of the crashing container", Duration::from_secs(120), || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let starts: Vec<(chrono::DateTime<chrono::FixedOffset>, String)> = text
                .lines()
                .filter(|l| l.contains("started container") && l.contains("containerName=boom"))
                .filter_map(|l| {
                    let at = chrono::DateTime::parse_from_rfc3339(l.split_whitespace().next()?).ok()?;
                    let count = l.split("restartCount=").nth(1)?.split_whitespace().next()?.to_string();
                    Some((at, count))
                })
                .collect();
            (starts.len() >= 4).then_some(starts)
        })
        .await;
    let gap = |i: usize| (starts[i + 1].0 - starts[i].0).to_std().unwrap();
    assert!(gap(0) < Duration::from_secs(10), "first restart is immediate, was {:?}", gap(0));
    assert!(gap(1) >= Duration::from_secs(10), "second restart after the 10 s back-off, was {:?}", gap(1));
    assert!(gap(2) >= Duration::from_secs(20), "third restart after the 20 s back-off, was {:?}", gap(2));
    assert!(gap(2) < Duration::from_secs(40), "but not much later: {:?}", gap(2));
    let counts: Vec<&str> = starts.iter().map(|s| s.1.as_str()).collect();
    assert_eq!(counts[..4], ["0", "1", "2", "3"], "the restart count goes up by one per run");
    // The restart count is on the container, and only the newest dead instance is kept beside the new one.
    let cs = containers_of(&rt, "crash-e2e-node").await;
    assert!(cs.len() <= 2, "older dead instances removed as they die: {} containers", cs.len());
    let restart_counts: Vec<&str> =
        cs.iter().map(|c| c.annotations["io.kubernetes.container.restartCount"].as_str()).collect();
    assert!(restart_counts.iter().any(|c| c.parse::<u32>().unwrap_or(0) >= 3), "{restart_counts:?}");
    let p = node
        .wait_for("CrashLoopBackOff in status", Duration::from_secs(30), || async {
            pod("crash-e2e-node").await.filter(|p| {
                container_status(p, "boom").is_some_and(|s| {
                    s["state"]["waiting"]["reason"] == "CrashLoopBackOff" && s["restartCount"].as_i64() >= Some(3)
                })
            })
        })
        .await;
    let s = container_status(&p, "boom").unwrap();
    assert!(s["restartCount"].as_i64().unwrap() >= 3);
    assert_eq!(s["lastState"]["terminated"]["exitCode"], 3);
    assert!(s["state"]["waiting"]["message"].as_str().unwrap().contains("back-off"));
    assert_eq!(p["status"]["phase"], "Running", "restartPolicy Always keeps the pod Running");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn edited_manifest_replaces_the_pod_and_removed_manifest_leaves_nothing() {
    let (_g, rt) = fresh_runtime().await;
    let v1 = manifest("edit", &[], &[("app", &format!("echo v1; {SERVE}"))], "  terminationGracePeriodSeconds: 5\n");
    let mut node = Node::start(&[("edit.yaml", &v1)]);
    let p1 = node.wait_running("edit-e2e-node").await;
    let uid1 = p1["metadata"]["uid"].as_str().unwrap().to_string();
    let c1 = container_status(&p1, "app").unwrap()["containerID"].as_str().unwrap().to_string();

    let v2 = manifest("edit", &[], &[("app", &format!("echo v2; {SERVE}"))], "  terminationGracePeriodSeconds: 5\n");
    node.write_manifest("edit.yaml", &v2);
    let p2 = node
        .wait_for("v2 Running under a new UID", START, || async {
            pod("edit-e2e-node").await.filter(|p| p["metadata"]["uid"] != uid1.as_str() && all_running(p))
        })
        .await;
    let c2 = container_status(&p2, "app").unwrap()["containerID"].as_str().unwrap().to_string();
    assert_ne!(c1, c2, "the container was replaced");
    node.wait_for("the old pod's sandbox removed", Duration::from_secs(30), || async {
        let sbs = sandboxes_of(&rt, "edit-e2e-node").await;
        (sbs.len() == 1 && sbs[0].metadata.as_ref().unwrap().uid != uid1).then_some(())
    })
    .await;
    // The cgroup goes last, right after the sandbox.
    node.wait_for("old pod cgroup removed", Duration::from_secs(10), || async {
        (!pod_cgroup_exists(&uid1)).then_some(())
    })
    .await;

    let uid2 = p2["metadata"]["uid"].as_str().unwrap().to_string();
    node.remove_manifest("edit.yaml");
    node.wait_for("no sandbox or container of the removed pod", Duration::from_secs(30), || async {
        (sandboxes_of(&rt, "edit-e2e-node").await.is_empty() && containers_of(&rt, "edit-e2e-node").await.is_empty())
            .then_some(())
    })
    .await;
    node.wait_for("pod gone from the read-only API", Duration::from_secs(10), || async {
        pod("edit-e2e-node").await.is_none().then_some(())
    })
    .await;
    // Housekeeping removes the cgroup and the folders once the worker has finished, as upstream's
    // HandlePodCleanups does; the pod leaves the read-only API before that.
    node.wait_for("pod cgroup removed", Duration::from_secs(10), || async {
        (!pod_cgroup_exists(&uid2)).then_some(())
    })
    .await;
    let pod_dir = node.root.join("pods").join(&uid2);
    let log_dir = node.logs.join(format!("default_edit-e2e-node_{uid2}"));
    node.wait_for("pod directory and log directory removed", Duration::from_secs(10), || async {
        (!pod_dir.exists() && !log_dir.exists()).then_some(())
    })
    .await;
    assert!(node.log().contains("pod removed"), "cleanup logged");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn kill9_and_restart_restarts_nothing_and_removes_what_lost_its_manifest() {
    let (_g, rt) = fresh_runtime().await;
    let keep = manifest("keep", &[("init", "true")], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    let gone = manifest("gone", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    let mut node = Node::start(&[("keep.yaml", &keep), ("gone.yaml", &gone)]);
    let before = node.wait_running("keep-e2e-node").await;
    node.wait_running("gone-e2e-node").await;
    let ids_before: Vec<String> = containers_of(&rt, "keep-e2e-node").await.into_iter().map(|c| c.id).collect();

    node.kill9();
    node.remove_manifest("gone.yaml");
    node.spawn();
    node.wait_healthy().await;
    node.wait_for("the pod without a manifest removed", Duration::from_secs(30), || async {
        sandboxes_of(&rt, "gone-e2e-node").await.is_empty().then_some(())
    })
    .await;
    let after = node
        .wait_for("keep reported Running after restart", Duration::from_secs(30), || async {
            pod("keep-e2e-node").await.filter(all_running)
        })
        .await;
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(container_status(&after, "app"), container_status(&before, "app"), "same container, same restart count");
    let ids_after: Vec<String> = containers_of(&rt, "keep-e2e-node").await.into_iter().map(|c| c.id).collect();
    assert_eq!(ids_after, ids_before, "no container was created or removed");
    assert_eq!(sandboxes_of(&rt, "keep-e2e-node").await.len(), 1);
    node.stop_and_clean(&rt).await;
}

/// The id of the running container `name` of the pod.
async fn running_container(rt: &kubelet_cri::RemoteRuntime, pod: &str, name: &str) -> String {
    let c = containers_of(rt, pod).await.into_iter().find(|c| {
        c.metadata.as_ref().is_some_and(|m| m.name == name)
            && c.state == kubelet_cri::api::ContainerState::ContainerRunning as i32
    });
    c.unwrap_or_else(|| panic!("container {name} of {pod} running")).id
}

#[tokio::test]
async fn container_exits_while_rkubelet_is_down_and_right_after_its_restart_are_both_seen() {
    let (_g, rt) = fresh_runtime().await;
    // Container events (containerd 2) do not replay what happened while nobody listened: the restart's first relist
    // must catch up with an exit during the downtime, and the stream opened before it must deliver an exit right
    // after. Either one found only by the 60 s safety relist would miss the deadline below.
    let m = manifest("evt", &[], &[("a", SERVE), ("b", SERVE)], "  terminationGracePeriodSeconds: 2\n");
    let mut node = Node::start(&[("evt.yaml", &m)]);
    node.wait_running("evt-e2e-node").await;
    let a = running_container(&rt, "evt-e2e-node", "a").await;
    let b = running_container(&rt, "evt-e2e-node", "b").await;

    node.kill9();
    rt.stop_container(&a, 0).await.unwrap();
    node.spawn();
    node.wait_healthy().await;
    let t = tokio::time::Instant::now();
    rt.stop_container(&b, 0).await.unwrap();
    let restarted = |p: &serde_json::Value, c: &str| {
        container_status(p, c).is_some_and(|s| {
            s["restartCount"] == 1
                && s["state"]["running"].is_object()
                && s["lastState"]["terminated"]["exitCode"] == 137
        })
    };
    let p = node
        .wait_for("a and b restarted once each, their exits (137) reported", Duration::from_secs(30), || async {
            pod("evt-e2e-node").await.filter(|p| restarted(p, "a") && restarted(p, "b"))
        })
        .await;
    println!(
        "FIGURE exits during and right after an rkubelet restart: both containers restarted and reported {:.1} s after the restart",
        t.elapsed().as_secs_f64()
    );
    assert!(all_running(&p));
    if containerd_version() != "1.6" {
        assert!(node.log().contains("container events stream connected"), "the PLEG is driven by container events");
        assert_eq!(node_metric("kubelet_evented_pleg_connection_success_count").await, 1.0);
        assert_eq!(node_metric("kubelet_evented_pleg_connection_error_count").await, 0.0);
        assert!(node_metric("kubelet_evented_pleg_connection_latency_seconds_count").await >= 1.0, "b's exit arrived");
    }
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn bad_manifest_is_refused_while_a_good_one_runs() {
    let (_g, rt) = fresh_runtime().await;
    let good = manifest("good", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    let bad = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    ports:\n    - containerPort: not-a-number\n";
    let mut node = Node::start(&[("good.yaml", &good), ("bad.yaml", bad)]);
    node.wait_running("good-e2e-node").await;
    let log = node.log();
    let line = log.lines().find(|l| l.contains("manifest refused")).expect("a log line refusing the manifest");
    assert!(line.contains("bad.yaml"), "names the file: {line}");
    assert!(line.contains("spec.containers[0].ports[0].containerPort"), "names the field: {line}");
    assert!(pod("bad-e2e-node").await.is_none());
    assert!(sandboxes_of(&rt, "bad-e2e-node").await.is_empty());
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn pods_setting_fields_rkubelet_does_not_apply_are_refused_naming_the_field() {
    let (_g, rt) = fresh_runtime().await;
    // Fields of `kubelet::admission_fields::UNSUPPORTED_FIELDS` a static pod's validation lets through: each pod is
    // refused at admission, never run as if the field were absent; a plain pod beside them runs.
    let app = |name: &str, spec: &str, container: &str, tail: &str| {
        manifest(name, &[], &[("app", SERVE)], spec) + container + tail
    };
    let scratch = "  volumes:\n  - name: scratch\n    emptyDir: {}\n";
    let cases = [
        ("override", app("override", "  hostnameOverride: other-name\n", "", ""), "spec.hostnameOverride"),
        (
            "stopsig",
            app("stopsig", "  os:\n    name: linux\n", "    lifecycle:\n      stopSignal: SIGUSR1\n", ""),
            "spec.containers[0].lifecycle.stopSignal",
        ),
        (
            "envfile",
            app(
                "envfile",
                "",
                "    env:\n    - name: A\n      valueFrom:\n        fileKeyRef:\n          volumeName: scratch\n          \
                 path: vars.env\n          key: A\n",
                scratch,
            ),
            "spec.containers[0].env[0].valueFrom.fileKeyRef",
        ),
        (
            "rules",
            app(
                "rules",
                "",
                "    restartPolicyRules:\n    - action: Restart\n      exitCodes:\n        operator: In\n        \
                 values: [42]\n",
                "",
            ),
            "spec.containers[0].restartPolicyRules",
        ),
    ];
    let plain = manifest("plain", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n");
    let mut files: Vec<(String, String)> = cases.iter().map(|(n, m, _)| (format!("{n}.yaml"), m.clone())).collect();
    files.push(("plain.yaml".into(), plain));
    let files: Vec<(&str, &str)> = files.iter().map(|(n, m)| (n.as_str(), m.as_str())).collect();
    let mut node = Node::start(&files);
    node.wait_running("plain-e2e-node").await;
    for (name, _, path) in &cases {
        let pod_name = format!("{name}-e2e-node");
        let p = node.wait_phase(&pod_name, "Failed").await;
        assert_eq!(p["status"]["reason"], "UnsupportedPodField", "{p}");
        let message = p["status"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(&format!("Pod was rejected: can't set `{path}`: ")), "{message}");
        assert!(message.ends_with("run the pod on a node with the upstream kubelet"), "{message}");
        assert!(sandboxes_of(&rt, &pod_name).await.is_empty(), "{pod_name} never ran");
    }
    assert!(node.log().contains("UnsupportedPodField"), "the refusal is in rkubelet's log");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn sigterm_stops_rkubelet_and_leaves_pods_running() {
    let (_g, rt) = fresh_runtime().await;
    let m = manifest("stay", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 5\n");
    let mut node = Node::start(&[("stay.yaml", &m)]);
    node.wait_running("stay-e2e-node").await;
    let st = node.sigterm();
    assert!(st.success(), "clean exit on SIGTERM, got {st}");
    let cs = containers_of(&rt, "stay-e2e-node").await;
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].state, kubelet_cri::api::ContainerState::ContainerRunning as i32, "the pod keeps running");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn invalid_config_stops_startup_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.yaml");
    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsyncFrequency: soon\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkubelet")).arg("--config").arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("syncFrequency") && err.contains("soon"), "{err}");

    std::fs::write(
        &cfg,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeLeaseDurationSeconds: -3\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rkubelet")).arg("--config").arg(&cfg).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nodeLeaseDurationSeconds") && err.contains("-3"), "{err}");
}

#[tokio::test]
async fn run_to_completion_pods_reach_their_terminal_phase_with_the_termination_message() {
    let (_g, rt) = fresh_runtime().await;
    let ok = manifest("done", &[], &[("job", "echo finished")], "  restartPolicy: Never\n");
    let failing = manifest(
        "failed",
        &[],
        &[("job", "echo -n 'disk full' > /dev/termination-log; exit 2")],
        "  restartPolicy: Never\n",
    );
    let onfailure = manifest("onfailure", &[], &[("job", "exit 0")], "  restartPolicy: OnFailure\n");
    let mut node = Node::start(&[("done.yaml", &ok), ("failed.yaml", &failing), ("onfailure.yaml", &onfailure)]);
    let done = node
        .wait_for("done Succeeded", START, || async {
            pod("done-e2e-node").await.filter(|p| p["status"]["phase"] == "Succeeded")
        })
        .await;
    assert_eq!(container_status(&done, "job").unwrap()["state"]["terminated"]["reason"], "Completed");
    let failed = node
        .wait_for("failed Failed", START, || async {
            pod("failed-e2e-node").await.filter(|p| p["status"]["phase"] == "Failed")
        })
        .await;
    let t = &container_status(&failed, "job").unwrap()["state"]["terminated"];
    assert_eq!(t["exitCode"], 2);
    assert_eq!(t["reason"], "Error");
    assert_eq!(t["message"], "disk full", "the termination message file is read back");
    node.wait_for("onfailure Succeeded (a success is not restarted)", START, || async {
        pod("onfailure-e2e-node").await.filter(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    // Finished pods are not restarted and their sandboxes are stopped, as upstream.
    node.wait_for("sandboxes of finished pods stopped", Duration::from_secs(30), || async {
        let mut all = vec![];
        for p in ["done-e2e-node", "failed-e2e-node", "onfailure-e2e-node"] {
            all.extend(sandboxes_of(&rt, p).await);
        }
        all.iter().all(|s| s.state == kubelet_cri::api::PodSandboxState::SandboxNotready as i32).then_some(())
    })
    .await;
    for p in ["done-e2e-node", "failed-e2e-node", "onfailure-e2e-node"] {
        assert_eq!(containers_of(&rt, p).await.len(), 1, "{p} ran exactly once");
    }
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn removal_sends_sigterm_then_sigkill_after_the_grace_period() {
    let (_g, rt) = fresh_runtime().await;
    // `sleep` as PID 1 ignores SIGTERM: only SIGKILL at the end of the 3 s grace period stops it.
    let stubborn = manifest("stubborn", &[], &[("app", "exec sleep 3600")], "  terminationGracePeriodSeconds: 3\n");
    // This one exits on SIGTERM, long before its 30 s grace period.
    let polite = manifest("polite", &[], &[("app", SERVE)], "  terminationGracePeriodSeconds: 30\n");
    let mut node = Node::start(&[("stubborn.yaml", &stubborn), ("polite.yaml", &polite)]);
    let p = node.wait_running("stubborn-e2e-node").await;
    node.wait_running("polite-e2e-node").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(
        std::path::Path::new("/sys/fs/cgroup/memory/kubepods/besteffort").join(format!("pod{uid}")).is_dir()
            || std::path::Path::new("/sys/fs/cgroup/kubepods/besteffort").join(format!("pod{uid}")).is_dir(),
        "a BestEffort pod's cgroup is under kubepods/besteffort"
    );

    let t0 = tokio::time::Instant::now();
    node.remove_manifest("polite.yaml");
    node.wait_for("polite gone", Duration::from_secs(30), || async {
        containers_of(&rt, "polite-e2e-node").await.is_empty().then_some(())
    })
    .await;
    let polite_took = t0.elapsed();
    assert!(polite_took < Duration::from_secs(3), "SIGTERM stops a container that honours it at once: {polite_took:?}");

    let t0 = tokio::time::Instant::now();
    node.remove_manifest("stubborn.yaml");
    node.wait_for("stubborn gone", Duration::from_secs(30), || async {
        containers_of(&rt, "stubborn-e2e-node").await.is_empty().then_some(())
    })
    .await;
    let stubborn_took = t0.elapsed();
    assert!(stubborn_took >= Duration::from_secs(3), "the grace period is waited for: {stubborn_took:?}");
    assert!(stubborn_took < Duration::from_secs(8), "then SIGKILL: {stubborn_took:?}");
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn image_pull_policies_and_pull_errors_show_in_the_status() {
    let (_g, rt) = fresh_runtime().await;
    // Never with a missing image: ErrImageNeverPull. A registry that refuses connections (nothing listens on
    // port 1 of loopback): ErrImagePull, then ImagePullBackOff. A present image with Never: runs.
    let never = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: never\nspec:\n  containers:\n  - name: app\n    image: localhost/absent:1\n    imagePullPolicy: Never\n";
    let unreachable = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unreachable\nspec:\n  containers:\n  - name: app\n    image: 127.0.0.1:1/absent:1\n";
    let present = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: present\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: app\n    image: localhost/busybox:1\n    imagePullPolicy: Never\n    command: [\"sleep\", \"3600\"]\n";
    let mut node = Node::start(&[("never.yaml", never), ("unreachable.yaml", unreachable), ("present.yaml", present)]);
    let waiting_reason = |p: &serde_json::Value| {
        container_status(p, "app").and_then(|s| s["state"]["waiting"]["reason"].as_str().map(str::to_string))
    };
    let p = node
        .wait_for("ErrImageNeverPull", START, || async {
            pod("never-e2e-node").await.filter(|p| waiting_reason(p).as_deref() == Some("ErrImageNeverPull"))
        })
        .await;
    let msg = container_status(&p, "app").unwrap()["state"]["waiting"]["message"].as_str().unwrap().to_string();
    assert_eq!(msg, "Container image \"localhost/absent:1\" is not present with pull policy of Never");
    assert_eq!(p["status"]["phase"], "Pending");
    node.wait_for("ErrImagePull", START, || async {
        pod("unreachable-e2e-node").await.filter(|p| waiting_reason(p).as_deref() == Some("ErrImagePull"))
    })
    .await;
    node.wait_for("ImagePullBackOff", START, || async {
        pod("unreachable-e2e-node").await.filter(|p| waiting_reason(p).as_deref() == Some("ImagePullBackOff"))
    })
    .await;
    node.wait_running("present-e2e-node").await;
    assert!(containers_of(&rt, "never-e2e-node").await.is_empty());
    node.stop_and_clean(&rt).await;
}

#[tokio::test]
async fn a_dead_sandbox_is_recreated_with_its_containers() {
    let (_g, rt) = fresh_runtime().await;
    let m = manifest("phoenix", &[("init", "true")], &[("app", SERVE)], "  terminationGracePeriodSeconds: 2\n");
    let mut node = Node::start(&[("phoenix.yaml", &m)]);
    let before = node.wait_running("phoenix-e2e-node").await;
    let sb = sandboxes_of(&rt, "phoenix-e2e-node").await.remove(0);
    // Kill the sandbox's pause process behind the kubelet's back.
    let sock = endpoint().trim_start_matches("unix://").to_string();
    let out = std::process::Command::new(runtime_program("ctr"))
        .args(["-a", &sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", &sb.id])
        .output()
        .unwrap();
    assert!(out.status.success(), "ctr tasks kill: {}", String::from_utf8_lossy(&out.stderr));
    let after = node
        .wait_for("the pod running again in a new sandbox", START, || async {
            pod("phoenix-e2e-node").await.filter(|p| {
                all_running(p)
                    && container_status(p, "app").unwrap()["containerID"]
                        != container_status(&before, "app").unwrap()["containerID"]
            })
        })
        .await;
    let sbs = sandboxes_of(&rt, "phoenix-e2e-node").await;
    let newest = sbs.iter().max_by_key(|s| s.created_at).unwrap();
    assert_eq!(newest.metadata.as_ref().unwrap().attempt, 1, "the new sandbox is attempt 1");
    assert_eq!(newest.state, kubelet_cri::api::PodSandboxState::SandboxReady as i32);
    assert_eq!(container_status(&after, "app").unwrap()["restartCount"], 1);
    assert_eq!(after["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 0, "init ran again");
    node.stop_and_clean(&rt).await;
}
