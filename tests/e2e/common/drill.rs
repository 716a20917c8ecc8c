//! The fault drills' workload and invariant: 30 pods of three kinds (volumes, probes, a sidecar) bound to a test
//! node through the real apiserver, and the check each drill ends with: no pod lost, no container restarted or
//! sandbox changed that should not have been, nothing left behind (sandbox, container, cgroup, mount, pod folder,
//! IP lease), and the apiserver's view equal to the node's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use kubelet_cri::{RemoteRuntime, RuntimeService, api};
use serde_json::Value;
use tokio::time::Instant;

use super::cluster::TestEnv;
use super::{Node, http_get, kubepods_dirs, read_only_port, workdir};

/// A container that idles until SIGTERM without forking every fraction of a second (30 pods of the harness's
/// `SERVE` loop would keep two cores busy with `sleep` processes).
pub const IDLE: &str = "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done";

/// Prints a drill's figures on stderr directly, past the test harness's capture, so `scripts/test.sh` (and CI)
/// show every drill's invariant check.
pub fn report(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The host-local leases of the test containerd's CNI network (`scripts/lib/node-common.sh`: `RK_CNI_NETWORK`).
fn ipam_dir() -> std::path::PathBuf {
    Path::new("/var/lib/cni/networks").join(super::cni_network())
}

/// The drill workload's pod names: `d-00` … `d-<n-1>`.
pub fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("d-{i:02}")).collect()
}

/// The ConfigMap the volume pods mount.
pub fn config_map_yaml() -> String {
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: drill\ndata:\n  greeting: hello\n".into()
}

/// Pod `i` of the workload, bound to the test's node: every third one has an emptyDir and a ConfigMap volume,
/// every third an HTTP readiness and a TCP liveness probe, every third a plain init container and a sidecar.
pub fn pod_yaml(env: &TestEnv, i: usize) -> String {
    let name = &names(i + 1)[i];
    let container = |n: &str, script: &str, extra: &str| {
        format!(
            "  - name: {n}\n    image: localhost/busybox:1\n    command: [\"sh\", \"-c\", {}]\n{extra}",
            serde_json::to_string(script).unwrap()
        )
    };
    let head = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:\n    drill: \"true\"\nspec:\n  nodeName: {}\n  \
         terminationGracePeriodSeconds: 2\n",
        env.node
    );
    match i % 3 {
        0 => format!(
            "{head}  volumes:\n  - name: data\n    emptyDir: {{}}\n  - name: conf\n    configMap:\n      name: drill\n  \
             containers:\n{}",
            container(
                "app",
                &format!("echo {name} > /data/who; {IDLE}"),
                "    volumeMounts:\n    - name: data\n      mountPath: /data\n    - name: conf\n      mountPath: \
                 /etc/drill\n    resources:\n      requests:\n        cpu: 5m\n        memory: 8Mi\n",
            )
        ),
        1 => format!(
            "{head}  containers:\n{}",
            container(
                "web",
                "mkdir -p /www && echo ok > /www/ready && exec httpd -f -p 8080 -h /www",
                "    readinessProbe:\n      httpGet:\n        path: /ready\n        port: 8080\n      periodSeconds: 5\n    \
                 livenessProbe:\n      tcpSocket:\n        port: 8080\n      periodSeconds: 5\n      failureThreshold: 3\n",
            )
        ),
        _ => format!(
            "{head}  initContainers:\n{}{}  containers:\n{}",
            container("init", "echo init done", ""),
            container("side", IDLE, "    restartPolicy: Always\n"),
            container("app", IDLE, "")
        ),
    }
}

/// The whole workload as one multi-document YAML.
pub fn workload_yaml(env: &TestEnv, n: usize) -> String {
    let mut s = config_map_yaml();
    for i in 0..n {
        s.push_str("---\n");
        s.push_str(&pod_yaml(env, i));
    }
    s
}

