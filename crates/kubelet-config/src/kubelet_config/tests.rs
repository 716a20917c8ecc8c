//! Tests of loading, defaulting and validation.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn parse(body: &str) -> Result<KubeletConfiguration, ConfigError> {
    from_yaml_str(&format!("{HEADER}{body}"), "/etc/x.yaml")
}

fn parse_ok(body: &str) -> KubeletConfiguration {
    parse(body).unwrap_or_else(|e| panic!("{e}"))
}

fn defaulted(body: &str) -> KubeletConfiguration {
    let mut config = parse_ok(body);
    config.set_defaults();
    config
}

fn messages(config: &KubeletConfiguration) -> Vec<String> {
    config.validation_errors().into_iter().map(|e| e.message).collect()
}

#[test]
fn empty_config_gets_upstream_defaults() {
    let c = defaulted("");
    assert_eq!(c.enable_server, Some(true));
    assert_eq!(c.sync_frequency, Duration::from_mins(1));
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.http_check_frequency, Duration::from_secs(20));
    assert_eq!(c.address, "0.0.0.0");
    assert_eq!(c.port, 10250);
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.authentication.anonymous.enabled, Some(false));
    assert_eq!(c.authentication.webhook.enabled, Some(true));
    assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_mins(2));
    assert_eq!(c.authorization.mode, "Webhook");
    assert_eq!(c.authorization.webhook.cache_authorized_ttl, Duration::from_mins(5));
    assert_eq!(c.authorization.webhook.cache_unauthorized_ttl, Duration::from_secs(30));
    assert_eq!(c.registry_pull_qps, Some(5));
    assert_eq!(c.registry_burst, 10);
    assert_eq!(c.event_record_qps, Some(50));
    assert_eq!(c.event_burst, 100);
    assert_eq!(c.enable_debugging_handlers, Some(true));
    assert_eq!(c.healthz_port, Some(10248));
    assert_eq!(c.healthz_bind_address, "127.0.0.1");
    assert_eq!(c.oom_score_adj, Some(-999));
    assert_eq!(c.streaming_connection_idle_timeout, Duration::from_hours(4));
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
    assert_eq!(c.node_status_report_frequency, Duration::from_mins(5));
    assert_eq!(c.node_lease_duration_seconds, 40);
    assert_eq!(c.image_minimum_gc_age, Duration::from_mins(2));
    assert_eq!(c.image_maximum_gc_age, Duration::ZERO);
    assert_eq!(c.image_gc_high_threshold_percent, Some(85));
    assert_eq!(c.image_gc_low_threshold_percent, Some(80));
    assert_eq!(c.volume_stats_agg_period, Duration::from_mins(1));
    assert_eq!(c.cgroups_per_qos, Some(true));
    assert_eq!(c.cgroup_driver, "cgroupfs");
    assert_eq!(c.cpu_manager_policy, "none");
    assert_eq!(c.cpu_manager_reconcile_period, Duration::from_secs(10));
    assert_eq!(c.dra_manager_reconcile_period, Duration::from_mins(1));
    assert_eq!(c.memory_manager_policy, "None");
    assert_eq!(c.topology_manager_policy, "none");
    assert_eq!(c.topology_manager_scope, "container");
    assert_eq!(c.runtime_request_timeout, Duration::from_mins(2));
    assert_eq!(c.hairpin_mode, "promiscuous-bridge");
    assert_eq!(c.max_pods, 110);
    assert_eq!(c.pod_pids_limit, Some(-1));
    assert_eq!(c.resolver_config.as_deref(), Some("/etc/resolv.conf"));
    assert_eq!(c.cpu_cfs_quota, Some(true));
    assert_eq!(c.cpu_cfs_quota_period, Some(Duration::from_millis(100)));
    assert_eq!(c.node_status_max_images, Some(50));
    assert_eq!(c.max_open_files, 1_000_000);
    assert_eq!(c.content_type, "application/vnd.kubernetes.protobuf");
    assert_eq!(c.kube_api_qps, Some(50));
    assert_eq!(c.kube_api_burst, 100);
    assert_eq!(c.serialize_image_pulls, Some(true));
    assert_eq!(c.eviction_hard, None, "SetDefaults leaves evictionHard to the loader");
    assert_eq!(c.eviction_pressure_transition_period, Duration::from_mins(5));
    assert_eq!(c.merge_default_eviction_settings, Some(false));
    assert_eq!(c.enable_controller_attach_detach, Some(true));
    assert_eq!(c.make_iptables_util_chains, Some(true));
    assert_eq!(c.iptables_masquerade_bit, Some(14));
    assert_eq!(c.iptables_drop_bit, Some(15));
    assert_eq!(c.fail_swap_on, Some(true));
    assert_eq!(c.container_log_max_size, "10Mi");
    assert_eq!(c.container_log_max_files, Some(5));
    assert_eq!(c.container_log_max_workers, Some(1));
    assert_eq!(c.container_log_monitor_interval, Some(Duration::from_secs(10)));
    assert_eq!(c.config_map_and_secret_change_detection_strategy, "Watch");
    assert_eq!(c.enforce_node_allocatable, Some(vec!["pods".to_string()]));
    assert_eq!(c.volume_plugin_dir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/");
    assert_eq!(c.logging.format, "text");
    assert_eq!(c.logging.flush_frequency.duration, Duration::from_secs(5));
    assert_eq!(c.logging.options.json.info_buffer_size, "0");
    assert_eq!(c.enable_system_log_handler, Some(true));
    assert_eq!(c.enable_system_log_query, None);
    assert_eq!(c.shutdown_grace_period, Duration::ZERO);
    assert_eq!(c.shutdown_grace_period_critical_pods, Duration::ZERO);
    assert_eq!(c.enable_profiling_handler, Some(true));
    assert_eq!(c.enable_debug_flags_handler, Some(true));
    assert_eq!(c.seccomp_default, Some(false));
    assert_eq!(c.fail_cgroup_v1, Some(true));
    assert_eq!(c.memory_throttling_factor, Some(0.9));
    assert_eq!(c.memory_reservation_policy, "None");
    assert_eq!(c.register_node, Some(true));
    assert_eq!(c.local_storage_capacity_isolation, Some(true));
    assert_eq!(c.container_runtime_endpoint, "unix:///run/containerd/containerd.sock");
    assert_eq!(c.pod_logs_dir, "/var/log/pods");
    assert_eq!(c.crash_loop_back_off.max_container_restart_period, None);
    assert_eq!(c.image_pull_credentials_verification_policy, "");
    assert!(c.validate().is_ok(), "{:?}", c.validation_errors());
}

