//! Pod fields upstream's kubelet acts on and rkubelet does not apply yet, refused at admission with
//! `UnsupportedPodField` (the house rule: a pod gets what it asks for, or is refused; it never runs as if a field it
//! set were absent). Each row names the upstream code that acts on its field: `kubelet_pods.go`
//! (GeneratePodHostNameAndDomain, makeEnvironmentVariables, makeMounts with resolveRecursiveReadOnly),
//! `kuberuntime/helpers.go` getContainerConfigStopSignal, `kuberuntime_manager.go` with `container/helpers.go`
//! (container restart policies and rules), `cm/dra/manager.go` (extended resource claims) and the volume manager's
//! block devices.
//!
//! Contract: [`UNSUPPORTED_FIELDS`] is the one list of such fields, read by the kubelet's admit handler
//! (`kubelet::admission_fields`) and, for an ephemeral container added to a running pod, by the runtime manager before
//! it starts one. `docs/pod-fields.md` mirrors it: its rows whose
//! rkubelet column reads `refused: UnsupportedPodField`, under the heading of their object, are exactly these rows
//! (a test parses the document). A row refuses only a value that needs behaviour rkubelet lacks, never a default the
//! apiserver fills in. The admit handler refuses a pod that sets any of them with a message naming each by its path
//! (`spec.containers[0].lifecycle.stopSignal`) and saying what to do ([`refusal`]); the sync loop fails the pod and
//! records the event, as for every handler. An ephemeral container added to a running pod is not admitted again (as
//! upstream); the runtime manager refuses to start one that sets such a field ([`refusal_for_container`]).

use k8s_openapi::api::core::v1::Container;

use crate::Pod;

/// The reason of a pod refused for a field rkubelet does not apply.
pub const REASON: &str = "UnsupportedPodField";

/// The object a row is about, as `docs/pod-fields.md` heads its tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// `spec`.
    PodSpec,
    /// `spec.containers[*]`, `spec.initContainers[*]` and `spec.ephemeralContainers[*]`.
    Container,
    /// `status`, as the scheduler leaves it before the pod reaches the node.
    PodStatus,
}

impl Object {
    /// The heading of the object's table in `docs/pod-fields.md`.
    pub fn heading(self) -> &'static str {
        match self {
            Object::PodSpec => "PodSpec",
            Object::Container => "Container",
            Object::PodStatus => "PodStatus",
        }
    }
}

/// Which list a container comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// `spec.containers`.
    App,
    /// `spec.initContainers`.
    Init,
    /// `spec.ephemeralContainers`.
    Ephemeral,
}

/// Where a row looks for its field.
#[derive(Clone, Copy)]
pub enum Check {
    /// In the pod: the full path of the field when it is set.
    Pod(fn(&Pod) -> Option<String>),
    /// In each container: the path below the container when it is set.
    Container(fn(&Container, ContainerKind) -> Option<String>),
}

/// A field rkubelet refuses.
#[derive(Clone, Copy)]
pub struct UnsupportedField {
    /// Its object.
    pub object: Object,
    /// Its path within the object, `[*]` for each list element (`env[*].valueFrom.fileKeyRef`).
    pub field: &'static str,
    /// What rkubelet lacks, and upstream's feature (gate and stage), for the message.
    pub lacks: &'static str,
    /// Where it is looked for.
    pub check: Check,
}

impl std::fmt::Debug for UnsupportedField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnsupportedField").field("object", &self.object).field("field", &self.field).finish()
    }
}

fn some_if(set: bool, path: &str) -> Option<String> {
    set.then(|| path.to_string())
}

fn non_empty<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_some_and(|v| !v.is_empty())
}

fn hostname_override(pod: &Pod) -> Option<String> {
    some_if(pod.spec.as_ref()?.hostname_override.is_some(), "spec.hostnameOverride")
}

fn extended_resource_claim_status(pod: &Pod) -> Option<String> {
    some_if(pod.status.as_ref()?.extended_resource_claim_status.is_some(), "status.extendedResourceClaimStatus")
}

fn stop_signal(c: &Container, _: ContainerKind) -> Option<String> {
    some_if(c.lifecycle.as_ref()?.stop_signal.is_some(), "lifecycle.stopSignal")
}

/// A container's own restart policy: `Always` on an init container makes it a sidecar, which rkubelet runs; any
/// other value, or any value on another container, needs ContainerRestartRules.
fn restart_policy(c: &Container, kind: ContainerKind) -> Option<String> {
    let policy = c.restart_policy.as_deref()?;
    some_if(kind != ContainerKind::Init || policy != "Always", "restartPolicy")
}