/// What one pod looks like at a moment, from the apiserver.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub uid: String,
    pub phase: String,
    pub ip: String,
    /// Container name → (container ID, restart count, ready, running).
    pub containers: BTreeMap<String, (String, i64, bool, bool)>,
}

impl PodView {
    fn of(p: &Value) -> PodView {
        let mut containers = BTreeMap::new();
        for key in ["initContainerStatuses", "containerStatuses"] {
            for c in p["status"][key].as_array().into_iter().flatten() {
                let id = c["containerID"].as_str().unwrap_or("").trim_start_matches("containerd://").to_string();
                containers.insert(
                    c["name"].as_str().unwrap_or("").to_string(),
                    (
                        id,
                        c["restartCount"].as_i64().unwrap_or(0),
                        c["ready"] == true,
                        c["state"]["running"].is_object(),
                    ),
                );
            }
        }
        PodView {
            uid: p["metadata"]["uid"].as_str().unwrap_or("").into(),
            phase: p["status"]["phase"].as_str().unwrap_or("").into(),
            ip: p["status"]["podIP"].as_str().unwrap_or("").into(),
            containers,
        }
    }

    /// Running with every container ready (a completed init container counts as done).
    fn settled(&self) -> bool {
        self.phase == "Running"
            && !self.containers.is_empty()
            && self
                .containers
                .iter()
                .all(|(n, (id, _, ready, running))| !id.is_empty() && (n == "init" || (*ready && *running)))
    }
}

/// The pods of the test's namespace as the apiserver has them, by name.
pub async fn apiserver_pods(env: &TestEnv) -> BTreeMap<String, Value> {
    let Some(list) = env.get(&["pods"]).await else { return BTreeMap::new() };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p["metadata"]["name"].as_str().unwrap_or("").to_string(), p.clone()))
        .collect()
}

/// The pods of `ns` as the node's read-only API reports them, by name.
async fn node_pods(ns: &str) -> Option<BTreeMap<String, Value>> {
    let (200, body) = http_get(read_only_port(), "/pods").await? else { return None };
    let v: Value = serde_json::from_str(&body).ok()?;
    Some(
        // An empty list is `"items": null`, as upstream's.
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["namespace"] == ns)
            .map(|p| (p["metadata"]["name"].as_str().unwrap_or("").to_string(), p.clone()))
            .collect(),
    )
}

/// The workload's state: pod name → view.
pub type Baseline = BTreeMap<String, PodView>;

/// What the runtime and the host hold for the drill's pods.
struct HostState {
    sandboxes: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    cgroups: BTreeSet<String>,
    pod_dirs: BTreeSet<String>,
    mounts: BTreeSet<String>,
    leases: Vec<(String, String)>,
}

/// The pod UIDs with a cgroup folder in any hierarchy (cgroupfs driver).
fn pod_cgroups() -> BTreeSet<String> {
    let mut cgroups = BTreeSet::new();
    for h in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
        for q in kubepods_dirs() {
            for d in std::fs::read_dir(h.path().join(q)).into_iter().flatten().flatten() {
                let f = d.file_name().to_string_lossy().into_owned();
                if let Some(uid) = f.strip_prefix("pod") {
                    cgroups.insert(uid.to_string());
                }
            }
        }
    }
    cgroups
}

/// Pod cgroups that existed before the drill began (left by an earlier failed test, not the drill's to judge).
static PREEXISTING: std::sync::Mutex<BTreeSet<String>> = std::sync::Mutex::new(BTreeSet::new());

/// Notes the pod cgroups that exist before a drill starts its node.
pub fn note_preexisting_cgroups() {
    *PREEXISTING.lock().unwrap() = pod_cgroups();
}

/// The test containerd's PID.
pub fn containerd_pid() -> nix::unistd::Pid {
    let pid = std::fs::read_to_string(workdir().join("containerd.pid")).expect("containerd.pid");
    nix::unistd::Pid::from_raw(pid.trim().parse().expect("a pid in containerd.pid"))
}

