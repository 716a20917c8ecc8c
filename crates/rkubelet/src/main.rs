//! rkubelet: the kubelet binary (`cmd/kubelet`). Parses flags, loads and validates the
//! `KubeletConfiguration`, sets up logging, and runs the node agent until SIGTERM/SIGINT. An invalid
//! configuration stops start-up with a message naming the field, and exit code 1.

mod app;
mod certs;
mod check;
mod cli;
mod cluster;
mod dropin;
mod explain_cli;
mod flags;
mod node;
mod objects;
mod pressure;
mod pull_credentials;
mod residency;
mod runtime_config;
mod server;
mod unimplemented;

use std::process::ExitCode;

use kubelet_config::kubelet_config::{KubeletConfiguration, load_file};

use crate::cli::Cli;

/// The system allocator, with the heap sampling `/debug/pprof/heap` reports (Go's `MemProfileRate`).
#[global_allocator]
static ALLOC: kubelet_pprof::heap::SamplingAlloc = kubelet_pprof::heap::SamplingAlloc;

/// The Kubernetes version whose kubelet rkubelet mirrors.
pub const KUBERNETES_VERSION: &str = "v1.35.0";

fn load_config(cli: &Cli) -> anyhow::Result<KubeletConfiguration> {
    let mut cfg = match &cli.config {
        Some(path) => load_file(path)?,
        None => {
            let mut c = KubeletConfiguration::new();
            // Without a file, upstream's flag defaults apply where they differ from v1beta1's:
            // --anonymous-auth=true, --authentication-token-webhook=false, --authorization-mode=AlwaysAllow.
            c.authentication.anonymous.enabled = Some(true);
            c.authentication.webhook.enabled = Some(false);
            c.authorization.mode = "AlwaysAllow".into();
            c.set_defaults();
            c.apply_default_eviction_hard();
            c
        }
    };
    if let Some(dir) = &cli.config_dir {
        dropin::merge(&mut cfg, dir)?;
    }
    // Flags override the file and the drop-ins, as upstream's kubeletConfigFlagPrecedence.
    flags::apply(&mut cfg, &cli.config_flags)?;
    cfg.validate()?;
    if !cfg.container_runtime_endpoint.starts_with("unix://") && !cfg.container_runtime_endpoint.starts_with('/') {
        anyhow::bail!(
            "invalid configuration: containerRuntimeEndpoint (--container-runtime-endpoint) {:?}: only unix sockets (unix:///path) are supported",
            cfg.container_runtime_endpoint
        );
    }
    unimplemented::refuse(&cfg).map_err(anyhow::Error::msg)?;
    Ok(cfg)
}

/// The log filter of verbosity `v` (klog's `-v`): info up to 2, debug up to 5, trace beyond; `RKUBELET_LOG` (an
/// `EnvFilter` directive) overrides it at start.
fn log_filter(v: u32) -> tracing_subscriber::EnvFilter {
    let level = match v {
        0..=2 => "info",
        3..=5 => "debug",
        _ => "trace",
    };
    tracing_subscriber::EnvFilter::new(format!("{level},h2=info,hyper=info,tower=info,tonic=info,notify=info"))
}

/// The running process's log verbosity, changed by `/debug/flags/v` (component-base's `GlogSetter`).
struct LiveVerbosity(tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>);

impl kubelet_server::handlers::Verbosity for LiveVerbosity {
    fn set(&self, v: u32) -> Result<(), String> {
        self.0.reload(log_filter(v)).map_err(|e| format!("failed set klog.logging.verbosity {v}: {e}"))
    }
}

fn init_tracing(v: u32) -> LiveVerbosity {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("RKUBELET_LOG").unwrap_or_else(|_| log_filter(v));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    tracing_subscriber::registry().with(filter).with(fmt).init();
    LiveVerbosity(handle)
}

