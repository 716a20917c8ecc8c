//! rkubelet's benchmark with budgets. Three groups of scenarios:
//! - `core`: the core in-process on the in-memory CRI runtime (converge N pods, PLEG relist cost, steady CPU);
//! - `fake`: the real binary on the in-memory runtime served over CRI gRPC, with the test apiserver (idle and
//!   per-pod memory, converge N pods through the apiserver, steady CPU, a churn of creations and deletions);
//! - `containerd`: the real binary on the real containerd with the test apiserver (pod start latency one at a
//!   time and in a batch, what rkubelet adds over containerd's calls, teardown, idle and steady CPU and RSS, and the
//!   kubelet API's response times and CPU per request with the batch running).
//!
//! - `fuzz`: every parser of outside input under `kubelet-fuzz`'s targets, round-robin for `--fuzz-seconds`
//!   (no panic, no hang, bounded allocation); any failure makes the program exit non-zero.
//!
//! - `node`: the whole node's cost, rkubelet on the real containerd with the real control plane: the CPU of
//!   rkubelet, containerd, the shims and the machine at steady pods against the same with no kubelet, CRI calls
//!   per minute by method, the relist time, a batch and a teardown against the raw CRI floor, SIGTERM to exit and
//!   the sandboxes left.
//!
//! It writes a JSON result and a Markdown report, and with `--check` exits non-zero naming every budget missed.
//! `--smoke` is the small version CI runs so the program cannot rot.

mod apiscrape;
mod apiwatch;
mod binnode;
mod containerd;
mod core;
mod fakescale;
mod fuzz;
mod procstat;
mod report;
mod report_node;
mod wholenode;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;

