//! An in-memory apiserver for unit tests and benchmarks: real state (nodes, leases, pods, services, events) with
//! resourceVersions, strategic-merge patches applied with the types' patch metadata ([`crate::patch`]), pod and
//! service watches, recorded calls, and an outage switch ([`FakeApi::set_down`]) that makes every call fail as
//! unavailable.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::patch::{NODE, OBJECT, POD, Schema, apply_patch};
use crate::{
    ApiError, ApiResult, EventApi, LeaseApi, NodeApi, ObjectEvent, ObjectStream, PodApi, PodWatchApi, ServiceApi,
    WatchEvent,
};

/// Applies a strategic-merge patch as the apiserver does, with the patch metadata of `schema`
/// ([`crate::patch::POD`], [`crate::patch::NODE`], [`crate::patch::OBJECT`]); a patch that cannot be applied is
/// refused with the apiserver's code ([`crate::patch::PatchError::http_status`]).
fn strategic_merge(target: &mut Value, patch: &Value, schema: &'static Schema) -> ApiResult<()> {
    apply_patch(target, patch, schema).map_err(|e| ApiError::Other { code: e.http_status(), message: e.to_string() })
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, Node>,
    csi_nodes: BTreeMap<String, k8s_openapi::api::storage::v1::CSINode>,
    pvcs: BTreeMap<(String, String), k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    pvs: BTreeMap<String, k8s_openapi::api::core::v1::PersistentVolume>,
    volume_attachments: BTreeMap<String, k8s_openapi::api::storage::v1::VolumeAttachment>,
    leases: BTreeMap<(String, String), Lease>,
    pods: BTreeMap<(String, String), Pod>,
    services: BTreeMap<(String, String), Service>,
    /// Every service change with its resourceVersion, for watches that start from an older version.
    service_log: Vec<(u64, ObjectEvent<Service>)>,
    events: Vec<Event>,
    calls: Vec<String>,
    /// Pod status patches are refused with this error while set.
    refuse_status: Option<ApiError>,
}

/// The in-memory apiserver.
pub struct FakeApi {
    /// The next pod watch answers 410 Gone (as after the watch cache moved on).
    watch_gone: AtomicBool,
    /// Likewise for the next service watch.
    service_watch_gone: AtomicBool,
    state: Mutex<State>,
    rv: AtomicU64,
    down: AtomicBool,
    watch: broadcast::Sender<(u64, WatchEvent)>,
    service_watch: broadcast::Sender<(u64, ObjectEvent<Service>)>,
}

impl Default for FakeApi {
    fn default() -> Self {
        Self {
            watch_gone: AtomicBool::new(false),
            service_watch_gone: AtomicBool::new(false),
            state: Mutex::default(),
            rv: AtomicU64::new(1),
            down: AtomicBool::new(false),
            watch: broadcast::channel(1024).0,
            service_watch: broadcast::channel(1024).0,
        }
    }
}

impl std::fmt::Debug for FakeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApi").field("rv", &self.rv.load(Ordering::Relaxed)).finish()
    }
}

fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

fn from_value<T: serde::de::DeserializeOwned>(v: Value) -> ApiResult<T> {
    serde_json::from_value(v).map_err(|e| ApiError::Other { code: 422, message: e.to_string() })
}

