//! End to end: in-place pod resize (issue 30), rkubelet a node of the real cluster (kube-apiserver with
//! InPlacePodVerticalScaling on by default, the real `kubectl patch --subresource resize`, the real containerd).
//!
//! A running Burstable pod's container is raised and lowered in CPU and memory with 0 restarts: the container's own
//! cgroup files and the pod cgroup follow, `status.containerStatuses[].resources` and `allocatedResources` report
//! the new figures, the `PodResizeInProgress` condition comes and goes and a `ResizeCompleted` event is recorded.
//! A resize beyond the node is `Infeasible` with upstream's message; one the other pods leave no room for is
//! `Deferred` until one of them goes; a container whose `resizePolicy` asks for it is restarted.
//! `allocated_pods_state` holds the allocation in upstream's format.

mod common;

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use common::cluster::TestEnv;
use common::*;
use kubelet_cri::RuntimeService;
use serde_json::Value;

/// The CPU quota and memory limit a running container of `pod` sees in its own cgroup (`container`).
async fn container_limits(rt: &kubelet_cri::RemoteRuntime, pod: &str, container: &str) -> Option<(String, String)> {
    let c = containers_of(rt, pod)
        .await
        .into_iter()
        .find(|c| c.state == 1 && c.metadata.as_ref().is_some_and(|m| m.name == container))?;
    let script = "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || \
                  cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max";
    let cmd = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    let out = rt.exec_sync(&c.id, cmd, Duration::from_secs(10)).await.ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines = text.lines().map(|l| l.split_whitespace().next().unwrap_or("").to_string());
    Some((lines.next()?, lines.next()?))
}