#[test]
fn defaults_keep_explicit_values() {
    let c = defaulted(
        "port: 20250\nsyncFrequency: 10s\nregistryPullQPS: 0\nhealthzPort: 0\n\
         enforceNodeAllocatable: []\nresolvConf: \"\"\npodPidsLimit: -7\n\
         nodeStatusUpdateFrequency: 20s\nmaxParallelImagePulls: 4\n",
    );
    assert_eq!(c.port, 20250);
    assert_eq!(c.sync_frequency, Duration::from_secs(10));
    assert_eq!(c.registry_pull_qps, Some(0), "an explicit 0 means no limit");
    assert_eq!(c.healthz_port, Some(0), "an explicit 0 disables healthz");
    assert_eq!(c.enforce_node_allocatable, Some(vec![]));
    assert_eq!(c.resolver_config.as_deref(), Some(""));
    assert_eq!(c.pod_pids_limit, Some(-1), "negative limits become -1");
    assert_eq!(c.node_status_report_frequency, Duration::from_secs(20));
    assert_eq!(c.serialize_image_pulls, Some(false));
}

#[test]
fn gated_defaults_follow_explicit_feature_gates() {
    let c = defaulted("featureGates:\n  KubeletCrashLoopBackOffMax: true\n  KubeletEnsureSecretPulledImages: true\n");
    assert_eq!(c.crash_loop_back_off.max_container_restart_period, Some(Duration::from_secs(300)));
    assert_eq!(c.image_pull_credentials_verification_policy, "NeverVerifyPreloadedImages");
    assert!(c.validate().is_ok(), "{:?}", c.validation_errors());
}

