//! `/stats/summary`, `/metrics/resource` and the route of `/metrics/cadvisor` (`pkg/kubelet/server/stats/handler.go`,
//! `pkg/kubelet/metrics/collectors/resource_metrics.go`), with the Summary API schema of
//! `k8s.io/kubelet/pkg/apis/stats/v1alpha1` ([`Summary`]): what metrics-server, the eviction manager and
//! monitoring agents read.
//!
//! The kubelet core fills the summary ([`StatsProvider`]); this module serves it. `/stats/summary` answers GET
//! and POST, honours `only_cpu_and_memory=true` (exactly that one value), and reports a provider error as 500
//! `Internal Error: <error>`. `/metrics/resource` is the CPU-and-memory summary as STABLE/ALPHA families whose
//! samples carry the stats' own timestamps (milliseconds), as upstream's lazy collector writes them.

use std::fmt::Write as _;

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, SecondsFormat, Utc};
use kubelet_metrics::{Opts, escape_label, format_float};
use serde::Serialize;

use crate::handlers::Handlers;
use crate::host::HostError;

/// A `metav1.Time`: RFC 3339 in UTC with whole seconds, `null` when unset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Time(pub Option<DateTime<Utc>>);

impl Serialize for Time {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Secs, true)),
            None => s.serialize_none(),
        }
    }
}

impl Time {
    /// A set time.
    pub fn at(t: DateTime<Utc>) -> Self {
        Time(Some(t))
    }

    fn millis(&self) -> Option<i64> {
        self.0.map(|t| t.timestamp_millis())
    }
}

/// The summary of the node and its pods.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// The node.
    pub node: NodeStats,
    /// The pods (`null` when there is none, as Go writes a nil slice).
    pub pods: Option<Vec<PodStats>>,
}

/// Node-level figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    /// The node's name.
    pub node_name: String,
    /// `kubelet`, `runtime`, `misc`, `pods`, when their cgroups are known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    /// Boot time.
    pub start_time: Time,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// I/O pressure (`KubeletPSI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// Network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// The filesystem of the kubelet's root directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    /// The runtime's filesystems.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    /// Process limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
    /// Swap (`swap`, NodeSwap).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// `statsapi.SwapStats`.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwapStats {
    /// When sampled.
    pub time: Time,
    /// The swap the limit still allows (none without a limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_available_bytes: Option<u64>,
    /// Swap in use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap_usage_bytes: Option<u64>,
}

/// The runtime's filesystems.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    /// Where images are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
    /// Where writable layers are (the same as `imageFs` with a CRI runtime, as upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_fs: Option<FsStats>,
}

/// Process limits of the node.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RlimitStats {
    /// When measured.
    pub time: Time,
    /// The most processes (min of `pid_max` and `threads-max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    /// Processes now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

/// Names a pod.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PodReference {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// UID.
    pub uid: String,
}

/// Pod-level figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    /// The pod.
    pub pod_ref: PodReference,
    /// When its sandbox was created.
    pub start_time: Time,
    /// Its running containers.
    pub containers: Option<Vec<ContainerStats>>,
    /// CPU of the pod cgroup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory of the pod cgroup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// I/O pressure (`KubeletPSI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// The pod's network namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    /// Volumes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volume: Vec<VolumeStats>,
    /// Local ephemeral storage: writable layers, logs, disk-backed emptyDirs.
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
    /// Processes.
    #[serde(rename = "process_stats", skip_serializing_if = "Option::is_none")]
    pub process_stats: Option<ProcessStats>,
    /// Swap (`swap`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// Processes of a pod.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessStats {
    /// How many.
    #[serde(rename = "process_count", skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

/// Container-level figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    /// Name.
    pub name: String,
    /// When it was created.
    pub start_time: Time,
    /// CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// I/O pressure (`KubeletPSI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    /// Its writable layer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// Its log files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
    /// Swap (`swap`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub swap: Option<SwapStats>,
}

/// CPU usage.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    /// When measured.
    pub time: Time,
    /// Rate over the last interval, in nanocores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    /// Cumulative, in core-nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    /// CPU pressure (`KubeletPSI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// Pressure stall information of one resource (`PSIStats`).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PsiStats {
    /// All tasks stalled.
    pub full: PsiData,
    /// Some tasks stalled.
    pub some: PsiData,
}

