//! The real binary on the real containerd (the one `scripts/node-setup.sh` starts) with the test apiserver in this
//! process: pod start latency for a static manifest (seen Running on the read-only `/pods`, polled every 5 ms) and
//! for an apiserver create (seen Running on the apiserver's watch), one at a time and as a batch; what rkubelet
//! adds over containerd's own RunPodSandbox, CreateContainer and StartContainer (which rkubelet logs with their
//! durations, `cri call`); teardown (apiserver delete → object gone; manifest removed → no ready sandbox left in
//! containerd); idle and steady CPU and RSS with pods running.
//!
//! The pods run the locally built `localhost/busybox:1` with a shell that exits at once on SIGTERM.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kubelet_cri::{RemoteRuntime, RuntimeService, api};
use serde_json::Value;
use test_apiserver::{Options, TestApiServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::apiwatch::{PodObserver, last_of, pod_object, times_of};
use crate::binnode::{BinNode, NODE, NodeSpec};
use crate::fakescale::{Percentiles, wait_node_ready};

const IMAGE: &str = "localhost/busybox:1";
const SHELL: &str = "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done";
const READ_ONLY_PORT: u16 = 21255;

/// What to run.
#[derive(Debug, Clone)]
pub struct ContainerdOpts {
    /// The rkubelet binary.
    pub binary: PathBuf,
    /// containerd's socket.
    pub endpoint: String,
    /// Pods started one at a time, per path.
    pub sequential: usize,
    /// Pods started at once, per path.
    pub batch: usize,
    /// Window of the idle and steady measurements.
    pub steady: Duration,
    /// Wait after the node is Ready before the idle figures (rkubelet drops its start-up code 10 s after its
    /// sources are ready).
    pub startup_wait: Duration,
    /// Wait before RSS is read after a change.
    pub settle: Duration,
    /// Requests per kubelet API endpoint while the batch runs.
    pub scrapes: usize,
}

/// One pod started alone.
#[derive(Debug, Clone)]
pub struct StartRun {
    /// Placed/created → seen Running.
    pub e2e: Duration,
    /// containerd's RunPodSandbox + CreateContainer + StartContainer, as rkubelet timed them.
    pub cri: Duration,
    /// Delete → gone.
    pub teardown: Duration,
}

/// A batch started at once.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Per pod, placed/created → seen Running.
    pub start: Percentiles,
    /// First placed → last Running.
    pub all_running: Duration,
    /// First delete → last gone.
    pub all_gone: Duration,
}

/// One way of starting pods (static manifest or apiserver create).
#[derive(Debug, Clone)]
pub struct PathResults {
    /// One at a time.
    pub sequential: Vec<StartRun>,
    /// All at once.
    pub batch: Batch,
}

/// Everything measured on containerd.
#[derive(Debug, Clone)]
pub struct ContainerdResults {
    /// Registered node, no pod.
    pub idle_rss: u64,
    /// Registered node, no pod.
    pub idle_millicores: f64,
    /// With the API batch running.
    pub steady_rss: u64,
    /// With the API batch running.
    pub steady_millicores: f64,
    /// Pods in the steady measurement.
    pub steady_pods: usize,
    /// Static manifests.
    pub static_pods: PathResults,
    /// Apiserver creates.
    pub api_pods: PathResults,
    /// Apiserver creates of pods with a configMap, a secret and the projected service account token volume, one
    /// at a time, alternating with `api_pods.sequential`.
    pub volume_pods: Vec<StartRun>,
    /// The kubelet API's endpoints with the batch (`steady_pods`) running.
    pub api_endpoints: Vec<crate::apiscrape::Endpoint>,
}

impl PathResults {
    /// Median of placed → Running.
    pub fn median_e2e(&self) -> Duration {
        median_by(&self.sequential, |r| r.e2e)
    }
    /// Median of what rkubelet adds (e2e − CRI), per run.
    pub fn median_share(&self) -> Duration {
        median_by(&self.sequential, StartRun::share)
    }
    /// Median CRI time.
    pub fn median_cri(&self) -> Duration {
        median_by(&self.sequential, |r| r.cri)
    }
    /// Median teardown.
    pub fn median_teardown(&self) -> Duration {
        median_by(&self.sequential, |r| r.teardown)
    }
}

impl StartRun {
    /// What rkubelet added to the start: end to end minus containerd's calls.
    pub fn share(&self) -> Duration {
        self.e2e.saturating_sub(self.cri)
    }
}

/// The median of one figure over runs.
pub fn median_by(runs: &[StartRun], f: impl Fn(&StartRun) -> Duration) -> Duration {
    median(runs.iter().map(f).collect())
}

