//! What a sync must do to a pod (`kuberuntime_manager.go` computePodActions, `computeInitContainerActions`,
//! `pkg/kubelet/container/helpers.go` ShouldContainerBeRestarted, `pkg/kubelet/util/...` PodSandboxChanged).
//! Pure functions of the spec and the runtime status, so they are tested without a runtime.
//!
//! Ephemeral containers (`kubectl debug`) follow upstream's contract: one is started when the runtime has no
//! container of its name in the pod (it never ran), in a sandbox that is up and stays up, even while the pod is
//! still initializing; it is never restarted whatever the restart policy, never killed for a spec change (its
//! spec is immutable, and nothing compares it), and it only stops with the pod. Not started by a sync that
//! (re)creates the sandbox (upstream returns before looking at them) nor by one that kills the pod (upstream
//! still asks the runtime to create it in the sandbox it just stopped, which the runtime refuses; rkubelet does
//! not ask).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_types::probe::{ContainerHealth, ProbeResult, ProbeType};
use kubelet_types::{ContainerState, ContainerStatus, PodStatus, SandboxState};

use crate::config_gen;
use crate::hash::hash_container;

/// Why a container is killed (`containerKillReason`): a probe's own grace period applies to probe kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KillReason {
    /// Any other reason (definition changed, unknown state, pod kill).
    #[default]
    Unknown,
    /// The liveness probe failed.
    LivenessProbe,
    /// The startup probe failed.
    StartupProbe,
}

/// Why a container is to be killed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillInfo {
    /// Container name.
    pub name: String,
    /// Message for the event and log.
    pub message: String,
    /// Reason (decides the grace period).
    pub reason: KillReason,
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
    /// Init containers to start, by index, in spec order: the next regular one, and native sidecars that are not
    /// running.
    pub init_containers_to_start: Vec<usize>,
    /// App containers to start, by index.
    pub containers_to_start: Vec<usize>,
    /// Ephemeral containers to start, by index in `spec.ephemeralContainers` (`EphemeralContainersToStart`).
    pub ephemeral_containers_to_start: Vec<usize>,
    /// Containers to kill, by container ID.
    pub containers_to_kill: BTreeMap<String, KillInfo>,
    /// Running containers whose memory is resized in place, decreases first (`ContainersToUpdate[memory]`).
    pub memory_updates: Vec<crate::resize::ContainerToUpdate>,
    /// Running containers whose CPU is resized in place, decreases first (`ContainersToUpdate[cpu]`).
    pub cpu_updates: Vec<crate::resize::ContainerToUpdate>,
    /// A container is restarted for its resize: the pod cgroup follows (`UpdatePodResources`).
    pub update_pod_resources: bool,
    /// What the runtime was last told of each container resized in place.
    pub current: BTreeMap<String, crate::resize::Amounts>,
}

fn restart_policy(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()).unwrap_or("Always")
}

