//! Settings of the v1.35 `KubeletConfiguration` that rkubelet does not carry out yet: the CPU manager's alpha policy
//! options, and feature gates set to a value whose behaviour rkubelet lacks ([`GATES`]). Upstream's kubelet acts on
//! each; running as if they were absent would silently drop what the operator asked for (pods without their NUMA
//! alignment, a gate turned off whose behaviour stays on), so start-up stops with an error naming the field and what
//! to set instead. Called once by `main` after the configuration is loaded and validated.
//!
//! Gates not listed here either turn their behaviour on and off in rkubelet as upstream, or do nothing in a kubelet
//! (the apiserver's, scheduler's and controllers' gates share upstream's registry), or govern pod fields that
//! rkubelet refuses at admission when a pod sets them (`kubelet_types::pod_fields`).

use kubelet_config::kubelet_config::KubeletConfiguration;

/// Feature gates whose value (the second field) would ask for behaviour rkubelet lacks, and what upstream would do.
const GATES: &[(&str, bool, &str)] = &[
    ("ComponentFlagz", true, "the kubelet would serve /flagz"),
    ("ComponentStatusz", true, "the kubelet would serve /statusz"),
    ("GracefulNodeShutdown", false, "the kubelet would not watch for the node's shutdown"),
    ("InPlacePodVerticalScaling", false, "the kubelet would not resize running pods"),
    ("InPlacePodVerticalScalingExclusiveCPUs", true, "pods with exclusive CPUs would be resized"),
    ("InPlacePodVerticalScalingExclusiveMemory", true, "pods with NUMA-pinned memory would be resized"),
    ("KubeletCrashLoopBackOffMax", true, "crashLoopBackOff.maxContainerRestartPeriod would cap the back-off"),
    ("KubeletEnsureSecretPulledImages", true, "images pulled with a secret would be verified for each pod"),
    ("KubeletFineGrainedAuthz", false, "/configz, /healthz and /pods would be authorized as nodes/proxy"),
    ("KubeletInUserNamespace", true, "the kubelet would tolerate running in a user namespace"),
    ("KubeletPodResourcesDynamicResources", false, "the pod resources API would leave out DRA devices"),
    ("KubeletPodResourcesGet", false, "the pod resources API would not answer Get"),
    ("LocalStorageCapacityIsolationFSQuotaMonitoring", true, "emptyDir usage would be tracked with project quotas"),
    ("MemoryQoS", true, "containers would get memory.min and memory.high"),
    ("MutableCSINodeAllocatableCount", true, "CSINode allocatable counts would be refreshed"),
    ("PodAndContainerStatsFromCRI", true, "pod and container stats would come from the runtime's CRI stats"),
    ("PodObservedGenerationTracking", false, "pod status would leave out observedGeneration"),
    ("PodReadyToStartContainersCondition", false, "pod status would leave out PodReadyToStartContainers"),
    ("ProcMountType", false, "procMount would be ignored"),
    ("QOSReserved", true, "qosReserved memory would be held back in the QoS cgroups"),
    ("ReduceDefaultCrashLoopBackOffDecay", true, "the crash loop back-off would start at 1s and stop at 60s"),
    ("ReloadKubeletServerCertificateFile", false, "the serving certificate would not be reloaded from its file"),
    ("RuntimeClassInImageCriApi", true, "images would be pulled per runtime handler"),
    ("SELinuxMount", true, "volumes would be mounted with their SELinux context"),
    ("SupplementalGroupsPolicy", false, "supplementalGroupsPolicy would be ignored"),
    ("UserNamespacesSupport", false, "hostUsers: false would be ignored"),
];

