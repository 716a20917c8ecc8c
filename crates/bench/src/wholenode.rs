//! The whole node's cost: the real binary on the real containerd with the real control plane
//! (`crates/test-cluster`: etcd, kube-apiserver, kube-controller-manager), counting what rkubelet makes the
//! runtime spend as rkubelet's cost.
//!
//! - The raw CRI floor first, with no kubelet: the benchmark itself runs `RunPodSandbox` + `CreateContainer` +
//!   `StartContainer` for a batch of pods at once, then `StopPodSandbox` + `RemovePodSandbox` for all of them.
//! - Then rkubelet: a batch of `batch` pods created through the apiserver until all are Running (seen on a
//!   `kubectl get -w` of the apiserver), steady at that count, deleted until all are gone; then `pods` pods, steady
//!   for the window, during which the CPU of every process group (rkubelet, containerd, the shims, the control
//!   plane, the rest), the machine's CPU (`/proc/stat`), the CRI calls per method (rkubelet's
//!   `kubelet_runtime_operations_total`) and the relist time (`kubelet_pleg_relist_duration_seconds`) are taken;
//!   then `exits` containers killed one after another, each timed until its exit shows on the apiserver.
//! - rkubelet stopped with SIGTERM (the time to exit), the same window again with no kubelet (the floor: what
//!   containerd and the shims use with nobody asking), then twice more with the benchmark making, alone, the calls
//!   that cost the runtime most in earlier versions (`ListPodSandboxStats` every 10 s; a `GetPodStatus` of every pod
//!   twice a minute); rkubelet started again, every pod deleted until gone, rkubelet stopped, and the sandboxes the
//!   runtime still has of the benchmark's pods counted.
//!
//! Pods are created and deleted by one `kubectl` per 10 pods, all at once (kubectl's client-side rate limit lets 10
//! requests through at once, then 5 a second).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use kubelet_cri::{RemoteRuntime, RuntimeService, api};
use serde_json::Value;
use test_cluster::ControlPlane;
use tokio::time::Instant;

use crate::apiwatch::is_running;
use crate::binnode::{BinNode, NodeSpec, SECURE_PORT};

const IMAGE: &str = "localhost/busybox:1";
const SHELL: &str = "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done";

/// What to run.
#[derive(Debug, Clone)]
pub struct WholeNodeOpts {
    /// The rkubelet binary.
    pub binary: PathBuf,
    /// containerd's socket.
    pub endpoint: String,
    /// Pods of the batch (started and torn down at once, steady in between).
    pub batch: usize,
    /// Pods of the steady measurement and the big teardown.
    pub pods: usize,
    /// Window of each steady measurement (and of the floor).
    pub window: Duration,
    /// Wait after a change before a window.
    pub settle: Duration,
    /// Containers killed one after another at steady pods, each timed until its exit shows on the apiserver.
    pub exits: usize,
    /// Configuration added to the kubelet's (e.g. `featureGates` for a variant).
    pub extra_config: String,
}

/// CPU of the machine and of each process group over a window, in millicores (a process's own and its reaped
/// children's: runc and the CNI plugins count for the shims and containerd).
#[derive(Debug, Clone, Default)]
pub struct Cpu {
    /// The whole machine (`/proc/stat`: user, nice, system, irq, softirq).
    pub machine: f64,
    /// By group: `rkubelet`, `containerd`, `shims`, `control plane` (apiserver, etcd, controller-manager, kubectl
    /// and this benchmark, which runs the kubectl that create and delete the pods), `other` processes.
    pub groups: BTreeMap<String, f64>,
}

impl Cpu {
    /// One group's figure (0 when absent).
    pub fn group(&self, g: &str) -> f64 {
        self.groups.get(g).copied().unwrap_or(0.0)
    }
    /// The machine without the control plane: what a node of a real cluster spends.
    pub fn node(&self) -> f64 {
        self.machine - self.group("control plane")
    }
}

/// One steady window with rkubelet running.
#[derive(Debug, Clone, Default)]
pub struct Steady {
    /// Pods running.
    pub pods: usize,
    /// CPU.
    pub cpu: Cpu,
    /// CRI calls per minute, by method (`operation_type`).
    pub cri_per_minute: BTreeMap<String, f64>,
    /// Mean relist time from rkubelet's own histogram.
    pub relist_mean: Duration,
    /// rkubelet's RSS at the end of the window.
    pub rss: u64,
}

