//! The runtime pod cache (`pkg/kubelet/container/cache.go`): the latest [`PodStatus`] of each pod with the time
//! it was observed, written by the PLEG after a relist that saw the pod change and by the pod workers after a
//! sync that changed something, read by the pod workers (instead of asking the runtime again), the status
//! computation, housekeeping and the HTTP API.
//!
//! Contract, as upstream's `GetNewerThan` gives it: an entry is the runtime's state as of its observation, and
//! it stays true until the PLEG sees the pod change (it then writes a newer entry, or marks the entry stale when
//! it could not inspect the pod). Once the PLEG has completed its first relist ([`PodCache::mark_primed`]), a pod
//! without an entry has nothing in the runtime. A write older than the entry it would replace is dropped, so a
//! slow inspection cannot undo a newer one; a pod that disappeared keeps an empty entry (a tombstone) until its
//! worker forgets it, for the same reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use kubelet_types::{PodStatus, PodUid};
use tokio::time::Instant;

#[derive(Debug, Clone)]
struct Entry {
    status: Arc<PodStatus>,
    observed: Instant,
    stale: bool,
}

/// What the cache knows of one pod.
#[derive(Debug, Clone)]
pub enum Cached {
    /// The runtime's state of the pod, still true.
    Fresh(Arc<PodStatus>),
    /// Unknown: ask the runtime (no relist yet, or the PLEG failed to inspect the pod).
    Unknown,
}

/// Latest runtime status per pod.
#[derive(Debug, Default)]
pub struct PodCache {
    inner: Mutex<HashMap<PodUid, Entry>>,
    primed: AtomicBool,
    /// Pods whose worker is changing them now (and inspects what it did when done).
    syncing: Mutex<HashMap<PodUid, usize>>,
}

/// A pod's worker is changing it while this lives ([`PodCache::syncing`]).
pub struct SyncGuard<'a> {
    cache: &'a PodCache,
    uid: PodUid,
}

