//! Dynamic resource allocation (`pkg/kubelet/cm/dra`): the kubelet's side of DRA.
//!
//! - [`registry`]: the drivers that registered through the plugin manager (`DRAPlugin`), their gRPC clients, and the
//!   deletion of the node's ResourceSlices of drivers that are gone;
//! - [`manager`]: `NodePrepareResources` before a pod's sandbox, the containers' CDI devices, `NodeUnprepareResources`
//!   once the pod stopped, and the reconcile pass;
//! - [`cache`] and [`checkpoint`]: the claims the node prepared, kept in `dra_manager_state` in upstream's format and
//!   checksum, so claims prepared by the Go kubelet are known to rkubelet after an upgrade and the reverse;
//! - [`claims`]: which claims a pod names, and whether it may use them; [`plugin`]: which service a driver is spoken
//!   to through (the API is `kubelet_proto::dra`).

pub mod cache;
pub mod checkpoint;
pub mod claims;
pub mod manager;
pub mod plugin;
pub mod registry;

#[cfg(test)]
mod tests;
