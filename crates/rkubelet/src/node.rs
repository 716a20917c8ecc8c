//! Facts of this node the kubelet needs at start: its name (`pkg/util/node` GetHostname) and IPs
//! (`--node-ip`, else the first global address of an interface that is up), memory capacity.

use std::net::IpAddr;

use anyhow::{Context, bail};

/// The node name: `--hostname-override`, else the host name; lower case, as upstream.
pub fn node_name(override_: Option<&str>) -> anyhow::Result<String> {
    let name = match override_ {
        Some(n) if !n.trim().is_empty() => n.trim().to_string(),
        _ => nix::unistd::gethostname().context("read host name")?.to_string_lossy().trim().to_string(),
    };
    if name.is_empty() {
        bail!("empty node name: set --hostname-override");
    }
    Ok(name.to_lowercase())
}

/// The node IPs: from `--node-ip`, else detected.
pub fn node_ips(flag: Option<&str>) -> anyhow::Result<Vec<String>> {
    if let Some(f) = flag {
        let ips: Vec<String> = f.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        for ip in &ips {
            ip.parse::<IpAddr>().with_context(|| format!("--node-ip: {ip:?} is not an IP address"))?;
        }
        return Ok(ips);
    }
    // As upstream's `ChooseHostInterface`: the address of the interface the default route goes through, else the
    // first global address of an up interface that is not a pod bridge or a virtual link.
    let default_iface = std::fs::read_to_string("/proc/net/route").ok().and_then(|t| default_route_interface(&t));
    let mut found = vec![];
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for a in addrs {
            let up = a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP);
            let lo = a.flags.contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK);
            let bridge = a.interface_name.starts_with("cni") || a.interface_name.starts_with("veth");
            if !up || lo || bridge {
                continue;
            }
            if let Some(v4) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
                let on_default = default_iface.as_deref() == Some(a.interface_name.as_str());
                found.push((!on_default, v4.ip().to_string()));
            }
        }
    }
    found.sort_by_key(|(not_default, _)| *not_default);
    Ok(found.into_iter().take(1).map(|(_, ip)| ip).collect())
}

/// The interface of the IPv4 default route with the lowest metric in `/proc/net/route`'s text.
fn default_route_interface(table: &str) -> Option<String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ...; RTF_UP is flag 0x1.
            let up = u32::from_str_radix(f.get(3)?, 16).ok()? & 1 == 1;
            (f.get(1) == Some(&"00000000") && f.get(7) == Some(&"00000000") && up)
                .then(|| Some((f.get(6)?.parse::<u32>().ok()?, f[0].to_string())))?
        })
        .min()
        .map(|(_, iface)| iface)
}

/// The pods' user namespace ranges (`MakeUserNsManager`): `userNamespaces.idsPerPod` IDs per pod out of the
/// kubelet's range, the ranges of pods already on disk taken back; a bad range or checkpoint stops start-up.
pub fn user_namespaces(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    pods_dir: &std::path::Path,
) -> anyhow::Result<kubelet_runtime::userns::UsernsManager> {
    use kubelet_runtime::userns;
    let ids = cfg.user_namespaces.as_ref().and_then(|u| u.ids_per_pod).unwrap_or(0);
    let ids = u32::try_from(ids).context("userNamespaces.idsPerPod")?;
    let mappings = userns::kubelet_mappings().context("kubelet mappings")?;
    userns::UsernsManager::new(
        pods_dir.to_path_buf(),
        ids,
        mappings,
        cfg.max_pods.max(1) as u32,
        userns::random_start(),
    )
    .context("create user namespace manager")
}

/// Total memory in bytes (8 GiB when /proc/meminfo cannot be read).
pub fn memory_capacity() -> u64 {
    match kubelet::nodestatus::machine::memory_capacity() {
        0 => 8 << 30,
        m => m,
    }
}

/// `kubeReserved` and `systemReserved` as the container manager uses them: with `reservedSystemCPUs` set, its
/// CPUs replace their CPU amounts (kube-reserved's dropped, system-reserved's their count), as upstream's
/// `--reserved-cpus` "supersedes cpu counts in --system-reserved and --kube-reserved".
pub fn reservations(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
) -> (std::collections::BTreeMap<String, String>, std::collections::BTreeMap<String, String>) {
    let (mut kube, mut system) = (cfg.kube_reserved.clone(), cfg.system_reserved.clone());
    if let Ok(cpus) = kubelet_types::cpuset::CpuSet::parse(&cfg.reserved_system_cpus)
        && !cpus.is_empty()
    {
        kube.remove("cpu");
        system.insert("cpu".into(), cpus.len().to_string());
    }
    (kube, system)
}

