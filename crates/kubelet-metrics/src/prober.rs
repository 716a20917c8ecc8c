//! The registry of `/metrics/probes` (`pkg/kubelet/prober/prober_manager.go`, `pkg/kubelet/server/server.go`):
//! `prober_probe_total`, `prober_probe_duration_seconds` and the process start time.

use std::sync::{Arc, LazyLock};

use crate::{Collector, CounterVec, DEFAULT_BUCKETS, HistogramVec, Opts, Registry};

/// `prober_probe_total{container,namespace,pod,pod_uid,probe_type,result}`.
pub static PROBE_TOTAL: LazyLock<Arc<CounterVec>> = LazyLock::new(|| {
    Arc::new(CounterVec::new(Opts::beta(
        "prober_probe_total",
        "Cumulative number of a liveness, readiness or startup probe for a container by result.",
        &["container", "namespace", "pod", "pod_uid", "probe_type", "result"],
    )))
});

/// `prober_probe_duration_seconds{container,namespace,pod,probe_type}` (successful and unknown results only).
pub static PROBE_DURATION: LazyLock<Arc<HistogramVec>> = LazyLock::new(|| {
    Arc::new(HistogramVec::new(
        Opts::alpha(
            "prober_probe_duration_seconds",
            "Duration in seconds for a probe response.",
            &["container", "namespace", "pod", "probe_type"],
        ),
        DEFAULT_BUCKETS.to_vec(),
    ))
});

/// The registry of `/metrics/probes`.
pub fn registry() -> Arc<Registry> {
    static R: LazyLock<Arc<Registry>> = LazyLock::new(|| {
        let r = Registry::new();
        r.register(PROBE_TOTAL.clone() as Arc<dyn Collector>);
        r.register(PROBE_DURATION.clone() as Arc<dyn Collector>);
        r.register(crate::process::start_time_gauge());
        Arc::new(r)
    });
    R.clone()
}