#[test]
fn eviction_hard_defaults_and_merge() {
    let mut c = defaulted("");
    c.apply_default_eviction_hard();
    let hard = c.eviction_hard.clone().unwrap_or_default();
    assert_eq!(hard.len(), 5);
    assert_eq!(hard["memory.available"], "100Mi");
    assert_eq!(hard["nodefs.available"], "10%");
    assert_eq!(hard["nodefs.inodesFree"], "5%");
    assert_eq!(hard["imagefs.available"], "15%");
    assert_eq!(hard["imagefs.inodesFree"], "5%");

    let mut partial = defaulted("evictionHard:\n  memory.available: 300Mi\n");
    partial.apply_default_eviction_hard();
    assert_eq!(partial.eviction_hard.as_ref().map(BTreeMap::len), Some(1));

    let mut merged = defaulted("mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 300Mi\n");
    merged.apply_default_eviction_hard();
    let merged = merged.eviction_hard.unwrap_or_default();
    assert_eq!(merged.len(), 5);
    assert_eq!(merged["memory.available"], "300Mi");
}

#[test]
fn typo_field_is_rejected_naming_it() {
    let err = parse("syncFrequncy: 1m\n").unwrap_err();
    assert_eq!(err.to_string(), "config file /etc/x.yaml: field syncFrequncy: unknown field");
    assert!(matches!(&err, ConfigError::Field { field, .. } if field == "syncFrequncy"));

    let nested = parse("authentication:\n  webhok:\n    enabled: true\n").unwrap_err();
    assert_eq!(nested.to_string(), "config file /etc/x.yaml: field authentication.webhok: unknown field");
}

#[test]
fn bad_duration_names_field_and_value() {
    let err = parse("syncFrequency: abc\n").unwrap_err();
    assert_eq!(err.to_string(), "config file /etc/x.yaml: field syncFrequency: invalid duration \"abc\"");
    let nested = parse("authentication:\n  webhook:\n    cacheTTL: 10\n").unwrap_err();
    assert!(
        nested
            .to_string()
            .starts_with("config file /etc/x.yaml: field authentication.webhook.cacheTTL: invalid type: integer `10`"),
        "{nested}"
    );
    let unit = parse("cpuCFSQuotaPeriod: 5d\n").unwrap_err();
    assert_eq!(
        unit.to_string(),
        "config file /etc/x.yaml: field cpuCFSQuotaPeriod: unknown unit \"d\" in duration \"5d\""
    );
}

#[test]
fn bad_values_in_lists_name_the_index() {
    let err = parse(
        "reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n- numaNode: 1\n  limits:\n    memory: lots\n",
    )
    .unwrap_err();
    assert!(matches!(&err, ConfigError::Field { field, .. } if field == "reservedMemory[1].limits.memory"), "{err}");
    let err = parse("maxPods: 3000000000\n").unwrap_err();
    assert!(matches!(&err, ConfigError::Field { field, .. } if field == "maxPods"), "{err}");
}

#[test]
fn type_meta_is_checked() {
    let missing = from_yaml_str("kind: KubeletConfiguration\n", "a.yaml").unwrap_err();
    assert_eq!(
        missing.to_string(),
        "config file a.yaml: field apiVersion: missing, expected \"kubelet.config.k8s.io/v1beta1\""
    );
    let wrong = from_yaml_str("apiVersion: v1\nkind: KubeletConfiguration\n", "a.yaml").unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "config file a.yaml: field apiVersion: unsupported value \"v1\", expected \"kubelet.config.k8s.io/v1beta1\""
    );
    let kind = from_yaml_str("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n", "a.yaml").unwrap_err();
    assert!(matches!(&kind, ConfigError::Field { field, .. } if field == "kind"), "{kind}");
    assert!(matches!(from_yaml_str("# nothing\n", "a.yaml"), Err(ConfigError::Empty { .. })));
    assert!(matches!(from_yaml_str("- 1\n", "a.yaml"), Err(ConfigError::Decode { .. })));
    assert!(matches!(from_yaml_str("a: [1\n", "a.yaml"), Err(ConfigError::Syntax { .. })));
}

