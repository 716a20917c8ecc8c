//! Ephemeral containers (`kubectl debug`) through the runtime manager against the in-memory runtime, on tokio's
//! paused clock: started once in a running pod with the target's PID namespace, never restarted, left alone by
//! spec changes of the app containers, stopped with the pod.

mod common;

use common::{Env, env, status};
use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_cri::api;
use kubelet_types::{ContainerState, PodUid};

fn pod(policy: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container { name: "a".into(), image: Some("busybox:1".into()), ..Default::default() }],
            restart_policy: Some(policy.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `p` with the ephemeral container `debugger` added, as `kubectl debug --target` adds it.
fn debug(p: &Pod, target: Option<&str>) -> Pod {
    let mut p = p.clone();
    p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
        name: "debugger".into(),
        image: Some("busybox:1".into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["sh".into()]),
        stdin: Some(true),
        tty: Some(true),
        target_container_name: target.map(str::to_string),
        termination_message_path: Some("/dev/termination-log".into()),
        termination_message_policy: Some("File".into()),
        ..Default::default()
    }]);
    p
}

fn pid_namespace(e: &Env, name: &str) -> (i32, String) {
    let id = e.fake.container_ids(name).pop().unwrap_or_else(|| panic!("no container {name}"));
    let config = e.fake.container_config(&id).unwrap();
    let ns = config.linux.unwrap().security_context.unwrap().namespace_options.unwrap();
    (ns.pid, ns.target_id)
}

#[tokio::test(start_paused = true)]
async fn a_debugger_added_to_a_running_pod_starts_once_in_the_targets_pid_namespace() {
    let e = env();
    let p = pod("Always");
    assert_eq!(e.mgr.sync_pod(&p, &status(&e).await).await.started, vec!["a"]);
    let target = e.fake.container_ids("a")[0].clone();

    let d = debug(&p, Some("a"));
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
    assert_eq!(r.started, vec!["debugger"]);
    assert_eq!(pid_namespace(&e, "debugger"), (api::NamespaceMode::Target as i32, target.clone()));
    assert_eq!(pid_namespace(&e, "a"), (api::NamespaceMode::Container as i32, String::new()), "the target's own");
    // Created as any container: upstream's labels and annotations, log path, stdin and TTY from the spec.
    let id = e.fake.container_ids("debugger")[0].clone();
    let config = e.fake.container_config(&id).unwrap();
    assert_eq!(config.labels["io.kubernetes.container.name"], "debugger");
    assert_eq!(config.labels["io.kubernetes.pod.uid"], "uid-1");
    assert_eq!(config.annotations["io.kubernetes.container.restartCount"], "0");
    assert!(config.annotations.contains_key("io.kubernetes.container.hash"));
    assert_eq!(config.log_path, "debugger/0.log");
    assert!(config.stdin && config.tty && !config.stdin_once);
    assert_eq!(config.command, vec!["sh"]);
    let st = status(&e).await;
    assert_eq!(st.find_container("debugger").unwrap().state, ContainerState::Running);

    // Steady state: nothing more to do.
    e.fake.clear_calls();
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    assert!(r.ok() && r.started.is_empty(), "{r:?}");
    assert_eq!(e.fake.count("CreateContainer"), 0);

    // It exits (a failure, under restartPolicy Always): it is not started again, nothing else is touched.
    e.fake.exit_container(&id, 1);
    for _ in 0..3 {
        let r = e.mgr.sync_pod(&d, &status(&e).await).await;
        assert!(r.ok() && r.started.is_empty(), "{r:?}");
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    }
    assert_eq!(e.fake.count("CreateContainer") + e.fake.count("StopContainer"), 0);
    assert_eq!(e.fake.container_ids("debugger").len(), 1);
    assert_eq!(e.fake.container_ids("a"), vec![target]);
}

