//! The result as JSON and as a Markdown table, and the budgets.

use std::time::Duration;

use serde_json::json;

use crate::core::Results;

const MIB: f64 = 1024.0 * 1024.0;

/// Results with their budgets.
pub struct Report {
    results: Results,
    smoke: bool,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Report {
    /// A report of `results`.
    pub fn new(results: Results, smoke: bool) -> Self {
        Self { results, smoke }
    }

    /// The budgets missed, each naming the figure, its value and its budget.
    pub fn missed_budgets(&self) -> Vec<String> {
        let mut m = vec![];
        for s in &self.results.scale {
            if s.pods == 110 && s.rss as f64 / MIB > 24.0 {
                m.push(format!("RSS with 110 pods {:.1} MiB > 24 MiB", s.rss as f64 / MIB));
            }
            if s.pods == 1000 && s.converge > Duration::from_secs(1) {
                m.push(format!("converge 1000 pods {:.0} ms > 1000 ms", ms(s.converge)));
            }
            if s.pods == 110 && s.relist_cpu > Duration::from_millis(1) {
                m.push(format!("relist at 110 pods {:.3} ms CPU > 1 ms", ms(s.relist_cpu)));
            }
            if s.pods == 110
                && let Some(mc) = s.steady_millicores
                && mc > 3.0
            {
                m.push(format!("steady CPU at 110 pods {mc:.2} millicores > 3"));
            }
        }
        m
    }

    /// JSON.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "smoke": self.smoke,
            "idle_rss_bytes": self.results.idle_rss,
            "scale": self.results.scale.iter().map(|s| json!({
                "pods": s.pods,
                "converge_ms": ms(s.converge),
                "converge_cpu_ms": ms(s.converge_cpu),
                "relist_cpu_us": s.relist_cpu.as_secs_f64() * 1e6,
                "steady_millicores": s.steady_millicores,
                "rss_bytes": s.rss,
            })).collect::<Vec<_>>(),
            "budgets_missed": self.missed_budgets(),
        })
    }

    /// A Markdown document: machine, commit, command, then the table.
    pub fn markdown(&self) -> String {
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
        let mem_gib = crate::core::total_memory() as f64 / MIB / 1024.0;
        let commit = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let mut s = format!(
            "# rkubelet benchmarks\n\n- machine: {cores} cores ({cpu}), {mem_gib:.0} GiB\n- commit: {commit}\n- command: `{command}`\n\
             - scenario: the real core in-process on the in-memory CRI runtime (rkubelet alone, no containerd)\n\n\
             | pods | converge | CPU to converge | relist CPU | steady CPU | RSS |\n|---:|---:|---:|---:|---:|---:|\n"
        );
        for r in &self.results.scale {
            s.push_str(&format!(
                "| {} | {:.0} ms | {:.0} ms | {:.0} µs | {} | {:.1} MiB |\n",
                r.pods,
                ms(r.converge),
                ms(r.converge_cpu),
                r.relist_cpu.as_secs_f64() * 1e6,
                r.steady_millicores.map(|m| format!("{m:.2} mcores")).unwrap_or_else(|| "-".into()),
                r.rss as f64 / MIB
            ));
        }
        s.push_str(&format!(
            "\nRSS before any pod (in-process harness): {:.1} MiB\n",
            self.results.idle_rss as f64 / MIB
        ));
        let missed = self.missed_budgets();
        if missed.is_empty() {
            s.push_str("\nEvery budget checked here is met.\n");
        } else {
            s.push_str("\nBudgets missed:\n");
            for m in missed {
                s.push_str(&format!("- {m}\n"));
            }
        }
        s
    }
}
