//! End to end: ephemeral containers (`kubectl debug`, GA since 1.25) on rkubelet as a node of the real cluster —
//! the real kube-apiserver's `pods/ephemeralcontainers` subresource, the real containerd, the real `kubectl`.
//! The debugger joins the target container's PID namespace, runs once, is reported in
//! `ephemeralContainerStatuses`, is read with `kubectl logs`, is reached with `kubectl attach`, and stops with
//! the pod.

mod common;

use std::time::Duration;

use common::cluster::TestEnv;
use common::*;
use kubelet_cri::RuntimeService;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// The app: a shell whose command line the debugger can recognise as PID 1 of the shared namespace.
const APP: &str = "trap 'exit 0' TERM; while true; do sleep 0.2; done # app-marker";

/// The debugger's script: PID 1's command line (the target's, when the namespace is shared), every process it
/// sees, and its own PID (not 1: it joined a namespace someone else started). `$$$$` is the shell's `$$` once
/// the kubelet has expanded `$(VAR)` references in the command (`$$` escapes `$`).
const DEBUG: &str = "echo \"pid1: $(tr '\\0' ' ' < /proc/1/cmdline)\"; ps -o pid,args; echo \"self: $$$$\"";

/// `kubectl debug web` with an ephemeral container `name` targeting `app`, with `extra` flags, running `command`.
async fn debug(env: &TestEnv, name: &str, extra: &[&str], command: &[&str]) {
    let mut args =
        vec!["debug", "web", "--image=localhost/busybox:1", "--image-pull-policy=Never", "--profile=general"];
    args.extend(["--target=app", "-c", name]);
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    let (ok, out, err) = env.kubectl_output(&args).await;
    assert!(ok, "kubectl {args:?}: {out}{err}");
}

/// The status of ephemeral container `name` in a pod object.
fn ephemeral_status<'a>(pod: &'a Value, name: &str) -> Option<&'a Value> {
    pod["status"]["ephemeralContainerStatuses"].as_array()?.iter().find(|s| s["name"] == name)
}

/// The pod `name` of the node's own view (rkubelet's read-only API), in the test's namespace.
async fn node_view(ns: &str, name: &str) -> Option<Value> {
    pods().await.into_iter().find(|p| p["metadata"]["name"] == name && p["metadata"]["namespace"] == ns)
}

/// Waits until `ok` holds for pod `web` in rkubelet's own view (its read-only API, which needs no status patch),
/// then in the apiserver's; returns the apiserver's object.
async fn wait_both(env: &TestEnv, node: &mut Node, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    node.wait_for(&format!("{what} on the node"), Duration::from_secs(60), || async {
        node_view(&env.ns, "web").await.filter(|p| ok(p))
    })
    .await;
    node.wait_for(&format!("{what} in the apiserver"), Duration::from_secs(60), || async {
        env.pod("web").await.filter(|p| ok(p))
    })
    .await
}

fn terminated(s: &Value) -> bool {
    s["state"]["terminated"].is_object()
}