/// The median of durations.
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    crate::procstat::quantile(&v, 0.5)
}

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 30\n  containers:\n  \
         - name: app\n    image: {IMAGE}\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", {:?}]\n",
        SHELL
    )
}

/// GET on the read-only port; the body as JSON.
async fn read_only(path: &str) -> anyhow::Result<Value> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", READ_ONLY_PORT)).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await?;
    let mut buf = vec![];
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).context("no HTTP body")?;
    Ok(serde_json::from_str(body)?)
}

/// Static pods by full name (`<name>-<node>`) as rkubelet reports them.
async fn static_pods() -> anyhow::Result<Vec<Value>> {
    Ok(read_only("/pods").await?["items"].as_array().cloned().unwrap_or_default())
}

/// Polls `/pods` every 5 ms until `f` holds for the list; fails after `timeout`.
async fn poll_pods<T>(
    node: &mut BinNode,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&[Value]) -> Option<T>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(pods) = static_pods().await
            && let Some(v) = f(&pods)
        {
            return Ok(v);
        }
        node.check_alive()?;
        anyhow::ensure!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn full(name: &str) -> String {
    format!("{name}-{NODE}")
}

fn find<'a>(pods: &'a [Value], full_name: &str) -> Option<&'a Value> {
    pods.iter().find(|p| p["metadata"]["name"] == full_name)
}

