//! Event recording (`client-go/tools/record` EventRecorder, `pkg/kubelet/events`): the reasons the kubelet uses
//! and the recorder trait its components write to. The standalone kubelet logs events; with an apiserver they are
//! also posted (see the kubelet core's event sink).

use k8s_openapi::api::core::v1::ObjectReference;

use crate::Pod;

/// `Normal`.
pub const NORMAL: &str = "Normal";
/// `Warning`.
pub const WARNING: &str = "Warning";

/// Reasons, as upstream names them (`pkg/kubelet/events/event.go`).
pub mod reason {
    /// A container was created.
    pub const CREATED: &str = "Created";
    /// A container was started.
    pub const STARTED: &str = "Started";
    /// A container failed.
    pub const FAILED: &str = "Failed";
    /// A container is being stopped.
    pub const KILLING: &str = "Killing";
    /// An image is being pulled.
    pub const PULLING: &str = "Pulling";
    /// An image was pulled (or is present).
    pub const PULLED: &str = "Pulled";
    /// Crash-loop or image pull back-off.
    pub const BACKOFF: &str = "BackOff";
    /// A sandbox changed and will be re-created.
    pub const SANDBOX_CHANGED: &str = "SandboxChanged";
    /// A sandbox could not be created.
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    /// A pod's ResourceClaims could not be prepared through their DRA drivers.
    pub const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";
    /// A probe failed (`ContainerUnhealthy`).
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A probe succeeded with a warning (a redirect it did not follow).
    pub const PROBE_WARNING: &str = "ProbeWarning";
    /// A postStart hook failed.
    pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    /// A preStop hook failed.
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    /// The kubelet starts.
    pub const STARTING: &str = "Starting";
    /// A node condition changed (`NodeReady`, `NodeNotReady`, ...).
    pub const NODE_READY: &str = "NodeReady";
    /// The node is not ready.
    pub const NODE_NOT_READY: &str = "NodeNotReady";
    /// A pod from a static source failed validation (`events.FailedValidation`).
    pub const FAILED_VALIDATION: &str = "FailedValidation";
}

/// Where components record events.
pub trait Recorder: Send + Sync + 'static {
    /// Records an event about `object`.
    fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String);
}

/// A reference to a pod (`ref.GetReference`).
pub fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// A reference to a container of a pod (`kubecontainer.GenerateContainerRef`): field path
/// `spec.containers{name}`, `spec.initContainers{name}` or `spec.ephemeralContainers{name}`, looked up in that
/// order as upstream's `fieldPath`.
pub fn container_reference(pod: &Pod, container: &str) -> ObjectReference {
    let spec = pod.spec.as_ref();
    let is_app = spec.is_some_and(|s| s.containers.iter().any(|c| c.name == container));
    let is_init = spec.and_then(|s| s.init_containers.as_ref()).is_some_and(|i| i.iter().any(|c| c.name == container));
    let is_ephemeral =
        spec.and_then(|s| s.ephemeral_containers.as_ref()).is_some_and(|e| e.iter().any(|c| c.name == container));
    let mut r = pod_reference(pod);
    r.field_path = Some(if !is_app && is_init {
        format!("spec.initContainers{{{container}}}")
    } else if !is_app && is_ephemeral {
        format!("spec.ephemeralContainers{{{container}}}")
    } else {
        format!("spec.containers{{{container}}}")
    });
    r
}

/// A recorder that only logs.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogRecorder;

impl Recorder for LogRecorder {
    fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String) {
        let obj = format!(
            "{}/{}/{}",
            object.kind.as_deref().unwrap_or(""),
            object.namespace.as_deref().unwrap_or(""),
            object.name.as_deref().unwrap_or("")
        );
        tracing::info!(object = %obj, fieldPath = object.field_path.as_deref().unwrap_or(""), r#type = kind, reason, message = %message, "event");
    }
}

/// An event a [`RecordingRecorder`] kept.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// The object.
    pub object: ObjectReference,
    /// `Normal` or `Warning`.
    pub kind: String,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// A recorder that keeps the events in memory, in order (for tests).
#[derive(Debug, Default)]
pub struct RecordingRecorder(std::sync::Mutex<Vec<RecordedEvent>>);

impl RecordingRecorder {
    /// The events so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.0.lock().unwrap().clone()
    }
}

impl Recorder for RecordingRecorder {
    fn event(&self, object: &ObjectReference, kind: &str, reason: &str, message: String) {
        let e = RecordedEvent { object: object.clone(), kind: kind.into(), reason: reason.into(), message };
        self.0.lock().unwrap().push(e);
    }
}
