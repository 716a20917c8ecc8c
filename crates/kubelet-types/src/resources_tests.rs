use super::*;
use crate::qos::{PodResources, QosClass, pod_qos, pod_resources};
use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

fn rl(v: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!v.is_empty()).then(|| v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect())
}

fn res(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Option<ResourceRequirements> {
    Some(ResourceRequirements { requests: rl(req), limits: rl(lim), ..Default::default() })
}

fn container(name: &str, resources: Option<ResourceRequirements>) -> Container {
    Container { name: name.into(), resources, ..Default::default() }
}

fn pod(pod_level: Option<ResourceRequirements>, containers: Vec<Container>) -> Pod {
    Pod { spec: Some(PodSpec { resources: pod_level, containers, ..Default::default() }), ..Default::default() }
}

const MI: f64 = 1024.0 * 1024.0;

#[test]
fn a_pod_with_only_pod_level_limits_is_guaranteed_and_its_cgroup_gets_them() {
    // The apiserver defaults the pod-level requests to the limits and calls the pod Guaranteed; rkubelet used to
    // add up the containers' memory limits (none) and write a memory limit of 0.
    let p = pod(res(&[], &[("cpu", "500m"), ("memory", "64Mi")]), vec![container("a", None), container("b", None)]);
    assert_eq!(pod_level_requests(&p), [("cpu".to_string(), 0.5), ("memory".to_string(), 64.0 * MI)].into());
    assert_eq!(pod_qos(&p), QosClass::Guaranteed);
    assert_eq!(
        pod_resources(&p, true, 100_000),
        PodResources {
            cpu_shares: 512,
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory: Some(64 << 20),
            hugepage_limits: BTreeMap::new(),
        }
    );
}

#[test]
fn pod_level_requests_default_from_the_containers_then_from_the_limits() {
    // As `kubectl create --dry-run=server` shows on a 1.35 apiserver: cpu from the containers' requests, memory
    // from the pod-level limit; Burstable.
    let p = pod(
        res(&[], &[("cpu", "500m"), ("memory", "64Mi")]),
        vec![container("a", None), container("b", res(&[("cpu", "100m")], &[]))],
    );
    assert_eq!(pod_level_requests(&p), [("cpu".to_string(), 0.1), ("memory".to_string(), 64.0 * MI)].into());
    assert_eq!(pod_qos(&p), QosClass::Burstable);
    let r = pod_resources(&p, true, 100_000);
    // Limits declared at pod level: the Burstable pod gets quota and memory limit; shares from the 100m request.
    assert_eq!((r.cpu_shares, r.cpu_quota, r.memory), (102, Some(50_000), Some(64 << 20)));

    // Only a memory limit at pod level: no quota (the containers declare no cpu limit either).
    let p = pod(res(&[("cpu", "250m")], &[("memory", "128Mi")]), vec![container("a", None)]);
    assert_eq!(pod_qos(&p), QosClass::Burstable);
    let r = pod_resources(&p, true, 100_000);
    assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory), (256, None, None, Some(128 << 20)));
}

#[test]
fn an_empty_pod_level_resources_field_makes_the_pod_best_effort_as_upstream() {
    // ComputePodQOS looks only at the pod level once `spec.resources` is there, even empty.
    let p =
        pod(Some(ResourceRequirements::default()), vec![container("a", res(&[], &[("cpu", "1"), ("memory", "1Gi")]))]);
    assert_eq!(pod_qos(&p), QosClass::BestEffort);
    assert!(!is_pod_level_resources_set(&p));
    // The status the apiserver set wins.
    let mut p = p;
    p.status =
        Some(k8s_openapi::api::core::v1::PodStatus { qos_class: Some("Burstable".into()), ..Default::default() });
    assert_eq!(pod_qos(&p), QosClass::Burstable);
}

#[test]
fn container_qos_compares_the_summed_requests_and_limits() {
    let g = pod(None, vec![container("a", res(&[], &[("cpu", "1"), ("memory", "1Gi")]))]);
    assert_eq!(pod_qos(&g), QosClass::Guaranteed);
    // One container without a memory limit: Burstable.
    let b = pod(
        None,
        vec![
            container("a", res(&[], &[("cpu", "1"), ("memory", "1Gi")])),
            container("b", res(&[("cpu", "1")], &[("cpu", "1")])),
        ],
    );
    assert_eq!(pod_qos(&b), QosClass::Burstable);
    // Only an extended resource: BestEffort.
    assert_eq!(pod_qos(&pod(None, vec![container("a", res(&[], &[("example.com/gpu", "1")]))])), QosClass::BestEffort);
}

