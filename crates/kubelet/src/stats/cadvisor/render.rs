//! The `/metrics/cadvisor` text: cAdvisor's families (`metrics/prometheus.go` NewPrometheusCollector with the
//! kubelet's metric set: cpu, cpu load, memory, disk usage and I/O, network, process, OOM, and pressure with
//! `KubeletPSI`; `metrics/prometheus_machine.go`) with their names, help, types, labels and units, sorted as
//! client_golang writes them (families by name, series by labels). Samples carry the time they were read, as
//! cAdvisor's do; the spec families and `container_start_time_seconds` carry none.

use std::collections::BTreeMap;

use kubelet_metrics::{escape_label, format_float};

use super::cgroup::CgroupFigures;
use super::procs::{InterfaceFigures, Machine, ProcessFigures};

/// Size beyond which a memory limit means unlimited (`maxMemorySize`), reported as 0.
const MAX_MEMORY_SIZE: u64 = 1 << 62;

/// The identity labels of a cgroup's series (`containerPrometheusLabelsFunc`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The cgroup path.
    pub id: String,
    /// The runtime's container ID (`Aliases[0]`).
    pub name: String,
    pub image: String,
    pub pod: String,
    pub namespace: String,
    pub container: String,
}

/// A block device's filesystem figures (`info.FsStats`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceFigures {
    pub device: String,
    pub limit: u64,
    pub usage: u64,
    pub inodes: u64,
    pub inodes_free: u64,
    /// `/proc/diskstats`: reads, merged, sectors, ms reading, writes, merged, sectors, ms writing, in progress,
    /// ms doing I/O, weighted ms.
    pub diskstats: [u64; 11],
}

/// One cgroup as reported.
#[derive(Clone, Debug, Default)]
pub struct CgroupSeries {
    pub identity: Identity,
    pub figures: CgroupFigures,
    pub processes: ProcessFigures,
    pub max_open_files: Option<i64>,
    pub interfaces: Vec<InterfaceFigures>,
    pub filesystems: Vec<DeviceFigures>,
    /// Seconds since the epoch.
    pub start_time: Option<i64>,
    /// When it was read, ms since the epoch.
    pub timestamp_ms: i64,
}

struct Family {
    help: &'static str,
    kind: &'static str,
    rows: Vec<(String, f64, Option<i64>)>,
}

/// The families being written.
#[derive(Default)]
pub struct Exposition {
    families: BTreeMap<&'static str, Family>,
}

fn label_text(mut labels: Vec<(&str, &str)>) -> String {
    labels.sort_by(|a, b| a.0.cmp(b.0));
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label(v))).collect();
    pairs.join(",")
}

fn spec_memory(v: u64) -> f64 {
    if v > MAX_MEMORY_SIZE { 0.0 } else { v as f64 }
}

impl Exposition {
    fn add(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: &'static str,
        labels: String,
        v: f64,
        ts: Option<i64>,
    ) {
        self.families.entry(name).or_insert(Family { help, kind, rows: vec![] }).rows.push((labels, v, ts));
    }

