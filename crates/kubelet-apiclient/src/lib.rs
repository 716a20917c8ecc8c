//! What the kubelet needs of the apiserver, as narrow traits (the Go kubelet's uses of `clientset.Interface`
//! in `pkg/kubelet/kubelet_node_status.go`, `pkg/kubelet/status`, `pkg/kubelet/pod/mirror_client.go`,
//! `component-helpers/apimachinery/lease`, `pkg/kubelet/config/apiserver.go`, `client-go/tools/record`).
//!
//! The kube-rs implementation lives in `kubelet-kube`; [`fake::FakeApi`] keeps real state in memory for unit
//! tests and benchmarks. Every call returns a typed [`ApiError`]; callers retry with back-off where upstream
//! does and never crash on an outage.

pub mod fake;
pub mod patch;

use async_trait::async_trait;
use futures::stream::BoxStream;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenReview};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, Service};
use thiserror::Error;

/// Why an apiserver call failed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ApiError {
    /// 404.
    #[error("{0} not found")]
    NotFound(String),
    /// 409 AlreadyExists.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// 409 Conflict (stale resourceVersion or failed precondition).
    #[error("conflict on {0}; the object changed, read it again")]
    Conflict(String),
    /// 410 Gone (a watch's resourceVersion is too old).
    #[error("resource version too old: {0}")]
    Gone(String),
    /// The apiserver cannot be reached or did not answer in time.
    #[error("apiserver unavailable: {0}")]
    Unavailable(String),
    /// Any other failure, with the HTTP status code.
    #[error("apiserver error {code}: {message}")]
    Other {
        /// HTTP status code (0 when not HTTP).
        code: u16,
        /// The server's message.
        message: String,
    },
}

impl ApiError {
    /// Whether the object was not found.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::NotFound(_))
    }
}

/// Result of an apiserver call.
pub type ApiResult<T> = Result<T, ApiError>;

/// The node object (`kubelet_node_status.go`).
#[async_trait]
pub trait NodeApi: Send + Sync + 'static {
    /// The node, or `None`.
    async fn get_node(&self, name: &str) -> ApiResult<Option<Node>>;
    /// Creates the node.
    async fn create_node(&self, node: &Node) -> ApiResult<Node>;
    /// Strategic-merge-patches the node's metadata/spec.
    async fn patch_node(&self, name: &str, patch: &serde_json::Value) -> ApiResult<Node>;
    /// Strategic-merge-patches `nodes/status`.
    async fn patch_node_status(&self, name: &str, patch: &serde_json::Value) -> ApiResult<Node>;
}

/// The node lease in `kube-node-lease` (`component-helpers/apimachinery/lease`).
#[async_trait]
pub trait LeaseApi: Send + Sync + 'static {
    /// The lease, or `None`.
    async fn get_lease(&self, namespace: &str, name: &str) -> ApiResult<Option<Lease>>;
    /// Creates the lease.
    async fn create_lease(&self, lease: &Lease) -> ApiResult<Lease>;
    /// Replaces the lease (optimistic concurrency on its resourceVersion).
    async fn update_lease(&self, lease: &Lease) -> ApiResult<Lease>;
}

/// Pods: status, mirror pods, final deletion (`pkg/kubelet/status`, `pkg/kubelet/pod/mirror_client.go`).
#[async_trait]
pub trait PodApi: Send + Sync + 'static {
    /// The pod, or `None`.
    async fn get_pod(&self, namespace: &str, name: &str) -> ApiResult<Option<Pod>>;
    /// Creates a pod (mirror pods).
    async fn create_pod(&self, pod: &Pod) -> ApiResult<Pod>;
    /// Strategic-merge-patches `pods/status`.
    async fn patch_pod_status(&self, namespace: &str, name: &str, patch: &serde_json::Value) -> ApiResult<Pod>;
    /// Deletes a pod with a grace period, if its UID is still `uid` (when given).
    async fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        grace_seconds: Option<i64>,
        uid: Option<&str>,
    ) -> ApiResult<()>;
}

/// One change seen by a pod watch.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// Added.
    Added(Pod),
    /// Modified.
    Modified(Pod),
    /// Deleted.
    Deleted(Pod),
    /// A bookmark: the stream is current as of this resourceVersion.
    Bookmark(String),
}

