//! The kube-rs implementation of the apiserver traits of `kubelet-apiclient` (the Go kubelet's clientset use).
//!
//! [`KubeApi::from_kubeconfig`] builds a client from `--kubeconfig` (client certificates, tokens, exec plugins
//! as kube-rs supports them). Every call maps kube's errors to [`ApiError`] in one place ([`map_err`]); patches
//! are strategic-merge patches as upstream sends them. Only this crate and the binary depend on kube.

pub mod bootstrap;
pub mod certificate;

use std::path::Path;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchParams};
use kube::core::WatchEvent as KubeWatchEvent;
use kubelet_apiclient::{
    ApiError, ApiResult, EventApi, LeaseApi, NodeApi, ObjectEvent, ObjectStream, PodApi, PodWatchApi, ServiceApi,
    WatchEvent,
};

/// Errors building the client.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or is invalid.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The client could not be built from it.
    #[error("kubeconfig {path}: cannot build a client: {message}")]
    Client {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Maps a kube error to the kubelet's [`ApiError`].
pub fn map_err(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) => {
            let msg = s.message.clone();
            match (s.code, s.reason.as_str()) {
                (404, _) => ApiError::NotFound(msg),
                (409, "AlreadyExists") => ApiError::AlreadyExists(msg),
                (409, _) => ApiError::Conflict(msg),
                (410, _) => ApiError::Gone(msg),
                (500..=504, _) | (429, _) => ApiError::Unavailable(format!("{}: {msg}", s.code)),
                (code, _) => ApiError::Other { code, message: msg },
            }
        }
        kube::Error::HyperError(e) => ApiError::Unavailable(error_chain(&e)),
        kube::Error::Service(e) => ApiError::Unavailable(error_chain(e.as_ref())),
        other => ApiError::Other { code: 0, message: error_chain(&other) },
    }
}

/// An error with every cause it carries (`client error (SendRequest): connection closed before message
/// completed`), so a log line says what happened rather than only which layer saw it.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// Client-side rate limit (`kubeAPIQPS`, `kubeAPIBurst`): a token bucket every request waits on, as client-go's
/// token bucket rate limiter. Watches take a token to start, not per event.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: tokio::sync::Mutex<(f64, tokio::time::Instant)>,
}

impl RateLimiter {
    /// A bucket of `burst` tokens refilled at `qps` per second; `qps <= 0` disables limiting.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps, burst, state: tokio::sync::Mutex::new((burst, tokio::time::Instant::now())) }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        let mut st = self.state.lock().await;
        let (tokens, last) = &mut *st;
        *tokens = (*tokens + last.elapsed().as_secs_f64() * self.qps).min(self.burst);
        *last = tokio::time::Instant::now();
        if *tokens < 1.0 {
            let wait = std::time::Duration::from_secs_f64((1.0 - *tokens) / self.qps);
            tokio::time::sleep(wait).await;
            *tokens = 1.0;
            *last = tokio::time::Instant::now();
        }
        *tokens -= 1.0;
    }
}

/// The apiserver through kube-rs.
#[derive(Clone)]
pub struct KubeApi {
    pub(crate) client: kube::Client,
    limiter: std::sync::Arc<RateLimiter>,
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi").finish()
    }
}

impl KubeApi {
    /// A client from a kubeconfig file.
    pub async fn from_kubeconfig(path: &Path) -> Result<Self, KubeError> {
        let p = path.display().to_string();
        let kc = kube::config::Kubeconfig::read_from(path)
            .map_err(|e| KubeError::Kubeconfig { path: p.clone(), message: e.to_string() })?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| KubeError::Kubeconfig { path: p.clone(), message: e.to_string() })?;
        let base = cfg.cluster_url.clone();
        let builder = kube::client::ClientBuilder::try_from(cfg)
            .map_err(|e| KubeError::Client { path: p, message: e.to_string() })?;
        let client = if kubelet_trace::enabled() {
            // kube's stack is not Clone: a buffer in front of it makes it so, for the trace layer on top.
            builder
                .with_layer(&tower::buffer::BufferLayer::new(1024))
                .with_layer(&kubelet_trace::HttpTraceLayer::with_base(base))
                .build()
        } else {
            builder.build()
        };
        Ok(Self { client, limiter: std::sync::Arc::new(RateLimiter::new(0.0, 1)) })
    }

    /// A client whose TLS client certificate follows a certificate manager's (see [`certificate::transport`]),
    /// and the tracker of its connections.
    pub async fn from_kubeconfig_rotating(
        path: &Path,
        certs: tokio::sync::watch::Receiver<Option<std::sync::Arc<certificate::Pair>>>,
    ) -> Result<(Self, certificate::transport::ConnTracker), KubeError> {
        let (client, conns) = certificate::transport::rotating_client(path, certs).await?;
        Ok((Self::new(client), conns))
    }

    /// The CSR API with this client's credentials.
    pub fn csr_client(&self) -> certificate::csr::KubeCsr {
        certificate::csr::KubeCsr::new(self.client.clone())
    }

    /// A client over an existing kube client.
    pub fn new(client: kube::Client) -> Self {
        Self { client, limiter: std::sync::Arc::new(RateLimiter::new(0.0, 1)) }
    }

    /// Limits requests to `qps` per second with bursts of `burst` (`kubeAPIQPS`, `kubeAPIBurst`).
    pub fn with_rate_limit(mut self, qps: f64, burst: u32) -> Self {
        self.limiter = std::sync::Arc::new(RateLimiter::new(qps, burst));
        self
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn pods(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }
}