impl Steady {
    /// Every CRI call per minute.
    pub fn cri_total(&self) -> f64 {
        self.cri_per_minute.values().sum()
    }
}

/// Pods started and torn down at once.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Pods.
    pub pods: usize,
    /// Created → every pod Running (rkubelet, through the apiserver).
    pub all_running: Duration,
    /// Delete → every pod gone (rkubelet, through the apiserver).
    pub all_gone: Duration,
    /// The same pods through CRI alone: RunPodSandbox + CreateContainer + StartContainer, all at once.
    pub floor_start: Duration,
    /// The same pods through CRI alone: StopPodSandbox + RemovePodSandbox, all at once.
    pub floor_teardown: Duration,
    /// CRI calls rkubelet made to start the batch (all methods).
    pub start_calls: u64,
    /// CRI calls rkubelet made to tear it down.
    pub teardown_calls: u64,
    /// CPU-seconds the node (the machine without the control plane) spent starting the pods, rkubelet's way.
    pub start_node_cpu: f64,
    /// CPU-seconds the node spent starting them through CRI alone.
    pub floor_start_node_cpu: f64,
}

/// Everything measured.
/// `/run/containerd/containerd.sock` linked to the benchmark's containerd while it lives, where no socket is there.
pub struct DefaultSocket(Option<PathBuf>);

impl DefaultSocket {
    /// Links the default socket to `endpoint` (`unix:///...`) unless one exists.
    pub fn link(endpoint: &str) -> Self {
        let default = PathBuf::from("/run/containerd/containerd.sock");
        let target = endpoint.trim_start_matches("unix://");
        if default.exists() || default.symlink_metadata().is_ok() || std::path::Path::new(target) == default {
            return DefaultSocket(None);
        }
        let _ = std::fs::create_dir_all("/run/containerd");
        match std::os::unix::fs::symlink(target, &default) {
            Ok(()) => DefaultSocket(Some(default)),
            Err(e) => {
                eprintln!("whole node: cannot link {} to {target}: {e}", default.display());
                DefaultSocket(None)
            }
        }
    }
}

impl Drop for DefaultSocket {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `/metrics/cadvisor` scraped every second over a window at steady state.
#[derive(Debug, Clone, Default)]
pub struct Scrapes {
    pub n: usize,
    pub cpu: Cpu,
    pub window: Duration,
    pub bytes: usize,
    pub mean: Duration,
}

impl Scrapes {
    /// CPU milliseconds a scrape costs `group` (or the whole node for `None`) beyond the steady state `idle`.
    pub fn cost_ms(&self, idle: &Cpu, group: Option<&str>) -> f64 {
        let get = |c: &Cpu| group.map_or_else(|| c.node(), |g| c.group(g));
        (get(&self.cpu) - get(idle)).max(0.0) * self.window.as_secs_f64() / self.n.max(1) as f64
    }
}

#[derive(Debug, Clone, Default)]
pub struct WholeNodeResults {
    /// The batch.
    pub batch: Batch,
    /// The big teardown (`pods` pods).
    pub teardown: Batch,
    /// Steady with the batch running.
    pub steady_batch: Steady,
    /// Steady with `pods` pods running.
    pub steady: Steady,
    /// The same window with no kubelet and `pods` pods running.
    pub floor: Cpu,
    /// The same window with no kubelet, the benchmark calling `ListPodSandboxStats` every 10 s (how rkubelet
    /// sampled the pods' stats before they came from the cgroups).
    pub cause_stats: Cpu,
    /// The same window with no kubelet, the benchmark inspecting every pod twice a minute (`ListPodSandbox` and
    /// `ListContainers` for the pod, `PodSandboxStatus`, `ContainerStatus`: how rkubelet's resyncs asked for each
    /// pod's status before they read the PLEG cache).
    pub cause_status: Cpu,
    /// SIGTERM → exit with `pods` pods running.
    pub sigterm_exit: Duration,
    /// Sandboxes of the benchmark's pods the runtime still had after they were deleted and rkubelet stopped.
    pub sandboxes_left: usize,
    /// For each container killed at steady pods: its `StopContainer` returned → its exit on the apiserver's watch,
    /// shortest first.
    pub exit_latency: Vec<Duration>,
    pub cadvisor: Scrapes,
}

impl WholeNodeResults {
    /// The `q` quantile (0..=1) of the exit latencies (zero when none was taken).
    pub fn exit_quantile(&self, q: f64) -> Duration {
        let v = &self.exit_latency;
        if v.is_empty() {
            return Duration::ZERO;
        }
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
}

fn group_of(comm: &str) -> &'static str {
    match comm {
        "rkubelet" => "rkubelet",
        "containerd" => "containerd",
        c if c.starts_with("containerd-shim") => "shims",
        "kube-apiserver" | "etcd" | "kube-controller" | "kubectl" => "control plane",
        _ => "other",
    }
}

/// CPU ticks of every process: pid → (command, ticks).
fn process_ticks() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = stat[open + 1..close].to_string();
        let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        // utime, stime and the reaped children's cutime, cstime: runc and the CNI plugins count for the shim and
        // containerd that ran them, kubectl for this benchmark.
        let ticks: u64 = (11..=14).filter_map(|i| f.get(i).and_then(|v| v.parse::<u64>().ok())).sum();
        out.insert(pid, (comm, ticks));
    }
    out
}

