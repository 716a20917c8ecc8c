//! Defaulting of a [`KubeletConfiguration`].
//!
//! Mirrors `SetDefaults_KubeletConfiguration` in
//! `pkg/kubelet/apis/config/v1beta1/defaults.go` (with `SetRecommendedLoggingConfiguration`
//! from `staging/src/k8s.io/component-base/logs/api/v1/options.go`), and the `evictionHard`
//! defaulting that upstream does when loading the file (`loadConfigFile` in
//! `cmd/kubelet/app/server.go`, `DefaultEvictionHard` in
//! `pkg/kubelet/eviction/defaults_linux.go`).

use std::collections::BTreeMap;

use super::duration::Duration;
use super::gates;
use super::nested::{
    CONTAINER_TOPOLOGY_MANAGER_SCOPE, KUBELET_AUTHORIZATION_MODE_WEBHOOK, NEVER_VERIFY_PRELOADED_IMAGES,
    NONE_MEMORY_MANAGER_POLICY, NONE_MEMORY_RESERVATION_POLICY, NONE_TOPOLOGY_MANAGER_POLICY, OutputRoutingOptions,
    PROMISCUOUS_BRIDGE, WATCH_CHANGE_DETECTION_STRATEGY, enforcement,
};
use super::types::KubeletConfiguration;

/// Default port of the kubelet's secured server (`ports.KubeletPort`).
pub const DEFAULT_PORT: i32 = 10250;
/// Default port of the healthz endpoint (`ports.KubeletHealthzPort`).
pub const DEFAULT_HEALTHZ_PORT: i32 = 10248;
/// OOM score adjustment of the kubelet (`qos.KubeletOOMScoreAdj`).
pub const DEFAULT_OOM_SCORE_ADJ: i32 = -999;
/// Default `iptablesMasqueradeBit`.
pub const DEFAULT_IPTABLES_MASQUERADE_BIT: i32 = 14;
/// Default `iptablesDropBit`.
pub const DEFAULT_IPTABLES_DROP_BIT: i32 = 15;
/// Default `volumePluginDir`.
pub const DEFAULT_VOLUME_PLUGIN_DIR: &str = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/";
/// Default `podLogsDir`.
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
/// Default `resolvConf` (`kubetypes.ResolvConfDefault`).
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// Default `memoryThrottlingFactor`.
pub const DEFAULT_MEMORY_THROTTLING_FACTOR: f64 = 0.9;
/// Default `containerRuntimeEndpoint`.
pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
/// Maximum container restart back-off (`MaxContainerBackOff`).
pub const MAX_CONTAINER_BACK_OFF: Duration = Duration::from_secs(300);
/// Default log flush frequency (`logsapi.LogFlushFreqDefault`).
pub const DEFAULT_LOG_FLUSH_FREQUENCY: Duration = Duration::from_secs(5);
/// Hard eviction thresholds applied on Linux when `evictionHard` is unset.
pub const DEFAULT_EVICTION_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// Sets `field` to `value` when it is zero (upstream's `== zeroDuration` checks).
fn default_duration(field: &mut Duration, value: Duration) {
    if field.is_zero() {
        *field = value;
    }
}

fn default_str(field: &mut String, value: &str) {
    if field.is_empty() {
        *field = value.to_string();
    }
}

fn default_i32(field: &mut i32, value: i32) {
    if *field == 0 {
        *field = value;
    }
}

/// `setRecommendedOutputRouting`: an unset `infoBufferSize` becomes `"0"`.
fn default_output_routing(options: &mut OutputRoutingOptions) {
    default_str(&mut options.info_buffer_size, "0");
}