/// One line of a `*.pressure` file (`PSIData`): the total stall time in µs as the kernel counts it, and the averages
/// in percent.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct PsiData {
    pub total: u64,
    #[serde(serialize_with = "go_float")]
    pub avg10: f64,
    #[serde(serialize_with = "go_float")]
    pub avg60: f64,
    #[serde(serialize_with = "go_float")]
    pub avg300: f64,
}

/// A float as Go's `encoding/json` writes it: a whole number without a fraction (`0`, not `0.0`).
fn go_float<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e15 { s.serialize_i64(*v as i64) } else { s.serialize_f64(*v) }
}

/// I/O (`IOStats`): its pressure.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IoStats {
    /// When measured.
    pub time: Time,
    /// I/O pressure (`KubeletPSI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// Memory usage.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    /// When measured.
    pub time: Time,
    /// Limit minus working set, when limited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Usage including cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    /// Usage minus inactive file pages: what the OOM killer and eviction look at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    /// Anonymous and swap cache memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// Page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    /// Major page faults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    /// Memory pressure (`KubeletPSI`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// One network interface.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    /// Name (always written, `""` when there is no default interface).
    pub name: String,
    /// Bytes received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    /// Receive errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    /// Bytes sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    /// Send errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Network usage: the default interface (`eth0`) inline, and every interface.
#[derive(Clone, Debug, Default, Serialize)]
pub struct NetworkStats {
    /// When measured.
    pub time: Time,
    /// The default interface.
    #[serde(flatten)]
    pub default: InterfaceStats,
    /// Every interface.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// Filesystem usage.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    /// When measured.
    pub time: Time,
    /// Free for unprivileged users.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    /// Size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    /// Used (by the object, or by everything for a filesystem).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    /// Free inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    /// Inodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    /// Inodes used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// One volume's usage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VolumeStats {
    /// Usage.
    #[serde(flatten)]
    pub fs: FsStats,
    /// The volume's name in the pod.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The claim behind it, for a `persistentVolumeClaim` or generic `ephemeral` volume.
    #[serde(rename = "pvcRef", skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
    /// The driver's volume condition (`CSIVolumeHealth`).
    #[serde(rename = "volumeHealthStats", skip_serializing_if = "Option::is_none")]
    pub volume_health_stats: Option<VolumeHealthStats>,
}

/// A claim (`PVCReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct PvcReference {
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

/// A volume's health (`VolumeHealthStats`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct VolumeHealthStats {
    /// Whether the driver reports it abnormal.
    pub abnormal: bool,
}

/// Fills the summary.
#[async_trait]
pub trait StatsProvider: Send + Sync + 'static {
    /// The whole summary, or (`only_cpu_and_memory`) the node's and pods' CPU and memory only.
    async fn summary(&self, only_cpu_and_memory: bool) -> Result<Summary, HostError>;

    /// The `/metrics/cadvisor` text; none where the provider has no cgroups to read.
    async fn cadvisor_metrics(&self) -> String {
        String::new()
    }
}

async fn summary(State(h): State<Handlers>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let only: Vec<&str> = q.iter().filter(|(k, _)| k == "only_cpu_and_memory").map(|(_, v)| v.as_str()).collect();
    match h.stats.summary(only == ["true"]).await {
        Ok(s) => crate::handlers::json(StatusCode::OK, &s),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("Internal Error: {e}")).into_response(),
    }
}

fn family(out: &mut String, opts: &Opts, kind: &str, rows: &[(Vec<&str>, f64, Option<i64>)]) {
    if rows.is_empty() {
        return;
    }
    opts.header(out, kind);
    let mut rows: Vec<&(Vec<&str>, f64, Option<i64>)> = rows.iter().collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for (values, v, ts) in rows {
        out.push_str(opts.name);
        if !opts.labels.is_empty() {
            out.push('{');
            for (i, (n, val)) in opts.labels.iter().zip(values).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{n}=\"{}\"", escape_label(val));
            }
            out.push('}');
        }
        let _ = write!(out, " {}", format_float(*v));
        if let Some(ts) = ts {
            let _ = write!(out, " {ts}");
        }
        out.push('\n');
    }
}

type Rows<'a> = Vec<(Vec<&'a str>, f64, Option<i64>)>;