fn strategic() -> PatchParams {
    PatchParams::default()
}

#[async_trait]
impl NodeApi for KubeApi {
    async fn get_node(&self, name: &str) -> ApiResult<Option<Node>> {
        self.limiter.acquire().await;
        self.nodes().get_opt(name).await.map_err(map_err)
    }

    async fn create_node(&self, node: &Node) -> ApiResult<Node> {
        self.limiter.acquire().await;
        self.nodes().create(&PostParams::default(), node).await.map_err(map_err)
    }

    async fn patch_node(&self, name: &str, patch: &serde_json::Value) -> ApiResult<Node> {
        self.limiter.acquire().await;
        self.nodes().patch(name, &strategic(), &Patch::Strategic(patch)).await.map_err(map_err)
    }

    async fn patch_node_status(&self, name: &str, patch: &serde_json::Value) -> ApiResult<Node> {
        self.limiter.acquire().await;
        self.nodes().patch_status(name, &strategic(), &Patch::Strategic(patch)).await.map_err(map_err)
    }
}

#[async_trait]
impl LeaseApi for KubeApi {
    async fn get_lease(&self, ns: &str, name: &str) -> ApiResult<Option<Lease>> {
        self.limiter.acquire().await;
        Api::<Lease>::namespaced(self.client.clone(), ns).get_opt(name).await.map_err(map_err)
    }

    async fn create_lease(&self, lease: &Lease) -> ApiResult<Lease> {
        self.limiter.acquire().await;
        let ns = lease.metadata.namespace.clone().unwrap_or_default();
        Api::<Lease>::namespaced(self.client.clone(), &ns).create(&PostParams::default(), lease).await.map_err(map_err)
    }

    async fn update_lease(&self, lease: &Lease) -> ApiResult<Lease> {
        self.limiter.acquire().await;
        let ns = lease.metadata.namespace.clone().unwrap_or_default();
        let name = lease.metadata.name.clone().unwrap_or_default();
        Api::<Lease>::namespaced(self.client.clone(), &ns)
            .replace(&name, &PostParams::default(), lease)
            .await
            .map_err(map_err)
    }
}

#[async_trait]
impl PodApi for KubeApi {
    async fn get_pod(&self, ns: &str, name: &str) -> ApiResult<Option<Pod>> {
        self.limiter.acquire().await;
        self.pods(ns).get_opt(name).await.map_err(map_err)
    }

    async fn create_pod(&self, pod: &Pod) -> ApiResult<Pod> {
        self.limiter.acquire().await;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        self.pods(&ns).create(&PostParams::default(), pod).await.map_err(map_err)
    }

    async fn patch_pod_status(&self, ns: &str, name: &str, patch: &serde_json::Value) -> ApiResult<Pod> {
        self.limiter.acquire().await;
        self.pods(ns).patch_status(name, &strategic(), &Patch::Strategic(patch)).await.map_err(map_err)
    }

    async fn delete_pod(&self, ns: &str, name: &str, grace: Option<i64>, uid: Option<&str>) -> ApiResult<()> {
        self.limiter.acquire().await;
        let dp = DeleteParams {
            grace_period_seconds: grace.map(|g| g.max(0) as u32),
            preconditions: uid.map(|u| Preconditions { uid: Some(u.to_string()), resource_version: None }),
            ..Default::default()
        };
        self.pods(ns).delete(name, &dp).await.map(|_| ()).map_err(map_err)
    }
}

