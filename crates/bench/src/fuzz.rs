//! The `fuzz` scenario: every target of `kubelet-fuzz` round-robin for a given time (10 minutes in the full
//! benchmark, a few seconds in the smoke run), in slices so each gets its share even when the time is short. A
//! target that fails is not run again; its minimal input is reported and the program exits non-zero.

use std::time::{Duration, Instant};

use kubelet_fuzz::{Budget, Options, Report};
use serde_json::{Value, json};

/// What the scenario did.
pub struct FuzzResults {
    /// The time asked for.
    pub seconds: u64,
    /// The seed of the run (`RKUBELET_FUZZ_SEED` replays it).
    pub seed: u64,
    /// One report per target, in the targets' order.
    pub reports: Vec<Report>,
}

impl FuzzResults {
    /// The targets that failed, with their minimal inputs.
    pub fn failures(&self) -> Vec<String> {
        self.reports
            .iter()
            .filter_map(|r| r.failure.as_ref().map(|f| format!("fuzz target {}: {f} (seed {})", r.target, self.seed)))
            .collect()
    }
}

/// Runs every target round-robin for `total`.
#[allow(clippy::disallowed_methods)] // a wall-clock budget, not a test's clock
pub fn run(total: Duration) -> FuzzResults {
    let targets = kubelet_fuzz::targets();
    let seed = kubelet_fuzz::seed_from_env_or_clock();
    // About four rounds; a slice is at least 200 ms (a short run still runs every target) and at most 30 s.
    let slice = (total / (targets.len() as u32 * 4)).clamp(Duration::from_millis(200), Duration::from_secs(30));
    // A debug build (the smoke run) parses ten to twenty times slower.
    let timeout = if cfg!(debug_assertions) { Duration::from_secs(30) } else { Duration::from_secs(5) };
    let mut reports: Vec<Option<Report>> = vec![None; targets.len()];
    let started = Instant::now();
    let mut round: u64 = 0;
    loop {
        for (i, t) in targets.iter().enumerate() {
            if reports[i].as_ref().is_some_and(|r| r.failure.is_some()) {
                continue;
            }
            let opts = Options {
                budget: Budget::Time(slice),
                timeout,
                seed: seed.wrapping_add(round.wrapping_mul(1_000_003)).wrapping_add(i as u64 * 7919),
                ..Options::default()
            };
            let r = t.run(&opts);
            if let Some(f) = &r.failure {
                eprintln!("fuzz target {} failed: {f}", t.name);
            }
            match &mut reports[i] {
                Some(acc) => acc.merge(r),
                slot => *slot = Some(r),
            }
        }
        round += 1;
        if started.elapsed() >= total {
            break;
        }
    }
    FuzzResults { seconds: total.as_secs(), seed, reports: reports.into_iter().flatten().collect() }
}

fn kib(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

/// The JSON of the scenario.
pub fn json(f: &FuzzResults) -> Value {
    json!({
        "seconds": f.seconds,
        "seed": f.seed,
        "targets": f.reports.iter().map(|r| json!({
            "target": r.target,
            "cases": r.cases,
            "seconds": r.elapsed.as_secs_f64(),
            "slowest_case_ms": r.slowest.as_secs_f64() * 1e3,
            "slowest_input": r.slowest_input,
            "peak_alloc_bytes": r.peak_alloc,
            "failure": r.failure.as_ref().map(|x| json!({
                "kind": format!("{:?}", x.kind), "message": x.message, "minimal_input": x.minimal_input,
            })),
        })).collect::<Vec<_>>(),
    })
}

/// The Markdown section of the scenario.
pub fn markdown(f: &FuzzResults) -> String {
    let mut s = format!(
        "\n## Fuzzing: every parser of outside input\n\n\
         `kubelet-fuzz` targets round-robin for {} s (seed {}): no panic, every case within 5 s, at most 256 MiB \
         allocated at a case's peak, round trips where a printer exists. Peak allocation is a case's own, counted \
         by the benchmark's global allocator.\n\n\
         | target | cases | cases/s | slowest case | peak allocation | result |\n|---|---:|---:|---:|---:|---|\n",
        f.seconds, f.seed
    );
    for r in &f.reports {
        let rate = r.cases as f64 / r.elapsed.as_secs_f64().max(1e-9);
        let result = match &r.failure {
            None => "ok".to_string(),
            Some(x) => format!("**{:?}**: {}", x.kind, x.message.replace('|', "\\|").replace('\n', " ")),
        };
        s.push_str(&format!(
            "| {} | {} | {rate:.0} | {:.1} ms | {:.0} KiB | {result} |\n",
            r.target,
            r.cases,
            r.slowest.as_secs_f64() * 1e3,
            kib(r.peak_alloc)
        ));
    }
    s
}
