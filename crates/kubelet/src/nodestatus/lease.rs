//! The node lease heartbeat (`component-helpers/apimachinery/lease/controller.go`, `pkg/kubelet/util/nodelease.go`).
//!
//! [`LeaseController::run`] renews `kube-node-lease/<node>` every quarter of `nodeLeaseDurationSeconds`: it
//! updates the last lease it wrote (optimistic; up to 5 tries), and on a conflict or a missing lease falls back
//! to get-or-create with back-off from 100 ms to 7 s. The lease is owned by the Node once the Node exists.
//! Errors are logged and retried; ends when cancelled.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kubelet_apiclient::{ApiError, LeaseApi, NodeApi};
use kubelet_types::Clock;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// The namespace of node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Update attempts before falling back to get-or-create (`maxUpdateRetries`).
const MAX_UPDATE_RETRIES: usize = 5;
const ENSURE_BACKOFF_START: Duration = Duration::from_millis(100);
const ENSURE_BACKOFF_MAX: Duration = Duration::from_secs(7);

/// The lease heartbeat of one node.
pub struct LeaseController {
    leases: Arc<dyn LeaseApi>,
    nodes: Arc<dyn NodeApi>,
    node_name: String,
    duration_seconds: i32,
    clock: Arc<dyn Clock>,
    latest: Option<Lease>,
}

impl LeaseController {
    /// A controller for `node_name` with `nodeLeaseDurationSeconds`.
    pub fn new(
        leases: Arc<dyn LeaseApi>,
        nodes: Arc<dyn NodeApi>,
        node_name: String,
        duration_seconds: i32,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { leases, nodes, node_name, duration_seconds, clock, latest: None }
    }

    /// The renew interval: a quarter of the lease duration.
    pub fn renew_interval(&self) -> Duration {
        Duration::from_millis((self.duration_seconds.max(1) as u64) * 250)
    }

    async fn new_lease(&self, base: Option<&Lease>) -> Lease {
        let mut l = base.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(self.node_name.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                ..Default::default()
            },
            spec: None,
        });
        let spec = l.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node_name.clone());
        spec.lease_duration_seconds = Some(self.duration_seconds);
        let now = kubelet_types::clock::api_time(self.clock.now());
        spec.renew_time = Some(MicroTime(now.0));
        // `setNodeOwnerFunc`: the Node owns its lease, so the lease goes when the Node is deleted.
        if l.metadata.owner_references.as_ref().is_none_or(|o| o.is_empty())
            && let Ok(Some(node)) = self.nodes.get_node(&self.node_name).await
            && let Some(uid) = node.metadata.uid
        {
            l.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: self.node_name.clone(),
                uid,
                ..Default::default()
            }]);
        }
        l
    }

    async fn ensure(&self) -> Result<(Lease, bool), ApiError> {
        match self.leases.get_lease(NODE_LEASE_NAMESPACE, &self.node_name).await? {
            Some(l) => Ok((l, false)),
            None => {
                let l = self.new_lease(None).await;
                Ok((self.leases.create_lease(&l).await?, true))
            }
        }
    }

    async fn update(&mut self, base: Lease) -> Result<(), ApiError> {
        let mut last = ApiError::Other { code: 0, message: "no attempt".into() };
        for _ in 0..MAX_UPDATE_RETRIES {
            let l = self.new_lease(Some(&base)).await;
            match self.leases.update_lease(&l).await {
                Ok(l) => {
                    self.latest = Some(l);
                    return Ok(());
                }
                Err(e @ ApiError::Conflict(_)) => return Err(e),
                Err(e) => {
                    debug!(node = %self.node_name, error = %e, "failed to update lease, retrying");
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// One renewal (`sync`).
    pub async fn sync(&mut self, cancel: &CancellationToken) {
        if let Some(l) = self.latest.clone() {
            match self.update(l).await {
                Ok(()) => return,
                Err(e) => {
                    debug!(node = %self.node_name, error = %e, "failed to update lease using latest lease, fallback to ensure lease")
                }
            }
        }
        let mut delay = ENSURE_BACKOFF_START;
        let (lease, created) = loop {
            match self.ensure().await {
                Ok(r) => break r,
                Err(e) => {
                    warn!(node = %self.node_name, error = %e, retryIn = ?delay, "failed to ensure node lease exists, will retry")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(ENSURE_BACKOFF_MAX);
        };
        self.latest = Some(lease.clone());
        if !created && let Err(e) = self.update(lease).await {
            warn!(node = %self.node_name, error = %e, "failed to update node lease");
        }
    }

    /// Renews until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.renew_interval());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            self.sync(&cancel).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubelet_apiclient::fake::FakeApi;
    use kubelet_types::TestClock;

    #[tokio::test(start_paused = true)]
    async fn creates_owns_and_renews_the_lease_through_outages() {
        let api = Arc::new(FakeApi::new());
        let mut node = k8s_openapi::api::core::v1::Node::default();
        node.metadata.name = Some("n1".into());
        api.create_node(&node).await.unwrap();
        let c = LeaseController::new(api.clone(), api.clone(), "n1".into(), 40, Arc::new(TestClock::fixed()));
        assert_eq!(c.renew_interval(), Duration::from_secs(10));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(c.run(cancel.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let l = api.lease(NODE_LEASE_NAMESPACE, "n1").unwrap();
        let spec = l.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(l.metadata.owner_references.unwrap()[0].kind, "Node");
        let t0 = spec.renew_time.unwrap().0;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let t1 = api.lease(NODE_LEASE_NAMESPACE, "n1").unwrap().spec.unwrap().renew_time.unwrap().0;
        assert_eq!(t1.as_second() - t0.as_second(), 10, "renewed every 10 s");
        api.set_down(true);
        tokio::time::sleep(Duration::from_secs(30)).await;
        api.set_down(false);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let t2 = api.lease(NODE_LEASE_NAMESPACE, "n1").unwrap().spec.unwrap().renew_time.unwrap().0;
        assert!(t2.as_second() - t1.as_second() >= 30, "renewal resumes after the outage: {t1} -> {t2}");
        cancel.cancel();
        task.await.unwrap();
    }
}