    /// A cgroup's series; `pressure` with `KubeletPSI` on.
    pub fn cgroup(&mut self, s: &CgroupSeries, pressure: bool, now_ms: i64) {
        let i = &s.identity;
        let base = vec![
            ("container", i.container.as_str()),
            ("id", i.id.as_str()),
            ("image", i.image.as_str()),
            ("name", i.name.as_str()),
            ("namespace", i.namespace.as_str()),
            ("pod", i.pod.as_str()),
        ];
        let with = |extra: &[(&'static str, &str)]| {
            let mut l = base.clone();
            l.extend_from_slice(extra);
            label_text(l)
        };
        let plain = with(&[]);
        let ts = Some(s.timestamp_ms);
        let f = &s.figures;
        let (c, m, spec) = (&f.cpu, &f.memory, &f.spec);
        let secs = |ns: u64| ns as f64 / 1e9;

        // Spec (no timestamp).
        if let Some(start) = s.start_time {
            self.add(
                "container_start_time_seconds",
                "Start time of the container since unix epoch in seconds.",
                "gauge",
                plain.clone(),
                start as f64,
                None,
            );
        }
        self.add(
            "container_spec_cpu_period",
            "CPU period of the container.",
            "gauge",
            plain.clone(),
            spec.cpu_period as f64,
            None,
        );
        if spec.cpu_quota != 0 {
            self.add(
                "container_spec_cpu_quota",
                "CPU quota of the container.",
                "gauge",
                plain.clone(),
                spec.cpu_quota as f64,
                None,
            );
        }
        self.add(
            "container_spec_cpu_shares",
            "CPU share of the container.",
            "gauge",
            plain.clone(),
            spec.cpu_shares as f64,
            None,
        );
        self.add(
            "container_spec_memory_limit_bytes",
            "Memory limit for the container.",
            "gauge",
            plain.clone(),
            spec_memory(spec.memory_limit),
            None,
        );
        self.add(
            "container_spec_memory_swap_limit_bytes",
            "Memory swap limit for the container.",
            "gauge",
            plain.clone(),
            spec_memory(spec.swap_limit),
            None,
        );
        self.add(
            "container_spec_memory_reservation_limit_bytes",
            "Memory reservation limit for the container.",
            "gauge",
            plain.clone(),
            spec_memory(spec.reservation),
            None,
        );

        self.add(
            "container_last_seen",
            "Last time a container was seen by the exporter",
            "gauge",
            plain.clone(),
            (now_ms / 1000) as f64,
            Some(now_ms),
        );
        // CPU.
        self.add(
            "container_cpu_user_seconds_total",
            "Cumulative user cpu time consumed in seconds.",
            "counter",
            plain.clone(),
            secs(c.user_ns),
            ts,
        );
        self.add(
            "container_cpu_system_seconds_total",
            "Cumulative system cpu time consumed in seconds.",
            "counter",
            plain.clone(),
            secs(c.system_ns),
            ts,
        );
        self.add(
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed in seconds.",
            "counter",
            with(&[("cpu", "total")]),
            secs(c.usage_ns),
            ts,
        );
        if spec.cpu_quota != 0 {
            self.add(
                "container_cpu_cfs_periods_total",
                "Number of elapsed enforcement period intervals.",
                "counter",
                plain.clone(),
                c.periods as f64,
                ts,
            );
            self.add(
                "container_cpu_cfs_throttled_periods_total",
                "Number of throttled period intervals.",
                "counter",
                plain.clone(),
                c.throttled_periods as f64,
                ts,
            );
            self.add(
                "container_cpu_cfs_throttled_seconds_total",
                "Total time duration the container has been throttled.",
                "counter",
                plain.clone(),
                secs(c.throttled_ns),
                ts,
            );
        }
        // CPU load: cAdvisor's load reader is off in the kubelet, so these stay 0.
        self.add(
            "container_cpu_load_average_10s",
            "Value of container cpu load average over the last 10 seconds.",
            "gauge",
            plain.clone(),
            0.0,
            ts,
        );
        self.add(
            "container_cpu_load_d_average_10s",
            "Value of container cpu load.d average over the last 10 seconds.",
            "gauge",
            plain.clone(),
            0.0,
            ts,
        );
        for state in ["iowaiting", "running", "sleeping", "stopped", "uninterruptible"] {
            self.add(
                "container_tasks_state",
                "Number of tasks in given state",
                "gauge",
                with(&[("state", state)]),
                0.0,
                ts,
            );
        }
        // Memory.
        self.add(
            "container_memory_cache",
            "Number of bytes of page cache memory.",
            "gauge",
            plain.clone(),
            m.cache as f64,
            ts,
        );
        self.add("container_memory_rss", "Size of RSS in bytes.", "gauge", plain.clone(), m.rss as f64, ts);
        self.add(
            "container_memory_kernel_usage",
            "Size of kernel memory allocated in bytes.",
            "gauge",
            plain.clone(),
            m.kernel as f64,
            ts,
        );
        self.add(
            "container_memory_mapped_file",
            "Size of memory mapped files in bytes.",
            "gauge",
            plain.clone(),
            m.mapped_file as f64,
            ts,
        );
        self.add("container_memory_swap", "Container swap usage in bytes.", "gauge", plain.clone(), m.swap as f64, ts);
        self.add(
            "container_memory_failcnt",
            "Number of memory usage hits limits",
            "counter",
            plain.clone(),
            m.failcnt as f64,
            ts,
        );
        self.add(
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            "gauge",
            plain.clone(),
            m.usage as f64,
            ts,
        );
        self.add(
            "container_memory_max_usage_bytes",
            "Maximum memory usage recorded in bytes",
            "gauge",
            plain.clone(),
            m.max_usage as f64,
            ts,
        );
        self.add(
            "container_memory_working_set_bytes",
            "Current working set in bytes.",
            "gauge",
            plain.clone(),
            m.working_set as f64,
            ts,
        );
        self.add(
            "container_memory_total_active_file_bytes",
            "Current total active file in bytes.",
            "gauge",
            plain.clone(),
            m.active_file as f64,
            ts,
        );
        self.add(
            "container_memory_total_inactive_file_bytes",
            "Current total inactive file in bytes.",
            "gauge",
            plain.clone(),
            m.inactive_file as f64,
            ts,
        );
        for scope in ["container", "hierarchy"] {
            for (kind, v) in [("pgfault", m.pgfault), ("pgmajfault", m.pgmajfault)] {
                let l = with(&[("failure_type", kind), ("scope", scope)]);
                self.add(
                    "container_memory_failures_total",
                    "Cumulative count of memory allocation failures.",
                    "counter",
                    l,
                    v as f64,
                    ts,
                );
            }
        }
        self.add(
            "container_oom_events_total",
            "Count of out of memory events observed for the container",
            "counter",
            plain.clone(),
            f.oom_kills as f64,
            ts,
        );
        // Processes.
        self.add(
            "container_processes",
            "Number of processes running inside the container.",
            "gauge",
            plain.clone(),
            s.processes.processes as f64,
            ts,
        );
        self.add(
            "container_file_descriptors",
            "Number of open file descriptors for the container.",
            "gauge",
            plain.clone(),
            s.processes.fds as f64,
            ts,
        );
        self.add(
            "container_sockets",
            "Number of open sockets for the container.",
            "gauge",
            plain.clone(),
            s.processes.sockets as f64,
            ts,
        );
        self.add(
            "container_threads",
            "Number of threads running inside the container",
            "gauge",
            plain.clone(),
            f.threads as f64,
            ts,
        );
        self.add(
            "container_threads_max",
            "Maximum number of threads allowed inside the container, infinity if value is zero",
            "gauge",
            plain.clone(),
            f.threads_max as f64,
            ts,
        );
        if let Some(v) = s.max_open_files {
            let help = "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice";
            self.add("container_ulimits_soft", help, "gauge", with(&[("ulimit", "max_open_files")]), v as f64, ts);
        }
        // Pressure (KubeletPSI).
        if pressure {
            let help = [
                (
                    "cpu",
                    "Total time duration tasks in the container have waited due to CPU congestion.",
                    "Total time duration no tasks in the container could make progress due to CPU congestion.",
                ),
                (
                    "memory",
                    "Total time duration tasks in the container have waited due to memory congestion.",
                    "Total time duration no tasks in the container could make progress due to memory congestion.",
                ),
                (
                    "io",
                    "Total time duration tasks in the container have waited due to IO congestion.",
                    "Total time duration no tasks in the container could make progress due to IO congestion.",
                ),
            ];
            for ((resource, waiting, stalled), (some, full)) in help.into_iter().zip(f.pressure) {
                let (w, st) = match resource {
                    "cpu" => {
                        ("container_pressure_cpu_waiting_seconds_total", "container_pressure_cpu_stalled_seconds_total")
                    }
                    "memory" => (
                        "container_pressure_memory_waiting_seconds_total",
                        "container_pressure_memory_stalled_seconds_total",
                    ),
                    _ => ("container_pressure_io_waiting_seconds_total", "container_pressure_io_stalled_seconds_total"),
                };
                self.add(w, waiting, "counter", plain.clone(), some as f64 / 1e6, ts);
                self.add(st, stalled, "counter", plain.clone(), full as f64 / 1e6, ts);
            }
        }
        // Network.
        for n in &s.interfaces {
            let l = with(&[("interface", n.name.as_str())]);
            let rows: [(&'static str, &'static str, u64); 8] = [
                ("container_network_receive_bytes_total", "Cumulative count of bytes received", n.rx_bytes),
                ("container_network_receive_packets_total", "Cumulative count of packets received", n.rx_packets),
                (
                    "container_network_receive_packets_dropped_total",
                    "Cumulative count of packets dropped while receiving",
                    n.rx_dropped,
                ),
                (
                    "container_network_receive_errors_total",
                    "Cumulative count of errors encountered while receiving",
                    n.rx_errors,
                ),
                ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", n.tx_bytes),
                ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", n.tx_packets),
                (
                    "container_network_transmit_packets_dropped_total",
                    "Cumulative count of packets dropped while transmitting",
                    n.tx_dropped,
                ),
                (
                    "container_network_transmit_errors_total",
                    "Cumulative count of errors encountered while transmitting",
                    n.tx_errors,
                ),
            ];
            for (name, help, v) in rows {
                self.add(name, help, "counter", l.clone(), v as f64, ts);
            }
        }
        // Filesystems.
        for d in &s.filesystems {
            let l = with(&[("device", d.device.as_str())]);
            let ds = &d.diskstats;
            // cAdvisor divides the kernel's milliseconds by a second's nanoseconds; kept for equal figures.
            let ms = |v: u64| v as f64 / 1e9;
            let rows: [(&'static str, &'static str, &'static str, f64); 15] = [
                ("container_fs_inodes_free", "Number of available Inodes", "gauge", d.inodes_free as f64),
                ("container_fs_inodes_total", "Number of Inodes", "gauge", d.inodes as f64),
                (
                    "container_fs_limit_bytes",
                    "Number of bytes that can be consumed by the container on this filesystem.",
                    "gauge",
                    d.limit as f64,
                ),
                (
                    "container_fs_usage_bytes",
                    "Number of bytes that are consumed by the container on this filesystem.",
                    "gauge",
                    d.usage as f64,
                ),
                ("container_fs_reads_total", "Cumulative count of reads completed", "counter", ds[0] as f64),
                ("container_fs_reads_merged_total", "Cumulative count of reads merged", "counter", ds[1] as f64),
                (
                    "container_fs_sector_reads_total",
                    "Cumulative count of sector reads completed",
                    "counter",
                    ds[2] as f64,
                ),
                ("container_fs_read_seconds_total", "Cumulative count of seconds spent reading", "counter", ms(ds[3])),
                ("container_fs_writes_total", "Cumulative count of writes completed", "counter", ds[4] as f64),
                ("container_fs_writes_merged_total", "Cumulative count of writes merged", "counter", ds[5] as f64),
                (
                    "container_fs_sector_writes_total",
                    "Cumulative count of sector writes completed",
                    "counter",
                    ds[6] as f64,
                ),
                ("container_fs_write_seconds_total", "Cumulative count of seconds spent writing", "counter", ms(ds[7])),
                ("container_fs_io_current", "Number of I/Os currently in progress", "gauge", ds[8] as f64),
                (
                    "container_fs_io_time_seconds_total",
                    "Cumulative count of seconds spent doing I/Os",
                    "counter",
                    ms(ds[9]),
                ),
                (
                    "container_fs_io_time_weighted_seconds_total",
                    "Cumulative weighted I/O time in seconds",
                    "counter",
                    ms(ds[10]),
                ),
            ];
            for (name, help, kind, v) in rows {
                self.add(name, help, kind, l.clone(), v, ts);
            }
        }
    }

    /// The machine's families and `cadvisor_version_info`.
    pub fn machine(&mut self, m: &Machine) {
        let ids = vec![
            ("boot_id", m.boot_id.as_str()),
            ("machine_id", m.machine_id.as_str()),
            ("system_uuid", m.system_uuid.as_str()),
        ];
        let plain = label_text(ids.clone());
        self.add("machine_cpu_cores", "Number of logical CPU cores.", "gauge", plain.clone(), m.cores as f64, None);
        self.add(
            "machine_cpu_physical_cores",
            "Number of physical CPU cores.",
            "gauge",
            plain.clone(),
            m.physical_cores as f64,
            None,
        );
        self.add("machine_cpu_sockets", "Number of CPU sockets.", "gauge", plain.clone(), m.sockets as f64, None);
        self.add(
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            "gauge",
            plain.clone(),
            m.memory as f64,
            None,
        );
        self.add(
            "machine_swap_bytes",
            "Amount of swap memory available on the machine.",
            "gauge",
            plain.clone(),
            m.swap as f64,
            None,
        );
        self.add("machine_nvm_avg_power_budget_watts", "NVM power budget.", "gauge", plain, 0.0, None);
        for mode in ["app_direct_mode", "memory_mode"] {
            let mut l = ids.clone();
            l.push(("mode", mode));
            let help = "NVM capacity value labeled by NVM mode (memory mode or app direct mode).";
            self.add("machine_nvm_capacity", help, "gauge", label_text(l), 0.0, None);
        }
        let version = label_text(vec![
            ("cadvisorRevision", ""),
            ("cadvisorVersion", ""),
            ("dockerVersion", ""),
            ("kernelVersion", m.kernel_version.as_str()),
            ("osVersion", m.os_version.as_str()),
        ]);
        let help = "A metric with a constant '1' value labeled by kernel version, OS version, docker version, cadvisor version & cadvisor revision.";
        self.add("cadvisor_version_info", help, "gauge", version, 1.0, None);
    }

    /// `container_scrape_error` and `machine_scrape_error`: 1 when listing the containers (or reading the
    /// machine) failed.
    pub fn scrape_errors(&mut self, containers: bool, machine: bool) {
        let v = |failed: bool| if failed { 1.0 } else { 0.0 };
        self.add(
            "container_scrape_error",
            "1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
            String::new(),
            v(containers),
            None,
        );
        self.add(
            "machine_scrape_error",
            "1 if there was an error while getting machine metrics, 0 otherwise.",
            "gauge",
            String::new(),
            v(machine),
            None,
        );
    }

    /// The text.
    pub fn finish(mut self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        for (name, f) in &mut self.families {
            f.rows.sort_by(|a, b| a.0.cmp(&b.0));
            out.push_str(&format!("# HELP {name} {}\n# TYPE {name} {}\n", f.help, f.kind));
            for (labels, v, ts) in &f.rows {
                out.push_str(name);
                if !labels.is_empty() {
                    out.push('{');
                    out.push_str(labels);
                    out.push('}');
                }
                out.push(' ');
                out.push_str(&format_float(*v));
                if let Some(ts) = ts {
                    out.push(' ');
                    out.push_str(&ts.to_string());
                }
                out.push('\n');
            }
        }
        out
    }
}