#[test]
fn json_documents_are_accepted() {
    let c = from_yaml_str(
        r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","maxPods":42,"clusterDNS":["10.0.0.10"]}"#,
        "x.json",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.max_pods, 42);
    assert_eq!(c.cluster_dns, ["10.0.0.10"]);
}

/// Every upstream field name, as written in `types.go`'s JSON tags, decodes.
#[test]
fn every_upstream_field_name_decodes() {
    let body = r#"
enableServer: true
staticPodPath: /etc/kubernetes/manifests
podLogsDir: /var/log/pods
syncFrequency: 1m
fileCheckFrequency: 20s
httpCheckFrequency: 20s
staticPodURL: http://example.com/pods
staticPodURLHeader: {X-Token: [a, b]}
address: 0.0.0.0
port: 10250
readOnlyPort: 10255
tlsCertFile: /pki/kubelet.crt
tlsPrivateKeyFile: /pki/kubelet.key
tlsCipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
tlsCurvePreferences: [23, 29]
tlsMinVersion: VersionTLS12
rotateCertificates: true
serverTLSBootstrap: true
authentication:
  x509: {clientCAFile: /pki/ca.crt}
  webhook: {enabled: true, cacheTTL: 2m}
  anonymous: {enabled: false}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 5m, cacheUnauthorizedTTL: 30s}
registryPullQPS: 5
registryBurst: 10
imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages
preloadedImagesVerificationAllowlist: [registry.k8s.io/pause]
eventRecordQPS: 50
eventBurst: 100
enableDebuggingHandlers: true
enableContentionProfiling: false
healthzPort: 10248
healthzBindAddress: 127.0.0.1
oomScoreAdj: -999
clusterDomain: cluster.local
clusterDNS: [10.96.0.10]
streamingConnectionIdleTimeout: 4h
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 5m
nodeLeaseDurationSeconds: 40
imageMinimumGCAge: 2m
imageMaximumGCAge: 0s
imageGCHighThresholdPercent: 85
imageGCLowThresholdPercent: 80
volumeStatsAggPeriod: 1m
kubeletCgroups: /kubelet.slice
systemCgroups: /system.slice
cgroupRoot: /
cgroupsPerQOS: true
cgroupDriver: systemd
cpuManagerPolicy: static
singleProcessOOMKill: false
cpuManagerPolicyOptions: {full-pcpus-only: "true"}
cpuManagerReconcilePeriod: 10s
draManagerReconcilePeriod: 1m
memoryManagerPolicy: Static
topologyManagerPolicy: best-effort
topologyManagerScope: pod
topologyManagerPolicyOptions: {prefer-closest-numa-nodes: "true"}
qosReserved: {memory: 50%}
runtimeRequestTimeout: 2m
hairpinMode: hairpin-veth
maxPods: 110
podCIDR: 10.244.0.0/24
podPidsLimit: 4096
resolvConf: /run/systemd/resolve/resolv.conf
runOnce: false
cpuCFSQuota: true
cpuCFSQuotaPeriod: 100ms
nodeStatusMaxImages: 50
maxOpenFiles: 1000000
contentType: application/json
kubeAPIQPS: 50
kubeAPIBurst: 100
serializeImagePulls: false
maxParallelImagePulls: 3
evictionHard: {memory.available: 100Mi}
evictionSoft: {memory.available: 200Mi}
evictionSoftGracePeriod: {memory.available: 30s}
evictionPressureTransitionPeriod: 5m
evictionMaxPodGracePeriod: 30
evictionMinimumReclaim: {imagefs.available: 2Gi}
mergeDefaultEvictionSettings: true
podsPerCore: 0
enableControllerAttachDetach: true
protectKernelDefaults: true
makeIPTablesUtilChains: true
iptablesMasqueradeBit: 14
iptablesDropBit: 15
featureGates: {KubeletEnsureSecretPulledImages: true}
failSwapOn: false
memorySwap: {swapBehavior: LimitedSwap}
containerLogMaxSize: 10Mi
containerLogMaxFiles: 5
containerLogMaxWorkers: 2
containerLogMonitorInterval: 10s
configMapAndSecretChangeDetectionStrategy: Watch
systemReserved: {cpu: 100m, memory: 100Mi}
kubeReserved: {cpu: 100m, memory: 100Mi}
reservedSystemCPUs: ""
showHiddenMetricsForVersion: "1.35"
systemReservedCgroup: /system.slice
kubeReservedCgroup: /kube.slice
enforceNodeAllocatable: [pods, system-reserved, kube-reserved]
allowedUnsafeSysctls: [net.core.somaxconn]
volumePluginDir: /usr/libexec/kubernetes/kubelet-plugins/volume/exec/
providerID: aws:///eu-west-1a/i-0123
kernelMemcgNotification: true
logging:
  format: text
  flushFrequency: 5s
  verbosity: 2
  vmodule: [{filePattern: kubelet.go, verbosity: 4}]
  options: {text: {infoBufferSize: "0"}, json: {infoBufferSize: "0"}}
