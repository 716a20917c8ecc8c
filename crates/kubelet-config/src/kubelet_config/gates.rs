//! Feature gates: the registry of every gate the v1.35 kubelet knows ([`GATES`](super::gates_table)), how
//! `featureGates` resolves against it, and its validation.
//!
//! Mirrors `k8s.io/component-base/featuregate` (`featureGate.SetFromMap`, `Enabled`, the `AllAlpha`/`AllBeta`
//! specials) with the kubelet's registry from `pkg/features/kube_features.go`, and the first check of
//! `ValidateKubeletConfiguration`: an unknown gate, or a locked gate set against its lock, stops start-up with
//! upstream's message; a gate whose dependency is off is refused the same way. Setting a GA or deprecated gate is
//! allowed with upstream's warning, which the binary logs once at start.

use std::collections::BTreeMap;

use super::gates_table::GATES;
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

const ALL_ALPHA: &str = "AllAlpha";
const ALL_BETA: &str = "AllBeta";

/// Gates that may only be on when others are (`defaultKubernetesFeatureGateDependencies`).
const DEPENDENCIES: &[(&str, &[&str])] = &[
    ("InPlacePodVerticalScalingAllocatedStatus", &["InPlacePodVerticalScaling"]),
    ("InPlacePodVerticalScalingExclusiveCPUs", &["InPlacePodVerticalScaling"]),
    ("InPlacePodVerticalScalingExclusiveMemory", &["InPlacePodVerticalScaling", "MemoryManager"]),
];

/// A gate's maturity at v1.35 (`featuregate.prerelease`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    GA,
    Deprecated,
}

/// One gate of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateSpec {
    pub name: &'static str,
    pub default: bool,
    pub stage: Stage,
    /// `LockToDefault`: setting it to anything but `default` is an error.
    pub locked: bool,
}

impl GateSpec {
    pub(super) const fn new(name: &'static str, default: bool, stage: Stage, locked: bool) -> Self {
        GateSpec { name, default, stage, locked }
    }
}

/// The gate `name` of the v1.35 kubelet's registry, if there is one.
pub fn gate_spec(name: &str) -> Option<&'static GateSpec> {
    GATES.binary_search_by(|g| g.name.cmp(name)).ok().map(|i| &GATES[i])
}

/// Every gate the v1.35 kubelet knows, sorted by name.
pub fn known_gates() -> &'static [GateSpec] {
    GATES
}

/// Whether `name` is on under the explicit settings `set`: an explicit setting wins, then `AllAlpha` for alpha and
/// `AllBeta` for beta gates, then the default. `None` for a name the registry does not have.
pub fn resolve(set: &BTreeMap<String, bool>, name: &str) -> Option<bool> {
    let spec = gate_spec(name)?;
    if let Some(&on) = set.get(name) {
        return Some(on);
    }
    let special = match spec.stage {
        Stage::Alpha if name != ALL_ALPHA => set.get(ALL_ALPHA),
        Stage::Beta if name != ALL_BETA => set.get(ALL_BETA),
        _ => None,
    };
    Some(special.copied().unwrap_or(spec.default))
}

/// `SetFromMap`'s errors for `set`, in upstream's words: the first unknown gate alone (upstream stops there), else
/// every gate set against its lock, else every enabled gate with a disabled dependency.
pub fn gate_errors(set: &BTreeMap<String, bool>) -> Vec<String> {
    if let Some(unknown) = set.keys().find(|k| gate_spec(k).is_none()) {
        return vec![format!("unrecognized feature gate: {unknown}")];
    }
    let mut errs: Vec<String> = set
        .iter()
        .filter_map(|(k, &v)| gate_spec(k).filter(|s| s.locked && s.default != v).map(|s| (k, v, s.default)))
        .map(|(k, v, locked)| format!("cannot set feature gate {k} to {v}, feature is locked to {locked}"))
        .collect();
    if !errs.is_empty() {
        return errs;
    }
    for (gate, deps) in DEPENDENCIES {
        if resolve(set, gate) != Some(true) {
            continue;
        }
        let off: Vec<&str> = deps.iter().copied().filter(|d| resolve(set, d) != Some(true)).collect();
        if !off.is_empty() {
            errs.push(format!("{gate} is enabled, but depends on features that are disabled: [{}]", off.join(" ")));
        }
    }
    errs
}

