//! Scale through the real binary with no containerd: the in-memory runtime served over the real CRI protocol on a
//! unix socket, and the test apiserver, both in this process; rkubelet is the child process whose CPU and RSS are
//! read. Pods are created through the apiserver (bound to the node) and seen Running, then gone, on its watch.
//! The client rate limits are raised (`kubeAPIQPS: 1000`, `kubeAPIBurst: 2000`, `eventRecordQPS: 0` = unlimited) so
//! the figures are rkubelet's work, not the default 50 requests (and 50 events) per second every kubelet is held to:
//! with them, the events of 5 000 pod starts alone would take five minutes to post.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kubelet_cri::FakeRuntime;
use kubelet_cri::grpc::ServedFake;
use test_apiserver::{Options, TestApiServer};
use tokio::time::Instant;

use crate::apiwatch::{PodObserver, last_of, pod_object};
use crate::binnode::{BinNode, NODE, NodeSpec};
use crate::procstat::quantile;

/// What to run.
#[derive(Debug, Clone)]
pub struct FakeOpts {
    /// The rkubelet binary.
    pub binary: PathBuf,
    /// Pod counts to converge.
    pub counts: Vec<usize>,
    /// Window of every steady-state CPU measurement.
    pub steady: Duration,
    /// Wait after the node is Ready before the idle figures (rkubelet drops its start-up code 10 s after its
    /// sources are ready).
    pub startup_wait: Duration,
    /// Wait before RSS is read after a change (the node's loops settle).
    pub settle: Duration,
    /// Length of the churn (none if zero).
    pub churn: Duration,
    /// Pods created (and deleted) per second during the churn.
    pub churn_rate: u32,
}

/// Figures at one pod count.
#[derive(Debug, Clone)]
pub struct BinScale {
    /// Pods.
    pub pods: usize,
    /// First create → last pod seen Running.
    pub converge: Duration,
    /// rkubelet's CPU over the convergence.
    pub converge_cpu: Duration,
    /// Millicores in steady state with the pods running.
    pub steady_millicores: f64,
    /// RSS with the pods running.
    pub rss: u64,
    /// First delete → last pod gone.
    pub teardown: Duration,
}

/// Percentiles of a set of latencies.
#[derive(Debug, Clone, Default)]
pub struct Percentiles {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: Duration,
    /// 90th percentile.
    pub p90: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Maximum.
    pub max: Duration,
}

impl Percentiles {
    /// Of `v` (any order).
    pub fn of(mut v: Vec<Duration>) -> Self {
        v.sort();
        Self {
            n: v.len(),
            p50: quantile(&v, 0.5),
            p90: quantile(&v, 0.9),
            p99: quantile(&v, 0.99),
            max: v.last().copied().unwrap_or_default(),
        }
    }
}

/// The churn figures.
#[derive(Debug, Clone)]
pub struct Churn {
    /// Length.
    pub seconds: u64,
    /// Creations (and deletions) per second.
    pub rate: u32,
    /// Create → Running.
    pub start: Percentiles,
    /// Delete → gone.
    pub delete: Percentiles,
    /// rkubelet's millicores during the churn.
    pub millicores: f64,
    /// RSS before (after a warm-up churn, drained and settled).
    pub rss_before: u64,
    /// Highest RSS seen during the churn.
    pub rss_peak: u64,
    /// RSS after (drained and settled).
    pub rss_after: u64,
}

/// Everything measured on the binary.
#[derive(Debug, Clone)]
pub struct FakeResults {
    /// RSS of the registered node with no pod.
    pub idle_rss: u64,
    /// Millicores of the registered node with no pod.
    pub idle_millicores: f64,
    /// Per pod count.
    pub scale: Vec<BinScale>,
    /// The churn, if run.
    pub churn: Option<Churn>,
}

struct Cluster {
    server: Arc<TestApiServer>,
    observer: PodObserver,
    node: BinNode,
}

impl Cluster {
    fn create(&self, name: &str) -> anyhow::Result<()> {
        self.server
            .create("v1", "pods", Some("default"), pod_object(name, "busybox:1", &[], 30))
            .with_context(|| format!("create pod default/{name}"))?;
        Ok(())
    }

    fn delete(&self, name: &str) -> anyhow::Result<()> {
        self.server.delete("v1", "pods", Some("default"), name, None).with_context(|| format!("delete pod {name}"))?;
        Ok(())
    }
}