impl FakeApi {
    /// An empty apiserver.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every call fail as unavailable (`true`) or work again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    fn enter(&self, call: String) -> ApiResult<std::sync::MutexGuard<'_, State>> {
        if self.down.load(Ordering::Relaxed) {
            return Err(ApiError::Unavailable("connection refused".into()));
        }
        let mut st = self.state.lock().unwrap();
        st.calls.push(call);
        Ok(st)
    }

    fn next_rv(&self) -> String {
        (self.rv.fetch_add(1, Ordering::Relaxed) + 1).to_string()
    }

    /// Refuses every pod status patch with `error` (the apiserver answering an error), or accepts them again.
    pub fn refuse_pod_status_patches(&self, error: Option<ApiError>) {
        self.state.lock().unwrap().refuse_status = error;
    }

    /// Ends every open pod and service watch (as a connection that breaks).
    pub fn end_watches(&self) {
        let _ = self.watch.send((u64::MAX, WatchEvent::Bookmark("ended".into())));
        let _ = self.service_watch.send((u64::MAX, ObjectEvent::Bookmark("ended".into())));
    }

    /// Ends every open pod and service watch and makes the next one of each kind fail with 410 Gone.
    pub fn expire_watches(&self) {
        self.watch_gone.store(true, Ordering::Relaxed);
        self.service_watch_gone.store(true, Ordering::Relaxed);
        self.end_watches();
    }

    /// Recorded calls, e.g. `patch_node_status n1`.
    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Forgets recorded calls.
    pub fn clear_calls(&self) {
        self.state.lock().unwrap().calls.clear();
    }

    /// The stored node.
    pub fn node(&self, name: &str) -> Option<Node> {
        self.state.lock().unwrap().nodes.get(name).cloned()
    }

    /// The stored CSINode.
    pub fn csi_node(&self, name: &str) -> Option<k8s_openapi::api::storage::v1::CSINode> {
        self.state.lock().unwrap().csi_nodes.get(name).cloned()
    }

    /// The stored lease.
    pub fn lease(&self, ns: &str, name: &str) -> Option<Lease> {
        self.state.lock().unwrap().leases.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// The stored pod.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.state.lock().unwrap().pods.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// Every recorded event.
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().unwrap().events.clone()
    }

    fn publish(&self, ev: WatchEvent) {
        let rv = self.rv.load(Ordering::Relaxed);
        let _ = self.watch.send((rv, ev));
    }

    /// Stores a pod as a user would create it (assigns uid and resourceVersion) and notifies watchers.
    pub fn put_pod(&self, mut pod: Pod) -> Pod {
        let rv = self.next_rv();
        pod.metadata.resource_version = Some(rv);
        if pod.metadata.uid.is_none() {
            pod.metadata.uid = Some(format!("uid-{}", self.rv.load(Ordering::Relaxed)));
        }
        let key = (pod.metadata.namespace.clone().unwrap_or_default(), pod.metadata.name.clone().unwrap_or_default());
        let existed = self.state.lock().unwrap().pods.insert(key, pod.clone()).is_some();
        self.publish(if existed { WatchEvent::Modified(pod.clone()) } else { WatchEvent::Added(pod.clone()) });
        pod
    }

    /// Removes a pod at once and notifies watchers.
    pub fn remove_pod(&self, ns: &str, name: &str) -> Option<Pod> {
        let p = self.state.lock().unwrap().pods.remove(&(ns.to_string(), name.to_string()));
        if let Some(p) = &p {
            self.next_rv();
            self.publish(WatchEvent::Deleted(p.clone()));
        }
        p
    }

    /// Stores a service as a user would create or update it (assigns its resourceVersion) and notifies watchers.
    pub fn put_service(&self, mut svc: Service) -> Service {
        let mut st = self.state.lock().unwrap();
        let rv = self.next_rv();
        svc.metadata.resource_version = Some(rv.clone());
        let key = (svc.metadata.namespace.clone().unwrap_or_default(), svc.metadata.name.clone().unwrap_or_default());
        st.services.insert(key, svc.clone());
        self.publish_service(&mut st, &rv, ObjectEvent::Applied(svc.clone()));
        svc
    }

    /// Logs and sends a service change; under the state lock, so watchers see changes in resourceVersion order.
    fn publish_service(&self, st: &mut State, rv: &str, ev: ObjectEvent<Service>) {
        let rv = rv.parse().unwrap_or(0);
        st.service_log.push((rv, ev.clone()));
        let _ = self.service_watch.send((rv, ev));
    }

    /// Removes a service and notifies watchers (the deleted object carries the deletion's resourceVersion).
    pub fn remove_service(&self, ns: &str, name: &str) -> Option<Service> {
        let mut st = self.state.lock().unwrap();
        let mut svc = st.services.remove(&(ns.to_string(), name.to_string()))?;
        let rv = self.next_rv();
        svc.metadata.resource_version = Some(rv.clone());
        self.publish_service(&mut st, &rv, ObjectEvent::Deleted(svc.clone()));
        Some(svc)
    }
}

