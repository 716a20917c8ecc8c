use std::collections::BTreeMap;

use kubelet_config::kubelet_config::{Duration, KubeletConfiguration, from_yaml_str};

use super::table::{CADVISOR, CONFIG_FILE, FLAGS, POD_INFRA};
use super::values::Kind;
use super::*;
use crate::cli::Cli;

fn cmd(args: &[&str]) -> Result<CommandLine, FlagError> {
    split(std::iter::once("rkubelet").chain(args.iter().copied()))
}

/// A configuration as `load_file` would give it, for `yaml` (fields only).
fn file(yaml: &str) -> KubeletConfiguration {
    let doc = format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{yaml}");
    let mut cfg = from_yaml_str(&doc, "test.yaml").unwrap();
    cfg.set_defaults();
    cfg.apply_default_eviction_hard();
    cfg
}

/// `cfg` with the command line's configuration flags set over it.
fn with_flags(mut cfg: KubeletConfiguration, args: &[&str]) -> Result<KubeletConfiguration, FlagError> {
    apply(&mut cfg, &cmd(args)?.config_flags)?;
    Ok(cfg)
}

/// A value each flag's type takes and its field decodes.
fn sample(flag: &Flag) -> &'static str {
    match (flag.name, flag.kind) {
        ("node-labels", _) => "role=edge",
        (_, Kind::Bool | Kind::Version) => "true",
        (_, Kind::Str) => "/some/value",
        (_, Kind::Int32 | Kind::Int64 | Kind::Level) => "7",
        (_, Kind::Duration) => "7s",
        (_, Kind::Ip) => "10.0.0.1",
        (_, Kind::StrSlice) => "a,b",
        (_, Kind::Map | Kind::MapNoSplit | Kind::Labels) => "memory=1Gi",
        (_, Kind::LangleMap) => "memory.available<1Gi",
        (_, Kind::MapBool) => "SomeGate=true",
        (_, Kind::ColonMultimap) => "X-A:1",
        (_, Kind::ReservedMemory) => "0:memory=1Gi",
        (_, Kind::Taints) => "k=v:NoSchedule",
        (_, Kind::VModule) => "file=2",
        (_, Kind::Quantity) => "1Mi",
    }
}

#[test]
fn every_upstream_flag_is_accepted_in_both_spellings() {
    for flag in FLAGS.iter().filter(|f| f.name != "help") {
        let name = format!("--{}", flag.name);
        let value = sample(flag);
        let underscored = format!("--{}", flag.name.replace('-', "_"));
        let spellings: Vec<Vec<String>> = if flag.kind.is_bool() {
            vec![vec![name.clone()], vec![format!("{underscored}={value}")], vec![format!("{name}=false")]]
        } else {
            vec![vec![format!("{name}={value}")], vec![underscored, value.to_string()]]
        };
        for args in spellings {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let parsed = cmd(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let cli = Cli::from_command_line(parsed.clap_args.iter().cloned());
            let cli = cli.unwrap_or_else(|e| panic!("{args:?}: clap refused {:?}: {e}", parsed.clap_args));
            match flag.target {
                Target::Config(_) | Target::ConfigIfTrue(_) => {
                    assert_eq!(parsed.config_flags.len(), 1, "{args:?}");
                    let cfg = with_flags(file(""), &args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
                    assert!(flag.kind.is_bool() || cfg != file(""), "{args:?} changed nothing");
                }
                Target::Cli => assert!(parsed.config_flags.is_empty() && parsed.clap_args.len() <= 2, "{args:?}"),
                Target::NoEffect(_) | Target::Discarded => {
                    assert_eq!(parsed.clap_args.len(), 1, "{args:?}");
                    assert!(parsed.config_flags.is_empty(), "{args:?}");
                    assert!(!parsed.warnings.is_empty(), "{args:?}: accepted without a word");
                }
            }
            drop(cli);
        }
    }
    let help = cmd(&["--help=false"]).unwrap();
    assert_eq!(help.clap_args.len(), 1, "--help=false asks for nothing");
    let help = Cli::from_command_line(["rkubelet", "--help"]).unwrap_err();
    assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
}

#[test]
fn the_table_lists_exactly_the_upstream_flags() {
    let fixture = include_str!("../../testdata/upstream-kubelet-v1.35-flags.txt");
    let upstream: BTreeMap<&str, bool> = fixture
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name, kind == "bool")
        })
        .collect();
    let ours: BTreeMap<&str, bool> = FLAGS.iter().map(|f| (f.name, f.kind.is_bool())).collect();
    assert_eq!(ours.len(), FLAGS.len(), "a flag is listed twice");
    let missing: Vec<_> = upstream.keys().filter(|n| !ours.contains_key(*n)).collect();
    let extra: Vec<_> = ours.keys().filter(|n| !upstream.contains_key(*n)).collect();
    assert!(missing.is_empty() && extra.is_empty(), "missing {missing:?}, not upstream's {extra:?}");
    assert_eq!(ours, upstream, "a flag's boolean-ness differs");
    assert_eq!(upstream.len(), 150);
}

