//! Pod updates from the config sources to the sync loop (`pkg/kubelet/types/pod_update.go`).

use std::fmt;
use std::sync::Arc;

use crate::Pod;

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
