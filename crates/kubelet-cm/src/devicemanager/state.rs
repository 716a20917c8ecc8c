//! The device manager's state (`pkg/kubelet/cm/devicemanager/manager.go` ManagerImpl's maps and
//! `pod_devices.go`): each resource's healthy and unhealthy devices and plugin endpoint, every container's
//! allocation, and the choice of devices. Pure: the owner ([`super::DeviceManager`]) holds it under its lock, makes
//! the plugin calls outside it, and passes the time in.

use std::collections::{BTreeMap, BTreeSet};

use kubelet_proto::deviceplugin::v1beta1 as pb;
use prost::Message;
use tokio::time::Instant;

use super::checkpoint::{CheckpointData, PodDevicesEntry};
use super::endpoint::Endpoint;

/// How long a plugin that went away keeps its resource on the node (`endpointStopGracePeriod`).
pub const STOP_GRACE_PERIOD: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// The device health a plugin reports for a usable device (`pluginapi.Healthy`); anything else is unhealthy.
pub const HEALTHY: &str = "Healthy";

/// A resource's plugin connection.
#[derive(Debug)]
pub struct EndpointState {
    /// The client; None while stopped (gone, or restored from the checkpoint before it registered again).
    pub endpoint: Option<Endpoint>,
    /// What it asked for (None when restored from the checkpoint).
    pub options: Option<pb::DevicePluginOptions>,
    /// When it stopped.
    pub stopped_at: Option<Instant>,
    /// Which registration this is: a stream that ends stops its resource only if no newer one replaced it.
    pub generation: u64,
}

/// A container's devices of one resource.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allocation {
    /// Device IDs by NUMA node (-1: none).
    pub numa: BTreeMap<i64, Vec<String>>,
    /// The plugin's answer (None: chosen, not yet allocated by the plugin).
    pub resp: Option<pb::ContainerAllocateResponse>,
}

impl Allocation {
    /// Every device ID.
    pub fn ids(&self) -> BTreeSet<String> {
        self.numa.values().flatten().cloned().collect()
    }
}

/// (pod UID, container, resource).
pub type Key = (String, String, String);

/// What the node status gets (`GetCapacity`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Every device of each resource, healthy or not.
    pub capacity: BTreeMap<String, i64>,
    /// Its healthy devices.
    pub allocatable: BTreeMap<String, i64>,
    /// Resources removed since the last call (their plugin gone past the grace period): 0 on the node.
    pub removed: Vec<String>,
}

/// The device manager's maps.
#[derive(Debug, Default)]
pub struct State {
    /// Plugin endpoints by resource.
    pub endpoints: BTreeMap<String, EndpointState>,
    /// Healthy devices by resource.
    pub healthy: BTreeMap<String, BTreeSet<String>>,
    /// Unhealthy devices by resource.
    pub unhealthy: BTreeMap<String, BTreeSet<String>>,
    /// Each device's NUMA nodes, by resource.
    pub topology: BTreeMap<String, BTreeMap<String, Vec<i64>>>,
    /// Every container's allocations.
    pub pods: BTreeMap<Key, Allocation>,
    /// Devices given to containers, by resource.
    pub allocated: BTreeMap<String, BTreeSet<String>>,
    /// Devices of a pod's finished init containers that its later containers may take, by resource.
    pub reuse: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// The last registration's number.
    pub generation: u64,
    /// (pod UID, container) of the containers the runtime ran when the kubelet started (`containerMap` and
    /// `containerRunningSet` of upstream's `Start`): re-admitted after a restart, they keep their devices unchecked.
    pub running_at_start: BTreeSet<(String, String)>,
}

impl State {
    /// Whether some device of `r` has NUMA nodes (`deviceHasTopologyAlignment`).
    pub fn has_topology(&self, r: &str) -> bool {
        self.topology.get(r).is_some_and(|t| t.values().any(|n| !n.is_empty()))
    }

    /// The NUMA placements of `requested` devices of `r` (`GetTopologyHints`/`GetPodTopologyHints` per resource):
    /// None (no preference) when no device has a node; those of `allocated` when the container (or pod) has them
    /// already (none when not as many as asked); else those of the free and `reusable` devices, none when too few.
    pub fn device_hints(
        &self,
        r: &str,
        requested: usize,
        allocated: &BTreeSet<String>,
        reusable: &BTreeSet<String>,
        numa_nodes: &[u32],
    ) -> Option<Vec<crate::topologymanager::TopologyHint>> {
        if !self.has_topology(r) {
            return None;
        }
        if !allocated.is_empty() {
            if allocated.len() != requested {
                return Some(vec![]);
            }
            return Some(self.generate_hints(r, allocated, &BTreeSet::new(), requested, numa_nodes));
        }
        let taken = self.allocated.get(r);
        let available: BTreeSet<String> = self
            .healthy
            .get(r)
            .into_iter()
            .flatten()
            .filter(|d| !taken.is_some_and(|t| t.contains(*d)))
            .cloned()
            .collect();
        if available.union(reusable).count() < requested {
            return Some(vec![]);
        }
        Some(self.generate_hints(r, &available, reusable, requested, numa_nodes))
    }

