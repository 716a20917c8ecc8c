//! The types nested in [`KubeletConfiguration`](super::KubeletConfiguration) and the
//! string constants of its enum-like fields.
//!
//! Mirrors `staging/src/k8s.io/kubelet/config/v1beta1/types.go` (authentication,
//! authorization, swap, crash-loop back-off, memory reservations, shutdown grace periods,
//! user namespaces), `staging/src/k8s.io/component-base/logs/api/v1/types.go`
//! (`LoggingConfiguration`) and `staging/src/k8s.io/component-base/tracing/api/v1/types.go`
//! (`TracingConfiguration`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::duration::Duration;
use super::quantity::{deserialize_quantity_string, deserialize_resource_list};

/// How the kubelet handles hairpin packets (`hairpinMode`).
pub type HairpinMode = String;
/// How the ConfigMap and Secret managers notice changes
/// (`configMapAndSecretChangeDetectionStrategy`).
pub type ResourceChangeDetectionStrategy = String;
/// How pull credentials are re-verified for images already on the node
/// (`imagePullCredentialsVerificationPolicy`).
pub type ImagePullCredentialsVerificationPolicy = String;
/// How cgroup v2 memory protection is applied (`memoryReservationPolicy`).
pub type MemoryReservationPolicy = String;
/// How requests to the kubelet's server are authorized (`authorization.mode`).
pub type KubeletAuthorizationMode = String;

/// `hairpinMode`: set the hairpin flag on container veth interfaces.
pub const HAIRPIN_VETH: &str = "hairpin-veth";
/// `hairpinMode`: make the container bridge promiscuous (the default).
pub const PROMISCUOUS_BRIDGE: &str = "promiscuous-bridge";
/// `hairpinMode`: do nothing.
pub const HAIRPIN_NONE: &str = "none";

/// `configMapAndSecretChangeDetectionStrategy`: fetch objects from the API server.
pub const GET_CHANGE_DETECTION_STRATEGY: &str = "Get";
/// `configMapAndSecretChangeDetectionStrategy`: TTL cache of fetched objects.
pub const TTL_CACHE_CHANGE_DETECTION_STRATEGY: &str = "Cache";
/// `configMapAndSecretChangeDetectionStrategy`: watch objects (the default).
pub const WATCH_CHANGE_DETECTION_STRATEGY: &str = "Watch";

/// `topologyManagerPolicy`: only optimal NUMA alignment is admitted.
pub const RESTRICTED_TOPOLOGY_MANAGER_POLICY: &str = "restricted";
/// `topologyManagerPolicy`: prefer NUMA alignment.
pub const BEST_EFFORT_TOPOLOGY_MANAGER_POLICY: &str = "best-effort";
/// `topologyManagerPolicy`: no NUMA awareness (the default).
pub const NONE_TOPOLOGY_MANAGER_POLICY: &str = "none";
/// `topologyManagerPolicy`: only single-NUMA-node alignment is admitted.
pub const SINGLE_NUMA_NODE_TOPOLOGY_MANAGER_POLICY: &str = "single-numa-node";
/// `topologyManagerScope`: hints per container (the default).
pub const CONTAINER_TOPOLOGY_MANAGER_SCOPE: &str = "container";
/// `topologyManagerScope`: hints per pod.
pub const POD_TOPOLOGY_MANAGER_SCOPE: &str = "pod";

/// `memoryManagerPolicy`: do not pin memory (the default).
pub const NONE_MEMORY_MANAGER_POLICY: &str = "None";
/// `memoryManagerPolicy`: pin memory of guaranteed pods to NUMA nodes.
pub const STATIC_MEMORY_MANAGER_POLICY: &str = "Static";

/// `imagePullCredentialsVerificationPolicy`: never re-verify images on the node.
pub const NEVER_VERIFY: &str = "NeverVerify";
/// `imagePullCredentialsVerificationPolicy`: no re-verification for images pulled outside
/// the kubelet.
pub const NEVER_VERIFY_PRELOADED_IMAGES: &str = "NeverVerifyPreloadedImages";
/// `imagePullCredentialsVerificationPolicy`: no re-verification for allowlisted images.
pub const NEVER_VERIFY_ALLOWLISTED_IMAGES: &str = "NeverVerifyAllowlistedImages";
/// `imagePullCredentialsVerificationPolicy`: always re-verify.
pub const ALWAYS_VERIFY: &str = "AlwaysVerify";

