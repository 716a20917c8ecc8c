//! Whether the container runtime answers (`pkg/kubelet/runtime.go` runtimeState, `kubelet.go` updateRuntimeUp).
//!
//! [`RuntimeState::run`] asks the runtime's `Status` every 5 s; a failure marks the runtime down and is logged
//! once per outage; the next success marks it up again. A ready runtime's handlers and features are kept for the
//! node status (`status.runtimeHandlers`, `status.features`) and for the pods that need a handler's feature
//! (recursive read-only mounts, user namespaces). The state is read by the node status (Ready condition) and
//! logs; it never stops anything. The task ends when cancelled.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet_cri::RuntimeService;

use crate::nodestatus::setters::RuntimeInfo;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the runtime is asked.
pub const RUNTIME_CHECK_PERIOD: Duration = Duration::from_secs(5);

/// The last known runtime health, and its handlers and features as its last ready `Status` gave them.
#[derive(Debug)]
pub struct RuntimeState {
    error: Mutex<Option<String>>,
    info: tokio::sync::watch::Sender<RuntimeInfo>,
}

impl Default for RuntimeState {
    fn default() -> Self {
        RuntimeState { error: Mutex::new(None), info: tokio::sync::watch::Sender::new(RuntimeInfo::default()) }
    }
}

impl RuntimeState {
    /// `Ok` while the runtime answers and reports RuntimeReady, else why not.
    pub fn runtime_errors(&self) -> Result<(), String> {
        match &*self.error.lock().unwrap() {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }

    /// The handlers and features of the last `Status` that found the runtime ready (kept while it is not).
    pub fn runtime_info(&self) -> RuntimeInfo {
        self.info.borrow().clone()
    }

    /// Follows the handlers and features (the runtime manager's view, for recursive read-only mounts and user
    /// namespaces).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<RuntimeInfo> {
        self.info.subscribe()
    }

    /// Records the handlers and features of a ready runtime (readers are told only of a change).
    pub fn set_info(&self, info: RuntimeInfo) {
        self.info.send_if_modified(|cur| {
            let changed = *cur != info;
            *cur = info;
            changed
        });
    }

    /// Records one check.
    pub fn set(&self, err: Option<String>) {
        let mut cur = self.error.lock().unwrap();
        match (&*cur, &err) {
            (None, Some(e)) => warn!(error = %e, "container runtime is down; pods are kept and the runtime is retried"),
            (Some(_), None) => info!("container runtime is up again"),
            _ => {}
        }
        *cur = err;
    }

    /// Whether a `Status` answer finds the runtime ready; a ready runtime's handlers and features are recorded
    /// (`updateRuntimeUp` takes them only from a ready runtime).
    fn record(&self, resp: &kubelet_cri::api::StatusResponse) -> Result<(), String> {
        let st = resp.status.clone().unwrap_or_default();
        match st.conditions.iter().find(|c| c.r#type == "RuntimeReady" && !c.status) {
            None => {
                self.set_info(RuntimeInfo::from_cri(resp));
                Ok(())
            }
            Some(c) => Err(format!("container runtime not ready: {}: {}", c.reason, c.message)),
        }
    }

    /// Waits for the runtime's first ready `Status` and records its handlers and features, so no pod is synced on
    /// a runtime whose features are not known yet (upstream's sync loop skips pod syncs until `updateRuntimeUp`
    /// has run). Retried every second, logged once; false when cancelled meanwhile.
    pub async fn wait_ready(&self, runtime: &dyn RuntimeService, cancel: &CancellationToken) -> bool {
        let mut logged = false;
        loop {
            let why = match runtime.status().await {
                Ok(resp) => match self.record(&resp) {
                    Ok(()) => return true,
                    Err(why) => why,
                },
                Err(e) => e.to_string(),
            };
            if !logged {
                warn!(error = %why, "container runtime not ready; pods wait for it");
                logged = true;
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// Checks the runtime until cancelled.
    pub async fn run(self: Arc<Self>, runtime: Arc<dyn RuntimeService>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RUNTIME_CHECK_PERIOD);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let res = match runtime.status().await {
                Ok(resp) => self.record(&resp).err(),
                Err(e) => Some(e.to_string()),
            };
            self.set(res);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_cri::{CriError, FakeRuntime, api};

    #[tokio::test(start_paused = true)]
    async fn a_ready_runtimes_handlers_are_published_and_kept_while_it_is_down() {
        let fake = Arc::new(FakeRuntime::new(&[]));
        let features = api::RuntimeHandlerFeatures { recursive_read_only_mounts: true, user_namespaces: true };
        fake.set_runtime_handlers(vec![api::RuntimeHandler { name: "runc".into(), features: Some(features) }]);
        let state = Arc::new(RuntimeState::default());
        let mut rx = state.subscribe();
        let cancel = CancellationToken::new();
        tokio::spawn(state.clone().run(fake.clone() as Arc<dyn RuntimeService>, cancel.clone()));
        rx.changed().await.unwrap();
        assert_eq!(rx.borrow().handlers[0].name, "runc");
        assert!(rx.borrow().handlers[0].user_namespaces && rx.borrow().handlers[0].recursive_read_only_mounts);

        // Down: the error is reported, the handlers stay as last seen.
        fake.inject_error("Status", CriError::Other { op: "Status", code: "Unavailable".into(), message: "x".into() });
        tokio::time::sleep(RUNTIME_CHECK_PERIOD + Duration::from_millis(1)).await;
        assert!(state.runtime_errors().is_err());
        assert_eq!(state.runtime_info().handlers.len(), 1);
        tokio::time::sleep(RUNTIME_CHECK_PERIOD).await;
        assert!(state.runtime_errors().is_ok(), "up again at the next check");
        cancel.cancel();
    }
}