    /// `generateDeviceTopologyHints`.
    fn generate_hints(
        &self,
        r: &str,
        available: &BTreeSet<String>,
        reusable: &BTreeSet<String>,
        request: usize,
        numa_nodes: &[u32],
    ) -> Vec<crate::topologymanager::TopologyHint> {
        use crate::topologymanager::{TopologyHint, iterate_masks};
        let topo = self.topology.get(r);
        let nodes_of = |d: &String| topo.and_then(|t| t.get(d)).cloned().unwrap_or_default();
        let any_set = |mask: u64, nodes: &[i64]| nodes.iter().any(|n| *n >= 0 && *n < 64 && mask & (1u64 << *n) != 0);
        let mut min_size = numa_nodes.len() as u32;
        let mut hints = vec![];
        iterate_masks(numa_nodes, |mask| {
            let in_mask = topo.into_iter().flatten().filter(|(_, n)| any_set(mask, n)).count();
            if in_mask >= request && mask.count_ones() < min_size {
                min_size = mask.count_ones();
            }
            let mut matching = 0;
            for d in reusable {
                let n = nodes_of(d);
                if n.is_empty() {
                    continue;
                }
                if !any_set(mask, &n) {
                    return;
                }
                matching += 1;
            }
            matching += available.iter().filter(|d| any_set(mask, &nodes_of(d))).count();
            if matching >= request {
                hints.push(TopologyHint { affinity: Some(mask), preferred: false });
            }
        });
        for h in &mut hints {
            h.preferred = h.affinity.map(|m| m.count_ones()) == Some(min_size);
        }
        hints
    }

    /// Whether `r` is served by a device plugin (`isDevicePluginResource`).
    pub fn is_device_resource(&self, r: &str) -> bool {
        self.healthy.contains_key(r) || self.allocated.contains_key(r)
    }

    /// A plugin registered for `resource`: its endpoint replaces any earlier one; returns its generation.
    pub fn connected(&mut self, resource: &str, endpoint: Endpoint, options: pb::DevicePluginOptions) -> u64 {
        self.generation += 1;
        let state = EndpointState {
            endpoint: Some(endpoint),
            options: Some(options),
            stopped_at: None,
            generation: self.generation,
        };
        self.endpoints.insert(resource.to_string(), state);
        self.generation
    }

    /// A device list from the plugin (a full snapshot): replaces the resource's devices.
    pub fn devices(&mut self, resource: &str, devices: &[pb::Device]) {
        let (healthy, unhealthy): (Vec<_>, Vec<_>) = devices.iter().partition(|d| d.health == HEALTHY);
        self.healthy.insert(resource.to_string(), healthy.iter().map(|d| d.id.clone()).collect());
        self.unhealthy.insert(resource.to_string(), unhealthy.iter().map(|d| d.id.clone()).collect());
        let topo = devices
            .iter()
            .map(|d| {
                (d.id.clone(), d.topology.as_ref().map(|t| t.nodes.iter().map(|n| n.id).collect()).unwrap_or_default())
            })
            .collect();
        self.topology.insert(resource.to_string(), topo);
    }

    /// The plugin of registration `generation` went away (`PluginDisconnected`): its devices turn unhealthy and the
    /// grace period starts; a stream of a registration that was replaced changes nothing. Returns whether it did.
    pub fn disconnected(&mut self, resource: &str, generation: u64, now: Instant) -> bool {
        let Some(e) = self.endpoints.get_mut(resource).filter(|e| e.generation == generation && e.stopped_at.is_none())
        else {
            return false;
        };
        e.endpoint = None;
        e.stopped_at = Some(now);
        let healthy = std::mem::take(self.healthy.entry(resource.to_string()).or_default());
        self.unhealthy.entry(resource.to_string()).or_default().extend(healthy);
        true
    }

    /// Capacity and allocatable of each resource (`GetCapacity`); removes the resources whose plugin has been gone
    /// longer than [`STOP_GRACE_PERIOD`] (reported once in `removed`).
    pub fn capacity(&mut self, now: Instant) -> Capacity {
        let expired = |e: Option<&EndpointState>| {
            e.is_none_or(|e| e.stopped_at.is_some_and(|t| now.saturating_duration_since(t) > STOP_GRACE_PERIOD))
        };
        let mut c = Capacity::default();
        let names: BTreeSet<String> = self.healthy.keys().chain(self.unhealthy.keys()).cloned().collect();
        for r in names {
            if expired(self.endpoints.get(&r)) {
                self.endpoints.remove(&r);
                self.healthy.remove(&r);
                self.unhealthy.remove(&r);
                self.topology.remove(&r);
                c.removed.push(r);
                continue;
            }
            let healthy = self.healthy.get(&r).map(BTreeSet::len);
            let unhealthy = self.unhealthy.get(&r).map_or(0, BTreeSet::len);
            if let Some(h) = healthy {
                c.allocatable.insert(r.clone(), h as i64);
            }
            c.capacity.insert(r, (healthy.unwrap_or(0) + unhealthy) as i64);
        }
        c
    }