impl KubeletConfiguration {
    /// Fills unset fields with upstream's defaults, like `SetDefaults_KubeletConfiguration`.
    ///
    /// Two defaults of upstream depend on feature gates whose default this crate does not
    /// know: `crashLoopBackOff.maxContainerRestartPeriod` (`KubeletCrashLoopBackOffMax`) and
    /// `imagePullCredentialsVerificationPolicy` (`KubeletEnsureSecretPulledImages`) are set
    /// only when the gate is enabled in `featureGates`. `evictionHard` is not defaulted
    /// here, as upstream's `SetDefaults_KubeletConfiguration` does not do it either; see
    /// [`apply_default_eviction_hard`](Self::apply_default_eviction_hard).
    pub fn set_defaults(&mut self) {
        self.enable_server.get_or_insert(true);
        default_duration(&mut self.sync_frequency, Duration::from_mins(1));
        default_duration(&mut self.file_check_frequency, Duration::from_secs(20));
        default_duration(&mut self.http_check_frequency, Duration::from_secs(20));
        default_str(&mut self.address, "0.0.0.0");
        default_i32(&mut self.port, DEFAULT_PORT);

        let authn = &mut self.authentication;
        authn.anonymous.enabled.get_or_insert(false);
        authn.webhook.enabled.get_or_insert(true);
        default_duration(&mut authn.webhook.cache_ttl, Duration::from_mins(2));
        let authz = &mut self.authorization;
        default_str(&mut authz.mode, KUBELET_AUTHORIZATION_MODE_WEBHOOK);
        default_duration(&mut authz.webhook.cache_authorized_ttl, Duration::from_mins(5));
        default_duration(&mut authz.webhook.cache_unauthorized_ttl, Duration::from_secs(30));

        self.registry_pull_qps.get_or_insert(5);
        default_i32(&mut self.registry_burst, 10);
        self.event_record_qps.get_or_insert(50);
        default_i32(&mut self.event_burst, 100);
        self.enable_debugging_handlers.get_or_insert(true);
        self.healthz_port.get_or_insert(DEFAULT_HEALTHZ_PORT);
        default_str(&mut self.healthz_bind_address, "127.0.0.1");
        self.oom_score_adj.get_or_insert(DEFAULT_OOM_SCORE_ADJ);
        default_duration(&mut self.streaming_connection_idle_timeout, Duration::from_hours(4));
        if self.node_status_report_frequency.is_zero() {
            // For backward compatibility an explicit nodeStatusUpdateFrequency is also the
            // default report frequency.
            self.node_status_report_frequency = if self.node_status_update_frequency.is_zero() {
                Duration::from_mins(5)
            } else {
                self.node_status_update_frequency
            };
        }
        default_duration(&mut self.node_status_update_frequency, Duration::from_secs(10));
        default_i32(&mut self.node_lease_duration_seconds, 40);
        default_duration(&mut self.image_minimum_gc_age, Duration::from_mins(2));
        self.image_gc_high_threshold_percent.get_or_insert(85);
        self.image_gc_low_threshold_percent.get_or_insert(80);
        default_duration(&mut self.volume_stats_agg_period, Duration::from_mins(1));
        self.cgroups_per_qos.get_or_insert(true);
        default_str(&mut self.cgroup_driver, "cgroupfs");
        default_str(&mut self.cpu_manager_policy, "none");
        default_duration(&mut self.cpu_manager_reconcile_period, Duration::from_secs(10));
        default_duration(&mut self.dra_manager_reconcile_period, Duration::from_secs(60));
        default_str(&mut self.memory_manager_policy, NONE_MEMORY_MANAGER_POLICY);
        default_str(&mut self.topology_manager_policy, NONE_TOPOLOGY_MANAGER_POLICY);
        default_str(&mut self.topology_manager_scope, CONTAINER_TOPOLOGY_MANAGER_SCOPE);
        default_duration(&mut self.runtime_request_timeout, Duration::from_mins(2));
        default_str(&mut self.hairpin_mode, PROMISCUOUS_BRIDGE);
        default_i32(&mut self.max_pods, 110);
        // Unset or negative means the node allocatable PID limit.
        if self.pod_pids_limit.is_none_or(|limit| limit < 0) {
            self.pod_pids_limit = Some(-1);
        }
        self.resolver_config.get_or_insert_with(|| DEFAULT_RESOLV_CONF.to_string());
        self.cpu_cfs_quota.get_or_insert(true);
        self.cpu_cfs_quota_period.get_or_insert(Duration::from_millis(100));
        self.node_status_max_images.get_or_insert(50);
        if self.max_open_files == 0 {
            self.max_open_files = 1_000_000;
        }
        default_str(&mut self.content_type, "application/vnd.kubernetes.protobuf");
        self.kube_api_qps.get_or_insert(50);
        default_i32(&mut self.kube_api_burst, 100);
        if self.serialize_image_pulls.is_none() {
            // Parallel pulls requested through maxParallelImagePulls >= 2 turn serial
            // pulls off, so users need not set both.
            let parallel = self.max_parallel_image_pulls.is_some_and(|max| max >= 2);
            self.serialize_image_pulls = Some(!parallel);
        }
        default_duration(&mut self.eviction_pressure_transition_period, Duration::from_mins(5));
        self.merge_default_eviction_settings.get_or_insert(false);
        self.enable_controller_attach_detach.get_or_insert(true);
        self.make_iptables_util_chains.get_or_insert(true);
        self.iptables_masquerade_bit.get_or_insert(DEFAULT_IPTABLES_MASQUERADE_BIT);
        self.iptables_drop_bit.get_or_insert(DEFAULT_IPTABLES_DROP_BIT);
        self.fail_swap_on.get_or_insert(true);
        default_str(&mut self.container_log_max_size, "10Mi");
        self.container_log_max_files.get_or_insert(5);
        self.container_log_max_workers.get_or_insert(1);
        self.container_log_monitor_interval.get_or_insert(Duration::from_secs(10));
        default_str(&mut self.config_map_and_secret_change_detection_strategy, WATCH_CHANGE_DETECTION_STRATEGY);
        self.enforce_node_allocatable.get_or_insert_with(|| vec![enforcement::PODS.to_string()]);
        default_str(&mut self.volume_plugin_dir, DEFAULT_VOLUME_PLUGIN_DIR);
        self.set_recommended_logging_configuration();
        self.enable_system_log_handler.get_or_insert(true);
        self.enable_profiling_handler.get_or_insert(true);
        self.enable_debug_flags_handler.get_or_insert(true);
        self.seccomp_default.get_or_insert(false);
        self.fail_cgroup_v1.get_or_insert(true);
        self.memory_throttling_factor.get_or_insert(DEFAULT_MEMORY_THROTTLING_FACTOR);
        default_str(&mut self.memory_reservation_policy, NONE_MEMORY_RESERVATION_POLICY);
        self.register_node.get_or_insert(true);
        self.local_storage_capacity_isolation.get_or_insert(true);
        default_str(&mut self.container_runtime_endpoint, DEFAULT_CONTAINER_RUNTIME_ENDPOINT);
        default_str(&mut self.pod_logs_dir, DEFAULT_POD_LOGS_DIR);

        if self.feature_gate(gates::KUBELET_CRASH_LOOP_BACK_OFF_MAX) == Some(true) {
            self.crash_loop_back_off.max_container_restart_period.get_or_insert(MAX_CONTAINER_BACK_OFF);
        }
        if self.feature_gate(gates::KUBELET_ENSURE_SECRET_PULLED_IMAGES) == Some(true) {
            default_str(&mut self.image_pull_credentials_verification_policy, NEVER_VERIFY_PRELOADED_IMAGES);
        }
    }