impl Drop for SyncGuard<'_> {
    fn drop(&mut self) {
        let mut m = self.cache.syncing.lock().unwrap();
        if let Some(n) = m.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

impl PodCache {
    /// The cached status of a pod (`None` for a pod without an entry or with an empty one).
    pub fn get(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        self.inner.lock().unwrap().get(uid).filter(|e| !is_empty(&e.status)).map(|e| e.status.clone())
    }

    /// The entry of a pod while it holds (not stale, not empty).
    pub fn get_fresh(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        self.inner.lock().unwrap().get(uid).filter(|e| !e.stale && !is_empty(&e.status)).map(|e| e.status.clone())
    }

    /// Marks the pod as being changed by its worker until the guard drops: the PLEG then leaves the inspection of
    /// a change it sees to the worker (which inspects what it did) and looks again at its next relist.
    pub fn syncing(&self, uid: &PodUid) -> SyncGuard<'_> {
        *self.syncing.lock().unwrap().entry(uid.clone()).or_default() += 1;
        SyncGuard { cache: self, uid: uid.clone() }
    }

    /// Whether the pod's worker is changing it now.
    pub fn is_syncing(&self, uid: &PodUid) -> bool {
        self.syncing.lock().unwrap().contains_key(uid)
    }

    /// What a pod worker may use instead of inspecting the pod: the entry while it holds, an empty status for a
    /// pod the PLEG has not seen in the runtime, else [`Cached::Unknown`].
    pub fn lookup(&self, uid: &PodUid, name: &str, namespace: &str) -> Cached {
        match self.inner.lock().unwrap().get(uid) {
            Some(e) if !e.stale => Cached::Fresh(e.status.clone()),
            Some(_) => Cached::Unknown,
            None if self.primed.load(Ordering::Acquire) => Cached::Fresh(Arc::new(PodStatus {
                id: uid.clone(),
                name: name.to_string(),
                namespace: namespace.to_string(),
                ..Default::default()
            })),
            None => Cached::Unknown,
        }
    }

    /// Stores a status observed at `observed` (when its inspection began), unless a newer one is there.
    pub fn set(&self, status: PodStatus, observed: Instant) -> Arc<PodStatus> {
        let s = Arc::new(status);
        let mut m = self.inner.lock().unwrap();
        match m.get(&s.id) {
            Some(e) if e.observed > observed => e.status.clone(),
            _ => {
                m.insert(s.id.clone(), Entry { status: s.clone(), observed, stale: false });
                s
            }
        }
    }

    /// The pod changed but could not be inspected: its entry no longer holds.
    pub fn mark_stale(&self, uid: &PodUid, observed: Instant) {
        let mut m = self.inner.lock().unwrap();
        let e = m.entry(uid.clone()).or_insert_with(|| Entry {
            status: Arc::new(PodStatus { id: uid.clone(), ..Default::default() }),
            observed,
            stale: true,
        });
        if e.observed <= observed {
            e.observed = observed;
            e.stale = true;
        }
    }

    /// The runtime no longer has anything of the pod, as of `observed`.
    pub fn set_gone(&self, uid: &PodUid, observed: Instant) {
        let empty = PodStatus { id: uid.clone(), ..Default::default() };
        self.set(empty, observed);
    }

    /// Whether the pod has an entry (possibly empty or stale).
    pub fn has(&self, uid: &PodUid) -> bool {
        self.inner.lock().unwrap().contains_key(uid)
    }

    /// After a relist whose lists began at `relist_start`: entries of pods the relist did not see, observed
    /// before it, are dropped (once primed, no entry means nothing in the runtime); newer ones are kept, as their
    /// pods may have been created after the lists.
    pub fn reconcile<V>(&self, present: &HashMap<PodUid, V>, relist_start: Instant) {
        self.inner.lock().unwrap().retain(|uid, e| present.contains_key(uid) || e.observed >= relist_start);
    }

    /// Forgets a pod entirely (its worker is done with it).
    pub fn delete(&self, uid: &PodUid) {
        self.inner.lock().unwrap().remove(uid);
    }

    /// The PLEG has completed a relist: pods without an entry have nothing in the runtime.
    pub fn mark_primed(&self) {
        self.primed.store(true, Ordering::Release);
    }

    /// Whether the PLEG has completed a relist (before it, [`PodCache::statuses`] may miss pods the runtime has).
    pub fn is_primed(&self) -> bool {
        self.primed.load(Ordering::Acquire)
    }

    /// Every pod the runtime has something of.
    pub fn statuses(&self) -> Vec<Arc<PodStatus>> {
        self.inner.lock().unwrap().values().filter(|e| !is_empty(&e.status)).map(|e| e.status.clone()).collect()
    }

    /// Number of pods the runtime has something of.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().values().filter(|e| !is_empty(&e.status)).count()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn is_empty(s: &PodStatus) -> bool {
    s.sandbox_statuses.is_empty() && s.container_statuses.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_types::{SandboxState, SandboxStatus};

    fn status(uid: &str, sandbox: &str) -> PodStatus {
        PodStatus {
            id: PodUid(uid.into()),
            sandbox_statuses: vec![SandboxStatus {
                id: sandbox.into(),
                state: SandboxState::Ready,
                created_at: 0,
                attempt: 0,
                ips: vec![],
                host_network: false,
            }],
            ..Default::default()
        }
    }

    fn fresh(c: Cached) -> Option<Arc<PodStatus>> {
        match c {
            Cached::Fresh(s) => Some(s),
            Cached::Unknown => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_observation_never_replaces_a_newer_one() {
        let cache = PodCache::default();
        let uid = PodUid("u".into());
        let early = Instant::now();
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        cache.set(status("u", "new"), Instant::now());
        let kept = cache.set(status("u", "old"), early);
        assert_eq!(kept.sandbox_statuses[0].id, "new");
        assert_eq!(cache.get(&uid).unwrap().sandbox_statuses[0].id, "new");
        // A tombstone is newer than an inspection that began before the pod went away.
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        cache.set_gone(&uid, Instant::now());
        cache.set(status("u", "late"), early);
        assert!(cache.get(&uid).is_none(), "the pod is gone");
        assert!(cache.statuses().is_empty() && cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn lookups_ask_the_runtime_until_primed_and_after_a_failed_inspection() {
        let cache = PodCache::default();
        let uid = PodUid("u".into());
        assert!(fresh(cache.lookup(&uid, "web", "ns")).is_none(), "no relist yet: unknown");
        cache.mark_primed();
        let empty = fresh(cache.lookup(&uid, "web", "ns")).expect("nothing in the runtime");
        assert!(empty.sandbox_statuses.is_empty() && empty.name == "web" && empty.namespace == "ns");
        cache.set(status("u", "sb"), Instant::now());
        assert_eq!(fresh(cache.lookup(&uid, "web", "ns")).unwrap().sandbox_statuses[0].id, "sb");
        cache.mark_stale(&uid, Instant::now());
        assert!(fresh(cache.lookup(&uid, "web", "ns")).is_none(), "stale: ask the runtime");
        cache.set(status("u", "sb2"), Instant::now());
        assert_eq!(fresh(cache.lookup(&uid, "web", "ns")).unwrap().sandbox_statuses[0].id, "sb2");
        cache.delete(&uid);
        assert!(fresh(cache.lookup(&uid, "web", "ns")).unwrap().sandbox_statuses.is_empty());
    }

    #[test]
    fn a_sync_is_marked_until_its_guard_drops() {
        let cache = PodCache::default();
        let uid = PodUid("u".into());
        let a = cache.syncing(&uid);
        let b = cache.syncing(&uid);
        drop(a);
        assert!(cache.is_syncing(&uid), "one guard left");
        drop(b);
        assert!(!cache.is_syncing(&uid));
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_drops_pods_it_did_not_see_unless_observed_after_it() {
        let cache = PodCache::default();
        cache.set(status("gone", "a"), Instant::now());
        cache.set(status("kept", "b"), Instant::now());
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        let relist = Instant::now();
        tokio::time::advance(std::time::Duration::from_millis(5)).await;
        cache.set(status("new", "c"), Instant::now());
        let present: HashMap<PodUid, ()> = [(PodUid("kept".into()), ())].into();
        cache.reconcile(&present, relist);
        assert!(!cache.has(&PodUid("gone".into())));
        assert!(cache.has(&PodUid("kept".into())) && cache.has(&PodUid("new".into())));
    }
}