/// Waits for the node object to be Ready.
pub async fn wait_node_ready(server: &TestApiServer, node: &mut BinNode, timeout: Duration) -> anyhow::Result<()> {
    let ready = |n: Option<&serde_json::Value>| {
        n.and_then(|n| n["status"]["conditions"].as_array().cloned())
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
    };
    let r = server.wait_for("v1", "nodes", None, NODE, timeout, ready).await;
    node.check_alive()?;
    r.context("node Ready")?;
    Ok(())
}

/// Runs the scenarios.
pub async fn run(opts: &FakeOpts) -> anyhow::Result<FakeResults> {
    let dir = tempfile::Builder::new().prefix("rkubelet-bench-fake-").tempdir()?;
    let sock = dir.path().join("cri.sock");
    let fake = Arc::new(FakeRuntime::new(&["busybox:1"]));
    fake.set_record_calls(false);
    let served = ServedFake::start(fake, &sock)?;
    let server = Arc::new(TestApiServer::start(Options { watch_history: 100_000, ..Default::default() }).await?);
    let kubeconfig = dir.path().join("kubeconfig");
    server.kubeconfig(&kubeconfig)?;
    let observer = PodObserver::start(server.clone());
    let spec = NodeSpec {
        binary: &opts.binary,
        endpoint: format!("unix://{}", sock.display()),
        kubeconfig: Some(kubeconfig),
        // Past upstream's default of 110 pods, which admission enforces (OutOfpods).
        extra_config: "kubeAPIQPS: 1000\nkubeAPIBurst: 2000\neventRecordQPS: 0\nmaxPods: 5000\n".into(),
        log_filter: None,
        node_name: None,
    };
    let mut node = BinNode::start(&spec)?;
    wait_node_ready(&server, &mut node, Duration::from_secs(60)).await?;
    let mut c = Cluster { server, observer, node };
    tokio::time::sleep(opts.startup_wait).await;
    let idle_rss = c.node.rss()?;
    let idle_millicores = c.node.millicores_over(opts.steady).await?;
    eprintln!("fake runtime, binary: idle RSS {:.1} MiB, {idle_millicores:.2} millicores", mib(idle_rss));

    let mut scale = vec![];
    for &n in &opts.counts {
        let s = converge(&mut c, n, opts).await?;
        eprintln!(
            "fake runtime, binary: {n} pods converged in {:?} ({:?} CPU), steady {:.2} millicores, RSS {:.1} MiB, teardown {:?}",
            s.converge,
            s.converge_cpu,
            s.steady_millicores,
            mib(s.rss),
            s.teardown
        );
        scale.push(s);
    }
    // The churn on a node of its own: after thousands of pods the allocator's high-water mark would hide growth.
    let churn = if opts.churn.is_zero() {
        c.node.stop().await;
        None
    } else {
        let old = std::mem::replace(&mut c.node, BinNode::start(&spec)?);
        old.stop().await;
        wait_node_ready(&c.server, &mut c.node, Duration::from_secs(60)).await?;
        tokio::time::sleep(opts.startup_wait).await;
        let r = churn(&mut c, opts).await?;
        c.node.stop().await;
        Some(r)
    };
    served.stop().await;
    Ok(FakeResults { idle_rss, idle_millicores, scale, churn })
}

fn mib(b: u64) -> f64 {
    b as f64 / 1024.0 / 1024.0
}

async fn converge(c: &mut Cluster, n: usize, opts: &FakeOpts) -> anyhow::Result<BinScale> {
    let names: Vec<String> = (0..n).map(|i| format!("scale-{n}-{i}")).collect();
    let (base_running, base_gone) = c.observer.counts();
    let cpu0 = c.node.cpu()?;
    let t0 = Instant::now();
    for name in &names {
        c.create(name)?;
    }
    let timeout = Duration::from_secs(60 + n as u64 / 10);
    // The count first: checking every name on every change would make the wait itself quadratic.
    let last = c
        .observer
        .wait(&format!("{n} pods Running"), timeout, |t| {
            (t.running.len() >= base_running + n).then(|| last_of(&t.running, &names)).flatten()
        })
        .await;
    let last = match last {
        Ok(l) => l,
        Err(e) => {
            c.node.check_alive()?;
            return Err(e);
        }
    };
    let converge = last - t0;
    let converge_cpu = c.node.cpu()? - cpu0;
    tokio::time::sleep(opts.settle).await;
    let before = c.server.requests().len();
    let steady_millicores = c.node.millicores_over(opts.steady).await?;
    let rss = c.node.rss()?;
    let reqs = c.server.requests();
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &reqs[before.min(reqs.len())..] {
        let path = r.uri.split('?').next().unwrap_or("");
        let kind = path.split('/').take(5).collect::<Vec<_>>().join("/");
        *by.entry(format!("{} {kind}", r.method)).or_default() += 1;
    }
    eprintln!("fake runtime, binary: apiserver requests in the steady window at {n} pods: {by:?}");
    let t1 = Instant::now();
    for name in &names {
        c.delete(name)?;
    }
    let last_gone = c
        .observer
        .wait(&format!("{n} pods gone"), timeout, |t| {
            (t.gone.len() >= base_gone + n).then(|| last_of(&t.gone, &names)).flatten()
        })
        .await?;
    Ok(BinScale { pods: n, converge, converge_cpu, steady_millicores, rss, teardown: last_gone - t1 })
}

