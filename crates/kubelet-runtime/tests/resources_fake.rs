//! The resources rkubelet sends the runtime, read back from the in-memory runtime: containers of a pod with
//! pod-level resources take the pod's limits, every huge page size of the node gets a limit, and the sandbox
//! carries the pod's resources and its overhead (`kuberuntime_container_linux.go`, `kuberuntime_sandbox_linux.go`).

mod common;

use std::collections::BTreeMap;

use common::{Env, env_with, pod_p, status};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_cri::api;

fn rl(v: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    (!v.is_empty()).then(|| v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect())
}

fn limits(v: &[(&str, &str)]) -> Option<ResourceRequirements> {
    Some(ResourceRequirements { limits: rl(v), ..Default::default() })
}

fn pod(pod_level: Option<ResourceRequirements>, containers: &[(&str, Option<ResourceRequirements>)]) -> Pod {
    let container = |(n, r): &(&str, Option<ResourceRequirements>)| Container {
        name: n.to_string(),
        image: Some("busybox:1".into()),
        resources: r.clone(),
        ..Default::default()
    };
    pod_p(PodSpec {
        resources: pod_level,
        containers: containers.iter().map(container).collect(),
        ..Default::default()
    })
}

/// A node with 2 MiB and 1 GiB pages and 8 GiB of memory.
fn node() -> Env {
    env_with(|c| {
        c.hugepage_sizes = vec!["2MB".into(), "1GB".into()];
        c.memory_capacity = 8 << 30;
    })
}

async fn run(e: &Env, p: &Pod) {
    let r = e.mgr.sync_pod(p, &status(e).await).await;
    assert!(r.ok(), "{:?}", r.errors);
}

fn container(e: &Env, name: &str) -> api::LinuxContainerResources {
    let id = &e.fake.container_ids(name)[0];
    e.fake.container_config(id).unwrap().linux.unwrap().resources.unwrap()
}

async fn sandbox(e: &Env) -> api::LinuxPodSandboxConfig {
    use kubelet_cri::RuntimeService;
    let id = e.fake.list_pod_sandbox(None).await.unwrap()[0].id.clone();
    e.fake.sandbox_config(&id).unwrap().linux.unwrap()
}

fn hugepages(v: &[(&str, u64)]) -> Vec<api::HugepageLimit> {
    v.iter().map(|(s, l)| api::HugepageLimit { page_size: s.to_string(), limit: *l }).collect()
}

#[tokio::test(start_paused = true)]
async fn containers_without_limits_take_the_pod_level_ones() {
    let e = node();
    // Pod-level limits only, and a container with a memory limit of its own.
    let p = pod(limits(&[("cpu", "500m"), ("memory", "64Mi")]), &[("a", None), ("b", limits(&[("memory", "32Mi")]))]);
    run(&e, &p).await;
    let a = container(&e, "a");
    // No cpu request: shares from the (pod-level) limit, as calculateLinuxResources does.
    assert_eq!((a.cpu_shares, a.cpu_quota, a.cpu_period), (512, 50_000, 100_000));
    assert_eq!(a.memory_limit_in_bytes, 64 << 20);
    // Burstable (the pod-level memory request defaults to b's 32Mi); a requests nothing and the pod-level request
    // is all b's: 1000, which Burstable pods never get.
    assert_eq!(a.oom_score_adj, 999);
    assert_eq!(a.hugepage_limits, hugepages(&[("2MB", 0), ("1GB", 0)]), "every size of the node, 0 when unasked");
    let b = container(&e, "b");
    assert_eq!((b.cpu_shares, b.cpu_quota), (512, 50_000));
    assert_eq!(b.memory_limit_in_bytes, 32 << 20, "its own limit wins");
    // 1000 − 1000 × 32 MiB / 8 GiB (integer arithmetic).
    assert_eq!(b.oom_score_adj, 997);
    let s = sandbox(&e).await;
    let r = s.resources.unwrap();
    assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes), (512, 50_000, 100_000, 64 << 20));
    assert_eq!(s.overhead, Some(api::LinuxContainerResources::default()), "no overhead: an empty one, as upstream");
}

#[tokio::test(start_paused = true)]
async fn the_sandbox_carries_the_overhead_apart_and_huge_pages_are_limited() {
    let e = node();
    let mut p = pod(None, &[("a", limits(&[("cpu", "1"), ("memory", "128Mi"), ("hugepages-2Mi", "4Mi")]))]);
    p.spec.as_mut().unwrap().overhead = rl(&[("cpu", "100m"), ("memory", "16Mi")]);
    run(&e, &p).await;
    let a = container(&e, "a");
    assert_eq!(a.hugepage_limits, hugepages(&[("2MB", 4 << 20), ("1GB", 0)]));
    assert_eq!(a.oom_score_adj, -997, "Guaranteed");
    let s = sandbox(&e).await;
    let r = s.resources.unwrap();
    assert_eq!((r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes), (1024, 100_000, 128 << 20), "without overhead");
    let o = s.overhead.unwrap();
    // The overhead as requests equal to limits.
    assert_eq!((o.cpu_shares, o.cpu_quota, o.cpu_period, o.memory_limit_in_bytes), (102, 10_000, 100_000, 16 << 20));
}

#[tokio::test(start_paused = true)]
async fn pod_level_huge_pages_reach_containers_that_set_none() {
    let e = node();
    let pod_level = limits(&[("cpu", "1"), ("memory", "256Mi"), ("hugepages-2Mi", "8Mi")]);
    let own = limits(&[("memory", "64Mi"), ("hugepages-2Mi", "2Mi")]);
    run(&e, &pod(pod_level, &[("a", None), ("b", own)])).await;
    assert_eq!(container(&e, "a").hugepage_limits, hugepages(&[("2MB", 8 << 20), ("1GB", 0)]));
    assert_eq!(container(&e, "b").hugepage_limits, hugepages(&[("2MB", 2 << 20), ("1GB", 0)]), "the container's wins");
}
