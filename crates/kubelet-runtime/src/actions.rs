//! What a sync must do to a pod (`kuberuntime_manager.go` computePodActions, `findNextInitContainerToRun`,
//! `pkg/kubelet/container/helpers.go` ShouldContainerBeRestarted, `pkg/kubelet/util/...` PodSandboxChanged).
//! Pure functions of the spec and the runtime status, so they are tested without a runtime.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_types::{ContainerState, ContainerStatus, PodStatus, SandboxState};

use crate::config_gen;
use crate::hash::hash_container;

/// Why a container is to be killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillInfo {
    /// Container name.
    pub name: String,
    /// Message for the event and log.
    pub message: String,
}

/// The actions of one sync.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodActions {
    /// Kill every container and the sandbox first.
    pub kill_pod: bool,
    /// Create a new sandbox.
    pub create_sandbox: bool,
    /// The current sandbox (to reuse, or to kill).
    pub sandbox_id: String,
    /// Attempt number of the sandbox to create.
    pub attempt: u32,
    /// The next init container to start, by index.
    pub next_init_container: Option<usize>,
    /// App containers to start, by index.
    pub containers_to_start: Vec<usize>,
    /// Containers to kill, by container ID.
    pub containers_to_kill: BTreeMap<String, KillInfo>,
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always")
}

/// Whether failed containers are restarted (`restartPolicy` is not `Never`).
pub fn should_restart_on_failure(pod: &Pod) -> bool {
    restart_policy(pod) != "Never"
}

fn succeeded(c: &Container, status: &PodStatus) -> bool {
    status.find_container(&c.name).is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0)
}

/// Whether a sandbox must be (re)created, with the attempt number and the current sandbox ID.
pub fn sandbox_changed(pod: &Pod, status: &PodStatus) -> (bool, u32, String) {
    let Some(newest) = status.sandbox_statuses.first() else { return (true, 0, String::new()) };
    let ready = status.sandbox_statuses.iter().filter(|s| s.state == SandboxState::Ready).count();
    let next = newest.attempt + 1;
    if ready > 1 || newest.state != SandboxState::Ready {
        return (true, next, newest.id.clone());
    }
    let host_net = config_gen::host_network(pod);
    if newest.host_network != host_net {
        return (true, next, String::new());
    }
    if !host_net && newest.ips.is_empty() {
        return (true, next, newest.id.clone());
    }
    (false, newest.attempt, newest.id.clone())
}

/// Whether a non-running container is to be started again (`ShouldContainerBeRestarted`).
pub fn should_container_be_restarted(c: &Container, pod: &Pod, status: &PodStatus) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(s) = status.find_container(&c.name) else { return true };
    match s.state {
        ContainerState::Running => false,
        ContainerState::Unknown | ContainerState::Created => true,
        ContainerState::Exited => match restart_policy(pod) {
            "Never" => false,
            "OnFailure" => s.exit_code != 0,
            _ => true,
        },
    }
}

/// Whether an init container's latest instance failed.
pub fn is_init_container_failed(s: &ContainerStatus) -> bool {
    match s.state {
        ContainerState::Exited => s.exit_code != 0,
        ContainerState::Unknown => true,
        _ => false,
    }
}

