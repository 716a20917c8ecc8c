//! Objects of one kind across the cluster, kept current by one list and watch (client-go's SharedInformer and
//! `tools/cache/reflector.go` ListAndWatch): the Services of every namespace for the service environment variables
//! of pods (`pkg/kubelet/kubelet.go`: the `serviceLister` and `serviceHasSynced`; read by `kubelet_pods.go`
//! getServiceEnvVarMap), the RuntimeClasses (`pkg/kubelet/runtimeclass/runtimeclass_manager.go`) and the CSIDrivers
//! (`pkg/kubelet/volume_host.go`'s `csiDriverLister`).
//!
//! Contract: [`WatchedCache::run`] lists every object and replaces the cache with the answer, then watches from the
//! list's resourceVersion and applies each change as it arrives, so an object the apiserver accepted is in the
//! cache within the watch's latency (milliseconds), not after a TTL. A watch the server ends is started again
//! from the last version seen (bookmarks move it on); a watch refused or broken with 410 Gone lists again at once
//! (the new list drops Services deleted meanwhile); a failed list or watch is retried after a back-off doubling
//! from 1 s to 30 s, reset by a watch that lasted or delivered changes. The task never gives up and never panics
//! until cancelled; meanwhile the last state is served. [`WatchedCache::has_synced`] is false until the first
//! successful list and true ever after (upstream's `HasSynced`). [`WatchedCache::list`] and [`WatchedCache::get`]
//! answer from memory and never wait: the caller decides what an unsynced cache means (a pod from the apiserver
//! waits for the Services, a static pod does not).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, Resource};
use kubelet_apiclient::{ApiError, ListWatch, ObjectEvent};
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

/// Namespace -> name -> object (the informer's store with its namespace index; "" for cluster-scoped kinds).
type Store<K> = HashMap<String, BTreeMap<String, K>>;

/// What a watched cache needs of its kind: its name for the log, and its metadata.
pub trait Watched: Resource + Metadata<Ty = ObjectMeta> + Clone + Send + Sync + 'static {}
impl<K: Resource + Metadata<Ty = ObjectMeta> + Clone + Send + Sync + 'static> Watched for K {}

/// The informer's cache of one kind.
pub struct WatchedCache<K> {
    store: Mutex<Store<K>>,
    synced: AtomicBool,
}

/// The Services of every namespace.
pub type ServiceCache = WatchedCache<Service>;
/// The RuntimeClasses.
pub type RuntimeClassCache = WatchedCache<RuntimeClass>;
/// The CSIDrivers (`csiDriverLister`, for the CSI volume plugin).
pub type CsiDriverCache = WatchedCache<k8s_openapi::api::storage::v1::CSIDriver>;

impl kubelet_volume::csi::plugin::CsiDriverLister for CsiDriverCache {
    fn csi_driver(&self, name: &str) -> Result<Option<k8s_openapi::api::storage::v1::CSIDriver>, String> {
        if !self.has_synced() {
            // Upstream's volume host waits for the sync; here the caller's next sync asks again.
            return Err("failed to wait for cache sync for CSIDriverLister".into());
        }
        Ok(self.get("", name))
    }
}

impl<K> Default for WatchedCache<K> {
    fn default() -> Self {
        Self { store: Mutex::default(), synced: AtomicBool::new(false) }
    }
}

impl<K: Watched> std::fmt::Debug for WatchedCache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count: usize = self.store.lock().unwrap().values().map(BTreeMap::len).sum();
        f.debug_struct("WatchedCache")
            .field("kind", &K::KIND)
            .field("synced", &self.has_synced())
            .field("objects", &count)
            .finish()
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

impl<K: Watched> WatchedCache<K> {
    /// An empty, unsynced cache; [`WatchedCache::run`] fills it.
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache fed from `api` by a task of `tracker` until `cancel`.
    pub fn start(api: Arc<dyn ListWatch<K>>, tracker: &TaskTracker, cancel: &CancellationToken) -> Arc<Self> {
        let cache = Arc::new(Self::new());
        tracker.spawn(cache.clone().run(api, cancel.clone()));
        cache
    }

