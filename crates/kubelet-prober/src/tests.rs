//! The manager and its workers on tokio's paused clock, with the fake runtime answering exec probes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus as ApiContainerStatus, ExecAction, PodSpec,
    PodStatus as ApiPodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_cri::{ExecOutput, FakeRuntime, RuntimeService, api};
use kubelet_types::events::Recorder;
use kubelet_types::probe::{ContainerHealth, PodProbeStatus, PodStatusSource, ProbeResult, ProbeType};
use kubelet_types::{Pod, PodUid, SystemClock};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{ProbeManager, ProbeManagerDeps};

#[derive(Default)]
struct Statuses(Mutex<HashMap<PodUid, Arc<ApiPodStatus>>>);

impl PodStatusSource for Statuses {
    fn pod_status(&self, uid: &PodUid) -> Option<Arc<ApiPodStatus>> {
        self.0.lock().unwrap().get(uid).cloned()
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<(String, String)>>);

impl Recorder for Events {
    fn event(&self, _o: &k8s_openapi::api::core::v1::ObjectReference, _k: &str, reason: &str, message: String) {
        self.0.lock().unwrap().push((reason.to_string(), message));
    }
}

fn exec_probe(period: i32, failure: i32) -> Probe {
    Probe {
        exec: Some(ExecAction { command: Some(vec!["check".into()]) }),
        period_seconds: Some(period),
        failure_threshold: Some(failure),
        ..Default::default()
    }
}

fn pod(c: Container) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            uid: Some("u1".into()),
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec { containers: vec![c], ..Default::default() }),
        ..Default::default()
    })
}

async fn running_container(rt: &FakeRuntime) -> String {
    let sb = rt.run_pod_sandbox(api::PodSandboxConfig::default(), "").await.unwrap();
    let cfg = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
        image: Some(api::ImageSpec { image: "busybox".into(), ..Default::default() }),
        ..Default::default()
    };
    let id = rt.create_container(&sb, cfg, Default::default()).await.unwrap();
    rt.start_container(&id).await.unwrap();
    id
}

fn status_with(id: &str) -> ApiPodStatus {
    ApiPodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("10.0.0.1".into()),
        container_statuses: Some(vec![ApiContainerStatus {
            name: "app".into(),
            container_id: Some(format!("containerd://{id}")),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: None }),
                ..Default::default()
            }),
            started: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

struct Setup {
    rt: Arc<FakeRuntime>,
    statuses: Arc<Statuses>,
    events: Arc<Events>,
    manager: ProbeManager,
    updates: tokio::sync::mpsc::Receiver<kubelet_types::probe::ProbeUpdate>,
    exit_code: Arc<AtomicI32>,
}

fn setup() -> Setup {
    let rt = Arc::new(FakeRuntime::new(&["busybox"]));
    let exit_code = Arc::new(AtomicI32::new(0));
    let code = exit_code.clone();
    rt.set_exec_handler(Arc::new(move |_name, _cmd| {
        Ok(ExecOutput { stdout: b"out".to_vec(), stderr: vec![], exit_code: code.load(Ordering::SeqCst) })
    }));
    let statuses = Arc::new(Statuses::default());
    let events = Arc::new(Events::default());
    let (manager, updates) = ProbeManager::new(ProbeManagerDeps {
        runtime: rt.clone(),
        status: statuses.clone(),
        recorder: events.clone(),
        clock: Arc::new(SystemClock),
        cancel: CancellationToken::new(),
        tracker: TaskTracker::new(),
    });
    Setup { rt, statuses, events, manager, updates, exit_code }
}

