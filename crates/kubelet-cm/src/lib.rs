//! The node's resource managers (`pkg/kubelet/cm`): the device manager (`devicemanager`), the device plugin API
//! `v1beta1` side of the kubelet, and the pod resources API that tells monitoring agents what each container was
//! given (`podresources`, upstream's `pkg/kubelet/apis/podresources`). The core asks them through traits it owns;
//! they never import each other.

pub mod allocation_state;
pub mod checksum;
pub mod cpumanager;
pub mod devicemanager;
pub mod dra;
pub mod memorymanager;
pub mod podresources;
pub mod topologymanager;
pub mod uds_authority;
