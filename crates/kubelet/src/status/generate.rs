//! The API status of a pod from its runtime status (`generateAPIPodStatus`, `convertToAPIContainerStatuses`,
//! `getPhase`, `GeneratePodReadyCondition`, ...). Pure: the same inputs give the same status.
//!
//! `ephemeralContainerStatuses` are built as upstream's `convertStatusToAPIStatus` builds them: the same
//! conversion as app containers (state, `lastState`, image, imageID, containerID, restart count; the waiting
//! reason of one not created yet is `PodInitializing` in a pod with init containers, else `ContainerCreating`;
//! a failed start shows its reason), sorted by name, never `ready` nor `started` (the prober sets those only
//! for app and init containers), and absent when the pod has none. They count in no condition nor the phase.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus as ApiContainerStatus, HostIP, PodCondition, PodIP, PodStatus as ApiPodStatus, VolumeMountStatus,
};
use kubelet_runtime::ReasonCache;
use kubelet_runtime::actions::should_container_be_restarted;
use kubelet_runtime::qos::pod_qos;
use kubelet_types::clock::api_time;
use kubelet_types::pod_update::{ephemeral_containers, is_restartable_init_container};
use kubelet_types::probe::PodProbeStatus;
use kubelet_types::{ContainerState, ContainerStatus, Pod, PodStatus, PodUid, SandboxState};

/// What the status computation needs besides the pod.
#[derive(Clone, Copy)]
pub struct StatusInputs<'a> {
    /// The runtime's view of the pod.
    pub runtime: &'a PodStatus,
    /// Start failures of containers.
    pub reasons: &'a ReasonCache,
    /// Runtime name for container IDs (`containerd`).
    pub runtime_name: &'a str,
    /// The node's IPs.
    pub host_ips: &'a [String],
    /// Whether the pod has finished (no more containers will run).
    pub pod_is_terminal: bool,
    /// Probe results: `started` and `ready` of each container.
    pub probes: &'a dyn PodProbeStatus,
    /// The pod ran longer than its `activeDeadlineSeconds`: it fails with `DeadlineExceeded`.
    pub deadline_exceeded: bool,
    /// Whether the pod's runtime handler makes recursive read-only mounts (for `volumeMounts[].recursiveReadOnly`).
    pub supports_recursive_read_only: bool,
    /// The pod's resize conditions (none once it is terminal), listed first as upstream.
    pub resize_conditions: &'a [PodCondition],
}

/// The container's mounts as its status reports them (`status.VolumeMounts`, set from the spec since the CRI does
/// not know volume names): each read-only one with the recursive read-only mode it got, `Disabled` where the mode
/// cannot be resolved (the container then never started).
fn volume_mount_statuses(c: &Container, supports_rro: bool) -> Option<Vec<VolumeMountStatus>> {
    let mounts = c.volume_mounts.as_deref().filter(|m| !m.is_empty())?;
    let status = |m: &k8s_openapi::api::core::v1::VolumeMount| {
        let read_only = m.read_only.unwrap_or(false);
        let rro = read_only.then(|| {
            let on = kubelet_runtime::runtime_handlers::resolve_recursive_read_only(m, supports_rro).unwrap_or(false);
            if on { "Enabled" } else { "Disabled" }.to_string()
        });
        VolumeMountStatus {
            name: m.name.clone(),
            mount_path: m.mount_path.clone(),
            read_only: Some(read_only),
            recursive_read_only: rro,
        }
    };
    Some(mounts.iter().map(status).collect())
}

/// The reason of a pod that outlived its `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Its message.
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

fn time_of(ns: i64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    (ns > 0).then(|| api_time(UNIX_EPOCH + Duration::from_nanos(ns as u64)))
}

fn terminated(cs: &ContainerStatus, runtime_name: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: cs.exit_code,
        reason: (!cs.reason.is_empty()).then(|| cs.reason.clone()),
        message: (!cs.message.is_empty()).then(|| cs.message.clone()),
        started_at: time_of(cs.started_at),
        finished_at: time_of(cs.finished_at),
        container_id: Some(format!("{runtime_name}://{}", cs.id)),
        signal: None,
    }
}