#[tokio::test(start_paused = true)]
async fn liveness_fails_after_the_threshold_and_holds_until_a_new_container() {
    let mut s = setup();
    let id = running_container(&s.rt).await;
    s.statuses.0.lock().unwrap().insert("u1".into(), Arc::new(status_with(&id)));
    let c = Container { name: "app".into(), liveness_probe: Some(exec_probe(1, 3)), ..Default::default() };
    s.manager.add_pod(&pod(c));
    // The initial value: liveness passes until disproven.
    let u = s.updates.recv().await.unwrap();
    assert_eq!((u.probe, u.result, u.container_id.as_str()), (ProbeType::Liveness, ProbeResult::Success, id.as_str()));
    s.exit_code.store(1, Ordering::SeqCst);
    let start = tokio::time::Instant::now();
    let u = s.updates.recv().await.unwrap();
    assert_eq!(u.result, ProbeResult::Failure);
    // Three failures one period apart (the first at once or within a period).
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(2) && took <= Duration::from_secs(4), "took {took:?}");
    assert_eq!(s.manager.result(ProbeType::Liveness, &id), Some(ProbeResult::Failure));
    let ev = s.events.0.lock().unwrap().clone();
    assert_eq!(ev.iter().filter(|(r, m)| r == "Unhealthy" && m == "Liveness probe failed: out").count(), 3);
    // On hold: no more checks of this container.
    let execs = s.rt.count("ExecSync");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(s.rt.count("ExecSync"), execs);
    s.manager.remove_pod(&"u1".into());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(s.manager.worker_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn readiness_drives_ready_and_startup_gates_it() {
    let mut s = setup();
    let id = running_container(&s.rt).await;
    let mut st = status_with(&id);
    st.container_statuses.as_mut().unwrap()[0].started = Some(false);
    s.statuses.0.lock().unwrap().insert("u1".into(), Arc::new(st.clone()));
    let c = Container {
        name: "app".into(),
        readiness_probe: Some(exec_probe(1, 1)),
        startup_probe: Some(exec_probe(1, 30)),
        ..Default::default()
    };
    let p = pod(c);
    s.manager.add_pod(&p);
    let mut apps = st.container_statuses.clone().unwrap();
    s.manager.update_pod_status(&p, &mut [], &mut apps);
    assert_eq!((apps[0].started, apps[0].ready), (Some(false), false), "startup probe not passed yet");
    // The startup probe passes; readiness then runs and passes.
    let mut seen = vec![];
    while seen.len() < 4 {
        let u = s.updates.recv().await.unwrap();
        seen.push((u.probe, u.result));
        if (u.probe, u.result) == (ProbeType::Startup, ProbeResult::Success) {
            st.container_statuses.as_mut().unwrap()[0].started = Some(true);
            s.statuses.0.lock().unwrap().insert("u1".into(), Arc::new(st.clone()));
        }
    }
    assert!(seen.contains(&(ProbeType::Startup, ProbeResult::Unknown)));
    assert!(seen.contains(&(ProbeType::Readiness, ProbeResult::Failure)), "readiness starts failed: {seen:?}");
    assert!(seen.contains(&(ProbeType::Readiness, ProbeResult::Success)), "{seen:?}");
    let mut apps = st.container_statuses.clone().unwrap();
    s.manager.update_pod_status(&p, &mut [], &mut apps);
    assert_eq!((apps[0].started, apps[0].ready), (Some(true), true));
    // Readiness fails: ready flips back.
    s.exit_code.store(1, Ordering::SeqCst);
    let u = s.updates.recv().await.unwrap();
    assert_eq!((u.probe, u.result), (ProbeType::Readiness, ProbeResult::Failure));
    s.manager.update_pod_status(&p, &mut [], &mut apps);
    assert!(!apps[0].ready);
}

#[tokio::test(start_paused = true)]
async fn a_container_seen_waiting_then_running_is_not_killed_for_having_waited() {
    // A container created before rkubelet restarted is seen waiting, then started under the same ID: its liveness
    // stays Success while it waits (upstream records Failure), so the sync after its start does not kill it.
    let mut s = setup();
    let id = running_container(&s.rt).await;
    let mut waiting = status_with(&id);
    let cs = &mut waiting.container_statuses.as_mut().unwrap()[0];
    cs.state = Some(ContainerState::default());
    cs.started = Some(false);
    s.statuses.0.lock().unwrap().insert("u1".into(), Arc::new(waiting));
    let c = Container { name: "app".into(), liveness_probe: Some(exec_probe(1, 3)), ..Default::default() };
    s.manager.add_pod(&pod(c));
    assert_eq!(s.updates.recv().await.unwrap().result, ProbeResult::Success);
    // While it waits, nothing is recorded against it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(s.manager.result(ProbeType::Liveness, &id), Some(ProbeResult::Success));
    assert!(s.updates.try_recv().is_err());
    // It runs now and its probe fails: a verdict needs three failed probes.
    s.exit_code.store(1, Ordering::SeqCst);
    s.statuses.0.lock().unwrap().insert("u1".into(), Arc::new(status_with(&id)));
    let u = s.updates.recv().await.unwrap();
    assert_eq!((u.probe, u.result, u.container_id.as_str()), (ProbeType::Liveness, ProbeResult::Failure, id.as_str()));
    assert_eq!(s.rt.count("ExecSync"), 3, "the verdict comes from three failed probes");
}

#[tokio::test(start_paused = true)]
async fn a_restarted_kubelet_keeps_a_ready_container_ready_until_its_probe_decides() {
    let mut s = setup();
    let id = running_container(&s.rt).await;
    let mut last = status_with(&id);
    last.container_statuses.as_mut().unwrap()[0].ready = true;
    s.statuses.0.lock().unwrap().insert("u1".into(), Arc::new(status_with(&id)));
    let c = Container { name: "app".into(), readiness_probe: Some(exec_probe(5, 3)), ..Default::default() };
    let mut p = (*pod(c)).clone();
    p.status = Some(last);
    let p = Arc::new(p);
    s.manager.add_pod(&p);
    // Before any probe: ready, as the status the previous kubelet wrote says.
    assert_eq!(s.manager.result(ProbeType::Readiness, &id), Some(ProbeResult::Success));
    let mut apps = status_with(&id).container_statuses.unwrap();
    s.manager.update_pod_status(&p, &mut [], &mut apps);
    assert!(apps[0].ready, "ready before the first probe");
    // The probe fails: the verdict comes after the threshold, as for any ready container.
    s.exit_code.store(1, Ordering::SeqCst);
    let u = s.updates.recv().await.unwrap();
    assert_eq!((u.probe, u.result), (ProbeType::Readiness, ProbeResult::Failure));
    assert_eq!(s.rt.count("ExecSync"), 3);
}
