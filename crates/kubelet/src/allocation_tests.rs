use super::*;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn res(cpu_req: &str, cpu_lim: &str, mem_req: &str, mem_lim: &str) -> ResourceRequirements {
    let list = |v: &[(&str, &str)]| {
        let m: std::collections::BTreeMap<String, Quantity> =
            v.iter().filter(|(_, q)| !q.is_empty()).map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect();
        (!m.is_empty()).then_some(m)
    };
    ResourceRequirements {
        limits: list(&[("cpu", cpu_lim), ("memory", mem_lim)]),
        requests: list(&[("cpu", cpu_req), ("memory", mem_req)]),
        claims: None,
    }
}

fn container(name: &str, r: ResourceRequirements, sidecar: bool) -> Container {
    Container {
        name: name.into(),
        resources: Some(r),
        restart_policy: sidecar.then(|| "Always".to_string()),
        ..Default::default()
    }
}

#[test]
fn the_completed_message_is_upstreams() {
    // pkg/kubelet/events/resize_test.go.
    let pod = |inits: Vec<Container>, apps: Vec<Container>| Pod {
        spec: Some(PodSpec { init_containers: Some(inits), containers: apps, ..Default::default() }),
        ..Default::default()
    };
    let simple = pod(vec![], vec![container("c0", res("100m", "100m", "100", "100"), false)]);
    assert_eq!(
        resize_completed_message(&simple),
        r#"Pod resize completed: {"containers":[{"name":"c0","resources":{"limits":{"cpu":"100m","memory":"100"},"requests":{"cpu":"100m","memory":"100"}}}]}"#
    );
    let several = pod(
        vec![container("c0", res("100m", "200m", "", ""), true)],
        vec![container("c1", res("", "", "100", "200"), false), container("c2", res("200m", "", "100", ""), false)],
    );
    assert_eq!(
        resize_completed_message(&several),
        r#"Pod resize completed: {"initContainers":[{"name":"c0","resources":{"limits":{"cpu":"200m"},"requests":{"cpu":"100m"}}}],"containers":[{"name":"c1","resources":{"limits":{"memory":"200"},"requests":{"memory":"100"}}},{"name":"c2","resources":{"requests":{"cpu":"200m","memory":"100"}}}]}"#
    );
    let best_effort = pod(vec![], vec![container("c0", res("", "", "", ""), false)]);
    assert_eq!(
        resize_completed_message(&best_effort),
        r#"Pod resize completed: {"containers":[{"name":"c0","resources":{}}]}"#
    );
}

#[test]
fn a_pod_runs_with_its_allocation_until_a_resize_is_admitted() {
    let mut pod = Pod {
        spec: Some(PodSpec {
            init_containers: Some(vec![
                container("init", res("1", "", "", ""), false),
                container("side", res("100m", "", "", ""), true),
            ]),
            containers: vec![container("app", res("500m", "1", "64Mi", "64Mi"), false)],
            ..Default::default()
        }),
        ..Default::default()
    };
    pod.metadata.uid = Some("u1".into());
    let a = Allocations::new(Arc::new(PodResourceState::in_memory()));
    let pod = Arc::new(pod);
    assert!(!a.allocated_pod(&pod).1, "nothing recorded: the spec as it is");
    a.record(&pod);
    assert_eq!(a.container("u1", "init"), None, "regular init containers are not allocated");
    assert_eq!(a.container("u1", "side"), Some(res("100m", "", "", "")));
    let mut resized = (*pod).clone();
    resized.spec.as_mut().unwrap().containers[0].resources = Some(res("0.5", "2", "67108864", "64Mi"));
    let resized = Arc::new(resized);
    let (allocated, differs) = a.allocated_pod(&resized);
    assert!(differs);
    assert_eq!(allocated.spec.as_ref().unwrap().containers[0].resources, Some(res("500m", "1", "64Mi", "64Mi")));
    assert!(record_resize_operations(Some(&pod), &resized));
    assert!(!record_resize_operations(Some(&pod), &pod));
    let mut same = (*resized).clone();
    same.spec.as_mut().unwrap().containers[0].resources = Some(res("500m", "1000m", "64Mi", "67108864"));
    assert!(!a.allocated_pod(&Arc::new(same)).1, "equal amounts written otherwise are the same allocation");
    a.record(&resized);
    assert!(!a.allocated_pod(&resized).1);
    a.remove("u1");
    assert_eq!(a.container("u1", "app"), None);
}
