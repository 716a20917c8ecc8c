//! Command-line flags with upstream's names (`cmd/kubelet/app/options/options.go`). Flags given on the command
//! line override the configuration file, as upstream. [`Cli::from_command_line`] first lets `crate::flags` take
//! every other flag the upstream kubelet registers (the configuration flags, and those rkubelet accepts without
//! effect); clap then parses the flags below and refuses anything unknown, naming it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, Parser};

use crate::flags;

/// rkubelet: the Kubernetes node agent.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rkubelet",
    disable_version_flag = true,
    // A flag given twice takes its last value, as Go's flag package does.
    args_override_self = true,
    about = "The Kubernetes node agent, in Rust: a drop-in kubelet.",
    after_help = "Every other flag of the upstream kubelet v1.35 is accepted too. Those that set a \
        KubeletConfiguration field (-v/--v LEVEL, --pod-manifest-path, --container-runtime-endpoint, --max-pods, \
        --feature-gates, ...) override the --config file, most with upstream's deprecation warning; the others are \
        accepted with a warning when they have no effect in rkubelet."
)]
pub struct Cli {
    /// The kubelet reads its configuration (KubeletConfiguration, kubelet.config.k8s.io/v1beta1) from this file.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// A directory of drop-in configuration files (`*.conf`, in lexical order) merged over --config.
    #[arg(long = "config-dir", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Path to a kubeconfig file for connecting to the apiserver. Omit it to run standalone.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Path to a kubeconfig file used to request a client certificate when --kubeconfig does not exist.
    #[arg(long = "bootstrap-kubeconfig", value_name = "PATH")]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Use this name instead of the hostname as the node name.
    #[arg(long = "hostname-override", value_name = "NAME")]
    pub hostname_override: Option<String>,
    /// IP address(es) of the node (comma-separated, at most one per family).
    #[arg(long = "node-ip", value_name = "IP")]
    pub node_ip: Option<String>,
    /// Directory for the kubelet's files (volume mounts, pod directories).
    #[arg(long = "root-dir", value_name = "DIR", default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,
    /// Directory of the TLS certificates.
    #[arg(long = "cert-dir", value_name = "DIR", default_value = "/var/lib/kubelet/pki")]
    pub cert_dir: PathBuf,
    /// Labels to add when registering the node (`key=value,...`).
    #[arg(long = "node-labels", value_name = "LABELS", value_parser = parse_labels, default_value = "")]
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// The path to the credential provider plugin config file (CredentialProviderConfig,
    /// kubelet.config.k8s.io/v1).
    #[arg(long = "image-credential-provider-config", value_name = "PATH")]
    pub image_credential_provider_config: Option<PathBuf>,
    /// The path to the directory where credential provider plugin binaries are located.
    #[arg(long = "image-credential-provider-bin-dir", value_name = "DIR")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// Print version information and quit.
    #[arg(long)]
    pub version: bool,
    /// The flags that set configuration fields (`-v`, `--pod-manifest-path`, `--max-pods`, ...), in order.
    #[arg(skip)]
    pub config_flags: Vec<flags::Occurrence>,
    /// Deprecation and no-effect warnings of the flags given, for stderr.
    #[arg(skip)]
    pub warnings: Vec<String>,
}

impl Cli {
    /// Parses a command line (the program name first) as the upstream kubelet reads it: see `crate::flags`.
    pub fn from_command_line<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let split = flags::split(args).map_err(|e| Cli::command().error(clap::error::ErrorKind::InvalidValue, e))?;
        let mut cli = Cli::try_parse_from(split.clap_args)?;
        cli.config_flags = split.config_flags;
        cli.warnings = split.warnings;
        Ok(cli)
    }
}

/// Parses `key=value,key2=value2` as upstream's `--node-labels` (a `ConfigurationMap`: `key` alone is an empty
/// value, keys and values are trimmed), then checks the labels as `ValidateKubeletFlags`.
pub fn parse_labels(s: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let mut m = std::collections::BTreeMap::new();
    for kv in s.split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        m.insert(k.trim().to_string(), v.trim().to_string());
    }
    let unknown: Vec<&str> =
        m.keys().map(String::as_str).filter(|k| is_kubernetes_label(k) && !is_kubelet_label(k)).collect();
    if !unknown.is_empty() {
        return Err(format!(
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [{}]\n--node-labels in the \
             'kubernetes.io' namespace must begin with an allowed prefix ({}) or be in the specifically allowed set ({})",
            unknown.join(" "),
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", ")
        ));
    }
    // Keys and values as label syntax demands (upstream's `invalidLabelErrs`, keyed by the bad key or value).
    use kubelet_config::validation::names::{is_label_value, is_qualified_name};
    let mut invalid: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (k, v) in &m {
        invalid.entry(k.as_str()).or_default().extend(is_qualified_name(k));
        invalid.entry(v.as_str()).or_default().extend(is_label_value(v));
    }
    let invalid: Vec<String> =
        invalid.into_iter().filter(|(_, e)| !e.is_empty()).map(|(s, e)| format!("'{s}' - {}", e.join(", "))).collect();
    if !invalid.is_empty() {
        return Err(format!("invalid node labels: {}", invalid.join("; ")));
    }
    Ok(m)
}

/// The labels a kubelet may set on its own Node (`k8s.io/kubelet/pkg/apis` KubeletLabels; NodeRestriction refuses
/// other `kubernetes.io` labels), sorted as upstream lists them.
const KUBELET_LABELS: [&str; 11] = [
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
];

