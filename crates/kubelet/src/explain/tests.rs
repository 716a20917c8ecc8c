use std::time::UNIX_EPOCH;

use super::*;

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
        "spec": {"containers": [{"name": "app"}]},
        "status": status,
    }))
    .unwrap()
}

fn event(reason: &str, message: &str, field_path: &str) -> PodEvent {
    PodEvent {
        at: UNIX_EPOCH,
        kind: "Warning".into(),
        reason: reason.into(),
        message: message.into(),
        field_path: field_path.into(),
    }
}

fn waiting(reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"phase": "Pending", "containerStatuses": [
        {"name": "app", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"waiting": {"reason": reason, "message": message}}}]})
}

#[test]
fn each_blocking_step_is_named_with_its_detail() {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let refused = pod(
        serde_json::json!({"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected: Node didn't have enough resource: cpu"}),
    );
    let e = explain(&refused, &[], now);
    assert_eq!((e.blocked, e.step.as_str()), (true, "refused at admission"));
    assert_eq!(e.detail, "OutOfcpu: Pod was rejected: Node didn't have enough resource: cpu");

    let pull = pod(waiting("ImagePullBackOff", "Back-off pulling image \"nope:1\": ErrImagePull: not found"));
    let e = explain(&pull, &[], now);
    assert_eq!((e.blocked, e.step.as_str()), (true, "image pull back-off"));
    assert!(e.detail.contains("not found"), "{e:?}");

    let mount = pod(waiting("ContainerCreating", ""));
    let events =
        [event("FailedMount", "MountVolume.SetUp failed for volume \"cfg\" : configmap \"missing\" not found", "")];
    let e = explain(&mount, &events, now);
    assert_eq!((e.blocked, e.step.as_str()), (true, "volume not mounted"));
    assert!(e.detail.contains("configmap \"missing\" not found"), "{e:?}");
    assert_eq!(explain(&mount, &[], now).step, "starting", "no failure seen: just starting");

    let crash = pod(serde_json::json!({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": false, "restartCount": 3, "image": "x", "imageID": "",
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=app pod=web_default(u1)"}},
         "lastState": {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": "2027-01-15T08:00:00Z"}}}]}));
    let at = SystemTime::from(chrono::DateTime::parse_from_rfc3339("2027-01-15T08:00:10Z").unwrap());
    let e = explain(&crash, &[], at);
    assert_eq!((e.blocked, e.step.as_str()), (true, "crash loop back-off"));
    assert!(
        e.detail.starts_with("container app exited with code 3 (Error); next try at 2027-01-15T08:00:40Z (in 30s)"),
        "{e:?}"
    );

    let unready = pod(serde_json::json!({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": false, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}]}));
    let events = [event("Unhealthy", "Readiness probe failed: no such file", "spec.containers{app}")];
    let e = explain(&unready, &events, now);
    assert_eq!(
        (e.blocked, e.step.as_str(), e.detail.as_str()),
        (true, "readiness probe failing", "container app: Readiness probe failed: no such file")
    );

    let config = pod(waiting("CreateContainerConfigError", "configmap \"env\" not found"));
    assert_eq!(explain(&config, &[], now).step, "container not created");

    let ok = pod(serde_json::json!({"phase": "Running", "containerStatuses": [
        {"name": "app", "ready": true, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}]}));
    let e = explain(&ok, &[], now);
    assert_eq!((e.blocked, e.step.as_str()), (false, "running"));
}

#[test]
fn the_log_keeps_each_pods_newest_events_and_passes_them_on() {
    let log = Arc::new(EventLog::default());
    let inner = Arc::new(kubelet_types::events::RecordingRecorder::default());
    let r = LoggedRecorder { inner: inner.clone(), log: log.clone(), clock: Arc::new(kubelet_types::SystemClock) };
    let object = |name: &str| ObjectReference {
        kind: Some("Pod".into()),
        namespace: Some("default".into()),
        name: Some(name.into()),
        ..Default::default()
    };
    for i in 0..(PER_POD + 3) {
        r.event(&object("web"), "Normal", "Pulled", format!("{i}"));
    }
    r.event(&ObjectReference { kind: Some("Node".into()), ..object("n") }, "Normal", "Starting", "x".into());
    let kept = log.of("default", "web");
    assert_eq!(kept.len(), PER_POD);
    assert_eq!(kept.last().unwrap().message, format!("{}", PER_POD + 2));
    assert_eq!(inner.events().len(), PER_POD + 4, "every event is passed on");
    assert!(log.of("", "n").is_empty(), "only pods' events are kept");
}