#[test]
fn overhead_is_added_to_requests_and_to_limits_that_are_set() {
    let mut p = pod(None, vec![container("a", res(&[("cpu", "250m")], &[("memory", "64Mi")]))]);
    p.spec.as_mut().unwrap().overhead = rl(&[("cpu", "100m"), ("memory", "32Mi")]);
    let reqs = pod_requests(&p, PodResourcesOptions::default());
    assert_eq!((reqs["cpu"], reqs["memory"]), (0.35, 96.0 * MI));
    let lims = pod_limits(&p, PodResourcesOptions::default(), &mut |_| {});
    assert_eq!(lims.get("cpu"), None, "no cpu limit: no overhead on it");
    assert_eq!(lims["memory"], 96.0 * MI);
    let r = pod_resources(&p, true, 100_000);
    // 350m → 358 shares; the memory limit with the overhead.
    assert_eq!((r.cpu_shares, r.cpu_quota, r.memory), (358, None, Some(96 << 20)));
    // Eviction's request: the overhead only on what is requested.
    assert_eq!(resource_request(&p, "memory"), 96.0 * MI);
    assert_eq!(resource_request(&p, "ephemeral-storage"), 0.0);
    let excluded = pod_requests(&p, PodResourcesOptions { exclude_overhead: true, ..Default::default() });
    assert_eq!(excluded["cpu"], 0.25);
}

#[test]
fn eviction_counts_only_pod_level_requests_when_the_pod_has_them() {
    let p = pod(res(&[("cpu", "1")], &[]), vec![container("a", res(&[("memory", "1Gi")], &[]))]);
    // GetResourceRequestQuantity skips the containers: the memory request is 0.
    assert_eq!(resource_request(&p, "memory"), 0.0);
    assert_eq!(resource_request(&p, "cpu"), 1.0);
    // PodRequests keeps the containers' memory.
    assert_eq!(pod_requests(&p, PodResourcesOptions::default())["memory"], 1024.0 * MI);
}

#[test]
fn sidecars_add_up_and_init_containers_count_as_they_run() {
    let mut p = pod(None, vec![container("app", res(&[("cpu", "100m")], &[]))]);
    let mut sidecar = container("side", res(&[("cpu", "200m")], &[("memory", "10Mi")]));
    sidecar.restart_policy = Some("Always".into());
    let init = container("init", res(&[("cpu", "1")], &[]));
    p.spec.as_mut().unwrap().init_containers = Some(vec![sidecar, init]);
    let reqs = pod_requests(&p, PodResourcesOptions::default());
    // The init container runs beside the sidecar: 1 + 0.2; the apps with the sidecar: 0.3.
    assert_eq!(reqs["cpu"], 1.2);
    let mut seen = vec![];
    let lims = pod_limits(&p, PodResourcesOptions::default(), &mut |l| seen.push(l.clone()));
    assert_eq!(lims["memory"], 10.0 * MI);
    // The init container's effective limits include the sidecar's memory (ResourceConfigForPod's ContainerFn).
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].get("memory"), Some(&(10.0 * MI)));
}

#[test]
fn huge_pages_are_limited_from_requests_and_default_to_the_pod_level() {
    let hp = res(&[], &[("hugepages-2Mi", "4Mi"), ("memory", "64Mi")]);
    let p = pod(None, vec![container("a", hp.clone())]);
    assert_eq!(pod_resources(&p, true, 100_000).hugepage_limits, [(2 << 20, 4 << 20)].into());
    assert_eq!(hugepage_resources(&p), vec!["hugepages-2Mi".to_string()]);
    // Pod-level cpu limit and container huge pages: the pod-level huge page limit (and request) is the containers'.
    let p = pod(res(&[], &[("cpu", "1"), ("memory", "128Mi")]), vec![container("a", hp)]);
    assert_eq!(pod_level_limits(&p)["hugepages-2Mi"], 4.0 * MI);
    assert_eq!(pod_level_requests(&p)["hugepages-2Mi"], 4.0 * MI);
    assert_eq!(pod_resources(&p, true, 100_000).hugepage_limits, [(2 << 20, 4 << 20)].into());
    assert_eq!(hugepage_size_from_resource_name("hugepages-1Gi"), Some(1 << 30));
    assert_eq!(hugepage_unit_size(2 << 20).unwrap(), "2MB");
    assert_eq!(hugepage_unit_size(1 << 30).unwrap(), "1GB");
    assert_eq!(hugepage_unit_size(64 << 10).unwrap(), "64KB");
    assert!(hugepage_unit_size(1025 * 1024).is_err());
}
