//! Wiring of the node agent (`cmd/kubelet/app/server.go` RunKubelet, `pkg/kubelet/kubelet.go` Run): builds every
//! manager, spawns them into one task tracker, and on SIGTERM/SIGINT cancels them and waits a bounded time.
//! Pods keep running across a restart of rkubelet, as with the Go kubelet. A second signal exits at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kubelet::cm::{CgroupfsManager, NoCgroups, PodCgroups};
use kubelet::events::EventSink;
use kubelet::mirror::{ApiMirrorClient, MirrorClient};
use kubelet::pod_workers::PodWorkers;
use kubelet::runtime_state::RuntimeState;
use kubelet::server::{KubeletHost, SyncLoopHealth};
use kubelet::status::StatusManager;
use kubelet::status::apisync::StatusSync;
use kubelet::sync_loop::{SyncLoop, SyncLoopDeps};
use kubelet::syncer::KubeletSyncer;
use kubelet_config::kubelet_config::KubeletConfiguration;
use kubelet_config::podconfig::{PodConfig, SourcesReady};
use kubelet_config::sources::file::FileSource;
use kubelet_config::sources::http::HttpSource;
use kubelet_cri::{RemoteRuntime, RuntimeService};
use kubelet_runtime::pleg::{RELIST_PERIOD, RELIST_THRESHOLD};
use kubelet_runtime::{GenericPleg, PlegHealth, PodCache, RuntimeManager, RuntimeManagerConfig};
use kubelet_types::{Clock, PodSource, SystemClock};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::cli::Cli;
use crate::node;