/// Busy ticks of the machine (user, nice, system, irq, softirq; not idle, iowait or steal).
fn machine_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> =
        s.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    [0usize, 1, 2, 5, 6].iter().filter_map(|i| f.get(*i)).sum()
}

fn hz() -> f64 {
    // SAFETY: sysconf has no memory effects.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// What every process and the machine had spent at one moment.
struct Snapshot {
    procs: HashMap<u32, (String, u64)>,
    machine: u64,
    at: Instant,
}

fn snapshot() -> Snapshot {
    Snapshot { procs: process_ticks(), machine: machine_ticks(), at: Instant::now() }
}

/// CPU since `s0`, in millicores over the time since; process `kubelet` is the `rkubelet` group whatever its
/// name. Processes that started or ended meanwhile count in the machine figure only.
fn cpu_since(s0: &Snapshot, kubelet: Option<u32>) -> Cpu {
    let s1 = snapshot();
    let secs = (s1.at - s0.at).as_secs_f64().max(1e-3);
    let per_s = |ticks: u64| ticks as f64 / hz() / secs * 1000.0;
    let mut groups = BTreeMap::new();
    for (pid, (comm, t1)) in &s1.procs {
        if let Some((c0, t0)) = s0.procs.get(pid)
            && c0 == comm
        {
            let group = if Some(*pid) == kubelet {
                "rkubelet"
            } else if *pid == std::process::id() {
                "control plane"
            } else {
                group_of(comm)
            };
            *groups.entry(group.to_string()).or_insert(0.0) += per_s(t1.saturating_sub(*t0));
        }
    }
    Cpu { machine: per_s(s1.machine.saturating_sub(s0.machine)), groups }
}

/// CPU over `window` (sleeps through it).
async fn cpu_over(window: Duration, kubelet: Option<u32>) -> Cpu {
    let s0 = snapshot();
    tokio::time::sleep(window).await;
    cpu_since(&s0, kubelet)
}

/// rkubelet's CRI call counters and relist histogram (sum, count).
async fn counters() -> anyhow::Result<(BTreeMap<String, f64>, (f64, f64))> {
    let text = crate::apiscrape::fetch(SECURE_PORT, "/metrics").await?;
    let mut calls = BTreeMap::new();
    let (mut sum, mut count) = (0.0, 0.0);
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("kubelet_runtime_operations_total{operation_type=\"")
            && let Some((op, v)) = rest.split_once("\"} ")
        {
            calls.insert(op.to_string(), v.trim().parse().unwrap_or(0.0));
        } else if let Some(v) = l.strip_prefix("kubelet_pleg_relist_duration_seconds_sum ") {
            sum = v.trim().parse().unwrap_or(0.0);
        } else if let Some(v) = l.strip_prefix("kubelet_pleg_relist_duration_seconds_count ") {
            count = v.trim().parse().unwrap_or(0.0);
        }
    }
    Ok((calls, (sum, count)))
}