/// Upstream's warnings for GA and deprecated gates set explicitly, one line each.
pub fn gate_warnings(set: &BTreeMap<String, bool>) -> Vec<String> {
    set.iter()
        .filter_map(|(k, v)| {
            let kind = match gate_spec(k)?.stage {
                Stage::GA => "GA",
                Stage::Deprecated => "deprecated",
                _ => return None,
            };
            Some(format!("Setting {kind} feature gate {k}={v}. It will be removed in a future release."))
        })
        .collect()
}

impl KubeletConfiguration {
    /// Whether the feature gate `name` is on for this configuration (see [`resolve`]); `None` only for a name the
    /// v1.35 registry does not have, which is a bug in the caller.
    pub fn feature_gate(&self, name: &str) -> Option<bool> {
        let on = resolve(&self.feature_gates, name);
        debug_assert!(on.is_some(), "feature gate {name} is not in the registry");
        on
    }

    /// Whether the feature gate `name` is on; false for a name the registry lacks.
    pub fn gate(&self, name: &str) -> bool {
        self.feature_gate(name).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn the_registry_is_sorted_and_has_the_kubelets_gates_with_their_v1_35_defaults() {
        assert!(GATES.windows(2).all(|w| w[0].name < w[1].name), "binary search needs sorted names");
        assert_eq!(GATES.len(), 201);
        let g = |n| gate_spec(n).copied().unwrap();
        assert_eq!(g("KubeletPSI"), GateSpec::new("KubeletPSI", true, Stage::Beta, false));
        assert_eq!(g("SidecarContainers"), GateSpec::new("SidecarContainers", true, Stage::GA, true));
        assert!(!g("CustomCPUCFSQuotaPeriod").default, "named by its string, not its Go identifier");
        assert!(gate_spec("RuntimeClassInImageCriApi").is_some());
        assert!(gate_spec("WatchListClient").is_some(), "client-go's gates are the kubelet's too");
        assert!(gate_spec("ContextualLogging").is_some(), "so are component-base's logging gates");
        assert!(gate_spec("Nope").is_none());
    }

    #[test]
    fn explicit_settings_win_over_all_alpha_and_all_beta_which_win_over_defaults() {
        let s = set(&[("AllAlpha", true), ("EventedPLEG", false), ("AllBeta", false)]);
        assert_eq!(resolve(&s, "EventedPLEG"), Some(false));
        assert_eq!(resolve(&s, "MemoryQoS"), Some(true), "alpha gates follow AllAlpha");
        assert_eq!(resolve(&s, "KubeletPSI"), Some(false), "beta gates follow AllBeta");
        assert_eq!(resolve(&s, "SidecarContainers"), Some(true), "GA gates keep their default");
        assert_eq!(resolve(&BTreeMap::new(), "KubeletPSI"), Some(true));
        assert_eq!(resolve(&BTreeMap::new(), "Nope"), None);
    }

    #[test]
    fn unknown_locked_and_dependent_gates_are_refused_with_upstreams_words() {
        assert_eq!(gate_errors(&set(&[("KubeletPSI", false), ("Bogus", true)])), ["unrecognized feature gate: Bogus"]);
        assert_eq!(
            gate_errors(&set(&[("SidecarContainers", false), ("NodeSwap", true)])),
            ["cannot set feature gate SidecarContainers to false, feature is locked to true"]
        );
        assert_eq!(
            gate_errors(&set(&[
                ("InPlacePodVerticalScaling", false),
                ("InPlacePodVerticalScalingExclusiveCPUs", true)
            ])),
            ["InPlacePodVerticalScalingExclusiveCPUs is enabled, but depends on features that are disabled: \
              [InPlacePodVerticalScaling]"]
        );
        assert!(gate_errors(&set(&[("KubeletPSI", false), ("AllAlpha", false)])).is_empty());
    }

    #[test]
    fn setting_a_ga_or_deprecated_gate_warns_as_upstream() {
        let w =
            gate_warnings(&set(&[("SidecarContainers", true), ("KubeletPSI", false), ("GitRepoVolumeDriver", false)]));
        assert_eq!(
            w,
            [
                "Setting deprecated feature gate GitRepoVolumeDriver=false. It will be removed in a future release.",
                "Setting GA feature gate SidecarContainers=true. It will be removed in a future release.",
            ]
        );
    }
}
