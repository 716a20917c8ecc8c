//! The CPU manager (`pkg/kubelet/cm/cpumanager`), first part: its state file ([`state`], `cpu_manager_state` in
//! upstream's format and checksum, so an upgrade from or a downgrade to the Go kubelet keeps every assignment), the
//! machine's CPU topology ([`topology`], from sysfs as cadvisor reads it) and the static policy's allocator
//! ([`policy`]: reserved CPUs, the shared pool, exclusive CPUs for Guaranteed containers with integer requests,
//! upstream's topology-aware best fit). Not wired into the kubelet yet: rkubelet refuses `cpuManagerPolicy:
//! static` at start until admission, container creation and the reconcile loop use it (issue 30).

pub mod distribute;
pub mod manager;
pub mod policy;
pub mod state;
pub mod topology;
