//! Validation of a [`KubeletConfiguration`].
//!
//! Mirrors `ValidateKubeletConfiguration` in
//! `pkg/kubelet/apis/config/validation/validation.go`, with
//! `validation_reserved_memory.go`; the component-base parts (`logging`, `tracing`) are in
//! `validation_components.rs`. Every failed check is collected. Messages keep
//! upstream's wording (lower-cased) and name the field, its flag where upstream does, and
//! the offending value.
//!
//! Differences from upstream:
//! - the feature gate errors (unknown, locked, dependencies) are upstream's `SetFromMap` errors, without the
//!   `invalid configuration: ` prefix, and returned alone as upstream returns early;
//! - the host checks of `validation_linux.go` (`failCgroupV1` and `singleProcessOOMKill`
//!   on a cgroup v1 host) are left to the code that inspects the host;
//! - `showHiddenMetricsForVersion` is only checked to have the form `<major>.<minor>`,
//!   since the previous minor version depends on the binary's version;
//! - negative durations cannot occur: [`Duration`](super::Duration) rejects them when parsed;
//! - rkubelet addition: `cgroupDriver` must be `cgroupfs` or `systemd`.

use std::fmt;
use std::time::Duration as StdDuration;

use super::checks::{allowlist_pattern_error, check_taint, clean_path, is_valid_port, parse_cpu_set};
use super::gates;
use super::nested::{
    ALWAYS_VERIFY, BEST_EFFORT_TOPOLOGY_MANAGER_POLICY, CGROUP_DRIVER_CGROUPFS, CGROUP_DRIVER_SYSTEMD,
    CONTAINER_TOPOLOGY_MANAGER_SCOPE, GET_CHANGE_DETECTION_STRATEGY, HAIRPIN_NONE, HAIRPIN_VETH, LIMITED_SWAP,
    NEVER_VERIFY, NEVER_VERIFY_ALLOWLISTED_IMAGES, NEVER_VERIFY_PRELOADED_IMAGES, NO_SWAP,
    NONE_MEMORY_RESERVATION_POLICY, NONE_TOPOLOGY_MANAGER_POLICY, POD_TOPOLOGY_MANAGER_SCOPE, PROMISCUOUS_BRIDGE,
    RESTRICTED_TOPOLOGY_MANAGER_POLICY, SINGLE_NUMA_NODE_TOPOLOGY_MANAGER_POLICY,
    TIERED_RESERVATION_MEMORY_RESERVATION_POLICY, TTL_CACHE_CHANGE_DETECTION_STRATEGY, WATCH_CHANGE_DETECTION_STRATEGY,
    enforcement,
};
use super::quantity::quantity_is_zero;
use super::types::KubeletConfiguration;
use super::{ConfigError, Duration};

/// One failed validation check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    /// The field path the check concerns, such as `imageGCLowThresholdPercent` or
    /// `registerWithTaints[0]`.
    pub field: String,
    /// The whole message, starting with `invalid configuration: `.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Collects failed checks.
#[derive(Default)]
pub(super) struct Errors(Vec<ValidationError>);

impl Errors {
    pub(super) fn add(&mut self, field: impl Into<String>, message: impl fmt::Display) {
        self.0.push(ValidationError { field: field.into(), message: format!("invalid configuration: {message}") });
    }
}

/// Go's `%q` of a list of strings: `["a" "b"]`.
fn quoted_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