enableSystemLogHandler: true
enableSystemLogQuery: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
shutdownGracePeriodByPodPriority: [{priority: 2000000000, shutdownGracePeriodSeconds: 10}]
crashLoopBackOff: {maxContainerRestartPeriod: 60s}
reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]
enableProfilingHandler: true
enableDebugFlagsHandler: true
seccompDefault: true
memoryThrottlingFactor: 0.8
memoryReservationPolicy: None
registerWithTaints: [{key: dedicated, value: gpu, effect: NoSchedule}]
registerNode: true
tracing: {endpoint: "localhost:4317", samplingRatePerMillion: 100}
localStorageCapacityIsolation: true
containerRuntimeEndpoint: unix:///run/crio/crio.sock
imageServiceEndpoint: unix:///run/crio/crio.sock
failCgroupV1: false
userNamespaces: {idsPerPod: 65536}
"#;
    let c = parse_ok(body);
    assert_eq!(c.static_pod_url_header["X-Token"], ["a", "b"]);
    assert_eq!(c.register_with_taints[0].key, "dedicated");
    assert_eq!(c.reserved_memory[0].limits["memory"].0, "1Gi");
    assert_eq!(c.logging.vmodule[0].verbosity, 4);
    assert_eq!(c.user_namespaces.as_ref().and_then(|u| u.ids_per_pod), Some(65536));

    // Serializing writes the same names back (omitting upstream's `omitempty` zero values)
    // and the round trip is lossless.
    let json = serde_json::to_value(&c).unwrap_or_else(|e| panic!("{e}"));
    let mut written: Vec<&str> = json.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    let mut read: Vec<&str> = body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .filter_map(|l| l.split(':').next())
        .filter(|k| !["enableContentionProfiling", "runOnce", "podsPerCore", "reservedSystemCPUs"].contains(k))
        .chain(["apiVersion", "kind"])
        .collect();
    read.sort_unstable();
    written.sort_unstable();
    assert_eq!(written, read);
    let back: KubeletConfiguration = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, c);
}

#[test]
fn defaulted_config_round_trips_through_yaml() {
    let c = defaulted("");
    let yaml = serde_saphyr::to_string(&c).unwrap_or_else(|e| panic!("{e}"));
    assert!(yaml.contains("syncFrequency: 1m0s"), "{yaml}");
    assert!(yaml.contains("imageMinimumGCAge: 2m0s"), "{yaml}");
    let back = from_yaml_str(&yaml, "round-trip").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, c);
}