/// The `/metrics/resource` text of a CPU-and-memory summary (or of its failure: `resource_scrape_error 1`).
pub fn resource_metrics(s: Result<&Summary, &HostError>) -> String {
    let mut out = String::new();
    let (mut ccpu, mut cmem, mut cstart, mut pcpu, mut pmem): (Rows, Rows, Rows, Rows, Rows) = Default::default();
    let (mut ncpu, mut nmem): (Rows, Rows) = Default::default();
    if let Ok(s) = s {
        if let Some(c) = &s.node.cpu
            && let Some(u) = c.usage_core_nano_seconds
        {
            ncpu.push((vec![], u as f64 / 1e9, c.time.millis()));
        }
        if let Some(m) = &s.node.memory
            && let Some(w) = m.working_set_bytes
        {
            nmem.push((vec![], w as f64, m.time.millis()));
        }
        for p in s.pods.iter().flatten() {
            let (pod, ns) = (p.pod_ref.name.as_str(), p.pod_ref.namespace.as_str());
            for c in p.containers.iter().flatten() {
                if let Some(cpu) = &c.cpu
                    && let Some(u) = cpu.usage_core_nano_seconds
                {
                    ccpu.push((vec![c.name.as_str(), ns, pod], u as f64 / 1e9, cpu.time.millis()));
                }
                if let Some(m) = &c.memory
                    && let Some(w) = m.working_set_bytes
                {
                    cmem.push((vec![c.name.as_str(), ns, pod], w as f64, m.time.millis()));
                }
                if let Some(t) = c.start_time.0.filter(|t| t.timestamp() > 0) {
                    cstart.push((
                        vec![c.name.as_str(), ns, pod],
                        t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9,
                        None,
                    ));
                }
            }
            if let Some(cpu) = &p.cpu
                && let Some(u) = cpu.usage_core_nano_seconds
            {
                pcpu.push((vec![ns, pod], u as f64 / 1e9, cpu.time.millis()));
            }
            if let Some(m) = &p.memory
                && let Some(w) = m.working_set_bytes
            {
                pmem.push((vec![ns, pod], w as f64, m.time.millis()));
            }
        }
    }
    let c = &["container", "namespace", "pod"];
    let p = &["namespace", "pod"];
    family(
        &mut out,
        &Opts::stable(
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the container in core-seconds",
            c,
        ),
        "counter",
        &ccpu,
    );
    family(
        &mut out,
        &Opts::stable("container_memory_working_set_bytes", "Current working set of the container in bytes", c),
        "gauge",
        &cmem,
    );
    family(
        &mut out,
        &Opts::stable("container_start_time_seconds", "Start time of the container since unix epoch in seconds", c),
        "gauge",
        &cstart,
    );
    family(
        &mut out,
        &Opts::stable("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", &[]),
        "counter",
        &ncpu,
    );
    family(
        &mut out,
        &Opts::stable("node_memory_working_set_bytes", "Current working set of the node in bytes", &[]),
        "gauge",
        &nmem,
    );
    family(
        &mut out,
        &Opts::stable("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", p),
        "counter",
        &pcpu,
    );
    family(
        &mut out,
        &Opts::stable("pod_memory_working_set_bytes", "Current working set of the pod in bytes", p),
        "gauge",
        &pmem,
    );
    let err = if s.is_err() { 1.0 } else { 0.0 };
    family(
        &mut out,
        &Opts::stable(
            "resource_scrape_error",
            "1 if there was an error while getting container metrics, 0 otherwise",
            &[],
        ),
        "gauge",
        &[(vec![], err, None)],
    );
    out
}

async fn resource(State(h): State<Handlers>) -> Response {
    let s = h.stats.summary(true).await;
    if let Err(e) = &s {
        tracing::warn!(error = %e, "error getting summary for resource metrics");
    }
    let text = resource_metrics(s.as_ref());
    (StatusCode::OK, [(header::CONTENT_TYPE, kubelet_metrics::TEXT_CONTENT_TYPE)], text).into_response()
}

async fn cadvisor(State(h): State<Handlers>) -> Response {
    let text = h.stats.cadvisor_metrics().await;
    (StatusCode::OK, [(header::CONTENT_TYPE, kubelet_metrics::TEXT_CONTENT_TYPE)], text).into_response()
}

pub(crate) fn routes(r: Router<Handlers>) -> Router<Handlers> {
    r.route("/stats/summary", get(summary).post(summary))
        .route("/metrics/resource", get(resource))
        .route("/metrics/cadvisor", get(cadvisor))
}

#[cfg(test)]
pub(crate) mod tests;
