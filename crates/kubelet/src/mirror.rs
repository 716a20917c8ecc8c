//! Mirror pods (`pkg/kubelet/pod/mirror_client.go`, the static-pod part of `kubelet.go` SyncPod and
//! `kubelet_pods.go` HandlePodCleanups): every static pod is shown in the apiserver as a mirror pod — a copy
//! carrying `kubernetes.io/config.mirror` = the static pod's hash, owned by the Node.
//!
//! The sync loop owns the desired state; [`reconcile`] is called from its housekeeping with a snapshot and runs in
//! a task of its own: it creates missing mirrors, replaces outdated or deleted ones, and deletes mirrors whose
//! static pod is gone. Failures are logged and retried at the next housekeeping.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kubelet_apiclient::{ApiError, ApiResult, NodeApi, PodApi};
use kubelet_types::labels::{CONFIG_HASH, CONFIG_MIRROR};
use tracing::{info, warn};

/// What mirror pods need of the apiserver.
#[async_trait]
pub trait MirrorClient: Send + Sync + 'static {
    /// Creates the mirror pod of a static pod.
    async fn create_mirror(&self, static_pod: &Pod) -> ApiResult<()>;
    /// Deletes a mirror pod (at once, if its UID is still `uid`).
    async fn delete_mirror(&self, namespace: &str, name: &str, uid: Option<&str>) -> ApiResult<()>;
}

/// The static pod's hash (`kubernetes.io/config.hash`).
pub fn static_hash(p: &Pod) -> Option<&str> {
    p.metadata.annotations.as_ref()?.get(CONFIG_HASH).map(String::as_str)
}

/// Whether `p` is a mirror pod.
pub fn is_mirror_pod(p: &Pod) -> bool {
    p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CONFIG_MIRROR))
}

/// The mirror pod of `static_pod` (`mirror_client.go` CreateMirrorPod).
pub fn mirror_of(static_pod: &Pod, node_name: &str, node_uid: Option<String>) -> Pod {
    let mut annotations = static_pod.metadata.annotations.clone().unwrap_or_default();
    let hash = static_hash(static_pod).unwrap_or_default().to_string();
    annotations.insert(CONFIG_MIRROR.into(), hash);
    Pod {
        metadata: ObjectMeta {
            name: static_pod.metadata.name.clone(),
            namespace: static_pod.metadata.namespace.clone(),
            labels: static_pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node_name.into(),
                    uid,
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: static_pod.spec.clone(),
        status: None,
    }
}

/// The apiserver-backed mirror client.
pub struct ApiMirrorClient {
    /// Pods.
    pub pods: Arc<dyn PodApi>,
    /// Nodes (for the owner reference).
    pub nodes: Arc<dyn NodeApi>,
    /// This node.
    pub node_name: String,
}

#[async_trait]
impl MirrorClient for ApiMirrorClient {
    async fn create_mirror(&self, static_pod: &Pod) -> ApiResult<()> {
        let node_uid = self.nodes.get_node(&self.node_name).await.ok().flatten().and_then(|n| n.metadata.uid);
        match self.pods.create_pod(&mirror_of(static_pod, &self.node_name, node_uid)).await {
            Ok(_) | Err(ApiError::AlreadyExists(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_mirror(&self, ns: &str, name: &str, uid: Option<&str>) -> ApiResult<()> {
        match self.pods.delete_pod(ns, name, Some(0), uid).await {
            Ok(()) | Err(ApiError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Brings mirror pods in line with the static pods. `statics` are the running static pods by full name,
/// `mirrors` the mirror pods the apiserver has, by full name.
pub async fn reconcile(
    client: Arc<dyn MirrorClient>,
    statics: HashMap<(String, String), Arc<Pod>>,
    mirrors: HashMap<(String, String), Arc<Pod>>,
) {
    for ((ns, name), m) in &mirrors {
        let wanted = statics.get(&(ns.clone(), name.clone()));
        let current = wanted.is_some_and(|s| {
            m.metadata.deletion_timestamp.is_none()
                && m.metadata.annotations.as_ref().and_then(|a| a.get(CONFIG_MIRROR)).map(String::as_str)
                    == static_hash(s)
        });
        if !current {
            info!(pod = %format!("{ns}/{name}"), "deleting mirror pod: its static pod is gone or changed");
            if let Err(e) = client.delete_mirror(ns, name, m.metadata.uid.as_deref()).await {
                warn!(pod = %format!("{ns}/{name}"), error = %e, "failed to delete mirror pod");
            }
        }
    }
    for (k, s) in &statics {
        let ok = mirrors.get(k).is_some_and(|m| {
            m.metadata.deletion_timestamp.is_none()
                && m.metadata.annotations.as_ref().and_then(|a| a.get(CONFIG_MIRROR)).map(String::as_str)
                    == static_hash(s)
        });
        if !ok {
            info!(pod = %format!("{}/{}", k.0, k.1), "creating mirror pod");
            if let Err(e) = client.create_mirror(s).await {
                warn!(pod = %format!("{}/{}", k.0, k.1), error = %e, "failed to create mirror pod");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_apiclient::fake::FakeApi;

    fn static_pod(hash: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("etcd-n1".into());
        p.metadata.namespace = Some("kube-system".into());
        p.metadata.uid = Some(hash.into());
        p.metadata.annotations = Some(
            [
                (CONFIG_HASH.to_string(), hash.to_string()),
                ("kubernetes.io/config.source".to_string(), "file".to_string()),
            ]
            .into(),
        );
        p
    }

    #[tokio::test]
    async fn creates_replaces_and_removes_mirrors() {
        let api = Arc::new(FakeApi::new());
        let client: Arc<dyn MirrorClient> =
            Arc::new(ApiMirrorClient { pods: api.clone(), nodes: api.clone(), node_name: "n1".into() });
        let k = ("kube-system".to_string(), "etcd-n1".to_string());
        let s1 = Arc::new(static_pod("h1"));
        reconcile(client.clone(), [(k.clone(), s1)].into(), HashMap::new()).await;
        let m = api.pod("kube-system", "etcd-n1").unwrap();
        assert_eq!(m.metadata.annotations.as_ref().unwrap()[CONFIG_MIRROR], "h1");
        assert_ne!(m.metadata.uid.as_deref(), Some("h1"), "the mirror has its own UID");

        // The static pod changed: the mirror is replaced.
        let s2 = Arc::new(static_pod("h2"));
        reconcile(client.clone(), [(k.clone(), s2)].into(), [(k.clone(), Arc::new(m))].into()).await;
        let m2 = api.pod("kube-system", "etcd-n1").unwrap();
        assert_eq!(m2.metadata.annotations.as_ref().unwrap()[CONFIG_MIRROR], "h2");

        // The static pod is gone: so is the mirror.
        reconcile(client, HashMap::new(), [(k, Arc::new(m2))].into()).await;
        assert!(api.pod("kube-system", "etcd-n1").is_none());
    }
}
