//! The Summary API provider (`pkg/kubelet/stats`: `provider.go`, `cadvisor_stats_provider.go`, `helper.go`,
//! and `pkg/kubelet/server/stats` `summary.go`, `fs_resource_analyzer.go`).
//!
//! Every figure comes from its source, as upstream's cAdvisor provider reads them, not through the runtime:
//! - Node: CPU and memory of the root cgroup, the `pods` system container (`/kubepods`), the host's network
//!   interfaces, the filesystem of `--root-dir`, the runtime's image filesystem (CRI `ImageFsInfo`), and the
//!   process limits ([`host`]).
//! - Pods: which pods and containers exist comes from two cheap list calls (`ListPodSandbox`, `ListContainers`);
//!   their CPU, memory and process count from the pod's cgroup and each container's (`<pod cgroup>/<id>`, the
//!   cgroupfs layout), the pod's network from its sandbox process's `/proc/<pid>/net/dev`. A not-ready sandbox
//!   is reported only while its pod has no ready one.
//! - The writable layer of each container is what only the runtime knows: `ListContainerStats` (which makes
//!   containerd ask every shim for its task's metrics) is called at most every [`WRITABLE_LAYER_MAX_AGE`], and
//!   only when a full summary is asked for; a container started since is asked for alone.
//! - `usageNanoCores`: the rate between the last two samples of [`SummaryProvider::run`] (every 10 s, as
//!   cAdvisor's housekeeping), which reads the cgroup files of the node, the pods and their containers and never
//!   calls the runtime; left out until two samples exist.
//! - Volumes, container logs and ephemeral storage: `du`-style walks ([`host::disk_usage`]) every
//!   `volumeStatsAggPeriod` in the background; the summary only reads their last result.
//!
//! Called by the HTTP handlers at any time; a runtime error fails the pods part of the request (500), a missing
//! host file only leaves its field out.

pub mod cadvisor;
pub mod csi;
pub mod host;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use kubelet_cri::{CriError, ImageService, RuntimeService, api as cri};
use kubelet_server::host::HostError;
use kubelet_server::stats::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, IoStats, MemoryStats, NetworkStats, NodeStats, PodReference,
    PodStats, ProcessStats, RlimitStats, RuntimeStats, StatsProvider, Summary, SwapStats, Time, VolumeStats,
};
use kubelet_types::Clock;
use tokio_util::sync::CancellationToken;

use host::HostPaths;

/// The CSI plugin's folder under a pod's `volumes`.
const CSI_PLUGIN_DIR: &str = "kubernetes.io~csi";

/// How often CPU is sampled for `usageNanoCores`.
pub const CPU_SAMPLE_PERIOD: Duration = Duration::from_secs(10);

/// What the provider reads.
pub struct SummaryDeps {
    /// The node's name.
    pub node_name: String,
    /// The CRI runtime.
    pub runtime: Arc<dyn RuntimeService>,
    /// The CRI image service.
    pub images: Arc<dyn ImageService>,
    /// `/proc` and `/sys/fs/cgroup`.
    pub paths: HostPaths,
    /// `--root-dir`.
    pub root_dir: PathBuf,
    /// `podLogsDir`.
    pub pod_logs_dir: PathBuf,
    /// The pods' cgroup (`<cgroupRoot>/kubepods` in the driver's form: `/kubepods`, `/kubepods.slice`), with
    /// `cgroupsPerQOS`.
    pub pods_cgroup: Option<String>,
    /// `volumeStatsAggPeriod` (zero turns volume figures off).
    pub volume_stats_period: Duration,
    /// The CSI volumes' usage, from their drivers, once the volume manager exists (until then, and without one,
    /// CSI volumes have no figures).
    pub csi: Arc<std::sync::OnceLock<Arc<csi::CsiVolumes>>>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// `KubeletPSI`: pressure stall figures in the summary and `/metrics/cadvisor`.
    pub pressure: bool,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    at_ns: i64,
    usage_ns: u64,
    rate: Option<u64>,
}

/// How long the writable layers' usage from the runtime is kept.
pub const WRITABLE_LAYER_MAX_AGE: Duration = Duration::from_secs(300);

