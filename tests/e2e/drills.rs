//! Fault drills against the real control plane and containerd: a workload (10 pods in the suite, 30 with
//! `scripts/test.sh --long`: volumes, probes, a sidecar) runs while the runtime is killed or gone (20 s; a minute
//! with `--long`), rkubelet is killed mid-way or upgraded, the apiserver is stopped (45 s; two minutes) or
//! restarted, etcd is stopped (20 s; a minute). Each drill ends with the invariant of `common::drill` and prints it.

mod common;

use std::time::Duration;

use common::cluster::{TestEnv, condition};
use common::drill::{self, Baseline, Expect};
use common::kubelet_api::KubeletApi;
use common::*;
use kubelet_cri::RemoteRuntime;
use nix::sys::signal::Signal;
use tokio::time::Instant;

/// The workload: 30 pods with `--long`, 10 in the suite.
fn workload() -> usize {
    by_mode(10, 30)
}

/// How long the runtime and etcd stay away: 60 s with `--long`, 20 s in the suite.
fn short_outage() -> Duration {
    by_mode(Duration::from_secs(20), Duration::from_secs(60))
}

/// How long the apiserver stays away: 120 s with `--long`, 45 s in the suite (past the 40 s node lease grace).
fn apiserver_outage() -> Duration {
    by_mode(Duration::from_secs(45), Duration::from_secs(120))
}

/// A cluster node whose API lets anonymous clients in (for `/metrics/probes`).
fn start(env: &TestEnv) -> Node {
    env.start_node_with(
        &[],
        |n| {
            std::fs::read_to_string(&n.config)
                .unwrap()
                .replace("anonymous:\n    enabled: false", "anonymous:\n    enabled: true")
        },
        vec![],
    )
}

/// The drill's start: a node with the workload Running, and their state.
async fn thirty_pods() -> (Serial, RemoteRuntime, TestEnv, Node, Baseline) {
    let (g, rt) = fresh_runtime().await;
    drill::note_preexisting_cgroups();
    let env = TestEnv::new().await;
    let mut node = start(&env);
    env.wait_node_ready(&mut node).await;
    let file = env.write("workload.yaml", &drill::workload_yaml(&env, workload()));
    env.kubectl(&["apply", "-f", file.to_str().unwrap()]).await;
    let names = drill::names(workload());
    let want = Expect { running: &names, unchanged: None };
    let c = drill::wait_invariant("start", &env, &mut node, &rt, want, Duration::from_secs(300)).await;
    (g, rt, env, node, c.state)
}

