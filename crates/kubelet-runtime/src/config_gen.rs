//! CRI configs from a pod spec: the sandbox (`kuberuntime_sandbox.go` generatePodSandboxConfig,
//! `pkg/kubelet/network/dns/dns.go`) and each container (`kuberuntime_container.go` generateContainerConfig,
//! `kuberuntime_container_linux.go`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, SecurityContext};
use kubelet_cri::api;

use crate::labels;
use crate::manager::RuntimeManagerConfig;
use crate::qos;

/// Upstream's limits on resolv.conf (`validation.MaxDNSSearchPaths`, `MaxDNSNameservers`).
const MAX_DNS_SEARCH: usize = 32;
const MAX_DNS_NAMESERVERS: usize = 3;

/// `/var/log/pods/<namespace>_<name>_<uid>`.
pub fn pod_log_dir(root: &Path, pod: &Pod) -> PathBuf {
    root.join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    ))
}

/// The `/var/log/containers` link name of a container: `<pod>_<namespace>_<container>-<containerID>.log`.
pub fn container_log_link(root: &Path, pod: &Pod, container: &str, id: &str) -> PathBuf {
    root.join(format!(
        "{}_{}_{}-{}.log",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        container,
        id
    ))
}

fn spec(pod: &Pod) -> &PodSpec {
    static EMPTY: std::sync::OnceLock<PodSpec> = std::sync::OnceLock::new();
    pod.spec.as_ref().unwrap_or_else(|| EMPTY.get_or_init(PodSpec::default))
}

/// Whether the pod uses the host's network namespace.
pub fn host_network(pod: &Pod) -> bool {
    spec(pod).host_network.unwrap_or(false)
}

fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    let s = spec(pod);
    let node = api::NamespaceMode::Node as i32;
    let pod_mode = api::NamespaceMode::Pod as i32;
    api::NamespaceOption {
        network: if host_network(pod) { node } else { pod_mode },
        pid: if s.host_pid.unwrap_or(false) {
            node
        } else if s.share_process_namespace.unwrap_or(false) {
            pod_mode
        } else {
            api::NamespaceMode::Container as i32
        },
        ipc: if s.host_ipc.unwrap_or(false) { node } else { pod_mode },
        ..Default::default()
    }
}

/// Puts the pod's user namespace (`NamespacesForPod`' `UsernsOptions`) into its sandbox's namespace options.
pub fn set_sandbox_user_namespace(config: &mut api::PodSandboxConfig, ns: Option<api::UserNamespace>) {
    if let Some(ns_opts) =
        config.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut())
    {
        ns_opts.userns_options = ns;
    }
}

/// Puts the pod's user namespace into a container's namespace options, and its mappings on every mount of the
/// container (`applyPlatformSpecificContainerConfig`: idmapped mounts, so the pod's IDs own its volumes).
pub fn set_container_user_namespace(config: &mut api::ContainerConfig, ns: Option<api::UserNamespace>) {
    let Some(ns) = ns else { return };
    for m in &mut config.mounts {
        m.uid_mappings = ns.uids.clone();
        m.gid_mappings = ns.gids.clone();
    }
    if let Some(ns_opts) =
        config.linux.as_mut().and_then(|l| l.security_context.as_mut()).and_then(|s| s.namespace_options.as_mut())
    {
        ns_opts.userns_options = Some(ns);
    }
}

/// The network namespace mode a sandbox of this pod must have.
pub fn network_mode(pod: &Pod) -> i32 {
    namespace_options(pod).network
}

