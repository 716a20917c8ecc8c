//! Pod updates from the config sources to the sync loop (`pkg/kubelet/types/pod_update.go`).

use std::fmt;
use std::sync::Arc;

use crate::Pod;
use k8s_openapi::api::core::v1::Container;

/// What a [`PodUpdate`] does, with upstream's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Pods new to the kubelet.
    Add,
    /// Pods whose spec (or labels, annotations, deletion fields) changed.
    Update,
    /// Pods gracefully deleted (deletion timestamp set).
    Delete,
    /// Pods gone from their source: stop them now.
    Remove,
    /// Pods whose status alone changed.
    Reconcile,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Add => "ADD",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Remove => "REMOVE",
            Operation::Reconcile => "RECONCILE",
        })
    }
}

/// Where pods come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodSource {
    /// `staticPodPath`.
    File,
    /// `staticPodURL`.
    Http,
    /// The apiserver.
    Api,
}

impl PodSource {
    /// The value of the `kubernetes.io/config.source` annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            PodSource::File => "file",
            PodSource::Http => "http",
            PodSource::Api => "api",
        }
    }

    /// Parses the annotation value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "file" => Some(PodSource::File),
            "http" => Some(PodSource::Http),
            "api" => Some(PodSource::Api),
            _ => None,
        }
    }
}

impl fmt::Display for PodSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change of the desired pods, as the merged PodConfig stream emits it.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    /// What happened.
    pub op: Operation,
    /// Which source the pods belong to.
    pub source: PodSource,
    /// The pods concerned.
    pub pods: Vec<Arc<Pod>>,
}

/// Whether a pod comes from a static source (file or URL), from its `kubernetes.io/config.source` annotation.
pub fn is_static_pod(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(crate::labels::CONFIG_SOURCE)).is_some_and(|s| s != "api")
}

/// `namespace/name` of a pod, for logs and messages.
pub fn pod_ref(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or("default"), pod.metadata.name.as_deref().unwrap_or(""))
}

/// The pod's UID (empty if unset).
pub fn pod_uid(pod: &Pod) -> crate::PodUid {
    crate::PodUid::from(pod.metadata.uid.clone().unwrap_or_default())
}

/// Whether the init container `name` of `pod` is a native sidecar (`restartPolicy: Always`,
/// `podutil.IsRestartableInitContainer`).
pub fn is_restartable_init_container(pod: &Pod, name: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|i| i.iter().find(|c| c.name == name))
        .is_some_and(|c| c.restart_policy.as_deref() == Some("Always"))
}

/// An ephemeral container as the container it is run as: every field of `EphemeralContainerCommon`, without
/// `targetContainerName` (upstream converts `EphemeralContainerCommon` to `v1.Container` wherever it treats
/// ephemeral containers as containers: `ephemeralContainerStartSpec`, `convertStatusToAPIStatus`,
/// `VisitContainers`).
pub fn ephemeral_container_common(ec: &k8s_openapi::api::core::v1::EphemeralContainer) -> Container {
    // Destructured field by field, so a field added to the API does not silently go missing here.
    let k8s_openapi::api::core::v1::EphemeralContainer {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        restart_policy_rules,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        target_container_name: _,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = ec.clone();
    Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        restart_policy_rules,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    }
}

/// The spec of the container `name` of `pod` (`kubecontainer.GetContainerSpec`): an app, init or ephemeral
/// container, in that order.
pub fn container_spec(pod: &Pod, name: &str) -> Option<Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
        .or_else(|| spec.ephemeral_containers.iter().flatten().find(|c| c.name == name).map(ephemeral_container_common))
}

/// The ephemeral containers of `pod` as containers, in spec order.
pub fn ephemeral_containers(pod: &Pod) -> Vec<Container> {
    let spec = pod.spec.as_ref();
    spec.into_iter().flat_map(|s| s.ephemeral_containers.iter().flatten()).map(ephemeral_container_common).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EphemeralContainer, PodSpec};

    fn debugged() -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container { name: "app".into(), ..Default::default() }],
                init_containers: Some(vec![Container { name: "init".into(), ..Default::default() }]),
                ephemeral_containers: Some(vec![EphemeralContainer {
                    name: "debugger".into(),
                    image: Some("busybox".into()),
                    stdin: Some(true),
                    target_container_name: Some("app".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn ephemeral_containers_are_run_as_their_common_part() {
        let p = debugged();
        let c = container_spec(&p, "debugger").unwrap();
        assert_eq!((c.name.as_str(), c.image.as_deref(), c.stdin), ("debugger", Some("busybox"), Some(true)));
        assert_eq!(ephemeral_containers(&p), vec![c]);
        assert_eq!(container_spec(&p, "init").unwrap().name, "init");
        assert!(container_spec(&p, "nope").is_none());
        let refs: Vec<_> = ["app", "init", "debugger"]
            .iter()
            .map(|n| crate::events::container_reference(&p, n).field_path.unwrap())
            .collect();
        assert_eq!(
            refs,
            vec!["spec.containers{app}", "spec.initContainers{init}", "spec.ephemeralContainers{debugger}"]
        );
    }
}
