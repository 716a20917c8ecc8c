//! Pods against the CRI requests built for them: pods with arbitrary combinations of the security-relevant fields
//! (users, groups, runAsNonRoot, privileged, capabilities, read-only root, privilege escalation, procMount,
//! seccomp, SELinux, AppArmor, sysctls, host namespaces, supplemental groups, fsGroup, limits, ports, hostnames)
//! and now and then one field of `kubelet::admission_fields::UNSUPPORTED_FIELDS`, judged by rkubelet's pod admit
//! handlers. The property is the house rule: a pod is refused at admission, or the `PodSandboxConfig` and every
//! `ContainerConfig` that `kubelet_runtime::config_gen` builds for it carry each field it set, as upstream's
//! `generatePodSandboxLinuxConfig` and `determineEffectiveSecurityContext` map it. The table's own verdicts are
//! checked too: a pod is refused as `UnsupportedPodField` exactly when it sets one of its fields.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    self as v1, AppArmorProfile, Capabilities, Container, ContainerPort, PodSecurityContext, PodSpec,
    ResourceRequirements, SELinuxOptions, SeccompProfile, SecurityContext, Sysctl,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet::admission::PodAdmitHandler;
use kubelet::admission_fields::Object;
use kubelet_cri::api;
use kubelet_runtime::RuntimeManagerConfig;
use kubelet_runtime::config_gen::{self, ImageUser};
use kubelet_types::Pod;
use proptest::option::of;
use proptest::prelude::*;
use proptest::sample::select;

use crate::engine::run;
use crate::{Options, Report};

const CAPS: &[&str] = &["NET_ADMIN", "SYS_TIME", "CHOWN", "ALL", "NET_BIND_SERVICE"];
/// Safe sysctls of the network and IPC namespaces, one slash-separated.
const SAFE_SYSCTLS: &[&str] = &["net.ipv4.ip_local_port_range", "net/ipv4/tcp_syncookies", "kernel.shm_rmid_forced"];
/// Sysctls the default allowlist refuses.
const UNSAFE_SYSCTLS: &[&str] = &["kernel.sched_latency_ns", "net.core.somaxconn"];

/// A generated pod, the user its image runs as, and the unsupported field it was given (if any).
#[derive(Clone, Debug)]
pub(crate) struct Case {
    pod: Pod,
    image_user: ImageUser,
    seccomp_default: bool,
    /// Whether the node's kernel enforces AppArmor (the AppArmor admit handler's view).
    apparmor_host: bool,
    unsupported: Option<(Object, &'static str)>,
}

/// `RuntimeDefault`, `Unconfined` or `Localhost` with a name of `names`, as `make` builds a profile of a type.
fn profile<T: Clone + std::fmt::Debug + 'static>(
    make: fn(&str, Option<String>) -> T,
    names: &'static str,
) -> BoxedStrategy<T> {
    prop_oneof![
        Just(make("RuntimeDefault", None)),
        Just(make("Unconfined", None)),
        names.prop_map(move |l| make("Localhost", Some(l))),
    ]
    .boxed()
}

fn seccomp() -> BoxedStrategy<SeccompProfile> {
    profile(|t, l| SeccompProfile { type_: t.into(), localhost_profile: l }, "[a-z]{1,8}\\.json")
}

fn app_armor() -> BoxedStrategy<AppArmorProfile> {
    profile(|t, l| AppArmorProfile { type_: t.into(), localhost_profile: l }, "[a-z][a-z-]{0,8}")
}

fn se_linux() -> BoxedStrategy<SELinuxOptions> {
    (
        of(select(&["system_u", "user_u"][..])),
        of(Just("system_r")),
        of(select(&["spc_t", "container_t"][..])),
        of(select(&["s0", "s0:c1,c2"][..])),
    )
        .prop_map(|(u, r, t, l)| SELinuxOptions {
            user: u.map(Into::into),
            role: r.map(Into::into),
            type_: t.map(Into::into),
            level: l.map(Into::into),
        })
        .boxed()
}