/// Parses a resolv.conf as upstream's `parseResolvConf`: comment lines start with `#` or `;`, the last `search`
/// line wins (without `.` and trailing dots), options merge with the last value of each winning.
pub fn parse_resolv_conf(text: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut ns, mut search, mut opts): (Vec<String>, Vec<String>, Vec<String>) = (vec![], vec![], vec![]);
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => ns.extend(f.next().map(str::to_string)),
            Some("search") => {
                search = f.map(|d| d.trim_end_matches('.').to_string()).filter(|d| !d.is_empty()).collect();
            }
            Some("options") => opts.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    // The last value of each option wins, in the order of the last values (linear: a resolv.conf of many
    // options took quadratic time when each one was merged as it came).
    let name = |o: &str| o.split(':').next().unwrap_or("").to_string();
    let last: std::collections::HashMap<String, usize> = opts.iter().enumerate().map(|(i, o)| (name(o), i)).collect();
    let opts = opts.into_iter().enumerate().filter(|(i, o)| last.get(&name(o)) == Some(i)).map(|(_, o)| o).collect();
    (ns, search, opts)
}

/// Upstream's limit on the length of the search line (`MaxDNSSearchListChars`).
const MAX_DNS_SEARCH_CHARS: usize = 2048;
/// A search domain longer than this is dropped (`DNS1123SubdomainMaxLength`).
const MAX_DNS_DOMAIN: usize = 253;