/// How often a container whose writable layer the runtime reported empty is asked again (containerd measures
/// its snapshots every 10 s, so a new container reads 0 at first).
const EMPTY_LAYER_RETRY: Duration = Duration::from_secs(10);

/// The writable layers of the containers, by container ID (with when each was asked for), and when they were
/// last listed.
#[derive(Default)]
struct WritableLayers {
    by_id: HashMap<String, (cri::FilesystemUsage, tokio::time::Instant)>,
    listed: Option<tokio::time::Instant>,
}

/// The Summary API provider.
pub struct SummaryProvider {
    d: SummaryDeps,
    samples: Mutex<HashMap<String, Sample>>,
    du: Mutex<HashMap<PathBuf, (u64, u64, SystemTime)>>,
    /// The runtime's figures of the writable layers; one refresh at a time (requests meanwhile wait for it).
    writable: tokio::sync::Mutex<WritableLayers>,
    /// A du walk is running.
    measuring: std::sync::atomic::AtomicBool,
    /// When the image filesystem's stats last failed to come (its warning is logged once a minute).
    image_fs_warned: Mutex<Option<tokio::time::Instant>>,
    /// The pods' cgroup: [`SummaryDeps::pods_cgroup`] until the cgroup driver the runtime reports is known.
    pods_cgroup: Mutex<Option<String>>,
    /// The runtime's sandbox image, once it answered.
    sandbox_image: Mutex<Option<String>>,
}

fn time_ns(ns: i64) -> Time {
    if ns <= 0 {
        return Time::default();
    }
    Time(DateTime::<Utc>::from_timestamp(ns / 1_000_000_000, (ns % 1_000_000_000) as u32))
}

