//! A pod's requests and limits as upstream adds them up (`k8s.io/component-helpers/resource/helpers.go`:
//! PodRequests, PodLimits, AggregateContainerRequests/Limits, IsPodLevelResourcesSet; `pkg/api/v1/resource`
//! GetResourceRequestQuantity; `pkg/apis/core/v1/helper` for huge page names and sizes).
//!
//! Contract: every function reads the pod as the API would have defaulted it (`pkg/apis/core/v1/defaults.go`
//! SetDefaults_Pod): a container's missing request is its limit, and pod-level (`spec.resources`) requests and
//! huge page limits default from the containers' and the pod's limits (defaultPodRequests,
//! defaultHugePagePodLimits), so a static pod, which rkubelet runs as decoded, is counted as upstream counts it.
//! Amounts are in base units (cores, bytes); quantities that do not parse are left out. The PodLevelResources
//! gate is taken as on (its default since 1.34): a node with it off refuses such pods at admission.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::parse_quantity;

/// Amounts by resource name, in base units.
pub type ResourceList = BTreeMap<String, f64>;

/// The `hugepages-` prefix of huge page resource names (`v1.ResourceHugePagesPrefix`).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Which parts of a pod count (`resource.PodResourcesOptions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodResourcesOptions {
    /// Leave `spec.overhead` out.
    pub exclude_overhead: bool,
    /// Leave the pod-level resources out.
    pub skip_pod_level_resources: bool,
    /// Leave the containers' resources out (requests only).
    pub skip_container_level_resources: bool,
}

fn list(m: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    m.into_iter().flatten().filter_map(|(k, q)| Some((k.clone(), parse_quantity(&q.0)?))).collect()
}

/// A container's limits.
pub fn container_limits(c: &Container) -> ResourceList {
    list(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

/// A container's requests, a missing one defaulting to the limit (SetDefaults_Pod).
pub fn container_requests(c: &Container) -> ResourceList {
    let r = c.resources.as_ref();
    let mut out = container_limits(c);
    out.extend(list(r.and_then(|r| r.requests.as_ref())));
    out
}

fn add(to: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        *to.entry(k.clone()).or_default() += v;
    }
}

fn max(to: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        let e = to.entry(k.clone()).or_insert(*v);
        *e = e.max(*v);
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The containers' total of `of` (AggregateContainerRequests/Limits): app containers and sidecars add up; a
/// regular init container needs its own amount plus the sidecars started before it; per resource the larger.
/// `seen` gets each container's effective amounts (`ContainerFn`: an init container's include the sidecars before
/// it).
fn aggregate(pod: &Pod, of: fn(&Container) -> ResourceList, seen: &mut dyn FnMut(&ResourceList)) -> ResourceList {
    let Some(spec) = pod.spec.as_ref() else { return ResourceList::new() };
    let mut total = ResourceList::new();
    for c in &spec.containers {
        let r = of(c);
        seen(&r);
        add(&mut total, &r);
    }
    let (mut sidecars, mut init) = (ResourceList::new(), ResourceList::new());
    for c in spec.init_containers.iter().flatten() {
        let mut r = of(c);
        if is_sidecar(c) {
            add(&mut total, &r);
            add(&mut sidecars, &r);
            r = sidecars.clone();
        } else {
            add(&mut r, &sidecars);
        }
        seen(&r);
        max(&mut init, &r);
    }
    max(&mut total, &init);
    total
}

/// `AggregateContainerRequests`.
pub fn aggregate_container_requests(pod: &Pod) -> ResourceList {
    aggregate(pod, container_requests, &mut |_| {})
}

/// `AggregateContainerLimits`, telling `seen` each container's effective limits.
pub fn aggregate_container_limits(pod: &Pod, seen: &mut dyn FnMut(&ResourceList)) -> ResourceList {
    aggregate(pod, container_limits, seen)
}

/// Whether `name` can be set at pod level (`IsSupportedPodLevelResource`): cpu, memory and huge pages.
pub fn is_supported_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with(HUGEPAGES_PREFIX)
}

/// `IsHugePageResourceName`.
pub fn is_hugepage_resource(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

/// The pod-level requests and limits as the API defaults them; None without `spec.resources`.
fn pod_level(pod: &Pod) -> Option<(ResourceList, ResourceList)> {
    let r = pod.spec.as_ref()?.resources.as_ref()?;
    let (mut reqs, mut lims) = (list(r.requests.as_ref()), list(r.limits.as_ref()));
    let raw_requests: Vec<&String> = r.requests.iter().flatten().map(|(k, _)| k).collect();
    let raw_limits = r.limits.as_ref().is_some_and(|l| !l.is_empty());
    // defaultHugePagePodLimits: only when the pod-level resources are partly given.
    if raw_limits || !raw_requests.is_empty() {
        for (k, v) in aggregate_container_limits(pod, &mut |_| {}) {
            if is_hugepage_resource(&k) && !raw_requests.contains(&&k) && !lims.contains_key(&k) {
                lims.insert(k, v);
            }
        }
    }
    // defaultPodRequests: only when pod-level limits are given; overcommittable resources from the containers'
    // requests, then every other from the limit.
    if !lims.is_empty() {
        for (k, v) in aggregate_container_requests(pod) {
            if (k == "cpu" || k == "memory") && !raw_requests.contains(&&k) {
                reqs.entry(k).or_insert(v);
            }
        }
        for (k, v) in &lims {
            if is_supported_pod_level_resource(k) && !raw_requests.contains(&k) {
                reqs.entry(k.clone()).or_insert(*v);
            }
        }
    }
    Some((reqs, lims))
}

/// The defaulted pod-level requests (empty without `spec.resources`).
pub fn pod_level_requests(pod: &Pod) -> ResourceList {
    pod_level(pod).map(|(r, _)| r).unwrap_or_default()
}

/// The defaulted pod-level limits (empty without `spec.resources`).
pub fn pod_level_limits(pod: &Pod) -> ResourceList {
    pod_level(pod).map(|(_, l)| l).unwrap_or_default()
}

/// Whether the pod has `spec.resources` at all (`pod.Spec.Resources != nil`, which `ComputePodQOS` tests).
pub fn has_pod_level_field(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.resources.is_some())
}

/// `IsPodLevelResourcesSet`: a supported resource among the pod-level requests or limits.
pub fn is_pod_level_resources_set(pod: &Pod) -> bool {
    pod_level(pod).is_some_and(|(r, l)| r.keys().chain(l.keys()).any(|k| is_supported_pod_level_resource(k)))
}

/// `IsPodLevelRequestsSet`.
pub fn is_pod_level_requests_set(pod: &Pod) -> bool {
    pod_level_requests(pod).keys().any(|k| is_supported_pod_level_resource(k))
}

/// `IsPodLevelLimitsSet`.
pub fn is_pod_level_limits_set(pod: &Pod) -> bool {
    pod_level_limits(pod).keys().any(|k| is_supported_pod_level_resource(k))
}

/// The pod's `spec.overhead`.
pub fn overhead(pod: &Pod) -> ResourceList {
    list(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()))
}