#[async_trait]
impl NodeApi for FakeApi {
    async fn get_node(&self, name: &str) -> ApiResult<Option<Node>> {
        Ok(self.enter(format!("get_node {name}"))?.nodes.get(name).cloned())
    }

    async fn create_node(&self, node: &Node) -> ApiResult<Node> {
        let rv = self.next_rv();
        let mut st = self.enter(format!("create_node {}", node.metadata.name.clone().unwrap_or_default()))?;
        let name = node.metadata.name.clone().unwrap_or_default();
        if st.nodes.contains_key(&name) {
            return Err(ApiError::AlreadyExists(format!("nodes {name:?}")));
        }
        let mut n = node.clone();
        n.metadata.resource_version = Some(rv);
        n.metadata.uid = Some(format!("node-uid-{name}"));
        st.nodes.insert(name, n.clone());
        Ok(n)
    }

    async fn patch_node(&self, name: &str, patch: &Value) -> ApiResult<Node> {
        let rv = self.next_rv();
        let mut st = self.enter(format!("patch_node {name}"))?;
        let n = st.nodes.get_mut(name).ok_or_else(|| ApiError::NotFound(format!("nodes {name:?}")))?;
        let mut v = to_value(n);
        let mut p = patch.clone();
        if let Some(o) = p.as_object_mut() {
            o.remove("status");
        }
        strategic_merge(&mut v, &p, &NODE)?;
        let mut new: Node = from_value(v)?;
        new.metadata.resource_version = Some(rv);
        *n = new.clone();
        Ok(new)
    }

    async fn patch_node_status(&self, name: &str, patch: &Value) -> ApiResult<Node> {
        let rv = self.next_rv();
        let mut st = self.enter(format!("patch_node_status {name}"))?;
        let n = st.nodes.get_mut(name).ok_or_else(|| ApiError::NotFound(format!("nodes {name:?}")))?;
        let mut v = to_value(n);
        // The status subresource writes the status and, as the apiserver's node status strategy, the metadata
        // (the CSI node information goes there); never the spec.
        let mut status_patch = serde_json::json!({});
        for key in ["status", "metadata"] {
            if let Some(p) = patch.get(key) {
                status_patch[key] = p.clone();
            }
        }
        strategic_merge(&mut v, &status_patch, &NODE)?;
        let mut new: Node = from_value(v)?;
        new.metadata.resource_version = Some(rv);
        *n = new.clone();
        Ok(new)
    }
}

#[async_trait]
impl LeaseApi for FakeApi {
    async fn get_lease(&self, ns: &str, name: &str) -> ApiResult<Option<Lease>> {
        Ok(self.enter(format!("get_lease {name}"))?.leases.get(&(ns.to_string(), name.to_string())).cloned())
    }

    async fn create_lease(&self, lease: &Lease) -> ApiResult<Lease> {
        let rv = self.next_rv();
        let name = lease.metadata.name.clone().unwrap_or_default();
        let ns = lease.metadata.namespace.clone().unwrap_or_default();
        let mut st = self.enter(format!("create_lease {name}"))?;
        if st.leases.contains_key(&(ns.clone(), name.clone())) {
            return Err(ApiError::AlreadyExists(format!("leases {name:?}")));
        }
        let mut l = lease.clone();
        l.metadata.resource_version = Some(rv);
        st.leases.insert((ns, name), l.clone());
        Ok(l)
    }

    async fn update_lease(&self, lease: &Lease) -> ApiResult<Lease> {
        let rv = self.next_rv();
        let name = lease.metadata.name.clone().unwrap_or_default();
        let ns = lease.metadata.namespace.clone().unwrap_or_default();
        let mut st = self.enter(format!("update_lease {name}"))?;
        let cur =
            st.leases.get_mut(&(ns, name.clone())).ok_or_else(|| ApiError::NotFound(format!("leases {name:?}")))?;
        if cur.metadata.resource_version != lease.metadata.resource_version {
            return Err(ApiError::Conflict(format!("leases {name:?}")));
        }
        let mut l = lease.clone();
        l.metadata.resource_version = Some(rv);
        *cur = l.clone();
        Ok(l)
    }
}

