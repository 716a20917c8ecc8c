//! The kubelet core (`pkg/kubelet`): the sync loop and the managers it drives.
//!
//! - [`sync_loop`]: one task consuming pod updates, PLEG events and ticks (`kubelet.go` syncLoop).
//! - [`pod_workers`]: one task per pod, latest update wins (`pod_workers.go`).
//! - [`syncer`]: what a pod worker does at each step — SyncPod, SyncTerminatingPod, SyncTerminatedPod.
//! - [`status`]: API pod status from runtime status (`kubelet_pods.go` generateAPIPodStatus) and the status
//!   manager (`pkg/kubelet/status`).
//! - [`cm`]: pod and QoS cgroups (`pkg/kubelet/cm`).
//! - [`server`]: `/healthz` and the read-only API (`pkg/kubelet/server`).
//! - [`stats`]: the Summary API (`pkg/kubelet/stats`).
//! - [`runtime_state`]: whether the container runtime answers (`runtime.go` runtimeState).
//! - [`preemption`]: room for critical pods at admission (`pkg/kubelet/preemption`).

pub mod admission;
pub mod admission_fields;
pub mod allocation;
pub mod cm;
pub mod container_deletor;
pub mod cpus;
pub mod devices;
pub mod events;
pub mod explain;
pub mod fake_node;
pub mod gc;
pub mod memory;
pub mod mirror;
pub mod node_allocatable;
pub mod nodeshutdown;
pub mod nodestatus;
pub mod object_cache;
pub mod oom;
pub mod pod_manager;
pub mod pod_workers;
pub mod predicate;
pub mod preemption;
pub mod pressure;
pub mod probes;
pub mod runtime_class;
pub mod runtime_state;
pub mod server;
pub mod stats;
pub mod status;
pub mod sync_loop;
pub mod syncer;
pub mod topology;
pub mod volumes;
pub mod watchdog;
pub mod watched_cache;
