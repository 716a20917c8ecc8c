//! The last start failure of each container (`pkg/kubelet/kuberuntime/kuberuntime_manager.go` reasonCache):
//! why a container is waiting (`CrashLoopBackOff`, `ErrImagePull`, `CreateContainerError`, ...) with the
//! message, read by the status computation.

use std::collections::HashMap;
use std::sync::Mutex;

use kubelet_types::PodUid;

/// Reason and message of a container's last start failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// Brief CamelCase reason.
    pub reason: String,
    /// Human message.
    pub message: String,
}

/// Failure reasons keyed by pod UID and container name.
#[derive(Debug, Default)]
pub struct ReasonCache {
    inner: Mutex<HashMap<(PodUid, String), Reason>>,
}

impl ReasonCache {
    /// Records a failure.
    pub fn add(&self, uid: &PodUid, container: &str, reason: &str, message: String) {
        self.inner
            .lock()
            .unwrap()
            .insert((uid.clone(), container.to_string()), Reason { reason: reason.to_string(), message });
    }

    /// Clears the failure after a successful start.
    pub fn remove(&self, uid: &PodUid, container: &str) {
        self.inner.lock().unwrap().remove(&(uid.clone(), container.to_string()));
    }

    /// The last failure.
    pub fn get(&self, uid: &PodUid, container: &str) -> Option<Reason> {
        self.inner.lock().unwrap().get(&(uid.clone(), container.to_string())).cloned()
    }

    /// Forgets a pod.
    pub fn forget_pod(&self, uid: &PodUid) {
        self.inner.lock().unwrap().retain(|(u, _), _| u != uid);
    }
}