/// Progress of the init containers: the last failed status, the next to run, and whether all are done.
pub fn next_init_container<'a>(
    pod: &'a Pod,
    status: &'a PodStatus,
) -> (Option<&'a ContainerStatus>, Option<usize>, bool) {
    let Some(spec) = pod.spec.as_ref() else { return (None, None, true) };
    let inits = spec.init_containers.as_deref().unwrap_or(&[]);
    if inits.is_empty() {
        return (None, None, true);
    }
    // A running app container means initialization finished earlier.
    if spec
        .containers
        .iter()
        .any(|c| status.find_container(&c.name).is_some_and(|s| s.state == ContainerState::Running))
    {
        return (None, None, true);
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if let Some(s) = status.find_container(&c.name)
            && is_init_container_failed(s)
        {
            return (Some(s), Some(i), false);
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(s) = status.find_container(&c.name) else { continue };
        match s.state {
            ContainerState::Running => return (None, None, false),
            ContainerState::Exited => {
                return if i == inits.len() - 1 { (None, None, true) } else { (None, Some(i + 1), false) };
            }
            _ => {}
        }
    }
    (None, Some(0), false)
}

/// Computes the actions of a sync (`computePodActions`).
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus) -> PodActions {
    let spec = pod.spec.clone().unwrap_or_default();
    let (create, attempt, sandbox_id) = sandbox_changed(pod, status);
    let mut a = PodActions { kill_pod: create, create_sandbox: create, sandbox_id, attempt, ..Default::default() };
    if create {
        if !should_restart_on_failure(pod) && attempt != 0 && !status.container_statuses.is_empty() {
            // A pod that never restarts does not get a new sandbox once it has run.
            a.create_sandbox = false;
            return a;
        }
        let to_start: Vec<usize> = spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !(restart_policy(pod) == "OnFailure" && succeeded(c, status)))
            .map(|(i, _)| i)
            .collect();
        if to_start.is_empty() {
            a.create_sandbox = false;
            return a;
        }
        if spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
            a.next_init_container = Some(0);
            return a;
        }
        a.containers_to_start = to_start;
        return a;
    }

    let (last_failed, next, done) = next_init_container(pod, status);
    if !done {
        if let Some(next) = next {
            if last_failed.is_some() && !should_restart_on_failure(pod) {
                a.kill_pod = true;
            } else {
                if let Some(s) = last_failed.filter(|s| s.state == ContainerState::Unknown) {
                    a.containers_to_kill.insert(
                        s.id.clone(),
                        KillInfo {
                            name: s.name.clone(),
                            message: "Init container is in unknown state, try killing it before restart".into(),
                        },
                    );
                }
                a.next_init_container = Some(next);
            }
        }
        return a;
    }

    let mut keep = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let s = status.find_container(&c.name);
        match s {
            Some(s) if s.state == ContainerState::Running => {
                if s.hash != hash_container(c) {
                    a.containers_to_kill.insert(
                        s.id.clone(),
                        KillInfo {
                            name: c.name.clone(),
                            message: format!("Container {} definition changed, will be restarted", c.name),
                        },
                    );
                    a.containers_to_start.push(i);
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_container_be_restarted(c, pod, status) {
                    a.containers_to_start.push(i);
                    if let Some(s) = s.filter(|s| s.state == ContainerState::Unknown) {
                        a.containers_to_kill.insert(
                            s.id.clone(),
                            KillInfo {
                                name: c.name.clone(),
                                message: "Container is in unknown state, try killing it before removal".into(),
                            },
                        );
                    }
                }
            }
        }
    }
    if keep == 0 && a.containers_to_start.is_empty() {
        a.kill_pod = true;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use kubelet_types::SandboxStatus;

    fn pod(policy: &str, inits: &[&str], apps: &[&str]) -> Pod {
        let mk = |n: &&str| Container { name: n.to_string(), image: Some("busybox".into()), ..Default::default() };
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(inits.iter().map(mk).collect()),
                containers: apps.iter().map(mk).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sandbox(ready: bool) -> SandboxStatus {
        SandboxStatus {
            id: "s1".into(),
            state: if ready { SandboxState::Ready } else { SandboxState::NotReady },
            created_at: 1,
            attempt: 0,
            ips: vec!["10.88.0.2".into()],
            host_network: false,
        }
    }

    fn cs(p: &Pod, name: &str, state: ContainerState, code: i32) -> ContainerStatus {
        let spec = p.spec.as_ref().unwrap();
        let c = spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name).unwrap();
        ContainerStatus {
            id: format!("id-{name}"),
            name: name.into(),
            state,
            created_at: 1,
            started_at: 1,
            finished_at: 2,
            exit_code: code,
            image: "busybox".into(),
            image_ref: "sha".into(),
            hash: hash_container(c),
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            log_path: String::new(),
        }
    }

    #[test]
    fn new_pod_creates_sandbox_then_first_init() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let a = compute_pod_actions(&p, &PodStatus::default());
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.next_init_container, Some(0));
        assert!(a.containers_to_start.is_empty());
        let p2 = pod("Always", &[], &["a", "b"]);
        assert_eq!(compute_pod_actions(&p2, &PodStatus::default()).containers_to_start, vec![0, 1]);
    }

    #[test]
    fn init_containers_run_in_order() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let mut st = PodStatus { sandbox_statuses: vec![sandbox(true)], ..Default::default() };
        st.container_statuses = vec![cs(&p, "i1", ContainerState::Running, 0)];
        let a = compute_pod_actions(&p, &st);
        assert_eq!((a.next_init_container, a.containers_to_start.len()), (None, 0));
        st.container_statuses = vec![cs(&p, "i1", ContainerState::Exited, 0)];
        assert_eq!(compute_pod_actions(&p, &st).next_init_container, Some(1));
        st.container_statuses = vec![cs(&p, "i2", ContainerState::Exited, 0), cs(&p, "i1", ContainerState::Exited, 0)];
        assert_eq!(compute_pod_actions(&p, &st).containers_to_start, vec![0]);
        // A failed init container is retried under Always, and kills the pod under Never.
        st.container_statuses = vec![cs(&p, "i1", ContainerState::Exited, 1)];
        assert_eq!(compute_pod_actions(&p, &st).next_init_container, Some(0));
        let never = pod("Never", &["i1"], &["a"]);
        st.container_statuses = vec![cs(&never, "i1", ContainerState::Exited, 1)];
        assert!(compute_pod_actions(&never, &st).kill_pod);
    }

    #[test]
    fn restart_policies() {
        for (policy, code, restart) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 1, false),
        ] {
            let p = pod(policy, &[], &["a", "b"]);
            let st = PodStatus {
                sandbox_statuses: vec![sandbox(true)],
                container_statuses: vec![
                    cs(&p, "a", ContainerState::Exited, code),
                    cs(&p, "b", ContainerState::Running, 0),
                ],
                ..Default::default()
            };
            let a = compute_pod_actions(&p, &st);
            assert_eq!(a.containers_to_start == vec![0], restart, "{policy} exit {code}");
            assert!(!a.kill_pod);
        }
        // Nothing left to run under Never: the pod is killed (sandbox stopped).
        let p = pod("Never", &[], &["a"]);
        let st = PodStatus {
            sandbox_statuses: vec![sandbox(true)],
            container_statuses: vec![cs(&p, "a", ContainerState::Exited, 0)],
            ..Default::default()
        };
        assert!(compute_pod_actions(&p, &st).kill_pod);
    }

    #[test]
    fn changed_spec_replaces_container_and_dead_sandbox_is_recreated() {
        let p = pod("Always", &[], &["a"]);
        let mut running = cs(&p, "a", ContainerState::Running, 0);
        running.hash = 1;
        let st = PodStatus {
            sandbox_statuses: vec![sandbox(true)],
            container_statuses: vec![running],
            ..Default::default()
        };
        let a = compute_pod_actions(&p, &st);
        assert_eq!(a.containers_to_start, vec![0]);
        assert!(a.containers_to_kill.contains_key("id-a"));
        let st = PodStatus { sandbox_statuses: vec![sandbox(false)], ..Default::default() };
        let a = compute_pod_actions(&p, &st);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!((a.attempt, a.sandbox_id.as_str()), (1, "s1"));
    }
}