/// Label namespaces a kubelet may use on its own Node (and their subdomains).
const KUBELET_LABEL_NAMESPACES: [&str; 2] = ["kubelet.kubernetes.io", "node.kubernetes.io"];

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

/// Whether a label key is in the `kubernetes.io` or `k8s.io` namespaces (`cmd/kubelet/app/options` isKubernetesLabel).
fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    ["kubernetes.io", "k8s.io"].iter().any(|d| ns == *d || ns.ends_with(&format!(".{d}")))
}

/// Whether a kubelet may set the label on its own Node (`IsKubeletLabel`).
fn is_kubelet_label(key: &str) -> bool {
    let ns = label_namespace(key);
    KUBELET_LABELS.contains(&key) || KUBELET_LABEL_NAMESPACES.iter().any(|a| ns == *a || ns.ends_with(&format!(".{a}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_flag_spellings() {
        let c = Cli::from_command_line([
            "rkubelet",
            "--config=/etc/kubernetes/kubelet.yaml",
            "--pod-manifest-path",
            "/etc/kubernetes/manifests",
            "--hostname-override=node-a",
            "--v=4",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
        ])
        .unwrap();
        assert_eq!(c.config.unwrap(), PathBuf::from("/etc/kubernetes/kubelet.yaml"));
        assert_eq!(c.hostname_override.as_deref(), Some("node-a"));
        let set: Vec<(&str, &str)> = c.config_flags.iter().map(|o| (o.flag.name, o.value.as_str())).collect();
        assert_eq!(
            set,
            [
                ("pod-manifest-path", "/etc/kubernetes/manifests"),
                ("v", "4"),
                ("container-runtime-endpoint", "unix:///run/containerd/containerd.sock")
            ]
        );
        let e = Cli::from_command_line(["rkubelet", "--no-such-flag"]).unwrap_err().to_string();
        assert!(e.contains("'--no-such-flag'"), "{e}");
        let c = Cli::from_command_line(["rkubelet", "--node-labels=role=edge,zone=a"]).unwrap();
        assert_eq!(c.node_labels.get("zone").map(String::as_str), Some("a"));
        // A `ConfigurationMap`: a key alone has an empty value, and repeated flags add up (later keys win).
        let c = Cli::from_command_line(["rkubelet", "--node-labels=solo,zone=a", "--node-labels", "zone=b,x=1"]);
        let labels = c.unwrap().node_labels;
        assert_eq!(
            labels.into_iter().collect::<Vec<_>>(),
            [("solo".into(), "".into()), ("x".into(), "1".into()), ("zone".into(), "b".into())]
        );
        assert!(Cli::from_command_line(["rkubelet", "--node-labels=a=b=c"]).is_err(), "the value 'b=c' is no label");
        let c = Cli::from_command_line(["rkubelet", "--hostname-override=", "--kubeconfig=/a", "--kubeconfig="]);
        let c = c.unwrap();
        assert_eq!((c.hostname_override, c.kubeconfig), (None, None), "an empty value is upstream's default");
        assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet"));
        // Labels NodeRestriction would refuse stop start-up, as upstream's ValidateKubeletFlags.
        let e = parse_labels("node-role.kubernetes.io/worker=,a.k8s.io/x=1,node.kubernetes.io/pool=a").unwrap_err();
        assert!(
            e.starts_with("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [a.k8s.io/x node-role.kubernetes.io/worker]\n"),
            "{e}"
        );
        assert!(e.contains("allowed prefix (kubelet.kubernetes.io, node.kubernetes.io)"), "{e}");
        let e = parse_labels("role=edge zone").unwrap_err();
        assert!(
            e.starts_with("invalid node labels: 'edge zone' - a valid label must be an empty string or consist of"),
            "{e}"
        );
        let ok = parse_labels("node.kubernetes.io/pool=a,x.kubelet.kubernetes.io/y=b,topology.kubernetes.io/zone=z");
        assert_eq!(ok.unwrap().len(), 3);
        let twice = Cli::from_command_line(["rkubelet", "--cert-dir=/a", "--cert_dir", "/b"]).unwrap();
        assert_eq!(twice.cert_dir, PathBuf::from("/b"), "the last value wins, as with Go's flags");
    }

    #[test]
    fn node_labels_survive_hostile_input() {
        // Property-based (crates/kubelet-fuzz): no panic, and whatever is accepted is a valid label.
        use kubelet_config::validation::names::{is_label_value, is_qualified_name};
        let tokens = &[
            "a",
            "=",
            ",",
            "/",
            ".",
            "-",
            " ",
            "kubernetes.io",
            "k8s.io",
            "node.kubernetes.io/",
            "kubelet.",
            "é",
            "x",
            "node-role.kubernetes.io/",
            "==",
            "\t",
        ];
        let opts = kubelet_fuzz::Options {
            budget: kubelet_fuzz::Budget::Cases(2000),
            timeout: std::time::Duration::from_secs(30),
            ..Default::default()
        };
        let r = kubelet_fuzz::fuzz("node-labels", &opts, kubelet_fuzz::strategies::text_from(tokens), |s: &String| {
            let Ok(m) = parse_labels(s) else { return Ok(()) };
            match m.iter().find(|(k, v)| !is_qualified_name(k).is_empty() || !is_label_value(v).is_empty()) {
                Some(bad) => Err(format!("{s:?} gave the invalid label {bad:?}")),
                None => Ok(()),
            }
        });
        assert!(r.failure.is_none(), "seed {}: {}", opts.seed, r.failure.unwrap());
        assert!(r.cases >= 2000);
    }
}