    /// The devices of `key` as allocated.
    pub fn container_devices(&self, key: &Key) -> Option<BTreeSet<String>> {
        self.pods.get(key).map(Allocation::ids)
    }

    /// Recomputes the allocated devices from the allocations.
    pub fn recount(&mut self) {
        self.allocated.clear();
        for ((_, _, r), a) in &self.pods {
            self.allocated.entry(r.clone()).or_default().extend(a.ids());
        }
    }

    /// Forgets the allocations of pods not in `active` (`UpdateAllocatedDevices`).
    pub fn forget_inactive(&mut self, active: &BTreeSet<String>) {
        let before = self.pods.len();
        self.pods.retain(|(uid, _, _), _| active.contains(uid));
        self.reuse.retain(|uid, _| active.contains(uid));
        if self.pods.len() != before {
            self.recount();
        }
    }

    /// The checkpoint of this state (`toCheckpointData`): every allocation the plugin answered, and each resource's
    /// healthy devices.
    pub fn to_checkpoint(&self) -> CheckpointData {
        let entries: Vec<PodDevicesEntry> = self
            .pods
            .iter()
            .filter_map(|((uid, c, r), a)| {
                let resp = a.resp.as_ref()?;
                Some(PodDevicesEntry {
                    pod_uid: uid.clone(),
                    container_name: c.clone(),
                    resource_name: r.clone(),
                    device_ids: Some(a.numa.clone()),
                    alloc_resp: Some(resp.encode_to_vec()),
                })
            })
            .collect();
        CheckpointData {
            pod_device_entries: (!entries.is_empty()).then_some(entries),
            registered_devices: Some(
                self.healthy.iter().map(|(r, d)| (r.clone(), Some(d.iter().cloned().collect()))).collect(),
            ),
        }
    }

    /// The state a checkpoint gives at start (`readCheckpoint`): the allocations (an entry whose answer does not
    /// decode is skipped, as upstream) and each registered resource with no device and a stopped plugin, so it shows
    /// 0 until its plugin registers again, and goes after the grace period if it never does. Returns the entries
    /// skipped.
    pub fn restore(&mut self, data: CheckpointData, now: Instant) -> Vec<String> {
        let mut skipped = vec![];
        for e in data.pod_device_entries.unwrap_or_default() {
            let resp = e.alloc_resp.as_deref().map(pb::ContainerAllocateResponse::decode);
            match resp {
                Some(Ok(resp)) => {
                    let a = Allocation { numa: e.device_ids.unwrap_or_default(), resp: Some(resp) };
                    self.pods.insert((e.pod_uid, e.container_name, e.resource_name), a);
                }
                _ => skipped
                    .push(format!("pod {} container {} resource {}", e.pod_uid, e.container_name, e.resource_name)),
            }
        }
        self.recount();
        for r in data.registered_devices.unwrap_or_default().into_keys() {
            self.healthy.insert(r.clone(), BTreeSet::new());
            self.unhealthy.insert(r.clone(), BTreeSet::new());
            self.endpoints
                .insert(r, EndpointState { endpoint: None, options: None, stopped_at: Some(now), generation: 0 });
        }
        skipped
    }
}

/// What allocating a container's devices of one resource needs (`devicesToAllocate`).
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to do: allocated already (or kept as allocated across a restart).
    Done,
    /// `needed` more devices, from these candidates (reusable first, then the free healthy ones).
    Choose {
        /// How many.
        needed: usize,
        /// Devices the pod's finished init containers left (taken first, unchecked as upstream).
        reusable: Vec<String>,
        /// Free healthy devices.
        available: Vec<String>,
    },
}

