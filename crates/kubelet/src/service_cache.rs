//! The Services of every namespace, kept current by one list and watch, for the service environment variables of
//! pods (`pkg/kubelet/kubelet.go`: the `serviceLister` of the SharedInformer on services and `serviceHasSynced`;
//! client-go's `tools/cache/reflector.go` ListAndWatch; read by `kubelet_pods.go` getServiceEnvVarMap).
//!
//! Contract: [`ServiceCache::run`] lists every Service and replaces the cache with the answer, then watches from the
//! list's resourceVersion and applies each change as it arrives, so a Service the apiserver accepted is in the
//! cache within the watch's latency (milliseconds), not after a TTL. A watch the server ends is started again
//! from the last version seen (bookmarks move it on); a watch refused or broken with 410 Gone lists again at once
//! (the new list drops Services deleted meanwhile); a failed list or watch is retried after a back-off doubling
//! from 1 s to 30 s, reset by a watch that lasted or delivered changes. The task never gives up and never panics
//! until cancelled; meanwhile the last state is served. [`ServiceCache::has_synced`] is false until the first
//! successful list and true ever after (upstream's `HasSynced`). [`ServiceCache::list`] answers from memory and
//! never waits: the caller decides what an unsynced cache means (a pod from the apiserver waits for it, a static
//! pod does not).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kubelet_apiclient::{ApiError, ObjectEvent, ServiceApi};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// The first wait after a failure.
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait after repeated failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A watch that ends sooner than this without any change counts as a failure (client-go's "very short watch").
const SHORT_WATCH: Duration = Duration::from_secs(1);

/// Namespace -> name -> Service (the informer's store with its namespace index).
type Store = HashMap<String, BTreeMap<String, Service>>;

/// The informer's cache of Services.
#[derive(Default)]
pub struct ServiceCache {
    store: Mutex<Store>,
    synced: AtomicBool,
}

impl std::fmt::Debug for ServiceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count: usize = self.store.lock().unwrap().values().map(BTreeMap::len).sum();
        f.debug_struct("ServiceCache").field("synced", &self.has_synced()).field("services", &count).finish()
    }
}

/// Why a watch gave up: list again at once (410 Gone), or after a back-off (any other failure to start one).
enum Relist {
    Now,
    AfterBackoff,
}

/// The wait before retrying a failed call.
struct Backoff(Duration);

impl Backoff {
    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
    }

    fn reset(&mut self) {
        self.0 = INITIAL_BACKOFF;
    }
}

impl ServiceCache {
    /// An empty, unsynced cache; [`ServiceCache::run`] fills it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache fed from `api` by a task of `tracker` until `cancel`.
    pub fn start(api: Arc<dyn ServiceApi>, tracker: &TaskTracker, cancel: &CancellationToken) -> Arc<Self> {
        let cache = Arc::new(Self::new());
        tracker.spawn(cache.clone().run(api, cancel.clone()));
        cache
    }

    /// Whether the Services have been listed at least once (`serviceHasSynced`).
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The Services of `namespace` as last seen, by name (`serviceLister.Services(ns).List`).
    pub fn list(&self, namespace: &str) -> Vec<Service> {
        self.store.lock().unwrap().get(namespace).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// Lists and watches until `cancel`.
    pub async fn run(self: Arc<Self>, api: Arc<dyn ServiceApi>, cancel: CancellationToken) {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = self.reflect(api.as_ref()) => {}
        }
    }

    /// List, then watch from the list's version; list again when the watch cannot go on. Never returns.
    async fn reflect(&self, api: &dyn ServiceApi) {
        let mut backoff = Backoff(INITIAL_BACKOFF);
        loop {
            let rv = match api.list_services().await {
                Ok((items, rv)) => {
                    self.replace(items);
                    rv
                }
                Err(e) => {
                    warn!(error = %e, "failed to list services; retrying");
                    backoff.wait().await;
                    continue;
                }
            };
            if let Relist::AfterBackoff = self.watch(api, rv, &mut backoff).await {
                backoff.wait().await;
            }
        }
    }

    /// Watches from `rv`, again and again as the server ends watches, until a relist is needed.
    async fn watch(&self, api: &dyn ServiceApi, mut rv: String, backoff: &mut Backoff) -> Relist {
        loop {
            let mut stream = match api.watch_services(&rv).await {
                Ok(s) => s,
                Err(ApiError::Gone(e)) => {
                    info!(error = %e, "service watch expired; listing again");
                    return Relist::Now;
                }
                Err(e) => {
                    warn!(error = %e, "failed to watch services; listing again");
                    return Relist::AfterBackoff;
                }
            };
            let (started, mut changes) = (Instant::now(), 0usize);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ObjectEvent::Applied(s)) => {
                        rv = s.metadata.resource_version.clone().unwrap_or(rv);
                        self.apply(s, false);
                    }
                    Ok(ObjectEvent::Deleted(s)) => {
                        rv = s.metadata.resource_version.clone().unwrap_or(rv);
                        self.apply(s, true);
                    }
                    Ok(ObjectEvent::Bookmark(r)) => rv = r,
                    Err(ApiError::Gone(e)) => {
                        info!(error = %e, "service watch expired; listing again");
                        return Relist::Now;
                    }
                    Err(e) => {
                        warn!(error = %e, "service watch broke; watching again");
                        break;
                    }
                }
                changes += 1;
            }
            if changes == 0 && started.elapsed() < SHORT_WATCH {
                debug!(rv = %rv, "very short service watch; backing off");
                backoff.wait().await;
            } else {
                backoff.reset();
            }
        }
    }

    /// Replaces the whole cache with a list's answer (`Replace`); the cache is synced from now on.
    fn replace(&self, items: Vec<Service>) {
        let mut store = Store::new();
        for s in items {
            let (ns, name) = key(&s);
            store.entry(ns).or_default().insert(name, s);
        }
        let count: usize = store.values().map(BTreeMap::len).sum();
        *self.store.lock().unwrap() = store;
        if !self.synced.swap(true, Ordering::AcqRel) {
            info!(services = count, "services synced");
        }
    }

    /// One change of the watch.
    fn apply(&self, s: Service, deleted: bool) {
        let (ns, name) = key(&s);
        let mut store = self.store.lock().unwrap();
        if deleted {
            if let Some(m) = store.get_mut(&ns) {
                m.remove(&name);
                if m.is_empty() {
                    store.remove(&ns);
                }
            }
        } else {
            store.entry(ns).or_default().insert(name, s);
        }
    }
}

fn key(s: &Service) -> (String, String) {
    (s.metadata.namespace.clone().unwrap_or_default(), s.metadata.name.clone().unwrap_or_default())
}

#[cfg(test)]
#[path = "service_cache_tests.rs"]
mod tests;
