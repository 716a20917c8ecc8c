//! kuberuntime: how rkubelet drives a CRI runtime (`pkg/kubelet/kuberuntime`), plus the generic PLEG
//! (`pkg/kubelet/pleg/generic.go`) and crash-loop back-off (`k8s.io/client-go/util/flowcontrol/backoff.go`).
//!
//! The pod workers of the core call [`RuntimeManager::sync_pod`] and [`RuntimeManager::kill_pod`], one call
//! at a time per pod; the PLEG calls [`RuntimeManager::get_pods`] every relist period. Errors are returned to
//! the caller, who retries at the next sync: nothing here loops forever or panics on a runtime failure.

pub mod actions;
pub mod backoff;
pub mod cache;
pub mod config_gen;
pub mod container;
pub mod container_gc;
pub mod cpus;
pub mod devices;
pub mod env;
pub mod hash;
pub mod hosts;
pub mod image_gc;
pub mod images;
pub mod kill;
pub mod labels;
pub mod lifecycle;
pub mod log_rotation;
pub mod logs;
pub mod manager;
pub mod oom_kills;
pub mod pleg;
pub mod pull;
pub use kubelet_types::qos;
pub mod reasons;
pub mod resize;
pub mod resize_run;
pub mod resources;
pub mod runtime_handlers;
pub mod security;
pub mod swap;
pub mod userns;

pub use backoff::Backoff;
pub use cache::{Cached, PodCache, SyncGuard};
pub use manager::{KillRequest, RuntimeManager, RuntimeManagerConfig, SyncError, SyncResult};
pub use pleg::{GenericPleg, PlegHealth};
pub use reasons::ReasonCache;
