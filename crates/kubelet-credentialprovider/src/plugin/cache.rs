//! The plugin response cache and the dedup of concurrent runs: upstream's `cacheKeyBuilder`,
//! `generateServiceAccountCacheKey`, `generateCacheKey`, `generateSingleFlightKey`, `getHashIfNotEmpty`, the
//! `cache.ExpirationStore` with `cacheExpirationPolicy` and its 15 minute purge, and `singleflight.Group`
//! (`pkg/credentialprovider/plugin/plugin.go`).
//!
//! Contract: keys are byte strings built as upstream's (`cryptobyte`: each string prefixed by its length as a
//! big-endian u16, annotation maps by their count as a u32 then sorted key/value pairs), so that distinct
//! inputs never collide. An entry is returned while the clock (`tokio::time`, paused in tests) is not after its
//! expiry; an expired entry is dropped when read, and all expired entries every 15 minutes. Concurrent
//! [`Singleflight::run`] calls with one key share a single run and its result.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use crate::docker_config::DockerConfig;

/// The cache key of `Global` responses (`globalCacheKey`).
pub(crate) const GLOBAL_CACHE_KEY: &str = "<global>";
/// How often all expired entries are dropped (`cachePurgeInterval`).
pub(crate) const CACHE_PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// A string longer than a u16 length prefix allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cryptobyte: pending child length {0} exceeds 2-byte length prefix")]
pub(crate) struct KeyTooLong(pub(crate) usize);

/// upstream's `cacheKeyBuilder`.
#[derive(Default)]
struct KeyBuilder {
    bytes: Vec<u8>,
    error: Option<KeyTooLong>,
}

impl KeyBuilder {
    fn string(mut self, value: &[u8]) -> Self {
        match u16::try_from(value.len()) {
            Ok(len) => {
                self.bytes.extend_from_slice(&len.to_be_bytes());
                self.bytes.extend_from_slice(value);
            }
            Err(_) => self.error = self.error.or(Some(KeyTooLong(value.len()))),
        }
        self
    }

    fn annotations(mut self, annotations: &BTreeMap<String, String>) -> Self {
        self.bytes.extend_from_slice(&(annotations.len() as u32).to_be_bytes());
        for (k, v) in annotations {
            self = self.string(k.as_bytes()).string(v.as_bytes());
        }
        self
    }

    fn build(self) -> Result<Vec<u8>, KeyTooLong> {
        self.error.map_or(Ok(self.bytes), Err)
    }
}

/// The service account part of a cache key (`cacheKeyParams`).
pub(crate) struct ServiceAccountKeyParams<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) annotations: &'a BTreeMap<String, String>,
    /// `Some(token hash)` when the cache type is `Token`.
    pub(crate) token_hash: Option<&'a str>,
}

/// `generateServiceAccountCacheKey`.
pub(crate) fn service_account_cache_key(p: &ServiceAccountKeyParams<'_>) -> Result<Vec<u8>, KeyTooLong> {
    let mut builder = KeyBuilder::default()
        .string(p.namespace.as_bytes())
        .string(p.name.as_bytes())
        .string(p.uid.as_bytes())
        .annotations(p.annotations);
    if let Some(hash) = p.token_hash {
        builder = builder.string(b"token").string(hash.as_bytes());
    }
    builder.build()
}

/// `generateCacheKey`: the base key (image, registry or global) with the service account key.
pub(crate) fn cache_key(base: &str, service_account_key: &[u8]) -> Result<Vec<u8>, KeyTooLong> {
    KeyBuilder::default().string(base.as_bytes()).string(service_account_key).build()
}

