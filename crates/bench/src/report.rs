//! The result as JSON and as Markdown, and the budgets: every figure the issue names beside its budget, and the
//! ones missed named for `--check`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::containerd::{Batch, ContainerdResults, PathResults, StartRun, median_by};
use crate::core::Results as CoreResults;
use crate::fakescale::{FakeResults, Percentiles};

const MIB: f64 = 1024.0 * 1024.0;

/// Allowed RSS difference after the churn minute: allocator noise (pages glibc keeps in its arenas), well under
/// what a per-pod leak of 1 200 pods would leave.
pub const CHURN_RSS_TOLERANCE: u64 = 1024 * 1024;

/// Everything measured, with its budgets.
pub struct Report {
    /// The in-process core on the fake runtime.
    pub core: Option<CoreResults>,
    /// The binary on the served fake runtime with the test apiserver.
    pub fake: Option<FakeResults>,
    /// The binary on containerd with the test apiserver.
    pub containerd: Option<ContainerdResults>,
    /// The whole node on containerd with the real control plane.
    pub node: Option<crate::wholenode::WholeNodeResults>,
    /// The fuzz targets.
    pub fuzz: Option<crate::fuzz::FuzzResults>,
    /// The whole node's figures of an earlier run (its `whole_node` JSON) and what ran then, to compare with.
    pub node_before: Option<(Value, String)>,
    /// The same whole-node scenario with the upstream kubelet, in the same run.
    pub node_upstream: Option<crate::wholenode::WholeNodeResults>,
    /// The same whole-node scenario with rkubelet relisting every second instead of on container events.
    pub node_relist: Option<crate::wholenode::WholeNodeResults>,
    /// A smoke run (small counts; budgets are reported but do not apply).
    pub smoke: bool,
    /// The command line.
    pub command: String,
}

/// One figure beside its budget.
pub struct Budget {
    /// What is measured.
    pub figure: String,
    /// The measured value, formatted.
    pub value: String,
    /// The budget, formatted.
    pub budget: &'static str,
    /// Whether it is met.
    pub met: bool,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(b: u64) -> f64 {
    b as f64 / MIB
}

fn pct_json(p: &Percentiles) -> Value {
    json!({"n": p.n, "p50_ms": ms(p.p50), "p90_ms": ms(p.p90), "p99_ms": ms(p.p99), "max_ms": ms(p.max)})
}

fn pct_md(p: &Percentiles) -> String {
    format!("{:.0} / {:.0} / {:.0} / {:.0} ms", ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max))
}

fn pct_md_fine(p: &Percentiles) -> String {
    format!("{:.1} / {:.1} / {:.1} / {:.1} ms", ms(p.p50), ms(p.p90), ms(p.p99), ms(p.max))
}

fn batch_json(b: &Batch) -> Value {
    json!({"start": pct_json(&b.start), "all_running_ms": ms(b.all_running), "all_gone_ms": ms(b.all_gone)})
}

fn runs_json(runs: &[StartRun]) -> Value {
    let med = |f: fn(&StartRun) -> Duration| ms(median_by(runs, f));
    json!({
        "sequential": runs.iter().map(|r| json!({
            "e2e_ms": ms(r.e2e), "cri_ms": ms(r.cri), "rkubelet_ms": ms(r.share()),
            "teardown_ms": ms(r.teardown),
        })).collect::<Vec<_>>(),
        "median_e2e_ms": med(|r| r.e2e),
        "median_cri_ms": med(|r| r.cri),
        "median_rkubelet_ms": med(StartRun::share),
        "median_teardown_ms": med(|r| r.teardown),
    })
}

fn path_json(p: &PathResults) -> Value {
    let mut v = runs_json(&p.sequential);
    v["batch"] = batch_json(&p.batch);
    v
}

