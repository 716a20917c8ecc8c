use super::*;
use k8s_openapi::api::core::v1::{ContainerResizePolicy, PodSpec};
use kubelet_types::{ContainerStatus, SandboxState, SandboxStatus};

fn req(cpu: &str, mem: &str) -> ResourceRequirements {
    let m = |c: &str, m: &str| {
        Some([("cpu".to_string(), Quantity(c.into())), ("memory".to_string(), Quantity(m.into()))].into())
    };
    ResourceRequirements { requests: m(cpu, mem), limits: m(cpu, mem), claims: None }
}

fn container(name: &str, r: ResourceRequirements) -> Container {
    Container { name: name.into(), image: Some("busybox".into()), resources: Some(r), ..Default::default() }
}

fn pod(containers: Vec<Container>) -> Pod {
    let mut p = Pod { spec: Some(PodSpec { containers, ..Default::default() }), ..Default::default() };
    p.metadata.uid = Some("u1".into());
    p
}

fn running(p: &Pod) -> PodStatus {
    let sandbox = SandboxStatus {
        id: "s1".into(),
        state: SandboxState::Ready,
        created_at: 1,
        attempt: 0,
        ips: vec!["10.88.0.2".into()],
        host_network: false,
    };
    let statuses = p.spec.as_ref().unwrap().containers.iter().map(|c| ContainerStatus {
        id: format!("id-{}", c.name),
        name: c.name.clone(),
        state: ContainerState::Running,
        created_at: 1,
        started_at: 1,
        finished_at: 0,
        exit_code: 0,
        image: "busybox".into(),
        image_ref: "sha".into(),
        hash: crate::hash::hash_container(c),
        restart_count: 0,
        reason: String::new(),
        message: String::new(),
        log_path: String::new(),
        resources: None,
    });
    PodStatus { sandbox_statuses: vec![sandbox], container_statuses: statuses.collect(), ..Default::default() }
}

fn resize(p: &Pod, actuated: &[(&str, ResourceRequirements)]) -> PodActions {
    let st = running(p);
    let mut a = crate::actions::compute_pod_actions(p, &st, &kubelet_types::probe::NoProbes);
    let map: BTreeMap<_, _> = actuated.iter().cloned().map(|(k, v)| (k.to_string(), v)).collect();
    compute_resize_actions(p, &st, &|c| map.get(c).cloned(), &mut a);
    a
}

#[test]
fn decreases_come_before_increases_and_cpu_and_memory_are_listed_apart() {
    let p = pod(vec![container("grow", req("2", "256Mi")), container("shrink", req("500m", "64Mi"))]);
    let a = resize(&p, &[("grow", req("1", "128Mi")), ("shrink", req("1", "128Mi"))]);
    let names = |l: &[ContainerToUpdate]| l.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a.memory_updates), ["shrink", "grow"]);
    assert_eq!(names(&a.cpu_updates), ["shrink", "grow"]);
    assert!(a.containers_to_kill.is_empty() && a.containers_to_start.is_empty() && !a.update_pod_resources);
    assert_eq!(
        a.current["grow"],
        Amounts { memory_limit: 128 << 20, memory_request: 128 << 20, cpu_limit: 1000, cpu_request: 1000 }
    );
    let unchanged = resize(&p, &[("grow", req("2000m", "256Mi")), ("shrink", req("0.5", "64Mi"))]);
    assert!(unchanged.memory_updates.is_empty() && unchanged.cpu_updates.is_empty(), "equal amounts however written");
}

#[test]
fn a_resize_policy_of_restart_container_restarts_only_for_its_resource() {
    let mut c = container("app", req("2", "128Mi"));
    c.resize_policy =
        Some(vec![ContainerResizePolicy { resource_name: "memory".into(), restart_policy: "RestartContainer".into() }]);
    let p = pod(vec![c]);
    let cpu_only = resize(&p, &[("app", req("1", "128Mi"))]);
    assert_eq!(cpu_only.cpu_updates.len(), 1);
    assert!(cpu_only.containers_to_kill.is_empty());
    let mut c = container("app", req("1", "256Mi"));
    c.resize_policy = p.spec.as_ref().unwrap().containers[0].resize_policy.clone();
    let p = pod(vec![c]);
    let memory = resize(&p, &[("app", req("1", "128Mi"))]);
    assert_eq!(memory.containers_to_kill["id-app"].message, "Container app resize requires restart");
    assert_eq!(memory.containers_to_start, [0]);
    assert!(memory.update_pod_resources && memory.memory_updates.is_empty());
}

#[test]
fn static_pods_and_stopped_containers_are_not_resized_and_progress_compares_running_containers() {
    let mut p = pod(vec![container("app", req("2", "128Mi"))]);
    let old = [("app", req("1", "128Mi"))];
    assert!(!resize(&p, &old).cpu_updates.is_empty());
    let st = running(&p);
    assert!(is_pod_resize_in_progress(&p, &st, &|_| Some(req("1", "128Mi"))));
    assert!(!is_pod_resize_in_progress(&p, &st, &|_| Some(req("2000m", "128Mi"))));
    let mut exited = st.clone();
    exited.container_statuses[0].state = ContainerState::Exited;
    assert!(!is_pod_resize_in_progress(&p, &exited, &|_| Some(req("1", "128Mi"))));
    p.metadata.annotations = Some([(kubelet_types::labels::CONFIG_SOURCE.to_string(), "file".to_string())].into());
    assert!(resize(&p, &old).cpu_updates.is_empty());
    assert_eq!(resize_allowed(&p), Err(("In-place resize of static-pods is not supported", "static_pod")));
}

#[test]
fn runtime_figures_convert_as_upstream_and_gaps_come_from_the_actuated_record() {
    let linux = |shares, quota, period, mem| kubelet_cri::api::ContainerResources {
        linux: Some(kubelet_cri::api::LinuxContainerResources {
            cpu_shares: shares,
            cpu_quota: quota,
            cpu_period: period,
            memory_limit_in_bytes: mem,
            ..Default::default()
        }),
        ..Default::default()
    };
    let r = from_runtime(Some(&linux(512, 50_000, 100_000, 64 << 20))).unwrap();
    assert_eq!((r.cpu_request_milli, r.cpu_limit_milli, r.memory_limit), (Some(500), Some(500), Some(64 << 20)));
    assert_eq!(from_runtime(Some(&linux(2, -1, 100_000, 0))).unwrap().cpu_request_milli, Some(2));
    assert_eq!(from_runtime(Some(&linux(0, 0, 0, 0))), None);
    assert_eq!(shares_to_milli_cpu(1), 0);
    let filled = fill_from_actuated(Some(r), Some(&req("500m", "32Mi"))).unwrap();
    assert_eq!(filled.memory_request, Some(32 << 20));
    let whole = fill_from_actuated(None, Some(&req("250m", "32Mi"))).unwrap();
    assert_eq!((whole.cpu_request_milli, whole.memory_limit), (Some(250), Some(32 << 20)));
    let c = container_for_update(
        &container("app", req("1", "1Gi")),
        Resource::Cpu,
        Amounts::of(Some(&req("1500m", "0"))),
        Amounts::of(Some(&req("1", "64Mi"))),
    );
    let r = c.resources.unwrap();
    assert_eq!(r.limits.unwrap()["cpu"].0, "1500m");
    assert_eq!(r.requests.unwrap()["memory"].0, "64Mi");
    assert_eq!(aggregate(&["a".into()]), "a");
    assert_eq!(aggregate(&["a".into(), "b".into()]), "[a, b]");
}