    /// `SetRecommendedLoggingConfiguration` of component-base.
    fn set_recommended_logging_configuration(&mut self) {
        let logging = &mut self.logging;
        default_str(&mut logging.format, "text");
        if logging.flush_frequency.duration.is_zero() {
            logging.flush_frequency.duration = DEFAULT_LOG_FLUSH_FREQUENCY;
            logging.flush_frequency.serialize_as_string = true;
        }
        default_output_routing(&mut logging.options.text);
        default_output_routing(&mut logging.options.json);
    }

    /// Applies upstream's Linux hard eviction defaults, as `loadConfigFile` does after
    /// decoding: an unset `evictionHard` gets [`DEFAULT_EVICTION_HARD`]; a set one gets the
    /// missing signals merged in when `mergeDefaultEvictionSettings` is true, and is left
    /// alone otherwise (signals not listed are then disabled).
    pub fn apply_default_eviction_hard(&mut self) {
        let defaults = || DEFAULT_EVICTION_HARD.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        match &mut self.eviction_hard {
            None => self.eviction_hard = Some(defaults().collect::<BTreeMap<_, _>>()),
            Some(hard) if self.merge_default_eviction_settings == Some(true) => {
                for (signal, threshold) in defaults() {
                    hard.entry(signal).or_insert(threshold);
                }
            }
            Some(_) => {}
        }
    }
}