/// What the node status is made of (`initialNode`'s inputs and the setters').
pub fn node_inputs(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    node_name: &str,
    node_ips: &[String],
    root_dir: &std::path::Path,
    runtime_version: String,
) -> kubelet::nodestatus::setters::NodeInputs {
    kubelet::nodestatus::setters::NodeInputs {
        node_name: node_name.to_string(),
        hostname: node_name.to_string(),
        node_ips: node_ips.to_vec(),
        machine: kubelet::nodestatus::machine::read_machine_info(root_dir),
        max_pods: i64::from(cfg.max_pods),
        kube_reserved: reservations(cfg).0,
        system_reserved: reservations(cfg).1,
        eviction_hard: cfg.eviction_hard.clone().unwrap_or_default(),
        runtime_version,
        kubelet_version: crate::KUBERNETES_VERSION.into(),
        port: cfg.port,
        max_images: cfg.node_status_max_images.unwrap_or(50),
    }
}

/// The pods cgroup relative to the hierarchy roots, `<cgroupRoot>/kubepods` as the driver writes it (upstream's
/// `GetPodCgroupRoot`): `/kubepods`, `/kubeadm-node/kubepods`, or `/kubepods.slice`,
/// `/kubeadm_node.slice/kubeadm_node-kubepods.slice` with the systemd driver; none without `cgroupsPerQOS`.
pub fn pods_cgroup(cfg: &kubelet_config::kubelet_config::KubeletConfiguration) -> Option<String> {
    if !cfg.cgroups_per_qos.unwrap_or(true) {
        return None;
    }
    Some(kubelet_types::cgroup_name::pods_cgroup(&cfg.cgroup_root).literal(cfg.cgroup_driver == "systemd"))
}

fn enforce_config(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    inputs: &kubelet::nodestatus::setters::NodeInputs,
    mount: &std::path::Path,
) -> kubelet::node_allocatable::EnforceConfig {
    use kubelet::node_allocatable::{Amounts, EnforceConfig};
    use kubelet::nodestatus::quantity::parse;
    let amounts = |m: &std::collections::BTreeMap<String, String>| Amounts {
        cpu_milli: m.get("cpu").and_then(|v| parse(v)).map(|c| (c * 1000.0).round() as i64),
        memory: m.get("memory").and_then(|v| parse(v)).map(|b| b as i64),
        pids: m.get("pid").and_then(|v| parse(v)).map(|p| p as i64),
    };
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok());
    EnforceConfig {
        mount: mount.to_path_buf(),
        pods_cgroup: kubelet_types::cgroup_name::pods_cgroup(&cfg.cgroup_root).to_cgroupfs(),
        capacity: Amounts {
            cpu_milli: Some(inputs.machine.num_cores as i64 * 1000),
            memory: Some(inputs.machine.memory_capacity as i64),
            pids: pid_max,
        },
        system_reserved: amounts(&reservations(cfg).1),
        kube_reserved: amounts(&reservations(cfg).0),
        enforce: cfg.enforce_node_allocatable.clone().unwrap_or_default(),
        system_reserved_cgroup: cfg.system_reserved_cgroup.clone(),
        kube_reserved_cgroup: cfg.kube_reserved_cgroup.clone(),
    }
}

/// The pods cgroup's limits (allocatable or capacity) and the reserved cgroups to limit, for the systemd driver
/// (which applies them as unit properties).
pub fn pods_allocatable(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    inputs: &kubelet::nodestatus::setters::NodeInputs,
) -> (kubelet::node_allocatable::Amounts, Vec<kubelet::node_allocatable::ReservedTarget>) {
    let c = enforce_config(cfg, inputs, std::path::Path::new("/sys/fs/cgroup"));
    (kubelet::node_allocatable::pods_amounts(&c), kubelet::node_allocatable::reserved_targets(&c))
}