fn waiting(reason: &str, message: Option<String>) -> ApiState {
    ApiState { waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), message }), ..Default::default() }
}

fn container_statuses(
    pod: &Pod,
    containers: &[Container],
    inputs: &StatusInputs<'_>,
    is_init: bool,
    default_waiting: &str,
) -> Vec<ApiContainerStatus> {
    let uid = PodUid(pod.metadata.uid.clone().unwrap_or_default());
    let mut by_name: HashMap<&str, Vec<&ContainerStatus>> = HashMap::new();
    for cs in &inputs.runtime.container_statuses {
        by_name.entry(cs.name.as_str()).or_default().push(cs);
    }
    containers
        .iter()
        .map(|c| {
            let instances = by_name.get(c.name.as_str()).cloned().unwrap_or_default();
            let mut s = ApiContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                image_id: String::new(),
                ready: false,
                restart_count: 0,
                state: Some(waiting(default_waiting, None)),
                volume_mounts: volume_mount_statuses(c, inputs.supports_recursive_read_only),
                ..Default::default()
            };
            if let Some(cur) = instances.first() {
                s.container_id = Some(format!("{}://{}", inputs.runtime_name, cur.id));
                s.image_id = cur.image_ref.clone();
                if !cur.image.is_empty() {
                    s.image = cur.image.clone();
                }
                s.restart_count = cur.restart_count;
                s.state = Some(match cur.state {
                    ContainerState::Running => ApiState {
                        running: Some(ContainerStateRunning { started_at: time_of(cur.started_at) }),
                        ..Default::default()
                    },
                    ContainerState::Exited => {
                        ApiState { terminated: Some(terminated(cur, inputs.runtime_name)), ..Default::default() }
                    }
                    // Created, or a state the runtime cannot tell: waiting, without a reason (as upstream, an
                    // unknown state never counts as a failure of the pod).
                    ContainerState::Created | ContainerState::Unknown => {
                        ApiState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() }
                    }
                });
                if let Some(prev) = instances.get(1).filter(|p| p.state == ContainerState::Exited) {
                    s.last_state = Some(ApiState {
                        terminated: Some(terminated(prev, inputs.runtime_name)),
                        ..Default::default()
                    });
                }
                // `started` and `ready` come from the probes (see PodProbeStatus); a regular init container is
                // ready once it succeeded.
                s.ready = is_init
                    && !is_restartable_init_container(pod, &c.name)
                    && cur.state == ContainerState::Exited
                    && cur.exit_code == 0;
            }
            s.resources = Some(super::resources::status_resources(c, instances.first().copied()));
            s.allocated_resources = super::resources::allocated_resources(c);
            // A container that will be started again shows why it waits (CrashLoopBackOff, ErrImagePull, ...).
            let succeeded_init =
                is_init && instances.first().is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0);
            if !succeeded_init
                && !inputs.pod_is_terminal
                && should_container_be_restarted(c, pod, inputs.runtime)
                && let Some(r) = inputs.reasons.get(&uid, &c.name)
            {
                if s.state.as_ref().is_some_and(|st| st.terminated.is_some()) {
                    s.last_state = s.state.take();
                }
                s.state = Some(waiting(&r.reason, Some(r.message)));
            }
            s
        })
        .collect()
}

fn find<'a>(list: &'a [ApiContainerStatus], name: &str) -> Option<&'a ApiContainerStatus> {
    list.iter().find(|s| s.name == name)
}

fn last_terminated(s: &ApiContainerStatus) -> Option<&ContainerStateTerminated> {
    s.last_state.as_ref().and_then(|l| l.terminated.as_ref())
}

