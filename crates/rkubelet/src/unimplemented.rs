//! Settings of the v1.35 `KubeletConfiguration` that rkubelet does not carry out yet (issue 30: the CPU manager's
//! policy options). Upstream's kubelet acts on each; running as
//! if they were absent would silently drop what the operator asked for (pods without their NUMA
//! alignment), so start-up stops with an error naming the field and what to set
//! instead. Called once by `main` after the configuration is loaded and validated.

use kubelet_config::kubelet_config::KubeletConfiguration;

/// The first setting rkubelet cannot honour, as the start-up error's text.
pub fn refuse(cfg: &KubeletConfiguration) -> Result<(), String> {
    let not_yet = |field: &str, value: &str, what: &str, instead: &str| {
        Err(format!(
            "invalid configuration: {field}: {value:?} is not implemented by rkubelet yet ({what}); set {instead} or \
             run the upstream kubelet on this node"
        ))
    };
    // Options upstream would take (alpha ones with their gate) that rkubelet does not carry out; others are refused
    // by the CPU manager with upstream's text.
    let alpha = cfg.feature_gate("CPUManagerPolicyAlphaOptions").unwrap_or(false);
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
        let mut c = cfg;
        c.shutdown_grace_period = std::time::Duration::from_secs(30).into();
        assert_eq!(refuse(&c), Ok(()), "graceful node shutdown is carried out");
    }
}
