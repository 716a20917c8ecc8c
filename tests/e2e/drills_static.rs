//! Fault drill 8: 130 static manifests dropped into the folder at once (30 good, 70 malformed in five ways, 29
//! duplicating a good pod's name, one rewritten every second; 200 with 100 good pods with `--long`). The good pods
//! run, each bad file is refused with its file (and field) named, rkubelet never crashes, and nothing is left behind.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::drill::{self, IDLE};
use common::*;
use kubelet_cri::{RemoteRuntime, RuntimeService, api};
use serde_json::Value;
use tokio::time::Instant;

const BAD: usize = 70;
const DUP: usize = 29;

fn good(name: &str, extra_labels: &str, annotations: &str) -> String {
    manifest(name, &[], &[("app", IDLE)], "  terminationGracePeriodSeconds: 2\n")
        .replace("    test: e2e\n", &format!("    test: e2e\n{extra_labels}"))
        .replace("metadata:\n", &format!("metadata:\n{annotations}"))
}

/// Bad manifest `i`: (file name, content, the field its refusal must name, if any).
fn bad(i: usize) -> (String, String, Option<&'static str>) {
    let name = format!("bad-{i:02}");
    let c = "  containers:\n  - name: app\n    image: localhost/busybox:1\n";
    match i % 5 {
        0 => (format!("{name}.yaml"), format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [{name}\n"), None),
        1 => (
            format!("{name}.yaml"),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{c}    ports:\n    - containerPort: \
                 not-a-number\n"
            ),
            Some("spec.containers[0].ports[0].containerPort"),
        ),
        2 => (
            format!("{name}.yaml"),
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers: []\n"),
            Some("spec.containers"),
        ),
        3 => (
            format!("{name}.yaml"),
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: Bad_{i}\nspec:\n{c}"),
            Some("metadata.name"),
        ),
        _ => (
            format!("{name}.json"),
            format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"{name}\"}},\"spec\":{{\"containers\":\
                 [{{\"name\":\"app\",\"image\":5}}]}}}}"
            ),
            Some("spec.containers[0].image"),
        ),
    }
}

/// Every sandbox and container of the runtime, by pod UID.
async fn runtime_by_uid(rt: &RemoteRuntime) -> (BTreeMap<String, Vec<api::PodSandbox>>, BTreeMap<String, Vec<String>>) {
    let mut sandboxes: BTreeMap<String, Vec<api::PodSandbox>> = BTreeMap::new();
    for s in rt.list_pod_sandbox(None).await.unwrap() {
        sandboxes.entry(s.labels.get("io.kubernetes.pod.uid").cloned().unwrap_or_default()).or_default().push(s);
    }
    let mut containers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for c in rt.list_containers(None).await.unwrap() {
        containers.entry(c.labels.get("io.kubernetes.pod.uid").cloned().unwrap_or_default()).or_default().push(c.id);
    }
    (sandboxes, containers)
}

