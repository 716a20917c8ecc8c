//! Pod status: computed from the runtime's view ([`generate`], `pkg/kubelet/kubelet_pods.go`
//! generateAPIPodStatus, `pkg/kubelet/status/generate.go`) and kept by the [`manager::StatusManager`]
//! (`pkg/kubelet/status/status_manager.go`).

pub mod generate;
pub mod manager;
pub mod merge;
pub mod resize;
pub mod resources;

pub use generate::{StatusInputs, generate_api_pod_status, get_phase};
pub use manager::{PodEntry, StatusManager};

pub mod apisync;
