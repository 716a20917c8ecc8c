//! Shared vocabulary of rkubelet, with no I/O.
//!
//! Mirrors the small type packages of the Go kubelet: `pkg/kubelet/types` (pod sources and operations,
//! annotation keys), `pkg/kubelet/container` (the runtime's view of pods and containers) and
//! `pkg/kubelet/pleg` (lifecycle events). Every other crate depends on this one; it depends on nothing of the
//! project.

pub mod cgroup_name;
pub mod clock;
pub mod cpuset;
pub mod events;
pub mod go_json;
pub mod labels;
pub mod objects;
pub mod pleg;
pub mod pod_fields;
pub mod pod_update;
pub mod probe;
pub mod qos;
pub mod quantity;
pub mod resources;
pub mod runtime;
pub mod scheduling;
pub mod systemd_names;

pub use clock::{Clock, SystemClock, TestClock};
pub use pleg::{PodLifecycleEvent, PodLifecycleEventType};
pub use pod_update::{Operation, PodSource, PodUpdate};
pub use runtime::{
    ContainerResources, ContainerState, ContainerStatus, PodStatus, PodUid, RuntimeContainer, RuntimePod, SandboxState,
    SandboxStatus,
};

/// The API pod type every crate speaks.
pub type Pod = k8s_openapi::api::core::v1::Pod;