/// `PodRequests`: the containers' requests, pod-level requests in place of theirs, plus the overhead.
pub fn pod_requests(pod: &Pod, opts: PodResourcesOptions) -> ResourceList {
    let mut reqs =
        if opts.skip_container_level_resources { ResourceList::new() } else { aggregate_container_requests(pod) };
    if !opts.skip_pod_level_resources && is_pod_level_requests_set(pod) {
        reqs.extend(pod_level_requests(pod).into_iter().filter(|(k, _)| is_supported_pod_level_resource(k)));
    }
    if !opts.exclude_overhead {
        add(&mut reqs, &overhead(pod));
    }
    reqs
}

/// `PodLimits`: the containers' limits (each container's effective limits told to `seen`), pod-level limits in
/// place of theirs, plus the overhead on every limit that is not zero.
pub fn pod_limits(pod: &Pod, opts: PodResourcesOptions, seen: &mut dyn FnMut(&ResourceList)) -> ResourceList {
    let mut limits = aggregate_container_limits(pod, seen);
    if !opts.skip_pod_level_resources && is_pod_level_resources_set(pod) {
        limits.extend(pod_level_limits(pod).into_iter().filter(|(k, _)| is_supported_pod_level_resource(k)));
    }
    if !opts.exclude_overhead {
        for (k, v) in overhead(pod) {
            if let Some(l) = limits.get_mut(&k).filter(|l| **l != 0.0) {
                *l += v;
            }
        }
    }
    limits
}

/// The pod's request of one resource (`GetResourceRequestQuantity`, what eviction ranks by): the pod-level
/// requests alone when the pod has pod-level resources, else the containers'; plus the overhead when not zero.
pub fn resource_request(pod: &Pod, name: &str) -> f64 {
    let opts = PodResourcesOptions {
        skip_container_level_resources: is_pod_level_resources_set(pod),
        exclude_overhead: true,
        ..Default::default()
    };
    let mut v = pod_requests(pod, opts).get(name).copied().unwrap_or(0.0);
    if v != 0.0 {
        v += overhead(pod).get(name).copied().unwrap_or(0.0);
    }
    v
}

/// The page size in bytes of a huge page resource (`HugePageSizeFromResourceName`), `hugepages-2Mi` → 2 MiB.
pub fn hugepage_size_from_resource_name(name: &str) -> Option<u64> {
    let size = parse_quantity(name.strip_prefix(HUGEPAGES_PREFIX)?)?;
    (size >= 1.0).then_some(size as u64)
}

/// The unit size cgroups name a page size by (`HugePageUnitSizeFromByteSize`): 2 MiB → `2MB`, 1 GiB → `1GB`.
pub fn hugepage_unit_size(size: u64) -> Result<String, String> {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let (mut size, mut idx) = (size, 0);
    while size > 0 && size.is_multiple_of(1024) && idx < UNITS.len() - 1 {
        size /= 1024;
        idx += 1;
    }
    if size > 1024 && idx < UNITS.len() - 1 {
        return Err(format!("size: {size}{} must be guaranteed to divisible into the largest units", UNITS[idx]));
    }
    Ok(format!("{size}{}", UNITS[idx]))
}

/// Huge page amounts by page size in bytes (`HugePageLimits`): every `hugepages-<size>` of `list`.
pub fn hugepage_limits(list: &ResourceList) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    for (k, v) in list {
        if let Some(size) = is_hugepage_resource(k).then(|| hugepage_size_from_resource_name(k)).flatten() {
            *out.entry(size).or_default() += *v as u64;
        }
    }
    out
}

/// The huge page resources a pod asks for anywhere: its containers' (init and app) requests and limits, and its
/// pod-level ones.
pub fn hugepage_resources(pod: &Pod) -> Vec<String> {
    let Some(spec) = pod.spec.as_ref() else { return vec![] };
    let mut names: Vec<String> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| container_requests(c).into_keys())
        .chain(pod_level_requests(pod).into_keys())
        .chain(pod_level_limits(pod).into_keys())
        .filter(|k| is_hugepage_resource(k))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
#[path = "resources_tests.rs"]
mod tests;