/// The topology manager's policy and scope (`topologymanager.NewManager`): the machine's NUMA nodes from sysfs; an
/// unknown policy, scope or option, or a machine with more NUMA nodes than allowed, stops the start.
pub fn topology_manager(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    sys: &std::path::Path,
) -> anyhow::Result<(kubelet_cm::topologymanager::Policy, kubelet::topology::Scope)> {
    use kubelet_cm::topologymanager::{NumaInfo, Policy, PolicyKind, PolicyOptions};
    let kind = PolicyKind::parse(&cfg.topology_manager_policy).map_err(anyhow::Error::msg)?;
    let scope = kubelet::topology::Scope::parse(&cfg.topology_manager_scope).map_err(anyhow::Error::msg)?;
    let options =
        PolicyOptions::parse(&cfg.topology_manager_policy_options, cfg.gate("TopologyManagerPolicyBetaOptions"))
            .map_err(anyhow::Error::msg)?;
    let numa = NumaInfo::read(sys).map_err(|e| anyhow::anyhow!("cannot discover NUMA topology: {e}"))?;
    if kind != PolicyKind::None && numa.nodes.len() > options.max_allowable_numa_nodes {
        anyhow::bail!("unsupported on machines with more than {} NUMA Nodes", options.max_allowable_numa_nodes);
    }
    tracing::info!(topologyPolicyName = kind.name(), topologyScopeName = %cfg.topology_manager_scope, numaNodes = ?numa.nodes, "Creating topology manager with policy per scope");
    Ok((Policy { kind, numa, options }, scope))
}

/// The memory manager (`memorymanager.NewManager` and `Start`): the None policy, or Static with `reservedMemory`
/// checked against the node allocatable reservation; its state file read now (one of another policy stops the start,
/// as upstream's).
pub fn memory_manager(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    inputs: &kubelet::nodestatus::setters::NodeInputs,
    root: &std::path::Path,
) -> anyhow::Result<kubelet_cm::memorymanager::MemoryManager> {
    use kubelet_cm::memorymanager::{MemoryManager, NONE, STATIC, numa_memory, policy::StaticPolicy, system_reserved};
    let policy = match cfg.memory_manager_policy.as_str() {
        NONE | "" => None,
        STATIC => {
            let nodes = numa_memory(std::path::Path::new("/sys"), memory_capacity());
            let reservations: Vec<(i64, std::collections::BTreeMap<String, u64>)> = cfg
                .reserved_memory
                .iter()
                .map(|r| {
                    let limits = r
                        .limits
                        .iter()
                        .map(|(k, q)| (k.clone(), kubelet_types::quantity::parse_quantity(&q.0).unwrap_or(0.0) as u64))
                        .collect();
                    (i64::from(r.numa_node), limits)
                })
                .collect();
            let reservation = kubelet::nodestatus::setters::memory_reservation(inputs);
            let reserved = system_reserved(&nodes, &reservation, &reservations).map_err(anyhow::Error::msg)?;
            Some(StaticPolicy::new(nodes, reserved).map_err(anyhow::Error::msg)?)
        }
        other => anyhow::bail!("unknown policy: {other:?}"),
    };
    MemoryManager::new(root, policy).map_err(anyhow::Error::msg)
}

/// The graceful node shutdown's groups from the configuration (empty: disabled).
pub fn shutdown_groups(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
) -> Vec<kubelet::nodeshutdown::Group> {
    let by_priority: Vec<kubelet::nodeshutdown::Group> = cfg
        .shutdown_grace_period_by_pod_priority
        .iter()
        .map(|g| kubelet::nodeshutdown::Group { priority: g.priority, grace_seconds: g.shutdown_grace_period_seconds })
        .collect();
    kubelet::nodeshutdown::groups(cfg.shutdown_grace_period.0, cfg.shutdown_grace_period_critical_pods.0, &by_priority)
}

/// What pods' resizes are checked against (`nodeAllocatableAbsolute`, the CPU manager's policy).
pub fn resize_facts(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    inputs: &kubelet::nodestatus::setters::NodeInputs,
) -> kubelet::allocation::ResizeFacts {
    let a = kubelet::node_allocatable::allocatable_absolute(&enforce_config(cfg, inputs, std::path::Path::new("/")));
    kubelet::allocation::ResizeFacts {
        allocatable_cpu_milli: a.cpu_milli.unwrap_or(inputs.machine.num_cores as i64 * 1000),
        allocatable_memory: a.memory.unwrap_or(memory_capacity() as i64),
        static_cpu_policy: cfg.cpu_manager_policy.eq_ignore_ascii_case("static"),
        static_memory_policy: cfg.memory_manager_policy == kubelet_cm::memorymanager::STATIC,
    }
}

