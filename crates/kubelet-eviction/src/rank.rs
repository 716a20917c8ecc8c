//! Which pod goes first, and what its eviction says (`pkg/kubelet/eviction/helpers.go` rankMemoryPressure,
//! rankPIDPressure, rankDiskPressureFunc, evictionMessage). Pure functions of the pods and their usage. Requests
//! are `GetResourceRequestQuantity`'s: a pod with pod-level resources is ranked by its pod-level requests.

use std::cmp::Ordering;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Volume;
use kubelet_types::Pod;
use kubelet_types::qos::{container_request, pod_priority, pod_request};
use kubelet_types::resources;

use crate::stats::{FsUsage, PodUsage};
use crate::threshold::{Observations, Resource, Signal, Threshold, binary_si};

/// Which of a pod's filesystem figures count for a disk signal (`fsStatsType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsMeasure {
    /// Writable layers.
    pub rootfs: bool,
    /// Log files.
    pub logs: bool,
    /// Local volumes (emptyDir on disk, hostPath, configMap).
    pub local_volumes: bool,
}

/// What a disk signal measures (`buildSignalToRankFunc`): everything when images and pods share one filesystem;
/// with a dedicated image filesystem, nodefs counts logs and volumes and imagefs the writable layers.
pub fn fs_measure(signal: Signal, dedicated_image_fs: bool) -> FsMeasure {
    let all = FsMeasure { rootfs: true, logs: true, local_volumes: true };
    if !dedicated_image_fs {
        return all;
    }
    match signal {
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree => FsMeasure { rootfs: false, ..all },
        _ => FsMeasure { rootfs: true, logs: false, local_volumes: false },
    }
}

/// `cmpBool`: the pod for which `a` holds goes first.
fn first_if(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

fn is_local_volume(v: &Volume) -> bool {
    v.host_path.is_some()
        || v.config_map.is_some()
        || v.empty_dir.as_ref().is_some_and(|e| e.medium.as_deref().unwrap_or("").is_empty())
}

/// A pod's disk use of `resource` (bytes or inodes) as the signal measures it (`podDiskUsage`).
pub fn pod_disk_usage(pod: &Pod, usage: &PodUsage, m: FsMeasure, resource: Resource) -> u64 {
    let pick = |f: &FsUsage| if resource == Resource::Inodes { f.inodes } else { f.bytes }.unwrap_or(0);
    let mut total = 0;
    for c in &usage.containers {
        if m.rootfs {
            total += pick(&c.rootfs);
        }
        if m.logs {
            total += pick(&c.logs);
        }
    }
    if m.local_volumes {
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()).filter(|v| is_local_volume(v)) {
            total += usage.volumes.get(&v.name).map(pick).unwrap_or(0);
        }
    }
    total
}

fn memory_of(u: &PodUsage) -> i64 {
    u.memory_working_set.unwrap_or(0) as i64
}