/// The pod phase (`getPhase`). Native sidecars count as running containers once started; a stopped sidecar never
/// makes a pod fail or succeed.
pub fn get_phase(pod: &Pod, init: &[ApiContainerStatus], apps: &[ApiContainerStatus], pod_is_terminal: bool) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let (mut pending_regular_init, mut pending_sidecars, mut failed_init) = (0, 0, 0);
    let (mut unknown, mut running, mut waiting_n, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in spec.init_containers.iter().flatten() {
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        let Some(s) = find(init, &c.name) else {
            if sidecar {
                unknown += 1;
            } else {
                pending_regular_init += 1;
            }
            continue;
        };
        let st = s.state.clone().unwrap_or_default();
        if sidecar {
            if st.running.is_some() {
                if s.started != Some(true) {
                    pending_sidecars += 1;
                }
                running += 1;
            } else if st.terminated.is_some() || (st.waiting.is_some() && last_terminated(s).is_some()) {
                // A stopped sidecar is ignored.
            } else if st.waiting.is_some() {
                pending_sidecars += 1;
                waiting_n += 1;
            } else {
                pending_sidecars += 1;
                unknown += 1;
            }
            continue;
        }
        if st.running.is_some() {
            pending_regular_init += 1;
        } else if let Some(t) = st.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if st.waiting.is_some() {
            match last_terminated(s) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_regular_init += 1,
            }
        } else {
            pending_regular_init += 1;
        }
    }
    let mut initialized = false;
    for c in &spec.containers {
        let Some(s) = find(apps, &c.name) else {
            unknown += 1;
            continue;
        };
        let st = s.state.clone().unwrap_or_default();
        if st.running.is_some() {
            running += 1;
            initialized = true;
        } else if let Some(t) = st.terminated {
            stopped += 1;
            initialized = true;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if last_terminated(s).is_some() {
                stopped += 1;
                initialized = true;
            } else {
                waiting_n += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed".into();
    }
    let phase = if pending_regular_init > 0 || (pending_sidecars > 0 && !initialized) || waiting_n > 0 {
        "Pending"
    } else if running > 0 && unknown == 0 {
        "Running"
    } else if running == 0 && stopped > 0 && unknown == 0 {
        if pod_is_terminal && !kubelet_types::pod_update::is_static_pod(pod) {
            if stopped == succeeded { "Succeeded" } else { "Failed" }
        } else if policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if policy == "Never" {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    };
    phase.into()
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(str::to_string),
        message,
        ..Default::default()
    }
}

fn list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

/// Whether an init container has done its part (`isInitContainerInitialized`): a sidecar once started, a regular
/// one once it succeeded.
fn init_container_initialized(pod: &Pod, s: &ApiContainerStatus) -> bool {
    if is_restartable_init_container(pod, &s.name) {
        return s.started == Some(true);
    }
    s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_some_and(|t| t.exit_code == 0)
}

/// The `Initialized` condition (`GeneratePodInitializedCondition`).
fn initialized_condition(
    pod: &Pod,
    init: &[ApiContainerStatus],
    apps: &[ApiContainerStatus],
    phase: &str,
) -> PodCondition {
    let inits = pod.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or(&[]);
    let unknown: Vec<String> = inits.iter().filter(|c| find(init, &c.name).is_none()).map(|c| c.name.clone()).collect();
    if inits.is_empty() || (phase == "Succeeded" && unknown.is_empty()) {
        let reason = (!inits.is_empty()).then_some("PodCompleted");
        return condition("Initialized", true, reason, None);
    }
    // A regular container that ever started means initialization finished earlier.
    let any_started = apps.iter().any(|s| {
        let st = s.state.as_ref();
        st.is_some_and(|st| st.running.is_some() || st.terminated.is_some()) || last_terminated(s).is_some()
    });
    if any_started {
        return condition("Initialized", true, None, None);
    }
    let incomplete: Vec<String> = inits
        .iter()
        .filter(|c| find(init, &c.name).is_some_and(|s| !init_container_initialized(pod, s)))
        .map(|c| c.name.clone())
        .collect();
    let mut messages = vec![];
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", list(&unknown)));
    }
    if !incomplete.is_empty() {
        messages.push(format!("containers with incomplete status: {}", list(&incomplete)));
    }
    if messages.is_empty() {
        return condition("Initialized", true, None, None);
    }
    condition("Initialized", false, Some("ContainersNotInitialized"), Some(messages.join(", ")))
}

