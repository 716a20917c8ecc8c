//! Unit tests of the CRI configs (`config_gen.rs`): DNS, resources, security context, ephemeral targets.
use super::*;

#[test]
fn resolv_conf_parsing() {
    let (ns, s, o) = parse_resolv_conf(
        "# c\nnameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch a. b .\noptions ndots:2 edns0\noptions ndots:3\n",
    );
    assert_eq!(ns, vec!["1.1.1.1", "8.8.8.8"]);
    assert_eq!(s, vec!["a", "b"]);
    assert_eq!(o, vec!["edns0", "ndots:3"]);
}

#[test]
fn many_options_parse_in_linear_time() {
    // Found by the fuzz target resolv-conf (crates/kubelet-fuzz): 3000 distinct options took 1.5 s (debug build),
    // each merged by scanning all before it; 400 000 options would have taken hours.
    let text: String = (0..200_000).map(|i| format!("options o{i}:1 o{}:2\n", i % 7)).collect();
    let (_, _, o) = parse_resolv_conf(&text);
    assert_eq!(o.len(), 200_000);
    assert_eq!(o.last().map(String::as_str), Some("o2:2"));
    assert!(o.contains(&"o6:2".to_string()) && !o.contains(&"o6:1".to_string()));
}

#[test]
fn resource_arithmetic_as_upstream() {
    assert_eq!(milli_cpu_to_shares(150), 153);
    assert_eq!(milli_cpu_to_shares(0), 2);
    assert_eq!(milli_cpu_to_shares(1), 2);
    assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
    assert_eq!(milli_cpu_to_quota(500, 100_000), 50_000);
    assert_eq!(milli_cpu_to_quota(5, 100_000), 1000);
    assert_eq!(sysctl_dots("net/ipv4/ip_forward"), "net.ipv4.ip_forward");
    assert_eq!(sysctl_dots("net.ipv4.conf.eth0/1.rp_filter"), "net.ipv4.conf.eth0/1.rp_filter");
    assert_eq!(sysctl_dots("net/ipv4/conf/eth0.1/rp_filter"), "net.ipv4.conf.eth0/1.rp_filter");
}

fn sc_pod(pod_sc: k8s_openapi::api::core::v1::PodSecurityContext, c_sc: Option<SecurityContext>) -> (Pod, Container) {
    let c = Container { name: "app".into(), security_context: c_sc, ..Default::default() };
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            ..Default::default()
        },
        spec: Some(PodSpec { containers: vec![c.clone()], security_context: Some(pod_sc), ..Default::default() }),
        ..Default::default()
    };
    (pod, c)
}

#[test]
fn run_as_non_root_as_upstream() {
    use k8s_openapi::api::core::v1::PodSecurityContext;
    let root = ImageUser { uid: Some(0), username: String::new() };
    let user = ImageUser { uid: Some(1000), username: String::new() };
    let named = ImageUser { uid: None, username: "nobody".into() };
    let non_root = || PodSecurityContext { run_as_non_root: Some(true), ..Default::default() };
    let (p, c) = sc_pod(PodSecurityContext::default(), None);
    assert_eq!(verify_run_as_non_root(&p, &c, &root), Ok(()), "not asked");
    let (p, c) = sc_pod(non_root(), None);
    assert_eq!(
        verify_run_as_non_root(&p, &c, &root),
        Err("container has runAsNonRoot and image will run as root (pod: \"p_ns(u)\", container: app)".into())
    );
    assert_eq!(verify_run_as_non_root(&p, &c, &user), Ok(()));
    assert!(verify_run_as_non_root(&p, &c, &named).unwrap_err().contains("non-numeric user (nobody)"));
    let (p, c) = sc_pod(non_root(), Some(SecurityContext { run_as_user: Some(0), ..Default::default() }));
    assert!(
        verify_run_as_non_root(&p, &c, &user).unwrap_err().starts_with("container's runAsUser breaks non-root policy")
    );
    let (p, c) = sc_pod(non_root(), Some(SecurityContext { run_as_user: Some(7), ..Default::default() }));
    assert_eq!(verify_run_as_non_root(&p, &c, &root), Ok(()), "an explicit non-root user wins over the image");
    // The container's own false overrides the pod's true.
    let (p, c) = sc_pod(non_root(), Some(SecurityContext { run_as_non_root: Some(false), ..Default::default() }));
    assert_eq!(verify_run_as_non_root(&p, &c, &root), Ok(()));
}

