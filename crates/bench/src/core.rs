//! The scale scenarios in this process: the real core (PodConfig updates → sync loop → pod workers → runtime
//! manager, with the PLEG and housekeeping) over `FakeRuntime`. The PLEG relist cost is measured over the real CRI
//! client: the fake is served on a unix socket and a separate thread with its own runtime relists through
//! `RemoteRuntime`, so the figure is rkubelet's side of a relist (requests, decoding, grouping, diffing) on that
//! thread's CPU clock, without the fake's serving cost.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet::fake_node::FakeNode;
use kubelet_config::podconfig::SourcesReady;
use kubelet_cri::grpc::ServedFake;
use kubelet_cri::{FakeRuntime, RemoteRuntime};
use kubelet_runtime::pleg::{RELIST_PERIOD, RELIST_THRESHOLD};
use kubelet_runtime::{GenericPleg, PlegHealth, PodCache, RuntimeManager, RuntimeManagerConfig};
use kubelet_types::{Operation, PodSource, PodUpdate, SystemClock};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::procstat::{cpu_time, rss, thread_cpu_time};

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
}

/// Everything measured.
#[derive(Debug, Clone)]
pub struct Results {
    /// RSS of this harness before any pod (for reference only: the binary's figures are the ones that count).
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
    let node = FakeNode::start(fake.clone(), Arc::new(SystemClock), dir.path(), SourcesReady::new([]));
    let (status, upd_tx) = (node.status.clone(), node.updates.clone());
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

    let relist_cpu = relist_cost(fake.clone(), dir.path()).await?;

    let steady_millicores = match steady {
        Some(window) => {
            let c = cpu_time();
            tokio::time::sleep(window).await;
            Some((cpu_time() - c).as_secs_f64() * 1000.0 / window.as_secs_f64())
        }
        None => None,
    };
    node.stop().await;
    Ok(ScaleResult { pods: n, converge, converge_cpu, relist_cpu, steady_millicores })
}

/// CPU of one relist with no change (median of 20, after one that fills the PLEG's state), on the CPU clock of a
/// thread that does nothing else, through the real CRI client to `fake` served on a socket under `dir`.
async fn relist_cost(fake: Arc<FakeRuntime>, dir: &std::path::Path) -> anyhow::Result<Duration> {
    let sock = dir.join("cri.sock");
    let served = ServedFake::start(fake, &sock)?;
    let endpoint = format!("unix://{}", sock.display());
    let dir = dir.to_path_buf();
    let measured = tokio::task::spawn_blocking(move || -> anyhow::Result<Duration> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async move {
            let remote = Arc::new(RemoteRuntime::new(&endpoint, Duration::from_secs(10))?);
            let cfg = RuntimeManagerConfig { root_dir: dir.join("relist-root"), ..Default::default() };
            let manager = Arc::new(RuntimeManager::new(remote.clone(), remote, cfg, Arc::new(SystemClock)));
            let (tx, _rx) = mpsc::channel(100_000);
            let mut pleg = GenericPleg::new(
                manager,
                Arc::new(PodCache::default()),
                tx,
                Arc::new(PlegHealth::new(RELIST_THRESHOLD)),
                RELIST_PERIOD,
            );
            pleg.relist().await?;
            let mut samples = vec![];
            for _ in 0..20 {
                let c = thread_cpu_time();
                pleg.relist().await?;
                samples.push(thread_cpu_time() - c);
            }
            samples.sort();
            Ok(samples[samples.len() / 2])
        })
    })
    .await?;
    served.stop().await;
    measured
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