fn u(v: &Option<cri::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

fn host_err(what: &str, e: CriError) -> HostError {
    HostError::Other(format!("failed to {what}: {e}"))
}

fn host_interface((name, rx_bytes, rx_errors, tx_bytes, tx_errors): host::Interface) -> InterfaceStats {
    InterfaceStats {
        name,
        rx_bytes: Some(rx_bytes),
        rx_errors: Some(rx_errors),
        tx_bytes: Some(tx_bytes),
        tx_errors: Some(tx_errors),
    }
}

/// `cadvisorInfoToSwapStats`: the swap in use, and what the limit still allows when there is one.
fn host_swap(m: &host::Memory, t: Time) -> SwapStats {
    SwapStats {
        time: t,
        swap_available_bytes: m.swap_limit.map(|l| l.saturating_sub(m.swap_usage)),
        swap_usage_bytes: Some(m.swap_usage),
    }
}

fn host_memory(m: host::Memory, t: Time) -> MemoryStats {
    MemoryStats {
        time: t,
        available_bytes: m.limit.map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: Some(m.rss),
        page_faults: Some(m.pgfault),
        major_page_faults: Some(m.pgmajfault),
        psi: None,
    }
}

impl SummaryProvider {
    /// A provider.
    pub fn new(d: SummaryDeps) -> Self {
        SummaryProvider {
            pods_cgroup: Mutex::new(d.pods_cgroup.clone()),
            d,
            samples: Mutex::new(HashMap::new()),
            du: Mutex::new(HashMap::new()),
            writable: Default::default(),
            measuring: Default::default(),
            image_fs_warned: Mutex::new(None),
            sandbox_image: Mutex::new(None),
        }
    }

    /// Sets the pods' cgroup once the cgroup driver is settled (the runtime's `RuntimeConfig` answer can change
    /// it after the provider is made; called once at start-up).
    pub fn set_pods_cgroup(&self, cgroup: Option<String>) {
        *self.pods_cgroup.lock().unwrap_or_else(|e| e.into_inner()) = cgroup;
    }

    fn pods_cgroup(&self) -> Option<String> {
        self.pods_cgroup.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn now_ns(&self) -> i64 {
        self.d.clock.now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
    }

    fn now(&self) -> Time {
        time_ns(self.now_ns())
    }

    /// Records a cumulative CPU sample under `key`; the rate against the previous one becomes the key's rate.
    fn sample(&self, key: &str, at_ns: i64, usage_ns: u64) {
        let mut m = self.samples.lock().unwrap();
        let rate = m.get(key).and_then(|p| {
            let dt = at_ns - p.at_ns;
            (dt > 0 && usage_ns >= p.usage_ns)
                .then(|| ((usage_ns - p.usage_ns) as u128 * 1_000_000_000 / dt as u128) as u64)
        });
        m.insert(key.to_string(), Sample { at_ns, usage_ns, rate });
    }

    fn rate(&self, key: &str) -> Option<u64> {
        self.samples.lock().unwrap().get(key).and_then(|s| s.rate)
    }

    fn cpu(&self, key: &str, t: Time, usage_ns: Option<u64>, runtime_rate: Option<u64>) -> CpuStats {
        CpuStats {
            time: t,
            usage_nano_cores: runtime_rate.filter(|r| *r > 0).or_else(|| self.rate(key)),
            usage_core_nano_seconds: usage_ns,
            psi: None,
        }
    }

    /// With `KubeletPSI`, the pressure of `cgroup` into `cpu` and `memory`, and (unless `only` CPU and memory are
    /// asked for, as upstream's `ListPodCPUAndMemoryStats` leaves I/O out) its I/O stats.
    fn pressure(
        &self,
        cgroup: &str,
        t: Time,
        only: bool,
        cpu: &mut Option<CpuStats>,
        memory: &mut Option<MemoryStats>,
    ) -> Option<IoStats> {
        if !self.d.pressure {
            return None;
        }
        let [c, m, io] = host::cgroup_pressure(&self.d.paths, cgroup);
        if let Some(cpu) = cpu {
            cpu.psi = Some(c);
        }
        if let Some(memory) = memory {
            memory.psi = Some(m);
        }
        (!only).then_some(IoStats { time: t, psi: Some(io) })
    }

    /// Samples CPU every 10 s and measures volumes and logs every `volumeStatsAggPeriod`, until cancelled.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut cpu = tokio::time::interval(CPU_SAMPLE_PERIOD);
        cpu.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let period =
            if self.d.volume_stats_period.is_zero() { Duration::from_secs(3600) } else { self.d.volume_stats_period };
        let mut du = tokio::time::interval(period);
        du.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = cpu.tick() => self.sample_cpu().await,
                _ = du.tick(), if !self.d.volume_stats_period.is_zero() => {
                    if let Some(csi) = self.d.csi.get().cloned() {
                        let now = self.now();
                        tokio::spawn(async move { csi.refresh(now).await });
                    }
                    // Off the sampling loop: a long walk must not stall the CPU samples; one walk at a time.
                    if !self.measuring.swap(true, std::sync::atomic::Ordering::AcqRel) {
                        let me = self.clone();
                        tokio::task::spawn_blocking(move || {
                            me.measure_disks();
                            me.measuring.store(false, std::sync::atomic::Ordering::Release);
                        });
                    }
                }
            }
        }
    }

    /// Reads the cumulative CPU of the node, the pods cgroup, every pod cgroup (key `pod:<uid>`) and every
    /// container cgroup under it (key: the container ID): file reads only.
    async fn sample_cpu(&self) {
        let now = self.now_ns();
        if let Some(c) = host::node_cpu(&self.d.paths) {
            self.sample("node", now, c.usage_ns);
        }
        if let Some(cg) = &self.pods_cgroup() {
            if let Some(c) = host::cgroup_cpu(&self.d.paths, cg) {
                self.sample("pods", now, c.usage_ns);
            }
            for (pod, children) in host::pod_cgroups(&self.d.paths, cg) {
                let uid = host::pod_uid_of_cgroup(&pod).unwrap_or_default();
                if let Some(c) = host::cgroup_cpu(&self.d.paths, &pod) {
                    self.sample(&format!("pod:{uid}"), now, c.usage_ns);
                }
                for id in children {
                    if let Some(c) = host::cgroup_cpu(&self.d.paths, &host::container_cgroup(&pod, &id)) {
                        self.sample(&id, now, c.usage_ns);
                    }
                }
            }
        }
        // Forget what no longer exists (entries not refreshed for 10 minutes, `defaultCachePeriod`).
        let cutoff = now - 600_000_000_000;
        self.samples.lock().unwrap().retain(|_, s| s.at_ns >= cutoff);
    }

    /// Makes the next full summary list the writable layers again (for the eviction manager's disk ranking).
    pub async fn expire_writable_layers(&self) {
        self.writable.lock().await.listed = None;
    }

    /// The writable layers of `running` containers: listed again once older than [`WRITABLE_LAYER_MAX_AGE`],
    /// a container missing from the last list (or reported empty, at most every 10 s) asked for alone. A runtime
    /// without container stats gives none.
    async fn writable_layers(&self, running: &[&str]) -> HashMap<String, cri::FilesystemUsage> {
        let mut w = self.writable.lock().await;
        let now = tokio::time::Instant::now();
        if w.listed.is_none_or(|at| now.duration_since(at) > WRITABLE_LAYER_MAX_AGE) {
            match self.d.runtime.list_container_stats(None).await {
                Ok(stats) => {
                    w.by_id =
                        stats.into_iter().filter_map(|c| Some((c.attributes?.id, (c.writable_layer?, now)))).collect();
                }
                Err(e) => tracing::debug!(error = %e, "unable to list the containers' writable layers"),
            }
            w.listed = Some(now);
        }
        let stale = |e: Option<&(cri::FilesystemUsage, tokio::time::Instant)>| match e {
            None => true,
            Some((l, at)) => u(&l.used_bytes).unwrap_or(0) == 0 && now.duration_since(*at) >= EMPTY_LAYER_RETRY,
        };
        let ask: Vec<&str> = running.iter().copied().filter(|id| stale(w.by_id.get(*id))).collect();
        for id in ask {
            let filter = cri::ContainerStatsFilter { id: id.to_string(), ..Default::default() };
            if let Ok(stats) = self.d.runtime.list_container_stats(Some(filter)).await
                && let Some(l) = stats.into_iter().find_map(|c| c.writable_layer)
            {
                w.by_id.insert(id.to_string(), (l, now));
            }
        }
        w.by_id.retain(|id, _| running.contains(&id.as_str()));
        w.by_id.iter().map(|(id, (l, _))| (id.clone(), l.clone())).collect()
    }

    /// Walks every pod's volumes and container log folders (blocking; run off the async threads).
    fn measure_disks(&self) {
        let mut dirs = vec![];
        for pod in read_dir(&self.d.root_dir.join("pods")) {
            // CSI volumes report their usage through their drivers, never walked (`csi::CsiVolumes`).
            for plugin in read_dir(&pod.join("volumes")).into_iter().filter(|p| !p.ends_with(CSI_PLUGIN_DIR)) {
                dirs.extend(read_dir(&plugin));
            }
        }
        for pod in read_dir(&self.d.pod_logs_dir) {
            dirs.extend(read_dir(&pod));
        }
        let measured: HashMap<PathBuf, (u64, u64, SystemTime)> = dirs
            .into_iter()
            .filter_map(|d| {
                // A volume that is a filesystem of its own (tmpfs, a mount) is measured by statfs, not walked
                // (`MetricsStatFS`).
                let used = if host::is_mount_point(&d) {
                    host::statfs(&d).map(|(_, _, used, inodes, free)| (used, inodes.saturating_sub(free)))
                } else {
                    host::disk_usage(&d)
                };
                used.map(|(b, i)| (d, (b, i, self.d.clock.now())))
            })
            .collect();
        *self.du.lock().unwrap() = measured;
    }

    fn du(&self, p: &Path) -> Option<(u64, u64, SystemTime)> {
        self.du.lock().unwrap().get(p).copied()
    }

    fn fs_of(&self, p: &Path, t: Time) -> Option<FsStats> {
        let (cap, avail, used, inodes, free) = host::statfs(p)?;
        Some(FsStats {
            time: t,
            available_bytes: Some(avail),
            capacity_bytes: Some(cap),
            used_bytes: Some(used),
            inodes_free: Some(free),
            inodes: Some(inodes),
            inodes_used: Some(inodes.saturating_sub(free)),
        })
    }

    async fn node(&self, only: bool) -> NodeStats {
        let t = self.now();
        let mut n = NodeStats { node_name: self.d.node_name.clone(), ..Default::default() };
        n.start_time = host::boot_time(&self.d.paths)
            .and_then(|b| DateTime::<Utc>::from_timestamp(b, 0))
            .map(Time::at)
            .unwrap_or_default();
        n.cpu = host::node_cpu(&self.d.paths).map(|c| self.cpu("node", t, Some(c.usage_ns), None));
        let root = host::cgroup_memory(&self.d.paths, "/");
        n.swap = root.as_ref().map(|m| host_swap(m, t));
        n.memory = root.map(|m| host_memory(m, t));
        n.io = self.pressure("/", t, only, &mut n.cpu, &mut n.memory);
        if let Some(cg) = &self.pods_cgroup() {
            let mut cpu = host::cgroup_cpu(&self.d.paths, cg).map(|c| self.cpu("pods", t, Some(c.usage_ns), None));
            let m = host::cgroup_memory(&self.d.paths, cg);
            let swap = m.as_ref().map(|m| host_swap(m, t));
            let mut memory = m.map(|m| host_memory(m, t));
            let io = self.pressure(cg, t, only, &mut cpu, &mut memory);
            if cpu.is_some() || memory.is_some() {
                n.system_containers.push(ContainerStats {
                    name: "pods".into(),
                    start_time: n.start_time,
                    cpu,
                    memory,
                    io,
                    swap,
                    ..Default::default()
                });
            }
        }
        if only {
            return n;
        }
        n.network =
            host::net_dev(&self.d.paths, "self").map(|ifs| network(t, ifs.into_iter().map(host_interface).collect()));
        n.fs = self.fs_of(&self.d.root_dir, t);
        match self.d.images.image_fs_info().await {
            Ok(info) => {
                let fs = info.image_filesystems.first().map(|f| {
                    let mut s = f
                        .fs_id
                        .as_ref()
                        .and_then(|id| self.fs_of(Path::new(&id.mountpoint), time_ns(f.timestamp)))
                        .unwrap_or_default();
                    s.time = time_ns(f.timestamp);
                    s.used_bytes = u(&f.used_bytes);
                    s.inodes_used = u(&f.inodes_used).or(s.inodes_used);
                    s
                });
                n.runtime = Some(RuntimeStats { image_fs: fs.clone(), container_fs: fs });
            }
            Err(e) => {
                let mut last = self.image_fs_warned.lock().unwrap();
                if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(error = %e, "unable to get the image filesystem's stats");
                    *last = Some(tokio::time::Instant::now());
                }
            }
        }
        let (maxpid, curproc) = host::rlimit(&self.d.paths);
        n.rlimit = Some(RlimitStats { time: t, maxpid, curproc });
        n
    }

    async fn pods(&self, only: bool) -> Result<Vec<PodStats>, HostError> {
        let (sandboxes, containers) =
            tokio::try_join!(self.d.runtime.list_pod_sandbox(None), self.d.runtime.list_containers(None))
                .map_err(|e| host_err("list pod sandboxes and containers", e))?;
        let running = |c: &&cri::Container| c.state == cri::ContainerState::ContainerRunning as i32;
        let layers = if only {
            HashMap::new()
        } else {
            let ids: Vec<&str> = containers.iter().filter(running).map(|c| c.id.as_str()).collect();
            self.writable_layers(&ids).await
        };
        let ready = |s: &cri::PodSandbox| s.state == cri::PodSandboxState::SandboxReady as i32;
        // One sandbox per pod (`removeTerminatedPods`): the ready one, else the newest.
        let key =
            |s: &cri::PodSandbox| s.metadata.as_ref().map(|m| (m.namespace.clone(), m.name.clone(), m.uid.clone()));
        let mut chosen: HashMap<(String, String, String), &cri::PodSandbox> = HashMap::new();
        for sb in &sandboxes {
            let Some(k) = key(sb) else { continue };
            let better = |old: &cri::PodSandbox| (ready(sb), sb.created_at) > (ready(old), old.created_at);
            if chosen.get(&k).is_none_or(|old| better(old)) {
                chosen.insert(k, sb);
            }
        }
        let t = self.now();
        let root_fs = if only { None } else { self.fs_of(&self.d.root_dir, t) };
        let paths = &self.d.paths;
        let mut out = vec![];
        let pods_cgroup = self.pods_cgroup();
        for sb in chosen.into_values() {
            let Some(meta) = &sb.metadata else { continue };
            let pod_ref =
                PodReference { name: meta.name.clone(), namespace: meta.namespace.clone(), uid: meta.uid.clone() };
            let log_dir = self.d.pod_logs_dir.join(format!("{}_{}_{}", meta.namespace, meta.name, meta.uid));
            let pod_cg = pods_cgroup.as_deref().and_then(|pods| host::pod_cgroup(paths, pods, &meta.uid));
            let mut pod = PodStats { pod_ref, start_time: time_ns(sb.created_at), ..Default::default() };
            let mut list = vec![];
            let (mut eph_used, mut eph_inodes) = (0u64, 0u64);
            for c in containers.iter().filter(running).filter(|c| c.pod_sandbox_id == sb.id) {
                let name = c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
                let cg = pod_cg.as_ref().map(|p| host::container_cgroup(p, &c.id));
                let mut cpu = cg
                    .as_deref()
                    .and_then(|cg| host::cgroup_cpu(paths, cg))
                    .map(|cpu| self.cpu(&c.id, t, Some(cpu.usage_ns), None));
                let m = cg.as_deref().and_then(|cg| host::cgroup_memory(paths, cg));
                let swap = m.as_ref().map(|m| host_swap(m, t));
                let mut memory = m.map(|m| host_memory(m, t));
                let io = cg.as_deref().and_then(|cg| self.pressure(cg, t, only, &mut cpu, &mut memory));
                let mut cs = ContainerStats {
                    name: name.clone(),
                    start_time: time_ns(c.created_at),
                    cpu,
                    memory,
                    io,
                    swap,
                    ..Default::default()
                };
                if !only {
                    let base = root_fs.clone().unwrap_or_default();
                    if let Some(w) = layers.get(&c.id) {
                        cs.rootfs = Some(FsStats {
                            time: time_ns(w.timestamp),
                            used_bytes: u(&w.used_bytes),
                            inodes_used: u(&w.inodes_used),
                            ..base.clone()
                        });
                        eph_used += u(&w.used_bytes).unwrap_or(0);
                        eph_inodes += u(&w.inodes_used).unwrap_or(0);
                    }
                    if let Some((b, i, at)) = self.du(&log_dir.join(&name)) {
                        cs.logs = Some(FsStats {
                            time: Time::at(at.into()),
                            used_bytes: Some(b),
                            inodes_used: Some(i),
                            ..base
                        });
                        eph_used += b;
                        eph_inodes += i;
                    }
                }
                list.push(cs);
            }
            list.sort_by(|a, b| a.name.cmp(&b.name));
            if let Some(cg) = &pod_cg {
                let key = format!("pod:{}", meta.uid);
                pod.cpu = host::cgroup_cpu(paths, cg).map(|c| self.cpu(&key, t, Some(c.usage_ns), None));
                let m = host::cgroup_memory(paths, cg);
                pod.swap = m.as_ref().map(|m| host_swap(m, t));
                pod.memory = m.map(|m| host_memory(m, t));
                pod.io = self.pressure(cg, t, only, &mut pod.cpu, &mut pod.memory);
            }
            if !only {
                // The pod's network namespace is its sandbox's: read it through the pause process.
                let pid = pod_cg.as_ref().and_then(|cg| host::cgroup_first_pid(paths, &format!("{cg}/{}", sb.id)));
                pod.network = pid
                    .and_then(|pid| host::net_dev(paths, &pid.to_string()))
                    .map(|ifs| network(t, ifs.into_iter().map(host_interface).collect()));
                pod.process_stats = pod_cg
                    .as_deref()
                    .and_then(|cg| host::cgroup_pids(paths, cg))
                    .map(|n| ProcessStats { process_count: Some(n) });
                let (volumes, ephemeral) = self.volumes(&meta.uid, root_fs.as_ref());
                eph_used += ephemeral.0;
                eph_inodes += ephemeral.1;
                pod.volume = volumes;
                if let Some(base) = &root_fs {
                    pod.ephemeral_storage = Some(FsStats {
                        time: t,
                        used_bytes: Some(eph_used),
                        inodes_used: Some(eph_inodes),
                        ..base.clone()
                    });
                }
            }
            pod.containers = Some(list);
            out.push(pod);
        }
        out.sort_by(|a, b| (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name)));
        Ok(out)
    }

    /// The pod's volumes with their measured usage, and what of it counts as ephemeral storage (disk-backed
    /// emptyDirs and configMaps, as `IsLocalEphemeralVolume`).
    fn volumes(&self, uid: &str, root_fs: Option<&FsStats>) -> (Vec<VolumeStats>, (u64, u64)) {
        let (mut out, mut eph) = (vec![], (0u64, 0u64));
        if self.d.volume_stats_period.is_zero() {
            return (out, eph);
        }
        for plugin in read_dir(&self.d.root_dir.join("pods").join(uid).join("volumes")) {
            if plugin.ends_with(CSI_PLUGIN_DIR) {
                continue;
            }
            let kind = plugin.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            for vol in read_dir(&plugin) {
                let Some((bytes, inodes, at)) = self.du(&vol) else { continue };
                let t = Time::at(at.into());
                let mut fs = self.fs_of(&vol, t).unwrap_or_else(|| root_fs.cloned().unwrap_or_default());
                fs.time = t;
                fs.used_bytes = Some(bytes);
                fs.inodes_used = Some(inodes);
                let on_disk = !is_tmpfs(&vol);
                if on_disk && (kind == "kubernetes.io~empty-dir" || kind == "kubernetes.io~configmap") {
                    eph.0 += bytes;
                    eph.1 += inodes;
                }
                let name = vol.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                out.push(VolumeStats { fs, name, ..Default::default() });
            }
        }
        out.extend(self.d.csi.get().iter().flat_map(|c| c.of_pod(uid)));
        out.sort_by(|a, b| a.name.cmp(&b.name));
        (out, eph)
    }
}

