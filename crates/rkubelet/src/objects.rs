//! ConfigMaps, Secrets and Services for container environments and volumes, and service account tokens for
//! projected volumes, read from the apiserver once the node joined its cluster (`kubelet.go` configMapManager,
//! secretManager, serviceLister, and the token manager's TokenRequest). Until then, and on a standalone node,
//! references cannot be resolved, there are no service links and no tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kubelet_apiclient::{ObjectApi, TokenApi};
use kubelet_runtime::env::{NoObjects, ObjectSource};
use kubelet_volume::{NoTokens, TokenFetcher};

/// How long a namespace's service list is reused (the kubelet's service informer is at most this stale here).
const SERVICES_TTL: std::time::Duration = std::time::Duration::from_secs(10);

type ServiceCache = Mutex<HashMap<String, (Vec<Service>, tokio::time::Instant)>>;

/// The objects source of the runtime manager, bound to the apiserver after start-up. Service lists are cached per
/// namespace for [`SERVICES_TTL`], and the last list is used while the apiserver cannot be reached (as an
/// informer's cache would be).
#[derive(Default)]
pub struct ApiObjects(OnceLock<Arc<dyn ObjectApi>>, ServiceCache, OnceLock<Arc<dyn TokenApi>>);

impl ApiObjects {
    /// Reads from `api` from now on.
    pub fn bind<A: ObjectApi + TokenApi>(&self, api: Arc<A>) {
        let _ = self.0.set(api.clone());
        let _ = self.2.set(api);
    }
}

#[async_trait]
impl TokenFetcher for ApiObjects {
    async fn request_token(&self, ns: &str, name: &str, request: &TokenRequest) -> Result<TokenRequest, String> {
        match self.2.get() {
            Some(api) => api.create_token(ns, name, request).await.map_err(|e| e.to_string()),
            None => NoTokens.request_token(ns, name, request).await,
        }
    }
}

#[async_trait]
impl ObjectSource for ApiObjects {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
        match self.0.get() {
            Some(api) => api.get_config_map(ns, name).await.map_err(|e| e.to_string()),
            None => NoObjects.config_map(ns, name).await,
        }
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Secret>, String> {
        match self.0.get() {
            Some(api) => api.get_secret(ns, name).await.map_err(|e| e.to_string()),
            None => NoObjects.secret(ns, name).await,
        }
    }

    async fn services(&self, ns: &str) -> Result<Vec<Service>, String> {
        let Some(api) = self.0.get() else { return Ok(vec![]) };
        let now = tokio::time::Instant::now();
        if let Some((list, at)) = self.1.lock().unwrap().get(ns)
            && now.duration_since(*at) < SERVICES_TTL
        {
            return Ok(list.clone());
        }
        match api.list_services(ns).await {
            Ok(list) => {
                self.1.lock().unwrap().insert(ns.to_string(), (list.clone(), now));
                Ok(list)
            }
            Err(e) => match self.1.lock().unwrap().get(ns) {
                Some((list, _)) => Ok(list.clone()),
                None => Err(format!("failed to list services when setting up env vars: {e}")),
            },
        }
    }
}