#[tokio::test(start_paused = true)]
async fn a_running_debugger_survives_app_changes_and_stops_with_the_pod() {
    let e = env();
    let p = pod("Always");
    e.mgr.sync_pod(&p, &status(&e).await).await;
    let d = debug(&p, None);
    assert_eq!(e.mgr.sync_pod(&d, &status(&e).await).await.started, vec!["debugger"]);
    assert_eq!(pid_namespace(&e, "debugger"), (api::NamespaceMode::Container as i32, String::new()), "no target");
    let debugger = e.fake.container_ids("debugger")[0].clone();

    // The app's image changes: the app is replaced, the debugger keeps running.
    let mut changed = d.clone();
    changed.spec.as_mut().unwrap().containers[0].image = Some("busybox:2".into());
    e.fake.add_image("busybox:2");
    let r = e.mgr.sync_pod(&changed, &status(&e).await).await;
    assert_eq!(r.started, vec!["a"], "{r:?}");
    let st = status(&e).await;
    assert_eq!(st.find_container("debugger").unwrap().state, ContainerState::Running);
    assert_eq!(st.find_container("debugger").unwrap().id, debugger);

    // The pod is killed: the debugger stops with the app and the sandbox.
    e.fake.clear_calls();
    e.mgr.kill_pod(Some(&changed), &status(&e).await, Some(2)).await.unwrap();
    let st = status(&e).await;
    assert!(st.container_statuses.iter().all(|c| c.state == ContainerState::Exited), "{st:?}");
    assert_eq!(e.fake.count("StopContainer"), 2, "the app and the debugger");
    assert_eq!(e.fake.count("StopPodSandbox"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_shared_or_host_pid_namespace_wins_over_the_target() {
    for (share, host, want) in
        [(Some(true), None, api::NamespaceMode::Pod), (None, Some(true), api::NamespaceMode::Node)]
    {
        let e = env();
        let mut p = pod("Always");
        let spec = p.spec.as_mut().unwrap();
        spec.share_process_namespace = share;
        spec.host_pid = host;
        e.mgr.sync_pod(&p, &status(&e).await).await;
        let d = debug(&p, Some("a"));
        assert_eq!(e.mgr.sync_pod(&d, &status(&e).await).await.started, vec!["debugger"]);
        assert_eq!(pid_namespace(&e, "debugger"), (want as i32, String::new()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_target_that_does_not_run_fails_the_start_and_the_next_sync_tries_again() {
    let e = env();
    let p = pod("Always");
    e.mgr.sync_pod(&p, &status(&e).await).await;
    let uid = PodUid::from("uid-1");

    // No container of that name in the pod: a config error, before anything is created.
    let d = debug(&p, Some("nope"));
    e.fake.clear_calls();
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    assert_eq!(r.errors.len(), 1, "{r:?}");
    assert_eq!(
        (r.errors[0].reason.as_str(), r.errors[0].message.as_str()),
        ("CreateContainerConfigError", "unable to find target container nope")
    );
    assert_eq!(e.fake.count("CreateContainer"), 0);
    assert_eq!(e.mgr.reasons().get(&uid, "debugger").unwrap().reason, "CreateContainerConfigError");

    // The target exited: the runtime refuses to join its namespace (CreateContainerError); never created, the
    // debugger is tried again at the next sync and starts once the target runs again.
    let d = debug(&p, Some("a"));
    let a = e.fake.container_ids("a")[0].clone();
    e.fake.exit_container(&a, 0);
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    let failed = r.errors.iter().find(|x| x.target == "debugger").expect("the debugger failed");
    assert_eq!(failed.reason, "CreateContainerError");
    assert!(failed.message.contains("is not running"), "{}", failed.message);
    assert_eq!(r.started, vec!["a"], "the app restarts in the same sync");
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    assert_eq!(r.started, vec!["debugger"], "{r:?}");
    let new_a = e.fake.container_ids("a").pop().unwrap();
    assert_eq!(pid_namespace(&e, "debugger"), (api::NamespaceMode::Target as i32, new_a));
    assert!(e.mgr.reasons().get(&uid, "debugger").is_none(), "a successful start clears the reason");
}

#[tokio::test(start_paused = true)]
async fn the_image_follows_the_debuggers_pull_policy() {
    let e = env();
    let p = pod("Always");
    e.mgr.sync_pod(&p, &status(&e).await).await;
    let mut d = debug(&p, Some("a"));
    let ec = &mut d.spec.as_mut().unwrap().ephemeral_containers.as_mut().unwrap()[0];
    ec.image = Some("localhost/missing:1".into());
    ec.image_pull_policy = Some("Never".into());
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    assert_eq!(r.errors[0].reason, "ErrImageNeverPull", "{r:?}");
    assert_eq!(e.fake.count("PullImage"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_debugger_setting_a_field_rkubelet_does_not_apply_is_not_started_and_says_which() {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, FileKeySelector};
    let e = env();
    let p = pod("Always");
    assert_eq!(e.mgr.sync_pod(&p, &status(&e).await).await.started, vec!["a"]);
    let mut d = debug(&p, None);
    let selector = FileKeySelector { key: "k".into(), path: "f".into(), volume_name: "v".into(), ..Default::default() };
    d.spec.as_mut().unwrap().ephemeral_containers.as_mut().unwrap()[0].env = Some(vec![EnvVar {
        name: "X".into(),
        value_from: Some(EnvVarSource { file_key_ref: Some(selector), ..Default::default() }),
        ..Default::default()
    }]);
    let r = e.mgr.sync_pod(&d, &status(&e).await).await;
    assert!(r.started.is_empty(), "never run as if the field were absent");
    assert_eq!(r.errors[0].reason, "CreateContainerConfigError");
    assert!(
        r.errors[0].message.starts_with("can't set `spec.ephemeralContainers[0].env[0].valueFrom.fileKeyRef`: "),
        "{}",
        r.errors[0].message
    );
    assert!(e.fake.container_ids("debugger").is_empty());
}
