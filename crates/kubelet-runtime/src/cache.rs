//! The runtime pod cache (`pkg/kubelet/container/cache.go`): the latest [`PodStatus`] of each pod, written by
//! the PLEG after a relist that saw the pod change and by the pod workers after each sync, read by the status
//! computation and (later) the HTTP API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kubelet_types::{PodStatus, PodUid};

/// Latest runtime status per pod.
#[derive(Debug, Default)]
pub struct PodCache {
    inner: Mutex<HashMap<PodUid, Arc<PodStatus>>>,
}

impl PodCache {
    /// The cached status of a pod.
    pub fn get(&self, uid: &PodUid) -> Option<Arc<PodStatus>> {
        self.inner.lock().unwrap().get(uid).cloned()
    }

    /// Stores a status.
    pub fn set(&self, status: PodStatus) -> Arc<PodStatus> {
        let s = Arc::new(status);
        self.inner.lock().unwrap().insert(s.id.clone(), s.clone());
        s
    }

    /// Forgets a pod.
    pub fn delete(&self, uid: &PodUid) {
        self.inner.lock().unwrap().remove(uid);
    }

    /// Every cached status.
    pub fn statuses(&self) -> Vec<Arc<PodStatus>> {
        self.inner.lock().unwrap().values().cloned().collect()
    }

    /// Number of pods cached.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