impl State {
    /// Plans the allocation of `required` devices of `r` to `key` (`devicesToAllocate`, its checks in upstream's
    /// order and with its texts). `keep_running`: the container ran when rkubelet started and already has its
    /// devices, so they are kept without any check (upstream's `isContainerAlreadyRunning` shortcut).
    pub fn plan(
        &self,
        key: &Key,
        required: usize,
        reusable: &BTreeSet<String>,
        keep_running: bool,
    ) -> Result<Plan, String> {
        let (uid, c, r) = key;
        let have = self.container_devices(key);
        let needed = match &have {
            Some(d) if d.len() != required => {
                return Err(format!(
                    "pod {uid:?} container {c:?} changed request for resource {r:?} from {} to {required}",
                    d.len()
                ));
            }
            Some(_) => 0,
            None => required,
        };
        if keep_running && have.is_some() {
            return Ok(Plan::Done);
        }
        let Some(healthy) = self.healthy.get(r) else { return Err(format!("cannot allocate unregistered device {r}")) };
        if healthy.is_empty() {
            return Err(format!("no healthy devices present; cannot allocate unhealthy devices {r}"));
        }
        if have.as_ref().is_some_and(|d| !d.is_subset(healthy)) {
            return Err(format!(
                "previously allocated devices are no longer healthy; cannot allocate unhealthy devices {r}"
            ));
        }
        if needed == 0 {
            return Ok(Plan::Done);
        }
        let taken = self.allocated.get(r);
        let reusable: Vec<String> = reusable.iter().take(needed).cloned().collect();
        let available: Vec<String> =
            healthy.iter().filter(|d| !taken.is_some_and(|t| t.contains(*d))).cloned().collect();
        let still = needed - reusable.len();
        if available.len() < still {
            return Err(format!(
                "requested number of devices unavailable for {r}. Requested: {still}, Available: {}",
                available.len()
            ));
        }
        Ok(Plan::Choose { needed, reusable, available })
    }

    /// Picks `needed` devices: the reusable ones, then the plugin's preferred ones that are free, then the free
    /// ones in order; records them as allocated (no answer yet) under `key`.
    pub fn choose(
        &mut self,
        key: &Key,
        needed: usize,
        reusable: &[String],
        available: &[String],
        preferred: &[String],
        affinity: Option<u64>,
    ) -> Vec<String> {
        let mut picked: Vec<String> = reusable.iter().take(needed).cloned().collect();
        let free: BTreeSet<&String> = available.iter().collect();
        // With the topology manager's affinity (`filterByAffinity`): the devices of its NUMA nodes first (the
        // plugin's preference among them when they are more than needed), then the plugin's preference, then the
        // devices of other nodes, then those without a node.
        let order: Vec<&String> = match affinity.filter(|_| self.has_topology(&key.2)) {
            None => preferred.iter().filter(|d| free.contains(d)).chain(available.iter()).collect(),
            Some(mask) => {
                let nodes = |d: &String| self.topology.get(&key.2).and_then(|t| t.get(d)).cloned().unwrap_or_default();
                let in_mask = |n: &i64| *n >= 0 && *n < 64 && mask & (1u64 << *n) != 0;
                let aligned: Vec<&String> = available.iter().filter(|d| nodes(d).iter().any(in_mask)).collect();
                let unaligned: Vec<&String> =
                    available.iter().filter(|d| !nodes(d).is_empty() && !nodes(d).iter().any(in_mask)).collect();
                let none: Vec<&String> = available.iter().filter(|d| nodes(d).is_empty()).collect();
                let still = needed.saturating_sub(picked.len());
                let mut order: Vec<&String> = vec![];
                if still < aligned.len() {
                    order.extend(preferred.iter().filter(|d| aligned.contains(d)));
                    order.extend(aligned);
                } else {
                    order.extend(aligned);
                    order.extend(preferred.iter().filter(|d| free.contains(d)));
                    order.extend(unaligned);
                    order.extend(none);
                }
                order
            }
        };
        for d in order {
            if picked.len() >= needed {
                break;
            }
            if !picked.contains(d) {
                picked.push(d.clone());
            }
        }
        let r = &key.2;
        let topo = self.topology.get(r);
        let mut numa: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for d in &picked {
            let nodes = topo.and_then(|t| t.get(d)).filter(|n| !n.is_empty()).cloned().unwrap_or_else(|| vec![-1]);
            for n in nodes {
                numa.entry(n).or_default().push(d.clone());
            }
        }
        self.allocated.entry(r.clone()).or_default().extend(picked.iter().cloned());
        self.pods.insert(key.clone(), Allocation { numa, resp: None });
        picked
    }

    /// Updates the pod's devices left for reuse once container `c` got its devices (init containers leave theirs
    /// to the later ones; a sidecar and an app container keep theirs).
    pub fn after_container(&mut self, uid: &str, c: &str, reusable_init: bool) {
        let mine: Vec<(String, BTreeSet<String>)> = self
            .pods
            .iter()
            .filter(|((u, cn, _), _)| u == uid && cn == c)
            .map(|((_, _, r), a)| (r.clone(), a.ids()))
            .collect();
        let reuse = self.reuse.entry(uid.to_string()).or_default();
        for (r, ids) in mine {
            let set = reuse.entry(r).or_default();
            if reusable_init {
                set.extend(ids);
            } else {
                set.retain(|d| !ids.contains(d));
            }
        }
    }
}