/// Bound of the PLEG event channel (`plegChannelCapacity`): a full channel drops one relist's events.
const PLEG_CHANNEL_CAPACITY: usize = 1000;
/// Bound of the source → merge channel: sources block (back-pressure) when the merge lags.
const SOURCE_CHANNEL_CAPACITY: usize = 50;
/// Bound of the merge → sync loop channel (upstream's updates channel has 50).
const UPDATE_CHANNEL_CAPACITY: usize = 50;
/// After the sources are ready, how long start-up work (registration, first syncs) may take before its code is
/// dropped from the resident set.
const STARTUP_SETTLE: Duration = Duration::from_secs(10);
/// How long shutdown waits for managers before naming the laggards.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Waits for the runtime to answer `Version`, with back-off (1 s doubling to 30 s), logging each failure.
/// Returns `<runtime>://<version>`.
/// (pod UID, container name) of every running container, from their labels; none when the runtime cannot say.
async fn running_containers(runtime: &RemoteRuntime) -> std::collections::BTreeSet<(String, String)> {
    let filter = kubelet_cri::api::ContainerFilter {
        state: Some(kubelet_cri::api::ContainerStateValue {
            state: kubelet_cri::api::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    let list = match RuntimeService::list_containers(runtime, Some(filter)).await {
        Ok(l) => l,
        Err(e) => {
            warn!(error = %e, "unable to list the running containers; their devices are checked again at admission");
            vec![]
        }
    };
    list.into_iter()
        .filter_map(|c| {
            let uid = c.labels.get("io.kubernetes.pod.uid")?.clone();
            Some((uid, c.labels.get("io.kubernetes.container.name")?.clone()))
        })
        .collect()
}

async fn wait_for_runtime(runtime: &RemoteRuntime, cancel: &CancellationToken) -> Option<String> {
    let mut delay = Duration::from_secs(1);
    loop {
        match runtime.version().await {
            Ok(v) => {
                info!(runtimeName = %v.runtime_name, runtimeVersion = %v.runtime_version, apiVersion = %v.runtime_api_version, "container runtime is ready");
                return Some(format!("{}://{}", v.runtime_name, v.runtime_version));
            }
            Err(e) => {
                warn!(endpoint = %runtime.socket().display(), error = %e, retryIn = ?delay, "container runtime is not reachable yet")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

fn signals(cancel: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    // SIGHUP (a closed terminal, a `systemctl reload`, a stray `kill -HUP`) must not stop the node agent: the
    // configuration is read at start-up only, so it is noted and ignored.
    let mut hup = signal(SignalKind::hangup()).context("install SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            info!("received SIGHUP; ignored (the configuration is read at start-up only)");
        }
    });
    tokio::spawn(async move {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        info!("shutting down on signal; pods keep running");
        cancel.cancel();
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        warn!("second signal: exiting now");
        std::process::exit(1);
    });
    Ok(())
}

/// Which gated projected sources upstream would serve here (`kubelet.go`: the gate on and an apiserver client);
/// rkubelet serves none yet and fails their mounts either way, with upstream's text when the gate is off.
fn gated_projections(cfg: &KubeletConfiguration, api: bool) -> kubelet_volume::GatedProjections {
    let on = |gate| api && cfg.gate(gate);
    let gated = kubelet_volume::GatedProjections {
        cluster_trust_bundle: on(kubelet_volume::sources::CLUSTER_TRUST_BUNDLE_PROJECTION),
        pod_certificate: on(kubelet_volume::sources::POD_CERTIFICATE_REQUEST),
    };
    if gated.cluster_trust_bundle || gated.pod_certificate {
        warn!(
            ?gated,
            "feature gates on for projected sources rkubelet does not serve yet: their volumes fail to mount"
        );
    }
    gated
}

/// Runs the node agent until a signal.
pub async fn run(
    cli: Cli,
    mut cfg: KubeletConfiguration,
    verbosity: Arc<dyn kubelet_server::handlers::Verbosity>,
) -> anyhow::Result<()> {
    let cancel = CancellationToken::new();
    signals(cancel.clone())?;
    let tracker = TaskTracker::new();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // SystemdWatchdog: a watchdog systemd set up wrongly stops the start (upstream's NewHealthChecker).
    let watchdog_timeout = if cfg.gate("SystemdWatchdog") {
        let env = |k| std::env::var(k).ok();
        kubelet::watchdog::interval_from_env(
            env("WATCHDOG_USEC").as_deref(),
            env("WATCHDOG_PID").as_deref(),
            std::process::id(),
        )
        .map_err(|e| anyhow::anyhow!("create health checker: {e}"))?
    } else {
        None
    };
    let notify_socket = Arc::new(kubelet::watchdog::NotifySocket::from_env());
    // Each pod's recent events, for `/debug/explain` (every recorder below writes through it).
    let event_log = Arc::new(kubelet::explain::EventLog::default());

    let node_name = node::node_name(cli.hostname_override.as_deref())?;
    // `tracing:` (upstream's newTracerProvider): set before any runtime or apiserver client is made.
    let tracer = match &cfg.tracing {
        Some(t) => {
            let p = kubelet_trace::init(t.endpoint.as_deref(), t.sampling_rate_per_million, &node_name)?;
            info!(
                endpoint = t.endpoint.as_deref().unwrap_or(kubelet_trace::DEFAULT_ENDPOINT),
                samplingRatePerMillion = t.sampling_rate_per_million.unwrap_or(0),
                "tracing spans to an OTLP collector"
            );
            Some(p)
        }
        None => None,
    };
    let host_ips = node::node_ips(cli.node_ip.as_deref())?;
    let kubeconfig = match (&cli.kubeconfig, &cli.bootstrap_kubeconfig) {
        (Some(k), Some(_)) if kubelet_kube::bootstrap::kubeconfig_is_valid(k) => {
            info!(kubeconfig = %k.display(), "kubeconfig has a valid client certificate; no bootstrap needed");
            Some(k.clone())
        }
        (Some(k), Some(b)) => {
            // TLS bootstrap: blocks start-up until the certificate is issued, as upstream.
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                r = kubelet_kube::bootstrap::bootstrap(b, k, &cli.cert_dir, &node_name) => r.context("TLS bootstrap")?,
            }
            Some(k.clone())
        }
        (Some(k), _) if k.exists() => Some(k.clone()),
        (Some(k), _) => anyhow::bail!(
            "kubeconfig {}: no such file (give --bootstrap-kubeconfig to request a client certificate)",
            k.display()
        ),
        (None, Some(_)) => {
            anyhow::bail!("--bootstrap-kubeconfig needs --kubeconfig: where to write the kubeconfig it obtains")
        }
        (None, None) => None,
    };
    info!(nodeName = %node_name, nodeIPs = ?host_ips, version = crate::KUBERNETES_VERSION, rkubeletVersion = env!("CARGO_PKG_VERSION"), "starting rkubelet");

    let eviction_cfg = crate::pressure::eviction_config(&cfg)?;
    let pressure = Arc::new(kubelet_eviction::PressureState::default());
    let root_dir = cli.root_dir.clone();
    let pods_dir = root_dir.join("pods");
    std::fs::create_dir_all(&pods_dir).with_context(|| format!("create {}", pods_dir.display()))?;
    // As upstream's setupDataDirs: the root directory is a shared mount, so mounts made below it (subPath binds,
    // Bidirectional volumes, CSI drivers' mounts) propagate. An operator's shared mount is left as it is.
    let real_root = std::fs::canonicalize(&root_dir).with_context(|| format!("resolve {}", root_dir.display()))?;
    match kubelet_volume::mountinfo::make_rshared(&real_root)? {
        kubelet_volume::mountinfo::Rshared::AlreadyShared => {
            debug!(path = %real_root.display(), "root directory is already on a shared mount")
        }
        kubelet_volume::mountinfo::Rshared::Made => {
            info!(path = %real_root.display(), "bind-mounted the root directory with shared mount propagation")
        }
    }
    let pod_logs_dir =
        PathBuf::from(if cfg.pod_logs_dir.is_empty() { "/var/log/pods" } else { cfg.pod_logs_dir.as_str() });
    std::fs::create_dir_all(&pod_logs_dir).with_context(|| format!("create {}", pod_logs_dir.display()))?;
    let log_rotation = crate::pressure::log_rotation(&cfg, &pod_logs_dir)?;

    // Health endpoints come up first, so a runtime that is not there yet is visible.
    kubelet_metrics::kubelet::register_all();
    kubelet_metrics::kubelet::NODE_NAME.set(&[&node_name], 1.0);
    let syncloop_health = Arc::new(SyncLoopHealth::new(cfg.sync_frequency.0));
    let pleg_health = Arc::new(PlegHealth::new(RELIST_THRESHOLD));
    let status = Arc::new(StatusManager::new(clock.clone()));
    let (pods_tx, pods_rx) = watch::channel(Arc::new(Vec::new()));
    let remote = Arc::new(RemoteRuntime::new(&cfg.container_runtime_endpoint, cfg.runtime_request_timeout.0)?);
    let cache = Arc::new(PodCache::default());
    let host = Arc::new(KubeletHost {
        syncloop: syncloop_health.clone(),
        pleg: pleg_health.clone(),
        pods: pods_rx.clone(),
        status: status.clone(),
        runtime: remote.clone(),
        cache: cache.clone(),
        checkpoints_dir: root_dir.join("checkpoints"),
        clock: clock.clone(),
        events: event_log.clone(),
    });
    let csi_stats: Arc<std::sync::OnceLock<Arc<kubelet::stats::csi::CsiVolumes>>> = Arc::default();
    let stats = Arc::new(kubelet::stats::SummaryProvider::new(kubelet::stats::SummaryDeps {
        node_name: node_name.clone(),
        runtime: remote.clone(),
        images: remote.clone(),
        paths: Default::default(),
        root_dir: root_dir.clone(),
        pod_logs_dir: pod_logs_dir.clone(),
        pods_cgroup: crate::node::pods_cgroup(&cfg),
        volume_stats_period: cfg.volume_stats_agg_period.0,
        csi: csi_stats.clone(),
        clock: clock.clone(),
        pressure: cfg.gate("KubeletPSI"),
    }));
    tracker.spawn(stats.clone().run(cancel.clone()));
    let options = crate::server::options(&cfg, &node_name);
    let handlers = kubelet_server::handlers::Handlers {
        streams: Arc::new(tokio::sync::Semaphore::new(options.max_streams)),
        options: Arc::new(options),
        pods: host.clone(),
        containers: host.clone(),
        configz: Arc::new(std::sync::RwLock::new(crate::server::configz(&cfg))),
        clock: clock.clone(),
        probe_metrics: kubelet_metrics::prober::registry(),
        stats: stats.clone(),
        verbosity,
        profiler: Arc::new(crate::server::ProcessProfiler),
    };
    crate::server::start_local(&cfg, &handlers, &tracker, &cancel).await?;
    // The health server listens: tell systemd (Type=notify), and feed its watchdog while the sync loop turns.
    kubelet::watchdog::notify(notify_socket.as_ref(), "READY=1");
    match watchdog_timeout {
        Some(timeout) => {
            let syncloop = syncloop_health.clone();
            let checks: kubelet::watchdog::Checks =
                Arc::new(move || vec![("ping", Ok(())), ("log", Ok(())), ("syncloop", syncloop.healthy())]);
            let w = kubelet::watchdog::Watchdog::new(timeout, notify_socket.clone(), checks);
            tracker.spawn(w.run(cancel.clone()));
        }
        None => info!("Systemd watchdog is not enabled"),
    }
    // Without an apiserver the secure port needs nothing more; it is checked (and bound) before the runtime wait.
    if kubeconfig.is_none() {
        crate::server::start_secure(&cfg, &cli.cert_dir, &node_name, &*clock, &handlers, None, None, &tracker, &cancel)
            .await?;
    }

    let Some(runtime_version) = wait_for_runtime(&remote, &cancel).await else {
        tracker.close();
        tracker.wait().await;
        return Ok(());
    };
    // The cgroup driver is the runtime's where it tells (containerd 2), before anything names a cgroup.
    let driver = crate::runtime_config::cgroup_driver(&*remote, &cfg.cgroup_driver).await?;
    if driver != cfg.cgroup_driver {
        cfg.cgroup_driver = driver;
        stats.set_pods_cgroup(crate::node::pods_cgroup(&cfg));
        *handlers.configz.write().unwrap_or_else(|e| e.into_inner()) = crate::server::configz(&cfg);
    }
    // The runtime's handlers and features before any pod is admitted or synced (user namespaces, recursive
    // read-only mounts, supplementalGroupsPolicy).
    let runtime_state = Arc::new(RuntimeState::default());
    if !runtime_state.wait_ready(&*remote, &cancel).await {
        tracker.close();
        tracker.wait().await;
        return Ok(());
    }

    // The Node admission reads: the initial one until the apiserver's is known (`getNodeAnyWay`).
    let inputs = node::node_inputs(&cfg, &node_name, &host_ips, &root_dir, runtime_version);
    let resize_facts = crate::node::resize_facts(&cfg, &inputs);
    let memory_inputs = inputs.clone();
    let mut initial_node =
        kubelet::nodestatus::setters::initial_node_with_status(&inputs, &cli.node_labels, &cfg.register_with_taints);
    kubelet::nodestatus::setters::set_runtime_status(&mut initial_node, &runtime_state.runtime_info());
    let (node_tx, node_rx) = watch::channel(Some(initial_node));

    // The CPU manager: its state file read now (one of another policy stops the start, as upstream's).
    let cpu_manager = Arc::new(crate::node::cpu_manager(&cfg, &root_dir).context("start cpu manager error")?);
    let cpus = Arc::new(kubelet::cpus::Cpus(cpu_manager.clone()));
    let quota_lift = if cfg.gate("DisableCPUQuotaWithExclusiveCPUs") {
        kubelet_runtime::cpus::QuotaLift::new(cpus.clone())
    } else {
        Default::default()
    };

    let mut allocatable_events = vec![];
    let systemd = cfg.cgroup_driver == "systemd";
    let hugepage_sizes = kubelet_runtime::resources::node_hugepage_sizes(std::path::Path::new(
        kubelet_runtime::resources::HUGEPAGES_SYSFS,
    ));
    let cgroup_root = if cfg.cgroup_root.is_empty() { "/" } else { cfg.cgroup_root.as_str() };
    if cfg.cgroups_per_qos.unwrap_or(true) {
        // As upstream's NewContainerManager: the root must exist; `<cgroupRoot>/kubepods` is made below it.
        kubelet::cm::root::validate_cgroup_root(std::path::Path::new("/sys/fs/cgroup"), cgroup_root, systemd)?;
        info!(cgroupRoot = cgroup_root, "container manager verified user specified cgroup-root exists");
    }
    let (cgroups, pod_cgroups): (Arc<dyn PodCgroups>, Arc<dyn kubelet_runtime::resize::PodCgroupResizer>) = if cfg
        .cgroups_per_qos
        .unwrap_or(true)
        && systemd
    {
        kubelet::cm::systemd::SystemdCgroups::check(std::path::Path::new("/run"))
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        let (pods, reserved) = crate::node::pods_allocatable(&cfg, &inputs);
        let m = kubelet::cm::systemd::SystemdCgroups::new("/run/systemd/private", "/sys/fs/cgroup")
            .with_cgroup_root(cgroup_root)
            .with_limits(cfg.cpu_cfs_quota.unwrap_or(true), cfg.pod_pids_limit.unwrap_or(-1))
            .with_quota_lift(quota_lift.clone())
            .with_pods_allocatable(pods.cpu_milli, pods.memory, pods.pids);
        m.setup_qos().context("create the kubepods slices through systemd")?;
        allocatable_events.push("Updated Node Allocatable limit across pods".to_string());
        for t in reserved {
            let a = t.amounts;
            m.enforce_existing(&t.cgroup, a.cpu_milli, a.memory, a.pids).map_err(|e| t.failed(&e))?;
            allocatable_events.push(t.applied().message);
        }
        info!(cgroupRoot = cgroup_root, "cgroupDriver systemd: the pods slice and the QoS slices made through systemd");
        let m = Arc::new(m);
        (m.clone(), m)
    } else if cfg.cgroups_per_qos.unwrap_or(true) {
        let root = PathBuf::from("/sys/fs/cgroup");
        let m = CgroupfsManager::new(&root)
            .with_cgroup_root(cgroup_root)
            .with_limits(cfg.cpu_cfs_quota.unwrap_or(true), cfg.pod_pids_limit.unwrap_or(-1))
            .with_quota_lift(quota_lift.clone())
            .with_hugepage_sizes(hugepage_sizes.clone());
        m.setup_qos().context("create the kubepods QoS cgroups (is /sys/fs/cgroup writable?)")?;
        allocatable_events = crate::node::enforce_node_allocatable(&cfg, &inputs, &root)?;
        let m = Arc::new(m);
        (m.clone(), m)
    } else {
        (Arc::new(NoCgroups), Arc::new(kubelet_runtime::resize::NoPodCgroups))
    };

    // Swap (NewContainerManager): a node with swap on does not start unless failSwapOn is false.
    let proc = std::path::Path::new("/proc");
    if kubelet_runtime::swap::is_swap_on(proc).unwrap_or(false) && cfg.fail_swap_on.unwrap_or(true) {
        anyhow::bail!("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false");
    }
    let swap = kubelet_runtime::swap::SwapSettings::detect(
        std::path::Path::new("/sys/fs/cgroup"),
        proc,
        &cfg.memory_swap.swap_behavior,
        node::memory_capacity() as i64,
    );
    let rm_cfg = RuntimeManagerConfig {
        pod_logs_dir,
        container_logs_dir: "/var/log/containers".into(),
        root_dir: root_dir.clone(),
        cluster_dns: cfg.cluster_dns.clone(),
        cluster_domain: cfg.cluster_domain.clone(),
        resolv_conf: cfg.resolver_config.clone().filter(|s| !s.is_empty()).map(PathBuf::from),
        cgroups_per_qos: cfg.cgroups_per_qos.unwrap_or(true),
        systemd_cgroup: systemd,
        cgroup_root: cgroup_root.to_string(),
        cpu_cfs_quota: cfg.cpu_cfs_quota.unwrap_or(true),
        cpu_cfs_quota_period_us: cfg.cpu_cfs_quota_period.map(|d| d.0.as_micros() as i64).unwrap_or(100_000),
        quota_lift,
        memory_capacity: node::memory_capacity(),
        seccomp_default: cfg.seccomp_default.unwrap_or(false),
        node_hosts_file: "/etc/hosts".into(),
        node_ips: host_ips.clone(),
        hugepage_sizes,
        swap,
    };
    // With an apiserver, events go to it as well as to the log.
    let events = kubeconfig.as_ref().map(|_| EventSink::new());
    let recorder: Arc<dyn kubelet_types::events::Recorder> = match &events {
        Some((sink, _)) => Arc::new(sink.clone()),
        None => Arc::new(kubelet_types::events::LogRecorder),
    };
    let recorder: Arc<dyn kubelet_types::events::Recorder> =
        Arc::new(kubelet::explain::LoggedRecorder { inner: recorder, log: event_log.clone(), clock: clock.clone() });
    for message in allocatable_events {
        recorder.event(
            &kubelet::nodestatus::manager::node_reference(&node_name),
            kubelet_types::events::NORMAL,
            "SuccessfulNodeAllocatableEnforcement",
            message,
        );
    }
    let (probes, probe_updates) = kubelet_prober::ProbeManager::new(kubelet_prober::ProbeManagerDeps {
        runtime: remote.clone(),
        status: status.clone(),
        recorder: recorder.clone(),
        clock: clock.clone(),
        cancel: cancel.clone(),
        tracker: tracker.clone(),
    });
    let probes = Arc::new(probes);
    let objects = Arc::new(crate::objects::ApiObjects::default());
    let node_facts = kubelet_runtime::env::NodeFacts {
        host_ips: host_ips.clone(),
        allocatable_milli_cpu: std::thread::available_parallelism().map(|n| n.get() as i64 * 1000).unwrap_or(1000),
        allocatable_memory: node::memory_capacity() as i64,
        allocatable_ephemeral_storage: kubelet::nodestatus::machine::read_machine_info(&root_dir).rootfs_capacity
            as i64,
    };
    let sysctls = kubelet::admission::SysctlAllowlist::new(&cfg.allowed_unsafe_sysctls)
        .map_err(|e| anyhow::anyhow!("allowedUnsafeSysctls: {e}"))?;
    // The device manager serves the registration socket where upstream's does, whatever the root directory.
    let device_manager = kubelet_cm::devicemanager::DeviceManager::new(std::path::Path::new(
        kubelet_cm::devicemanager::DEVICE_PLUGIN_PATH,
    ));
    // Upstream's order: eviction and sysctls, then the device allocation (`allocate_after`), then the resource fit
    // and the rest.
    let mut admit: Vec<Arc<dyn kubelet::admission::PodAdmitHandler>> = vec![
        Arc::new(kubelet::pressure::PressureAdmit::new(pressure.clone()).with_running_pods(&*remote).await),
        Arc::new(sysctls),
    ];
    let allocate_after = admit.len();
    admit.extend::<[Arc<dyn kubelet::admission::PodAdmitHandler>; 7]>([
        Arc::new(kubelet::admission::NodeOs),
        Arc::new(kubelet::predicate::PredicateAdmit {
            node: node_rx.clone(),
            plugin_resources: Some(Arc::new(kubelet::devices::PluginResources(device_manager.clone()))),
        }),
        Arc::new(kubelet::admission::AppArmor { host_enabled: kubelet_runtime::security::host_app_armor_enabled() }),
        Arc::new(kubelet::admission::PodFeatures { pod_level_resources: cfg.gate("PodLevelResources") }),
        Arc::new(kubelet::cm::hugetlb::HugePagesAdmit::new("/sys/fs/cgroup", systemd)),
        Arc::new(kubelet::admission::SupportedVolumes),
        Arc::new(kubelet::admission_fields::UnsupportedPodFields),
    ]);
    if kubeconfig.is_none() {
        admit.push(Arc::new(kubelet::admission::StandaloneRuntimeClass));
    }
    // Graceful node shutdown: refuses pods while the node shuts down (the last handler, as upstream's).
    let node_shutdown = Arc::new(kubelet::nodeshutdown::NodeShutdown::default());
    admit.push(Arc::new(kubelet::nodeshutdown::ShutdownAdmit(node_shutdown.clone())));
    let tokens = Arc::new(kubelet_volume::TokenManager::new(objects.clone(), clock.clone()));
    let service_accounts = Arc::new(crate::pull_credentials::ApiServiceAccounts::new(tokens.clone()));
    let credentials = crate::pull_credentials::lookup(
        &root_dir,
        cli.image_credential_provider_config.as_ref(),
        cli.image_credential_provider_bin_dir.as_ref(),
        cfg.gate("KubeletServiceAccountTokenForCredentialProviders"),
        service_accounts.clone(),
    )?;
    // CSI drivers: the node's information about them and the CSIDriver objects need the apiserver, given once it
    // is known.
    let csi_drivers = Arc::new(kubelet_volume::csi::registration::CsiDrivers::default());
    let csi_node_info: kubelet_volume::csi::registration::NodeInfo = Arc::default();
    let csi_driver_lister: kubelet_volume::csi::plugin::Lister = Arc::default();
    let csi_storage: kubelet_volume::csi::plugin::Storage = Arc::default();
    let csi_plugin = kubelet_volume::csi::plugin::CsiPlugin::new(
        csi_drivers.clone(),
        csi_driver_lister.clone(),
        csi_storage.clone(),
        &node_name,
        &root_dir,
    );
    let volumes = Arc::new(
        kubelet_volume::VolumeManager::new(
            pods_dir.clone(),
            objects.clone(),
            Arc::new(kubelet::volumes::PodDownward(Arc::new(node_facts.clone()))),
            Arc::new(kubelet_volume::SystemMounter),
        )
        .with_tokens(tokens.clone())
        .with_gated_projections(gated_projections(&cfg, kubeconfig.is_some()))
        .with_csi(Arc::new(csi_plugin))
        .with_node(node_rx.clone()),
    );
    let _ = csi_stats.set(Arc::new(kubelet::stats::csi::CsiVolumes::new(
        volumes.clone(),
        recorder.clone(),
        cfg.gate("CSIVolumeHealth"),
    )));
    tracker.spawn(runtime_state.clone().run(remote.clone() as Arc<dyn RuntimeService>, cancel.clone()));
    {
        let (m, cancel) = (device_manager.clone(), cancel.clone());
        tracker.spawn(async move {
            if let Err(e) = m.run(cancel).await {
                tracing::error!(error = %e, "device manager stopped");
            }
        });
    }
    // The DRA manager: its checkpoint read now (a corrupted one stops the start, as upstream's), the apiserver given
    // once it is known.
    let dra =
        kubelet_cm::dra::manager::DraManager::new(&root_dir, kubelet_cm::dra::registry::DraPlugins::new(&node_name))
            .context("start the DRA manager")?;
    if cfg.gate("ResourceHealthStatus") {
        warn!(
            "feature gate ResourceHealthStatus is on: rkubelet does not watch its drivers' device health yet, and \
             reports no allocatedResourcesStatus in the pods' container statuses"
        );
    }
    // The plugin manager: device plugins, DRA drivers and CSI drivers that announce themselves by a socket in
    // `<root-dir>/plugins_registry`.
    {
        let events = kubelet_pluginmanager::Events {
            recorder: recorder.clone(),
            node: kubelet::nodestatus::manager::node_reference(&node_name),
        };
        let mut plugins =
            kubelet_pluginmanager::PluginManager::new(root_dir.join(kubelet_pluginmanager::PLUGINS_REGISTRY_DIR))
                .with_events(events);
        let handler = kubelet_cm::devicemanager::watcher_handler::WatcherHandler::new(device_manager.clone());
        plugins.add_handler(kubelet_pluginmanager::DEVICE_PLUGIN, Arc::new(handler));
        let handler = kubelet_cm::dra::registry::Handler(dra.plugins().clone());
        plugins.add_handler(kubelet_pluginmanager::DRA_PLUGIN, Arc::new(handler));
        let handler = kubelet_volume::csi::registration::RegistrationHandler::new(
            csi_drivers.clone(),
            csi_node_info.clone(),
            Arc::new(kubelet_volume::csi::registration::GrpcNodeInfo),
        );
        plugins.add_handler(kubelet_pluginmanager::CSI_PLUGIN, Arc::new(handler));
        let cancel = cancel.clone();
        tracker.spawn(async move {
            if let Err(e) = plugins.run(cancel).await {
                tracing::error!(error = %e, "The desired_state_of_world populator (plugin watcher) starts failed!");
            }
        });
    }
    // The containers running now keep the devices the checkpoint gives them when their pods are admitted again
    // (upstream's containerMap at the device manager's Start).
    device_manager.set_running_at_start(running_containers(&remote).await);
    let (topology_policy, topology_scope) = crate::node::topology_manager(&cfg, std::path::Path::new("/sys"))?;
    let devices = Arc::new(
        kubelet::devices::Devices::new(device_manager.clone())
            .with_dra(dra.clone())
            .with_numa_nodes(topology_policy.numa.nodes.clone()),
    );
    tracker.spawn(kubelet::cpus::run_reconcile(
        cpu_manager,
        pods_rx.clone(),
        cache.clone(),
        remote.clone(),
        cfg.cpu_manager_reconcile_period.0,
        cancel.clone(),
    ));
    // The memory manager: its state file read now (one of another policy stops the start, as upstream's).
    let memory = Arc::new(kubelet::memory::Memory(Arc::new(
        crate::node::memory_manager(&cfg, &memory_inputs, &root_dir).context("start memory manager error")?,
    )));
    let runtime = RuntimeManager::new(remote.clone(), remote.clone(), rm_cfg, clock.clone())
        .with_devices(devices.clone())
        .with_cpus(cpus.clone())
        .with_mems(memory.clone())
        .with_pod_cgroups(pod_cgroups)
        .with_actuated_state(Arc::new(
            kubelet_cm::allocation_state::PodResourceState::open(
                &root_dir,
                kubelet_cm::allocation_state::ACTUATED_FILE,
            )
            .context("failed to initialize actuated state checkpoint")?,
        ))
        .with_volumes(volumes.clone())
        .with_recorder(recorder.clone())
        .with_probe_results(probes.clone())
        .with_objects(objects.clone())
        .with_credentials(Arc::new(credentials))
        .with_pull_limit(
            cfg.serialize_image_pulls.unwrap_or(true),
            cfg.max_parallel_image_pulls.filter(|n| *n > 0).map(|n| n as usize),
        )
        .with_node_facts(node_facts)
        .with_runtime_handlers(runtime_state.subscribe())
        .with_user_namespaces(Arc::new(crate::node::user_namespaces(&cfg, &pods_dir)?));
    let runtime = Arc::new(runtime);

    if let Some(rot) = log_rotation {
        let m = kubelet_runtime::log_rotation::ContainerLogManager::new(remote.clone(), rot, clock.clone());
        tracker.spawn(m.run(cancel.clone()));
    }

    let (pleg_tx, pleg_rx) = mpsc::channel(PLEG_CHANNEL_CAPACITY);
    let mut pleg = GenericPleg::new(runtime.clone(), cache.clone(), pleg_tx, pleg_health.clone(), RELIST_PERIOD);
    // Container events drive the relist unless the operator turned the gate off explicitly (upstream's Evented
    // PLEG is alpha and off; rkubelet's event-woken relist is on unless `EventedPLEG: false`).
    if cfg.feature_gates.get("EventedPLEG") == Some(&false) {
        pleg = pleg.without_events();
    }
    tracker.spawn(pleg.run(cancel.clone()));

    // Pod sources and their merge.
    let mut expected = vec![];
    let (src_tx, src_rx) = mpsc::channel(SOURCE_CHANNEL_CAPACITY);
    if !cfg.static_pod_path.is_empty() {
        expected.push(PodSource::File);
        let fs = FileSource::new(
            cfg.static_pod_path.clone().into(),
            node_name.clone(),
            cfg.file_check_frequency.0,
            src_tx.clone(),
        );
        tracker.spawn(fs.run(cancel.clone()));
        info!(path = %cfg.static_pod_path, "watching static pod path");
    }
    if !cfg.static_pod_url.is_empty() {
        expected.push(PodSource::Http);
        let hs = HttpSource::new(
            cfg.static_pod_url.clone(),
            cfg.static_pod_url_header.clone(),
            node_name.clone(),
            cfg.http_check_frequency.0,
            src_tx.clone(),
        );
        tracker.spawn(hs.run(cancel.clone()));
        info!(url = %cfg.static_pod_url, "reading static pods from URL");
    }
    let mut api = None;
    if let Some(kc) = &kubeconfig {
        expected.push(PodSource::Api);
        let storage_state = Arc::new(crate::node::StorageState::new());
        let deps = crate::cluster::ClusterDeps {
            cfg: &cfg,
            pressure: pressure.clone(),
            kubeconfig: kc,
            bootstrap_kubeconfig: cli.bootstrap_kubeconfig.as_deref(),
            cert_dir: &cli.cert_dir,
            node_name: &node_name,
            inputs,
            node_watch: node_tx,
            runtime_state: runtime_state.clone(),
            pleg: pleg_health.clone(),
            images: remote.clone(),
            devices: device_manager.clone(),
            volumes: volumes.clone(),
            storage: storage_state.clone(),
            shutdown: node_shutdown.clone(),
            clock: clock.clone(),
            sources: src_tx.clone(),
            node_labels: cli.node_labels.clone(),
            events: events.expect("events exist with a kubeconfig"),
        };
        let kube = crate::cluster::start(deps, &tracker, &cancel).await?;
        let strategy = crate::objects::Strategy::new(
            &cfg.config_map_and_secret_change_detection_strategy,
            kube.clone(),
            cfg.sync_frequency.0,
            &tracker,
            &cancel,
        );
        let services = kubelet::watched_cache::ServiceCache::start(kube.clone(), &tracker, &cancel);
        let runtime_classes = kubelet::watched_cache::RuntimeClassCache::start(kube.clone(), &tracker, &cancel);
        objects.bind(kube.clone(), strategy, services, runtime_classes);
        dra.bind(kube.clone());
        let nim = Arc::new(kubelet_volume::csi::nodeinfo::NodeInfoManager::new(&node_name, kube.clone(), kube.clone()));
        let _ = csi_node_info.set(nim.clone());
        let csi_drivers_cache: Arc<dyn kubelet_volume::csi::plugin::CsiDriverLister> =
            kubelet::watched_cache::CsiDriverCache::start(kube.clone(), &tracker, &cancel);
        let _ = csi_driver_lister.set(csi_drivers_cache);
        let _ = csi_storage.set(kube.clone());
        tracker.spawn(crate::node::initialize_csi_node(nim, storage_state, cancel.clone()));
        service_accounts.bind(kube.clone());
        tracker.spawn(StatusSync::new(status.clone(), kube.clone()).run(cancel.clone()));
        let reviews: Arc<dyn kubelet_apiclient::ReviewApi> = kube.clone();
        let serving = if cfg.server_tls_bootstrap {
            Some(crate::certs::serving_certificates(
                &kube,
                (&cfg.tls_cert_file, &cfg.tls_private_key_file),
                &cli.cert_dir,
                &node_name,
                node_rx.clone(),
                clock.clone(),
                &tracker,
                &cancel,
            )?)
        } else {
            None
        };
        crate::server::start_secure(
            &cfg,
            &cli.cert_dir,
            &node_name,
            &*clock,
            &handlers,
            Some(reviews),
            serving,
            &tracker,
            &cancel,
        )
        .await?;
        api = Some(kube);
    }
    drop(src_tx);
    let sources_ready = SourcesReady::new(expected);
    devices.set_sources_ready(sources_ready.clone());
    let pods = Arc::new(kubelet::server::PodResourcesPods { host: host.clone(), sources_ready: sources_ready.clone() });
    // The DRA manager's reconcile pass: every minute once every pod source was seen, the claims of pods no longer
    // active are unprepared (`reconcileLoop`).
    {
        use kubelet_cm::podresources::PodsProvider;
        let (dra, pods, cancel) = (dra.clone(), pods.clone(), cancel.clone());
        tracker.spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tick.tick() => {}
                }
                if pods.sources_ready() {
                    let active = pods.active_pods().iter().filter_map(|p| p.metadata.uid.clone()).collect();
                    dra.reconcile(&active).await;
                }
            }
        });
    }
    // The pod resources API on `<root-dir>/pod-resources/kubelet.sock`, started unconditionally as upstream's.
    {
        let (dir, devices, cancel) = (
            root_dir.join(kubelet_cm::podresources::POD_RESOURCES_DIR),
            devices.clone() as Arc<dyn kubelet_cm::podresources::DevicesProvider>,
            cancel.clone(),
        );
        tracker.spawn(async move {
            if let Err(e) = kubelet_cm::podresources::serve(&dir, pods, devices, cancel).await {
                tracing::error!(error = %e, "Failed to serve the podresources API");
            }
        });
    }
    let (upd_tx, upd_rx) = mpsc::channel(UPDATE_CHANNEL_CAPACITY);
    let pod_config = PodConfig::new(sources_ready.clone(), clock.clone())
        .with_events(recorder.clone(), kubelet::nodestatus::manager::node_reference(&node_name));
    tracker.spawn(pod_config.run(src_rx, upd_tx, cancel.clone()));

    let syncer = Arc::new(KubeletSyncer {
        runtime: runtime.clone(),
        cache: cache.clone(),
        status: status.clone(),
        cgroups: cgroups.clone(),
        host_ips,
        probes: probes.clone(),
        volumes: volumes.clone(),
    });
    let workers = PodWorkers::new(syncer, cfg.sync_frequency.0, cancel.clone(), tracker.clone());
    let (workers_for_shutdown, workers_killer, recorder_for_shutdown) =
        (workers.clone(), workers.clone(), recorder.clone());

    // Node pressure: image garbage collection and the eviction manager (`StartGarbageCollection`,
    // `evictionManager.Start`).
    let node_ref = kubelet::nodestatus::manager::node_reference(&node_name);
    let image_gc = Arc::new(
        kubelet_runtime::image_gc::ImageGcManager::new(
            remote.clone(),
            remote.clone(),
            crate::pressure::image_gc_policy(&cfg),
            recorder.clone(),
            node_ref.clone(),
        )
        .with_image_volumes(runtime.image_volumes_in_use()),
    );
    tracker.spawn(kubelet::pressure::run_image_gc(
        image_gc.clone(),
        recorder.clone(),
        node_ref.clone(),
        cancel.clone(),
    ));
    let oom = kubelet::oom::OomWatcher {
        kmsg: "/dev/kmsg".into(),
        recorder: recorder.clone(),
        node_ref: node_ref.clone(),
        kills: runtime.oom_kills(),
    };
    tracker.spawn(oom.run(cancel.clone()));
    let wakeups = kubelet_eviction::notifier::spawn(
        kubelet_eviction::notifier::NotifierConfig {
            cgroup_root: "/sys/fs/cgroup".into(),
            proc: "/proc".into(),
            pods_cgroup: crate::node::pods_cgroup(&cfg),
            thresholds: eviction_cfg.thresholds.clone(),
        },
        &tracker,
        &cancel,
    );
    let eviction = kubelet_eviction::EvictionManager::new(
        eviction_cfg,
        kubelet_eviction::EvictionDeps {
            stats: Arc::new(kubelet::pressure::SummaryStats(stats)),
            pods: Arc::new(kubelet::pressure::PodsView {
                pods: pods_rx.clone(),
                workers: workers.clone(),
                status: status.clone(),
            }),
            killer: Arc::new(kubelet::pressure::WorkerKiller(workers.clone())),
            reclaimer: Arc::new(kubelet::pressure::RuntimeReclaimer {
                runtime: runtime.clone(),
                pods: pods_rx.clone(),
                workers: workers.clone(),
                status: status.clone(),
                sources_ready: sources_ready.clone(),
                images: image_gc,
            }),
            recorder: recorder.clone(),
            node_ref: node_ref.clone(),
            clock: clock.clone(),
            wakeups,
        },
    )
    .with_state(pressure);
    tracker.spawn(eviction.run(cancel.clone()));
    // Critical pods that lack resources preempt others through the eviction path (`CriticalPodAdmissionHandler`).
    let preemption = Arc::new(kubelet::preemption::CriticalPodPreemption::new(
        node_rx.clone(),
        Arc::new(kubelet::pressure::WorkerKiller(workers.clone())),
        recorder.clone(),
    ));
    // The resources allocated to each pod (in-place resize): a checkpoint that cannot be read stops the start.
    let allocations = Arc::new(kubelet::allocation::Allocations::new(Arc::new(
        kubelet_cm::allocation_state::PodResourceState::open(&root_dir, kubelet_cm::allocation_state::ALLOCATED_FILE)
            .context("failed to initialize allocation checkpoint manager")?,
    )));
    let sync_loop = SyncLoop::new(SyncLoopDeps {
        updates: upd_rx,
        pleg_events: pleg_rx,
        probe_updates,
        probes,
        workers,
        runtime,
        cache,
        cgroups,
        sources_ready: sources_ready.clone(),
        health: syncloop_health,
        pods_out: pods_tx,
        pods_dir,
        mirror: api.map(|a| {
            Arc::new(ApiMirrorClient { pods: a.clone(), nodes: a, node_name: node_name.clone() })
                as Arc<dyn MirrorClient>
        }),
        volumes: volumes.clone(),
        admit,
        // The topology manager allocates through its hint providers, in upstream's order.
        allocator: Some(Arc::new(kubelet::topology::TopologyManager::new(
            topology_policy,
            topology_scope,
            vec![devices.clone(), cpus, memory],
        ))),
        allocate_after,
        status: status.clone(),
        recorder,
        node_name: node_name.clone(),
        allocations,
        resize_facts,
    })
    .with_preemption(preemption);
    tracker.spawn(sync_loop.run(cancel.clone()));
    let shutdown_groups = crate::node::shutdown_groups(&cfg);
    if !shutdown_groups.is_empty() {
        let manager = kubelet::nodeshutdown::ShutdownManager {
            state: node_shutdown,
            groups: shutdown_groups,
            logind: Arc::new(kubelet::nodeshutdown::logind::SystemLogind::default()),
            pods: Arc::new(kubelet::pressure::PodsView {
                pods: pods_rx.clone(),
                workers: workers_for_shutdown,
                status: status.clone(),
            }),
            killer: Arc::new(kubelet::pressure::WorkerKiller(workers_killer)),
            recorder: recorder_for_shutdown,
            node_ref,
            state_file: root_dir.join(kubelet::nodeshutdown::STATE_FILE),
            clock: clock.clone(),
        };
        // Not critical for the kubelet, as upstream: without logind the node runs, without graceful shutdown.
        if let Err(e) = manager.start(&tracker, cancel.clone()).await {
            tracing::error!(error = %e, "Failed to start node shutdown manager; pods will not be stopped gracefully when the node shuts down (is systemd-logind running on the system bus?)");
        }
    }
    info!("started kubelet");
    // Once every pod source has been read and the first syncs and registration had time to run, the code that only
    // ran at start-up leaves the resident set, and free heap pages are given back every 30 s.
    let ready = sources_ready.clone();
    let settle_cancel = cancel.clone();
    tracker.spawn(async move {
        // Cancellation ends the wait: a SIGTERM soon after the start must not wait for the settling time.
        tokio::select! {
            _ = settle_cancel.cancelled() => {}
            _ = async {
                ready.wait().await;
                tokio::time::sleep(STARTUP_SETTLE).await;
                crate::residency::drop_startup_code();
                // Then the heap's free pages go back to the kernel now and then.
                let mut every = tokio::time::interval(crate::residency::TRIM_EVERY);
                loop {
                    every.tick().await;
                    crate::residency::return_free_heap();
                }
            } => {}
        }
    });

    cancel.cancelled().await;
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait()).await.is_err() {
        warn!(tasks = tracker.len(), "some tasks did not stop within {SHUTDOWN_GRACE:?}; exiting anyway");
    }
    if let Some(p) = tracer {
        // The spans still queued go out, within a bound: a collector that is down must not hold the exit up.
        let flush = tokio::task::spawn_blocking(move || p.shutdown());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), flush).await;
    }
    info!("rkubelet stopped");
    Ok(())
}
