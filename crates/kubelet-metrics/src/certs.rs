//! The certificate managers' metrics (`pkg/kubelet/certificate/kubelet.go`, `cmd/kubelet/app/server.go`), with
//! upstream's names and help. They exist only where upstream registers them: the client ones with
//! `rotateCertificates`, the server ones with `serverTLSBootstrap`; the binary forces them when it starts a
//! manager. The TTL gauges are computed at scrape time from the certificate in use.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use crate::{Collector, CounterVec, HistogramVec, Opts, register_global};

/// `kubelet_certificate_manager_client_expiration_renew_errors`.
pub static CLIENT_RENEW_ERRORS: LazyLock<Arc<CounterVec>> = LazyLock::new(|| {
    register_global(CounterVec::new(Opts::alpha(
        "kubelet_certificate_manager_client_expiration_renew_errors",
        "Counter of certificate renewal errors.",
        &[],
    )))
});

/// `kubelet_server_expiration_renew_errors`.
pub static SERVER_RENEW_ERRORS: LazyLock<Arc<CounterVec>> = LazyLock::new(|| {
    register_global(CounterVec::new(Opts::alpha(
        "kubelet_server_expiration_renew_errors",
        "Counter of certificate renewal errors.",
        &[],
    )))
});

/// `kubelet_certificate_manager_server_rotation_seconds`.
pub static SERVER_ROTATION_SECONDS: LazyLock<Arc<HistogramVec>> = LazyLock::new(|| {
    register_global(HistogramVec::new(
        Opts::alpha(
            "kubelet_certificate_manager_server_rotation_seconds",
            "Histogram of the number of seconds the previous certificate lived before being rotated.",
            &[],
        ),
        vec![60.0, 3600.0, 14400.0, 86400.0, 604800.0, 2592000.0, 7776000.0, 15552000.0, 31104000.0, 124416000.0],
    ))
});

/// `kubelet_certificate_manager_client_ttl_seconds`.
pub static CLIENT_TTL: LazyLock<Arc<CertTtl>> = LazyLock::new(|| {
    register_global(CertTtl::new(Opts::alpha(
        "kubelet_certificate_manager_client_ttl_seconds",
        "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until \
         certificate expiry (negative if already expired). If client certificate is invalid or unused, the value \
         will be +INF.",
        &[],
    )))
});

/// `kubelet_certificate_manager_server_ttl_seconds`.
pub static SERVER_TTL: LazyLock<Arc<CertTtl>> = LazyLock::new(|| {
    register_global(CertTtl::new(Opts::alpha(
        "kubelet_certificate_manager_server_ttl_seconds",
        "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds \
         until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the \
         value will be +INF.",
        &[],
    )))
});

/// A gauge of the seconds left on a certificate, computed when scraped (upstream's `GaugeFunc`).
pub struct CertTtl {
    opts: Opts,
    not_after: Mutex<Option<SystemTime>>,
}

impl CertTtl {
    fn new(opts: Opts) -> Self {
        Self { opts, not_after: Mutex::new(None) }
    }

    /// The certificate in use expires at `t` (`None`: no certificate, +Inf).
    pub fn set(&self, t: Option<SystemTime>) {
        *self.not_after.lock().unwrap_or_else(|e| e.into_inner()) = t;
    }

    /// The value at `now`.
    pub fn value(&self, now: SystemTime) -> f64 {
        match *self.not_after.lock().unwrap_or_else(|e| e.into_inner()) {
            None => f64::INFINITY,
            Some(t) => match t.duration_since(now) {
                Ok(d) => d.as_secs() as f64,
                Err(e) => -(e.duration().as_secs() as f64),
            },
        }
    }
}

impl Collector for CertTtl {
    fn names(&self) -> Vec<&'static str> {
        vec![self.opts.name]
    }

    fn collect(&self, out: &mut String) {
        #[allow(clippy::disallowed_methods)] // a certificate's TTL is wall time by nature, read at scrape
        let v = self.value(SystemTime::now());
        self.opts.header(out, "gauge");
        crate::text::sample(out, self.opts.name, "", &[], &[], None, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ttl_is_truncated_seconds_left_negative_when_expired_and_inf_without_a_certificate() {
        let g = CertTtl::new(Opts::alpha("x_ttl_seconds", "h", &[]));
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(g.value(now), f64::INFINITY);
        g.set(Some(now + Duration::from_millis(90_900)));
        assert_eq!(g.value(now), 90.0);
        g.set(Some(now - Duration::from_secs(5)));
        assert_eq!(g.value(now), -5.0);
        let mut out = String::new();
        g.set(None);
        g.collect(&mut out);
        assert_eq!(out, "# HELP x_ttl_seconds [ALPHA] h\n# TYPE x_ttl_seconds gauge\nx_ttl_seconds +Inf\n");
    }
}
