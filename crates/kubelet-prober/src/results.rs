//! Cached probe results (`pkg/kubelet/prober/results/results_manager.go`): the latest result of one probe type per
//! container ID. Workers write; the runtime manager, the status computation and the sync loop read. A change is
//! also sent on the update channel.

use std::collections::HashMap;
use std::sync::Mutex;

use kubelet_types::PodUid;
use kubelet_types::probe::{ProbeResult, ProbeType, ProbeUpdate};
use tokio::sync::mpsc;

/// Results of one probe type.
#[derive(Debug)]
pub struct ResultsCache {
    probe: ProbeType,
    map: Mutex<HashMap<String, ProbeResult>>,
    updates: mpsc::Sender<ProbeUpdate>,
}

impl ResultsCache {
    /// An empty cache sending changes on `updates`.
    pub fn new(probe: ProbeType, updates: mpsc::Sender<ProbeUpdate>) -> Self {
        Self { probe, map: Mutex::new(HashMap::new()), updates }
    }

    /// The cached result of a container.
    pub fn get(&self, container_id: &str) -> Option<ProbeResult> {
        self.map.lock().unwrap().get(container_id).copied()
    }

    /// Caches a result; a change is sent to the sync loop (waiting while its channel is full).
    pub async fn set(&self, container_id: &str, result: ProbeResult, pod_uid: &PodUid) {
        let changed = self.map.lock().unwrap().insert(container_id.to_string(), result) != Some(result);
        if changed {
            let u = ProbeUpdate {
                pod_uid: pod_uid.clone(),
                container_id: container_id.to_string(),
                probe: self.probe,
                result,
            };
            // A closed channel means the kubelet is stopping.
            let _ = self.updates.send(u).await;
        }
    }

    /// Caches a result known from before this kubelet started (the status it last wrote), without a change being
    /// sent: nothing changed. A result already cached wins.
    pub fn seed(&self, container_id: &str, result: ProbeResult) {
        self.map.lock().unwrap().entry(container_id.to_string()).or_insert(result);
    }

    /// Forgets a container.
    pub fn remove(&self, container_id: &str) {
        self.map.lock().unwrap().remove(container_id);
    }
}
