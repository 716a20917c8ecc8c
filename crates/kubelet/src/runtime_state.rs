//! Whether the container runtime answers (`pkg/kubelet/runtime.go` runtimeState, `kubelet.go` updateRuntimeUp).
//!
//! [`RuntimeState::run`] asks the runtime's `Status` every 5 s; a failure marks the runtime down and is logged
//! once per outage; the next success marks it up again. The state is read by the node status (Ready condition)
//! and logs; it never stops anything. The task ends when cancelled.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet_cri::RuntimeService;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the runtime is asked.
pub const RUNTIME_CHECK_PERIOD: Duration = Duration::from_secs(5);

/// The last known runtime health.
#[derive(Debug, Default)]
pub struct RuntimeState {
    error: Mutex<Option<String>>,
}

impl RuntimeState {
    /// `Ok` while the runtime answers and reports RuntimeReady, else why not.
    pub fn runtime_errors(&self) -> Result<(), String> {
        match &*self.error.lock().unwrap() {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
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

    /// Checks the runtime until cancelled.
    pub async fn run(self: Arc<Self>, runtime: Arc<dyn RuntimeService>, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RUNTIME_CHECK_PERIOD);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let res = match runtime.status().await {
                Ok(st) => {
                    let not_ready = st.conditions.iter().find(|c| c.r#type == "RuntimeReady" && !c.status);
                    not_ready.map(|c| format!("container runtime not ready: {}: {}", c.reason, c.message))
                }
                Err(e) => Some(e.to_string()),
            };
            self.set(res);
        }
    }
}