#[async_trait]
impl PodWatchApi for KubeApi {
    async fn list_pods(&self, node: &str) -> ApiResult<(Vec<Pod>, String)> {
        self.limiter.acquire().await;
        let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = Api::<Pod>::all(self.client.clone()).list(&lp).await.map_err(map_err)?;
        Ok((list.items, list.metadata.resource_version.unwrap_or_default()))
    }

    async fn watch_pods(&self, node: &str, rv: &str) -> ApiResult<BoxStream<'static, ApiResult<WatchEvent>>> {
        self.limiter.acquire().await;
        let wp = WatchParams::default().fields(&format!("spec.nodeName={node}")).timeout(290).disable_bookmarks();
        let stream = Api::<Pod>::all(self.client.clone()).watch(&wp, rv).await.map_err(map_err)?;
        Ok(stream
            .map_err(map_err)
            .map(|r| {
                r.and_then(|ev| match ev {
                    KubeWatchEvent::Added(p) => Ok(WatchEvent::Added(p)),
                    KubeWatchEvent::Modified(p) => Ok(WatchEvent::Modified(p)),
                    KubeWatchEvent::Deleted(p) => Ok(WatchEvent::Deleted(p)),
                    KubeWatchEvent::Bookmark(b) => Ok(WatchEvent::Bookmark(b.metadata.resource_version)),
                    KubeWatchEvent::Error(s) => Err(map_err(kube::Error::Api(s))),
                })
            })
            .boxed())
    }
}

