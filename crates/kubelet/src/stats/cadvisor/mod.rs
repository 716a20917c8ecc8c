//! `/metrics/cadvisor` (`pkg/kubelet/server/server.go` InstallDefaultHandlers with cAdvisor's
//! `metrics/prometheus.go` collector and `containerPrometheusLabelsFunc`): the figures cAdvisor gives the v1.35
//! kubelet for the root cgroup, the pods cgroup, its QoS cgroups, every pod cgroup and every container cgroup in
//! them (the pods' sandboxes included), and the machine.
//!
//! No second collector runs: a scrape reads the same cgroup and `/proc` files the Summary API reads ([`host`] and
//! the readers here), when it is asked, and asks the runtime only for its two cheap lists (`ListPodSandbox`,
//! `ListContainers`) and, once, its sandbox image. Series are labelled as upstream's: `id` the cgroup, `name` the
//! runtime's container ID, `image` the container's image name, `pod`, `namespace` and `container` from the
//! kubelet's labels (a pod cgroup gets its pod's). A failed runtime list reports `container_scrape_error 1` and no
//! container series, as cAdvisor does when it cannot list containers.
//!
//! Differences from cAdvisor, kept small on purpose: the root's filesystems are its mounted block devices (cAdvisor
//! also lists tmpfs and overlay mounts); per-container disk I/O (`container_fs_reads_bytes_total`, blkio) is not
//! reported (cAdvisor's containerd handler reports none for containers either); `container_oom_events_total`
//! counts the cgroup's `oom_kill` events rather than kernel log lines; the load and task-state families are 0, as
//! the kubelet's cAdvisor runs without its load reader.
//!
//! Called by the HTTP handler for each scrape; the file reads run on a blocking thread.

pub mod cgroup;
pub mod disks;
pub mod procs;
pub mod render;

use std::collections::HashMap;

use kubelet_cri::api as cri;
use kubelet_types::labels::{CONTAINER_NAME, POD_NAME, POD_NAMESPACE};

use crate::stats::host::{self, HostPaths};
use render::{CgroupSeries, Exposition, Identity};

/// What the runtime says of the pods and containers: who a cgroup belongs to.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// Sandbox ID → (pod name, namespace, created at in ns).
    pub sandboxes: HashMap<String, (String, String, i64)>,
    /// Pod UID → (pod name, namespace).
    pub pods: HashMap<String, (String, String)>,
    /// Container ID → (container name, pod name, namespace, image name, created at in ns).
    pub containers: HashMap<String, (String, String, String, String, i64)>,
    /// The runtime's sandbox image.
    pub sandbox_image: String,
}

/// An image reference as containerd names the image of a container: a familiar name completed with Docker
/// Hub's registry, `library/` and `:latest` (`busybox` → `docker.io/library/busybox:latest`).
pub fn image_name(reference: &str) -> String {
    if reference.is_empty() || reference.starts_with("sha256:") {
        return reference.to_string();
    }
    let (first, _) = reference.split_once('/').unwrap_or(("", reference));
    let has_registry = !first.is_empty() && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut name = if has_registry {
        reference.to_string()
    } else if reference.contains('/') {
        format!("docker.io/{reference}")
    } else {
        format!("docker.io/library/{reference}")
    };
    let last = name.rsplit('/').next().unwrap_or("");
    if !last.contains(':') && !name.contains('@') {
        name.push_str(":latest");
    }
    name
}

impl Known {
    /// From the runtime's lists.
    pub fn from_lists(sandboxes: &[cri::PodSandbox], containers: &[cri::Container], sandbox_image: String) -> Self {
        let mut k = Known { sandbox_image: image_name(&sandbox_image), ..Default::default() };
        for s in sandboxes {
            let Some(m) = &s.metadata else { continue };
            k.sandboxes.insert(s.id.clone(), (m.name.clone(), m.namespace.clone(), s.created_at));
            k.pods.insert(m.uid.clone(), (m.name.clone(), m.namespace.clone()));
        }
        for c in containers {
            let label = |key: &str| c.labels.get(key).cloned().unwrap_or_default();
            let image = c.image.as_ref().map(|i| {
                if i.user_specified_image.is_empty() { i.image.clone() } else { i.user_specified_image.clone() }
            });
            k.containers.insert(
                c.id.clone(),
                (
                    label(CONTAINER_NAME),
                    label(POD_NAME),
                    label(POD_NAMESPACE),
                    image_name(&image.unwrap_or_default()),
                    c.created_at,
                ),
            );
        }
        k
    }
}

/// How a cgroup is read beyond its own files.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The root: the host's network and block devices, pid 1's limits.
    Root,
    /// A cgroup the kubelet makes (pods, QoS, pod): no process of its own.
    Raw,
    /// A pod's sandbox: the pod's network namespace.
    Sandbox,
    /// A container.
    Container,
}