fn running(s: &Value) -> bool {
    s["state"]["running"].is_object()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_debug_runs_a_debugger_in_the_targets_pid_namespace() {
    let (_g, rt) = fresh_runtime().await;
    let env = TestEnv::new().await;
    let mut node = env.start_kubeadm_node().await;
    env.wait_node_ready(&mut node).await;
    env.create(&env.pod_yaml("web", &[("app", APP)], "")).await;
    wait_both(&env, &mut node, "pod web Running", all_running).await;
    let app_id = containers_of(&rt, "web").await[0].id.clone();

    // kubectl debug adds the ephemeral container through pods/ephemeralcontainers; rkubelet starts it.
    debug(&env, "debugger", &[], &["sh", "-c", DEBUG]).await;
    let spec = env.pod("web").await.unwrap();
    assert_eq!(spec["spec"]["ephemeralContainers"][0]["targetContainerName"], "app", "{spec}");

    let pod = wait_both(&env, &mut node, "the debugger terminated", |p| {
        ephemeral_status(p, "debugger").is_some_and(terminated)
    })
    .await;
    let s = ephemeral_status(&pod, "debugger").unwrap();
    assert_eq!(s["state"]["terminated"]["exitCode"], 0, "{s}");
    assert_eq!(s["state"]["terminated"]["reason"], "Completed", "{s}");
    assert_eq!(s["ready"], false, "an ephemeral container is never ready: {s}");
    assert_eq!(s["restartCount"], 0);
    assert_eq!(s["image"], "localhost/busybox:1");
    assert!(s["imageID"].as_str().is_some_and(|i| !i.is_empty()), "{s}");
    let debugger_id = s["containerID"].as_str().unwrap().strip_prefix("containerd://").unwrap().to_string();
    assert_eq!(s["state"]["terminated"]["containerID"], format!("containerd://{debugger_id}"));
    assert_eq!(pod["status"]["phase"], "Running", "the pod is unaffected");
    assert!(all_running(&pod), "the app still runs and is ready: {pod}");

    // What the debugger saw: the target's processes, PID 1 being the app's shell.
    let logs = env.kubectl(&["logs", "web", "-c", "debugger"]).await;
    let pid1 = logs.lines().find_map(|l| l.strip_prefix("pid1: ")).unwrap_or_else(|| panic!("{logs}"));
    assert!(pid1.starts_with("sh -c ") && pid1.contains("app-marker"), "PID 1 is the app: {logs}");
    // A `ps` line of the app's `sleep 0.2` with its own PID (not PID 1's command line, which contains it too).
    let child = |l: &str| {
        let mut f = l.split_whitespace();
        f.next().and_then(|p| p.parse::<u32>().ok()).is_some_and(|pid| pid > 1)
            && f.collect::<Vec<_>>() == ["sleep", "0.2"]
    };
    assert!(logs.lines().any(child), "the app's child is visible: {logs}");
    let own = logs.lines().find_map(|l| l.strip_prefix("self: ")).and_then(|p| p.trim().parse::<u32>().ok());
    let own = own.unwrap_or_else(|| panic!("{logs}"));
    assert!(own > 1, "{logs}");

    // In the runtime: created as upstream labels it, with its log at <name>/0.log, in the app's sandbox.
    let debugger = rt.container_status(&debugger_id).await.unwrap();
    assert_eq!(debugger.labels["io.kubernetes.container.name"], "debugger");
    assert_eq!(debugger.labels["io.kubernetes.pod.name"], "web");
    assert_eq!(debugger.annotations["io.kubernetes.container.restartCount"], "0");
    assert!(debugger.log_path.ends_with("/debugger/0.log"), "{}", debugger.log_path);
    let listed = containers_of(&rt, "web").await;
    let sandbox = |id: &str| listed.iter().find(|c| c.id == id).unwrap().pod_sandbox_id.clone();
    assert_eq!(sandbox(&debugger_id), sandbox(&app_id));

    // Never restarted, whatever the pod's restartPolicy (Always here).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let named = |n: &'static str| {
        let rt = &rt;
        async move {
            containers_of(rt, "web")
                .await
                .into_iter()
                .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == n))
                .count()
        }
    };
    assert_eq!(named("debugger").await, 1, "the debugger ran once");
    assert_eq!(named("app").await, 1, "the app was not touched");
    let events = env
        .kubectl(&["get", "events", "--field-selector", "involvedObject.fieldPath=spec.ephemeralContainers{debugger}"])
        .await;
    assert!(events.contains("Started container debugger"), "{events}");

    // A second, interactive debugger: kubectl attach reaches it through the kubelet API.
    debug(&env, "shell", &["-i", "--attach=false"], &["sh"]).await;
    wait_both(&env, &mut node, "the shell running", |p| ephemeral_status(p, "shell").is_some_and(running)).await;
    let mut attach = env.spawn_kubectl(&["attach", "web", "-c", "shell", "-i"], true);
    let mut stdin = attach.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(attach.stdout.take().unwrap()).lines();
    // Talk to the shell until it answers (stdin stays open meanwhile, as a user's terminal), then end it.
    stdin.write_all(b"echo \"attached: $(tr '\\0' ' ' < /proc/1/cmdline)\"\n").await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = stdout.next_line().await {
            if l.starts_with("attached: ") {
                return Some(l);
            }
        }
        None
    })
    .await;
    let answer = match answer {
        Ok(Some(l)) => l,
        other => {
            let (_, log, _) = env.kubectl_output(&["logs", "web", "-c", "shell"]).await;
            panic!("no answer through kubectl attach ({other:?}); the shell's log: {log}");
        }
    };
    assert!(answer.starts_with("attached: sh -c ") && answer.contains("app-marker"), "{answer}");
    stdin.write_all(b"exit 0\n").await.unwrap();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(60), attach.wait())
        .await
        .expect("kubectl attach ends with the shell")
        .unwrap();
    assert!(status.success(), "kubectl attach: {status}");
    let pod =
        wait_both(&env, &mut node, "the shell terminated", |p| ephemeral_status(p, "shell").is_some_and(terminated))
            .await;
    let names: Vec<&str> = pod["status"]["ephemeralContainerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["debugger", "shell"], "sorted by name, as upstream");
    assert_eq!(named("shell").await, 1, "the shell ran once");

    // A debugger that still runs stops with the pod.
    debug(&env, "sleeper", &[], &["sh", "-c", SERVE]).await;
    wait_both(&env, &mut node, "the sleeper running", |p| ephemeral_status(p, "sleeper").is_some_and(running)).await;
    env.kubectl(&["delete", "pod", "web", "--wait=false"]).await;
    node.wait_for("every container of the pod stopped", Duration::from_secs(30), || async {
        let all = containers_of(&rt, "web").await;
        all.iter().all(|c| c.state != kubelet_cri::api::ContainerState::ContainerRunning as i32).then_some(())
    })
    .await;
    // Once everything stopped the kubelet deletes the object (after its last status patch), then cleans up.
    env.kubectl(&["wait", "--for=delete", "pod/web", "--timeout=60s"]).await;
    node.wait_for("every container of the pod removed", Duration::from_secs(30), || async {
        containers_of(&rt, "web").await.is_empty().then_some(())
    })
    .await;
    assert!(env.apiserver_panics().is_empty(), "{:?}", env.apiserver_panics());
    node.stop_and_clean(&rt).await;
}