/// CRI time (RunPodSandbox + CreateContainer + StartContainer) rkubelet logged for pod `default/<pod>` since byte
/// `offset` of its log.
fn cri_time(log: &Path, offset: u64, pod: &str) -> Duration {
    // Only what was logged since `offset`: the log grows with every run.
    let mut bytes = vec![];
    if let Ok(mut f) = std::fs::File::open(log) {
        use std::io::{Read, Seek, SeekFrom};
        let _ = f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_to_end(&mut bytes));
    }
    let text = String::from_utf8_lossy(&bytes);
    let tag = format!("pod=default/{pod} ");
    let mut us = 0u64;
    for l in text.lines().filter(|l| l.contains("cri call") && l.contains(&tag)) {
        let op = l.split("op=").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or("").trim_matches('"');
        if matches!(op, "RunPodSandbox" | "CreateContainer" | "StartContainer") {
            us += l
                .split("elapsed_us=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_micros(us)
}

fn log_len(node: &BinNode) -> u64 {
    std::fs::metadata(node.log_path()).map(|m| m.len()).unwrap_or(0)
}

/// Whether containerd still has a ready sandbox of pod `default/<full_name>`.
async fn sandbox_ready(cri: &RemoteRuntime, full_name: &str) -> anyhow::Result<bool> {
    let filter = api::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.name".to_string(), full_name.to_string())].into(),
        ..Default::default()
    };
    let items = cri.list_pod_sandbox(Some(filter)).await?;
    Ok(items.iter().any(|s| s.state == api::PodSandboxState::SandboxReady as i32))
}

/// Waits until none of `names` (full names) has a ready sandbox.
async fn wait_sandboxes_down(node: &mut BinNode, cri: &RemoteRuntime, names: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut up = false;
        for n in names {
            up |= sandbox_ready(cri, n).await?;
        }
        if !up {
            return Ok(());
        }
        node.check_alive()?;
        anyhow::ensure!(Instant::now() < deadline, "pods {names:?} still have a ready sandbox after 120 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn write_manifest(dir: &Path, name: &str) -> anyhow::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, manifest(name))?;
    std::fs::rename(&tmp, dir.join(format!("{name}.yaml")))?;
    Ok(())
}

fn static_running(pods: &[Value], name: &str) -> bool {
    find(pods, &full(name)).is_some_and(crate::apiwatch::is_running)
}

async fn static_sequential(node: &mut BinNode, runtime: &RemoteRuntime, i: usize) -> anyhow::Result<StartRun> {
    let name = format!("lat-static-{i}");
    let offset = log_len(node);
    let t0 = Instant::now();
    write_manifest(&node.manifests(), &name)?;
    poll_pods(node, &format!("static pod {name} Running"), Duration::from_secs(60), |p| {
        static_running(p, &name).then_some(())
    })
    .await?;
    let e2e = t0.elapsed();
    let cri = cri_time(&node.log_path(), offset, &full(&name));
    let t1 = Instant::now();
    std::fs::remove_file(node.manifests().join(format!("{name}.yaml")))?;
    wait_sandboxes_down(node, runtime, &[full(&name)]).await?;
    Ok(StartRun { e2e, cri, teardown: t1.elapsed() })
}

/// The bench pod with a ConfigMap volume, a Secret volume and (through the ServiceAccount admission) the projected
/// `kube-api-access-*` volume: what an ordinary application pod carries.
fn pod_with_volumes(name: &str) -> Value {
    let mut p = pod_object(name, IMAGE, &["sh", "-c", SHELL], 30);
    p["spec"].as_object_mut().expect("spec").remove("automountServiceAccountToken");
    p["spec"]["volumes"] = serde_json::json!([
        {"name": "config", "configMap": {"name": "bench-config"}},
        {"name": "secret", "secret": {"secretName": "bench-secret"}},
    ]);
    p["spec"]["containers"][0]["volumeMounts"] = serde_json::json!([
        {"name": "config", "mountPath": "/config"},
        {"name": "secret", "mountPath": "/secret"},
    ]);
    p
}

fn create_volume_sources(server: &TestApiServer) -> anyhow::Result<()> {
    let cm = serde_json::json!({"metadata": {"name": "bench-config"}, "data": {"mode": "fast", "level": "3"}});
    server.create("v1", "configmaps", Some("default"), cm)?;
    let secret = serde_json::json!({"metadata": {"name": "bench-secret"}, "stringData": {"password": "s3cr3t"}});
    server.create("v1", "secrets", Some("default"), secret)?;
    Ok(())
}

async fn api_sequential(
    server: &TestApiServer,
    obs: &mut PodObserver,
    node: &BinNode,
    name: String,
    pod: Value,
) -> anyhow::Result<StartRun> {
    let offset = log_len(node);
    let t0 = Instant::now();
    server.create("v1", "pods", Some("default"), pod)?;
    let at =
        obs.wait(&format!("pod {name} Running"), Duration::from_secs(60), |t| t.running.get(&name).copied()).await?;
    let e2e = at - t0;
    let cri = cri_time(&node.log_path(), offset, &name);
    let t1 = Instant::now();
    server.delete("v1", "pods", Some("default"), &name, None)?;
    let gone = obs.wait(&format!("pod {name} gone"), Duration::from_secs(60), |t| t.gone.get(&name).copied()).await?;
    Ok(StartRun { e2e, cri, teardown: gone - t1 })
}

async fn static_batch(node: &mut BinNode, cri: &RemoteRuntime, n: usize) -> anyhow::Result<Batch> {
    let names: Vec<String> = (0..n).map(|i| format!("batch-static-{i}")).collect();
    let mut placed = vec![];
    let t0 = Instant::now();
    for name in &names {
        write_manifest(&node.manifests(), name)?;
        placed.push(Instant::now());
    }
    let mut seen: Vec<Option<Instant>> = vec![None; n];
    poll_pods(node, &format!("{n} static pods Running"), Duration::from_secs(120), |p| {
        let now = Instant::now();
        for (i, name) in names.iter().enumerate() {
            if seen[i].is_none() && static_running(p, name) {
                seen[i] = Some(now);
            }
        }
        seen.iter().all(Option::is_some).then_some(())
    })
    .await?;
    let at: Vec<Instant> = seen.into_iter().flatten().collect();
    let all_running = at.iter().max().copied().unwrap_or(t0) - t0;
    let start = Percentiles::of(at.iter().zip(&placed).map(|(r, p)| *r - *p).collect());
    let t1 = Instant::now();
    for name in &names {
        std::fs::remove_file(node.manifests().join(format!("{name}.yaml")))?;
    }
    wait_sandboxes_down(node, cri, &names.iter().map(|n| full(n)).collect::<Vec<_>>()).await?;
    Ok(Batch { start, all_running, all_gone: t1.elapsed() })
}

/// Starts a batch through the apiserver and leaves it running; returns the names, creation times and the figures
/// so far (teardown filled in by [`api_batch_delete`]).
async fn api_batch_start(
    server: &TestApiServer,
    obs: &mut PodObserver,
    n: usize,
) -> anyhow::Result<(Vec<String>, Batch)> {
    let names: Vec<String> = (0..n).map(|i| format!("batch-api-{i}")).collect();
    let mut created = vec![];
    let t0 = Instant::now();
    for name in &names {
        server.create("v1", "pods", Some("default"), pod_object(name, IMAGE, &["sh", "-c", SHELL], 30))?;
        created.push(Instant::now());
    }
    let at = obs.wait(&format!("{n} pods Running"), Duration::from_secs(120), |t| times_of(&t.running, &names)).await?;
    let all_running = at.iter().max().copied().unwrap_or(t0) - t0;
    let start = Percentiles::of(at.iter().zip(&created).map(|(r, c)| *r - *c).collect());
    Ok((names, Batch { start, all_running, all_gone: Duration::ZERO }))
}

async fn api_batch_delete(server: &TestApiServer, obs: &mut PodObserver, names: &[String]) -> anyhow::Result<Duration> {
    let t1 = Instant::now();
    for name in names {
        server.delete("v1", "pods", Some("default"), name, None)?;
    }
    let last =
        obs.wait(&format!("{} pods gone", names.len()), Duration::from_secs(120), |t| last_of(&t.gone, names)).await?;
    Ok(last - t1)
}

/// Runs the scenarios.
pub async fn run(opts: &ContainerdOpts) -> anyhow::Result<ContainerdResults> {
    let sock = kubelet_cri::socket_path(&opts.endpoint).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(
        sock.exists(),
        "containerd's socket {} does not exist: run `scripts/node-setup.sh` first (or pass --containerd-endpoint)",
        sock.display()
    );
    let cri = RemoteRuntime::new(&opts.endpoint, Duration::from_secs(10))?;
    let dir = tempfile::Builder::new().prefix("rkubelet-bench-ctr-").tempdir()?;
    let server = Arc::new(TestApiServer::start(Options { watch_history: 100_000, ..Default::default() }).await?);
    let kubeconfig = dir.path().join("kubeconfig");
    server.kubeconfig(&kubeconfig)?;
    let mut obs = PodObserver::start(server.clone());
    // `cri call` lines (debug, kubelet_cri) carry each call's duration; everything else stays at info.
    let mut node = BinNode::start(&NodeSpec {
        binary: &opts.binary,
        endpoint: opts.endpoint.clone(),
        kubeconfig: Some(kubeconfig),
        // Past upstream's default of 110 pods, which admission enforces (OutOfpods).
        extra_config: "maxPods: 5000\n".into(),
        log_filter: Some("info,kubelet_cri=debug,h2=info,tonic=info,tower=info,hyper=info".into()),
        node_name: None,
    })?;
    wait_node_ready(&server, &mut node, Duration::from_secs(60)).await?;
    tokio::time::sleep(opts.startup_wait).await;
    let idle_rss = node.rss()?;
    let idle_millicores = node.millicores_over(opts.steady).await?;
    eprintln!("containerd: idle RSS {:.1} MiB, {idle_millicores:.2} millicores", idle_rss as f64 / 1048576.0);

    create_volume_sources(&server)?;
    let mut api_seq = vec![];
    let mut static_seq = vec![];
    let mut volume_seq = vec![];
    for i in 0..opts.sequential {
        let name = format!("lat-api-{i}");
        let a =
            api_sequential(&server, &mut obs, &node, name.clone(), pod_object(&name, IMAGE, &["sh", "-c", SHELL], 30))
                .await?;
        let name = format!("lat-vol-{i}");
        let v = api_sequential(&server, &mut obs, &node, name.clone(), pod_with_volumes(&name)).await?;
        let s = static_sequential(&mut node, &cri, i).await?;
        eprintln!("containerd: start {i}: api {a:?}, with volumes {v:?}, static {s:?}");
        api_seq.push(a);
        volume_seq.push(v);
        static_seq.push(s);
    }
    let static_batch = static_batch(&mut node, &cri, opts.batch).await?;
    let (names, mut api_batch) = api_batch_start(&server, &mut obs, opts.batch).await?;
    tokio::time::sleep(opts.settle).await;
    let steady_millicores = node.millicores_over(opts.steady).await?;
    let steady_rss = node.rss()?;
    let api_endpoints = crate::apiscrape::measure(node.pid(), crate::binnode::SECURE_PORT, opts.scrapes).await?;
    for e in &api_endpoints {
        eprintln!(
            "containerd: {} with {} pods: p50 {:?}, p90 {:?}, CPU {:?} per request, {} bytes",
            e.path, opts.batch, e.latency.p50, e.latency.p90, e.cpu_per_request, e.bytes
        );
    }
    api_batch.all_gone = api_batch_delete(&server, &mut obs, &names).await?;
    node.stop().await;
    Ok(ContainerdResults {
        idle_rss,
        idle_millicores,
        steady_rss,
        steady_millicores,
        steady_pods: opts.batch,
        static_pods: PathResults { sequential: static_seq, batch: static_batch },
        api_pods: PathResults { sequential: api_seq, batch: api_batch },
        volume_pods: volume_seq,
        api_endpoints,
    })
}
