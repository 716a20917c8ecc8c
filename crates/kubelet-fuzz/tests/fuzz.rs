//! Every fuzz target for a bounded number of cases (`Target::test_cases`), one test each so a failure names its
//! target. `RKUBELET_FUZZ_SEED` replays a run (each failure prints its seed); `RKUBELET_FUZZ_CASES` scales the
//! case counts (e.g. `10` for ten times as many).

use std::time::Duration;

use kubelet_fuzz::{Budget, CountingAlloc, Options};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn fuzz(name: &str) {
    let target = kubelet_fuzz::target(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    let scale: u32 = std::env::var("RKUBELET_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    // A debug build parses ten to twenty times slower than the release build the benchmark runs.
    let timeout = if cfg!(debug_assertions) { Duration::from_secs(30) } else { Duration::from_secs(5) };
    let opts =
        Options { budget: Budget::Cases(target.test_cases.saturating_mul(scale)), timeout, ..Options::default() };
    let report = target.run(&opts);
    eprintln!(
        "{name}: {} cases in {:.2?}, slowest {:.2?} ({}), peak allocation {} KiB (seed {})",
        report.cases,
        report.elapsed,
        report.slowest,
        report.slowest_input,
        report.peak_alloc >> 10,
        opts.seed
    );
    if let Some(f) = report.failure {
        panic!("fuzz target {name} ({}) failed with seed {}: {f}", target.parser, opts.seed);
    }
    assert!(report.cases > 0, "{name} ran no case");
}

#[test]
fn the_allocator_counts() {
    assert!(CountingAlloc::installed());
}

#[test]
fn every_target_has_a_test() {
    let names: Vec<&str> = kubelet_fuzz::targets().iter().map(|t| t.name).collect();
    let this = include_str!("fuzz.rs");
    for n in names {
        assert!(this.contains(&format!("fuzz(\"{n}\")")), "no test for the target {n}");
    }
}

#[test]
fn duration() {
    fuzz("duration");
}

#[test]
fn quantity() {
    fuzz("quantity");
}

#[test]
fn cpu_set() {
    fuzz("cpu-set");
}

#[test]
fn label_syntax() {
    fuzz("label-syntax");
}

#[test]
fn eviction_thresholds() {
    fuzz("eviction-thresholds");
}

#[test]
fn log_query() {
    fuzz("log-query");
}

#[test]
fn cri_log_line() {
    fuzz("cri-log-line");
}

#[test]
fn request_path() {
    fuzz("request-path");
}

#[test]
fn kmsg_oom() {
    fuzz("kmsg-oom");
}

#[test]
fn resolv_conf() {
    fuzz("resolv-conf");
}

#[test]
fn proc_files() {
    fuzz("proc-files");
}

#[test]
fn kubelet_config() {
    fuzz("kubelet-config");
}

#[test]
fn static_pod_file() {
    fuzz("static-pod-file");
}

#[test]
fn static_pod_url() {
    fuzz("static-pod-url");
}

#[test]
fn pod_admission() {
    fuzz("pod-admission");
}

#[test]
fn pod_cri_config() {
    fuzz("pod-cri-config");
}

#[test]
fn kubelet_api() {
    fuzz("kubelet-api");
}

#[test]
fn container_logs() {
    fuzz("container-logs");
}
