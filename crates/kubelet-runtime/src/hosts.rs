//! The /etc/hosts a container gets (`kubelet_pods.go` ensureHostsFile, managedHostsFileContent,
//! nodeHostsFileContent, hostsEntriesFromHostAliases): for the pod network a managed file naming the pod's IPs, for
//! the host network a copy of the node's; `hostAliases` appended to either.

use k8s_openapi::api::core::v1::HostAlias;

fn aliases_block(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        s.push_str(&format!("{}\t{}\n", a.ip, a.hostnames.clone().unwrap_or_default().join("\t")));
    }
    s
}

/// The managed hosts file of a pod-network pod: localhost entries, then each pod IP with the (fully qualified)
/// hostname, then the aliases.
pub fn managed_hosts_file(pod_ips: &[String], hostname: &str, domain: &str, aliases: &[HostAlias]) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    for ip in pod_ips {
        if domain.is_empty() {
            s.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            s.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    s.push_str(&aliases_block(aliases));
    s
}

/// The hosts file of a host-network pod: the node's, under upstream's header, then the aliases.
pub fn node_hosts_file(node: &str, aliases: &[HostAlias]) -> String {
    format!("# Kubernetes-managed hosts file (host network).\n{node}{}", aliases_block(aliases))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_files_as_upstream() {
        let aliases = vec![HostAlias { ip: "123.45.67.89".into(), hostnames: Some(vec!["foo".into(), "bar".into()]) }];
        let got = managed_hosts_file(&["203.0.113.1".into()], "podFoo", "domainFoo", &aliases);
        assert_eq!(
            got,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             203.0.113.1\tpodFoo.domainFoo\tpodFoo\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        );
        let got = managed_hosts_file(&["10.0.0.1".into(), "fd00::1".into()], "web", "", &[]);
        assert!(got.ends_with("fe00::2\tip6-allrouters\n10.0.0.1\tweb\nfd00::1\tweb\n"), "{got}");
        let node = node_hosts_file("127.0.0.1\tlocalhost\n", &aliases);
        assert_eq!(
            node,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
        );
    }
}