fn omit_duplicates(v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// The sandbox DNS config for the pod's dnsPolicy (`dns.go` GetPodDNS), with the `DNSConfigForming` and
/// `MissingClusterDNS` warnings upstream records as events.
pub fn dns_config(cfg: &RuntimeManagerConfig, pod: &Pod) -> (api::DnsConfig, Vec<(&'static str, String)>) {
    let s = spec(pod);
    let mut warnings = vec![];
    let (mut servers, mut searches, mut options) = match &cfg.resolv_conf {
        Some(p) => parse_resolv_conf(&std::fs::read_to_string(p).unwrap_or_default()),
        None => (vec![], vec![], vec![]),
    };
    let policy = s.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cluster = match policy {
        "None" => {
            (servers, searches, options) = (vec![], vec![], vec![]);
            None
        }
        "ClusterFirstWithHostNet" => Some(true),
        "Default" => Some(false),
        _ => Some(!host_network(pod)),
    };
    let mut host = cluster == Some(false);
    if cluster == Some(true) {
        if cfg.cluster_dns.is_empty() {
            warnings.push((
                "MissingClusterDNS",
                format!(
                    "pod: {:?}. kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                    crate::lifecycle::format_pod(pod)
                ),
            ));
            host = true;
        } else {
            servers = cfg.cluster_dns.clone();
            if !cfg.cluster_domain.is_empty() {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                let d = &cfg.cluster_domain;
                let mut cs = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
                cs.append(&mut searches);
                searches = omit_duplicates(cs);
            }
            options = vec!["ndots:5".to_string()];
        }
    }
    if host && cfg.resolv_conf.is_none() {
        // No resolv.conf for pods: lookups go to the local machine (the documented default of no nameserver line).
        servers =
            cfg.node_ips.iter().map(|ip| if ip.contains(':') { "::1" } else { "127.0.0.1" }.to_string()).collect();
        if servers.is_empty() {
            servers.push("127.0.0.1".into());
        }
        searches = vec![".".into()];
    }
    if let Some(dc) = s.dns_config.as_ref() {
        servers.extend(dc.nameservers.iter().flatten().cloned());
        servers = omit_duplicates(servers);
        searches.extend(dc.searches.iter().flatten().cloned());
        searches = omit_duplicates(searches);
        for o in dc.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            options.retain(|x: &String| x.split(':').next() != Some(name.as_str()));
            options.push(match o.value.as_deref().filter(|v| !v.is_empty()) {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    if servers.len() > MAX_DNS_NAMESERVERS {
        servers.truncate(MAX_DNS_NAMESERVERS);
        warnings.push((
            "DNSConfigForming",
            format!(
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
                servers.join(" ")
            ),
        ));
    }
    let mut exceeded = false;
    if searches.len() > MAX_DNS_SEARCH {
        searches.truncate(MAX_DNS_SEARCH);
        exceeded = true;
    }
    let before = searches.len();
    searches.retain(|d| d.len() <= MAX_DNS_DOMAIN);
    exceeded |= searches.len() != before;
    let line_len = searches.join(" ").len();
    if line_len > MAX_DNS_SEARCH_CHARS {
        let mut cut = 0;
        while line_len - cut > MAX_DNS_SEARCH_CHARS {
            cut += searches.pop().map(|d| d.len() + 1).unwrap_or(line_len);
        }
        exceeded = true;
    }
    if exceeded {
        warnings.push((
            "DNSConfigForming",
            format!(
                "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                searches.join(" ")
            ),
        ));
    }
    (api::DnsConfig { servers, searches, options }, warnings)
}

fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    let mut out = vec![];
    for c in &spec(pod).containers {
        for p in c.ports.iter().flatten() {
            let host_port = p.host_port.unwrap_or(0);
            if host_port <= 0 && !host_network(pod) {
                continue;
            }
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => api::Protocol::Udp,
                Some("SCTP") => api::Protocol::Sctp,
                _ => api::Protocol::Tcp,
            } as i32;
            out.push(api::PortMapping {
                protocol,
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    out
}

/// The pod's hostname and domain (`GeneratePodHostNameAndDomain`): `spec.hostname` or the pod name, cut to 63
/// characters; the domain `<subdomain>.<namespace>.svc.<clusterDomain>` when a subdomain is set.
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, String) {
    let s = spec(pod);
    let mut h =
        s.hostname.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    if h.len() > 63 {
        h.truncate(63);
        while h.ends_with(['-', '.']) {
            h.pop();
        }
    }
    let domain = match s.subdomain.as_deref().filter(|d| !d.is_empty()) {
        Some(sub) => format!("{sub}.{}.svc.{cluster_domain}", pod.metadata.namespace.as_deref().unwrap_or("default")),
        None => String::new(),
    };
    (h, domain)
}

/// The sandbox's hostname: empty for the host network; the FQDN with `setHostnameAsFQDN` and a subdomain.
pub fn pod_hostname(cfg: &RuntimeManagerConfig, pod: &Pod) -> String {
    if host_network(pod) {
        return String::new();
    }
    let (h, domain) = hostname_and_domain(pod, &cfg.cluster_domain);
    if spec(pod).set_hostname_as_fqdn == Some(true) && !domain.is_empty() {
        return format!("{h}.{domain}");
    }
    h
}

/// The longest FQDN `setHostnameAsFQDN` may make (`hostnameMaxLen`).
const HOSTNAME_MAX_LEN: usize = 64;

/// Why the pod's hostname cannot be its FQDN (`GeneratePodHostNameAndDomain`): with `setHostnameAsFQDN` the
/// kernel's hostname would be longer than 64 characters. Upstream fails the sandbox with this text.
pub fn fqdn_error(cfg: &RuntimeManagerConfig, pod: &Pod) -> Option<String> {
    let name = pod_hostname(cfg, pod);
    (spec(pod).set_hostname_as_fqdn == Some(true) && name.len() > HOSTNAME_MAX_LEN).then(|| {
        format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {name} is too long \
             ({HOSTNAME_MAX_LEN} characters is the max, {} characters requested)",
            name.len()
        )
    })
}

/// The cgroup parent of the pod, or empty when the kubelet does not manage pod cgroups: the pod's cgroup under
/// `<cgroupRoot>/kubepods` as the driver writes it (upstream's `cgroupManager.Name`: `/kubepods/burstable/pod<uid>`,
/// or the slice's path `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`).
pub fn cgroup_parent(cfg: &RuntimeManagerConfig, pod: &Pod) -> String {
    if !cfg.cgroups_per_qos {
        return String::new();
    }
    let (class, uid) = (qos::pod_qos(pod), pod.metadata.uid.as_deref().unwrap_or(""));
    let pods = kubelet_types::cgroup_name::pods_cgroup(&cfg.cgroup_root);
    kubelet_types::cgroup_name::pod_cgroup(&pods, class, uid).literal(cfg.systemd_cgroup)
}

/// The `PodSandboxConfig` of a pod for sandbox `attempt`.
pub fn sandbox_config(cfg: &RuntimeManagerConfig, pod: &Pod, attempt: u32) -> api::PodSandboxConfig {
    sandbox_config_with_warnings(cfg, pod, attempt).0
}

/// As [`sandbox_config`], with the DNS warnings upstream records as events when it creates the sandbox.
pub fn sandbox_config_with_warnings(
    cfg: &RuntimeManagerConfig,
    pod: &Pod,
    attempt: u32,
) -> (api::PodSandboxConfig, Vec<(&'static str, String)>) {
    let (dns, warnings) = dns_config(cfg, pod);
    let s = spec(pod);
    let psc = s.security_context.as_ref();
    // `HasPrivilegedContainer`: every container, ephemeral ones included.
    let ephemeral = s.ephemeral_containers.iter().flatten().map(|e| e.security_context.as_ref());
    let privileged = s
        .containers
        .iter()
        .chain(s.init_containers.iter().flatten())
        .map(|c| c.security_context.as_ref())
        .chain(ephemeral)
        .any(|sc| sc.and_then(|sc| sc.privileged).unwrap_or(false));
    let sysctls: HashMap<String, String> = psc
        .and_then(|p| p.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (sysctl_dots(&s.name), s.value.clone()))
        .collect();
    let (sandbox_resources, sandbox_overhead) = crate::resources::sandbox_resources(cfg, pod);
    let config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: pod_hostname(cfg, pod),
        log_directory: pod_log_dir(&cfg.pod_logs_dir, pod).to_string_lossy().into_owned(),
        dns_config: Some(dns),
        port_mappings: port_mappings(pod),
        labels: labels::sandbox_labels(pod),
        annotations: labels::sandbox_annotations(pod),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(cfg, pod),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc.and_then(|p| p.run_as_user).map(|value| api::Int64Value { value }),
                run_as_group: psc.and_then(|p| p.run_as_group).map(|value| api::Int64Value { value }),
                supplemental_groups: supplemental_groups(pod),
                supplemental_groups_policy: crate::security::cri_supplemental_groups_policy(pod),
                selinux_options: crate::security::cri_selinux(psc.and_then(|p| p.se_linux_options.as_ref())),
                privileged,
                // The sandbox always runs under the runtime's default profile, so pods may use tighter ones.
                seccomp: Some(api::SecurityProfile {
                    profile_type: api::security_profile::ProfileType::RuntimeDefault as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            sysctls,
            overhead: Some(sandbox_overhead),
            resources: Some(sandbox_resources),
        }),
        ..Default::default()
    };
    (config, warnings)
}

/// `MilliCPUToShares`: 1024 shares per CPU, integer arithmetic, within [2, 262144].
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return 2;
    }
    (milli * 1024 / 1000).clamp(2, 262_144)
}

/// `MilliCPUToQuota`: the CFS quota of a limit, at least 1 ms.
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli * period / 1000).max(1000)
}

/// Whether the pod is a static (or mirror) pod of priority class `system-node-critical` (`IsNodeCriticalPod`).
pub fn is_node_critical_pod(pod: &Pod) -> bool {
    let ann = pod.metadata.annotations.as_ref();
    let is_static = ann.is_some_and(|a| {
        a.contains_key(kubelet_types::labels::CONFIG_MIRROR)
            || a.get(kubelet_types::labels::CONFIG_SOURCE).is_some_and(|s| s != "api")
    });
    let critical_priority = spec(pod).priority.is_some_and(|p| p >= 2_000_000_000);
    (is_static || critical_priority) && spec(pod).priority_class_name.as_deref() == Some("system-node-critical")
}

/// A sysctl name in dot form (`ConvertPodSysctlsVariableToDotsSeparator`): when the first separator is a slash,
/// slashes and dots are swapped.
pub fn sysctl_dots(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| {
                if c == '/' {
                    '.'
                } else if c == '.' {
                    '/'
                } else {
                    c
                }
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The user an image runs as (`getImageUser`): a numeric UID, else a user name; neither means root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageUser {
    /// Numeric UID.
    pub uid: Option<i64>,
    /// Non-numeric user name.
    pub username: String,
}

/// The fsGroup and supplemental groups of the pod, in upstream's order.
fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let psc = spec(pod).security_context.as_ref();
    let mut g: Vec<i64> = psc.and_then(|p| p.fs_group).into_iter().collect();
    g.extend(psc.and_then(|p| p.supplemental_groups.clone()).unwrap_or_default());
    g
}

/// The container's security context with the pod's as fallback (`DetermineEffectiveSecurityContext`).
pub fn effective_security_context(pod: &Pod, c: &Container) -> SecurityContext {
    let mut sc = c.security_context.clone().unwrap_or_default();
    if let Some(p) = spec(pod).security_context.as_ref() {
        sc.run_as_user = sc.run_as_user.or(p.run_as_user);
        sc.run_as_group = sc.run_as_group.or(p.run_as_group);
        sc.run_as_non_root = sc.run_as_non_root.or(p.run_as_non_root);
        if sc.se_linux_options.is_none() {
            sc.se_linux_options = p.se_linux_options.clone();
        }
        if sc.seccomp_profile.is_none() {
            sc.seccomp_profile = p.seccomp_profile.clone();
        }
        if sc.app_armor_profile.is_none() {
            sc.app_armor_profile = p.app_armor_profile.clone();
        }
    }
    sc
}

/// `runAsNonRoot` checked against the effective user and the image's (`verifyRunAsNonRoot`).
pub fn verify_run_as_non_root(pod: &Pod, c: &Container, image: &ImageUser) -> Result<(), String> {
    let sc = effective_security_context(pod, c);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let who = crate::lifecycle::format_pod(pod);
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(format!("container's runAsUser breaks non-root policy (pod: {who:?}, container: {})", c.name));
        }
        return Ok(());
    }
    match (image.uid, image.username.as_str()) {
        (Some(0), _) | (None, "") => {
            Err(format!("container has runAsNonRoot and image will run as root (pod: {who:?}, container: {})", c.name))
        }
        (None, name) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root (pod: {who:?}, container: {})",
            c.name
        )),
        _ => Ok(()),
    }
}