/// `ContainersReady` (`GenerateContainersReadyCondition`): app containers and sidecars ready; or `Ready`
/// (`GeneratePodReadyCondition`), which adds the pod's readiness gates.
pub(crate) fn ready_condition(
    pod: &Pod,
    init: &[ApiContainerStatus],
    apps: &[ApiContainerStatus],
    phase: &str,
    kind: &str,
) -> PodCondition {
    let Some(spec) = pod.spec.as_ref() else { return condition(kind, true, None, None) };
    let (mut unknown, mut unready) = (vec![], vec![]);
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for (c, list) in sidecars.map(|c| (c, init)).chain(spec.containers.iter().map(|c| (c, apps))) {
        match find(list, &c.name) {
            None => unknown.push(c.name.clone()),
            Some(s) if !s.ready => unready.push(c.name.clone()),
            Some(_) => {}
        }
    }
    if phase == "Succeeded" && unknown.is_empty() {
        return condition(kind, false, Some("PodCompleted"), None);
    }
    if phase == "Failed" {
        return condition(kind, false, Some("PodFailed"), None);
    }
    let mut messages = vec![];
    if !unknown.is_empty() {
        messages.push(format!("containers with unknown status: {}", list(&unknown)));
    }
    if !unready.is_empty() {
        messages.push(format!("containers with unready status: {}", list(&unready)));
    }
    if !messages.is_empty() {
        return condition(kind, false, Some("ContainersNotReady"), Some(messages.join(", ")));
    }
    if kind == "Ready" {
        // Readiness gates: conditions others (controllers) set on the pod.
        let current = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
        let mut gate_messages = vec![];
        for g in spec.readiness_gates.iter().flatten() {
            match current.and_then(|cs| cs.iter().find(|c| c.type_ == g.condition_type)) {
                None => gate_messages.push(format!(
                    "corresponding condition of pod readiness gate {:?} does not exist.",
                    g.condition_type
                )),
                Some(c) if c.status != "True" => gate_messages.push(format!(
                    "the status of pod readiness gate {:?} is not \"True\", but {}",
                    g.condition_type, c.status
                )),
                Some(_) => {}
            }
        }
        if !gate_messages.is_empty() {
            return condition(kind, false, Some("ReadinessGatesNotReady"), Some(gate_messages.join(", ")));
        }
    }
    condition(kind, true, None, None)
}

/// Whether the `Ready` condition the apiserver shows for a pod with readiness gates is not what its current
/// conditions give (`status.NeedToReconcilePodReadiness`): another client changed a gate's condition, so the pod
/// must be synced for its `Ready` to follow. Only when `Ready` is present.
pub fn needs_readiness_reconcile(pod: &Pod) -> bool {
    if pod.spec.as_ref().and_then(|s| s.readiness_gates.as_ref()).is_none_or(|g| g.is_empty()) {
        return false;
    }
    let Some(st) = pod.status.as_ref() else { return false };
    let Some(current) = st.conditions.iter().flatten().find(|c| c.type_ == "Ready") else { return false };
    let init = st.init_container_statuses.as_deref().unwrap_or_default();
    let apps = st.container_statuses.as_deref().unwrap_or_default();
    let want = ready_condition(pod, init, apps, st.phase.as_deref().unwrap_or_default(), "Ready");
    current.status != want.status || current.message != want.message
}

