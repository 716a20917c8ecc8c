//! The object store: what etcd plus the apiserver's watch cache (`storage/cacher`) provide to the
//! handlers. One global, monotonically increasing resourceVersion stamped on every write, objects as
//! JSON keyed by (group/resource, namespace, name), atomic read-modify-write (`GuaranteedUpdate`) and a
//! bounded window of past events from which watches resume; a resourceVersion older than the window is
//! answered with 410 `too old resource version: X (Y)` as the cacher does.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selector::Selectors;

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// An object was created.
    Added,
    /// An object was changed.
    Modified,
    /// An object was removed.
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the store.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// The store key of the resource (`group/resource`).
    pub resource: String,
    /// The object after the change (for a deletion: the last state, with the deletion's RV).
    pub object: Value,
    /// The object before the change, for modifications.
    pub prev: Option<Value>,
}

/// What a read-modify-write does with the object.
#[derive(Debug)]
pub enum Outcome {
    /// Store this object (a no-op if it equals the current one).
    Update(Value),
    /// Remove the object.
    Delete,
}

type Key = (String, String, String);

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Event>>,
    /// Events with an RV up to this one are gone from the window.
    compacted: u64,
    capacity: usize,
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
}

fn key(def: &ResourceDef, ns: &str, name: &str) -> Key {
    (def.key(), ns.to_string(), name.to_string())
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), json!(rv.to_string()));
    }
}

fn strip_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

impl Store {
    /// An empty store keeping the last `capacity` events for watches. The first write gets RV 2 (as
    /// a fresh etcd would give small numbers).
    pub fn new(capacity: usize) -> Self {
        let (changed, _) = watch::channel(1);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                compacted: 1,
                capacity: capacity.max(1),
            }),
            changed,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, inner: &mut Inner, ev: Event) {
        let rv = ev.rv;
        inner.history.push_back(Arc::new(ev));
        while inner.history.len() > inner.capacity {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
        self.changed.send_replace(rv);
    }

    /// The current (latest) resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// A receiver told the latest RV after every write.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// One object.
    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.lock().objects.get(&key(def, ns, name)).cloned().ok_or_else(|| ApiError::not_found(def, name))
    }

    /// The objects of a resource (in a namespace, or all with `None`) that match, sorted by
    /// namespace and name, and the RV of the snapshot.
    pub fn list(&self, def: &ResourceDef, ns: Option<&str>, sel: &Selectors) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let rk = def.key();
        let items = inner
            .objects
            .iter()
            .filter(|((r, n, _), o)| *r == rk && ns.is_none_or(|ns| ns == n) && sel.matches(o))
            .map(|(_, o)| o.clone())
            .collect();
        (items, inner.rv)
    }

    /// Inserts a new object (already prepared by the strategy); 409 AlreadyExists if the name is taken.
    pub fn create(&self, def: &ResourceDef, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        let name = obj.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut inner = self.lock();
        let k = key(def, ns, &name);
        if inner.objects.contains_key(&k) {
            return Err(ApiError::already_exists(def, &name));
        }
        inner.rv += 1;
        let rv = inner.rv;
        set_rv(&mut obj, rv);
        inner.objects.insert(k, obj.clone());
        let ev = Event { rv, kind: EventType::Added, resource: def.key(), object: obj.clone(), prev: None };
        self.record(&mut inner, ev);
        Ok(obj)
    }

    /// Atomic read-modify-write of one object: `f` sees the current object and decides. Returns the
    /// stored object (for a deletion, the removed object) and whether it was removed.
    pub fn update_with<F>(&self, def: &ResourceDef, ns: &str, name: &str, f: F) -> Result<(Value, bool), ApiError>
    where
        F: FnOnce(&Value) -> Result<Outcome, ApiError>,
    {
        let mut inner = self.lock();
        let k = key(def, ns, name);
        let cur = inner.objects.get(&k).cloned().ok_or_else(|| ApiError::not_found(def, name))?;
        match f(&cur)? {
            Outcome::Update(mut new) => {
                if strip_rv(&new) == strip_rv(&cur) {
                    return Ok((cur, false));
                }
                inner.rv += 1;
                let rv = inner.rv;
                set_rv(&mut new, rv);
                inner.objects.insert(k, new.clone());
                let ev =
                    Event { rv, kind: EventType::Modified, resource: def.key(), object: new.clone(), prev: Some(cur) };
                self.record(&mut inner, ev);
                Ok((new, false))
            }
            Outcome::Delete => {
                inner.objects.remove(&k);
                inner.rv += 1;
                let rv = inner.rv;
                let mut gone = cur.clone();
                set_rv(&mut gone, rv);
                let ev =
                    Event { rv, kind: EventType::Deleted, resource: def.key(), object: gone, prev: Some(cur.clone()) };
                self.record(&mut inner, ev);
                Ok((cur, true))
            }
        }
    }

    /// The events after `rv` (of any resource), or 410 Expired if the window no longer reaches back
    /// to it.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<Event>>, ApiError> {
        let inner = self.lock();
        if rv < inner.compacted {
            return Err(ApiError::expired(format!("too old resource version: {} ({})", rv, inner.compacted)));
        }
        // The window is in RV order: skip to the first event after `rv`.
        let from = inner.history.partition_point(|e| e.rv <= rv);
        Ok(inner.history.range(from..).cloned().collect())
    }

    /// Whether `rv` is older than the event window (a watch from it would get 410).
    pub fn too_old(&self, rv: u64) -> Option<ApiError> {
        self.events_since(rv).err()
    }

    /// Drops the whole event window: every watch resuming from an RV before now gets 410.
    pub fn expire_history(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted = inner.rv;
    }

    /// Every stored object with its resource key (for dumps in tests).
    pub fn dump(&self) -> Vec<(String, Value)> {
        self.lock().objects.iter().map(|((r, _, _), o)| (r.clone(), o.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::pods;

    #[test]
    fn rv_and_window() {
        let s = Store::new(2);
        let o = |n: &str| json!({"metadata": {"name": n, "namespace": "d"}});
        let a = s.create(pods(), "d", o("a")).unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        assert_eq!(s.create(pods(), "d", o("a")).unwrap_err().code, 409);
        s.create(pods(), "d", o("b")).unwrap();
        s.create(pods(), "d", o("c")).unwrap();
        assert_eq!(s.events_since(3).unwrap().len(), 1);
        let e = s.events_since(1).unwrap_err();
        assert_eq!(e.message, "too old resource version: 1 (2)");
        let (_, gone) = s.update_with(pods(), "d", "a", |_| Ok(Outcome::Delete)).unwrap();
        assert!(gone);
        assert_eq!(s.current_rv(), 5);
        s.expire_history();
        assert_eq!(s.events_since(4).unwrap_err().code, 410);
        assert!(s.events_since(5).unwrap().is_empty());
    }
}