/// Where and when a scrape reads.
struct Reader<'a> {
    paths: &'a HostPaths,
    clock: &'a dyn kubelet_types::Clock,
    boot: Option<i64>,
}

fn series(r: &Reader<'_>, id: String, identity: Identity, kind: Kind, start: Option<i64>) -> Option<CgroupSeries> {
    let (paths, boot) = (r.paths, r.boot);
    let figures = cgroup::read_cgroup(paths, &id, boot)?;
    let timestamp_ms = now_ms(r.clock);
    let pids = procs::pids(paths, &id);
    let first = match kind {
        Kind::Root => Some("1".to_string()),
        Kind::Raw => None,
        Kind::Sandbox | Kind::Container => pids.first().cloned(),
    };
    let interfaces = match (kind, &first) {
        (Kind::Root | Kind::Sandbox, Some(pid)) => procs::interfaces(paths, pid),
        _ => vec![],
    };
    Some(CgroupSeries {
        identity: Identity { id, ..identity },
        processes: procs::processes(paths, &pids),
        max_open_files: first.as_deref().and_then(|pid| procs::max_open_files(paths, pid)),
        interfaces,
        filesystems: if kind == Kind::Root { disks::devices(paths) } else { vec![] },
        start_time: start.or(figures.created),
        figures,
        timestamp_ms,
    })
}

fn now_ms(clock: &dyn kubelet_types::Clock) -> i64 {
    clock.now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The QoS cgroups under the pods cgroup, as the driver names them.
fn qos_cgroups(pods: &str) -> [String; 2] {
    let pods = pods.trim_end_matches('/');
    match pods.rsplit('/').next().and_then(|l| l.strip_suffix(".slice")) {
        Some(p) => [format!("{pods}/{p}-besteffort.slice"), format!("{pods}/{p}-burstable.slice")],
        None => [format!("{pods}/besteffort"), format!("{pods}/burstable")],
    }
}

/// The whole text of a scrape (blocking: reads files). `known` is `None` when the runtime could not be listed.
pub fn collect(
    paths: &HostPaths,
    clock: &dyn kubelet_types::Clock,
    pods_cgroup: Option<&str>,
    known: Option<&Known>,
    pressure: bool,
) -> String {
    let r = Reader { paths, clock, boot: host::boot_time(paths) };
    let mut exp = Exposition::default();
    let machine = procs::machine(paths, std::path::Path::new("/sys"), std::path::Path::new("/etc"));
    exp.machine(&machine);
    exp.scrape_errors(known.is_none(), false);
    let Some(known) = known else { return exp.finish() };
    let mut all = vec![];
    all.extend(series(&r, "/".into(), Identity::default(), Kind::Root, None));
    if let Some(pods) = pods_cgroup {
        all.extend(series(&r, pods.to_string(), Identity::default(), Kind::Raw, None));
        for qos in qos_cgroups(pods) {
            all.extend(series(&r, qos, Identity::default(), Kind::Raw, None));
        }
        for (pod_cg, children) in host::pod_cgroups(paths, pods) {
            let uid = host::pod_uid_of_cgroup(&pod_cg).unwrap_or_default();
            let (pod, namespace) = known.pods.get(&uid).cloned().unwrap_or_default();
            let of_pod = Identity { pod: pod.clone(), namespace: namespace.clone(), ..Default::default() };
            all.extend(series(&r, pod_cg.clone(), of_pod.clone(), Kind::Raw, None));
            for child in children {
                let cg = host::container_cgroup(&pod_cg, &child);
                let secs = |ns: i64| (ns > 0).then_some(ns / 1_000_000_000);
                let (identity, kind, start) =
                    if let Some((name, pod, ns, image, created)) = known.containers.get(&child) {
                        let id = Identity {
                            name: child.clone(),
                            image: image.clone(),
                            pod: pod.clone(),
                            namespace: ns.clone(),
                            container: name.clone(),
                            ..Default::default()
                        };
                        (id, Kind::Container, secs(*created))
                    } else if let Some((pod, ns, created)) = known.sandboxes.get(&child) {
                        let id = Identity {
                            name: child.clone(),
                            image: known.sandbox_image.clone(),
                            pod: pod.clone(),
                            namespace: ns.clone(),
                            ..Default::default()
                        };
                        (id, Kind::Sandbox, secs(*created))
                    } else {
                        (Identity { name: child.clone(), ..of_pod.clone() }, Kind::Container, None)
                    };
                all.extend(series(&r, cg, identity, kind, start));
            }
        }
    }
    let now = now_ms(clock);
    for s in &all {
        exp.cgroup(s, pressure, now);
    }
    exp.finish()
}

#[cfg(test)]
mod tests;
