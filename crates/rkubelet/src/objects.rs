//! ConfigMaps, Secrets and Services for container environments and volumes, and service account tokens for
//! projected volumes, read from the apiserver once the node joined its cluster (`kubelet.go` configMapManager,
//! secretManager, serviceLister, and the token manager's TokenRequest). ConfigMaps and Secrets follow
//! `configMapAndSecretChangeDetectionStrategy`: Watch (default, [`ObjectCache`]), Cache (a GET at most every
//! minute per object) or Get. Services come from the watched [`ServiceCache`] of every namespace; until it has
//! synced, a pod from the apiserver gets no environment (`services_synced`). RuntimeClasses come from their own
//! watched cache (`runtimeclass.Manager`). Until the node joined, and on a standalone node, references and runtime
//! classes cannot be resolved, there are no service links and no tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kubelet::object_cache::ObjectCache;
use kubelet::watched_cache::{RuntimeClassCache, ServiceCache};
use kubelet_apiclient::{ObjectApi, TokenApi};
use kubelet_runtime::env::{NoObjects, ObjectSource};
use kubelet_volume::{NoTokens, TokenFetcher};

/// How long an object is reused with the `Cache` strategy (upstream's default TTL without a node annotation).
const OBJECT_TTL: std::time::Duration = std::time::Duration::from_secs(60);

type TtlCache<T> = Mutex<HashMap<(String, String), (Option<T>, tokio::time::Instant)>>;

/// How ConfigMaps and Secrets are read (`configMapAndSecretChangeDetectionStrategy`).
pub enum Strategy {
    /// One watch per object (the default).
    Watch(Arc<ObjectCache<ConfigMap>>, Arc<ObjectCache<Secret>>),
    /// A GET per use.
    Get,
    /// A GET at most every minute per object.
    Cache(TtlCache<ConfigMap>, TtlCache<Secret>),
}

impl Strategy {
    /// The strategy named in the (validated) configuration; the Watch one checks idle objects until `cancel`.
    pub fn new(
        name: &str,
        api: Arc<dyn ObjectApi>,
        sync_frequency: std::time::Duration,
        tracker: &tokio_util::task::TaskTracker,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Self {
        match name {
            "Watch" => {
                let cms = Arc::new(ObjectCache::new(api.clone(), sync_frequency));
                let secrets = Arc::new(ObjectCache::new(api, sync_frequency));
                tracker.spawn(cms.clone().run(cancel.clone()));
                tracker.spawn(secrets.clone().run(cancel.clone()));
                Strategy::Watch(cms, secrets)
            }
            "Cache" => Strategy::Cache(Mutex::default(), Mutex::default()),
            // The configuration's validation refused anything else.
            _ => Strategy::Get,
        }
    }
}

struct Bound {
    api: Arc<dyn ObjectApi>,
    tokens: Arc<dyn TokenApi>,
    strategy: Strategy,
    services: Arc<ServiceCache>,
    runtime_classes: Arc<RuntimeClassCache>,
}

/// The objects source of the runtime and volume managers, bound to the apiserver after start-up. ConfigMaps and
/// Secrets are read as the strategy says; Services from the informer's cache, which keeps its last state while the
/// apiserver cannot be reached.
#[derive(Default)]
pub struct ApiObjects(OnceLock<Bound>);

impl ApiObjects {
    /// Reads from `api` and `services` from now on.
    pub fn bind<A: ObjectApi + TokenApi>(
        &self,
        api: Arc<A>,
        strategy: Strategy,
        services: Arc<ServiceCache>,
        runtime_classes: Arc<RuntimeClassCache>,
    ) {
        let _ = self.0.set(Bound { api: api.clone(), tokens: api, strategy, services, runtime_classes });
    }
}

/// A read through the `Cache` strategy: the last answer if younger than [`OBJECT_TTL`], else a GET; when the GET
/// fails, the last answer however old (as upstream's cache-based manager). Entries unread for ten TTLs go.
async fn ttl_get<T: Clone, F>(cache: &TtlCache<T>, ns: &str, name: &str, get: F) -> Result<Option<T>, String>
where
    F: std::future::Future<Output = kubelet_apiclient::ApiResult<Option<T>>>,
{
    let key = (ns.to_string(), name.to_string());
    let now = tokio::time::Instant::now();
    if let Some((v, at)) = cache.lock().unwrap().get(&key)
        && now.duration_since(*at) < OBJECT_TTL
    {
        return Ok(v.clone());
    }
    match get.await {
        Ok(v) => {
            let mut c = cache.lock().unwrap();
            c.retain(|_, (_, at)| now.duration_since(*at) < OBJECT_TTL * 10);
            c.insert(key, (v.clone(), now));
            Ok(v)
        }
        Err(e) => cache.lock().unwrap().get(&key).map(|(v, _)| v.clone()).ok_or_else(|| e.to_string()),
    }
}

#[async_trait]
impl TokenFetcher for ApiObjects {
    async fn request_token(&self, ns: &str, name: &str, request: &TokenRequest) -> Result<TokenRequest, String> {
        match self.0.get() {
            Some(b) => b.tokens.create_token(ns, name, request).await.map_err(|e| e.to_string()),
            None => NoTokens.request_token(ns, name, request).await,
        }
    }
}

#[async_trait]
impl ObjectSource for ApiObjects {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        let Some(b) = self.0.get() else { return NoObjects.config_map(ns, name).await };
        match &b.strategy {
            Strategy::Watch(cms, _) => cms.get(ns, name).await,
            Strategy::Get => b.api.get_config_map(ns, name).await.map_err(|e| e.to_string()),
            Strategy::Cache(cms, _) => ttl_get(cms, ns, name, b.api.get_config_map(ns, name)).await,
        }
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        let Some(b) = self.0.get() else { return NoObjects.secret(ns, name).await };
        match &b.strategy {
            Strategy::Watch(_, secrets) => secrets.get(ns, name).await,
            Strategy::Get => b.api.get_secret(ns, name).await.map_err(|e| e.to_string()),
            Strategy::Cache(_, secrets) => ttl_get(secrets, ns, name, b.api.get_secret(ns, name)).await,
        }
    }

    async fn services(&self, ns: &str) -> Result<Vec<Service>, String> {
        Ok(self.0.get().map(|b| b.services.list(ns)).unwrap_or_default())
    }

    fn services_synced(&self) -> bool {
        self.0.get().is_none_or(|b| b.services.has_synced())
    }

    fn runtime_handler(&self, name: &str) -> Result<String, String> {
        let Some(b) = self.0.get() else {
            return Err(format!(
                "runtimeclass.node.k8s.io {name:?} cannot be resolved: the node has not joined a cluster (yet, or it \
                 runs without --kubeconfig)"
            ));
        };
        kubelet::runtime_class::lookup_runtime_handler(&b.runtime_classes, name)
    }
}