#[test]
fn config_flags_override_the_file() {
    let base = file(
        "maxPods: 100\ncgroupDriver: cgroupfs\nfeatureGates:\n  A: false\n  C: true\nnodeStatusUpdateFrequency: 20s\n",
    );
    let cfg = with_flags(
        base.clone(),
        &[
            "--max-pods=42",
            "--cgroup-driver",
            "systemd",
            "--eviction-hard=memory.available<1Gi",
            "--feature-gates=A=true,B=false",
            "--node-status-update-frequency=5s",
        ],
    )
    .unwrap();
    assert_eq!(cfg.max_pods, 42);
    assert_eq!(cfg.cgroup_driver, "systemd");
    assert_eq!(cfg.eviction_hard, Some(BTreeMap::from([("memory.available".into(), "1Gi".into())])));
    // Flag gates are merged over the file's, as kubeletConfigFlagPrecedence does.
    let gates = BTreeMap::from([("A".into(), true), ("B".into(), false), ("C".into(), true)]);
    assert_eq!(cfg.feature_gates, gates);
    assert_eq!(cfg.node_status_update_frequency, Duration::from_secs(5));
    // Nothing else moved: the configuration round-trips through its JSON form untouched.
    let mut expected = base;
    expected.max_pods = 42;
    expected.cgroup_driver = "systemd".into();
    expected.eviction_hard = cfg.eviction_hard.clone();
    expected.feature_gates = cfg.feature_gates.clone();
    expected.node_status_update_frequency = Duration::from_secs(5);
    assert_eq!(cfg, expected);
}

#[test]
fn the_example_configurations_survive_a_flag_unchanged() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    for name in ["kubelet-cluster.yaml", "kubelet-standalone.yaml"] {
        let loaded = kubelet_config::kubelet_config::load_file(&dir.join(name)).unwrap();
        let cfg = with_flags(loaded.clone(), &["--max-pods=42"]).unwrap();
        assert_eq!(cfg, KubeletConfiguration { max_pods: 42, ..loaded }, "{name}");
    }
}

#[test]
fn repeated_flags_combine_as_their_upstream_types() {
    let base = file(
        "evictionHard:\n  nodefs.available: 5%\ntlsCipherSuites: [X]\nlogging:\n  vmodule:\n  - filePattern: a\n    verbosity: 1\n",
    );
    let cfg = with_flags(
        base,
        &[
            "--eviction-hard=memory.available<1Gi",
            "--eviction-hard=imagefs.available<10%",
            "--tls-cipher-suites=A,\"B,C\"",
            "--tls-cipher-suites=D",
            "--max-pods=1",
            "--max-pods=0x10",
            "--vmodule=b=2,c=3",
            "--manifest-url-header=a:1,b:2",
            "--manifest-url-header",
            "a:3",
            "--register-with-taints=x=y:NoSchedule,z:NoExecute,gone:NoSchedule-",
            "--reserved-memory=0:memory=1Gi,hugepages-2Mi=2Mi",
            "--reserved-memory=1:memory=2Gi",
            "--seccomp-default",
            "--address=",
        ],
    )
    .unwrap();
    let hard = BTreeMap::from([("imagefs.available".into(), "10%".into()), ("memory.available".into(), "1Gi".into())]);
    assert_eq!(cfg.eviction_hard, Some(hard), "the file's map is replaced, the flags' maps add up");
    assert_eq!(cfg.tls_cipher_suites, ["A", "B,C", "D"]);
    assert_eq!(cfg.max_pods, 16, "the last wins; Go's base prefixes");
    let vmodule: Vec<(String, u32)> =
        cfg.logging.vmodule.iter().map(|v| (v.file_pattern.clone(), v.verbosity)).collect();
    assert_eq!(vmodule, [("a".into(), 1), ("b".into(), 2), ("c".into(), 3)], "appended to the file's");
    let headers = BTreeMap::from([("a".into(), vec!["1".into(), "3".into()]), ("b".into(), vec!["2".into()])]);
    assert_eq!(cfg.static_pod_url_header, headers);
    let taints: Vec<_> =
        cfg.register_with_taints.iter().map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str())).collect();
    assert_eq!(taints, [("x", Some("y"), "NoSchedule"), ("z", None, "NoExecute")]);
    let numa: Vec<_> = cfg.reserved_memory.iter().map(|r| (r.numa_node, r.limits.len())).collect();
    assert_eq!(numa, [(0, 2), (1, 1)]);
    assert_eq!(cfg.seccomp_default, Some(true));
    assert_eq!(cfg.address, "0.0.0.0", "an empty IPVar leaves the field alone");
    let off = with_flags(file("seccompDefault: true\n"), &["--seccomp-default=false"]).unwrap();
    assert_eq!(off.seccomp_default, Some(true), "upstream ORs --seccomp-default with the field");
}

