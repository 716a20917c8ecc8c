//! Labels and annotations on CRI sandboxes and containers, written and read back exactly as upstream
//! (`pkg/kubelet/kuberuntime/labels.go`), so that a restarted kubelet (or crictl) recognises what runs.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use kubelet_types::labels as keys;

/// Labels of a pod sandbox: the pod's labels plus name, namespace and UID.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod.metadata.labels.clone().unwrap_or_default().into_iter().collect();
    l.insert(keys::POD_NAME.into(), pod.metadata.name.clone().unwrap_or_default());
    l.insert(keys::POD_NAMESPACE.into(), pod.metadata.namespace.clone().unwrap_or_default());
    l.insert(keys::POD_UID.into(), pod.metadata.uid.clone().unwrap_or_default());
    l
}

/// Annotations of a pod sandbox: the pod's annotations.
pub fn sandbox_annotations(pod: &Pod) -> HashMap<String, String> {
    pod.metadata.annotations.clone().unwrap_or_default().into_iter().collect()
}

/// Labels of a container: container name, pod name, namespace and UID.
pub fn container_labels(pod: &Pod, c: &Container) -> HashMap<String, String> {
    let mut l = HashMap::with_capacity(4);
    l.insert(keys::POD_NAME.into(), pod.metadata.name.clone().unwrap_or_default());
    l.insert(keys::POD_NAMESPACE.into(), pod.metadata.namespace.clone().unwrap_or_default());
    l.insert(keys::POD_UID.into(), pod.metadata.uid.clone().unwrap_or_default());
    l.insert(keys::CONTAINER_NAME.into(), c.name.clone());
    l
}

/// Annotations of a container: hash, restart count, termination message settings, grace periods, preStop
/// handler and ports.
pub fn container_annotations(pod: &Pod, c: &Container, restart_count: i32) -> HashMap<String, String> {
    let mut a = HashMap::new();
    a.insert(keys::CONTAINER_HASH.into(), format!("{:x}", crate::hash::hash_container(c)));
    a.insert(keys::CONTAINER_RESTART_COUNT.into(), restart_count.to_string());
    a.insert(
        keys::CONTAINER_TERMINATION_MESSAGE_PATH.into(),
        c.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into()),
    );
    a.insert(
        keys::CONTAINER_TERMINATION_MESSAGE_POLICY.into(),
        c.termination_message_policy.clone().unwrap_or_else(|| "File".into()),
    );
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(keys::POD_DELETION_GRACE_PERIOD.into(), g.to_string());
    }
    if let Some(g) = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds) {
        a.insert(keys::POD_TERMINATION_GRACE_PERIOD.into(), g.to_string());
    }
    if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
        && let Ok(j) = serde_json::to_string(h)
    {
        a.insert(keys::CONTAINER_PRESTOP_HANDLER.into(), j);
    }
    if let Some(p) = c.ports.as_ref().filter(|p| !p.is_empty())
        && let Ok(j) = serde_json::to_string(p)
    {
        a.insert(keys::CONTAINER_PORTS.into(), j);
    }
    a
}

/// What the kubelet reads back from a container's labels and annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerInfo {
    /// Pod name.
    pub pod_name: String,
    /// Pod namespace.
    pub pod_namespace: String,
    /// Pod UID.
    pub pod_uid: String,
    /// Container name.
    pub name: String,
    /// Spec hash.
    pub hash: u64,
    /// Restart count.
    pub restart_count: i32,
    /// Termination grace period of the pod, if recorded.
    pub termination_grace_period: Option<i64>,
    /// Termination message path.
    pub termination_message_path: String,
    /// Termination message policy (`File` or `FallbackToLogsOnError`).
    pub termination_message_policy: String,
}

/// Reads back what [`container_labels`] and [`container_annotations`] wrote.
pub fn container_info(labels: &HashMap<String, String>, annotations: &HashMap<String, String>) -> ContainerInfo {
    let l = |k: &str| labels.get(k).cloned().unwrap_or_default();
    ContainerInfo {
        pod_name: l(keys::POD_NAME),
        pod_namespace: l(keys::POD_NAMESPACE),
        pod_uid: l(keys::POD_UID),
        name: l(keys::CONTAINER_NAME),
        hash: annotations.get(keys::CONTAINER_HASH).and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(0),
        restart_count: annotations.get(keys::CONTAINER_RESTART_COUNT).and_then(|r| r.parse().ok()).unwrap_or(0),
        termination_grace_period: annotations.get(keys::POD_TERMINATION_GRACE_PERIOD).and_then(|g| g.parse().ok()),
        termination_message_path: annotations
            .get(keys::CONTAINER_TERMINATION_MESSAGE_PATH)
            .cloned()
            .unwrap_or_default(),
        termination_message_policy: annotations
            .get(keys::CONTAINER_TERMINATION_MESSAGE_POLICY)
            .cloned()
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn round_trip() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web-node1".into()),
                namespace: Some("default".into()),
                uid: Some("u1".into()),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec { termination_grace_period_seconds: Some(30), ..Default::default() }),
            ..Default::default()
        };
        let c = Container { name: "app".into(), image: Some("busybox".into()), ..Default::default() };
        let sl = sandbox_labels(&pod);
        assert_eq!(sl["app"], "web");
        assert_eq!(sl["io.kubernetes.pod.uid"], "u1");
        let info = container_info(&container_labels(&pod, &c), &container_annotations(&pod, &c, 3));
        assert_eq!(info.name, "app");
        assert_eq!(info.pod_name, "web-node1");
        assert_eq!(info.restart_count, 3);
        assert_eq!(info.hash, crate::hash::hash_container(&c));
        assert_eq!(info.termination_grace_period, Some(30));
        assert_eq!(info.termination_message_path, "/dev/termination-log");
    }
}
