//! ConfigMaps and Secrets kept current through one watch per object (`pkg/kubelet/util/manager/
//! watch_based_manager.go`, the `Watch` `configMapAndSecretChangeDetectionStrategy`, the default).
//!
//! Contract: environment and volume set-up call [`ObjectCache::get`] whenever they need an object (volumes at every
//! pod sync). The first request for an object starts a task that lists it by name (`metadata.name=<name>`) and
//! watches it from the list's resourceVersion, re-watching when a watch ends and re-listing after a 410 or an error
//! (with back-off from 1 s to 30 s); the last state is kept while the apiserver cannot be reached. `get` waits at
//! most one second for the first list, else fails with upstream's `failed to sync configmap cache` (the caller
//! reports it and retries at the next sync). An object seen immutable stops being watched and its value is kept.
//! Objects not requested for `max_idle` (five sync periods, at least a minute) are dropped by
//! [`ObjectCache::run`], which checks every minute until cancelled; a later request starts over.
//!
//! Upstream starts the watches when a pod referring to the objects is registered; here the first request does,
//! which is at the pod's first sync.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::Metadata;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubelet_apiclient::{ApiError, ApiResult, ObjectApi, ObjectEvent, ObjectStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How long `get` waits for an object's first list.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(1);
/// The shortest idle time before an object stops being watched (`minIdleTime`).
pub const MIN_IDLE: Duration = Duration::from_secs(60);
const RECYCLE_PERIOD: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A kind the cache can watch.
#[async_trait]
pub trait Watched: Metadata<Ty = ObjectMeta> + Clone + Send + Sync + 'static {
    /// The resource for messages (`configmap`, `secret`).
    const RESOURCE: &'static str;
    /// Whether the object is `immutable: true`.
    fn is_immutable(&self) -> bool;
    /// The object `name` and the list's resourceVersion.
    async fn list(api: &dyn ObjectApi, ns: &str, name: &str) -> ApiResult<(Option<Self>, String)>;
    /// Changes of the object after `rv`.
    async fn watch(api: &dyn ObjectApi, ns: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<Self>>;
}

#[async_trait]
impl Watched for ConfigMap {
    const RESOURCE: &'static str = "configmap";
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
    async fn list(api: &dyn ObjectApi, ns: &str, name: &str) -> ApiResult<(Option<Self>, String)> {
        api.list_config_map(ns, name).await
    }
    async fn watch(api: &dyn ObjectApi, ns: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<Self>> {
        api.watch_config_map(ns, name, rv).await
    }
}

#[async_trait]
impl Watched for Secret {
    const RESOURCE: &'static str = "secret";
    fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }
    async fn list(api: &dyn ObjectApi, ns: &str, name: &str) -> ApiResult<(Option<Self>, String)> {
        api.list_secret(ns, name).await
    }
    async fn watch(api: &dyn ObjectApi, ns: &str, name: &str, rv: &str) -> ApiResult<ObjectStream<Self>> {
        api.watch_secret(ns, name, rv).await
    }
}

/// What the cache knows of one object: `None` until the first list, then the object or `Some(None)` (not found).
type State<T> = Option<Option<T>>;

struct Item<T> {
    state: watch::Sender<State<T>>,
    last_access: Mutex<Instant>,
    task: Mutex<Option<AbortHandle>>,
}

impl<T> Item<T> {
    fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }
}

impl<T> Drop for Item<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Namespace and name.
type Key = (String, String);

/// The watch-based cache of one kind.
pub struct ObjectCache<T: Watched> {
    api: Arc<dyn ObjectApi>,
    max_idle: Duration,
    items: Mutex<HashMap<Key, Arc<Item<T>>>>,
}

impl<T: Watched> std::fmt::Debug for ObjectCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache").field("resource", &T::RESOURCE).field("watched", &self.watched()).finish()
    }
}

impl<T: Watched> ObjectCache<T> {
    /// A cache reading from `api`; objects idle for five `sync_frequency` periods (at least a minute) are dropped.
    pub fn new(api: Arc<dyn ObjectApi>, sync_frequency: Duration) -> Self {
        Self { api, max_idle: (sync_frequency * 5).max(MIN_IDLE), items: Mutex::default() }
    }

    /// The object, `Ok(None)` when it does not exist (`Get`).
    pub async fn get(&self, ns: &str, name: &str) -> Result<Option<T>, String> {
        let item = {
            let mut items = self.items.lock().unwrap();
            items.entry((ns.to_string(), name.to_string())).or_insert_with(|| self.start(ns, name)).clone()
        };
        *item.last_access.lock().unwrap() = Instant::now();
        let mut rx = item.state.subscribe();
        let state = match tokio::time::timeout(SYNC_TIMEOUT, rx.wait_for(Option::is_some)).await {
            Ok(Ok(s)) => s.clone().flatten(),
            _ => return Err(format!("failed to sync {} cache: timed out waiting for the condition", T::RESOURCE)),
        };
        if state.as_ref().is_some_and(T::is_immutable) && item.task.lock().unwrap().is_some() {
            item.stop();
            debug!(object = %format!("{ns}/{name}"), resource = T::RESOURCE, "stopped watching: the object is immutable");
        }
        Ok(state)
    }