/// `memoryReservationPolicy`: no `memory.min` protection (the default).
pub const NONE_MEMORY_RESERVATION_POLICY: &str = "None";
/// `memoryReservationPolicy`: `memory.min` for Guaranteed and `memory.low` for Burstable pods.
pub const TIERED_RESERVATION_MEMORY_RESERVATION_POLICY: &str = "TieredReservation";

/// `authorization.mode`: authorize every authenticated request.
pub const KUBELET_AUTHORIZATION_MODE_ALWAYS_ALLOW: &str = "AlwaysAllow";
/// `authorization.mode`: ask the API server with SubjectAccessReviews (the default).
pub const KUBELET_AUTHORIZATION_MODE_WEBHOOK: &str = "Webhook";

/// `memorySwap.swapBehavior`: workloads cannot use swap.
pub const NO_SWAP: &str = "NoSwap";
/// `memorySwap.swapBehavior`: swap proportional to the memory request.
pub const LIMITED_SWAP: &str = "LimitedSwap";

/// `cgroupDriver`: manipulate cgroupfs directly (the default).
pub const CGROUP_DRIVER_CGROUPFS: &str = "cgroupfs";
/// `cgroupDriver`: go through systemd.
pub const CGROUP_DRIVER_SYSTEMD: &str = "systemd";

/// `enforceNodeAllocatable` entries (`pkg/kubelet/types/constants.go`).
pub mod enforcement {
    /// Enforce node allocatable on pods.
    pub const PODS: &str = "pods";
    /// Enforce `systemReserved` on `systemReservedCgroup`.
    pub const SYSTEM_RESERVED: &str = "system-reserved";
    /// Enforce only the compressible resources of `systemReserved`.
    pub const SYSTEM_RESERVED_COMPRESSIBLE: &str = "system-reserved-compressible";
    /// Enforce `kubeReserved` on `kubeReservedCgroup`.
    pub const KUBE_RESERVED: &str = "kube-reserved";
    /// Enforce only the compressible resources of `kubeReserved`.
    pub const KUBE_RESERVED_COMPRESSIBLE: &str = "kube-reserved-compressible";
    /// No enforcement; may not be combined with other entries.
    pub const NONE: &str = "none";
}

/// How requests to the kubelet's server are authenticated.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletAuthentication {
    /// x509 client certificate authentication.
    pub x509: KubeletX509Authentication,
    /// Webhook bearer token authentication.
    pub webhook: KubeletWebhookAuthentication,
    /// Anonymous authentication.
    pub anonymous: KubeletAnonymousAuthentication,
}

/// x509 client certificate authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeletX509Authentication {
    /// PEM bundle of CAs whose client certificates are accepted.
    #[serde(rename = "clientCAFile", skip_serializing_if = "String::is_empty")]
    pub client_ca_file: String,
}

/// Bearer token authentication through TokenReviews.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeletWebhookAuthentication {
    /// Whether webhook token authentication is enabled. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long authentication results are cached. Default: `2m`.
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: Duration,
}

/// Anonymous requests (`system:anonymous` in group `system:unauthenticated`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeletAnonymousAuthentication {
    /// Whether anonymous requests are allowed. Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// How requests to the kubelet's server are authorized.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeletAuthorization {
    /// `AlwaysAllow` or `Webhook`. Default: `Webhook`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mode: KubeletAuthorizationMode,
    /// Settings of `Webhook` mode.
    pub webhook: KubeletWebhookAuthorization,
}

/// Caching of SubjectAccessReview answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeletWebhookAuthorization {
    /// How long "authorized" answers are cached. Default: `5m`.
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: Duration,
    /// How long "unauthorized" answers are cached. Default: `30s`.
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: Duration,
}

/// Swap available to container workloads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MemorySwapConfiguration {
    /// `""`/`NoSwap` or `LimitedSwap`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub swap_behavior: String,
}

