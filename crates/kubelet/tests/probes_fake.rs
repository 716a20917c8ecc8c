//! Probes through the whole core on the in-memory runtime and tokio's paused clock: readiness drives `ready` and
//! the Ready condition, a failed liveness probe restarts the container with upstream's messages, a native sidecar
//! starts before the app and a Job-like pod with a sidecar reaches Succeeded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ExecAction, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::fake_node::FakeNode;
use kubelet::status::StatusManager;
use kubelet_config::podconfig::SourcesReady;
use kubelet_cri::{ExecOutput, FakeRuntime};
use kubelet_types::{Operation, PodSource, PodUid, PodUpdate};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

struct Harness {
    fake: Arc<FakeRuntime>,
    status: Arc<StatusManager>,
    updates: mpsc::Sender<PodUpdate>,
    cancel: CancellationToken,
    _dir: tempfile::TempDir,
}

fn start() -> Harness {
    let (fake, clock) = kubelet::fake_node::fake_runtime_on_test_clock(&["busybox:1"]);
    let dir = tempfile::tempdir().unwrap();
    let ready = SourcesReady::new([PodSource::File]);
    let node = FakeNode::start(fake.clone(), clock, dir.path(), ready);
    Harness { fake, status: node.status, updates: node.updates, cancel: node.cancel, _dir: dir }
}

fn probe(period: i32, failure: i32) -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(vec!["check".into()]) }),
        period_seconds: Some(period),
        failure_threshold: Some(failure),
        ..Default::default()
    }
}

fn pod(uid: &str, spec: PodSpec) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(uid.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            annotations: Some([("kubernetes.io/config.source".to_string(), "file".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec { termination_grace_period_seconds: Some(5), ..spec }),
        ..Default::default()
    })
}

fn container(name: &str) -> Container {
    Container { name: name.into(), image: Some("busybox:1".into()), ..Default::default() }
}

async fn wait_status(h: &Harness, uid: &str, what: &str, f: impl Fn(&k8s_openapi::api::core::v1::PodStatus) -> bool) {
    let mut rx = h.status.subscribe();
    tokio::time::timeout(Duration::from_secs(300), async {
        loop {
            if h.status.get(&PodUid::from(uid)).is_some_and(|s| f(&s)) {
                return;
            }
            rx.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("pod {uid}: never {what}: {:#?}", h.status.get(&PodUid::from(uid))));
}

fn condition(s: &k8s_openapi::api::core::v1::PodStatus, t: &str) -> String {
    s.conditions.iter().flatten().find(|c| c.type_ == t).map(|c| c.status.clone()).unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn readiness_flips_ready_and_liveness_restarts() {
    let h = start();
    let healthy = Arc::new(AtomicBool::new(true));
    let ready = Arc::new(AtomicBool::new(false));
    let (hh, rr) = (healthy.clone(), ready.clone());
    h.fake.set_exec_handler(Arc::new(move |_name, cmd| {
        let ok = if cmd[0] == "live" { hh.load(Ordering::SeqCst) } else { rr.load(Ordering::SeqCst) };
        Ok(ExecOutput { stdout: b"said so".to_vec(), stderr: vec![], exit_code: if ok { 0 } else { 1 } })
    }));
    let mut live = probe(1, 2);
    live.exec = Some(ExecAction { command: Some(vec!["live".into()]) });
    let c = Container { liveness_probe: Some(live), readiness_probe: Some(probe(1, 1)), ..container("app") };
    let p = pod("u1", PodSpec { containers: vec![c], ..Default::default() });
    h.updates.send(PodUpdate { op: Operation::Add, source: PodSource::File, pods: vec![p] }).await.unwrap();
    wait_status(&h, "u1", "Running, not ready", |s| {
        s.phase.as_deref() == Some("Running") && condition(s, "Ready") == "False"
    })
    .await;
    ready.store(true, Ordering::SeqCst);
    wait_status(&h, "u1", "Ready", |s| {
        condition(s, "Ready") == "True" && s.container_statuses.as_ref().unwrap()[0].ready
    })
    .await;
    ready.store(false, Ordering::SeqCst);
    wait_status(&h, "u1", "not Ready again", |s| condition(s, "ContainersReady") == "False").await;

    // Liveness fails twice: the container is killed and started again.
    healthy.store(false, Ordering::SeqCst);
    let first = h.fake.container_ids("app")[0].clone();
    wait_status(&h, "u1", "restarted", |s| s.container_statuses.as_ref().unwrap()[0].restart_count == 1).await;
    assert_eq!(h.fake.container_ids("app")[0], first);
    assert_eq!(h.fake.container_ids("app").len(), 2);
    h.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn sidecar_starts_first_and_a_job_with_a_sidecar_succeeds() {
    let h = start();
    let order = Arc::new(Mutex::new(vec![]));
    let o = order.clone();
    // The app "runs" until a probe of the sidecar was seen: exec calls record who was probed.
    h.fake.set_exec_handler(Arc::new(move |name, _cmd| {
        o.lock().unwrap().push(name.to_string());
        Ok(ExecOutput::default())
    }));
    let side =
        Container { restart_policy: Some("Always".into()), startup_probe: Some(probe(1, 3)), ..container("side") };
    let spec = PodSpec {
        restart_policy: Some("Never".into()),
        init_containers: Some(vec![side]),
        containers: vec![container("job")],
        ..Default::default()
    };
    h.updates
        .send(PodUpdate { op: Operation::Add, source: PodSource::File, pods: vec![pod("u2", spec)] })
        .await
        .unwrap();
    wait_status(&h, "u2", "job running", |s| {
        s.container_statuses.as_ref().unwrap()[0].state.as_ref().is_some_and(|st| st.running.is_some())
    })
    .await;
    let st = h.status.get(&PodUid::from("u2")).unwrap();
    let side = &st.init_container_statuses.as_ref().unwrap()[0];
    assert_eq!((side.started, side.ready), (Some(true), true), "the sidecar started (its startup probe passed)");
    assert_eq!(condition(&st, "Initialized"), "True");
    assert!(order.lock().unwrap().iter().all(|n| n == "side"));
    // The job finishes: the pod succeeds and the sidecar is stopped.
    let job = h.fake.container_ids("job")[0].clone();
    h.fake.exit_container(&job, 0);
    wait_status(&h, "u2", "Succeeded", |s| s.phase.as_deref() == Some("Succeeded")).await;
    let side_id = h.fake.container_ids("side")[0].clone();
    let side_state = kubelet_cri::RuntimeService::container_status(h.fake.as_ref(), &side_id).await.unwrap().state;
    assert_eq!(side_state, kubelet_cri::api::ContainerState::ContainerExited as i32);
    h.cancel.cancel();
}