    fn start(&self, ns: &str, name: &str) -> Arc<Item<T>> {
        let (state, _) = watch::channel(None);
        let task = tokio::spawn(reflect(self.api.clone(), ns.to_string(), name.to_string(), state.clone()));
        Arc::new(Item { state, last_access: Mutex::new(Instant::now()), task: Mutex::new(Some(task.abort_handle())) })
    }

    /// Drops the objects not requested for `max_idle` (`startRecycleIdleWatch`).
    pub fn recycle_idle(&self) {
        let now = Instant::now();
        self.items.lock().unwrap().retain(|(ns, name), item| {
            let idle = now.duration_since(*item.last_access.lock().unwrap()) > self.max_idle;
            if idle {
                debug!(object = %format!("{ns}/{name}"), resource = T::RESOURCE, "not requested for a long time, stopped watching");
            }
            !idle
        });
    }

    /// How many objects are cached.
    pub fn watched(&self) -> usize {
        self.items.lock().unwrap().len()
    }

    /// Recycles idle objects every minute until `cancel`; then stops every watch.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RECYCLE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tick.tick() => self.recycle_idle(),
            }
        }
        self.items.lock().unwrap().clear();
    }
}

fn rv_of<T: Watched>(o: &T) -> Option<String> {
    o.metadata().resource_version.clone()
}

