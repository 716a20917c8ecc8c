//! The device manager as the pod resources API's devices provider (`GetDevices`, `GetAllocatableDevices`,
//! `UpdateAllocatedDevices`, and `containerDevicesFromResourceDeviceInstances` of
//! `pkg/kubelet/cm/container_manager.go`): one entry per device, and per NUMA node where the plugin gave one.

use std::collections::{BTreeMap, BTreeSet};

use kubelet_proto::podresources::v1 as pb;

use super::DeviceManager;
use crate::podresources::DevicesProvider;

/// The entries of `resource`'s devices, each with its NUMA nodes (none: one entry without topology).
fn entries(resource: &str, devices: BTreeMap<String, BTreeSet<i64>>) -> impl Iterator<Item = pb::ContainerDevices> {
    let resource = resource.to_string();
    devices.into_iter().flat_map(move |(id, nodes)| {
        let one =
            |topology| pb::ContainerDevices { resource_name: resource.clone(), device_ids: vec![id.clone()], topology };
        if nodes.is_empty() {
            vec![one(None)]
        } else {
            nodes.into_iter().map(|n| one(Some(pb::TopologyInfo { nodes: vec![pb::NumaNode { id: n }] }))).collect()
        }
    })
}

impl DevicesProvider for DeviceManager {
    fn update_allocated_devices(&self, active: &BTreeSet<String>) {
        let mut s = self.lock();
        let mut keep = active.clone();
        keep.extend(s.running_at_start.iter().map(|(u, _)| u.clone()));
        let before = s.pods.len();
        s.forget_inactive(&keep);
        if s.pods.len() != before {
            self.write_checkpoint(&s);
        }
    }

    fn devices(&self, pod_uid: &str, container: &str) -> Vec<pb::ContainerDevices> {
        let s = self.lock();
        let mut out = vec![];
        for ((u, c, r), a) in s.pods.range((pod_uid.to_string(), container.to_string(), String::new())..) {
            if u != pod_uid || c != container {
                break;
            }
            let mut devices: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
            for (numa, ids) in &a.numa {
                for id in ids {
                    let nodes = devices.entry(id.clone()).or_default();
                    if *numa >= 0 {
                        nodes.insert(*numa);
                    }
                }
            }
            out.extend(entries(r, devices));
        }
        out
    }

    fn allocatable_devices(&self) -> Vec<pb::ContainerDevices> {
        let s = self.lock();
        let mut out = vec![];
        for (r, ids) in &s.healthy {
            let topo = s.topology.get(r);
            let devices = ids
                .iter()
                .map(|id| {
                    let nodes = topo.and_then(|t| t.get(id)).map(|n| n.iter().copied().collect()).unwrap_or_default();
                    (id.clone(), nodes)
                })
                .collect();
            out.extend(entries(r, devices));
        }
        out
    }
}