fn total_calls(c: &BTreeMap<String, f64>) -> f64 {
    c.values().sum()
}

async fn steady(node: &mut BinNode, pods: usize, window: Duration) -> anyhow::Result<Steady> {
    let (c0, (s0, n0)) = counters().await?;
    let cpu = cpu_over(window, Some(node.pid())).await;
    let (c1, (s1, n1)) = counters().await?;
    let minutes = window.as_secs_f64() / 60.0;
    let cri_per_minute = c1
        .iter()
        .map(|(k, v)| (k.clone(), (v - c0.get(k).copied().unwrap_or(0.0)) / minutes))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    let relist_mean = if n1 > n0 { Duration::from_secs_f64((s1 - s0) / (n1 - n0)) } else { Duration::ZERO };
    Ok(Steady { pods, cpu, cri_per_minute, relist_mean, rss: node.rss()? })
}

/// Pod names and when each was seen Running and deleted, from `kubectl get pods -w` on the real apiserver.
#[derive(Default)]
struct Seen {
    running: HashMap<String, Instant>,
    gone: HashMap<String, Instant>,
    /// When a pod's container was first seen exited (terminated now or before, or restarted).
    exited: HashMap<String, Instant>,
}

/// Whether the pod's first container has exited since it started: terminated, or restarted after an exit.
fn container_exited(pod: &Value) -> bool {
    let c = &pod["status"]["containerStatuses"][0];
    c["restartCount"].as_u64().unwrap_or(0) > 0
        || c["state"]["terminated"].is_object()
        || c["lastState"]["terminated"].is_object()
}

/// A `kubectl get pods -w -o json --output-watch-events` of the namespace, read in a thread.
struct Watch {
    child: std::process::Child,
    seen: Arc<Mutex<Seen>>,
    /// Woken by the reader thread after every event.
    changed: Arc<tokio::sync::Notify>,
}

