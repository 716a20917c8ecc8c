//! A container status's `resources` and `allocatedResources` (`kubelet_pods.go` convertContainerStatusResources, with
//! InPlacePodVerticalScaling on, its default): the allocated resources, with the CPU and memory the runtime reports
//! for a running container in their place; a container that does not run shows what was allocated. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kubelet_runtime::resize::{MIN_MILLI_CPU_LIMIT, MIN_SHARES};
use kubelet_types::quantity::{binary_si, milli_string, parse_quantity};
use kubelet_types::{ContainerState, ContainerStatus};

fn milli(list: &BTreeMap<String, Quantity>, name: &str) -> i64 {
    list.get(name).and_then(|q| parse_quantity(&q.0)).map(kubelet_types::qos::milli_value).unwrap_or(0)
}

/// `status.resources` of `allocated` (the container as allocated) given its newest runtime instance.
pub fn status_resources(allocated: &Container, current: Option<&ContainerStatus>) -> ResourceRequirements {
    let mut r = allocated.resources.clone().unwrap_or_default();
    let Some(cs) = current.filter(|c| c.state == ContainerState::Running) else { return r };
    let Some(actual) = cs.resources else { return r };
    if let Some(limits) = r.limits.as_mut() {
        // Both at or below the smallest effective limit: the allocated value stays, to avoid confusion.
        if let Some(cpu) = actual.cpu_limit_milli
            && (cpu > MIN_MILLI_CPU_LIMIT || milli(limits, "cpu") > MIN_MILLI_CPU_LIMIT)
        {
            limits.insert("cpu".into(), Quantity(milli_string(cpu)));
        }
        if let Some(mem) = actual.memory_limit {
            limits.insert("memory".into(), Quantity(binary_si(mem)));
        }
    }
    if let Some(requests) = r.requests.as_mut() {
        if let Some(cpu) = actual.cpu_request_milli
            && (cpu > MIN_SHARES || milli(requests, "cpu") > MIN_SHARES)
        {
            requests.insert("cpu".into(), Quantity(milli_string(cpu)));
        }
        if let Some(mem) = actual.memory_request {
            requests.insert("memory".into(), Quantity(binary_si(mem)));
        }
    }
    r
}

/// `status.allocatedResources`: the allocated requests.
pub fn allocated_resources(allocated: &Container) -> Option<BTreeMap<String, Quantity>> {
    allocated.resources.as_ref()?.requests.clone().filter(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_container_shows_what_the_runtime_has_and_a_stopped_one_what_was_allocated() {
        let q = |v: &[(&str, &str)]| Some(v.iter().map(|(k, q)| (k.to_string(), Quantity(q.to_string()))).collect());
        let c = Container {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                limits: q(&[("cpu", "1"), ("memory", "256Mi")]),
                requests: q(&[("cpu", "500m"), ("memory", "128Mi"), ("ephemeral-storage", "1Gi")]),
                claims: None,
            }),
            ..Default::default()
        };
        let mut cs = ContainerStatus {
            id: "c1".into(),
            name: "app".into(),
            state: ContainerState::Running,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            image: String::new(),
            image_ref: String::new(),
            hash: 0,
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            log_path: String::new(),
            resources: Some(kubelet_types::ContainerResources {
                cpu_request_milli: Some(250),
                cpu_limit_milli: Some(2000),
                memory_request: Some(64 << 20),
                memory_limit: Some(512 << 20),
            }),
        };
        let r = status_resources(&c, Some(&cs));
        assert_eq!(r.limits, q(&[("cpu", "2"), ("memory", "512Mi")]));
        assert_eq!(r.requests, q(&[("cpu", "250m"), ("ephemeral-storage", "1Gi"), ("memory", "64Mi")]));
        cs.state = ContainerState::Exited;
        assert_eq!(status_resources(&c, Some(&cs)), c.resources.clone().unwrap());
        assert_eq!(allocated_resources(&c).unwrap()["cpu"].0, "500m");
        let best_effort = Container { name: "be".into(), ..Default::default() };
        assert_eq!(status_resources(&best_effort, None), ResourceRequirements::default());
        assert_eq!(allocated_resources(&best_effort), None);
    }
}
