//! The registry of `/metrics/slis` (component-base `metrics/prometheus/slis`, installed by the kubelet's server
//! with reset): `kubernetes_healthcheck` and `kubernetes_healthchecks_total`, recorded by every `/healthz` request
//! for each check it runs, and the process start time.

use std::sync::{Arc, LazyLock};

use crate::{Collector, CounterVec, GaugeVec, Opts, Registry};

/// `kubernetes_healthcheck{name,type}`: 1 when the check last passed, 0 when it failed.
pub static HEALTHCHECK: LazyLock<Arc<GaugeVec>> = LazyLock::new(|| {
    Arc::new(GaugeVec::new(Opts::stable(
        "kubernetes_healthcheck",
        "This metric records the result of a single healthcheck.",
        &["name", "type"],
    )))
});

/// `kubernetes_healthchecks_total{name,status,type}`.
pub static HEALTHCHECKS_TOTAL: LazyLock<Arc<CounterVec>> = LazyLock::new(|| {
    Arc::new(CounterVec::new(Opts::stable(
        "kubernetes_healthchecks_total",
        "This metric records the results of all healthcheck.",
        &["name", "status", "type"],
    )))
});

/// `ObserveHealthcheck`: one check of kind `kind` (`healthz`) passed or failed.
pub fn observe(name: &str, kind: &str, passed: bool) {
    HEALTHCHECK.set(&[name, kind], if passed { 1.0 } else { 0.0 });
    HEALTHCHECKS_TOTAL.inc(&[name, if passed { "success" } else { "error" }, kind]);
}

/// `ResetHealthMetrics` (a `DELETE` of `/metrics/slis`).
pub fn reset() {
    HEALTHCHECK.reset();
    HEALTHCHECKS_TOTAL.reset();
}

/// The registry of `/metrics/slis`.
pub fn registry() -> Arc<Registry> {
    static R: LazyLock<Arc<Registry>> = LazyLock::new(|| {
        let r = Registry::new();
        r.register(HEALTHCHECK.clone() as Arc<dyn Collector>);
        r.register(HEALTHCHECKS_TOTAL.clone() as Arc<dyn Collector>);
        r.register(crate::process::start_time_gauge());
        Arc::new(r)
    });
    R.clone()
}