/// Whether failed containers are restarted (`restartPolicy` is not `Never`).
pub fn should_restart_on_failure(pod: &Pod) -> bool {
    restart_policy(pod) != "Never"
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`).
pub fn is_restartable(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
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

/// Whether any app container was created, running or exited (`hasAnyRegularContainerCreated`).
fn any_regular_container_created(pod: &Pod, status: &PodStatus) -> bool {
    let spec = pod.spec.as_ref();
    spec.into_iter().flat_map(|s| s.containers.iter()).any(|c| {
        status.find_container(&c.name).is_some_and(|s| {
            matches!(s.state, ContainerState::Created | ContainerState::Running | ContainerState::Exited)
        })
    })
}

fn kill(map: &mut BTreeMap<String, KillInfo>, s: &ContainerStatus, message: String, reason: KillReason) {
    map.insert(s.id.clone(), KillInfo { name: s.name.clone(), message, reason });
}

/// The init container actions (`computeInitContainerActions`); returns whether the pod has been initialized.
/// Regular init containers run one at a time in order; a native sidecar counts as initialized once it runs and
/// its startup probe (if any) passed, and is kept running (restarted when it exits, fails its liveness or
/// startup probe, or its definition changed) for the life of the pod.
fn compute_init_actions(pod: &Pod, status: &PodStatus, health: &dyn ContainerHealth, a: &mut PodActions) -> bool {
    let inits = pod.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or(&[]);
    if inits.is_empty() {
        return true;
    }
    let spec = pod.spec.as_ref().expect("init containers imply a spec");
    let mut initialized = spec.containers.iter().any(|c| {
        status
            .find_container(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running))
    });
    let mut previously_initialized = initialized;
    let restart_on_failure = should_restart_on_failure(pod);
    let mut to_start = vec![];
    for (i, c) in inits.iter().enumerate().rev() {
        let sidecar = is_restartable(c);
        let Some(s) = status.find_container(&c.name) else {
            if previously_initialized && sidecar {
                to_start.push(i);
            }
            continue;
        };
        if previously_initialized && !sidecar {
            continue;
        }
        match s.state {
            ContainerState::Created => to_start.push(i),
            ContainerState::Running if sidecar => 'running: {
                if c.startup_probe.is_some() {
                    match health.result(ProbeType::Startup, &s.id) {
                        None | Some(ProbeResult::Unknown) => break 'running,
                        Some(ProbeResult::Failure) => {
                            let m = format!("Init container {} failed startup probe", c.name);
                            kill(&mut a.containers_to_kill, s, m, KillReason::StartupProbe);
                            to_start.push(i);
                            break 'running;
                        }
                        Some(ProbeResult::Success) => {}
                    }
                }
                if i == inits.len() - 1 {
                    initialized = true;
                } else if !previously_initialized {
                    to_start.push(i + 1);
                }
                if s.hash != hash_container(c) {
                    let m = format!("Init container {} definition changed", c.name);
                    kill(&mut a.containers_to_kill, s, m, KillReason::Unknown);
                    to_start.push(i);
                    break 'running;
                }
                if c.liveness_probe.is_some() && health.result(ProbeType::Liveness, &s.id) == Some(ProbeResult::Failure)
                {
                    let m = format!("Init container {} failed liveness probe", c.name);
                    kill(&mut a.containers_to_kill, s, m, KillReason::LivenessProbe);
                    to_start.push(i);
                }
            }
            // A regular init container that runs: wait for it.
            ContainerState::Running => {}
            ContainerState::Exited if sidecar => to_start.push(i),
            ContainerState::Exited => {
                if is_init_container_failed(s) {
                    if !restart_on_failure {
                        a.kill_pod = true;
                        a.init_containers_to_start.clear();
                        return false;
                    }
                    to_start.push(i);
                } else if i == inits.len() - 1 {
                    initialized = true;
                } else {
                    to_start.push(i + 1);
                }
            }
            ContainerState::Unknown => {
                if !sidecar && !restart_on_failure {
                    a.kill_pod = true;
                    a.init_containers_to_start.clear();
                    return false;
                }
                let m = "Init container is in \"unknown\" state, try killing it before restart".to_string();
                kill(&mut a.containers_to_kill, s, m, KillReason::Unknown);
                to_start.push(i);
            }
        }
        previously_initialized = true;
    }
    if !previously_initialized {
        to_start.push(0);
    }
    to_start.reverse();
    to_start.dedup();
    a.init_containers_to_start = to_start;
    initialized
}

/// Computes the actions of a sync (`computePodActions`). `health` holds the liveness and startup results.
pub fn compute_pod_actions(pod: &Pod, status: &PodStatus, health: &dyn ContainerHealth) -> PodActions {
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
        if any_regular_container_created(pod, status) && to_start.is_empty() {
            a.create_sandbox = false;
            return a;
        }
        if spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
            a.init_containers_to_start = vec![0];
            return a;
        }
        a.containers_to_start = to_start;
        return a;
    }

    // Ephemeral containers may start before initialization completes; one that ever ran (any status of its
    // name) is never started again. None starts in a sync that stops the sandbox.
    let ephemerals = || {
        let never_ran = |(_, ec): &(usize, &k8s_openapi::api::core::v1::EphemeralContainer)| {
            status.find_container(&ec.name).is_none()
        };
        spec.ephemeral_containers.iter().flatten().enumerate().filter(never_ran).map(|(i, _)| i).collect()
    };

    let initialized = compute_init_actions(pod, status, health, &mut a);
    if a.kill_pod {
        return a;
    }
    if !initialized {
        a.ephemeral_containers_to_start = ephemerals();
        return a;
    }

    let mut keep = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let s = status.find_container(&c.name);
        let Some(s) = s.filter(|s| s.state == ContainerState::Running) else {
            if should_container_be_restarted(c, pod, status) {
                a.containers_to_start.push(i);
                if let Some(s) = s.filter(|s| s.state == ContainerState::Unknown) {
                    let m = "Container is in \"unknown\" state, try killing it before restart".to_string();
                    kill(&mut a.containers_to_kill, s, m, KillReason::Unknown);
                }
            }
            continue;
        };
        let mut restart = should_restart_on_failure(pod);
        let (message, reason) = if s.hash != hash_container(c) {
            // A changed definition restarts regardless of the restart policy.
            restart = true;
            (format!("Container {} definition changed", c.name), KillReason::Unknown)
        } else if health.result(ProbeType::Liveness, &s.id) == Some(ProbeResult::Failure) {
            (format!("Container {} failed liveness probe", c.name), KillReason::LivenessProbe)
        } else if health.result(ProbeType::Startup, &s.id) == Some(ProbeResult::Failure) {
            (format!("Container {} failed startup probe", c.name), KillReason::StartupProbe)
        } else {
            keep += 1;
            continue;
        };
        let message = if restart {
            a.containers_to_start.push(i);
            format!("{message}, will be restarted")
        } else {
            message
        };
        kill(&mut a.containers_to_kill, s, message, reason);
    }
    if keep == 0 && a.containers_to_start.is_empty() {
        a.kill_pod = true;
        // Native sidecars must not keep a finished pod alive.
        a.init_containers_to_start.clear();
    } else {
        a.ephemeral_containers_to_start = ephemerals();
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, Probe};
    use kubelet_types::SandboxStatus;
    use kubelet_types::probe::NoProbes;
    use std::collections::HashMap;

    /// Probe results by (probe type, container ID).
    #[derive(Default)]
    struct Health(HashMap<(ProbeType, String), ProbeResult>);

    impl ContainerHealth for Health {
        fn result(&self, probe: ProbeType, id: &str) -> Option<ProbeResult> {
            self.0.get(&(probe, id.to_string())).copied()
        }
    }

    fn actions(p: &Pod, st: &PodStatus) -> PodActions {
        compute_pod_actions(p, st, &NoProbes)
    }

    fn pod(policy: &str, inits: &[&str], apps: &[&str]) -> Pod {
        // An init container named `side*` is a native sidecar.
        let mk = |n: &&str| Container {
            name: n.to_string(),
            image: Some("busybox".into()),
            restart_policy: n.starts_with("side").then(|| "Always".to_string()),
            ..Default::default()
        };
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
            resources: None,
        }
    }

    fn running(list: Vec<ContainerStatus>) -> PodStatus {
        PodStatus { sandbox_statuses: vec![sandbox(true)], container_statuses: list, ..Default::default() }
    }

    #[test]
    fn new_pod_creates_sandbox_then_first_init() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let a = actions(&p, &PodStatus::default());
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.init_containers_to_start, vec![0]);
        assert!(a.containers_to_start.is_empty());
        let p2 = pod("Always", &[], &["a", "b"]);
        assert_eq!(actions(&p2, &PodStatus::default()).containers_to_start, vec![0, 1]);
    }

    #[test]
    fn init_containers_run_in_order() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        let mut st = running(vec![]);
        assert_eq!(actions(&p, &st).init_containers_to_start, vec![0], "nothing ran yet in a fresh sandbox");
        st.container_statuses = vec![cs(&p, "i1", ContainerState::Running, 0)];
        let a = actions(&p, &st);
        assert_eq!((a.init_containers_to_start.len(), a.containers_to_start.len()), (0, 0));
        st.container_statuses = vec![cs(&p, "i1", ContainerState::Exited, 0)];
        assert_eq!(actions(&p, &st).init_containers_to_start, vec![1]);
        st.container_statuses = vec![cs(&p, "i2", ContainerState::Exited, 0), cs(&p, "i1", ContainerState::Exited, 0)];
        assert_eq!(actions(&p, &st).containers_to_start, vec![0]);
        // A failed init container is retried under Always, and kills the pod under Never.
        st.container_statuses = vec![cs(&p, "i1", ContainerState::Exited, 1)];
        assert_eq!(actions(&p, &st).init_containers_to_start, vec![0]);
        let never = pod("Never", &["i1"], &["a"]);
        st.container_statuses = vec![cs(&never, "i1", ContainerState::Exited, 1)];
        assert!(actions(&never, &st).kill_pod);
    }

    #[test]
    fn sidecars_start_in_order_stay_running_and_gate_on_their_startup_probe() {
        let mut p = pod("Never", &["side1", "i2", "side3"], &["a"]);
        p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[2].startup_probe = Some(Probe::default());
        // side1 runs: the next init container starts while side1 keeps running.
        let mut st = running(vec![cs(&p, "side1", ContainerState::Running, 0)]);
        assert_eq!(actions(&p, &st).init_containers_to_start, vec![1]);
        st.container_statuses.push(cs(&p, "i2", ContainerState::Exited, 0));
        assert_eq!(actions(&p, &st).init_containers_to_start, vec![2]);
        // side3 runs but its startup probe has not passed: nothing else starts.
        st.container_statuses.push(cs(&p, "side3", ContainerState::Running, 0));
        let a = actions(&p, &st);
        assert!(a.init_containers_to_start.is_empty() && a.containers_to_start.is_empty(), "{a:?}");
        let mut h = Health::default();
        h.0.insert((ProbeType::Startup, "id-side3".into()), ProbeResult::Success);
        assert_eq!(compute_pod_actions(&p, &st, &h).containers_to_start, vec![0]);
        // Once the app runs, a sidecar that exits is restarted even under restartPolicy Never.
        st.container_statuses = vec![
            cs(&p, "a", ContainerState::Running, 0),
            cs(&p, "side1", ContainerState::Exited, 1),
            cs(&p, "i2", ContainerState::Exited, 0),
            cs(&p, "side3", ContainerState::Running, 0),
        ];
        let a = compute_pod_actions(&p, &st, &h);
        assert_eq!(a.init_containers_to_start, vec![0]);
        assert!(!a.kill_pod);
        // The app finished (a Job): the pod is killed and the sidecars are not restarted.
        st.container_statuses[0] = cs(&p, "a", ContainerState::Exited, 0);
        let a = compute_pod_actions(&p, &st, &h);
        assert!(a.kill_pod && a.init_containers_to_start.is_empty(), "{a:?}");
    }

    #[test]
    fn probe_failures_restart_running_containers() {
        let p = pod("Always", &[], &["a", "b"]);
        let st = running(vec![cs(&p, "a", ContainerState::Running, 0), cs(&p, "b", ContainerState::Running, 0)]);
        let mut h = Health::default();
        h.0.insert((ProbeType::Liveness, "id-a".into()), ProbeResult::Failure);
        h.0.insert((ProbeType::Startup, "id-b".into()), ProbeResult::Failure);
        let a = compute_pod_actions(&p, &st, &h);
        assert_eq!(a.containers_to_start, vec![0, 1]);
        assert_eq!(a.containers_to_kill["id-a"].message, "Container a failed liveness probe, will be restarted");
        assert_eq!(a.containers_to_kill["id-a"].reason, KillReason::LivenessProbe);
        assert_eq!(a.containers_to_kill["id-b"].reason, KillReason::StartupProbe);
        // Under Never the container is killed and not started again.
        let never = pod("Never", &[], &["a"]);
        let st = running(vec![cs(&never, "a", ContainerState::Running, 0)]);
        let a = compute_pod_actions(&never, &st, &h);
        assert!(a.containers_to_start.is_empty());
        assert_eq!(a.containers_to_kill["id-a"].message, "Container a failed liveness probe");
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
            let st = running(vec![cs(&p, "a", ContainerState::Exited, code), cs(&p, "b", ContainerState::Running, 0)]);
            let a = actions(&p, &st);
            assert_eq!(a.containers_to_start == vec![0], restart, "{policy} exit {code}");
            assert!(!a.kill_pod);
        }
        // Nothing left to run under Never: the pod is killed (sandbox stopped).
        let p = pod("Never", &[], &["a"]);
        let st = running(vec![cs(&p, "a", ContainerState::Exited, 0)]);
        assert!(actions(&p, &st).kill_pod);
    }

    #[test]
    fn changed_spec_replaces_container_and_dead_sandbox_is_recreated() {
        let p = pod("Always", &[], &["a"]);
        let mut r = cs(&p, "a", ContainerState::Running, 0);
        r.hash = 1;
        let a = actions(&p, &running(vec![r]));
        assert_eq!(a.containers_to_start, vec![0]);
        assert!(a.containers_to_kill.contains_key("id-a"));
        let st = PodStatus { sandbox_statuses: vec![sandbox(false)], ..Default::default() };
        let a = actions(&p, &st);
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!((a.attempt, a.sandbox_id.as_str()), (1, "s1"));
    }

    fn with_debugger(mut p: Pod, target: Option<&str>) -> Pod {
        let ec = k8s_openapi::api::core::v1::EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox".into()),
            target_container_name: target.map(str::to_string),
            ..Default::default()
        };
        p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![ec]);
        p
    }

    fn debugger_status(state: ContainerState, code: i32) -> ContainerStatus {
        ContainerStatus {
            id: "id-debugger".into(),
            name: "debugger".into(),
            state,
            created_at: 3,
            started_at: 3,
            finished_at: 4,
            exit_code: code,
            image: "busybox".into(),
            image_ref: "sha".into(),
            hash: 0,
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            log_path: String::new(),
            resources: None,
        }
    }

    #[test]
    fn ephemeral_containers_start_once_and_are_never_restarted() {
        for policy in ["Always", "OnFailure", "Never"] {
            let p = with_debugger(pod(policy, &[], &["a"]), Some("a"));
            let mut st = running(vec![cs(&p, "a", ContainerState::Running, 0)]);
            let a = actions(&p, &st);
            assert_eq!(a.ephemeral_containers_to_start, vec![0], "{policy}: never ran");
            assert!(a.containers_to_start.is_empty() && a.containers_to_kill.is_empty() && !a.kill_pod);
            for (state, code) in [
                (ContainerState::Created, 0),
                (ContainerState::Running, 0),
                (ContainerState::Exited, 0),
                (ContainerState::Exited, 1),
                (ContainerState::Unknown, 0),
            ] {
                st.container_statuses = vec![debugger_status(state, code), cs(&p, "a", ContainerState::Running, 0)];
                let a = actions(&p, &st);
                assert!(a.ephemeral_containers_to_start.is_empty(), "{policy}: {state:?} {code} is not started again");
                assert!(a.containers_to_kill.is_empty(), "{policy}: an ephemeral container is never killed by a sync");
                assert!(!a.kill_pod, "{policy}: the app still runs");
            }
        }
    }

    #[test]
    fn ephemeral_containers_start_during_initialization_but_not_in_a_new_or_stopped_sandbox() {
        // An init container still runs: the debugger starts anyway.
        let p = with_debugger(pod("Always", &["i1"], &["a"]), Some("i1"));
        let st = running(vec![cs(&p, "i1", ContainerState::Running, 0)]);
        let a = actions(&p, &st);
        assert_eq!(a.ephemeral_containers_to_start, vec![0]);
        assert!(a.init_containers_to_start.is_empty() && a.containers_to_start.is_empty());
        // A sandbox to (re)create: nothing but the sandbox and the first container.
        let a = actions(&p, &PodStatus::default());
        assert!(a.create_sandbox && a.ephemeral_containers_to_start.is_empty(), "{a:?}");
        // The pod is being stopped (nothing left to run under Never): no debugger joins the stopped sandbox.
        let never = with_debugger(pod("Never", &[], &["a"]), None);
        let a = actions(&never, &running(vec![cs(&never, "a", ContainerState::Exited, 0)]));
        assert!(a.kill_pod && a.ephemeral_containers_to_start.is_empty(), "{a:?}");
        // A failed init container of a Never pod kills the pod: same.
        let init_failed = with_debugger(pod("Never", &["i1"], &["a"]), None);
        let a = actions(&init_failed, &running(vec![cs(&init_failed, "i1", ContainerState::Exited, 1)]));
        assert!(a.kill_pod && a.ephemeral_containers_to_start.is_empty(), "{a:?}");
    }
}