/// The API status of a pod (`generateAPIPodStatus`). Times of conditions and `startTime` are filled by the
/// status manager, which knows the previous status.
pub fn generate_api_pod_status(pod: &Pod, inputs: &StatusInputs<'_>) -> ApiPodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.clone().unwrap_or_default();
    let init_statuses = container_statuses(
        pod,
        &inits,
        inputs,
        true,
        if inits.is_empty() { "ContainerCreating" } else { "PodInitializing" },
    );
    // As upstream, the waiting reason of a container not created yet is PodInitializing in a pod with init
    // containers, ContainerCreating otherwise.
    let default_reason = if inits.is_empty() { "ContainerCreating" } else { "PodInitializing" };
    let mut init_statuses = init_statuses;
    let mut app_statuses = container_statuses(pod, &spec.containers, inputs, false, default_reason);
    inputs.probes.update_pod_status(pod, &mut init_statuses, &mut app_statuses);
    app_statuses.sort_by(|a, b| a.name.cmp(&b.name));
    let ephemerals = ephemeral_containers(pod);
    let mut ephemeral_statuses = container_statuses(pod, &ephemerals, inputs, false, default_reason);
    ephemeral_statuses.sort_by(|a, b| a.name.cmp(&b.name));
    let mut phase = get_phase(pod, &init_statuses, &app_statuses, inputs.pod_is_terminal);
    if inputs.deadline_exceeded {
        phase = "Failed".into();
    }

    let sandbox_ready = inputs
        .runtime
        .sandbox_statuses
        .first()
        .is_some_and(|s| s.state == SandboxState::Ready && (s.host_network || !s.ips.is_empty()));
    let mut conditions = inputs.resize_conditions.to_vec();
    conditions.extend([
        condition("PodReadyToStartContainers", sandbox_ready, None, None),
        initialized_condition(pod, &init_statuses, &app_statuses, &phase),
        ready_condition(pod, &init_statuses, &app_statuses, &phase, "Ready"),
        ready_condition(pod, &init_statuses, &app_statuses, &phase, "ContainersReady"),
        condition("PodScheduled", true, None, None),
    ]);
    // The generation the kubelet acted on (PodObservedGenerationTracking, on by default since 1.34); the resize
    // conditions carry their own.
    let generation = pod.metadata.generation.filter(|g| *g != 0);
    let own = conditions.len() - 5;
    for c in conditions.iter_mut().skip(own) {
        c.observed_generation = generation;
    }

    let mut pod_ips: Vec<String> = inputs.runtime.ips.clone();
    if spec.host_network.unwrap_or(false) {
        pod_ips = inputs.host_ips.to_vec();
    }
    ApiPodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        reason: inputs.deadline_exceeded.then(|| DEADLINE_EXCEEDED.to_string()),
        message: inputs.deadline_exceeded.then(|| DEADLINE_EXCEEDED_MESSAGE.to_string()),
        host_ip: inputs.host_ips.first().cloned(),
        host_ips: (!inputs.host_ips.is_empty())
            .then(|| inputs.host_ips.iter().map(|ip| HostIP { ip: ip.clone() }).collect()),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty()).then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        qos_class: Some(pod_qos(pod).as_str().into()),
        init_container_statuses: (!inits.is_empty()).then_some(init_statuses),
        container_statuses: Some(app_statuses),
        ephemeral_container_statuses: (!ephemerals.is_empty()).then_some(ephemeral_statuses),
        observed_generation: generation,
        ..Default::default()
    }
}