/// The seccomp profile of a container (`getSeccompProfile`): the container's, else the pod's, else
/// `RuntimeDefault` with `seccompDefault`, else `Unconfined`. Localhost profiles live under `<root-dir>/seccomp`.
pub fn seccomp_profile(cfg: &RuntimeManagerConfig, sc: &SecurityContext) -> Result<api::SecurityProfile, String> {
    use api::security_profile::ProfileType;
    let profile = |t: ProfileType, r: String| api::SecurityProfile { profile_type: t as i32, localhost_ref: r };
    Ok(match sc.seccomp_profile.as_ref() {
        Some(p) if p.type_ == "RuntimeDefault" => profile(ProfileType::RuntimeDefault, String::new()),
        Some(p) if p.type_ == "Localhost" => match p.localhost_profile.as_deref().filter(|l| !l.is_empty()) {
            Some(l) => {
                profile(ProfileType::Localhost, cfg.root_dir.join("seccomp").join(l).to_string_lossy().into_owned())
            }
            None => return Err("localhostProfile must be set if seccompProfile type is Localhost.".into()),
        },
        Some(_) => profile(ProfileType::Unconfined, String::new()),
        None if cfg.seccomp_default => profile(ProfileType::RuntimeDefault, String::new()),
        None => profile(ProfileType::Unconfined, String::new()),
    })
}