#[test]
fn deprecated_and_ineffective_flags_warn_in_upstreams_words() {
    let c =
        cmd(&["--max-pods=42", "--v=2", "--provider-id=x", "--containerd=/run/c.sock", "--lock-file", "/l"]).unwrap();
    assert_eq!(
        c.warnings,
        [
            format!("Flag --max-pods has been deprecated, {CONFIG_FILE}"),
            format!("Flag --containerd has been deprecated, {CADVISOR}"),
            "Flag --containerd has no effect in rkubelet: rkubelet has no cAdvisor; it reads statistics from the \
             container runtime (CRI)"
                .to_string(),
            "Flag --lock-file has no effect in rkubelet: rkubelet takes no lock file".to_string(),
        ]
    );
    assert!(CONFIG_FILE.starts_with("This parameter should be set via the config file specified by the Kubelet's --config flag. See https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/ for more information."));
    let c = cmd(&["--maximum-dead-containers=3"]).unwrap();
    assert_eq!(
        c.warnings[0],
        "Flag --maximum-dead-containers has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be \
         removed in a future version."
    );
}

#[test]
fn kubeadm_flags_file_is_accepted() {
    let env =
        r#"KUBELET_KUBEADM_ARGS="--hostname-override=node-1 --pod-infra-container-image=registry.k8s.io/pause:3.10.1""#;
    let args = env.split_once('=').unwrap().1.trim_matches('"').split_whitespace();
    let cli = Cli::from_command_line(std::iter::once("kubelet").chain(args)).unwrap();
    assert_eq!(cli.hostname_override.as_deref(), Some("node-1"));
    assert!(cli.config_flags.is_empty());
    assert_eq!(
        cli.warnings[0],
        "Flag --pod-infra-container-image has been deprecated, will be removed in 1.35. Image garbage collector will \
         get sandbox image information from CRI."
    );
    assert!(cli.warnings[0].ends_with(POD_INFRA));
}

