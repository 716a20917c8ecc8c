//! The cgroup driver from the container runtime (`cmd/kubelet/app/server.go` getCgroupDriverFromCRI,
//! KubeletCgroupDriverFromCRI, GA and locked on in v1.35).
//!
//! Called once at start-up, once the runtime answers and before anything that names a cgroup (the container
//! manager, the pods cgroup of the stats, `/configz`). A runtime that answers `RuntimeConfig` decides the driver and
//! the configuration's `cgroupDriver` is replaced, with upstream's log line; one that answers Unimplemented
//! (containerd 1.6) leaves the configuration's, with upstream's line and `kubelet_cri_losing_support`. Any other
//! error is retried twice, 2 s apart, then stops start-up as upstream (the runtime did answer `Version` just
//! before, so this is a runtime fault, not an outage).

use std::time::Duration;

use kubelet_cri::{CriError, RuntimeService, api};
use tracing::info;

/// Attempts at `RuntimeConfig` before start-up stops.
const ATTEMPTS: usize = 3;
/// The pause after a failed attempt.
pub const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// The cgroup driver to use: the runtime's answer, else `configured` (the configuration's `cgroupDriver`).
pub async fn cgroup_driver(runtime: &dyn RuntimeService, configured: &str) -> anyhow::Result<String> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        match runtime.runtime_config().await {
            Ok(resp) => {
                let Some(linux) = resp.linux else { return Ok(configured.to_string()) };
                let driver = match api::CgroupDriver::try_from(linux.cgroup_driver) {
                    Ok(api::CgroupDriver::Systemd) => "systemd",
                    Ok(api::CgroupDriver::Cgroupfs) => "cgroupfs",
                    Err(_) => anyhow::bail!("runtime returned an unknown cgroup driver {}", linux.cgroup_driver),
                };
                info!(cgroupDriver = driver, "Using cgroup driver setting received from the CRI runtime");
                return Ok(driver.to_string());
            }
            Err(CriError::Unimplemented { .. }) => {
                kubelet_metrics::kubelet::CRI_LOSING_SUPPORT.set(&["1.36.0"], 1.0);
                info!(
                    cgroupDriver = configured,
                    "CRI implementation should be updated to support RuntimeConfig. Falling back to using cgroupDriver from kubelet config."
                );
                return Ok(configured.to_string());
            }
            Err(e) => {
                last = Some(e);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    let last = last.map(|e| e.to_string()).unwrap_or_default();
    anyhow::bail!("get the cgroup driver from the container runtime (RuntimeConfig): {last}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::FakeRuntime;

    #[tokio::test(start_paused = true)]
    async fn the_runtimes_driver_replaces_the_configured_one() {
        let rt = FakeRuntime::new(&[]);
        rt.set_cgroup_driver(Some(api::CgroupDriver::Systemd));
        assert_eq!(cgroup_driver(&rt, "cgroupfs").await.unwrap(), "systemd");
        rt.set_cgroup_driver(Some(api::CgroupDriver::Cgroupfs));
        assert_eq!(cgroup_driver(&rt, "systemd").await.unwrap(), "cgroupfs");
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_without_runtime_config_leaves_the_configured_driver() {
        let rt = FakeRuntime::new(&[]);
        assert_eq!(cgroup_driver(&rt, "systemd").await.unwrap(), "systemd");
        let losing = kubelet_metrics::kubelet::CRI_LOSING_SUPPORT.get(&["1.36.0"]);
        assert_eq!(losing, 1.0, "kubelet_cri_losing_support{{version=\"1.36.0\"}}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_runtime_is_asked_three_times_two_seconds_apart_then_start_up_stops() {
        let rt = FakeRuntime::new(&[]);
        rt.set_cgroup_driver(Some(api::CgroupDriver::Cgroupfs));
        let unavailable = || CriError::Other { op: "RuntimeConfig", code: "Unavailable".into(), message: "x".into() };
        rt.inject_error("RuntimeConfig", unavailable());
        rt.inject_error("RuntimeConfig", unavailable());
        let t0 = tokio::time::Instant::now();
        assert_eq!(cgroup_driver(&rt, "systemd").await.unwrap(), "cgroupfs", "the third attempt answers");
        assert_eq!(t0.elapsed(), RETRY_PAUSE * 2);
        for _ in 0..3 {
            rt.inject_error("RuntimeConfig", unavailable());
        }
        let err = cgroup_driver(&rt, "systemd").await.unwrap_err();
        assert!(
            err.to_string().starts_with("get the cgroup driver from the container runtime (RuntimeConfig): "),
            "{err}"
        );
    }
}