/// Whether a phase is terminal.
pub fn is_terminal_phase(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kubelet_types::SandboxStatus;

    fn pod(policy: &str) -> Pod {
        let c = |n: &str| Container { name: n.into(), image: Some("busybox".into()), ..Default::default() };
        Pod {
            metadata: ObjectMeta { uid: Some("u1".into()), name: Some("p".into()), ..Default::default() },
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(vec![c("init")]),
                containers: vec![c("a"), c("b")],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cs(id: &str, name: &str, state: ContainerState, code: i32, restarts: i32) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            name: name.into(),
            state,
            created_at: 1,
            started_at: 1_000_000_000,
            finished_at: if state == ContainerState::Exited { 2_000_000_000 } else { 0 },
            exit_code: code,
            image: "localhost/busybox:1".into(),
            image_ref: "sha256:abc".into(),
            hash: 0,
            restart_count: restarts,
            reason: if state == ContainerState::Exited {
                if code == 0 { "Completed".into() } else { "Error".into() }
            } else {
                String::new()
            },
            message: String::new(),
            log_path: String::new(),
            resources: None,
        }
    }

    fn rt(containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            ips: vec!["10.88.0.5".into()],
            sandbox_statuses: vec![SandboxStatus {
                id: "s".into(),
                state: SandboxState::Ready,
                created_at: 1,
                attempt: 0,
                ips: vec!["10.88.0.5".into()],
                host_network: false,
            }],
            container_statuses: containers,
            ..Default::default()
        }
    }

    fn status_of(p: &Pod, r: &PodStatus, reasons: &ReasonCache, terminal: bool) -> ApiPodStatus {
        generate_api_pod_status(
            p,
            &StatusInputs {
                resize_conditions: &[],
                runtime: r,
                reasons,
                runtime_name: "containerd",
                host_ips: &["192.0.2.10".into()],
                pod_is_terminal: terminal,
                probes: &kubelet_types::probe::NoProbes,
                deadline_exceeded: false,
                supports_recursive_read_only: false,
            },
        )
    }

    #[test]
    fn volume_mounts_are_reported_with_the_recursive_read_only_mode_each_got() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "app",
            "volumeMounts": [
                {"name": "rw", "mountPath": "/rw"},
                {"name": "ro", "mountPath": "/ro", "readOnly": true},
                {"name": "maybe", "mountPath": "/maybe", "readOnly": true, "recursiveReadOnly": "IfPossible"},
                {"name": "must", "mountPath": "/must", "readOnly": true, "recursiveReadOnly": "Enabled"},
            ],
        }))
        .unwrap();
        let modes = |supports| {
            volume_mount_statuses(&c, supports)
                .unwrap()
                .into_iter()
                .map(|m| (m.name, m.read_only, m.recursive_read_only))
                .collect::<Vec<_>>()
        };
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            modes(true),
            vec![
                ("rw".into(), Some(false), None),
                ("ro".into(), Some(true), s("Disabled")),
                ("maybe".into(), Some(true), s("Enabled")),
                ("must".into(), Some(true), s("Enabled")),
            ]
        );
        // Without runtime support `Enabled` cannot be resolved (the container never starts): Disabled, as upstream.
        assert_eq!(
            modes(false),
            vec![
                ("rw".into(), Some(false), None),
                ("ro".into(), Some(true), s("Disabled")),
                ("maybe".into(), Some(true), s("Disabled")),
                ("must".into(), Some(true), s("Disabled")),
            ]
        );
        let none: Container = serde_json::from_value(serde_json::json!({"name": "bare"})).unwrap();
        assert!(volume_mount_statuses(&none, true).is_none(), "no mounts: no field");
    }

    fn cond<'a>(s: &'a ApiPodStatus, t: &str) -> &'a PodCondition {
        s.conditions.as_ref().unwrap().iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn pending_while_initializing_then_running_and_ready() {
        let reasons = ReasonCache::default();
        let p = pod("Always");
        let s = status_of(&p, &rt(vec![cs("i1", "init", ContainerState::Running, 0, 0)]), &reasons, false);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            s.container_statuses.as_ref().unwrap()[0]
                .state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("PodInitializing")
        );

        let r = rt(vec![
            cs("a1", "a", ContainerState::Running, 0, 0),
            cs("b1", "b", ContainerState::Running, 0, 0),
            cs("i1", "init", ContainerState::Exited, 0, 0),
        ]);
        let s = status_of(&p, &r, &reasons, false);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
        let a = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(a.container_id.as_deref(), Some("containerd://a1"));
        assert_eq!((a.ready, a.image.as_str(), a.image_id.as_str()), (true, "localhost/busybox:1", "sha256:abc"));
        assert!(s.init_container_statuses.as_ref().unwrap()[0].ready);
        assert_eq!(s.pod_ip.as_deref(), Some("10.88.0.5"));
        assert_eq!(s.host_ip.as_deref(), Some("192.0.2.10"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state() {
        let reasons = ReasonCache::default();
        let p = pod("Always");
        reasons.add(&PodUid::from("u1"), "a", "CrashLoopBackOff", "back-off 10s restarting failed container=a".into());
        let r = rt(vec![
            cs("a2", "a", ContainerState::Exited, 1, 1),
            cs("b1", "b", ContainerState::Running, 0, 0),
            cs("a1", "a", ContainerState::Exited, 1, 0),
            cs("i1", "init", ContainerState::Exited, 0, 0),
        ]);
        let s = status_of(&p, &r, &reasons, false);
        let a = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(a.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(a.last_state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);
        assert_eq!(a.restart_count, 1);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").message.as_deref(), Some("containers with unready status: [a]"));
    }

    #[test]
    fn phases_of_finished_pods() {
        let reasons = ReasonCache::default();
        let done = |code_a, code_b| {
            rt(vec![
                cs("a1", "a", ContainerState::Exited, code_a, 0),
                cs("b1", "b", ContainerState::Exited, code_b, 0),
                cs("i1", "init", ContainerState::Exited, 0, 0),
            ])
        };
        assert_eq!(status_of(&pod("Never"), &done(0, 0), &reasons, false).phase.as_deref(), Some("Succeeded"));
        assert_eq!(status_of(&pod("Never"), &done(0, 1), &reasons, false).phase.as_deref(), Some("Failed"));
        assert_eq!(status_of(&pod("OnFailure"), &done(0, 1), &reasons, false).phase.as_deref(), Some("Running"));
        assert_eq!(status_of(&pod("Always"), &done(0, 0), &reasons, false).phase.as_deref(), Some("Running"));
        let s = status_of(&pod("Never"), &done(0, 0), &reasons, true);
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        // A failed init container fails a Never pod.
        let r = rt(vec![cs("i1", "init", ContainerState::Exited, 2, 0)]);
        assert_eq!(status_of(&pod("Never"), &r, &reasons, false).phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn sidecars_count_as_running_and_readiness_gates_hold_ready() {
        let reasons = ReasonCache::default();
        let mut p = pod("Never");
        p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].restart_policy = Some("Always".into());
        // The sidecar runs (started without a startup probe), the apps are being created: Pending, initialized.
        let r = rt(vec![cs("i1", "init", ContainerState::Running, 0, 0)]);
        let s = status_of(&p, &r, &reasons, false);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert!(s.init_container_statuses.as_ref().unwrap()[0].ready, "a running sidecar without probes is ready");
        // The apps finished, the sidecar was stopped: the pod succeeded.
        let r = rt(vec![
            cs("a1", "a", ContainerState::Exited, 0, 0),
            cs("b1", "b", ContainerState::Exited, 0, 0),
            cs("i1", "init", ContainerState::Exited, 137, 0),
        ]);
        let s = status_of(&p, &r, &reasons, true);
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        assert_eq!(cond(&s, "ContainersReady").reason.as_deref(), Some("PodCompleted"));

        let mut gated = pod("Always");
        gated.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate { condition_type: "example.com/lb".into() }]);
        let r = rt(vec![
            cs("a1", "a", ContainerState::Running, 0, 0),
            cs("b1", "b", ContainerState::Running, 0, 0),
            cs("i1", "init", ContainerState::Exited, 0, 0),
        ]);
        let s = status_of(&gated, &r, &reasons, false);
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        let ready = cond(&s, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("ReadinessGatesNotReady")));
        assert_eq!(
            ready.message.as_deref(),
            Some("corresponding condition of pod readiness gate \"example.com/lb\" does not exist.")
        );
    }

    #[test]
    fn readiness_is_reconciled_when_a_gate_changed_under_it() {
        use k8s_openapi::api::core::v1::{PodReadinessGate, PodStatus as S};
        let mut p = pod("Always");
        let spec = p.spec.as_mut().unwrap();
        spec.readiness_gates = Some(vec![PodReadinessGate { condition_type: "example.com/gate".into() }]);
        let ready = |n: &str| ApiContainerStatus { name: n.into(), ready: true, ..Default::default() };
        let c = |t: &str, s: &str| PodCondition { type_: t.into(), status: s.into(), ..Default::default() };
        let status = |conds: Vec<PodCondition>| S {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ready("a"), ready("b")]),
            conditions: Some(conds),
            ..Default::default()
        };
        // The gate turned True while Ready still says False: a sync is needed.
        let msg = "the status of pod readiness gate \"example.com/gate\" is not \"True\", but False".to_string();
        let not_ready = PodCondition { message: Some(msg), ..c("Ready", "False") };
        p.status = Some(status(vec![not_ready.clone(), c("example.com/gate", "True")]));
        assert!(needs_readiness_reconcile(&p));
        p.status = Some(status(vec![c("Ready", "True"), c("example.com/gate", "True")]));
        assert!(!needs_readiness_reconcile(&p));
        p.status = Some(status(vec![not_ready, c("example.com/gate", "False")]));
        assert!(!needs_readiness_reconcile(&p), "Ready already says why");
        p.spec.as_mut().unwrap().readiness_gates = None;
        assert!(!needs_readiness_reconcile(&p), "only pods with gates");
    }

    #[test]
    fn ephemeral_container_statuses_as_upstream() {
        let reasons = ReasonCache::default();
        let mut p = pod("Always");
        assert!(status_of(&p, &rt(vec![]), &reasons, false).ephemeral_container_statuses.is_none(), "none without");
        let ec = |n: &str, target: Option<&str>| k8s_openapi::api::core::v1::EphemeralContainer {
            name: n.into(),
            image: Some("localhost/busybox:1".into()),
            target_container_name: target.map(str::to_string),
            ..Default::default()
        };
        p.spec.as_mut().unwrap().ephemeral_containers =
            Some(vec![ec("debugger", Some("a")), ec("another", None), ec("broken", None)]);
        let apps = || {
            vec![
                cs("a1", "a", ContainerState::Running, 0, 0),
                cs("b1", "b", ContainerState::Running, 0, 0),
                cs("i1", "init", ContainerState::Exited, 0, 0),
            ]
        };
        // Not created yet: waiting with the pod's default reason (the pod has an init container).
        let s = status_of(&p, &rt(apps()), &reasons, false);
        let eph = s.ephemeral_container_statuses.as_ref().unwrap();
        assert_eq!(eph.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["another", "broken", "debugger"]);
        for c in eph {
            let w = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
            assert_eq!(w.reason.as_deref(), Some("PodInitializing"));
            assert_eq!((c.ready, c.started, c.restart_count), (false, None, 0));
            assert_eq!(c.image, "localhost/busybox:1");
        }
        assert_eq!(s.phase.as_deref(), Some("Running"), "ephemeral containers do not hold the pod Pending");
        assert_eq!(cond(&s, "Ready").status, "True", "nor make it unready");

        // One runs, one exited, one failed to start.
        reasons.add(&PodUid::from("u1"), "broken", "ErrImageNeverPull", "Container image \"x\" is not present".into());
        let mut r = apps();
        r.insert(0, cs("d1", "debugger", ContainerState::Running, 0, 0));
        r.insert(0, cs("e1", "another", ContainerState::Exited, 3, 0));
        let s = status_of(&p, &rt(r), &reasons, false);
        let eph = s.ephemeral_container_statuses.as_ref().unwrap();
        let (another, broken, debugger) = (&eph[0], &eph[1], &eph[2]);
        assert_eq!(debugger.container_id.as_deref(), Some("containerd://d1"));
        assert_eq!((debugger.image.as_str(), debugger.image_id.as_str()), ("localhost/busybox:1", "sha256:abc"));
        assert!(debugger.state.as_ref().unwrap().running.is_some());
        assert_eq!((debugger.ready, debugger.started), (false, None), "never ready, as upstream");
        let t = another.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (t.exit_code, t.reason.as_deref(), t.container_id.as_deref()),
            (3, Some("Error"), Some("containerd://e1"))
        );
        assert!(another.last_state.is_none());
        let w = broken.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("ErrImageNeverPull"));
        assert_eq!(s.phase.as_deref(), Some("Running"));

        // Without init containers a debugger not created yet is ContainerCreating.
        p.spec.as_mut().unwrap().init_containers = None;
        let s = status_of(&p, &rt(vec![cs("a1", "a", ContainerState::Running, 0, 0)]), &reasons, false);
        let eph = s.ephemeral_container_statuses.as_ref().unwrap();
        let w = eph[2].state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!((eph[2].name.as_str(), w.reason.as_deref()), ("debugger", Some("ContainerCreating")));
    }
}