/// `generateSingleFlightKey`.
pub(crate) fn single_flight_key(
    image: &str,
    token_hash: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<u8>, KeyTooLong> {
    KeyBuilder::default().string(image.as_bytes()).string(token_hash.as_bytes()).annotations(annotations).build()
}

/// `getHashIfNotEmpty`: `sha256:<hex>`, or empty for empty data.
pub(crate) fn hash_if_not_empty(data: &str) -> String {
    if data.is_empty() { String::new() } else { format!("sha256:{}", hex::encode(Sha256::digest(data.as_bytes()))) }
}

struct Entry {
    credentials: DockerConfig,
    expires_at: Instant,
}

/// The credentials cache of one plugin.
pub(crate) struct CredentialCache {
    entries: HashMap<Vec<u8>, Entry>,
    last_purge: Instant,
}

impl CredentialCache {
    pub(crate) fn new() -> Self {
        Self { entries: HashMap::new(), last_purge: Instant::now() }
    }

    /// Drops every expired entry when the last purge is more than 15 minutes old.
    pub(crate) fn purge_if_due(&mut self) {
        let now = Instant::now();
        if now > self.last_purge + CACHE_PURGE_INTERVAL {
            self.entries.retain(|_, e| now <= e.expires_at);
            self.last_purge = now;
        }
    }

    /// The credentials under `key` while they have not expired.
    pub(crate) fn get(&mut self, key: &[u8]) -> Option<DockerConfig> {
        let expires_at = self.entries.get(key)?.expires_at;
        if Instant::now() > expires_at {
            self.entries.remove(key);
            return None;
        }
        self.entries.get(key).map(|e| e.credentials.clone())
    }

    /// Stores `credentials` under `key` for `ttl`.
    pub(crate) fn insert(&mut self, key: Vec<u8>, credentials: DockerConfig, ttl: Duration) {
        let now = Instant::now();
        let expires_at = now.checked_add(ttl).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        self.entries.insert(key, Entry { credentials, expires_at });
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

type SharedRun<T> = Shared<BoxFuture<'static, T>>;
/// Runs in flight by key, each with the id of the call that started it.
type InFlight<T> = HashMap<Vec<u8>, (u64, SharedRun<T>)>;

/// Runs one future per key at a time; concurrent callers with the key wait for it and get a clone of its
/// result (`singleflight.Group.Do`). The key is forgotten once the run has finished.
pub(crate) struct Singleflight<T: Clone> {
    in_flight: Mutex<InFlight<T>>,
    next_id: AtomicU64,
}

impl<T: Clone + Send + Sync + 'static> Singleflight<T> {
    pub(crate) fn new() -> Self {
        Self { in_flight: Mutex::new(HashMap::new()), next_id: AtomicU64::new(0) }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, InFlight<T>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `start()` unless a run under `key` is in flight, and returns that run's result.
    pub(crate) async fn run(&self, key: Vec<u8>, start: impl FnOnce() -> BoxFuture<'static, T>) -> T {
        let (id, run) = {
            let mut map = self.map();
            match map.get(&key) {
                Some((id, run)) => (*id, run.clone()),
                None => {
                    let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                    let run = start().shared();
                    map.insert(key.clone(), (id, run.clone()));
                    (id, run)
                }
            }
        };
        let result = run.await;
        let mut map = self.map();
        if map.get(&key).is_some_and(|(current, _)| *current == id) {
            map.remove(&key);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const TOKEN_HASH: &str = "sha256:f7a41acb9633520e657fe58dedcd9e6a784e2d97e4c646492b45c61e28595c70";

    /// upstream's TestGenerateServiceAccountCacheKey.
    #[test]
    fn service_account_keys_as_upstream() {
        let two = annotations(&[("domain.io/annotation-2", "value2"), ("domain.io/annotation-1", "value1")]);
        type Case<'a> = (BTreeMap<String, String>, Option<&'a str>, &'a [u8]);
        let cases: [Case; 4] = [
            (BTreeMap::new(), None, b"\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x00"),
            (
                annotations(&[("domain.io/annotation-1", "value1")]),
                None,
                b"\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x01\x00\x16domain.io/annotation-1\x00\x06value1",
            ),
            (
                two.clone(),
                None,
                b"\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x02\x00\x16domain.io/annotation-1\x00\x06value1\x00\x16domain.io/annotation-2\x00\x06value2",
            ),
            (
                two,
                Some(TOKEN_HASH),
                b"\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x02\x00\x16domain.io/annotation-1\x00\x06value1\x00\x16domain.io/annotation-2\x00\x06value2\x00\x05token\x00Gsha256:f7a41acb9633520e657fe58dedcd9e6a784e2d97e4c646492b45c61e28595c70",
            ),
        ];
        for (annotations, token_hash, want) in cases {
            let params = ServiceAccountKeyParams {
                namespace: "namespace",
                name: "service-account",
                uid: "service-account-uid",
                annotations: &annotations,
                token_hash,
            };
            assert_eq!(service_account_cache_key(&params).unwrap(), want);
        }
    }

    /// upstream's TestGenerateCacheKey.
    #[test]
    fn cache_keys_as_upstream() {
        assert_eq!(cache_key("registry.io/image", b"").unwrap(), b"\x00\x11registry.io/image\x00\x00");
        let sa = b"\x00\tnamespace\x00\x0fservice-account\x00\x13service-account-uid\x00\x00\x00\x02\x00\x16domain.io/annotation-1\x00\x06value1\x00\x16domain.io/annotation-2\x00\x06value2";
        let mut want = b"\x00\x11registry.io/image\x00u".to_vec();
        want.extend_from_slice(sa);
        assert_eq!(cache_key("registry.io/image", sa).unwrap(), want);
        assert_eq!(cache_key(&"x".repeat(70_000), b""), Err(KeyTooLong(70_000)));
        assert_ne!(single_flight_key("a", "", &BTreeMap::new()), single_flight_key("a", "h", &BTreeMap::new()));
        assert_eq!(hash_if_not_empty(""), "");
        assert_eq!(
            hash_if_not_empty("token"),
            "sha256:3c469e9d6c5875d37a43f353d4f88e61fcf812c66eee3457465a40b0da4153e0"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_their_ttl() {
        let mut cache = CredentialCache::new();
        cache.insert(b"a".to_vec(), DockerConfig::default(), Duration::from_secs(60));
        cache.insert(b"b".to_vec(), DockerConfig::default(), Duration::from_secs(3600));
        tokio::time::advance(Duration::from_secs(60)).await;
        // Not after the expiry yet: still there.
        assert!(cache.get(b"a").is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(cache.get(b"a").is_none());
        assert_eq!(cache.len(), 1);
        // The purge drops expired entries nobody reads.
        cache.insert(b"c".to_vec(), DockerConfig::default(), Duration::from_secs(1));
        tokio::time::advance(CACHE_PURGE_INTERVAL).await;
        cache.purge_if_due();
        assert_eq!(cache.len(), 1);
        assert!(cache.get(b"b").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn singleflight_shares_one_run() {
        let group = Singleflight::<usize>::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let start = |runs: Arc<AtomicUsize>, mut released: tokio::sync::watch::Receiver<bool>| {
            move || {
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    let _ = released.wait_for(|r| *r).await;
                    n
                }
                .boxed()
            }
        };
        let release_after_both_joined = async {
            while runs.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            // One more round: the second caller has been polled and is waiting on the same run.
            tokio::task::yield_now().await;
            release.send(true).unwrap();
        };
        let (a, b, ()) = tokio::join!(
            group.run(b"k".to_vec(), start(runs.clone(), released.clone())),
            group.run(b"k".to_vec(), start(runs.clone(), released.clone())),
            release_after_both_joined,
        );
        assert_eq!((a, b), (1, 1));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(group.map().is_empty());
        // A later call runs again.
        assert_eq!(group.run(b"k".to_vec(), start(runs.clone(), released.clone())).await, 2);
    }
}