/// The first setting rkubelet cannot honour, as the start-up error's text.
pub fn refuse(cfg: &KubeletConfiguration) -> Result<(), String> {
    for (gate, value, what) in GATES {
        // Set explicitly or through AllAlpha/AllBeta, as upstream resolves it.
        if cfg.gate(gate) == *value
            && kubelet_config::kubelet_config::gate_spec(gate).is_some_and(|s| s.default != *value)
        {
            return Err(format!(
                "invalid configuration: featureGates.{gate}: {value} is not implemented by rkubelet yet ({what}); \
                 leave the gate at its default ({}) or run the upstream kubelet on this node",
                !value
            ));
        }
    }
    let not_yet = |field: &str, value: &str, what: &str, instead: &str| {
        Err(format!(
            "invalid configuration: {field}: {value:?} is not implemented by rkubelet yet ({what}); set {instead} or \
             run the upstream kubelet on this node"
        ))
    };
    // Options upstream would take (alpha ones with their gate) that rkubelet does not carry out; others are refused
    // by the CPU manager with upstream's text.
    let alpha = cfg.gate("CPUManagerPolicyAlphaOptions");
    for (name, value) in &cfg.cpu_manager_policy_options {
        let unimplemented = match name.as_str() {
            "align-by-socket" | "distribute-cpus-across-cores" => alpha,
            _ => false,
        };
        if unimplemented && value != "false" && value != "0" {
            let what = "the static policy's allocation would ignore it";
            return not_yet(&format!("cpuManagerPolicyOptions.{name}"), name, what, "another option or none");
        }
    }
    // Go's block profile (where goroutines wait), which upstream turns on with the profiling handler.
    if cfg.enable_contention_profiling
        && cfg.enable_debugging_handlers.unwrap_or(true)
        && cfg.enable_profiling_handler.unwrap_or(true)
    {
        let what = "/debug/pprof/block would record where the kubelet waits";
        return Err(format!(
            "invalid configuration: enableContentionProfiling: true is not implemented by rkubelet yet ({what}); set \
             it to false (CPU and heap profiles are served) or run the upstream kubelet on this node"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_start_and_each_manager_rkubelet_lacks_stops_the_start_naming_its_field() {
        let mut cfg = KubeletConfiguration::default();
        cfg.set_defaults();
        assert_eq!(refuse(&cfg), Ok(()));
        let mut c = cfg.clone();
        c.cpu_manager_policy = "static".into();
        assert_eq!(refuse(&c), Ok(()), "the static policy is carried out");
        c.cpu_manager_policy_options.insert("full-pcpus-only".into(), "true".into());
        c.cpu_manager_policy_options.insert("strict-cpu-reservation".into(), "true".into());
        c.cpu_manager_policy_options.insert("align-by-socket".into(), "true".into());
        assert_eq!(refuse(&c), Ok(()), "carried out, or refused by the CPU manager with upstream's text (alpha)");
        c.cpu_manager_policy_options.insert("distribute-cpus-across-numa".into(), "true".into());
        assert_eq!(refuse(&c), Ok(()));
        c.feature_gates.insert("CPUManagerPolicyAlphaOptions".into(), true);
        assert_eq!(
            refuse(&c).unwrap_err(),
            "invalid configuration: cpuManagerPolicyOptions.align-by-socket: \"align-by-socket\" is not implemented by \
             rkubelet yet (the static policy's allocation would ignore it); set another option or none or run the \
             upstream kubelet on this node"
        );
        let mut c = cfg.clone();
        c.memory_manager_policy = "Static".into();
        assert_eq!(refuse(&c), Ok(()), "the memory manager is carried out");
        let mut c = cfg.clone();
        c.topology_manager_policy = "single-numa-node".into();
        assert_eq!(refuse(&c), Ok(()), "the topology manager is carried out");
        let mut c = cfg.clone();
        c.memory_swap.swap_behavior = "LimitedSwap".into();
        assert_eq!(refuse(&c), Ok(()), "swap is carried out");
        let mut c = cfg.clone();
        c.enable_contention_profiling = true;
        assert!(refuse(&c).unwrap_err().starts_with("invalid configuration: enableContentionProfiling: true is not"));
        c.enable_profiling_handler = Some(false);
        assert_eq!(refuse(&c), Ok(()), "without the profiling handler upstream ignores it too");
        let mut c = cfg;
        c.shutdown_grace_period = std::time::Duration::from_secs(30).into();
        assert_eq!(refuse(&c), Ok(()), "graceful node shutdown is carried out");
    }

    #[test]
    fn a_gate_set_to_a_value_whose_behaviour_rkubelet_lacks_stops_the_start_naming_it() {
        let mut cfg = KubeletConfiguration::default();
        cfg.set_defaults();
        let with = |pairs: &[(&str, bool)]| {
            let mut c = cfg.clone();
            c.feature_gates = pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            refuse(&c)
        };
        assert_eq!(with(&[("PodLevelResources", false), ("KubeletPSI", false), ("EventedPLEG", true)]), Ok(()));
        assert_eq!(with(&[("MemoryQoS", false), ("InPlacePodVerticalScaling", true)]), Ok(()), "defaults are fine");
        assert_eq!(
            with(&[("MemoryQoS", true)]).unwrap_err(),
            "invalid configuration: featureGates.MemoryQoS: true is not implemented by rkubelet yet (containers would \
             get memory.min and memory.high); leave the gate at its default (false) or run the upstream kubelet on \
             this node"
        );
        let e = with(&[("AllAlpha", true), ("ComponentFlagz", false)]).unwrap_err();
        assert!(
            e.starts_with("invalid configuration: featureGates.ComponentStatusz: true"),
            "AllAlpha turns it on: {e}"
        );
        let e = with(&[("AllBeta", false)]).unwrap_err();
        assert!(e.starts_with("invalid configuration: featureGates.GracefulNodeShutdown: false"), "{e}");
        for (gate, _, _) in GATES {
            assert!(kubelet_config::kubelet_config::gate_spec(gate).is_some(), "{gate} is not a v1.35 gate");
        }
    }
}