#[test]
fn seccomp_and_masked_paths_as_upstream() {
    use api::security_profile::ProfileType;
    use k8s_openapi::api::core::v1::{PodSecurityContext, SeccompProfile};
    let cfg = RuntimeManagerConfig { root_dir: "/var/lib/kubelet".into(), ..Default::default() };
    let prof = |t: &str, l: Option<&str>| SeccompProfile { type_: t.into(), localhost_profile: l.map(str::to_string) };
    let pod_sc = PodSecurityContext { seccomp_profile: Some(prof("RuntimeDefault", None)), ..Default::default() };
    let (p, c) = sc_pod(pod_sc, None);
    let sc = container_security(&cfg, &p, &c, &ImageUser::default()).unwrap();
    assert_eq!(sc.seccomp.unwrap().profile_type, ProfileType::RuntimeDefault as i32, "the pod's profile");
    assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
    assert!(sc.readonly_paths.contains(&"/proc/sys".to_string()));
    let c_sc = SecurityContext {
        seccomp_profile: Some(prof("Localhost", Some("profiles/audit.json"))),
        proc_mount: Some("Unmasked".into()),
        ..Default::default()
    };
    let (p, c) = sc_pod(PodSecurityContext::default(), Some(c_sc));
    let sc = container_security(&cfg, &p, &c, &ImageUser::default()).unwrap();
    let s = sc.seccomp.unwrap();
    assert_eq!(
        (s.profile_type, s.localhost_ref.as_str()),
        (ProfileType::Localhost as i32, "/var/lib/kubelet/seccomp/profiles/audit.json")
    );
    assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len(), "never Unmasked in the host's user namespace");
    assert_eq!(sc.readonly_paths.len(), DEFAULT_READONLY_PATHS.len());
    let (mut p, c) = (p, c);
    p.spec.as_mut().unwrap().host_users = Some(false);
    let sc = container_security(&cfg, &p, &c, &ImageUser::default()).unwrap();
    assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty(), "Unmasked procMount in its own userns");
    let (p, c) = sc_pod(PodSecurityContext::default(), None);
    let sc = container_security(&cfg, &p, &c, &ImageUser { uid: None, username: "www".into() }).unwrap();
    assert_eq!(sc.seccomp.unwrap().profile_type, ProfileType::Unconfined as i32);
    assert_eq!((sc.run_as_user, sc.run_as_username.as_str()), (None, "www"), "the image's user");
    let cfg = RuntimeManagerConfig { seccomp_default: true, ..cfg };
    let sc = container_security(&cfg, &p, &c, &ImageUser::default()).unwrap();
    assert_eq!(sc.seccomp.unwrap().profile_type, ProfileType::RuntimeDefault as i32, "seccompDefault");
}

#[test]
fn dns_policies_as_upstream() {
    use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption};
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 192.0.2.53\nsearch corp.example\noptions ndots:2 timeout:1\n").unwrap();
    let cfg = RuntimeManagerConfig {
        cluster_dns: vec!["10.96.0.10".into()],
        cluster_domain: "cluster.local".into(),
        resolv_conf: Some(resolv.clone()),
        ..Default::default()
    };
    let pod = |policy: &str, host_net: bool, dc: Option<PodDNSConfig>| Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("team".into()),
            uid: Some("u".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            dns_policy: Some(policy.into()),
            host_network: Some(host_net),
            dns_config: dc,
            ..Default::default()
        }),
        ..Default::default()
    };
    let (d, w) = dns_config(&cfg, &pod("ClusterFirst", false, None));
    assert_eq!(d.servers, vec!["10.96.0.10"]);
    assert_eq!(d.searches, vec!["team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"]);
    assert_eq!((d.options, w.len()), (vec!["ndots:5".to_string()], 0));
    let (d, _) = dns_config(&cfg, &pod("ClusterFirst", true, None));
    assert_eq!(
        (d.servers, d.options),
        (vec!["192.0.2.53".to_string()], vec!["ndots:2".to_string(), "timeout:1".to_string()]),
        "host network falls back to Default"
    );
    assert_eq!(dns_config(&cfg, &pod("ClusterFirstWithHostNet", true, None)).0.servers, vec!["10.96.0.10"]);
    let dc = PodDNSConfig {
        nameservers: Some(vec!["1.1.1.1".into()]),
        searches: Some(vec!["my.dns.search.suffix".into()]),
        options: Some(vec![
            PodDNSConfigOption { name: Some("ndots".into()), value: Some("2".into()) },
            PodDNSConfigOption { name: Some("edns0".into()), value: None },
        ]),
    };
    let (d, _) = dns_config(&cfg, &pod("None", false, Some(dc.clone())));
    assert_eq!((d.servers, d.searches), (vec!["1.1.1.1".to_string()], vec!["my.dns.search.suffix".to_string()]));
    assert_eq!(d.options, vec!["ndots:2", "edns0"]);
    let (d, _) = dns_config(&cfg, &pod("ClusterFirst", false, Some(dc)));
    assert_eq!(d.servers, vec!["10.96.0.10", "1.1.1.1"]);
    assert_eq!(d.options, vec!["ndots:2", "edns0"], "the pod's ndots replaces the cluster's");
    // No clusterDNS: Default with a MissingClusterDNS event.
    let no_dns = RuntimeManagerConfig { cluster_dns: vec![], ..cfg.clone() };
    let (d, w) = dns_config(&no_dns, &pod("ClusterFirst", false, None));
    assert_eq!(d.servers, vec!["192.0.2.53"]);
    assert_eq!(w[0].0, "MissingClusterDNS");
    // Limits: three nameservers, 32 search domains.
    let many = PodDNSConfig {
        nameservers: Some((1..=5).map(|i| format!("10.0.0.{i}")).collect()),
        searches: Some((0..40).map(|i| format!("d{i}.example")).collect()),
        options: None,
    };
    let (d, w) = dns_config(&cfg, &pod("None", false, Some(many)));
    assert_eq!(d.servers.len(), 3);
    assert_eq!(d.searches.len(), 32);
    assert!(w.iter().any(|(r, m)| *r == "DNSConfigForming" && m.starts_with("Nameserver limits were exceeded")));
    assert!(w.iter().any(|(_, m)| m.starts_with("Search Line limits were exceeded")));
    // resolvConf "": the local machine's resolver.
    let none = RuntimeManagerConfig { resolv_conf: None, node_ips: vec!["192.0.2.1".into()], ..cfg };
    let (d, _) = dns_config(&none, &pod("Default", false, None));
    assert_eq!((d.servers, d.searches), (vec!["127.0.0.1".to_string()], vec![".".to_string()]));
}

