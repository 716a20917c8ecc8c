//! The Node object: registration, status and lease (`pkg/kubelet/kubelet_node_status.go`,
//! `pkg/kubelet/nodestatus`, `component-helpers/apimachinery/lease`).

pub mod lease;
pub mod machine;
pub mod manager;
pub mod quantity;
pub mod setters;

pub use lease::LeaseController;
pub use manager::{NodeSignals, NodeStatusManager};