#[async_trait]
impl PodApi for FakeApi {
    async fn get_pod(&self, ns: &str, name: &str) -> ApiResult<Option<Pod>> {
        Ok(self.enter(format!("get_pod {ns}/{name}"))?.pods.get(&(ns.to_string(), name.to_string())).cloned())
    }

    async fn create_pod(&self, pod: &Pod) -> ApiResult<Pod> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        {
            let st = self.enter(format!("create_pod {ns}/{name}"))?;
            if st.pods.contains_key(&(ns.clone(), name.clone())) {
                return Err(ApiError::AlreadyExists(format!("pods {name:?}")));
            }
        }
        let mut p = pod.clone();
        p.metadata.uid = None;
        Ok(self.put_pod(p))
    }

    async fn patch_pod_status(&self, ns: &str, name: &str, patch: &Value) -> ApiResult<Pod> {
        let p = {
            let st = self.enter(format!("patch_pod_status {ns}/{name}"))?;
            if let Some(e) = st.refuse_status.clone() {
                return Err(e);
            }
            st.pods.get(&(ns.to_string(), name.to_string())).cloned()
        };
        let p = p.ok_or_else(|| ApiError::NotFound(format!("pods {name:?}")))?;
        if let Some(uid) = patch.pointer("/metadata/uid").and_then(Value::as_str)
            && p.metadata.uid.as_deref() != Some(uid)
        {
            return Err(ApiError::Conflict(format!("pods {name:?}: uid precondition failed")));
        }
        let mut v = to_value(&p);
        // Only the status is written through the status subresource.
        let status_patch = patch.get("status").map_or(serde_json::json!({}), |s| serde_json::json!({ "status": s }));
        strategic_merge(&mut v, &status_patch, &POD)?;
        let new: Pod = from_value(v)?;
        Ok(self.put_pod(new))
    }

    async fn delete_pod(&self, ns: &str, name: &str, grace: Option<i64>, uid: Option<&str>) -> ApiResult<()> {
        let p = {
            let st = self.enter(format!("delete_pod {ns}/{name} grace={grace:?}"))?;
            st.pods.get(&(ns.to_string(), name.to_string())).cloned()
        };
        let p = p.ok_or_else(|| ApiError::NotFound(format!("pods {name:?}")))?;
        if uid.is_some_and(|u| p.metadata.uid.as_deref() != Some(u)) {
            return Err(ApiError::Conflict(format!("pods {name:?}: uid precondition failed")));
        }
        if grace == Some(0) || p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
            self.remove_pod(ns, name);
        } else {
            let mut p = p;
            p.metadata.deletion_grace_period_seconds = Some(grace.unwrap_or(30));
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            self.put_pod(p);
        }
        Ok(())
    }
}

#[async_trait]
impl PodWatchApi for FakeApi {
    async fn list_pods(&self, node: &str) -> ApiResult<(Vec<Pod>, String)> {
        let st = self.enter(format!("list_pods {node}"))?;
        let pods = st
            .pods
            .values()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .cloned()
            .collect();
        Ok((pods, self.rv.load(Ordering::Relaxed).to_string()))
    }

    async fn watch_pods(&self, node: &str, rv: &str) -> ApiResult<BoxStream<'static, ApiResult<WatchEvent>>> {
        drop(self.enter(format!("watch_pods {node} {rv}"))?);
        if self.watch_gone.swap(false, Ordering::Relaxed) {
            return Err(ApiError::Gone(format!("too old resource version: {rv}")));
        }
        let from: u64 = rv.parse().unwrap_or(0);
        let node = node.to_string();
        let rx = tokio_stream_from(self.watch.subscribe());
        let on_node = move |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str());
        Ok(rx
            .take_while(|(rv, _)| std::future::ready(*rv != u64::MAX))
            .filter_map(move |(rv, ev)| {
                let keep = rv > from
                    && match &ev {
                        WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p) => on_node(p),
                        WatchEvent::Bookmark(_) => true,
                    };
                async move { keep.then_some(Ok(ev)) }
            })
            .boxed())
    }
}

