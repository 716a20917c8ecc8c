//! Every command-line flag the upstream kubelet v1.35 registers on Linux, in upstream's order, and what rkubelet
//! does with it. Sources: `cmd/kubelet/app/options/options.go` (`KubeletFlags.AddFlags`,
//! `addContainerRuntimeFlags`, `AddKubeletConfigFlags`), component-base `logs/api/v1/options.go` (`addFlags`),
//! `cmd/kubelet/app/options/globalflags*.go` (cAdvisor's flags, verflag's `--version`) and
//! `cmd/kubelet/app/server.go` (`--help`). `testdata/upstream-kubelet-v1.35-flags.txt` lists the same names; a
//! test keeps the two equal.

use super::values::Kind::{self, *};

/// One upstream flag.
#[derive(Debug)]
pub struct Flag {
    /// The name, as pflag normalises it (`_` becomes `-`).
    pub name: &'static str,
    /// How its value is read.
    pub kind: Kind,
    /// What rkubelet does with it.
    pub target: Target,
    /// Upstream's deprecation message; pflag prints `Flag --NAME has been deprecated, MESSAGE` when it is used.
    pub deprecated: Option<&'static str>,
}

/// What rkubelet does with a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// rkubelet's own parser (`cli::Cli`) reads it.
    Cli,
    /// It sets this `KubeletConfiguration` field (a JSON path), over the configuration file's value.
    Config(&'static str),
    /// When true it turns this boolean field on (upstream ORs the flag with the field).
    ConfigIfTrue(&'static str),
    /// Accepted; upstream itself throws the value away.
    Discarded,
    /// Accepted without effect in rkubelet, for this reason (printed as a warning).
    NoEffect(&'static str),
}

/// Upstream's deprecation of every flag that sets a `KubeletConfiguration` field.
pub const CONFIG_FILE: &str = "This parameter should be set via the config file specified by the Kubelet's --config \
    flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information.";
/// Upstream's deprecation of the flags cAdvisor registers globally.
pub const CADVISOR: &str = "This is a cadvisor flag that was mistakenly registered with the Kubelet. Due to legacy \
    concerns, it will follow the standard CLI deprecation timeline before being removed.";
const CONTAINER_GC: &str = "Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.";
/// Upstream's deprecation of `--pod-infra-container-image`.
pub const POD_INFRA: &str =
    "will be removed in 1.35. Image garbage collector will get sandbox image information from CRI.";

const GC_DEFAULTS: &str = "rkubelet's container garbage collection keeps upstream's defaults (0s, 1 per container, \
    no global limit)";
const NO_CADVISOR: &str = "rkubelet has no cAdvisor; it reads statistics from the container runtime (CRI)";

/// A flag that sets a configuration field, deprecated as upstream deprecates them all.
const fn config(name: &'static str, kind: Kind, path: &'static str) -> Flag {
    Flag { name, kind, target: Target::Config(path), deprecated: Some(CONFIG_FILE) }
}

/// A flag that sets a configuration field and that upstream keeps (`v`, `vmodule`, `log-flush-frequency`,
/// `provider-id`, `fail-cgroupv1`).
const fn config_kept(name: &'static str, kind: Kind, path: &'static str) -> Flag {
    Flag { name, kind, target: Target::Config(path), deprecated: None }
}

const fn cli(name: &'static str, kind: Kind) -> Flag {
    Flag { name, kind, target: Target::Cli, deprecated: None }
}

const fn no_effect(name: &'static str, kind: Kind, deprecated: Option<&'static str>, why: &'static str) -> Flag {
    Flag { name, kind, target: Target::NoEffect(why), deprecated }
}

const fn cadvisor(name: &'static str, kind: Kind) -> Flag {
    no_effect(name, kind, Some(CADVISOR), NO_CADVISOR)
}

/// The flags, in upstream's order of registration.
pub static FLAGS: &[Flag] = &[
    // KubeletFlags.AddFlags: addContainerRuntimeFlags.
    no_effect("runtime-cgroups", Str, None, "rkubelet does not report the runtime's cgroup as a system container"),
    Flag { name: "pod-infra-container-image", kind: Str, target: Target::Discarded, deprecated: Some(POD_INFRA) },
    // KubeletFlags.AddFlags (addOSFlags registers nothing on Linux).
    cli("config", Str),
    cli("config-dir", Str),
    cli("kubeconfig", Str),
    cli("image-credential-provider-config", Str),
    cli("image-credential-provider-bin-dir", Str),
    cli("bootstrap-kubeconfig", Str),
    cli("hostname-override", Str),
    cli("node-ip", Str),
    cli("cert-dir", Str),
    no_effect(
        "cloud-provider",
        Str,
        None,
        "rkubelet has no cloud provider integration (no uninitialized taint nor provided-node-ip annotation)",
    ),
    cli("root-dir", Str),
    Flag { name: "seccomp-default", kind: Bool, target: Target::ConfigIfTrue("seccompDefault"), deprecated: None },
    cli("node-labels", Labels),
    no_effect("lock-file", Str, None, "rkubelet takes no lock file"),
    no_effect("exit-on-lock-contention", Bool, None, "rkubelet takes no lock file"),
    no_effect("minimum-container-ttl-duration", Duration, Some(CONTAINER_GC), GC_DEFAULTS),
    no_effect("maximum-dead-containers-per-container", Int32, Some(CONTAINER_GC), GC_DEFAULTS),
    no_effect("maximum-dead-containers", Int32, Some(CONTAINER_GC), GC_DEFAULTS),
    no_effect(
        "experimental-mounter-path",
        Str,
        Some("will be removed in 1.25 or later. in favor of using CSI."),
        "rkubelet mounts with the mount(2) system call",
    ),
    no_effect(
        "experimental-allocatable-ignore-eviction",
        Bool,
        Some("will be removed in 1.25 or later."),
        "rkubelet always subtracts the hard eviction thresholds from the node's allocatable",
    ),
    // AddKubeletConfigFlags: every KubeletConfiguration field that is also a flag.
    config("enable-server", Bool, "enableServer"),
    config("fail-swap-on", Bool, "failSwapOn"),
    config("pod-manifest-path", Str, "staticPodPath"),
    config("sync-frequency", Duration, "syncFrequency"),
    config("file-check-frequency", Duration, "fileCheckFrequency"),
    config("http-check-frequency", Duration, "httpCheckFrequency"),
    config("manifest-url", Str, "staticPodURL"),
    config("manifest-url-header", ColonMultimap, "staticPodURLHeader"),
    config("address", Ip, "address"),
    config("port", Int32, "port"),
    config("read-only-port", Int32, "readOnlyPort"),
    config_kept("fail-cgroupv1", Bool, "failCgroupV1"),
    config("container-runtime-endpoint", Str, "containerRuntimeEndpoint"),
    config("image-service-endpoint", Str, "imageServiceEndpoint"),
    config("anonymous-auth", Bool, "authentication.anonymous.enabled"),
    config("authentication-token-webhook", Bool, "authentication.webhook.enabled"),
    config("authentication-token-webhook-cache-ttl", Duration, "authentication.webhook.cacheTTL"),
    config("client-ca-file", Str, "authentication.x509.clientCAFile"),
    config("authorization-mode", Str, "authorization.mode"),
    config("authorization-webhook-cache-authorized-ttl", Duration, "authorization.webhook.cacheAuthorizedTTL"),
    config("authorization-webhook-cache-unauthorized-ttl", Duration, "authorization.webhook.cacheUnauthorizedTTL"),
    config("tls-cert-file", Str, "tlsCertFile"),
    config("tls-private-key-file", Str, "tlsPrivateKeyFile"),
    config("rotate-server-certificates", Bool, "serverTLSBootstrap"),
    config("tls-cipher-suites", StrSlice, "tlsCipherSuites"),
    config("tls-min-version", Str, "tlsMinVersion"),
    config("rotate-certificates", Bool, "rotateCertificates"),
    config("registry-qps", Int32, "registryPullQPS"),
    config("registry-burst", Int32, "registryBurst"),
    config("event-qps", Int32, "eventRecordQPS"),
    config("event-burst", Int32, "eventBurst"),
    config("enable-debugging-handlers", Bool, "enableDebuggingHandlers"),
    config("contention-profiling", Bool, "enableContentionProfiling"),
    config("healthz-port", Int32, "healthzPort"),
    config("healthz-bind-address", Ip, "healthzBindAddress"),
    config("oom-score-adj", Int32, "oomScoreAdj"),
    config("cluster-domain", Str, "clusterDomain"),
    config("volume-plugin-dir", Str, "volumePluginDir"),
    config("cluster-dns", StrSlice, "clusterDNS"),
    config("streaming-connection-idle-timeout", Duration, "streamingConnectionIdleTimeout"),
    config("node-status-update-frequency", Duration, "nodeStatusUpdateFrequency"),
    config("minimum-image-ttl-duration", Duration, "imageMinimumGCAge"),
    config("image-gc-high-threshold", Int32, "imageGCHighThresholdPercent"),
    config("image-gc-low-threshold", Int32, "imageGCLowThresholdPercent"),
    config("volume-stats-agg-period", Duration, "volumeStatsAggPeriod"),
    config("feature-gates", MapBool, "featureGates"),
    config("kubelet-cgroups", Str, "kubeletCgroups"),
    config("system-cgroups", Str, "systemCgroups"),
    config_kept("provider-id", Str, "providerID"),
    config("cgroups-per-qos", Bool, "cgroupsPerQOS"),
    config("cgroup-driver", Str, "cgroupDriver"),
    config("cgroup-root", Str, "cgroupRoot"),
    config("cpu-manager-policy", Str, "cpuManagerPolicy"),
    config("cpu-manager-policy-options", MapNoSplit, "cpuManagerPolicyOptions"),
    config("cpu-manager-reconcile-period", Duration, "cpuManagerReconcilePeriod"),
    config("qos-reserved", Map, "qosReserved"),
    config("topology-manager-policy", Str, "topologyManagerPolicy"),
    config("runtime-request-timeout", Duration, "runtimeRequestTimeout"),
    config("hairpin-mode", Str, "hairpinMode"),
    config("max-pods", Int32, "maxPods"),
    config("pod-cidr", Str, "podCIDR"),
    config("pod-max-pids", Int64, "podPidsLimit"),
    config("resolv-conf", Str, "resolvConf"),
    config("runonce", Bool, "runOnce"),
    config("cpu-cfs-quota", Bool, "cpuCFSQuota"),
    config("cpu-cfs-quota-period", Duration, "cpuCFSQuotaPeriod"),
    config("enable-controller-attach-detach", Bool, "enableControllerAttachDetach"),
    config("make-iptables-util-chains", Bool, "makeIPTablesUtilChains"),
    config("container-log-max-size", Str, "containerLogMaxSize"),
    config("container-log-max-files", Int32, "containerLogMaxFiles"),
    config("allowed-unsafe-sysctls", StrSlice, "allowedUnsafeSysctls"),
    config("node-status-max-images", Int32, "nodeStatusMaxImages"),
    config("kernel-memcg-notification", Bool, "kernelMemcgNotification"),
    config("local-storage-capacity-isolation", Bool, "localStorageCapacityIsolation"),
    config("max-open-files", Int64, "maxOpenFiles"),
    config("kube-api-content-type", Str, "contentType"),
    config("kube-api-qps", Int32, "kubeAPIQPS"),
    config("kube-api-burst", Int32, "kubeAPIBurst"),
    config("serialize-image-pulls", Bool, "serializeImagePulls"),
    config("eviction-hard", LangleMap, "evictionHard"),
    config("eviction-soft", LangleMap, "evictionSoft"),
    config("eviction-soft-grace-period", Map, "evictionSoftGracePeriod"),
    config("eviction-pressure-transition-period", Duration, "evictionPressureTransitionPeriod"),
    config("eviction-max-pod-grace-period", Int32, "evictionMaxPodGracePeriod"),
    config("eviction-minimum-reclaim", Map, "evictionMinimumReclaim"),
    config("pods-per-core", Int32, "podsPerCore"),
    config("protect-kernel-defaults", Bool, "protectKernelDefaults"),
    config("reserved-cpus", Str, "reservedSystemCPUs"),
    config("topology-manager-scope", Str, "topologyManagerScope"),
    config("topology-manager-policy-options", Map, "topologyManagerPolicyOptions"),
    config("system-reserved", Map, "systemReserved"),
    config("kube-reserved", Map, "kubeReserved"),
    config("enforce-node-allocatable", StrSlice, "enforceNodeAllocatable"),
    config("system-reserved-cgroup", Str, "systemReservedCgroup"),
    config("kube-reserved-cgroup", Str, "kubeReservedCgroup"),
    // logsapi.AddFlags(&c.Logging, fs), inside AddKubeletConfigFlags.
    config("logging-format", Str, "logging.format"),
    config_kept("log-flush-frequency", Duration, "logging.flushFrequency"),
    config_kept("v", Level, "logging.verbosity"),
    config_kept("vmodule", VModule, "logging.vmodule"),
    config("log-text-split-stream", Bool, "logging.options.text.splitStream"),
    config("log-text-info-buffer-size", Quantity, "logging.options.text.infoBufferSize"),
    config("log-json-split-stream", Bool, "logging.options.json.splitStream"),
    config("log-json-info-buffer-size", Quantity, "logging.options.json.infoBufferSize"),
    config("memory-manager-policy", Str, "memoryManagerPolicy"),
    config("reserved-memory", ReservedMemory, "reservedMemory"),
    config("register-node", Bool, "registerNode"),
    config("register-with-taints", Taints, "registerWithTaints"),
    // AddGlobalFlags: cAdvisor's flags, verflag, then server.go's --help.
    no_effect("housekeeping-interval", Duration, None, NO_CADVISOR),
    cadvisor("application-metrics-count-limit", Int64),
    cadvisor("boot-id-file", Str),
    cadvisor("container-hints", Str),
    cadvisor("containerd", Str),
    cadvisor("enable-load-reader", Bool),
    cadvisor("event-storage-age-limit", Str),
    cadvisor("event-storage-event-limit", Str),
    cadvisor("global-housekeeping-interval", Duration),
    cadvisor("log-cadvisor-usage", Bool),
    cadvisor("machine-id-file", Str),
    cadvisor("storage-driver-user", Str),
    cadvisor("storage-driver-password", Str),
    cadvisor("storage-driver-host", Str),
    cadvisor("storage-driver-db", Str),
    cadvisor("storage-driver-table", Str),
    cadvisor("storage-driver-secure", Bool),
    cadvisor("storage-driver-buffer-duration", Duration),
    cadvisor("containerd-namespace", Str),
    cli("version", Version),
    cli("help", Bool),
];

/// The flag of this name (already normalised), if upstream registers it.
pub fn lookup(name: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.name == name)
}