#[test]
fn an_ephemeral_target_replaces_only_a_private_pid_namespace() {
    use k8s_openapi::api::core::v1::PodSecurityContext;
    let cfg = RuntimeManagerConfig::default();
    let pid_of = |p: &Pod, c: &Container, target: Option<&str>| {
        let config = container_config(&cfg, p, c, 0, &[], vec![], &ImageUser::default(), target).unwrap();
        let ns = config.linux.unwrap().security_context.unwrap().namespace_options.unwrap();
        (ns.pid, ns.target_id)
    };
    let (p, c) = sc_pod(PodSecurityContext::default(), None);
    assert_eq!(pid_of(&p, &c, None), (api::NamespaceMode::Container as i32, String::new()));
    assert_eq!(pid_of(&p, &c, Some("c1")), (api::NamespaceMode::Target as i32, "c1".to_string()));
    let mut shared = p.clone();
    shared.spec.as_mut().unwrap().share_process_namespace = Some(true);
    assert_eq!(pid_of(&shared, &c, Some("c1")), (api::NamespaceMode::Pod as i32, String::new()));
    let mut host = p.clone();
    host.spec.as_mut().unwrap().host_pid = Some(true);
    assert_eq!(pid_of(&host, &c, Some("c1")), (api::NamespaceMode::Node as i32, String::new()));
}

#[test]
fn the_sandbox_s_cgroup_parent_is_under_the_cgroup_root_for_both_drivers() {
    let (pod, _) = sc_pod(k8s_openapi::api::core::v1::PodSecurityContext::default(), None);
    let parent = |root: &str, systemd: bool| {
        let cfg = RuntimeManagerConfig { cgroup_root: root.into(), systemd_cgroup: systemd, ..Default::default() };
        sandbox_config(&cfg, &pod, 0).linux.unwrap().cgroup_parent
    };
    assert_eq!(parent("/", false), "/kubepods/besteffort/podu");
    assert_eq!(parent("/", true), "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu.slice");
    assert_eq!(parent("/kubeadm-node", false), "/kubeadm-node/kubepods/besteffort/podu");
    assert_eq!(
        parent("/kubeadm-node", true),
        "/kubeadm_node.slice/kubeadm_node-kubepods.slice/kubeadm_node-kubepods-besteffort.slice/\
         kubeadm_node-kubepods-besteffort-podu.slice"
    );
    assert_eq!(parent("/a/b", false), "/a/b/kubepods/besteffort/podu");
    assert_eq!(
        parent("/a/b", true),
        "/a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-besteffort.slice/a-b-kubepods-besteffort-podu.slice"
    );
    let cfg = RuntimeManagerConfig { cgroups_per_qos: false, cgroup_root: "/a".into(), ..Default::default() };
    assert_eq!(sandbox_config(&cfg, &pod, 0).linux.unwrap().cgroup_parent, "", "no pod cgroups");
}

#[test]
fn a_privileged_ephemeral_container_makes_the_sandbox_privileged_and_a_long_fqdn_fails() {
    use k8s_openapi::api::core::v1::{EphemeralContainer, PodSpec};
    let privileged = Some(SecurityContext { privileged: Some(true), ..Default::default() });
    let mut pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container { name: "app".into(), ..Default::default() }],
            ephemeral_containers: Some(vec![EphemeralContainer {
                name: "debug".into(),
                security_context: privileged,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cfg = RuntimeManagerConfig { cluster_domain: "cluster.local".into(), ..Default::default() };
    let sc = sandbox_config(&cfg, &pod, 0).linux.unwrap().security_context.unwrap();
    assert!(sc.privileged, "upstream's HasPrivilegedContainer counts ephemeral containers");
    assert_eq!(fqdn_error(&cfg, &pod), None);
    let s = pod.spec.as_mut().unwrap();
    s.set_hostname_as_fqdn = Some(true);
    s.hostname = Some("h".repeat(40));
    s.subdomain = Some("sub".into());
    let e = fqdn_error(&cfg, &pod).unwrap();
    assert_eq!(
        e,
        format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {}.sub.default.svc.cluster.local is \
             too long (64 characters is the max, 70 characters requested)",
            "h".repeat(40)
        )
    );
}
