//! Label and annotation keys the kubelet writes on CRI objects and on static pods, exactly as upstream
//! (`pkg/kubelet/types/labels.go`, `pkg/kubelet/kuberuntime/labels.go`, `pkg/kubelet/types/pod_update.go`).

/// Pod name on sandboxes and containers.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Pod namespace on sandboxes and containers.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Pod UID on sandboxes and containers.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Container name on containers.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Hash of the container spec, hex, as an annotation.
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Restart count of the container, as an annotation.
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Termination message path, as an annotation.
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
/// Termination message policy, as an annotation.
pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
/// The preStop handler as JSON, as an annotation.
pub const CONTAINER_PRESTOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
/// The container ports as JSON, as an annotation.
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// The pod's deletion grace period, as an annotation.
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
/// The pod's termination grace period, as an annotation.
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";

/// Static pod annotation: the pod's hash (its UID for file and URL pods).
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
/// Static pod annotation: when the kubelet first saw the pod (RFC 3339 with nanoseconds).
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
/// Static pod annotation: the source (`file`, `http`, `api`).
pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// Mirror pod annotation.
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