#[async_trait]
impl ServiceApi for FakeApi {
    async fn list_services(&self) -> ApiResult<(Vec<Service>, String)> {
        let st = self.enter("list_services".into())?;
        Ok((st.services.values().cloned().collect(), self.rv.load(Ordering::Relaxed).to_string()))
    }

    async fn watch_services(&self, rv: &str) -> ApiResult<ObjectStream<Service>> {
        let st = self.enter(format!("watch_services {rv}"))?;
        if self.service_watch_gone.swap(false, Ordering::Relaxed) {
            return Err(ApiError::Gone(format!("too old resource version: {rv}")));
        }
        let from: u64 = rv.parse().unwrap_or(0);
        // The changes after `rv` already made, then the live ones (subscribed under the lock: none is missed).
        let past: Vec<_> = st.service_log.iter().filter(|(r, _)| *r > from).cloned().map(Ok).collect();
        let live = self.service_watch.subscribe();
        drop(st);
        // A watcher that fell behind is told so with 410 Gone, as the apiserver's watch cache does.
        let live = tokio_stream::wrappers::BroadcastStream::new(live)
            .map(|r| r.map_err(|e| ApiError::Gone(format!("the watch fell behind: {e}"))));
        Ok(futures::stream::iter(past)
            .chain(live)
            .take_while(|r| std::future::ready(!matches!(r, Ok((u64::MAX, _)))))
            .filter(move |r| std::future::ready(!matches!(r, Ok((rv, _)) if *rv <= from)))
            .map(|r| r.map(|(_, ev)| ev))
            .boxed())
    }
}

fn tokio_stream_from<T: Clone + Send + 'static>(rx: broadcast::Receiver<T>) -> BoxStream<'static, T> {
    // A lagging watcher skips what it missed; a real watch would get 410 and re-list.
    tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(|r| async move { r.ok() }).boxed()
}

#[async_trait]
impl EventApi for FakeApi {
    async fn create_event(&self, event: &Event) -> ApiResult<()> {
        self.enter("create_event".into())?.events.push(event.clone());
        Ok(())
    }

    async fn patch_event(&self, ns: &str, name: &str, patch: &Value) -> ApiResult<()> {
        let mut st = self.enter(format!("patch_event {ns}/{name}"))?;
        let e = st
            .events
            .iter_mut()
            .find(|e| e.metadata.name.as_deref() == Some(name))
            .ok_or_else(|| ApiError::NotFound(format!("events {name:?}")))?;
        let mut v = to_value(e);
        strategic_merge(&mut v, patch, &OBJECT)?;
        *e = from_value(v)?;
        Ok(())
    }
}

impl FakeApi {
    /// Stores (or replaces) a PersistentVolumeClaim, as the PV controller would leave it.
    pub fn put_pvc(&self, pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim) {
        let key = (pvc.metadata.namespace.clone().unwrap_or_default(), pvc.metadata.name.clone().unwrap_or_default());
        self.state.lock().unwrap().pvcs.insert(key, pvc);
    }

    /// Stores (or replaces) a PersistentVolume.
    pub fn put_pv(&self, pv: k8s_openapi::api::core::v1::PersistentVolume) {
        self.state.lock().unwrap().pvs.insert(pv.metadata.name.clone().unwrap_or_default(), pv);
    }

    /// Stores (or replaces) a VolumeAttachment, as the attach/detach controller and the attacher would leave it.
    pub fn put_volume_attachment(&self, va: k8s_openapi::api::storage::v1::VolumeAttachment) {
        self.state.lock().unwrap().volume_attachments.insert(va.metadata.name.clone().unwrap_or_default(), va);
    }
}