impl Watch {
    fn start(cp: &ControlPlane, ns: &str) -> anyhow::Result<Self> {
        let mut child = std::process::Command::new("kubectl")
            .args(["--kubeconfig", &cp.admin_kubeconfig().to_string_lossy(), "-n", ns])
            .args(["get", "pods", "-w", "-o", "json", "--output-watch-events"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("run kubectl get pods -w")?;
        let out = child.stdout.take().context("kubectl's stdout")?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let s = seen.clone();
        let changed = Arc::new(tokio::sync::Notify::new());
        let notify = changed.clone();
        std::thread::spawn(move || {
            let reader = std::io::BufReader::new(out);
            for ev in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
                let Ok(ev) = ev else { return };
                let now = Instant::now();
                let name = ev["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
                if ev["type"] == "DELETED" {
                    s.gone.insert(name, now);
                } else {
                    if container_exited(&ev["object"]) {
                        s.exited.entry(name.clone()).or_insert(now);
                    }
                    if is_running(&ev["object"]) {
                        s.running.entry(name).or_insert(now);
                    }
                }
                drop(s);
                notify.notify_waiters();
            }
        });
        Ok(Watch { child, seen, changed })
    }

    /// Waits until `f` gives every name's time; the latest of them.
    async fn wait_all(
        &self,
        node: &mut BinNode,
        names: &[String],
        what: &str,
        f: impl Fn(&Seen) -> &HashMap<String, Instant>,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            // Registered before the check, so an event between the check and the wait is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
                let times: Option<Vec<Instant>> = names.iter().map(|n| f(&s).get(n).copied()).collect();
                if let Some(t) = times {
                    return Ok(t.into_iter().max().unwrap_or_else(Instant::now));
                }
            }
            node.check_alive()?;
            anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
            // Woken by the next event; once a second anyway, to notice an rkubelet that exited.
            let _ = tokio::time::timeout(Duration::from_secs(1), changed).await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pods_yaml(ns: &str, node: &str, names: &[String]) -> String {
    let items: Vec<Value> = names
        .iter()
        .map(|n| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": n, "namespace": ns},
                "spec": {
                    "nodeName": node, "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": false,
                    "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                    "command": ["sh", "-c", SHELL]}],
                },
            })
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// kubectl lets 10 requests go at once and then 5 a second (client-go's default burst and QPS): pods are created
/// and deleted by one kubectl per 10, all at once, so the apiserver sees them as fast as it takes them.
const KUBECTL_BURST: usize = 10;

/// Runs one kubectl per chunk of 10 names at once; `args` gets the chunk's names, `stdin` the chunk's input.
async fn kubectl_chunks(
    cp: &ControlPlane,
    names: &[String],
    args: impl Fn(&[String]) -> Vec<String>,
    stdin: impl Fn(&[String]) -> Option<String>,
) -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    let kubeconfig = cp.admin_kubeconfig();
    let mut children = vec![];
    for chunk in names.chunks(KUBECTL_BURST) {
        let input = stdin(chunk);
        let mut child = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args(chunk))
            .stdin(if input.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("run kubectl")?;
        if let (Some(text), Some(mut w)) = (input, child.stdin.take()) {
            w.write_all(text.as_bytes()).await?;
        }
        children.push(child);
    }
    for child in children {
        let out = child.wait_with_output().await?;
        anyhow::ensure!(out.status.success(), "kubectl failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

async fn create(cp: &ControlPlane, ns: &str, node: &str, names: &[String]) -> anyhow::Result<()> {
    kubectl_chunks(cp, names, |_| vec!["create".into(), "-f".into(), "-".into()], |c| Some(pods_yaml(ns, node, c)))
        .await
}

async fn delete(cp: &ControlPlane, ns: &str, names: &[String]) -> anyhow::Result<()> {
    let args = |c: &[String]| {
        let mut a: Vec<String> = ["-n", ns, "delete", "pod", "--wait=false"].iter().map(|s| s.to_string()).collect();
        a.extend(c.iter().cloned());
        a
    };
    kubectl_chunks(cp, names, args, |_| None).await
}

/// Creates `names` through the apiserver and waits until all are Running: fills `b`'s pods, time, node CPU and
/// CRI calls.
async fn start_all(
    cp: &ControlPlane,
    ns: &str,
    node_name: &str,
    watch: &Watch,
    node: &mut BinNode,
    names: &[String],
    b: &mut Batch,
) -> anyhow::Result<()> {
    let c0 = calls_now().await;
    let s0 = snapshot();
    let t0 = Instant::now();
    create(cp, ns, node_name, names).await?;
    b.all_running = watch.wait_all(node, names, "every pod Running", |s| &s.running).await? - t0;
    b.start_node_cpu = node_cpu_seconds(&s0, Some(node.pid()));
    b.pods = names.len();
    b.start_calls = calls_now().await - c0;
    Ok(())
}

/// Deletes `names` through the apiserver and waits until all are gone: fills `b`'s time and CRI calls.
async fn delete_all(
    cp: &ControlPlane,
    ns: &str,
    watch: &Watch,
    node: &mut BinNode,
    names: &[String],
    b: &mut Batch,
) -> anyhow::Result<()> {
    let c0 = calls_now().await;
    let t0 = Instant::now();
    delete(cp, ns, names).await?;
    b.all_gone = watch.wait_all(node, names, "every pod gone", |s| &s.gone).await? - t0;
    b.teardown_calls = calls_now().await - c0;
    Ok(())
}

/// Starts `n` pods through CRI alone, all at once; returns their sandbox IDs and the time taken.
async fn floor_start(cri: &RemoteRuntime, tag: &str, n: usize) -> anyhow::Result<(Vec<String>, Duration)> {
    let dir = std::env::temp_dir().join(format!("rkubelet-bench-floor-{tag}"));
    let t0 = Instant::now();
    let runs = (0..n).map(|i| {
        let dir = dir.clone();
        async move {
            let meta = api::PodSandboxMetadata {
                name: format!("floor-{tag}-{i}"),
                namespace: "rkubelet-bench-floor".into(),
                uid: format!("floor-{tag}-{i}"),
                attempt: 0,
            };
            let log_dir = dir.join(format!("{i}"));
            std::fs::create_dir_all(&log_dir)?;
            let config = api::PodSandboxConfig {
                metadata: Some(meta),
                hostname: format!("floor-{i}"),
                log_directory: log_dir.to_string_lossy().into_owned(),
                dns_config: Some(api::DnsConfig { servers: vec!["10.96.0.10".into()], ..Default::default() }),
                labels: [("rkubelet-bench".to_string(), "floor".to_string())].into(),
                ..Default::default()
            };
            let sb = cri.run_pod_sandbox(config.clone(), "").await?;
            let c = api::ContainerConfig {
                metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
                image: Some(api::ImageSpec { image: IMAGE.into(), ..Default::default() }),
                command: vec!["sh".into(), "-c".into(), SHELL.into()],
                log_path: "app/0.log".into(),
                ..Default::default()
            };
            let id = cri.create_container(&sb, c, config).await?;
            cri.start_container(&id).await?;
            anyhow::Ok(sb)
        }
    });
    let ids = futures::future::try_join_all(runs).await?;
    Ok((ids, t0.elapsed()))
}

/// CPU-seconds of the node (the machine without the control plane) since `s0`.
fn node_cpu_seconds(s0: &Snapshot, kubelet: Option<u32>) -> f64 {
    let secs = s0.at.elapsed().as_secs_f64();
    cpu_since(s0, kubelet).node() * secs / 1000.0
}

/// Stops and removes `ids` through CRI alone, all at once.
async fn floor_teardown(cri: &RemoteRuntime, ids: &[String]) -> anyhow::Result<Duration> {
    let t0 = Instant::now();
    futures::future::try_join_all(ids.iter().map(|id| async move {
        cri.stop_pod_sandbox(id).await?;
        cri.remove_pod_sandbox(id).await?;
        anyhow::Ok(())
    }))
    .await?;
    Ok(t0.elapsed())
}

/// CPU over `window` while `call` runs every `every`.
/// Scrapes `/metrics/cadvisor` every second over `window`, measuring the node's CPU meanwhile.
async fn scrape_cadvisor(node: &mut BinNode, window: Duration) -> anyhow::Result<Scrapes> {
    let s0 = snapshot();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut n, mut bytes, mut total) = (0usize, 0usize, Duration::ZERO);
    while s0.at.elapsed() < window {
        tick.tick().await;
        let t = Instant::now();
        let text = crate::apiscrape::fetch(SECURE_PORT, "/metrics/cadvisor").await?;
        total += t.elapsed();
        n += 1;
        bytes = text.len();
    }
    let cpu = cpu_since(&s0, Some(node.pid()));
    Ok(Scrapes { n, cpu, window: s0.at.elapsed(), bytes, mean: total / n.max(1) as u32 })
}

async fn while_calling<F, Fut>(window: Duration, every: Duration, call: F) -> anyhow::Result<Cpu>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), kubelet_cri::CriError>>,
{
    let s0 = snapshot();
    let mut tick = tokio::time::interval(every);
    while s0.at.elapsed() < window {
        tick.tick().await;
        call().await?;
    }
    Ok(cpu_since(&s0, None))
}

/// The pod UIDs of the sandboxes of namespace `ns`.
async fn pod_uids(cri: &RemoteRuntime, ns: &str) -> anyhow::Result<Vec<String>> {
    let filter = api::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.namespace".to_string(), ns.to_string())].into(),
        ..Default::default()
    };
    Ok(cri.list_pod_sandbox(Some(filter)).await?.into_iter().filter_map(|s| s.metadata.map(|m| m.uid)).collect())
}

/// One pod's status as a kubelet's `GetPodStatus` asks for it.
async fn inspect(cri: &RemoteRuntime, uid: &str) -> Result<(), kubelet_cri::CriError> {
    let label = [("io.kubernetes.pod.uid".to_string(), uid.to_string())];
    let sf = api::PodSandboxFilter { label_selector: label.clone().into(), ..Default::default() };
    let cf = api::ContainerFilter { label_selector: label.into(), ..Default::default() };
    let (sandboxes, containers) = tokio::try_join!(cri.list_pod_sandbox(Some(sf)), cri.list_containers(Some(cf)))?;
    for s in sandboxes {
        cri.pod_sandbox_status(&s.id).await?;
    }
    for c in containers {
        cri.container_status(&c.id).await?;
    }
    Ok(())
}

/// Sandboxes the runtime has of namespace `ns`.
async fn sandboxes_of(cri: &RemoteRuntime, ns: &str) -> anyhow::Result<usize> {
    let filter = api::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.namespace".to_string(), ns.to_string())].into(),
        ..Default::default()
    };
    Ok(cri.list_pod_sandbox(Some(filter)).await?.len())
}

/// Kills the container of each pod in turn through CRI (`StopContainer` with no grace period: SIGKILL) and times
/// each from `StopContainer`'s return to the exit seen on the apiserver's watch (the kubelet noticing it, its status
/// write and the apiserver), shortest first. The kills are spread over a second's phase, so a periodic relist's
/// wait is sampled evenly.
async fn exit_latency(
    cri: &RemoteRuntime,
    ns: &str,
    watch: &Watch,
    node: &mut BinNode,
    names: &[String],
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(500 + (i as u64 * 370) % 1000)).await;
        let filter = api::ContainerFilter {
            label_selector: [
                ("io.kubernetes.pod.namespace".to_string(), ns.to_string()),
                ("io.kubernetes.pod.name".to_string(), name.clone()),
            ]
            .into(),
            state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerRunning as i32 }),
            ..Default::default()
        };
        let running = cri.list_containers(Some(filter)).await?;
        let c = running.first().with_context(|| format!("no running container of pod {ns}/{name}"))?;
        cri.stop_container(&c.id, 0).await?;
        let stopped = Instant::now();
        let seen = watch
            .wait_all(node, std::slice::from_ref(name), "a container's exit on the apiserver", |s| &s.exited)
            .await?;
        out.push(seen.saturating_duration_since(stopped));
    }
    out.sort();
    Ok(out)
}

