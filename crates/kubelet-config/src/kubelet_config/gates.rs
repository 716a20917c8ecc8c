//! The feature gates that defaulting and validation consult.
//!
//! Upstream resolves a gate against the kubelet's whole gate registry
//! (`pkg/features/kube_features.go`) merged with `featureGates`. This crate does not carry
//! that registry: a gate counts as known when `featureGates` sets it, or when it is one of
//! the few listed in [`KNOWN_DEFAULTS`], whose defaults are long settled. Checks and
//! defaults that depend on any other gate are skipped unless `featureGates` sets it.

use super::types::KubeletConfiguration;

pub(crate) const CUSTOM_CPU_CFS_QUOTA_PERIOD: &str = "CustomCPUCFSQuotaPeriod";
pub(crate) const GRACEFUL_NODE_SHUTDOWN: &str = "GracefulNodeShutdown";
pub(crate) const GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY: &str = "GracefulNodeShutdownBasedOnPodPriority";
pub(crate) const IMAGE_MAXIMUM_GC_AGE: &str = "ImageMaximumGCAge";
pub(crate) const KUBELET_CRASH_LOOP_BACK_OFF_MAX: &str = "KubeletCrashLoopBackOffMax";
pub(crate) const KUBELET_ENSURE_SECRET_PULLED_IMAGES: &str = "KubeletEnsureSecretPulledImages";
pub(crate) const LOGGING_ALPHA_OPTIONS: &str = "LoggingAlphaOptions";
pub(crate) const LOGGING_BETA_OPTIONS: &str = "LoggingBetaOptions";
pub(crate) const MEMORY_QOS: &str = "MemoryQoS";
pub(crate) const NODE_LOG_QUERY: &str = "NodeLogQuery";
pub(crate) const NODE_SWAP: &str = "NodeSwap";
pub(crate) const ROTATE_KUBELET_SERVER_CERTIFICATE: &str = "RotateKubeletServerCertificate";

/// Defaults of gates that have not changed in many releases (as of Kubernetes 1.36).
const KNOWN_DEFAULTS: &[(&str, bool)] = &[
    (CUSTOM_CPU_CFS_QUOTA_PERIOD, false),
    (GRACEFUL_NODE_SHUTDOWN, true),
    (GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY, true),
    (IMAGE_MAXIMUM_GC_AGE, true),
    (LOGGING_ALPHA_OPTIONS, false),
    (LOGGING_BETA_OPTIONS, true),
    (MEMORY_QOS, false),
    (NODE_SWAP, true),
    (ROTATE_KUBELET_SERVER_CERTIFICATE, true),
];

impl KubeletConfiguration {
    /// Whether the feature gate `name` is enabled: `featureGates` wins, then the built-in
    /// defaults this crate knows; `None` when neither says.
    pub fn feature_gate(&self, name: &str) -> Option<bool> {
        self.feature_gates
            .get(name)
            .copied()
            .or_else(|| KNOWN_DEFAULTS.iter().find(|(gate, _)| *gate == name).map(|(_, enabled)| *enabled))
    }
}