#[test]
fn logging_flush_frequency_accepts_nanoseconds() {
    let c = parse_ok("logging:\n  flushFrequency: 2000000000\n");
    assert_eq!(c.logging.flush_frequency.duration, Duration::from_secs(2));
    assert!(!c.logging.flush_frequency.serialize_as_string);
    let json = serde_json::to_value(&c.logging).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["flushFrequency"], 2_000_000_000u64);
}

#[test]
fn validation_catches_thresholds_ports_pods_and_drivers() {
    let c = defaulted("imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 75\n");
    assert_eq!(
        messages(&c),
        [
            "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 75 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70"
        ]
    );
    let c = defaulted("maxPods: -1\n");
    assert_eq!(messages(&c), ["invalid configuration: maxPods (--max-pods) -1 must not be a negative number"]);
    let c = defaulted("cgroupDriver: cgroupv2\n");
    assert_eq!(
        messages(&c),
        [
            "invalid configuration: option \"cgroupv2\" specified for cgroupDriver (--cgroup-driver). valid options are \"cgroupfs\" or \"systemd\""
        ]
    );
    let c = defaulted("healthzPort: 70000\n");
    assert_eq!(
        messages(&c),
        ["invalid configuration: healthzPort (--healthz-port) 70000 must be between 1 and 65535, inclusive"]
    );
    let mut c = defaulted("");
    c.node_lease_duration_seconds = -5;
    assert_eq!(
        messages(&c),
        ["invalid configuration: nodeLeaseDurationSeconds (--node-lease-duration-seconds) -5 must be greater than 0"]
    );
}

#[test]
fn validation_reports_every_error_at_once() {
    let c = defaulted(
        "maxPods: -1\ncgroupDriver: bogus\nhealthzPort: 70000\nimageGCHighThresholdPercent: 101\n\
         hairpinMode: nat\ntopologyManagerScope: node\nregisterWithTaints:\n- {key: a, effect: Sometimes}\n\
         configMapAndSecretChangeDetectionStrategy: Poll\n",
    );
    let err = c.validate().unwrap_err();
    let ConfigError::Invalid { errors } = &err else {
        panic!("unexpected {err}");
    };
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "healthzPort",
            "cgroupDriver",
            "imageGCHighThresholdPercent",
            "maxPods",
            "registerWithTaints[0]",
            "topologyManagerScope",
            "hairpinMode",
            "configMapAndSecretChangeDetectionStrategy",
        ]
    );
    let text = err.to_string();
    assert!(text.starts_with("invalid configuration: healthzPort"), "{text}");
    assert_eq!(text.matches("; invalid configuration: ").count(), 7, "{text}");
    assert!(text.contains("unknown configmap and secret manager mode: \"Poll\""), "{text}");
    assert!(text.contains("invalid taint \"a=:Sometimes\": invalid taint effect: Sometimes"), "{text}");
}

#[test]
fn validation_of_gated_and_structural_rules() {
    let c = defaulted(
        "featureGates: {KubeletCrashLoopBackOffMax: false}\ncrashLoopBackOff: {maxContainerRestartPeriod: 10m}\n\
         enforceNodeAllocatable: [pods, system-reserved, none]\nmemoryThrottlingFactor: 1.5\n\
         reservedSystemCPUs: 3-1\npodLogsDir: var/log//pods\ncpuCFSQuotaPeriod: 50ms\n",
    );
    let fields: Vec<String> = c.validation_errors().into_iter().map(|e| e.field).collect();
    for want in [
        "cpuCFSQuotaPeriod",
        "crashLoopBackOff.maxContainerRestartPeriod",
        "systemReservedCgroup",
        "enforceNodeAllocatable",
        "reservedSystemCPUs",
        "memoryThrottlingFactor",
        "podLogsDir",
    ] {
        assert!(fields.iter().any(|f| f == want), "{want} missing from {fields:?}");
    }
    // NodeLogQuery is beta and off by default, as upstream: the query needs the gate turned on.
    let c = defaulted("enableSystemLogQuery: true\n");
    assert_eq!(messages(&c), ["invalid configuration: NodeLogQuery feature gate is required for enableSystemLogQuery"]);
    let c = defaulted("enableSystemLogQuery: true\nfeatureGates: {NodeLogQuery: true}\n");
    assert!(c.validate().is_ok(), "{:?}", c.validation_errors());
    // Gate errors come alone, as upstream returns them first.
    let c = defaulted("enableSystemLogQuery: true\nfeatureGates: {NodeLogQuer: true}\n");
    assert_eq!(messages(&c), ["unrecognized feature gate: NodeLogQuer"]);
    assert_eq!(c.validation_errors()[0].field, "featureGates.NodeLogQuer");
}