#[test]
fn bad_command_lines_are_refused_naming_the_flag() {
    let e = Cli::from_command_line(["rkubelet", "--no-such-flag=1"]).unwrap_err().to_string();
    assert!(e.contains("'--no-such-flag'"), "{e}");
    let e = Cli::from_command_line(["rkubelet", "--max-pods=1", "--bogus"]).unwrap_err().to_string();
    assert!(e.contains("'--bogus'"), "{e}");
    let e = cmd(&["--max-pods=lots"]).unwrap_err();
    assert_eq!(
        e.0,
        r#"invalid argument "lots" for "--max-pods" flag: strconv.ParseInt: parsing "lots": invalid syntax"#
    );
    let e = cmd(&["--max-pods=4294967296"]).unwrap_err();
    assert!(e.0.ends_with("value out of range"), "{e}");
    assert_eq!(cmd(&["--sync-frequency"]).unwrap_err().0, "flag needs an argument: --sync-frequency");
    let e = cmd(&["--fail-swap-on=maybe"]).unwrap_err();
    assert_eq!(
        e.0,
        r#"invalid argument "maybe" for "--fail-swap-on" flag: strconv.ParseBool: parsing "maybe": invalid syntax"#
    );
    let e = cmd(&["--sync-frequency=10"]).unwrap_err();
    assert_eq!(e.0, r#"invalid argument "10" for "--sync-frequency" flag: time: missing unit in duration "10""#);
    let e = cmd(&["--feature-gates=A=yes"]).unwrap_err();
    assert!(e.0.ends_with(r#"invalid value of A: yes, err: strconv.ParseBool: parsing "yes": invalid syntax"#), "{e}");
    let e = cmd(&["--eviction-hard=memory.available=1Gi"]).unwrap_err();
    assert!(e.0.ends_with("malformed pair, expect string<string"), "{e}");
    let e = cmd(&["--address=10.0.0"]).unwrap_err();
    assert!(e.0.ends_with(r#""10.0.0" is not a valid IP address"#), "{e}");
    let e = cmd(&["--register-with-taints=a=b:Sometimes"]).unwrap_err();
    assert!(e.0.ends_with("invalid taint effect: Sometimes, unsupported taint effect"), "{e}");
    let e = cmd(&["--register-with-taints=a=b:NoSchedule,a=c:NoSchedule"]).unwrap_err();
    assert!(e.0.contains("duplicated taints with the same key and effect"), "{e}");
    let e = cmd(&["--reserved-memory=0:cpu=1"]).unwrap_err();
    assert!(e.0.ends_with(r#"memory type conversion error, unknown type: "cpu""#), "{e}");
    let c = cmd(&["--config", "/c.yaml", "--", "--max-pods=1"]).unwrap();
    assert!(c.config_flags.is_empty(), "no flags after --");
    assert_eq!(c.clap_args[1..], ["--config=/c.yaml", "--", "--max-pods=1"].map(OsString::from));
    assert!(Cli::from_command_line(c.clap_args).is_err(), "a stray argument is refused");
    // A boolean never takes the next argument: `false` is then a stray argument, which clap refuses.
    let c = cmd(&["--fail-swap-on", "false"]).unwrap();
    assert_eq!(c.config_flags[0].parsed, serde_json::Value::Bool(true));
    assert!(Cli::from_command_line(c.clap_args).is_err());
    // A value the field refuses when decoded names the flag and the field (values are checked when parsed, so
    // this takes a hand-made occurrence).
    let flag = table::lookup("cpu-manager-policy-options").unwrap();
    let bad = Occurrence { flag, value: "x=1".into(), parsed: serde_json::json!({ "x": 1 }) };
    let e = apply(&mut file(""), &[bad]).unwrap_err();
    assert!(
        e.0.starts_with(
            r#"invalid argument "x=1" for "--cpu-manager-policy-options" flag: field cpuManagerPolicyOptions.x:"#
        ),
        "{e}"
    );
}

#[test]
fn verbosity_takes_every_pflag_spelling() {
    for args in [&["-v", "4"][..], &["-v4"], &["-v=4"], &["--v", "4"], &["--v=4"]] {
        let cfg = with_flags(file(""), args).unwrap();
        assert_eq!(cfg.logging.verbosity, 4, "{args:?}");
    }
    assert_eq!(with_flags(file("logging:\n  verbosity: 3\n"), &[]).unwrap().logging.verbosity, 3);
    let e = cmd(&["-version"]).unwrap_err();
    assert_eq!(
        e.0,
        r#"invalid argument "ersion" for "-v, --v" flag: strconv.ParseUint: parsing "ersion": invalid syntax"#
    );
    assert_eq!(cmd(&["-v"]).unwrap_err().0, "flag needs an argument: 'v' in -v");
}

#[test]
fn version_takes_verflags_values() {
    for (arg, asks) in [("--version", true), ("--version=true", true), ("--version=raw", true), ("--version=0", false)]
    {
        assert_eq!(Cli::from_command_line(["rkubelet", arg]).unwrap().version, asks, "{arg}");
    }
    let c = Cli::from_command_line(["rkubelet", "--version=v1.35.9"]).unwrap();
    assert!(!c.version && c.warnings[0].starts_with("Flag --version has no effect in rkubelet"), "{:?}", c.warnings);
    assert!(Cli::from_command_line(["rkubelet", "--version=please"]).is_err());
}

#[test]
fn go_integers_and_csv_read_as_upstream() {
    use super::values::parse_int;
    assert_eq!(parse_int("0x1F", 32), Ok(31));
    assert_eq!(parse_int("017", 32), Ok(15));
    assert_eq!(parse_int("0o17", 32), Ok(15));
    assert_eq!(parse_int("-0b101", 32), Ok(-5));
    assert_eq!(parse_int("1_000", 32), Ok(1000));
    assert_eq!(parse_int("-2147483648", 32), Ok(-2147483648));
    assert!(parse_int("2147483648", 32).is_err());
    assert!(parse_int("1__0", 32).is_err());
    assert!(parse_int("_1", 32).is_err());
    assert!(parse_int("08", 32).is_err());
    assert!(parse_int("", 32).is_err());
    assert_eq!(parse_int("9223372036854775807", 64), Ok(i64::MAX));
    assert!(parse_int("9223372036854775808", 64).is_err());
    assert_eq!(Kind::StrSlice.parse("").unwrap(), serde_json::json!([]));
    assert_eq!(Kind::StrSlice.parse(r#""a""b",c"#).unwrap(), serde_json::json!(["a\"b", "c"]));
    assert!(Kind::StrSlice.parse(r#"a"b"#).is_err());
}