    /// Whether the objects have been listed at least once (`HasSynced`, `serviceHasSynced`).
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The objects of `namespace` as last seen, by name (`serviceLister.Services(ns).List`).
    pub fn list(&self, namespace: &str) -> Vec<K> {
        self.store.lock().unwrap().get(namespace).map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    /// The object `name` of `namespace` ("" for a cluster-scoped kind) as last seen (`lister.Get`).
    pub fn get(&self, namespace: &str, name: &str) -> Option<K> {
        self.store.lock().unwrap().get(namespace).and_then(|m| m.get(name).cloned())
    }

    /// Lists and watches until `cancel`.
    pub async fn run(self: Arc<Self>, api: Arc<dyn ListWatch<K>>, cancel: CancellationToken) {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = self.reflect(api.as_ref()) => {}
        }
    }

    /// List, then watch from the list's version; list again when the watch cannot go on. Never returns.
    async fn reflect(&self, api: &dyn ListWatch<K>) {
        let mut backoff = Backoff(INITIAL_BACKOFF);
        loop {
            let rv = match api.list_all().await {
                Ok((items, rv)) => {
                    self.replace(items);
                    rv
                }
                Err(e) => {
                    warn!(kind = K::KIND, error = %e, "failed to list; retrying");
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
    async fn watch(&self, api: &dyn ListWatch<K>, mut rv: String, backoff: &mut Backoff) -> Relist {
        loop {
            let mut stream = match api.watch_all(&rv).await {
                Ok(s) => s,
                Err(ApiError::Gone(e)) => {
                    info!(kind = K::KIND, error = %e, "watch expired; listing again");
                    return Relist::Now;
                }
                Err(e) => {
                    warn!(kind = K::KIND, error = %e, "failed to watch; listing again");
                    return Relist::AfterBackoff;
                }
            };
            let (started, mut changes) = (Instant::now(), 0usize);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ObjectEvent::Applied(s)) => {
                        rv = s.metadata().resource_version.clone().unwrap_or(rv);
                        self.apply(s, false);
                    }
                    Ok(ObjectEvent::Deleted(s)) => {
                        rv = s.metadata().resource_version.clone().unwrap_or(rv);
                        self.apply(s, true);
                    }
                    Ok(ObjectEvent::Bookmark(r)) => rv = r,
                    Err(ApiError::Gone(e)) => {
                        info!(kind = K::KIND, error = %e, "watch expired; listing again");
                        return Relist::Now;
                    }
                    Err(e) => {
                        warn!(kind = K::KIND, error = %e, "watch broke; watching again");
                        break;
                    }
                }
                changes += 1;
            }
            if changes == 0 && started.elapsed() < SHORT_WATCH {
                debug!(kind = K::KIND, rv = %rv, "very short watch; backing off");
                backoff.wait().await;
            } else {
                backoff.reset();
            }
        }
    }

    /// Replaces the whole cache with a list's answer (`Replace`); the cache is synced from now on.
    fn replace(&self, items: Vec<K>) {
        let mut store = Store::new();
        for s in items {
            let (ns, name) = key(&s);
            store.entry(ns).or_default().insert(name, s);
        }
        let count: usize = store.values().map(BTreeMap::len).sum();
        *self.store.lock().unwrap() = store;
        if !self.synced.swap(true, Ordering::AcqRel) {
            info!(kind = K::KIND, objects = count, "synced");
        }
    }

    /// One change of the watch.
    fn apply(&self, s: K, deleted: bool) {
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

fn key<K: Watched>(s: &K) -> (String, String) {
    (s.metadata().namespace.clone().unwrap_or_default(), s.metadata().name.clone().unwrap_or_default())
}

#[cfg(test)]
#[path = "watched_cache_tests.rs"]
mod tests;
