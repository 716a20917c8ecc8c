//! The scale scenarios on the in-memory runtime: the real core (PodConfig updates → sync loop → pod workers →
//! runtime manager, with the PLEG and housekeeping) over `FakeRuntime`, in this process. Process CPU comes from
//! `getrusage`, memory from `/proc/self/status`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::fake_node::FakeNode;
use kubelet_config::podconfig::SourcesReady;
use kubelet_cri::FakeRuntime;
use kubelet_runtime::pleg::{RELIST_PERIOD, RELIST_THRESHOLD};
use kubelet_runtime::{GenericPleg, PlegHealth, PodCache};
use kubelet_types::{Operation, PodSource, PodUpdate, SystemClock};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Process CPU time (user + system).
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Resident set size in bytes.
pub fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Total memory of the machine in bytes.
pub fn total_memory() -> u64 {
    kubelet::nodestatus::machine::memory_capacity()
}

/// Figures of one pod count.
#[derive(Debug, Clone)]
pub struct ScaleResult {
    /// Pods.
    pub pods: usize,
    /// Pods in the source → every pod's status Running.
    pub converge: Duration,
    /// Process CPU spent converging.
    pub converge_cpu: Duration,
    /// CPU of one PLEG relist (median of 20).
    pub relist_cpu: Duration,
    /// Steady-state CPU in millicores (measured at the smallest count only).
    pub steady_millicores: Option<f64>,
    /// RSS with the pods running.
    pub rss: u64,
}

/// Everything measured.
#[derive(Debug, Clone)]
pub struct Results {
    /// RSS before any pod.
    pub idle_rss: u64,
    /// Per pod count.
    pub scale: Vec<ScaleResult>,
}

fn pod(i: usize) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("bench-{i}")),
            namespace: Some("default".into()),
            uid: Some(format!("00000000-0000-0000-0000-{i:012}")),
            annotations: Some([("kubernetes.io/config.source".to_string(), "file".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container { name: "app".into(), image: Some("busybox:1".into()), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    })
}

async fn scale(n: usize, steady: Option<Duration>) -> anyhow::Result<ScaleResult> {
    let fake = Arc::new(FakeRuntime::new(&["busybox:1"]));
    fake.set_record_calls(false);
    let dir = tempfile::tempdir()?;
    let node = FakeNode::start(fake, Arc::new(SystemClock), dir.path(), SourcesReady::new([]));
    let (status, upd_tx, runtime) = (node.status.clone(), node.updates.clone(), node.runtime.clone());
    let pods: Vec<Arc<Pod>> = (0..n).map(pod).collect();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    upd_tx.send(PodUpdate { op: Operation::Add, source: PodSource::File, pods }).await?;
    // Sampled every 5 ms: counting on every status change would make the harness itself quadratic.
    loop {
        let running = status.snapshot().values().filter(|s| s.phase.as_deref() == Some("Running")).count();
        if running == n {
            break;
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(300),
            "{n} pods did not converge within 300 s ({running} running)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let converge = t0.elapsed();
    let converge_cpu = cpu_time() - cpu0;

    // Relist cost: a separate PLEG over the same runtime, relisting with no change.
    let (tx2, _rx2) = mpsc::channel(10_000);
    let mut probe = GenericPleg::new(
        runtime.clone(),
        Arc::new(PodCache::default()),
        tx2,
        Arc::new(PlegHealth::new(RELIST_THRESHOLD)),
        RELIST_PERIOD,
    );
    probe.relist().await?;
    let mut samples = vec![];
    for _ in 0..20 {
        let c = cpu_time();
        probe.relist().await?;
        samples.push(cpu_time() - c);
    }
    samples.sort();
    let relist_cpu = samples[samples.len() / 2];

    let steady_millicores = match steady {
        Some(window) => {
            let c = cpu_time();
            tokio::time::sleep(window).await;
            Some((cpu_time() - c).as_secs_f64() * 1000.0 / window.as_secs_f64())
        }
        None => None,
    };
    let rss_now = rss();
    node.stop().await;
    Ok(ScaleResult { pods: n, converge, converge_cpu, relist_cpu, steady_millicores, rss: rss_now })
}

/// Runs every scenario.
pub async fn run_all(counts: &[usize], steady_seconds: u64) -> anyhow::Result<Results> {
    let idle_rss = rss();
    let mut out = vec![];
    let smallest = counts.iter().copied().min().unwrap_or(110);
    for &n in counts {
        let steady = (n == smallest).then(|| Duration::from_secs(steady_seconds));
        out.push(scale(n, steady).await?);
    }
    Ok(Results { idle_rss, scale: out })
}