impl Report {
    /// Every figure with a budget, in the order.
    pub fn budgets(&self) -> Vec<Budget> {
        let mut b = vec![];
        let mut add = |figure: String, value: String, budget: &'static str, met: bool| {
            b.push(Budget { figure, value, budget, met })
        };
        if let Some(f) = &self.fake {
            let v = mib(f.idle_rss);
            add("idle RSS (binary, fake runtime)".into(), format!("{v:.1} MiB"), "≤ 16 MiB", v <= 16.0);
        }
        if let Some(c) = &self.containerd {
            let v = mib(c.idle_rss);
            add("idle RSS (binary, containerd)".into(), format!("{v:.1} MiB"), "≤ 16 MiB", v <= 16.0);
        }
        if let Some(s) = self.fake.as_ref().and_then(|f| f.scale.iter().find(|s| s.pods == 110)) {
            let v = mib(s.rss);
            add("RSS with 110 pods (binary, fake runtime)".into(), format!("{v:.1} MiB"), "≤ 24 MiB", v <= 24.0);
        }
        if let Some(s) = self.core.as_ref().and_then(|c| c.scale.iter().find(|s| s.pods == 1000)) {
            add(
                "converge 1000 pods, source → status (core, fake runtime)".into(),
                format!("{:.0} ms", ms(s.converge)),
                "≤ 1 s",
                s.converge <= Duration::from_secs(1),
            );
        }
        if let Some(s) = self.core.as_ref().and_then(|c| c.scale.iter().find(|s| s.pods == 110)) {
            add(
                "relist at 110 pods, CPU (over the CRI client)".into(),
                format!("{:.0} µs", s.relist_cpu.as_secs_f64() * 1e6),
                "≤ 1 ms",
                s.relist_cpu <= Duration::from_millis(1),
            );
        }
        if let Some(s) = self.fake.as_ref().and_then(|f| f.scale.iter().find(|s| s.pods == 110)) {
            add(
                "steady CPU at 110 pods (binary, fake runtime)".into(),
                format!("{:.2} millicores", s.steady_millicores),
                "≤ 3 millicores",
                s.steady_millicores <= 3.0,
            );
        }
        if let Some(c) = &self.containerd {
            for (what, p) in [("static manifest", &c.static_pods), ("apiserver create", &c.api_pods)] {
                let v = p.median_share();
                add(
                    format!("rkubelet's share of a pod start, median ({what}, containerd)"),
                    format!("{:.1} ms", ms(v)),
                    "≤ 20 ms",
                    v <= Duration::from_millis(20),
                );
            }
            for (what, p) in
                [("apiserver delete → object gone", &c.api_pods), ("manifest removed → sandbox down", &c.static_pods)]
            {
                let v = p.median_teardown();
                add(
                    format!("teardown of one pod exiting on SIGTERM, median ({what})"),
                    format!("{:.0} ms", ms(v)),
                    "≤ 500 ms",
                    v <= Duration::from_millis(500),
                );
            }
        }
        if let Some(c) = &self.containerd {
            for e in &c.api_endpoints {
                let (budget, limit): (&'static str, Duration) = match e.path {
                    "/stats/summary" => ("≤ 50 ms", Duration::from_millis(50)),
                    _ => ("≤ 10 ms", Duration::from_millis(10)),
                };
                add(
                    format!("`{}` response with {} pods, median (containerd)", e.path, c.steady_pods),
                    format!("{:.1} ms", ms(e.latency.p50)),
                    budget,
                    e.latency.p50 <= limit,
                );
            }
            if let Some(m) = c.api_endpoints.iter().find(|e| e.path == "/metrics") {
                add(
                    "CPU of one Prometheus scrape of `/metrics` (containerd)".into(),
                    format!("{:.2} ms", ms(m.cpu_per_request)),
                    "≤ 5 ms",
                    m.cpu_per_request <= Duration::from_millis(5),
                );
            }
        }
        if let Some(n) = &self.node {
            crate::report_node::budgets(n, &mut add);
        }
        if let Some(ch) = self.fake.as_ref().and_then(|f| f.churn.as_ref()) {
            let grown = ch.rss_after as i64 - ch.rss_before as i64;
            add(
                format!("RSS growth after the churn ({} s at {}/s)", ch.seconds, ch.rate),
                format!("{:+.2} MiB ({:.1} → {:.1})", grown as f64 / MIB, mib(ch.rss_before), mib(ch.rss_after)),
                "none (≤ +1 MiB allocator noise)",
                grown <= CHURN_RSS_TOLERANCE as i64,
            );
        }
        b
    }

    /// The budgets missed, each naming the figure, its value and its budget.
    pub fn missed_budgets(&self) -> Vec<String> {
        self.budgets()
            .into_iter()
            .filter(|b| !b.met)
            .map(|b| format!("{}: {} (budget {})", b.figure, b.value, b.budget))
            .collect()
    }

    /// JSON.
    pub fn json(&self) -> Value {
        let core = self.core.as_ref().map(|c| {
            json!({
                "harness_rss_bytes": c.idle_rss,
                "scale": c.scale.iter().map(|s| json!({
                    "pods": s.pods,
                    "converge_ms": ms(s.converge),
                    "converge_cpu_ms": ms(s.converge_cpu),
                    "relist_cpu_us": s.relist_cpu.as_secs_f64() * 1e6,
                    "steady_millicores": s.steady_millicores,
                })).collect::<Vec<_>>(),
            })
        });
        let fake = self.fake.as_ref().map(|f| {
            json!({
                "idle_rss_bytes": f.idle_rss,
                "idle_millicores": f.idle_millicores,
                "scale": f.scale.iter().map(|s| json!({
                    "pods": s.pods,
                    "converge_ms": ms(s.converge),
                    "converge_cpu_ms": ms(s.converge_cpu),
                    "steady_millicores": s.steady_millicores,
                    "rss_bytes": s.rss,
                    "bytes_per_pod": (s.rss as f64 - f.idle_rss as f64) / s.pods as f64,
                    "teardown_ms": ms(s.teardown),
                })).collect::<Vec<_>>(),
                "churn": f.churn.as_ref().map(|c| json!({
                    "seconds": c.seconds, "rate_per_second": c.rate,
                    "start": pct_json(&c.start), "delete": pct_json(&c.delete),
                    "millicores": c.millicores,
                    "rss_before_bytes": c.rss_before, "rss_peak_bytes": c.rss_peak, "rss_after_bytes": c.rss_after,
                })),
            })
        });
        let ctr = self.containerd.as_ref().map(|c| {
            json!({
                "idle_rss_bytes": c.idle_rss, "idle_millicores": c.idle_millicores,
                "steady_pods": c.steady_pods, "steady_rss_bytes": c.steady_rss, "steady_millicores": c.steady_millicores,
                "static": path_json(&c.static_pods), "api": path_json(&c.api_pods),
                "api_with_volumes": runs_json(&c.volume_pods),
                "kubelet_api": c.api_endpoints.iter().map(|e| json!({
                    "path": e.path, "latency": pct_json(&e.latency),
                    "cpu_per_request_ms": ms(e.cpu_per_request), "bytes": e.bytes,
                })).collect::<Vec<_>>(),
            })
        });
        json!({
            "smoke": self.smoke,
            "command": self.command,
            "core": core,
            "binary_fake_runtime": fake,
            "binary_containerd": ctr,
            "whole_node": self.node.as_ref().map(crate::report_node::json),
            "whole_node_upstream_kubelet": self.node_upstream.as_ref().map(crate::report_node::json),
            "whole_node_rkubelet_relist": self.node_relist.as_ref().map(crate::report_node::json),
            "fuzz": self.fuzz.as_ref().map(crate::fuzz::json),
            "budgets": self.budgets().iter().map(|b| json!({
                "figure": b.figure, "value": b.value, "budget": b.budget, "met": b.met,
            })).collect::<Vec<_>>(),
            "budgets_missed": self.missed_budgets(),
        })
    }

    /// A Markdown document: machine, commit, command, then the tables.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "# rkubelet benchmarks\n\n- machine: {}\n- commit: {}\n- command: `{}`\n- run: {}\n",
            machine(),
            commit(),
            self.command,
            if self.smoke { "smoke (small counts; budgets shown but not meant for it)" } else { "full" }
        );
        s.push_str("\n## Budgets\n\n| figure | value | budget | |\n|---|---:|---:|---|\n");
        for b in self.budgets() {
            s.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                b.figure,
                b.value,
                b.budget,
                if b.met { "met" } else { "**missed**" }
            ));
        }
        if let Some(f) = &self.fake {
            s.push_str(&format!(
                "\n## Scale: the binary on the in-memory runtime (served over CRI gRPC) with the test apiserver\n\n\
                 Pods created through the apiserver, seen Running and gone on its watch; rkubelet's CPU and RSS from \
                 `/proc`. `kubeAPIQPS: 1000`, `kubeAPIBurst: 2000`, `eventRecordQPS: 0` (unlimited). Steady CPU: a window after \
                 the pods converged and the node settled.\n\n\
                 Registered node, no pod: RSS {:.1} MiB, {:.2} millicores.\n\n\
                 | pods | converge | CPU to converge | steady CPU | RSS | per pod | delete all → gone |\n\
                 |---:|---:|---:|---:|---:|---:|---:|\n",
                mib(f.idle_rss),
                f.idle_millicores
            ));
            for r in &f.scale {
                s.push_str(&format!(
                    "| {} | {:.0} ms | {:.0} ms | {:.2} mcores | {:.1} MiB | {:.1} KiB | {:.0} ms |\n",
                    r.pods,
                    ms(r.converge),
                    ms(r.converge_cpu),
                    r.steady_millicores,
                    mib(r.rss),
                    (r.rss as f64 - f.idle_rss as f64) / r.pods as f64 / 1024.0,
                    ms(r.teardown)
                ));
            }
            if let Some(c) = &f.churn {
                s.push_str(&format!(
                    "\nChurn: {} s of {}/s creations and {}/s deletions (each pod lives 3 s), after a warm-up round.\n\n\
                     | | p50 / p90 / p99 / max |\n|---|---:|\n| create → Running ({} pods) | {} |\n\
                     | delete → gone ({} pods) | {} |\n\n\
                     CPU during the churn {:.1} millicores; RSS before {:.1} MiB, peak {:.1} MiB, after {:.1} MiB.\n",
                    c.seconds,
                    c.rate,
                    c.rate,
                    c.start.n,
                    pct_md(&c.start),
                    c.delete.n,
                    pct_md(&c.delete),
                    c.millicores,
                    mib(c.rss_before),
                    mib(c.rss_peak),
                    mib(c.rss_after)
                ));
            }
        }
        if let Some(c) = &self.core {
            s.push_str(
                "\n## Scale: the core in-process on the in-memory runtime\n\n\
                 Pods handed to the sync loop as one PodConfig update; converged when the status manager has every pod \
                 Running. Relist: CPU of one PLEG relist with no change, over the real CRI client (median of 20).\n\n\
                 | pods | converge | CPU to converge | relist CPU | steady CPU |\n|---:|---:|---:|---:|---:|\n",
            );
            for r in &c.scale {
                s.push_str(&format!(
                    "| {} | {:.0} ms | {:.0} ms | {:.0} µs | {} |\n",
                    r.pods,
                    ms(r.converge),
                    ms(r.converge_cpu),
                    r.relist_cpu.as_secs_f64() * 1e6,
                    r.steady_millicores.map(|m| format!("{m:.2} mcores")).unwrap_or_else(|| "-".into()),
                ));
            }
        }
        if let Some(c) = &self.containerd {
            s.push_str(&format!(
                "\n## The binary on containerd with the test apiserver\n\n\
                 Static manifests: placed → Running on the read-only `/pods` (polled every 5 ms); removed → containerd has no ready sandbox of the pod left (polled every 5 ms). \
                 Apiserver: create → Running on the apiserver's watch; delete (grace 30 s, the container exits on \
                 SIGTERM) → object gone. CRI = containerd's RunPodSandbox + CreateContainer + StartContainer as rkubelet \
                 timed them; rkubelet = the rest.\n\n\
                 | path | runs | start (median) | CRI | rkubelet | teardown | batch of {n}: each p50 / p90 / p99 / max | batch: all Running | batch: all gone |\n\
                 |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                n = c.steady_pods
            ));
            for (what, p) in [("static manifest", &c.static_pods), ("apiserver create", &c.api_pods)] {
                s.push_str(&format!(
                    "| {what} | {} | {:.0} ms | {:.0} ms | {:.1} ms | {:.0} ms | {} | {:.0} ms | {:.0} ms |\n",
                    p.sequential.len(),
                    ms(p.median_e2e()),
                    ms(p.median_cri()),
                    ms(p.median_share()),
                    ms(p.median_teardown()),
                    pct_md(&p.batch.start),
                    ms(p.batch.all_running),
                    ms(p.batch.all_gone)
                ));
            }
            let v = &c.volume_pods;
            let med = |f: fn(&StartRun) -> Duration| ms(median_by(v, f));
            s.push_str(&format!(
                "\nApiserver create of the same pod with a configMap, a secret and the projected service account token \
                 volume (`kube-api-access-*`), {} runs alternating with the runs without volumes above: start {:.0} ms \
                 (median; CRI {:.0} ms, rkubelet {:.1} ms), beside {:.0} ms without volumes.\n",
                v.len(),
                med(|r| r.e2e),
                med(|r| r.cri),
                med(StartRun::share),
                ms(c.api_pods.median_e2e()),
            ));
            if !c.api_endpoints.is_empty() {
                s.push_str(&format!(
                    "\nThe kubelet API with {} pods running: requests one after the other on one kept-alive HTTPS \
                     connection (as Prometheus and metrics-server scrape), {} per endpoint after 3 unmeasured; \
                     rkubelet's CPU per request from `/proc` around the series.\n\n\
                     | endpoint | response p50 / p90 / p99 / max | CPU per request | size |\n|---|---:|---:|---:|\n",
                    c.steady_pods, c.api_endpoints[0].latency.n
                ));
                for e in &c.api_endpoints {
                    s.push_str(&format!(
                        "| `{}` | {} | {:.2} ms | {:.1} KiB |\n",
                        e.path,
                        pct_md_fine(&e.latency),
                        ms(e.cpu_per_request),
                        e.bytes as f64 / 1024.0
                    ));
                }
            }
            s.push_str(&format!(
                "\nRegistered node, no pod: RSS {:.1} MiB, {:.2} millicores. With {} pods running: RSS {:.1} MiB, {:.2} \
                 millicores.\n",
                mib(c.idle_rss),
                c.idle_millicores,
                c.steady_pods,
                mib(c.steady_rss),
                c.steady_millicores
            ));
        }
        if let Some(n) = &self.node {
            s.push_str(&crate::report_node::markdown(n));
            if let Some(up) = &self.node_upstream {
                s.push_str(&crate::report_node::markdown_upstream(up, n));
            }
            if let Some(relist) = &self.node_relist {
                s.push_str(&crate::report_node::markdown_relist(relist, n));
            }
            if let Some((before, label)) = &self.node_before {
                s.push_str(&crate::report_node::markdown_compare(before, label, n));
            }
        }
        if let Some(f) = &self.fuzz {
            s.push_str(&crate::fuzz::markdown(f));
        }
        let missed = self.missed_budgets();
        if missed.is_empty() {
            s.push_str("\nEvery budget is met.\n");
        } else {
            s.push_str("\nBudgets missed:\n");
            for m in missed {
                s.push_str(&format!("- {m}\n"));
            }
        }
        s
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mem_gib = crate::procstat::total_memory() as f64 / MIB / 1024.0;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem_gib:.0} GiB, Linux {}", kernel.trim())
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}