impl KubeletConfiguration {
    /// Validates the configuration like upstream's `ValidateKubeletConfiguration`, reporting
    /// every failed check at once as [`ConfigError::Invalid`].
    ///
    /// Upstream validates the defaulted configuration, so call
    /// [`set_defaults`](Self::set_defaults) first ([`load_file`](super::load_file) does).
    /// Unset optional fields are checked as their zero value, as upstream's conversion to
    /// the internal type does.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let errors = self.validation_errors();
        if errors.is_empty() { Ok(()) } else { Err(ConfigError::Invalid { errors }) }
    }

    /// Every failed validation check; empty when the configuration is valid.
    pub fn validation_errors(&self) -> Vec<ValidationError> {
        // Upstream applies `featureGates` first and returns its errors alone.
        let gate_errors = gates::gate_errors(&self.feature_gates);
        if !gate_errors.is_empty() {
            let field = |message: &str| match message.split_whitespace().find(|w| self.feature_gates.contains_key(*w)) {
                Some(gate) => format!("featureGates.{gate}"),
                None => "featureGates".to_string(),
            };
            return gate_errors
                .into_iter()
                .map(|message| ValidationError { field: field(&message), message })
                .collect();
        }
        let mut errs = Errors::default();
        self.validate_general(&mut errs);
        self.validate_images(&mut errs);
        self.validate_limits(&mut errs);
        self.validate_taints(&mut errs);
        self.validate_managers(&mut errs);
        self.validate_shutdown_and_swap(&mut errs);
        self.validate_node_allocatable(&mut errs);
        self.validate_pull_credentials(&mut errs);
        self.validate_reserved(&mut errs);
        self.validate_logging(&mut errs);
        self.validate_tracing(&mut errs);
        self.validate_memory_qos(&mut errs);
        self.validate_runtime_and_logs(&mut errs);
        errs.0
    }

    fn validate_general(&self, errs: &mut Errors) {
        if self.node_lease_duration_seconds <= 0 {
            errs.add(
                "nodeLeaseDurationSeconds",
                format_args!(
                    "nodeLeaseDurationSeconds (--node-lease-duration-seconds) {} must be greater than 0",
                    self.node_lease_duration_seconds
                ),
            );
        }
        if !self.system_cgroups.is_empty() && self.cgroup_root.is_empty() {
            errs.add("systemCgroups", format_args!(
                "systemCgroups (--system-cgroups) {:?} was specified and cgroupRoot (--cgroup-root) was not specified",
                self.system_cgroups
            ));
        }
        let healthz_port = self.healthz_port.unwrap_or(0);
        if healthz_port != 0 && !is_valid_port(healthz_port) {
            errs.add(
                "healthzPort",
                format_args!("healthzPort (--healthz-port) {healthz_port} must be between 1 and 65535, inclusive"),
            );
        }
        if !is_valid_port(self.port) {
            errs.add("port", format_args!("port (--port) {} must be between 1 and 65535, inclusive", self.port));
        }
        if self.read_only_port != 0 && !is_valid_port(self.read_only_port) {
            errs.add(
                "readOnlyPort",
                format_args!(
                    "readOnlyPort (--read-only-port) {} must be between 0 and 65535, inclusive",
                    self.read_only_port
                ),
            );
        }
        let oom_score_adj = self.oom_score_adj.unwrap_or(0);
        if !(-1000..=1000).contains(&oom_score_adj) {
            errs.add(
                "oomScoreAdj",
                format_args!("oomScoreAdj (--oom-score-adj) {oom_score_adj} must be between -1000 and 1000, inclusive"),
            );
        }
        let gate = self.feature_gate(gates::CUSTOM_CPU_CFS_QUOTA_PERIOD);
        let period = self.cpu_cfs_quota_period.unwrap_or(Duration::ZERO);
        if gate == Some(false) && period != Duration::from_millis(100) {
            errs.add(
                "cpuCFSQuotaPeriod",
                format_args!(
                    "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {period} requires feature gate CustomCPUCFSQuotaPeriod"
                ),
            );
        }
        let allowed = StdDuration::from_millis(1)..=StdDuration::from_secs(1);
        if gate == Some(true) && !allowed.contains(&period.as_std()) {
            errs.add(
                "cpuCFSQuotaPeriod",
                format_args!(
                    "cpuCFSQuotaPeriod (--cpu-cfs-quota-period) {period} must be between 1ms and 1sec, inclusive"
                ),
            );
        }
        if self.server_tls_bootstrap && self.feature_gate(gates::ROTATE_KUBELET_SERVER_CERTIFICATE) == Some(false) {
            errs.add(
                "serverTLSBootstrap",
                "serverTLSBootstrap true requires feature gate RotateKubeletServerCertificate",
            );
        }
        if self.run_once {
            errs.add("runOnce", "runOnce (--runonce) true, run-once mode has been deprecated and should not be set");
        }
        // rkubelet addition: upstream silently treats anything but "systemd" as cgroupfs.
        if ![CGROUP_DRIVER_CGROUPFS, CGROUP_DRIVER_SYSTEMD].contains(&self.cgroup_driver.as_str()) {
            errs.add(
                "cgroupDriver",
                format_args!(
                    "option {:?} specified for cgroupDriver (--cgroup-driver). valid options are {:?} or {:?}",
                    self.cgroup_driver, CGROUP_DRIVER_CGROUPFS, CGROUP_DRIVER_SYSTEMD
                ),
            );
        }
    }

    fn validate_images(&self, errs: &mut Errors) {
        let high = self.image_gc_high_threshold_percent.unwrap_or(0);
        let low = self.image_gc_low_threshold_percent.unwrap_or(0);
        if !(0..=100).contains(&high) {
            errs.add("imageGCHighThresholdPercent", format_args!(
                "imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"
            ));
        }
        if !(0..=100).contains(&low) {
            errs.add(
                "imageGCLowThresholdPercent",
                format_args!(
                    "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"
                ),
            );
        }
        if low >= high {
            errs.add("imageGCLowThresholdPercent", format_args!(
                "imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
            ));
        }
        let (min_age, max_age) = (self.image_minimum_gc_age, self.image_maximum_gc_age);
        if !max_age.is_zero() && self.feature_gate(gates::IMAGE_MAXIMUM_GC_AGE) == Some(false) {
            errs.add(
                "imageMaximumGCAge",
                format_args!("imageMaximumGCAge {max_age} requires feature gate ImageMaximumGCAge"),
            );
        }
        if !max_age.is_zero() && max_age <= min_age {
            errs.add(
                "imageMaximumGCAge",
                format_args!("imageMaximumGCAge {max_age} must be greater than imageMinimumGCAge {min_age}"),
            );
        }
        if self.dra_manager_reconcile_period.is_zero() {
            errs.add(
                "draManagerReconcilePeriod",
                format_args!(
                    "draManagerReconcilePeriod {} must be greater than zero",
                    self.dra_manager_reconcile_period
                ),
            );
        }
        let max_parallel = self.max_parallel_image_pulls;
        if let Some(max) = max_parallel.filter(|max| *max < 1) {
            errs.add("maxParallelImagePulls", format_args!("maxParallelImagePulls {max} must be a positive number"));
        }
        if self.serialize_image_pulls.unwrap_or(false)
            && let Some(max) = max_parallel.filter(|max| *max > 1)
        {
            errs.add("maxParallelImagePulls", format_args!(
                "maxParallelImagePulls {max} cannot be larger than 1 unless serializeImagePulls (--serialize-image-pulls) is set to false"
            ));
        }
    }

    fn validate_limits(&self, errs: &mut Errors) {
        let non_negative: [(&str, &str, i64); 9] = [
            ("eventBurst", "--event-burst", self.event_burst.into()),
            ("eventRecordQPS", "--event-qps", self.event_record_qps.unwrap_or(0).into()),
            ("kubeAPIBurst", "--kube-api-burst", self.kube_api_burst.into()),
            ("kubeAPIQPS", "--kube-api-qps", self.kube_api_qps.unwrap_or(0).into()),
            ("maxOpenFiles", "--max-open-files", self.max_open_files),
            ("maxPods", "--max-pods", self.max_pods.into()),
            ("podsPerCore", "--pods-per-core", self.pods_per_core.into()),
            ("registryBurst", "--registry-burst", self.registry_burst.into()),
            ("registryPullQPS", "--registry-qps", self.registry_pull_qps.unwrap_or(0).into()),
        ];
        for (field, flag, value) in non_negative {
            if value < 0 {
                errs.add(field, format_args!("{field} ({flag}) {value} must not be a negative number"));
            }
        }
        let bits = [
            ("iptablesDropBit", "--iptables-drop-bit", self.iptables_drop_bit),
            ("iptablesMasqueradeBit", "--iptables-masquerade-bit", self.iptables_masquerade_bit),
        ];
        for (field, flag, value) in bits {
            let value = value.unwrap_or(0);
            if !(0..=31).contains(&value) {
                errs.add(field, format_args!("{field} ({flag}) {value} must be between 0 and 31, inclusive"));
            }
        }
        let max_images = self.node_status_max_images.unwrap_or(0);
        if max_images < -1 {
            errs.add(
                "nodeStatusMaxImages",
                format_args!("nodeStatusMaxImages (--node-status-max-images) {max_images} must be -1 or greater"),
            );
        }
    }

    fn validate_taints(&self, errs: &mut Errors) {
        for (i, taint) in self.register_with_taints.iter().enumerate() {
            let field = format!("registerWithTaints[{i}]");
            if let Err(reason) = check_taint(taint) {
                let value = taint.value.as_deref().unwrap_or_default();
                errs.add(
                    &field,
                    format_args!("{field} invalid taint \"{}={value}:{}\": {reason}", taint.key, taint.effect),
                );
            }
            if taint.time_added.is_some() {
                errs.add(format!("{field}.timeAdded"), format_args!("{field}.timeAdded must not be set"));
            }
        }
    }

    fn validate_managers(&self, errs: &mut Errors) {
        let policies = [
            NONE_TOPOLOGY_MANAGER_POLICY,
            BEST_EFFORT_TOPOLOGY_MANAGER_POLICY,
            RESTRICTED_TOPOLOGY_MANAGER_POLICY,
            SINGLE_NUMA_NODE_TOPOLOGY_MANAGER_POLICY,
        ];
        if !policies.contains(&self.topology_manager_policy.as_str()) {
            errs.add(
                "topologyManagerPolicy",
                format_args!(
                    "topologyManagerPolicy (--topology-manager-policy) {:?} must be one of: {}",
                    self.topology_manager_policy,
                    quoted_list(&policies)
                ),
            );
        }
        let scopes = [CONTAINER_TOPOLOGY_MANAGER_SCOPE, POD_TOPOLOGY_MANAGER_SCOPE];
        if !scopes.contains(&self.topology_manager_scope.as_str()) {
            errs.add(
                "topologyManagerScope",
                format_args!(
                    "topologyManagerScope (--topology-manager-scope) {:?} must be one of: {:?}, or {:?}",
                    self.topology_manager_scope, scopes[0], scopes[1]
                ),
            );
        }
        let modes = [HAIRPIN_NONE, HAIRPIN_VETH, PROMISCUOUS_BRIDGE];
        if !modes.contains(&self.hairpin_mode.as_str()) {
            errs.add(
                "hairpinMode",
                format_args!(
                    "option {:?} specified for hairpinMode (--hairpin-mode). valid options are {:?}, {:?} or {:?}",
                    self.hairpin_mode, modes[0], modes[1], modes[2]
                ),
            );
        }
        // Upstream refuses it when the managers are built (`unknown configmap and secret manager mode`).
        let strategies =
            [WATCH_CHANGE_DETECTION_STRATEGY, TTL_CACHE_CHANGE_DETECTION_STRATEGY, GET_CHANGE_DETECTION_STRATEGY];
        let strategy = self.config_map_and_secret_change_detection_strategy.as_str();
        if !strategies.contains(&strategy) {
            errs.add(
                "configMapAndSecretChangeDetectionStrategy",
                format_args!(
                    "configMapAndSecretChangeDetectionStrategy: unknown configmap and secret manager mode: {strategy:?} \
                     (valid options are {:?}, {:?} or {:?})",
                    strategies[0], strategies[1], strategies[2]
                ),
            );
        }
        let crash_gate = self.feature_gate(gates::KUBELET_CRASH_LOOP_BACK_OFF_MAX);
        let max_restart = self.crash_loop_back_off.max_container_restart_period;
        let field = "crashLoopBackOff.maxContainerRestartPeriod";
        match (crash_gate, max_restart) {
            (Some(true), None) => errs.add(
                field,
                format_args!("{field} must be set when feature gate KubeletCrashLoopBackOffMax is enabled"),
            ),
            (Some(false), Some(period)) => errs.add(
                field,
                format_args!(
                    "{field} {period} must not be set when feature gate KubeletCrashLoopBackOffMax is not enabled"
                ),
            ),
            (_, Some(period)) if !(1_000..=300_000).contains(&period.as_std().as_millis()) => {
                errs.add(field, format_args!("{field} {period} must be set between 1s and 300s"));
            }
            _ => {}
        }
    }

    fn validate_shutdown_and_swap(&self, errs: &mut Errors) {
        let total = self.shutdown_grace_period;
        let critical = self.shutdown_grace_period_critical_pods;
        let below_one_second = |d: Duration| !d.is_zero() && d < Duration::from_secs(1);
        match self.feature_gate(gates::GRACEFUL_NODE_SHUTDOWN) {
            Some(true) => {
                if critical > total {
                    errs.add("shutdownGracePeriodCriticalPods", format_args!(
                        "shutdownGracePeriodCriticalPods {critical} must be <= shutdownGracePeriod {total}"
                    ));
                }
                if below_one_second(total) {
                    errs.add("shutdownGracePeriod", format_args!(
                        "shutdownGracePeriod {total} must be either zero or otherwise >= 1 sec"
                    ));
                }
                if below_one_second(critical) {
                    errs.add("shutdownGracePeriodCriticalPods", format_args!(
                        "shutdownGracePeriodCriticalPods {critical} must be either zero or otherwise >= 1 sec"
                    ));
                }
            }
            Some(false) if !total.is_zero() || !critical.is_zero() => errs.add(
                "shutdownGracePeriod",
                "specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown",
            ),
            _ => {}
        }
        let by_priority = !self.shutdown_grace_period_by_pod_priority.is_empty();
        match self.feature_gate(gates::GRACEFUL_NODE_SHUTDOWN_BASED_ON_POD_PRIORITY) {
            Some(true) if by_priority && (!total.is_zero() || !critical.is_zero()) => errs.add(
                "shutdownGracePeriodByPodPriority",
                "cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time",
            ),
            Some(false) if by_priority => errs.add(
                "shutdownGracePeriodByPodPriority",
                "specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority",
            ),
            _ => {}
        }
        let behavior = self.memory_swap.swap_behavior.as_str();
        match self.feature_gate(gates::NODE_SWAP) {
            Some(true) if !["", NO_SWAP, LIMITED_SWAP].contains(&behavior) => errs.add(
                "memorySwap.swapBehavior",
                format_args!(
                    "memorySwap.swapBehavior {behavior:?} must be one of: \"\", {LIMITED_SWAP:?} or {NO_SWAP:?}"
                ),
            ),
            Some(false) if !behavior.is_empty() => errs.add(
                "memorySwap.swapBehavior",
                format_args!(
                    "memorySwap.swapBehavior {behavior:?} cannot be set when NodeSwap feature flag is disabled"
                ),
            ),
            _ => {}
        }
    }

    fn validate_node_allocatable(&self, errs: &mut Errors) {
        let field = "enforceNodeAllocatable";
        let flag = "enforceNodeAllocatable (--enforce-node-allocatable)";
        let values = self.enforce_node_allocatable.as_deref().unwrap_or_default();
        let has = |key: &str| values.iter().any(|v| v == key);
        for (plain, compressible) in [
            (enforcement::SYSTEM_RESERVED, enforcement::SYSTEM_RESERVED_COMPRESSIBLE),
            (enforcement::KUBE_RESERVED, enforcement::KUBE_RESERVED_COMPRESSIBLE),
        ] {
            if has(plain) && has(compressible) {
                errs.add(
                    field,
                    format_args!("both {plain:?} and {compressible:?} cannot be specified together in {flag}"),
                );
            }
        }
        let cgroups_per_qos = self.cgroups_per_qos.unwrap_or(false);
        let mut seen: Vec<&str> = Vec::new();
        for value in values.iter().map(String::as_str) {
            if seen.contains(&value) {
                errs.add(field, format_args!("duplicated enforcements {value:?} in {flag}"));
                continue;
            }
            seen.push(value);
            match value {
                enforcement::PODS => {}
                enforcement::SYSTEM_RESERVED | enforcement::SYSTEM_RESERVED_COMPRESSIBLE => {
                    if self.system_reserved_cgroup.is_empty() {
                        errs.add("systemReservedCgroup", format_args!(
                            "systemReservedCgroup (--system-reserved-cgroup) must be specified when {:?} or {:?} included in {flag}",
                            enforcement::SYSTEM_RESERVED, enforcement::SYSTEM_RESERVED_COMPRESSIBLE
                        ));
                    }
                }
                enforcement::KUBE_RESERVED | enforcement::KUBE_RESERVED_COMPRESSIBLE => {
                    if self.kube_reserved_cgroup.is_empty() {
                        errs.add("kubeReservedCgroup", format_args!(
                            "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when {:?} or {:?} included in {flag}",
                            enforcement::KUBE_RESERVED, enforcement::KUBE_RESERVED_COMPRESSIBLE
                        ));
                    }
                }
                enforcement::NONE => {
                    if values.len() > 1 {
                        errs.add(
                            field,
                            format_args!(
                                "{flag} may not contain additional enforcements when {:?} is specified",
                                enforcement::NONE
                            ),
                        );
                    }
                    continue;
                }
                other => {
                    errs.add(field, format_args!(
                        "option {other:?} specified for {flag}. valid options are {:?}, {:?}, {:?}, {:?}, {:?} or {:?}",
                        enforcement::PODS, enforcement::SYSTEM_RESERVED,
                        enforcement::SYSTEM_RESERVED_COMPRESSIBLE, enforcement::KUBE_RESERVED,
                        enforcement::KUBE_RESERVED_COMPRESSIBLE, enforcement::NONE
                    ));
                    continue;
                }
            }
            if !cgroups_per_qos {
                errs.add(
                    "cgroupsPerQOS",
                    format_args!(
                        "cgroupsPerQOS (--cgroups-per-qos) must be set to true when {value:?} contained in {flag}"
                    ),
                );
            }
        }
    }

    fn validate_pull_credentials(&self, errs: &mut Errors) {
        let policy = self.image_pull_credentials_verification_policy.as_str();
        let allowlist = &self.preloaded_images_verification_allowlist;
        let policy_field = "imagePullCredentialsVerificationPolicy";
        let allowlist_field = "preloadedImagesVerificationAllowlist";
        let gate = self.feature_gate(gates::KUBELET_ENSURE_SECRET_PULLED_IMAGES);
        if gate == Some(false) {
            if !policy.is_empty() {
                errs.add(policy_field, format_args!(
                    "{policy_field} {policy:?} must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"
                ));
            }
            if !allowlist.is_empty() {
                errs.add(allowlist_field, format_args!(
                    "{allowlist_field} must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"
                ));
            }
            return;
        }
        // With the gate enabled, or unknown but the policy set (which only makes sense when
        // it is enabled), the policy must be one of the four.
        let policies = [NEVER_VERIFY, NEVER_VERIFY_PRELOADED_IMAGES, NEVER_VERIFY_ALLOWLISTED_IMAGES, ALWAYS_VERIFY];
        if (gate == Some(true) || !policy.is_empty()) && !policies.contains(&policy) {
            errs.add(
                policy_field,
                format_args!(
                    "option {policy:?} specified for {policy_field}. valid options are {:?}, {:?}, {:?} or {:?}",
                    policies[0], policies[1], policies[2], policies[3]
                ),
            );
        }
        if !allowlist.is_empty() && policy != NEVER_VERIFY_ALLOWLISTED_IMAGES {
            errs.add(
                allowlist_field,
                format_args!(
                    "can't set {allowlist_field} if {policy_field} is not {NEVER_VERIFY_ALLOWLISTED_IMAGES:?}"
                ),
            );
        } else if let Some(err) = allowlist.iter().find_map(|p| allowlist_pattern_error(p)) {
            errs.add(allowlist_field, format_args!("invalid image pattern in {allowlist_field}: {err}"));
        }
    }

    fn validate_reserved(&self, errs: &mut Errors) {
        let cpus = &self.reserved_system_cpus;
        if !cpus.is_empty() {
            if !self.system_reserved_cgroup.is_empty() || !self.kube_reserved_cgroup.is_empty() {
                errs.add("reservedSystemCPUs",
                    "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)");
            }
            if let Err(err) = parse_cpu_set(cpus) {
                errs.add(
                    "reservedSystemCPUs",
                    format_args!("unable to parse reservedSystemCPUs (--reserved-cpus) {cpus:?}, error: {err}"),
                );
            }
        }
        let mut seen: Vec<(i32, &str)> = Vec::new();
        for (i, reservation) in self.reserved_memory.iter().enumerate() {
            let node = reservation.numa_node;
            for (resource, quantity) in &reservation.limits {
                let field = format!("reservedMemory[{i}].limits.{resource}");
                if resource != "memory" && !resource.starts_with("hugepages-") {
                    errs.add(&field, format_args!(
                        "the limit type {resource:?} for NUMA node {node} is not supported, only [memory hugepages-<HugePageSize>] is accepted"
                    ));
                }
                if quantity_is_zero(&quantity.0).unwrap_or(false) {
                    errs.add(
                        &field,
                        format_args!("reserved memory may not be zero for NUMA node {node} and resource {resource:?}"),
                    );
                }
                if seen.contains(&(node, resource.as_str())) {
                    errs.add(
                        &field,
                        format_args!(
                            "the reserved memory has a duplicate value for NUMA node {node} and resource {resource:?}"
                        ),
                    );
                }
                seen.push((node, resource));
            }
        }
        let version = &self.show_hidden_metrics_for_version;
        let well_formed = version.split_once('.').is_some_and(|(major, minor)| {
            [major, minor].iter().all(|part| !part.is_empty() && part.bytes().all(|c| c.is_ascii_digit()))
        });
        if !version.is_empty() && !well_formed {
            errs.add("showHiddenMetricsForVersion", format_args!(
                "showHiddenMetricsForVersion (--show-hidden-metrics-for-version) {version:?} must be omitted or have the form <major>.<minor> of the previous minor version"
            ));
        }
    }

    fn validate_memory_qos(&self, errs: &mut Errors) {
        let memory_qos = self.feature_gate(gates::MEMORY_QOS);
        match self.memory_throttling_factor {
            None if memory_qos == Some(true) => errs.add(
                "memoryThrottlingFactor",
                "memoryThrottlingFactor is required when MemoryQoS feature flag is enabled",
            ),
            Some(factor) if factor <= 0.0 || factor > 1.0 => errs.add(
                "memoryThrottlingFactor",
                format_args!("memoryThrottlingFactor {factor} must be greater than 0 and less than or equal to 1.0"),
            ),
            _ => {}
        }
        let policy = self.memory_reservation_policy.as_str();
        if memory_qos == Some(false) && policy == TIERED_RESERVATION_MEMORY_RESERVATION_POLICY {
            errs.add(
                "memoryReservationPolicy",
                format_args!("memoryReservationPolicy {policy:?} requires MemoryQoS feature gate to be enabled"),
            );
        }
        let policies = [NONE_MEMORY_RESERVATION_POLICY, TIERED_RESERVATION_MEMORY_RESERVATION_POLICY];
        if !policies.contains(&policy) {
            errs.add(
                "memoryReservationPolicy",
                format_args!(
                    "option {policy:?} specified for memoryReservationPolicy. valid options are {:?} or {:?}",
                    policies[0], policies[1]
                ),
            );
        }
    }

    fn validate_runtime_and_logs(&self, errs: &mut Errors) {
        if self.container_runtime_endpoint.is_empty() {
            errs.add("containerRuntimeEndpoint", "the containerRuntimeEndpoint was not specified or empty");
        }
        if self.enable_system_log_query == Some(true) {
            if self.feature_gate(gates::NODE_LOG_QUERY) == Some(false) {
                errs.add("enableSystemLogQuery", "NodeLogQuery feature gate is required for enableSystemLogQuery");
            }
            if self.enable_system_log_handler != Some(true) {
                errs.add("enableSystemLogQuery", "enableSystemLogHandler is required for enableSystemLogQuery");
            }
        }
        let workers = self.container_log_max_workers.unwrap_or(0);
        if workers < 1 {
            errs.add(
                "containerLogMaxWorkers",
                format_args!("containerLogMaxWorkers {workers} must be greater than or equal to 1"),
            );
        }
        let interval = self.container_log_monitor_interval.unwrap_or(Duration::ZERO);
        if interval < Duration::from_secs(3) {
            errs.add("containerLogMonitorInterval", format_args!(
                "containerLogMonitorInterval {interval} must be a positive time duration greater than or equal to 3s"
            ));
        }
        let max_files = self.container_log_max_files.unwrap_or(0);
        if max_files <= 1 {
            errs.add("containerLogMaxFiles", format_args!("containerLogMaxFiles {max_files} must be greater than 1"));
        }
        let dir = self.pod_logs_dir.as_str();
        if dir.is_empty() {
            errs.add("podLogsDir", "podLogsDir was not specified");
        }
        if !dir.starts_with('/') {
            errs.add("podLogsDir", format_args!("pod logs path {dir:?} must be absolute path"));
        }
        if clean_path(dir) != dir {
            errs.add("podLogsDir", format_args!("pod logs path {dir:?} must be normalized"));
        }
        if !dir.is_ascii() {
            errs.add("podLogsDir", format_args!("pod logs path {dir:?} must contain ASCII characters only"));
        }
    }
}