/// Node-level parameters of container restart back-off.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CrashLoopBackOffConfig {
    /// Maximum back-off delay, between 1s and 300s (feature `KubeletCrashLoopBackOffMax`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_container_restart_period: Option<Duration>,
}

/// Memory reserved on one NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MemoryReservation {
    /// The NUMA node.
    pub numa_node: i32,
    /// Reserved amounts by memory type (`memory`, `hugepages-<size>`).
    #[serde(deserialize_with = "deserialize_resource_list")]
    pub limits: BTreeMap<String, Quantity>,
}

/// The shutdown grace period of pods at or above a priority.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ShutdownGracePeriodByPodPriority {
    /// The lowest priority value of the range.
    pub priority: i32,
    /// The grace period in seconds.
    pub shutdown_grace_period_seconds: i64,
}

/// User namespace settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UserNamespaces {
    /// Length of the UID/GID mapping of a pod; a multiple of 65536. Default: 65536.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids_per_pod: Option<i64>,
}

/// OpenTelemetry tracing client settings (component-base `TracingConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TracingConfiguration {
    /// The collector endpoint (`dns`, `unix` or `unix-abstract` target). Default:
    /// `localhost:4317`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Spans sampled per million; 0 or unset samples none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_rate_per_million: Option<i32>,
}

/// Logging options (component-base `logs/api/v1.LoggingConfiguration`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LoggingConfiguration {
    /// `text` or `json`. Default: `text`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub format: String,
    /// Maximum time between log flushes. Default: `5s`.
    pub flush_frequency: TimeOrMetaDuration,
    /// Threshold of log messages to emit (`-v`).
    pub verbosity: u32,
    /// Per-file verbosity overrides (`-vmodule`); only for the text format.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub vmodule: Vec<VModuleItem>,
    /// Options of the individual formats.
    pub options: FormatOptions,
}

/// One `vmodule` entry: a file pattern and its verbosity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct VModuleItem {
    /// A file name pattern (no `=` nor `,`).
    pub file_pattern: String,
    /// The verbosity for matching files.
    pub verbosity: u32,
}

/// Options of the `text` and `json` log formats.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FormatOptions {
    /// Options of the `text` format.
    pub text: OutputRoutingOptions,
    /// Options of the `json` format.
    pub json: OutputRoutingOptions,
}

/// Where log output goes (shared by the text and json formats).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct OutputRoutingOptions {
    /// Info messages to stdout, errors to stderr (alpha, `LoggingAlphaOptions`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub split_stream: bool,
    /// Buffer size of the info stream when split, as a quantity; `""` when unset.
    #[serde(deserialize_with = "deserialize_quantity_string", skip_serializing_if = "String::is_empty")]
    pub info_buffer_size: String,
}

/// A duration written either as a Go duration string or as integer nanoseconds
/// (component-base `TimeOrMetaDuration`); it is written back in the form it was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeOrMetaDuration {
    /// The duration.
    pub duration: Duration,
    /// Whether it serializes as a string (`"5s"`) rather than nanoseconds.
    pub serialize_as_string: bool,
}

impl Serialize for TimeOrMetaDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.serialize_as_string {
            self.duration.serialize(serializer)
        } else {
            let nanos = u64::try_from(self.duration.as_std().as_nanos()).unwrap_or(u64::MAX);
            serializer.serialize_u64(nanos)
        }
    }
}

struct TimeOrMetaDurationVisitor;

impl Visitor<'_> for TimeOrMetaDurationVisitor {
    type Value = TimeOrMetaDuration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string like \"5s\" or integer nanoseconds")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(TimeOrMetaDuration { duration: Duration::parse(v).map_err(E::custom)?, serialize_as_string: true })
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(TimeOrMetaDuration { duration: Duration(std::time::Duration::from_nanos(v)), serialize_as_string: false })
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format_args!("invalid duration \"{v}\": negative durations are not supported")))
            .and_then(|v| self.visit_u64(v))
    }
}

impl<'de> Deserialize<'de> for TimeOrMetaDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TimeOrMetaDurationVisitor)
    }
}
