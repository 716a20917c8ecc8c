//! The node's resource managers (`pkg/kubelet/cm`): today the device manager (`devicemanager`), the device plugin
//! API `v1beta1` side of the kubelet. The core asks them through traits it owns; they never import each other.

pub mod devicemanager;
pub mod uds_authority;