#[async_trait]
impl EventApi for KubeApi {
    async fn create_event(&self, event: &Event) -> ApiResult<()> {
        self.limiter.acquire().await;
        let ns = event.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        Api::<Event>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), event)
            .await
            .map(|_| ())
            .map_err(map_err)
    }

    async fn patch_event(&self, ns: &str, name: &str, patch: &serde_json::Value) -> ApiResult<()> {
        self.limiter.acquire().await;
        Api::<Event>::namespaced(self.client.clone(), ns)
            .patch(name, &strategic(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
            .map_err(map_err)
    }
}

#[async_trait]
impl kubelet_apiclient::ObjectApi for KubeApi {
    async fn get_config_map(&self, ns: &str, name: &str) -> ApiResult<Option<k8s_openapi::api::core::v1::ConfigMap>> {
        self.limiter.acquire().await;
        Api::namespaced(self.client.clone(), ns).get_opt(name).await.map_err(map_err)
    }

    async fn get_secret(&self, ns: &str, name: &str) -> ApiResult<Option<k8s_openapi::api::core::v1::Secret>> {
        self.limiter.acquire().await;
        Api::namespaced(self.client.clone(), ns).get_opt(name).await.map_err(map_err)
    }

    async fn list_config_map(&self, ns: &str, name: &str) -> ApiResult<(Option<ConfigMap>, String)> {
        self.list_named(ns, name).await
    }

    async fn watch_config_map(&self, ns: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<ConfigMap>> {
        self.watch_named(ns, name, rv).await
    }

    async fn list_secret(&self, ns: &str, name: &str) -> ApiResult<(Option<Secret>, String)> {
        self.list_named(ns, name).await
    }

    async fn watch_secret(&self, ns: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<Secret>> {
        self.watch_named(ns, name, rv).await
    }
}

impl KubeApi {
    /// Lists the object `name` of a namespaced kind (zero or one) with the list's resourceVersion.
    async fn list_named<K>(&self, ns: &str, name: &str) -> ApiResult<(Option<K>, String)>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.limiter.acquire().await;
        let lp = ListParams::default().fields(&format!("metadata.name={name}"));
        let list = Api::<K>::namespaced(self.client.clone(), ns).list(&lp).await.map_err(map_err)?;
        Ok((list.items.into_iter().next(), list.metadata.resource_version.unwrap_or_default()))
    }

    /// Watches the object `name` of a namespaced kind from `rv`.
    async fn watch_named<K>(&self, ns: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<K>>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        self.limiter.acquire().await;
        let wp = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(290).disable_bookmarks();
        let stream = Api::<K>::namespaced(self.client.clone(), ns).watch(&wp, rv).await.map_err(map_err)?;
        Ok(object_events(stream))
    }
}

/// A kube watch as [`ObjectEvent`]s; an `ERROR` event (a 410 among them) becomes the stream's error.
fn object_events<K, S>(stream: S) -> ObjectStream<K>
where
    K: Send + 'static,
    S: futures::Stream<Item = kube::Result<KubeWatchEvent<K>>> + Send + 'static,
{
    stream
        .map_err(map_err)
        .map(|r| {
            r.and_then(|ev| match ev {
                KubeWatchEvent::Added(o) | KubeWatchEvent::Modified(o) => Ok(ObjectEvent::Applied(o)),
                KubeWatchEvent::Deleted(o) => Ok(ObjectEvent::Deleted(o)),
                KubeWatchEvent::Bookmark(b) => Ok(ObjectEvent::Bookmark(b.metadata.resource_version)),
                KubeWatchEvent::Error(s) => Err(map_err(kube::Error::Api(s))),
            })
        })
        .boxed()
}

/// Every Service, as the kubelet's service informer lists and watches them (all namespaces, with bookmarks, the
/// server ending each watch after five minutes or so as client-go's reflector asks).
#[async_trait]
impl ServiceApi for KubeApi {
    async fn list_services(&self) -> ApiResult<(Vec<Service>, String)> {
        self.limiter.acquire().await;
        let list = Api::<Service>::all(self.client.clone()).list(&ListParams::default()).await.map_err(map_err)?;
        Ok((list.items, list.metadata.resource_version.unwrap_or_default()))
    }

    async fn watch_services(&self, rv: &str) -> ApiResult<ObjectStream<Service>> {
        self.limiter.acquire().await;
        let wp = WatchParams::default().timeout(290);
        let stream = Api::<Service>::all(self.client.clone()).watch(&wp, rv).await.map_err(map_err)?;
        Ok(object_events(stream))
    }
}

/// Every RuntimeClass (`node.k8s.io/v1`, cluster-scoped), as the kubelet's RuntimeClass informer lists and watches
/// them (the Node authorizer allows it).
#[async_trait]
impl kubelet_apiclient::ListWatch<k8s_openapi::api::node::v1::RuntimeClass> for KubeApi {
    async fn list_all(&self) -> ApiResult<(Vec<k8s_openapi::api::node::v1::RuntimeClass>, String)> {
        self.limiter.acquire().await;
        let api = Api::<k8s_openapi::api::node::v1::RuntimeClass>::all(self.client.clone());
        let list = api.list(&ListParams::default()).await.map_err(map_err)?;
        Ok((list.items, list.metadata.resource_version.unwrap_or_default()))
    }

    async fn watch_all(&self, rv: &str) -> ApiResult<ObjectStream<k8s_openapi::api::node::v1::RuntimeClass>> {
        self.limiter.acquire().await;
        let wp = WatchParams::default().timeout(290);
        let api = Api::<k8s_openapi::api::node::v1::RuntimeClass>::all(self.client.clone());
        Ok(object_events(api.watch(&wp, rv).await.map_err(map_err)?))
    }
}

/// Every CSIDriver (`storage.k8s.io/v1`, cluster-scoped), as the kubelet's CSIDriver informer lists and watches them
/// (the Node authorizer's `system:node` role allows it).
#[async_trait]
impl kubelet_apiclient::ListWatch<k8s_openapi::api::storage::v1::CSIDriver> for KubeApi {
    async fn list_all(&self) -> ApiResult<(Vec<k8s_openapi::api::storage::v1::CSIDriver>, String)> {
        self.limiter.acquire().await;
        let api = Api::<k8s_openapi::api::storage::v1::CSIDriver>::all(self.client.clone());
        let list = api.list(&ListParams::default()).await.map_err(map_err)?;
        Ok((list.items, list.metadata.resource_version.unwrap_or_default()))
    }

    async fn watch_all(&self, rv: &str) -> ApiResult<ObjectStream<k8s_openapi::api::storage::v1::CSIDriver>> {
        self.limiter.acquire().await;
        let wp = WatchParams::default().timeout(290);
        let api = Api::<k8s_openapi::api::storage::v1::CSIDriver>::all(self.client.clone());
        Ok(object_events(api.watch(&wp, rv).await.map_err(map_err)?))
    }
}

#[async_trait]
impl kubelet_apiclient::CsiNodeApi for KubeApi {
    async fn get_csi_node(&self, name: &str) -> ApiResult<Option<k8s_openapi::api::storage::v1::CSINode>> {
        self.limiter.acquire().await;
        Api::<k8s_openapi::api::storage::v1::CSINode>::all(self.client.clone()).get_opt(name).await.map_err(map_err)
    }

    async fn create_csi_node(
        &self,
        csi_node: &k8s_openapi::api::storage::v1::CSINode,
    ) -> ApiResult<k8s_openapi::api::storage::v1::CSINode> {
        self.limiter.acquire().await;
        Api::<k8s_openapi::api::storage::v1::CSINode>::all(self.client.clone())
            .create(&PostParams::default(), csi_node)
            .await
            .map_err(map_err)
    }

    async fn update_csi_node(
        &self,
        csi_node: &k8s_openapi::api::storage::v1::CSINode,
    ) -> ApiResult<k8s_openapi::api::storage::v1::CSINode> {
        self.limiter.acquire().await;
        let name = csi_node.metadata.name.clone().unwrap_or_default();
        Api::<k8s_openapi::api::storage::v1::CSINode>::all(self.client.clone())
            .replace(&name, &PostParams::default(), csi_node)
            .await
            .map_err(map_err)
    }
}

#[async_trait]
impl kubelet_apiclient::StorageApi for KubeApi {
    async fn get_pvc(
        &self,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>> {
        self.limiter.acquire().await;
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(map_err)
    }

    async fn get_pv(&self, name: &str) -> ApiResult<Option<k8s_openapi::api::core::v1::PersistentVolume>> {
        self.limiter.acquire().await;
        Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(map_err)
    }

    async fn get_volume_attachment(
        &self,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::storage::v1::VolumeAttachment>> {
        self.limiter.acquire().await;
        Api::<k8s_openapi::api::storage::v1::VolumeAttachment>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(map_err)
    }
}

#[async_trait]
impl kubelet_apiclient::DraApi for KubeApi {
    async fn get_resource_claim(
        &self,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::resource::v1::ResourceClaim>> {
        self.limiter.acquire().await;
        Api::<k8s_openapi::api::resource::v1::ResourceClaim>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(map_err)
    }

    async fn delete_resource_slices(&self, field_selector: &str) -> ApiResult<()> {
        self.limiter.acquire().await;
        let lp = ListParams::default().fields(field_selector);
        Api::<k8s_openapi::api::resource::v1::ResourceSlice>::all(self.client.clone())
            .delete_collection(&DeleteParams::default(), &lp)
            .await
            .map(|_| ())
            .map_err(map_err)
    }
}

#[async_trait]
impl kubelet_apiclient::ServiceAccountApi for KubeApi {
    async fn get_service_account(
        &self,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::core::v1::ServiceAccount>> {
        self.limiter.acquire().await;
        Api::namespaced(self.client.clone(), ns).get_opt(name).await.map_err(map_err)
    }
}

#[async_trait]
impl kubelet_apiclient::TokenApi for KubeApi {
    async fn create_token(
        &self,
        ns: &str,
        name: &str,
        request: &k8s_openapi::api::authentication::v1::TokenRequest,
    ) -> ApiResult<k8s_openapi::api::authentication::v1::TokenRequest> {
        self.limiter.acquire().await;
        let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        api.create_token_request(name, &PostParams::default(), request).await.map_err(map_err)
    }
}

#[async_trait]
impl kubelet_apiclient::ReviewApi for KubeApi {
    async fn create_token_review(
        &self,
        review: &k8s_openapi::api::authentication::v1::TokenReview,
    ) -> ApiResult<k8s_openapi::api::authentication::v1::TokenReview> {
        self.limiter.acquire().await;
        let api: Api<k8s_openapi::api::authentication::v1::TokenReview> = Api::all(self.client.clone());
        api.create(&PostParams::default(), review).await.map_err(map_err)
    }

    async fn create_subject_access_review(
        &self,
        review: &k8s_openapi::api::authorization::v1::SubjectAccessReview,
    ) -> ApiResult<k8s_openapi::api::authorization::v1::SubjectAccessReview> {
        self.limiter.acquire().await;
        let api: Api<k8s_openapi::api::authorization::v1::SubjectAccessReview> = Api::all(self.client.clone());
        api.create(&PostParams::default(), review).await.map_err(map_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_their_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (SendRequest)")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("connection closed before message completed"));
        assert_eq!(error_chain(&e), "client error (SendRequest): connection closed before message completed");
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_bursts_then_qps() {
        let l = RateLimiter::new(5.0, 10);
        let t0 = tokio::time::Instant::now();
        for _ in 0..10 {
            l.acquire().await;
        }
        assert_eq!(t0.elapsed(), std::time::Duration::ZERO, "a burst of 10 passes at once");
        for _ in 0..5 {
            l.acquire().await;
        }
        let e = t0.elapsed().as_secs_f64();
        assert!((0.95..=1.05).contains(&e), "then 5 per second: {e}");
    }
}