/// List and watch of the pods bound to this node (`pkg/kubelet/config/apiserver.go`).
#[async_trait]
pub trait PodWatchApi: Send + Sync + 'static {
    /// Every pod with `spec.nodeName=node`, and the list's resourceVersion.
    async fn list_pods(&self, node: &str) -> ApiResult<(Vec<Pod>, String)>;
    /// Changes after `resource_version`; the stream ends when the server closes it and yields
    /// [`ApiError::Gone`] when the version is too old.
    async fn watch_pods(
        &self,
        node: &str,
        resource_version: &str,
    ) -> ApiResult<BoxStream<'static, ApiResult<WatchEvent>>>;
}

/// Where events go (`client-go/tools/record` EventSink).
#[async_trait]
pub trait EventApi: Send + Sync + 'static {
    /// Creates an event.
    async fn create_event(&self, event: &Event) -> ApiResult<()>;
    /// Updates a repeated event (count, lastTimestamp).
    async fn patch_event(&self, namespace: &str, name: &str, patch: &serde_json::Value) -> ApiResult<()>;
}

/// One change of a single watched object (a ConfigMap or a Secret).
#[derive(Debug, Clone)]
pub enum ObjectEvent<T> {
    /// Added or modified.
    Applied(T),
    /// Deleted.
    Deleted(T),
    /// A bookmark: the stream is current as of this resourceVersion.
    Bookmark(String),
}

/// A watch of one object.
pub type ObjectStream<T> = BoxStream<'static, ApiResult<ObjectEvent<T>>>;

/// ConfigMaps and Secrets a pod refers to (`configMapManager`, `secretManager`).
/// The list and watch calls select one object by name (`fieldSelector=metadata.name=<name>`), as the kubelet's
/// watch-based managers do.
#[async_trait]
pub trait ObjectApi: Send + Sync + 'static {
    /// A ConfigMap, or None.
    async fn get_config_map(&self, namespace: &str, name: &str) -> ApiResult<Option<ConfigMap>>;
    /// A Secret, or None.
    async fn get_secret(&self, namespace: &str, name: &str) -> ApiResult<Option<Secret>>;
    /// The ConfigMap `name` if it exists, and the list's resourceVersion.
    async fn list_config_map(&self, namespace: &str, name: &str) -> ApiResult<(Option<ConfigMap>, String)>;
    /// Changes of the ConfigMap `name` after `resource_version`.
    async fn watch_config_map(&self, namespace: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<ConfigMap>>;
    /// The Secret `name` if it exists, and the list's resourceVersion.
    async fn list_secret(&self, namespace: &str, name: &str) -> ApiResult<(Option<Secret>, String)>;
    /// Changes of the Secret `name` after `resource_version`.
    async fn watch_secret(&self, namespace: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<Secret>>;
}

/// The Services of every namespace, listed and watched (`kubelet.go`: the SharedInformer behind the
/// `serviceLister`; the Node authorizer lets a node list and watch services cluster-wide).
#[async_trait]
pub trait ServiceApi: Send + Sync + 'static {
    /// Every Service of every namespace, and the list's resourceVersion.
    async fn list_services(&self) -> ApiResult<(Vec<Service>, String)>;
    /// Changes of every Service after `resource_version`; the stream ends when the server closes it and yields
    /// [`ApiError::Gone`] when the version is too old.
    async fn watch_services(&self, resource_version: &str) -> ApiResult<ObjectStream<Service>>;
}

/// Every object of one kind, listed and watched across the cluster (the reflector of a SharedInformer): the
/// Services of every namespace, the RuntimeClasses. Read by the kubelet's watched caches.
#[async_trait]
pub trait ListWatch<K>: Send + Sync + 'static {
    /// Every object, and the list's resourceVersion.
    async fn list_all(&self) -> ApiResult<(Vec<K>, String)>;
    /// Changes after `resource_version`; the stream ends when the server closes it and yields
    /// [`ApiError::Gone`] when the version is too old.
    async fn watch_all(&self, resource_version: &str) -> ApiResult<ObjectStream<K>>;
}

#[async_trait]
impl<T: ServiceApi> ListWatch<Service> for T {
    async fn list_all(&self) -> ApiResult<(Vec<Service>, String)> {
        self.list_services().await
    }

