//! ConfigMaps, Secrets and Services for container environments, read from the apiserver once the node joined its
//! cluster (`kubelet.go` configMapManager, secretManager, serviceLister with the Get strategy). Until then, and on
//! a standalone node, references cannot be resolved and there are no service links.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kubelet_apiclient::ObjectApi;
use kubelet_runtime::env::{NoObjects, ObjectSource};

/// The objects source of the runtime manager, bound to the apiserver after start-up.
#[derive(Default)]
pub struct ApiObjects(OnceLock<Arc<dyn ObjectApi>>);

impl ApiObjects {
    /// Reads from `api` from now on.
    pub fn bind(&self, api: Arc<dyn ObjectApi>) {
        let _ = self.0.set(api);
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
        match self.0.get() {
            Some(api) => api.list_services(ns).await.map_err(|e| e.to_string()),
            None => Ok(vec![]),
        }
    }
}