fn start_node(opts: &WholeNodeOpts, kubeconfig: &std::path::Path, node: &str) -> anyhow::Result<BinNode> {
    BinNode::start(&NodeSpec {
        binary: &opts.binary,
        endpoint: opts.endpoint.clone(),
        kubeconfig: Some(kubeconfig.to_path_buf()),
        extra_config: format!("maxPods: 250\n{}", opts.extra_config),
        log_filter: None,
        node_name: Some(node.to_string()),
    })
}

async fn wait_ready(cp: &ControlPlane, node: &mut BinNode, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cp2 = cp.clone();
        let n = name.to_string();
        let out = tokio::task::spawn_blocking(move || {
            cp2.kubectl(&["get", "node", &n, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"], None)
        })
        .await?;
        if out.is_ok_and(|s| s.trim() == "True") {
            return Ok(());
        }
        node.check_alive()?;
        anyhow::ensure!(Instant::now() < deadline, "node {name} not Ready after 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn calls_now() -> u64 {
    counters().await.map(|(c, _)| total_calls(&c) as u64).unwrap_or(0)
}

/// Runs the scenario.
pub async fn run(opts: &WholeNodeOpts) -> anyhow::Result<WholeNodeResults> {
    let cp = tokio::task::spawn_blocking(|| ControlPlane::ensure(&test_cluster::default_dir())).await??;
    let cri = RemoteRuntime::new(&opts.endpoint, Duration::from_secs(120))?;
    let mut r = WholeNodeResults::default();

    // The raw CRI floor of the batch and of the big teardown, with no kubelet.
    let s0 = snapshot();
    let (ids, start) = floor_start(&cri, "batch", opts.batch).await?;
    r.batch.floor_start = start;
    r.batch.floor_start_node_cpu = node_cpu_seconds(&s0, None);
    r.batch.floor_teardown = floor_teardown(&cri, &ids).await?;
    let s0 = snapshot();
    let (ids, start) = floor_start(&cri, "all", opts.pods).await?;
    r.teardown.floor_start = start;
    r.teardown.floor_start_node_cpu = node_cpu_seconds(&s0, None);
    r.teardown.floor_teardown = floor_teardown(&cri, &ids).await?;
    eprintln!("whole node: CRI floor {:?}", (&r.batch, &r.teardown));

    let node_name = cp.next_node_name()?;
    // One namespace per run of the scenario (the upstream kubelet's run follows rkubelet's in the same process).
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let ns = format!("bench-{}-{}", std::process::id(), RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    cp.kubectl(&["create", "namespace", &ns], None)?;
    let dir = tempfile::Builder::new().prefix("rkubelet-bench-node-").tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    cp.write_node_kubeconfig(&kubeconfig, &node_name)?;
    // The namespace's `default` service account must exist before pods can be created.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cp.kubectl(&["-n", &ns, "get", "serviceaccount", "default"], None).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "no default service account in {ns}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let watch = Watch::start(&cp, &ns)?;
    let mut node = start_node(opts, &kubeconfig, &node_name)?;
    wait_ready(&cp, &mut node, &node_name).await?;
    tokio::time::sleep(opts.settle).await;

    // The batch: started at once, steady, deleted at once.
    let names: Vec<String> = (0..opts.batch).map(|i| format!("batch-{i}")).collect();
    start_all(&cp, &ns, &node_name, &watch, &mut node, &names, &mut r.batch).await?;
    tokio::time::sleep(opts.settle).await;
    r.steady_batch = steady(&mut node, opts.batch, opts.window).await?;
    delete_all(&cp, &ns, &watch, &mut node, &names, &mut r.batch).await?;
    eprintln!("whole node: batch {:?}; steady {:?}", r.batch, r.steady_batch);

    // Many pods steady, with and without the kubelet.
    let names: Vec<String> = (0..opts.pods).map(|i| format!("pod-{i}")).collect();
    start_all(&cp, &ns, &node_name, &watch, &mut node, &names, &mut r.teardown).await?;
    tokio::time::sleep(opts.settle).await;
    r.steady = steady(&mut node, opts.pods, opts.window).await?;
    eprintln!("whole node: steady {:?}", r.steady);
    r.cadvisor = scrape_cadvisor(&mut node, opts.window).await?;
    eprintln!("whole node: /metrics/cadvisor scraped {:?}", r.cadvisor);
    r.exit_latency = exit_latency(&cri, &ns, &watch, &mut node, &names[..opts.exits.min(names.len())]).await?;
    eprintln!("whole node: container exit → apiserver {:?}", r.exit_latency);
    r.sigterm_exit = node.stop().await;
    tokio::time::sleep(opts.settle).await;
    r.floor = cpu_over(opts.window, None).await;
    eprintln!("whole node: exit {:?}, floor {:?}", r.sigterm_exit, r.floor);
    // What each of the two causes found costs the runtime, alone.
    r.cause_stats = while_calling(opts.window, Duration::from_secs(10), || async {
        cri.list_pod_sandbox_stats(None).await.map(|_| ())
    })
    .await?;
    let uids = pod_uids(&cri, &ns).await?;
    let every = Duration::from_secs_f64(30.0 / uids.len().max(1) as f64);
    let next = std::sync::atomic::AtomicUsize::new(0);
    r.cause_status = while_calling(opts.window, every, || async {
        let uid = &uids[next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % uids.len().max(1)];
        inspect(&cri, uid).await
    })
    .await?;
    eprintln!("whole node: stats sampling {:?}, status calls {:?}", r.cause_stats, r.cause_status);

    // The teardown of every pod, then nothing may be left.
    let mut node = start_node(opts, &kubeconfig, &node_name)?;
    wait_ready(&cp, &mut node, &node_name).await?;
    tokio::time::sleep(opts.settle).await;
    delete_all(&cp, &ns, &watch, &mut node, &names, &mut r.teardown).await?;
    node.stop().await;
    r.sandboxes_left = sandboxes_of(&cri, &ns).await?;
    drop(watch);
    let _ = cp.kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
    let _ = cp.kubectl(&["delete", "node", &node_name, "--wait=false"], None);
    eprintln!("whole node: teardown {:?}, sandboxes left {}", r.teardown, r.sandboxes_left);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_are_grouped_by_command() {
        assert_eq!(group_of("containerd-shim-runc-v2"), "shims");
        assert_eq!(group_of("kube-controller"), "control plane", "comm is cut at 15 characters");
        assert_eq!(group_of("rkubelet"), "rkubelet");
        assert_eq!(group_of("bash"), "other");
        let cpu = Cpu { machine: 100.0, groups: [("control plane".to_string(), 30.0)].into() };
        assert_eq!(cpu.node(), 70.0);
    }
}