fn caps() -> BoxedStrategy<Capabilities> {
    let list = || of(proptest::collection::vec(select(CAPS).prop_map(String::from), 0..3));
    (list(), list()).prop_map(|(add, drop)| Capabilities { add, drop }).boxed()
}

fn user() -> BoxedStrategy<i64> {
    prop_oneof![Just(0i64), 1i64..70_000].boxed()
}

fn container_security() -> BoxedStrategy<SecurityContext> {
    let ids = (of(user()), of(0i64..70_000), of(any::<bool>()));
    let flags = (of(any::<bool>()), of(any::<bool>()), of(any::<bool>()), of(select(&["Default", "Unmasked"][..])));
    let profiles = (of(caps()), of(seccomp()), of(se_linux()), of(app_armor()));
    (ids, flags, profiles)
        .prop_map(|((uid, gid, non_root), (privileged, ro, escalation, proc_mount), (caps, seccomp, selinux, aa))| {
            SecurityContext {
                run_as_user: uid,
                run_as_group: gid,
                run_as_non_root: non_root,
                privileged,
                read_only_root_filesystem: ro,
                allow_privilege_escalation: escalation,
                proc_mount: proc_mount.map(Into::into),
                capabilities: caps,
                seccomp_profile: seccomp,
                se_linux_options: selinux,
                app_armor_profile: aa,
                windows_options: None,
            }
        })
        .boxed()
}

fn pod_security() -> BoxedStrategy<PodSecurityContext> {
    let ids = (of(user()), of(0i64..70_000), of(any::<bool>()), of(0i64..70_000));
    let groups = of(proptest::collection::vec(0i64..70_000, 0..3));
    let name = prop_oneof![4 => select(SAFE_SYSCTLS), 1 => select(UNSAFE_SYSCTLS)];
    let sysctls = of(proptest::collection::vec(name.prop_map(|n| Sysctl { name: n.into(), value: "1".into() }), 0..3));
    let profiles = (of(seccomp()), of(se_linux()), of(app_armor()));
    (ids, groups, sysctls, profiles)
        .prop_map(|((uid, gid, non_root, fs_group), supplemental_groups, sysctls, (seccomp, selinux, aa))| {
            PodSecurityContext {
                run_as_user: uid,
                run_as_group: gid,
                run_as_non_root: non_root,
                fs_group,
                supplemental_groups,
                sysctls,
                seccomp_profile: seccomp,
                se_linux_options: selinux,
                app_armor_profile: aa,
                ..Default::default()
            }
        })
        .boxed()
}

fn limits() -> BoxedStrategy<Option<ResourceRequirements>> {
    (of(select(&["100m", "1", "2500m"][..])), of(select(&["64Mi", "1Gi", "1000"][..])))
        .prop_map(|(cpu, memory)| {
            let mut l = BTreeMap::new();
            l.extend(cpu.map(|c| ("cpu".to_string(), Quantity(c.into()))));
            l.extend(memory.map(|m| ("memory".to_string(), Quantity(m.into()))));
            (!l.is_empty()).then(|| ResourceRequirements { limits: Some(l), ..Default::default() })
        })
        .boxed()
}

fn container(name: &'static str) -> BoxedStrategy<Container> {
    let io = (any::<bool>(), any::<bool>(), of(Just("/work".to_string())));
    let port = of((1i32..65_536, of(1i32..65_536)));
    (of(container_security()), limits(), io, port)
        .prop_map(move |(sc, resources, (stdin, tty, working_dir), port)| Container {
            name: name.into(),
            image: Some("localhost/busybox:1".into()),
            security_context: sc,
            resources,
            stdin: Some(stdin),
            tty: Some(tty),
            working_dir,
            ports: port.map(|(container_port, host_port)| {
                vec![ContainerPort { container_port, host_port, ..Default::default() }]
            }),
            ..Default::default()
        })
        .boxed()
}