/// The pods that must run after a drill: the workload plus `extra`.
fn with(extra: &[&str]) -> Vec<String> {
    let mut v = drill::names(workload());
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// Waits until the Node's Ready condition is `status`.
async fn wait_ready(env: &TestEnv, node: &mut Node, status: &str, timeout: Duration) -> Duration {
    let start = Instant::now();
    node.wait_for(&format!("Node Ready={status}"), timeout, || async {
        env.node_object().await.filter(|n| condition(n, "Ready").as_deref() == Some(status))
    })
    .await;
    start.elapsed()
}

/// Keeps checking for `span` that rkubelet lives and still reports the workload running on its own API.
async fn ride_out(node: &mut Node, ns: &str, span: Duration) {
    let end = Instant::now() + span;
    while Instant::now() < end {
        node.assert_alive();
        let running = pods()
            .await
            .iter()
            .filter(|p| p["metadata"]["namespace"] == ns && p["status"]["phase"] == "Running")
            .count();
        assert!(running >= workload(), "during the outage the node reports only {running} pods Running");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_crashes_outages_and_an_upgrade_lose_nothing() {
    let (_g, rt, env, mut node, base) = thirty_pods().await;
    let names = drill::names(workload());

    // 1a. containerd killed (SIGKILL) while three pods are being created, and started again.
    let extra = ["e-0", "e-1", "e-2"];
    for e in extra {
        env.create(&env.pod_yaml(e, &[("app", drill::IDLE)], "")).await;
    }
    let t = Instant::now();
    tokio::task::spawn_blocking(|| {
        drill::stop_containerd(Signal::SIGKILL);
        drill::start_containerd();
    })
    .await
    .unwrap();
    let running = with(&extra);
    let want = Expect { running: &running, unchanged: Some(&base) };
    let c = drill::wait_invariant("containerd-killed", &env, &mut node, &rt, want, Duration::from_secs(180)).await;
    drill::report(format_args!("drill containerd-killed: recovered {:.1} s after the kill", t.elapsed().as_secs_f64()));
    // A start containerd lost when it was killed is made again under the next attempt: only those count.
    assert_eq!(c.restarts, drill::restarts(&base) + c.runtime_leaks as i64, "no container restarted");
    drill::delete_runtime_leaks(&rt, &env.ns).await;
    env.kubectl(&["delete", "pod", "e-0", "e-1", "e-2", "--wait=false"]).await;
    let want = Expect { running: &names, unchanged: Some(&base) };
    drill::wait_invariant("containerd-killed-cleanup", &env, &mut node, &rt, want, Duration::from_secs(120)).await;

    // 1b. containerd gone for a while: the node turns NotReady (the runtime is down), nothing is lost, and it is
    // Ready again once the runtime is back.
    tokio::task::spawn_blocking(|| drill::stop_containerd(Signal::SIGTERM)).await.unwrap();
    let t = Instant::now();
    let not_ready = wait_ready(&env, &mut node, "False", Duration::from_secs(60)).await;
    let gone = env.node_object().await.unwrap();
    let msg =
        gone["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap()["message"]
            .to_string();
    assert!(msg.contains("container runtime is down"), "{msg}");
    node.wait_for("the outage's end", short_outage() + Duration::from_secs(10), || async {
        (t.elapsed() >= short_outage()).then_some(())
    })
    .await;
    let t = Instant::now();
    tokio::task::spawn_blocking(drill::start_containerd).await.unwrap();
    let want = Expect { running: &names, unchanged: Some(&base) };
    drill::wait_invariant("containerd-gone", &env, &mut node, &rt, want, Duration::from_secs(180)).await;
    wait_ready(&env, &mut node, "True", Duration::from_secs(60)).await;
    drill::report(format_args!(
        "drill containerd-gone: NotReady {:.1} s after the stop ({msg}); Ready again, invariant holding, {:.1} s \
         after the start",
        not_ready.as_secs_f64(),
        t.elapsed().as_secs_f64()
    ));

    // 4. An upgrade: rkubelet stopped as systemd does (SIGTERM) and a new binary started on the same node.
    upgrade(&env, &mut node, &rt, &base).await;
    node.stop_and_clean(&rt).await;
}

/// The upgrade drill: zero restarts, zero sandbox changes, no status written, probes again within one period.
async fn upgrade(env: &TestEnv, node: &mut Node, rt: &RemoteRuntime, base: &Baseline) {
    let before = drill::apiserver_pods(env).await;
    let status = node.sigterm();
    assert!(status.success(), "rkubelet exits cleanly on SIGTERM: {status:?}");
    let new = node.dir.join("rkubelet-next");
    std::fs::copy(env!("CARGO_BIN_EXE_rkubelet"), &new).unwrap();
    node.binary = Some(new);
    let t = Instant::now();
    node.spawn();
    node.wait_healthy().await;
    let healthy = t.elapsed();
    // Every probed pod's readiness probe runs again within one period (5 s) of the new binary being up.
    let api = KubeletApi::new(secure_port());
    let probed: Vec<String> =
        drill::names(workload()).into_iter().enumerate().filter(|(i, _)| i % 3 == 1).map(|p| p.1).collect();
    node.wait_for("every readiness probe to run again", Duration::from_secs(30), || async {
        let (code, text) = api.get("/metrics/probes").await;
        (code == 200
            && probed.iter().all(|p| {
                text.lines().any(|l| {
                    l.starts_with("prober_probe_total{")
                        && l.contains(&format!("pod=\"{p}\""))
                        && l.contains(&format!("namespace=\"{}\"", env.ns))
                        && l.contains("probe_type=\"Readiness\"")
                })
            }))
        .then_some(())
    })
    .await;
    let probes_after = t.elapsed() - healthy;
    assert!(probes_after <= Duration::from_secs(6), "probes resumed {probes_after:?} after start-up");
    let want = Expect { running: &drill::names(workload()), unchanged: Some(base) };
    let c = drill::wait_invariant("upgrade", env, node, rt, want, Duration::from_secs(60)).await;
    // No write can be awaited: the status manager's first pass and a probe period are given to it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = drill::apiserver_pods(env).await;
    let changed: Vec<&String> = before.keys().filter(|n| before[*n]["status"] != after[*n]["status"]).collect();
    let written = before
        .keys()
        .filter(|n| before[*n]["metadata"]["resourceVersion"] != after[*n]["metadata"]["resourceVersion"])
        .count();
    drill::report(format_args!(
        "drill upgrade: healthy {:.1} s after start, probes again {:.1} s later; {} restarts; {} pod statuses \
         changed, {written} pods written",
        healthy.as_secs_f64(),
        probes_after.as_secs_f64(),
        c.restarts - drill::restarts(base),
        changed.len()
    ));
    assert!(changed.is_empty(), "statuses changed by the upgrade: {changed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_and_etcd_outages_lose_nothing() {
    let (_g, rt, env, mut node, base) = thirty_pods().await;
    let names = drill::names(workload());

    // 2a. The apiserver stopped (past the node lease grace).
    let cp = env.cp.clone();
    let outage = tokio::task::spawn_blocking(move || cp.outage()).await.unwrap().expect("stop the apiserver");
    ride_out(&mut node, &env.ns, apiserver_outage()).await;
    let t = Instant::now();
    tokio::task::spawn_blocking(move || outage.end()).await.unwrap().expect("start the apiserver");
    let want = Expect { running: &names, unchanged: Some(&base) };
    drill::wait_invariant("apiserver-stopped", &env, &mut node, &rt, want, Duration::from_secs(120)).await;
    wait_ready(&env, &mut node, "True", Duration::from_secs(60)).await;
    drill::report(format_args!(
        "drill apiserver-stopped: converged {:.1} s after the apiserver was back",
        t.elapsed().as_secs_f64()
    ));

    // 2b. The apiserver restarted with etcd compacted meanwhile: its watch cache starts afresh and the pod watch
    // resumed from its last resourceVersion gets 410 Gone; a pod created afterwards must still reach the node.
    let gone_before = node.log().matches("410 Gone").count();
    let cp = env.cp.clone();
    tokio::task::spawn_blocking(move || cp.restart_apiserver_compacted())
        .await
        .unwrap()
        .expect("restart the apiserver");
    let t = Instant::now();
    let log = node.log_path();
    node.wait_for("the pod watch's 410 Gone and a new list", Duration::from_secs(90), || async {
        (std::fs::read_to_string(&log).unwrap_or_default().matches("410 Gone").count() > gone_before).then_some(())
    })
    .await;
    env.create(&env.pod_yaml("after-restart", &[("app", drill::IDLE)], "")).await;
    let running = with(&["after-restart"]);
    let want = Expect { running: &running, unchanged: Some(&base) };
    drill::wait_invariant("apiserver-restarted", &env, &mut node, &rt, want, Duration::from_secs(120)).await;
    drill::report(format_args!(
        "drill apiserver-restarted: watch re-listed, new pod Running {:.1} s after",
        t.elapsed().as_secs_f64()
    ));

    // 2c. etcd stopped under the apiserver for a while.
    let cp = env.cp.clone();
    let outage = tokio::task::spawn_blocking(move || cp.etcd_outage()).await.unwrap().expect("stop etcd");
    ride_out(&mut node, &env.ns, short_outage()).await;
    let t = Instant::now();
    tokio::task::spawn_blocking(move || outage.end()).await.unwrap().expect("start etcd");
    env.kubectl(&["delete", "pod", "after-restart", "--wait=false"]).await;
    let want = Expect { running: &names, unchanged: Some(&base) };
    drill::wait_invariant("etcd-stopped", &env, &mut node, &rt, want, Duration::from_secs(120)).await;
    wait_ready(&env, &mut node, "True", Duration::from_secs(60)).await;
    drill::report(format_args!("drill etcd-stopped: converged {:.1} s after etcd was back", t.elapsed().as_secs_f64()));
    assert!(env.apiserver_panics().is_empty(), "{:?}", env.apiserver_panics());
    node.stop_and_clean(&rt).await;
}

/// Counts the drill's sandboxes in the runtime: (all, ready).
async fn sandboxes(rt: &RemoteRuntime, ns: &str) -> (usize, usize) {
    use kubelet_cri::RuntimeService;
    let all = rt.list_pod_sandbox(None).await.unwrap_or_default();
    let mine: Vec<_> =
        all.iter().filter(|s| s.labels.get("io.kubernetes.pod.namespace").map(String::as_str) == Some(ns)).collect();
    let ready = mine.iter().filter(|s| s.state == kubelet_cri::api::PodSandboxState::SandboxReady as i32).count();
    (mine.len(), ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rkubelet_killed_or_signalled_while_creating_and_while_deleting_thirty_pods() {
    let (_g, rt) = fresh_runtime().await;
    drill::note_preexisting_cgroups();
    let env = TestEnv::new().await;
    let mut node = start(&env);
    env.wait_node_ready(&mut node).await;
    let names = drill::names(workload());

    // 3a. SIGKILL once about a third of the pods have their sandbox.
    let file = env.write("workload.yaml", &drill::workload_yaml(&env, workload()));
    env.kubectl(&["apply", "-f", file.to_str().unwrap()]).await;
    let ns = env.ns.clone();
    node.wait_for("a third of the sandboxes", Duration::from_secs(120), || async {
        (sandboxes(&rt, &ns).await.0 >= workload() / 3).then_some(())
    })
    .await;
    node.kill9();
    let (at_kill, _) = sandboxes(&rt, &ns).await;
    let t = Instant::now();
    node.spawn();
    let want = Expect { running: &names, unchanged: None };
    let c = drill::wait_invariant("killed-while-creating", &env, &mut node, &rt, want, Duration::from_secs(300)).await;
    drill::report(format_args!(
        "drill killed-while-creating: killed with {at_kill} of {} sandboxes made; every pod Running once \
         {:.1} s after the restart, {} container restarts, {} starts cancelled by the kill",
        workload(),
        t.elapsed().as_secs_f64(),
        c.restarts,
        c.runtime_leaks
    ));
    // A start containerd cancelled (the kill's own victims) is made again under the next attempt: only those count.
    if c.restarts != c.runtime_leaks as i64 {
        // What the runtime holds of the pods that restarted, for the failure's message (state, attempt, start, reason).
        use kubelet_cri::RuntimeService;
        let mut lines = vec![];
        for x in rt.list_containers(None).await.unwrap_or_default() {
            if x.labels.get("io.kubernetes.pod.namespace") != Some(&ns) {
                continue;
            }
            let attempt = x.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
            let pod = x.labels.get("io.kubernetes.pod.name").cloned().unwrap_or_default();
            let same_pod = |y: &kubelet_cri::api::Container| y.labels.get("io.kubernetes.pod.name") == Some(&pod);
            let all = rt.list_containers(None).await.unwrap_or_default();
            if attempt == 0 && all.iter().filter(|y| same_pod(y)).count() < 2 {
                continue;
            }
            let st = rt.container_status(&x.id).await.ok();
            lines.push(format!(
                "{pod} {} attempt {attempt} state {} created {} started {} finished {} reason {:?} message {:?}",
                x.id,
                x.state,
                x.created_at,
                st.as_ref().map(|s| s.started_at).unwrap_or(0),
                st.as_ref().map(|s| s.finished_at).unwrap_or(0),
                st.as_ref().map(|s| s.reason.clone()).unwrap_or_default(),
                st.as_ref().map(|s| s.message.clone()).unwrap_or_default(),
            ));
        }
        panic!(
            "no container ran twice: {} restarts, {} cancelled starts; the containers of the pods concerned:\n{}\n{}",
            c.restarts,
            c.runtime_leaks,
            lines.join("\n"),
            tail(&node.log(), 40)
        );
    }

    drill::delete_runtime_leaks(&rt, &ns).await;

    // 3b. SIGKILL once about a third of the pods are stopped.
    env.kubectl(&["delete", "pod", "-l", "drill=true", "--wait=false"]).await;
    node.wait_for("a third of the sandboxes stopped", Duration::from_secs(120), || async {
        let (all, ready) = sandboxes(&rt, &ns).await;
        (workload() - ready.min(workload()) >= workload() / 3 || all < workload()).then_some(())
    })
    .await;
    node.kill9();
    let (all, ready) = sandboxes(&rt, &ns).await;
    let t = Instant::now();
    node.spawn();
    let want = Expect { running: &[], unchanged: None };
    drill::wait_invariant("killed-while-deleting", &env, &mut node, &rt, want, Duration::from_secs(300)).await;
    drill::report(format_args!(
        "drill killed-while-deleting: killed with {ready} ready of {all} sandboxes left; every pod gone {:.1} s \
         after the restart",
        t.elapsed().as_secs_f64()
    ));

    // 7. SIGHUP while the workload is being created changes nothing; SIGTERM makes rkubelet exit cleanly at once, and
    // the next start finishes the job.
    env.kubectl(&["apply", "-f", file.to_str().unwrap()]).await;
    node.wait_for("a third of the sandboxes", Duration::from_secs(120), || async {
        (sandboxes(&rt, &ns).await.0 >= workload() / 3).then_some(())
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(node.pid());
    nix::sys::signal::kill(pid, Signal::SIGHUP).unwrap();
    let at_hup = sandboxes(&rt, &ns).await.0;
    node.wait_for("more sandboxes after SIGHUP", Duration::from_secs(60), || async {
        (sandboxes(&rt, &ns).await.0 >= (at_hup + 3).min(workload())).then_some(())
    })
    .await;
    let t = Instant::now();
    let status = node.sigterm();
    let exit = t.elapsed();
    assert!(status.success(), "a clean exit on SIGTERM: {status:?}");
    assert!(exit < Duration::from_secs(5), "exited {exit:?} after SIGTERM");
    let at_term = sandboxes(&rt, &ns).await.0;
    node.spawn();
    let want = Expect { running: &names, unchanged: None };
    let c = drill::wait_invariant("sigterm-while-creating", &env, &mut node, &rt, want, Duration::from_secs(300)).await;
    drill::report(format_args!(
        "drill sighup-sigterm: alive after SIGHUP ({at_hup} sandboxes then, more made after); exit 0 {:.2} s after \
         SIGTERM with {at_term} of {} sandboxes made; all Running after the next start, {} restarts",
        exit.as_secs_f64(),
        workload(),
        c.restarts
    ));
    node.stop_and_clean(&rt).await;
}