/// The memory+swap limit a running container of `pod` sees (cgroup v1 with swap accounting; None elsewhere).
async fn memsw_limit(rt: &kubelet_cri::RemoteRuntime, pod: &str, container: &str) -> Option<String> {
    let c = containers_of(rt, pod)
        .await
        .into_iter()
        .find(|c| c.state == 1 && c.metadata.as_ref().is_some_and(|m| m.name == container))?;
    let cmd = vec!["cat".to_string(), "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes".to_string()];
    let out = rt.exec_sync(&c.id, cmd, Duration::from_secs(10)).await.ok()?;
    (out.exit_code == 0).then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A file of the pod's cgroup in v1 hierarchy `controller` (the cgroupfs driver of the test nodes).
fn pod_cgroup_file(controller: &str, uid: &str, file: &str) -> String {
    let [_, burstable, _] = kubepods_dirs();
    let p = Path::new("/sys/fs/cgroup").join(controller).join(burstable).join(format!("pod{uid}")).join(file);
    std::fs::read_to_string(&p).map(|s| s.trim().to_string()).unwrap_or_default()
}

fn resources(cpu_req: &str, cpu_lim: &str, mem_req: &str, mem_lim: &str) -> String {
    format!(
        r#"{{"requests":{{"cpu":"{cpu_req}","memory":"{mem_req}"}},"limits":{{"cpu":"{cpu_lim}","memory":"{mem_lim}"}}}}"#
    )
}

async fn resize(env: &TestEnv, pod: &str, container: &str, r: &str) -> (bool, String) {
    let patch = format!(r#"{{"spec":{{"containers":[{{"name":"{container}","resources":{r}}}]}}}}"#);
    let (ok, out, err) = env.kubectl_output(&["patch", "pod", pod, "--subresource", "resize", "--patch", &patch]).await;
    (ok, format!("{out}{err}"))
}

fn conditions(p: &Value) -> Vec<Value> {
    p["status"]["conditions"].as_array().cloned().unwrap_or_default()
}

fn resize_condition(p: &Value, kind: &str) -> Option<Value> {
    conditions(p).into_iter().find(|c| c["type"] == kind)
}

/// The pod once its status reports `r` for `container`, at the pod's generation, with no resize condition.
async fn wait_resized(env: &TestEnv, node: &mut Node, pod: &str, container: &str, r: &str) -> Value {
    let want: Value = serde_json::from_str(r).unwrap();
    node.wait_for(&format!("{pod}/{container} reported resized to {r}"), Duration::from_secs(60), || async {
        let p = env.pod(pod).await?;
        let s = container_status(&p, container)?;
        let done = s["resources"] == want
            && s["allocatedResources"] == want["requests"]
            && p["status"]["observedGeneration"] == p["metadata"]["generation"]
            && resize_condition(&p, "PodResizeInProgress").is_none()
            && resize_condition(&p, "PodResizePending").is_none();
        done.then_some(p)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_pod_is_resized_in_place_deferred_refused_and_restarted_as_upstream() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    // One core allocatable, so the other pods can leave no room for a resize.
    let reserve = format!("kubeReserved:\n  cpu: {}m\n", (cores - 1) * 1000);
    let mut node = env.start_node_with(
        &[],
        |n| std::fs::read_to_string(&n.config).unwrap() + if cores > 1 { reserve.as_str() } else { "" },
        vec![],
    );
    let n = env.wait_node_ready(&mut node).await;
    assert_eq!(n["status"]["allocatable"]["cpu"], "1", "{}", n["status"]);

    let spec = format!(
        "{}    resources: {}\n  - name: side\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", {}]\n    \
         resources: {}\n    resizePolicy:\n    - resourceName: memory\n      restartPolicy: RestartContainer\n",
        env.pod_yaml("web", &[("app", SERVE)], ""),
        resources("100m", "200m", "64Mi", "128Mi"),
        serde_json::to_string(SERVE).unwrap(),
        resources("50m", "100m", "32Mi", "64Mi"),
    );
    env.create(&spec).await;
    let p = env.wait_pod_running(&mut node, "web").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let s = container_status(&p, "app").unwrap();
    assert_eq!(s["resources"], serde_json::from_str::<Value>(&resources("100m", "200m", "64Mi", "128Mi")).unwrap());
    assert_eq!(s["allocatedResources"]["cpu"], "100m", "{s}");
    assert_eq!(p["status"]["observedGeneration"], p["metadata"]["generation"]);
    assert_eq!(container_limits(&rt, "web", "app").await, Some(("20000".into(), (128u64 << 20).to_string())));
    // NoSwap (the default): where the kernel accounts swap, memory plus swap is held to the memory limit.
    let swap_accounting = Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists();
    if swap_accounting {
        assert_eq!(memsw_limit(&rt, "web", "app").await, Some((128u64 << 20).to_string()));
    }

    // Up: 0 restarts, the container's cgroup and the pod cgroup follow.
    let up = resources("200m", "400m", "96Mi", "192Mi");
    let patched = Instant::now();
    let (ok, out) = resize(&env, "web", "app", &up).await;
    assert!(ok, "{out}");
    let want = Some(("40000".to_string(), (192u64 << 20).to_string()));
    node.wait_for("the container's cgroup raised", Duration::from_secs(30), || async {
        (container_limits(&rt, "web", "app").await == want).then_some(())
    })
    .await;
    let up_latency = patched.elapsed();
    let p = wait_resized(&env, &mut node, "web", "app", &up).await;
    assert_eq!(container_status(&p, "app").unwrap()["restartCount"], 0);
    if swap_accounting {
        assert_eq!(memsw_limit(&rt, "web", "app").await, Some((192u64 << 20).to_string()), "NoSwap kept by the resize");
    }
    assert_eq!(pod_cgroup_file("cpu", &uid, "cpu.cfs_quota_us"), "50000", "the pod's quota: 400m + side's 100m");
    assert_eq!(pod_cgroup_file("memory", &uid, "memory.limit_in_bytes"), ((192u64 + 64) << 20).to_string());
    assert_eq!(pod_cgroup_file("cpu", &uid, "cpu.shares"), ((250 * 1024) / 1000).to_string());
    let events =
        env.get(&["events", "--field-selector", "involvedObject.name=web,reason=ResizeCompleted"]).await.unwrap();
    let message = events["items"][0]["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.starts_with(r#"Pod resize completed: {"containers":[{"name":"app","resources":{"limits":{"cpu":"400m","memory":"192Mi"},"requests":{"cpu":"200m","memory":"96Mi"}}}"#),
        "{events}"
    );

    // Down, below where it started.
    let down = resources("50m", "100m", "48Mi", "96Mi");
    let patched = Instant::now();
    let (ok, out) = resize(&env, "web", "app", &down).await;
    assert!(ok, "{out}");
    let want = Some(("10000".to_string(), (96u64 << 20).to_string()));
    node.wait_for("the container's cgroup lowered", Duration::from_secs(30), || async {
        (container_limits(&rt, "web", "app").await == want).then_some(())
    })
    .await;
    let down_latency = patched.elapsed();
    let p = wait_resized(&env, &mut node, "web", "app", &down).await;
    assert_eq!(container_status(&p, "app").unwrap()["restartCount"], 0);
    assert_eq!(pod_cgroup_file("cpu", &uid, "cpu.cfs_quota_us"), "20000");
    assert_eq!(pod_cgroup_file("memory", &uid, "memory.limit_in_bytes"), ((96u64 + 64) << 20).to_string());
    println!("e2e_resize: patch to the container's new cgroup limits: up {up_latency:?}, down {down_latency:?}");

    // More than the node has: Infeasible, with upstream's message; reverting clears it.
    let (ok, out) = resize(&env, "web", "app", &resources("2000", "2000", "48Mi", "96Mi")).await;
    assert!(ok, "{out}");
    let pending = node
        .wait_for("the resize Infeasible", Duration::from_secs(30), || async {
            resize_condition(&env.pod("web").await?, "PodResizePending").filter(|c| c["reason"] == "Infeasible")
        })
        .await;
    assert_eq!(
        pending["message"],
        format!("Node didn't have enough capacity: cpu, requested: 2000050, capacity: {}", 1000),
        "{pending}"
    );
    let (ok, out) = resize(&env, "web", "app", &down).await;
    assert!(ok, "{out}");
    wait_resized(&env, &mut node, "web", "app", &down).await;

    // No room while another pod holds it: Deferred with the admission's message, done once that pod goes.
    let filler = env.pod_yaml("filler", &[("app", SERVE)], "") + "    resources:\n      requests:\n        cpu: 700m\n";
    env.create(&filler).await;
    env.wait_pod_running(&mut node, "filler").await;
    let wide = resources("400m", "400m", "48Mi", "96Mi");
    let (ok, out) = resize(&env, "web", "app", &wide).await;
    assert!(ok, "{out}");
    let pending = node
        .wait_for("the resize Deferred", Duration::from_secs(30), || async {
            resize_condition(&env.pod("web").await?, "PodResizePending").filter(|c| c["reason"] == "Deferred")
        })
        .await;
    let m = pending["message"].as_str().unwrap_or_default();
    assert!(m.starts_with("Node didn't have enough resource: cpu, requested: 450, used: 700, capacity: 1000"), "{m}");
    assert_eq!(container_limits(&rt, "web", "app").await.unwrap().0, "10000", "not applied while deferred");
    env.kubectl(&["delete", "pod", "filler", "--wait=false"]).await;
    let p = wait_resized(&env, &mut node, "web", "app", &wide).await;
    assert_eq!(container_status(&p, "app").unwrap()["restartCount"], 0);
    assert_eq!(container_limits(&rt, "web", "app").await.unwrap().0, "40000");

    let metrics = http_get(read_only_port(), "/metrics").await.map(|(_, b)| b).unwrap_or_default();
    assert!(
        metrics.contains("kubelet_pod_resize_duration_milliseconds_count{success=\"true\"}"),
        "{}",
        tail(&metrics, 20)
    );

    // The second container asks to be restarted for memory: it is, with its new limit.
    let side = resources("50m", "100m", "48Mi", "80Mi");
    let (ok, out) = resize(&env, "web", "side", &side).await;
    assert!(ok, "{out}");
    let p = wait_resized(&env, &mut node, "web", "side", &side).await;
    assert_eq!(container_status(&p, "side").unwrap()["restartCount"], 1, "RestartContainer");
    assert_eq!(container_status(&p, "app").unwrap()["restartCount"], 0);
    assert_eq!(container_limits(&rt, "web", "side").await.unwrap().1, (80u64 << 20).to_string());

    // The allocation is checkpointed in upstream's format; rkubelet restarts without touching the containers.
    let state =
        kubelet_cm::allocation_state::PodResourceState::open(&node.root, kubelet_cm::allocation_state::ALLOCATED_FILE)
            .expect("allocated_pods_state reads back with its checksum");
    let app = state.container(&uid, "app").unwrap();
    assert_eq!(app.limits.unwrap()["cpu"].0, "400m");
    node.kill9();
    node.spawn();
    node.wait_healthy().await;
    node.wait_for("the pod synced again", Duration::from_secs(30), || async {
        let p = env.pod("web").await?;
        (all_running(&p) && container_status(&p, "app")?["restartCount"] == 0).then_some(())
    })
    .await;
    assert_eq!(container_limits(&rt, "web", "app").await.unwrap().0, "40000");
    node.stop_and_clean(&rt).await;
}