#[async_trait]
impl crate::StorageApi for FakeApi {
    async fn get_pvc(
        &self,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>> {
        Ok(self.enter(format!("get_pvc {ns}/{name}"))?.pvcs.get(&(ns.to_string(), name.to_string())).cloned())
    }

    async fn get_pv(&self, name: &str) -> ApiResult<Option<k8s_openapi::api::core::v1::PersistentVolume>> {
        Ok(self.enter(format!("get_pv {name}"))?.pvs.get(name).cloned())
    }

    async fn get_volume_attachment(
        &self,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::storage::v1::VolumeAttachment>> {
        Ok(self.enter(format!("get_volume_attachment {name}"))?.volume_attachments.get(name).cloned())
    }
}

#[async_trait]
impl crate::CsiNodeApi for FakeApi {
    async fn get_csi_node(&self, name: &str) -> ApiResult<Option<k8s_openapi::api::storage::v1::CSINode>> {
        Ok(self.enter(format!("get_csi_node {name}"))?.csi_nodes.get(name).cloned())
    }

    async fn create_csi_node(
        &self,
        csi_node: &k8s_openapi::api::storage::v1::CSINode,
    ) -> ApiResult<k8s_openapi::api::storage::v1::CSINode> {
        let rv = self.next_rv();
        let name = csi_node.metadata.name.clone().unwrap_or_default();
        let mut st = self.enter(format!("create_csi_node {name}"))?;
        if st.csi_nodes.contains_key(&name) {
            return Err(ApiError::AlreadyExists(format!("csinodes.storage.k8s.io {name:?}")));
        }
        let mut n = csi_node.clone();
        n.metadata.resource_version = Some(rv);
        st.csi_nodes.insert(name, n.clone());
        Ok(n)
    }

    async fn update_csi_node(
        &self,
        csi_node: &k8s_openapi::api::storage::v1::CSINode,
    ) -> ApiResult<k8s_openapi::api::storage::v1::CSINode> {
        let rv = self.next_rv();
        let name = csi_node.metadata.name.clone().unwrap_or_default();
        let mut st = self.enter(format!("update_csi_node {name}"))?;
        let cur = st
            .csi_nodes
            .get_mut(&name)
            .ok_or_else(|| ApiError::NotFound(format!("csinodes.storage.k8s.io {name:?}")))?;
        if cur.metadata.resource_version != csi_node.metadata.resource_version {
            return Err(ApiError::Conflict(format!("csinodes.storage.k8s.io {name:?}")));
        }
        let mut n = csi_node.clone();
        n.metadata.resource_version = Some(rv);
        *cur = n.clone();
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_keyed_lists() {
        let mut v = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "status": "True"}], "images": [1, 2]}});
        strategic_merge(
            &mut v,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}], "images": [3], "phase": null}}),
            &NODE,
        )
        .unwrap();
        assert_eq!(v["status"]["conditions"][0]["status"], "True");
        assert_eq!(v["status"]["conditions"][1]["type"], "X");
        assert_eq!(v["status"]["images"], json!([3]));
    }

    #[tokio::test]
    async fn watch_sees_changes_of_pods_on_the_node_only() {
        let api = FakeApi::new();
        let mut w = api.watch_pods("n1", "0").await.unwrap();
        let mut p = Pod::default();
        p.metadata.name = Some("a".into());
        p.metadata.namespace = Some("default".into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec { node_name: Some("n2".into()), ..Default::default() });
        api.put_pod(p.clone());
        p.metadata.name = Some("b".into());
        p.spec.as_mut().unwrap().node_name = Some("n1".into());
        api.put_pod(p);
        match w.next().await.unwrap().unwrap() {
            WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(api.list_pods("n1").await.unwrap().0.len(), 1);
    }

    #[tokio::test]
    async fn lease_updates_need_the_current_version_and_outages_fail_calls() {
        let api = FakeApi::new();
        let mut l = Lease::default();
        l.metadata.name = Some("n1".into());
        l.metadata.namespace = Some("kube-node-lease".into());
        let created = api.create_lease(&l).await.unwrap();
        assert!(api.update_lease(&l).await.unwrap_err().to_string().contains("conflict"));
        api.update_lease(&created).await.unwrap();
        api.set_down(true);
        assert!(matches!(api.get_lease("kube-node-lease", "n1").await, Err(ApiError::Unavailable(_))));
    }
}