/// A row of the table (its object and field), with a way to set the field as upstream would act on it.
type SetField = (Object, &'static str, fn(&mut Pod));

/// Every row of the table.
const UNSUPPORTED: &[SetField] = &[
    (Object::PodSpec, "hostnameOverride", |p| spec(p).hostname_override = Some("other".into())),
    (Object::Container, "lifecycle.stopSignal", |p| {
        app(p).lifecycle = Some(v1::Lifecycle { stop_signal: Some("SIGUSR1".into()), ..Default::default() })
    }),
    (Object::Container, "restartPolicy", |p| app(p).restart_policy = Some("OnFailure".into())),
    (Object::Container, "restartPolicyRules", |p| {
        let exit_codes = v1::ContainerRestartRuleOnExitCodes { operator: "In".into(), values: Some(vec![42]) };
        let rule = v1::ContainerRestartRule { action: "Restart".into(), exit_codes: Some(exit_codes) };
        app(p).restart_policy_rules = Some(vec![rule]);
    }),
    (Object::Container, "env[*].valueFrom.fileKeyRef", |p| {
        let file =
            v1::FileKeySelector { volume_name: "env".into(), path: "vars".into(), key: "A".into(), optional: None };
        let from = v1::EnvVarSource { file_key_ref: Some(file), ..Default::default() };
        app(p).env = Some(vec![v1::EnvVar { name: "A".into(), value: None, value_from: Some(from) }]);
    }),
    (Object::PodStatus, "extendedResourceClaimStatus", |p| {
        let status = v1::PodExtendedResourceClaimStatus { resource_claim_name: "c".into(), request_mappings: vec![] };
        p.status.get_or_insert_with(Default::default).extended_resource_claim_status = Some(status);
    }),
];

fn spec(p: &mut Pod) -> &mut PodSpec {
    p.spec.get_or_insert_with(Default::default)
}

fn app(p: &mut Pod) -> &mut Container {
    &mut spec(p).containers[0]
}

fn case() -> BoxedStrategy<Case> {
    let users = prop_oneof![8 => Just(None), 1 => Just(Some(true)), 1 => Just(Some(false))];
    let host = || proptest::bool::weighted(0.25);
    let hosts = (host(), host(), host(), any::<bool>(), users);
    let names = (of(select(&["web-0", "db"][..])), of(Just("backends")), any::<bool>());
    let containers = (container("app"), of(container("second")), of(container("init")), any::<bool>());
    let image_user = prop_oneof![
        Just(ImageUser::default()),
        Just(ImageUser { uid: Some(0), username: String::new() }),
        Just(ImageUser { uid: Some(1000), username: String::new() }),
        Just(ImageUser { uid: None, username: "nobody".into() }),
    ];
    let unsupported = prop_oneof![4 => Just(None), 1 => (0..UNSUPPORTED.len()).prop_map(Some)];
    (of(pod_security()), hosts, names, containers, image_user, (any::<bool>(), any::<bool>()), unsupported)
        .prop_map(
            |(
                psc,
                (net, pid, ipc, share, users),
                (hostname, subdomain, fqdn),
                (a, b, init, sidecar),
                image_user,
                (seccomp_default, apparmor_host),
                unsupported,
            )| {
                let spec = PodSpec {
                    security_context: psc,
                    host_network: Some(net),
                    host_pid: Some(pid),
                    host_ipc: Some(ipc),
                    share_process_namespace: Some(share),
                    host_users: users,
                    hostname: hostname.map(Into::into),
                    subdomain: subdomain.map(Into::into),
                    set_hostname_as_fqdn: Some(fqdn),
                    containers: [a].into_iter().chain(b).collect(),
                    // A sidecar's `restartPolicy: Always` is applied, never refused.
                    init_containers: init
                        .map(|i| vec![Container { restart_policy: sidecar.then(|| "Always".into()), ..i }]),
                    ..Default::default()
                };
                let mut pod = Pod { spec: Some(spec), ..Default::default() };
                pod.metadata.name = Some("web".into());
                pod.metadata.namespace = Some("default".into());
                pod.metadata.uid = Some("uid-1".into());
                let unsupported = unsupported.map(|i| {
                    let (object, field, set) = UNSUPPORTED[i];
                    set(&mut pod);
                    (object, field)
                });
                Case { pod, image_user, seccomp_default, apparmor_host, unsupported }
            },
        )
        .boxed()
}

/// Runs the admit handlers that judge these fields; the first refusal's reason.
fn admission(pod: &Pod, apparmor_host: bool) -> Result<Option<String>, String> {
    let sysctls = kubelet::admission::SysctlAllowlist::new(&[])?;
    let apparmor = kubelet::admission::AppArmor { host_enabled: apparmor_host };
    let handlers: [&dyn PodAdmitHandler; 5] = [
        &kubelet::admission_fields::UnsupportedPodFields,
        &sysctls,
        &kubelet::admission::NodeOs,
        &apparmor,
        &kubelet::admission::SupportedVolumes,
    ];
    Ok(handlers.iter().find_map(|h| h.admit(pod, &[])).map(|r| r.reason))
}

/// Whether the pod asks for an AppArmor profile to be enforced (any profile but `Unconfined`, of the pod or of a
/// container), judged here apart from the handler.
fn needs_apparmor(pod: &Pod) -> bool {
    let s = pod.spec.as_ref().unwrap();
    let confined = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    confined(s.security_context.as_ref().and_then(|p| p.app_armor_profile.as_ref()))
        || s.init_containers
            .iter()
            .flatten()
            .chain(&s.containers)
            .any(|c| confined(c.security_context.as_ref().and_then(|sc| sc.app_armor_profile.as_ref())))
}

/// Whether the pod sets a sysctl the default allowlist refuses: not a safe one, or one of the network or IPC
/// namespace the pod shares with the host.
fn sysctl_forbidden(pod: &Pod) -> bool {
    let s = pod.spec.as_ref().unwrap();
    let sysctls = s.security_context.as_ref().and_then(|p| p.sysctls.as_ref());
    sysctls.into_iter().flatten().any(|sysctl| {
        let name = config_gen::sysctl_dots(&sysctl.name);
        !kubelet::admission::SAFE_SYSCTLS.contains(&name.as_str())
            || (name.starts_with("net.") && s.host_network == Some(true))
            || (name.starts_with("kernel.shm") && s.host_ipc == Some(true))
    })
}

/// Compares what was set with what was sent; `Err` names the field.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, set: T, sent: T) -> Result<(), String> {
    if set == sent { Ok(()) } else { Err(format!("{what}: the pod set {set:?}, the CRI request carries {sent:?}")) }
}