/// Paths masked in /proc and /sys of a container with the default procMount (`DefaultMaskedPaths`).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Paths read-only in /proc of a container with the default procMount (`DefaultReadonlyPaths`).
pub const DEFAULT_READONLY_PATHS: &[&str] = &["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];

// The deprecated `apparmor_profile` string is still sent, as upstream does, for runtimes that predate `apparmor`.
#[allow(deprecated)]
fn container_security(
    cfg: &RuntimeManagerConfig,
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
) -> Result<api::LinuxContainerSecurityContext, String> {
    let sc = effective_security_context(pod, c);
    let caps = sc.capabilities.as_ref();
    // Unmasked only ever in the pod's own user namespace (the API's rule, kept here too): never leave /proc
    // unmasked and writable for a container in the host's.
    let own_userns = pod.spec.as_ref().and_then(|s| s.host_users) == Some(false);
    let unmasked = own_userns && sc.proc_mount.as_deref() == Some("Unmasked");
    let paths = |list: &[&str]| if unmasked { vec![] } else { list.iter().map(|p| p.to_string()).collect() };
    let (apparmor, apparmor_profile) = crate::security::cri_app_armor(pod, c)?;
    let mut out = api::LinuxContainerSecurityContext {
        capabilities: caps.map(|c| api::Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(pod)),
        run_as_user: sc.run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: supplemental_groups(pod),
        no_new_privs: sc.allow_privilege_escalation.map(|a| !a).unwrap_or(false),
        masked_paths: paths(DEFAULT_MASKED_PATHS),
        readonly_paths: paths(DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp_profile(cfg, &sc)?),
        selinux_options: crate::security::cri_selinux(sc.se_linux_options.as_ref()),
        supplemental_groups_policy: crate::security::cri_supplemental_groups_policy(pod),
        apparmor,
        apparmor_profile,
        ..Default::default()
    };
    if out.run_as_user.is_none() {
        match image.uid {
            Some(uid) => out.run_as_user = Some(api::Int64Value { value: uid }),
            None => out.run_as_username = image.username.clone(),
        }
    }
    Ok(out)
}

/// The `ContainerConfig` of a container at `restart_count`. `env` is the container's environment (see
/// [`crate::env`]); `mounts` are the kubelet-managed mounts (etc-hosts, termination log). `target` is the
/// container ID an ephemeral container targets: it joins that container's PID namespace
/// (`NamespaceMode::Target`) unless the pod shares one PID namespace or uses the host's
/// (`generateLinuxContainerConfig`).
#[allow(clippy::too_many_arguments)]
pub fn container_config(
    cfg: &RuntimeManagerConfig,
    pod: &Pod,
    c: &Container,
    restart_count: i32,
    env: &[(String, String)],
    mounts: Vec<api::Mount>,
    image_user: &ImageUser,
    target: Option<&str>,
) -> Result<api::ContainerConfig, String> {
    verify_run_as_non_root(pod, c, image_user)?;
    let mut security = container_security(cfg, pod, c, image_user)?;
    if let Some(id) = target
        && let Some(ns) = security.namespace_options.as_mut()
        && ns.pid == api::NamespaceMode::Container as i32
    {
        ns.pid = api::NamespaceMode::Target as i32;
        ns.target_id = id.to_string();
    }
    let exp = |v: &Option<Vec<String>>| crate::env::expand_command(v.as_deref().unwrap_or(&[]), env);
    let env: Vec<api::KeyValue> = env.iter().map(|(k, v)| api::KeyValue { key: k.clone(), value: v.clone() }).collect();
    let image = c.image.clone().unwrap_or_default();
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata { name: c.name.clone(), attempt: restart_count as u32 }),
        image: Some(api::ImageSpec { image: image.clone(), user_specified_image: image, ..Default::default() }),
        command: exp(&c.command),
        args: exp(&c.args),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env,
        mounts,
        labels: labels::container_labels(pod, c),
        annotations: labels::container_annotations(pod, c, restart_count),
        log_path: format!("{}/{}.log", c.name, restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(crate::resources::container_resources(cfg, pod, c)),
            security_context: Some(security),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
#[path = "config_gen_tests.rs"]
mod tests;