/// Orders `pods` for eviction under `signal`, first to go first: memory (usage above requests, then lower
/// priority, then usage less requests), PIDs (lower priority, then more processes), disk (usage above requests,
/// lower priority, usage less requests). Pods without figures go first.
pub fn rank(pods: &mut [Arc<Pod>], signal: Signal, stats: &dyn Fn(&Pod) -> Option<PodUsage>, dedicated_image_fs: bool) {
    let usage: std::collections::HashMap<*const Pod, Option<PodUsage>> =
        pods.iter().map(|p| (Arc::as_ptr(p), stats(p))).collect();
    let get = |p: &Arc<Pod>| usage.get(&Arc::as_ptr(p)).cloned().flatten();
    let by_priority = |a: &Pod, b: &Pod| pod_priority(a).cmp(&pod_priority(b));
    match signal.resource() {
        Resource::Memory => pods.sort_by(|a, b| {
            let (ua, ub) = (get(a), get(b));
            let (Some(ua), Some(ub)) = (ua, ub) else { return first_if(get(a).is_none(), get(b).is_none()) };
            let req = |p: &Pod| pod_request(p, "memory") as i64;
            first_if(memory_of(&ua) > req(a), memory_of(&ub) > req(b))
                .then_with(|| by_priority(a, b))
                .then_with(|| (memory_of(&ub) - req(b)).cmp(&(memory_of(&ua) - req(a))))
        }),
        Resource::Pids => pods.sort_by(|a, b| {
            let (ua, ub) = (get(a), get(b));
            let (Some(ua), Some(ub)) = (ua, ub) else { return first_if(get(a).is_none(), get(b).is_none()) };
            by_priority(a, b).then_with(|| ub.processes.unwrap_or(0).cmp(&ua.processes.unwrap_or(0)))
        }),
        r @ (Resource::EphemeralStorage | Resource::Inodes) => {
            let m = fs_measure(signal, dedicated_image_fs);
            let res = if r == Resource::Inodes { "inodes" } else { "ephemeral-storage" };
            pods.sort_by(|a, b| {
                let (ua, ub) = (get(a), get(b));
                let (Some(ua), Some(ub)) = (ua, ub) else { return first_if(get(a).is_none(), get(b).is_none()) };
                let (da, db) = (pod_disk_usage(a, &ua, m, r) as i64, pod_disk_usage(b, &ub, m, r) as i64);
                let (ra, rb) = (pod_request(a, res) as i64, pod_request(b, res) as i64);
                // Upstream subtracts the ephemeral-storage request also from an inode count.
                let (sa, sb) = (pod_request(a, "ephemeral-storage") as i64, pod_request(b, "ephemeral-storage") as i64);
                first_if(da > ra, db > rb).then_with(|| by_priority(a, b)).then_with(|| (db - sb).cmp(&(da - sa)))
            })
        }
    }
}

/// The message and event annotations of an eviction (`evictionMessage`): the starved resource, the threshold and
/// what was available, then each container using more than it requested.
pub fn eviction_message(
    resource: Resource,
    pod: &Pod,
    usage: Option<&PodUsage>,
    thresholds: &[Threshold],
    observations: &Observations,
) -> (String, Vec<(String, String)>) {
    let mut message = format!("The node was low on resource: {resource}. ");
    let met = thresholds
        .iter()
        .find_map(|t| (t.signal.resource() == resource).then(|| observations.get(&t.signal).map(|o| (t, o))).flatten());
    if let Some((t, o)) = met {
        let available = match resource {
            Resource::Inodes | Resource::Pids => crate::threshold::decimal_si(o.available),
            _ => binary_si(o.available),
        };
        message += &format!("Threshold quantity: {}, available: {available}. ", t.value.display(o.capacity));
    }
    let Some(usage) = usage else { return (message, vec![]) };
    let mut annotations = vec![];
    // A pod with pod-level resources is named with its pod-level memory request and its usage.
    if resource == Resource::Memory
        && let Some(request) = pod_level_memory_request(pod)
        && let Some(used) = usage.memory_working_set
    {
        let (name, used) = (pod.metadata.name.clone().unwrap_or_default(), binary_si(used as i64));
        message += &format!("Pod {name} was using {used}, request is {request}, has larger consumption of memory. ");
        annotations.push(("offending_pod".to_string(), name));
        annotations.push(("offending_pod_usage".to_string(), used));
    }
    let spec = pod.spec.as_ref();
    let containers: Vec<_> =
        spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten())).collect();
    let (mut names, mut usages) = (vec![], vec![]);
    for cs in &usage.containers {
        let Some(c) = containers.iter().find(|c| c.name == cs.name) else { continue };
        let used = match resource {
            Resource::Memory => cs.memory_working_set,
            Resource::EphemeralStorage => match (cs.rootfs.bytes, cs.logs.bytes) {
                (Some(r), Some(l)) => Some(r + l),
                _ => None,
            },
            _ => None,
        };
        let request = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource.as_str()))
            .map(|q| q.0.clone());
        let request_value = request.as_ref().map(|_| container_request(c, resource.as_str()) as u64).unwrap_or(0);
        if let Some(used) = used.filter(|u| *u > request_value) {
            let used = binary_si(used as i64);
            message += &format!(
                "Container {} was using {used}, request is {}, has larger consumption of {resource}. ",
                c.name,
                request.as_deref().unwrap_or("0")
            );
            names.push(c.name.clone());
            usages.push(used);
        }
    }
    annotations.extend([
        ("offending_containers".to_string(), names.join(",")),
        ("offending_containers_usage".to_string(), usages.join(",")),
        ("starved_resource".to_string(), resource.as_str().to_string()),
    ]);
    (message, annotations)
}

