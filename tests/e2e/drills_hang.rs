//! Fault drill 6: one pod whose runtime calls hang. rkubelet talks to containerd through a CRI proxy
//! (`common/cri_proxy.rs`) that, once switched on, holds back every status call naming one pod (its sandbox and
//! container IDs, its UID) while the pod's container is killed, so the PLEG and the pod's worker must inspect it
//! and cannot. For longer than upstream's 3-minute PLEG threshold, the node must stay Ready, `/healthz` ok, the
//! PLEG relisting every second, a new pod must start and a deleted one go; the hung pod keeps the status rkubelet
//! can know (its readiness probe fails). Once the hang is off, the drill's invariant holds.

mod common;
#[path = "common/cri_proxy.rs"]
mod cri_proxy;

use std::time::Duration;

use common::cluster::{TestEnv, condition};
use common::drill::{self, Expect};
use common::kubelet_api::KubeletApi;
use common::*;
use cri_proxy::{CriProxy, STATUS_METHODS};
use kubelet_cri::{RuntimeService, api};
use tokio::time::Instant;

const PODS: usize = 10;
/// The pod whose calls hang: a web server with readiness and liveness probes (`drill::pod_yaml`, `i % 3 == 1`).
const HUNG: &str = "d-01";
/// The pod deleted during the hang.
const DELETED: &str = "d-05";
/// The pod created during the hang.
const CREATED: &str = "h-new";
/// How long the hang lasts: with `--long`, longer than upstream's PLEG threshold (3 minutes); in the suite 45 s,
/// long enough for every periodic task (PLEG relists, probes, node status, housekeeping) to meet the hang and for
/// a pod to be created and another deleted meanwhile.
fn window() -> Duration {
    by_mode(Duration::from_secs(45), Duration::from_secs(190))
}

/// When, into the hang, a pod is created and another deleted.
fn create_and_delete_at() -> (Duration, Duration) {
    by_mode((Duration::from_secs(5), Duration::from_secs(15)), (Duration::from_secs(15), Duration::from_secs(30)))
}

/// The PLEG's figures from `/metrics`: relists so far, their total duration, the last relist's Unix time.
#[derive(Debug, Clone, Copy)]
struct PlegFigures {
    relists: f64,
    duration_sum: f64,
    last_seen: f64,
}

async fn pleg_figures(api: &KubeletApi) -> PlegFigures {
    let (code, text) = api.get("/metrics").await;
    assert_eq!(code, 200, "/metrics: {text}");
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    PlegFigures {
        relists: value("kubelet_pleg_relist_duration_seconds_count"),
        duration_sum: value("kubelet_pleg_relist_duration_seconds_sum"),
        last_seen: value("kubelet_pleg_last_seen_seconds"),
    }
}

/// Wall time, to compare with the gauge rkubelet sets from its own wall clock.
fn unix_now() -> f64 {
    chrono::Utc::now().timestamp_millis() as f64 / 1000.0
}