/// Raises the soft limit on open files to the hard one, as Go's runtime does at start-up for every Go program
/// (the kubelet included): a node's kubelet holds a connection per client of its API, a watch per volume, a log
/// file per follower, and the usual soft default of 1024 is not enough. rkubelet starts no program that would
/// mind (containers are the runtime's children).
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn main() -> ExitCode {
    residency::limit_arenas();
    residency::map_code_on_demand();
    raise_open_files_limit();
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `rkubelet explain [NAMESPACE/NAME] [flags]`: asks a running rkubelet why its pods are not running.
    if args.get(1).is_some_and(|a| a == "explain") {
        let rest: Vec<String> = args[2..].iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let result = explain_cli::parse(&rest).and_then(|o| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(explain_cli::run(&o))
        });
        return match result {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rkubelet explain: {e}");
                ExitCode::from(1)
            }
        };
    }
    // `rkubelet check [flags]`: the preflight, with the flags the kubelet would run with.
    let check = args.get(1).is_some_and(|a| a == "check");
    if check {
        args.remove(1);
    }
    let cli = Cli::from_command_line(args).unwrap_or_else(|e| e.exit());
    if check {
        let cfg = load_config(&cli).map_err(|e| format!("{e:#}"));
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
        let Ok(rt) = rt else { return ExitCode::from(1) };
        #[allow(clippy::disallowed_methods)] // the report's own clock: certificate expiry against now
        let now = std::time::SystemTime::now();
        let (text, failed) = rt.block_on(check::run(&cli, cfg, now));
        print!("{text}");
        return if failed { ExitCode::from(1) } else { ExitCode::SUCCESS };
    }
    for warning in &cli.warnings {
        eprintln!("{warning}");
    }
    if cli.version {
        // Exactly what the upstream kubelet prints: kubeadm's preflight parses it with an anchored pattern.
        // rkubelet's own version is in the start-up log line.
        println!("Kubernetes {KUBERNETES_VERSION}");
        return ExitCode::SUCCESS;
    }
    let cfg = match load_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rkubelet: {e:#}");
            return ExitCode::from(1);
        }
    };
    let verbosity = std::sync::Arc::new(init_tracing(cfg.logging.verbosity));
    for warning in kubelet_config::kubelet_config::gate_warnings(&cfg.feature_gates) {
        tracing::warn!("{warning}");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rkubelet: start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(app::run(cli, cfg, verbosity));
    // A blocking task still running (a disk usage walk, a file read) must not hold the exit up.
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("rkubelet: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn config_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config")
    }

    fn load(path: &Path) -> anyhow::Result<KubeletConfiguration> {
        let cli = Cli::from_command_line(["rkubelet".as_ref(), "--config".as_ref(), path.as_os_str()]).unwrap();
        load_config(&cli)
    }

    #[test]
    fn example_configs_load() {
        let mut checked = Vec::new();
        for entry in std::fs::read_dir(config_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                if let Err(e) = load(&path) {
                    panic!("{}: {e:#}", path.display());
                }
                checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        checked.sort();
        assert!(checked.contains(&"kubelet-standalone.yaml".to_string()), "{checked:?}");
        assert!(checked.contains(&"kubelet-cluster.yaml".to_string()), "{checked:?}");
    }

    #[test]
    fn cluster_config_takes_either_cgroup_driver_and_refuses_others() {
        let original = std::fs::read_to_string(config_dir().join("kubelet-cluster.yaml")).unwrap();
        assert!(original.contains("\ncgroupDriver: cgroupfs\n"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, original.replace("\ncgroupDriver: cgroupfs\n", "\ncgroupDriver: systemd\n")).unwrap();
        assert_eq!(load(&path).unwrap().cgroup_driver, "systemd", "kubeadm's default");
        std::fs::write(&path, original.replace("\ncgroupDriver: cgroupfs\n", "\ncgroupDriver: openrc\n")).unwrap();
        let err = load(&path).expect_err("an unknown driver is refused");
        assert!(format!("{err:#}").contains("cgroupDriver"), "{err:#}");
    }

    #[test]
    fn command_line_flags_override_the_config_file_and_are_validated() {
        let cluster = config_dir().join("kubelet-cluster.yaml");
        let with = |flags: &[&str]| {
            let args = ["rkubelet".as_ref(), "--config".as_ref(), cluster.as_os_str()];
            load_config(&Cli::from_command_line(args.into_iter().chain(flags.iter().map(|f| f.as_ref()))).unwrap())
        };
        let file = with(&[]).unwrap();
        assert_ne!(file.max_pods, 42);
        let cfg = with(&["--max-pods=42", "--pod-manifest-path", "/srv/manifests", "--v=5"]).unwrap();
        assert_eq!((cfg.max_pods, cfg.static_pod_path.as_str(), cfg.logging.verbosity), (42, "/srv/manifests", 5));
        assert_eq!(cfg, KubeletConfiguration { max_pods: 42, static_pod_path: "/srv/manifests".into(), ..cfg.clone() });
        let err = with(&["--cgroup-driver=openrc"]).expect_err("validated after the flags, as upstream");
        assert!(format!("{err:#}").contains("cgroupDriver"), "{err:#}");
        let err = with(&["--container-runtime-endpoint=tcp://10.0.0.1:1"]).expect_err("only unix sockets");
        assert!(format!("{err:#}").contains("containerRuntimeEndpoint"), "{err:#}");
        // Drop-ins apply over the file, flags over both.
        let dir = tempfile::tempdir().unwrap();
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        std::fs::write(dir.path().join("10-pods.conf"), format!("{head}maxPods: 30\n")).unwrap();
        let dropins = format!("--config-dir={}", dir.path().display());
        assert_eq!(with(&[&dropins]).unwrap().max_pods, 30);
        assert_eq!(with(&[&dropins, "--max-pods=42"]).unwrap().max_pods, 42);
        // Without a file, the flags apply over upstream's built-in defaults.
        let cfg = load_config(&Cli::from_command_line(["rkubelet", "--max-pods=42", "--read-only-port=0"]).unwrap());
        assert_eq!(cfg.unwrap().max_pods, 42);
    }
}