/// Creates `rate` pods per second for `length`, each deleted `lifetime` after its creation; then deletes the rest
/// and waits until every pod is gone. Returns the latencies and the highest RSS seen.
async fn churn_round(
    c: &mut Cluster,
    tag: &str,
    length: Duration,
    rate: u32,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, u64)> {
    let lifetime = Duration::from_secs(3);
    let period = Duration::from_secs(1) / rate;
    let total = (length.as_secs_f64() * f64::from(rate)) as usize;
    let mut created: Vec<(String, Instant)> = Vec::with_capacity(total);
    let mut deleted: Vec<(String, Instant)> = Vec::with_capacity(total);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut peak = 0;
    for i in 0..total {
        let now = tick.tick().await;
        let name = format!("churn-{tag}-{i}");
        c.create(&name)?;
        created.push((name, Instant::now()));
        // Delete the pod created `lifetime` ago (one per tick once the first ones are old enough).
        let d = deleted.len();
        if d < created.len() && now.duration_since(created[d].1) >= lifetime {
            c.delete(&created[d].0)?;
            deleted.push((created[d].0.clone(), Instant::now()));
        }
        if i % rate as usize == 0 {
            peak = peak.max(c.node.rss()?);
        }
    }
    // Every pod runs before the rest are deleted (a pod deleted before it started is not a start to time).
    let names: Vec<String> = created.iter().map(|(n, _)| n.clone()).collect();
    c.observer
        .wait(&format!("the {tag} churn's pods Running"), Duration::from_secs(120), |t| {
            names.iter().all(|n| t.running.contains_key(n)).then_some(())
        })
        .await?;
    for (name, _) in &created[deleted.len()..] {
        c.delete(name)?;
        deleted.push((name.clone(), Instant::now()));
    }
    c.observer
        .wait(&format!("the {tag} churn's pods gone"), Duration::from_secs(120), |t| {
            names.iter().all(|n| t.gone.contains_key(n)).then_some(())
        })
        .await?;
    let mut start = vec![];
    for (name, at) in &created {
        let r = c.observer.running_at(name).with_context(|| format!("pod {name} was never seen Running"))?;
        start.push(r - *at);
    }
    let gone = deleted.iter().map(|(n, at)| c.observer.gone_at(n).map(|g| g - *at).unwrap_or_default()).collect();
    Ok((start, gone, peak))
}

async fn churn(c: &mut Cluster, opts: &FakeOpts) -> anyhow::Result<Churn> {
    // A warm-up round first, so "before" is the level of a node that has already run this kind of load.
    let warm = (opts.churn / 6).max(Duration::from_secs(2));
    churn_round(c, "warmup", warm, opts.churn_rate).await?;
    tokio::time::sleep(opts.settle).await;
    let rss_before = c.node.rss()?;
    let cpu0 = c.node.cpu()?;
    let t0 = Instant::now();
    let (start, delete, peak) = churn_round(c, "main", opts.churn, opts.churn_rate).await?;
    let millicores = (c.node.cpu()? - cpu0).as_secs_f64() * 1000.0 / t0.elapsed().as_secs_f64();
    tokio::time::sleep(opts.settle).await;
    let rss_after = c.node.rss()?;
    let ch = Churn {
        seconds: opts.churn.as_secs(),
        rate: opts.churn_rate,
        start: Percentiles::of(start),
        delete: Percentiles::of(delete),
        millicores,
        rss_before,
        rss_peak: peak.max(rss_after),
        rss_after,
    };
    eprintln!(
        "fake runtime, binary: churn {} s at {}/s: start p50 {:?} p99 {:?}, delete p50 {:?} p99 {:?}, RSS {:.1} → {:.1} MiB (peak {:.1})",
        ch.seconds,
        ch.rate,
        ch.start.p50,
        ch.start.p99,
        ch.delete.p50,
        ch.delete.p99,
        mib(rss_before),
        mib(rss_after),
        mib(ch.rss_peak)
    );
    Ok(ch)
}