/// The pod's and the CRI's profile as (type, localhost reference).
fn profile_of(type_: &str, localhost: Option<&str>, prefix: &str) -> (i32, String) {
    use api::security_profile::ProfileType;
    match type_ {
        "RuntimeDefault" => (ProfileType::RuntimeDefault as i32, String::new()),
        "Localhost" => (ProfileType::Localhost as i32, format!("{prefix}{}", localhost.unwrap_or(""))),
        _ => (ProfileType::Unconfined as i32, String::new()),
    }
}

fn sent_profile(p: Option<&api::SecurityProfile>) -> Option<(i32, String)> {
    p.map(|p| (p.profile_type, p.localhost_ref.clone()))
}

fn selinux(o: Option<&SELinuxOptions>) -> Option<[String; 4]> {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    o.map(|o| [s(&o.user), s(&o.role), s(&o.type_), s(&o.level)])
}

fn sent_selinux(o: Option<&api::SeLinuxOption>) -> Option<[String; 4]> {
    o.map(|o| [o.user.clone(), o.role.clone(), o.r#type.clone(), o.level.clone()])
}

fn namespaces(s: &PodSpec) -> (i32, i32, i32) {
    let mode =
        |host: bool, otherwise: api::NamespaceMode| if host { api::NamespaceMode::Node } else { otherwise } as i32;
    let pid_otherwise =
        if s.share_process_namespace == Some(true) { api::NamespaceMode::Pod } else { api::NamespaceMode::Container };
    (
        mode(s.host_network == Some(true), api::NamespaceMode::Pod),
        mode(s.host_pid == Some(true), pid_otherwise),
        mode(s.host_ipc == Some(true), api::NamespaceMode::Pod),
    )
}

fn sent_namespaces(ns: Option<&api::NamespaceOption>) -> (i32, i32, i32) {
    ns.map(|n| (n.network, n.pid, n.ipc)).unwrap_or((-1, -1, -1))
}

fn groups(psc: Option<&PodSecurityContext>) -> Vec<i64> {
    let mut g: Vec<i64> = psc.and_then(|p| p.fs_group).into_iter().collect();
    g.extend(psc.and_then(|p| p.supplemental_groups.clone()).unwrap_or_default());
    g
}

fn check_sandbox(cfg: &RuntimeManagerConfig, pod: &Pod) -> Result<(), String> {
    let s = pod.spec.as_ref().unwrap();
    let psc = s.security_context.as_ref();
    let sandbox = config_gen::sandbox_config(cfg, pod, 0);
    let linux = sandbox.linux.as_ref().ok_or("no linux sandbox config")?;
    let sc = linux.security_context.as_ref().ok_or("no sandbox security context")?;
    same("sandbox runAsUser", psc.and_then(|p| p.run_as_user), sc.run_as_user.as_ref().map(|v| v.value))?;
    same("sandbox runAsGroup", psc.and_then(|p| p.run_as_group), sc.run_as_group.as_ref().map(|v| v.value))?;
    same("sandbox fsGroup and supplementalGroups", groups(psc), sc.supplemental_groups.clone())?;
    same(
        "sandbox seLinuxOptions",
        selinux(psc.and_then(|p| p.se_linux_options.as_ref())),
        sent_selinux(sc.selinux_options.as_ref()),
    )?;
    same("sandbox namespaces", namespaces(s), sent_namespaces(sc.namespace_options.as_ref()))?;
    let privileged = s
        .containers
        .iter()
        .chain(s.init_containers.iter().flatten())
        .any(|c| c.security_context.as_ref().and_then(|sc| sc.privileged) == Some(true));
    same("sandbox privileged", privileged, sc.privileged)?;
    for sysctl in psc.and_then(|p| p.sysctls.as_ref()).into_iter().flatten() {
        let name = config_gen::sysctl_dots(&sysctl.name);
        same(&format!("sysctl {name}"), Some(&sysctl.value), linux.sysctls.get(&name))?;
    }
    let (hostname, domain) = config_gen::hostname_and_domain(pod, &cfg.cluster_domain);
    let want = match (s.host_network == Some(true), s.set_hostname_as_fqdn == Some(true) && !domain.is_empty()) {
        (true, _) => String::new(),
        (false, true) => format!("{hostname}.{domain}"),
        (false, false) => hostname,
    };
    same("sandbox hostname", want, sandbox.hostname.clone())?;
    for c in &s.containers {
        for p in c.ports.iter().flatten().filter(|p| p.host_port.unwrap_or(0) > 0 || s.host_network == Some(true)) {
            let mapped = sandbox
                .port_mappings
                .iter()
                .any(|m| m.container_port == p.container_port && m.host_port == p.host_port.unwrap_or(0));
            same(&format!("port {} of {}", p.container_port, c.name), true, mapped)?;
        }
    }
    Ok(())
}

/// The container's field, else the pod's (`DetermineEffectiveSecurityContext`, `getSeccompProfile`, `GetProfile`).
fn effective<T: Clone>(
    c: &Container,
    psc: Option<&PodSecurityContext>,
    own: fn(&SecurityContext) -> Option<T>,
    pod: fn(&PodSecurityContext) -> Option<T>,
) -> Option<T> {
    c.security_context.as_ref().and_then(own).or_else(|| psc.and_then(pod))
}

fn check_container(cfg: &RuntimeManagerConfig, case: &Case, c: &Container) -> Result<(), String> {
    let s = case.pod.spec.as_ref().unwrap();
    let psc = s.security_context.as_ref();
    let own = c.security_context.clone().unwrap_or_default();
    let uid = effective(c, psc, |s| s.run_as_user, |p| p.run_as_user);
    let non_root = effective(c, psc, |s| s.run_as_non_root, |p| p.run_as_non_root) == Some(true);
    let runs_as_root = match uid {
        Some(u) => u == 0,
        None => case.image_user.uid.unwrap_or(0) == 0 || !case.image_user.username.is_empty(),
    };
    let built = config_gen::container_config(cfg, &case.pod, c, 0, &[], vec![], &case.image_user, None);
    let config = match (built, non_root && runs_as_root) {
        (Err(_), true) => return Ok(()),
        (Ok(_), true) => return Err(format!("container {} runs as root despite runAsNonRoot", c.name)),
        (Err(e), false) => return Err(format!("container {}: {e}", c.name)),
        (Ok(config), false) => config,
    };
    let linux = config.linux.as_ref().ok_or("no linux container config")?;
    let sc = linux.security_context.as_ref().ok_or("no container security context")?;
    let name = &c.name;
    let sent_uid = sc.run_as_user.as_ref().map(|v| v.value);
    same(&format!("{name} runAsUser"), uid.or(case.image_user.uid), sent_uid)?;
    if uid.is_none() && case.image_user.uid.is_none() {
        same(&format!("{name} image user"), &case.image_user.username, &sc.run_as_username)?;
    }
    let gid = effective(c, psc, |s| s.run_as_group, |p| p.run_as_group);
    same(&format!("{name} runAsGroup"), gid, sc.run_as_group.as_ref().map(|v| v.value))?;
    same(&format!("{name} privileged"), own.privileged.unwrap_or(false), sc.privileged)?;
    same(
        &format!("{name} readOnlyRootFilesystem"),
        own.read_only_root_filesystem.unwrap_or(false),
        sc.readonly_rootfs,
    )?;
    same(
        &format!("{name} allowPrivilegeEscalation: false"),
        own.allow_privilege_escalation == Some(false),
        sc.no_new_privs,
    )?;
    let cap = |l: Option<Vec<String>>| l.unwrap_or_default();
    let sent_caps = sc.capabilities.clone().unwrap_or_default();
    let caps = own.capabilities.clone().unwrap_or_default();
    same(&format!("{name} capabilities.add"), cap(caps.add), sent_caps.add_capabilities)?;
    same(&format!("{name} capabilities.drop"), cap(caps.drop), sent_caps.drop_capabilities)?;
    // /proc is unmasked only for `procMount: Unmasked` in the pod's own user namespace, never in the host's.
    let own_userns = case.pod.spec.as_ref().and_then(|s| s.host_users) == Some(false);
    let unmasked = own_userns && own.proc_mount.as_deref() == Some("Unmasked");
    let masked = if unmasked { 0 } else { config_gen::DEFAULT_MASKED_PATHS.len() };
    same(&format!("{name} masked paths"), masked, sc.masked_paths.len())?;
    let seccomp = effective(c, psc, |s| s.seccomp_profile.clone(), |p| p.seccomp_profile.clone());
    let prefix = format!("{}/", cfg.root_dir.join("seccomp").display());
    let want = match &seccomp {
        Some(p) => profile_of(&p.type_, p.localhost_profile.as_deref(), &prefix),
        None => profile_of(if case.seccomp_default { "RuntimeDefault" } else { "Unconfined" }, None, ""),
    };
    same(&format!("{name} seccompProfile"), Some(want), sent_profile(sc.seccomp.as_ref()))?;
    let aa = effective(c, psc, |s| s.app_armor_profile.clone(), |p| p.app_armor_profile.clone());
    let want = aa.map(|p| profile_of(&p.type_, p.localhost_profile.as_deref(), ""));
    same(&format!("{name} appArmorProfile"), want, sent_profile(sc.apparmor.as_ref()))?;
    let se = effective(c, psc, |s| s.se_linux_options.clone(), |p| p.se_linux_options.clone());
    same(&format!("{name} seLinuxOptions"), selinux(se.as_ref()), sent_selinux(sc.selinux_options.as_ref()))?;
    same(&format!("{name} fsGroup and supplementalGroups"), groups(psc), sc.supplemental_groups.clone())?;
    same(&format!("{name} namespaces"), namespaces(s), sent_namespaces(sc.namespace_options.as_ref()))?;
    same(&format!("{name} stdin"), c.stdin.unwrap_or(false), config.stdin)?;
    same(&format!("{name} tty"), c.tty.unwrap_or(false), config.tty)?;
    same(&format!("{name} workingDir"), c.working_dir.clone().unwrap_or_default(), config.working_dir.clone())?;
    let resources = linux.resources.clone().unwrap_or_default();
    let limit = |r: &str| {
        c.resources.as_ref()?.limits.as_ref()?.get(r).and_then(|q| kubelet_types::quantity::parse_quantity(&q.0))
    };
    if let Some(m) = limit("memory") {
        same(&format!("{name} memory limit"), m as i64, resources.memory_limit_in_bytes)?;
    }
    if let Some(cpu) = limit("cpu") {
        let quota = config_gen::milli_cpu_to_quota((cpu * 1000.0).round() as i64, cfg.cpu_cfs_quota_period_us);
        same(&format!("{name} cpu limit (quota)"), quota, resources.cpu_quota)?;
    }
    Ok(())
}

/// Admission, then the CRI requests of whatever it admits.
pub(crate) fn pod_cri_config(o: &Options) -> Report {
    run(
        "pod-cri-config",
        o,
        case(),
        Arc::new(|case: &Case| {
            let found: Vec<(Object, &str)> = kubelet::admission_fields::unsupported_fields(&case.pod)
                .into_iter()
                .map(|(_, row)| (row.object, row.field))
                .collect();
            same("the table's rows the pod sets", case.unsupported.into_iter().collect(), found)?;
            let refused = admission(&case.pod, case.apparmor_host)?;
            if case.unsupported.is_some() {
                return same("admission", Some("UnsupportedPodField"), refused.as_deref());
            }
            if sysctl_forbidden(&case.pod) {
                return same("admission", Some("SysctlForbidden"), refused.as_deref());
            }
            if needs_apparmor(&case.pod) && !case.apparmor_host {
                // Never run unconfined on a kernel that cannot enforce the profile.
                return same("admission", Some("AppArmor"), refused.as_deref());
            }
            // Nothing else may refuse what is left.
            same("admission", None, refused.as_deref())?;
            let cfg =
                RuntimeManagerConfig { resolv_conf: None, seccomp_default: case.seccomp_default, ..Default::default() };
            check_sandbox(&cfg, &case.pod)?;
            let s = case.pod.spec.as_ref().unwrap();
            for c in s.init_containers.iter().flatten().chain(&s.containers) {
                check_container(&cfg, case, c)?;
            }
            Ok(())
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_table_is_set_by_some_case() {
        for row in kubelet::admission_fields::UNSUPPORTED_FIELDS {
            let set = UNSUPPORTED.iter().find(|(o, f, _)| (*o, *f) == (row.object, row.field));
            let (_, _, set) = set.unwrap_or_else(|| panic!("no case sets {:?} {}", row.object, row.field));
            let mut pod = Pod {
                spec: Some(PodSpec { containers: vec![Container::default()], ..Default::default() }),
                ..Default::default()
            };
            set(&mut pod);
            let found = kubelet::admission_fields::unsupported_fields(&pod);
            assert!(found.iter().any(|(_, r)| (r.object, r.field) == (row.object, row.field)), "{row:?}: {found:?}");
        }
    }
}