#[test]
fn load_file_defaults_and_resolves_paths() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("{HEADER}staticPodPath: manifests\ntlsCertFile: ../pki/kubelet.crt\nmaxPods: 50\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let c = load_file(&path).unwrap_or_else(|e| panic!("{e}"));
    let base = std::path::absolute(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(Path::new(&c.static_pod_path), base.join("manifests"));
    let parent = base.parent().unwrap_or(Path::new("/"));
    assert_eq!(Path::new(&c.tls_cert_file), parent.join("pki/kubelet.crt"));
    assert_eq!(c.max_pods, 50);
    assert_eq!(c.eviction_hard.as_ref().map(BTreeMap::len), Some(5));
    assert_eq!(c.resolver_config.as_deref(), Some("/etc/resolv.conf"));
    assert!(c.validate().is_ok(), "{:?}", c.validation_errors());

    let missing = load_file(&dir.path().join("absent.yaml")).unwrap_err();
    assert!(matches!(missing, ConfigError::Read { .. }));
    assert!(missing.to_string().contains("absent.yaml"), "{missing}");
}

/// The leaves of `v` that are zero values (`0s`, `0`, `"0"`, `{}`), as JSON pointers.
fn zero_leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if m.is_empty() => out.push(at),
        Value::Object(m) => m.iter().for_each(|(k, v)| zero_leaves(v, format!("{at}/{k}"), out)),
        Value::String(s) if s == "0s" || s == "0" => out.push(at),
        Value::Number(n) if n.as_f64() == Some(0.0) => out.push(at),
        _ => {}
    }
}

#[test]
fn kubeadms_zero_values_get_upstream_defaults_field_by_field() {
    // What kubeadm v1.35 wrote on a real node (../shared/fixtures): every `0s`, `0` and `{}` it leaves in means
    // "the default", as upstream's SetDefaults_KubeletConfiguration reads them.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures/kubeadm-v1.35-init/var/lib/kubelet/config.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let raw = parse_document(&text, "kubeadm").unwrap();
    let mut zeros = vec![];
    zero_leaves(&raw, String::new(), &mut zeros);
    assert!(zeros.len() >= 20, "the fixture's zero values: {zeros:?}");
    let mut kubeadm = from_yaml_str(&text, "kubeadm").unwrap();
    kubeadm.set_defaults();
    let kubeadm = serde_json::to_value(&kubeadm).unwrap();
    let plain = serde_json::to_value(defaulted("")).unwrap();
    for p in &zeros {
        assert_eq!(kubeadm.pointer(p), plain.pointer(p), "{p}: kubeadm's zero value is not read as the default");
    }
    // A few by name, as upstream's defaults give them.
    let c: KubeletConfiguration = serde_json::from_value(kubeadm).unwrap();
    assert_eq!(c.sync_frequency, Duration::from_mins(1));
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.runtime_request_timeout, Duration::from_mins(2));
    assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_mins(2));
    assert_eq!(c.authorization.webhook.cache_unauthorized_ttl, Duration::from_secs(30));
    assert_eq!(c.streaming_connection_idle_timeout, Duration::from_hours(4));
    assert_eq!(c.logging.flush_frequency.duration, Duration::from_secs(5));
    assert_eq!(c.cgroup_root, "/kubeadm-node");
}