/// `enforceNodeAllocatable` on the pods cgroup and the reserved cgroups (`enforceNodeAllocatableCgroups`); the
/// messages of upstream's `SuccessfulNodeAllocatableEnforcement` events. An error stops start-up, as upstream's.
pub fn enforce_node_allocatable(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    inputs: &kubelet::nodestatus::setters::NodeInputs,
    mount: &std::path::Path,
) -> anyhow::Result<Vec<String>> {
    let c = enforce_config(cfg, inputs, mount);
    let applied = kubelet::node_allocatable::enforce(&c)?;
    Ok(applied.into_iter().map(|a| a.message).collect())
}

/// Makes the node's CSINode (`initializeCSINode`), retried with back-off (1 s doubling to 1 min) until the apiserver
/// takes it or rkubelet stops. Upstream gives up after about 23 s and exits; here an apiserver that is away longer
/// only delays it (the CSINode is needed once a CSI driver registers, which writes it too).
pub async fn initialize_csi_node(
    nim: std::sync::Arc<kubelet_volume::csi::nodeinfo::NodeInfoManager>,
    state: std::sync::Arc<StorageState>,
    cancel: tokio_util::sync::CancellationToken,
) {
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        match nim.initialize().await {
            Ok(()) => {
                tracing::info!("CSINode initialized");
                state.set(None);
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, retryIn = ?delay, "Failed to initialize CSINode");
                state.set(Some(format!("failed to initialize CSINode: {e}")));
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(60));
    }
}

/// The CPU manager of `cfg` (`cpuManagerPolicy`), its state restored from `<root>/cpu_manager_state`: under
/// `static` the machine's topology from `/sys` and the reserved CPUs from `reservedSystemCPUs`, else as many as
/// kube- and system-reserved CPU rounded up (upstream's NewManager).
pub fn cpu_manager(
    cfg: &kubelet_config::kubelet_config::KubeletConfiguration,
    root: &std::path::Path,
) -> anyhow::Result<kubelet_cm::cpumanager::manager::CpuManager> {
    use kubelet_cm::cpumanager::{manager::CpuManager, policy::StaticPolicy, topology::Topology};
    if cfg.cpu_manager_policy != "static" {
        return CpuManager::new(root, None).map_err(anyhow::Error::msg);
    }
    let topo = Topology::discover(std::path::Path::new("/sys")).map_err(|e| anyhow::anyhow!("[cpumanager] {e}"))?;
    let reserved = kubelet_types::cpuset::CpuSet::parse(&cfg.reserved_system_cpus)
        .map_err(|e| anyhow::anyhow!("reservedSystemCPUs {:?}: {e}", cfg.reserved_system_cpus))?;
    let num_reserved = if reserved.is_empty() {
        let cpu = |m: &std::collections::BTreeMap<String, String>| {
            m.get("cpu").and_then(|q| kubelet_types::quantity::parse_quantity(q)).unwrap_or(0.0)
        };
        let (kube, system) = reservations(cfg);
        let total = cpu(&kube) + cpu(&system);
        if total <= 0.0 {
            anyhow::bail!("[cpumanager] unable to determine reserved CPU resources for static policy");
        }
        total.ceil() as usize
    } else {
        if !reserved.is_subset_of(&topo.all()) {
            anyhow::bail!("reserved-cpus: {reserved} is not a subset of online-cpus: {}", topo.all());
        }
        reserved.len()
    };
    let options = kubelet_cm::cpumanager::policy::StaticPolicyOptions::parse(
        &cfg.cpu_manager_policy_options,
        cfg.gate("CPUManagerPolicyAlphaOptions"),
        cfg.gate("CPUManagerPolicyBetaOptions"),
    )
    .map_err(|e| anyhow::anyhow!("new static policy error: {e}"))?;
    let policy =
        StaticPolicy::new(topo, num_reserved, Some(reserved)).map_err(anyhow::Error::msg)?.with_options(options);
    CpuManager::new(root, Some(policy)).map_err(anyhow::Error::msg)
}

/// The kubelet's storage error for the Node's Ready condition (`runtimeState.storageErrors`): "CSINode is not yet
/// initialized" from the start of a node with an apiserver until its CSINode is made, as upstream's CSI plugin
/// sets it. Each change wakes the node status, so the node turns Ready as soon as the CSINode exists.
pub struct StorageState {
    error: std::sync::Mutex<Option<String>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl StorageState {
    /// The state of a node with an apiserver at start.
    pub fn new() -> Self {
        let error = Some("CSINode is not yet initialized".to_string());
        Self { error: std::sync::Mutex::new(error), changes: tokio::sync::watch::channel(0).0 }
    }

    /// The error, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap().clone()
    }