fn restart_policy_rules(c: &Container, _: ContainerKind) -> Option<String> {
    some_if(non_empty(&c.restart_policy_rules), "restartPolicyRules")
}

fn file_key_ref(c: &Container, _: ContainerKind) -> Option<String> {
    let i = c.env.as_ref()?.iter().position(|e| e.value_from.as_ref().is_some_and(|f| f.file_key_ref.is_some()))?;
    Some(format!("env[{i}].valueFrom.fileKeyRef"))
}

/// Every field rkubelet refuses (mirrored by `docs/pod-fields.md`).
pub static UNSUPPORTED_FIELDS: &[UnsupportedField] = &[
    UnsupportedField {
        object: Object::PodSpec,
        field: "hostnameOverride",
        lacks: "rkubelet does not set the pod's hostname from it (upstream's HostnameOverride feature, alpha)",
        check: Check::Pod(hostname_override),
    },
    UnsupportedField {
        object: Object::Container,
        field: "lifecycle.stopSignal",
        lacks: "rkubelet does not pass a stop signal to the runtime, so the container would be stopped with its \
                image's (upstream's ContainerStopSignals feature, alpha)",
        check: Check::Container(stop_signal),
    },
    UnsupportedField {
        object: Object::Container,
        field: "restartPolicy",
        lacks: "rkubelet restarts containers by the pod's restartPolicy and honours a container's own only as \
                `Always` on an init container (a sidecar) (upstream's ContainerRestartRules feature, alpha)",
        check: Check::Container(restart_policy),
    },
    UnsupportedField {
        object: Object::Container,
        field: "restartPolicyRules",
        lacks: "rkubelet does not evaluate container restart rules (upstream's ContainerRestartRules feature, alpha)",
        check: Check::Container(restart_policy_rules),
    },
    UnsupportedField {
        object: Object::Container,
        field: "env[*].valueFrom.fileKeyRef",
        lacks: "rkubelet does not read environment variables from files (upstream's EnvFiles feature, alpha)",
        check: Check::Container(file_key_ref),
    },
    UnsupportedField {
        object: Object::PodStatus,
        field: "extendedResourceClaimStatus",
        lacks: "rkubelet prepares the pod's own ResourceClaims but not the claim the scheduler made for the pod's \
                extended resources (upstream's DRAExtendedResource feature, alpha)",
        check: Check::Pod(extended_resource_claim_status),
    },
];

/// Every container of the pod with its path (`spec.initContainers[1]`) and kind: init, app, then ephemeral ones.
pub fn containers_with_paths(pod: &Pod) -> Vec<(String, ContainerKind, Container)> {
    let Some(spec) = pod.spec.as_ref() else { return vec![] };
    let mut out = vec![];
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        out.push((format!("spec.initContainers[{i}]"), ContainerKind::Init, c.clone()));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        out.push((format!("spec.containers[{i}]"), ContainerKind::App, c.clone()));
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let common = crate::pod_update::ephemeral_container_common(c);
        out.push((format!("spec.ephemeralContainers[{i}]"), ContainerKind::Ephemeral, common));
    }
    out
}

/// Every unsupported field the pod sets: its path and its row, in the table's order.
pub fn unsupported_fields(pod: &Pod) -> Vec<(String, &'static UnsupportedField)> {
    let containers = containers_with_paths(pod);
    let mut out = vec![];
    for row in UNSUPPORTED_FIELDS {
        match row.check {
            Check::Pod(check) => out.extend(check(pod).map(|p| (p, row))),
            Check::Container(check) => {
                for (prefix, kind, c) in &containers {
                    out.extend(check(c, *kind).map(|p| (format!("{prefix}.{p}"), row)));
                }
            }
        }
    }
    out
}

/// The message refusing `found` (the paths and rows [`unsupported_fields`] returned).
pub fn refusal(found: &[(String, &'static UnsupportedField)]) -> String {
    let each: Vec<String> = found.iter().map(|(path, row)| format!("can't set `{path}`: {}", row.lacks)).collect();
    format!("{}; remove the field, or run the pod on a node with the upstream kubelet", each.join("; "))
}

/// The refusal of one container at `prefix` (`spec.ephemeralContainers[2]`), None when it sets no unsupported field.
pub fn refusal_for_container(prefix: &str, c: &Container, kind: ContainerKind) -> Option<String> {
    let found: Vec<(String, &'static UnsupportedField)> = UNSUPPORTED_FIELDS
        .iter()
        .filter_map(|row| match row.check {
            Check::Container(check) => check(c, kind).map(|p| (format!("{prefix}.{p}"), row)),
            Check::Pod(_) => None,
        })
        .collect();
    (!found.is_empty()).then(|| refusal(&found))
}
