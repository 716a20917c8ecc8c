//! When each pod became Running and when it was gone, as the test apiserver's watch stream has them: an
//! in-process subscriber to the store's change feed (the same events an HTTP watch serves, without the socket).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use test_apiserver::TestApiServer;
use test_apiserver::store::EventType;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// First time seen Running, and time seen deleted, per pod name.
#[derive(Debug, Default)]
pub struct PodTimes {
    /// Pod name → when its status first showed every container running.
    pub running: HashMap<String, Instant>,
    /// Pod name → when the object was removed.
    pub gone: HashMap<String, Instant>,
}

/// When each of `names` was recorded in `times` (in their order), once all were.
pub fn times_of(times: &HashMap<String, Instant>, names: &[String]) -> Option<Vec<Instant>> {
    names.iter().map(|n| times.get(n).copied()).collect()
}

/// The last time any of `names` was recorded in `times`, once all were.
pub fn last_of(times: &HashMap<String, Instant>, names: &[String]) -> Option<Instant> {
    times_of(times, names)?.into_iter().max()
}

/// A running observer.
pub struct PodObserver {
    times: Arc<Mutex<PodTimes>>,
    seq: watch::Receiver<u64>,
    task: JoinHandle<()>,
}

/// Whether a pod object is Running with every container running.
pub fn is_running(pod: &Value) -> bool {
    let st = &pod["status"];
    st["phase"] == "Running"
        && st["containerStatuses"]
            .as_array()
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["state"]["running"].is_object()))
}

impl PodObserver {
    /// Starts following `server` from now.
    pub fn start(server: Arc<TestApiServer>) -> Self {
        let times = Arc::new(Mutex::new(PodTimes::default()));
        let (seq_tx, seq) = watch::channel(0u64);
        let t = times.clone();
        let task = tokio::spawn(async move {
            let mut rx = server.subscribe();
            let mut rv = server.resource_version();
            loop {
                let events = match server.events_since(rv) {
                    Ok(e) => e,
                    Err(e) => {
                        eprintln!("pod observer fell behind the apiserver's event window: {e}");
                        return;
                    }
                };
                let now = Instant::now();
                {
                    let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                    for e in &events {
                        rv = e.rv;
                        if e.resource != "/pods" {
                            continue;
                        }
                        let name = e.object["metadata"]["name"].as_str().unwrap_or_default().to_string();
                        match e.kind {
                            EventType::Deleted => {
                                t.gone.insert(name, now);
                            }
                            _ if is_running(&e.object) => {
                                t.running.entry(name).or_insert(now);
                            }
                            _ => {}
                        }
                    }
                }
                if !events.is_empty() {
                    seq_tx.send_modify(|s| *s += 1);
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        Self { times, seq, task }
    }

    /// Waits until `f` holds for the times seen so far, re-checking on every change; fails after `timeout`.
    pub async fn wait<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&PodTimes) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            self.seq.borrow_and_update();
            if let Some(v) = f(&self.times.lock().unwrap_or_else(|p| p.into_inner())) {
                return Ok(v);
            }
            anyhow::ensure!(!self.task.is_finished(), "the pod observer stopped while waiting for {what}");
            match tokio::time::timeout_at(deadline, self.seq.changed()).await {
                Ok(_) => {}
                Err(_) => anyhow::bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
    }

    /// How many pods were seen Running, and gone, so far (names are never reused by the benchmark).
    pub fn counts(&self) -> (usize, usize) {
        let t = self.times.lock().unwrap_or_else(|p| p.into_inner());
        (t.running.len(), t.gone.len())
    }

    /// When pod `name` was first seen Running.
    pub fn running_at(&self, name: &str) -> Option<Instant> {
        self.times.lock().unwrap_or_else(|p| p.into_inner()).running.get(name).copied()
    }

    /// When pod `name` was seen gone.
    pub fn gone_at(&self, name: &str) -> Option<Instant> {
        self.times.lock().unwrap_or_else(|p| p.into_inner()).gone.get(name).copied()
    }
}

impl Drop for PodObserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A pod bound to the benchmark node: one container, `image`, `command` (empty: the image's own).
/// A pod of one container, without volumes (no service account token either).
pub fn pod_object(name: &str, image: &str, command: &[&str], grace: i64) -> Value {
    let mut c = serde_json::json!({"name": "app", "image": image, "imagePullPolicy": "IfNotPresent"});
    if !command.is_empty() {
        c["command"] = serde_json::json!(command);
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": crate::binnode::NODE,
            "terminationGracePeriodSeconds": grace,
            "automountServiceAccountToken": false,
            "containers": [c],
        },
    })
}