/// The hung pod's sandbox and container IDs and its UID, from containerd itself.
async fn identities(rt: &kubelet_cri::RemoteRuntime, ns: &str, pod: &str) -> (Vec<String>, Vec<api::Container>) {
    let selector: std::collections::HashMap<String, String> = [
        ("io.kubernetes.pod.name".to_string(), pod.to_string()),
        ("io.kubernetes.pod.namespace".to_string(), ns.to_string()),
    ]
    .into();
    let sandboxes = rt
        .list_pod_sandbox(Some(api::PodSandboxFilter { label_selector: selector.clone(), ..Default::default() }))
        .await
        .unwrap();
    let containers = rt
        .list_containers(Some(api::ContainerFilter { label_selector: selector, ..Default::default() }))
        .await
        .unwrap();
    let mut needles: Vec<String> = sandboxes.iter().map(|s| s.id.clone()).collect();
    needles.extend(sandboxes.iter().filter_map(|s| s.metadata.as_ref().map(|m| m.uid.clone())));
    needles.extend(containers.iter().map(|c| c.id.clone()));
    (needles, containers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pod_whose_runtime_calls_hang_stalls_nothing_else() {
    let (_g, rt) = fresh_runtime().await;
    drill::note_preexisting_cgroups();
    let env = TestEnv::new().await;
    let proxy = CriProxy::start(&env.path("cri.sock"), &kubelet_cri::socket_path(&endpoint()).unwrap());
    let proxied = proxy.endpoint();
    let mut node = env.start_node_with(
        &[],
        |n| {
            std::fs::read_to_string(&n.config)
                .unwrap()
                .replace("anonymous:\n    enabled: false", "anonymous:\n    enabled: true")
                .replace(
                    &format!("containerRuntimeEndpoint: {}", endpoint()),
                    &format!("containerRuntimeEndpoint: {proxied}"),
                )
        },
        vec![],
    );
    assert!(std::fs::read_to_string(&node.config).unwrap().contains(&proxied), "rkubelet talks to the proxy");
    env.wait_node_ready(&mut node).await;
    let file = env.write("workload.yaml", &drill::workload_yaml(&env, PODS));
    env.kubectl(&["apply", "-f", file.to_str().unwrap()]).await;
    let names = drill::names(PODS);
    let c = drill::wait_invariant(
        "pod-hang-start",
        &env,
        &mut node,
        &rt,
        Expect { running: &names, unchanged: None },
        Duration::from_secs(300),
    )
    .await;
    let mut base = c.state;
    assert!(proxy.forwarded() > 0, "rkubelet's calls go through the proxy");

    // The hang: every status call naming the pod is held back; then its web container dies, so the PLEG and the
    // pod's worker have to inspect it.
    let api = KubeletApi::new(secure_port());
    let before = pleg_figures(&api).await;
    let (needles, containers) = identities(&rt, &env.ns, HUNG).await;
    let web = containers.iter().find(|c| c.state == api::ContainerState::ContainerRunning as i32).expect("web runs");
    proxy.hang(STATUS_METHODS, needles);
    let sock = endpoint().trim_start_matches("unix://").to_string();
    let out = std::process::Command::new(runtime_program("ctr"))
        .args(["-a", &sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", &web.id])
        .output()
        .unwrap();
    assert!(out.status.success(), "ctr tasks kill: {}", String::from_utf8_lossy(&out.stderr));
    let t0 = Instant::now();
    let log_before = node.log().len();

    let mut created: Option<Duration> = None;
    let mut deleted: Option<Duration> = None;
    let mut deleting = false;
    let mut creating = false;
    let mut checks = 0;
    let mut last = before;
    let mut last_at = Instant::now();
    let mut worst_gap = 0.0f64;
    let mut hung_not_ready: Option<Duration> = None;
    let (create_at, delete_at) = create_and_delete_at();
    while t0.elapsed() < window() {
        node.assert_alive();
        checks += 1;
        let n = env.node_object().await.expect("the Node object");
        assert_eq!(
            condition(&n, "Ready").as_deref(),
            Some("True"),
            "node Ready {:.0} s into the hang: {}",
            t0.elapsed().as_secs_f64(),
            n["status"]["conditions"]
        );
        let health = http_get(healthz_port(), "/healthz").await;
        assert_eq!(health, Some((200, "ok".into())), "/healthz {:.0} s into the hang", t0.elapsed().as_secs_f64());
        if last_at.elapsed() >= Duration::from_secs(10) {
            let now = pleg_figures(&api).await;
            let relists = now.relists - last.relists;
            let span = last_at.elapsed().as_secs_f64();
            worst_gap = worst_gap.max(span / relists.max(1.0));
            assert!(
                relists >= span / 2.0,
                "the PLEG relisted {relists} times in {span:.1} s, {:.0} s into the hang",
                t0.elapsed().as_secs_f64()
            );
            assert!(unix_now() - now.last_seen < 5.0, "PLEG last seen {:.1} s ago", unix_now() - now.last_seen);
            (last, last_at) = (now, Instant::now());
        }
        // A new pod starts, and another one is deleted, while the hang lasts.
        if !creating && t0.elapsed() >= create_at {
            creating = true;
            env.create(&env.pod_yaml(CREATED, &[("app", drill::IDLE)], "")).await;
        }
        if creating && created.is_none() && env.pod(CREATED).await.as_ref().is_some_and(all_running) {
            created = Some(t0.elapsed() - create_at);
        }
        if !deleting && t0.elapsed() >= delete_at {
            deleting = true;
            env.kubectl(&["delete", "pod", DELETED, "--wait=false"]).await;
        }
        if deleting && deleted.is_none() && env.pod(DELETED).await.is_none() {
            deleted = Some(t0.elapsed() - delete_at);
        }
        if hung_not_ready.is_none()
            && env.pod(HUNG).await.is_some_and(|p| condition(&p, "Ready").as_deref() == Some("False"))
        {
            hung_not_ready = Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let after = pleg_figures(&api).await;
    let relists = after.relists - before.relists;
    let span = t0.elapsed().as_secs_f64();
    let hung = env.pod(HUNG).await.expect("the hung pod");
    let log = node.log()[log_before..].to_string();
    let timeouts = log.lines().filter(|l| l.contains("pod inspection") && l.contains(HUNG)).count();
    drill::report(format_args!(
        "drill pod-hang: {:.0} s of hung status calls for pod {HUNG} ({} calls held, {} of them still waiting: {:?}); node Ready and /healthz ok \
         in all {checks} checks; {relists} relists (one every {:.2} s, worst 10 s window {:.2} s, mean duration {:.1} \
         ms); new pod Running after {:.1} s, deleted pod gone after {:.1} s; hung pod phase {} Ready {} (False after \
         {:.0} s); {timeouts} inspections of it given up by the relist",
        span,
        proxy.held_total(),
        proxy.held_now(),
        proxy.held_by_method(),
        span / relists.max(1.0),
        worst_gap,
        (after.duration_sum - before.duration_sum) * 1000.0 / relists.max(1.0),
        created.expect("the new pod started during the hang").as_secs_f64(),
        deleted.expect("the deleted pod went during the hang").as_secs_f64(),
        hung["status"]["phase"],
        condition(&hung, "Ready").unwrap_or_default(),
        hung_not_ready.map(|d| d.as_secs_f64()).unwrap_or(-1.0),
    ));
    assert!(relists >= span * 0.6, "the PLEG kept relisting: {relists} in {span:.0} s");
    assert_eq!(hung["status"]["phase"], "Running", "rkubelet cannot know more than the last inspection");
    assert_eq!(condition(&hung, "Ready").as_deref(), Some("False"), "the failed readiness probe shows: {hung}");

    // The hang switched off: held calls are answered, the hung pod's dead container is restarted, and the drill's
    // invariant holds.
    let t1 = Instant::now();
    proxy.release();
    let restarted = node
        .wait_for("the hung pod running and ready again", Duration::from_secs(120), || async {
            env.pod(HUNG).await.filter(|p| all_running(p) && condition(p, "Ready").as_deref() == Some("True"))
        })
        .await;
    let again = t1.elapsed();
    let web_status = container_status(&restarted, "web").expect("web's status");
    assert_eq!(web_status["restartCount"], 1, "restarted once: {web_status}");
    let previous = web_status["lastState"]["terminated"]["containerID"].as_str().unwrap_or_default();
    if !previous.ends_with(&web.id) {
        // What the runtime had then, and what rkubelet reports a moment later, for the next reader of a failure.
        let listed: Vec<String> = containers_of(&rt, HUNG)
            .await
            .iter()
            .map(|c| format!("{} {:?} attempt {}", c.id, c.state(), c.metadata.as_ref().map_or(0, |m| m.attempt)))
            .collect();
        let later = env.pod(HUNG).await.and_then(|p| container_status(&p, "web").cloned());
        panic!(
            "the killed container {} is the last state: {web_status}; the runtime lists {listed:?}; a moment later \
             the status is {later:?}\n{}",
            web.id,
            tail(&node.log(), 60)
        );
    }
    // As upstream, the dead instance stays for `kubectl logs --previous` (the collection keeps one per container);
    // the drills' invariant allows only the reported containers, so it goes here, through containerd.
    rt.remove_container(&web.id).await.expect("remove the killed container");
    let mut running: Vec<String> = names.iter().filter(|n| *n != DELETED).cloned().collect();
    running.push(CREATED.into());
    base.remove(HUNG);
    base.remove(DELETED);
    let want = Expect { running: &running, unchanged: Some(&base) };
    drill::wait_invariant("pod-hang-released", &env, &mut node, &rt, want, Duration::from_secs(120)).await;
    drill::report(format_args!(
        "drill pod-hang-released: hung pod Running and ready again (its container restarted) {:.1} s after the hang \
         was switched off, invariant holding after {:.1} s",
        again.as_secs_f64(),
        t1.elapsed().as_secs_f64()
    ));
    node.stop_and_clean(&rt).await;
}