    async fn watch_all(&self, resource_version: &str) -> ApiResult<ObjectStream<Service>> {
        self.watch_services(resource_version).await
    }
}

/// Service account tokens for projected volumes (`serviceaccounts/<name>/token`, used by `pkg/kubelet/token`).
#[async_trait]
pub trait TokenApi: Send + Sync + 'static {
    /// Creates a TokenRequest for the service account `name`; the answer carries the token and its expiration.
    async fn create_token(&self, namespace: &str, name: &str, request: &TokenRequest) -> ApiResult<TokenRequest>;
}

/// ServiceAccounts of the node's pods, for kubelet credential provider plugins in service account token mode (the
/// Node authorizer lets a node get the service account of a pod bound to it).
#[async_trait]
pub trait ServiceAccountApi: Send + Sync + 'static {
    /// The ServiceAccount `namespace/name`, or None.
    async fn get_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::core::v1::ServiceAccount>>;
}

/// The node's CSINode object (`pkg/volume/csi/nodeinfomanager`: the Node authorizer lets a node get, create and
/// update its own).
#[async_trait]
pub trait CsiNodeApi: Send + Sync + 'static {
    /// The CSINode `name`, or None.
    async fn get_csi_node(&self, name: &str) -> ApiResult<Option<k8s_openapi::api::storage::v1::CSINode>>;
    /// Creates it.
    async fn create_csi_node(
        &self,
        csi_node: &k8s_openapi::api::storage::v1::CSINode,
    ) -> ApiResult<k8s_openapi::api::storage::v1::CSINode>;
    /// Replaces it (its resourceVersion a precondition).
    async fn update_csi_node(
        &self,
        csi_node: &k8s_openapi::api::storage::v1::CSINode,
    ) -> ApiResult<k8s_openapi::api::storage::v1::CSINode>;
}

/// The objects behind a pod's persistent volumes (`pkg/kubelet/volumemanager/populator`, `pkg/volume/csi`): the
/// Node authorizer lets a node get the PersistentVolumeClaims its pods reference, their PersistentVolumes, and the
/// VolumeAttachments of those volumes to itself.
#[async_trait]
pub trait StorageApi: Send + Sync + 'static {
    /// The PersistentVolumeClaim `namespace/name`, or None.
    async fn get_pvc(
        &self,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>>;
    /// The PersistentVolume `name`, or None.
    async fn get_pv(&self, name: &str) -> ApiResult<Option<k8s_openapi::api::core::v1::PersistentVolume>>;
    /// The VolumeAttachment `name`, or None.
    async fn get_volume_attachment(
        &self,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::storage::v1::VolumeAttachment>>;
}

/// What the DRA manager needs (`pkg/kubelet/cm/dra`): the ResourceClaims of the node's pods (the Node authorizer
/// lets a node get the claims its pods reference) and the deletion of the node's ResourceSlices (its drivers'
/// published devices; the Node authorizer allows a `deletecollection` selecting `spec.nodeName=<node>`).
#[async_trait]
pub trait DraApi: Send + Sync + 'static {
    /// The ResourceClaim `namespace/name`, or None.
    async fn get_resource_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Option<k8s_openapi::api::resource::v1::ResourceClaim>>;
    /// Deletes the ResourceSlices the field selector names (`spec.nodeName=<node>[,spec.driver=<driver>]`).
    async fn delete_resource_slices(&self, field_selector: &str) -> ApiResult<()>;
}

/// Delegated authentication and authorization for the kubelet's own server (`cmd/kubelet/app/auth.go`): bearer
/// tokens checked with TokenReviews, requests authorized with SubjectAccessReviews. Neither is stored: the
/// answer carries the verdict in `status`.
#[async_trait]
pub trait ReviewApi: Send + Sync + 'static {
    /// POST `/apis/authentication.k8s.io/v1/tokenreviews`.
    async fn create_token_review(&self, review: &TokenReview) -> ApiResult<TokenReview>;
    /// POST `/apis/authorization.k8s.io/v1/subjectaccessreviews`.
    async fn create_subject_access_review(&self, review: &SubjectAccessReview) -> ApiResult<SubjectAccessReview>;
}
