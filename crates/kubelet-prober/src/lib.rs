//! The probe manager (`pkg/kubelet/prober`): liveness, readiness and startup probes, one worker task per probe
//! of each container, and the probe handlers (`pkg/probe/{exec,http,tcp,grpc}`) that the lifecycle hooks of the
//! runtime manager share.
//!
//! Contract: the pod workers call [`ProbeManager::add_pod`] at every sync of a running pod,
//! [`ProbeManager::stop_liveness_and_startup`] when a pod starts terminating and [`ProbeManager::remove_pod`]
//! once it is terminated. Workers read container IDs and start times from the status manager (through
//! [`kubelet_types::probe::PodStatusSource`]), run their probe every `periodSeconds`, and send each change of a
//! result on the update channel the sync loop consumes. A probe that errors (the runtime did not answer) is retried
//! and its result thrown away, as upstream; cancellation stops every worker.

pub mod handlers;
pub mod http;
mod manager;
pub mod results;
mod worker;

pub use handlers::{Outcome, ProbeOutput};
pub use manager::{ProbeManager, ProbeManagerDeps, UPDATE_CHANNEL_CAPACITY};
pub use results::ResultsCache;

/// `kube-probe/<major>.<minor>`, the User-Agent of HTTP and gRPC probes.
pub const USER_AGENT: &str = "kube-probe/1.35";

#[cfg(test)]
mod tests;