    fn set(&self, error: Option<String>) {
        *self.error.lock().unwrap() = error;
        self.changes.send_modify(|n| *n += 1);
    }

    /// Its changes, for the node status.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet::cm::PodCgroups;
    use kubelet_config::kubelet_config::KubeletConfiguration;

    fn cfg(root: &str, driver: &str) -> KubeletConfiguration {
        KubeletConfiguration { cgroup_root: root.into(), cgroup_driver: driver.into(), ..Default::default() }
    }

    #[test]
    fn the_node_ip_comes_from_the_default_routes_interface_with_the_lowest_metric() {
        let table = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n\
                     cni1\t0000590A\t00000000\t0001\t0\t0\t0\t0000FFFF\n\
                     wlan0\t00000000\t010200C0\t0003\t0\t0\t600\t00000000\n\
                     eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\n\
                     down0\t00000000\t010200C0\t0002\t0\t0\t1\t00000000\n";
        assert_eq!(default_route_interface(table).as_deref(), Some("eth0"));
        assert_eq!(default_route_interface("Iface\tDestination\n"), None);
    }

    #[test]
    fn the_pods_cgroup_is_under_the_cgroup_root_in_the_driver_s_form() {
        let pods = |root: &str, driver: &str| pods_cgroup(&cfg(root, driver)).unwrap();
        assert_eq!(pods("", "cgroupfs"), "/kubepods");
        assert_eq!(pods("/", "cgroupfs"), "/kubepods");
        assert_eq!(pods("/", "systemd"), "/kubepods.slice");
        assert_eq!(pods("/kubeadm-node", "cgroupfs"), "/kubeadm-node/kubepods");
        assert_eq!(pods("/kubeadm-node", "systemd"), "/kubeadm_node.slice/kubeadm_node-kubepods.slice");
        assert_eq!(pods("/a/b", "cgroupfs"), "/a/b/kubepods");
        assert_eq!(pods("/a/b", "systemd"), "/a.slice/a-b.slice/a-b-kubepods.slice");
        let off = KubeletConfiguration { cgroups_per_qos: Some(false), ..cfg("/a", "cgroupfs") };
        assert_eq!(pods_cgroup(&off), None);
    }

    #[test]
    fn node_allocatable_is_enforced_on_the_kubepods_made_under_the_cgroup_root() {
        let machine = tempfile::tempdir().unwrap();
        for root in ["/", "/kubeadm-node", "/a/b"] {
            let m = tempfile::tempdir().unwrap();
            let rel = root.trim_start_matches('/');
            for h in ["cpu", "memory", "pids"] {
                std::fs::create_dir_all(m.path().join(h).join(rel)).unwrap();
            }
            let c = KubeletConfiguration {
                enforce_node_allocatable: Some(vec!["pods".into()]),
                system_reserved: [("cpu".to_string(), "100m".to_string())].into(),
                ..cfg(root, "cgroupfs")
            };
            kubelet::cm::root::validate_cgroup_root(m.path(), root, false).unwrap();
            kubelet::cm::CgroupfsManager::new(m.path()).with_cgroup_root(root).setup_qos().unwrap();
            let inputs = node_inputs(&c, "n", &[], machine.path(), "containerd".into());
            let events = enforce_node_allocatable(&c, &inputs, m.path()).unwrap();
            assert_eq!(events, ["Updated Node Allocatable limit across pods"], "{root}");
            let shares = kubelet_runtime::config_gen::milli_cpu_to_shares(inputs.machine.num_cores as i64 * 1000 - 100);
            let file = m.path().join("cpu").join(rel).join("kubepods/cpu.shares");
            assert_eq!(std::fs::read_to_string(&file).unwrap(), shares.to_string(), "{root}");
        }
    }

    #[test]
    fn reserved_system_cpus_supersede_the_cpu_reservations() {
        let mut c = KubeletConfiguration::default();
        c.kube_reserved.insert("cpu".into(), "500m".into());
        c.kube_reserved.insert("memory".into(), "1Gi".into());
        c.system_reserved.insert("cpu".into(), "200m".into());
        assert_eq!(reservations(&c).0["cpu"], "500m", "without reservedSystemCPUs: as configured");
        c.reserved_system_cpus = "0,2".into();
        let (kube, system) = reservations(&c);
        assert_eq!((kube.get("cpu"), kube["memory"].as_str(), system["cpu"].as_str()), (None, "1Gi", "2"));
    }
}