/// The reflector of one object: list, then watch from the list's version, until aborted.
async fn reflect<T: Watched>(api: Arc<dyn ObjectApi>, ns: String, name: String, state: watch::Sender<State<T>>) {
    let key = format!("{ns}/{name}");
    let mut backoff = Duration::from_secs(1);
    'list: loop {
        let mut rv = match T::list(api.as_ref(), &ns, &name).await {
            Ok((obj, rv)) => {
                state.send_replace(Some(obj));
                rv
            }
            Err(e) => {
                debug!(object = %key, resource = T::RESOURCE, error = %e, "list failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        loop {
            let mut stream = match T::watch(api.as_ref(), &ns, &name, &rv).await {
                Ok(s) => s,
                Err(ApiError::Gone(_)) => continue 'list,
                Err(e) => {
                    debug!(object = %key, resource = T::RESOURCE, error = %e, "watch failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue 'list;
                }
            };
            let started = Instant::now();
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(ObjectEvent::Applied(o)) => {
                        rv = rv_of(&o).unwrap_or(rv);
                        state.send_replace(Some(Some(o)));
                    }
                    Ok(ObjectEvent::Deleted(o)) => {
                        rv = rv_of(&o).unwrap_or(rv);
                        state.send_replace(Some(None));
                    }
                    Ok(ObjectEvent::Bookmark(r)) => rv = r,
                    Err(ApiError::Gone(_)) => continue 'list,
                    Err(e) => {
                        warn!(object = %key, resource = T::RESOURCE, error = %e, "watch broke; watching again");
                        break;
                    }
                }
            }
            // A watch that lasted is normal (the server ends them); one that ends at once is not: back off.
            if started.elapsed() < Duration::from_secs(1) {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            } else {
                backoff = Duration::from_secs(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream::BoxStream;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use tokio::sync::broadcast;

    /// One namespace of ConfigMaps with a change feed; counts lists and watches; can be down.
    #[derive(Default)]
    struct Api {
        objects: Mutex<HashMap<String, ConfigMap>>,
        rv: AtomicUsize,
        lists: AtomicUsize,
        watches: AtomicUsize,
        down: AtomicBool,
        feed: std::sync::OnceLock<broadcast::Sender<(String, Option<ConfigMap>)>>,
    }

    impl Api {
        fn feed(&self) -> &broadcast::Sender<(String, Option<ConfigMap>)> {
            self.feed.get_or_init(|| broadcast::channel(16).0)
        }
        fn put(&self, name: &str, value: &str, immutable: bool) {
            let rv = self.rv.fetch_add(1, Ordering::SeqCst) + 1;
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    resource_version: Some(rv.to_string()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([("k".into(), value.into())])),
                immutable: Some(immutable),
                ..Default::default()
            };
            self.objects.lock().unwrap().insert(name.into(), cm.clone());
            let _ = self.feed().send((name.into(), Some(cm)));
        }
        fn remove(&self, name: &str) {
            let cm = self.objects.lock().unwrap().remove(name);
            let _ = self.feed().send((name.into(), None));
            drop(cm);
        }
    }

    fn unavailable() -> ApiError {
        ApiError::Unavailable("connection refused".into())
    }

    #[async_trait]
    impl ObjectApi for Api {
        async fn get_config_map(&self, _: &str, _: &str) -> ApiResult<Option<ConfigMap>> {
            unreachable!("the watch cache lists and watches")
        }
        async fn get_secret(&self, _: &str, _: &str) -> ApiResult<Option<Secret>> {
            unreachable!()
        }
        async fn list_config_map(&self, _: &str, name: &str) -> ApiResult<(Option<ConfigMap>, String)> {
            if self.down.load(Ordering::SeqCst) {
                return Err(unavailable());
            }
            self.lists.fetch_add(1, Ordering::SeqCst);
            Ok((self.objects.lock().unwrap().get(name).cloned(), self.rv.load(Ordering::SeqCst).to_string()))
        }
        async fn watch_config_map(&self, _: &str, name: &str, _rv: &str) -> ApiResult<ObjectStream<ConfigMap>> {
            if self.down.load(Ordering::SeqCst) {
                return Err(unavailable());
            }
            self.watches.fetch_add(1, Ordering::SeqCst);
            let name = name.to_string();
            let rx = self.feed().subscribe();
            let s: BoxStream<'static, ApiResult<ObjectEvent<ConfigMap>>> =
                futures::stream::unfold((rx, name), |(mut rx, name)| async move {
                    loop {
                        match rx.recv().await {
                            Ok((n, o)) if n == name => {
                                let ev = match o {
                                    Some(o) => ObjectEvent::Applied(o),
                                    None => ObjectEvent::Deleted(ConfigMap::default()),
                                };
                                return Some((Ok(ev), (rx, name)));
                            }
                            Ok(_) => continue,
                            Err(_) => return None,
                        }
                    }
                })
                .boxed();
            Ok(s)
        }
        async fn list_secret(&self, _: &str, _: &str) -> ApiResult<(Option<Secret>, String)> {
            unreachable!()
        }
        async fn watch_secret(&self, _: &str, _: &str, _: &str) -> ApiResult<ObjectStream<Secret>> {
            unreachable!()
        }
    }

    fn value(cm: Option<ConfigMap>) -> Option<String> {
        cm.and_then(|c| c.data).and_then(|d| d.get("k").cloned())
    }

    /// Lets the reflector task run until it waits again.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_list_then_changes_come_from_the_watch() {
        let api = Arc::new(Api::default());
        api.put("cfg", "1", false);
        let cache = ObjectCache::<ConfigMap>::new(api.clone(), Duration::from_secs(60));
        assert_eq!(value(cache.get("ns", "cfg").await.unwrap()).as_deref(), Some("1"));
        settle().await;
        api.put("cfg", "2", false);
        settle().await;
        assert_eq!(value(cache.get("ns", "cfg").await.unwrap()).as_deref(), Some("2"));
        api.remove("cfg");
        settle().await;
        assert_eq!(cache.get("ns", "cfg").await.unwrap(), None, "a deleted object is not found");
        assert_eq!(cache.get("ns", "missing").await.unwrap(), None);
        assert_eq!(api.lists.load(Ordering::SeqCst), 2, "one list per object, however many gets");
    }

    #[tokio::test(start_paused = true)]
    async fn outages_keep_the_last_state_and_unsynced_gets_time_out() {
        let api = Arc::new(Api::default());
        api.put("cfg", "1", false);
        let cache = ObjectCache::<ConfigMap>::new(api.clone(), Duration::from_secs(60));
        assert_eq!(value(cache.get("ns", "cfg").await.unwrap()).as_deref(), Some("1"));
        api.down.store(true, Ordering::SeqCst);
        assert_eq!(value(cache.get("ns", "cfg").await.unwrap()).as_deref(), Some("1"), "served from the cache");
        let e = cache.get("ns", "other").await.unwrap_err();
        assert_eq!(e, "failed to sync configmap cache: timed out waiting for the condition");
        api.put("other", "x", false);
        api.down.store(false, Ordering::SeqCst);
        tokio::time::sleep(MAX_BACKOFF).await;
        assert_eq!(value(cache.get("ns", "other").await.unwrap()).as_deref(), Some("x"), "listed after the outage");
    }

    #[tokio::test(start_paused = true)]
    async fn immutable_objects_stop_being_watched_and_idle_ones_are_dropped() {
        let api = Arc::new(Api::default());
        api.put("frozen", "1", true);
        api.put("cfg", "1", false);
        let cache = Arc::new(ObjectCache::<ConfigMap>::new(api.clone(), Duration::from_secs(10)));
        assert_eq!(value(cache.get("ns", "frozen").await.unwrap()).as_deref(), Some("1"));
        settle().await;
        api.put("frozen", "2", true);
        settle().await;
        assert_eq!(value(cache.get("ns", "frozen").await.unwrap()).as_deref(), Some("1"), "no longer watched");
        cache.get("ns", "cfg").await.unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(cache.clone().run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(cache.watched(), 2, "requested within the last minute (max idle is at least a minute)");
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(cache.watched(), 0, "idle objects are dropped");
        cancel.cancel();
        task.await.unwrap();
    }
}
