//! The node-pressure settings of the configuration (`cmd/kubelet/app/server.go`: `eviction.ParseThresholdConfig`,
//! the image GC policy), checked at start-up: a bad entry stops start-up with an error naming the field.

use std::collections::BTreeMap;

use anyhow::Context;
use kubelet_config::kubelet_config::KubeletConfiguration;
use kubelet_eviction::EvictionConfig;
use kubelet_runtime::image_gc::ImageGcPolicy;

/// The eviction manager's settings.
pub fn eviction_config(cfg: &KubeletConfiguration) -> anyhow::Result<EvictionConfig> {
    let mut grace = BTreeMap::new();
    for (signal, v) in &cfg.eviction_soft_grace_period {
        let d = kubelet_config::kubelet_config::Duration::parse(v)
            .with_context(|| format!("evictionSoftGracePeriod[{signal}]: invalid duration {v:?}"))?;
        grace.insert(signal.clone(), d.0);
    }
    let thresholds = kubelet_eviction::parse_thresholds(
        cfg.enforce_node_allocatable.as_deref().unwrap_or(&[]),
        cfg.eviction_hard.as_ref().unwrap_or(&BTreeMap::new()),
        &cfg.eviction_soft,
        &grace,
        &cfg.eviction_minimum_reclaim,
    )?;
    Ok(EvictionConfig {
        thresholds,
        pressure_transition_period: cfg.eviction_pressure_transition_period.0,
        max_pod_grace_period: cfg.eviction_max_pod_grace_period as i64,
        local_storage_capacity_isolation: cfg.local_storage_capacity_isolation.unwrap_or(true),
        monitoring_period: kubelet_eviction::manager::MONITORING_PERIOD,
    })
}

/// The image garbage collector's policy.
pub fn image_gc_policy(cfg: &KubeletConfiguration) -> ImageGcPolicy {
    ImageGcPolicy {
        high_threshold_percent: cfg.image_gc_high_threshold_percent.unwrap_or(85),
        low_threshold_percent: cfg.image_gc_low_threshold_percent.unwrap_or(80),
        min_age: cfg.image_minimum_gc_age.0,
        max_age: cfg.image_maximum_gc_age.0,
    }
}

/// Container log rotation's settings; None when `containerLogMaxSize` is negative (rotation off, as upstream's
/// stub manager).
pub fn log_rotation(
    cfg: &KubeletConfiguration,
    pod_logs_dir: &std::path::Path,
) -> anyhow::Result<Option<kubelet_runtime::log_rotation::LogRotationConfig>> {
    let size = kubelet_types::quantity::parse_quantity(&cfg.container_log_max_size)
        .ok_or_else(|| anyhow::anyhow!("containerLogMaxSize: invalid quantity {:?}", cfg.container_log_max_size))?;
    if size < 0.0 {
        return Ok(None);
    }
    Ok(Some(kubelet_runtime::log_rotation::LogRotationConfig {
        max_size: size as u64,
        max_files: cfg.container_log_max_files.unwrap_or(5).max(2) as usize,
        workers: cfg.container_log_max_workers.unwrap_or(1).max(1) as usize,
        interval: cfg.container_log_monitor_interval.map(|d| d.0).unwrap_or(std::time::Duration::from_secs(10)),
        pod_logs_dir: pod_logs_dir.to_path_buf(),
    }))
}
