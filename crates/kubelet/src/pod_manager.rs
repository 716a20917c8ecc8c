//! The desired pods (`pkg/kubelet/pod/pod_manager.go`): every pod the config sources want on this node, by UID
//! and by full name. Owned by the sync loop alone; other tasks get snapshots.

use std::collections::HashMap;
use std::sync::Arc;

use kubelet_types::{Pod, PodUid};

/// Desired pods.
#[derive(Debug, Default)]
pub struct PodManager {
    by_uid: HashMap<PodUid, Arc<Pod>>,
}

impl PodManager {
    /// Adds or replaces a pod.
    pub fn add_or_update(&mut self, pod: Arc<Pod>) {
        self.by_uid.insert(kubelet_types::pod_update::pod_uid(&pod), pod);
    }

    /// Removes a pod.
    pub fn remove(&mut self, uid: &PodUid) -> Option<Arc<Pod>> {
        self.by_uid.remove(uid)
    }

    /// The pod with this UID.
    pub fn get(&self, uid: &PodUid) -> Option<&Arc<Pod>> {
        self.by_uid.get(uid)
    }

    /// Every pod.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.by_uid.values()
    }

    /// Whether the UID is desired.
    pub fn contains(&self, uid: &PodUid) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Whether there are no pods.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}