/// Stops the test containerd with `signal` (SIGTERM as `systemctl restart containerd` does, SIGKILL for a
/// crash) and waits for its exit.
pub fn stop_containerd(signal: nix::sys::signal::Signal) {
    let pid = containerd_pid();
    nix::sys::signal::kill(pid, signal).unwrap();
    for _ in 0..300 {
        if nix::sys::signal::kill(pid, None).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("containerd {pid} did not stop within 30s");
}

/// Starts the test containerd again (`scripts/node-setup.sh`, which is idempotent).
pub fn start_containerd() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/node-setup.sh");
    let out = std::process::Command::new("bash").arg(script).arg(workdir()).output().unwrap();
    assert!(out.status.success(), "node-setup.sh failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn label<'a>(labels: &'a std::collections::HashMap<String, String>, k: &str) -> &'a str {
    labels.get(k).map(String::as_str).unwrap_or("")
}

async fn host_state(rt: &RemoteRuntime, node: &Node, ns: &str) -> Result<HostState, String> {
    let in_ns = |l: &std::collections::HashMap<String, String>| label(l, "io.kubernetes.pod.namespace") == ns;
    let sandboxes: Vec<api::PodSandbox> = rt
        .list_pod_sandbox(None)
        .await
        .map_err(|e| format!("list sandboxes: {e}"))?
        .into_iter()
        .filter(|s| in_ns(&s.labels))
        .collect();
    let containers: Vec<api::Container> = rt
        .list_containers(None)
        .await
        .map_err(|e| format!("list containers: {e}"))?
        .into_iter()
        .filter(|c| in_ns(&c.labels))
        .collect();
    let before = PREEXISTING.lock().unwrap().clone();
    let cgroups = pod_cgroups().into_iter().filter(|u| !before.contains(u)).collect();
    let pods_dir = node.root.join("pods");
    let pod_dirs = std::fs::read_dir(&pods_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect();
    let prefix = format!("{}/", pods_dir.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter_map(|m| m.strip_prefix(&prefix))
        .map(|rest| rest.split('/').next().unwrap_or("").to_string())
        .collect();
    let leases = std::fs::read_dir(ipam_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().parse::<std::net::IpAddr>().is_ok())
        .map(|d| {
            let owner = std::fs::read_to_string(d.path()).unwrap_or_default();
            (d.file_name().to_string_lossy().into_owned(), owner.lines().next().unwrap_or("").trim().to_string())
        })
        .collect();
    Ok(HostState { sandboxes, containers, cgroups, pod_dirs, mounts, leases })
}

/// What a drill expects at its end.
pub struct Expect<'a> {
    /// The pods that must be Running (every other pod of the namespace must be gone).
    pub running: &'a [String],
    /// When set, the pods must still have these sandboxes, containers and restart counts.
    pub unchanged: Option<&'a Baseline>,
}

/// The figures of a passed check.
#[derive(Debug)]
pub struct Checked {
    pub pods: usize,
    pub restarts: i64,
    pub waited: Duration,
    pub state: Baseline,
    /// Containers containerd 1.6 cannot remove (a start it cancelled when a killed rkubelet went away).
    pub runtime_leaks: usize,
}

/// One pass of the invariant: the list of what is wrong (empty when it holds), and the pods' views.
async fn check_once(
    env: &TestEnv,
    node: &Node,
    rt: &RemoteRuntime,
    want: &Expect<'_>,
) -> (Vec<String>, Baseline, Vec<String>) {
    let mut bad = vec![];
    let mut leaks = vec![];
    let api = apiserver_pods(env).await;
    let views: Baseline = api.iter().map(|(n, p)| (n.clone(), PodView::of(p))).collect();
    let expected: BTreeSet<&String> = want.running.iter().collect();
    for name in want.running {
        match views.get(name) {
            None => bad.push(format!("pod {name} is missing from the apiserver")),
            Some(v) if !v.settled() => bad.push(format!("pod {name} is not Running and ready: {v:?}")),
            Some(_) => {}
        }
    }
    for (name, p) in &api {
        if !expected.contains(name) {
            bad.push(format!("pod {name} should be gone (deletionTimestamp {})", p["metadata"]["deletionTimestamp"]));
        }
    }
    // The node's own view equals the apiserver's.
    match node_pods(&env.ns).await {
        None => bad.push("the node's read-only API does not answer".into()),
        Some(np) => {
            for (name, v) in &views {
                match np.get(name).map(PodView::of) {
                    None if expected.contains(name) => bad.push(format!("pod {name} is unknown to the node")),
                    Some(n) if n != *v => bad.push(format!("pod {name}: apiserver {v:?} != node {n:?}")),
                    _ => {}
                }
            }
            for name in np.keys().filter(|n| !views.contains_key(*n)) {
                bad.push(format!("the node still reports pod {name}"));
            }
        }
    }
    if let Some(base) = want.unchanged {
        for (name, b) in base {
            let Some(v) = views.get(name) else { continue };
            if v.uid != b.uid || v.ip != b.ip {
                bad.push(format!("pod {name} changed: uid/ip {}/{} -> {}/{}", b.uid, b.ip, v.uid, v.ip));
            }
            for (c, (id, restarts, _, _)) in &b.containers {
                let now = v.containers.get(c);
                if now.map(|x| (&x.0, x.1)) != Some((id, *restarts)) {
                    bad.push(format!("pod {name} container {c} changed: {id}/{restarts} -> {now:?}"));
                }
            }
        }
    }
    // The runtime and the host hold exactly what the running pods need.
    let uids: BTreeSet<String> = want.running.iter().filter_map(|n| views.get(n)).map(|v| v.uid.clone()).collect();
    match host_state(rt, node, &env.ns).await {
        Err(e) => bad.push(e),
        Ok(h) => {
            let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
            for s in &h.sandboxes {
                let uid = label(&s.labels, "io.kubernetes.pod.uid");
                *per_pod.entry(uid).or_default() += 1;
                if !uids.contains(uid) {
                    bad.push(format!("leftover sandbox {} of pod uid {uid}", &s.id[..12]));
                } else if s.state != api::PodSandboxState::SandboxReady as i32 {
                    bad.push(format!("sandbox {} of pod uid {uid} is not ready", &s.id[..12]));
                }
            }
            for (uid, n) in per_pod.iter().filter(|(_, n)| **n > 1) {
                bad.push(format!("pod uid {uid} has {n} sandboxes"));
            }
            let live: BTreeSet<&str> = h.sandboxes.iter().map(|s| s.id.as_str()).collect();
            let known: BTreeSet<&str> =
                views.values().flat_map(|v| v.containers.values().map(|c| c.0.as_str())).collect();
            for c in &h.containers {
                let uid = label(&c.labels, "io.kubernetes.pod.uid");
                let name = label(&c.labels, "io.kubernetes.container.name");
                if !uids.contains(uid) {
                    bad.push(format!("leftover container {name} {} of pod uid {uid}", &c.id[..12]));
                } else if !known.contains(c.id.as_str()) && cancelled_start(rt, &c.id).await {
                    leaks.push(c.id[..12].to_string());
                } else if !known.contains(c.id.as_str()) {
                    bad.push(format!(
                        "container {name} {} (state {}, attempt {}) of pod uid {uid} is not the one reported",
                        &c.id[..12],
                        c.state,
                        c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0)
                    ));
                }
            }
            for uid in h.cgroups.iter().filter(|u| !uids.contains(*u)) {
                // Another test's node may share the machine's kubepods hierarchy only in a failed run.
                bad.push(format!("leftover pod cgroup pod{uid}"));
            }
            for uid in uids.iter().filter(|u| !h.cgroups.contains(*u)) {
                bad.push(format!("pod uid {uid} has no cgroup"));
            }
            for d in h.pod_dirs.iter().filter(|d| !uids.contains(*d)) {
                bad.push(format!("leftover pod folder {d}"));
            }
            for m in h.mounts.iter().filter(|m| !uids.contains(*m)) {
                bad.push(format!("leftover mount under the folder of pod {m}"));
            }
            for (ip, owner) in &h.leases {
                if !live.contains(owner.as_str()) {
                    bad.push(format!("leaked IP lease {ip} of sandbox {owner}"));
                }
            }
        }
    }
    (bad, views, leaks)
}

/// Deletes the tasks of the containers of `ns` that containerd 1.6 keeps after cancelling their start (see
/// [`cancelled_start`]), as an operator of such a node has to; rkubelet then removes them like any dead container.
pub async fn delete_runtime_leaks(rt: &RemoteRuntime, ns: &str) -> usize {
    let mut n = 0;
    for c in rt.list_containers(None).await.unwrap_or_default() {
        if label(&c.labels, "io.kubernetes.pod.namespace") == ns && cancelled_start(rt, &c.id).await {
            super::delete_task(&c.id);
            n += 1;
        }
    }
    n
}

/// Whether the container is one whose start the drill's kill made fail: never started (`StartError`, no start
/// time). Where the kill lands decides containerd 1.6's message: its client (a killed rkubelet) gone
/// (`context canceled`, or the shim's start killed: `failed to start shim: … signal: killed`), or containerd itself
/// killed (`… already exists` at the next start, `failed to start io pipe copy`). Some of them keep their task, so
/// that no CRI call can remove them: the runtime's leak. rkubelet made the container again under the next attempt,
/// as upstream would.
async fn cancelled_start(rt: &RemoteRuntime, id: &str) -> bool {
    rt.container_status(id).await.is_ok_and(|s| {
        s.state == api::ContainerState::ContainerExited as i32 && s.started_at == 0 && s.reason == "StartError"
    })
}

/// Waits (up to `timeout`) until the drill's invariant holds, prints it as `drill <name>: …` and returns the
/// figures; fails with what is still wrong.
pub async fn wait_invariant(
    name: &str,
    env: &TestEnv,
    node: &mut Node,
    rt: &RemoteRuntime,
    want: Expect<'_>,
    timeout: Duration,
) -> Checked {
    let start = Instant::now();
    loop {
        node.assert_alive();
        let (bad, views, leaks) = check_once(env, node, rt, &want).await;
        if bad.is_empty() {
            let restarts = views.values().flat_map(|v| v.containers.values().map(|c| c.1)).sum();
            let changed = want
                .unchanged
                .map(|b| b.iter().filter(|(n, v)| views.get(*n).is_some_and(|x| x.uid == v.uid && x != *v)).count());
            let waited = start.elapsed();
            report(format_args!(
                "drill {name}: invariant holds after {:.1} s: {} pods Running and ready, {} gone; container \
                 restarts {restarts}; {}; no leftover sandbox, container, cgroup, mount, pod folder or IP lease{}; the \
                 apiserver's view equals the node's",
                waited.as_secs_f64(),
                want.running.len(),
                views.len().saturating_sub(want.running.len()),
                match changed {
                    Some(_) => "sandboxes, containers and IPs unchanged".to_string(),
                    None => "one sandbox per pod".to_string(),
                },
                if leaks.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (but {} containers whose start containerd cancelled and cannot remove: {})",
                        leaks.len(),
                        leaks.join(", ")
                    )
                },
            ));
            return Checked { pods: want.running.len(), restarts, waited, state: views, runtime_leaks: leaks.len() };
        }
        if start.elapsed() > timeout {
            let keep = std::env::temp_dir().join(format!("drill-{name}.log"));
            let _ = std::fs::write(&keep, node.log());
            panic!(
                "drill {name}: the invariant does not hold after {timeout:?}:\n  {}\nrkubelet log (all of it in {}):\n{}",
                bad.join("\n  "),
                keep.display(),
                super::tail(&node.log(), 60)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sum of the workload's container restart counts.
pub fn restarts(b: &Baseline) -> i64 {
    b.values().flat_map(|v| v.containers.values().map(|c| c.1)).sum()
}