/// What is wrong with the node against the pods that must run (empty when the drill's invariant holds).
async fn check(node: &Node, rt: &RemoteRuntime, want: &BTreeSet<String>, flip_gen: &str) -> Vec<String> {
    let mut bad = vec![];
    let listed: BTreeMap<String, Value> =
        pods().await.into_iter().map(|p| (p["metadata"]["name"].as_str().unwrap_or("").to_string(), p)).collect();
    for n in want {
        match listed.get(n) {
            None => bad.push(format!("pod {n} is not reported")),
            Some(p) if !all_running(p) => bad.push(format!("pod {n} is not Running and ready")),
            Some(p) if p["metadata"]["labels"]["copy"].is_string() => bad.push(format!("pod {n} runs the duplicate")),
            _ => {}
        }
    }
    for n in listed.keys().filter(|n| !want.contains(*n)) {
        bad.push(format!("pod {n} should not be reported"));
    }
    if let Some(p) = listed.get(&format!("flip-{}", node.name)) {
        let g = p["metadata"]["annotations"]["generation"].as_str().unwrap_or("");
        if g != flip_gen {
            bad.push(format!("flip runs generation {g}, the file has {flip_gen}"));
        }
    }
    let uids: BTreeSet<String> =
        listed.values().filter_map(|p| p["metadata"]["uid"].as_str()).map(str::to_string).collect();
    let reported: BTreeSet<String> = listed
        .values()
        .flat_map(|p| p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["containerID"].as_str().map(|s| s.trim_start_matches("containerd://").to_string()))
        .collect();
    let (sandboxes, containers) = runtime_by_uid(rt).await;
    for (uid, list) in &sandboxes {
        if !uids.contains(uid) {
            bad.push(format!("leftover sandboxes of pod uid {uid}: {}", list.len()));
        } else if list.len() != 1 {
            bad.push(format!("pod uid {uid} has {} sandboxes", list.len()));
        }
    }
    for (uid, ids) in &containers {
        for id in ids.iter().filter(|id| !reported.contains(*id)) {
            bad.push(format!("container {} of pod uid {uid} is not the reported one", &id[..12]));
        }
    }
    let dirs: BTreeSet<String> = std::fs::read_dir(node.root.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    for d in dirs.difference(&uids) {
        bad.push(format!("leftover pod folder {d}"));
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_manifests_at_once_good_bad_duplicated_and_changing() {
    // The good pods: 30 in the suite (more than the duplicates need), 100 with `--long`.
    let good_pods: usize = by_mode(30, 100);
    let (_g, rt) = fresh_runtime().await;
    let mut node = Node::start(&[]);
    node.wait_healthy().await;

    // All at once: each is written aside and renamed in, as an operator's tool would.
    let t0 = Instant::now();
    for i in 0..good_pods {
        node.write_manifest(&format!("g-{i:03}.yaml"), &good(&format!("g-{i:03}"), "", ""));
    }
    let mut refusals = vec![];
    for i in 0..BAD {
        let (file, text, field) = bad(i);
        node.write_manifest(&file, &text);
        refusals.push((file, field));
    }
    for i in 0..DUP {
        // Same pod name as a good one, in a file sorting after it: refused as a duplicate, the first one runs.
        let file = format!("z-dup-{i:02}.yaml");
        node.write_manifest(&file, &good(&format!("g-{i:03}"), "    copy: dup\n", ""));
        refusals.push((file, Some("duplicate")));
    }
    let flip = |g: usize| good("flip", "", &format!("  annotations:\n    generation: \"{g}\"\n"));
    node.write_manifest("flip.yaml", &flip(0));

    // The flip file changes every second for 20 s while the rest start.
    let mut generation = 0;
    while t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        node.assert_alive();
        generation += 1;
        node.write_manifest("flip.yaml", &flip(generation));
    }

    let mut want: BTreeSet<String> = (0..good_pods).map(|i| format!("g-{i:03}-{}", node.name)).collect();
    want.insert(format!("flip-{}", node.name));
    let flip_gen = generation.to_string();
    let start = Instant::now();
    loop {
        node.assert_alive();
        let last = check(&node, &rt, &want, &flip_gen).await;
        if last.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "drill manifests: the invariant does not hold:\n  {}\n{}",
            last.join("\n  "),
            tail(&node.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = node.log();
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("manifest refused")).collect();
    for (file, field) in &refusals {
        let line = refused.iter().find(|l| l.contains(file.as_str()));
        let line = line.unwrap_or_else(|| panic!("no refusal names {file}"));
        if let Some(f) = field {
            assert!(line.contains(f), "the refusal of {file} names {f}: {line}");
        }
    }
    let panics = log.lines().filter(|l| l.contains("panicked")).count();
    assert_eq!(panics, 0, "no panic in rkubelet's log");
    drill::report(format_args!(
        "drill manifests: {good_pods} good pods and flip (generation {generation} after {generation} rewrites) Running {:.1} s after \
         the drop; {} refusals naming file and field ({BAD} malformed, {DUP} duplicates); one sandbox per pod, no \
         leftover sandbox, container or pod folder; rkubelet alive, no panic",
        t0.elapsed().as_secs_f64(),
        refusals.len()
    ));
    node.stop_and_clean(&rt).await;
}
