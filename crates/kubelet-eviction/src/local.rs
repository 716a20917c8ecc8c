//! Local ephemeral storage limits (`eviction_manager.go` localStorageEviction, emptyDirLimitEviction,
//! podEphemeralStorageLimitEviction, containerEphemeralStorageLimitEviction): a pod whose emptyDir passes its
//! `sizeLimit`, whose ephemeral storage passes the sum of its containers' limits, or whose container's logs (and
//! writable layer, without a dedicated image filesystem) pass the container's limit, is evicted at once, whatever
//! the node's pressure. Checked at the start of every pass, before the thresholds.

use std::sync::Arc;

use kubelet_types::Pod;
use kubelet_types::qos::{container_limit, pod_limit};
use kubelet_types::quantity::parse_quantity;

use crate::manager::{EvictionManager, IMMEDIATE_GRACE_SECONDS, REASON};
use crate::stats::{EvictionStatus, NodeStats, PodUsage};

/// The `eviction_signal` label of each limit's evictions.
const EMPTY_DIR_SIGNAL: &str = "emptydirfs.limit";
const POD_SIGNAL: &str = "ephemeralpodfs.limit";
const CONTAINER_SIGNAL: &str = "ephemeralcontainerfs.limit";

/// Whether `pod` has a local storage limit to watch: an emptyDir `sizeLimit` or an `ephemeral-storage` limit.
pub fn has_limits(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    spec.volumes.iter().flatten().any(|v| v.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some()))
        || spec.containers.iter().any(|c| container_limit(c, "ephemeral-storage").is_some())
}

/// The first limit `pod` exceeds: (metric signal, message).
pub fn exceeded_limit(pod: &Pod, usage: &PodUsage, dedicated_image_fs: bool) -> Option<(&'static str, String)> {
    let spec = pod.spec.as_ref()?;
    for v in spec.volumes.iter().flatten() {
        let Some(limit) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) else { continue };
        let (Some(size), Some(used)) = (parse_quantity(&limit.0), usage.volumes.get(&v.name).and_then(|u| u.bytes))
        else {
            continue;
        };
        if size > 0.0 && used as f64 > size {
            return Some((
                EMPTY_DIR_SIGNAL,
                format!("Usage of EmptyDir volume {:?} exceeds the limit {:?}. ", v.name, limit.0),
            ));
        }
    }
    if let Some(limit) = pod_limit(pod, "ephemeral-storage") {
        let used = usage.ephemeral_storage.bytes.unwrap_or(0) as f64;
        if used > limit {
            let text = crate::threshold::binary_si(limit as i64);
            return Some((
                POD_SIGNAL,
                format!("Pod ephemeral local storage usage exceeds the total limit of containers {text}. "),
            ));
        }
    }
    for cs in &usage.containers {
        let Some(c) = spec.containers.iter().find(|c| c.name == cs.name) else { continue };
        let Some(limit) = container_limit(c, "ephemeral-storage") else { continue };
        let mut used = cs.logs.bytes.unwrap_or(0);
        if !dedicated_image_fs {
            used += cs.rootfs.bytes.unwrap_or(0);
        }
        if used as f64 > limit {
            let text = c
                .resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("ephemeral-storage"))
                .map(|q| q.0.clone())
                .unwrap_or_default();
            return Some((
                CONTAINER_SIGNAL,
                format!("Container {} exceeded its local ephemeral storage limit {text:?}. ", c.name),
            ));
        }
    }
    None
}

impl EvictionManager {
    /// Evicts every active pod over one of its local storage limits; returns them.
    pub(crate) async fn local_storage_eviction(&self, pods: &[Arc<Pod>], stats: &NodeStats) -> Vec<Arc<Pod>> {
        let mut evicted = vec![];
        for pod in pods {
            let Some(usage) = stats.pods.get(pod.metadata.uid.as_deref().unwrap_or("")) else { continue };
            let Some((signal, message)) = exceeded_limit(pod, usage, stats.dedicated_image_fs) else { continue };
            let status = EvictionStatus { reason: REASON.into(), message, disruption_message: None };
            if self.evict_pod(pod, IMMEDIATE_GRACE_SECONDS, status).await {
                kubelet_metrics::kubelet::EVICTIONS.inc(&[signal]);
                evicted.push(pod.clone());
            }
        }
        evicted
    }
}
