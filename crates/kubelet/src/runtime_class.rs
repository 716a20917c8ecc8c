//! RuntimeClass lookup (`pkg/kubelet/runtimeclass/runtimeclass_manager.go` LookupRuntimeHandler): a pod's
//! `runtimeClassName` resolved to the CRI handler its sandbox is created with, from the watched cache of
//! RuntimeClasses ([`crate::watched_cache::RuntimeClassCache`]).
//!
//! Called by the runtime manager each time it creates a sandbox for a pod that names a class; never waits. An
//! error fails that sandbox creation (event `FailedCreatePodSandBox`), and the pod worker retries with back-off,
//! as upstream: the class may be created later.

use crate::watched_cache::RuntimeClassCache;

/// The handler of RuntimeClass `name`; upstream's `runtimeclass.node.k8s.io "<name>" not found` when the cache has
/// no such class. Until the cache has listed the classes once, a lookup fails too (upstream's lister would answer
/// NotFound), saying so, and the next sync tries again.
pub fn lookup_runtime_handler(cache: &RuntimeClassCache, name: &str) -> Result<String, String> {
    if !cache.has_synced() {
        return Err(format!(
            "failed to lookup RuntimeClass {name}: the RuntimeClasses have not been read from the apiserver yet"
        ));
    }
    match cache.get("", name) {
        Some(rc) => Ok(rc.handler),
        None => Err(format!("runtimeclass.node.k8s.io {name:?} not found")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use k8s_openapi::api::node::v1::RuntimeClass;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kubelet_apiclient::{ApiResult, ListWatch, ObjectEvent, ObjectStream};
    use tokio::sync::mpsc;

    use super::*;

    /// A list with the given classes, then a watch fed by the test.
    struct Classes(Vec<RuntimeClass>, std::sync::Mutex<Option<mpsc::UnboundedReceiver<ObjectEvent<RuntimeClass>>>>);

    #[async_trait]
    impl ListWatch<RuntimeClass> for Classes {
        async fn list_all(&self) -> ApiResult<(Vec<RuntimeClass>, String)> {
            Ok((self.0.clone(), "1".into()))
        }
        async fn watch_all(&self, _rv: &str) -> ApiResult<ObjectStream<RuntimeClass>> {
            let rx = self.1.lock().unwrap().take();
            let Some(rx) = rx else { return Ok(Box::pin(futures::stream::pending())) };
            Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) })))
        }
    }

    fn class(name: &str, handler: &str) -> RuntimeClass {
        RuntimeClass {
            metadata: ObjectMeta { name: Some(name.into()), resource_version: Some("2".into()), ..Default::default() },
            handler: handler.into(),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_class_resolves_to_its_handler_once_listed_and_follows_the_watch() {
        let (tx, rx) = mpsc::unbounded_channel();
        let api = Arc::new(Classes(vec![class("gvisor", "runsc")], std::sync::Mutex::new(Some(rx))));
        let cache = Arc::new(RuntimeClassCache::new());
        assert!(lookup_runtime_handler(&cache, "gvisor").unwrap_err().contains("have not been read"));
        let cancel = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(cache.clone().run(api, cancel.clone()));
        while !cache.has_synced() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(lookup_runtime_handler(&cache, "gvisor"), Ok("runsc".into()));
        assert_eq!(lookup_runtime_handler(&cache, "kata").unwrap_err(), "runtimeclass.node.k8s.io \"kata\" not found");
        tx.send(ObjectEvent::Applied(class("kata", "kata-qemu"))).unwrap();
        tx.send(ObjectEvent::Deleted(class("gvisor", "runsc"))).unwrap();
        while cache.get("", "gvisor").is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(lookup_runtime_handler(&cache, "kata"), Ok("kata-qemu".into()));
        assert!(lookup_runtime_handler(&cache, "gvisor").unwrap_err().ends_with("not found"));
        cancel.cancel();
        task.await.unwrap();
    }
}