fn network(t: Time, interfaces: Vec<InterfaceStats>) -> NetworkStats {
    let default = interfaces.iter().find(|i| i.name == "eth0").cloned().unwrap_or_default();
    NetworkStats { time: t, default, interfaces }
}

fn read_dir(p: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn is_tmpfs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

impl SummaryProvider {
    /// The node's part of the Summary alone (no pods: no runtime listing, no walk of the pods' cgroups), for the
    /// eviction manager's passes without pressure.
    pub async fn node_summary(&self) -> Summary {
        Summary { node: self.node(false).await, pods: None }
    }
}

impl SummaryProvider {
    /// The image the runtime runs sandboxes from: its verbose status (containerd 1.x `sandboxImage`), else the
    /// first name of the image it pins (containerd 2.x pins the sandbox image). `None` until the runtime answers.
    async fn find_sandbox_image(&self) -> Option<String> {
        if let Ok(Some(image)) = self.d.runtime.sandbox_image().await {
            return Some(image);
        }
        let images = self.d.images.list_images(None).await.ok()?;
        Some(images.into_iter().find(|i| i.pinned).and_then(|i| i.repo_tags.into_iter().next()).unwrap_or_default())
    }
}

#[async_trait]
impl StatsProvider for SummaryProvider {
    async fn summary(&self, only_cpu_and_memory: bool) -> Result<Summary, HostError> {
        let node = self.node(only_cpu_and_memory).await;
        let pods = self.pods(only_cpu_and_memory).await?;
        Ok(Summary { node, pods: (!pods.is_empty()).then_some(pods) })
    }

    async fn cadvisor_metrics(&self) -> String {
        let lists = tokio::try_join!(self.d.runtime.list_pod_sandbox(None), self.d.runtime.list_containers(None));
        let known = match lists {
            Ok((sandboxes, containers)) => {
                let cached = self.sandbox_image.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let image = match cached {
                    Some(i) => i,
                    None => match self.find_sandbox_image().await {
                        Some(i) => {
                            *self.sandbox_image.lock().unwrap_or_else(|e| e.into_inner()) = Some(i.clone());
                            i
                        }
                        None => String::new(),
                    },
                };
                Some(cadvisor::Known::from_lists(&sandboxes, &containers, image))
            }
            Err(e) => {
                tracing::warn!(error = %e, "couldn't get containers for /metrics/cadvisor");
                None
            }
        };
        let (paths, pods, pressure, clock) =
            (self.d.paths.clone(), self.pods_cgroup(), self.d.pressure, self.d.clock.clone());
        tokio::task::spawn_blocking(move || {
            cadvisor::collect(&paths, clock.as_ref(), pods.as_deref(), known.as_ref(), pressure)
        })
        .await
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