/// The pod-level memory request as written (or as the API defaults it, from the pod-level limit or the
/// containers' requests), when the pod has pod-level resources.
fn pod_level_memory_request(pod: &Pod) -> Option<String> {
    if !resources::is_pod_level_resources_set(pod) {
        return None;
    }
    let written = |l: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| { l.and_then(|l| l.get("memory")).map(|q| q.0.clone()) };
    let r = pod.spec.as_ref()?.resources.as_ref()?;
    if let Some(q) = written(r.requests.as_ref()) {
        return Some(q);
    }
    let defaulted = *resources::pod_level_requests(pod).get("memory")?;
    let limit = written(r.limits.as_ref()).filter(|l| kubelet_types::quantity::parse_quantity(l) == Some(defaulted));
    Some(limit.unwrap_or_else(|| binary_si(defaulted as i64)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ContainerUsage;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    const MI: u64 = 1 << 20;

    fn pod(name: &str, pod_level: Option<&str>, container_request: Option<&str>) -> Arc<Pod> {
        let req = |q: Option<&str>| {
            q.map(|q| ResourceRequirements {
                requests: Some([("memory".to_string(), Quantity(q.into()))].into()),
                ..Default::default()
            })
        };
        let mut p = Pod {
            spec: Some(PodSpec {
                resources: req(pod_level),
                containers: vec![Container {
                    name: "app".into(),
                    resources: req(container_request),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.name = Some(name.into());
        Arc::new(p)
    }

    fn usage(mem: u64) -> PodUsage {
        let c = ContainerUsage { name: "app".into(), memory_working_set: Some(mem), ..Default::default() };
        PodUsage { memory_working_set: Some(mem), containers: vec![c], ..Default::default() }
    }

    #[test]
    fn a_pod_with_pod_level_requests_is_ranked_and_named_by_them() {
        // Both use 150Mi; "pod-level" requests 200Mi at pod level (its container 10Mi), "containers" 10Mi.
        let mut pods = vec![pod("pod-level", Some("200Mi"), Some("10Mi")), pod("containers", None, Some("10Mi"))];
        let stats = |_: &Pod| Some(usage(150 * MI));
        rank(&mut pods, Signal::MemoryAvailable, &stats, false);
        let order: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(order, ["containers", "pod-level"], "only the container-level pod uses more than it requested");
        let (message, annotations) =
            eviction_message(Resource::Memory, &pods[1], Some(&usage(150 * MI)), &[], &Observations::new());
        assert_eq!(
            message,
            "The node was low on resource: memory. Pod pod-level was using 150Mi, request is 200Mi, has larger \
             consumption of memory. Container app was using 150Mi, request is 10Mi, has larger consumption of memory. "
        );
        assert!(annotations.contains(&("offending_pod".to_string(), "pod-level".to_string())), "{annotations:?}");
        assert!(annotations.contains(&("offending_pod_usage".to_string(), "150Mi".to_string())));
        let (message, annotations) =
            eviction_message(Resource::Memory, &pods[0], Some(&usage(150 * MI)), &[], &Observations::new());
        assert!(!message.contains("Pod containers"), "{message}");
        assert!(!annotations.iter().any(|(k, _)| k == "offending_pod"));
    }
}
