//! The `KubeletConfiguration` type itself.
//!
//! Mirrors `staging/src/k8s.io/kubelet/config/v1beta1/types.go` field by field, in
//! upstream's order and with upstream's JSON names. Go pointer fields are `Option`s so that
//! defaulting can tell "unset" from a zero value; Go value fields are plain values whose
//! zero value means "unset" (as upstream's defaulting treats them). Field documentation is
//! condensed from upstream's; `Default:` gives the value `set_defaults` applies.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

use super::duration::Duration;
use super::nested::{
    CrashLoopBackOffConfig, HairpinMode, ImagePullCredentialsVerificationPolicy, KubeletAuthentication,
    KubeletAuthorization, LoggingConfiguration, MemoryReservation, MemoryReservationPolicy, MemorySwapConfiguration,
    ResourceChangeDetectionStrategy, ShutdownGracePeriodByPodPriority, TracingConfiguration, UserNamespaces,
};

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// The kubelet's configuration file, `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`.
///
/// Unknown fields are rejected when decoding (upstream's strict decoding).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// `kubelet.config.k8s.io/v1beta1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `KubeletConfiguration`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,

    /// Enables the kubelet's secured server. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_server: Option<bool>,
    /// Directory (or single file) of static pod manifests. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub static_pod_path: String,
    /// Root directory of pod log files. Default: `/var/log/pods`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pod_logs_dir: String,
    /// Max period between synchronizing running containers and config. Default: `1m`.
    pub sync_frequency: Duration,
    /// Period between checks of config files for new data. Default: `20s`.
    pub file_check_frequency: Duration,
    /// Period between checks of `staticPodURL` for new data. Default: `20s`.
    pub http_check_frequency: Duration,
    /// URL of static pods to run. Default: `""`.
    #[serde(rename = "staticPodURL", skip_serializing_if = "String::is_empty")]
    pub static_pod_url: String,
    /// HTTP headers used when fetching `staticPodURL`.
    #[serde(rename = "staticPodURLHeader", skip_serializing_if = "BTreeMap::is_empty")]
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    /// IP address to serve on. Default: `0.0.0.0`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Port of the secured server, 1-65535. Default: 10250.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub port: i32,
    /// Port of the unauthenticated read-only server; 0 disables it. Default: 0.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub read_only_port: i32,
    /// x509 serving certificate (CA certificates appended). Default: `""` (self-signed).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tls_cert_file: String,
    /// Private key matching `tlsCertFile`. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tls_private_key_file: String,
    /// Allowed TLS cipher suites (Go `crypto/tls` names). Default: Go's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tls_cipher_suites: Vec<String>,
    /// Allowed key exchange mechanisms as numeric Go `tls.CurveID`s. Default: Go's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tls_curve_preferences: Vec<i32>,
    /// Minimum TLS version (Go `crypto/tls` name). Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tls_min_version: String,
    /// Rotates the client certificate through the certificates API. Default: false.
    #[serde(skip_serializing_if = "is_false")]
    pub rotate_certificates: bool,
    /// Requests the serving certificate through the certificates API. Default: false.
    #[serde(rename = "serverTLSBootstrap", skip_serializing_if = "is_false")]
    pub server_tls_bootstrap: bool,
    /// How requests to the server are authenticated.
    pub authentication: KubeletAuthentication,
    /// How requests to the server are authorized.
    pub authorization: KubeletAuthorization,
    /// Registry pulls per second; 0 means no limit. Default: 5.
    #[serde(rename = "registryPullQPS", skip_serializing_if = "Option::is_none")]
    pub registry_pull_qps: Option<i32>,
    /// Burst of registry pulls. Default: 10.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub registry_burst: i32,
    /// How pull credentials of images already on the node are re-verified.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_pull_credentials_verification_policy: ImagePullCredentialsVerificationPolicy,
    /// Images exempt from re-verification under `NeverVerifyAllowlistedImages`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preloaded_images_verification_allowlist: Vec<String>,
    /// Event creations per second; 0 means no limit. Default: 50.
    #[serde(rename = "eventRecordQPS", skip_serializing_if = "Option::is_none")]
    pub event_record_qps: Option<i32>,
    /// Burst of event creations. Default: 100.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub event_burst: i32,
    /// Enables log, exec, attach and port-forward endpoints. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_debugging_handlers: Option<bool>,
    /// Enables block profiling. Default: false.
    #[serde(skip_serializing_if = "is_false")]
    pub enable_contention_profiling: bool,
    /// Port of the localhost healthz endpoint; 0 disables it. Default: 10248.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthz_port: Option<i32>,
    /// Address of the healthz server. Default: `127.0.0.1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub healthz_bind_address: String,
    /// oom_score_adj of the kubelet process, -1000..1000. Default: -999.
    #[serde(rename = "oomScoreAdj", skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
    /// DNS domain of the cluster. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cluster_domain: String,
    /// IP addresses of the cluster DNS servers.
    #[serde(rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Deprecated, no effect. Default: `4h`.
    pub streaming_connection_idle_timeout: Duration,
    /// How often node status is computed. Default: `10s`.
    pub node_status_update_frequency: Duration,
    /// How often unchanged node status is posted. Default: `5m`, or
    /// `nodeStatusUpdateFrequency` when that is set.
    pub node_status_report_frequency: Duration,
    /// Duration of the node's Lease, in seconds. Default: 40.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub node_lease_duration_seconds: i32,
    /// Minimum age of an unused image before garbage collection. Default: `2m`.
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Duration,
    /// Maximum age of an unused image before garbage collection; 0 disables. Default: `0s`.
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Duration,
    /// Disk usage percent above which image GC always runs. Default: 85.
    #[serde(rename = "imageGCHighThresholdPercent", skip_serializing_if = "Option::is_none")]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent image GC frees down to. Default: 80.
    #[serde(rename = "imageGCLowThresholdPercent", skip_serializing_if = "Option::is_none")]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Period of volume disk usage calculation. Default: `1m`.
    pub volume_stats_agg_period: Duration,
    /// Absolute cgroup to isolate the kubelet in. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kubelet_cgroups: String,
    /// Absolute cgroup for non-kernel processes not in a container. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system_cgroups: String,
    /// Root cgroup of pods. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_root: String,
    /// Enables the QoS-class cgroup hierarchy. Default: true.
    #[serde(rename = "cgroupsPerQOS", skip_serializing_if = "Option::is_none")]
    pub cgroups_per_qos: Option<bool>,
    /// `cgroupfs` or `systemd`. Default: `cgroupfs`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cgroup_driver: String,
    /// CPU manager policy. Default: `none`.
    #[serde(rename = "cpuManagerPolicy", skip_serializing_if = "String::is_empty")]
    pub cpu_manager_policy: String,
    /// OOM-kill container processes individually on cgroup v2. Default: decided at run time.
    #[serde(rename = "singleProcessOOMKill", skip_serializing_if = "Option::is_none")]
    pub single_process_oom_kill: Option<bool>,
    /// Options of the CPU manager policy.
    #[serde(rename = "cpuManagerPolicyOptions", skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    /// Reconciliation period of the CPU manager. Default: `10s`.
    #[serde(rename = "cpuManagerReconcilePeriod")]
    pub cpu_manager_reconcile_period: Duration,
    /// Reconciliation period of the DRA manager. Default: `1m`.
    #[serde(rename = "draManagerReconcilePeriod")]
    pub dra_manager_reconcile_period: Duration,
    /// `None` or `Static`. Default: `None`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_manager_policy: String,
    /// `none`, `best-effort`, `restricted` or `single-numa-node`. Default: `none`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_manager_policy: String,
    /// `container` or `pod`. Default: `container`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub topology_manager_scope: String,
    /// Options of the topology manager policy.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub topology_manager_policy_options: BTreeMap<String, String>,
    /// Percentages of resources reserved for the Guaranteed QoS tier (`memory`).
    #[serde(rename = "qosReserved", skip_serializing_if = "BTreeMap::is_empty")]
    pub qos_reserved: BTreeMap<String, String>,
    /// Timeout of runtime requests other than pull, logs, exec and attach. Default: `2m`.
    pub runtime_request_timeout: Duration,
    /// `promiscuous-bridge`, `hairpin-veth` or `none`. Default: `promiscuous-bridge`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hairpin_mode: HairpinMode,
    /// Maximum number of pods. Default: 110.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub max_pods: i32,
    /// Pod IP range in standalone mode. Default: `""`.
    #[serde(rename = "podCIDR", skip_serializing_if = "String::is_empty")]
    pub pod_cidr: String,
    /// Maximum PIDs per pod; negative means the node's allocatable. Default: -1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_pids_limit: Option<i64>,
    /// resolv.conf used for container DNS; `""` disables DNS. Default: `/etc/resolv.conf`.
    #[serde(rename = "resolvConf", skip_serializing_if = "Option::is_none")]
    pub resolver_config: Option<String>,
    /// Deprecated run-once mode; rejected by validation. Default: false.
    #[serde(skip_serializing_if = "is_false")]
    pub run_once: bool,
    /// Enforces CPU CFS quota for containers with CPU limits. Default: true.
    #[serde(rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota: Option<bool>,
    /// `cpu.cfs_period_us`, 1ms..1s (feature `CustomCPUCFSQuotaPeriod`). Default: `100ms`.
    #[serde(rename = "cpuCFSQuotaPeriod", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota_period: Option<Duration>,
    /// Cap on images in `Node.status.images`; -1 for none. Default: 50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_status_max_images: Option<i32>,
    /// Files the kubelet process may open. Default: 1000000.
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub max_open_files: i64,
    /// Content type of requests to the API server.
    /// Default: `application/vnd.kubernetes.protobuf`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    /// QPS towards the API server. Default: 50.
    #[serde(rename = "kubeAPIQPS", skip_serializing_if = "Option::is_none")]
    pub kube_api_qps: Option<i32>,
    /// Burst towards the API server. Default: 100.
    #[serde(rename = "kubeAPIBurst", skip_serializing_if = "is_zero_i32")]
    pub kube_api_burst: i32,
    /// Pulls images one at a time. Default: true unless `maxParallelImagePulls` >= 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serialize_image_pulls: Option<bool>,
    /// Maximum parallel image pulls; unset means no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_image_pulls: Option<i32>,
    /// Hard eviction thresholds by signal. Unset (not empty) gets upstream's defaults when
    /// loaded from a file, see `apply_default_eviction_hard`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods of the soft eviction thresholds.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Wait before leaving an eviction pressure condition. Default: `5m`.
    pub eviction_pressure_transition_period: Duration,
    /// Cap on pod grace periods in soft evictions, in seconds. Default: 0.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub eviction_max_pod_grace_period: i32,
    /// Minimum reclaims by signal.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// Merges upstream's `evictionHard` defaults into a partial `evictionHard`. Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_default_eviction_settings: Option<bool>,
    /// Maximum pods per core; 0 means no limit. Default: 0.
    #[serde(skip_serializing_if = "is_zero_i32")]
    pub pods_per_core: i32,
    /// Lets the attach/detach controller manage this node's volumes. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_controller_attach_detach: Option<bool>,
    /// Fails when kernel tunables differ from the kubelet's expectations. Default: false.
    #[serde(skip_serializing_if = "is_false")]
    pub protect_kernel_defaults: bool,
    /// Creates the `KUBE-IPTABLES-HINT` chain. Default: true.
    #[serde(rename = "makeIPTablesUtilChains", skip_serializing_if = "Option::is_none")]
    pub make_iptables_util_chains: Option<bool>,
    /// Deprecated, no effect. Default: 14.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iptables_masquerade_bit: Option<i32>,
    /// Deprecated, no effect. Default: 15.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iptables_drop_bit: Option<i32>,
    /// Feature gates to switch on or off.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// Fails to start when swap is enabled. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_swap_on: Option<bool>,
    /// Swap available to workloads.
    pub memory_swap: MemorySwapConfiguration,
    /// Size of a container log file before rotation (a quantity). Default: `10Mi`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub container_log_max_size: String,
    /// Maximum log files per container. Default: 5.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_max_files: Option<i32>,
    /// Concurrent log rotation workers. Default: 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_max_workers: Option<i32>,
    /// Period of container log monitoring for rotation. Default: `10s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_log_monitor_interval: Option<Duration>,
    /// `Get`, `Cache` or `Watch`. Default: `Watch`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub config_map_and_secret_change_detection_strategy: ResourceChangeDetectionStrategy,
    /// Resources reserved for non-Kubernetes components (quantities by resource).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes system components (quantities by resource).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    /// CPU list reserved for system and Kubernetes threads.
    #[serde(rename = "reservedSystemCPUs", skip_serializing_if = "String::is_empty")]
    pub reserved_system_cpus: String,
    /// Previous minor version (`1.35`) whose hidden metrics are shown. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub show_hidden_metrics_for_version: String,
    /// Absolute top-level cgroup enforcing `systemReserved`. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system_reserved_cgroup: String,
    /// Absolute top-level cgroup enforcing `kubeReserved`. Default: `""`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kube_reserved_cgroup: String,
    /// Node allocatable enforcements. Unset (not empty) defaults to `["pods"]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforce_node_allocatable: Option<Vec<String>>,
    /// Allowed unsafe sysctls or patterns ending in `*`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Directory of third-party volume plugins.
    /// Default: `/usr/libexec/kubernetes/kubelet-plugins/volume/exec/`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub volume_plugin_dir: String,
    /// Unique ID of the instance for the cloud provider. Default: `""`.
    #[serde(rename = "providerID", skip_serializing_if = "String::is_empty")]
    pub provider_id: String,
    /// Uses kernel memcg notifications for memory eviction. Default: false.
    #[serde(skip_serializing_if = "is_false")]
    pub kernel_memcg_notification: bool,
    /// Logging options. Default: format `text`, flush frequency `5s`.
    pub logging: LoggingConfiguration,
    /// Serves system logs at `/logs/`. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_system_log_handler: Option<bool>,
    /// Enables node log queries on `/logs` (feature `NodeLogQuery`). Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_system_log_query: Option<bool>,
    /// Total delay of a node shutdown for pod termination. Default: `0s`.
    pub shutdown_grace_period: Duration,
    /// Part of `shutdownGracePeriod` reserved for critical pods. Default: `0s`.
    pub shutdown_grace_period_critical_pods: Duration,
    /// Shutdown grace periods by pod priority.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    /// Container restart back-off parameters.
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    /// Memory reserved per NUMA node for the memory manager.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reserved_memory: Vec<MemoryReservation>,
    /// Serves profiling at `/debug/pprof/`. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_profiling_handler: Option<bool>,
    /// Serves `/debug/flags/v`. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_debug_flags_handler: Option<bool>,
    /// Uses `RuntimeDefault` as the default seccomp profile. Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp_default: Option<bool>,
    /// Factor for cgroup v2 `memory.high` (feature `MemoryQoS`). Default: 0.9.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_throttling_factor: Option<f64>,
    /// `None` or `TieredReservation` (feature `MemoryQoS`). Default: `None`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub memory_reservation_policy: MemoryReservationPolicy,
    /// Taints added when the node registers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub register_with_taints: Vec<Taint>,
    /// Registers the node with the API server. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub register_node: Option<bool>,
    /// OpenTelemetry tracing settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfiguration>,
    /// Enables local ephemeral storage isolation. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_storage_capacity_isolation: Option<bool>,
    /// CRI runtime endpoint. Default: `unix:///run/containerd/containerd.sock`.
    pub container_runtime_endpoint: String,
    /// CRI image service endpoint; `containerRuntimeEndpoint` when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image_service_endpoint: String,
    /// Refuses to start on cgroup v1 hosts. Default: true.
    #[serde(rename = "failCgroupV1", skip_serializing_if = "Option::is_none")]
    pub fail_cgroup_v1: Option<bool>,
    /// User namespace settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_namespaces: Option<UserNamespaces>,
}