/// Counts each fuzz case's allocation (`fuzz`); elsewhere it only forwards to the system allocator.
#[global_allocator]
static ALLOC: kubelet_fuzz::CountingAlloc = kubelet_fuzz::CountingAlloc;

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "rkubelet-bench")]
struct Args {
    /// Small, fast run (CI): 110 pods, short windows, a few pod starts.
    #[arg(long)]
    smoke: bool,
    /// Scenario groups to run.
    #[arg(long, value_delimiter = ',', default_value = "core,fake,containerd,node,fuzz")]
    scenarios: Vec<String>,
    /// Pod counts to converge.
    #[arg(long, value_delimiter = ',', default_value = "110,1000,5000")]
    pods: Vec<usize>,
    /// Seconds of every steady-state (and idle) CPU window.
    #[arg(long, default_value_t = 30)]
    steady_seconds: u64,
    /// Seconds of the churn (0: none).
    #[arg(long, default_value_t = 60)]
    churn_seconds: u64,
    /// Pods created, and deleted, per second during the churn.
    #[arg(long, default_value_t = 20)]
    churn_rate: u32,
    /// Pods started one at a time on containerd, per path.
    #[arg(long, default_value_t = 10)]
    sequential: usize,
    /// Pods started at once on containerd, per path.
    #[arg(long, default_value_t = 30)]
    batch: usize,
    /// Requests per kubelet API endpoint (`/stats/summary`, `/metrics/resource`, `/metrics`) with the batch running.
    #[arg(long, default_value_t = 200)]
    scrapes: usize,
    /// Pods of the whole node's steady window and big teardown (`node`; its batch is `--batch`).
    #[arg(long, default_value_t = 100)]
    node_pods: usize,
    /// Seconds of the whole node's windows (`node`).
    #[arg(long, default_value_t = 60)]
    node_seconds: u64,
    /// Seconds of the fuzz targets, all of them round-robin (`fuzz`).
    #[arg(long, default_value_t = 600)]
    fuzz_seconds: u64,
    /// A JSON result of an earlier run (e.g. with an older binary) whose whole-node figures the report compares
    /// with this run's, and what it ran (`--node-before FILE=LABEL`).
    #[arg(long)]
    node_before: Option<String>,
    /// The rkubelet binary (default: beside this program).
    #[arg(long)]
    rkubelet: Option<PathBuf>,
    /// Runs the whole-node scenario with the upstream kubelet too, side by side in the same run: its binary, or
    /// `auto` for `$KUBELET`, else `../shared/k8s/bin/kubelet` (unpacked).
    #[arg(long)]
    upstream_kubelet: Option<String>,
    /// Runs the whole-node scenario once more with rkubelet relisting every second (`featureGates: {EventedPLEG:
    /// false}`), to compare with its container events in the same run.
    #[arg(long)]
    rkubelet_relist: bool,
    /// Containers killed one after another at the whole node's steady pods, each timed to its exit on the apiserver.
    #[arg(long, default_value_t = 20)]
    node_exits: usize,
    /// containerd's CRI endpoint (the one scripts/node-setup.sh starts).
    #[arg(long, default_value = "unix:///var/lib/rkubelet-dev/containerd.sock")]
    containerd_endpoint: String,
    /// Where the JSON result goes.
    #[arg(long, default_value = "target/benchmarks.json")]
    json: PathBuf,
    /// Where the Markdown report goes (e.g. docs/benchmarks.md).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Exit non-zero when a budget is missed.
    #[arg(long)]
    check: bool,
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    let mut settle = Duration::from_secs(5);
    let mut startup_wait = Duration::from_secs(15);
    if args.smoke {
        args.pods = vec![110];
        args.steady_seconds = 3;
        args.churn_seconds = 4;
        args.sequential = 2;
        args.batch = 5;
        args.scrapes = 5;
        args.node_pods = 8;
        args.node_seconds = 3;
        args.node_exits = 2;
        args.fuzz_seconds = 5;
        settle = Duration::from_secs(1);
        startup_wait = Duration::from_secs(1);
    }
    let binary = args.rkubelet.clone().unwrap_or_else(binnode::default_binary);
    let run = |s: &str| args.scenarios.iter().any(|x| x == s);
    let steady = Duration::from_secs(args.steady_seconds);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let core = if run("core") { Some(rt.block_on(core::run_all(&args.pods, args.steady_seconds))?) } else { None };
    let fake = if run("fake") {
        let opts = fakescale::FakeOpts {
            binary: binary.clone(),
            counts: args.pods.clone(),
            steady,
            settle,
            startup_wait,
            churn: Duration::from_secs(args.churn_seconds),
            churn_rate: args.churn_rate,
        };
        Some(rt.block_on(fakescale::run(&opts))?)
    } else {
        None
    };
    let containerd = if run("containerd") {
        let opts = containerd::ContainerdOpts {
            binary: binary.clone(),
            endpoint: args.containerd_endpoint.clone(),
            sequential: args.sequential,
            batch: args.batch,
            steady,
            settle,
            startup_wait,
            scrapes: args.scrapes,
        };
        Some(rt.block_on(containerd::run(&opts))?)
    } else {
        None
    };
    // The whole-node scenario with one kubelet binary.
    let node_opts = |binary: PathBuf, extra_config: &str| wholenode::WholeNodeOpts {
        binary,
        endpoint: args.containerd_endpoint.clone(),
        batch: args.batch,
        pods: args.node_pods,
        window: Duration::from_secs(args.node_seconds),
        settle,
        exits: args.node_exits,
        extra_config: extra_config.to_string(),
    };
    let node = if run("node") { Some(rt.block_on(wholenode::run(&node_opts(binary.clone(), "")))?) } else { None };
    let node_upstream = match (&args.upstream_kubelet, run("node")) {
        (Some(which), true) => {
            let binary = match which.as_str() {
                "auto" => test_cluster::unpacked_binary("KUBELET", "k8s/bin/kubelet")
                    .context("the upstream kubelet: neither $KUBELET nor ../shared/k8s/bin/kubelet.xz")?,
                path => PathBuf::from(path),
            };
            // cAdvisor in the upstream kubelet finds containerd at its default socket, as on a real node (it asks it
            // for each container's labels and image): point it at the benchmark's containerd for this run.
            let _socket = wholenode::DefaultSocket::link(&args.containerd_endpoint);
            Some(rt.block_on(wholenode::run(&node_opts(binary, "")))?)
        }
        _ => None,
    };
    let node_relist = if args.rkubelet_relist && run("node") {
        let gate = "featureGates:\n  EventedPLEG: false\n";
        Some(rt.block_on(wholenode::run(&node_opts(binary.clone(), gate)))?)
    } else {
        None
    };
    let fuzz = run("fuzz").then(|| fuzz::run(Duration::from_secs(args.fuzz_seconds)));
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let node_before = match &args.node_before {
        Some(spec) => {
            let (file, label) = spec.split_once('=').unwrap_or((spec.as_str(), "an earlier binary"));
            let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file)?)?;
            let before = json.get("whole_node").cloned().unwrap_or(serde_json::Value::Null);
            anyhow::ensure!(!before.is_null(), "{file} has no whole_node figures");
            Some((before, label.to_string()))
        }
        None => None,
    };
    let report = report::Report {
        core,
        fake,
        containerd,
        node,
        fuzz,
        node_before,
        node_upstream,
        node_relist,
        smoke: args.smoke,
        command,
    };
    if let Some(dir) = args.json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&report.json())?)?;
    let md = report.markdown();
    if let Some(p) = &args.markdown {
        std::fs::write(p, &md)?;
    }
    println!("{md}");
    let fuzz_failures = report.fuzz.as_ref().map(fuzz::FuzzResults::failures).unwrap_or_default();
    for f in &fuzz_failures {
        eprintln!("{f}");
    }
    let missed = report.missed_budgets();
    if args.check && !missed.is_empty() {
        for m in &missed {
            eprintln!("budget missed: {m}");
        }
        std::process::exit(1);
    }
    if !fuzz_failures.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
